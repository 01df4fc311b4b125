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

from ._ewlib import _binary, _c, _unary
from .igamma import IGAMMA
from .opdef import OpDef
from .special import SPECIAL
from .special_more import SPECIAL_MORE

_API = ("Tensor", "gc")


def _math(name: str, vjp: Any, ref: Any = None, domain: str = "real", **kw: Any) -> OpDef:
    """A float-only unary entry lowered to the ``vmath`` routine of the same name."""
    return _unary(name, float_only=True, api=_API, domain=domain,
                  ref=ref if ref is not None else getattr(np, name), vjp=vjp,
                  lower=lambda e, x: e.math(name, x), **kw)


def _one(b: Any, n: Any) -> Any:
    return _c(b, 1.0, n)


def _sq(b: Any, x: Any) -> Any:
    return b.mul(x, x)


def _sqrt(b: Any, x: Any) -> Any:
    return b.op("sqrt", (x,))


def _atan2_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``atan2_backward`` (self = y, other = x): ``g x r`` for y and ``g (-y) r`` for x
    with ``r = 1 / (x^2 + y^2)``, and ``r = 0`` where ``x^2 + y^2`` is 0 (as PyTorch gives:
    signed zeros at the origin, and where the squares underflow)."""
    y, x = n.inputs
    den = b.add(_sq(b, y), _sq(b, x))
    zero = _c(b, 0.0, n)
    recip = b.where(b.op("eq", (den, zero)), zero, b.div(_one(b, n), den))
    return [b.mul(b.mul(g, x), recip), b.mul(b.mul(g, b.neg(y)), recip)]


MATH: tuple[OpDef, ...] = (
    # expm1: grad * (result + 1); log1p: grad / (self + 1)
    _math("expm1", lambda b, n, g: [b.mul(g, b.add(n, _one(b, n)))]),
    _math("log1p", lambda b, n, g: [b.div(g, b.add(n.inputs[0], _one(b, n)))], domain="pos"),
    # trigonometric: sin' = cos, cos' = -sin, tan' = 1 + tan^2
    _math("sin", lambda b, n, g: [b.mul(g, b.op("cos", (n.inputs[0],)))]),
    _math("cos", lambda b, n, g: [b.mul(g, b.neg(b.op("sin", (n.inputs[0],))))]),
    _math("tan", lambda b, n, g: [b.mul(g, b.add(_one(b, n), _sq(b, n)))]),
    # inverse trigonometric: grad * rsqrt(1 - x^2), -grad * rsqrt(1 - x^2), grad / (x^2 + 1)
    _math("asin", lambda b, n, g: [b.div(g, _sqrt(b, b.sub(_one(b, n), _sq(b, n.inputs[0]))))],
          ref=np.arcsin, domain="unit"),
    _math("acos", lambda b, n, g: [b.neg(b.div(g, _sqrt(b, b.sub(_one(b, n),
                                                                 _sq(b, n.inputs[0])))))],
          ref=np.arccos, domain="unit"),
    _math("atan", lambda b, n, g: [b.div(g, b.add(_sq(b, n.inputs[0]), _one(b, n)))],
          ref=np.arctan),
    # hyperbolic: sinh' = cosh, cosh' = sinh; inverse: rsqrt(x^2 + 1), rsqrt(x^2 - 1),
    # 1 / (1 - x^2)
    _math("sinh", lambda b, n, g: [b.mul(g, b.op("cosh", (n.inputs[0],)))]),
    _math("cosh", lambda b, n, g: [b.mul(g, b.op("sinh", (n.inputs[0],)))]),
    _math("asinh", lambda b, n, g: [b.div(g, _sqrt(b, b.add(_sq(b, n.inputs[0]),
                                                            _one(b, n))))],
          ref=np.arcsinh),
    _math("acosh", lambda b, n, g: [b.div(g, _sqrt(b, b.sub(_sq(b, n.inputs[0]),
                                                            _one(b, n))))],
          ref=np.arccosh, domain="ge1"),
    _math("atanh", lambda b, n, g: [b.div(g, b.sub(_one(b, n), _sq(b, n.inputs[0])))],
          ref=np.arctanh, domain="unit"),
    # logarithms and powers of two: grad / (x ln2), grad / (x ln10), grad * result * ln2
    _math("log2", lambda b, n, g: [b.div(g, b.mul(n.inputs[0], _c(b, 0.6931471805599453, n)))],
          domain="pos"),
    _math("log10", lambda b, n, g: [b.div(g, b.mul(n.inputs[0],
                                                   _c(b, 2.3025850929940456, n)))],
          domain="pos"),
    _math("exp2", lambda b, n, g: [b.mul(b.mul(g, n), _c(b, 0.6931471805599453, n))]),
    # atan2(self, other): operands broadcast and promoted by the front end (integers to
    # float32); tested with its two operands in tests/test_mathops.py
    _binary("atan2", float_only=True, api=_API, ref=np.arctan2, vjp=_atan2_vjp,
            lower=lambda e, y, x: e.math("atan2", y, x), extra={"own_tests": True}),
    # the special functions (erfc, erfinv, lgamma, digamma, i0, sinc, logit, ...):
    # graphc/ir/special.py
    *SPECIAL,
    # zeta, ndtri, erfcx, i0e, i1e and the Bessel functions behind graphc.special:
    # graphc/ir/special_more.py
    *SPECIAL_MORE,
    # the regularized incomplete gamma functions: graphc/ir/igamma.py
    *IGAMMA,
)
