"""Random convolution geometries against PyTorch (hypothesis).

``test_conv.py`` pins the geometries each kernel path was written for. Here hypothesis draws
them: batch, channels, groups, kernel size (1x1 to 7x7, unequal sides), strides (equal and
not), padding (none to past the kernel), dilation, and a second batch size the compiled
function runs at (the batch is symbolic). Each draw compiles the forward, input-gradient and
weight-gradient kernels, runs them at both batch sizes and compares them with PyTorch's
``conv2d`` / ``conv2d_input`` / ``conv2d_weight`` in float64. The draws reach every path of
``codegen.conv`` (implicit GEMMs from a grid or from stride-phase grids, channel- and
position-vector tiles, per-image and batched Winograd, the strided input gradient's phase
GEMMs, both weight-gradient forms) and, with the pool, the two-thread splits.

Tolerance for float32: an output may differ from the float64 result by 4x PyTorch's own
float32 error at that output's tensor, plus ``2e-6 * sqrt(n)`` for ``n`` products summed
per element. A wrong tap, channel or image is off by about one product (order 1 here), far
outside it; a summation order that loses more than a few bits fails it: one running sum
over a weight gradient's 100k products (``test_long_weight_gradient_sums_stay_accurate``)
or over an input gradient's 3,200 (``test_long_input_gradient_sums_stay_accurate``).
Unequal strides run the phase-grid implicit GEMMs like equal ones, under the same bound;
the direct loops (debug builds) get 8x
(``test_direct_weight_gradient_sums_stay_accurate``).

Profiles as in ``test_fuzz.py``: ``ci`` (default) and ``long``
(``HYPOTHESIS_PROFILE=long pytest tests/test_conv_fuzz.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _fuzz_settings import fuzz_settings
from _torch import torch
from hypothesis import given
from hypothesis import strategies as st

import graphc as gc
from graphc.tensor import Tensor, builder

FUZZ = fuzz_settings(14, 300)


def _op(name: str, *xs: Tensor, **attrs: Any) -> Tensor:
    return Tensor._wrap(builder().op(name, [x.node for x in xs], **attrs))


@st.composite
def geometries(draw: Any, width: list[int], size: int, batch: int) -> dict[str, Any]:
    """A convolution whose output has at least one position, with PyTorch's arguments."""
    g = draw(st.sampled_from([1, 1, 1, 2, 4]))
    c = g * draw(st.sampled_from(width))
    o = g * draw(st.sampled_from(width))
    kh = draw(st.sampled_from([1, 2, 3, 3, 3, 5, 7]))
    kw = draw(st.sampled_from([kh, kh, kh, 1, 2, 3, 5]))
    sh = draw(st.sampled_from([1, 1, 2, 2, 3]))
    sw = draw(st.sampled_from([sh, sh, sh, 1, 2]))
    dh = draw(st.sampled_from([1, 1, 1, 2]))
    dw = draw(st.sampled_from([dh, dh, dh, 1, 2]))
    ph = draw(st.integers(0, kh))
    pw = draw(st.sampled_from([ph, ph, *range(kw + 1)]))
    h = draw(st.integers(max(1, (kh - 1) * dh + 1 - 2 * ph), size))
    w = draw(st.integers(max(1, (kw - 1) * dw + 1 - 2 * pw), size))
    batches = (draw(st.integers(1, batch)), draw(st.integers(1, batch)))
    dtype = draw(st.sampled_from([np.float32] * 5 + [np.float64]))
    return dict(c=c, o=o, hw=(h, w), kernel=(kh, kw), batches=batches, dtype=dtype,
                attrs=dict(stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=g))


def _error(got: Any, ref: Any) -> float:
    got = np.asarray(got)
    assert got.shape == tuple(ref.shape)
    return float(np.max(np.abs(got - ref.numpy()))) if got.size else 0.0


