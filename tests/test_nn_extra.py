"""The rest of ``torch.nn`` (graphc/nn/_fextra.py, graphc/nn/extra.py) against PyTorch:
``F.channel_shuffle``, ``local_response_norm``, ``pdist``, ``multi_margin_loss``,
``multilabel_margin_loss``, ``triplet_margin_with_distance_loss``, ``adaptive_max_pool1d``,
``lp_pool1d/2d`` and their modules (plus ``Softmax2d``, ``Fold``, ``Unfold``,
``PairwiseDistance``): values, indices and gradients eagerly in float32 and float64 for every
reduction, 0-d and empty inputs where PyTorch takes them, compiled steps (one compile over two
batch sizes, the batch dim symbolic), a compiled training step of the modules, the PTX
lowering, and PyTorch's exception types and messages for bad arguments."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn

TF = torch.nn.functional
INF = math.inf
_rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape)


def _pos(*shape: int) -> np.ndarray:
    return _rng.uniform(0.2, 2.0, shape)


def _labels(n: int, c: int) -> np.ndarray:
    return _rng.integers(0, c, n).astype(np.int64)


def _multilabel(n: int, c: int) -> np.ndarray:
    """Rows of class lists ended by -1 (some full, one empty, one with a repeat) and junk
    after the end, which the loss must ignore."""
    t = _rng.integers(-1, c, (n, c)).astype(np.int64)
    t[0] = np.arange(c)[::-1]
    if n > 1:
        t[1, 0] = -1
    if n > 2:
        t[2, :3] = [1, 1, -1]
    return t


def _np(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return t if isinstance(t, np.ndarray) else np.asarray(t.numpy())


def _outs(y: Any) -> list:
    return list(y) if isinstance(y, (tuple, list)) else [y]


def _is_float(t: Any) -> bool:
    return t.dtype.is_floating_point if isinstance(t, torch.Tensor) else t.dtype.is_float


def _weighted_sum(ys: list, ws: list, lib: Any) -> Any:
    total = None
    for y, w in zip(ys, ws):
        if w is None:
            continue
        term = (y * lib.tensor(w)).sum()
        total = term if total is None else total + term
    return total


def _check_eager(f: Any, arrays: list, n_diff: int, dtype: Any, rtol: float = 1e-5,
                 atol: float = 1e-6) -> None:
    """``f(F, *tensors)`` against ``f(torch's F, *tensors)``: outputs (shape, dtype, values;
    integer outputs exactly) and the gradients of the first ``n_diff`` inputs under a
    random weighting of the float outputs."""
    arrs = [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]
    gx = [gc.tensor(a, requires_grad=i < n_diff) for i, a in enumerate(arrs)]
    tx = [torch.tensor(a, requires_grad=i < n_diff) for i, a in enumerate(arrs)]
    gys, tys = _outs(f(F, *gx)), _outs(f(TF, *tx))
    assert len(gys) == len(tys)
    ws = []
    for a, b in zip(gys, tys):
        assert tuple(a.shape) == tuple(b.shape)
        assert str(_np(a).dtype) == str(_np(b).dtype)
        if _is_float(b):
            np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol)
            ws.append(_rng.standard_normal(tuple(b.shape)).astype(dtype)
                      if b.numel() and b.requires_grad else None)
        else:
            np.testing.assert_array_equal(_np(a), _np(b))
            ws.append(None)
    if not any(w is not None for w in ws):
        return
    _weighted_sum(gys, ws, gc).backward()
    _weighted_sum(tys, ws, torch).backward()
    for i, (a, b) in enumerate(zip(gx[:n_diff], tx[:n_diff])):
        want = np.zeros(b.shape, dtype) if b.grad is None else _np(b.grad)
        got = np.zeros(b.shape, dtype) if a.grad is None else _np(a.grad)
        np.testing.assert_allclose(got, want, rtol=rtol * 10, atol=atol,
                                   err_msg=f"gradient of argument {i}")


DTYPES = [np.float32, np.float64]
_DUP = np.array([[0.0, 1, 2], [1, 2, 1], [1, 1, 1], [0, 1, 2]])  # ties, a repeated row

# name: (f(functional module, *tensors), input arrays, how many are differentiable)
CASES: dict[str, tuple[Any, list, int]] = {
    "channel_shuffle": (lambda f, x: f.channel_shuffle(x, 3), [_r(2, 6, 3, 4)], 1),
    "channel_shuffle_3d": (lambda f, x: f.channel_shuffle(x, 2), [_r(3, 4, 5)], 1),
    "channel_shuffle_5d": (lambda f, x: f.channel_shuffle(x, 4), [_r(1, 8, 2, 3, 2)], 1),
    "channel_shuffle_one_group": (lambda f, x: f.channel_shuffle(x, 1), [_r(2, 3, 4)], 1),
    "channel_shuffle_empty_batch": (lambda f, x: f.channel_shuffle(x, 2), [_r(0, 4, 3)], 1),
    "local_response_norm": (lambda f, x: f.local_response_norm(x, 3), [_r(2, 6, 3, 4)], 1),
    "local_response_norm_3d": (lambda f, x: f.local_response_norm(x, 4, 0.1, 0.5, 2.0),
                               [_r(2, 5, 7)], 1),
    "local_response_norm_5d": (lambda f, x: f.local_response_norm(x, 2, 0.5, 1.0, 0.5),
                               [_r(2, 4, 3, 2, 2)], 1),
    "local_response_norm_size_past_channels": (
        lambda f, x: f.local_response_norm(x, 9, 0.3), [_r(2, 4, 3)], 1),
    "local_response_norm_empty": (lambda f, x: f.local_response_norm(x, 2), [_r(0, 4, 3)], 1),
    "pdist": (lambda f, x: f.pdist(x), [_r(5, 4)], 1),
    "pdist_p1": (lambda f, x: f.pdist(x, 1), [_r(5, 4)], 1),
    "pdist_p0": (lambda f, x: f.pdist(x, 0), [np.round(_r(5, 4))], 1),
    "pdist_p0.5": (lambda f, x: f.pdist(x, 0.5), [_r(5, 4)], 1),
    "pdist_p1.5": (lambda f, x: f.pdist(x, 1.5), [_r(5, 4)], 1),
    "pdist_p3": (lambda f, x: f.pdist(x, 3), [_r(5, 4)], 1),
    "pdist_inf": (lambda f, x: f.pdist(x, INF), [_r(5, 4)], 1),
    "pdist_ties_and_zero_distance": (lambda f, x: f.pdist(x), [_DUP], 1),
    "pdist_ties_and_zero_distance_p0.5": (lambda f, x: f.pdist(x, 0.5), [_DUP], 1),
    "pdist_ties_and_zero_distance_inf": (lambda f, x: f.pdist(x, INF), [_DUP], 1),
    "pdist_one_row": (lambda f, x: f.pdist(x), [_r(1, 4)], 1),
    "pdist_no_columns": (lambda f, x: f.pdist(x), [_r(4, 0)], 1),
    "pdist_no_columns_inf": (lambda f, x: f.pdist(x, INF), [_r(4, 0)], 1),
    "pdist_no_rows": (lambda f, x: f.pdist(x, 1), [_r(0, 3)], 1),
    "adaptive_max_pool1d_divisible": (lambda f, x: f.adaptive_max_pool1d(x, 3, True),
                                      [_r(2, 3, 9)], 1),
    "adaptive_max_pool1d_uneven": (lambda f, x: f.adaptive_max_pool1d(x, 5, True),
                                   [_r(2, 3, 7)], 1),
    "adaptive_max_pool1d_upsampling": (lambda f, x: f.adaptive_max_pool1d(x, (9,), True),
                                       [_r(2, 3, 4)], 1),
    "adaptive_max_pool1d_unbatched": (lambda f, x: f.adaptive_max_pool1d(x, 3), [_r(3, 7)], 1),
    "adaptive_max_pool1d_ties": (lambda f, x: f.adaptive_max_pool1d(x.round(), 2, True),
                                 [_r(2, 3, 7)], 1),
    "adaptive_max_pool1d_empty_batch": (lambda f, x: f.adaptive_max_pool1d(x, 2, True),
                                        [_r(0, 3, 5)], 1),
    "adaptive_max_pool1d_to_zero": (lambda f, x: f.adaptive_max_pool1d(x, 0, True),
                                    [_r(2, 3, 5)], 1),
    "lp_pool1d": (lambda f, x: f.lp_pool1d(x, 2, 3), [_r(2, 3, 8)], 1),
    "lp_pool1d_float_p_stride_ceil": (lambda f, x: f.lp_pool1d(x.abs(), 2.5, 3, 2, True),
                                      [_r(2, 3, 8)], 1),
    "lp_pool1d_unbatched": (lambda f, x: f.lp_pool1d(x, 1, 2), [_r(3, 6)], 1),
    "lp_pool1d_inf": (lambda f, x: f.lp_pool1d(x, INF, 2), [_r(2, 3, 8)], 1),
    "lp_pool1d_minus_inf": (lambda f, x: f.lp_pool1d(x, -INF, 3, 1), [_r(2, 3, 8)], 1),
    "lp_pool1d_zero_window": (lambda f, x: f.lp_pool1d(x * (x.abs() > 0.7), 2, 2),
                              [_r(2, 3, 8)], 1),
    "lp_pool2d": (lambda f, x: f.lp_pool2d(x, 2, 2), [_r(2, 3, 4, 6)], 1),
    "lp_pool2d_rect_stride": (lambda f, x: f.lp_pool2d(x.abs(), 3, (2, 3), 1),
                              [_r(2, 3, 4, 6)], 1),
    "lp_pool2d_ceil": (lambda f, x: f.lp_pool2d(x, 2, 3, 2, True), [_r(2, 3, 5, 6)], 1),
    "lp_pool2d_unbatched": (lambda f, x: f.lp_pool2d(x, 2, 2), [_r(3, 4, 4)], 1),
    "lp_pool2d_inf": (lambda f, x: f.lp_pool2d(x, INF, 2), [_r(2, 3, 4, 6)], 1),
    "lp_pool2d_empty_batch": (lambda f, x: f.lp_pool2d(x, 2, 2), [_r(0, 3, 4, 4)], 1),
    "triplet_margin_with_distance_loss": (
        lambda f, a, p, n: f.triplet_margin_with_distance_loss(a, p, n),
        [_r(6, 5), _r(6, 5), _r(6, 5)], 3),
    "triplet_margin_with_distance_loss_swap_sum": (
        lambda f, a, p, n: f.triplet_margin_with_distance_loss(a, p, n, margin=2.0, swap=True,
                                                               reduction="sum"),
        [_r(6, 5), _r(6, 5), _r(6, 5)], 3),
    "triplet_margin_with_distance_loss_cosine_none": (
        lambda f, a, p, n: f.triplet_margin_with_distance_loss(
            a, p, n, distance_function=lambda u, v: 1.0 - f.cosine_similarity(u, v),
            margin=0.5, swap=True, reduction="none"),
        [_r(6, 5), _r(6, 5), _r(6, 5)], 3),
    "triplet_margin_with_distance_loss_unbatched": (
        lambda f, a, p, n: f.triplet_margin_with_distance_loss(a, p, n),
        [_r(5), _r(5), _r(5) * 3], 3),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_functional_matches_torch(name: str, dtype: Any) -> None:
    f, arrays, n_diff = CASES[name]
    _check_eager(f, arrays, n_diff, dtype)


W5 = _pos(5)
# (name, f(functional module, x, *constants, reduction=...), x, constants)
LOSSES = [
    ("multi_margin", lambda f, x, t, **k: f.multi_margin_loss(x, t, **k), _r(6, 5),
     [_labels(6, 5)]),
    ("multi_margin_p2_margin", lambda f, x, t, **k: f.multi_margin_loss(x, t, p=2, margin=0.6,
                                                                         **k),
     _r(6, 5), [_labels(6, 5)]),
    ("multi_margin_weight", lambda f, x, t, w, **k: f.multi_margin_loss(x, t, weight=w, **k),
     _r(6, 5), [_labels(6, 5), W5]),
    ("multi_margin_p2_weight_negative_margin",
     lambda f, x, t, w, **k: f.multi_margin_loss(x, t, 2, -0.5, w, **k), _r(6, 5),
     [_labels(6, 5), W5]),
    ("multi_margin_1d", lambda f, x, t, **k: f.multi_margin_loss(x, t, **k), _r(5),
     [np.array([3])]),
    ("multi_margin_1d_0d_target", lambda f, x, t, **k: f.multi_margin_loss(x, t, **k), _r(5),
     [np.array(1)]),
    ("multi_margin_0d", lambda f, x, t, **k: f.multi_margin_loss(x, t, **k), np.array(0.3),
     [np.array(0)]),
    ("multi_margin_one_class", lambda f, x, t, **k: f.multi_margin_loss(x, t, **k), _r(4, 1),
     [np.zeros(4, np.int64)]),
    ("multilabel_margin", lambda f, x, t, **k: f.multilabel_margin_loss(x, t, **k), _r(6, 5),
     [_multilabel(6, 5)]),
    ("multilabel_margin_1d", lambda f, x, t, **k: f.multilabel_margin_loss(x, t, **k), _r(5),
     [np.array([4, 0, -1, 2, 3])]),
    ("multilabel_margin_all_listed", lambda f, x, t, **k: f.multilabel_margin_loss(x, t, **k),
     _r(2, 3), [np.array([[0, 1, 2], [2, 1, 0]])]),
    ("multilabel_margin_0d", lambda f, x, t, **k: f.multilabel_margin_loss(x, t, **k),
     np.array(0.3), [np.array(0)]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("red", ["none", "mean", "sum"])
@pytest.mark.parametrize("name,f,x,consts", LOSSES, ids=[c[0] for c in LOSSES])
def test_losses_match_torch(name: str, f: Any, x: np.ndarray, consts: list, red: str,
                            dtype: Any) -> None:
    _check_eager(lambda fn, *ts: f(fn, *ts, reduction=red), [x, *consts], 1, dtype)


@pytest.mark.parametrize("red", ["none", "mean", "sum"])
@pytest.mark.parametrize("which", ["multi_margin_loss", "multilabel_margin_loss"])
def test_losses_of_an_empty_batch(which: str, red: str) -> None:
    """PyTorch takes a ``(0, C)`` input; with a reduction it returns uninitialised memory,
    so only the shapes are PyTorch's; the values are the sum (0) and mean (NaN) of nothing."""
    x = gc.tensor(np.zeros((0, 4), np.float32), requires_grad=True)
    t = gc.tensor(np.zeros((0,) if which == "multi_margin_loss" else (0, 4), np.int64))
    tl = getattr(TF, which)(torch.zeros(0, 4), torch.tensor(t.numpy()), reduction=red)
    got = getattr(F, which)(x, t, reduction=red)
    assert tuple(got.shape) == tuple(tl.shape)
    if red == "sum":
        assert float(got.numpy()) == 0.0
    elif red == "mean":
        assert math.isnan(float(got.numpy()))


