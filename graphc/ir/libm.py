"""The C library's float64 transcendental functions over numpy arrays.

ATen's scalar code (the special functions of ``aten/src/ATen/native/Math.h``, the random
distributions' transforms) calls ``std::sin``, ``std::log`` ... on doubles, i.e. the C
library. NumPy's own float64 ``sin``, ``cos``, ``tan``, ``arccos``, ``log``, ``exp`` ...
loops are SIMD code on hosts with AVX-512 (derived from Intel's SVML) and differ from the C
library in the last bit for some inputs (measured on an AVX-512 Zen 4: one ``normal_`` draw
in 60, and Chebyshev polynomials near their roots, where an ulp of ``acos x`` is ``n`` ulp
of the result); on AVX2 hosts numpy calls the C library too. Where a reference must be
ATen's bits on every host, it evaluates float64 through Python's ``math`` (the C library),
element by element: ~50-80 ns an element instead of a few, for ops that are rare and small.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

# numpy's function -> the C library's (through ``math``)
_MATH: dict[Any, Callable[[float], float]] = {
    np.sin: math.sin, np.cos: math.cos, np.tan: math.tan, np.arcsin: math.asin,
    np.arccos: math.acos, np.arctan: math.atan, np.sinh: math.sinh, np.cosh: math.cosh,
    np.tanh: math.tanh, np.exp: math.exp, np.expm1: math.expm1, np.log: math.log,
    np.log1p: math.log1p, np.log2: math.log2, np.log10: math.log10,
}


def libm(fn: Any, x: Any) -> np.ndarray:
    """``fn`` (a numpy ufunc of one argument) on the float64 array ``x``, computed by the C
    library's function of the same name where ``math`` has it (``fn`` itself otherwise, and
    for the elements where ``math`` raises instead of returning an infinity or NaN: its
    domain and overflow errors, where the C library's result is numpy's)."""
    x = np.asarray(x, np.float64)
    f = _MATH.get(fn)
    if f is None:
        return fn(x)

    def one(v: float) -> float:
        try:
            return f(v)
        except (ValueError, OverflowError):
            with np.errstate(all="ignore"):
                return float(fn(np.float64(v)))

    values = np.ascontiguousarray(x).ravel().tolist()
    try:  # the common case, no element outside ``f``'s domain: ``math``'s function directly
        out = np.fromiter(map(f, values), np.float64, count=len(values))
    except (ValueError, OverflowError):
        out = np.fromiter(map(one, values), np.float64, count=len(values))
    return out.reshape(x.shape)


__all__ = ["libm"]
