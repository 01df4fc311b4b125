"""Vectorisable transcendental functions (exp, log, tanh, sigmoid, erf, pow) in LLVM IR.

Why: LLVM has no vector math library on these targets, so ``llvm.exp.f32`` in a loop is
vectorised in IR and then scalarised again into one ``expf`` call per lane (about 0.5 Gelem/s
against 4 Gelem/s for the same loop written out). Every routine here is branch-free
straight-line code made of ``fmul``/``fadd``/``fdiv``, ``llvm.fmuladd``, ``llvm.rint``,
``llvm.fabs``, ``llvm.copysign``, integer bit manipulation and ``select``, so the loop vectoriser
turns the element expression of a kernel into full-width vector code (zmm on AVX-512).
``llvm.fmuladd`` (not ``llvm.fma``) keeps targets without FMA hardware off libm's ``fmaf``.

Special values follow C99 / numpy exactly: NaN propagates, ``exp(±inf) = inf / 0``,
``log(0) = -inf``, ``log(x < 0) = nan``, overflow and underflow happen at the same inputs as
in libm (results round once into the denormal range), and denormal inputs are exact.

Accuracy (``tests/test_vmath.py`` measures it against numpy over the whole float range):
within a couple of ulp for exp, log, tanh and sigmoid in f32 and f64; erf within a few ulp.

Algorithms:

- exp: Cody-Waite reduction ``x = n ln2 + r`` (the high part of ln2 has few mantissa bits, so
  ``n * hi`` is exact), Cephes' degree-6 polynomial (f32) or the degree-13 Taylor polynomial
  (f64) for ``|r| <= ln2/2``, then ``2^n`` applied as two exponent-built factors so that
  results just below overflow and in the denormal range need no special case.
- log: ``x = m 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` (denormals pre-scaled); Cephes'
  polynomial in ``m - 1`` (f32, no division) or fdlibm's series in ``s = f / (2 + f)`` (f64).
- tanh: Cephes' odd polynomial (f32) / rational (f64) below 0.625, ``1 - 2 / (exp(2|x|) + 1)``
  above, sign restored with ``copysign``.
- sigmoid: ``e = exp(-|x|)``; ``1 / (1 + e)`` for ``x >= 0`` and ``e / (1 + e)`` below, so
  neither side overflows and tiny results keep their precision.
- erf: ``x P(x^2)`` below 1.25; above, ``1 - exp(-x^2) erfcx(|x|)`` with ``erfcx`` (entire
  and slowly varying) approximated by polynomials around interval midpoints (one for f32,
  three for f64 selected per lane). The coefficients are Chebyshev fits computed with mpmath
  at 50 digits (``mpmath.chebyfit``), rounded to double.
- pow: ``exp(y log|x|)``, for f32 evaluated in f64, so the result rounds to within an ulp,
  with C99's rules for negative bases, zeros, infinities and ``y == 0`` / ``x == 1``.
"""

from __future__ import annotations

import math

from llvmlite import ir

from .llvm_util import F32, F64, I32, I64, declare, fconst, log_special_cases

UNARY = ("exp", "log", "tanh", "sigmoid", "erf", "expm1", "log1p")

# -- coefficients (lowest degree first) ---------------------------------------------------
# exp: clamp range (outside it the result is 0 or inf, reached through the normal path)
_EXP_RANGE = {32: (-104.0, 89.0), 64: (-746.0, 710.0)}
# Cody-Waite splits of ln 2: Cephes (f32) and fdlibm (f64) high parts with trailing zero bits
_LN2 = {32: (0.693359375, -2.12194440e-4),
        64: (6.93147180369123816490e-01, 1.90821492927058770002e-10)}
# exp(r) = 1 + r + r^2 P(r)
_EXP_P = {32: (5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3,
               1.3981999507e-3, 1.9875691500e-4),
          64: tuple(1.0 / math.factorial(k) for k in range(2, 14))}
# expm1(r) = r + r^2 P(r): Taylor coefficients, whose error is relative to r^2 (small r too)
_EXPM1_P = {32: tuple(1.0 / math.factorial(k) for k in range(2, 10)), 64: _EXP_P[64]}
# expm1: below this it is -1 in both precisions (exp(-50) < 2^-54 / 2)
_EXPM1_LO = -50.0
# log (f32, Cephes logf): log(1 + f) = f - f^2/2 + f^3 P(f)
_LOGF_P = (3.3333331174e-1, -2.4999993993e-1, 2.0000714765e-1, -1.6668057665e-1,
           1.4249322787e-1, -1.2420140846e-1, 1.1676998740e-1, -1.1514610310e-1,
           7.0376836292e-2)
