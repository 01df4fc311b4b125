"""Convolution and pooling variants against PyTorch: conv1d, transposed convolutions, 1-D
pooling, adaptive pooling, interpolate and the non-constant ``F.pad`` modes; values and
gradients eagerly, and compiled (one compile over two batch sizes, gradients to a parameter)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn

TF = torch.nn.functional
_rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def _eager(gfn: Any, tfn: Any, arrays: list[np.ndarray], kw: dict) -> None:
    gx = [gc.tensor(a, requires_grad=True) for a in arrays]
    tx = [torch.tensor(a, requires_grad=True) for a in arrays]
    gy, ty = gfn(*gx, **kw), tfn(*tx, **kw)
    assert tuple(gy.shape) == tuple(ty.shape)
    w = _r(*ty.shape)
    (gy * gc.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    for i, (a, b) in enumerate(zip(gx, tx)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=f"gradient of argument {i}")


def _compiled(gfn: Any, tfn: Any, shape: tuple, kw: dict, weight: np.ndarray | None = None,
              backend: str | None = None) -> None:
    """``fn(x * p)`` (or ``fn(x, weight)`` with the weight the parameter): one compile, batch
    sizes 2 and 5, output and parameter gradient against PyTorch."""
    p0 = weight if weight is not None else _r(*shape[1:])
    param = nn.Parameter(gc.tensor(p0))

    def call(f: Any, x: Any, p: Any) -> Any:
        return f(x, p, **kw) if weight is not None else f(x * p, **kw)

    @gc.compile(**({} if backend is None else {"backend": backend}))
    def step(x: Any, w: Any) -> Any:
        param.grad = None
        y = call(gfn, x, param)
        (y * w).sum().backward()
        return y

    for batch in (2, 5):
        x = _r(batch, *shape[1:])
        tp = torch.tensor(p0, requires_grad=True)
        ty = call(tfn, torch.tensor(x), tp)
        w = _r(*ty.shape)
        (ty * torch.tensor(w)).sum().backward()
        y = step(gc.tensor(x), gc.tensor(w))
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(param.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert step.compile_count == 1


X1, X2 = _r(3, 4, 9), _r(2, 4, 5, 6)

CONV1D = [
    ((6, 4, 3), {}),
    ((6, 2, 3), {"stride": 2, "padding": 1, "groups": 2}),
    ((4, 4, 2), {"padding": "same", "dilation": 2}),
    ((5, 4, 3), {"padding": "valid", "stride": (3,)}),
]


@pytest.mark.parametrize("wshape,kw", CONV1D, ids=str)
def test_conv1d(wshape: tuple, kw: dict) -> None:
    w, b = _r(*wshape), _r(wshape[0])
    _eager(F.conv1d, TF.conv1d, [X1, w, b], kw)
    _eager(F.conv1d, TF.conv1d, [X1[0], w], kw)  # unbatched


CONVT2D = [
    ((4, 3, 3, 2), {}),
    ((4, 3, 3, 2), {"stride": 2, "padding": 1, "output_padding": 1}),
    ((4, 2, 3, 3), {"stride": (2, 3), "padding": (0, 1), "output_padding": (1, 2),
                    "groups": 2, "dilation": (1, 2)}),
    ((4, 1, 2, 2), {"stride": 2, "groups": 4}),
]


@pytest.mark.parametrize("wshape,kw", CONVT2D, ids=str)
def test_conv_transpose2d(wshape: tuple, kw: dict) -> None:
    w = _r(*wshape)
    b = _r(wshape[1] * kw.get("groups", 1))
    _eager(F.conv_transpose2d, TF.conv_transpose2d, [X2, w, b], kw)
    _eager(F.conv_transpose2d, TF.conv_transpose2d, [X2[0], w], kw)


@pytest.mark.parametrize("kw", [{}, {"stride": 3, "padding": 1, "output_padding": 2},
                                {"stride": 2, "groups": 2, "dilation": 2}], ids=str)
def test_conv_transpose1d(kw: dict) -> None:
    w = _r(4, 3, 3)
    _eager(F.conv_transpose1d, TF.conv_transpose1d, [X1, w, _r(3 * kw.get("groups", 1))], kw)


def test_conv_transpose_errors() -> None:
    with pytest.raises(RuntimeError, match="output padding must be smaller"):
        F.conv_transpose2d(gc.tensor(X2), gc.tensor(_r(4, 3, 3, 3)), output_padding=1)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.conv_transpose2d(gc.tensor(X2[:, :, :1, :1]), gc.tensor(_r(4, 3, 1, 1)), padding=1)
    with pytest.raises(NotImplementedError, match="empty output"):
        F.conv_transpose2d(gc.tensor(X2), gc.tensor(_r(4, 3, 1, 1)), padding=(0, 3))


@pytest.mark.parametrize("kw", [
    {"output_padding": 1, "dilation": 2},
    {"stride": (1, 2), "output_padding": (2, 1), "dilation": (3, 2), "padding": (2, 0)},
    {"stride": 2, "output_padding": 2, "dilation": 3, "padding": 1, "groups": 2},
], ids=str)
def test_conv_transpose2d_output_padding_past_the_stride(kw: dict) -> None:
    """``stride <= output_padding < dilation``, which PyTorch allows (the dilated taps reach
    the extra rows): the gradient of ``x`` padded with ``output_padding // stride`` zero
    rows (a convolution of the result has that many more), eagerly and compiled."""
    g = kw.get("groups", 1)
    w = _r(4, 3 if g == 1 else 2, 3, 3)  # (in, out / groups, kH, kW)
    _eager(F.conv_transpose2d, TF.conv_transpose2d, [X2, w, _r(w.shape[1] * g)], kw)
    _compiled(F.conv_transpose2d, TF.conv_transpose2d, X2.shape, kw, weight=w)


@pytest.mark.parametrize("kw", [{"kernel_size": 3}, {"kernel_size": 3, "stride": 2,
                                                     "padding": 1, "ceil_mode": True},
                                {"kernel_size": 4, "stride": 3, "padding": 2,
                                 "ceil_mode": True, "count_include_pad": False}], ids=str)
def test_avg_pool1d(kw: dict) -> None:
    _eager(F.avg_pool1d, TF.avg_pool1d, [X1], kw)
    _eager(F.avg_pool1d, TF.avg_pool1d, [X1[0]], kw)


@pytest.mark.parametrize("kw", [{"kernel_size": 3}, {"kernel_size": 3, "stride": 2,
                                                     "padding": 1, "ceil_mode": True},
                                {"kernel_size": 2, "dilation": 3}], ids=str)
def test_max_pool1d(kw: dict) -> None:
    _eager(F.max_pool1d, TF.max_pool1d, [X1], kw)
    gv, gi = F.max_pool1d(gc.tensor(X1), return_indices=True, **kw)
    tv, ti = TF.max_pool1d(torch.tensor(X1), return_indices=True, **kw)
    np.testing.assert_array_equal(gi.numpy(), ti.numpy())


@pytest.mark.parametrize("size", [(1, 1), (5, 3), (3, 4), (None, 4), 2, (4, 6)], ids=str)
def test_adaptive_pool2d(size: Any) -> None:
    _eager(F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, [X2], {"output_size": size})
    _eager(F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, [X2[0]], {"output_size": size})
    _eager(F.adaptive_max_pool2d, TF.adaptive_max_pool2d, [X2], {"output_size": size})


@pytest.mark.parametrize("kw", [{"kernel_size": (5, 3)}, {"kernel_size": (5, 3), "stride": 1},
                                {"kernel_size": (5, 3), "ceil_mode": True, "stride": 2},
                                {"kernel_size": (5, 3), "divisor_override": 4}], ids=str)
def test_avg_pool2d_whole_map(kw: dict) -> None:
    x = _r(2, 3, 5, 3)
    _eager(F.avg_pool2d, TF.avg_pool2d, [x], kw)
    _eager(F.avg_pool2d, TF.avg_pool2d, [x[0]], kw)


TILING = [({"kernel_size": 2}, (2, 3, 8, 12)), ({"kernel_size": (2, 3)}, (2, 3, 8, 12)),
          ({"kernel_size": 4, "divisor_override": 5}, (2, 3, 8, 12)),
          ({"kernel_size": 4, "ceil_mode": True}, (2, 3, 8, 12)),
          ({"kernel_size": 8}, (2, 2, 16, 32)), ({"kernel_size": 16}, (2, 2, 32, 32)),
          ({"kernel_size": 3, "stride": 3, "padding": 0}, (2, 3, 9, 6))]


@pytest.mark.parametrize("kw,shape", TILING, ids=str)
def test_avg_pool2d_tiling_windows(kw: dict, shape: tuple) -> None:
    """Windows that tile the map run as sums over a reshape, not a convolution (their input
    gradient a broadcast): eager and compiled (batch 2 and 5, one compile) against PyTorch,
    values and gradients; 8x8 and 16x16 windows exercise the loop splits of the broadcast
    (a reshape that only adds unit dims no longer blocks them)."""
    x = _r(*shape)
    _eager(F.avg_pool2d, TF.avg_pool2d, [x], kw)
    _eager(F.avg_pool2d, TF.avg_pool2d, [x[0]], kw)
    _compiled(F.avg_pool2d, TF.avg_pool2d, shape, kw)
    step = gc.compile(lambda a: F.avg_pool2d(a, **kw))
    step(gc.tensor(x))
    assert "conv2d" not in step.ir("fused")


@pytest.mark.parametrize("size", [7, (4, 2), 1])
def test_adaptive_avg_pool2d_dividing_matches_torch_compiled(size: Any) -> None:
    """``AdaptiveAvgPool2d`` whose output divides its input (the tiling windows above), and
    the global one, compiled against PyTorch."""
    _compiled(F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, (2, 3, 28, 28),
              {"output_size": size})


def test_adaptive_max_pool2d_indices() -> None:
    gv, gi = F.adaptive_max_pool2d(gc.tensor(X2), (5, 2), return_indices=True)
    tv, ti = TF.adaptive_max_pool2d(torch.tensor(X2), (5, 2), return_indices=True)
    np.testing.assert_array_equal(gi.numpy(), ti.numpy())
    # output sizes that do not divide the input: the gathered windows give indices too
    gv, gi = F.adaptive_max_pool2d(gc.tensor(X2), (4, 4), return_indices=True)
    tv, ti = TF.adaptive_max_pool2d(torch.tensor(X2), (4, 4), return_indices=True)
    np.testing.assert_array_equal(gi.numpy(), ti.numpy())
    np.testing.assert_array_equal(gv.numpy(), tv.numpy())


ADAPTIVE_MAX = [
    (F.adaptive_max_pool1d, TF.adaptive_max_pool1d, (2, 3, 11), 4),
    (F.adaptive_max_pool2d, TF.adaptive_max_pool2d, (2, 3, 7, 9), (3, 4)),
    (F.adaptive_max_pool2d, TF.adaptive_max_pool2d, (2, 3, 7, 9), (7, 3)),  # divides: max_pool
    (F.adaptive_max_pool3d, TF.adaptive_max_pool3d, (2, 2, 5, 6, 7), (2, 4, 3)),
]


@pytest.mark.parametrize("gfn,tfn,shape,size", ADAPTIVE_MAX, ids=["1d", "2d", "2d-div", "3d"])
@pytest.mark.parametrize("nan", [False, True], ids=["ties", "nan"])
def test_adaptive_max_pool_ties_and_nan_route_like_aten(gfn: Any, tfn: Any, shape: tuple,
                                                        size: Any, nan: bool) -> None:
    """Tied maxima (a ReLU's zeros) send the whole gradient to the first one and a window
    with NaNs keeps its last NaN, as ATen's index-based kernels do: values, indices and
    gradients equal PyTorch's, eagerly and compiled. The gathered-window path used to reduce
    with ``amax``, whose gradient splits among ties: a ResNet head's ``AdaptiveMaxPool2d``
    after a ReLU trained differently from PyTorch."""
    x = np.maximum(np.round(_rng.standard_normal(shape) * 2) / 2, 0).astype(np.float32)
    if nan:
        x.reshape(-1)[::13] = np.nan
    w = _r(*tfn(torch.tensor(x), size).shape)
    tx = torch.tensor(x, requires_grad=True)
    tv, ti = tfn(tx, size, return_indices=True)
    (tv * torch.tensor(w)).nan_to_num().sum().backward()
    gx = gc.tensor(x, requires_grad=True)
    gv, gi = gfn(gx, size, return_indices=True)
    (gv * gc.tensor(w)).nan_to_num().sum().backward()
    np.testing.assert_array_equal(gi.numpy(), ti.numpy())
    np.testing.assert_array_equal(gv.numpy(), tv.detach().numpy())
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    p = nn.Parameter(gc.tensor(np.ones(shape[1:], np.float32)))

    @gc.compile
    def step(a: Any, wt: Any) -> Any:
        p.grad = None
        v, i = gfn(a * p, size, return_indices=True)
        (v * wt).nan_to_num().sum().backward()
        return v, i

    cv, ci = step(gc.tensor(x), gc.tensor(w))
    np.testing.assert_array_equal(ci.numpy(), ti.numpy())
    np.testing.assert_array_equal(cv.numpy(), tv.detach().numpy())
    tp = torch.ones(shape[1:], requires_grad=True)
    (tfn(torch.tensor(x) * tp, size) * torch.tensor(w)).nan_to_num().sum().backward()
    np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size", [1, 3, 4, 9, 12])
def test_adaptive_avg_pool1d(size: int) -> None:
    _eager(F.adaptive_avg_pool1d, TF.adaptive_avg_pool1d, [X1], {"output_size": size})


INTERP = [
    {"size": (7, 4), "mode": "nearest"},
    {"scale_factor": 2, "mode": "nearest"},
    {"scale_factor": 1.7, "mode": "nearest"},
    {"scale_factor": (0.5, 1.5), "mode": "nearest-exact"},
    {"size": 8, "mode": "nearest-exact"},
    {"size": (7, 4), "mode": "bilinear", "align_corners": True},
    {"size": (7, 4), "mode": "bilinear", "align_corners": False},
    {"size": (1, 1), "mode": "bilinear", "align_corners": True},
    {"scale_factor": 1.7, "mode": "bilinear"},
    {"scale_factor": 2.5, "mode": "bilinear", "align_corners": True},
    {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True},
    {"size": (7, 4), "mode": "bicubic", "align_corners": False},
    {"size": (9, 11), "mode": "bicubic", "align_corners": True},
    {"size": (1, 1), "mode": "bicubic", "align_corners": True},
    {"scale_factor": 1.7, "mode": "bicubic"},
    {"scale_factor": 0.6, "mode": "bicubic"},
    {"size": (3, 4), "mode": "area"},
    {"size": (7, 10), "mode": "area"},
    {"scale_factor": 0.5, "mode": "area"},
]
X3 = _r(1, 2, 3, 4, 5)


@pytest.mark.parametrize("kw", INTERP, ids=str)
def test_interpolate(kw: dict) -> None:
    _eager(F.interpolate, TF.interpolate, [X2], kw)


@pytest.mark.parametrize("kw", [{"scale_factor": 2.5, "mode": "linear"},
                                {"size": 4, "mode": "linear", "align_corners": True},
                                {"size": 13, "mode": "nearest"}], ids=str)
def test_interpolate_1d(kw: dict) -> None:
    _eager(F.interpolate, TF.interpolate, [X1], kw)


@pytest.mark.parametrize("kw", [{"scale_factor": 1.5, "mode": "trilinear"},
                                {"size": (2, 7, 3), "mode": "trilinear", "align_corners": True},
                                {"size": (2, 2, 3), "mode": "area"},
                                {"scale_factor": 2, "mode": "nearest"}], ids=str)
def test_interpolate_3d(kw: dict) -> None:
    _eager(F.interpolate, TF.interpolate, [X3], kw)


@pytest.mark.parametrize("kw", [{"size": (7, 9), "mode": "bicubic"},
                                {"size": (3, 2), "mode": "area"}], ids=str)
def test_interpolate_compiled(kw: dict) -> None:
    _compiled(F.interpolate, TF.interpolate, (2, 4, 5, 6), kw)


def test_interpolate_unsupported_options() -> None:
    for mode in ("bilinear", "bicubic"):
        with pytest.raises(NotImplementedError, match="antialias"):
            F.interpolate(gc.tensor(X2), scale_factor=2, mode=mode, antialias=True)
    with pytest.raises(ValueError, match="Anti-alias"):
        F.interpolate(gc.tensor(X2), scale_factor=2, mode="nearest", antialias=True)
    with pytest.raises(NotImplementedError, match="trilinear"):
        F.interpolate(gc.tensor(X2), scale_factor=2, mode="trilinear")
    for mode in ("nearest", "area"):
        with pytest.raises(ValueError, match="align_corners"):
            F.interpolate(gc.tensor(X2), scale_factor=2, mode=mode, align_corners=True)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pads,x", [((2, 1, 0, 3), X2), ((2, 3), X1), ((1, 0), X2[0]),
                                    ((3, 3, 4, 2), X2[0])], ids=str)
def test_pad_modes(mode: str, pads: tuple, x: np.ndarray) -> None:
    _eager(F.pad, TF.pad, [x], {"pad": pads, "mode": mode})


@pytest.mark.parametrize("pads,value", [((2, 1, 0, 3), 1.5), ((2, 1, -1, 3), -2.0),
                                        ((1, 1, 1, 1, 1, 1), 0.25)], ids=str)
def test_pad_constant_value(pads: tuple, value: float) -> None:
    _eager(F.pad, TF.pad, [X2], {"pad": pads, "value": value})


def test_pad_errors() -> None:
    with pytest.raises(RuntimeError):
        F.pad(gc.tensor(X1), (9, 0), mode="reflect")
    with pytest.raises(NotImplementedError, match="'foo'"):
        F.pad(gc.tensor(X1), (1, 0), mode="foo")


@pytest.mark.parametrize("shape,pads,mode", [
    ((2, 3, 1, 1), (2, -2, -2, -2), "constant"), ((1, 2, 1, 2), (0, 2, -2, 1), "constant"),
    ((1, 2, 3, 2), (0, 0, -2, -2), "constant"), ((2, 3, 5, 1), (0, -2, 3, 1), "replicate"),
    ((2, 2, 1, 6), (-2, -1, -1, -2), "reflect"), ((2, 2, 3, 6), (-4, -3, 0, 0), "circular"),
], ids=str)
def test_pad_negative_past_the_dim_raises_atens_error(shape: tuple, pads: tuple,
                                                      mode: str) -> None:
    """Negative pads that crop past a dim (or leave a negative size) raise ATen's error
    before anything is padded; a constant pad returned a tensor of the wrong size (2 wide
    for ``1 + 2 - 2``), the other modes an empty one."""
    x = np.zeros(shape, np.float32)
    with pytest.raises(RuntimeError) as want:
        TF.pad(torch.tensor(x), pads, mode=mode)
    with pytest.raises(RuntimeError) as got:
        F.pad(gc.tensor(x), pads, mode=mode)
    if mode != "reflect":  # (ATen's reflect says "numel: integer multiplication overflow")
        assert str(got.value) == str(want.value)
    # crops that stay inside the dim: same shape and values as PyTorch's
    ok = (0, 0, -1, -1) if mode == "constant" else (-1, -1, 0, 0)
    y = np.arange(np.prod((2, 2, 3, 6)), dtype=np.float32).reshape(2, 2, 3, 6)
    np.testing.assert_array_equal(F.pad(gc.tensor(y), ok, mode=mode).numpy(),
                                  TF.pad(torch.tensor(y), ok, mode=mode).numpy())



def test_pad_negative_on_the_symbolic_batch_is_checked_per_call() -> None:
    """A crop of the (symbolic) batch dim: the compiled step checks the size at each call,
    as eager raises for it; it returned a 0-row result for one row cropped by two."""
    f = gc.compile(lambda a: F.pad(a, [0, 0, 0, 0, 0, -2]))
    assert f(np.ones((4, 3, 2), np.float32)).shape == (2, 3, 2)
    with pytest.raises(RuntimeError):
        TF.pad(torch.ones(1, 3, 2), [0, 0, 0, 0, 0, -2])
    with pytest.raises(RuntimeError):
        F.pad(gc.tensor(np.ones((1, 3, 2), np.float32)), [0, 0, 0, 0, 0, -2])
    with pytest.raises(ValueError, match=r"padding \(0, -2\) leaves a negative size"):
        f(np.ones((1, 3, 2), np.float32))

# -- modules ---------------------------------------------------------------------------------
MODULES = [
    ("Conv1d", (4, 6, 3), {"stride": 2, "padding": 1}, (3, 4, 9)),
    ("ConvTranspose1d", (4, 6, 3), {"stride": 2, "output_padding": 1}, (3, 4, 9)),
    ("ConvTranspose2d", (4, 6, 3), {"stride": 2, "groups": 2, "bias": False}, (2, 4, 5, 6)),
    ("MaxPool1d", (3,), {"stride": 2}, (3, 4, 9)),
    ("AvgPool1d", (3,), {"stride": 2, "padding": 1}, (3, 4, 9)),
    ("AdaptiveAvgPool1d", (4,), {}, (3, 4, 9)),
    ("AdaptiveAvgPool2d", ((3, 4),), {}, (2, 4, 5, 6)),
    ("AdaptiveMaxPool2d", (3,), {}, (2, 4, 5, 6)),
    ("Upsample", (), {"scale_factor": 2, "mode": "bilinear"}, (2, 4, 5, 6)),
    ("UpsamplingNearest2d", (), {"size": (7, 3)}, (2, 4, 5, 6)),
    ("UpsamplingBilinear2d", (), {"scale_factor": 2}, (2, 4, 5, 6)),
    ("Flatten", (1, 2), {}, (2, 4, 5, 6)),
    ("Unflatten", (1, (2, 2)), {}, (2, 4, 5, 6)),
]


@pytest.mark.parametrize("name,args,kw,shape", MODULES, ids=lambda v: v if isinstance(v, str)
                         else "")
def test_modules(name: str, args: tuple, kw: dict, shape: tuple) -> None:
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(*args, **kw)
    gm = getattr(nn, name)(*args, **kw)
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    assert set(gm.state_dict()) == set(sd)
    for k, v in gm.state_dict().items():
        assert tuple(np.asarray(v).shape) == sd[k].shape, k
    gm.load_state_dict(sd)
    x = _r(*shape)
    np.testing.assert_allclose(gm(gc.tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


def test_conv_transpose_output_size() -> None:
    torch.manual_seed(0)
    tm = torch.nn.ConvTranspose2d(4, 3, 3, stride=3, padding=1)
    gm = nn.ConvTranspose2d(4, 3, 3, stride=3, padding=1)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    for size in ((13, 16), (14, 17), (2, 4, 15, 18)):
        got = gm(gc.tensor(X2), output_size=size)
        want = tm(torch.tensor(X2), output_size=size)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="output size"):
        gm(gc.tensor(X2), output_size=(16, 16))


def test_init_matches_torch() -> None:
    torch.manual_seed(3)
    tm = torch.nn.ConvTranspose2d(4, 6, 3, groups=2)
    gc.manual_seed(3)
    gm = nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert tuple(gm.weight.shape) == tuple(tm.weight.shape)
    assert repr(gm) == repr(tm)


# -- compiled --------------------------------------------------------------------------------
COMPILED = [
    ("conv1d", (3, 4, 9), {"stride": 2, "padding": 1}, (6, 4, 3)),
    ("conv_transpose2d", (2, 4, 5, 6), {"stride": 2, "padding": 1, "output_padding": 1,
                                        "groups": 2}, (4, 3, 3, 2)),
    ("conv_transpose1d", (3, 4, 9), {"stride": 2}, (4, 3, 3)),
    ("avg_pool1d", (3, 4, 9), {"kernel_size": 3, "stride": 2, "padding": 1}, None),
    ("max_pool1d", (3, 4, 9), {"kernel_size": 3, "stride": 2}, None),
    ("adaptive_avg_pool2d", (2, 4, 5, 6), {"output_size": (3, 4)}, None),
    ("adaptive_avg_pool2d", (2, 4, 6, 6), {"output_size": (3, 2)}, None),
    ("adaptive_avg_pool1d", (3, 4, 9), {"output_size": 4}, None),
    # one window over the whole map: a spatial sum, not a strided depthwise convolution
    ("adaptive_avg_pool2d", (2, 4, 5, 6), {"output_size": 1}, None),
    ("avg_pool2d", (2, 4, 5, 6), {"kernel_size": (5, 6), "stride": 3}, None),
    ("avg_pool2d", (2, 4, 5, 6), {"kernel_size": (5, 6), "divisor_override": 7}, None),
    ("adaptive_max_pool2d", (2, 4, 5, 6), {"output_size": (3, 4)}, None),
    ("interpolate", (2, 4, 5, 6), {"scale_factor": 1.7, "mode": "nearest"}, None),
    ("interpolate", (2, 4, 5, 6), {"size": (7, 4), "mode": "bilinear"}, None),
    ("interpolate", (2, 4, 5, 6), {"scale_factor": 2, "mode": "bilinear",
                                   "align_corners": True}, None),
    ("pad", (2, 4, 5, 6), {"pad": (2, 1, 0, 3), "mode": "reflect"}, None),
    ("pad", (2, 4, 5, 6), {"pad": (2, 1, 1, 3), "mode": "replicate"}, None),
    ("pad", (3, 4, 9), {"pad": (2, 3), "mode": "circular"}, None),
    ("pad", (2, 4, 5, 6), {"pad": (2, 1, 0, 3), "value": 1.5}, None),
]


@pytest.mark.parametrize("backend", [None, "interp"])
@pytest.mark.parametrize("name,shape,kw,wshape", COMPILED,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_compiled(name: str, shape: tuple, kw: dict, wshape: Any, backend: Any) -> None:
    _compiled(getattr(F, name), getattr(TF, name), shape, kw,
              None if wshape is None else _r(*wshape), backend)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("name,args,kw,shape", [
    ("Conv2d", (4, 6, 3), {"padding": (1, 2)}, (2, 4, 5, 6)),
    ("Conv2d", (4, 6, (3, 2)), {"padding": "same", "dilation": 2}, (2, 4, 5, 6)),
    ("Conv1d", (4, 6, 3), {"padding": 2, "stride": 2}, (3, 4, 9)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_conv_padding_modes(name: str, args: tuple, kw: dict, shape: tuple, mode: str) -> None:
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(*args, padding_mode=mode, **kw)
    gm = getattr(nn, name)(*args, padding_mode=mode, **kw)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = _r(*shape)
    gx, tx = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    gy, ty = gm(gx), tm(tx)
    np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    gy.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gm.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-4,
                               atol=1e-4)


def test_conv_padding_mode_errors() -> None:
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(2, 2, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="zeros"):
        nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")


POOL_ERRORS = [
    {"kernel_size": 0}, {"kernel_size": 2, "stride": 0}, {"kernel_size": -1},
    {"kernel_size": 2, "stride": -1}, {"kernel_size": 2, "padding": -1},
    {"kernel_size": 3, "padding": (2, 0)}, {"kernel_size": (3, 5), "padding": (0, 3)},
    {"kernel_size": 6}, {"kernel_size": 5, "stride": 2, "padding": 2, "dilation": 3},
    {"kernel_size": 2, "dilation": 0}, {"kernel_size": 3, "dilation": 3},
    {"kernel_size": (3, 5), "padding": (0, 3), "dilation": 2},
]


@pytest.mark.parametrize("kind,kw", [(kind, kw) for kind in ("max", "avg") for kw in POOL_ERRORS
                                     if kind == "max" or "dilation" not in kw], ids=str)
def test_pool2d_argument_errors_are_atens(kind: str, kw: dict) -> None:
    """A zero stride or dilation, a negative or too large padding, a non-positive kernel
    and an empty output raise ATen's RuntimeError with its words, before anything is built.
    Before, ``max_pool2d`` returned an empty tensor for an empty output and pooled with a
    zero dilation; a zero stride ended in a ZeroDivisionError."""
    gfn, tfn = (F.max_pool2d, TF.max_pool2d) if kind == "max" else (F.avg_pool2d, TF.avg_pool2d)
    x = np.zeros((1, 2, 5, 5), np.float32)
    with pytest.raises(RuntimeError) as want:
        tfn(torch.tensor(x), **kw)
    with pytest.raises(RuntimeError) as got:
        gfn(gc.tensor(x), **kw)
    assert str(got.value) == str(want.value)
