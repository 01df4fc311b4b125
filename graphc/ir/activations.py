"""Activation functions (``nn.functional`` / ``nn`` module forms), as op-table entries.

Each entry follows PyTorch's forward formula and its ATen backward (including the one-sided
derivative chosen at kinks); ``tests/test_elementwise_table.py`` compares every entry with
PyTorch, eagerly and compiled, at the kinks too. Composites are written with the front end's
ops (``T``) and inherit their derivatives and lowerings.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ewlib import _c, _sigmoid_ref, _unary, composite
from .opdef import OpDef


def _silu_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``silu_backward``: ``g * s * (1 + x * (1 - s))`` with ``s = sigmoid(x)``."""
    x = n.inputs[0]
    s = b.op("sigmoid", (x,))
    one = _c(b, 1.0, n)
    return [b.mul(b.mul(g, s), b.add(one, b.mul(x, b.sub(one, s))))]


def _hardswish_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``hardswish_backward``: 0 for x <= -3, ``g * (x / 3 + 0.5)`` for -3 < x < 3, ``g``
    for x >= 3 (the one-sided choices at the kinks are PyTorch's)."""
    x = n.inputs[0]
    three, zero = _c(b, 3.0, n), _c(b, 0.0, n)
    mid = b.mul(g, b.add(b.div(x, three), _c(b, 0.5, n)))
    return [b.where(b.op("le", (x, b.neg(three))), zero,
                    b.where(b.op("lt", (x, three)), mid, g))]


def _hardswish_ref(x: np.ndarray) -> np.ndarray:
    t = x.dtype.type
    return x * np.minimum(np.maximum(x + t(3), t(0)), t(6)) / t(6)


def _hardtanh(T: Any, x: Any, min_val: float = -1.0, max_val: float = 1.0) -> Any:
    """``min_val`` / ``max_val`` outside, ``x`` inside: the gradient is zero at and beyond the
    bounds (ATen ``hardtanh_backward``), NaN passes through."""
    lo, hi = T.as_tensor(min_val, x.dtype), T.as_tensor(max_val, x.dtype)  # keep x's dtype
    return T.where(x <= lo, lo, T.where(x >= hi, hi, x))


ACTIVATIONS: tuple[OpDef, ...] = (
    composite("hardtanh", _hardtanh, params=(("min_val", -1.0), ("max_val", 1.0)),
              api=("F",), module="Hardtanh"),
    composite("relu6", lambda T, x: _hardtanh(T, x, 0.0, 6.0), api=("F",), module="ReLU6"),
    _unary("silu", float_only=True, int_inputs="reject", ref=lambda x: x * _sigmoid_ref(x),
           vjp=_silu_vjp,
           lower=lambda e, x: e.mul(x, e.math("sigmoid", x)),
           api=("Tensor", "F"), module="SiLU"),
    _unary("hardswish", float_only=True, int_inputs="reject", ref=_hardswish_ref,
           vjp=_hardswish_vjp,
           lower=lambda e, x: e.div(
               e.mul(x, e.min(e.max(e.add(x, e.c(3)), e.c(0)), e.c(6))), e.c(6)),
           api=("F",), module="Hardswish", extra={"repr_inplace": False}),
)
