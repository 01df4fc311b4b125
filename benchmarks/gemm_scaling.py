"""Two-thread scaling of graphc's GEMM, each thread count in its own process.

``python -m benchmarks.gemm_scaling``: times ``(A @ B).sum()`` at 1024^3 and in mlp_large's
shapes with ``GRAPHC_NUM_THREADS=1`` and ``=2`` in separate processes (no other thread pool in
the process: a BLAS pool that spins after its calls would take the second core), medians of
repeated blocks, and prints the speedup.
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = r'''
import statistics, time, numpy as np, graphc as gc
rng = np.random.default_rng(0)
out = []
for m, k, n in ((1024, 1024, 1024), (256, 784, 1024), (256, 1024, 1024), (1024, 256, 784)):
    A = rng.standard_normal((m, k)).astype(np.float32)
    W = gc.tensor(rng.standard_normal((k, n)).astype(np.float32))
    f = gc.compile(lambda x, W=W: (x @ W).sum(), dynamic=False)
    f(A)
    reps = max(3, int(4e9 / (2 * m * n * k)))
    ts = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(reps):
            f(A)
        ts.append((time.perf_counter() - t) / reps)
    out.append(2 * m * n * k / statistics.median(ts) / 1e9)
print(" ".join(f"{v:.1f}" for v in out))
'''


def rates(threads: int) -> list[float]:
    env = {**os.environ, "GRAPHC_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return [float(v) for v in r.stdout.split()]


def main() -> int:
    one, two = rates(1), rates(2)
    names = ["1024x1024x1024", "256x784x1024", "256x1024x1024", "1024x256x784"]
    print(f"{'M x K x N':<16} {'1 thread':>9} {'2 threads':>10} {'speedup':>8}  (GFLOP/s)")
    for name, a, b in zip(names, one, two):
        print(f"{name:<16} {a:>9.1f} {b:>10.1f} {b / a:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
