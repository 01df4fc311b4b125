"""Activation functions (``nn.functional`` / ``nn`` module forms), as op-table entries.

Each entry follows PyTorch's forward formula and its ATen backward (including the one-sided
derivative chosen at kinks); ``tests/test_elementwise_table.py`` compares every entry with
PyTorch, eagerly and compiled, at the kinks too. Composites are written with the front end's
ops (``T``) and inherit their derivatives and lowerings.
"""

from __future__ import annotations

import inspect
import math
import warnings
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


def _leaky_relu(T: Any, x: Any, negative_slope: float = 0.01) -> Any:
    """``x`` where x > 0, else ``x * negative_slope`` (NaN passes through); the gradient at 0
    is ``negative_slope`` (ATen ``leaky_relu_backward``: ``x > 0 ? g : g * slope``)."""
    return T.where(x > 0, x, x * negative_slope)


# Sleef's tanhf (torch's vectorised float32 tanh, used by GELU's tanh form on full vector
# chunks) returns +-1 beyond this |x|, where the rounded tanh would still be 1 - 1 ulp
_TANH_SAT_F32 = 8.664339742


def _gelu(T: Any, x: Any, approximate: str = "none") -> Any:
    """``x * Phi(x)``: ``0.5 x (1 + erf(x / sqrt 2))``, or with ``approximate="tanh"``
    ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`` (ATen's two kernels)."""
    if approximate == "none":
        return T.unary("gelu_erf", x)
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        t = T.unary("tanh", inner)
        if x.dtype.name == "float32":  # torch's vectorised float tanh saturates past this
            t = T.where(inner.abs() > _TANH_SAT_F32, T.unary("sign", inner), t)
        return x * 0.5 * (t + 1.0)
    raise RuntimeError("approximate argument must be either none or tanh.")


def _hardsigmoid_ref(x: np.ndarray) -> np.ndarray:
    t = x.dtype.type
    return np.minimum(np.maximum(x + t(3), t(0)), t(6)) / t(6)


# ATen's hardsigmoid_backward multiplies by ``1.0f / 6.0f``, the float32 sixth, in every dtype
_SIXTH_F32 = float(np.float32(1.0) / np.float32(6.0))


def _hardsigmoid_vjp(b: Any, n: Any, g: Any) -> list:
    """``g * (1.0f / 6.0f)`` strictly inside (-3, 3), 0 at and beyond the kinks (ATen)."""
    x = n.inputs[0]
    three = _c(b, 3.0, n)
    inside = b.op("and", (b.op("gt", (x, b.neg(three))), b.op("lt", (x, three))))
    return [b.where(inside, b.mul(g, _c(b, _SIXTH_F32, n)), _c(b, 0.0, n))]


# torch's float32 GELU evaluates erf with the Abramowitz-Stegun 7.1.26 polynomial (its
# vectorised ``Vectorized<float>::erf``), forward and backward; float64 uses a full-precision erf
_AS_P = 0.3275911
_AS_C = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
_SQRT1_2 = 1.0 / math.sqrt(2.0)
_GELU_PDF = 1.0 / math.sqrt(2.0 * math.pi)  # ATen's M_2_SQRTPI * M_SQRT1_2 * 0.5


def _fma32(a: Any, x: Any, c: Any) -> np.ndarray:
    return (np.float64(a) * x.astype(np.float64) + np.float64(c)).astype(np.float32) \
        if isinstance(x, np.ndarray) else np.float32(np.float64(a) * np.float64(x) + c)


def _erf_as_ref(a: np.ndarray) -> np.ndarray:
    """The float32 polynomial erf (with its fused multiply-adds), in numpy."""
    f = np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        t = f(1) / _fma32(f(_AS_P), np.abs(a), f(1))
        r = _fma32(f(_AS_C[0]), t, f(_AS_C[1]))
        for c in _AS_C[2:]:
            r = (r.astype(np.float64) * t.astype(np.float64) + np.float64(f(c))).astype(f)
        e = np.exp(-(a * a)).astype(f)
        m = (-e * t).astype(f)
        v = (m.astype(np.float64) * r.astype(np.float64) + 1.0).astype(f)
    return np.where(np.signbit(a), -v, v).astype(f)


def _erf_ref(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.float32:
        return _erf_as_ref(a)
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(a), np.float64)


