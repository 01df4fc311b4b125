"""Transcendental functions for the PTX backend, written in plain LLVM IR arithmetic.

Why not the LLVM intrinsics: on NVPTX ``llvm.exp``/``llvm.log``/``llvm.pow`` (and ``llvm.log2``,
``llvm.exp2.f64``) have no lowering and LLVM *aborts the process* ("no libcall available");
libdevice is not installed on every machine that has a driver. These routines use only
``fmul``/``fadd``/``fdiv``, integer bit manipulation, ``llvm.rint`` and ``llvm.fabs``, which
every backend lowers, so

- the same IR is emitted for f32 and f64 (coefficient counts differ by precision);
- the tests JIT exactly these routines for the host CPU and compare them with numpy, which is
  the numerical check available on a machine without a GPU.

Accuracy (checked by ``tests/test_ptx.py``): a few ulp for exp/log/sigmoid/tanh, about 1e-6
(f32) / 1e-14 (f64) relative for erf near |x| = 2, where its two branches meet.
"""

from __future__ import annotations

import math

from llvmlite import ir

from .llvm_util import F32, I32, I64, declare, fconst, log_special_cases

_LOG2E = 1.4426950408889634
# Cody-Waite splits of ln 2 (Cephes): the high part has few mantissa bits, so n*hi is exact
_LN2 = {32: (0.693359375, -2.12194440e-4), 64: (6.93145751953125e-1, 1.42860682030941723212e-6)}
# exp: clamp range (beyond it the result is 0 or inf) and Taylor degree for |r| <= ln2/2
_EXP_RANGE = {32: (-104.0, 89.0), 64: (-746.0, 710.0)}
_EXP_DEG = {32: 8, 64: 14}
_LOG_TERMS = {32: 6, 64: 13}  # odd terms of 2*atanh(s), |s| <= 0.1716
_ERF_SPLIT = 2.0
_ERF_TAYLOR = {32: 22, 64: 38}
_ERF_CF = {32: 14, 64: 64}


def _bits(t: ir.Type) -> int:
    return 32 if t == F32 else 64


_c = fconst


