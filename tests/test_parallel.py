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


GROUP_SCRIPT = r'''
import numpy as np, graphc as gc
from graphc import nn, optim
from graphc.runtime import pool
gc.manual_seed(0)
lin = nn.Linear(64, 256, bias=False)  # a 256x64 weight: 16K elements
opt = optim.AdamW(lin.parameters(), lr=0.01, weight_decay=0.1)
@gc.compile
def step(x):
    opt.zero_grad(); loss = (lin(x) ** 2).mean(); loss.backward(); opt.step(); return loss
x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
step(x)
before = pool.stats()["parallel"] if gc.get_num_threads() == 2 else 0
for _ in range(3):
    step(x)
after = pool.stats()["parallel"] if gc.get_num_threads() == 2 else 0
np.savez(OUT, w=lin.weight.numpy(), m=opt.state[lin.weight]["exp_avg"].numpy(),
         v=opt.state[lin.weight]["exp_avg_sq"].numpy(), dispatches=np.array(after - before),
         threads=np.array(gc.get_num_threads()))
'''


def test_a_loop_group_splits_by_its_members_work(tmp_path):
    """AdamW's update of a 256x64 weight is one loop group of four members over 16K
    elements. By its element count alone it stayed on one thread, where in a two-thread
    step its operands come from both cores (2x slower than in a one-thread step); each
    element now counts once per member, so it is split. Weights and state bit-identical
    with one thread and two; on two, each step dispatches the group (and the GEMMs) to the
    pool."""
    import numpy as np
    from _threads import run_per_thread_count

    one, two = run_per_thread_count(tmp_path, GROUP_SCRIPT)
    for k in ("w", "m", "v"):
        assert np.array_equal(one[k], two[k]), k
    if int(two["threads"]) == 2:  # (a pool exists: the host lets the process use two CPUs)
        assert int(two["dispatches"]) >= 3  # the update group at least, each of 3 steps