def _gelu_erf_ref(x: np.ndarray) -> np.ndarray:
    t = x.dtype.type
    return x * t(0.5) * (t(1) + _erf_ref(x * t(_SQRT1_2)))


def _erf_as_ir(b: Any, a: Any, n: Any) -> Any:
    """The float32 polynomial erf as IR (for the derivative)."""
    one = _c(b, 1.0, n)
    t = b.div(one, b.add(b.mul(_c(b, _AS_P, n), b.op("abs", (a,))), one))
    r = _c(b, _AS_C[0], n)
    for c in _AS_C[1:]:
        r = b.add(b.mul(r, t), _c(b, c, n))
    e = b.op("exp", (b.neg(b.mul(a, a)),))
    v = b.sub(one, b.mul(b.mul(e, t), r))
    return b.where(b.op("lt", (a, _c(b, 0.0, n))), b.neg(v), v)


def _gelu_erf_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``gelu_backward``: ``g * (cdf + x * pdf)``, ``cdf = 0.5 (1 + erf(x / sqrt 2))``,
    ``pdf = exp(-x^2 / 2) / sqrt(2 pi)``."""
    x = n.inputs[0]
    a = b.mul(x, _c(b, _SQRT1_2, n))
    erf = _erf_as_ir(b, a, n) if n.dtype.name == "float32" else b.op("erf", (a,))
    cdf = b.mul(_c(b, 0.5, n), b.add(_c(b, 1.0, n), erf))
    # exp(-a^2) = exp(-x^2 / 2): the erf polynomial's own exponential (the builder interns
    # the node, so the loop computes one exponential an element, not two; ATen's
    # exp(-0.5 x^2) differs from it by the rounding of a, well inside float32 tolerance)
    pdf = b.mul(_c(b, _GELU_PDF, n), b.op("exp", (b.neg(b.mul(a, a)),)))
    return [b.mul(g, b.add(cdf, b.mul(x, pdf)))]


def _gelu_erf_lower(e: Any, x: Any) -> Any:
    a = e.mul(x, e.c(_SQRT1_2))
    if e.dtype.name == "float32":
        one = e.c(1.0)
        t = e.div(one, e.math("fma", e.c(_AS_P), e.abs(a), one))
        r = e.c(_AS_C[0])
        for c in _AS_C[1:]:
            r = e.math("fma", r, t, e.c(c))
        ex = e.math("exp", e.neg(e.mul(a, a)))
        v = e.math("fma", e.neg(e.mul(ex, t)), r, one)
        erf = e.select(e.lt(a, e.c(0.0)), e.neg(v), v)
    else:
        erf = e.math("erf", a)
    return e.mul(e.mul(x, e.c(0.5)), e.add(e.c(1.0), erf))


def _softsign(T: Any, x: Any) -> Any:
    """``x / (1 + |x|)``, torch's own composite (integers promote to float32 through the
    division)."""
    return x / (x.abs() + 1)


def _tanhshrink(T: Any, x: Any) -> Any:
    """``x - tanh(x)``, torch's own composite (integers promote to float32)."""
    return x - T.unary("tanh", x)


def _check_lambd(x: Any, lambd: float) -> None:
    hi = float(np.finfo(x.dtype.np).max)
    if not 0 <= lambd <= hi:
        name = {"float32": "Float", "float64": "Double"}.get(x.dtype.name, x.dtype.name)
        raise RuntimeError(f"lambda must be in range [0, {hi:g}] for input dtype {name}, but "
                           f"found {lambd:g}")


def _softshrink(T: Any, x: Any, lambd: float = 0.5) -> Any:
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, ``x * 0`` between (so NaN
    passes through); the gradient is 0 on the closed band [-lambd, lambd] (ATen)."""
    _check_lambd(x, lambd)
    return T.where(x > lambd, x - lambd, T.where(x < -lambd, x + lambd, x * 0.0))


def _hardshrink(T: Any, x: Any, lambd: float = 0.5) -> Any:
    """0 on the closed band [-lambd, lambd], ``x`` elsewhere (NaN passes through); the gradient
    is 0 on the band (ATen ``hardshrink_backward``)."""
    return T.where((x >= -lambd) & (x <= lambd), 0.0, x)


def missing_params(where: str, params: dict) -> None:
    """Raise Python's ``TypeError`` for parameters still at ``inspect.Parameter.empty`` (the
    default of a required parameter in ``OpDef.params``, as ``F.threshold``'s)."""
    missing = [repr(k) for k, v in params.items() if v is inspect.Parameter.empty]
    if missing:
        names = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " and " + missing[-1]
        raise TypeError(f"{where}() missing {len(missing)} required positional "
                        f"argument{'s' if len(missing) > 1 else ''}: {names}")


