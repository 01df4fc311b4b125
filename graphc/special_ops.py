"""The special functions that ``Tensor`` methods and top-level names share with
``graphc.special``: ``polygamma`` (``Tensor.polygamma``, ``gc.polygamma``), ``zeta`` and the
incomplete gamma functions (``gc.igamma``/``igammac``, ``Tensor.igamma``/``igammac``), with
their operand rules.

They live below the tensor layer, importing only ``tensor_ops`` and the op table, so that
``graphc.misc_ops`` (installed on ``Tensor`` by ``graphc.tensor``) can attach the methods;
``graphc.special`` imports ``graphc._core`` for its aliases and re-exports these.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import tensor_ops as T_
from ._tensor import Tensor
from .ir import dtypes as dt
from .ir.special import polygamma_factor


def _float_input(x: Any, fn: str, arg: str = "input") -> Tensor:
    """``x`` as a floating tensor: integers and bools become float32, as PyTorch's unary
    float ops promote them. ``arg``: the parameter's name in PyTorch's error."""
    if not isinstance(x, Tensor):
        raise TypeError(f"special_{fn}(): argument '{arg}' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")
    return x if x.dtype.is_float else x.to(dt.float32)


def _pair(input: Any, other: Any, fn: str, names: tuple[str, str]) -> tuple[Tensor, Tensor]:
    """Two operands as PyTorch's binary special functions take them: a tensor and a tensor
    or a Python number (either side), promoted together; integers and bools to float32."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        a, b = names
        raise TypeError(f"special_{fn}() received an invalid combination of arguments - got "
                        f"({type(input).__name__}, {type(other).__name__}), but expected one "
                        f"of (Tensor {a}, Tensor {b}), (Number {a}, Tensor {b}), (Tensor {a}, "
                        f"Number {b})")
    xn, yn = T_._operands(input, other, fn)
    x, y = Tensor._wrap(xn), Tensor._wrap(yn)
    if not x.dtype.is_float:
        x, y = x.to(dt.float32), y.to(dt.float32)
    return x, y


def zeta(input: Any, other: Any) -> Tensor:  # noqa: A002
    """``torch.special.zeta``: the Hurwitz zeta function ``sum_k (other + k)^-input`` (ATen's
    Cephes series; inf at ``input == 1`` and at the non-positive integers ``other``, NaN for
    ``input < 1``). Either argument may be a Python number. Differentiable in ``other``
    (``-input zeta(input + 1, other)``); the gradient in ``input`` raises in ``backward()``,
    as PyTorch's."""
    x, q = _pair(input, other, "zeta", ("self", "other"))
    return T_.binary("zeta", x, q)


def polygamma(n: int, input: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.polygamma`` (``torch.polygamma``): the n-th derivative of digamma.
    ``n = 0`` is ``digamma``, ``n = 1`` the trigamma primitive (ATen's own series for both);
    above, ATen's ``(-1)^(n+1) exp(lgamma(n + 1)) zeta(n + 1, x)`` with the constant computed
    as ATen's kernel computes it. The gradient is ``polygamma(n + 1, x)``: for ``n >= 1`` the
    derivative of this composition, equal up to the rounding of that constant."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"special_polygamma(): argument 'n' (position 1) must be int, not "
                        f"{type(n).__name__}")
    if not isinstance(input, Tensor):
        raise TypeError(f"special_polygamma(): argument 'input' (position 2) must be Tensor, "
                        f"not {type(input).__name__}")
    n = int(n)
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    x = _float_input(input, "polygamma")
    if n == 0:
        return T_.unary("digamma", x)
    if n == 1:
        return T_.unary("trigamma", x)
    return zeta(float(n + 1), x) * polygamma_factor(n, x.dtype.np.type)


def _gamma_pair(a: Any, x: Any, fn: str, kernel: str) -> tuple[Tensor, Tensor]:
    """PyTorch's operands for ``gammainc``/``gammaincc``: two tensors (no Python numbers),
    promoted together; integer results are refused as ATen's kernel refuses them."""
    for pos, (name, v) in enumerate((("input", a), ("other", x)), 1):
        if not isinstance(v, Tensor):
            raise TypeError(f"special_{fn}(): argument '{name}' (position {pos}) must be "
                            f"Tensor, not {type(v).__name__}")
    an, xn = T_._operands(a, x, fn)
    a, x = Tensor._wrap(an), Tensor._wrap(xn)
    if not a.dtype.is_float:
        raise NotImplementedError(f'"{kernel}" not implemented for '
                                  f"'{T_._TORCH_NAME.get(a.dtype.name, a.dtype.name)}'")
    return a, x


def gammainc(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.gammainc`` (``torch.igamma``): the regularized lower incomplete gamma
    function ``P(a, x)`` of ``a = input``, ``x = other``, as ATen's ``calc_igamma`` computes
    it (graphc/ir/igamma.py). Differentiable in ``other``; the gradient in ``input`` raises in
    ``backward()``, as PyTorch's."""
    a, x = _gamma_pair(input, other, "gammainc", "igamma_cpu")
    return T_.binary("igamma", a, x)


def gammaincc(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.special.gammaincc`` (``torch.igammac``): the regularized upper incomplete gamma
    function ``Q(a, x) = 1 - P(a, x)``, as ATen's ``calc_igammac`` computes it (accurate where
    ``P`` is near 1)."""
    a, x = _gamma_pair(input, other, "gammaincc", "igammac_cpu")
    return T_.binary("igammac", a, x)


# ``torch.igamma`` / ``torch.igammac``: the same functions under their top-level names
igamma = gammainc
igammac = gammaincc

__all__ = ["zeta", "polygamma", "gammainc", "gammaincc", "igamma", "igammac"]
