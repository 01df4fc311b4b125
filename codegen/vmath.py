"""Vectorisable transcendental functions (exp, log, tanh, sigmoid, erf, pow, the elementary
functions of ``graphc/ir/mathops.py`` and the special functions of ``graphc/ir/special.py``)
in LLVM IR.

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
within a couple of ulp for exp, log, tanh and sigmoid in f32 and f64; erf within a few ulp;
expm1, log1p and the f64 elementary functions within 1 (sin, cos, asin, acos, atan, exp2) to
2.5 ulp (tan, log2, log10, hyperbolic). Those elementary functions evaluate f32 in f64 and
round once (``_via_f64``): half-width vectors, but f32 results are correctly rounded but for
rare double roundings. sin, cos and tan reduce exactly for |x| < 2^31 pi/2 (~3.4e9, f32 and
f64); above, results stay in range (|sin|, |cos| <= 1, tan finite) but are not accurate
(no Payne-Hanek reduction: it needs a table lookup per lane).

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
- expm1: exp's reduction ``x = k ln2 + r``, ``p = expm1(r)`` by its Taylor polynomial, then
  ``2^k p + (2^k - 1)`` rounded once; log1p: ``log(u) + c / u`` with ``u = 1 + x`` and ``c``
  the exact rounding error of that sum.
- exp2: ``x = k + r`` exactly, exp's kernel on ``r ln2``; log2 and log10: log's reduction
  ``2^e (1 + f)``, ``e + log1p(f) / ln2`` (exact at powers of two), ``e log10(2) + ...``.
- sin, cos, tan: Cody-Waite ``x = k pi/2 + r`` with pi/2 in three 22-bit parts and a fourth
  (each ``k P_i`` exact, the rounding subtractions kept by TwoSum), fdlibm's kernels on
  ``r = rh + rl``, the quadrant ``k mod 4`` picking sin/cos and the sign; tan = sin / cos.
- asin, acos, atan, atan2: fdlibm's (rational ``R(z)`` near 0, ``sqrt((1 - |x|)/2)`` with a
  split square root above 1/2; atan's five intervals picked per lane by select); atan2 as
  ``atan(|y/x|)`` reflected by x's sign bit and signed by y's, C99's special values.
- sinh, cosh, asinh, acosh, atanh: musl's stable forms through expm1 / exp / log1p / log.
- pow: ``exp(y log|x|)``, for f32 evaluated in f64, so the result rounds to within an ulp,
  with C99's rules for negative bases, zeros, infinities and ``y == 0`` / ``x == 1``.
- special functions (``tests/test_special_ops.py`` measures them against PyTorch): erfc
  (fdlibm's, relative in the tail too) and lgamma (fdlibm's; for x < 0 the reflection is
  accurate to ~2e-16 absolute) within 1-2 ulp, erfinv (Giles' polynomials in
  ``-log((1 - x)(1 + x))``) within 3 ulp in f64; their f32 is evaluated in f64. digamma,
  polygamma(1, x) (``trigamma``), i0 and i1 are ATen's own series (``Math.h``, Cephes) in
  the operand's precision, so they match PyTorch's results, not only the function: a
  recurrence unrolled into masked steps, Chebyshev series by Clenshaw's recurrence with
  ATen's fused ``x b1 - b2``, both branches of every ``if`` evaluated and picked by select.
- the rest of ``torch.special`` (zeta, ndtri, erfcx, the Bessel functions, airy_ai, the
  orthogonal polynomials, the incomplete gamma functions): ``codegen/vmath_special.py`` and
  ``codegen/vmath_igamma.py`` (mixins of ``VMath``), measured by
  ``tests/test_special_more.py``.
"""

from __future__ import annotations

import math
import struct

from llvmlite import ir

from graphc.ir.special import (
    GILES,
    I0_A,
    I0_B,
    I1_A,
    I1_B,
    LGAMMA,
    LGAMMA_BELOW_09,
    LGAMMA_SPLITS_HI,
    LGAMMA_SPLITS_LO,
    PSI_10,
    PSI_A,
)

from .llvm_util import F32, F64, I32, I64, declare, fconst, log_special_cases
from .vmath_igamma import IncompleteGamma
from .vmath_special import SpecialFunctions

UNARY = ("exp", "log", "tanh", "sigmoid", "erf", "expm1", "log1p", "sin", "cos", "tan", "asin",
         "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2",
         "erfc", "erfinv", "lgamma", "digamma", "trigamma", "i0", "i1",
         # codegen/vmath_special.py
         "ndtri", "erfcx", "i0e", "i1e", "modified_bessel_i1", "modified_bessel_k0",
         "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
         "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai")
BINARY = ("pow", "atan2", "zeta", "igamma", "igammac")

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


# trigonometric reduction x = k pi/2 + r: pi/2 as three 22-bit parts (k P_i exact for
# |k| < 2^31) and a full-precision fourth; exact reduction below _TRIG_EXACT
_PIO2 = (1.5707964897155762, -1.6292068494294654e-07, 5.390302529957765e-15,
         3.2820035428735005e-22)
_TRIG_EXACT = 2.0 ** 31
# kernels on |r| <= pi/4 (fdlibm/musl): sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2)
_SIN_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
          2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_COS_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
          -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
# asin/acos (fdlibm): asin(x) = x + x R(x^2), R = z P(z) / Q(z)
_ASIN_P = (1.66666666666666657415e-01, -3.25565818622400915405e-01, 2.01212532134862925881e-01,
           -4.00555345006794114027e-02, 7.91534994289814532176e-04, 3.47933107596021167570e-05)
_ASIN_Q = (1.0, -2.40339491173441421878e+00, 2.02094576023350569471e+00,
           -6.88283971605453293030e-01, 7.70381505559019352791e-02)
_PIO2_HI, _PIO2_LO = 1.57079632679489655800e+00, 6.12323399573676603587e-17
_PI_LO = 1.2246467991473532e-16
# atan (fdlibm): breakpoints, atan of the interval centres (hi, lo), odd series coefficients
_ATAN_BREAKS = (7.0 / 16, 11.0 / 16, 19.0 / 16, 39.0 / 16)
_ATAN_HI = (4.63647609000806093515e-01, 7.85398163397448278999e-01, 9.82793723247329054082e-01,
            1.57079632679489655800e+00)
_ATAN_LO = (2.26987774529616870924e-17, 3.06161699786838301793e-17, 1.39033110312309984516e-17,
            6.12323399573676603587e-17)