# log (f64, fdlibm): R(z) = z (Lg1 + z Lg2 + ... + z^6 Lg7), z = s^2
_LOG_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
           2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
           1.479819860511658591e-01)
# tanh below 0.625: x + x z P(z) (f32) and x + x z P(z) / Q(z) (f64), z = x^2 (Cephes)
_TANHF_P = (-3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2,
            -5.70498872745e-3)
_TANH_P = (-1.61468768441708447952e3, -9.92877231001918586564e1, -9.64399179425052238628e-1)
_TANH_Q = (4.84406305325125486048e3, 2.23548839060100448583e3, 1.12811678491632931402e2, 1.0)
_TANH_SPLIT = 0.625
_TANH_CLAMP = 44.0  # tanh is +-1 in both precisions well before; exp(88) is finite
# erf
_ERF_SPLIT = 1.25
_ERF_MAX = {32: 4.0, 64: 6.0}  # erf rounds to 1 from here on
# erf(x) / x as a polynomial in x^2 on [0, 1.25^2]
_ERF_SMALL = {32: (
    1.1283791661217897, -0.37612630916223405, 0.1128368362516748, -0.026860568279096275,
    0.00520958965824029, -0.0008344853610921509, 0.00010418097656600243, -7.616689263883488e-06),
              64: (
    1.1283791670955126, -0.37612638903183016, 0.11283791670928688, -0.02686617064139764,
    0.005223977598008797, -0.0008548325821804391, 0.0001205529912172412, -1.4925009048139727e-05,
    1.6453762077859004e-06, -1.6290602234261807e-07, 1.4343442977951298e-08,
    -1.0396900495391526e-09, 4.620740658554442e-11)}
# erfcx(x) = exp(x^2) erfc(x) as polynomials in x - mid on [lo, hi): (lo, mid, coefficients)
_ERFCX = {32: [(1.25, 2.625, (
    0.201887554546017, -0.06846957228609069, 0.02215511782783456, -0.006874208251321944,
    0.0020540669038449626, -0.0005950650092988399, 0.00016634021508048943,
    -4.2636060995216225e-05, 1.1330081541958403e-05, -4.2658015340757465e-06,
    1.0572848908338477e-06))],
          64: [
    (1.25, 1.75, (
        0.2849722347374364, -0.13097634551448617, 0.05576363008708751, -0.022259995241245754,
        0.008404319207292286, -0.003020974657577787, 0.0010392045240228123,
        -0.00034353323649856176, 0.00010950525846801541, -3.375649531917408e-05,
        1.008697578434678e-05, -2.9220022979256976e-06, 8.256090655720445e-07,
        -2.434045610083575e-07, 6.523604126824134e-08)),
    (2.25, 2.875, (
        0.1860549346844711, -0.05856329265980405, 0.017685468287535457, -0.00514504755539583,
        0.0014467282828358363, -0.00039428149774388876, 0.0001043896599299382,
        -2.690319693334397e-05, 6.7607325880419234e-06, -1.6591960342035102e-06,
        3.981596300472414e-07, -9.332588280672172e-08, 2.1491554739063072e-08,
        -5.222975205760577e-09, 1.1554857842458301e-09)),
    (3.5, 4.75, (
        0.11630270721024731, -0.023503448598184106, 0.004661326368975751, -0.0009080988965295504,
        0.00017392830395924388, -3.277578458228431e-05, 6.081115111613391e-06,
        -1.1115572633944996e-06, 2.002902676243289e-07, -3.561197334926809e-08,
        6.245076194116008e-09, -1.067362355598649e-09, 1.8262093529973392e-10,
        -3.67690156375927e-11, 6.117844467471036e-12)),
]}


def _bits(t: ir.Type) -> int:
    return 32 if t == F32 else 64


_c = fconst


