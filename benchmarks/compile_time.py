"""Compile time of the mlp_small and cnn steps, each measured in a fresh process: cold (empty
cache), new step (a different model whose GEMM tile shapes were compiled before: only its own
kernels are compiled, the GEMM library comes from the cache), and warm (the same step again:
its object code comes from the on-disk cache).

``python -m benchmarks.compile_time``
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

CHILD = r'''
import time, numpy as np
t0 = time.perf_counter()
import graphc as gc
from graphc import nn, optim
t1 = time.perf_counter()
which, width = __import__("sys").argv[1], int(__import__("sys").argv[2])
if which == "mlp_small":
    m = nn.Sequential(nn.Linear(784, width), nn.ReLU(), nn.Linear(width, 10))
    x = np.zeros((64, 784), np.float32)
else:
    c = width // 32  # 8 channels for the workload itself
    m = nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(c, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(784, 10))
    x = np.zeros((64, 1, 28, 28), np.float32)
opt = optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
lf = nn.CrossEntropyLoss()
y = np.zeros(64, np.int64)
t2 = time.perf_counter()
@gc.compile(example_args=(x, y))
def step(a, b):
    opt.zero_grad(); loss = lf(m(a), b); loss.backward(); opt.step(); return loss
t3 = time.perf_counter()
print(f"{t3 - t2:.3f} {t1 - t0:.3f}")
'''


def run(which: str, cache: str, width: int = 256) -> tuple[float, float]:
    env = {**os.environ, "GRAPHC_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", CHILD, which, str(width)], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    c, imp = out.stdout.split()
    return float(c), float(imp)


def main() -> int:
    for which in ("mlp_small", "cnn"):
        with tempfile.TemporaryDirectory() as d:
            cold, imp = run(which, d)
            new, _ = run(which, d, 320)  # another width: same GEMM tiles, new kernels
            warm, _ = run(which, d)
        print(f"{which}: compile cold {cold * 1e3:.0f} ms, new step with the GEMM library "
              f"cached {new * 1e3:.0f} ms, warm (cached) {warm * 1e3:.0f} ms (import graphc "
              f"{imp * 1e3:.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
