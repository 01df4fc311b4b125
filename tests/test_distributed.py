"""graphc.distributed: the split step in one process, and real runs under ``mpirun``.

The multi-process tests start ``mpirun -np N python tests/_ddp_worker.py`` from here (so a
plain ``pytest`` runs them) and skip when ``mpirun`` or mpi4py is missing. They check:

- 2 and 3 processes training mlp_small on shards of each global batch end with the same
  parameters as one process training on the whole batch (relative 1e-5), identical on every
  rank, and equal to PyTorch DDP's arithmetic (average of per-shard gradients) when torch is
  installed;
- a rank killed mid-run (SIGKILL) makes the job end with an error within a bounded time, and
  a rank that stalls makes the watchdog abort the job with a message naming the collective.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _ddp_worker import BATCH, STEPS, data, make_model, make_opt

import graphc as gc
import graphc.distributed as dist
from graphc import nn, optim
from graphc.distributed.executable import DistributedExecutable

WORKER = Path(__file__).with_name("_ddp_worker.py")
ROOT = WORKER.parent.parent


def _mpirun() -> list[str] | None:
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None or importlib.util.find_spec("mpi4py") is None:
        return None
    cmd = [exe]
    try:
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "Open MPI" in ver.stdout + ver.stderr:
        cmd += ["--oversubscribe"]  # 3 processes on 2 cores
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd += ["--allow-run-as-root"]
    return cmd


MPIRUN = _mpirun()
_skip_no_mpi = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun (Open MPI) and mpi4py")


def needs_mpi(test: Any) -> Any:
    """Multi-process tests: skipped without Open MPI, and in the slow set (``pytest -m slow``)."""
    return pytest.mark.slow(_skip_no_mpi(test))


def _launch(n: int, out: Path, mode: str = "train", bucket_mb: float = 25.0,
            timeout: float = 240.0, env: dict | None = None) -> tuple[subprocess.CompletedProcess,
                                                                     float]:
    assert MPIRUN is not None
    e = {**os.environ, "GRAPHC_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
         "OMPI_MCA_btl_vader_single_copy_mechanism": "none", **(env or {})}
    t0 = time.monotonic()
    res = subprocess.run(MPIRUN + ["-np", str(n), sys.executable, str(WORKER), str(out), mode,
                                   str(bucket_mb)], capture_output=True, text=True,
                         timeout=timeout, env=e, cwd=ROOT)
    return res, time.monotonic() - t0


def _reference() -> list[np.ndarray]:
    """One process, whole batches, the same compiled step without DDP."""
    net = make_model()
    opt = make_opt(net.parameters())
    loss_fn = nn.CrossEntropyLoss()

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss

    X, Y = data()
    for k in range(STEPS):
        step(X[k], Y[k])
    return [p.numpy().copy() for p in net.parameters()]


def _torch_ddp_reference(world: int) -> list[np.ndarray] | None:
    """PyTorch DDP's arithmetic: per-shard gradients of the shard mean loss, averaged."""
    try:
        import torch
    except ImportError:
        return None
    net = make_model()
    tm = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    with torch.no_grad():
        for (k, v) in tm.state_dict().items():
            v.copy_(torch.from_numpy(net.state_dict()[k]))
    opt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    X, Y = data()
    for k in range(STEPS):
        grads = [torch.zeros_like(p) for p in tm.parameters()]
        for r in range(world):
            tm.zero_grad()
            loss = torch.nn.functional.cross_entropy(tm(torch.from_numpy(X[k][r::world])),
                                                     torch.from_numpy(Y[k][r::world]))
            loss.backward()
            for g, p in zip(grads, tm.parameters()):
                g += p.grad / world
        for g, p in zip(grads, tm.parameters()):
            p.grad = g
        opt.step()
    return [p.detach().numpy().copy() for p in tm.parameters()]


def _close(got: list[np.ndarray], ref: list[np.ndarray], rtol: float, what: str) -> None:
    for i, (a, b) in enumerate(zip(got, ref)):
        err = float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
        assert err < rtol, f"{what}: parameter {i} differs by {err:.2e} (relative)"


