"""The rest of ``torch.nn.functional``'s layers and losses, as compositions of graphc's ops.

Why a module of its own, and why compositions: ``channel_shuffle``, ``local_response_norm``,
``pdist``, ``multi_margin_loss``, ``multilabel_margin_loss``,
``triplet_margin_with_distance_loss``, ``adaptive_max_pool1d`` and ``lp_pool1d/2d`` are each
a few reshapes, gathers, pools and elementwise ops over PyTorch's formula (ATen's loops in
``LossMultiMargin.cpp``, ``LossMultiLabelMargin.cpp``, ``Distance.cpp``; Python in
``torch/nn/functional.py``). Written with the front end's ops they need no IR primitive: their
graphs, derivatives and CPU and PTX code are those of the ops they use. The derivatives equal
ATen's hand-written backwards because the compositions keep ATen's branch points: a hinge
term passes gradient only where its argument is strictly positive (``where``, not ``clamp``,
whose gradient includes the boundary), and ``pdist`` gives a zero gradient at a zero distance
(``vector_norm``'s rule) and the whole gradient to every tied coordinate at ``p = inf``.

A class-index target is read with ``gather``, which bounds-checks every index; eagerly the
target's values are checked first, so a bad one raises PyTorch's ``RuntimeError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _context, amp
from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..ir import shapes as sh
from ..reduce_ops import vector_norm
from ..tensor import Tensor
from ._fconv import (
    _take,
    adaptive_max,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
    pair,
    single,
)
from ._floss import _reduce, _reduction, _size, pairwise_distance


def _eager() -> bool:
    return _context.current() is None


def _torch_name(d: dt.DType) -> str:
    """PyTorch's name of a dtype in its messages (``Float``, ``Long`` ...)."""
    return T._TORCH_NAME.get(d.name, "BFloat16" if d is dt.bfloat16 else d.name)


def _int_arg(v: Any, fn: str, name: str, pos: int) -> int:
    """An int argument, refused as PyTorch's argument parser refuses floats and the like."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{fn}(): argument '{name}' (position {pos}) must be int, not "
                        f"{type(v).__name__}")
    return int(v)


# -- channel_shuffle, local_response_norm ---------------------------------------------------
def channel_shuffle(input: Any, groups: int) -> Tensor:  # noqa: A002
    """``F.channel_shuffle``: channels (dim 1) split into ``groups`` groups and interleaved,
    ``[N, g·k, *] -> [N, k·g, *]``: a reshape, a transpose and a reshape, as ATen's
    ``math_channel_shuffle``."""
    x = T.as_tensor(input)
    g = _int_arg(groups, "channel_shuffle", "groups", 2)
    if g <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of "
                           f"groups:{g}")
    if x.ndim <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with "
                           f"sizes {_size(x.shape)}")
    n, c, *rest = x.shape
    if not isinstance(c, int) or c % g:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels "
                           f"and {g} groups.")
    return x.reshape(n, g, c // g, *rest).transpose(1, 2).reshape(n, c, *rest)


def local_response_norm(input: Any, size: int, alpha: float = 1e-4,  # noqa: A002
                        beta: float = 0.75, k: float = 1.0) -> Tensor:
    """``F.local_response_norm``: ``x / (k + alpha · mean of x² over size neighbouring
    channels) ** beta``. The window mean is PyTorch's: the squares zero-padded by
    ``size // 2`` channels before and ``(size - 1) // 2`` after, then an average pool of
    ``size`` channels (every trailing dim flattened into one, which is what ATen's 3-D pool
    over ``(size, 1, 1)`` amounts to)."""
    x = T.as_tensor(input)
    if x.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {x.ndim} "
                         "dimensions)")
    size = int(size)
    if size <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {size} kW: 1")
    numel = sh.numel(x.shape)
    if isinstance(numel, int) and numel == 0:
        return x
    n, c, *rest = x.shape
    length = int(np.prod(rest))
    sq = (x * x).reshape(n, 1, c, length)
    sq = T.pad(sq, [(0, 0), (0, 0), (size // 2, (size - 1) // 2), (0, 0)])
    div = avg_pool2d(sq, (size, 1), 1).reshape(*x.shape)
    return x / (div * alpha + k) ** beta


# -- pdist ---------------------------------------------------------------------------------
def _inf_norm_all_ties(d: Tensor) -> Tensor:
    """``max |d|`` over the last dim with ATen's ``pdist`` gradient: every coordinate that
    attains the maximum gets the whole gradient (``amax``'s splits it among ties). The value
    is ``amax``'s exactly; the gradient rides on added terms ``a - a.detach()`` that are 0."""
    a = d.abs()
    m = T.amax(a, -1, keepdim=True).detach()
    hit = T.where(a == m, a < math.inf, False)
    return (m + T.where(hit, a - a.detach(), 0.0).sum(-1, keepdim=True)).squeeze(-1)


def pdist(input: Any, p: float = 2) -> Tensor:  # noqa: A002
    """``F.pdist``: the ``p``-norm distance between every pair of rows ``i < j`` of an
    ``(N, M)`` input, in row-major order (``N (N - 1) / 2`` values): a constant gather of the
    two rows of each pair and ``vector_norm`` of their difference (gradient 0 at a zero
    distance, as ATen's ``_pdist_backward``). The number of rows fixes the output's length, so
    it cannot be a symbolic batch dim (the columns can)."""
    x = T.as_tensor(input)
    if x.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {x.ndim}D")
    if not x.dtype.is_float:
        raise RuntimeError("pdist only supports floating-point dtypes")
    p = float(p)
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    rows = x.shape[0]
    if not isinstance(rows, int):
        raise NotImplementedError(
            f"pdist: the number of rows ({sh.fmt_dim(rows)}) is symbolic, and the output's "
            "length N (N - 1) / 2 depends on it; compile with dynamic=False, or put the "
            "symbolic dim along the columns")
    i, j = np.triu_indices(rows, 1)
    d = _take(x, 0, i) - _take(x, 0, j)
    if sh.same(x.shape[1], 0):
        return d.sum(-1)  # no coordinates: every distance is 0 (amax would have nothing)
    if p == math.inf:
        return _inf_norm_all_ties(d)
    return vector_norm(d, p, -1)


# -- margin losses over class indices ------------------------------------------------------
def _margin_input(x: Tensor) -> tuple[Any, int]:
    """(frames, classes) of a ``(C)``, ``(N, C)`` or 0-d (one class) input, after ATen's
    check (``LossMulti.h``): a non-empty vector or a matrix with a non-empty class dim."""
    nd = x.ndim
    ok = nd == 0 or (nd == 1 and not sh.same(x.shape[0], 0)) or \
        (nd == 2 and not sh.same(x.shape[1], 0))
    if not ok:
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch "
                           f"size, but got: {_size(x.shape)}")
    if nd <= 1:
        return 1, 1 if nd == 0 else int(x.shape[0])
    return x.shape[0], int(x.shape[1])