def test_losses_legacy_reduction_arguments() -> None:
    x, t = _r(4, 3).astype(np.float32), _labels(4, 3)
    got = F.multi_margin_loss(gc.tensor(x), gc.tensor(t), size_average=False)
    want = TF.multi_margin_loss(torch.tensor(x), torch.tensor(t), size_average=False)
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-6)
    got = F.multilabel_margin_loss(gc.tensor(x), gc.tensor(_multilabel(4, 3)), reduce=False)
    assert tuple(got.shape) == (4,)


def test_losses_compute_in_float32_under_autocast() -> None:
    """Both margin losses are on PyTorch's CPU autocast float32 list."""
    x = _r(4, 3).astype(np.float32)
    t1, t2 = _labels(4, 3), _multilabel(4, 3)
    with gc.autocast("cpu", dtype=gc.bfloat16):
        a = F.multi_margin_loss(gc.tensor(x).to(gc.bfloat16), gc.tensor(t1))
        b = F.multilabel_margin_loss(gc.tensor(x).to(gc.bfloat16), gc.tensor(t2))
    assert a.dtype is gc.float32 and b.dtype is gc.float32


# -- compiled: the first input is x * p for a parameter p; one compile for two batch sizes ---
def _compiled_check(f: Any, make: Any, dynamic: Any = None, sizes: tuple = (3, 7)) -> None:
    x0 = make(sizes[0])[0]
    p0 = _rng.uniform(0.5, 1.5, x0.shape[1:]).astype(np.float32)
    param = nn.Parameter(gc.tensor(p0))

    def step(x: Any, *rest: Any) -> Any:
        param.grad = None
        ys = _outs(f(F, x * param, *rest))
        loss = sum((y * y + y).sum() for y in ys if y.dtype.is_float)
        loss.backward()
        return gc.cat([y.reshape(-1).to(gc.float32) for y in ys])

    cstep = gc.compile(step, dynamic=dynamic)
    for n in sizes:
        arrays = make(n)
        arrays = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]
        tp = torch.tensor(p0, requires_grad=True)
        tys = _outs(f(TF, torch.tensor(arrays[0]) * tp, *[torch.tensor(a) for a in arrays[1:]]))
        sum((y * y + y).sum() for y in tys if y.dtype.is_floating_point).backward()
        got = cstep(*[gc.tensor(a) for a in arrays])
        want = torch.cat([y.reshape(-1).to(torch.float32) for y in tys])
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(_np(param.grad), _np(tp.grad), rtol=1e-4, atol=1e-5)
    assert cstep.compile_count == 1


