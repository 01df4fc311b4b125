"""Elementary functions (trigonometric, hyperbolic, logarithm and exponential variants) as
op-table entries: ``gc.<op>`` and ``Tensor.<op>`` with PyTorch's names. Each transcendental
primitive lowers to one branch-free routine in ``codegen/vmath.py`` that the CPU and PTX
backends both emit.

All are float-only: integer tensors are promoted to float32 first, as PyTorch does. The
derivatives are those of PyTorch's ``derivatives.yaml``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ewlib import _c, _unary
from .opdef import OpDef

_API = ("Tensor", "gc")


def _math(name: str, vjp: Any, ref: Any = None, domain: str = "real", **kw: Any) -> OpDef:
    """A float-only unary entry lowered to the ``vmath`` routine of the same name."""
    return _unary(name, float_only=True, api=_API, domain=domain,
                  ref=ref if ref is not None else getattr(np, name), vjp=vjp,
                  lower=lambda e, x: e.math(name, x), **kw)


def _one(b: Any, n: Any) -> Any:
    return _c(b, 1.0, n)


MATH: tuple[OpDef, ...] = (
    # expm1: grad * (result + 1); log1p: grad / (self + 1)
    _math("expm1", lambda b, n, g: [b.mul(g, b.add(n, _one(b, n)))]),
    _math("log1p", lambda b, n, g: [b.div(g, b.add(n.inputs[0], _one(b, n)))], domain="pos"),
)
