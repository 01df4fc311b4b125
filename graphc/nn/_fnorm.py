"""Normalisation, dropout and embedding in tensor operations.

All are composites of IR primitives (so eager, interpreter and native share one definition).
Batch-norm running statistics are written with ``Tensor._assign`` under ``no_grad``: eagerly
that copies into the buffer, and inside a compiled step it becomes a state update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import tensor_ops as T
from ..autograd import is_grad_enabled, no_grad
from ..ir import shapes as sh
from ..tensor import Tensor, builder


def _count(x: Tensor, axes: Sequence[int]) -> Any:
    return sh.numel([x.shape[a] for a in axes])


def _scalar(value: Any, like: Tensor) -> Tensor:
    """A 0-d constant of ``like``'s dtype; ``value`` may be a symbolic dimension."""
    return Tensor._wrap(builder().const(value, (), like.dtype))


def _affine_norm(y: Tensor, x: Tensor, axes: tuple[int, ...], mean: Tensor, invstd: Tensor,
                 count: Any, weight: Tensor | None, bias: Tensor | None,
                 wshape: tuple[Any, ...]) -> Tensor:
    """``y`` (the normalised and scaled ``x``), differentiated as one op (the
    ``affine_norm`` rule: two reductions and one pass, as PyTorch's norm backward kernels)
    instead of through each op that computed it. ``wshape``: the shape ``weight`` and
    ``bias`` broadcast from (right-aligned against ``x``)."""
    # weight and bias may be arrays (the functional forms take them): constants here
    weight, bias = (None if t is None else T.as_tensor(t) for t in (weight, bias))
    ps = [t for t in (weight, bias) if t is not None]
    if not is_grad_enabled() or not any(t.requires_grad for t in [x, *ps]):
        return y
    return T._apply("affine_norm", y, x, mean, invstd, _scalar(count, x), *ps, axes=axes,
                    weight=weight is not None, bias=bias is not None, wshape=tuple(wshape))


@T.in_float32
def layer_norm(input: Any, normalized_shape: Any, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    x = T.as_tensor(input)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if tuple(x.shape[x.ndim - k:]) != tuple(ns):
        raise RuntimeError(f"layer_norm: expected input with trailing shape {ns}, got "
                           f"{tuple(x.shape)}")
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axes, keepdim=True)
    d = x - mu
    var = (d * d).mean(axes, keepdim=True)
    invstd = (var + eps).rsqrt()
    y = d * invstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return _affine_norm(y, x, axes, mu, invstd, _count(x, axes), weight, bias, ns)


