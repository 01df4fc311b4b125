"""``gc.set_flush_denormal`` (``torch.set_flush_denormal``): flush-to-zero and
denormals-are-zero in the calling thread, for eager ops and for both threads of a compiled
step (the pool's worker runs each part in its caller's mode: ``codegen.parallel``).

The mode is a per-thread CPU register that outlives a test, so every case that turns it on
runs in a fresh process, or restores it before it returns."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import graphc as gc
from graphc.runtime import fpmode

X86 = platform.machine() in ("x86_64", "AMD64")
TWO_CPUS = (hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2
            and sys.platform.startswith("linux"))
TINY32 = np.float32(1e-40)  # a float32 denormal
TINY64 = 1e-310  # a float64 denormal


def _bits(a: np.ndarray) -> np.ndarray:
    """``a``'s bit patterns: integer comparisons, which denormals-are-zero leaves alone (a
    float comparison under it reads a denormal as 0, so it cannot tell flushed from kept)."""
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint64)


def _subprocess(script: str, threads: int = 2) -> dict:
    env = {**os.environ, "GRAPHC_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_arguments_as_torch() -> None:
    """A bool, and only a bool (``np.bool_`` and ints raise, as in PyTorch, with its
    message); inside a compiled step it raises instead of being traced once."""
    from _torch import torch  # the comparisons need PyTorch; the tests below do not

    for bad in (1, 0, None, "x", np.bool_(True), 1.0):
        with pytest.raises(RuntimeError) as want:
            torch.set_flush_denormal(bad)
        with pytest.raises(RuntimeError) as got:
            gc.set_flush_denormal(bad)
        assert str(got.value) == str(want.value)

    @gc.compile
    def f(x):
        gc.set_flush_denormal(True)
        return x * 2

    with pytest.raises(NotImplementedError, match="inside a compiled step"):
        f(np.ones(3, np.float32))
    assert not fpmode.flush_denormal()  # the failed trace left the mode as it was


@pytest.mark.skipif(not X86, reason="x86-64's MXCSR")
def test_eager_values_as_torch() -> None:
    """On: denormal results and inputs are zero, float32 and float64, as PyTorch's; off
    again: kept. PyTorch and numpy share the thread's register, so both are compared after
    each of graphc's settings."""
    from _torch import torch

    x32 = np.array([TINY32, 1.0, -TINY32], np.float32)
    x64 = np.array([TINY64, 1.0], np.float64)
    try:
        assert gc.set_flush_denormal(True) is True
        assert fpmode.flush_denormal()
        got = [(gc.tensor(x) * 1.0).numpy() for x in (x32, x64)]
        want = [(torch.tensor(x) * 1.0).numpy() for x in (x32, x64)]
        tiny = (gc.tensor(np.float32(1e-30)) * gc.tensor(np.float32(1e-15))).numpy()
    finally:
        assert gc.set_flush_denormal(False) is True
    assert not fpmode.flush_denormal()
    # compared with the mode off: denormals-are-zero reads a denormal as 0 in a comparison too
    for g, w in zip(got, want):
        assert _bits(g).tolist() == _bits(w).tolist()
        assert g[0] == 0 and g[1] == 1
    assert tiny == 0
    np.testing.assert_array_equal((gc.tensor(x32) * 1.0).numpy(), x32)
    np.testing.assert_array_equal((gc.tensor(x64) * 1.0).numpy(), x64)


POOL_SCRIPT = r'''
import ctypes, json, threading, time
import graphc as gc
from graphc.runtime import fpmode, pool
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
seen = {}

@TASK
def task(ctx, part):
    if part == 0:
        time.sleep(0.02)  # the worker claims part 1 meanwhile
    seen[part] = (threading.get_ident(), fpmode.flush_denormal())

run2 = ctypes.CFUNCTYPE(None, TASK, ctypes.c_void_p)(pool.dispatch_address())
me = threading.get_ident()
out = []
for mode in (True, False, True, False):
    gc.set_flush_denormal(mode)
    for _ in range(3):
        seen.clear()
        run2(task, None)
        out.append([mode, seen[0][1], seen[1][1], seen[1][0] != me])
print(json.dumps(out))
'''


