"""The 3-D layers against PyTorch: ``conv3d`` / ``conv_transpose3d`` (composed of the 2-D
convolutions), the 3-D pools, ``BatchNorm3d`` / ``InstanceNorm3d`` and 5-D ``interpolate``.
Values and gradients eagerly; compiled (an SGD step over two batch sizes, one compile) for
the functional forms; the modules' parameters, repr, initialisation and ``load_state_dict``;
a small 3-D CNN trained for five steps; PyTorch's exception types for bad arguments; the step
lowered to PTX (and run on a GPU where there is one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim
from graphc.runtime import cuda_runtime as cuda

TF = torch.nn.functional
_rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def _eager(gfn: Any, tfn: Any, arrays: list[np.ndarray], kw: dict) -> None:
    """Output (and indices, for a tuple result) and the gradient of every argument."""
    gx = [gc.tensor(a, requires_grad=True) for a in arrays]
    tx = [torch.tensor(a, requires_grad=True) for a in arrays]
    gy, ty = gfn(*gx, **kw), tfn(*tx, **kw)
    if isinstance(ty, tuple):
        np.testing.assert_array_equal(gy[1].numpy(), ty[1].numpy(), err_msg="indices")
        gy, ty = gy[0], ty[0]
    assert tuple(gy.shape) == tuple(ty.shape)
    w = _r(*ty.shape)
    (gy * gc.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    for i, (a, b) in enumerate(zip(gx, tx)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=f"gradient of argument {i}")


def _compiled(gfn: Any, tfn: Any, shape: tuple, kw: dict, params: list[np.ndarray],
              backend: str | None = None) -> None:
    """An SGD step on ``fn(x * p, *params)``: ``p`` (shaped as one sample) carries the input
    gradient, ``params`` (weight, bias) their own. One compile, batch sizes 2 and 3; the
    output, every gradient and the updated parameters against PyTorch."""
    p0 = [_r(*shape[1:])] + params
    gps = [nn.Parameter(gc.tensor(a)) for a in p0]
    tps = [torch.tensor(a, requires_grad=True) for a in p0]
    gopt, topt = optim.SGD(gps, lr=0.05), torch.optim.SGD(tps, lr=0.05)

    @gc.compile(**({} if backend is None else {"backend": backend}))
    def step(x: Any, t: Any) -> Any:
        gopt.zero_grad()
        y = gfn(x * gps[0], *gps[1:], **kw)
        (y * t).sum().backward()
        gopt.step()
        return y

    for batch in (2, 3):
        x = _r(batch, *shape[1:])
        topt.zero_grad()
        ty = tfn(torch.tensor(x) * tps[0], *tps[1:], **kw)
        t = _r(*ty.shape)
        (ty * torch.tensor(t)).sum().backward()
        topt.step()
        y = step(gc.tensor(x), gc.tensor(t))
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
        for i, (g, tp) in enumerate(zip(gps, tps)):
            np.testing.assert_allclose(g.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-4,
                                       err_msg=f"gradient of parameter {i}")
            np.testing.assert_allclose(g.numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-5,
                                       err_msg=f"parameter {i} after the step")
    assert step.compile_count == 1


X = (2, 4, 5, 6, 7)

# (input shape, weight shape, kwargs, bias)
CONV3D = [
    (X, (6, 4, 3, 3, 3), {}, True),
    (X, (6, 4, 1, 1, 1), {"stride": 2}, True),  # 1x1x1
    (X, (6, 2, 3, 2, 3), {"stride": (2, 1, 3), "padding": (1, 0, 2), "dilation": (2, 1, 1),
                          "groups": 2}, True),
    (X, (6, 4, 3, 3, 3), {"padding": "same"}, True),
    (X, (6, 4, 2, 2, 4), {"padding": "same", "dilation": (1, 2, 1)}, False),  # even kernel
    (X, (4, 1, 3, 3, 3), {"padding": 2, "dilation": 2, "groups": 4}, True),  # depthwise
    (X, (6, 4, 3, 1, 3), {"padding": "valid", "stride": (3,)}, True),
    ((1, 4, 1, 3, 3), (6, 4, 2, 1, 1), {"padding": (3, 0, 0), "dilation": 5}, True),  # no tap
    ((4, 5, 6, 7), (6, 4, 3, 3, 3), {"stride": 2, "padding": 1}, True),  # unbatched
    ((4, 5, 6, 7), (6, 4, 1, 1, 1), {}, False),
]


@pytest.mark.parametrize("xshape,wshape,kw,bias", CONV3D, ids=str)
def test_conv3d(xshape: tuple, wshape: tuple, kw: dict, bias: bool) -> None:
    args = [_r(*xshape), _r(*wshape)] + ([_r(wshape[0])] if bias else [])
    _eager(F.conv3d, TF.conv3d, args, kw)


CONVT3D = [
    ((2, 4, 3, 4, 5), (4, 3, 3, 3, 3), {}, True),
    ((2, 4, 3, 4, 5), (4, 3, 3, 2, 3), {"stride": (2, 3, 1), "padding": (1, 0, 1),
                                        "output_padding": (1, 2, 0), "groups": 2,
                                        "dilation": (1, 1, 2)}, True),
    ((2, 4, 3, 4, 5), (4, 3, 1, 1, 1), {"stride": 2}, True),  # 1x1x1
    ((2, 4, 3, 4, 5), (4, 3, 3, 3, 3), {"stride": 2, "padding": 2, "output_padding": 1,
                                        "dilation": 3}, False),
    # stride <= output_padding < dilation: allowed by PyTorch, not by conv_transpose2d
    ((2, 4, 3, 4, 5), (4, 3, 3, 3, 3), {"output_padding": 1, "dilation": 2}, True),
    ((1, 4, 2, 2, 2), (4, 3, 1, 1, 1), {"stride": 5, "padding": 2}, True),  # bias only
    ((4, 3, 4, 5), (4, 2, 2, 3, 2), {"stride": 2, "groups": 2}, True),  # unbatched
]


@pytest.mark.parametrize("xshape,wshape,kw,bias", CONVT3D, ids=str)
def test_conv_transpose3d(xshape: tuple, wshape: tuple, kw: dict, bias: bool) -> None:
    args = [_r(*xshape), _r(*wshape)]
    if bias:
        args.append(_r(wshape[1] * kw.get("groups", 1)))
    _eager(F.conv_transpose3d, TF.conv_transpose3d, args, kw)


MAXPOOL = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": (2, 3, 2), "stride": (1, 2, 3), "padding": (1, 1, 0),
     "dilation": (2, 1, 2)},
    {"kernel_size": (3, 2, 2), "stride": (2, 1, 2), "ceil_mode": True},
]


@pytest.mark.parametrize("kw", MAXPOOL, ids=str)
def test_max_pool3d(kw: dict) -> None:
    x = _r(*X)
    _eager(F.max_pool3d, TF.max_pool3d, [x], kw)
    _eager(F.max_pool3d, TF.max_pool3d, [x], dict(kw, return_indices=True))
    _eager(F.max_pool3d, TF.max_pool3d, [x[1]], dict(kw, return_indices=True))  # unbatched


AVGPOOL = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
     "count_include_pad": False},
    {"kernel_size": (2, 3, 2), "stride": (1, 2, 3), "padding": 1, "divisor_override": 5},
    {"kernel_size": (3, 2, 4), "stride": (2, 3, 2), "padding": (1, 1, 2), "ceil_mode": True,
     "count_include_pad": False, "divisor_override": 7},
]


@pytest.mark.parametrize("kw", AVGPOOL, ids=str)
def test_avg_pool3d(kw: dict) -> None:
    x = _r(*X)
    _eager(F.avg_pool3d, TF.avg_pool3d, [x], kw)
    _eager(F.avg_pool3d, TF.avg_pool3d, [x[0]], kw)


@pytest.mark.parametrize("size", [(1, 1, 1), (2, 3, 4), (5, 6, 7), (3, None, 2), 4, (5, 2, 3),
                                  (4, 4, 5)], ids=str)
def test_adaptive_pool3d(size: Any) -> None:
    x = _r(*X)
    _eager(F.adaptive_avg_pool3d, TF.adaptive_avg_pool3d, [x], {"output_size": size})
    _eager(F.adaptive_max_pool3d, TF.adaptive_max_pool3d, [x], {"output_size": size})
    _eager(F.adaptive_avg_pool3d, TF.adaptive_avg_pool3d, [x[0]], {"output_size": size})
    _eager(F.adaptive_max_pool3d, TF.adaptive_max_pool3d, [x[0]], {"output_size": size})


def test_adaptive_max_pool3d_indices() -> None:
    x = _r(*X)
    _eager(F.adaptive_max_pool3d, TF.adaptive_max_pool3d, [x],
           {"output_size": (5, 2, 7), "return_indices": True})
    # output sizes that do not divide the input: the gathered windows give indices too
    gv, gi = F.adaptive_max_pool3d(gc.tensor(x), (3, 4, 4), return_indices=True)
    tv, ti = TF.adaptive_max_pool3d(torch.tensor(x), (3, 4, 4), return_indices=True)
    np.testing.assert_array_equal(gi.numpy(), ti.numpy())
    np.testing.assert_array_equal(gv.numpy(), tv.numpy())


INTERP5D = [
    {"scale_factor": 2, "mode": "nearest"},
    {"size": (3, 9, 4), "mode": "nearest"},
    {"scale_factor": (1.5, 0.5, 2), "mode": "nearest-exact"},
    {"scale_factor": 1.5, "mode": "trilinear"},
    {"size": (7, 4, 9), "mode": "trilinear", "align_corners": True},
    {"size": (7, 4, 9), "mode": "trilinear", "align_corners": False},
]


@pytest.mark.parametrize("kw", INTERP5D, ids=str)
def test_interpolate_5d(kw: dict) -> None:
    _eager(F.interpolate, TF.interpolate, [_r(*X)], kw)


# -- compiled: one SGD step, batch 2 then 3, one compile -------------------------------------
COMPILED = [
    ("conv3d", {"stride": (2, 1, 1), "padding": 1, "groups": 2}, [(6, 2, 3, 3, 3), (6,)]),
    ("conv3d", {"padding": "same", "dilation": (2, 1, 1)}, [(5, 4, 2, 3, 3)]),
    ("conv_transpose3d", {"stride": 2, "padding": 1, "output_padding": 1},
     [(4, 3, 3, 3, 2), (3,)]),
    ("max_pool3d", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, []),
    ("avg_pool3d", {"kernel_size": (2, 3, 3), "stride": 2, "padding": 1,
                    "count_include_pad": False}, []),
    ("avg_pool3d", {"kernel_size": 2, "ceil_mode": True, "divisor_override": 3}, []),
    ("adaptive_avg_pool3d", {"output_size": (3, 4, 5)}, []),
    ("adaptive_max_pool3d", {"output_size": (3, 4, 5)}, []),
    ("interpolate", {"size": (7, 4, 9), "mode": "trilinear", "align_corners": True}, []),
]


@pytest.mark.parametrize("name,kw,pshapes", COMPILED, ids=lambda v: v if isinstance(v, str)
                         else "")
def test_compiled(name: str, kw: dict, pshapes: list) -> None:
    _compiled(getattr(F, name), getattr(TF, name), X, kw, [_r(*s) for s in pshapes])


@pytest.mark.parametrize("name,kw,pshapes", [COMPILED[0], COMPILED[2], COMPILED[3]],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_compiled_interpreter(name: str, kw: dict, pshapes: list) -> None:
    _compiled(getattr(F, name), getattr(TF, name), X, kw, [_r(*s) for s in pshapes], "interp")


# -- modules ---------------------------------------------------------------------------------
MODULES = [
    ("Conv3d", (4, 6, 3), {"stride": 2, "padding": 1}, X),
    ("Conv3d", (4, 6, (1, 3, 2)), {"groups": 2, "bias": False, "dilation": (1, 2, 1)}, X),
    ("Conv3d", (4, 6, 3), {"padding": "same"}, X[1:]),
    ("ConvTranspose3d", (4, 6, 3), {"stride": 2, "output_padding": 1, "groups": 2}, X),
    ("ConvTranspose3d", (4, 3, (2, 3, 1)), {"padding": (1, 0, 0), "bias": False}, X[1:]),
    ("MaxPool3d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}, X),
    ("MaxPool3d", ((2, 3, 2),), {"dilation": (1, 1, 2)}, X[1:]),
    ("AvgPool3d", (2,), {"padding": 1, "count_include_pad": False}, X),
    ("AvgPool3d", (3,), {"stride": 2, "divisor_override": 4}, X[1:]),
    ("AdaptiveAvgPool3d", ((3, None, 4),), {}, X),
    ("AdaptiveMaxPool3d", (3,), {}, X),
    ("BatchNorm3d", (4,), {}, X),
    ("BatchNorm3d", (4,), {"affine": False, "momentum": None}, X),
    ("BatchNorm3d", (4,), {"bias": False}, X),
    ("InstanceNorm3d", (4,), {}, X),
    ("InstanceNorm3d", (4,), {"affine": True, "track_running_stats": True}, X[1:]),
    ("Upsample", (), {"scale_factor": 2, "mode": "trilinear"}, X),
    ("Upsample", (), {"size": (3, 4, 9), "mode": "nearest"}, X),
]


@pytest.mark.parametrize("name,args,kw,shape", MODULES,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_modules(name: str, args: tuple, kw: dict, shape: tuple) -> None:
    """Same repr and state_dict (names, shapes, dtypes); PyTorch's loaded, the output and the
    input gradient in training mode, then in eval mode (running statistics)."""
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(*args, **kw)
    gm = getattr(nn, name)(*args, **kw)
    assert repr(gm) == repr(tm)
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    gsd = gm.state_dict()
    assert list(gsd) == list(sd)
    for k, v in gsd.items():
        assert np.asarray(v).shape == sd[k].shape and np.asarray(v).dtype == sd[k].dtype, k
    gm.load_state_dict({k: _r(*v.shape) if v.dtype == np.float32 and k != "running_var"
                        else v for k, v in sd.items()})
    tm.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in gm.state_dict().items()})
    for train in (True, False):
        tm.train(train)
        gm.train(train)
        x = _r(*shape)
        gx, tx = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        gy, ty = gm(gx), tm(tx)
        np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
        w = _r(*ty.shape)
        (gy * gc.tensor(w)).sum().backward()
        (ty * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
        for k, v in tm.state_dict().items():
            np.testing.assert_allclose(np.asarray(gm.state_dict()[k]), v.numpy(), rtol=1e-4,
                                       atol=1e-5, err_msg=k)


@pytest.mark.parametrize("name,args,kw", [
    ("Conv3d", (4, 6, 3), {}),
    ("Conv3d", (4, 6, (3, 1, 2)), {"groups": 2, "padding": "valid"}),
    ("ConvTranspose3d", (4, 6, 3), {"groups": 2, "dilation": 2, "output_padding": 1}),
], ids=str)
def test_init_matches_torch(name: str, args: tuple, kw: dict) -> None:
    """Under one seed the initial weights and bias are PyTorch's (kaiming-uniform)."""
    torch.manual_seed(5)
    tm = getattr(torch.nn, name)(*args, **kw)
    gc.manual_seed(5)
    gm = getattr(nn, name)(*args, **kw)
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(np.asarray(gm.state_dict()[k]), v.numpy(), err_msg=k)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("args,kw", [
    ((4, 6, 3), {"padding": (1, 2, 1)}),
    ((4, 6, (2, 3, 2)), {"padding": "same", "dilation": (2, 1, 1)}),
    ((4, 6, 3), {"padding": 2, "stride": 2, "groups": 2}),
], ids=str)
def test_conv3d_padding_modes(args: tuple, kw: dict, mode: str) -> None:
    torch.manual_seed(0)
    tm = torch.nn.Conv3d(*args, padding_mode=mode, **kw)
    gm = nn.Conv3d(*args, padding_mode=mode, **kw)
    assert repr(gm) == repr(tm)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = _r(*X)
    gx, tx = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    gy, ty = gm(gx), tm(tx)
    np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    gy.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gm.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-4,
                               atol=1e-3)
    np.testing.assert_allclose(gm.bias.grad.numpy(), tm.bias.grad.numpy(), rtol=1e-4,
                               atol=1e-3)


