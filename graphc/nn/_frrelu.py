"""``F.rrelu``, ``F.rrelu_`` and ``nn.RReLU``: the randomized leaky ReLU.

Why a module of its own: in training mode RReLU is not an elementwise op of the op table. ATen's
CPU kernel (``_rrelu_with_noise_train`` in ``aten/src/ATen/native/Activation.cpp``) walks the
input in element order and, for each element ``x <= 0`` only, draws one
``uniform_real_distribution<double>(lower, upper)`` sample (53 bits of one 64-bit word, two
32-bit words of the generator, for float and double alike; the bounds are first rounded to the
element type's math type, float for float32), then writes ``x * r`` and keeps ``r`` as the
noise (1 for the other elements, NaN included); the gradient is ``noise * grad``. How many
words it takes therefore depends on the data, which a compiled step cannot know when it is
traced: there, training mode raises NotImplementedError before anything is drawn (eval mode,
a fixed slope, compiles). Eagerly the same samples come from graphc's stream
(``graphc.random.uniform`` in double), so after the same ``gc.manual_seed`` /
``torch.manual_seed`` the values and gradients are PyTorch's.

In eval mode RReLU is ``leaky_relu`` with slope ``(lower + upper) / 2`` computed in doubles,
as ATen does, through the op table's ``leaky_relu`` entry.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _context
from .. import random as _random
from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..ir.elementwise import SURFACE
from ..tensor import Tensor
from .module import Module

_LEAKY_RELU = next(d for d in SURFACE if d.name == "leaky_relu")


def _check_bounds(lower: float, upper: float) -> None:
    if not lower <= upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")


def _noise(x: Tensor, lower: float, upper: float) -> np.ndarray:
    """The noise ATen's CPU kernel draws for ``x`` (one sample per element ``<= 0``, in
    element order; 1 elsewhere), as an array of ``x``'s dtype."""
    if x.dtype not in (dt.float32, dt.float64):
        if x.dtype is dt.bfloat16:
            raise NotImplementedError(
                "rrelu(training=True) of a bfloat16 input is not supported by graphc: ATen "
                "multiplies by the float32 sample but keeps (and differentiates with) the "
                "bfloat16-rounded one; cast the input to float32")
        name = T._TORCH_NAME.get(x.dtype.name, x.dtype.name)
        raise NotImplementedError(f"\"rrelu_with_noise_out_cpu\" not implemented for '{name}'")
    values = np.ascontiguousarray(x.numpy())  # element (row-major) order, as ATen's loop
    hit = values <= 0
    if x.dtype is dt.float32:  # opmath_t is float: the bounds are rounded to float first
        lower, upper = float(np.float32(lower)), float(np.float32(upper))
    # ATen's rrelu_with_noise is generic code, compiled without FMA contraction: two roundings
    draws = _random.uniform((int(hit.sum()),), lower, upper, np.float64, fused=False)
    noise = np.ones(values.shape, x.dtype.np)
    noise[hit] = draws.astype(x.dtype.np)  # (opmath_t) of the double sample
    return noise


def rrelu(input: Any, lower: float = 1.0 / 8, upper: float = 1.0 / 3,  # noqa: A002
          training: bool = False, inplace: bool = False) -> Tensor:
    """``F.rrelu``: ``x`` where ``x > 0``; elsewhere ``x * a``, ``a`` drawn from
    ``U(lower, upper)`` per element in training mode, ``(lower + upper) / 2`` otherwise.
    ``inplace``: the result is written into ``input`` and returned."""
    x = T.as_tensor(input)
    lower, upper = float(lower), float(upper)
    _check_bounds(lower, upper)
    if not training:
        slope = (lower + upper) / 2  # ATen: (lower + upper) / 2 in doubles
        if inplace:
            return T._inplace_method(_LEAKY_RELU)(x, negative_slope=slope)
        return T.apply_op(_LEAKY_RELU, x, negative_slope=slope)
    if _context.current() is not None or x._trace is not None:
        raise NotImplementedError(
            "rrelu(training=True) inside a compiled step is not supported: PyTorch draws one "
            "random sample per element <= 0, so how much of the random stream a call uses "
            "depends on the data, which the compiled step does not know when it is traced. "
            "Compile the model in eval mode (model.eval(): a fixed slope), or use "
            "leaky_relu / dropout, whose draws do not depend on the values")
    out = x * Tensor._from_array(_noise(x, lower, upper))  # gradient: noise * grad (ATen's)
    return x._assign(out) if inplace else out


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3,  # noqa: A002
           training: bool = False) -> Tensor:
    """``F.rrelu_``: ``rrelu`` written into ``input``."""
    if not isinstance(input, Tensor):
        raise TypeError(f"rrelu_(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    return rrelu(input, lower, upper, training, inplace=True)


class RReLU(Module):
    """``torch.nn.RReLU``: ``F.rrelu`` with the module's ``training`` flag (random slopes
    while training, the mean slope after ``eval()``)."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
                 inplace: bool = False) -> None:
        super().__init__()
        self.lower = lower
        self.upper = upper
        self.inplace = inplace

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        """Apply ``F.rrelu`` with this module's bounds and mode."""
        return rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        inplace_str = ", inplace=True" if self.inplace else ""
        return f"lower={self.lower}, upper={self.upper}{inplace_str}"


__all__ = ["rrelu", "rrelu_", "RReLU"]
