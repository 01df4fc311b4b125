"""Rounding, remainders, comparisons and predicates, bitwise/logical and other pointwise
ops as op-table entries (``gc.<op>``, ``Tensor.<op>``, PyTorch's names and semantics).

The IR primitives here carry short names of their own (``truncdiv``, ``floormod``, ``bitand``,
``shl`` ...) where the user-facing op needs checks a primitive cannot make (integer division by
zero, dtypes PyTorch rejects, bool results): the surface entry is then a composite with
PyTorch's name that checks and applies the primitive.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ewlib import _binary, _c, _float, _no_grad, _unary, composite
from .opdef import OpDef

_TORCH_NAME = {"int64": "Long", "int32": "Int", "bool": "Bool", "float32": "Float",
               "float64": "Double"}


def _not_implemented(op: str, dtype: Any) -> NotImplementedError:
    """PyTorch's message for a dtype its kernel lacks (``NotImplementedError`` is a
    ``RuntimeError``)."""
    return NotImplementedError(f'"{op}" not implemented for {_TORCH_NAME[dtype.name]!r}')


# -- references ------------------------------------------------------------------------------
def _keep_ints(f: Any) -> Any:
    """A rounding function: numpy's on floats, the identity on integers (PyTorch returns
    integer tensors unchanged)."""
    return lambda x: f(x) if _float(x) else x.copy()


def _int_divisor(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The divisor with 0 and -1 replaced by 1, and where it was -1 (as ``Emit``)."""
    m1 = b == -1
    return np.where(m1 | (b == 0), np.ones_like(b), b), m1


def _fmod_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _float(a):
        return np.fmod(a, b)
    b1, _ = _int_divisor(b)
    return np.fmod(a, b1)


def _floormod_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not _float(a):
        b1, _ = _int_divisor(b)
        return np.remainder(a, b1)
    mod = np.fmod(a, b)
    fix = (mod != 0) & ((b < 0) != (mod < 0))
    return np.where(fix, mod + b, mod)


def _truncdiv_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _float(a):
        return np.trunc(a / b)
    b1, m1 = _int_divisor(b)
    q = (a - np.fmod(a, b1)) // b1
    return np.where(m1, np.negative(a), q)


def _floordiv_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ATen's ``div_floor_floating`` (Python's float floor division) and integer floor
    division."""
    if not _float(a):
        b1, m1 = _int_divisor(b)
        return np.where(m1, np.negative(a), np.floor_divide(a, b1))
    t = a.dtype.type
    basic = a / b
    mod = np.fmod(a, b)
    div = (a - mod) / b
    div = np.where((mod != 0) & ((b < 0) != (mod < 0)), div - t(1), div)
    fl = np.floor(div)
    fl = np.where(div - fl > t(0.5), fl + t(1), fl)
    out = np.where(div != 0, fl, np.copysign(np.zeros_like(a), basic))
    return np.where(b == 0, basic, out)


def _hypot_lower(e: Any, x: Any, y: Any) -> Any:
    """``big * sqrt(1 + (small / big)**2)``: no overflow or underflow in the squares; 0 when
    both are 0, inf when either is inf (even with a NaN), NaN otherwise with a NaN."""
    a, b = e.abs(x), e.abs(y)
    inf = e.c(float("inf"))
    a_big = e.gt(a, b)
    big, small = e.select(a_big, a, b), e.select(a_big, b, a)
    r = e.div(small, big)
    out = e.mul(big, e.intr("sqrt", e.add(e.c(1), e.mul(r, r))))
    out = e.select(e.eq(e.add(a, b), e.c(0)), e.c(0), out)  # both 0 (a NaN stays NaN)
    return e.select(e.or_(e.eq(a, inf), e.eq(b, inf)), inf, out)


def _logaddexp_lower(base2: bool) -> Any:
    """ATen: ``max(a, b) + log1p(exp(-|a - b|))`` (``exp2`` and a final ``/ ln 2`` for
    ``logaddexp2``), and ``a`` itself when both are the same infinity."""

    def lower(e: Any, x: Any, y: Any) -> Any:
        m = e.max(x, y)
        d = e.neg(e.abs(e.sub(x, y)))
        if base2:
            t = e.mul(e.math("log1p", e.math("exp", e.mul(d, e.c(np.log(2.0))))),
                      e.c(1 / np.log(2.0)))
        else:
            t = e.math("log1p", e.math("exp", d))
        same_inf = e.and_(e.eq(x, y), e.eq(e.abs(x), e.c(float("inf"))))
        return e.select(same_inf, x, e.add(m, t))

    return lower


def _logaddexp_vjp(base2: bool) -> Any:
    """``grad / (1 + exp(other - self))`` (``pow(2, other - self)`` for ``logaddexp2``)."""

    def vjp(b: Any, n: Any, g: Any) -> list:
        x, y = n.inputs
        one = _c(b, 1.0, n)

        def e(d: Any) -> Any:
            return b.op("pow", (_c(b, 2.0, n), d)) if base2 else b.op("exp", (d,))

        return [b.div(g, b.add(one, e(b.sub(y, x)))), b.div(g, b.add(one, e(b.sub(x, y))))]

    return vjp


def _copysign_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``copysign_tensor_self_backward``: ``grad * (result / self)``, 0 where self is 0;
    the sign operand gets a zero gradient."""
    x = n.inputs[0]
    zero = _c(b, 0.0, n)
    ratio = b.where(b.op("eq", (x, zero)), zero, b.div(n, x))
    return [b.mul(g, ratio), zero]


