"""``graphc.special``: the functions of ``torch.special`` that graphc's ops provide, so that
``torch.special.x`` ports as ``gc.special.x``.

Where ``torch.special``'s function is a second name of a ``torch`` one (``expit`` is
``sigmoid``, ``gammaln`` is ``lgamma``, ``psi`` is ``digamma``, ``erf``, ``logit``, ``round``
...), the name here is graphc's very function object, so it cannot drift from ``gc.<op>``.
The others are compositions of graphc's elementwise ops, written as ATen computes them:
``ndtr`` (the normal CDF from ``erf``), ``log_ndtr`` (its logarithm, accurate far into
the lower tail), ``entr``, ``xlog1py``, ``multigammaln``, and ``softmax``/``log_softmax`` with
``torch.special``'s ``dtype`` argument. Their IR, derivatives and both native lowerings come
from those ops.

The rest of ``torch.special`` runs on primitives of their own (``graphc/ir/special_more.py``
and ``codegen/vmath_special.py``, which follow ATen's kernels): ``zeta`` (Hurwitz) and
``polygamma`` through it, ``ndtri``, ``erfcx``, ``i0e``, ``i1``, ``i1e``, the modified Bessel
functions ``modified_bessel_i0/i1/k0/k1`` and ``scaled_modified_bessel_k0/k1``, the Bessel
functions ``bessel_j0/j1/y0/y1`` and ``airy_ai``; ``spherical_bessel_j0`` is a composition.
The functions PyTorch gives no derivative (the Bessel functions other than ``i0e``, ``i1``
and ``i1e``, ``airy_ai``, ``spherical_bessel_j0``, the polynomials below) return results that
do not require grad; the gradients of ``zeta`` and ``gammainc``/``gammaincc`` with respect to
their first argument raise ``NotImplementedError`` in ``backward()``, as PyTorch's do.

The orthogonal polynomials (``chebyshev_polynomial_t/u/v/w``, their shifted forms,
``hermite_polynomial_h/he``, ``laguerre_polynomial_l``, ``legendre_polynomial_p``) take a
tensor-valued degree: their primitives run ATen's recurrence for each element's degree.

``gammainc``/``gammaincc`` are ATen's regularized incomplete gamma functions
(``graphc/ir/igamma.py``: its series and continued fraction run for as many steps as each
element needs).

Gradients are PyTorch's everywhere except at points where PyTorch's own derivative is not
finite: ``entr``'s at ``x <= 0`` (PyTorch: ``inf`` at 0, NaN below), ``xlog1py``'s with
respect to ``other`` at ``input == 0, other == -1`` (PyTorch: NaN) and with respect to
``input`` at ``input == 0, other == inf`` (PyTorch: ``inf``) are 0 here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _core
from . import tensor_ops as T_
from ._tensor import Tensor
from .ir import dtypes as dt
from .ir import shapes as sh
from .special_ops import _float_input, _pair, gammainc, gammaincc, polygamma, zeta

# torch.special's second names of graphc's functions: the same objects as gc.<name>
expit = _core.sigmoid
logit = _core.logit
erf = _core.erf
erfc = _core.erfc
erfinv = _core.erfinv
gammaln = _core.lgamma
digamma = _core.digamma
psi = _core.digamma
i0 = _core.i0
sinc = _core.sinc
xlogy = _core.xlogy
logsumexp = _core.logsumexp
log1p = _core.log1p
expm1 = _core.expm1
exp2 = _core.exp2
round = _core.round  # noqa: A001  (torch.special.round)

_SQRT1_2 = math.sqrt(0.5)


def _softmax_input(input: Any, dim: int, dtype: Any, fn: str) -> Tensor:
    """``input`` cast to ``dtype`` when it is given (PyTorch casts before computing);
    without it an integer or bool input is refused as PyTorch's kernels refuse it."""
    if not isinstance(input, Tensor):
        raise TypeError(f"special_{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    if dtype is not None:
        return input.to(dt.as_dtype(dtype))
    if not input.dtype.is_float:
        last = input.ndim == 0 or sh.norm_axis(dim, input.ndim, fn) == input.ndim - 1
        kernel = f"{fn}_{'lastdim_' if last else ''}kernel_impl"
        raise NotImplementedError(f"\"{kernel}\" not implemented for "
                                  f"'{T_._TORCH_NAME.get(input.dtype.name, input.dtype.name)}'")
    return input


def softmax(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """``torch.special.softmax``: ``softmax`` along ``dim``, of ``input`` cast to ``dtype``
    first when it is given."""
    return _core.softmax(_softmax_input(input, dim, dtype, "softmax"), dim)


def log_softmax(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """``torch.special.log_softmax``: ``log_softmax`` along ``dim``, of ``input`` cast to
    ``dtype`` first when it is given."""
    return _core.log_softmax(_softmax_input(input, dim, dtype, "log_softmax"), dim)


def ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.ndtr``: the standard normal CDF, ``0.5 * (1 + erf(x / sqrt 2))``,
    which is what PyTorch's CPU kernel computes (``0.5 * erfc(-x / sqrt 2)`` is the same
    function, but would differ from PyTorch below about -8, where PyTorch's result is 0 and
    by up to an ulp elsewhere). Its derivative is the normal density, as PyTorch's."""
    x = _float_input(input, "ndtr")
    return (1.0 + _core.erf(x * _SQRT1_2)) * 0.5


def _tail_series(x: Tensor) -> Tensor:
    """``log(ndtr(x))`` for very negative ``x`` by the asymptotic series of Mills' ratio:
    ``-x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - 15/x^6 + ...)`` (eight terms:
    below the thresholds of ``log_ndtr`` the next term is under the dtype's resolution)."""
    x2 = x * x
    t = (-1.0) / x2
    s = t + 1.0
    for k in range(2, 9):
        t = t * float(-(2 * k - 1)) / x2
        s = s + t
    return -0.5 * x2 - (-x).log() - 0.5 * math.log(2 * math.pi) + s.log()


def log_ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.log_ndtr``: ``log(ndtr(x))`` without its underflow: ATen's two
    branches (``log1p(-erfc(x / sqrt 2) / 2)`` above -1, ``log(erfc(-x / sqrt 2) / 2)``
    below), and where ``erfc`` would underflow (below -10 in float32, -20 in float64) the
    asymptotic series; each branch reads a clamped input, so the branches not taken add no
    NaN to the gradient."""
    x = _float_input(input, "log_ndtr")
    far = -10.0 if x.dtype is not dt.float64 else -20.0
    upper = x >= -1.0
    lower = (x < -1.0) & (x >= far)
    xu = T_.where(upper, x, 0.0)
    xl = T_.where(lower, x, -2.0)
    xf = T_.where(upper | lower, far - 1.0, x)
    hi = (-0.5 * _core.erfc(xu * _SQRT1_2)).log1p()
    mid = (0.5 * _core.erfc(-xl * _SQRT1_2)).log()
    return T_.where(upper, hi, T_.where(lower, mid, _tail_series(xf)))


def entr(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.entr``: ``-x ln x`` for ``x > 0``, 0 at 0, ``-inf`` below, NaN for NaN
    (ATen's ``calc_entr``). The logarithm reads a clamped input, so no NaN reaches the
    gradient from the other cases (there it is 0; see the module's note)."""
    x = _float_input(input, "entr")
    pos = x > 0
    safe = T_.where(pos, x, 1.0)
    value = T_.where(pos, -safe * safe.log(), T_.where(x == 0, 0.0, float("-inf")))
    return T_.where(x.isnan(), x, value)


def xlog1py(input: Any, other: Any) -> Tensor:  # noqa: A002
    """``torch.special.xlog1py``: ``input * log1p(other)``, 0 where ``input == 0`` (unless
    ``other`` is NaN, which gives NaN), as ATen's. Either argument may be a Python number;
    integers promote to float32. ``log1p`` reads ``other`` replaced by 0 where ``input == 0``
    and ``other`` is ``<= -1`` or ``inf``, so those points give 0 (not ``0 * inf``) and, for
    ``other <= -1``, PyTorch's zero ``input`` gradient."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError(f"special_xlog1py() received an invalid combination of arguments - got "
                        f"({type(input).__name__}, {type(other).__name__}), but expected one of "
                        "(Tensor input, Tensor other), (Number self, Tensor other), (Tensor "
                        "input, Number other)")
    xn, yn = T_._operands(input, other, "xlog1py")
    x, y = Tensor._wrap(xn), Tensor._wrap(yn)
    if not x.dtype.is_float:
        x, y = x.to(dt.float32), y.to(dt.float32)
    y_safe = T_.where((x == 0) & ((y <= -1) | (y == float("inf"))), 0.0, y)
    return T_.where(y.isnan(), y, x * y_safe.log1p())


def multigammaln(input: Tensor, p: int) -> Tensor:  # noqa: A002
    """``torch.special.multigammaln``: the log of the multivariate gamma function of
    dimension ``p``, ATen's ``mvlgamma``: ``sum_{i < p} lgamma(x - i / 2) + p (p - 1) / 4 *
    log(pi)``. Defined for elements above ``(p - 1) / 2``; like PyTorch (which no longer
    checks), smaller ones give ``lgamma``'s values of negative arguments."""
    x = _float_input(input, "multigammaln")
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
        raise TypeError(f"special_multigammaln(): argument 'p' (position 2) must be int, not "
                        f"{type(p).__name__}")
    p = int(p)
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    total = None
    for i in range(p):
        term = _core.lgamma(x - (0.5 * (p - 1) - 0.5 * i))
        total = term if total is None else total + term
    return total + (p * (p - 1)) * math.log(math.pi) * 0.25


# -- the functions on graphc/ir/special_more.py's primitives ----------------------------------
def _unary(op: str, input: Any, fn: str, arg: str = "input") -> Tensor:  # noqa: A002
    return T_.unary(op, _float_input(input, fn, arg))


def ndtri(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.ndtri``: the inverse of the normal CDF on [0, 1] (ATen's Cephes
    rational approximations); -inf at 0, inf at 1, NaN outside. Its derivative is
    ``sqrt(2 pi) exp(ndtri(p)^2 / 2)``."""
    return _unary("ndtri", input, "ndtri")


def erfcx(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.erfcx``: ``exp(x^2) erfc(x)`` without its overflow and underflow
    (finite for large x, where ``erfc`` underflows; inf below about -26.6)."""
    return _unary("erfcx", input, "erfcx")


def i0e(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.i0e``: ``exp(-|x|) I0(x)``, finite where ``i0`` overflows."""
    return _unary("i0e", input, "i0e")


def i1(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.i1``: the modified Bessel function I1 (the primitive that is already
    ``i0``'s derivative)."""
    return _unary("i1", input, "i1")


def i1e(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.i1e``: ``exp(-|x|) I1(x)``."""
    return _unary("i1e", input, "i1e")


def modified_bessel_i0(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.modified_bessel_i0``: ATen computes it as ``i0`` does (same series,
    same order), so it is ``i0`` of the detached input: PyTorch gives it no gradient."""
    return _core.i0(_float_input(input, "modified_bessel_i0").detach())


def modified_bessel_i1(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.modified_bessel_i1`` (no gradient, as in PyTorch; ATen's version of
    ``i1`` with the float64 tables in float32 too)."""
    return _unary("modified_bessel_i1", input, "modified_bessel_i1")


def modified_bessel_k0(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.modified_bessel_k0``: K0 (inf at 0, NaN below; no gradient)."""
    return _unary("modified_bessel_k0", input, "modified_bessel_k0")


def modified_bessel_k1(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.modified_bessel_k1``: K1 (inf at 0, NaN below; no gradient)."""
    return _unary("modified_bessel_k1", input, "modified_bessel_k1")


def scaled_modified_bessel_k0(x: Tensor) -> Tensor:
    """``torch.special.scaled_modified_bessel_k0``: ``exp(x) K0(x)`` (no gradient)."""
    return _unary("scaled_modified_bessel_k0", x, "scaled_modified_bessel_k0", "x")


def scaled_modified_bessel_k1(x: Tensor) -> Tensor:
    """``torch.special.scaled_modified_bessel_k1``: ``exp(x) K1(x)`` (no gradient)."""
    return _unary("scaled_modified_bessel_k1", x, "scaled_modified_bessel_k1", "x")


def bessel_j0(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.bessel_j0``: J0 as ATen computes it (its Cephes port, whose dropped
    denominator terms put it up to ~1e-7 relative off the function; no gradient)."""
    return _unary("bessel_j0", input, "bessel_j0")


def bessel_j1(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.bessel_j1``: J1 as ATen computes it (no gradient)."""
    return _unary("bessel_j1", input, "bessel_j1")


def bessel_y0(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.bessel_y0``: Y0 as ATen computes it (-inf at 0, NaN below)."""
    return _unary("bessel_y0", input, "bessel_y0")


def bessel_y1(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.bessel_y1``: Y1 as ATen computes it (-inf at 0, NaN below)."""
    return _unary("bessel_y1", input, "bessel_y1")


def airy_ai(x: Tensor) -> Tensor:
    """``torch.special.airy_ai``: the Airy function Ai as ATen computes it (0 above 103.892,
    NaN at +-inf; no gradient)."""
    return _unary("airy_ai", x, "airy_ai", "x")


# sin(x) / x = sum_k (-1)^k x^2k / (2k + 1)!: (sign, factorial) per term, ATen's seven
_J0_SERIES = ((1.0, 1.0), (-1.0, 6.0), (1.0, 120.0), (-1.0, 5040.0), (1.0, 362880.0),
              (-1.0, 39916800.0), (1.0, 6227020800.0))


def spherical_bessel_j0(x: Tensor) -> Tensor:
    """``torch.special.spherical_bessel_j0``: ``sin(x) / x``, by ATen's Taylor polynomial in
    ``x^2`` below 1/2 (its coefficients rounded in the tensor's dtype, as ATen's ``T(-1.0) /
    T(6.0)``), 0 at +-inf. A composition of the detached input: PyTorch gives it no
    gradient."""
    x = _float_input(x, "spherical_bessel_j0", "x").detach()
    t = x.dtype.np.type
    coeffs = [float(t(sign) / t(fact)) for sign, fact in _J0_SERIES]
    near = x.abs() < 0.5
    small = T_.where(near, x, 0.0)
    z = small * small
    poly = z * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        poly = poly * z + c
    big = T_.where(near, 1.0, x)
    out = T_.where(near, poly, big.sin() / big)
    return T_.where(x.isinf(), 0.0, out)


_POLY_DOC = """``x`` and the degree ``n`` are tensors or one of them a Python number, promoted
    together (integers to float32); the degree is truncated per element (ATen's
    ``static_cast<int64_t>``: 0 for a negative, NaN or infinite degree). ATen's special
    values and closed forms, then its recurrence for the element's degree (a loop in the
    compiled kernel, so a tensor-valued degree needs no bound). No gradient, as in
    PyTorch."""


def _polynomial(name: str, what: str) -> Any:
    """The public function of the polynomial primitive ``name``: the twelve share their
    signature and promotion, so they are made here rather than written out."""

    def fn(x: Any, n: Any) -> Tensor:
        a, d = _pair(x, n, name, ("x", "n"))
        return T_.binary(name, a, d)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``torch.special.{name}``: {what}.\n\n    {_POLY_DOC}"
    return fn


chebyshev_polynomial_t = _polynomial(
    "chebyshev_polynomial_t", "the Chebyshev polynomial of the first kind T_n(x) (cos(n acos "
    "x) inside (-1, 1) from n = 7)")
chebyshev_polynomial_u = _polynomial(
    "chebyshev_polynomial_u", "the Chebyshev polynomial of the second kind U_n(x)")
chebyshev_polynomial_v = _polynomial(
    "chebyshev_polynomial_v", "the Chebyshev polynomial of the third kind V_n(x)")
chebyshev_polynomial_w = _polynomial(
    "chebyshev_polynomial_w", "the Chebyshev polynomial of the fourth kind W_n(x)")
shifted_chebyshev_polynomial_t = _polynomial(
    "shifted_chebyshev_polynomial_t", "T_n(2x - 1)")
shifted_chebyshev_polynomial_u = _polynomial(
    "shifted_chebyshev_polynomial_u", "U_n(2x - 1)")
shifted_chebyshev_polynomial_v = _polynomial(
    "shifted_chebyshev_polynomial_v", "V_n(2x - 1)")
shifted_chebyshev_polynomial_w = _polynomial(
    "shifted_chebyshev_polynomial_w", "W_n(2x - 1)")
hermite_polynomial_h = _polynomial(
    "hermite_polynomial_h", "the physicists' Hermite polynomial H_n(x) (NaN above degree 128 "
    "in float32, 512 in float64, as ATen)")
hermite_polynomial_he = _polynomial(
    "hermite_polynomial_he", "the probabilists' Hermite polynomial He_n(x) (NaN above degree "
    "128 in float32, 512 in float64, as ATen)")
laguerre_polynomial_l = _polynomial("laguerre_polynomial_l", "the Laguerre polynomial L_n(x)")
legendre_polynomial_p = _polynomial("legendre_polynomial_p", "the Legendre polynomial P_n(x)")


__all__ = [
    "expit", "logit", "erf", "erfc", "erfinv", "gammaln", "digamma", "psi", "i0", "sinc",
    "xlogy", "logsumexp", "log1p", "expm1", "exp2", "round", "softmax", "log_softmax",
    "ndtr", "log_ndtr", "entr", "xlog1py", "multigammaln",
    "polygamma", "zeta", "ndtri", "erfcx", "i0e", "i1", "i1e", "modified_bessel_i0",
    "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
    "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "bessel_j0", "bessel_j1",
    "bessel_y0", "bessel_y1", "spherical_bessel_j0", "airy_ai", "chebyshev_polynomial_t",
    "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w", "hermite_polynomial_h",
    "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p", "gammainc",
    "gammaincc",
]
