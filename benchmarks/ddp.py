"""Data-parallel scaling of the mlp_large step, 1 -> 2 processes, with communication time.

``python -m benchmarks.ddp`` runs, each in a fresh process (``mpirun`` for two):

- ``1 proc x 2 threads``: the plain compiled step on the global batch (256), two GEMM threads;
- ``1 proc x 1 thread``: the same with one thread (the per-process budget of the next line);
- ``2 procs x 1 thread``: ``DistributedDataParallel``, each process half the batch (128).

Each worker warms up, then times ``--blocks`` blocks of ``--steps`` steps and reports the
median time per step, and (for two processes) the median time per step spent in the
gradient all-reduce, which includes waiting for the slower peer, plus the median of a bare
all-reduce of the same buckets after a barrier (the transfer alone). The machine is small
and noisy: medians, not means. ``--json`` prints the raw results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

DIMS = [784, 1024, 1024, 10]
BATCH = 256


def worker(args: argparse.Namespace) -> None:
    import graphc as gc
    import graphc.distributed as dist
    from graphc import nn, optim

    dist.init()
    r, W = dist.rank(), dist.world_size()
    gc.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                        nn.Linear(1024, 10))
    model = dist.DistributedDataParallel(net) if args.ddp else net
    opt = optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((BATCH, DIMS[0])).astype(np.float32)
    Y = rng.integers(0, DIMS[-1], BATCH).astype(np.int64)
    x, y = np.ascontiguousarray(X[r::W]), np.ascontiguousarray(Y[r::W])

    t0 = time.perf_counter()

    @gc.compile(example_args=(x, y))
    def step(a: Any, b: Any) -> Any:
        opt.zero_grad()
        loss = loss_fn(model(a), b)
        loss.backward()
        opt.step()
        return loss

    compile_s = time.perf_counter() - t0
    for _ in range(args.warmup):
        step(x, y)
    dist.barrier()
    if args.ddp:
        dist.comm_stats().reset()
    blocks = []
    comm = []
    for _ in range(args.blocks):
        c0 = dist.comm_stats().seconds if args.ddp else 0.0
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(x, y)
        blocks.append((time.perf_counter() - t0) / args.steps)
        if args.ddp:
            comm.append((dist.comm_stats().seconds - c0) / args.steps)
    out: dict[str, Any] = {"rank": r, "world": W, "batch_per_rank": len(x),
                           "step_ms": 1e3 * float(np.median(blocks)),
                           "compile_s": compile_s}
    if args.ddp:
        out["comm_ms"] = 1e3 * float(np.median(comm))
        arrays = step.variants[-1].exe.arrays
        bare = []
        for _ in range(args.blocks * 4):
            dist.barrier()
            t0 = time.perf_counter()
            dist.comm.allreduce_sum_(arrays)
            bare.append(time.perf_counter() - t0)
        out["bare_allreduce_ms"] = 1e3 * float(np.median(bare))
        out["bucket_mb"] = sum(a.nbytes for a in arrays) / 2**20
    print("RESULT " + json.dumps(out), flush=True)
    dist.finalize()


def _run(cmd: list[str], threads: int) -> list[dict[str, Any]]:
    env = {**os.environ, "GRAPHC_NUM_THREADS": str(threads),
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    # ranks' lines can interleave under mpirun: find each flat JSON object
    return [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", res.stdout)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ddp", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=20, help="steps per timed block")
    ap.add_argument("--blocks", type=int, default=15, help="timed blocks")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--mpirun-args", default="",
                    help="extra mpirun options, e.g. '--mca btl_vader_single_copy_mechanism none'")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        sys.exit("benchmarks.ddp: needs mpirun (apt-get install openmpi-bin libopenmpi-dev) "
                 "and mpi4py")
    base = [sys.executable, "-m", "benchmarks.ddp", "--worker", "--steps", str(args.steps),
            "--blocks", str(args.blocks), "--warmup", str(args.warmup)]
    extra = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    extra += args.mpirun_args.split()
    rows = {
        "1 proc x 2 threads": _run(base, 2)[0],
        "1 proc x 1 thread": _run(base, 1)[0],
        "2 procs x 1 thread": _run([mpirun, *extra, "-np", "2", *base, "--ddp"], 1),
    }
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    one = rows["1 proc x 2 threads"]["step_ms"]
    print(f"mlp_large ({'-'.join(map(str, DIMS))}, SGD momentum), global batch {BATCH}; "
          f"median of {args.blocks} blocks x {args.steps} steps")
    print(f"{'configuration':22} {'ms/step':>8} {'samples/s':>10} {'vs 1x2':>7} "
          f"{'all-reduce ms/step':>19} {'bare all-reduce ms':>19}")
    for name, res in rows.items():
        rs = res if isinstance(res, list) else [res]
        step = max(r["step_ms"] for r in rs)
        comm = max((r.get("comm_ms", 0.0) for r in rs), default=0.0)
        bare = max((r.get("bare_allreduce_ms", 0.0) for r in rs), default=0.0)
        print(f"{name:22} {step:8.2f} {BATCH / step * 1e3:10.0f} {one / step:7.2f} "
              f"{comm if comm else float('nan'):19.2f} {bare if bare else float('nan'):19.2f}")
    ddp = rows["2 procs x 1 thread"][0]
    print(f"buckets: {ddp['bucket_mb']:.2f} MiB of gradients per step")


if __name__ == "__main__":
    main()
