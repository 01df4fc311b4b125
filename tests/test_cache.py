"""The on-disk compile cache: a second process reuses object code; a corrupt entry is ignored."""

import os
import subprocess
import sys

SCRIPT = r'''
import numpy as np, graphc as gc
from graphc import nn, optim
m = nn.Linear(3, 2)
opt = optim.SGD(m.parameters(), lr=0.1)
@gc.compile(example_args=(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32)))
def step(x, y):
    loss = nn.functional.mse_loss(m(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
exe = step.variants[0].exe
print("HIT" if exe.cache_hit else "MISS", step(np.ones((4, 3), np.float32),
      np.zeros((4, 2), np.float32)).item())
'''


def _run(env):
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_second_process_hits_cache_and_computes_the_same(tmp_path):
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path)}
    first = _run(env)
    second = _run(env)
    assert first[0] == "MISS" and second[0] == "HIT"
    assert first[1] == second[1]
    # a corrupt entry is ignored (recompiled), never loaded
    for f in tmp_path.iterdir():
        f.write_bytes(b"garbage")
    third = _run(env)
    assert third[0] == "MISS" and third[1] == first[1]


def test_cache_can_be_disabled(tmp_path):
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path), "GRAPHC_CACHE": "0"}
    assert _run(env)[0] == "MISS"
    assert _run(env)[0] == "MISS"
    assert not any(tmp_path.iterdir())


LIB_SCRIPT = r'''
import sys, numpy as np, graphc as gc
from graphc import nn, optim
w = int(sys.argv[1])
m = nn.Sequential(nn.Linear(20, w), nn.ReLU(), nn.Linear(w, 3))
opt = optim.SGD(m.parameters(), lr=0.1)
x, y = np.ones((8, 20), np.float32), np.zeros(8, np.int64)
@gc.compile(example_args=(x, y))
def step(a, b):
    loss = nn.functional.cross_entropy(m(a), b)
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
print("HIT" if step.variants[0].exe.cache_hit else "MISS", step(x, y).item())
'''


def test_steps_with_the_same_gemm_tiles_share_one_library_object(tmp_path):
    """The GEMM routines are cached by tile set: a second model of another width compiles
    only its own kernels and links the library object the first one left."""
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path)}

    def run(width):
        out = subprocess.run([sys.executable, "-c", LIB_SCRIPT, str(width)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    a = run(64)
    objs = {f.name for f in tmp_path.glob("*.o")}
    assert a[0] == "MISS" and len(objs) == 2  # the step and its GEMM library
    b = run(96)  # same tiles: every N (20, 3, 64 or 96) picks the same tile shapes
    new = {f.name for f in tmp_path.glob("*.o")} - objs
    assert b[0] == "MISS" and len(new) == 1  # only the second step's own object
    assert run(64) == ["HIT", a[1]]
    # without its library the step is recompiled, never linked half-way
    for f in objs:
        deps = tmp_path / f.replace(".o", ".deps")
        if not deps.exists():
            (tmp_path / f).unlink()
    assert run(64) == ["MISS", a[1]]
