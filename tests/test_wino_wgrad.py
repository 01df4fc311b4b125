"""Weight gradients of 3x3 stride-1 convolutions as Winograd F(2x2, 3x3) on the float GEMM
(``codegen/wino_wgrad.py``): equal to PyTorch's for paddings 0-2, odd maps, channel counts
that are not whole vectors, batches split unevenly over the two threads' parts and into
blocks (whole images, and rows of one image with a partial last block), in both modes (a
``dU`` per thread, and one shared ``dU`` with the products split), strided operands,
float32 and float64; non-finite inputs stay non-finite; bit-identical for one and two
threads; the workspace holds every area; the switch turns it off."""

from __future__ import annotations

import numpy as np
import pytest
from _arena import assert_nothing_past_arena, guard_scratch
from _threads import assert_bit_identical, run_per_thread_count
from graphc.codegen import hostinfo, options, wino_wgrad

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim
from graphc.runtime import cpu as runtime_cpu

torch = pytest.importorskip("torch")

CACHES = hostinfo.Caches(32 << 10, 1 << 20, "test")  # 1 MiB of L2: the blocks below
WINO = "conv weight grad: Winograd F(2x2, 3x3)"


@pytest.fixture(autouse=True)
def caches(monkeypatch):
    monkeypatch.setattr(hostinfo, "host_caches", lambda: CACHES)
    monkeypatch.setattr(runtime_cpu, "host_caches", lambda: CACHES)


@pytest.fixture
def small_blocks(monkeypatch):
    """The shared mode on small problems: a 64 KiB L2 (``dU`` of 32 x 48 channels: 96 KiB)
    and blocks of 27 tiles (no disk cache: the block size is not part of its key)."""
    small = hostinfo.Caches(32 << 10, 64 << 10, "test")
    monkeypatch.setattr(hostinfo, "host_caches", lambda: small)
    monkeypatch.setattr(runtime_cpu, "host_caches", lambda: small)
    monkeypatch.setattr(wino_wgrad, "MIN_TILES", 27)
    monkeypatch.setenv("GRAPHC_CACHE", "0")


def _grads(cin, cout, h, w, pad, batch, dtype, transpose=False, x=None):
    """(graphc's weight gradient, PyTorch's, the fused IR) of ``sum(conv2d(x, W) * g)``."""
    rng = np.random.default_rng(batch + cin)
    if x is None:
        x = rng.standard_normal((batch, cin, w, h) if transpose else (batch, cin, h, w))
        x = x.astype(dtype)
    w0 = (rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype(dtype)
    holder = nn.Module()
    holder.w = nn.Parameter(gc.from_numpy(w0.copy()))
    opt = optim.SGD([holder.w], lr=0.0)
    tx = torch.from_numpy(x)
    tx = tx.transpose(2, 3) if transpose else tx
    tw = torch.from_numpy(w0).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, tw, padding=pad)
    gy = rng.standard_normal(ty.shape).astype(dtype)
    ty.backward(torch.from_numpy(gy))

    @gc.compile(dynamic=False)
    def step(xx, g):
        opt.zero_grad()
        xx = xx.transpose(2, 3) if transpose else xx
        (F.conv2d(xx, holder.w, padding=pad) * g).sum().backward()

    step(gc.from_numpy(x), gy)
    return np.array(holder.w.grad), tw.grad.numpy(), step.ir("fused")


# (cin, cout, h, w, padding, batches)
CASES = [
    (16, 16, 8, 8, 1, (1, 3)),
    (32, 48, 6, 6, 1, (5,)),
    (48, 32, 5, 7, 0, (4,)),          # odd result map, no padding
    (32, 40, 7, 6, 2, (3,)),          # padding 2
    (17, 20, 9, 5, 1, (2, 7)),        # channels that are not whole vectors
    (24, 16, 3, 3, 2, (1,)),
    (16, 16, 1, 1, 1, (3,)),          # one tile, three of its four outputs past the map
    (32, 32, 8, 8, 1, (20, 40)),      # blocks of 16 images: parts of 10 (one partial
                                      # block), of 20 (a full and a partial block)
    (16, 24, 46, 46, 1, (2,)),        # blocks of 11 of an image's 23 tile rows (11, 11, 1)
    (16, 16, 5, 6, (1, 2), (3,)),     # rectangular, padded unevenly
]