def check_geometry(geom: dict[str, Any], seed: int = 0) -> None:
    """Compile the three kernels for ``geom`` and compare them at both batch sizes."""
    c, o, (h, w), ker = geom["c"], geom["o"], geom["hw"], geom["kernel"]
    attrs, dtype = geom["attrs"], geom["dtype"]
    g = attrs["groups"]
    rng = np.random.default_rng(seed)
    wn = rng.standard_normal((o, c // g) + ker).astype(dtype)
    wt = gc.tensor(wn)
    tw = torch.tensor(wn, dtype=torch.float64)
    f32 = dtype == np.float32
    fns: dict[str, Any] = {}
    for batch in geom["batches"]:
        x = rng.standard_normal((batch, c, h, w)).astype(dtype)
        tx = torch.tensor(x, dtype=torch.float64)
        refs = {"fwd": torch.nn.functional.conv2d(tx, tw, **attrs)}
        gy = rng.standard_normal(tuple(refs["fwd"].shape)).astype(dtype)
        tgy = torch.tensor(gy, dtype=torch.float64)
        refs["igrad"] = torch.nn.grad.conv2d_input(tx.shape, tw, tgy, **attrs)
        refs["wgrad"] = torch.nn.grad.conv2d_weight(tx, tw.shape, tgy, **attrs)
        if not fns:
            fns["fwd"] = gc.compile(lambda a: _op("conv2d", a, wt, **attrs), example_args=(x,))
            fns["igrad"] = gc.compile(
                lambda q: _op("conv2d_input_grad", q, wt, input_shape=(q.shape[0], c, h, w),
                              **attrs), example_args=(gy,))
            fns["wgrad"] = gc.compile(
                lambda a, q: _op("conv2d_weight_grad", a, q, weight_shape=wn.shape, **attrs),
                example_args=(x, gy))
        got = {"fwd": fns["fwd"](x), "igrad": fns["igrad"](gy), "wgrad": fns["wgrad"](x, gy)}
        t32 = {}
        if f32:  # PyTorch's own float32 error at each tensor
            t32 = {"fwd": torch.nn.functional.conv2d(tx.float(), tw.float(), **attrs),
                   "igrad": torch.nn.grad.conv2d_input(tx.shape, tw.float(), tgy.float(),
                                                       **attrs),
                   "wgrad": torch.nn.grad.conv2d_weight(tx.float(), tw.shape, tgy.float(),
                                                        **attrs)}
        oh, ow = refs["fwd"].shape[2:]
        terms = {"fwd": c // g * ker[0] * ker[1], "igrad": o // g * ker[0] * ker[1],
                 "wgrad": batch * oh * ow}
        for what in ("fwd", "igrad", "wgrad"):
            err = _error(got[what], refs[what])
            if f32:
                tol = 4 * _error(t32[what].double(), refs[what]) + 2e-6 * terms[what] ** 0.5
            else:
                tol = 1e-12 * terms[what]
            assert err <= tol, (what, batch, err, tol)


@FUZZ
@given(geometries(width=[1, 2, 3, 4, 6, 8, 12, 16, 24, 32], size=40, batch=9))
def test_random_small_convolutions_match_torch(geom: dict[str, Any]) -> None:
    check_geometry(geom)


@fuzz_settings(7, 150)
@given(geometries(width=[8, 16, 24, 32, 48, 64, 96, 128], size=48, batch=16))
def test_random_wide_convolutions_match_torch(geom: dict[str, Any]) -> None:
    """Widths where the batched and channel-vector paths and the two-thread splits take
    over."""
    check_geometry(geom)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("c", "o", "hw", "path"), [
    (72, 100, (9, 11), "channels-last"),  # the batched kernel (codegen.wino_gemm)
    (100, 72, (6, 6), "channels-last"),
    (20, 27, (10, 34), "Winograd F(2x2, 3x3) per image"),  # codegen.conv's kernel
])
def test_winograd_filter_transform_tails(c: int, o: int, hw: tuple[int, int], path: str,
                                         dtype: Any) -> None:
    """Channel counts that are no multiple of a vector: the filter transform
    (``winograd.transform_filters``) runs a vector of result channels at a time, its last
    vector masked, in the forward (result channels ``o``) and the input gradient's (``c``).
    The fuzzer's widths are multiples of 8, so only these reach the masked lanes."""
    geom = dict(c=c, o=o, hw=hw, kernel=(3, 3), batches=(3,), dtype=dtype,
                attrs=dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1))
    x = np.zeros((3, c) + hw, dtype)
    wt = gc.tensor(np.zeros((o, c, 3, 3), dtype))
    fn = gc.compile(lambda a: _op("conv2d", a, wt, **geom["attrs"]), example_args=(x,))
    fn(x)
    assert path in fn.ir("fused") and "Winograd" in fn.ir("fused"), fn.ir("fused")
    check_geometry(geom, seed=3)