def _xlogy_ref(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    t = x.dtype.type
    out = np.where(x == 0, t(0), x * np.log(y))
    return np.where(np.isnan(y), t(np.nan), out)


def _xlogy_vjp(b: Any, n: Any, g: Any) -> list:
    """derivatives.yaml: ``xlogy(grad, other)``, 0 where ``self == 0`` and ``other <= 0``;
    ``grad * self / other``."""
    x, y = n.inputs
    zero = _c(b, 0.0, n)
    flat = b.op("and", (b.op("eq", (x, zero)), b.op("le", (y, zero))))
    return [b.where(flat, zero, b.op("xlogy", (g, y))), b.div(b.mul(g, x), y)]


def _fminmax_mask(b: Any, n: Any, cmp: str) -> Any:
    """Where ``fmax``/``fmin`` takes ``self``: it wins or ties, or ``other`` is NaN."""
    x, y = n.inputs
    return b.op("or", (b.op(cmp, (x, y)), b.op("ne", (y, y))))


def _fminmax(name: str, cmp: str) -> OpDef:
    """``fmax``/``fmin``: NaN-ignoring (the other operand wins over a NaN); ties take
    ``self`` (so ``fmax(0.0, -0.0)`` is ``0.0`` and ``fmax(-0.0, 0.0)`` is ``-0.0``, as
    ATen's kernel); the gradient goes to the operand taken (derivatives.yaml)."""

    def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ge = a >= b if cmp == "ge" else a <= b
        return np.where(ge | (b != b), a, b)

    def vjp(b: Any, n: Any, g: Any) -> list:
        m, zero = _fminmax_mask(b, n, cmp), _c(b, 0.0, n)
        return [b.where(m, g, zero), b.where(m, zero, g)]

    def lower(e: Any, x: Any, y: Any) -> Any:
        take = e.or_(getattr(e, cmp)(x, y), e.ne(y, y))
        return e.select(take, x, y)

    return _binary(name, ref=ref, vjp=vjp, lower=lower, api=("Tensor", "gc"),
                   extra={"own_tests": True})


def _shl_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == np.bool_:
        return a & ~b
    bad = (b < 0) | (b >= a.dtype.itemsize * 8)
    return np.where(bad, np.zeros_like(a), np.left_shift(a, np.where(bad, 0, b)))


def _shr_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == np.bool_:
        return a.copy()
    top = a.dtype.itemsize * 8 - 1
    return np.right_shift(a, np.where((b < 0) | (b >= top), top, b))


def _zero_grad(b: Any, n: Any, g: Any) -> list:
    """A tensor of zeros for every float input (PyTorch's gradient of rounding ops)."""
    return [_c(b, 0.0, x) if x.dtype.is_float else None for x in n.inputs]


# -- composites: the front end's checks, then the primitives --------------------------------
def _both(T: Any, x: Any, y: Any, name: str) -> tuple[Any, Any]:
    """The promoted, broadcast operands as tensors."""
    xn, yn = T._operands(x, y, name)
    if not T.sh.same_shape(xn.shape, yn.shape):
        s = T.sh.broadcast(xn.shape, yn.shape, name)
        bld = T.builder()
        xn, yn = bld.broadcast_to(xn, s), bld.broadcast_to(yn, s)
    return T._wrap(xn), T._wrap(yn)


def _prim(T: Any, op: str, *xs: Any) -> Any:
    return T._wrap(T.builder().op(op, [x.node for x in xs]))


def _check_divisor(T: Any, y: Any) -> None:
    """PyTorch raises ``ZeroDivisionError`` (a ``RuntimeError``) for an integer division by
    zero. Eagerly the values are known and the same error is raised; a compiled step cannot
    raise, and its integer division by zero gives ``x`` as quotient and 0 as remainder."""
    if y.dtype.is_float or T._context.current() is not None:
        return
    if (np.asarray(y.numpy()) == 0).any():
        raise RuntimeError("ZeroDivisionError")


def _division(prim: str, torch_kernel: str) -> Any:
    """fmod / remainder / floor_divide / div with a rounding mode on promoted operands."""

    def run(T: Any, x: Any, y: Any) -> Any:
        x, y = _both(T, x, y, prim)
        if x.dtype is T.dt.bool_:
            raise _not_implemented(torch_kernel, x.dtype)
        _check_divisor(T, y)
        return _prim(T, prim, x, y)

    return run


def _round(T: Any, x: Any, decimals: int = 0) -> Any:
    """``round``: half to even (``nearbyint``); with ``decimals``, ATen's
    ``nearbyint(x * 10**d) / 10**d`` (``nearbyint(x / 10**-d) * 10**-d`` for d < 0) in the
    tensor's dtype."""
    if x.dtype is T.dt.bool_ or (decimals != 0 and not x.dtype.is_float):
        raise _not_implemented("round", x.dtype)
    if not x.dtype.is_float:
        return x.clone()
    if decimals == 0:
        return _prim(T, "rint", x)
    p = float(10.0 ** abs(int(decimals)))
    if decimals < 0:
        return _prim(T, "rint", x / p) * p
    return _prim(T, "rint", x * p) / p


def _frac(T: Any, x: Any) -> Any:
    """``x - trunc(x)`` (inf gives NaN), gradient 1."""
    return x - _prim(T, "trunc", x)


def _square(T: Any, x: Any) -> Any:
    """``x * x``; bools square to int64 as ``pow(x, 2)`` does in PyTorch."""
    if x.dtype is T.dt.bool_:
        x = x.to(T.dt.int64)
    return x * x


def _isnan(T: Any, x: Any) -> Any:
    return x != x


def _isinf(T: Any, x: Any) -> Any:
    return x.abs() == float("inf") if x.dtype.is_float else x != x


def _isposinf(T: Any, x: Any) -> Any:
    return x == float("inf") if x.dtype.is_float else x != x


def _isneginf(T: Any, x: Any) -> Any:
    return x == float("-inf") if x.dtype.is_float else x != x


def _isfinite(T: Any, x: Any) -> Any:
    return x.abs() < float("inf") if x.dtype.is_float else x == x


def _signbit(T: Any, x: Any) -> Any:
    """The sign bit: true for -0.0 and for NaNs with the sign set."""
    if x.dtype.is_float:
        return _prim(T, "copysign", T.as_tensor(1.0, x.dtype).expand(*x.shape), x) < 0
    return x < 0 if x.dtype is not T.dt.bool_ else x != x


def _nan_to_num(T: Any, x: Any, nan: float = 0.0, posinf: Any = None,
                neginf: Any = None) -> Any:
    """NaN, +inf, -inf replaced (by 0 and the dtype's largest and lowest finite values
    unless given); integers unchanged; the gradient is zero at the replaced elements."""
    if not x.dtype.is_float:
        return x.clone()
    fi = np.finfo(x.dtype.np)
    hi = float(fi.max) if posinf is None else float(posinf)
    lo = float(fi.min) if neginf is None else float(neginf)

    def c(v: float) -> Any:
        return T.as_tensor(v, x.dtype)

    out = T.where(x == float("-inf"), c(lo), x)
    out = T.where(x == float("inf"), c(hi), out)
    return T.where(x != x, c(float(nan)), out)


def _isclose(T: Any, x: Any, y: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> Any:
    """ATen's ``isclose``: ``x == y``, or ``|x - y| <= atol + |rtol * y|`` with a finite
    difference (bools computed in float32), or both NaN with ``equal_nan``."""
    if x.dtype is not y.dtype:
        raise RuntimeError(f"{_TORCH_NAME[x.dtype.name]} did not match "
                           f"{_TORCH_NAME[y.dtype.name]}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    close = x == y
    if equal_nan and x.dtype.is_float:
        close = close | ((x != x) & (y != y))
    if rtol == 0 and atol == 0:
        return close
    if x.dtype is T.dt.bool_:
        x, y = x.to(T.dt.float32), y.to(T.dt.float32)
    allowed = (y * rtol).abs() + atol
    actual = (x - y).abs()
    return close | (_isfinite(T, actual) & (actual <= allowed))


def _clamp_bound(lower: bool) -> Any:
    """``clamp_min``/``clamp_max``: the NaN-propagating ``maximum``/``minimum``, with
    ATen's gradient (``self`` where ``self >= min``, ``min`` where ``self < min``; both 0
    where either is NaN)."""

    def run(T: Any, x: Any, m: Any) -> Any:
        out = T.binary("maximum" if lower else "minimum", x, m)
        keep = x >= m if lower else x <= m
        take = x < m if lower else x > m
        return T.where(keep, x, T.where(take, m, out.detach()))

    return run


def _heaviside(T: Any, x: Any, values: Any) -> Any:
    if x.dtype is not values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different "
                           "dtypes.")
    x, values = _both(T, x, values, "heaviside")
    return _prim(T, "step", x, values)


def _truthy(T: Any, x: Any) -> Any:
    return x if x.dtype is T.dt.bool_ else x != 0


def _logical(prim: str) -> Any:
    def run(T: Any, x: Any, y: Any) -> Any:
        a, b = _both(T, _truthy(T, x), _truthy(T, y), "logical_" + prim)
        return _prim(T, prim, a, b)

    return run


def _bitwise(name: str, prim: str, bool_prim: str | None) -> Any:
    """Integer and bool operands only (PyTorch's kernels have no float form); bools use the
    logical primitive, shifts reject them as PyTorch does."""

    def run(T: Any, x: Any, y: Any) -> Any:
        # a bool shifted by a (wrapped) integer is refused before promotion, as in PyTorch
        shifted_bool = bool_prim is None and T.as_tensor(x).dtype is T.dt.bool_
        x, y = _both(T, x, y, name)
        if x.dtype.is_float or shifted_bool or (x.dtype is T.dt.bool_ and bool_prim is None):
            kernel = {"shl": "lshift_cpu", "shr": "rshift_cpu"}.get(prim, name + "_cpu")
            raise _not_implemented(kernel, T.dt.bool_ if shifted_bool else x.dtype)
        return _prim(T, bool_prim if x.dtype is T.dt.bool_ else prim, x, y)

    return run


def _bitwise_not(T: Any, x: Any) -> Any:
    if x.dtype.is_float:
        raise _not_implemented("bitwise_not_cpu", x.dtype)
    return _prim(T, "not" if x.dtype is T.dt.bool_ else "bitnot", x)


_API = ("Tensor", "gc")
# two operands, bool results or no float form: tested in tests/test_pointwise.py instead of
# the generic one-operand table tests
_OWN = {"own_tests": True}
_OWN2 = {"arity": 2, "api": _API, "extra": _OWN}


def _rounding(name: str) -> OpDef:
    return _unary(name, ref=_keep_ints(getattr(np, name)), vjp=_zero_grad,
                  lower=lambda e, x: e.intr(name, x) if e.is_float else x, api=_API)


def _div_prim(name: str, ref: Any, lower: Any) -> OpDef:
    """A rounding division: zero gradient (PyTorch's ``div`` with a rounding mode)."""
    return _binary(name, ref=ref, vjp=_zero_grad, lower=lower)


def _rem_vjp(q: str) -> Any:
    """``fmod``/``remainder``: ``grad`` and ``-grad * div(self, other, rounding_mode)``."""

    def vjp(b: Any, n: Any, g: Any) -> list:
        x, y = n.inputs
        return [g, b.mul(b.neg(g), b.op(q, (x, y)))]

    return vjp


POINTWISE: tuple[OpDef, ...] = (
    # rounding: integers pass through unchanged, the gradient is a tensor of zeros
    _rounding("floor"),
    _rounding("ceil"),
    _rounding("trunc"),
    _unary("rint", ref=_keep_ints(np.rint), vjp=_zero_grad,
           lower=lambda e, x: e.intr("rint", x) if e.is_float else x),
    composite("round", _round, params=(("decimals", 0),), api=_API,
              extra={"test_params": [{"decimals": 2}, {"decimals": -1}]}),
    composite("frac", _frac, float_only=True, int_inputs="reject", api=_API),
    # divisions and remainders (integer division by zero: see _check_divisor)
    _div_prim("truncdiv", _truncdiv_ref, lambda e, x, y: e.truncdiv(x, y)),
    _div_prim("floordiv", _floordiv_ref, lambda e, x, y: e.floordiv(x, y)),
    _binary("truncmod", ref=_fmod_ref, vjp=_rem_vjp("truncdiv"),
            lower=lambda e, x, y: e.fmod(x, y)),
    _binary("floormod", ref=_floormod_ref, vjp=_rem_vjp("floordiv"),
            lower=lambda e, x, y: e.floormod(x, y)),
    composite("fmod", _division("truncmod", "fmod_cpu"), **_OWN2),
    composite("remainder", _division("floormod", "remainder_cpu"), **_OWN2),
    composite("floor_divide", _division("floordiv", "div_floor_cpu"), **_OWN2),
    # ``Tensor.div(rounding_mode="trunc")`` (no surface of its own)
    composite("div_trunc", _division("truncdiv", "div_trunc_cpu"), arity=2),
    # float functions of two operands (integers: PyTorch rejects hypot/logaddexp, promotes
    # copysign and xlogy to float32)
    _binary("hypot", float_only=True, int_inputs="reject", ref=np.hypot,
            vjp=lambda b, n, g: [b.div(b.mul(g, n.inputs[0]), n),
                                 b.div(b.mul(g, n.inputs[1]), n)],
            lower=_hypot_lower, api=_API, extra=_OWN),
    _binary("logaddexp", float_only=True, int_inputs="reject", ref=np.logaddexp,
            vjp=_logaddexp_vjp(False), lower=_logaddexp_lower(False), api=_API,
            extra=_OWN),
    _binary("logaddexp2", float_only=True, int_inputs="reject", ref=np.logaddexp2,
            vjp=_logaddexp_vjp(True), lower=_logaddexp_lower(True), api=_API,
            extra=_OWN),
    _binary("copysign", float_only=True, ref=np.copysign, vjp=_copysign_vjp,
            lower=lambda e, x, y: e.intr("copysign", x, y), api=_API, extra=_OWN),
    _binary("xlogy", float_only=True, domain="pos", ref=_xlogy_ref, vjp=_xlogy_vjp,
            lower=lambda e, x, y: e.select(
                e.ne(y, y), y, e.select(e.eq(x, e.c(0)), e.c(0), e.mul(x, e.math("log", y)))),
            api=_API, extra=_OWN),
    _fminmax("fmax", "ge"),
    _fminmax("fmin", "le"),
    composite("clamp_min", _clamp_bound(True), **_OWN2),
    composite("clamp_max", _clamp_bound(False), **_OWN2),
    composite("square", _square, api=_API),
    # heaviside: PyTorch has no derivative for it
    _binary("step", differentiable=False, vjp=_no_grad,
            ref=lambda x, v: np.where(x == 0, v, (x > 0).astype(x.dtype)),
            lower=lambda e, x, v: e.select(e.eq(x, e.c(0)), v,
                                           e.select(e.gt(x, e.c(0)), e.c(1), e.c(0)))),
    composite("heaviside", _heaviside, **_OWN2),
    # predicates: bool results, no gradient
    composite("isnan", _isnan, api=_API, extra=_OWN),
    composite("isinf", _isinf, api=_API, extra=_OWN),
    composite("isposinf", _isposinf, api=_API, extra=_OWN),
    composite("isneginf", _isneginf, api=_API, extra=_OWN),
    composite("isfinite", _isfinite, api=_API, extra=_OWN),
    composite("signbit", _signbit, api=_API, extra=_OWN),
    composite("isclose", _isclose, arity=2, api=_API,
              params=(("rtol", 1e-05), ("atol", 1e-08), ("equal_nan", False)),
              extra=_OWN),
    composite("nan_to_num", _nan_to_num, api=_API,
              params=(("nan", 0.0), ("posinf", None), ("neginf", None)),
              extra={"test_params": [{"posinf": 7.0, "neginf": -5.0}]}),
    # bitwise (integers and bools) and logical ops
    _binary("bitand", differentiable=False, domain="bool", ref=np.bitwise_and, vjp=_no_grad,
            lower=lambda e, x, y: e.and_(x, y)),
    _binary("bitor", differentiable=False, domain="bool", ref=np.bitwise_or, vjp=_no_grad,
            lower=lambda e, x, y: e.or_(x, y)),
    _binary("bitxor", differentiable=False, domain="bool", ref=np.bitwise_xor, vjp=_no_grad,
            lower=lambda e, x, y: e.xor(x, y)),
    _unary("bitnot", differentiable=False, domain="bool", ref=np.invert, vjp=_no_grad,
           lower=lambda e, x: e.not_(x)),
    _binary("shl", differentiable=False, domain="bool", ref=_shl_ref, vjp=_no_grad,
            lower=lambda e, x, y: e.shl(x, y)),
    _binary("shr", differentiable=False, domain="bool", ref=_shr_ref, vjp=_no_grad,
            lower=lambda e, x, y: e.shr(x, y)),
    composite("bitwise_and", _bitwise("bitwise_and", "bitand", "and"), **_OWN2),
    composite("bitwise_or", _bitwise("bitwise_or", "bitor", "or"), **_OWN2),
    composite("bitwise_xor", _bitwise("bitwise_xor", "bitxor", "ne"), **_OWN2),
    composite("bitwise_not", _bitwise_not, api=_API, extra=_OWN),
    composite("bitwise_left_shift", _bitwise("bitwise_left_shift", "shl", None), **_OWN2),
    composite("bitwise_right_shift", _bitwise("bitwise_right_shift", "shr", None), **_OWN2),
    composite("logical_and", _logical("and"), **_OWN2),
    composite("logical_or", _logical("or"), **_OWN2),
    composite("logical_xor", _logical("ne"), **_OWN2),
    composite("logical_not", lambda T, x: _prim(T, "not", _truthy(T, x)), api=_API,
              extra=_OWN),
)
