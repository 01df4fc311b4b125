"""Convolutions with many channels as products on the float GEMM over chunks of images:
batched im2col (``codegen/conv_gemm.py``) and batched Winograd F(2x2, 3x3)
(``codegen/wino_gemm.py``). Forward, input and weight gradients equal PyTorch's, for every
stride, padding, dilation and kernel shape the paths take, odd map sizes, in float32 and
float64, with batches split into several chunks of images or fewer images than a chunk
holds, and bit-identical for one and two threads.

The paths serve convolutions whose (transformed) weight does not fit L2; the small cases
here run with a 64 KiB L2 (as ``GRAPHC_CPU_CACHES`` would set it) so that 32-64 channels
take them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _arena import assert_nothing_past_arena, guard_scratch
from _threads import assert_bit_identical, run_per_thread_count
from graphc.codegen import conv_gemm, hostinfo, options

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim
from graphc.runtime import cpu as runtime_cpu

torch = pytest.importorskip("torch")

SMALL_L2 = hostinfo.Caches(32 << 10, 64 << 10, "test")


@pytest.fixture
def small_l2(monkeypatch):
    monkeypatch.setattr(hostinfo, "host_caches", lambda: SMALL_L2)
    monkeypatch.setattr(runtime_cpu, "host_caches", lambda: SMALL_L2)


# (cin, cout, h, w, kernel, stride, padding, dilation): batched im2col ...
CASES = [
    (40, 24, 5, 7, (3, 3), 2, 1, 1),    # strided (forward and weight gradient only)
    (128, 96, 4, 4, (1, 1), 1, 0, 1),   # 1x1
    (64, 48, 7, 6, (3, 1), 1, (1, 0), 1),  # a non-square kernel
    (24, 40, 8, 8, (3, 3), 1, 2, 2),    # dilation
    (16, 48, 9, 9, (5, 5), 2, 2, 1),    # 5x5, stride 2, odd map
    (48, 40, 3, 3, (3, 3), 1, 3, 1),    # 3x3 stride 1 padded by 3: not Winograd's
]
# ... and batched Winograd (3x3 stride 1, padding 0-2; the weight gradient is
# ``codegen/wino_wgrad.py``'s)
WINO_CASES = [
    (32, 48, 6, 6, (3, 3), 1, 1, 1),
    (48, 32, 5, 7, (3, 3), 1, 0, 1),    # odd result map, no padding (input gradient: 2)
    (32, 40, 7, 6, (3, 3), 1, 2, 1),    # padding 2 (input gradient: 0)
    (32, 48, 30, 30, (3, 3), 1, 1, 1),  # 225 tiles an image: chunks of 2 images
]


def _run(case, batch, dtype):
    cin, cout, h, w, k, s, p, d = case
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, cin, h, w)).astype(dtype)
    w0 = (rng.standard_normal((cout, cin) + k) * 0.1).astype(dtype)
    holder = nn.Module()
    holder.w = nn.Parameter(gc.from_numpy(w0.copy()))
    holder.x = nn.Parameter(gc.from_numpy(x.copy()))
    opt = optim.SGD([holder.w, holder.x], lr=0.0)
    tx = torch.from_numpy(x).requires_grad_()
    tw = torch.from_numpy(w0).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, tw, stride=s, padding=p, dilation=d)
    gy = np.random.default_rng(99).standard_normal(ty.shape).astype(dtype)
    ty.backward(torch.from_numpy(gy))

    @gc.compile(dynamic=False)  # the input is a parameter: its batch is static
    def step(g):
        opt.zero_grad()
        y = F.conv2d(holder.x, holder.w, stride=s, padding=p, dilation=d)
        (y * g).sum().backward()
        return y

    y = step(gy)
    dx = holder.x.grad
    text = step.ir("fused")
    return ({"forward": (np.array(y), ty.detach().numpy()),
             "input grad": (np.array(dx), tx.grad.numpy()),
             "weight grad": (np.array(holder.w.grad), tw.grad.numpy())}, text)


def _ids(c):
    return "x".join(map(str, c[:4])) + f"k{c[4][0]}{c[4][1]}s{c[5]}p{c[6]}"


@pytest.mark.parametrize("case", CASES + WINO_CASES, ids=_ids)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_torch(case, dtype, small_l2):
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    wino = case in WINO_CASES
    for batch in ((20, 3, 1) if case[2] < 30 else (5, 1)):
        got, text = _run(case, batch, dtype)
        # (the weight gradient is Winograd's too: ``codegen/wino_wgrad.py``)
        assert ("batched im2col + gemm" in text) == (not wino), text
        assert ("conv: Winograd F(2x2, 3x3) channels-last" in text) == wino, text
        assert ("conv weight grad: Winograd" in text) == wino, text
        for name, (a, b) in got.items():
            np.testing.assert_allclose(a, b, **tol, err_msg=f"{name}, batch {batch}")


def test_which_convolutions_take_the_path(small_l2):
    """Small weights stay on the implicit GEMM, large maps too; Winograd keeps 3x3
    stride-1 convolutions whose transformed weight fits L2; strided input gradients keep
    the phase kernels."""
    from graphc.ir import Builder
    from graphc.ir import dtypes as dt

    g = Builder()
    names = itertools.count()

    def node(op, cin, cout, hw, k=3, s=1, p=1):
        shape = (4, cin, hw, hw)
        x = g.input(f"x{next(names)}", "arg", shape, dt.float32)
        w = g.input(f"w{next(names)}", "param", (cout, cin, k, k), dt.float32)
        a = dict(stride=(s, s), padding=(p, p), dilation=(1, 1), groups=1)
        y = g.op("conv2d", [x, w], **a)
        if op == "conv2d":
            return y
        if op == "conv2d_input_grad":
            return g.op(op, [y, w], input_shape=shape, **a)
        return g.op(op, [x, y], weight_shape=tuple(w.shape), **a)

    with hostinfo.tuned_for(SMALL_L2):
        assert conv_gemm.plan(node("conv2d", 32, 48, 6)) is not None
        assert conv_gemm.plan(node("conv2d", 8, 8, 6)) is None  # the weight fits
        assert conv_gemm.plan(node("conv2d", 32, 48, 16)) is None  # 256 positions
        assert conv_gemm.plan(node("conv2d", 8, 16, 6)) is None
        # Winograd's 16 * 16 * 8 * 4 B = 16 KiB transformed weight fits a 64 KiB L2
        assert conv_gemm.plan(node("conv2d", 16, 8, 6)) is None
    with hostinfo.tuned_for(hostinfo.Caches(32 << 10, 1 << 20, "test")):
        assert conv_gemm.plan(node("conv2d", 512, 512, 4)) is not None
        assert conv_gemm.plan(node("conv2d_weight_grad", 512, 512, 4)) is not None
        assert conv_gemm.plan(node("conv2d_input_grad", 512, 512, 4)) is not None
        assert conv_gemm.plan(node("conv2d_input_grad", 256, 512, 8, s=2)) is None
        assert conv_gemm.plan(node("conv2d", 128, 128, 8)) is None  # Winograd's U: 1 MiB
        assert conv_gemm.plan(node("conv2d", 128, 128, 64)) is None


# batched Winograd with each thread's half of the batch (64+ channels, U within a 1 MiB L2)
PART_CASES = [
    (64, 64, 8, 8, (3, 3), 1, 1, 1),
    (72, 80, 7, 9, (3, 3), 1, 2, 1),    # channels that are not whole vectors, odd map
    (64, 64, 40, 40, (3, 3), 1, 1, 1),  # 400 tiles an image: blocks of 12 of 20 tile rows
]


@pytest.mark.parametrize("case", PART_CASES, ids=_ids)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_winograd_per_thread_matches_torch(case, dtype, monkeypatch):
    caches = hostinfo.Caches(32 << 10, 1 << 20, "test")
    monkeypatch.setattr(hostinfo, "host_caches", lambda: caches)
    monkeypatch.setattr(runtime_cpu, "host_caches", lambda: caches)
    eps = 1e-5 if dtype == np.float32 else 1e-12
    for batch in ((5, 1) if case[2] < 40 else (2,)):
        got, text = _run(case, batch, dtype)
        assert "conv: Winograd F(2x2, 3x3) channels-last" in text, text
        assert "on each thread's half of the batch" in text, text
        assert ("blocks of 12 of 20 tile rows" in text) == (case[2] == 40), text
        for name, (a, b) in got.items():
            np.testing.assert_allclose(a, b, rtol=10 * eps, atol=eps * (1 + np.abs(b).max()),
                                       err_msg=f"{name}, batch {batch}")


def test_off_switch_gives_the_implicit_gemm(small_l2, monkeypatch):
    monkeypatch.setattr(options, "CONV_GEMM", False)
    got, text = _run(CASES[0], 5, np.float32)
    assert "batched im2col" not in text
    for name, (a, b) in got.items():
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4, err_msg=name)


def test_real_size_last_stage_matches_torch():
    """ResNet-18's last stage at full width (512 channels, 4x4), with the host's caches."""
    got, text = _run((512, 512, 4, 4, (3, 3), 1, 1, 1), 2, np.float32)
    assert "conv: Winograd F(2x2, 3x3) channels-last" in text
    assert "conv weight grad: Winograd F(2x2, 3x3) channels-last" in text
    for name, (a, b) in got.items():
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3, err_msg=name)


_THREADS = r'''
import numpy as np, graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim
gc.manual_seed(0)
m = nn.Sequential(nn.Conv2d(32, 48, 3, padding=1), nn.ReLU(), nn.Conv2d(48, 40, 3, padding=1),
                  nn.ReLU(), nn.Conv2d(40, 48, 3, stride=2, padding=1), nn.Flatten(),
                  nn.Linear(48 * 3 * 3, 5))
opt = optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
lf = nn.CrossEntropyLoss()
@gc.compile
def step(x, y):
    opt.zero_grad(); loss = lf(m(x), y); loss.backward(); opt.step(); return loss
rng = np.random.default_rng(0)
out = {}
for b in (40, 3):
    x = rng.standard_normal((b, 32, 6, 6)).astype(np.float32)
    y = rng.integers(0, 5, b)
    for i in range(2):
        out[f"b{b}.{i}"] = np.asarray(step(x, y))
text = step.ir("fused")
assert "batched im2col + gemm" in text and "Winograd F(2x2, 3x3) channels-last" in text
for k, v in m.state_dict().items():
    out[k] = np.asarray(v)
np.savez(OUT, **out)
'''


def test_two_threads_bit_identical_to_one(tmp_path):
    runs = run_per_thread_count(tmp_path, _THREADS, drop=("GRAPHC_CONV_GEMM",),
                                env={"GRAPHC_CPU_CACHES": "l1d=32K,l2=64K"})
    assert_bit_identical(runs, min_arrays=5)


@pytest.mark.parametrize("case", [CASES[0], CASES[1], WINO_CASES[0], WINO_CASES[3]], ids=_ids)
def test_kernels_stay_inside_their_workspace(case, small_l2, monkeypatch):
    """Every area of the two paths' workspaces (two threads' grids, the chunk's matrices,
    the GEMM's packing) lies inside the arena the plan reserves: no byte past the size the
    step asked for is written (a second grid was once placed past it)."""
    guard_scratch(monkeypatch)
    cin, cout, h, w, k, s, p, d = case
    rng = np.random.default_rng(0)
    gc.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d), nn.Flatten())
    opt = optim.SGD(m.parameters(), lr=0.01)

    @gc.compile
    def step(x):
        opt.zero_grad()
        loss = (m(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    step(rng.standard_normal((5, cin, h, w)).astype(np.float32))
    exe = step.variants[-1].exe
    assert "gemm" in step.ir("fused")
    assert_nothing_past_arena(exe)