def _w5(f: Any) -> Any:
    """The class weights as a constant of the step (an argument's dim 0 would be symbolic)."""
    return (gc if f is F else torch).tensor(W5.astype(np.float32))


COMPILED: dict[str, tuple[Any, Any, Any]] = {
    "channel_shuffle": (lambda f, x: f.channel_shuffle(x, 2), lambda n: [_r(n, 4, 3, 2)], None),
    "local_response_norm": (lambda f, x: f.local_response_norm(x, 3, 0.2, 0.6, 1.5),
                            lambda n: [_r(n, 5, 3, 2)], None),
    "local_response_norm_3d": (lambda f, x: f.local_response_norm(x, 2),
                               lambda n: [_r(n, 4, 6)], None),
    "pdist_rows_fixed_columns_symbolic": (lambda f, x: f.pdist(x.t()), lambda n: [_r(n, 4)],
                                          None),
    "pdist_p1_inf": (lambda f, x: (f.pdist(x.t(), 1), f.pdist(x.t(), INF)),
                     lambda n: [_r(n, 4)], None),
    "pdist_static_rows": (lambda f, x: f.pdist(x, 3), lambda n: [_r(5, 3)], False),
    "adaptive_max_pool1d": (lambda f, x: f.adaptive_max_pool1d(x, 3, True),
                            lambda n: [_r(n, 2, 7)], None),
    "adaptive_max_pool1d_divisible": (lambda f, x: f.adaptive_max_pool1d(x, 2),
                                      lambda n: [_r(n, 2, 6)], None),
    "lp_pool1d": (lambda f, x: f.lp_pool1d(x, 2, 3, 2, True), lambda n: [_r(n, 2, 7)], None),
    "lp_pool2d": (lambda f, x: f.lp_pool2d(x.abs(), 1.5, 2), lambda n: [_r(n, 2, 4, 4)], None),
    "multi_margin_loss": (lambda f, x, t: f.multi_margin_loss(x, t, 2, 0.8, _w5(f)),
                          lambda n: [_r(n, 5), _labels(n, 5)], None),
    "multi_margin_loss_none": (lambda f, x, t: f.multi_margin_loss(x, t, reduction="none"),
                               lambda n: [_r(n, 5), _labels(n, 5)], None),
    "multilabel_margin_loss": (lambda f, x, t: f.multilabel_margin_loss(x, t),
                               lambda n: [_r(n, 5), _multilabel(n, 5)], None),
    "multilabel_margin_loss_sum": (
        lambda f, x, t: f.multilabel_margin_loss(x, t, reduction="sum"),
        lambda n: [_r(n, 4), _multilabel(n, 4)], None),
    "triplet_margin_with_distance_loss": (
        lambda f, a, p, n: f.triplet_margin_with_distance_loss(a, p, n, swap=True),
        lambda n: [_r(n, 5), _r(n, 5), _r(n, 5)], None),
}


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_compiled_matches_torch(name: str) -> None:
    f, make, dynamic = COMPILED[name]
    _compiled_check(f, make, dynamic)