def test_conv_transpose3d_output_size() -> None:
    torch.manual_seed(0)
    tm = torch.nn.ConvTranspose3d(4, 3, 3, stride=(3, 2, 2), padding=1)
    gm = nn.ConvTranspose3d(4, 3, 3, stride=(3, 2, 2), padding=1)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = _r(*X)
    for size in ((13, 11, 13), (15, 12, 14), (2, 3, 14, 11, 14)):
        got = gm(gc.tensor(x), output_size=size)
        want = tm(torch.tensor(x), output_size=size)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="output size"):
        gm(gc.tensor(x), output_size=(16, 11, 11))


# -- batch norm statistics and a small 3-D CNN, trained --------------------------------------
@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("momentum", [0.1, None], ids=str)
def test_batch_norm3d_running_stats(mode: str, momentum: Any) -> None:
    """Five training steps (batch sizes 2 and 3): outputs, parameters and the running
    statistics follow PyTorch's; then the eval-mode output uses them."""
    torch.manual_seed(0)
    tm = torch.nn.BatchNorm3d(4, momentum=momentum)
    gm = nn.BatchNorm3d(4, momentum=momentum)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.1)
    gopt = optim.SGD(gm.parameters(), lr=0.1)

    def step(x: Any, t: Any) -> Any:
        gopt.zero_grad()
        y = gm(x)
        ((y - t) ** 2).mean().backward()
        gopt.step()
        return y

    gstep = gc.compile(step) if mode == "compiled" else step
    for i in range(5):
        x, t = _r(2 + i % 2, 4, 3, 4, 5) * 2 + 1, _r(2 + i % 2, 4, 3, 4, 5)
        topt.zero_grad()
        ty = tm(torch.tensor(x))
        ((ty - torch.tensor(t)) ** 2).mean().backward()
        topt.step()
        gy = gstep(gc.tensor(x), gc.tensor(t))
        np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(np.asarray(gm.state_dict()[k]), v.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=k)
    if mode == "compiled":
        assert gstep.compile_count == 1
    tm.eval()
    gm.eval()
    x = _r(3, 4, 3, 4, 5)
    np.testing.assert_allclose(gm(gc.tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-4)


def _cnn(ns: Any) -> Any:
    """A small 3-D CNN over (N, 2, 6, 8, 8) volumes with every 3-D layer kind."""
    m = ns
    return m.Sequential(
        m.Conv3d(2, 4, 3, padding=1), m.BatchNorm3d(4), m.ReLU(), m.MaxPool3d(2),
        m.Conv3d(4, 6, (3, 3, 2), padding="same", padding_mode="replicate"),
        m.InstanceNorm3d(6, affine=True), m.ReLU(),
        m.ConvTranspose3d(6, 4, 2, stride=2, groups=2), m.AvgPool3d(3, stride=2, padding=1),
        m.Upsample(scale_factor=1.5, mode="trilinear"), m.AdaptiveAvgPool3d((1, 2, 3)),
        m.Flatten(), m.Linear(24, 3))


def _cnn_pair() -> tuple[Any, Any]:
    torch.manual_seed(0)
    tm = _cnn(torch.nn)
    gm = _cnn(nn)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, gm


def _cnn_batches() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [(rng.standard_normal((4 - i % 2, 2, 6, 8, 8)).astype(np.float32),
             rng.integers(0, 3, 4 - i % 2)) for i in range(5)]


def _cnn_step(gm: Any) -> tuple[Any, Any]:
    gopt = optim.SGD(gm.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        loss = loss_fn(gm(x), y)
        loss.backward()
        gopt.step()
        return loss

    return step, gopt


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_cnn3d_training_matches_torch(mode: str) -> None:
    tm, gm = _cnn_pair()
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    step, _ = _cnn_step(gm)
    gstep = gc.compile(step) if mode == "compiled" else step
    for i, (x, y) in enumerate(_cnn_batches()):
        topt.zero_grad()
        tl = TF.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        gl = gstep(gc.tensor(x), gc.tensor(y))
        np.testing.assert_allclose(float(np.asarray(gl)), tl.item(), rtol=2e-4,
                                   err_msg=f"loss at step {i}")
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(np.asarray(gm.state_dict()[k]), v.numpy(), rtol=1e-3,
                                   atol=1e-5, err_msg=k)
    if mode == "compiled":
        assert gstep.compile_count == 1


PTXAS = shutil.which("ptxas")


def test_cnn3d_step_lowers_to_ptx(tmp_path: Path) -> None:
    """The 3-D CNN step is 2-D ops only, so it lowers to PTX (and assembles, with ptxas)."""
    _, gm = _cnn_pair()
    step, _ = _cnn_step(gm)
    x, y = _cnn_batches()[0]
    fn = gc.compile(step, device="cuda", example_args=(x, y))
    text = fn.ir("ptx")
    assert ".visible .entry" in text
    if PTXAS is None:
        return
    src = tmp_path / "step.ptx"
    src.write_text(text)
    res = subprocess.run([PTXAS, "--gpu-name", "sm_80", str(src), "-o",
                          str(tmp_path / "step.cubin")], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]


@pytest.mark.skipif(not cuda.available(), reason="no CUDA driver/GPU")
def test_gpu_cnn3d_step_matches_cpu() -> None:
    results = {}
    for device in ("cpu", "cuda"):
        _, gm = _cnn_pair()
        step, _ = _cnn_step(gm)
        fn = gc.compile(step, device=device)
        losses = [float(np.asarray(fn(gc.tensor(x), gc.tensor(y))))
                  for x, y in _cnn_batches()]
        assert fn.compile_count == 1
        results[device] = losses, {k: np.asarray(v).copy() for k, v in gm.state_dict().items()}
    (lc, sc), (lg, sg) = results["cpu"], results["cuda"]
    np.testing.assert_allclose(lg, lc, rtol=1e-4)
    for k in sc:
        np.testing.assert_allclose(sg[k], sc[k], rtol=1e-3, atol=1e-5, err_msg=k)


# -- errors: PyTorch's exception type for each bad argument ----------------------------------
ERRORS = [
    ("conv3d_3d_input", lambda m, t: m.F.conv3d(t(4, 5, 6), t(6, 4, 3, 3, 3))),
    ("conv3d_channels", lambda m, t: m.F.conv3d(t(2, 3, 5, 6, 7), t(6, 4, 3, 3, 3))),
    ("conv3d_groups", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), groups=3)),
    ("conv3d_groups_zero", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), groups=0)),
    ("conv3d_big_kernel", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 7, 3, 3))),
    ("conv3d_same_strided", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), stride=2,
                                                    padding="same")),
    ("conv3d_bad_string", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), padding="full")),
    ("conv3d_negative_padding", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), padding=-1)),
    ("conv3d_zero_stride", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), stride=0)),
    ("conv3d_stride_pair", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), stride=(1, 2))),
    ("conv3d_bias_size", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), t(5))),
    ("conv3d_zero_dilation", lambda m, t: m.F.conv3d(t(*X), t(6, 4, 3, 3, 3), dilation=0)),
    ("convT3d_output_padding", lambda m, t: m.F.conv_transpose3d(t(*X), t(4, 3, 3, 3, 3),
                                                                  output_padding=1)),
    ("convT3d_channels", lambda m, t: m.F.conv_transpose3d(t(*X), t(3, 3, 3, 3, 3))),
    ("convT3d_groups", lambda m, t: m.F.conv_transpose3d(t(*X), t(4, 3, 3, 3, 3), groups=3)),
    ("convT3d_3d_input", lambda m, t: m.F.conv_transpose3d(t(4, 5, 6), t(4, 3, 3, 3, 3))),
    ("convT3d_too_small", lambda m, t: m.F.conv_transpose3d(t(1, 4, 1, 1, 1),
                                                             t(4, 3, 1, 1, 1), padding=1)),
    ("max_pool3d_3d_input", lambda m, t: m.F.max_pool3d(t(4, 5, 6), 2)),
    ("max_pool3d_padding", lambda m, t: m.F.max_pool3d(t(*X), 2, padding=2)),
    ("max_pool3d_zero_stride", lambda m, t: m.F.max_pool3d(t(*X), 2, stride=0)),
    ("max_pool3d_too_small", lambda m, t: m.F.max_pool3d(t(*X), 6)),
    ("max_pool3d_kernel_pair", lambda m, t: m.F.max_pool3d(t(*X), (2, 2))),
    ("max_pool3d_dilation", lambda m, t: m.F.max_pool3d(t(*X), 2, dilation=0)),
    ("avg_pool3d_3d_input", lambda m, t: m.F.avg_pool3d(t(4, 5, 6), 2)),
    ("avg_pool3d_padding", lambda m, t: m.F.avg_pool3d(t(*X), 2, padding=2)),
    ("avg_pool3d_divisor", lambda m, t: m.F.avg_pool3d(t(*X), 2, divisor_override=0)),
    ("avg_pool3d_too_small", lambda m, t: m.F.avg_pool3d(t(*X), 6)),
    ("avg_pool3d_negative_padding", lambda m, t: m.F.avg_pool3d(t(*X), 3, padding=-1)),
    # smaller than the window in one dim, padding or not (ATen's check_input_size)
    ("avg_pool3d_under_kernel", lambda m, t: m.F.avg_pool3d(t(2, 1, 1, 2, 3), 3, 1, 1)),
    ("adaptive_avg_3d_input", lambda m, t: m.F.adaptive_avg_pool3d(t(4, 5, 6), 2)),
    ("adaptive_avg_size", lambda m, t: m.F.adaptive_avg_pool3d(t(*X), (2, 2))),
    ("adaptive_max_3d_input", lambda m, t: m.F.adaptive_max_pool3d(t(4, 5, 6), 2)),
    ("adaptive_max_size", lambda m, t: m.F.adaptive_max_pool3d(t(*X), (2, 2))),
    ("interpolate_bilinear_5d", lambda m, t: m.F.interpolate(t(*X), scale_factor=2,
                                                              mode="bilinear")),
    ("BatchNorm3d_4d", lambda m, t: m.nn.BatchNorm3d(4)(t(4, 5, 6, 7))),
    ("InstanceNorm3d_3d", lambda m, t: m.nn.InstanceNorm3d(4)(t(5, 6, 7))),
    ("InstanceNorm3d_features", lambda m, t: m.nn.InstanceNorm3d(3, affine=True)(t(*X))),
    ("Conv3d_groups", lambda m, t: m.nn.Conv3d(4, 6, 3, groups=4)),
    ("Conv3d_groups_zero", lambda m, t: m.nn.Conv3d(4, 6, 3, groups=0)),
    ("Conv3d_same_strided", lambda m, t: m.nn.Conv3d(4, 6, 3, stride=2, padding="same")),
    ("Conv3d_bad_string", lambda m, t: m.nn.Conv3d(4, 6, 3, padding="full")),
    ("Conv3d_padding_mode", lambda m, t: m.nn.Conv3d(4, 6, 3, padding_mode="mirror")),
    ("Conv3d_kernel_pair", lambda m, t: m.nn.Conv3d(4, 6, (3, 3))(t(*X))),
    ("ConvTranspose3d_padding_mode", lambda m, t: m.nn.ConvTranspose3d(
        4, 6, 3, padding_mode="reflect")),
    ("ConvTranspose3d_output_size", lambda m, t: m.nn.ConvTranspose3d(4, 6, 3)(
        t(*X), output_size=(9, 9))),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors_match_torch(case: Any) -> None:
    _, f = case
    with pytest.raises(Exception) as want:
        f(SimpleNamespace(F=TF, nn=torch.nn), lambda *s: torch.tensor(_r(*s)))
    with pytest.raises(Exception) as got:
        f(SimpleNamespace(F=F, nn=nn), lambda *s: gc.tensor(_r(*s)))
    assert type(got.value) is want.type, (got.value, want.value)
