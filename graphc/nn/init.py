"""Parameter initialisers with PyTorch's formulas and random stream (``graphc.random``)."""

from __future__ import annotations

import math

import numpy as np

from .. import random as grandom
from ..tensor import Tensor


def _eager(t: Tensor, name: str) -> None:
    """Initialisers write a tensor's storage now, from the random stream, once: inside a
    compiled step that would happen at trace time only (the compiled calls would skip it), so
    they raise there, before drawing anything."""
    from .. import _context

    if _context.current() is not None or getattr(t, "_trace", None) is not None:
        raise NotImplementedError(
            f"nn.init.{name} inside a compiled function: initialisers write the tensor in "
            "place once, when called, not on every call of a compiled step; initialise the "
            "parameters before compiling or between calls")


def _fill(t: Tensor, arr: np.ndarray) -> Tensor:
    np.copyto(t._node._value, arr.astype(t.dtype.np))
    return t


def _fans(t: Tensor) -> tuple[int, int]:
    shape = t.shape
    if len(shape) < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    rf = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * rf, shape[0] * rf


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    _eager(t, "uniform_")
    return _fill(t, grandom.uniform(t.shape, a, b, t.dtype.np))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    _eager(t, "normal_")
    return _fill(t, grandom.normal(t.shape, mean, std, t.dtype.np))


def zeros_(t: Tensor) -> Tensor:
    _eager(t, "zeros_")
    return _fill(t, np.zeros(t.shape))


def ones_(t: Tensor) -> Tensor:
    _eager(t, "ones_")
    return _fill(t, np.ones(t.shape))


def constant_(t: Tensor, val: float) -> Tensor:
    _eager(t, "constant_")
    return _fill(t, np.full(t.shape, val))


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu") -> Tensor:
    _eager(t, "kaiming_uniform_")
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan) if fan else 0.0
    return uniform_(t, -bound, bound)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu") -> Tensor:
    _eager(t, "kaiming_normal_")
    fan_in, fan_out = _fans(t)
    fan = fan_in if mode == "fan_in" else fan_out
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(t, 0.0, std)


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    _eager(t, "xavier_uniform_")
    fan_in, fan_out = _fans(t)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a)


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    _eager(t, "xavier_normal_")
    fan_in, fan_out = _fans(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _calculate_fan_in_and_fan_out(t: Tensor) -> tuple[int, int]:
    return _fans(t)