# -- one process ---------------------------------------------------------------------------
@pytest.fixture
def single_group() -> Any:
    dist.finalize()
    dist.init()
    yield
    dist.finalize()


def _mlp_run(wrap: bool, backend: str | None = None, bucket_mb: float = 25.0,
             dropout: bool = False, returns_logits: bool = False) -> tuple[list, list, Any]:
    gc.manual_seed(0)
    layers: list[Any] = [nn.Linear(20, 32), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(0.3))
    net = nn.Sequential(*layers, nn.Linear(32, 5), nn.BatchNorm1d(5))
    model = dist.DistributedDataParallel(net, bucket_cap_mb=bucket_mb) if wrap else net
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    @gc.compile(backend=backend)
    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return (loss, out) if returns_logits else loss

    rng = np.random.default_rng(0)
    outs = []
    for b in (16, 16, 7, 16):
        x = rng.standard_normal((b, 20)).astype(np.float32)
        y = rng.integers(0, 5, b).astype(np.int64)
        r = step(x, y)
        outs.append([np.asarray(t).copy() for t in (r if returns_logits else (r,))])
    state = [np.asarray(v).copy() for v in net.state_dict().values()]
    state += [p.grad.numpy().copy() for p in net.parameters()]
    state += [np.asarray(opt.state[p]["momentum_buffer"]).copy() for p in net.parameters()]
    return outs, state, step


@pytest.mark.parametrize("backend", [None, "interp"])
@pytest.mark.parametrize("bucket_mb", [25.0, 1e-6])
def test_split_step_matches_plain_step(single_group: Any, backend: Any, bucket_mb: float
                                       ) -> None:
    """World size 1: the two-function step computes exactly what the one-function step does
    (BatchNorm buffers, clipping after the reduction, dropout, batch-shaped outputs)."""
    ref_out, ref_state, _ = _mlp_run(False, backend, dropout=True, returns_logits=True)
    out, state, step = _mlp_run(True, backend, bucket_mb, dropout=True, returns_logits=True)
    assert step.compile_count == 1
    assert isinstance(step.variants[-1].exe, DistributedExecutable)
    for a, b in zip(out, ref_out):
        for u, v in zip(a, b):
            np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7)
    for a, b in zip(state, ref_state):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    n_buckets = len(step.variants[-1].exe.arrays)
    assert n_buckets == (1 if bucket_mb == 25.0 else 6)


def test_split_stages_and_ir(single_group: Any) -> None:
    _, _, step = _mlp_run(True)
    text = step.ir("split")
    assert "graph step_grads(" in text and "graph step_update(" in text
    assert "update ddp.b0." in step.ir("optimized")
    assert "gradient buckets: 1" in step.ir("optimized")
    assert "define" in step.ir("llvm")


def test_two_backwards_in_one_step_is_an_error(single_group: Any) -> None:
    net = nn.Linear(3, 2)
    model = dist.DistributedDataParallel(net)

    @gc.compile
    def step(x: Any) -> Any:
        model(x).sum().backward()
        model(x).sum().backward()

    with pytest.raises(RuntimeError, match="backward\\(\\) only once"):
        step(np.ones((2, 3), np.float32))


def test_distributed_sampler_shards() -> None:
    shards = [dist.DistributedSampler(range(10), num_replicas=3, rank=r, seed=4)
              for r in range(3)]
    for s in shards:
        s.set_epoch(2)
    idx = [s.indices() for s in shards]
    assert all(len(i) == 4 == len(s) for i, s in zip(idx, shards))
    assert set(np.concatenate(idx)) == set(range(10))  # padded by repeating the head
    other = dist.DistributedSampler(range(10), num_replicas=3, rank=0, seed=4)
    other.set_epoch(3)
    assert not np.array_equal(other.indices(), idx[0])
    dl = [dist.DistributedSampler(range(10), 3, r, shuffle=False, drop_last=True)
          for r in range(3)]
    assert [list(s) for s in dl] == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    X = np.arange(20).reshape(10, 2)
    batches = list(dist.shard((X, X[:, 0]), dl[1], 2))
    assert [b[1].tolist() for b in batches] == [[2, 8], [14]]