@pytest.mark.skipif(not (X86 and TWO_CPUS), reason="the pool needs two CPUs (x86-64 Linux)")
def test_the_pools_worker_runs_in_its_callers_mode() -> None:
    """Each dispatch's part 1, on the worker thread, sees the mode the caller had when it
    dispatched, turned on and off again: without the hand-over the worker keeps the mode it
    started with."""
    rows = _subprocess(POOL_SCRIPT)
    for mode, caller, worker, _ in rows:
        assert caller == mode and worker == mode, rows
    assert sum(elsewhere for *_, elsewhere in rows) >= len(rows) // 2, rows  # the worker ran


STEP_SCRIPT = r'''
import json
import numpy as np, graphc as gc
from graphc.runtime import pool
n = 1 << 20
x = np.full(n, np.float32(1e-20))
x[::7] = 1.0
z = np.full(n, np.float32(1e-20))
m = np.full((1024, 1024), np.float32(1e-21))  # a GEMM of denormal products (1e-42 each),
# each half long enough (milliseconds) for a sleeping worker to wake and take its half

@gc.compile
def f(a, b, c):
    return a * a, (b * b * 1e30).sum(), c @ c  # each product 1e-40, then 1e-10 unless flushed

out = []
for mode in (False, True, False, True):
    gc.set_flush_denormal(mode)
    ye = (gc.tensor(x) * gc.tensor(x)).numpy()  # eager, in this thread's mode
    me = (gc.tensor(m) @ gc.tensor(m)).numpy()
    # bit patterns, counted and compared as integers: denormals-are-zero would read a kept
    # denormal as 0 in any float comparison made here with the mode on
    yb = ye.view(np.uint32)
    for _ in range(8):  # back to back: the worker is awake and takes its halves
        before = pool.stats() or {}
        y, s, mm = f(x, z, m)
        after = pool.stats() or {}
        y, mm = y.numpy().view(np.uint32), mm.numpy().view(np.uint32)
        sb = int(np.asarray(s.numpy(), np.float32).view(np.uint32))
        out.append(dict(mode=mode, zeros=int((y == 0).sum()), kept=int((y != 0).sum()),
                        equal=bool(np.array_equal(y, yb)), total_bits=sb,
                        total=float(np.uint32(sb).view(np.float32)),
                        gemm_kept=int((mm != 0).sum()),
                        gemm_close=bool(np.allclose(mm.view(np.float32), me, rtol=1e-5,
                                                    atol=0)),
                        dispatches=sum(after.get(k, 0) - before.get(k, 0)
                                       for k in ("parallel", "held"))))
print(json.dumps(out))
'''


@pytest.mark.skipif(not X86, reason="x86-64's MXCSR")
@pytest.mark.parametrize("threads", [1, 2])
def test_a_compiled_step_flushes_on_every_thread(threads: int) -> None:
    """A product of 1e-20 by itself (1e-40, a denormal) over a million elements, split
    between the threads: with the mode on every one is zero, as in eager, and so is a sum of
    such products scaled back up, and a GEMM whose products are all denormal; off again,
    every one is kept, the sum is a million times 1e-10 and the GEMM's results are denormal
    sums, as eager's. (With the mode on, eager's GEMM is not compared: numpy's BLAS threads
    keep their own mode, as PyTorch's worker threads do, and flush only the caller's share.)
    The step is compiled once, with the mode off: the mode is read when it runs, not baked
    into its code.

    Values are counted and compared by their bits: with the mode on, any float comparison
    in this thread reads a kept denormal as 0, which hid a worker half computed without the
    caller's mode (that half then ran 1.4 s late on the GEMM, against milliseconds)."""
    n, ones = 1 << 20, len(range(0, 1 << 20, 7))
    rows = _subprocess(STEP_SCRIPT, threads)
    for r in rows:
        assert r["equal"], rows
        if r["mode"]:
            assert r["zeros"] == n - ones and r["total_bits"] == 0, rows
            assert r["gemm_kept"] == 0, rows
        else:
            assert r["gemm_close"], rows
            assert r["kept"] == n and r["total"] == pytest.approx(n * 1e-10, rel=1e-3), rows
            assert r["gemm_kept"] == 1024 * 1024, rows
    if threads == 2 and TWO_CPUS:
        # every call went through the pool (offered to the worker, or on the caller alone
        # while the pool holds, when a busy host makes the worker late)
        assert all(r["dispatches"] > 0 for r in rows), rows
