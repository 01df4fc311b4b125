"""Two-thread GEMMs give bit-identical results to one thread (row blocks, same kernels)."""

import os
import subprocess
import sys

import pytest

SCRIPT = r'''
import numpy as np, graphc as gc
from graphc import nn, optim
gc.manual_seed(0)
m = nn.Sequential(nn.Linear(300, 512), nn.ReLU(), nn.Linear(512, 10))
opt = optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
lf = nn.CrossEntropyLoss()
@gc.compile
def step(x, y):
    opt.zero_grad(); loss = lf(m(x), y); loss.backward(); opt.step(); return loss
rng = np.random.default_rng(0)
for b in (256, 100, 7):
    x = rng.standard_normal((b, 300)).astype(np.float32)
    y = rng.integers(0, 10, b)
    for _ in range(3):
        step(x, y)
np.save(OUT, np.concatenate([v.ravel() for v in m.state_dict().values()]))
'''


def _run(tmp_path, threads):
    out = tmp_path / f"t{threads}.npy"
    env = {**os.environ, "GRAPHC_NUM_THREADS": str(threads), "GRAPHC_CACHE": "0"}
    r = subprocess.run([sys.executable, "-c", f"OUT = {str(out)!r}\n" + SCRIPT], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    import numpy as np

    return np.load(out)


@pytest.mark.slow
def test_two_threads_bit_identical_to_one(tmp_path):
    import numpy as np

    a, b = _run(tmp_path, 1), _run(tmp_path, 2)
    assert np.array_equal(a, b)


def test_thread_setting():
    from graphc.runtime import pool

    old = os.environ.get("GRAPHC_NUM_THREADS")
    try:
        os.environ["GRAPHC_NUM_THREADS"] = "1"
        assert pool.threads() == 1 and pool.dispatch_address() == 0
    finally:
        if old is None:
            os.environ.pop("GRAPHC_NUM_THREADS")
        else:
            os.environ["GRAPHC_NUM_THREADS"] = old


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity API")
def test_default_follows_affinity_mask():
    """Pinned to one CPU (taskset, a cpuset), the default is one thread: a second spinning
    worker would share the caller's core."""
    from graphc.runtime import pool

    old_env = os.environ.pop("GRAPHC_NUM_THREADS", None)
    old_mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(old_mask)})
        assert pool.usable_cpus() == 1
        assert pool.threads() == 1
    finally:
        os.sched_setaffinity(0, old_mask)
        if old_env is not None:
            os.environ["GRAPHC_NUM_THREADS"] = old_env