@pytest.mark.parametrize(("c", "o", "hw", "k", "stride", "fwd", "igrad"), [
    # rows of 14 and 15 outputs in 16 lanes; the input gradient's phases likewise
    (64, 128, (27, 29), 3, 2, "channel vectors", "channel vectors"),
    (24, 64, (28, 30), 5, 1, "channel vectors", "position vectors"),  # 24 input channels
    # 80 channels: a masked last vector; the input gradient's phases sum 180 on average
    (64, 80, (20, 21), 3, 2, "channel vectors", "position vectors"),
    (64, 64, (28, 28), 1, 2, "position vectors", None),  # a 1x1 keeps the position vectors
    (32, 48, (28, 28), 3, 2, "position vectors", "position vectors"),  # < 4 vectors
    (1, 64, (28, 28), 3, 1, "position vectors", "position vectors"),  # a sum of 9: a stem
])
def test_ragged_rows_take_channel_vectors(c: int, o: int, hw: tuple[int, int], k: int,
                                          stride: int, fwd: str | None, igrad: str | None) -> None:
    """Rows whose last position vector is partly used (``conv.by_channels``,
    ``conv._igrad_by_channels``) run the forward and input gradient on vectors of output
    (input) channels when there are four vectors of them and a long enough sum: each
    checked for its path (float32 on 16 lanes; 8-lane targets draw the lines elsewhere)
    and against PyTorch in float64 and float32 (batch sizes 3 and 1, one compile)."""
    attrs = dict(stride=(stride, stride), padding=(k // 2, k // 2), dilation=(1, 1), groups=1)
    for dtype in (np.float32, np.float64):
        geom = dict(c=c, o=o, hw=hw, kernel=(k, k), batches=(3, 1), dtype=dtype, attrs=attrs)
        if dtype == np.float32:  # (float64's 8 lanes draw the lines elsewhere)
            x = np.zeros((3, c) + hw, dtype)
            wt = gc.tensor(np.zeros((o, c, k, k), dtype))
            f = gc.compile(lambda a, wt=wt: _op("conv2d", a, wt, **attrs), example_args=(x,))
            gy = np.asarray(f(x))
            if not f.variants[0].exe.wide:
                fwd = igrad = None  # 8 lanes a vector: other rows are ragged
            assert fwd is None or fwd in f.ir("fused"), f.ir("fused")
            g = gc.compile(lambda q, wt=wt: _op("conv2d_input_grad", q, wt,
                                                input_shape=(q.shape[0], c) + hw, **attrs),
                           example_args=(gy,))
            g(gy)
            assert igrad is None or igrad in g.ir("fused"), g.ir("fused")
        check_geometry(geom, seed=5)


def test_direct_weight_gradient_sums_stay_accurate() -> None:
    """A long-profile draw for the direct loops (debug builds run them for their bounds
    checks; unequal strides took them until they got phase grids): their weight gradient
    kept one running sum over 6,468 products an element (3.7e-4 off float64, 15x PyTorch's
    float32 error); it now sums rows, then images, then the batch. The same geometry
    outside debug builds runs the phase-grid implicit GEMM (``check_geometry``)."""
    attrs = dict(stride=(1, 2), padding=(0, 0), dilation=(1, 2), groups=1)
    geom = dict(c=8, o=8, hw=(22, 41), kernel=(1, 1), batches=(14, 1), dtype=np.float32,
                attrs=attrs)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((14, 8, 22, 41)).astype(np.float32)
    gy = rng.standard_normal((14, 8, 22, 21)).astype(np.float32)
    fn = gc.compile(lambda a, q: _op("conv2d_weight_grad", a, q, weight_shape=(8, 8, 1, 1),
                                     **attrs), example_args=(x, gy), debug=True)
    got = fn(x, gy)
    assert "direct loops" in fn.ir("fused"), fn.ir("fused")
    tx, tgy = torch.tensor(x, dtype=torch.float64), torch.tensor(gy, dtype=torch.float64)
    ref = torch.nn.grad.conv2d_weight(tx, (8, 8, 1, 1), tgy, **attrs)
    t32 = torch.nn.grad.conv2d_weight(tx.float(), (8, 8, 1, 1), tgy.float(), **attrs)
    assert _error(got, ref) <= 8 * _error(t32.double(), ref) + 2e-6 * (14 * 22 * 21) ** 0.5
    check_geometry(geom)


def test_long_weight_gradient_sums_stay_accurate() -> None:
    """A 7x2 weight gradient over 31 images of 57x61 positions: 108k products per element.
    Its channel-vector kernel kept one running sum per element over all of them (float32
    error 9.6x PyTorch's against float64); it now adds per-block sums (1.4-1.6x)."""
    geom = dict(c=128, o=32, hw=(50, 58), kernel=(7, 2), batches=(31,), dtype=np.float32,
                attrs=dict(stride=(1, 1), padding=(4, 4), dilation=(1, 1), groups=1))
    check_geometry(geom, seed=1)


def test_long_input_gradient_sums_stay_accurate() -> None:
    """A 5x5 input gradient from 128 channels (3,200 products an element), which hypothesis
    found: one running sum per element measured 7.1x PyTorch's float32 error; the register
    tiles now sum chunks of ``conv.ACC_CHUNK`` products from zero (0.7-0.9x)."""
    geom = dict(c=24, o=128, hw=(31, 7), kernel=(5, 5), batches=(2, 1), dtype=np.float32,
                attrs=dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1))
    check_geometry(geom)


@st.composite
def transposed(draw: Any) -> dict[str, Any]:
    """``conv_transpose2d`` arguments PyTorch accepts, ``output_padding`` up to the larger
    of stride and dilation (past the stride included)."""
    g = draw(st.sampled_from([1, 1, 2, 3]))
    st_ = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    hw = (draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    pad = tuple(draw(st.integers(0, ((hw[i] - 1) * st_[i] + dil[i] * (k[i] - 1)) // 2))
                for i in range(2))
    opad = tuple(draw(st.integers(0, max(st_[i], dil[i]) - 1)) for i in range(2))
    return dict(n=draw(st.integers(1, 3)), c=g * draw(st.integers(1, 4)),
                o=g * draw(st.integers(1, 4)), hw=hw, kernel=k, bias=draw(st.booleans()),
                kw=dict(stride=st_, padding=pad, output_padding=opad, groups=g, dilation=dil),
                seed=draw(st.integers(0, 2**31 - 1)))


@FUZZ
@given(transposed())
def test_random_transposed_convolutions_match_torch(case: dict[str, Any]) -> None:
    """Values and the gradients of input, weight and bias, compiled, against PyTorch."""
    import graphc.nn.functional as F
    from graphc import nn

    kw, g = case["kw"], case["kw"]["groups"]
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["c"], *case["hw"])).astype(np.float32)
    w = rng.standard_normal((case["c"], case["o"] // g, *case["kernel"])).astype(np.float32)
    b = rng.standard_normal(case["o"]).astype(np.float32) if case["bias"] else None
    # the input's gradient through a parameter it is scaled by (compiled steps take the
    # gradients of parameters)
    ones = np.ones(x.shape[1:], np.float32)
    tp, tw = torch.tensor(ones, requires_grad=True), torch.tensor(w, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True) if b is not None else None
    ty = torch.nn.functional.conv_transpose2d(torch.tensor(x) * tp, tw, tb, **kw)
    if min(ty.shape[2:]) == 0:
        return  # PyTorch's empty result: graphc raises NotImplementedError for it
    gy = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.tensor(gy)).sum().backward()
    pp, pw = nn.Parameter(gc.tensor(ones)), nn.Parameter(gc.tensor(w))
    pb = nn.Parameter(gc.tensor(b)) if b is not None else None
    params = [q for q in (pp, pw, pb) if q is not None]

    @gc.compile
    def step(a: Any, wt: Any) -> Any:
        for q in params:
            q.grad = None
        y = F.conv_transpose2d(a * pp, pw, pb, **kw)
        (y * wt).sum().backward()
        return y

    y = step(gc.tensor(x), gc.tensor(gy))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    for q, ref in ((pp, tp), (pw, tw), (pb, tb)):
        if q is not None:
            np.testing.assert_allclose(q.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-3)