def _case_id(c):
    pad = "".join(map(str, c[4])) if isinstance(c[4], tuple) else c[4]
    return f"{c[0]}x{c[1]}x{c[2]}x{c[3]}p{pad}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_torch(case, dtype, shared=False):
    cin, cout, h, w, pad, batches = case
    for batch in batches:
        got, want, text = _grads(cin, cout, h, w, pad, batch, dtype)
        assert WINO in text, text
        assert ("split over the threads" in text) == shared, text
        # sums of thousands of terms: float32 rounding grows with the largest of them
        eps = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=10 * eps,
                                   atol=eps * (1 + np.abs(want).max()), err_msg=f"batch {batch}")


@pytest.mark.parametrize("case", [(16, 24, 46, 46, 1, 2), (128, 128, 8, 8, 1, 32)])
def test_float32_as_accurate_as_torch(case):
    """Against float64, graphc's float32 gradient errs no more than PyTorch's float32 one
    (the blocked sums of the products; measured: about half of it)."""
    cin, cout, h, w, pad, batch = case
    x = np.random.default_rng(7).standard_normal((batch, cin, h, w))
    got, want32, text = _grads(cin, cout, h, w, pad, batch, np.float32, x=x.astype(np.float32))
    _, want64, _ = _grads(cin, cout, h, w, pad, batch, np.float64, x=x)
    assert WINO in text
    assert np.abs(got - want64).max() <= np.abs(want32 - want64).max()


# the shared mode, blocks of 27 tiles (``small_blocks``)
SHARED_CASES = [
    (32, 48, 6, 6, 1, (5, 20, 1)),    # blocks of 3 images: 3 + 2, seven blocks, one image
    (40, 32, 14, 14, 1, (2,)),        # blocks of 3 of 7 tile rows (3, 3, 1), split between
                                      # the threads
    (33, 40, 5, 7, 0, (3,)),          # odd map, channels that are not whole vectors
]