def test_pdist_over_symbolic_rows_says_what_to_do() -> None:
    step = gc.compile(lambda x: F.pdist(x))
    with pytest.raises(NotImplementedError, match="pdist.*dynamic=False"):
        step(gc.tensor(np.ones((4, 3), np.float32)))


def test_compiled_target_out_of_range_raises() -> None:
    step = gc.compile(lambda x, t: F.multi_margin_loss(x, t))
    x = gc.tensor(np.ones((3, 4), np.float32))
    step(x, gc.tensor(np.array([0, 1, 3])))
    with pytest.raises(IndexError):
        step(x, gc.tensor(np.array([0, 4, 1])))


# -- modules -----------------------------------------------------------------------------
MODULES: list[tuple[str, dict, list, int]] = [
    ("Softmax2d", {}, [_r(2, 3, 4, 5)], 1),
    ("Softmax2d", {}, [_r(3, 4, 5)], 1),
    ("ChannelShuffle", {"groups": 2}, [_r(2, 4, 3)], 1),
    ("LocalResponseNorm", {"size": 3, "alpha": 0.01, "beta": 0.5, "k": 2.0},
     [_r(2, 5, 4, 3)], 1),
    ("Fold", {"output_size": (4, 5), "kernel_size": 2}, [_r(2, 3 * 4, 12)], 1),
    ("Fold", {"output_size": (5, 5), "kernel_size": (2, 3), "dilation": (2, 1),
              "padding": (0, 1), "stride": 2}, [_r(2, 3 * 6, 6)], 1),
    ("Unfold", {"kernel_size": (2, 3), "dilation": 1, "padding": 1, "stride": (2, 1)},
     [_r(2, 3, 5, 4)], 1),
    ("AdaptiveMaxPool1d", {"output_size": 3}, [_r(2, 3, 7)], 1),
    ("AdaptiveMaxPool1d", {"output_size": 4, "return_indices": True}, [_r(2, 3, 8)], 1),
    ("LPPool1d", {"norm_type": 2, "kernel_size": 3, "stride": 2}, [_r(2, 3, 7)], 1),
    ("LPPool2d", {"norm_type": 1.5, "kernel_size": (2, 3), "stride": 1, "ceil_mode": True},
     [_pos(2, 3, 4, 5)], 1),
    ("PairwiseDistance", {}, [_r(4, 5), _r(4, 5)], 2),
    ("PairwiseDistance", {"p": 1.0, "eps": 1e-3, "keepdim": True}, [_r(4, 5), _r(4, 5)], 2),
    ("MultiMarginLoss", {}, [_r(6, 5), _labels(6, 5)], 1),
    ("MultiMarginLoss", {"p": 2, "margin": 0.5, "weight": W5, "reduction": "sum"},
     [_r(6, 5), _labels(6, 5)], 1),
    ("MultiLabelMarginLoss", {"reduction": "none"}, [_r(6, 5), _multilabel(6, 5)], 1),
    ("MultiLabelMarginLoss", {}, [_r(6, 5), _multilabel(6, 5)], 1),
    ("TripletMarginWithDistanceLoss", {"margin": 0.5, "swap": True},
     [_r(6, 5), _r(6, 5), _r(6, 5)], 3),
]


