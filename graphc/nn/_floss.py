"""Classification and robust-regression losses in tensor operations (PyTorch's formulas).

Class targets are read with ``gather``, whose native lowering bounds-checks every index: an
out-of-range target raises ``IndexError`` eagerly and from a compiled step (which then commits
nothing). Ignored targets are replaced by class 0 before the gather and masked afterwards.
"""

from __future__ import annotations

from typing import Any

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


def nll_loss(input: Any, target: Any, weight: Any = None, size_average: Any = None,
             ignore_index: int = -100, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities ``(C) | (N, C) | (N, C, d1, ...)``."""
    red = _reduction(size_average, reduce, reduction)
    x, t = T.as_tensor(input), T.as_tensor(target)
    _check_class_target("nll_loss", x.shape, t.shape)
    x, t, unbatched = _batched(x, t)
    loss, w = _picked(x, t, ignore_index, weight)
    return _reduce_weighted(loss * w, w, red, unbatched)


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