@pytest.mark.parametrize("case", SHARED_CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shared_mode_matches_torch(case, dtype, small_blocks):
    test_matches_torch(case, dtype, shared=True)


def test_row_blocks_and_image_blocks():
    """The plans the cases above rely on: rows of one image with a partial last block,
    and whole images."""
    from graphc.ir import Builder
    from graphc.ir import dtypes as dt

    def view(cin, cout, hw, batch=2):
        g = Builder()
        x = g.input("x", "arg", (batch, cin, hw, hw), dt.float32)
        w = g.input("w", "param", (cout, cin, 3, 3), dt.float32)
        a = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
        y = g.op("conv2d", [x, w], **a)
        return wino_wgrad.plan(g.op("conv2d_weight_grad", [x, y], weight_shape=(cout, cin, 3, 3),
                                    **a))

    v = view(16, 24, 46)
    assert (v.TH, v.blocks()) == (23, (1, 11))
    v = view(32, 32, 8)
    assert v.blocks() == (16, 4) and not v.shared
    assert view(8, 32, 8) is None  # fewer than MIN_CHANNELS source channels
    assert not view(128, 128, 8).shared  # dU: 1 MiB, as L2
    v = view(256, 256, 8)  # dU: 4 MiB
    assert v.shared and v.blocks() == (16, 4)  # MIN_TILES


def test_strided_operand():
    """An input seen through a transposed view (its rows not contiguous): the element-wise
    channels-last copy."""
    got, want, text = _grads(16, 20, 9, 6, 1, 3, np.float32, transpose=True)
    assert WINO in text
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cin,cout,stride", [(17, 20, 1), (16, 20, 2), (8, 20, 1)])
def test_output_gradient_through_a_transpose(cin, cout, stride):
    """The output gradient reaches the weight gradient through a transpose: the
    channels-last copy (``wino_wgrad.fill``, shared by the Winograd path and the direct
    channel-vector weight gradient of ``codegen.conv``) reads it as it is laid out."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, cin, 9, 9)).astype(np.float32)
    w0 = (rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype(np.float32)
    holder = nn.Module()
    holder.w = nn.Parameter(gc.from_numpy(w0.copy()))
    opt = optim.SGD([holder.w], lr=0.0)
    tw = torch.from_numpy(w0).requires_grad_()
    ty = torch.nn.functional.conv2d(torch.from_numpy(x), tw, stride=stride, padding=1)
    g = rng.standard_normal(ty.transpose(2, 3).shape).astype(np.float32)
    (ty.transpose(2, 3) * torch.from_numpy(g)).sum().backward()

    @gc.compile(dynamic=False)
    def step(xx, gg):
        opt.zero_grad()
        (F.conv2d(xx, holder.w, stride=stride, padding=1).transpose(2, 3) * gg).sum().backward()

    step(gc.from_numpy(x), g)
    assert (WINO in step.ir("fused")) == (stride == 1 and cin >= 16)
    np.testing.assert_allclose(np.array(holder.w.grad), tw.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_non_finite_inputs_stay_non_finite():
    """An infinite input element makes the gradient of its channel's filters non-finite,
    as PyTorch's; the other channels' stay finite and equal."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    x[1, 5, 3, 4] = np.inf
    got, want, text = _grads(16, 16, 8, 8, 1, 2, np.float32, x=x)
    assert WINO in text
    bad = ~np.isfinite(want)
    assert bad[:, 5].any() and not bad[:, np.arange(16) != 5].any()
    assert (~np.isfinite(got) == bad).all()
    np.testing.assert_allclose(got[~bad], want[~bad], rtol=1e-4, atol=1e-4)


def test_switch_off(monkeypatch):
    monkeypatch.setattr(options, "WINOGRAD_WGRAD", False)
    got, want, text = _grads(32, 32, 8, 8, 1, 3, np.float32)
    assert WINO not in text
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


_THREADS = r'''
import numpy as np, graphc as gc
from graphc import nn, optim
gc.manual_seed(0)
m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 64, 3, padding=1),
                  nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                  nn.Conv2d(64, 20, 3, padding=0), nn.Flatten(), nn.Linear(20 * 14 * 14, 5))
opt = optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
lf = nn.CrossEntropyLoss()
@gc.compile
def step(x, y):
    opt.zero_grad(); loss = lf(m(x), y); loss.backward(); opt.step(); return loss
rng = np.random.default_rng(0)
out = {}
for b in (9, 1):
    x = rng.standard_normal((b, 3, 16, 16)).astype(np.float32)
    y = rng.integers(0, 5, b)
    for i in range(2):
        out[f"b{b}.{i}"] = np.asarray(step(x, y))
text = step.ir("fused")
assert "conv weight grad: Winograd F(2x2, 3x3)" in text
assert "conv: Winograd F(2x2, 3x3) channels-last" in text  # the 64 -> 64 forward
for k, v in m.state_dict().items():
    out[k] = np.asarray(v)
np.savez(OUT, **out)
'''


# a dU per thread (and the 64 -> 64 forward on each thread's images); shared
@pytest.mark.parametrize("l2", ["1M", "16K"])
def test_two_threads_bit_identical_to_one(tmp_path, l2):
    runs = run_per_thread_count(tmp_path, _THREADS, env={"GRAPHC_CPU_CACHES": f"l1d=32K,l2={l2}"},
                                drop=("GRAPHC_WINOGRAD_WGRAD", "GRAPHC_CONV_WINOGRAD"))
    assert_bit_identical(runs, min_arrays=5)


@pytest.mark.parametrize("cin,cout,hw,l2", [(16, 24, 46, 1 << 20), (17, 20, 9, 1 << 20),
                                           (33, 40, 14, 64 << 10)])
def test_kernel_stays_inside_its_workspace(cin, cout, hw, l2, monkeypatch):
    """The two parts' areas (grids, V, Md, dU, the GEMM's packing) lie inside the arena
    the plan reserves: no byte past it is written."""
    guard_scratch(monkeypatch)
    caches = hostinfo.Caches(32 << 10, l2, "test")
    monkeypatch.setattr(hostinfo, "host_caches", lambda: caches)
    monkeypatch.setattr(runtime_cpu, "host_caches", lambda: caches)
    rng = np.random.default_rng(0)
    gc.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.Flatten())
    opt = optim.SGD(m.parameters(), lr=0.01)

    @gc.compile
    def step(x):
        opt.zero_grad()
        loss = (m(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    step(rng.standard_normal((3, cin, hw, hw)).astype(np.float32))
    exe = step.variants[-1].exe
    assert WINO in step.ir("fused")
    assert_nothing_past_arena(exe)


def _relu_convs_step(convs: list) -> object:
    """A training step through ``convs``, each followed by a ReLU, loss ``mean(y^2)``; it
    returns the last activation and leaves the weights' gradients."""
    def step(xx):
        for c in convs:
            c.weight.grad = None
        y = xx
        for c in convs:
            y = F.relu(c(y))
        (y * y).mean().backward()
        return y

    return step


def test_avx2_kernels_match_the_host_kernels():
    """The 256-bit build (8 lanes: x86-64-v3, as on AVX2 hosts; 8x8 register transposes)
    of both Winograd paths computes what the host's build does: same step, same inputs."""
    from graphc.runtime.cpu import CPUExecutable

    rng = np.random.default_rng(5)
    gc.manual_seed(0)
    convs = [nn.Conv2d(20, 64, 3, padding=1, bias=False),
             nn.Conv2d(64, 72, 3, padding=1, bias=False),
             nn.Conv2d(72, 24, 3, padding=2, bias=False)]
    params = [c.weight for c in convs]
    x = rng.standard_normal((3, 20, 13, 11)).astype(np.float32)
    fn = gc.compile(_relu_convs_step(convs), dynamic=False)
    host = [np.asarray(fn(x))] + [p.grad.numpy().copy() for p in params]
    text = fn.ir("fused")
    assert "conv: Winograd F(2x2, 3x3) channels-last" in text, text
    assert "conv weight grad: Winograd F(2x2, 3x3)" in text, text
    v = fn.variants[-1]
    avx2 = CPUExecutable(v.graph, v.sig, cpu="x86-64-v3")
    assert not avx2.wide
    avx2_text = avx2.stages()["fused"]()
    assert "conv: Winograd F(2x2, 3x3) channels-last" in avx2_text, avx2_text
    assert avx2_text.count("conv weight grad: Winograd F(2x2, 3x3)") == 3, avx2_text
    out = avx2.call((x,))
    got = [np.asarray(out.numpy() if hasattr(out, "numpy") else out)] + [
        p.grad.numpy() for p in params]
    for a, b in zip(got, host):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * (1 + np.abs(b).max()))


def test_batched_winograd_kernels_compile_at_the_tile_level():
    """The batched Winograd kernels (forward, input gradient, weight gradient) are vector
    code written out, compiled at the ``tile`` level without LLVM's vectorisers (the
    largest modules of ResNet-18's cold compile at O3); the weight gradient's element loops
    are vector code of their own, so its values still match PyTorch's (the cases above)."""
    rng = np.random.default_rng(7)
    gc.manual_seed(0)
    convs = [nn.Conv2d(64, 64, 3, padding=1, bias=False) for _ in range(2)]
    x = rng.standard_normal((4, 64, 12, 12)).astype(np.float32)
    fn = gc.compile(_relu_convs_step(convs), dynamic=False)
    fn(x)
    text = fn.ir("fused")
    assert "conv: Winograd F(2x2, 3x3) channels-last, blocks" in text, text
    assert "conv weight grad: Winograd F(2x2, 3x3) channels-last, blocks" in text, text
    levels = fn.variants[-1].exe.lowering.kernel_level
    convs_at = {name: lv for name, lv in levels.items() if name.startswith("k_conv2d")}
    assert len(convs_at) == 3 and set(convs_at.values()) == {"tile"}, levels