def _threshold(T: Any, x: Any, threshold: float, value: float) -> Any:
    """``value`` where ``x <= threshold``, else ``x``; keeps ``x``'s dtype (integers too: the
    scalars are converted to it, truncating, as ATen does); the gradient is 0 where replaced."""
    missing_params("threshold", {"threshold": threshold, "value": value})
    th, v = T.as_tensor(threshold, x.dtype), T.as_tensor(value, x.dtype)
    return T.where(x <= th, v, x)


def _softmax_dim(name: str, x: Any, dim: Any, stacklevel: int) -> int:
    """torch's ``_get_softmax_dim``: without ``dim``, warn and use 0 for 0-, 1- and 3-D
    inputs, else 1."""
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", UserWarning, stacklevel=stacklevel + 2)
    return 0 if x.ndim in (0, 1, 3) else 1


def _softmax_input(T: Any, name: str, kernel: str, x: Any, dtype: Any) -> Any:
    if dtype is not None:  # cast before the op, as torch's ``dtype=``
        x = x.to(dtype)
    if not x.dtype.is_float:
        raise RuntimeError(f'"{kernel}" not implemented for '
                           f"{T._TORCH_NAME.get(x.dtype.name, x.dtype.name)!r}")
    return x


def _along(T: Any, f: Any, x: Any, dim: int) -> Any:
    """``f(x, dim)``; a 0-d tensor is treated as one element along dim 0 or -1 (torch's
    softmax of a scalar is 1, its log_softmax 0)."""
    if any(isinstance(s, (int, np.integer)) and s == 0 for s in x.shape):
        return x * 0.0  # no elements: nothing to normalise (the reductions need one)
    if x.ndim:
        return f(x, dim)
    if dim not in (0, -1):
        raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], but got "
                         f"{dim})")
    return f(x.reshape(1), 0).reshape(())


