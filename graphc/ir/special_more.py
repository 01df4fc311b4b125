"""The primitives behind the rest of ``torch.special`` (``graphc/special.py``): the Hurwitz
``zeta`` (and through it ``polygamma``), ``ndtri``, ``erfcx``, ``i0e``, ``i1e``, the modified
Bessel functions ``I1``, ``K0``, ``K1`` (and ``K0``, ``K1`` scaled by ``exp(x)``), the Bessel
functions ``J0``, ``J1``, ``Y0``, ``Y1``, ``airy_ai`` and the orthogonal polynomials.

They are internal op-table entries (no ``gc.<op>`` / ``Tensor.<op>``): ``torch.special`` is
their only public name, and ``graphc/special.py`` gives them PyTorch's signatures.

Why these algorithms: PyTorch's CPU kernels (``aten/src/ATen/native/Math.h``) are the
specification, and for most of these functions they are not the exact function. ATen's
``bessel_j0`` ... ``bessel_y1`` and ``airy_ai`` evaluate Cephes' rational approximations with
the leading coefficient of every ``p1evl`` denominator dropped (so ``bessel_j0(4.9)`` is off
by 4e-8 relative, ``bessel_j1(7)`` by 6e-6), and its polynomials run their recurrences in the
tensor's precision. So the references here (the eager interpreter's oracles) and the
``codegen/vmath_special.py`` routines run ATen's own formulas, in ATen's order and precision:
float32 inputs are evaluated in float32 where ATen uses ``float`` (transcendental calls
rounded from float64, which glibc's ``expf``/``logf``/``sinf`` give but for rare cases) and in
float64 where ATen accumulates in ``double`` (``zeta``'s ``acc_type``), with ``a * b + c``
fused where ATen's compiled code fuses it (``_fma``). Most results are then PyTorch's to the
bit. Exceptions, each within a few ulp of ATen's result (``tests/test_special_more.py``
measures them):

- ``erfcx``: ATen uses S. G. Johnson's 100-interval table; here eight Chebyshev fits in the
  same variable ``y = 4 / (4 + x)`` (mpmath at 40 digits, degree 13, ``ERFCX_Y8``), with the
  continued fraction beyond 50 and the reflection below 0 exactly as ATen has them.
- ``zeta`` with ``q < 0`` (integer ``x``): ATen sums ``(q + j)^-x`` term by term until the
  argument exceeds 9 (a loop as long as ``-q``); here the negative terms are
  ``(-1)^x (zeta(x, f) - zeta(x, f + m))`` with ``f`` the fraction of ``-q`` and ``m`` their
  count, so every evaluation is ATen's series at a positive argument, in fixed work.
- the Chebyshev polynomials' closed forms inside (-1, 1) (``cos(n acos x)`` ...): an ulp of
  ``acos x`` moves them by n ulp, and glibc's ``acosf``/``cosf`` are not correctly rounded.
  The recurrences (run for each element's degree: ``_recurrence``, and a loop in the element
  expression of ``codegen/vmath_special.py``) give PyTorch's bits.

Derivatives are ``tools/autograd/derivatives.yaml``'s: zeta's with respect to ``q`` is
``-x zeta(x + 1, q)`` and with respect to ``x`` PyTorch raises (so does graphc, when that
gradient is needed); ndtri' = sqrt(2 pi) exp(ndtri^2 / 2); erfcx' = 2 x erfcx - 2/sqrt(pi);
i0e' = i1e - sgn(x) i0e; i1e's is ATen's ``i1e_backward``. The Bessel functions, airy_ai and
the polynomials have no derivative in PyTorch (their results do not require grad): here they
are non-differentiable primitives.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._ewlib import _binary, _c, _no_grad, _unary, _wants
from .opdef import OpDef
from .special import I0_A, I0_B, I1_A, I1_B, _f64, _in_f64, _polevl


def _split(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split of float64 ``v`` into 26-bit halves (their products are exact)."""
    c = v * 134217729.0
    hi = c - (c - v)
    return hi, v - hi