def _kw(kw: dict, lib: Any) -> dict:
    return {k: lib.tensor(v.astype(np.float32)) if isinstance(v, np.ndarray) else v
            for k, v in kw.items()}


@pytest.mark.parametrize("name,kw,arrays,n_diff", MODULES, ids=[m[0] for m in MODULES])
def test_modules_match_torch(name: str, kw: dict, arrays: list, n_diff: int) -> None:
    tm = getattr(torch.nn, name)(**_kw(kw, torch))
    gm = getattr(nn, name)(**_kw(kw, gc))
    assert repr(gm) == repr(tm)
    assert set(gm.state_dict()) == set(tm.state_dict())
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(_np(gm.state_dict()[k]), _np(v))
    _check_eager(lambda f, *ts: (gm if f is F else tm)(*ts), arrays, n_diff, np.float32)


def test_module_attributes_are_torchs() -> None:
    pairs = [("PairwiseDistance", {"p": 3.0}), ("LocalResponseNorm", {"size": 2}),
             ("LPPool1d", {"norm_type": 2, "kernel_size": 3}),
             ("MultiMarginLoss", {"p": 2, "margin": 0.3}),
             ("TripletMarginWithDistanceLoss", {"margin": 2.0, "swap": True}),
             ("AdaptiveMaxPool1d", {"output_size": 2, "return_indices": True})]
    for name, kw in pairs:
        tm, gm = getattr(torch.nn, name)(**kw), getattr(nn, name)(**kw)
        for attr in ("norm", "eps", "keepdim", "size", "alpha", "beta", "k", "norm_type",
                     "kernel_size", "stride", "ceil_mode", "p", "margin", "swap", "reduction",
                     "output_size", "return_indices"):
            if hasattr(tm, attr):
                assert getattr(gm, attr) == getattr(tm, attr), (name, attr)
    custom = nn.TripletMarginWithDistanceLoss(distance_function=F.pairwise_distance)
    assert custom.distance_function is F.pairwise_distance
    assert isinstance(nn.TripletMarginWithDistanceLoss().distance_function, nn.PairwiseDistance)


