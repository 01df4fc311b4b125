"""Classification and robust-regression losses in tensor operations (PyTorch's formulas).

Class targets are read with ``gather``, whose native lowering bounds-checks every index: an
out-of-range target raises ``IndexError`` eagerly and from a compiled step (which then commits
nothing). Ignored targets are replaced by class 0 before the gather and masked afterwards.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _context, amp
from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..ir import shapes as sh
from ..tensor import Tensor


class TargetShapeError(ValueError, RuntimeError):
    """A class-index target whose shape does not fit the input.

    The message is PyTorch's (so a search for it finds the usual answers), followed by both
    shapes and, for the common ``(N, 1)`` labels, the fix. It is a ``ValueError`` as graphc's
    bad-input errors are, and a ``RuntimeError`` as PyTorch raises it, so either ``except``
    clause a user already has catches it."""


def _size(shape: Any) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _check_class_target(fn: str, input_shape: Any, target_shape: Any,
                        probabilities: bool = False) -> None:
    """Class-index targets have the input's shape without the class dimension: ``(N)`` for
    ``(N, C)``, ``(N, d1, ...)`` for ``(N, C, d1, ...)``, ``()`` for ``(C)``. Checked here,
    before the gather that reads them, whose own complaint (``index rank must equal input
    rank``) names neither the target nor what it should have been."""
    xs, ts = tuple(input_shape), tuple(target_shape)
    expected = () if len(xs) <= 1 else (xs[0],) + xs[2:]
    if len(ts) == len(expected) and all(sh.same(a, b) for a, b in zip(ts, expected)):
        return
    shapes = (f"{fn}: input shape {_size(xs)}, target shape {_size(ts)}; class-index targets "
              f"for this input have shape {_size(expected)}")
    if len(ts) == len(expected) + 1 and ts[-1] == 1 \
            and all(sh.same(a, b) for a, b in zip(ts[:-1], expected)):
        shapes += f" (for labels shaped {_size(ts)}, pass target.squeeze({len(ts) - 1}))"
    elif probabilities:
        shapes += f", or class probabilities: a float target of shape {_size(xs)}"
    if len(xs) <= 2 and len(ts) > 1:
        msg = "0D or 1D target tensor expected, multi-target not supported"
    elif len(xs) >= 2 and len(ts) >= 1 and not sh.same(ts[0], xs[0]):
        msg = f"Expected input batch_size ({xs[0]}) to match target batch_size ({ts[0]})."
    else:
        msg = f"Expected target size {_size(expected)}, got {_size(ts)}"
    raise TargetShapeError(f"{msg}\n  {shapes}")


_REDUCTIONS = ("none", "mean", "sum")


def _reduction(size_average: Any, reduce: Any, reduction: str) -> str:
    if size_average is not None or reduce is not None:
        size_average = True if size_average is None else size_average
        reduce = True if reduce is None else reduce
        return "none" if not reduce else ("mean" if size_average else "sum")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _log1p_small(u: Tensor) -> Tensor:
    """log(1 + u) for u in [0, 1], accurate for tiny u (Goldberg's trick, NaN-free branches)."""
    w = u + 1.0
    small = w == 1.0
    den = T.where(small, 1.0, w - 1.0)
    return T.where(small, u, w.log() * (u / den))


def log_sigmoid(x: Any) -> Tensor:
    """``min(x, 0) - log1p(exp(-|x|))``: finite for every finite x."""
    x = T.as_tensor(x)
    return T.binary("minimum", x, 0.0) - _log1p_small((-x.abs()).exp())


def _class_dim(x: Tensor) -> int:
    return 1 if x.ndim >= 2 else 0


def _picked(lp: Tensor, target: Tensor, ignore_index: int, weight: Tensor | None
            ) -> tuple[Tensor, Tensor]:
    """(-lp[n, y_n], w_{y_n}·1[y_n != ignore]) for class-index targets (batched layout)."""
    t = T.as_tensor(target)
    if t.dtype.is_float or t.dtype is dt.bool_:
        raise RuntimeError(f"expected scalar type Long but found {t.dtype.name} for the "
                           "class-index target")
    t = t.long()
    valid = t != ignore_index
    safe = T.where(valid, t, 0)
    picked = T.gather(lp, 1, safe.unsqueeze(1)).squeeze(1)
    w = valid.to(lp.dtype)
    if weight is not None:
        wt = T.gather(T.as_tensor(weight).to(lp.dtype), 0, safe.reshape(-1)).reshape(safe.shape)
        w = w * wt
    # an ignored position contributes exactly 0 and passes no gradient, as in ATen (which skips
    # it): with ``-picked * 0`` a mean over an all-ignored batch (0/0) sent 0 * inf = NaN back
    # into every logit, and an ignored row whose picked log-probability is -inf gave NaN
    return T.where(valid, -picked, 0.0), w


def _batched(x: Tensor, target: Tensor) -> tuple[Tensor, Tensor, bool]:
    if x.ndim == 1:
        return x.unsqueeze(0), target.unsqueeze(0), True
    return x, target, False


def _reduce_weighted(loss: Tensor, w: Tensor, reduction: str, unbatched: bool) -> Tensor:
    if reduction == "none":
        return loss.squeeze(0) if unbatched else loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()  # weighted mean; all ignored gives 0/0 = nan, as PyTorch


@amp.float32_op
def nll_loss(input: Any, target: Any, weight: Any = None, size_average: Any = None,
             ignore_index: int = -100, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities ``(C) | (N, C) | (N, C, d1, ...)``."""
    red = _reduction(size_average, reduce, reduction)
    x, t = T.as_tensor(input), T.as_tensor(target)
    _check_class_target("nll_loss", x.shape, t.shape)
    x, t, unbatched = _batched(x, t)
    loss, w = _picked(x, t, ignore_index, weight)
    return _reduce_weighted(loss * w, w, red, unbatched)


@amp.float32_op
def cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Any = None,
                  ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits, with class-index or class-probability targets (SEMANTICS 1.5)."""
    red = _reduction(size_average, reduce, reduction)
    x = T.as_tensor(input)
    t = T.as_tensor(target)
    eps = float(label_smoothing)
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {eps}")
    cd = _class_dim(x)
    n_classes = x.shape[cd]
    lp = T.log_softmax(x, cd)
    wv = None if weight is None else T.as_tensor(weight).to(x.dtype)
    if tuple(t.shape) == tuple(x.shape) and t.dtype.is_float:
        # probability targets: mean divides by the number of positions, not by weights
        if ignore_index >= 0:
            raise ValueError("ignore_index is not supported for floating point target")
        y = t.to(x.dtype)
        if eps > 0:
            y = y * (1.0 - eps) + eps / n_classes
        terms = lp * y
        if wv is not None:
            terms = terms * wv.reshape([-1] + [1] * (x.ndim - cd - 1))
        loss = -terms.sum(cd)
        if red == "none":
            return loss
        if red == "sum":
            return loss.sum()
        return loss.sum() / (x.numel() / n_classes) if x.ndim else loss.sum()
    _check_class_target("cross_entropy", x.shape, t.shape, probabilities=True)
    xb, tb, unbatched = _batched(lp, t)
    nll, w = _picked(xb, tb, ignore_index, wv)
    out = _reduce_weighted(nll * w, w, red, unbatched)
    if eps <= 0:
        return out
    # smoothing term s_n = -sum_c w_c lp_{n,c}, zero where ignored; mean divides by sum(w)
    cw = xb if wv is None else xb * wv.reshape([-1] + [1] * (xb.ndim - 2))
    s = T.where(tb != ignore_index, -cw.sum(1), 0.0)
    smooth = _reduce_weighted(s, w, red, unbatched)
    return out * (1.0 - eps) + smooth * (eps / n_classes)


@amp.float32_op
def binary_cross_entropy_with_logits(input: Any, target: Any, weight: Any = None,
                                     size_average: Any = None, reduce: Any = None,
                                     reduction: str = "mean", pos_weight: Any = None) -> Tensor:
    """``(1 - y)·x - (1 + (pw - 1)·y)·log_sigmoid(x)``, stable for large |x| (PyTorch's form)."""
    red = _reduction(size_average, reduce, reduction)
    x = T.as_tensor(input)
    y = T.as_tensor(target).to(x.dtype)
    if tuple(y.shape) != tuple(x.shape):
        raise ValueError(f"Target size ({tuple(y.shape)}) must be the same as input size "
                         f"({tuple(x.shape)})")
    ls = log_sigmoid(x)
    if pos_weight is not None:
        ls = ls * ((T.as_tensor(pos_weight).to(x.dtype) - 1.0) * y + 1.0)
    loss = (1.0 - y) * x - ls
    if weight is not None:
        loss = loss * T.as_tensor(weight).to(x.dtype)
    if red == "mean":
        return loss.mean()
    return loss.sum() if red == "sum" else loss


@amp.float32_op
def smooth_l1_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """Huber-like: ``0.5·d²/beta`` below ``beta``, ``|d| - 0.5·beta`` above (L1 at beta=0)."""
    red = _reduction(size_average, reduce, reduction)
    x, y = T.as_tensor(input), T.as_tensor(target)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    d = (x - y).abs()
    loss = d if beta == 0 else T.where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta)
    if red == "mean":
        return loss.mean()
    return loss.sum() if red == "sum" else loss


# -- probabilistic, margin and embedding losses (PyTorch's formulas) ------------------------
def _same_size(fn: str, x: Tensor, y: Tensor) -> None:
    if x.ndim != y.ndim or not all(sh.same(a, b) for a, b in zip(x.shape, y.shape)):
        raise ValueError(f"{fn}: Using a target size ({tuple(y.shape)}) that is different to "
                         f"the input size ({tuple(x.shape)}) is deprecated. Please ensure they "
                         "have the same size.")


@amp.float32_op
def binary_cross_entropy(input: Any, target: Any, weight: Any = None, size_average: Any = None,
                         reduce: Any = None, reduction: str = "mean") -> Tensor:
    """``-w·(y·log x + (1 - y)·log(1 - x))`` with each log clamped at -100, as ATen."""
    red = _reduction(size_average, reduce, reduction)
    x = T.as_tensor(input)
    y = T.as_tensor(target).to(x.dtype)
    _same_size("binary_cross_entropy", x, y)
    lx = T.clamp(x.log(), -100.0)
    l1x = T.clamp((1.0 - x).log(), -100.0)
    loss = (y - 1.0) * l1x - y * lx
    if weight is not None:
        loss = loss * T.as_tensor(weight).to(x.dtype)
    return _reduce(loss, red)


def _xlogx(t: Tensor) -> Tensor:
    zero = t == 0
    return T.where(zero, 0.0, t * T.where(zero, 1.0, t).log())


@amp.float32_op
def kl_div(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    """``target·(log target - input)`` (``xlogy``: 0 where target is 0), or
    ``exp(target)·(target - input)`` with ``log_target``; ``batchmean`` divides the sum by
    the batch size."""
    if size_average is not None or reduce is not None:
        red = _reduction(size_average, reduce, "mean")
    elif reduction == "batchmean":
        red = reduction
    else:
        red = _reduction(None, None, reduction)
    x = T.as_tensor(input)
    t = T.as_tensor(target).to(x.dtype)
    loss = t.exp() * (t - x) if log_target else _xlogx(t) - t * x
    if red == "batchmean":
        if x.ndim <= 1:
            return loss.sum() / x.shape[0] if x.ndim else loss.sum()
        return loss.sum(tuple(range(1, x.ndim))).mean()  # sum / (symbolic) batch
    return _reduce(loss, red)


@amp.float32_op
def huber_loss(input: Any, target: Any, reduction: str = "mean", delta: float = 1.0,
               weight: Any = None) -> Tensor:
    """``0.5·d²`` below ``delta``, ``delta·(|d| - 0.5·delta)`` above."""
    red = _reduction(None, None, reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    x, y = T.as_tensor(input), T.as_tensor(target)
    d = (x - y).abs()
    loss = T.where(d < delta, d * d * 0.5, (d - 0.5 * delta) * delta)
    if weight is not None:
        loss = loss * T.as_tensor(weight).to(loss.dtype)
    return _reduce(loss, red)


@amp.float32_op
def cosine_embedding_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0,
                          size_average: Any = None, reduce: Any = None,
                          reduction: str = "mean") -> Tensor:
    """``1 - cos`` where target is 1, ``max(0, cos - margin)`` where it is -1 (ATen's form,
    with 1e-12 added to each squared magnitude)."""
    red = _reduction(size_average, reduce, reduction)
    a, b = T.as_tensor(input1), T.as_tensor(input2)
    t = T.as_tensor(target)
    if a.ndim not in (1, 2) or tuple(a.shape) != tuple(b.shape) and a.ndim != b.ndim:
        raise RuntimeError(f"cosine_embedding_loss: expected 1D or 2D inputs of one shape, got "
                           f"{tuple(a.shape)} and {tuple(b.shape)}")
    if t.ndim != a.ndim - 1:
        raise RuntimeError(f"{a.ndim}D target tensor expects {a.ndim + 1}D input tensors, but "
                           f"found inputs with sizes {tuple(a.shape)} and {tuple(b.shape)}.")
    dim = a.ndim - 1
    prod = (a * b).sum(dim)
    m1 = (a * a).sum(dim) + 1e-12
    m2 = (b * b).sum(dim) + 1e-12
    cos = prod / (m1 * m2).sqrt()
    pos = T.where(t == 1, 1.0 - cos, 0.0)
    neg = T.where(t == -1, T.clamp(cos - margin, 0.0), 0.0)
    return _reduce(pos + neg, red)


@amp.float32_op
def margin_ranking_loss(input1: Any, input2: Any, target: Any, margin: float = 0.0,
                        size_average: Any = None, reduce: Any = None,
                        reduction: str = "mean") -> Tensor:
    """``max(0, -target·(input1 - input2) + margin)``."""
    red = _reduction(size_average, reduce, reduction)
    a, b, t = T.as_tensor(input1), T.as_tensor(input2), T.as_tensor(target)
    if not (a.ndim == b.ndim == t.ndim):
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same "
                           f"dimension but got sizes: input1: {tuple(a.shape)}, input2: "
                           f"{tuple(b.shape)}, target: {tuple(t.shape)} ")
    return _reduce(T.clamp(-t.to(a.dtype) * (a - b) + margin, 0.0), red)


def _norm_last(v: Tensor, p: float) -> Tensor:
    if p == 2:
        return (v * v).sum(-1).sqrt()
    if p == 1:
        return v.abs().sum(-1)
    if p == float("inf"):
        return T.amax(v.abs(), -1)
    if p == 0:
        return (v != 0).to(v.dtype).sum(-1)
    return (v.abs() ** float(p)).sum(-1) ** (1.0 / p)


def cosine_similarity(x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``F.cosine_similarity`` as ATen computes it: each input divided by its 2-norm along
    ``dim`` clamped below at ``eps``, then the products summed. The clamp is applied to the
    norm's value only (ATen clamps in place under ``no_grad``), so gradients flow through
    the unclamped norm, as there."""
    from ..reduce_ops import vector_norm

    a, b = T.as_tensor(x1), T.as_tensor(x2)
    shape = sh.broadcast(a.shape, b.shape, "cosine_similarity")
    a, b = a.expand(*shape), b.expand(*shape)
    d = sh.norm_axis(int(dim), len(shape), "cosine_similarity")
    if not a.dtype.is_float:
        a = a.to(dt.float32)
    b = b.to(a.dtype)

    def clamped(v: Tensor) -> Tensor:
        n = vector_norm(v, 2, d, True)
        return n + (T.clamp(n, eps) - n).detach()

    return ((a / clamped(a)) * (b / clamped(b))).sum(d)


def pairwise_distance(x1: Any, x2: Any, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """``‖x1 - x2 + eps‖_p`` over the last dim (``torch.nn.functional.pairwise_distance``)."""
    a, b = T.as_tensor(x1), T.as_tensor(x2)
    out = _norm_last(a - b + eps, p)
    return out.unsqueeze(-1) if keepdim else out


@amp.float32_op
def triplet_margin_loss(anchor: Any, positive: Any, negative: Any, margin: float = 1.0,
                        p: float = 2, eps: float = 1e-6, swap: bool = False,
                        size_average: Any = None, reduce: Any = None,
                        reduction: str = "mean") -> Tensor:
    """``max(0, margin + d(a, p) - d(a, n))`` with ``pairwise_distance``; ``swap`` uses
    ``min(d(a, n), d(p, n))``."""
    red = _reduction(size_average, reduce, reduction)
    a, po, ne = T.as_tensor(anchor), T.as_tensor(positive), T.as_tensor(negative)
    if not (a.ndim == po.ndim == ne.ndim):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {a.ndim}D, "
                           f"positive {po.ndim}D, and negative {ne.ndim}D inputs")
    if margin <= 0:
        raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got "
                         f"{margin} instead")
    d_pos = pairwise_distance(a, po, p, eps)
    d_neg = pairwise_distance(a, ne, p, eps)
    if swap:
        d_neg = T.binary("minimum", d_neg, pairwise_distance(po, ne, p, eps))
    return _reduce(T.clamp(d_pos - d_neg + margin, 0.0), red)


@amp.float32_op
def poisson_nll_loss(input: Any, target: Any, log_input: bool = True, full: bool = False,
                     size_average: Any = None, eps: float = 1e-8, reduce: Any = None,
                     reduction: str = "mean") -> Tensor:
    """``exp(x) - y·x`` (``log_input``) or ``x - y·log(x + eps)``; ``full`` adds Stirling's
    ``y·log y - y + 0.5·log(2πy)`` where ``y > 1``."""
    red = _reduction(size_average, reduce, reduction)
    x = T.as_tensor(input)
    y = T.as_tensor(target).to(x.dtype)
    loss = x.exp() - y * x if log_input else x - y * (x + eps).log()
    if full:
        big = y > 1
        ys = T.where(big, y, 1.0)
        stirling = ys * ys.log() - ys + (ys * (2 * math.pi)).log() * 0.5
        loss = loss + T.where(big, stirling, 0.0)
    return _reduce(loss, red)


def gaussian_nll_loss(input: Any, target: Any, var: Any, full: bool = False,
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """``0.5·(log var + (input - target)²/var)`` (+ ``0.5·log 2π`` with ``full``), var
    clamped at ``eps`` without changing its gradient, as PyTorch (which clamps in place
    under ``no_grad``)."""
    x, y = T.as_tensor(input), T.as_tensor(target)
    v = T.as_tensor(var, x.dtype) if not isinstance(var, (int, float)) \
        else T.as_tensor(float(var), x.dtype)
    if tuple(v.shape) != tuple(x.shape):
        if tuple(x.shape[:-1]) == tuple(v.shape):
            v = v.unsqueeze(-1)
        elif not (tuple(x.shape[:-1]) == tuple(v.shape[:-1]) and v.ndim and v.shape[-1] == 1) \
                and v.ndim:
            raise ValueError("var is of incorrect size")
    if reduction not in _REDUCTIONS:
        raise ValueError(reduction + " is not valid")
    if _context.current() is None and v._node is not None and bool((v.detach().numpy() < 0).any()):
        raise ValueError("var has negative entry/entries")
    v = v + (T.clamp(v.detach(), eps) - v.detach())
    d = x - y
    loss = (v.log() + d * d / v) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@amp.float32_op
def soft_margin_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                     reduction: str = "mean") -> Tensor:
    """``log(1 + exp(-y·x))``."""
    red = _reduction(size_average, reduce, reduction)
    x = T.as_tensor(input)
    y = T.as_tensor(target).to(x.dtype)
    return _reduce(T.unary("log1p", (-x * y).exp()), red)


@amp.float32_op
def hinge_embedding_loss(input: Any, target: Any, margin: float = 1.0,
                         size_average: Any = None, reduce: Any = None,
                         reduction: str = "mean") -> Tensor:
    """``x`` where target is 1, ``max(0, margin - x)`` where it is -1 (ATen's sum of both
    masked terms, so other targets contribute both)."""
    red = _reduction(size_average, reduce, reduction)
    x, t = T.as_tensor(input), T.as_tensor(target)
    out = T.where(t != 1, T.clamp(margin - x, 0.0), 0.0) + T.where(t != -1, x, 0.0)
    return _reduce(out, red)


def multilabel_soft_margin_loss(input: Any, target: Any, weight: Any = None,
                                size_average: Any = None, reduce: Any = None,
                                reduction: str = "mean") -> Tensor:
    """The mean over classes of ``-(y·logσ(x) + (1 - y)·logσ(-x))``."""
    red = _reduction(size_average, reduce, reduction)
    x = T.as_tensor(input)
    y = T.as_tensor(target).to(x.dtype)
    loss = -(y * log_sigmoid(x) + (1.0 - y) * log_sigmoid(-x))
    if weight is not None:
        loss = loss * T.as_tensor(weight).to(x.dtype)
    cd = x.ndim - 1
    loss = loss.sum(cd) / x.shape[cd]
    return _reduce(loss, red)


@amp.float32_op
def ctc_loss(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
             blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """Not supported: the alignment recursion over data-dependent lengths is no composition
    of graphc's primitives."""
    raise NotImplementedError("ctc_loss is not supported (its forward-backward recursion over "
                              "per-sample lengths has no composition in graphc's primitives)")
