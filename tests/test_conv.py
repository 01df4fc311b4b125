"""The native convolution kernels (codegen/conv.py: implicit GEMMs over padded grids, with
the direct loops as fallback) against PyTorch in float64, over geometries that exercise the
grid edges: rows wider than one vector, taps reaching past the padding, strides (phase
grids), dilation, groups, padding larger than the kernel, 1x1 kernels, ragged tiles."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch
from graphc.codegen import conv as conv_lowering

import graphc as gc
from graphc.tensor import Tensor, builder

# (C, O, H, W, kernel, stride, padding, dilation, groups)
GEOMS = [
    (1, 8, 28, 28, (3, 3), 1, 1, 1, 1),  # the cnn benchmark's layers
    (8, 16, 14, 14, (3, 3), 1, 1, 1, 1),
    (3, 5, 9, 37, (3, 2), 1, (1, 0), 1, 1),  # three vectors per row, asymmetric kernel
    (4, 6, 7, 9, (3, 3), 1, 2, 2, 2),  # dilation and groups
    (2, 3, 6, 5, (1, 1), 1, 0, 1, 1),  # 1x1
    (3, 7, 5, 6, (2, 2), 1, 3, 1, 1),  # padding past the kernel extent
    (4, 6, 9, 8, (3, 3), 2, 1, 1, 2),  # stride 2: phase grids (forward, weight grad)
    (2, 4, 11, 19, (5, 3), 3, (2, 1), (1, 2), 1),  # stride 3, mixed dilation
    (6, 9, 8, 8, (3, 3), 1, 1, 1, 3),  # ragged tiles (3 rows per group)
    (3, 4, 10, 9, (3, 3), (2, 1), 1, 1, 1),  # unequal strides: 2x1 phase grids
    (16, 32, 16, 16, (3, 3), 2, 1, 1, 1),  # ResNet downsampling: two vectors per phase row
    (16, 32, 16, 16, (1, 1), 2, 0, 1, 1),  # 1x1 at stride 2: three phases no tap reaches
    (3, 5, 12, 11, (2, 4), (3, 2), (0, 3), (2, 1), 1),  # phases of unequal sizes and taps
    (4, 6, 7, 7, (3, 3), 2, 0, 1, 2),  # odd sizes, no padding: the last row's taps ragged
    (2, 3, 5, 21, (3, 3), 4, 4, 1, 1),  # stride past the kernel: phases without taps
    # Winograd F(2x2, 3x3) (3x3, stride 1, rows of at least one vector of 2x2 tiles)
    (8, 9, 17, 17, (3, 3), 1, 0, 1, 1),  # odd output size: half tiles on two edges
    (9, 8, 33, 35, (3, 3), 1, 1, 1, 1),  # three tile vectors per row, a partial last one
    (8, 8, 20, 40, (3, 3), 1, 2, 1, 1),  # padding 2 (the input gradient's padding 0)
    (10, 9, 19, 31, (3, 3), 1, (0, 1), 1, 1),  # unequal padding, ragged result channels
    (24, 13, 12, 47, (3, 3), 1, 1, 1, 1),  # more source channels than a block's share
    (24, 25, 7, 7, (3, 3), 1, 1, 1, 1),  # flat Winograd: lanes over the image's tiles, odd
    (26, 24, 9, 6, (3, 3), 1, 0, 1, 1),  # flat, no padding, partial last vector of tiles
    (40, 41, 14, 14, (3, 3), 1, 1, 1, 1),  # flat, four vectors of tiles (40+ channels)
    # channel-vector weight gradients (``conv.wgrad_by_channels``): per group with a partial
    # channel vector and a partial column block; several blocks of rows per image
    (32, 48, 9, 21, (3, 3), 1, 1, 1, 2),
    (5, 20, 40, 36, (3, 3), 1, 1, 1, 1),
]


def P(op: str, *xs: Tensor, **attrs: Any) -> Tensor:
    return Tensor._wrap(builder().op(op, [x.node for x in xs], **attrs))


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geom", GEOMS, ids=[str(i) for i in range(len(GEOMS))])
def test_conv_kernels_match_torch(geom: tuple, dtype: Any) -> None:
    C, oc, H, W, ker, stride, padding, dilation, groups = geom
    attrs = dict(stride=_pair(stride), padding=_pair(padding), dilation=_pair(dilation),
                 groups=groups)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((oc, C // groups) + ker).astype(dtype)
    wt = gc.tensor(w)  # a constant of the compiled functions
    kw = dict(stride=attrs["stride"], padding=attrs["padding"], dilation=attrs["dilation"],
              groups=groups)
    tw = torch.tensor(w, dtype=torch.float64)
    fns: dict[str, Any] = {}
    for batch in (3, 1):  # compiled at 3, run at 1 too: the batch dimension is symbolic
        x = rng.standard_normal((batch, C, H, W)).astype(dtype)
        tx = torch.tensor(x, dtype=torch.float64)
        ty = torch.nn.functional.conv2d(tx, tw, **kw)
        gy = rng.standard_normal(tuple(ty.shape)).astype(dtype)
        tgy = torch.tensor(gy, dtype=torch.float64)
        tdx = torch.nn.grad.conv2d_input(tx.shape, tw, tgy, **kw)
        tdw = torch.nn.grad.conv2d_weight(tx, tw.shape, tgy, **kw)
        if not fns:
            fns["fwd"] = gc.compile(lambda a: P("conv2d", a, wt, **attrs), example_args=(x,))
            fns["igrad"] = gc.compile(lambda g: P("conv2d_input_grad", g, wt, input_shape=(
                g.shape[0], C, H, W), **attrs), example_args=(gy,))
            fns["wgrad"] = gc.compile(lambda a, g: P("conv2d_weight_grad", a, g,
                                                     weight_shape=w.shape, **attrs),
                                      example_args=(x, gy))
        tol = 1e-4 if dtype == np.float32 else 1e-10
        for got, ref, what in ((fns["fwd"](x), ty, "conv2d"),
                               (fns["igrad"](gy), tdx, "input grad"),
                               (fns["wgrad"](x, gy), tdw, "weight grad")):
            np.testing.assert_allclose(np.asarray(got), ref.numpy(), rtol=tol, atol=tol,
                                       err_msg=f"{what} batch {batch}")


def test_fast_path_coverage() -> None:
    """Which ops take the implicit GEMM: every stride-1 op, strided forward and weight
    gradient with equal strides; the strided input gradient takes one stride-1 GEMM per
    phase (``strided_igrad``)."""
    from graphc.ir import Builder
    from graphc.ir import dtypes as dt

    g = Builder()
    x = g.input("x", "arg", (2, 4, 9, 8), dt.float32)
    w = g.input("w", "param", (6, 2, 3, 3), dt.float32)
    for stride, fast in ((1, (True, True, True)), (2, (True, False, True))):
        a = dict(stride=(stride, stride), padding=(1, 1), dilation=(1, 1), groups=2)
        y = g.op("conv2d", [x, w], **a)
        dx = g.op("conv2d_input_grad", [y, w], input_shape=(2, 4, 9, 8), **a)
        dw = g.op("conv2d_weight_grad", [x, y], weight_shape=(6, 2, 3, 3), **a)
        got = tuple(conv_lowering.problem(n, True) is not None for n in (y, dx, dw))
        assert got == fast, stride
        assert (conv_lowering.strided_igrad(dx, True) is not None) == (stride > 1)
        # Winograd does not take grouped convolutions
        assert conv_lowering.winograd(y, True) is None


def test_winograd_coverage() -> None:
    """Winograd F(2x2, 3x3) serves 3x3 stride-1 forward and input-gradient convolutions
    with at least one vector of 2x2 tiles per image and 8 channels each side (lanes over a
    row's tiles, or over the image's tiles in row-major order when a row has fewer than a
    vector: ``flat``); never the weight gradient, groups, dilation, strides or other kernel
    sizes (the implicit GEMM does those)."""
    from graphc.ir import Builder
    from graphc.ir import dtypes as dt

    g = Builder()
    for dtype, lanes in ((dt.float32, 16), (dt.float64, 8)):  # lanes with 64-byte vectors
        x = g.input(f"x{lanes}", "arg", (2, 8, 40, 40), dtype)
        for ker, stride, dil, groups, wino in (((3, 3), 1, 1, 1, True), ((3, 3), 2, 1, 1, False),
                                               ((3, 3), 1, 2, 1, False),
                                               ((3, 3), 1, 1, 2, False),
                                               ((5, 5), 1, 1, 1, False)):
            w = g.input(f"w{lanes}{ker}{stride}{dil}{groups}", "param",
                        (8, 8 // groups) + ker, dtype)
            a = dict(stride=(stride, stride), padding=(1, 1), dilation=(dil, dil),
                     groups=groups)
            y = g.op("conv2d", [x, w], **a)
            dx = g.op("conv2d_input_grad", [y, w], input_shape=(2, 8, 40, 40), **a)
            dw = g.op("conv2d_weight_grad", [x, y], weight_shape=tuple(w.shape), **a)
            got = [conv_lowering.winograd(n, True) is not None for n in (y, dx, dw)]
            assert got == [wino, wino, False], (dtype, ker, stride, dil, groups)
        # 28 columns: rows of 14 tiles, flat with 16 lanes; 6x6: 9 tiles, fewer than 16
        for size, flat in ((28, lanes == 16), (6, None if lanes == 16 else True)):
            x2 = g.input(f"narrow{lanes}_{size}", "arg", (2, 48, size, size), dtype)
            w2 = g.input(f"wn{lanes}_{size}", "param", (48, 48, 3, 3), dtype)
            y2 = g.op("conv2d", [x2, w2], stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                      groups=1)
            wg = conv_lowering.winograd(y2, True)
            assert (None if wg is None else wg.flat) == flat, (lanes, size)
        # the flat layout with few channels (the cnn's 8 and 16 at 28x28, 14x14) is the
        # implicit GEMM's; 24 channels take it when an image has at most three tile vectors
        for cin, size, wino in ((8, 28, lanes != 16), (16, 14, False), (24, 14, False),
                                (24, 8, True), (40, 14, True)):
            x4 = g.input(f"flat{lanes}_{cin}_{size}", "arg", (2, cin, size, size), dtype)
            w4 = g.input(f"wfl{lanes}_{cin}_{size}", "param", (cin, cin, 3, 3), dtype)
            y4 = g.op("conv2d", [x4, w4], stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                      groups=1)
            assert (conv_lowering.winograd(y4, True) is not None) == wino, (lanes, cin, size)
        # fewer than WINO_MIN_CHANNELS source or result channels: the implicit GEMM
        for cin, cout in ((1, 16), (16, 4)):
            x3 = g.input(f"few{lanes}_{cin}", "arg", (2, cin, 40, 40), dtype)
            w3 = g.input(f"wf{lanes}_{cin}", "param", (cout, cin, 3, 3), dtype)
            y3 = g.op("conv2d", [x3, w3], stride=(1, 1), padding=(1, 1), dilation=(1, 1),
                      groups=1)
            assert conv_lowering.winograd(y3, True) is None


@pytest.mark.parametrize("width", [10, 43], ids=["narrow", "vectors"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", [dict(kernel=(2, 2), stride=(2, 2)),
                                  dict(kernel=(3, 3), stride=(2, 2)),
                                  dict(kernel=(3, 2), stride=(1, 2), dilation=(2, 1))],
                         ids=["2x2", "3x3s2", "dilated"])
def test_pool_argmax_inside_matches_interpreter(pool: dict, dtype: Any, width: int) -> None:
    """The unrolled max-pool index kernel (codegen/pool.py: windows inside the image) keeps
    the general rule: first maximum in window order, ties to the first, NaN wins; rows of
    43 columns take the vector path (whole vectors of windows, then the scalar tail)."""
    from graphc.codegen import pool as pool_lowering

    attrs = dict(padding=(0, 0), dilation=(1, 1), ceil_mode=False) | pool
    rng = np.random.default_rng(1)
    x = rng.integers(-2, 3, (3, 2, 8, width)).astype(dtype)  # many ties
    x[0, 0, 1, 1] = x[1, 1, 4, 5] = x[2, 0, 3, 3] = x[2, 1, 5, width - 2] = np.nan
    x[2, 1, 0, :] = -np.inf
    x[0, 1, 2, 7:30] = np.inf
    f = lambda a: P("pool_argmax", a, **attrs)  # noqa: E731
    native = gc.compile(f, example_args=(x,))
    ref = gc.compile(f, example_args=(x,), backend="interp")
    np.testing.assert_array_equal(np.asarray(native(x)), np.asarray(ref(x)))
    node = native.variants[-1].graph.outputs[0]
    assert node.op == "pool_argmax" and pool_lowering.inside(node)


@pytest.mark.parametrize("width", [9, 40, 75], ids=["narrow", "vectors", "wide"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pool", [dict(kernel=(3, 3), stride=(2, 2), padding=(1, 1)),
                                  dict(kernel=(3, 3), stride=(1, 1), padding=(1, 1)),
                                  dict(kernel=(2, 3), stride=(2, 1), padding=(1, 1),
                                       ceil_mode=True),
                                  dict(kernel=(3, 3), stride=(2, 3), padding=(1, 1),
                                       dilation=(2, 2), ceil_mode=True),
                                  dict(kernel=(5, 5), stride=(3, 2), padding=(2, 2))],
                         ids=["resnet-stem", "same", "ceil", "dilated-ceil", "5x5"])
def test_pool_argmax_padded_matches_interpreter(pool: dict, dtype: Any, width: int) -> None:
    """Padded windows (``MaxPool2d(3, 2, 1)`` after a ResNet stem): the interior windows run
    unrolled and vectorised, the border ones by the general rule, and every index equals the
    interpreter's and PyTorch's (first maximum in window order, ties to the first, NaN wins,
    taps in the padding skipped) -- including border windows whose in-image taps are all
    -inf or NaN."""
    attrs = dict(padding=(0, 0), dilation=(1, 1), ceil_mode=False) | pool
    rng = np.random.default_rng(2)
    x = rng.integers(-2, 3, (2, 3, 11, width)).astype(dtype)  # many ties
    x[0, 0, 0, :] = -np.inf  # the top border row's taps: all -inf in some windows
    x[0, 1, :, 0] = np.nan  # the left border column: NaN wins
    x[1, 2, 5, width // 2] = x[1, 0, 10, width - 1] = x[0, 2, 3, 1] = np.nan
    x[1, 1, :3, :3] = -np.inf
    f = lambda a: P("pool_argmax", a, **attrs)  # noqa: E731
    native = gc.compile(f, example_args=(x,))
    ref = gc.compile(f, example_args=(x,), backend="interp")
    got = np.asarray(native(x))
    np.testing.assert_array_equal(got, np.asarray(ref(x)))
    tp = torch.nn.functional.max_pool2d(
        torch.from_numpy(x), attrs["kernel"], attrs["stride"], attrs["padding"],
        attrs["dilation"], attrs["ceil_mode"], return_indices=True)[1]
    np.testing.assert_array_equal(got, tp.numpy())
    # the unrolled kernel's column loops ran, not the general kernel's loop nest alone
    assert "pow" in native.ir("llvm")


def test_pool_argmax_padded_threads_bit_identical(tmp_path: Any) -> None:
    """A ResNet stem's ``MaxPool2d(3, 2, 1)`` (with its backward) split over two threads by
    images gives the one-thread indices, values and gradient, and PyTorch's."""
    from _threads import assert_bit_identical, run_per_thread_count

    script = """
import numpy as np, graphc as gc
from graphc import nn
rng = np.random.default_rng(3)
x = rng.integers(-3, 4, (6, 16, 40, 40)).astype(np.float32)
pool = nn.MaxPool2d(3, 2, 1, return_indices=True)
t = gc.tensor(x, requires_grad=True)
def g():
    t.grad = None
    y, i = pool(t)
    (y * y).sum().backward()
    return y, i, t.grad
y, i, dx = gc.compile(g)()
np.savez(OUT, y=np.asarray(y), i=np.asarray(i), dx=np.asarray(dx), x=x)
"""
    runs = run_per_thread_count(tmp_path, script)
    assert_bit_identical(runs, min_arrays=3)
    tx = torch.from_numpy(runs[0]["x"]).requires_grad_(True)
    ty, ti = torch.nn.functional.max_pool2d(tx, 3, 2, 1, return_indices=True)
    (ty * ty).sum().backward()
    np.testing.assert_array_equal(runs[0]["i"], ti.numpy())
    np.testing.assert_array_equal(runs[0]["y"], ty.detach().numpy())
    np.testing.assert_array_equal(runs[0]["dx"], tx.grad.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_kernels_with_512_bit_vectors(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 512-bit kernels (16 float lanes: AVX-512 hosts) on any host: forced here, LLVM
    splits the vectors for narrower units, so the wide tiles, Winograd blocks and phase
    grids run and are checked even where the CPU has no AVX-512."""
    import graphc.runtime.cpu as cpu_runtime

    monkeypatch.setattr(cpu_runtime, "has_avx512", lambda *a, **k: True)
    for geom in ((1, 8, 28, 28, (3, 3), 1, 1, 1, 1),  # implicit GEMM
                 (4, 6, 9, 8, (3, 3), 2, 1, 1, 2),  # phase grids, groups
                 (16, 32, 16, 16, (3, 3), 2, 1, 1, 1),  # strided input gradient
                 (16, 32, 16, 16, (1, 1), 2, 0, 1, 1),  # phases no tap reaches
                 (9, 8, 33, 35, (3, 3), 1, 1, 1, 1),  # Winograd, rows of 18 tiles
                 (40, 41, 14, 14, (3, 3), 1, 1, 1, 1)):  # flat Winograd (7 tiles a row)
        test_conv_kernels_match_torch(geom, dtype)


def test_winograd_non_finite_inputs_stay_in_their_windows() -> None:
    """An infinite input makes exactly the outputs whose windows hold it non-finite, as the
    direct sums do (Winograd may give NaN where they give +-Inf: the documented
    difference); every other output stays finite and equal to PyTorch's."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    x = rng.standard_normal((2, 8, 36, 36)).astype(np.float32)  # rows of 18 tiles
    x[0, 3, 5, 7] = np.inf
    x[1, 0, 0, 35] = -np.inf
    x[1, 6, 12, 2] = np.nan
    attrs = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    wt = gc.tensor(w)
    f = gc.compile(lambda a: P("conv2d", a, wt, **attrs), example_args=(x,))
    got = np.asarray(f(x))
    ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
    assert ".wino" in f.ir("llvm")
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bshape", [(20, 11, 1), (20, 1, 13)], ids=["cols", "rows"])
def test_weight_grad_of_a_broadcast_output_gradient(bshape: tuple, dtype: Any) -> None:
    """The channel-vector weight gradient transposes ``dY`` in register blocks when its rows
    are contiguous and element by element otherwise: a ``dY`` broadcast along its columns
    (column stride 0) takes the second way, one broadcast along its rows the first; both
    agree with PyTorch."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6, 11, 13)).astype(dtype)
    g0 = rng.standard_normal((3,) + bshape).astype(dtype)
    attrs = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1)
    fn = gc.compile(lambda a, g: P("conv2d_weight_grad", a, g.expand(g.shape[0], 20, 11, 13),
                                   weight_shape=(20, 6, 3, 3), **attrs), example_args=(x, g0))
    ref = torch.nn.grad.conv2d_weight(torch.tensor(x, dtype=torch.float64), (20, 6, 3, 3),
                                      torch.tensor(g0, dtype=torch.float64).expand(3, 20, 11, 13),
                                      stride=1, padding=1)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(np.asarray(fn(x, g0)), ref.numpy(), rtol=tol, atol=tol)
    # the register transpose's first shuffle (lanes 0 and 1 of rows 0 and 1 swapped), at the
    # host's vector width (16 float lanes with AVX-512, 8 with AVX2)
    lanes = conv_lowering.lanes_for(np.dtype(dtype).itemsize, fn.variants[0].exe.wide)
    mask = ", ".join(f"i32 {c if c % 2 == 0 else lanes + c - 1}" for c in range(lanes))
    first = f"<{lanes} x i32> <{mask}>"
    assert (first in fn.ir("llvm")) == (bshape[2] != 1)