class Math:
    """Emits math on one builder; ``t`` is the float type of every operand."""

    def __init__(self, b: ir.IRBuilder, mod: ir.Module) -> None:
        self.b = b
        self.mod = mod

    def _intr(self, name: str, t: ir.Type, n: int = 1) -> ir.Function:
        return declare(self.mod, f"{name}.f{_bits(t)}", t, [t] * n)

    def _horner(self, x: ir.Value, coeffs: list[float]) -> ir.Value:
        """coeffs[0] + x*(coeffs[1] + x*(...)), highest degree innermost."""
        b, t = self.b, x.type
        acc = _c(t, coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = b.fadd(b.fmul(acc, x, flags=("contract",)), _c(t, c), flags=("contract",))
        return acc

    def _pow2i(self, n: ir.Value, t: ir.Type) -> ir.Value:
        """2**n for an integer n in the normal exponent range, built from the bit pattern."""
        b = self.b
        it = I32 if t == F32 else I64
        mbits, bias = (23, 127) if t == F32 else (52, 1023)
        e = b.add(b.trunc(n, it) if it == I32 else n, ir.Constant(it, bias))
        return b.bitcast(b.shl(e, ir.Constant(it, mbits)), t)

    def _is_nan(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x)

    # -- exp ------------------------------------------------------------------------------
    def exp(self, x: ir.Value) -> ir.Value:
        """Cody-Waite reduction x = n ln2 + r, Taylor polynomial in r, scale by 2^n.

        2^n is applied as two factors so that n up to 1025 (and results just below the
        overflow threshold) need no special case; NaN is kept out of the integer path
        (``fptosi`` of NaN is poison) and restored at the end.
        """
        b, t = self.b, x.type
        w = _bits(t)
        lo, hi = _EXP_RANGE[w]
        xs = b.select(b.fcmp_ordered(">", x, _c(t, hi)), _c(t, hi), x)
        xs = b.select(b.fcmp_ordered("<", xs, _c(t, lo)), _c(t, lo), xs)
        xs = b.select(self._is_nan(x), _c(t, 0.0), xs)
        nf = b.call(self._intr("llvm.rint", t), [b.fmul(xs, _c(t, _LOG2E))])
        c1, c2 = _LN2[w]
        r = b.fsub(b.fsub(xs, b.fmul(nf, _c(t, c1))), b.fmul(nf, _c(t, c2)))
        p = self._horner(r, [1.0 / math.factorial(k) for k in range(_EXP_DEG[w] + 1)])
        n = b.fptosi(nf, I64)
        n1 = b.ashr(n, ir.Constant(I64, 1))
        n2 = b.sub(n, n1)
        y = b.fmul(b.fmul(p, self._pow2i(n1, t)), self._pow2i(n2, t))
        y = b.select(b.fcmp_ordered("<=", x, _c(t, lo)), _c(t, 0.0), y)
        return b.select(self._is_nan(x), x, y)

    def expm1_small(self, x: ir.Value) -> ir.Value:
        """exp(x) - 1 for |x| <= ln2/2, without cancellation (Taylor series times x)."""
        w = _bits(x.type)
        coeffs = [1.0 / math.factorial(k + 1) for k in range(_EXP_DEG[w] + 1)]
        return self.b.fmul(x, self._horner(x, coeffs))

    # -- log ------------------------------------------------------------------------------
    def log(self, x: ir.Value) -> ir.Value:
        """x = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh((m-1)/(m+1)) as a series."""
        b, t = self.b, x.type
        w = _bits(t)
        it = I32 if w == 32 else I64
        mbits, bias = (23, 127) if w == 32 else (52, 1023)
        tiny = 2.0 ** (-126 if w == 32 else -1022)
        boost = 24 if w == 32 else 54
        sub = b.fcmp_ordered("<", x, _c(t, tiny))
        xn = b.select(sub, b.fmul(x, _c(t, 2.0 ** boost)), x)
        bits = b.bitcast(xn, it)
        e = b.sub(b.and_(b.lshr(bits, ir.Constant(it, mbits)), ir.Constant(it, (1 << 11) - 1
                                                                              if w == 64
                                                                              else 255)),
                  ir.Constant(it, bias))
        e = b.sub(e, b.select(sub, ir.Constant(it, boost), ir.Constant(it, 0)))
        mant = b.or_(b.and_(bits, ir.Constant(it, (1 << mbits) - 1)),
                     ir.Constant(it, bias << mbits))
        m = b.bitcast(mant, t)
        big = b.fcmp_ordered(">", m, _c(t, math.sqrt(2.0)))
        m = b.select(big, b.fmul(m, _c(t, 0.5)), m)
        e = b.add(e, b.zext(big, it))
        f = b.fsub(m, _c(t, 1.0))
        s = b.fdiv(f, b.fadd(f, _c(t, 2.0)))
        s2 = b.fmul(s, s)
        series = self._horner(s2, [2.0 / (2 * k + 1) for k in range(_LOG_TERMS[w])])
        lm = b.fmul(s, series)
        ef = b.sitofp(e, t)
        c1, c2 = _LN2[w]
        y = b.fadd(b.fmul(ef, _c(t, c1)), b.fadd(lm, b.fmul(ef, _c(t, c2))))
        return log_special_cases(b, x, y)

    # -- composites -----------------------------------------------------------------------
    def sigmoid(self, x: ir.Value) -> ir.Value:
        b, t = self.b, x.type
        return b.fdiv(_c(t, 1.0), b.fadd(_c(t, 1.0), self.exp(b.fneg(x))))

    def tanh(self, x: ir.Value) -> ir.Value:
        """tanh|x| = u / (u + 2) with u = expm1(2|x|); sign restored; 1 beyond saturation."""
        b, t = self.b, x.type
        a = b.call(self._intr("llvm.fabs", t), [x])
        a2 = b.fadd(a, a)
        small = b.fcmp_ordered("<", a2, _c(t, 0.34))
        u = b.select(small, self.expm1_small(b.select(small, a2, _c(t, 0.0))),
                     b.fsub(self.exp(a2), _c(t, 1.0)))
        y = b.fdiv(u, b.fadd(u, _c(t, 2.0)))
        y = b.select(b.fcmp_ordered(">", a, _c(t, 10.0 if _bits(t) == 32 else 20.0)),
                     _c(t, 1.0), y)
        y = b.select(b.fcmp_ordered("<", x, _c(t, 0.0)), b.fneg(y), y)
        return b.select(self._is_nan(x), x, y)

    def erf(self, x: ir.Value) -> ir.Value:
        """Taylor series for |x| < 2, Laplace's continued fraction for erfc beyond."""
        b, t = self.b, x.type
        w = _bits(t)
        a = b.call(self._intr("llvm.fabs", t), [x])
        near = b.fcmp_ordered("<", a, _c(t, _ERF_SPLIT))
        an = b.select(near, a, _c(t, 0.0))
        coeffs = [(-1.0) ** n / (math.factorial(n) * (2 * n + 1))
                  for n in range(_ERF_TAYLOR[w])]
        taylor = b.fmul(b.fmul(an, self._horner(b.fmul(an, an), coeffs)),
                        _c(t, 2.0 / math.sqrt(math.pi)))
        af = b.select(near, _c(t, _ERF_SPLIT), a)
        f = af
        for k in range(_ERF_CF[w], 0, -1):
            f = b.fadd(af, b.fdiv(_c(t, k / 2.0), f))
        erfc = b.fdiv(self.exp(b.fneg(b.fmul(af, af))), b.fmul(f, _c(t, math.sqrt(math.pi))))
        y = b.select(near, taylor, b.fsub(_c(t, 1.0), erfc))
        y = b.select(b.fcmp_ordered("<", x, _c(t, 0.0)), b.fneg(y), y)
        return b.select(self._is_nan(x), x, y)

    def pow(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """exp(y log|x|) with C's rules for negative bases, zero and y == 0."""
        b, t = self.b, x.type
        r = self.exp(b.fmul(y, self.log(b.call(self._intr("llvm.fabs", t), [x]))))
        yi = b.call(self._intr("llvm.rint", t), [y])
        is_int = b.fcmp_ordered("==", yi, y)
        half = b.fmul(y, _c(t, 0.5))
        odd = b.and_(is_int, b.fcmp_ordered("!=", b.call(self._intr("llvm.rint", t), [half]),
                                            half))
        neg = b.fcmp_ordered("<", x, _c(t, 0.0))
        r = b.select(b.and_(neg, odd), b.fneg(r), r)
        r = b.select(b.and_(neg, b.not_(is_int)), _c(t, float("nan")), r)
        return b.select(b.fcmp_ordered("==", y, _c(t, 0.0)), _c(t, 1.0), r)


UNARY = ("exp", "log", "tanh", "sigmoid", "erf")
