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

Not here: the functions whose primitive graphc lacks (Bessel functions other than ``i0``,
``i0e``/``i1``/``i1e``, ``erfcx``, ``ndtri``, ``polygamma``, ``zeta``, ``gammainc``/
``gammaincc``, the orthogonal polynomials, ``airy_ai``): a composition would not be accurate
over their whole domain.

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


def _float_input(x: Any, fn: str) -> Tensor:
    """``x`` as a floating tensor: integers and bools become float32, as PyTorch's unary
    float ops promote them."""
    if not isinstance(x, Tensor):
        raise TypeError(f"special_{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")
    return x if x.dtype.is_float else x.to(dt.float32)


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


__all__ = [
    "expit", "logit", "erf", "erfc", "erfinv", "gammaln", "digamma", "psi", "i0", "sinc",
    "xlogy", "logsumexp", "log1p", "expm1", "exp2", "round", "softmax", "log_softmax",
    "ndtr", "log_ndtr", "entr", "xlog1py", "multigammaln",
]