def _dtypes(kernel: str, x: Tensor, t: Tensor) -> None:
    """ATen's dtype errors: a Long target, a floating input (``kernel`` names ATen's)."""
    if t.dtype is not dt.int64:
        raise RuntimeError(f"expected scalar type Long but found {_torch_name(t.dtype)}")
    if not x.dtype.is_float:
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{_torch_name(x.dtype)}'")


def _class_row(classes: int) -> Tensor:
    return T.as_tensor(np.arange(classes, dtype=np.int64).reshape(1, classes))


@amp.float32_op
def multi_margin_loss(input: Any, target: Any, p: int = 1, margin: float = 1.0,  # noqa: A002
                      weight: Any = None, size_average: Any = None, reduce: Any = None,
                      reduction: str = "mean") -> Tensor:
    """``F.multi_margin_loss``: per sample, ``sum over classes d != y of
    w[y] · max(0, margin - x[y] + x[d]) ** p``, divided by the number of classes (ATen's
    ``multi_margin_inner_sum_cpu``); ``p`` is 1 or 2. A 1-D input is one sample; with
    ``reduction='none'`` a 0-d target gives a 0-d loss, as PyTorch."""
    red = _reduction(size_average, reduce, reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    w = None
    if weight is not None:
        w = T.as_tensor(weight)
        if w.ndim != 1:
            raise ValueError("weight must be one-dimensional")
    x, t = T.as_tensor(input), T.as_tensor(target)
    frames, classes = _margin_input(x)
    if t.ndim > 1 or not sh.same(sh.numel(t.shape), frames):
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to "
                           f"the number of input samples (batch size). Expected target size "
                           f"[{sh.fmt_dim(frames)}], but got {_size(t.shape)}. Input has "
                           f"shape {_size(x.shape)}.")
    _dtypes("multi_margin_loss_cpu_kernel", x, t)
    if w is not None and not sh.same(w.shape[0], classes):
        raise RuntimeError(f"inconsistent weight size, expected {classes} but got "
                           f"{_size(w.shape)}")
    if _eager() and t.numel():
        tv = t.numpy()
        if tv.min() < 0 or tv.max() >= classes:
            raise RuntimeError("target out of range")
    xb = x.reshape(frames, classes)
    tb = t.reshape(frames, 1)
    z = (float(margin) - T.gather(xb, 1, tb)) + xb
    h = z if int(p) == 1 else z * z
    if w is not None:
        h = h * T.gather(w.to(x.dtype), 0, tb.reshape(frames)).reshape(frames, 1)
    h = T.where(T.where(tb != _class_row(classes), z > 0, False), h, 0.0)
    loss = h.sum(1) / classes
    if red == "none":
        return loss.reshape(()) if t.ndim == 0 else loss
    return _reduce(loss, red)