def test_compiled_training_step_of_the_modules() -> None:
    """A small network through the new modules, trained for two SGD steps in a compiled step
    (batch symbolic), gives PyTorch's losses and weights."""

    def build(m: Any) -> Any:
        return m.Sequential(m.Conv2d(2, 4, 3, padding=1), m.LocalResponseNorm(3),
                            m.ChannelShuffle(2), m.LPPool2d(2, 2), m.Softmax2d(),
                            m.Unfold(2), m.Fold((3, 3), 2), m.Flatten(), m.Linear(36, 5))

    torch.manual_seed(0)
    tm = build(torch.nn)
    gm = build(nn)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.5)
    gopt = gc.optim.SGD(gm.parameters(), lr=0.5)
    tloss_fn = torch.nn.MultiMarginLoss(p=2, margin=0.9)
    gloss_fn = nn.MultiMarginLoss(p=2, margin=0.9)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        loss = gloss_fn(gm(x), y)
        loss.backward()
        gopt.step()
        return loss

    for n in (4, 6, 4):
        x = _r(n, 2, 6, 6).astype(np.float32)
        y = _labels(n, 5)
        topt.zero_grad()
        tl = tloss_fn(tm(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        gl = step(gc.tensor(x), gc.tensor(y))
        np.testing.assert_allclose(_np(gl), tl.item(), rtol=1e-4, atol=1e-6)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(_np(gm.state_dict()[k]), _np(v), rtol=1e-4, atol=1e-5,
                                   err_msg=k)
    assert step.compile_count == 1


def test_step_of_the_new_functions_lowers_to_ptx(tmp_path: Any) -> None:
    """Every new function and its gradient lowers to PTX from the primitives alone (running
    it needs a GPU; ptxas assembles it where installed)."""
    import shutil
    import subprocess

    w = nn.Parameter(gc.tensor(_pos(4, 6).astype(np.float32)))
    target = gc.tensor(_labels(3, 6))
    labels = gc.tensor(_multilabel(3, 6))

    def step(x: Any) -> Any:
        w.grad = None
        y = x * w
        y4 = y.reshape(3, 4, 3, 2)
        parts = [F.channel_shuffle(y4, 2), F.local_response_norm(y4, 3),
                 F.pdist(y[:, 0]), F.pdist(y[:, 1], INF), F.adaptive_max_pool1d(y, 4),
                 F.lp_pool1d(y, 2, 3), F.lp_pool2d(y4.abs(), 1.5, 2),
                 F.multi_margin_loss(y[:, 0], target, 2, 0.5).reshape(1),
                 F.multilabel_margin_loss(y[:, 1], labels).reshape(1),
                 F.triplet_margin_with_distance_loss(y[:, 0], y[:, 1], y[:, 2],
                                                     swap=True).reshape(1)]
        loss = sum((p * p).sum() for p in parts)
        loss.backward()
        return loss

    fn = gc.compile(step, device="cuda", dynamic=False,
                    example_args=(np.ones((3, 4, 6), np.float32),))
    text = fn.ir("ptx")
    assert ".visible .entry" in text
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return
    (tmp_path / "k.ptx").write_text(text)
    res = subprocess.run([ptxas, "--gpu-name", "sm_80", "-O3", str(tmp_path / "k.ptx"), "-o",
                          str(tmp_path / "k.cubin")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]


# -- errors: the same exception type as PyTorch, and a message naming what was wrong --------
def _x(m: Any, *shape: int) -> Any:
    return m.ones(*shape)


def _i(m: Any, *vals: Any) -> Any:
    return m.tensor(list(vals) if len(vals) != 1 else vals[0])


ERRORS: list[tuple[str, Any, type, str]] = [
    ("channel_shuffle_groups_0", lambda f, m: f.channel_shuffle(_x(m, 1, 4, 2), 0),
     RuntimeError, "channels in must be positive"),
    ("channel_shuffle_indivisible", lambda f, m: f.channel_shuffle(_x(m, 1, 4, 2), 3),
     RuntimeError, "divisible by groups"),
    ("channel_shuffle_2d", lambda f, m: f.channel_shuffle(_x(m, 2, 4), 2), RuntimeError,
     "> 2 dims"),
    ("channel_shuffle_float_groups", lambda f, m: f.channel_shuffle(_x(m, 1, 4, 2), 2.0),
     TypeError, "groups"),
    ("local_response_norm_2d", lambda f, m: f.local_response_norm(_x(m, 2, 4), 2), ValueError,
     "3D or higher dimensionality"),
    ("local_response_norm_size_0", lambda f, m: f.local_response_norm(_x(m, 2, 4, 3), 0),
     RuntimeError, "kernel size should be greater than zero"),
    ("pdist_1d", lambda f, m: f.pdist(_x(m, 4)), RuntimeError, "2D tensors, got: 1D"),
    ("pdist_negative_p", lambda f, m: f.pdist(_x(m, 3, 4), -1), RuntimeError, "non-negative p"),
    ("pdist_integer", lambda f, m: f.pdist(_i(m, [1, 2], [3, 4])), RuntimeError,
     "floating-point"),
    ("multi_margin_p3", lambda f, m: f.multi_margin_loss(_x(m, 3, 4), _i(m, 0, 1, 2), p=3),
     ValueError, "p == 1 and p == 2"),
    ("multi_margin_weight_2d",
     lambda f, m: f.multi_margin_loss(_x(m, 3, 4), _i(m, 0, 1, 2), weight=_x(m, 2, 2)),
     ValueError, "weight must be one-dimensional"),
    ("multi_margin_weight_size",
     lambda f, m: f.multi_margin_loss(_x(m, 3, 4), _i(m, 0, 1, 2), weight=_x(m, 3)),
     RuntimeError, "inconsistent weight size, expected 4"),
    ("multi_margin_float_target",
     lambda f, m: f.multi_margin_loss(_x(m, 3, 4), _x(m, 3)), RuntimeError,
     "expected scalar type Long but found Float"),
    ("multi_margin_target_out_of_range",
     lambda f, m: f.multi_margin_loss(_x(m, 3, 4), _i(m, 0, 4, 1)), RuntimeError,
     "target out of range"),
    ("multi_margin_negative_target",
     lambda f, m: f.multi_margin_loss(_x(m, 3, 4), _i(m, 0, -1, 1)), RuntimeError,
     "target out of range"),
    ("multi_margin_target_shape",
     lambda f, m: f.multi_margin_loss(_x(m, 3, 4), _i(m, [0], [1], [2])), RuntimeError,
     r"Expected target size \[3\], but got \[3, 1\]"),
    ("multi_margin_3d", lambda f, m: f.multi_margin_loss(_x(m, 2, 3, 4), _i(m, 0, 1)),
     RuntimeError, "non-empty vector or matrix"),
    ("multi_margin_no_classes", lambda f, m: f.multi_margin_loss(_x(m, 3, 0), _i(m, 0, 1, 2)),
     RuntimeError, "non-empty vector or matrix"),
    ("multi_margin_reduction",
     lambda f, m: f.multi_margin_loss(_x(m, 3, 4), _i(m, 0, 1, 2), reduction="avg"),
     ValueError, "avg is not a valid value for reduction"),
    ("multilabel_target_shape",
     lambda f, m: f.multilabel_margin_loss(_x(m, 3, 4), _i(m, [0, 1, -1, 2]) * _i(m, [[1]])),
     RuntimeError, "inconsistent target size"),
    ("multilabel_target_out_of_range",
     lambda f, m: f.multilabel_margin_loss(_x(m, 1, 4), _i(m, [[0, 4, -1, 1]])), RuntimeError,
     "'target' is out of range"),
    ("multilabel_target_below_minus_one",
     lambda f, m: f.multilabel_margin_loss(_x(m, 1, 4), _i(m, [[-2, 0, -1, 1]])), RuntimeError,
     "'target' is out of range"),
    ("multilabel_float_target",
     lambda f, m: f.multilabel_margin_loss(_x(m, 1, 4), _x(m, 1, 4)), RuntimeError,
     "expected scalar type Long"),
    ("multilabel_3d", lambda f, m: f.multilabel_margin_loss(_x(m, 1, 2, 4), _i(m, [[0]])),
     RuntimeError, "non-empty vector or matrix"),
    ("triplet_distance_margin",
     lambda f, m: f.triplet_margin_with_distance_loss(_x(m, 2, 3), _x(m, 2, 3), _x(m, 2, 3),
                                                      margin=0),
     ValueError, "margin must be greater than 0"),
    ("triplet_distance_dims",
     lambda f, m: f.triplet_margin_with_distance_loss(_x(m, 2, 3), _x(m, 2, 3), _x(m, 3)),
     RuntimeError, "same number of dimensions"),
    ("triplet_distance_reduction",
     lambda f, m: f.triplet_margin_with_distance_loss(_x(m, 2, 3), _x(m, 2, 3), _x(m, 2, 3),
                                                      reduction="avg"),
     ValueError, "avg is not a valid value for reduction"),
    ("triplet_distance_positional_function",
     lambda f, m: f.triplet_margin_with_distance_loss(_x(m, 2, 3), _x(m, 2, 3), _x(m, 2, 3),
                                                      f.pairwise_distance),
     TypeError, "positional"),
    ("adaptive_max_pool1d_4d", lambda f, m: f.adaptive_max_pool1d(_x(m, 1, 2, 3, 4), 2),
     RuntimeError, "Expected 2 to 3 dimensions"),
    ("adaptive_max_pool1d_two_sizes", lambda f, m: f.adaptive_max_pool1d(_x(m, 1, 2, 6),
                                                                         (2, 3)),
     RuntimeError, "output_size' should contain one int"),
    ("adaptive_max_pool1d_no_size", lambda f, m: f.adaptive_max_pool1d(_x(m, 1, 2, 6), None),
     TypeError, "output_size"),
    ("adaptive_max_pool1d_empty_length",
     lambda f, m: f.adaptive_max_pool1d(_x(m, 1, 2, 0), 2), RuntimeError,
     "non-zero size for non-batch dimensions"),
    ("adaptive_max_pool1d_negative", lambda f, m: f.adaptive_max_pool1d(_x(m, 1, 2, 6), -1),
     RuntimeError, "negative dimension"),
    ("lp_pool1d_kernel_0", lambda f, m: f.lp_pool1d(_x(m, 1, 2, 6), 2, 0), RuntimeError,
     "stride should not be zero"),
    ("lp_pool2d_stride_0", lambda f, m: f.lp_pool2d(_x(m, 1, 2, 4, 4), 2, 2, 0), RuntimeError,
     "stride should not be zero"),
    ("lp_pool2d_kernel_0_stride_1", lambda f, m: f.lp_pool2d(_x(m, 1, 2, 4, 4), 2, 0, 1),
     RuntimeError, "kernel size should be greater than zero"),
    ("lp_pool2d_window_past_input", lambda f, m: f.lp_pool2d(_x(m, 1, 2, 4, 4), 2, 5),
     RuntimeError, r"Given input size: \(2x4x4\)\. Calculated output size: \(2x0x0\)"),
    ("lp_pool1d_window_past_input", lambda f, m: f.lp_pool1d(_x(m, 1, 2, 4), 2, 5),
     RuntimeError, r"Given input size: \(2x1x4\)\. Calculated output size: \(2x1x0\)"),
    ("lp_pool1d_norm_0", lambda f, m: f.lp_pool1d(_x(m, 1, 2, 4), 0, 2), ZeroDivisionError,
     "division by zero"),
    ("Softmax2d_2d", lambda f, m: m.nn.Softmax2d()(_x(m, 2, 3)), ValueError,
     "Softmax2d: expected input to be 3D or 4D, got 2D"),
    ("ChannelShuffle_0", lambda f, m: m.nn.ChannelShuffle(0)(_x(m, 1, 4, 2)), RuntimeError,
     "channels in must be positive"),
    ("MultiMarginLoss_p3", lambda f, m: m.nn.MultiMarginLoss(p=3), ValueError,
     "p == 1 and p == 2"),
    ("MultiMarginLoss_weight_2d", lambda f, m: m.nn.MultiMarginLoss(weight=_x(m, 2, 2)),
     ValueError, "MultiMarginLoss: expected weight to be None or 1D tensor, got 2D"),
    ("TripletMarginWithDistanceLoss_margin",
     lambda f, m: m.nn.TripletMarginWithDistanceLoss(margin=-1.0), ValueError,
     "TripletMarginWithDistanceLoss: expected margin to be greater than 0"),
]


@pytest.mark.parametrize("name,f,exc,match", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_match_torch(name: str, f: Any, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        f(TF, torch)
    with pytest.raises(exc, match=match):
        f(F, gc)