def _softmax(T: Any, x: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
    dim = _softmax_dim("softmax", x, dim, _stacklevel)
    x = _softmax_input(T, "softmax", "softmax_lastdim_kernel_impl", x, dtype)
    return _along(T, T.softmax, x, dim)


def _log_softmax(T: Any, x: Any, dim: Any = None, _stacklevel: int = 3,
                 dtype: Any = None) -> Any:
    dim = _softmax_dim("log_softmax", x, dim, _stacklevel)
    x = _softmax_input(T, "log_softmax", "log_softmax_lastdim_kernel_impl", x, dtype)
    return _along(T, T.log_softmax, x, dim)


def _softmin(T: Any, x: Any, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Any:
    """``softmax(-x)`` (torch negates before the ``dtype`` cast; the result is the same)."""
    dim = _softmax_dim("softmin", x, dim, _stacklevel)
    x = _softmax_input(T, "softmin", "softmax_lastdim_kernel_impl", -x, dtype)
    return _along(T, T.softmax, x, dim)


def _glu(T: Any, x: Any, dim: int = -1) -> Any:
    """``a * sigmoid(b)`` with ``a, b`` the two halves of ``x`` along ``dim``."""
    if x.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if not -x.ndim <= dim < x.ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-x.ndim}, {x.ndim - 1}], but got {dim})")
    ax = dim % x.ndim
    n = x.shape[ax]
    if not isinstance(n, (int, np.integer)):
        raise NotImplementedError(f"glu: dimension {ax} has a symbolic size {n}; only a fixed "
                                  "size can be halved")
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {ax} is size {n}")
    full = list(x.shape)
    a = T.slice_dims(x, [0] * x.ndim, [n // 2 if i == ax else s for i, s in enumerate(full)])
    b = T.slice_dims(x, [n // 2 if i == ax else 0 for i in range(x.ndim)], full)
    return a * T.unary("sigmoid", b)


def _normalize(T: Any, x: Any, p: float = 2.0, dim: Any = 1, eps: float = 1e-12,
               out: Any = None) -> Any:
    """``x / max(||x||_p, eps)`` along ``dim`` (torch's ``input / norm.clamp_min(eps)``).

    The norm's gradient at an all-zero slice is 0 (as ATen's ``norm_backward``), so the
    square root / power gets a safe operand there; ``clamp_min`` passes the gradient where
    ``norm >= eps``."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported")
    if not x.dtype.is_float:
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as "
                           f"input. Got {T._TORCH_NAME.get(x.dtype.name, x.dtype.name)}")
    p = float(p)
    dims = tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)
    for d in dims:
        if not -max(x.ndim, 1) <= d < max(x.ndim, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-max(x.ndim, 1)}, {max(x.ndim, 1) - 1}], but got {d})")
    a = x.abs()
    if p == math.inf:
        norm = T.amax(a, dims, keepdim=True)
    elif p == 0:
        norm = (x != 0).to(x.dtype).sum(dims, keepdim=True).detach()
    elif p == 1:
        norm = a.sum(dims, keepdim=True)
    else:
        s = (a * a if p == 2 else a ** p).sum(dims, keepdim=True)
        zero = s == 0
        safe = T.where(zero, 1.0, s)
        root = T.unary("sqrt", safe) if p == 2 else safe ** (1.0 / p)
        norm = T.where(zero, 0.0, root)
    return x / T.where(norm >= eps, norm, eps)



def _elu(T: Any, x: Any, alpha: float = 1.0, scale: float = 1.0,
         input_scale: float = 1.0) -> Any:
    """ATen's ``elu``: ``x * scale`` for x > 0, ``expm1(x * input_scale) * alpha * scale`` for
    x <= 0 (NaN passes through); the gradient at 0 is the negative side's (``x <= 0``). The
    exponential sees 0 where x > 0, so neither it nor its gradient overflows there."""
    neg = x <= 0
    xn = T.where(neg, x, 0.0)
    if input_scale != 1.0:
        xn = xn * input_scale
    e = T.unary("expm1", xn) * (alpha * scale)
    return T.where(neg, e, x * scale if scale != 1.0 else x)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _celu(T: Any, x: Any, alpha: float = 1.0) -> Any:
    """``elu`` with ``input_scale = 1 / alpha`` (ATen's ``celu``). Its derivative
    (``derivatives.yaml``) uses ``1.0 / alpha.toFloat()``: the reciprocal of alpha rounded to
    float32, in every dtype; where that differs from ``1 / alpha`` the value comes from the exact
    form and the gradient from the rounded one."""
    inv, inv32 = 1.0 / alpha, 1.0 / float(np.float32(alpha))
    if inv == inv32:
        return _elu(T, x, alpha, 1.0, inv)
    neg = x <= 0
    xn = T.where(neg, x, 0.0)
    val = T.unary("expm1", xn * inv) * alpha
    grad_form = T.unary("expm1", xn * inv32) * alpha
    return T.where(neg, val.detach() + (grad_form - grad_form.detach()), x)


def _softplus(T: Any, x: Any, beta: float = 1.0, threshold: float = 20.0) -> Any:
    """``x`` where ``x * beta > threshold``, else ``log1p(exp(x * beta)) / beta`` (ATen); the
    exponential sees 0 on the linear side, so it does not overflow there."""
    xb = x * beta
    lin = xb > threshold
    safe = T.where(lin, 0.0, xb)
    return T.where(lin, x, T.unary("log1p", T.unary("exp", safe)) / beta)


def _logsigmoid(T: Any, x: Any) -> Any:
    """``min(x, 0) - log1p(exp(-|x|))`` (ATen's stable form); at 0 the minimum splits the
    gradient, giving ATen's 0.5."""
    return T.binary("minimum", x, 0.0) - T.unary("log1p", T.unary("exp", -x.abs()))


def _mish_ref(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x * np.tanh(np.log1p(np.exp(x)))


def _mish_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``mish_backward``: ``g * (t + x * sigmoid(x) * (1 - t^2))``, ``t =
    tanh(softplus(x))``; written so that large |x| gives g or 0, not inf * 0."""
    x = n.inputs[0]
    t = b.op("tanh", (b.op("log1p", (b.op("exp", (x,)),)),))
    s = b.op("sigmoid", (x,))
    one = _c(b, 1.0, n)
    return [b.mul(g, b.add(t, b.mul(b.mul(x, s), b.sub(one, b.mul(t, t)))))]


# F.softmax(input, dim=None, _stacklevel=3, dtype=None); nn.Softmax(dim=None)
_SOFTMAX_PARAMS = (("dim", None), ("_stacklevel", 3), ("dtype", None))
# own tests (tests/test_activations.py): their float32 gradients round differently from ATen's
# fused ``y * (g - sum(g * y))`` (a few 1e-7), beyond the table tests' tolerance
_SOFTMAX_EXTRA = {"module_params": ("dim",), "own_tests": True}

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
    composite("leaky_relu", _leaky_relu, params=(("negative_slope", 0.01),), float_only=True,
              int_inputs="reject", api=("F",), module="LeakyReLU"),
    composite("gelu", _gelu, params=(("approximate", "none"),), float_only=True,
              int_inputs="reject", inplace=False, api=("F",), module="GELU"),
    # GELU's erf form (``F.gelu``'s default); the ``gelu`` entry above picks it
    _unary("gelu_erf", float_only=True, int_inputs="reject", ref=_gelu_erf_ref,
           vjp=_gelu_erf_vjp, lower=_gelu_erf_lower),
    _unary("hardsigmoid", float_only=True, int_inputs="reject", ref=_hardsigmoid_ref,
           vjp=_hardsigmoid_vjp,
           lower=lambda e, x: e.div(e.min(e.max(e.add(x, e.c(3)), e.c(0)), e.c(6)), e.c(6)),
           api=("F",), module="Hardsigmoid", extra={"repr_inplace": False}),
    composite("softsign", _softsign, inplace=False, api=("F",), module="Softsign"),
    composite("tanhshrink", _tanhshrink, inplace=False, api=("F",), module="Tanhshrink"),
    composite("softshrink", _softshrink, params=(("lambd", 0.5),), float_only=True,
              int_inputs="reject", inplace=False, api=("F",), module="Softshrink",
              extra={"extra_repr": lambda m: str(m.lambd)}),
    composite("hardshrink", _hardshrink, params=(("lambd", 0.5),), float_only=True,
              int_inputs="reject", inplace=False, api=("F",), module="Hardshrink",
              extra={"extra_repr": lambda m: str(m.lambd)}),
    # threshold and value have no defaults (required, as in torch)
    composite("threshold", _threshold,
              params=(("threshold", inspect.Parameter.empty), ("value", inspect.Parameter.empty)),
              api=("F",), module="Threshold", extra={"own_tests": True}),
    composite("softmax", _softmax, params=_SOFTMAX_PARAMS, inplace=False, api=("F",),
              module="Softmax", extra=_SOFTMAX_EXTRA),
    composite("log_softmax", _log_softmax, params=_SOFTMAX_PARAMS, inplace=False, api=("F",),
              module="LogSoftmax", extra=_SOFTMAX_EXTRA),
    composite("softmin", _softmin, params=_SOFTMAX_PARAMS, inplace=False, api=("F",),
              module="Softmin", extra=_SOFTMAX_EXTRA),
    composite("glu", _glu, params=(("dim", -1),), float_only=True, int_inputs="reject",
              inplace=False, api=("F",), module="GLU", extra={"own_tests": True}),
    composite("normalize", _normalize,
              params=(("p", 2.0), ("dim", 1), ("eps", 1e-12), ("out", None)),
              inplace=False, api=("F",), extra={"own_tests": True}),
    composite("elu", _elu, params=(("alpha", 1.0),), float_only=True, int_inputs="reject",
              api=("F",), module="ELU"),
    composite("selu", lambda T, x: _elu(T, x, _SELU_ALPHA, _SELU_SCALE), float_only=True,
              int_inputs="reject", api=("F",), module="SELU"),
    composite("celu", _celu, params=(("alpha", 1.0),), float_only=True, int_inputs="reject",
              api=("F",), module="CELU"),
    composite("softplus", _softplus, params=(("beta", 1.0), ("threshold", 20.0)),
              float_only=True, int_inputs="reject", inplace=False, api=("F",),
              module="Softplus"),
    composite("logsigmoid", _logsigmoid, float_only=True, int_inputs="reject", inplace=False,
              api=("F",), module="LogSigmoid"),
    # mish has no threshold in ATen: x * tanh(log1p(exp(x))) saturates through inf
    _unary("mish", float_only=True, int_inputs="reject", ref=_mish_ref, vjp=_mish_vjp,
           lower=lambda e, x: e.mul(x, e.math("tanh", e.math("log1p", e.math("exp", x)))),
           api=("F",), module="Mish"),
)