def test_single_process_group(single_group: Any) -> None:
    assert dist.world_size() == 1 and dist.rank() == 0
    dist.barrier()
    m = nn.Linear(2, 2)
    dist.broadcast_parameters(m, optim.SGD(m.parameters(), lr=0.1))


# -- several processes ---------------------------------------------------------------------
@needs_mpi
@pytest.mark.parametrize("world,bucket_mb", [(2, 25.0), (3, 0.5)])
def test_ddp_matches_full_batch(tmp_path: Path, world: int, bucket_mb: float) -> None:
    assert BATCH % world == 0
    res, _ = _launch(world, tmp_path / "run", bucket_mb=bucket_mb)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    runs = [np.load(tmp_path / f"run.{r}.npz") for r in range(world)]
    assert int(runs[0]["buckets"]) == (1 if bucket_mb == 25.0 else 2)
    params = [[run[f"p{i}"] for i in range(4)] for run in runs]
    for r in range(1, world):  # every rank holds the same parameters, bit for bit
        for a, b in zip(params[r], params[0]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(runs[r]["grad0"], runs[0]["grad0"])
    ref = _reference()
    init = [p.numpy() for p in make_model().parameters()]
    assert any(np.max(np.abs(a - b)) > 1e-2 for a, b in zip(ref, init))  # it did train
    _close(params[0], ref, 1e-5, f"{world} processes vs one process on the full batch")
    tref = _torch_ddp_reference(world)
    if tref is not None:
        _close(params[0], tref, 1e-5, f"{world} processes vs PyTorch DDP arithmetic")


@needs_mpi
def test_killed_rank_fails_the_job(tmp_path: Path) -> None:
    res, secs = _launch(2, tmp_path / "run", mode="kill", timeout=120)
    assert res.returncode != 0
    assert "rank 0/2 done" not in res.stdout
    assert secs < 60, f"the job took {secs:.0f} s to fail"
    assert "signal 9" in res.stdout + res.stderr or "Killed" in res.stdout + res.stderr


@needs_mpi
def test_stalled_rank_trips_the_watchdog(tmp_path: Path) -> None:
    res, secs = _launch(2, tmp_path / "run", mode="stall", timeout=120,
                        env={"GRAPHC_DIST_TIMEOUT": "3"})
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "rank 0/2: the gradient all-reduce of step 6 did not complete within 3 s" in out, out
    assert secs < 60, f"the job took {secs:.0f} s to fail"


def test_aot_build_refuses_a_ddp_step(single_group: Any, tmp_path: Path) -> None:
    from graphc.aot import AOTError

    model = dist.DistributedDataParallel(nn.Linear(3, 2))
    opt = optim.SGD(model.parameters(), lr=0.1)
    x = np.ones((4, 3), np.float32)

    @gc.compile(example_args=(x,))
    def step(a: Any) -> Any:
        opt.zero_grad()
        loss = model(a).sum()
        loss.backward()
        opt.step()
        return loss

    with pytest.raises(AOTError, match="DistributedDataParallel"):
        gc.aot.build(step, (x,), tmp_path, "ddp")


@needs_mpi
def test_example_trains_identically_on_two_processes() -> None:
    assert MPIRUN is not None
    env = {**os.environ, "GRAPHC_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(MPIRUN + ["-np", "2", sys.executable, str(ROOT / "examples" /
                                                                   "ddp_mlp.py")],
                         capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    sums = re.findall(r"parameter checksum ([0-9.]+)", res.stdout)  # lines may interleave
    assert len(sums) == 2 and sums[0] == sums[1], res.stdout
    assert "32 steps on each of 2 processes" in res.stdout
