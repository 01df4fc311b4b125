"""``graphc.nn.functional``: the functional forms of layers and losses (as torch's)."""

from __future__ import annotations

import warnings
from typing import Any

from .. import tensor_ops as T
from ..ir import user_location
from ..tensor import Tensor

relu = lambda x, inplace=False: T.unary("relu", x)  # noqa: E731
tanh = lambda x: T.unary("tanh", x)  # noqa: E731
sigmoid = lambda x: T.unary("sigmoid", x)  # noqa: E731
softmax = lambda x, dim=None, dtype=None: T.softmax(T.as_tensor(x), dim)  # noqa: E731
log_softmax = lambda x, dim=None, dtype=None: T.log_softmax(T.as_tensor(x), dim)  # noqa: E731


def linear(x: Any, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` (the transpose is a view the backend folds into the GEMM)."""
    out = T.matmul(T.as_tensor(x), weight.T)
    return out + bias if bias is not None else out


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


_warned: set[tuple[str, str]] = set()


def _check_target_size(name: str, input: Tensor, target: Tensor) -> None:
    if tuple(target.shape) != tuple(input.shape):
        loc = user_location() or "?"
        key = (name, loc)
        if key in _warned:
            return
        _warned.add(key)
        warnings.warn(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to "
            f"broadcasting. Please ensure they have the same size. (at {loc})",
            UserWarning, stacklevel=4,
        )


def l1_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean") -> Tensor:
    input, target = T.as_tensor(input), T.as_tensor(target)
    _check_target_size("l1_loss", input, target)
    return _reduce((input - target).abs(), _reduction(size_average, reduce, reduction))


def mse_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean") -> Tensor:
    input, target = T.as_tensor(input), T.as_tensor(target)
    _check_target_size("mse_loss", input, target)
    d = input - target
    return _reduce(d * d, _reduction(size_average, reduce, reduction))