@T.in_float32(keep=("running_mean", "running_var"))
def batch_norm(input: Any, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: Any = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise over every dim but 1. Training uses batch statistics (biased variance) and
    moves the running statistics with the unbiased variance, as PyTorch does. ``momentum``
    may be a 0-d tensor (the cumulative average's 1/num_batches_tracked)."""
    x = T.as_tensor(input)
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected at least 2D input (got {x.ndim}D input)")
    axes = tuple(a for a in range(x.ndim) if a != 1)
    bshape = [1, -1] + [1] * (x.ndim - 2)
    if training or running_mean is None:
        n = _count(x, axes)
        sh.require_gt(n, 1, "Expected more than 1 value per channel when training, got input "
                      f"size {sh.fmt_shape(x.shape)}")
        mean = x.mean(axes, keepdim=True)
        d = x - mean
        ssq = (d * d).sum(axes, keepdim=True)
        var = ssq / _scalar(n, x)
        if training and running_mean is not None:
            with no_grad():
                m = momentum if isinstance(momentum, Tensor) else float(momentum)
                rm, rv = running_mean, running_var
                unbiased = ssq.detach().reshape(-1) / _scalar(sh.plus(n, -1), x)
                rm._assign(rm * (1.0 - m) + mean.detach().reshape(-1) * m)
                rv._assign(rv * (1.0 - m) + unbiased * m)
    else:
        mean = running_mean.reshape(bshape)
        var = running_var.reshape(bshape)
        d = x - mean
    invstd = (var + eps).rsqrt()
    y = d * invstd
    if weight is not None:
        y = y * weight.reshape(bshape)
    if bias is not None:
        y = y + bias.reshape(bshape)
    if training or running_mean is None:  # batch statistics: a function of x
        stat = tuple(1 if a in axes else s for a, s in enumerate(x.shape))
        return _affine_norm(y, x, axes, mean, invstd, n, weight, bias, stat)
    return y


def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``.

    The mask comes from the counter-based ``rand`` op seeded from the global generator (a
    run-time input in compiled steps), so eager and compiled runs agree under one seed.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    x = T.as_tensor(input)
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x._assign(x * 0.0) if inplace else x * 0.0
    keep = T.rand_like(x) < (1.0 - p)
    out = x * keep.to(x.dtype) * (1.0 / (1.0 - p))
    return x._assign(out) if inplace else out


def embedding_renorm_(weight: Tensor, indices: Tensor, max_norm: float,
                      norm_type: float) -> Tensor:
    """ATen's ``embedding_renorm_``: every row of ``weight`` that ``indices`` read whose
    ``norm_type``-norm exceeds ``max_norm`` is scaled in place by ``max_norm / (norm + 1e-7)``
    (the norm in the weight's dtype, the comparison and the quotient in double, the product
    in the weight's dtype, as ATen computes them), without recording a gradient. Repeated
    indices write the same row twice."""
    with no_grad():
        flat = indices.reshape(-1)
        rows = weight.index_select(0, flat)
        norm = rows.norm(p=norm_type, dim=1, keepdim=True).double()
        scale = (max_norm / (norm + 1e-7)).to(weight.dtype)
        weight.index_copy_(0, flat, T.where(norm > max_norm, rows * scale, rows))
    return weight


def embedding(input: Any, weight: Tensor, padding_idx: int | None = None,
              max_norm: Any = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """Rows of ``weight`` by index, through the bounds-checked ``gather``; rows read at
    ``padding_idx`` get no gradient; with ``max_norm`` the rows read are first renormed in
    place (``embedding_renorm_``)."""
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: scale_grad_by_freq and sparse are not supported")
    idx = T.as_tensor(input)
    if idx.dtype.is_float:
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {idx.dtype.name}")
    idx = idx.long()
    w = T.as_tensor(weight)
    if max_norm is not None:
        embedding_renorm_(w, idx, float(max_norm), float(norm_type))
    dim = w.shape[1]
    flat = idx.reshape(-1, 1).expand(-1, dim)
    out = T.gather(w, 0, flat)
    if padding_idx is not None:
        pad = padding_idx + w.shape[0] if padding_idx < 0 else padding_idx
        out = T.where(flat == pad, out.detach(), out)
    return out.reshape(list(idx.shape) + [dim])



@T.in_float32
def group_norm(input: Any, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise (N, C, *) over each group of ``C // num_groups`` channels and the spatial
    dims (biased variance), then a per-channel affine."""
    x = T.as_tensor(input)
    if x.ndim < 2:
        raise RuntimeError(f"group_norm: expected at least 2D input, got {x.ndim}D")
    c = x.shape[1]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {sh.fmt_shape(x.shape)} and "
                           f"num_groups={num_groups}")
    shape = list(x.shape)
    # PyTorch's ``_verify_batch_size`` of ``[N * C // G, G, *spatial]`` (in eval mode too)
    size = [sh.dim(shape[0] * c // num_groups), num_groups, *shape[2:]]
    prods = sh.dim(size[0] * sh.numel(size[2:]))
    sh.require_gt(prods, 1, "Expected more than 1 value per channel when training, got input "
                  f"size [{', '.join(sh.fmt_dim(d) for d in size)}]")
    g = x.reshape(shape[0], num_groups, -1)
    mu = g.mean(-1, keepdim=True)
    d = g - mu
    var = (d * d).mean(-1, keepdim=True)
    invstd = (var + eps).rsqrt()
    stat = (g.shape[0], num_groups, 1)
    y = _affine_norm(d * invstd, g, (2,), mu, invstd, g.shape[2], None, None, stat)
    y = y.reshape(shape)
    bshape = [1, -1] + [1] * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(bshape)
    if bias is not None:
        y = y + bias.reshape(bshape)
    return y


@T.in_float32(keep=("running_mean", "running_var"))
def instance_norm(input: Any, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise (N, C, *) over the spatial dims of each instance and channel. With
    ``use_input_stats`` the running statistics (if given) move towards the batch averages of
    the per-instance mean and unbiased variance, as PyTorch's."""
    x = T.as_tensor(input)
    if x.ndim < 3:
        raise ValueError(f"instance_norm: expected at least 3D input, got {x.ndim}D")
    axes = tuple(range(2, x.ndim))
    bshape = [1, -1] + [1] * (x.ndim - 2)
    if use_input_stats:
        n = _count(x, axes)
        sh.require_gt(n, 1, "Expected more than 1 spatial element when training, got input "
                      f"size {sh.fmt_shape(x.shape)}")
        mean = x.mean(axes, keepdim=True)
        d = x - mean
        ssq = (d * d).sum(axes, keepdim=True)
        var = ssq / _scalar(n, x)
        if running_mean is not None or running_var is not None:
            with no_grad():
                m = float(momentum)
                if running_mean is not None:
                    bm = mean.detach().reshape(x.shape[0], -1).mean(0)
                    running_mean._assign(running_mean * (1.0 - m) + bm * m)
                if running_var is not None:
                    unbiased = ssq.detach().reshape(x.shape[0], -1) / _scalar(sh.dim(n - 1), x)
                    running_var._assign(running_var * (1.0 - m) + unbiased.mean(0) * m)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("Expected running_mean and running_var to be defined when "
                             "use_input_stats is false")
        mean = running_mean.reshape(bshape)
        var = running_var.reshape(bshape)
        d = x - mean
    invstd = (var + eps).rsqrt()
    y = d * invstd
    if weight is not None:
        y = y * weight.reshape(bshape)
    if bias is not None:
        y = y + bias.reshape(bshape)
    if use_input_stats:  # statistics of x itself
        wshape = tuple(1 if a != 1 else s for a, s in enumerate(x.shape))
        return _affine_norm(y, x, axes, mean, invstd, n, weight, bias, wshape)
    return y


@T.in_float32
def rms_norm(input: Any, normalized_shape: Any, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims;
    ``eps=None`` is the dtype's machine epsilon, as PyTorch's."""
    x = T.as_tensor(input)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if tuple(x.shape[x.ndim - k:]) != tuple(ns):
        raise RuntimeError(f"rms_norm: expected input with trailing shape {ns}, got "
                           f"{tuple(x.shape)}")
    if eps is None:
        eps = float(np.finfo(x.dtype.np).eps)
    axes = tuple(range(x.ndim - k, x.ndim))
    y = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight
    return y
