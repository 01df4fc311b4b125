"""The elementwise ops, one ``OpDef`` each: reference, derivative, lowering, surface.

This module holds the core primitives and gathers the sections (``activations.py``, ...):
``ELEMENTWISE`` (IR primitives), ``COMPOSITES`` (ops written in terms of others) and
``SURFACE`` (everything the front end exposes). Adding an elementwise op is one entry in a
section plus its tests (``tests/test_ops.py`` case,
PyTorch parity in ``tests/test_elementwise_table.py``): the interpreter, the autodiff pass,
the CPU and PTX code generators, ``Tensor`` methods, ``gc.*``, ``nn.functional`` and the ``nn``
module are derived from it. A transcendental needs, in addition, one routine in
``codegen/vmath.py``, which both the CPU and the PTX backend emit.

Conventions (shared by every entry):

- operands have identical shapes and dtypes (the front end broadcasts and promotes first);
- ``ref`` gets numpy arrays of the operands' dtype; its result is cast to the node's dtype;
- ``vjp`` returns one cotangent per input (``None`` for "no gradient"), following PyTorch's
  ``derivatives.yaml`` / ATen backward kernels so gradients agree to rounding, including the
  value chosen at kinks and ties;
- ``lower`` receives the lowering vocabulary ``e`` (``codegen/emit.py``) and the operand values;
  ``e``'s helpers are type generic (float, signed int, bool), comparisons are ordered unless
  ``nan=True`` asks for "true when unordered".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ._ewlib import _binary, _c, _float, _no_grad, _sigmoid_ref, _unary, _wants
from .activations import ACTIVATIONS
from .fma import fma, fma32
from .mathops import MATH
from .opdef import OpDef
from .pointwise import POINTWISE

_erf_scalar = np.frompyfunc(math.erf, 1, 1)


# -- references that need more than one numpy call ----------------------------------------
def _relu_ref(x: np.ndarray) -> np.ndarray:
    """PyTorch's relu (``clamp_min(x, 0)``): 0 where x < 0, else x itself, so NaN stays
    NaN and -0.0 stays -0.0 (ATen's max(x, 0) returns its first operand on a tie)."""
    return np.where(x < 0, x.dtype.type(0), x)


def _fmadd_ref(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` with one rounding (``ir.fma``); float32 and float64 operands (a
    bfloat16 op runs on float32 operands under the interpreter's rule)."""
    if a.dtype == np.float64:
        return fma(a, b, c)
    return fma32(a, b, c)


def _div_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float division; integer division floors (the front end only emits it for ``//``)."""
    if _float(a):
        return a / b
    return np.floor_divide(a, np.where(b == 0, 1, b))


# PyTorch's CPU pow with one float exponent (``pow_tensor_scalar_optimized_kernel``) spells
# these out instead of calling pow; the same expressions give its bits (checked against
# torch in tests/test_pointwise.py), and skip numpy's per-element pow of a broadcast
_POW_SCALAR = {2.0: lambda a: a * a, 3.0: lambda a: a * a * a, 1.0: lambda a: a.copy(),
               0.0: np.ones_like, -1.0: lambda a: 1 / a, -2.0: lambda a: 1 / (a * a),
               -0.5: lambda a: 1 / np.sqrt(a)}


def _pow_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.power``, except integer negative exponents (numpy raises): PyTorch gives the
    truncated 1 / a**|b|, i.e. 1 for a == 1, +-1 for a == -1 by parity, else 0; and a
    float operand raised to one exponent broadcast over it (``x ** 2``: a scalar, so every
    stride is 0) as PyTorch computes a scalar exponent (``_POW_SCALAR``)."""
    if _float(a) and b.size and not any(b.strides):
        fast = _POW_SCALAR.get(float(b.reshape(-1)[0]))
        if fast is not None:
            return np.asarray(fast(a), dtype=a.dtype)
    if _float(a) or not (b < 0).any():
        return np.power(a, b)
    neg = b < 0
    out = np.power(a, np.where(neg, 0, b))
    one = np.ones_like(out)
    at_neg = np.where(a == 1, one, np.where(a == -1, np.where(b % 2 == 1, -one, one),
                                           np.zeros_like(out)))
    return np.where(neg, at_neg, out)


def _sign_ref(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.bool_:
        return x.copy()
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


# -- derivative rules shared by several entries ---------------------------------------------
def eager_const(n: Any) -> float | None:
    """The number an eager value-only leaf ``n`` stands for, if it is a broadcast constant
    (not requiring grad, a non-empty float or integer value whose strides are all 0: one
    number repeated, as a Python number operand is built), else None."""
    v = n._value
    if (not n.rg and type(v) is np.ndarray and v.size and v.dtype.kind in "fi"
            and not any(v.strides)):
        return float(v.reshape(-1)[0])
    return None


def _const_value(n: Any, b: Any = None) -> float | None:
    """The value of a (broadcast/reshaped) numeric constant node, else None.

    Eagerly (``b.eager``) a constant is already a value-only leaf; one that does not
    require grad and whose value is a broadcast (every stride 0: one number repeated, a
    read-only view) counts as that number, so ``x ** 2`` is differentiated as in a traced
    step, without the guard ops a variable exponent needs."""
    while n.op in ("expand", "reshape"):
        n = n.inputs[0]
    if n.op == "input" and getattr(b, "eager", False):
        v = eager_const(n)
        reads = getattr(b, "const_reads", None)
        if reads is not None:  # a cached eager backward is reused only where it reads alike
            reads.append((n, v))
        return v
    v = n.attrs.get("value") if n.op == "const" else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _pow_vjp(b: Any, n: Any, g: Any) -> list:
    """PyTorch's ``pow_backward_self``/``pow_backward_exponent``: d/dx is 0 where y == 0 (so
    ``x ** 0.0`` at x = 0 gives 0, not 0 * inf), d/dy is 0 where x == 0 and y >= 0 (so
    ``0 ** y`` gives 0, not y * log 0); products grouped as ATen groups them."""
    x, y = n.inputs
    yv = _const_value(y, b)
    if not _wants(x):
        dx = None
    elif yv == 0.0:
        dx = _c(b, 0.0, n)
    elif yv is not None:  # ``x ** 2``: the exponent less one as a scalar constant, so the
        # eager reference takes PyTorch's spelled-out form (``_POW_SCALAR``), not np.power
        dx = b.mul(g, b.mul(y, b.binary("pow", x, b.const(yv - 1.0, (), x.dtype))))
    else:
        dx = b.mul(g, b.mul(y, b.op("pow", (x, b.sub(y, _c(b, 1.0, n))))))
        if yv is None:
            zero = _c(b, 0.0, n)
            dx = b.where(b.op("eq", (y, zero)), zero, dx)
    # no gradient for a constant exponent, nor for one that does not require grad
    # (``_wants``): eagerly that saves a log and six more ops over the operand (``x ** 2``)
    if yv is not None or not _wants(y):
        return [dx, None]
    zero = _c(b, 0.0, n)
    flat = b.op("and", (b.op("eq", (x, zero)), b.op("ge", (y, zero))))
    dy = b.mul(g, b.where(flat, zero, b.mul(n, b.op("log", (x,)))))
    return [dx, dy]


def _minmax_vjp(lose: str) -> Callable[..., list]:
    """maximum/minimum: the gradient goes to the winner, split evenly on ties (ATen)."""

    def vjp(b: Any, n: Any, g: Any) -> list:
        x, y = n.inputs
        zero, half = _c(b, 0.0, n), _c(b, 0.5, n)
        gh = b.where(b.op("eq", (x, y)), b.mul(g, half), g)
        return [b.where(b.op(lose, (x, y)), zero, gh), b.where(b.op(lose, (y, x)), zero, gh)]

    return vjp


# -- the table --------------------------------------------------------------------------
def _cmp(name: str, ref: Callable) -> OpDef:
    # gc.eq & co.; the methods (x.eq, x.eq_) are installed with the operators; bool results
    # are tested in tests/test_pointwise.py
    return _binary(name, differentiable=False, ref=ref, vjp=_no_grad,
                   lower=lambda e, x, y: getattr(e, name)(x, y), api=("gc",),
                   extra={"own_tests": True})


CORE: tuple[OpDef, ...] = (
    # unary
    _unary("neg", api=("Tensor",), ref=np.negative, vjp=lambda b, n, g: [b.neg(g)],
           lower=lambda e, x: e.neg(x)),
    _unary("exp", api=("Tensor",), float_only=True, ref=np.exp, vjp=lambda b, n, g: [b.mul(g, n)],
           lower=lambda e, x: e.math("exp", x)),
    _unary("log", api=("Tensor",), float_only=True, ref=np.log,
           vjp=lambda b, n, g: [b.div(g, n.inputs[0])], lower=lambda e, x: e.math("log", x)),
    _unary("sqrt", api=("Tensor",), float_only=True, ref=np.sqrt,
           vjp=lambda b, n, g: [b.div(g, b.mul(_c(b, 2.0, n), n))],
           lower=lambda e, x: e.intr("sqrt", x)),
    _unary("abs", api=("Tensor",), ref=np.abs,
           vjp=lambda b, n, g: [b.mul(g, b.op("sign", (n.inputs[0],)))],
           lower=lambda e, x: e.abs(x)),
    # sign keeps NaN and the sign of zero (x itself where it is neither > 0 nor < 0)
    # sign is (x > 0) - (x < 0) as in ATen: NaN and -0.0 give 0; its gradient is a tensor
    # of zeros (as torch gives), not "no gradient"
    _unary("sign", api=("Tensor", "gc"), ref=_sign_ref,
           vjp=lambda b, n, g: [_c(b, 0.0, n)],
           lower=lambda e, x: e.select(e.gt(x, e.c(0)), e.c(1),
                                       e.select(e.lt(x, e.c(0)), e.c(-1), e.c(0)))),
    _unary("tanh", api=("Tensor", "F"), float_only=True, ref=np.tanh,
           vjp=lambda b, n, g: [b.mul(g, b.sub(_c(b, 1.0, n), b.mul(n, n)))],
           lower=lambda e, x: e.math("tanh", x)),
    _unary("sigmoid", api=("Tensor", "F"), float_only=True, ref=_sigmoid_ref,
           vjp=lambda b, n, g: [b.mul(b.mul(g, b.sub(_c(b, 1.0, n), n)), n)],
           lower=lambda e, x: e.math("sigmoid", x)),
    # relu propagates NaN (PyTorch's clamp_min(0) does); its gradient is 0 at x <= 0
    _unary("relu", api=("Tensor", "F"), module="ReLU", ref=_relu_ref,
           vjp=lambda b, n, g: [b.where(b.op("le", (n, _c(b, 0.0, n))), _c(b, 0.0, n), g)],
           lower=lambda e, x: e.select(e.lt(x, e.c(0)), e.c(0), x)),
    _unary("erf", api=("Tensor",), float_only=True,
           ref=lambda x: np.asarray(_erf_scalar(x.astype(np.float64)), np.float64),
           vjp=lambda b, n, g: [b.mul(g, b.mul(
               _c(b, 1.1283791670955126, n),
               b.op("exp", (b.neg(b.mul(n.inputs[0], n.inputs[0])),))))],
           lower=lambda e, x: e.math("erf", x)),
    _unary("not", differentiable=False, ref=np.logical_not, vjp=_no_grad,
           lower=lambda e, x: e.not_(x)),
    _unary("cast", ref=lambda x: x,  # the interpreter casts every result to the node's dtype
           vjp=lambda b, n, g: [b.cast(g, n.inputs[0].dtype)
                                if n.inputs[0].dtype.is_float else None],
           lower=lambda e, x: e.cast(x)),
    # binary
    _binary("add", ref=np.add, vjp=lambda b, n, g: [g, g], lower=lambda e, x, y: e.add(x, y)),
    _binary("sub", ref=np.subtract,
            vjp=lambda b, n, g: [g, b.neg(g) if _wants(n.inputs[1]) else None],
            lower=lambda e, x, y: e.sub(x, y)),
    _binary("mul", ref=np.multiply,
            vjp=lambda b, n, g: [b.mul(g, n.inputs[1]) if _wants(n.inputs[0]) else None,
                                 b.mul(g, n.inputs[0]) if _wants(n.inputs[1]) else None],
            lower=lambda e, x, y: e.mul(x, y)),
    _binary("div", ref=_div_ref,
            vjp=lambda b, n, g: [b.div(g, n.inputs[1]) if _wants(n.inputs[0]) else None,
                                 b.div(b.mul(b.neg(g), n.inputs[0]),
                                       b.mul(n.inputs[1], n.inputs[1]))
                                 if _wants(n.inputs[1]) else None],
            lower=lambda e, x, y: e.div(x, y)),
    _binary("pow", ref=_pow_ref, vjp=_pow_vjp, lower=lambda e, x, y: e.pow(x, y)),
    _binary("maximum", ref=np.maximum, vjp=_minmax_vjp("lt"),
            lower=lambda e, x, y: e.max(x, y)),
    _binary("minimum", ref=np.minimum, vjp=_minmax_vjp("gt"),
            lower=lambda e, x, y: e.min(x, y)),
    _cmp("lt", np.less),
    _cmp("le", np.less_equal),
    _cmp("gt", np.greater),
    _cmp("ge", np.greater_equal),
    _cmp("eq", np.equal),
    _cmp("ne", np.not_equal),
    _binary("and", differentiable=False, ref=np.logical_and, vjp=_no_grad,
            lower=lambda e, x, y: e.and_(x, y)),
    _binary("or", differentiable=False, ref=np.logical_or, vjp=_no_grad,
            lower=lambda e, x, y: e.or_(x, y)),
    # a * b + c rounded once: ATen's fused kernels (add/sub with alpha, addcmul, lerp)
    OpDef("fmadd", "elementwise", 3, float_only=True, ref=_fmadd_ref,
          vjp=lambda b, n, g: [b.mul(g, n.inputs[1]) if _wants(n.inputs[0]) else None,
                               b.mul(g, n.inputs[0]) if _wants(n.inputs[1]) else None, g],
          lower=lambda e, x, y, z: e.fma(x, y, z),
          doc="``a * b + c`` with one rounding, as ATen's fused kernels compute it"),
    OpDef("where", "elementwise", 3, ref=np.where,
          vjp=lambda b, n, g: [None, b.where(n.inputs[0], g, _c(b, 0.0, n)),
                               b.where(n.inputs[0], _c(b, 0.0, n), g)],
          lower=lambda e, c, x, y: e.select(c, x, y)),
)

# every section's entries; primitives are IR ops, composites are front-end compositions
_SECTIONS = CORE + ACTIVATIONS + MATH + POINTWISE
ELEMENTWISE: tuple[OpDef, ...] = tuple(d for d in _SECTIONS if d.kind == "elementwise")
COMPOSITES: tuple[OpDef, ...] = tuple(d for d in _SECTIONS if d.kind == "composite")
# what the front end exposes (Tensor methods, gc.*, nn.functional, nn modules)
SURFACE: tuple[OpDef, ...] = tuple(d for d in _SECTIONS if d.api or d.module)

COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
LOGICAL = ("and", "or", "not")