_ATAN_T = (3.33333333333329318027e-01, -1.99999999998764832476e-01, 1.42857142725034663711e-01,
           -1.11111104054623557880e-01, 9.09088713343650656196e-02, -7.69187620504482999495e-02,
           6.66107313738753120669e-02, -5.83357013379057348645e-02, 4.97687799461593236017e-02,
           -3.65315727442169155270e-02, 1.62858201153657823623e-02)
_LN2_F64 = 0.6931471805599453
_INV_LN2, _INV_LN10 = 1.4426950408889634, 0.4342944819032518
_LOG10_2 = (0.3010299956658855, -1.9043128467164274e-12)  # hi part: k * hi exact

# -- special functions (graphc/ir/special.py) ----------------------------------------------
# erfc (fdlibm s_erf.c, Sun Microsystems, freely distributable with its notice): rational
# approximations, lowest degree first. |x| < 0.84375: erf(x) = x + x PP(x^2) / QQ(x^2);
# [0.84375, 1.25): erf(1 + s) = erx + PA(s) / QA(s); [1.25, 1/0.35) and [1/0.35, 28):
# erfc(x) = exp(-x^2 - 0.5625 + R(1/x^2) / S(1/x^2)) / x with (RA, SA) and (RB, SB), the
# latter padded with zeros to the former's lengths so a lane can pick its set by select
_ERF_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
           -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_ERF_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
           5.08130628187576562776e-03, 1.32494738004321644526e-04, -3.96022827877536812320e-06)
_ERF_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
           3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
           -2.16637559486879084300e-03)
_ERF_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
           7.18286544141962662868e-02, 1.26171219808761642112e-01, 1.36370839120290507362e-02,
           1.19844998467991074170e-02)
_ERF_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
           -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
           -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_ERF_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02,
           4.34565877475229228821e+02, 6.45387271733267880336e+02, 4.29008140027567833386e+02,
           1.08635005541779435134e+02, 6.57024977031928170135e+00, -6.04244152148580987438e-02)
_ERF_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
           -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
           -4.83519191608651397019e+02, 0.0)
_ERF_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02,
           1.53672958608443695994e+03, 3.19985821950859553908e+03, 2.55305040643316442583e+03,
           4.74528541206955367215e+02, -2.24409524465858183362e+01, 0.0)
_ERX = 8.45062911510467529297e-01  # erf(1) rounded to 24 bits
_ERFC_SPLIT = 2.8571414947509766  # 1/0.35 as fdlibm compares it (its high word, 0x4006DB6D)
_ERFC_MAX = 28.0  # erfc rounds to 0 (x > 0) or 2 (x < 0) from here on


def _bits(t: ir.Type) -> int:
    return 32 if t == F32 else 64


_c = fconst


def _f32(v: float) -> float:
    """``v`` rounded to float32 (constants ATen folds in single precision)."""
    return struct.unpack("f", struct.pack("f", v))[0]


