"""Fused multiply-add with one rounding, over numpy arrays (numpy has no fma).

ATen's CPU kernels are compiled with FMA contraction, so wherever one of its kernels
computes ``a * b + c`` (an ``add`` with ``alpha``, ``addcmul``, ``lerp``, the scaling of
its random draws) the result is rounded once. The references here give those bits:
``fma`` for float64 (exact error-free transforms, with exact arithmetic for the rare hard
cases) and ``fma32`` for float32 (the product is exact in float64; the sum is rounded
there and then to float32, which is wrong only where the float64 sum falls exactly on a
float32 tie, decided then by the sum's exact error).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's splitting constant for doubles


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = _SPLIT * x
    hi = t - (t - x)
    return hi, x - hi


def fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` in float64 with one rounding, elementwise.

    ATen's CPU kernels are compiled with ``-mfma`` and GCC's default ``-ffp-contract=fast``,
    so the ``x * std + mean`` of its normal draws and the ``u * (to - from) + from`` of its
    uniform ones are fused multiply-adds; numpy has no fma. The product is split exactly
    (Dekker: ``a * b = p + e``), ``p + c`` summed exactly (Knuth: ``s + t``) and
    ``r = s + (t + e)`` rounded; ``r`` is the correctly rounded ``a * b + c`` unless the
    last sum's remainder sits within the rounding of ``t + e`` of a tie (or the values are
    so large or small that the splits are inexact, or not finite): those few elements are
    summed exactly by ``math.fsum`` or, for the extremes, ``fractions``."""
    a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                  np.asarray(c, np.float64))
    with np.errstate(all="ignore"):
        p = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        s = p + c
        v = s - p
        t = (p - (s - v)) + (c - v)
        w = t + e
        d = (t - (w - (w - t))) + (e - (w - t))  # exact: w + d = t + e
        r = s + w
        q = (s - r) + w  # exact: r + q = s + w (|s| >= |w| where it matters)
        half = np.spacing(np.abs(r)) * 0.5
        hard = np.abs(np.abs(q) - half) <= np.abs(d) + np.spacing(half)
        # at a power of two the binade below has half the spacing
        hard |= (np.abs(q) >= 0.5 * half) & (np.frexp(np.abs(r))[0] == 0.5)
        extreme = ~(np.isfinite(r) & (np.abs(a) < 2.0 ** 990) & (np.abs(b) < 2.0 ** 990)
                    & ((np.abs(p) > 2.0 ** -960) | (p == 0.0)))
        plain = ~np.isfinite(a) | ~np.isfinite(b) | ~np.isfinite(c)
        out = np.where(plain, a * b + c, r)  # infinities and NaN: the fma's own result
    for i in np.flatnonzero((hard | extreme) & ~plain):
        ai, bi, ci = float(a.flat[i]), float(b.flat[i]), float(c.flat[i])
        if extreme.flat[i]:
            from fractions import Fraction

            try:
                out.flat[i] = float(Fraction(ai) * Fraction(bi) + Fraction(ci))
            except OverflowError:
                out.flat[i] = ai * bi + ci
        else:
            out.flat[i] = math.fsum((float(p.flat[i]), float(e.flat[i]), ci))
    return out


_TIE_BITS = np.uint64((1 << 29) - 1)  # the float64 mantissa bits below a float32's last
_TIE = np.uint64(1 << 28)  # ... of a value halfway between two float32 neighbours
_ABS_BITS = np.uint64((1 << 63) - 1)
_TINY_BITS = np.float64(2.0 ** -125).view(np.uint64)  # below: float32's subnormal range


def fma32(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` for float32 operands with one rounding to float32, elementwise.

    The product of two float32 values is exact in float64 and the sum ``s`` is rounded
    once there; rounding ``s`` to float32 is then the correctly rounded result, except
    where ``s`` lies exactly halfway between two float32 values while the exact sum does
    not (a float64 rounding onto a float32 tie: the exact sum is on one side of it). Those
    candidates (the tie's bit pattern, or the float32 subnormal range where the spacing
    differs) get the sum's exact error (Knuth's two-sum) and the neighbour on its side.
    About nine passes over the operands (numpy's ufuncs cast float32 to float64 inside
    their loops); the candidates are rare."""
    with np.errstate(all="ignore"):
        s = np.asarray(np.add(np.multiply(a, b, dtype=np.float64), c, dtype=np.float64))
        out = s.astype(np.float32)
        bits = s.view(np.uint64)
        cand = (bits & _TIE_BITS) == _TIE
        cand |= (bits & _ABS_BITS) < _TINY_BITS
        if not cand.any():
            return out
        idx = np.flatnonzero(cand)
        a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                      np.asarray(c, np.float64))
        ps = a.flat[idx] * b.flat[idx]
        cs, ss = c.flat[idx], s.flat[idx]
        v = ss - ps
        err = (ps - (ss - v)) + (cs - v)  # exact: ps + cs == ss + err
        r = out.flat[idx]
        r64 = r.astype(np.float64)
        n = np.nextafter(r, np.where(ss > r64, np.float32(np.inf), np.float32(-np.inf)))
        tie = (ss != r64) & (ss == (r64 + n.astype(np.float64)) * 0.5) & (err != 0)
        hi, lo = np.maximum(r, n), np.minimum(r, n)
        out.flat[idx] = np.where(tie, np.where(err > 0, hi, lo), r)
    return out