class VMath:
    """Emits the routines on one builder; every operand of a call shares one float type.

    The code is scalar IR (one lane); the loop vectoriser widens it. Nothing here branches, so
    a routine can sit in the middle of any fused element expression.
    """

    def __init__(self, b: ir.IRBuilder, mod: ir.Module) -> None:
        self.b = b
        self.mod = mod

    # -- building blocks -------------------------------------------------------------------
    def _intr(self, name: str, t: ir.Type, n: int = 1) -> ir.Function:
        return declare(self.mod, f"{name}.f{_bits(t)}", t, [t] * n)

    def fma(self, a: ir.Value, x: ir.Value, c: ir.Value) -> ir.Value:
        """a * x + c, fused where the target has FMA (``llvm.fmuladd``)."""
        return self.b.call(self._intr("llvm.fmuladd", a.type, 3), [a, x, c])

    def horner(self, x: ir.Value, coeffs: tuple | list) -> ir.Value:
        """coeffs[0] + x coeffs[1] + ... (lowest degree first); coefficients may be values."""
        t = x.type
        k = lambda c: c if isinstance(c, ir.Value) else _c(t, c)  # noqa: E731
        acc = k(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, k(c))
        return acc

    def _call(self, name: str, *xs: ir.Value) -> ir.Value:
        return self.b.call(self._intr(name, xs[0].type, len(xs)), list(xs))

    def _int(self, t: ir.Type) -> ir.IntType:
        return I32 if t == F32 else I64

    def _is_nan(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x)

    def _pow2(self, n: ir.Value, t: ir.Type) -> ir.Value:
        """2**n (n an i32 in the normal exponent range) built from its bit pattern."""
        b = self.b
        it = self._int(t)
        mbits, bias = (23, 127) if t == F32 else (52, 1023)
        e = n if it == I32 else b.sext(n, it)
        e = b.add(e, ir.Constant(it, bias))
        return b.bitcast(b.shl(e, ir.Constant(it, mbits)), t)

    # -- exp -------------------------------------------------------------------------------
    def exp(self, x: ir.Value) -> ir.Value:
        b, t = self.b, x.type
        w = _bits(t)
        lo, hi = _EXP_RANGE[w]
        # clamp (NaN goes to ``lo``: fptosi of NaN would be poison) and restore NaN at the end
        xs = b.select(b.fcmp_ordered(">", x, _c(t, hi)), _c(t, hi), x)
        xs = b.select(b.fcmp_unordered("<", xs, _c(t, lo)), _c(t, lo), xs)
        nf = self._call("llvm.rint", b.fmul(xs, _c(t, 1.4426950408889634)))
        c1, c2 = _LN2[w]
        r = self.fma(nf, _c(t, -c1), xs)
        r = self.fma(nf, _c(t, -c2), r)
        p = self.fma(self.horner(r, _EXP_P[w]), b.fmul(r, r), r)
        p = b.fadd(p, _c(t, 1.0))
        n = b.fptosi(nf, I32)
        n1 = b.ashr(n, ir.Constant(I32, 1))
        n2 = b.sub(n, n1)
        # two factors: p 2^n1 is exact, the second product rounds once (also into denormals)
        y = b.fmul(b.fmul(p, self._pow2(n1, t)), self._pow2(n2, t))
        return b.select(self._is_nan(x), x, y)

    def expm1(self, x: ir.Value) -> ir.Value:
        """exp(x) - 1 without cancellation: ``x = k ln2 + r``, ``p = expm1(r)`` by its Taylor
        polynomial, then ``2^k p + (2^k - 1)`` as ``2 (h p + (h - 1/2))`` with ``h = 2^(k-1)``
        (``h`` stays representable up to the overflow threshold; every term is exact but the
        last sum, which rounds once); ``p`` itself for ``k = 0``, ``x`` itself for tiny |x|
        (keeps -0 and denormals exact)."""
        b, t = self.b, x.type
        w = _bits(t)
        hi = _EXP_RANGE[w][1]
        xs = b.select(b.fcmp_ordered(">", x, _c(t, hi)), _c(t, hi), x)
        xs = b.select(b.fcmp_unordered("<", xs, _c(t, _EXPM1_LO)), _c(t, _EXPM1_LO), xs)
        nf = self._call("llvm.rint", b.fmul(xs, _c(t, 1.4426950408889634)))
        c1, c2 = _LN2[w]
        r = self.fma(nf, _c(t, -c1), xs)
        r = self.fma(nf, _c(t, -c2), r)
        p = self.fma(self.horner(r, _EXPM1_P[w]), b.fmul(r, r), r)
        n = b.fptosi(nf, I32)
        h = self._pow2(b.sub(n, ir.Constant(I32, 1)), t)
        y = b.fmul(self.fma(h, p, b.fsub(h, _c(t, 0.5))), _c(t, 2.0))
        y = b.select(b.icmp_signed("==", n, ir.Constant(I32, 0)), p, y)
        tiny = b.fcmp_ordered("<", self._call("llvm.fabs", x), _c(t, 2.0 ** (-w)))
        return b.select(b.or_(tiny, self._is_nan(x)), x, y)

    # -- log -------------------------------------------------------------------------------
    def log(self, x: ir.Value) -> ir.Value:
        b, t = self.b, x.type
        w = _bits(t)
        it = self._int(t)
        mbits, bias, emask = (23, 127, 0xFF) if w == 32 else (52, 1023, 0x7FF)
        boost = 25 if w == 32 else 54
        # denormals: scale into the normal range first
        sub = b.fcmp_ordered("<", x, _c(t, 2.0 ** (-126 if w == 32 else -1022)))
        xn = b.select(sub, b.fmul(x, _c(t, 2.0 ** boost)), x)
        bits = b.bitcast(xn, it)
        e = b.sub(b.and_(b.lshr(bits, ir.Constant(it, mbits)), ir.Constant(it, emask)),
                  ir.Constant(it, bias))
        e = b.sub(e, b.select(sub, ir.Constant(it, boost), ir.Constant(it, 0)))
        m = b.bitcast(b.or_(b.and_(bits, ir.Constant(it, (1 << mbits) - 1)),
                            ir.Constant(it, bias << mbits)), t)  # in [1, 2)
        big = b.fcmp_ordered(">", m, _c(t, math.sqrt(2.0)))
        m = b.select(big, b.fmul(m, _c(t, 0.5)), m)
        e = b.add(e, b.zext(big, it))
        f = b.fsub(m, _c(t, 1.0))  # exact (Sterbenz), in [sqrt(1/2) - 1, sqrt(2) - 1]
        ef = b.sitofp(e, t)
        c1, c2 = _LN2[w]
        if w == 32:
            z = b.fmul(f, f)
            y = b.fmul(b.fmul(f, z), self.horner(f, _LOGF_P))
            y = self.fma(ef, _c(t, c2), y)
            y = self.fma(z, _c(t, -0.5), y)
            y = self.fma(ef, _c(t, c1), b.fadd(f, y))
        else:
            hfsq = b.fmul(b.fmul(f, f), _c(t, 0.5))
            s = b.fdiv(f, b.fadd(f, _c(t, 2.0)))
            z = b.fmul(s, s)
            r = b.fmul(z, self.horner(z, _LOG_LG))
            inner = self.fma(s, b.fadd(hfsq, r), b.fmul(ef, _c(t, c2)))
            y = self.fma(ef, _c(t, c1), b.fsub(f, b.fsub(hfsq, inner)))
        return log_special_cases(b, x, y)

    def log1p(self, x: ir.Value) -> ir.Value:
        """log(1 + x) as ``log(u) + c / u`` with ``u = 1 + x`` rounded and ``c`` its exact
        rounding error (Fast2Sum, the larger operand first), so small x keep full relative
        precision; x itself for tiny |x| (keeps -0 and denormals exact); log1p(-1) = -inf,
        below -1 NaN, log1p(inf) = inf."""
        b, t = self.b, x.type
        w = _bits(t)
        one = _c(t, 1.0)
        u = b.fadd(one, x)
        big = b.fcmp_ordered(">", x, one)
        c = b.select(big, b.fsub(one, b.fsub(u, x)), b.fsub(x, b.fsub(u, one)))
        ok = b.and_(b.fcmp_ordered("!=", u, _c(t, 0.0)),
                    b.fcmp_ordered("<", u, _c(t, float("inf"))))
        y = b.fadd(self.log(u), b.select(ok, b.fdiv(c, u), _c(t, 0.0)))
        tiny = b.fcmp_ordered("<", self._call("llvm.fabs", x), _c(t, 2.0 ** (-w)))
        return b.select(tiny, x, y)

    # -- composites ------------------------------------------------------------------------
    def sigmoid(self, x: ir.Value) -> ir.Value:
        """1 / (1 + e) for x >= 0, e / (1 + e) below, with e = exp(-|x|) <= 1."""
        b, t = self.b, x.type
        e = self.exp(b.fneg(self._call("llvm.fabs", x)))
        num = b.select(b.fcmp_ordered("<", x, _c(t, 0.0)), e, _c(t, 1.0))
        return b.fdiv(num, b.fadd(e, _c(t, 1.0)))

    def tanh(self, x: ir.Value) -> ir.Value:
        b, t = self.b, x.type
        a = self._call("llvm.fabs", x)
        z = b.fmul(x, x)
        if t == F32:
            small = self.fma(b.fmul(x, z), self.horner(z, _TANHF_P), x)
        else:
            q = b.fdiv(self.horner(z, _TANH_P), self.horner(z, _TANH_Q))
            small = self.fma(b.fmul(x, z), q, x)
        ac = b.select(b.fcmp_ordered(">", a, _c(t, _TANH_CLAMP)), _c(t, _TANH_CLAMP), a)
        s = self.exp(b.fadd(ac, ac))
        large = b.fsub(_c(t, 1.0), b.fdiv(_c(t, 2.0), b.fadd(s, _c(t, 1.0))))
        y = b.select(b.fcmp_ordered("<", a, _c(t, _TANH_SPLIT)), small, large)
        return self._call("llvm.copysign", y, x)  # tanh is odd: this also keeps -0

    def erf(self, x: ir.Value) -> ir.Value:
        b, t = self.b, x.type
        w = _bits(t)
        a = self._call("llvm.fabs", x)
        near = b.fmul(a, self.horner(b.fmul(a, a), _ERF_SMALL[w]))
        top = _ERF_MAX[w]
        af = b.select(b.fcmp_ordered(">", a, _c(t, top)), _c(t, top), a)
        pieces = _ERFCX[w]
        mid, coeffs = _c(t, pieces[0][1]), [_c(t, c) for c in pieces[0][2]]
        for lo, m, cs in pieces[1:]:  # pick this lane's interval: coefficients by select
            here = b.fcmp_ordered(">=", af, _c(t, lo))
            mid = b.select(here, _c(t, m), mid)
            coeffs = [b.select(here, _c(t, c), old) for c, old in zip(cs, coeffs)]
        erfcx = self.horner(b.fsub(af, mid), coeffs)
        far = b.fsub(_c(t, 1.0), b.fmul(self.exp(b.fneg(b.fmul(af, af))), erfcx))
        y = b.select(b.fcmp_ordered("<", a, _c(t, _ERF_SPLIT)), near, far)
        return self._call("llvm.copysign", y, x)

    def pow(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """x ** y through exp/log with C99's special cases.

        f32: evaluated in f64, whose intermediate is within an ulp of f64, so the f32 result
        is correctly rounded except when the exact result lies (almost) on a rounding tie;
        such ties are exact powers of two in the f32 denormal range (0.5 ** 150), which may
        round up by an ulp. f64 (used on PTX only, where ``llvm.pow`` has no lowering; the
        CPU keeps libm's): ``exp(y log|x|)`` in f64 loses about ``|y log x| * 2^-53``
        relative, i.e. a few ulp for results of ordinary size.
        """
        b, t = self.b, x.type
        if t == F32:
            xd, yd = b.fpext(x, F64), b.fpext(y, F64)
            r = b.fptrunc(self.exp(b.fmul(yd, self.log(self._call("llvm.fabs", xd)))), t)
        else:
            r = self.exp(b.fmul(y, self.log(self._call("llvm.fabs", x))))
        it = self._int(t)
        yi = self._call("llvm.rint", y)
        is_int = b.fcmp_ordered("==", yi, y)  # also true for +-inf
        half = b.fmul(y, _c(t, 0.5))
        odd = b.and_(is_int, b.fcmp_ordered("!=", self._call("llvm.rint", half), half))
        signbit = b.icmp_signed("<", b.bitcast(x, it), ir.Constant(it, 0))
        r = b.select(b.and_(signbit, odd), b.fneg(r), r)
        neg_finite = b.and_(b.fcmp_ordered("<", x, _c(t, 0.0)),
                            b.fcmp_ordered(">", x, _c(t, float("-inf"))))
        r = b.select(b.and_(neg_finite, b.not_(is_int)), _c(t, float("nan")), r)
        one = b.or_(b.fcmp_ordered("==", y, _c(t, 0.0)), b.fcmp_ordered("==", x, _c(t, 1.0)))
        ax = self._call("llvm.fabs", x)
        yinf = b.fcmp_ordered("==", self._call("llvm.fabs", y), _c(t, float("inf")))
        one = b.or_(one, b.and_(b.fcmp_ordered("==", ax, _c(t, 1.0)), yinf))
        return b.select(one, _c(t, 1.0), r)