@amp.float32_op
def multilabel_margin_loss(input: Any, target: Any, size_average: Any = None,  # noqa: A002
                           reduce: Any = None, reduction: str = "mean") -> Tensor:
    """``F.multilabel_margin_loss``: the target row lists class indices up to its first
    negative entry; per sample, ``sum over listed j and unlisted d of
    max(0, 1 - x[y_j] + x[d])``, divided by the number of classes (a class listed twice counts
    twice, as in ATen's loop). Built as an ``(N, C, C)`` pair table, so it costs
    ``N · C²`` memory where ATen's loop costs time only."""
    red = _reduction(size_average, reduce, reduction)
    x, t = T.as_tensor(input), T.as_tensor(target)
    frames, classes = _margin_input(x)
    if x.ndim <= 1:
        ok = t.ndim <= 1 and sh.same(sh.numel(t.shape), classes)
    else:
        ok = t.ndim == 2 and sh.same(t.shape[0], frames) and sh.same(t.shape[1], classes)
    if not ok:
        raise RuntimeError(f"inconsistent target size: {_size(t.shape)} for input of size: "
                           f"{_size(x.shape)}")
    _dtypes("multilabel_margin_loss_forward_out_frame", x, t)
    if _eager() and t.numel() and x.numel():
        tv = t.numpy()
        if tv.min() < -1 or tv.max() >= classes:
            raise RuntimeError("argument #2 'target' is out of range")
    xb = x.reshape(frames, classes)
    tb = t.reshape(frames, classes)
    cls = _class_row(classes)
    first_neg = T.amin(T.where(tb < 0, cls, classes), 1, keepdim=True)
    listed = cls < first_neg                                           # (N, Cj)
    hits = T.where(listed.unsqueeze(2), tb.unsqueeze(2) == cls.unsqueeze(0), False)
    is_target = T.amax(hits.to(dt.int32), 1) > 0                       # (N, Cd)
    xt = T.gather(xb, 1, T.where(listed, tb, 0))                       # (N, Cj)
    z = (1.0 - xt.unsqueeze(2)) + xb.unsqueeze(1)                      # (N, Cj, Cd)
    pair_on = T.where(listed.unsqueeze(2), ~is_target.unsqueeze(1), False)
    loss = T.where(T.where(pair_on, z > 0, False), z, 0.0).sum((1, 2)) / classes
    if red == "none":
        return loss.reshape(()) if t.ndim <= 1 else loss
    return _reduce(loss, red)


def triplet_margin_with_distance_loss(
        anchor: Any, positive: Any, negative: Any, *,
        distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
        margin: float = 1.0, swap: bool = False, reduction: str = "mean") -> Tensor:
    """``F.triplet_margin_with_distance_loss``: ``max(0, margin + d(a, p) - d(a, n))`` with
    any distance (``pairwise_distance`` by default); ``swap`` uses ``min(d(a, n), d(p, n))``.
    PyTorch's own Python function, line for line (checks in its order)."""
    red = _reduction(None, None, reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a, po, ne = T.as_tensor(anchor), T.as_tensor(positive), T.as_tensor(negative)
    if not (a.ndim == po.ndim == ne.ndim):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {a.ndim}D, "
                           f"positive {po.ndim}D, and negative {ne.ndim}D inputs")
    dist = pairwise_distance if distance_function is None else distance_function
    d_pos = T.as_tensor(dist(a, po))
    d_neg = T.as_tensor(dist(a, ne))
    if swap:
        d_neg = T.binary("minimum", d_neg, T.as_tensor(dist(po, ne)))
    return _reduce(T.clamp(d_pos - d_neg + margin, 0.0), red)


