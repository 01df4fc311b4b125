"""The vector-math routines of ``graphc/ir/special_more.py``: Hurwitz zeta, ndtri, erfcx,
i0e, i1e, the modified Bessel functions I1, K0, K1 (plain and scaled), J0, J1, Y0, Y1,
airy_ai and the orthogonal polynomials, as LLVM IR for both backends (``VMath`` inherits
them; ``e.math(name, ...)`` emits them).

Why a module of its own: these follow ATen's kernels rather than the best algorithm for the
function (``graphc/ir/special_more.py`` explains why and holds the coefficient tables), and
they share helpers the elementary functions do not need: ATen's ``polevl`` loops, float32
transcendentals rounded from float64, and an accurate ``pow`` for zeta's terms.

Conventions, as in ``codegen/vmath.py``: straight-line, branch-free IR (every branch of an
``if`` evaluated, the lane's result picked by ``select``; ATen's early-exit loops unrolled to
their bound with a per-lane "done" mask), so the loop vectoriser widens the kernel and the
same code lowers on PTX. The one exception is the polynomials' recurrence, whose length is
the element's degree: a loop (see ``_recurrence``). Where ATen's compiled code fuses ``a * b
+ c`` (GCC contracts a product whose only use is an addition), the routine uses ``fma``
(``llvm.fmuladd``), so its roundings are ATen's on FMA hardware. Float32 routines run in
float32 where ATen's do, their ``exp``/``log``/``sin``/``cos`` rounded from float64.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from llvmlite import ir

from graphc.ir import special_more as S
from graphc.ir.special import I0_A, I0_B, I1_A, I1_B

from .llvm_util import F32, F64, fconst, log_special_cases

_c = fconst


def _f32(v: float) -> float:
    """``v`` rounded to float32 (constants ATen folds in single precision)."""
    return struct.unpack("f", struct.pack("f", v))[0]


class SpecialFunctions:
    """Mixin of ``codegen.vmath.VMath`` (which provides ``b``, ``fma``, ``horner``, ``exp``,
    ``log``, ``sin``, ``cos``, ``_call``, ``_via_f64`` ...)."""

    b: ir.IRBuilder
    # vmath's tables (set on VMath: this module cannot import it back): fdlibm's split of
    # ln 2 and its log series
    LN2_F64: tuple[float, float]
    LOG_LG: tuple[float, ...]

    # -- helpers ---------------------------------------------------------------------------
    def _polevl(self, x: ir.Value, coeffs: tuple) -> ir.Value:
        """ATen's ``polevl`` loop (highest degree first), each step fused."""
        return self.horner(x, coeffs[::-1])  # type: ignore[attr-defined]

    def _cr(self, name: str, x: ir.Value) -> ir.Value:
        """``exp`` / ``log`` / ``sin`` / ``cos`` / ``acos`` for float32 through float64 and
        rounded once: correctly rounded but for rare ties, as glibc's float functions (which
        ATen's float kernels call) nearly always are; vmath's own float32 ``exp``/``log`` are
        within a couple of ulp."""
        fn = getattr(self, name)
        if x.type == F32:
            return self._via_f64(fn, x)  # type: ignore[attr-defined]
        return fn(x)

    def _sqrt(self, x: ir.Value) -> ir.Value:
        return self._call("llvm.sqrt", x)  # type: ignore[attr-defined]

    def _fma_exact(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """``a * b + c`` with one rounding on every target (``llvm.fma``: an instruction on
        FMA hardware and PTX, libm's ``fma`` elsewhere): the exact error terms of ``pow``
        need it, where ``fmuladd`` may be unfused."""
        return self._call("llvm.fma", a, b, c)  # type: ignore[attr-defined]

    def _isfinite(self, x: ir.Value) -> ir.Value:
        ax = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        return self.b.fcmp_ordered("<", ax, _c(x.type, math.inf))

    # -- pow of a positive base, to about an ulp (float64) ----------------------------------
    def _log_dd(self, a: ir.Value) -> tuple[ir.Value, ir.Value]:
        """log(a) as ``hi + lo`` to about 2^-60 relative, for float64 ``a > 0``: ``a = 2^e
        (1 + f)``, ``log(1 + f) = 2 s + s R(s^2)`` with ``s = f / (2 + f)`` carried as
        ``sh + sl`` (the remainder of the division is exact), and ``e ln2_hi + 2 sh`` summed
        exactly; only ``s R`` (1% of the result) rounds at full weight. Special values as
        ``log``'s in ``hi``, ``lo`` 0 there."""
        b, t = self.b, a.type
        ef, f = self._log_reduce(a)  # type: ignore[attr-defined]
        dh, dl = self._two_sum(_c(t, 2.0), f)  # type: ignore[attr-defined]
        sh = b.fdiv(f, dh)
        rem = self._fma_exact(b.fneg(sh), dh, f)
        sl = b.fdiv(b.fsub(rem, b.fmul(sh, dl)), dh)
        z = b.fmul(sh, sh)
        tail = b.fmul(sh, b.fmul(z, self.horner(z, self.LOG_LG)))  # type: ignore[attr-defined]
        c1, c2 = self.LN2_F64
        hi, err = self._two_sum(b.fmul(ef, _c(t, c1)),  # type: ignore[attr-defined]
                                b.fmul(sh, _c(t, 2.0)))
        lo = b.fadd(err, b.fadd(b.fmul(ef, _c(t, c2)), b.fadd(b.fmul(sl, _c(t, 2.0)), tail)))
        hi, lo = self._two_sum(hi, lo)  # type: ignore[attr-defined]  # lo below hi's ulp
        hi = log_special_cases(b, a, hi)
        return hi, b.select(self._isfinite(hi), lo, _c(t, 0.0))

    def _exp_dd(self, hi: ir.Value, lo: ir.Value) -> ir.Value:
        """exp(hi + lo) for a tiny finite ``lo``: ``exp``'s reduction of ``hi`` with ``lo``
        added to the reduced argument."""
        b, t = self.b, hi.type
        xs, under = self._exp_range(hi, -746.0, 710.0)  # type: ignore[attr-defined]
        nf = self._call("llvm.rint", b.fmul(xs, _c(t, 1.4426950408889634)))  # type: ignore
        c1, c2 = self.LN2_F64
        r = self.fma(nf, _c(t, -c1), xs)  # type: ignore[attr-defined]
        r = self.fma(nf, _c(t, -c2), r)  # type: ignore[attr-defined]
        r = b.fadd(r, b.select(under, _c(t, 0.0), lo))
        y = self._exp_scaled(nf, r)  # type: ignore[attr-defined]
        return self._exp_result(hi, under, y)  # type: ignore[attr-defined]

    def _pow_pos(self, a: ir.Value, y: ir.Value) -> ir.Value:
        """``a^y`` for float64 ``a > 0`` (or +inf / NaN), within about an ulp whatever the
        size of ``y log a``: ``exp`` of ``y (hi + lo)`` with the product's rounding error kept
        (``fma``). ``libm``'s ``pow`` is what ATen's zeta sums, and ``exp(y log a)`` would
        lose ``|y log a|`` ulp per term. 1 at ``a == 1`` (also for infinite ``y``)."""
        b, t = self.b, a.type
        hi, lo = self._log_dd(a)
        ph = b.fmul(y, hi)
        pl = b.fadd(self._fma_exact(y, hi, b.fneg(ph)), b.fmul(y, lo))
        pl = b.select(self._isfinite(ph), pl, _c(t, 0.0))
        r = self._exp_dd(ph, pl)
        return b.select(b.fcmp_ordered("==", a, _c(t, 1.0)), _c(t, 1.0), r)

    # -- zeta --------------------------------------------------------------------------------
    def _zeta_pos(self, x: ir.Value, q: ir.Value, first32: ir.Value | None) -> ir.Value:
        """ATen's series for ``q > 0`` in float64 (``_zeta_pos`` of graphc/ir/special_more.py:
        ten masked steps, then twelve masked Euler-Maclaurin terms)."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        mach = S.ZETA_MACHEP
        nx = b.fneg(x)
        s = self._pow_pos(q, nx)
        if first32 is not None:
            s = b.select(first32, b.fpext(b.fptrunc(s, F32), F64), s)
        a, bb = q, k(0.0)
        done = ir.Constant(ir.IntType(1), 0)
        for i in range(10):
            live = b.not_(done)
            if i == 9:
                live = b.and_(live, b.fcmp_ordered("<=", a, k(9.0)))
            a = b.select(live, b.fadd(a, k(1.0)), a)
            bb = b.select(live, self._pow_pos(a, nx), bb)
            s = b.select(live, b.fadd(s, bb), s)
            small = b.and_(b.fcmp_ordered("<", b.fmul(k(-mach), s), bb),
                           b.fcmp_ordered("<", bb, b.fmul(k(mach), s)))
            done = b.or_(done, b.and_(live, small))
        w = a
        s = b.select(done, s, b.fadd(s, b.fdiv(b.fmul(bb, w), b.fsub(x, k(1.0)))))
        s = b.select(done, s, b.fsub(s, b.fmul(k(0.5), bb)))
        aa = k(1.0)
        kk = 0.0
        for c in S.ZETA_A:
            aa = b.fmul(aa, b.fadd(x, k(kk)))
            bb = b.fdiv(bb, w)
            term = b.fdiv(b.fmul(aa, bb), k(c))
            s = b.select(done, s, b.fadd(s, term))
            ratio = self._call("llvm.fabs", b.fdiv(term, s))  # type: ignore[attr-defined]
            done = b.or_(done, b.fcmp_ordered("<", ratio, k(mach)))
            kk += 1.0
            aa = b.fmul(aa, b.fadd(x, k(kk)))
            bb = b.fdiv(bb, w)
            kk += 1.0
        return s

    def zeta(self, x: ir.Value, q: ir.Value) -> ir.Value:
        """Hurwitz zeta as ATen computes it (in float64 for both precisions, float32's first
        term ``q^-x`` rounded to float32 as ATen's float ``pow`` returns it); ``q < 0`` (an
        integer ``x``) as ``(-1)^x (zeta(x, f) - zeta(x, -q + 1)) + zeta(x, q + m)``, f the
        fraction of ``-q`` and m the number of negative terms. inf at ``x == 1`` and at the
        non-positive integers ``q``; NaN for ``x < 1`` and for a negative ``q`` with a
        non-integer ``x``."""
        b = self.b
        if x.type == F32:
            xd, qd = b.fpext(x, F64), b.fpext(q, F64)
            return b.fptrunc(self._zeta64(xd, qd, True), F32)
        return self._zeta64(x, q, False)

    def _zeta64(self, x: ir.Value, q: ir.Value, f32: bool) -> ir.Value:
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        floor = lambda v: self._call("llvm.floor", v)  # noqa: E731  # type: ignore
        neg = b.fcmp_ordered("<", q, k(0.0))
        r = b.fneg(q)
        fl = floor(r)
        f = b.select(neg, b.fsub(r, fl), k(1.0))
        qm = b.select(neg, b.fadd(q, b.fadd(fl, k(1.0))), q)
        main = self._zeta_pos(x, qm, b.not_(neg) if f32 else None)
        lead = b.fsub(self._zeta_pos(x, f, None),
                      self._zeta_pos(x, b.select(neg, b.fadd(r, k(1.0)), k(2.0)), None))
        half = b.fmul(x, k(0.5))
        odd = b.fcmp_ordered("!=", floor(half), half)
        lead = b.select(odd, b.fneg(lead), lead)
        out = b.select(neg, b.fadd(lead, main), main)
        integer_x = b.fcmp_ordered("==", x, floor(x))
        out = b.select(b.and_(neg, b.not_(integer_x)), k(math.nan), out)
        pole = b.and_(b.fcmp_ordered("<=", q, k(0.0)), b.fcmp_ordered("==", q, floor(q)))
        out = b.select(pole, k(math.inf), out)
        out = b.select(b.fcmp_ordered("<", x, k(1.0)), k(math.nan), out)
        return b.select(b.fcmp_ordered("==", x, k(1.0)), k(math.inf), out)

    # -- ndtri -------------------------------------------------------------------------------
    def ndtri(self, y0: ir.Value) -> ir.Value:
        """ATen's ``calc_ndtri`` in the operand's precision (its ``::log``/``::sqrt`` are the
        C library's double functions, so float32's tail variable ``z = sqrt(-2 log y)`` and
        ``z - log(z)/z`` are computed in float64 and rounded)."""
        b, t = self.b, y0.type
        k = lambda v: _c(t, v)  # noqa: E731
        e2 = S.NDTRI_EXPM2
        one_m_e2 = _f32(1.0 - _f32(e2)) if t == F32 else 1.0 - e2
        upper = b.fcmp_ordered(">", y0, k(one_m_e2))
        y = b.select(upper, b.fsub(k(1.0), y0), y0)
        c = b.fsub(y, k(0.5))
        c2 = b.fmul(c, c)
        ratio = b.fdiv(b.fmul(c2, self._polevl(c2, S.NDTRI_P0)), self._polevl(c2, S.NDTRI_Q0))
        central = b.fmul(self.fma(c, ratio, c), k(S.SQRT_2PI))  # type: ignore[attr-defined]
        yd = y if t == F64 else b.fpext(y, F64)
        zd = self._sqrt(b.fmul(_c(F64, -2.0), self.log(yd)))  # type: ignore[attr-defined]
        if t == F32:
            z = b.fptrunc(zd, F32)
            zd = b.fpext(z, F64)
        else:
            z = zd
        x0 = b.fsub(zd, b.fdiv(self.log(zd), zd))  # type: ignore[attr-defined]
        x0 = x0 if t == F64 else b.fptrunc(x0, F32)
        iz = b.fdiv(k(1.0), z)
        near = b.fdiv(b.fmul(iz, self._polevl(iz, S.NDTRI_P1)), self._polevl(iz, S.NDTRI_Q1))
        far = b.fdiv(b.fmul(iz, self._polevl(iz, S.NDTRI_P2)), self._polevl(iz, S.NDTRI_Q2))
        tail = b.fsub(x0, b.select(b.fcmp_ordered("<", z, k(8.0)), near, far))
        out = b.select(upper, tail, b.fneg(tail))
        out = b.select(b.fcmp_ordered(">", y, k(e2)), central, out)
        outside = b.or_(b.fcmp_ordered("<", y0, k(0.0)), b.fcmp_ordered(">", y0, k(1.0)))
        out = b.select(outside, k(math.nan), out)
        out = b.select(b.fcmp_ordered("==", y0, k(0.0)), k(-math.inf), out)
        return b.select(b.fcmp_ordered("==", y0, k(1.0)), k(math.inf), out)

    # -- erfcx -------------------------------------------------------------------------------
    def _erfcx_pos(self, a: ir.Value) -> ir.Value:
        """erfcx for float64 ``a >= 0``: the eight interpolants of ``ERFCX_Y8`` (the lane's
        coefficients picked by select, one polynomial evaluated), ATen's continued fraction
        above 50 and ``1 / (sqrt(pi) a)`` above 5e7."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        pieces = S.ERFCX_Y8
        above = [b.fcmp_ordered(">", a, k(v)) for v in S.ERFCX_SPLITS]

        def pick(vals: list[float]) -> ir.Value:
            v = k(vals[7])
            for j in range(6, -1, -1):
                v = b.select(above[j], k(vals[j]), v)
            return v

        mid = pick([p[0] for p in pieces])
        c4 = pick([4.0 * (1.0 - p[0]) for p in pieces])
        lo = pick([p[1] for p in pieces])
        co = [pick([p[2][i] for p in pieces]) for i in range(len(pieces[0][2]))]
        num = self.fma(b.fneg(mid), a, c4)  # type: ignore[attr-defined]
        tt = b.fdiv(b.fmul(num, k(16.0)), b.fadd(a, k(4.0)))
        p = self.horner(tt, co[1:])  # type: ignore[attr-defined]
        v = b.fadd(co[0], self.fma(p, tt, lo))  # type: ignore[attr-defined]
        v = b.select(b.fcmp_ordered(">", a, k(50.0)), self._erfcx_far(a), v)
        return b.select(b.fcmp_ordered(">", a, k(5e7)), b.fdiv(k(S.ERFCX_ISPI), a), v)

    def _erfcx_far(self, a: ir.Value) -> ir.Value:
        """ATen's continued fraction beyond 50, in ``a``'s type."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        x2 = b.fmul(a, a)
        num = b.fmul(k(S.ERFCX_ISPI), self.fma(x2, b.fadd(x2, k(4.5)), k(2.0)))  # type: ignore
        return b.fdiv(num, b.fmul(a, self.fma(x2, b.fadd(x2, k(5.0)), k(3.75))))  # type: ignore

    def erfcx(self, x: ir.Value) -> ir.Value:
        """``exp(x^2) erfc(x)``: ``_erfcx_pos`` for ``x >= 0``; below, ATen's ``2 exp(x^2) -
        erfcx(-x)`` with ``x^2`` (and float32's ``2 exp(x^2)``) rounded in the operand's
        type as ATen computes them, ``2 exp(x^2)`` below -6.1, inf below -26.7. Float32 is
        evaluated in float64 and rounded, but for ATen's float32 continued fraction beyond
        50 (there the gradient cancels: its bits matter)."""
        b, t = self.b, x.type
        xx = b.fmul(x, x)
        if t == F32:
            xd = b.fpext(x, F64)
            e = b.fptrunc(self.exp(b.fpext(xx, F64)), F32)  # type: ignore[attr-defined]
            e2 = b.fpext(b.fmul(e, _c(F32, 2.0)), F64)
        else:
            xd = x
            e2 = b.fmul(self.exp(xx), _c(F64, 2.0))  # type: ignore[attr-defined]
        k = lambda v: _c(F64, v)  # noqa: E731
        pos = self._erfcx_pos(self._call("llvm.fabs", xd))  # type: ignore[attr-defined]
        if t == F32:  # ATen's float32 continued fraction beyond 50
            ax = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
            far = b.select(b.fcmp_ordered(">", ax, _c(F32, 5e7)),
                           b.fdiv(_c(F32, S.ERFCX_ISPI), ax), self._erfcx_far(ax))
            pos = b.select(b.fcmp_ordered(">", ax, _c(F32, 50.0)), b.fpext(far, F64), pos)
        neg = b.select(b.fcmp_ordered("<", xd, k(-6.1)), e2, b.fsub(e2, pos))
        neg = b.select(b.fcmp_ordered("<", xd, k(-26.7)), k(math.inf), neg)
        out = b.select(b.fcmp_ordered(">=", xd, k(0.0)), pos, neg)
        out = b.select(self._is_nan(xd), xd, out)  # type: ignore[attr-defined]
        return out if t == F64 else b.fptrunc(out, F32)

    # -- i0e, i1e, I1 ------------------------------------------------------------------------
    def _i_series(self, a: ir.Value, ca: tuple, cb: tuple, times_a: bool
                  ) -> tuple[ir.Value, ir.Value]:
        """The two Chebyshev series of ATen's I0 / I1 on ``a = |x|`` (near 8 and beyond,
        the latter divided by sqrt(a)), without the ``exp(a)`` factor."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        near = self._chbevl(b.fsub(b.fdiv(a, k(2.0)), k(2.0)), ca)  # type: ignore[attr-defined]
        if times_a:
            near = b.fmul(near, a)
        far = self._chbevl(b.fsub(b.fdiv(k(32.0), a), k(2.0)), cb)  # type: ignore[attr-defined]
        return near, b.fdiv(far, self._sqrt(a))

    def i0e(self, x: ir.Value) -> ir.Value:
        """ATen's ``calc_i0e``: ``calc_i0``'s series without ``exp(|x|)``."""
        b, t = self.b, x.type
        a = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        near, far = self._i_series(a, I0_A, I0_B, False)
        return b.select(b.fcmp_ordered("<=", a, _c(t, 8.0)), near, far)

    def i1e(self, x: ir.Value) -> ir.Value:
        """ATen's ``calc_i1e`` (float32 with ATen's shorter float tables; odd)."""
        b, t = self.b, x.type
        bits = 32 if t == F32 else 64
        a = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        near, far = self._i_series(a, I1_A[bits], I1_B[bits], True)
        y = b.select(b.fcmp_ordered("<=", a, _c(t, 8.0)), near, far)
        return b.select(b.fcmp_ordered("<", x, _c(t, 0.0)), b.fneg(y), y)

    def _i0_cr(self, x: ir.Value) -> ir.Value:
        """I0 as ATen's ``calc_i0`` / ``modified_bessel_i0_forward`` (K0's factor), with
        float32's ``exp`` correctly rounded."""
        b, t = self.b, x.type
        a = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        e = self._cr("exp", a)
        near, far = self._i_series(a, I0_A, I0_B, False)
        return b.select(b.fcmp_ordered("<=", a, _c(t, 8.0)), b.fmul(e, near),
                        b.fmul(e, far))

    def modified_bessel_i1(self, x: ir.Value) -> ir.Value:
        """ATen's ``modified_bessel_i1_forward``: the float64 tables in both precisions,
        ``(series |x|) exp(|x|)`` up to 8, ``exp(|x|) series / sqrt(|x|)`` beyond (odd)."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        a = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        e = self._cr("exp", a)
        near = self._chbevl(b.fsub(b.fdiv(a, k(2.0)), k(2.0)), I1_A[64])  # type: ignore
        near = b.fmul(b.fmul(near, a), e)
        far = self._chbevl(b.fsub(b.fdiv(k(32.0), a), k(2.0)), I1_B[64])  # type: ignore
        far = b.fdiv(b.fmul(e, far), self._sqrt(a))
        y = b.select(b.fcmp_ordered("<=", a, k(8.0)), near, far)
        return b.select(b.fcmp_ordered("<", x, k(0.0)), b.fneg(y), y)

    # -- K0, K1 ------------------------------------------------------------------------------
    def _bessel_k(self, x: ir.Value, order: int, scaled: bool) -> ir.Value:
        """ATen's ``(scaled_)modified_bessel_k{0,1}_forward`` (``_k_ref`` of
        graphc/ir/special_more.py): K0's near form ``0.5 (a - p) - log(0.5 x) I0(x)`` fused
        as ATen's compiled code fuses it, and in float64 for float32 (``std::log(0.5 * x)``
        promotes)."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        y = self.fma(x, x, k(-2.0))  # type: ignore[attr-defined]
        sa = self._chbevl(y, S.K0_A if order == 0 else S.K1_A)  # type: ignore[attr-defined]
        hx = b.fmul(k(0.5), x)
        if order == 0:
            i0 = self._i0_cr(x)
            if scaled or t == F64:
                near = self.fma(b.fneg(self._cr("log", hx)), i0, sa)  # type: ignore
            else:
                xd = b.fpext(x, F64)
                ld = self.log(b.fmul(_c(F64, 0.5), xd))  # type: ignore[attr-defined]
                near = b.fptrunc(self.fma(b.fneg(ld), b.fpext(i0, F64),  # type: ignore
                                          b.fpext(sa, F64)), F32)
        else:
            near = self.fma(self._cr("log", hx), self.modified_bessel_i1(x),  # type: ignore
                            b.fdiv(sa, x))
        sb = self._chbevl(b.fsub(b.fdiv(k(8.0), x), k(2.0)),  # type: ignore[attr-defined]
                          S.K0_B if order == 0 else S.K1_B)
        if scaled:
            near = b.fmul(near, self._cr("exp", x))
            far = b.fdiv(sb, self._sqrt(x))
        else:
            far = b.fdiv(b.fmul(self._cr("exp", b.fneg(x)), sb), self._sqrt(x))
        out = b.select(b.fcmp_ordered("<=", x, k(2.0)), near, far)
        out = b.select(b.fcmp_ordered("<", x, k(0.0)), k(math.nan), out)
        return b.select(b.fcmp_ordered("==", x, k(0.0)), k(math.inf), out)

    def modified_bessel_k0(self, x: ir.Value) -> ir.Value:
        return self._bessel_k(x, 0, False)

    def modified_bessel_k1(self, x: ir.Value) -> ir.Value:
        return self._bessel_k(x, 1, False)

    def scaled_modified_bessel_k0(self, x: ir.Value) -> ir.Value:
        return self._bessel_k(x, 0, True)

    def scaled_modified_bessel_k1(self, x: ir.Value) -> ir.Value:
        return self._bessel_k(x, 1, True)

    # -- J0, J1, Y0, Y1 ----------------------------------------------------------------------
    def _hankel(self, x: ir.Value, order: int, kind: str) -> ir.Value:
        """The asymptotic form beyond 5 (``_far`` of graphc/ir/special_more.py), for x > 0."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        pp, pq, qp, qq = ((S.J0_PP, S.J0_PQ, S.J0_QP, S.J0_QQ) if order == 0
                          else (S.J1_PP, S.J1_PQ, S.J1_QP, S.J1_QQ))
        fx = b.fdiv(k(5.0), x)
        z = b.fdiv(k(25.0), b.fmul(x, x)) if order == 0 else b.fmul(fx, fx)
        p = b.fdiv(self._polevl(z, pp), self._polevl(z, pq))
        q = b.fmul(fx, b.fdiv(self._polevl(z, qp), self._polevl(z, qq)))
        arg = b.fsub(x, k(S.PIO4 if order == 0 else S.THPIO4))
        s, c = self._cr("sin", arg), self._cr("cos", arg)
        if kind == "j":
            v = self.fma(p, c, b.fneg(b.fmul(q, s)))  # type: ignore[attr-defined]
        else:
            v = self.fma(p, s, b.fmul(q, c))  # type: ignore[attr-defined]
        return b.fdiv(b.fmul(v, k(S.SQ2OPI)), self._sqrt(x))

    def bessel_j0(self, x: ir.Value) -> ir.Value:
        """ATen's ``bessel_j0_forward`` (even): ``1 - x^2/4`` below 1e-5, the rational in
        x^2 times ``(x^2 - r1)(x^2 - r2)`` up to 5, the asymptotic form beyond."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        a = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        z = b.fmul(a, a)
        near = b.fmul(b.fsub(z, k(S.J0_DR[0])), b.fsub(z, k(S.J0_DR[1])))
        near = b.fdiv(b.fmul(near, self._polevl(z, S.J0_RP)), self._polevl(z, S.J0_RQ))
        near = b.select(b.fcmp_ordered("<", a, k(1e-5)),
                        b.fsub(k(1.0), b.fdiv(z, k(4.0))), near)
        return b.select(b.fcmp_ordered("<=", a, k(5.0)), near, self._hankel(a, 0, "j"))

    def bessel_j1(self, x: ir.Value) -> ir.Value:
        """ATen's ``bessel_j1_forward`` (odd)."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        a = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        z = b.fmul(a, a)
        near = b.fmul(b.fdiv(self._polevl(z, S.J1_RP), self._polevl(z, S.J1_RQ)), a)
        near = b.fmul(b.fmul(near, b.fsub(z, k(S.J1_Z[0]))), b.fsub(z, k(S.J1_Z[1])))
        y = b.select(b.fcmp_ordered("<=", a, k(5.0)), near, self._hankel(a, 1, "j"))
        return b.select(b.fcmp_ordered("<", x, k(0.0)), b.fneg(y), y)

    def bessel_y0(self, x: ir.Value) -> ir.Value:
        """ATen's ``bessel_y0_forward``: ``R(x^2) + (2/pi) log(x) J0(x)`` up to 5 (-inf at
        0, NaN below), the asymptotic form beyond."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        z = b.fmul(x, x)
        r = b.fdiv(self._polevl(z, S.Y0_YP), self._polevl(z, S.Y0_YQ))
        near = self.fma(b.fmul(k(S.TWOOPI), self._cr("log", x)),  # type: ignore[attr-defined]
                        self.bessel_j0(x), r)
        near = b.select(b.fcmp_ordered("<", x, k(0.0)), k(math.nan), near)
        near = b.select(b.fcmp_ordered("==", x, k(0.0)), k(-math.inf), near)
        return b.select(b.fcmp_ordered("<=", x, k(5.0)), near, self._hankel(x, 0, "y"))

    def bessel_y1(self, x: ir.Value) -> ir.Value:
        """ATen's ``bessel_y1_forward``: ``x R(x^2) + (2/pi) (J1(x) log(x) - 1/x)`` up to 5
        (-inf at 0, NaN below), the asymptotic form beyond."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        z = b.fmul(x, x)
        r = b.fdiv(self._polevl(z, S.Y1_YP), self._polevl(z, S.Y1_YQ))
        inner = self.fma(self.bessel_j1(x), self._cr("log", x),  # type: ignore[attr-defined]
                         b.fneg(b.fdiv(k(1.0), x)))
        near = self.fma(x, r, b.fmul(k(S.TWOOPI), inner))  # type: ignore[attr-defined]
        near = b.select(b.fcmp_ordered("<", x, k(0.0)), k(math.nan), near)
        near = b.select(b.fcmp_ordered("==", x, k(0.0)), k(-math.inf), near)
        return b.select(b.fcmp_ordered("<=", x, k(5.0)), near, self._hankel(x, 1, "y"))

    # -- airy_ai -----------------------------------------------------------------------------
    def airy_ai(self, x: ir.Value) -> ir.Value:
        """ATen's ``airy_ai_forward`` (``_airy_ref`` of graphc/ir/special_more.py): the
        Maclaurin series unrolled to ``AIRY_STEPS`` masked steps."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        one = k(1.0)
        ax = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        sq = self._sqrt(ax)
        zeta = b.fdiv(b.fmul(b.fmul(k(2.0), ax), sq), k(3.0))
        qr = self._sqrt(sq)
        # below -2.09
        z = b.fdiv(one, zeta)
        zz = b.fmul(z, z)
        fr = b.fdiv(b.fmul(zz, self._polevl(zz, S.AIRY_AFN)), self._polevl(zz, S.AIRY_AFD))
        gr = b.fdiv(b.fmul(z, self._polevl(zz, S.AIRY_AGN)), self._polevl(zz, S.AIRY_AGD))
        quarter_pi = _f32(0.25 * _f32(math.pi)) if t == F32 else 0.25 * math.pi
        ph = b.fadd(zeta, k(quarter_pi))
        osc = self.fma(self._cr("sin", ph), b.fadd(one, fr),  # type: ignore[attr-defined]
                       b.fneg(b.fmul(self._cr("cos", ph), gr)))
        osc = b.fmul(b.fdiv(k(S.SQPII), qr), osc)
        # from 2.09
        ratio = b.fdiv(self._polevl(z, S.AIRY_AN), self._polevl(z, S.AIRY_AD))
        ai = b.fdiv(b.fmul(k(S.SQPII), ratio),
                    b.fmul(b.fmul(k(2.0), qr), self._cr("exp", zeta)))
        # the power series
        eps = k(2.0 ** -23 if t == F32 else 2.0 ** -52)
        f, g, kk, m, n = one, x, one, one, x
        z3 = b.fmul(b.fmul(x, x), x)
        live = ir.Constant(ir.IntType(1), 1)
        for _ in range(S.AIRY_STEPS[32 if t == F32 else 64]):
            m2 = b.fmul(m, z3)
            k2 = b.fadd(kk, one)
            m2 = b.fdiv(m2, k2)
            n2 = b.fmul(n, z3)
            k2 = b.fadd(k2, one)
            n2 = b.fdiv(n2, k2)
            m2 = b.fdiv(m2, k2)
            f2 = b.fadd(f, m2)
            k2 = b.fadd(k2, one)
            n2 = b.fdiv(n2, k2)
            g2 = b.fadd(g, n2)
            m, n, kk = b.select(live, m2, m), b.select(live, n2, n), b.select(live, k2, kk)
            f, g = b.select(live, f2, f), b.select(live, g2, g)
            ratio = self._call("llvm.fabs", b.fdiv(m, f))  # type: ignore[attr-defined]
            live = b.and_(live, b.fcmp_ordered(">", ratio, eps))
        series = self.fma(k(S.AIRY_C1), f, b.fneg(b.fmul(k(S.AIRY_C2), g)))  # type: ignore
        out = b.select(b.fcmp_ordered(">=", x, k(2.09)), ai, series)
        out = b.select(b.fcmp_ordered("<", x, k(-2.09)), osc, out)
        out = b.select(b.fcmp_ordered(">", x, k(103.892)), k(0.0), out)
        return b.select(b.fcmp_ordered("==", ax, k(math.inf)), k(math.nan), out)

    # -- the orthogonal polynomials ----------------------------------------------------------
    # ATen runs their recurrences for as many steps as the element's degree: a loop in the
    # element expression (blocks and phis), the one place these routines branch. The kernel
    # stays correct anywhere an element expression goes (emitters take ``b.block`` after it);
    # the CPU loop vectoriser leaves a kernel holding one scalar.
    def _degree(self, n: ir.Value) -> ir.Value:
        """``static_cast<int64_t>(n)`` as x86-64 gives it: truncation, INT64_MIN for NaN,
        infinities and magnitudes from 2^63 (``fptosi`` would be poison there)."""
        b = self.b
        i64 = ir.IntType(64)
        ok = b.fcmp_ordered("<", self._call("llvm.fabs", n),  # type: ignore[attr-defined]
                            _c(n.type, 2.0 ** 63))
        ni = b.fptosi(b.select(ok, n, _c(n.type, 0.0)), i64)
        return b.select(ok, ni, ir.Constant(i64, S.INT64_MIN))

    def _recurrence(self, count: ir.Value, p0: ir.Value, q0: ir.Value, step: Any, k0: int,
                    dk: int, nan_stop: bool) -> ir.Value:
        """``r = step(k, p, q); p = q; q = r`` for ``count`` (i64) steps, ``k = k0 + dk i`` as
        a float of the operand type (ATen's ``int64_t`` loop counter converted where it
        multiplies); stops early once ``q`` is NaN when ``nan_stop``. Returns ``q``."""
        b, t = self.b, q0.type
        i64 = ir.IntType(64)
        pre = b.block
        fn = b.function
        head, body, done = (fn.append_basic_block(f"recur.{s}") for s in ("head", "step", "end"))
        b.branch(head)
        b.position_at_end(head)
        i, p, q = b.phi(i64), b.phi(t), b.phi(t)
        i.add_incoming(ir.Constant(i64, 0), pre)
        p.add_incoming(p0, pre)
        q.add_incoming(q0, pre)
        go = b.icmp_signed("<", i, count)
        if nan_stop:
            go = b.and_(go, b.fcmp_ordered("==", q, q))
        b.cbranch(go, body, done)
        b.position_at_end(body)
        k = b.add(ir.Constant(i64, k0), b.mul(i, ir.Constant(i64, dk)))
        r = step(b.sitofp(k, t), p, q)
        end = b.block
        i.add_incoming(b.add(i, ir.Constant(i64, 1)), end)
        p.add_incoming(q, end)
        q.add_incoming(r, end)
        b.branch(head)
        b.position_at_end(done)
        return q

    def _polynomial(self, name: str, x: ir.Value, nv: ir.Value) -> ir.Value:
        """``_poly_ref`` of graphc/ir/special_more.py: the degree's special values, ATen's
        closed forms for the Chebyshev polynomials inside (-1, 1), the recurrence (only for
        the lanes that need it: the others take no step)."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        i64 = ir.IntType(64)
        ik = lambda v: ir.Constant(i64, v)  # noqa: E731
        family, kind = S.poly_setup(name)
        n = self._degree(nv)
        nf = b.sitofp(n, t)
        even = b.icmp_signed("==", b.and_(n, ik(1)), ik(0))
        neg = b.icmp_signed("<", n, ik(0))
        small = b.icmp_signed("<", n, ik(2))
        ax = self._call("llvm.fabs", x)  # type: ignore[attr-defined]
        eq = lambda u, v: b.fcmp_ordered("==", u, v)  # noqa: E731
        sgn = b.select(even, k(1.0), k(-1.0))
        count = b.sub(n, ik(1))
        if family == "cheb":
            shifted = kind.startswith("s")
            y = b.fsub(b.fadd(x, x), k(1.0)) if shifted else x
            two_y = b.fadd(y, y)
            q0 = {"t": y, "u": two_y, "v": b.fsub(two_y, k(1.0)),
                  "w": b.fadd(two_y, k(1.0))}[kind[-1]]
            special = b.or_(eq(x, k(1.0)), eq(x, k(0.0))) if shifted else eq(ax, k(1.0))
            ay = self._call("llvm.fabs", y)  # type: ignore[attr-defined]
            closed = b.and_(b.icmp_signed(">", n, ik(S.CLOSED_FROM[kind])),
                            b.fcmp_ordered("<", ay, k(1.0)))
            skip = b.or_(b.or_(special, closed), small)
            out = self._recurrence(b.select(skip, ik(0), count), k(1.0), q0,
                                   lambda kf, p, q: self.fma(two_y, q, b.fneg(p)),  # type: ignore
                                   2, 1, True)
            out = b.select(closed, self._chebyshev_closed(kind, y, n, nf, sgn), out)
            out = b.select(eq(nf, k(1.0)), q0, out)
            out = b.select(eq(nf, k(0.0)), k(1.0), out)
            out = b.select(special, self._chebyshev_ends(kind, x, n, sgn), out)
        elif family == "herm":
            q0 = b.fadd(x, x) if kind == "h" else x
            mult = q0  # H: (x + x) q - k p; He: x q - k p
            limit = S.HERMITE_LIMIT[32 if t == F32 else 64]
            over = b.icmp_signed(">", n, ik(limit))
            k0, dk = (2, 2) if kind == "h" else (1, 1)
            out = self._recurrence(b.select(b.or_(small, over), ik(0), count), k(1.0), q0,
                                   lambda kf, p, q: self.fma(  # type: ignore[attr-defined]
                                       mult, q, b.fneg(b.fmul(kf, p))), k0, dk, False)
            out = b.select(over, k(math.nan), out)
            out = b.select(eq(nf, k(1.0)), q0, out)
            out = b.select(eq(nf, k(0.0)), k(1.0), out)
        else:
            lag = family == "lag"
            q0 = b.fsub(k(1.0), x) if lag else x
            special = eq(x, k(0.0)) if lag else eq(ax, k(1.0))
            omx = b.fsub(k(1.0), x)

            def step(kf: ir.Value, p: ir.Value, q: ir.Value) -> ir.Value:
                twok = b.fmul(k(2.0), kf)
                a = b.fadd(twok, omx) if lag else b.fmul(b.fadd(twok, k(1.0)), x)
                r = self.fma(a, q, b.fneg(b.fmul(kf, p)))  # type: ignore[attr-defined]
                return b.fdiv(r, b.fadd(kf, k(1.0)))

            out = self._recurrence(b.select(b.or_(special, small), ik(0), count), k(1.0), q0,
                                   step, 1, 1, True)
            out = b.select(eq(nf, k(1.0)), q0, out)
            out = b.select(eq(nf, k(0.0)), k(1.0), out)
            ends = k(1.0) if lag else b.select(b.or_(b.fcmp_ordered(">", x, k(0.0)), even),
                                               k(1.0), k(-1.0))
            out = b.select(special, ends, out)
        return b.select(neg, k(0.0), out)

    def _chebyshev_closed(self, kind: str, y: ir.Value, n: ir.Value, nf: ir.Value,
                          sgn: ir.Value) -> ir.Value:
        """``_chebyshev_closed`` of graphc/ir/special_more.py."""
        b, t = self.b, y.type
        k = lambda v: _c(t, v)  # noqa: E731
        i64 = ir.IntType(64)
        a = self._cr("acos", y)
        n1 = b.sitofp(b.add(n, ir.Constant(i64, 1)), t)
        base = kind[-1]
        if base == "t":
            return self._cr("cos", b.fmul(nf, a))
        if base == "u":
            s = self._cr("sin", a)
            main = b.fdiv(self._cr("sin", b.fmul(n1, a)), s)
            alt = b.fdiv(b.fmul(n1, self._cr("cos", b.fmul(n1, a))), y)
            return b.select(b.fcmp_ordered("!=", s, k(0.0)), main, alt)
        half = b.fdiv(a, k(2.0))
        nh = b.fadd(nf, k(0.5))
        two_n1 = b.sitofp(b.add(b.add(n, n), ir.Constant(i64, 1)), t)
        if base == "v":
            main = b.fdiv(self._cr("cos", b.fmul(nh, a)), self._cr("cos", half))
            ok = b.fcmp_unordered("!=", self._cr("sin", half), k(1.0))
            return b.select(ok, main, b.fmul(sgn, two_n1))
        ch = self._cr("cos", half)
        main = b.fdiv(self._cr("sin", b.fmul(nh, a)), self._cr("sin", half))
        fallback = sgn if kind.startswith("s") else b.select(
            b.fcmp_ordered(">", y, k(0.0)), two_n1, sgn)
        return b.select(b.fcmp_unordered("!=", ch, k(1.0)), main, fallback)

    def _chebyshev_ends(self, kind: str, x: ir.Value, n: ir.Value, sgn: ir.Value
                        ) -> ir.Value:
        """ATen's values at +-1 (at 1 and 0 for the shifted polynomials)."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        i64 = ir.IntType(64)
        n1 = b.sitofp(b.add(n, ir.Constant(i64, 1)), t)
        two_n1 = b.sitofp(b.add(b.add(n, n), ir.Constant(i64, 1)), t)
        top = (b.fcmp_ordered("==", x, k(1.0)) if kind.startswith("s")
               else b.fcmp_ordered(">", x, k(0.0)))
        base = kind[-1]
        if base == "t":
            return b.select(top, k(1.0), sgn)
        if base == "u":
            return b.select(top, n1, b.fmul(sgn, n1))
        if base == "v":
            return b.select(top, k(1.0), b.fmul(sgn, two_n1))
        return b.select(top, two_n1, sgn)


def _polynomial_method(name: str) -> Any:
    def method(self: SpecialFunctions, x: ir.Value, n: ir.Value) -> ir.Value:
        return self._polynomial(name, x, n)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"ATen's ``{name}_forward`` (``SpecialFunctions._polynomial``)."
    return method


for _name in S.POLYNOMIALS:
    setattr(SpecialFunctions, _name, _polynomial_method(_name))
