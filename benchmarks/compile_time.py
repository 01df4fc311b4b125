"""Compile time of the mlp_small and cnn steps: cold (empty cache) and warm (a second process
finds the object code in the on-disk cache), each measured in a fresh process.

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
which = __import__("sys").argv[1]
if which == "mlp_small":
    m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    x = np.zeros((64, 784), np.float32)
else:
    m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
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


def run(which: str, cache: str) -> tuple[float, float]:
    env = {**os.environ, "GRAPHC_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, "-c", CHILD, which], env=env, capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    c, imp = out.stdout.split()
    return float(c), float(imp)


def main() -> int:
    for which in ("mlp_small", "cnn"):
        with tempfile.TemporaryDirectory() as d:
            cold, imp = run(which, d)
            warm, _ = run(which, d)
        print(f"{which}: compile cold {cold * 1e3:.0f} ms, warm (cached) {warm * 1e3:.0f} ms "
              f"(import graphc {imp * 1e3:.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