# -- pooling -------------------------------------------------------------------------------
def adaptive_max_pool1d(input: Any, output_size: Any,  # noqa: A002
                        return_indices: bool = False) -> Any:
    """``F.adaptive_max_pool1d``: the maximum of each of PyTorch's windows
    ``[floor(i·L/o), ceil((i+1)·L/o))``, with its index when ``return_indices``. A
    ``max_pool1d`` when ``o`` divides ``L``; otherwise ``_fconv.adaptive_max``: the element
    ATen's loop keeps (the last NaN, else the first maximum), the gradient to it alone."""
    x = T.as_tensor(input)
    if x.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {x.ndim}-dimensional tensor "
                           "for argument #1 'self' (while checking arguments for "
                           "adaptive_max_pool1d)")
    if output_size is None:
        raise TypeError("adaptive_max_pool1d(): argument 'output_size' (position 2) must be "
                        "tuple of ints, not NoneType")
    if isinstance(output_size, (list, tuple)) and len(output_size) != 1:
        raise RuntimeError(f"adaptive_max_pool1d() argument 'output_size' should contain one "
                           f"int (got {len(output_size)})")
    o = single(output_size, "output_size")
    length = x.shape[-1]
    if not isinstance(length, int):
        raise NotImplementedError("adaptive_max_pool1d: the pooled (last) dim is symbolic")
    if length == 0:
        raise RuntimeError(f"adaptive_max_pool1d(): Expected input to have non-zero size for "
                           f"non-batch dimensions, but input has sizes {_size(x.shape)} with "
                           f"dimension {x.ndim - 1} being empty")
    if o < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {o}: "
                           f"{_size([*x.shape[:-1], o])}")
    if o > 0 and length % o == 0:
        k = length // o
        return max_pool1d(x, k, k, return_indices=return_indices)
    return adaptive_max(x, [o], return_indices)


def _lp_finish(out: Tensor, window: int, norm_type: float) -> Tensor:
    # PyTorch's ``(sign(out) * relu(|out|)) * window) ** (1 / p)``: relu's zero gradient at 0
    # gives an all-zero window a zero gradient instead of pow's infinite one
    return ((out.sign() * out.abs().relu()) * window) ** (1.0 / norm_type)


def lp_pool1d(input: Any, norm_type: float, kernel_size: int, stride: Any = None,  # noqa: A002
              ceil_mode: bool = False) -> Tensor:
    """``F.lp_pool1d``: ``(sum over the window of x ** p) ** (1 / p)`` as PyTorch computes it
    (an ``avg_pool1d`` of ``x ** p`` times the window size); ``p = inf`` is the max pool of
    ``|x|``, ``-inf`` the min."""
    x = T.as_tensor(input)
    k = single(kernel_size, "kernel_size")
    s = k if stride is None else single(stride, "stride")
    if isinstance(norm_type, (int, float)):
        if norm_type == math.inf:
            return max_pool1d(x.abs(), k, stride, 0, 1, ceil_mode)
        if norm_type == -math.inf:
            return -max_pool1d(-x.abs(), k, stride, 0, 1, ceil_mode)
    out = avg_pool1d(x.pow(norm_type), k, s, 0, ceil_mode)
    return _lp_finish(out, k, norm_type)


def lp_pool2d(input: Any, norm_type: float, kernel_size: Any, stride: Any = None,  # noqa: A002
              ceil_mode: bool = False) -> Tensor:
    """``F.lp_pool2d``: ``lp_pool1d`` over two spatial dims (an ``avg_pool2d`` of
    ``x ** p`` times ``kh · kw``)."""
    x = T.as_tensor(input)
    k = pair(kernel_size, "kernel_size")
    s = k if stride is None else pair(stride, "stride")
    if isinstance(norm_type, (int, float)):
        if norm_type == math.inf:
            return max_pool2d(x.abs(), k, stride, 0, 1, ceil_mode)
        if norm_type == -math.inf:
            return -max_pool2d(-x.abs(), k, stride, 0, 1, ceil_mode)
    out = avg_pool2d(x.pow(norm_type), k, s, 0, ceil_mode)
    return _lp_finish(out, k[0] * k[1], norm_type)


__all__ = ["channel_shuffle", "local_response_norm", "pdist", "multi_margin_loss",
           "multilabel_margin_loss", "triplet_margin_with_distance_loss",
           "adaptive_max_pool1d", "lp_pool1d", "lp_pool2d"]