class VMath(SpecialFunctions, IncompleteGamma):
    """Emits the routines on one builder; every operand of a call shares one float type.
    The special functions of ``graphc/ir/special_more.py`` and ``graphc/ir/igamma.py`` come
    from ``SpecialFunctions`` and ``IncompleteGamma`` (``codegen/vmath_special.py``,
    ``codegen/vmath_igamma.py``).

    The code is scalar IR (one lane); the loop vectoriser widens it. Nothing here branches, so
    a routine can sit in the middle of any fused element expression.
    """

    LN2_F64 = _LN2[64]
    LOG_LG = _LOG_LG

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
        xs, under = self._exp_range(x, *_EXP_RANGE[w])
        nf = self._call("llvm.rint", b.fmul(xs, _c(t, 1.4426950408889634)))
        c1, c2 = _LN2[w]
        r = self.fma(nf, _c(t, -c1), xs)
        r = self.fma(nf, _c(t, -c2), r)
        return self._exp_result(x, under, self._exp_scaled(nf, r))

    def _exp_range(self, x: ir.Value, lo: float, hi: float) -> tuple[ir.Value, ir.Value]:
        """exp/exp2's argument: clamped to ``hi`` above; 0 at or below ``lo`` (where the
        result rounds to +0) and for NaN (fptosi of NaN would be poison), with the mask of
        those lanes for ``_exp_result``. Clamping them to ``lo`` gave the same bits, but
        through scaling products that underflow, and each such vector instruction takes a
        microcode assist on Intel cores (~150 cycles): a causally masked softmax's exp ran
        9x slower than an unmasked one."""
        b, t = self.b, x.type
        under = b.fcmp_unordered("<=", x, _c(t, lo))
        xs = b.select(b.fcmp_ordered(">", x, _c(t, hi)), _c(t, hi), x)
        return b.select(under, _c(t, 0.0), xs), under

    def _exp_result(self, x: ir.Value, under: ir.Value, y: ir.Value) -> ir.Value:
        """``y`` with +0 in the lanes ``_exp_range`` zeroed and NaN inputs passed through."""
        t = x.type
        return self.b.select(self._is_nan(x), x, self.b.select(under, _c(t, 0.0), y))

    def _exp_scaled(self, nf: ir.Value, r: ir.Value) -> ir.Value:
        """exp(r) 2^n for |r| <= ln2/2 and an integral ``nf`` in exp's clamped range."""
        b, t = self.b, r.type
        p = self.fma(self.horner(r, _EXP_P[_bits(t)]), b.fmul(r, r), r)
        p = b.fadd(p, _c(t, 1.0))
        n = b.fptosi(nf, I32)
        n1 = b.ashr(n, ir.Constant(I32, 1))
        n2 = b.sub(n, n1)
        # two factors: p 2^n1 is exact, the second product rounds once (also into denormals)
        return b.fmul(b.fmul(p, self._pow2(n1, t)), self._pow2(n2, t))

    def exp2(self, x: ir.Value) -> ir.Value:
        """2^x: ``x = k + r`` exactly (|r| <= 1/2), then exp's kernel on ``r ln2``; exact
        for integral x. f32 is evaluated in f64."""
        if x.type == F32:
            return self._via_f64(self.exp2, x)
        b, t = self.b, x.type
        xs, under = self._exp_range(x, -1076.0, 1025.0)
        nf = self._call("llvm.rint", xs)
        r = b.fmul(b.fsub(xs, nf), _c(t, _LN2_F64))
        return self._exp_result(x, under, self._exp_scaled(nf, r))

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
        ef, f = self._log_reduce(x)
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

    def _log_reduce(self, x: ir.Value) -> tuple[ir.Value, ir.Value]:
        """``x = 2^e (1 + f)`` with ``1 + f`` in ``[sqrt(1/2), sqrt(2))``: (e as a float, f)."""
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
        return b.sitofp(e, t), f

    def _log1p_kernel(self, f: ir.Value) -> ir.Value:
        """log(1 + f) for f64 ``f`` in ``[sqrt(1/2) - 1, sqrt(2) - 1]`` (fdlibm's series)."""
        b, t = self.b, f.type
        hfsq = b.fmul(b.fmul(f, f), _c(t, 0.5))
        s = b.fdiv(f, b.fadd(f, _c(t, 2.0)))
        z = b.fmul(s, s)
        r = b.fmul(z, self.horner(z, _LOG_LG))
        return b.fsub(f, b.fsub(hfsq, b.fmul(s, b.fadd(hfsq, r))))

    def log2(self, x: ir.Value) -> ir.Value:
        """e + log(1 + f) / ln2 (f64; f32 evaluated in f64): exact at powers of two."""
        if x.type == F32:
            return self._via_f64(self.log2, x)
        b, t = self.b, x.type
        ef, f = self._log_reduce(x)
        y = self.fma(self._log1p_kernel(f), _c(t, _INV_LN2), ef)
        return log_special_cases(b, x, y)

    def log10(self, x: ir.Value) -> ir.Value:
        """e log10(2) (two parts) + log(1 + f) / ln10 (f64; f32 evaluated in f64)."""
        if x.type == F32:
            return self._via_f64(self.log10, x)
        b, t = self.b, x.type
        ef, f = self._log_reduce(x)
        lo = self.fma(self._log1p_kernel(f), _c(t, _INV_LN10), b.fmul(ef, _c(t, _LOG10_2[1])))
        y = b.fadd(b.fmul(ef, _c(t, _LOG10_2[0])), lo)
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

    # -- f32 through f64 ---------------------------------------------------------------------
    def _via_f64(self, fn: object, *xs: ir.Value) -> ir.Value:
        """An f32 routine as its f64 routine, rounded once at the end (f64 lanes are half as
        wide, but the result is within about half an ulp and the special values carry)."""
        b = self.b
        return b.fptrunc(fn(*[b.fpext(x, F64) for x in xs]), F32)  # type: ignore[operator]

    # -- trigonometric -------------------------------------------------------------------
    def _two_sum(self, a: ir.Value, c: ir.Value) -> tuple[ir.Value, ir.Value]:
        """a + c = s + err exactly (Knuth's TwoSum; no FMA contraction in plain IR)."""
        b = self.b
        s = b.fadd(a, c)
        bb = b.fsub(s, a)
        return s, b.fadd(b.fsub(a, b.fsub(s, bb)), b.fsub(c, bb))

    def _trig_reduce(self, x: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """f64 ``x = k pi/2 + (rh + rl)``, |rh| <= pi/4: (rh, rl, k mod 4 as i32, finite).

        Cody-Waite with pi/2 in three 22-bit parts and a fourth: every ``k P_i`` is exact for
        |k| < 2^31 and the two subtractions that round keep their error (TwoSum), so r is
        exact to about 2^-100 absolute for |x| < 2^31 pi/2 (~3.4e9). Above that the products
        round: r is clamped to [-pi/4, pi/4], so results stay in range but are inaccurate.
        Non-finite x reduce as 0 (the callers return NaN for them).
        """
        b, t = self.b, x.type
        fin = b.fcmp_ordered("<", self._call("llvm.fabs", x), _c(t, float("inf")))
        xs = b.select(fin, x, _c(t, 0.0))
        kf = self._call("llvm.rint", b.fmul(xs, _c(t, 0.6366197723675814)))
        p1, p2, p3, p4 = _PIO2
        a = b.fsub(xs, b.fmul(kf, _c(t, p1)))
        s1, e1 = self._two_sum(a, b.fneg(b.fmul(kf, _c(t, p2))))
        s2, e2 = self._two_sum(s1, b.fneg(b.fmul(kf, _c(t, p3))))
        tail = b.fsub(b.fadd(e1, e2), b.fmul(kf, _c(t, p4)))
        rh = b.fadd(s2, tail)
        rl = b.fsub(tail, b.fsub(rh, s2))
        lim = _c(t, math.pi / 4 * (1 + 2.0 ** -40))
        rh = b.select(b.fcmp_unordered(">", rh, lim), lim, rh)  # NaN (products overflowed)
        rh = b.select(b.fcmp_ordered("<", rh, b.fneg(lim)), b.fneg(lim), rh)
        exact = b.fcmp_ordered("<", self._call("llvm.fabs", kf), _c(t, _TRIG_EXACT))
        rl = b.select(exact, rl, _c(t, 0.0))
        # k - 4 rint(k/4) is exact and in [-2, 2]: its low two bits are k mod 4
        qf = b.fsub(kf, b.fmul(_c(t, 4.0), self._call("llvm.rint", b.fmul(kf, _c(t, 0.25)))))
        return rh, rl, b.fptosi(qf, I32), fin

    def _sin_kernel(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """sin(x + y), |x| <= pi/4, |y| tiny (fdlibm __kernel_sin)."""
        b, t = self.b, x.type
        z = b.fmul(x, x)
        v = b.fmul(z, x)
        r = self.horner(z, _SIN_S[1:])
        inner = b.fsub(b.fmul(z, b.fsub(b.fmul(_c(t, 0.5), y), b.fmul(v, r))), y)
        return b.fsub(x, b.fsub(inner, b.fmul(v, _c(t, _SIN_S[0]))))

    def _cos_kernel(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """cos(x + y), |x| <= pi/4, |y| tiny (musl __cos)."""
        b, t = self.b, x.type
        z = b.fmul(x, x)
        r = b.fmul(z, self.horner(z, _COS_C))
        hz = b.fmul(_c(t, 0.5), z)
        w = b.fsub(_c(t, 1.0), hz)
        corr = b.fsub(b.fmul(z, r), b.fmul(x, y))
        return b.fadd(w, b.fadd(b.fsub(b.fsub(_c(t, 1.0), w), hz), corr))

    def _trig(self, x: ir.Value, which: str) -> ir.Value:
        if x.type == F32:
            return self._via_f64(lambda v: self._trig(v, which), x)
        b, t = self.b, x.type
        rh, rl, q, fin = self._trig_reduce(x)
        s, c = self._sin_kernel(rh, rl), self._cos_kernel(rh, rl)
        odd = b.trunc(q, ir.IntType(1))
        if which == "tan":
            y = b.select(odd, b.fdiv(b.fneg(c), s), b.fdiv(s, c))
        else:
            if which == "cos":
                q = b.add(q, ir.Constant(I32, 1))
                odd = b.trunc(q, ir.IntType(1))
            neg = b.trunc(b.lshr(q, ir.Constant(I32, 1)), ir.IntType(1))
            y = b.select(odd, c, s)
            y = b.select(neg, b.fneg(y), y)
        if which != "cos":  # odd functions keep -0 (the reduction gives +0)
            y = b.select(b.fcmp_ordered("==", x, _c(t, 0.0)), x, y)
        return b.select(fin, y, _c(t, float("nan")))

    def sin(self, x: ir.Value) -> ir.Value:
        """sin: exact Cody-Waite reduction (see ``_trig_reduce``), fdlibm kernels; f32 is
        evaluated in f64."""
        return self._trig(x, "sin")

    def cos(self, x: ir.Value) -> ir.Value:
        return self._trig(x, "cos")

    def tan(self, x: ir.Value) -> ir.Value:
        """sin(r) / cos(r), or -cos(r) / sin(r) in odd quadrants."""
        return self._trig(x, "tan")

    def _asin_r(self, z: ir.Value) -> ir.Value:
        """fdlibm's R(z) = z P(z) / Q(z) with asin(x) = x + x R(x^2) near 0."""
        b = self.b
        return b.fdiv(b.fmul(z, self.horner(z, _ASIN_P)), self.horner(z, _ASIN_Q))

    def _hi_half(self, s: ir.Value) -> ir.Value:
        """s with the low 32 bits of its mantissa cleared (f64), so s_hi^2 is exact."""
        b = self.b
        bits = b.and_(b.bitcast(s, I64), ir.Constant(I64, -(1 << 32)))
        return b.bitcast(bits, F64)

    def asin(self, x: ir.Value) -> ir.Value:
        """fdlibm asin: ``x + x R(x^2)`` below 1/2; above, ``pi/2 - 2 asin(sqrt((1-|x|)/2))``
        with the square root split in two so its error stays out of the result."""
        if x.type == F32:
            return self._via_f64(self.asin, x)
        b, t = self.b, x.type
        a = self._call("llvm.fabs", x)
        near = self.fma(x, self._asin_r(b.fmul(x, x)), x)
        z = b.fmul(b.fsub(_c(t, 1.0), a), _c(t, 0.5))
        s = self._call("llvm.sqrt", z)
        r = self._asin_r(z)
        edge = b.fsub(_c(t, _PIO2_HI), b.fsub(b.fmul(_c(t, 2.0), self.fma(s, r, s)),
                                              _c(t, _PIO2_LO)))
        f = self._hi_half(s)
        c = b.fdiv(b.fsub(z, b.fmul(f, f)), b.fadd(s, f))
        two = _c(t, 2.0)
        p = b.fsub(b.fmul(b.fmul(two, s), r), b.fsub(_c(t, _PIO2_LO), b.fmul(two, c)))
        mid = b.fsub(_c(t, 0.5 * _PIO2_HI),
                     b.fsub(p, b.fsub(_c(t, 0.5 * _PIO2_HI), b.fmul(two, f))))
        far = b.select(b.fcmp_ordered(">=", a, _c(t, 0.975)), edge, mid)
        y = b.select(b.fcmp_ordered("<", a, _c(t, 0.5)), near, self._call("llvm.copysign", far, x))
        y = b.select(b.fcmp_ordered(">", a, _c(t, 1.0)), _c(t, float("nan")), y)
        return b.select(self._is_nan(x), x, y)

    def acos(self, x: ir.Value) -> ir.Value:
        """fdlibm acos: ``pi/2 - (x + x R(x^2))`` below 1/2, ``2 (pi/2 - asin-part)`` for
        x < -1/2, ``2 asin(sqrt((1-x)/2))`` (split square root) for x > 1/2."""
        if x.type == F32:
            return self._via_f64(self.acos, x)
        b, t = self.b, x.type
        a = self._call("llvm.fabs", x)
        two = _c(t, 2.0)
        near = b.fsub(_c(t, _PIO2_HI), b.fsub(
            x, b.fsub(_c(t, _PIO2_LO), b.fmul(x, self._asin_r(b.fmul(x, x))))))
        zn = b.fmul(b.fadd(_c(t, 1.0), x), _c(t, 0.5))
        sn = self._call("llvm.sqrt", zn)
        wn = b.fsub(b.fmul(self._asin_r(zn), sn), _c(t, _PIO2_LO))
        neg = b.fmul(two, b.fsub(_c(t, _PIO2_HI), b.fadd(sn, wn)))
        zp = b.fmul(b.fsub(_c(t, 1.0), x), _c(t, 0.5))
        sp = self._call("llvm.sqrt", zp)
        df = self._hi_half(sp)
        c = b.fdiv(b.fsub(zp, b.fmul(df, df)), b.fadd(sp, df))
        wp = self.fma(self._asin_r(zp), sp, c)
        pos = b.fmul(two, b.fadd(df, wp))
        y = b.select(b.fcmp_ordered("<", x, _c(t, 0.0)), neg, pos)
        y = b.select(b.fcmp_ordered("==", x, _c(t, 1.0)), _c(t, 0.0), y)  # pos: c = 0/0
        y = b.select(b.fcmp_ordered("<", a, _c(t, 0.5)), near, y)
        y = b.select(b.fcmp_ordered(">", a, _c(t, 1.0)), _c(t, float("nan")), y)
        return b.select(self._is_nan(x), x, y)

    def _atan_pos(self, a: ir.Value) -> ir.Value:
        """fdlibm atan for a = |x| >= 0 (inf gives pi/2, NaN propagates): the interval is
        picked per lane and mapped to a small argument ``t = (A a + B) / (C a + D)``."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        a = b.select(b.fcmp_ordered(">", a, k(1e300)), k(1e300), a)  # inf: 0 * a is NaN
        # interval i (0..4): coefficients of t and the centre's atan
        maps = ((1.0, 0.0, 0.0, 1.0), (2.0, -1.0, 1.0, 2.0), (1.0, -1.0, 1.0, 1.0),
                (1.0, -1.5, 1.5, 1.0), (0.0, -1.0, 1.0, 0.0))
        cA, cB, cC, cD = (k(v) for v in maps[0])
        hi, lo = k(0.0), k(0.0)
        for brk, m, h, lw in zip(_ATAN_BREAKS, maps[1:], _ATAN_HI, _ATAN_LO):
            here = b.fcmp_unordered(">=", a, k(brk))
            cA, cB, cC, cD = (b.select(here, k(v), old) for v, old in zip(m, (cA, cB, cC, cD)))
            hi, lo = b.select(here, k(h), hi), b.select(here, k(lw), lo)
        x = b.fdiv(self.fma(cA, a, cB), self.fma(cC, a, cD))
        z = b.fmul(x, x)
        w = b.fmul(z, z)
        s1 = b.fmul(z, self.horner(w, _ATAN_T[0::2]))
        s2 = b.fmul(w, self.horner(w, _ATAN_T[1::2]))
        return b.fsub(hi, b.fsub(b.fsub(b.fmul(x, b.fadd(s1, s2)), lo), x))

    def atan(self, x: ir.Value) -> ir.Value:
        if x.type == F32:
            return self._via_f64(self.atan, x)
        y = self._atan_pos(self._call("llvm.fabs", x))
        return self._call("llvm.copysign", y, x)

    def atan2(self, y: ir.Value, x: ir.Value) -> ir.Value:
        """atan(|y| / |x|) (0/0 read as 0, inf/inf as 1), reflected to ``pi - a`` where x has
        its sign bit set (-0 included), then given y's sign: C99's special values. f32 is
        evaluated in f64 (no underflow or overflow in the quotient)."""
        if y.type == F32:
            return self._via_f64(self.atan2, y, x)
        b, t = self.b, y.type
        ay, ax = self._call("llvm.fabs", y), self._call("llvm.fabs", x)
        q = b.fdiv(ay, ax)
        inf = _c(t, float("inf"))
        both_inf = b.and_(b.fcmp_ordered("==", ay, inf), b.fcmp_ordered("==", ax, inf))
        both_zero = b.and_(b.fcmp_ordered("==", ay, _c(t, 0.0)),
                           b.fcmp_ordered("==", ax, _c(t, 0.0)))
        q = b.select(both_inf, _c(t, 1.0), b.select(both_zero, _c(t, 0.0), q))
        a = self._atan_pos(q)
        xneg = b.icmp_signed("<", b.bitcast(x, I64), ir.Constant(I64, 0))
        a = b.select(xneg, b.fsub(_c(t, math.pi), b.fsub(a, _c(t, _PI_LO))), a)
        # |y/x| > 2^64 (x = +-0 included): pi/2 whatever x's sign (reflecting would round)
        a = b.select(b.fcmp_ordered(">", q, _c(t, 2.0 ** 64)), _c(t, _PIO2_HI), a)
        r = self._call("llvm.copysign", a, y)
        return b.select(b.or_(self._is_nan(x), self._is_nan(y)), b.fadd(x, y), r)

    # -- hyperbolic ----------------------------------------------------------------------
    def sinh(self, x: ir.Value) -> ir.Value:
        """musl sinh from t = expm1(|x|): ``(2t - t^2/(t+1)) / 2`` below 1, ``(t + t/(t+1))
        / 2`` up to 709, ``(exp(|x|/2) / 2) exp(|x|/2)`` above; sign by copysign."""
        if x.type == F32:
            return self._via_f64(self.sinh, x)
        b, t = self.b, x.type
        a = self._call("llvm.fabs", x)
        am = b.select(b.fcmp_ordered("<", a, _c(t, 709.0)), a, _c(t, 709.0))
        e = self.expm1(am)
        u = b.fdiv(e, b.fadd(e, _c(t, 1.0)))
        small = b.fsub(b.fmul(_c(t, 2.0), e), b.fmul(e, u))
        mid = b.fadd(e, u)
        h = self.exp(b.fmul(a, _c(t, 0.5)))
        big = b.fmul(b.fmul(h, _c(t, 0.5)), h)
        y = b.fmul(b.select(b.fcmp_ordered("<", a, _c(t, 1.0)), small, mid), _c(t, 0.5))
        y = b.select(b.fcmp_ordered("<", a, _c(t, 709.0)), y, big)
        y = self._call("llvm.copysign", y, x)
        return b.select(self._is_nan(x), x, y)

    def cosh(self, x: ir.Value) -> ir.Value:
        """musl cosh: ``1 + t^2 / (2 (1 + t))`` with t = expm1(|x|) below ln2, ``(e + 1/e)/2``
        below 709, ``(exp(|x|/2) / 2) exp(|x|/2)`` above."""
        if x.type == F32:
            return self._via_f64(self.cosh, x)
        b, t = self.b, x.type
        a = self._call("llvm.fabs", x)
        am = b.select(b.fcmp_ordered("<", a, _c(t, 709.0)), a, _c(t, 709.0))
        e1 = self.expm1(am)
        small = b.fadd(_c(t, 1.0), b.fdiv(b.fmul(e1, e1),
                                         b.fmul(_c(t, 2.0), b.fadd(_c(t, 1.0), e1))))
        e = self.exp(am)
        mid = b.fmul(_c(t, 0.5), b.fadd(e, b.fdiv(_c(t, 1.0), e)))
        h = self.exp(b.fmul(a, _c(t, 0.5)))
        big = b.fmul(b.fmul(h, _c(t, 0.5)), h)
        y = b.select(b.fcmp_ordered("<", a, _c(t, _LN2_F64)), small, mid)
        y = b.select(b.fcmp_ordered("<", a, _c(t, 709.0)), y, big)
        return b.select(self._is_nan(x), a, y)

    def asinh(self, x: ir.Value) -> ir.Value:
        """musl asinh on |x|: ``log(|x|) + ln2`` above 2^26, ``log(2|x| + 1/(sqrt(x^2+1) +
        |x|))`` above 2, ``log1p(|x| + x^2/(sqrt(x^2+1) + 1))`` below; x itself when tiny."""
        if x.type == F32:
            return self._via_f64(self.asinh, x)
        b, t = self.b, x.type
        one = _c(t, 1.0)
        a = self._call("llvm.fabs", x)
        a2 = b.fmul(a, a)
        sq = self._call("llvm.sqrt", b.fadd(a2, one))
        huge = b.fadd(self.log(a), _c(t, _LN2_F64))
        big = self.log(b.fadd(b.fmul(_c(t, 2.0), a), b.fdiv(one, b.fadd(sq, a))))
        small = self.log1p(b.fadd(a, b.fdiv(a2, b.fadd(sq, one))))
        y = b.select(b.fcmp_ordered("<", a, _c(t, 2.0)), small, big)
        y = b.select(b.fcmp_ordered("<", a, _c(t, 2.0 ** 26)), y, huge)
        y = self._call("llvm.copysign", y, x)
        y = b.select(b.fcmp_ordered("<", a, _c(t, 2.0 ** -28)), x, y)
        return b.select(self._is_nan(x), x, y)

    def acosh(self, x: ir.Value) -> ir.Value:
        """musl acosh: ``log1p(u + sqrt(u^2 + 2u))`` with u = x - 1 below 2, ``log(2x -
        1/(x + sqrt(x^2 - 1)))`` below 2^26, ``log(x) + ln2`` above; NaN below 1."""
        if x.type == F32:
            return self._via_f64(self.acosh, x)
        b, t = self.b, x.type
        one = _c(t, 1.0)
        u = b.fsub(x, one)
        small = self.log1p(b.fadd(u, self._call("llvm.sqrt", self.fma(u, u, b.fadd(u, u)))))
        sq = self._call("llvm.sqrt", b.fsub(b.fmul(x, x), one))
        big = self.log(b.fsub(b.fadd(x, x), b.fdiv(one, b.fadd(x, sq))))
        huge = b.fadd(self.log(x), _c(t, _LN2_F64))
        y = b.select(b.fcmp_ordered("<", x, _c(t, 2.0)), small, big)
        y = b.select(b.fcmp_ordered("<", x, _c(t, 2.0 ** 26)), y, huge)
        y = b.select(b.fcmp_ordered("<", x, one), _c(t, float("nan")), y)
        return b.select(self._is_nan(x), x, y)

    def atanh(self, x: ir.Value) -> ir.Value:
        """musl atanh on |x|: ``log1p(2a + 2a^2/(1-a)) / 2`` below 1/2, ``log1p(2a/(1-a)) /
        2`` above (inf at 1, NaN beyond); x itself when tiny; sign by copysign."""
        if x.type == F32:
            return self._via_f64(self.atanh, x)
        b, t = self.b, x.type
        a = self._call("llvm.fabs", x)
        one_m = b.fsub(_c(t, 1.0), a)
        a2 = b.fadd(a, a)
        small = b.fadd(a2, b.fdiv(b.fmul(a2, a), one_m))
        big = b.fdiv(a2, one_m)
        y = self.log1p(b.select(b.fcmp_ordered("<", a, _c(t, 0.5)), small, big))
        y = self._call("llvm.copysign", b.fmul(y, _c(t, 0.5)), x)
        y = b.select(b.fcmp_ordered("<", a, _c(t, 2.0 ** -28)), x, y)
        return b.select(self._is_nan(x), x, y)

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

    # -- special functions (graphc/ir/special.py) ------------------------------------------
    def _ratio(self, x: ir.Value, p: tuple, q: tuple) -> ir.Value:
        """P(x) / Q(x), coefficients lowest degree first (values or numbers)."""
        return self.b.fdiv(self.horner(x, p), self.horner(x, q))

    def erfc(self, x: ir.Value) -> ir.Value:
        """fdlibm erfc (within an ulp, relative also in the tail): ``1 - erf(x)`` below 0.84375
        (``0.5 - (x R + (x - 0.5))`` from 1/4 up, so nothing cancels), the expansion around 1
        up to 1.25, and ``exp(-z^2 - 0.5625) exp((z - |x|)(z + |x|) + R/S) / |x|`` beyond, z
        being |x| with its low 32 bits cleared so that z^2 is exact and x^2's rounding stays
        out of the exponential (2 minus that for negative x). f32 is evaluated in f64."""
        if x.type == F32:
            return self._via_f64(self.erfc, x)
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        one = k(1.0)
        a = self._call("llvm.fabs", x)
        xy = b.fmul(x, self._ratio(b.fmul(x, x), _ERF_PP, _ERF_QQ))
        near = b.select(b.fcmp_ordered("<", x, k(0.25)), b.fsub(one, b.fadd(x, xy)),
                        b.fsub(k(0.5), b.fadd(xy, b.fsub(x, k(0.5)))))
        pq = self._ratio(b.fsub(a, one), _ERF_PA, _ERF_QA)
        mid = b.select(b.fcmp_ordered(">=", x, k(0.0)), b.fsub(k(1.0 - _ERX), pq),
                       b.fadd(one, b.fadd(k(_ERX), pq)))
        # the tail: |x| clamped to 28 (the result is 0 or 2 from there, and inf must not
        # reach (z - |x|)); the lane's coefficient set picked by select
        af = b.select(b.fcmp_ordered(">", a, k(_ERFC_MAX)), k(_ERFC_MAX), a)
        s = b.fdiv(one, b.fmul(af, af))
        first = b.fcmp_ordered("<", af, k(_ERFC_SPLIT))
        rs = [b.select(first, k(u), k(v)) for u, v in zip(_ERF_RA, _ERF_RB)]
        ss = [b.select(first, k(u), k(v)) for u, v in zip(_ERF_SA, _ERF_SB)]
        z = self._hi_half(af)
        e1 = self.exp(b.fsub(b.fmul(b.fneg(z), z), k(0.5625)))
        e2 = self.exp(b.fadd(b.fmul(b.fsub(z, af), b.fadd(z, af)), self._ratio(s, rs, ss)))
        tail = b.fdiv(b.fmul(e1, e2), af)
        far = b.select(b.fcmp_ordered(">", x, k(0.0)), tail, b.fsub(k(2.0), tail))
        return b.select(b.fcmp_ordered("<", a, k(0.84375)), near,
                        b.select(b.fcmp_ordered("<", a, k(1.25)), mid, far))

    def erfinv(self, x: ir.Value) -> ir.Value:
        """Giles' erfinv: ``x P(w)`` with ``w = -log((1 - x)(1 + x))`` (both factors exact
        near +-1, so the tail keeps its relative accuracy), P one of three polynomials
        evaluated on every lane and picked by select; +-inf at +-1, NaN beyond. Within a few
        ulp in f64; f32 is evaluated in f64."""
        if x.type == F32:
            return self._via_f64(self.erfinv, x)
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        one = k(1.0)
        w = b.fneg(self.log(b.fmul(b.fsub(one, x), b.fadd(one, x))))
        sw = self._call("llvm.sqrt", w)
        p = None
        for hi, shift, root, coeffs in reversed(GILES):  # the last interval first
            q = self.horner(b.fsub(sw if root else w, k(shift)), coeffs[::-1])
            p = q if p is None else b.select(b.fcmp_ordered("<", w, k(hi)), q, p)
        a = self._call("llvm.fabs", x)
        y = b.select(b.fcmp_ordered("==", a, one),
                     self._call("llvm.copysign", k(float("inf")), x), b.fmul(p, x))
        return b.select(b.fcmp_ordered(">", a, one), k(float("nan")), y)

    def _abs_sin_pi(self, a: ir.Value) -> ir.Value:
        """|sin(pi a)| for f64 a >= 0, exact at the integers (0 there): ``a mod 2 = r``
        exactly, ``r = k/2 + f`` with |f| <= 1/4, then the sine or cosine kernel on pi f."""
        b, t = self.b, a.type
        r = b.fsub(a, b.fmul(_c(t, 2.0), self._call("llvm.floor", b.fmul(a, _c(t, 0.5)))))
        kf = self._call("llvm.rint", b.fadd(r, r))
        pf = b.fmul(_c(t, math.pi), b.fsub(r, b.fmul(kf, _c(t, 0.5))))
        zero = _c(t, 0.0)
        odd = b.fcmp_ordered("!=", b.fsub(kf, b.fmul(_c(t, 2.0), self._call(
            "llvm.floor", b.fmul(kf, _c(t, 0.5))))), zero)
        v = b.select(odd, self._cos_kernel(pf, zero), self._sin_kernel(pf, zero))
        return self._call("llvm.fabs", v)

    def lgamma(self, x: ir.Value) -> ir.Value:
        """fdlibm lgamma on |x| (``LGAMMA`` in graphc/ir/special.py): every interval's
        expansion evaluated and the lane's picked by select; the regions needing a logarithm
        share one, of |x| or of the recurrence's product. Negative x by reflection,
        ``log(pi / |x sin(pi x)|) - lgamma(-x)``: within 2e-16 absolute there (relative
        accuracy degrades near the zeros of lgamma below -2, as in fdlibm). inf at 0, at the
        negative integers and at +-inf. f32 is evaluated in f64."""
        if x.type == F32:
            return self._via_f64(self.lgamma, x)
        b, t, co = self.b, x.type, LGAMMA
        k = lambda v: _c(t, v)  # noqa: E731
        lt = lambda u, v: b.fcmp_ordered("<", u, v)  # noqa: E731
        ge = lambda u, v: b.fcmp_ordered(">=", u, v)  # noqa: E731
        one, half, two = k(1.0), k(0.5), k(2.0)
        a = self._call("llvm.fabs", x)
        # [2, 8): lgamma(2 + y) plus log of the product (y + 2) ... (y + i - 1), i = floor(a)
        fl = self._call("llvm.floor", a)
        yf = b.fsub(a, fl)
        prod = one
        for i in range(2, 7):
            prod = b.select(b.fcmp_ordered(">", fl, k(float(i))),
                            b.fmul(prod, b.fadd(yf, k(float(i)))), prod)
        in_mid = b.and_(ge(a, two), lt(a, k(8.0)))
        lg = self.log(b.select(in_mid, prod, a))
        # below 2: three expansions in y, on fdlibm's intervals
        below = lt(a, k(LGAMMA_BELOW_09))
        i0 = b.select(below, ge(a, k(LGAMMA_SPLITS_LO[0])), ge(a, k(LGAMMA_SPLITS_HI[0])))
        i1 = b.select(below, ge(a, k(LGAMMA_SPLITS_LO[1])), ge(a, k(LGAMMA_SPLITS_HI[1])))
        tc = co["tc"]
        y_lo = b.select(i0, b.fsub(one, a), b.select(i1, b.fsub(a, k(tc - 1.0)), a))
        y_hi = b.select(i0, b.fsub(two, a), b.select(i1, b.fsub(a, k(tc)), b.fsub(a, one)))
        y = b.select(below, y_lo, y_hi)
        z = b.fmul(y, y)
        w3 = b.fmul(z, y)
        c0 = b.fsub(self.fma(y, self.horner(z, co["a"][0::2]),
                             b.fmul(z, self.horner(z, co["a"][1::2]))), b.fmul(half, y))
        q1, q2, q3 = (self.horner(w3, co["t"][j::3]) for j in range(3))
        c1 = b.fadd(k(co["tf"]), b.fsub(b.fmul(z, q1),
                                         b.fsub(k(co["tt"]), b.fmul(w3, self.fma(y, q3, q2)))))
        c2 = b.fadd(b.fmul(k(-0.5), y), b.fdiv(b.fmul(y, self.horner(y, co["u"])),
                                              self.horner(y, co["v"])))
        small = b.fadd(b.select(below, b.fneg(lg), k(0.0)),
                       b.select(i0, c0, b.select(i1, c1, c2)))
        mid = b.fadd(self.fma(half, yf, b.fdiv(b.fmul(yf, self.horner(yf, co["s"])),
                                                self.horner(yf, co["r"]))), lg)
        zi = b.fdiv(one, a)
        corr = self.fma(zi, self.horner(b.fmul(zi, zi), co["w"][1:]), k(co["w"][0]))
        stirling = b.fadd(b.fmul(b.fsub(a, half), b.fsub(lg, one)), corr)
        huge = b.fmul(a, b.fsub(lg, one))
        r = b.select(lt(a, two), small,
                     b.select(lt(a, k(8.0)), mid, b.select(lt(a, k(2.0 ** 58)), stirling, huge)))
        r = b.select(b.or_(b.fcmp_ordered("==", a, one), b.fcmp_ordered("==", a, two)),
                     k(0.0), r)
        tiny = lt(a, k(2.0 ** -70))
        r = b.select(tiny, b.fneg(lg), r)
        # reflection for x < 0 (not tiny): log(pi / |x sin(pi x)|) - lgamma(|x|)
        sp = self._abs_sin_pi(a)
        nadj = self.log(b.fdiv(k(math.pi), b.fmul(sp, a)))
        neg = b.and_(lt(x, k(0.0)), b.not_(tiny))
        r = b.select(neg, b.fsub(nadj, r), r)
        pole = b.and_(neg, b.fcmp_ordered("==", sp, k(0.0)))
        r = b.select(b.or_(pole, b.fcmp_ordered("==", a, k(float("inf")))), k(float("inf")), r)
        return b.select(self._is_nan(x), x, r)

    def digamma(self, x: ir.Value) -> ir.Value:
        """ATen's ``calc_digamma`` (Cephes) in the operand's precision: the recurrence
        ``psi(x) = psi(x + 1) - 1/x`` up to 10 (ten masked steps; exactly 10 returns
        ``psi(10)``), then ``log x - 1/(2x) - z A(z)``, z = 1/x^2; negative x by reflection,
        ``psi(1 - x) - pi / tan(pi r)`` with r = x's fractional part and the quotient in f64
        (as ATen, for both precisions). -inf at +0, inf at -0, NaN at the negative integers
        and -inf."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        one = k(1.0)
        xd = x if t == F64 else b.fpext(x, F64)
        r = b.fsub(xd, self._call("llvm.trunc", xd))
        refl = b.fdiv(_c(F64, math.pi), self.tan(b.fmul(_c(F64, math.pi), r)))
        refl = refl if t == F64 else b.fptrunc(refl, t)
        neg = b.fcmp_ordered("<", x, k(0.0))
        z = b.select(neg, b.fsub(one, x), x)
        acc = k(0.0)
        for _ in range(10):
            step = b.fcmp_ordered("<", z, k(10.0))
            acc = b.select(step, b.fsub(acc, b.fdiv(one, z)), acc)
            z = b.select(step, b.fadd(z, one), z)
        zz = b.fdiv(one, b.fmul(z, z))
        tail = b.select(b.fcmp_ordered("<", z, k(1e17)), b.fmul(zz, self.horner(zz, PSI_A[::-1])),
                        k(0.0))
        y = b.fsub(b.fsub(b.fadd(acc, self.log(z)), b.fdiv(k(0.5), z)), tail)
        y = b.select(b.fcmp_ordered("==", z, k(10.0)), b.fadd(acc, k(PSI_10)), y)
        y = b.select(neg, b.fsub(y, refl), y)
        integer = b.fcmp_ordered("==", x, self._call("llvm.trunc", x))
        y = b.select(b.and_(neg, integer), k(float("nan")), y)
        pole = self._call("llvm.copysign", k(float("inf")), b.fneg(x))
        return b.select(b.fcmp_ordered("==", x, k(0.0)), pole, y)

    def trigamma(self, x: ir.Value) -> ir.Value:
        """ATen's ``trigamma`` (``polygamma(1, x)``) in the operand's precision: reflection
        ``pi^2 / sin^2(pi x) - psi1(1 - x)`` below 1/2, six recurrence steps, then the
        asymptotic series to x^-7. ATen's own truncation (about 1e-9 relative in f64) is
        kept, so gradients match PyTorch's rather than the exact function."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        one = k(1.0)
        pi = k(math.pi)
        small = b.fcmp_ordered("<", x, k(0.5))
        s = self.sin(b.fmul(pi, x))
        pi2 = _f32(_f32(math.pi) * _f32(math.pi)) if t == F32 else math.pi * math.pi
        acc = b.select(small, b.fsub(k(0.0), b.fdiv(k(pi2), b.fmul(s, s))), k(0.0))
        z = b.select(small, b.fsub(one, x), x)
        for _ in range(6):
            acc = b.fadd(acc, b.fdiv(one, b.fmul(z, z)))
            z = b.fadd(z, one)
        ixx = b.fdiv(one, b.fmul(z, z))
        inner = self.fma(b.fneg(ixx), self.fma(b.fneg(ixx), k(1.0 / 42), k(1.0 / 30)),
                         k(1.0 / 6))
        series = self.fma(ixx, inner, b.fadd(one, b.fdiv(one, b.fmul(k(2.0), z))))
        acc = b.fadd(acc, b.fdiv(series, z))
        return b.select(small, b.fneg(acc), acc)

    def _chbevl(self, x: ir.Value, coeffs: tuple) -> ir.Value:
        """Cephes ``chbevl`` (Clenshaw's recurrence for a Chebyshev series), with ATen's
        ``x b1 - b2`` fused as its compiled code fuses it."""
        b, t = self.b, x.type
        b0, b1, b2 = _c(t, coeffs[0]), _c(t, 0.0), _c(t, 0.0)
        for c in coeffs[1:]:
            b2, b1 = b1, b0
            b0 = b.fadd(self.fma(x, b1, b.fneg(b2)), _c(t, c))
        return b.fmul(_c(t, 0.5), b.fsub(b0, b2))

    def _bessel(self, x: ir.Value, a_coeffs: tuple, b_coeffs: tuple, times_x: bool
                ) -> ir.Value:
        """ATen's ``calc_i0`` / ``calc_i1`` on |x| in the operand's precision: ``exp(x) [x]
        A(x/2 - 2)`` up to 8, ``exp(x) B(32/x - 2) / sqrt(x)`` beyond (both evaluated, the
        lane's picked by select)."""
        b, t = self.b, x.type
        k = lambda v: _c(t, v)  # noqa: E731
        a = self._call("llvm.fabs", x)
        e = self.exp(a)
        near = self._chbevl(b.fsub(b.fdiv(a, k(2.0)), k(2.0)), a_coeffs)
        lo = b.fmul(b.fmul(e, a), near) if times_x else b.fmul(e, near)
        far = self._chbevl(b.fsub(b.fdiv(k(32.0), a), k(2.0)), b_coeffs)
        hi = b.fdiv(b.fmul(e, far), self._call("llvm.sqrt", a))
        return b.select(b.fcmp_ordered("<=", a, k(8.0)), lo, hi)

    def i0(self, x: ir.Value) -> ir.Value:
        """The modified Bessel function I0 as ATen computes it (NaN at +-inf, as ATen's
        ``exp(x) ... / sqrt(x)`` gives)."""
        return self._bessel(x, I0_A, I0_B, False)

    def i1(self, x: ir.Value) -> ir.Value:
        """I1 as ATen's ``calc_i1`` (odd: the sign of x restored)."""
        b = self.b
        y = self._bessel(x, I1_A[_bits(x.type)], I1_B[_bits(x.type)], True)
        return b.select(b.fcmp_ordered("<", x, _c(x.type, 0.0)), b.fneg(y), y)