def _fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` rounded once, as ATen's compiled kernels contract it (GCC fuses a product
    that feeds an addition): float32 through float64 (the product is exact there); float64
    as Dekker's exact product and Knuth's exact sum, rounded at the end (correct but for
    near-ties, which a cancelling recurrence does not amplify as an unfused step would)."""
    x = np.asarray(a)
    if x.dtype == np.float32:
        return (_f64(x) * _f64(np.asarray(b)) + _f64(np.asarray(c))).astype(np.float32)
    y, z = np.asarray(b, np.float64), np.asarray(c, np.float64)
    with np.errstate(all="ignore"):
        p = x * y
        (xh, xl), (yh, yl) = _split(x), _split(y)
        e = ((xh * yh - p) + xh * yl + xl * yh) + xl * yl
        s = p + z
        bb = s - p
        err = (p - (s - bb)) + (z - bb)
        out = s + (err + e)
        return np.where(np.isfinite(out) & np.isfinite(p), out, p + z)


def _polevl_fma(x: np.ndarray, coeffs: Any) -> np.ndarray:
    """ATen's ``polevl`` loops (``r = r * x + c`` from 0, highest degree first) with each
    step fused."""
    t = x.dtype.type
    r = np.zeros_like(x)
    for c in coeffs:
        r = _fma(r, x, t(c))
    return r


def _chbevl(x: np.ndarray, coeffs: Any) -> np.ndarray:
    """Cephes ``chbevl`` (Clenshaw's recurrence) with ATen's ``x b1 - b2`` fused, in both
    precisions."""
    t = x.dtype.type
    b0, b1, b2 = np.full_like(x, t(coeffs[0])), np.zeros_like(x), np.zeros_like(x)
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        b0 = _fma(x, b1, -b2) + t(c)
    return t(0.5) * (b0 - b2)


# -- zeta (Cephes, ATen's ``zeta``: in float64 for both precisions) --------------------------
ZETA_MACHEP = 1.11022302462515654042e-16
# Euler-Maclaurin coefficients (2k)! / B_2k
ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
          7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
          -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)


def _zeta_pos(x: np.ndarray, q: np.ndarray, first32: Any = False) -> np.ndarray:
    """ATen's zeta series for ``q > 0`` (float64): ``q^-x`` plus nine more terms (ten when
    ``q`` is below 2^-53, where ``q + 1`` rounds to 1 and the loop runs until the argument
    passes 9), each step stopping a lane once its term is below 1.1e-16 of the sum, then the
    Euler-Maclaurin tail from ``w = q + 9``, twelve terms with the same stop. ``first32``
    (a mask): lanes whose first term is rounded to float32, as ATen's ``std::pow(q, -x)`` of
    two floats is."""
    with np.errstate(all="ignore"):
        s = np.power(q, -x)
        s = np.where(first32, _f64(s.astype(np.float32)), s)
        a = q.copy()
        b = np.zeros_like(q)
        done = np.zeros(q.shape, bool)
        for i in range(10):
            live = ~done if i < 9 else ~done & (a <= 9.0)
            a = np.where(live, a + 1.0, a)
            b = np.where(live, np.power(a, -x), b)
            s = np.where(live, s + b, s)
            done |= live & (-ZETA_MACHEP * s < b) & (b < ZETA_MACHEP * s)
        w = a
        s = np.where(done, s, s + b * w / (x - 1.0))
        s = np.where(done, s, s - 0.5 * b)
        aa = np.ones_like(q)
        k = 0.0
        for c in ZETA_A:
            aa = aa * (x + k)
            b = b / w
            t = aa * b / c
            s = np.where(done, s, s + t)
            done |= np.abs(t / s) < ZETA_MACHEP
            k += 1.0
            aa = aa * (x + k)
            b = b / w
            k += 1.0
    return s


def _zeta_ref(x0: np.ndarray, q0: np.ndarray) -> np.ndarray:
    """ATen's ``zeta(x, q)`` in float64: inf at ``x == 1`` and at the non-positive integers
    ``q``, NaN for ``x < 1`` and for ``q < 0`` with a non-integer ``x``; ``q < 0`` through the
    three positive-argument series of the module's note."""
    x0, q0 = np.broadcast_arrays(x0, q0)  # the interpreter may pass unexpanded operands
    x, q = _f64(x0), _f64(q0)
    with np.errstate(all="ignore"):
        neg = q < 0
        r = -q
        fl = np.floor(r)
        f = np.where(neg, r - fl, 1.0)
        odd = np.where(np.mod(x, 2.0) == 1.0, -1.0, 1.0)
        main = _zeta_pos(x, np.where(neg, q + (fl + 1.0), q),
                         ~neg if x0.dtype == np.float32 else False)
        lead = odd * (_zeta_pos(x, f) - _zeta_pos(x, np.where(neg, r + 1.0, 2.0)))
        out = np.where(neg, lead + main, main)
        out = np.where(neg & (x != np.floor(x)), np.nan, out)
        out = np.where((q <= 0) & (q == np.floor(q)), np.inf, out)
        out = np.where(x < 1, np.nan, out)
        return np.where(x == 1, np.inf, out)


def _zeta_vjp(b: Any, n: Any, g: Any) -> list:
    """``derivatives.yaml``: ``other: grad * -self * zeta(self + 1, other)``; ``self`` is
    ``not_implemented("zeta")``, raised as PyTorch's backward raises it (only when that
    gradient is needed: a constant or non-differentiable ``x`` is fine)."""
    x, q = n.inputs
    if _wants(x):
        raise NotImplementedError("the derivative for 'zeta' is not implemented.")
    if not _wants(q):
        return [None, None]
    up = b.op("zeta", (b.add(x, _c(b, 1.0, n)), q))
    return [None, b.mul(g, b.mul(b.neg(x), up))]


# -- ndtri (Cephes, ATen's ``calc_ndtri``, in the operand's precision) ----------------------
# highest degree first (polevl's order), the denominators with their leading 1
NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
            1.39312609387279679503E1, -1.23916583867381258016E0)
NDTRI_Q0 = (1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
            -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
            1.59056225126211695515E1, -1.18331621121330003142E0)
NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
            4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
            -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
NDTRI_Q1 = (1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
            1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
            -3.80806407691578277194E-2, -9.33259480895457427372E-4)
NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
            1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
            3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
NDTRI_Q2 = (1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
            2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
            2.89247864745380683936E-6, 6.79019408009981274425E-9)
NDTRI_EXPM2 = 0.13533528323661269189  # exp(-2): the central interval is |y - 1/2| < 1/2 - this
SQRT_2PI = 2.50662827463100050242


def _ndtri_ref(y0: np.ndarray) -> np.ndarray:
    """ATen's ``calc_ndtri``: the central rational in ``(y - 1/2)^2``, otherwise
    ``z = sqrt(-2 log y)`` with ``z - log(z)/z`` less a rational in ``1/z`` (two intervals);
    the upper tail by symmetry. -inf at 0, inf at 1, NaN outside [0, 1]."""
    t = y0.dtype.type
    one, e2 = t(1), t(NDTRI_EXPM2)
    with np.errstate(all="ignore"):
        upper = y0 > one - e2
        y = np.where(upper, one - y0, y0)
        c = y - t(0.5)
        c2 = c * c
        central = _fma(c, c2 * _polevl_fma(c2, NDTRI_P0) / _polevl_fma(c2, NDTRI_Q0), c)
        central = central * t(SQRT_2PI)
        # ATen's ::log and ::sqrt are the C library's double functions, also for float
        z = np.sqrt(-2.0 * np.log(_f64(y))).astype(t)
        zd = _f64(z)
        z0 = (zd - np.log(zd) / zd).astype(t)
        iz = one / z
        near = iz * _polevl_fma(iz, NDTRI_P1) / _polevl_fma(iz, NDTRI_Q1)
        far = iz * _polevl_fma(iz, NDTRI_P2) / _polevl_fma(iz, NDTRI_Q2)
        tail = z0 - np.where(z < t(8), near, far)
        out = np.where(y > e2, central, np.where(upper, tail, -tail))
        out = np.where((y0 < 0) | (y0 > 1), t(np.nan), out)
        out = np.where(y0 == 0, t(-np.inf), out)
        return np.where(y0 == 1, t(np.inf), out)


# -- erfcx -------------------------------------------------------------------------------------
# erfcx(x) for 0 <= x <= 50 in y = 4 / (4 + x): piece k covers y in [k/8, (k+1)/8], a
# polynomial in t = 16 (y - mid) = 16 (4 (1 - mid) - mid x) / (4 + x) (computed so, t keeps
# its relative accuracy); (mid, low part of the constant term, coefficients lowest degree
# first). Chebyshev interpolants of degree 13 fitted with mpmath at 40 digits: within 1.7 ulp
# of erfcx in float64 with this evaluation.
ERFCX_Y8 = (
    (0.0625, 5.488223396496315e-19, (
        0.009401854275176388, 0.010025860758140367, 0.0006639391053357926,
        4.238742751504153e-05, 2.599094654032971e-06, 1.5235011484087817e-07,
        8.485127429021571e-09, 4.4536139933448484e-10, 2.1774790030628788e-11,
        9.741920753507883e-13, 3.8695766296426514e-14, 1.275328128941156e-15,
        3.1606986859535976e-17, -5.399274354735488e-19)),
    (0.1875, 2.9077969419619655e-18, (
        0.03249549852096859, 0.013287478769312754, 0.0009952096579923034, 7.09261214316059e-05,
        4.785298094038022e-06, 3.0365385385708717e-07, 1.7964240270782826e-08,
        9.786624914857567e-10, 4.818527900114586e-11, 2.0772621502449994e-12,
        7.353413863110904e-14, 1.7741784548224338e-15, -8.4839014835956265e-19,
        -2.803501149423733e-18)),
    (0.3125, 1.4937904010486778e-18, (
        0.06370627381391525, 0.018300794804746688, 0.0015649717445922748,
        0.00012487570860418763, 9.23712158800557e-06, 6.278514702748968e-07,
        3.873073336645294e-08, 2.128326656652704e-09, 1.010049035473728e-10,
        3.895099530228731e-12, 1.0339534160273865e-13, 3.9886723960748743e-16,
        -1.356863326215862e-16, -7.39466790509897e-18)),
    (0.4375, -5.192488936750986e-18, (
        0.10773742041343877, 0.026413509019428006, 0.0025970707848590137,
        0.00023147904874661372, 1.856562882117783e-05, 1.3253317566602184e-06,
        8.280097832222834e-08, 4.402390121913403e-09, 1.8886506456931317e-10,
        5.724328632301385e-12, 5.884829054449462e-14, -5.2101524849822964e-15,
        -3.1754788059415134e-16, -4.153421509198738e-18)),
    (0.5625, 4.7713857021307565e-18, (
        0.1731499287561747, 0.040297744286536555, 0.004560742683606897, 0.0004491007117924808,
        3.82548130467947e-05, 2.7851833125239742e-06, 1.6953534950143854e-07,
        8.269179784767552e-09, 2.930110802526144e-10, 5.177219883867236e-12,
        -1.41391899985779e-13, -1.2608897778208633e-14, -2.1633877801029073e-16,
        1.3367954400058799e-17)),
    (0.6875, 2.532620678662638e-17, (
        0.276294382840337, 0.06541345872575356, 0.008443069441392824, 0.0008988531292810258,
        7.89407294119051e-05, 5.654394757282416e-06, 3.2092921682597636e-07,
        1.3496772975181416e-08, 3.4304670774658227e-10, -6.16855474297804e-13,
        -4.3631858796183426e-13, -1.2033120881874187e-14, 3.122772941607449e-16,
        2.3359896899611412e-17)),
    (0.8125, 2.1478522833679804e-17, (
        0.4495507494854673, 0.11301844142639447, 0.016269816703811602, 0.0018160658777067215,
        0.00015889492715958012, 1.078788055437296e-05, 5.462702699789451e-07,
        1.84246785319608e-08, 2.4091043836989724e-10, -1.1191758920277814e-11,
        -5.704137650835435e-13, 1.6153506245889088e-15, 7.41232827687894e-16,
        5.571229087339808e-18)),
    (0.9375, -3.801804276352105e-17, (
        0.758120332208753, 0.20595152305801795, 0.03198658058001882, 0.003616824516355491,
        0.00030492605064563245, 1.8971686330797664e-05, 8.21828666543075e-07,
        2.014761471285012e-08, -5.514639570078041e-11, -2.0933874015587284e-11,
        -3.4145164733619713e-13, 1.8340485586635262e-14, 5.324012967517688e-16,
        -1.9956046178646707e-17)),
)
# x above which piece k (k = 0 ... 6) applies: 32 / (k + 1) - 4; below the last, piece 7
ERFCX_SPLITS = tuple(32.0 / (k + 1) - 4.0 for k in range(7))
ERFCX_ISPI = 0.56418958354775628694807945156  # 1 / sqrt(pi)


def _erfcx_pos(x: np.ndarray) -> np.ndarray:
    """erfcx for float64 ``0 <= x``: the pieces up to 50, ATen's continued fraction
    (5 terms) to 5e7 and ``1 / (sqrt(pi) x)`` beyond."""
    with np.errstate(all="ignore"):
        out = np.zeros_like(x)
        for k, (mid, lo, co) in enumerate(ERFCX_Y8):
            t = (np.float64(16.0) * (np.float64(4.0 * (1.0 - mid)) - mid * x)) / (4.0 + x)
            p = _polevl(t, co[:0:-1])
            v = co[0] + (p * t + lo)
            above = ERFCX_SPLITS[k] if k < 7 else -np.inf
            upto = ERFCX_SPLITS[k - 1] if k else np.inf
            out = np.where((x > above) & (x <= upto), v, out)
        out = np.where(x > 50.0, _erfcx_far(x), out)
        return np.where(x > 5e7, ERFCX_ISPI / x, out)


def _erfcx_far(x: np.ndarray) -> np.ndarray:
    """ATen's 5-term continued fraction for ``x > 50``, in ``x``'s dtype (fused as compiled):
    ``(1/sqrt(pi)) (x^2 (x^2 + 4.5) + 2) / (x (x^2 (x^2 + 5) + 3.75))``."""
    t = x.dtype.type
    with np.errstate(all="ignore"):
        x2 = x * x
        num = t(ERFCX_ISPI) * _fma(x2, x2 + t(4.5), t(2))
        return num / (x * _fma(x2, x2 + t(5), t(3.75)))


def _erfcx_ref(x0: np.ndarray) -> np.ndarray:
    """ATen's ``calc_erfcx`` outside its table: for ``x < 0``, ``2 exp(x^2) - erfcx(-x)``
    (``x^2`` rounded in the operand's dtype, as ATen squares it), ``2 exp(x^2)`` below -6.1
    and inf below -26.7; float32 rounded from float64 but beyond 50, where ATen's continued
    fraction is float32 arithmetic (so the gradient ``2 x erfcx - 2/sqrt(pi)``, which cancels
    there, is PyTorch's)."""
    t = x0.dtype.type
    x = _f64(x0)
    with np.errstate(all="ignore"):
        xx = _f64(x0 * x0)  # rounded as ATen's x * x in the operand's type
        e2 = 2.0 * np.exp(xx)
        if x0.dtype == np.float32:
            e2 = _f64((2 * np.exp(xx).astype(np.float32)).astype(np.float32))
        pos = _erfcx_pos(np.abs(x))
        if x0.dtype == np.float32:  # ATen's float32 continued fraction beyond 50
            ax = np.abs(x0)
            far = np.where(ax > 5e7, np.float32(ERFCX_ISPI) / ax, _erfcx_far(ax))
            pos = np.where(np.abs(x) > 50.0, _f64(far), pos)
        neg = np.where(x < -6.1, e2, e2 - pos)
        out = np.where(x >= 0, pos, np.where(x < -26.7, np.inf, neg))
        return np.where(np.isnan(x), x, out).astype(t)


def _erfcx_vjp(b: Any, n: Any, g: Any) -> list:
    """``(2 x erfcx(x) - 2 / sqrt(pi)) grad``."""
    x = n.inputs[0]
    d = b.sub(b.mul(b.mul(_c(b, 2.0, n), x), n), _c(b, 2.0 * ERFCX_ISPI, n))
    return [b.mul(d, g)]


# -- i0e, i1e, modified_bessel_i1: ATen's Chebyshev series (graphc/ir/special.py's tables) --
def _ie_ref(x: np.ndarray, order: int) -> np.ndarray:
    """ATen's ``calc_i0e`` / ``calc_i1e``: the series of ``calc_i0`` / ``calc_i1`` without
    their ``exp(|x|)`` (``chbevl(...) * x`` for i1e, odd)."""
    t = x.dtype.type
    bits = 32 if x.dtype == np.float32 else 64
    ca, cb = (I0_A, I0_B) if order == 0 else (I1_A[bits], I1_B[bits])
    a = np.abs(x)
    with np.errstate(all="ignore"):
        near = _chbevl(a / t(2) - t(2), ca)
        near = near * a if order else near
        far = _chbevl(t(32) / a - t(2), cb) / _in_f64(np.sqrt, a)
        out = np.where(a <= t(8), near, far)
    return np.where(x < 0, -out, out) if order else out


def _mod_i1_ref(x: np.ndarray) -> np.ndarray:
    """ATen's ``modified_bessel_i1_forward``: ``calc_i1``'s series with the float64 tables in
    both precisions, as ``(series * |x|) * exp(|x|)`` near 0 (odd)."""
    t = x.dtype.type
    a = np.abs(x)
    with np.errstate(all="ignore"):
        e = _in_f64(np.exp, a)
        near = (_chbevl(a / t(2) - t(2), I1_A[64]) * a) * e
        far = e * _chbevl(t(32) / a - t(2), I1_B[64]) / _in_f64(np.sqrt, a)
        out = np.where(a <= t(8), near, far)
    return np.where(x < 0, -out, out)


def _i0e_vjp(b: Any, n: Any, g: Any) -> list:
    """``grad * (i1e(x) - sgn(x) * i0e(x))``."""
    x = n.inputs[0]
    return [b.mul(g, b.sub(b.op("i1e", (x,)), b.mul(b.op("sign", (x,)), n)))]


def _i1e_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``i1e_backward``: ``g (i0e(x) - i1e(x) (sgn(x) + 1/x))`` with ``x`` replaced by
    eps where ``|x| <= eps`` and the limit 1/2 there."""
    x = n.inputs[0]
    eps = _c(b, float(np.finfo(n.dtype.np).eps), n)
    big = b.op("gt", (b.op("abs", (x,)), eps))
    safe = b.where(big, x, eps)
    inner = b.add(b.op("sign", (safe,)), b.div(_c(b, 1.0, n), safe))
    gradx = b.sub(b.op("i0e", (safe,)), b.mul(n, inner))
    return [b.mul(g, b.where(big, gradx, _c(b, 0.5, n)))]


# -- K0, K1 (Cephes k0 / k1, ATen's ``modified_bessel_k0_forward`` ...) -----------------------
# Chebyshev series of K0(x) + log(x/2) I0(x) in x^2 - 2 on [0, 2] (A) and of exp(x) sqrt(x)
# K0(x) in 8/x - 2 on (2, inf) (B); likewise for x K1(x) - x log(x/2) I1(x) and K1
K0_A = (1.37446543561352307156e-16, 4.25981614279661018399e-14, 1.03496952576338420167e-11,
        1.90451637722020886025e-09, 2.53479107902614945675e-07, 2.28621210311945178607e-05,
        1.26461541144692592338e-03, 3.59799365153615016266e-02, 3.44289899924628486886e-01,
        -5.35327393233902768720e-01)
K0_B = (5.30043377268626276149e-18, -1.64758043015242134646e-17, 5.21039150503902756861e-17,
        -1.67823109680541210385e-16, 5.51205597852431940784e-16, -1.84859337734377901440e-15,
        6.34007647740507060557e-15, -2.22751332699166985548e-14, 8.03289077536357521100e-14,
        -2.98009692317273043925e-13, 1.14034058820847496303e-12, -4.51459788337394416547e-12,
        1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10,
        -1.69753450938905987466e-09, 8.57403401741422608519e-09, -4.66048989768794782956e-08,
        2.76681363944501510342e-07, -1.83175552271911948767e-06, 1.39498137188764993662e-05,
        -1.28495495816278026384e-04, 1.56988388573005337491e-03, -3.14481013119645005427e-02,
        2.44030308206595545468e+00)
K1_A = (-7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13,
        -1.41148839263352776110e-10, -2.21338763073472585583e-08, -2.43340614156596823496e-06,
        -1.73028895751305206302e-04, -6.97572385963986435018e-03, -1.22611180822657148235e-01,
        -3.53155960776544875667e-01, 1.52530022733894777053e+00)
K1_B = (-5.75674448366501715755e-18, 1.79405087314755922667e-17, -5.68946255844285935196e-17,
        1.83809354436663880070e-16, -6.05704724837331885336e-16, 2.03870316562433424052e-15,
        -7.01983709041831346144e-15, 2.47715442448130437068e-14, -8.97670518232499435011e-14,
        3.34841966607842919884e-13, -1.28917396095102890680e-12, 5.13963967348173025100e-12,
        -2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10,
        2.01504975519703286596e-09, -1.03457624656780970260e-08, 5.74108412545004946722e-08,
        -3.50196060308781257119e-07, 2.40648494783721712015e-06, -1.93619797416608296024e-05,
        1.95215518471351631108e-04, -2.85781685962277938680e-03, 1.03923736576817238437e-01,
        2.72062619048444266945e+00)


def _i0_same(x: np.ndarray) -> np.ndarray:
    """``calc_i0`` (= ``modified_bessel_i0_forward``) with the fused Clenshaw steps."""
    t = x.dtype.type
    a = np.abs(x)
    with np.errstate(all="ignore"):
        e = _in_f64(np.exp, a)
        near = e * _chbevl(a / t(2) - t(2), I0_A)
        far = e * _chbevl(t(32) / a - t(2), I0_B) / _in_f64(np.sqrt, a)
    return np.where(a <= t(8), near, far)


def _k_ref(x: np.ndarray, order: int, scaled: bool) -> np.ndarray:
    """ATen's ``(scaled_)modified_bessel_k{0,1}_forward``: up to 2 the series in ``x^2 - 2``
    combined with ``log(x/2) I(x)`` (K0's logarithm and difference in float64 even for
    float32, as ATen's ``std::log(0.5 * x)`` promotes), beyond 2 ``exp(-x) B(8/x - 2) /
    sqrt(x)`` (without ``exp(-x)`` when scaled, the near branch times ``exp(x)``). inf at 0,
    NaN below."""
    t = x.dtype.type
    with np.errstate(all="ignore"):
        sa = _chbevl(_fma(x, x, -t(2)), K0_A if order == 0 else K1_A)
        half_x = t(0.5) * x
        if order == 0:
            if scaled:
                near = _fma(-_in_f64(np.log, half_x), _i0_same(x), sa)
            else:  # ATen: T(0.5) * (a - p) - std::log(0.5 * x) * i0(x), in double
                near = _fma(-np.log(0.5 * _f64(x)), _f64(_i0_same(x)), _f64(sa)).astype(t)
        else:
            near = _fma(_in_f64(np.log, half_x), _mod_i1_ref(x), sa / x)
        sb = _chbevl(t(8) / x - t(2), K0_B if order == 0 else K1_B)
        if scaled:
            near = near * _in_f64(np.exp, x)
            far = sb / _in_f64(np.sqrt, x)
        else:
            far = _in_f64(np.exp, -x) * sb / _in_f64(np.sqrt, x)
        out = np.where(x <= t(2), near, far)
        out = np.where(x < 0, t(np.nan), out)
        return np.where(x == 0, t(np.inf), out)


# -- J0, J1, Y0, Y1 (Cephes j0.c / j1.c as ATen has them) -----------------------------------
# highest degree first; ATen's loops drop the leading 1 of Cephes' p1evl denominators (RQ, QQ,
# YQ): these are its polynomials
J0_PP = (7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00,
         5.44725003058768775090e+00, 8.74716500199817011941e+00, 5.30324038235394892183e+00,
         9.99999999999999997821e-01)
J0_PQ = (9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00,
         5.47097740330417105182e+00, 8.76190883237069594232e+00, 5.30605288235394617618e+00,
         1.00000000000000000218e+00)
J0_QP = (-1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01,
         -9.32060152123768231369e+01, -1.77681167980488050595e+02, -1.47077505154951170175e+02,
         -5.14105326766599330220e+01, -6.05014350600728481186e+00)
J0_QQ = (6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03,
         7.24046774195652478189e+03, 5.93072701187316984827e+03, 2.06209331660327847417e+03,
         2.42005740240291393179e+02)
J0_RP = (-4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14,
         9.70862251047306323952e+15)
J0_RQ = (4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07,
         1.11855537045356834862e+10, 2.11277520115489217587e+12, 3.10518229857422583814e+14,
         3.18121955943204943306e+16, 1.71086294081043136091e+18)
J0_DR = (5.78318596294678452118e+00, 3.04712623436620863991e+01)  # squares of J0's zeros
Y0_YP = (1.55924367855235737965e+04, -1.46639295903971606143e+07, 5.43526477051876500413e+09,
         -9.82136065717911466409e+11, 8.75906394395366999549e+13, -3.46628303384729719441e+15,
         4.42733268572569800351e+16, -1.84950800436986690637e+16)
Y0_YQ = (1.04128353664259848412e+03, 6.26107330137134956842e+05, 2.68919633393814121987e+08,
         8.64002487103935000337e+10, 2.02979612750105546709e+13, 3.17157752842975028269e+15,
         2.50596256172653059228e+17)
J1_PP = (7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00,
         5.11207951146807644818e+00, 8.42404590141772420927e+00, 5.21451598682361504063e+00,
         1.00000000000000000254e+00)
J1_PQ = (5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00,
         5.07386386128601488557e+00, 8.39985554327604159757e+00, 5.20982848682361821619e+00,
         9.99999999999999997461e-01)
J1_QP = (5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01,
         3.66779609360150777800e+02, 7.10856304998926107277e+02, 5.97489612400613639965e+02,
         2.11688757100572135698e+02, 2.52070205858023719784e+01)
J1_QQ = (7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03,
         9.56231892404756170795e+03, 7.99704160447350683650e+03, 2.82619278517639096600e+03,
         3.36093607810698293419e+02)
J1_RP = (-8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13,
         3.68295732863852883286e+15)
J1_RQ = (6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07,
         2.21511595479792499675e+10, 4.74914122079991414898e+12, 7.84369607876235854894e+14,
         8.95222336184627338078e+16, 5.32278620332680085395e+18)
J1_Z = (1.46819706421238932572e+01, 4.92184563216946036703e+01)  # squares of J1's zeros
Y1_YP = (1.26320474790178026440e+09, -6.47355876379160291031e+11, 1.14509511541823727583e+14,
         -8.12770255501325109621e+15, 2.02439475713594898196e+17, -7.78877196265950026825e+17)
Y1_YQ = (5.94301592346128195359e+02, 2.35564092943068577943e+05, 7.34811944459721705660e+07,
         1.87601316108706159478e+10, 3.88231277496238566008e+12, 6.20557727146953693363e+14,
         6.87141087355300489866e+16, 3.97270608116560655612e+18)
PIO4 = 0.785398163397448309615660845819875721
THPIO4 = 2.356194490192344928846982537459627163
SQ2OPI = 0.797884560802865355879892119868763737  # sqrt(2 / pi)
TWOOPI = 0.636619772367581343075535053490057448  # 2 / pi


def _far(x: np.ndarray, order: int, kind: str) -> np.ndarray:
    """The Hankel asymptotic form beyond 5: ``(P cos(x - phase) -+ 5/x Q sin(...)) sqrt(2/pi)
    / sqrt(x)`` for J (sin / cos swapped and ``+`` for Y), P and Q rational in 25/x^2."""
    t = x.dtype.type
    pp, pq, qp, qq = ((J0_PP, J0_PQ, J0_QP, J0_QQ) if order == 0
                      else (J1_PP, J1_PQ, J1_QP, J1_QQ))
    z = t(25) / (x * x) if order == 0 else t(5) / x * (t(5) / x)
    p = _polevl_fma(z, pp) / _polevl_fma(z, pq)
    q = t(5) / x * (_polevl_fma(z, qp) / _polevl_fma(z, qq))
    arg = x - t(PIO4 if order == 0 else THPIO4)
    s, c = _in_f64(np.sin, arg), _in_f64(np.cos, arg)
    v = _fma(p, c, -(q * s)) if kind == "j" else _fma(p, s, q * c)
    return v * t(SQ2OPI) / _in_f64(np.sqrt, x)


def _j0_ref(x0: np.ndarray) -> np.ndarray:
    t = x0.dtype.type
    x = np.abs(x0)
    with np.errstate(all="ignore"):
        z = x * x
        near = ((z - t(J0_DR[0])) * (z - t(J0_DR[1])) * _polevl_fma(z, J0_RP)
                / _polevl_fma(z, J0_RQ))
        near = np.where(x < t(1e-5), t(1) - z / t(4), near)
        return np.where(x <= t(5), near, _far(x, 0, "j"))


def _j1_ref(x0: np.ndarray) -> np.ndarray:
    t = x0.dtype.type
    x = np.abs(x0)
    with np.errstate(all="ignore"):
        z = x * x
        near = (_polevl_fma(z, J1_RP) / _polevl_fma(z, J1_RQ) * x * (z - t(J1_Z[0]))
                * (z - t(J1_Z[1])))
        out = np.where(x <= t(5), near, _far(x, 1, "j"))
    return np.where(x0 < 0, -out, out)


def _y0_ref(x: np.ndarray) -> np.ndarray:
    t = x.dtype.type
    with np.errstate(all="ignore"):
        z = x * x
        near = _fma(t(TWOOPI) * _in_f64(np.log, x), _j0_ref(x),
                    _polevl_fma(z, Y0_YP) / _polevl_fma(z, Y0_YQ))
        near = np.where(x < 0, t(np.nan), np.where(x == 0, t(-np.inf), near))
        return np.where(x <= t(5), near, _far(x, 0, "y"))


def _y1_ref(x: np.ndarray) -> np.ndarray:
    t = x.dtype.type
    with np.errstate(all="ignore"):
        z = x * x
        inner = _fma(_j1_ref(x), _in_f64(np.log, x), -(t(1) / x))
        near = _fma(x, _polevl_fma(z, Y1_YP) / _polevl_fma(z, Y1_YQ), t(TWOOPI) * inner)
        near = np.where(x < 0, t(np.nan), np.where(x == 0, t(-np.inf), near))
        return np.where(x <= t(5), near, _far(x, 1, "y"))


# -- airy_ai (Cephes airy.c as ATen has it) ---------------------------------------------------
AIRY_AN = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
           1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
           1.40264691163389668864e+01, 9.99999999999999995305e-01)
AIRY_AD = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
           1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
           1.40959135607834029598e+01, 1.00000000000000000470e+00)
AIRY_AFN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
            -2.79779981545119124951e-01, -4.91900132609500318020e-02,
            -4.06265923594885404393e-03, -1.59276496239262096340e-04,
            -2.77649108155232920844e-06, -1.67787698489114633780e-08)
AIRY_AFD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
            9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
            4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07)
AIRY_AGN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
            9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
            5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
            8.11789239554389293311e-08, 3.41551784765923618484e-10)
AIRY_AGD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
            5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
            4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
            4.91834570062930015649e-09)
AIRY_C1, AIRY_C2 = 0.355028053887817239260, 0.258819403792806798405  # Ai(0), -Ai'(0)
SQPII = 5.64189583547756286948e-01  # 1 / sqrt(pi)
# the power series' steps until its term is below eps of the partial sum, for |x| < 2.09:
# most near the series' zero at x = -1.9863, where the sum cancels (11 in float32, every
# float there; 16 in float64, sampled: tests/test_special_more.py counts them), with margin
AIRY_STEPS = {32: 13, 64: 20}


def _airy_series(x: np.ndarray) -> np.ndarray:
    """ATen's Maclaurin series ``c1 f(x) - c2 g(x)`` (f and g in x^3), each lane stopping once
    ``|m / f|`` is at or below the dtype's eps."""
    t = x.dtype.type
    eps = t(np.finfo(x.dtype).eps)
    f, g, k = np.ones_like(x), x.copy(), np.ones_like(x)
    m, n = np.ones_like(x), x.copy()
    z = x * x * x
    live = np.ones(x.shape, bool)
    for _ in range(AIRY_STEPS[32 if x.dtype == np.float32 else 64]):
        m2 = m * z
        k2 = k + t(1)
        m2 = m2 / k2
        n2 = n * z
        k2 = k2 + t(1)
        n2 = n2 / k2
        m2 = m2 / k2
        f2 = f + m2
        k2 = k2 + t(1)
        n2 = n2 / k2
        g2 = g + n2
        m, n, k = np.where(live, m2, m), np.where(live, n2, n), np.where(live, k2, k)
        f, g = np.where(live, f2, f), np.where(live, g2, g)
        live &= np.abs(m / f) > eps
    return _fma(t(AIRY_C1), f, -(t(AIRY_C2) * g))


def _airy_ref(x: np.ndarray) -> np.ndarray:
    """ATen's ``airy_ai_forward``: the oscillatory asymptotic form below -2.09, the decaying
    one from 2.09 (0 beyond 103.892), the power series between; NaN at +-inf."""
    t = x.dtype.type
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        zeta = t(2) * ax * _in_f64(np.sqrt, ax) / t(3)
        # below -2.09 (zeta from -x, as ATen's -2 x sqrt(-x) / 3)
        z = t(1) / zeta
        zz = z * z
        fr = zz * _polevl_fma(zz, AIRY_AFN) / _polevl_fma(zz, AIRY_AFD)
        gr = z * _polevl_fma(zz, AIRY_AGN) / _polevl_fma(zz, AIRY_AGD)
        ph = zeta + t(0.25) * t(math.pi)
        osc = t(SQPII) / _in_f64(np.sqrt, _in_f64(np.sqrt, ax)) * _fma(
            _in_f64(np.sin, ph), t(1) + fr, -(_in_f64(np.cos, ph) * gr))
        # from 2.09
        iz = t(1) / zeta
        ai = t(SQPII) * (_polevl_fma(iz, AIRY_AN) / _polevl_fma(iz, AIRY_AD)) / (
            t(2) * _in_f64(np.sqrt, _in_f64(np.sqrt, ax)) * _in_f64(np.exp, zeta))
        out = np.where(x < t(-2.09), osc, np.where(x >= t(2.09), ai, _airy_series(x)))
        out = np.where(x > t(103.892), t(0), out)
        return np.where(np.isinf(x), t(np.nan), out)


# -- the orthogonal polynomials (ATen's ``*_polynomial_*_forward``) ---------------------------
POLYNOMIALS = ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
               "chebyshev_polynomial_w", "shifted_chebyshev_polynomial_t",
               "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
               "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
               "laguerre_polynomial_l", "legendre_polynomial_p")
# ATen's degree limits of the Hermite recurrences (NaN above)
HERMITE_LIMIT = {32: 128, 64: 512}
# the closed forms' thresholds: Chebyshev T from n > 6, U V W from n > 8; shifted T U V from
# n > 6, W from n > 4 (on |x| < 1, resp. |2x - 1| < 1)
CLOSED_FROM = {"t": 6, "u": 8, "v": 8, "w": 8, "st": 6, "su": 6, "sv": 6, "sw": 4}
INT64_MIN = -(2 ** 63)


def _degree(n: np.ndarray) -> np.ndarray:
    """``static_cast<int64_t>(n)`` as x86-64 computes it: truncation, and INT64_MIN (so a
    negative degree, result 0) for NaN, infinities and magnitudes from 2^63."""
    with np.errstate(invalid="ignore"):
        ok = np.abs(n) < 2.0 ** 63
        return np.where(ok, np.where(ok, n, 0).astype(np.int64), INT64_MIN)


def poly_setup(name: str) -> tuple[str, str]:
    """(family, kind): ``cheb`` with kind t/u/v/w (``s`` prefixed for the shifted ones),
    ``herm`` h/he, ``lag``, ``leg``."""
    if "chebyshev" in name:
        return "cheb", ("s" if name.startswith("shifted") else "") + name[-1]
    if name.startswith("hermite"):
        return "herm", name.rsplit("_", 1)[1]
    return ("lag", "l") if name.startswith("laguerre") else ("leg", "p")


def _recurrence(count: np.ndarray, p: np.ndarray, q: np.ndarray, step: Any, k0: int, dk: int,
                nan_stop: bool) -> np.ndarray:
    """ATen's loop ``r = step(k, p, q); p = q; q = r`` for ``count`` steps per lane with
    ``k = k0, k0 + dk, ...`` (stopping a lane whose ``q`` is NaN when ``nan_stop``); ``q``
    at the end (the initial ``q`` for lanes that take no step)."""
    t = q.dtype.type
    i = 0
    with np.errstate(all="ignore"):
        while True:
            live = i < count
            if nan_stop:
                live &= ~np.isnan(q)
            if not live.any():
                return q
            r = step(t(k0 + dk * i), p, q)
            p, q = np.where(live, q, p), np.where(live, r, q)
            i += 1


def _poly_ref(name: str) -> Any:
    family, kind = poly_setup(name)

    def ref(x: np.ndarray, n0: np.ndarray) -> np.ndarray:
        x, n0 = np.broadcast_arrays(x, n0)  # the interpreter may pass unexpanded operands
        t = x.dtype.type
        n = _degree(n0)
        nf = n.astype(x.dtype)
        one = np.ones_like(x)
        even = n % 2 == 0
        with np.errstate(all="ignore"):
            if family == "cheb":
                shifted = kind.startswith("s")
                y = x + x - t(1) if shifted else x
                two_y = y + y
                q0 = {"t": y, "u": two_y, "v": two_y - t(1), "w": two_y + t(1)}[kind[-1]]
                special = (x == t(1)) | (x == t(0)) if shifted else np.abs(x) == t(1)
                closed = (n > CLOSED_FROM[kind]) & (np.abs(y) < t(1))
                count = np.where(special | closed | (n < 2), 0, n - 1)
                out = _recurrence(count, one, q0, lambda k, p, q: _fma(two_y, q, -p), 2, 1,
                                  True)
                out = np.where(closed, _chebyshev_closed(kind, y, n, nf), out)
                out = np.where(n == 1, q0, np.where(n == 0, t(1), out))
                out = np.where(special, _chebyshev_ends(kind, x, n), out)
            elif family == "herm":
                q0 = x + x if kind == "h" else x
                count = np.where(n < 2, 0, n - 1)
                if kind == "h":
                    step = lambda k, p, q: _fma(x + x, q, -(k * p))  # noqa: E731
                    k0, dk = 2, 2
                else:
                    step = lambda k, p, q: _fma(x, q, -(k * p))  # noqa: E731
                    k0, dk = 1, 1
                limit = HERMITE_LIMIT[32 if x.dtype == np.float32 else 64]
                count = np.where(n > limit, 0, count)
                out = _recurrence(count, one, q0, step, k0, dk, False)
                out = np.where(n > limit, t(np.nan), out)
                out = np.where(n == 1, q0, np.where(n == 0, t(1), out))
            else:
                q0 = t(1) - x if family == "lag" else x
                special = x == 0 if family == "lag" else np.abs(x) == t(1)
                count = np.where(special | (n < 2), 0, n - 1)
                if family == "lag":
                    def step(k: Any, p: Any, q: Any) -> Any:
                        return _fma(t(2) * k + (t(1) - x), q, -(k * p)) / (k + t(1))
                else:
                    def step(k: Any, p: Any, q: Any) -> Any:
                        return _fma((t(2) * k + t(1)) * x, q, -(k * p)) / (k + t(1))
                out = _recurrence(count, one, q0, step, 1, 1, True)
                out = np.where(n == 1, q0, np.where(n == 0, t(1), out))
                if family == "lag":
                    out = np.where(special, t(1), out)
                else:
                    out = np.where(special, np.where((x > 0) | even, t(1), t(-1)), out)
            return np.where(n < 0, t(0), out)

    ref.__name__ = f"_{name}_ref"
    ref.__doc__ = (f"ATen's ``{name}_forward``: its special cases and closed forms, then its "
                   "recurrence for the degree's number of steps (``_recurrence``).")
    return ref


def _chebyshev_closed(kind: str, y: np.ndarray, n: np.ndarray, nf: np.ndarray) -> np.ndarray:
    """The trigonometric forms ATen uses inside (-1, 1) for large degrees (``y`` the
    argument, shifted or not): ``cos(n a)``, ``sin((n+1) a) / sin(a)``, ``cos((n+1/2) a) /
    cos(a/2)``, ``sin((n+1/2) a) / sin(a/2)`` with ``a = acos(y)``, and ATen's fallbacks where
    the denominator is degenerate."""
    t = y.dtype.type
    a = _in_f64(np.arccos, y)
    sin, cos = (lambda v: _in_f64(np.sin, v)), (lambda v: _in_f64(np.cos, v))
    n1 = (n + 1).astype(y.dtype)
    sgn = np.where(n % 2 == 0, t(1), t(-1))
    base = kind[-1]
    if base == "t":
        return cos(nf * a)
    if base == "u":
        s = sin(a)
        return np.where(s != 0, sin(n1 * a) / s, n1 * cos(n1 * a) / y)
    half = a / t(2)
    nh = nf + t(0.5)
    two_n1 = (2 * n + 1).astype(y.dtype)
    if base == "v":
        return np.where(sin(half) != t(1), cos(nh * a) / cos(half), sgn * two_n1)
    # w: ATen's fallback at cos(a/2) == 1 (y next to 1) is 2n + 1 unshifted, +-1 shifted
    fallback = sgn if kind.startswith("s") else np.where(y > 0, two_n1, sgn)
    return np.where(cos(half) != t(1), sin(nh * a) / sin(half), fallback)


def _chebyshev_ends(kind: str, x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """ATen's values at +-1 (at 1 and 0 for the shifted polynomials)."""
    t = x.dtype.type
    even = n % 2 == 0
    sgn = np.where(even, t(1), t(-1))
    n1 = (n + 1).astype(x.dtype)
    two_n1 = (2 * n + 1).astype(x.dtype)
    top = x == t(1)  # +1 (shifted: x = 1); otherwise -1 (shifted: x = 0)
    if not kind.startswith("s"):
        top = x > 0
    base = kind[-1]
    if base == "t":
        return np.where(top, t(1), sgn)
    if base == "u":
        return np.where(top, n1, sgn * n1)
    if base == "v":
        return np.where(top, t(1), sgn * two_n1)
    return np.where(top, two_n1, sgn)


def _internal(name: str, ref: Any, vjp: Any, domain: str = "real", **kw: Any) -> OpDef:
    """A float-only unary primitive lowered to the ``vmath`` routine of the same name
    (no ``gc.<op>``: ``graphc.special`` exposes it)."""
    return _unary(name, float_only=True, domain=domain, ref=ref, vjp=vjp,
                  lower=lambda e, x: e.math(name, x), **kw)


def _bessel(name: str, ref: Any, domain: str = "real") -> OpDef:
    """A function PyTorch does not differentiate: its result never requires grad."""
    return _internal(name, ref, _no_grad, domain=domain, differentiable=False)


SPECIAL_MORE: tuple[OpDef, ...] = (
    # zeta(x, q): its own tests (x must not require grad; tests/test_ops.py has its case)
    _binary("zeta", float_only=True, ref=_zeta_ref, vjp=_zeta_vjp,
            lower=lambda e, x, q: e.math("zeta", x, q), extra={"own_tests": True}),
    _internal("ndtri", _ndtri_ref, lambda b, n, g: [b.mul(g, b.mul(
        _c(b, SQRT_2PI, n), b.op("exp", (b.mul(b.mul(n, n), _c(b, 0.5, n)),))))]),
    _internal("erfcx", _erfcx_ref, _erfcx_vjp),
    _internal("i0e", lambda x: _ie_ref(x, 0), _i0e_vjp),
    _internal("i1e", lambda x: _ie_ref(x, 1), _i1e_vjp),
    _bessel("modified_bessel_i1", _mod_i1_ref),
    _bessel("modified_bessel_k0", lambda x: _k_ref(x, 0, False), "pos"),
    _bessel("modified_bessel_k1", lambda x: _k_ref(x, 1, False), "pos"),
    _bessel("scaled_modified_bessel_k0", lambda x: _k_ref(x, 0, True), "pos"),
    _bessel("scaled_modified_bessel_k1", lambda x: _k_ref(x, 1, True), "pos"),
    _bessel("bessel_j0", _j0_ref),
    _bessel("bessel_j1", _j1_ref),
    _bessel("bessel_y0", _y0_ref, "pos"),
    _bessel("bessel_y1", _y1_ref, "pos"),
    _bessel("airy_ai", _airy_ref),
    # (x, n): tests/test_ops.py's cases give them integer degrees
    *(_binary(name, float_only=True, differentiable=False, ref=_poly_ref(name), vjp=_no_grad,
              lower=lambda e, x, n, name=name: e.math(name, x, n), extra={"own_tests": True})
      for name in POLYNOMIALS),
)
