"""Two-thread convolutions (and the elementwise kernels and reductions around them) give
bit-identical results to one thread.

codegen/conv.py splits the implicit-GEMM kernels over the native pool: the forward and input
gradient by images (each thread with its own grid), the weight gradient by output tiles (and
its grid building by images). Every output element is computed by the same code on either
thread, so a step run with ``GRAPHC_NUM_THREADS=1`` and ``=2`` must agree bit for bit: here
over training steps and forward passes at batch sizes that split unevenly (7, 3) or not at all
(1), with a symbolic batch, strides, groups, padding 0 and 1, channel counts that leave
ragged tiles, and float64."""

import os
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = r'''
import numpy as np, graphc as gc
from graphc import nn, optim

def models():
    # the cnn benchmark
    yield "cnn", (1, 28, 28), np.float32, lambda: nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(784, 10))
    # stride 2 (phase grids), groups, no padding; then channels that leave ragged tiles
    yield "strided", (8, 21, 21), np.float32, lambda: nn.Sequential(
        nn.Conv2d(8, 12, 3, stride=2, padding=0, groups=2), nn.ReLU(),
        nn.Conv2d(12, 10, 3, padding=1), nn.ReLU(),
        nn.Conv2d(10, 6, 3, padding=1, groups=2), nn.Flatten(), nn.Linear(6 * 10 * 10, 10))
    # large enough that a single image's weight gradient is split by tiles
    yield "wide", (16, 16, 16), np.float32, lambda: nn.Sequential(
        nn.Conv2d(16, 24, 3, padding=1), nn.ReLU(), nn.Conv2d(24, 20, 3, padding=1),
        nn.Flatten(), nn.Linear(20 * 16 * 16, 10))
    # BatchNorm and ReLU: elementwise kernels and per-channel sums split over the threads
    # by their outermost loop above ``ELEM_PAR_MIN`` elements (batch 64), whole below (1)
    yield "bn", (3, 32, 32), np.float32, lambda: nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    # small images with many channels: weight gradients by channel vectors
    # (``conv.by_channels``), stride 1 and 2, a partial channel vector
    yield "small", (16, 8, 8), np.float32, lambda: nn.Sequential(
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.ReLU(),
        nn.Conv2d(32, 40, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(40 * 4 * 4, 10))
    d = gc.float64
    yield "f64", (5, 15, 15), np.float64, lambda: nn.Sequential(
        nn.Conv2d(5, 9, 3, padding=1, dtype=d), nn.ReLU(), nn.Conv2d(9, 7, 3, dtype=d),
        nn.Flatten(), nn.Linear(7 * 13 * 13, 10, dtype=d))

out = {}
rng = np.random.default_rng(0)
for name, shape, dtype, make in models():
    gc.manual_seed(0)
    m = make()
    opt = optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    lf = nn.CrossEntropyLoss()

    @gc.compile
    def step(x, y):
        opt.zero_grad(); loss = lf(m(x), y); loss.backward(); opt.step(); return loss

    @gc.compile
    def fwd(x):
        return m(x)

    for b in (64, 7, 3, 1):
        x = rng.standard_normal((b,) + shape).astype(dtype)
        y = rng.integers(0, 10, b)
        for i in range(2):
            out[f"{name}.b{b}.loss{i}"] = np.asarray(step(x, y))
        out[f"{name}.b{b}.fwd"] = np.asarray(fwd(x))
    for k, v in m.state_dict().items():
        out[f"{name}.{k}"] = np.asarray(v)
np.savez(OUT, **out)
'''


def _run(tmp_path, threads):
    out = tmp_path / f"t{threads}.npz"
    env = {**os.environ, "GRAPHC_NUM_THREADS": str(threads), "GRAPHC_CACHE": "0"}
    env.pop("GRAPHC_DEBUG", None)
    r = subprocess.run([sys.executable, "-c", f"OUT = {str(out)!r}\n" + SCRIPT], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.slow
def test_conv_two_threads_bit_identical_to_one(tmp_path):
    a, b = _run(tmp_path, 1), _run(tmp_path, 2)
    assert a.keys() == b.keys() and len(a) > 40
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    assert np.isfinite(a["cnn.b1.loss1"]).all()
