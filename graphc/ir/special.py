"""Special functions as op-table entries with PyTorch's names: ``erfc``, ``erfinv``,
``lgamma``, ``digamma``, ``i0``, ``sinc``, ``logit``, ``deg2rad``, ``rad2deg`` and
``float_power`` (``gc.<op>``, ``Tensor.<op>`` and ``Tensor.<op>_``).

Why these algorithms: PyTorch's CPU kernels are the specification. Where ATen evaluates its
own series in the tensor's precision (``digamma``, ``polygamma(1, x)``, ``i0``, ``i1`` in
``aten/src/ATen/native/Math.h``), the references here and the ``codegen/vmath.py`` routines
follow the same algorithm in the same precision, so results (and the gradients built from
them) agree to an ulp or two rather than only to the function's true value, which ATen's
float32 series miss by more near their zeros. Where PyTorch calls an accurate library
(``erfc``, ``erfinv``, ``lgamma``: Sleef / MKL), graphc computes the function accurately
(fdlibm's erfc and lgamma, Giles' erfinv), float32 through float64.

The references are the oracles of the eager interpreter (numpy only: no scipy): ports of the
ATen series, Python's ``math.erfc`` (the C library's), fdlibm's lgamma and Giles' erfinv
refined by a Newton step on ``math.erf``/``math.erfc``. Derivatives are
``tools/autograd/derivatives.yaml``'s: erfc' = -2/sqrt(pi) exp(-x^2), erfinv' = sqrt(pi)/2
exp(erfinv(x)^2), lgamma' = digamma, digamma' = polygamma(1, x) (the internal primitive
``trigamma``, whose own rule is ``polygamma(2, x)`` through ``zeta`` as ATen computes it),
i0' = i1 (the internal primitive ``i1``, whose own rule is ATen's
``i1_backward``), ``sinc_backward`` and ``logit_backward``.
"""

from __future__ import annotations

import ctypes
import math
import struct
from typing import Any

import numpy as np

from ._ewlib import _c, _unary, composite
from .libm import libm
from .opdef import OpDef

_API = ("Tensor", "gc")
_PI = math.pi


def _special(name: str, ref: Any, vjp: Any, domain: str = "real", **kw: Any) -> OpDef:
    """A float-only unary primitive lowered to the ``vmath`` routine of the same name."""
    return _unary(name, float_only=True, domain=domain, ref=ref, vjp=vjp,
                  lower=lambda e, x: e.math(name, x), **kw)


def _hi_word(word: int) -> float:
    """The double whose high 32 bits are ``word`` and low bits 0 (fdlibm's interval ends)."""
    return struct.unpack(">d", struct.pack(">Q", word << 32))[0]


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64, copy=False)


def _in_f64(fn: Any, x: np.ndarray) -> np.ndarray:
    """``fn`` evaluated in float64 and rounded to float32 for a float32 ``x`` (ATen computes
    the transcendental parts of its float32 series with single-precision libm calls, which
    are correctly rounded but for rare cases); for a float64 ``x``, the C library's ``fn``,
    as ATen's double code calls (``ir.libm``: numpy's own SIMD functions differ from it in
    the last bit on AVX-512 hosts)."""
    return fn(_f64(x)).astype(np.float32) if x.dtype == np.float32 else libm(fn, x)


# -- erfc ------------------------------------------------------------------------------------
_erfc_scalar = np.frompyfunc(math.erfc, 1, 1)
_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erfc_ref(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erfc_scalar(_f64(x)), np.float64)


# -- erfinv ----------------------------------------------------------------------------------
# Giles' polynomials: (w below which it applies, shift, in sqrt(w)?, coefficients highest
# degree first); codegen/vmath.py emits the same
GILES = (
    (6.25, 3.125, False, (
        -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
        1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
        6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
        2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
        1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
        4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
        0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
        0.24015818242558961693, 1.6536545626831027356)),
    (16.0, 3.25, True, (
        2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
        1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
        2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
        6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
        0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
        -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
        3.0838856104922207635)),
    (np.inf, 5.0, True, (
        -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
        -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
        2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
        -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
        7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
        1.0103004648645343977, 4.8499064014085844221)),
)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(_PI)


def _polevl(x: np.ndarray, coeffs: Any) -> np.ndarray:
    """Horner's rule, highest degree first (Cephes' ``polevl``), in ``x``'s dtype."""
    t = x.dtype.type
    r = np.zeros_like(x)
    for c in coeffs:
        r = r * x + t(c)
    return r


def _erfinv_ref(y: np.ndarray) -> np.ndarray:
    """Giles' approximation, then one Newton step on ``erf(x) - |y|`` written as
    ``(1 - |y|) - erfc(x)`` above 1/2 (no cancellation near +-1): within about an ulp of
    the exact value in float64, where PyTorch's (MKL's) is too."""
    y = _f64(y)
    a = np.abs(y)
    w = -np.log((1 - a) * (1 + a))
    p = np.full_like(w, np.nan)
    for hi, shift, root, coeffs in reversed(GILES):
        arg = (np.sqrt(w) if root else w) - shift
        p = np.where(w < hi, _polevl(arg, coeffs), p)
    x = p * a
    fin = np.isfinite(x)
    xf = np.where(fin, x, 0.0)
    err = np.where(a <= 0.5, np.asarray(_erf_scalar(xf), np.float64) - a,
                   (1 - a) - np.asarray(_erfc_scalar(xf), np.float64))
    x = np.where(fin, x - err / (_TWO_OVER_SQRT_PI * np.exp(-xf * xf)), x)
    x = np.where(a == 1, np.inf, x)
    return np.where(a > 1, np.nan, np.copysign(x, y))


# -- lgamma (fdlibm e_lgamma_r.c, Sun Microsystems, freely distributable with its notice) ----
# Below 2 (after lgamma(x) = lgamma(x + 1) - log(x) below 0.9): three expansions, around 1
# or 2 (A, in y^2 split even/odd), around the minimum tc (T, three interleaved series in
# y^3), and a rational U/V; on [2, 8) a rational S/R in the fractional part plus the log of
# the recurrence's product; from 8 Stirling's series with the correction W(1/x). Lowest
# degree first.
_LG_A = (7.72156649015328655494e-02, 3.22467033424113591611e-01, 6.73523010531292681824e-02,
         2.05808084325167332806e-02, 7.38555086081402883957e-03, 2.89051383673415629091e-03,
         1.19270763183362067845e-03, 5.10069792153511336608e-04, 2.20862790713908385557e-04,
         1.08011567247583939954e-04, 2.52144565451257326939e-05, 4.48640949618915160150e-05)
_LG_TC, _LG_TF, _LG_TT = 1.46163214496836224576e+00, -1.21486290535849611461e-01, \
    -3.63867699703950536541e-18
_LG_T = (4.83836122723810047042e-01, -1.47587722994593911752e-01, 6.46249402391333854778e-02,
         -3.27885410759859649565e-02, 1.79706750811820387126e-02, -1.03142241298341437450e-02,
         6.10053870246291332635e-03, -3.68452016781138256760e-03, 2.25964780900612472250e-03,
         -1.40346469989232843813e-03, 8.81081882437654011382e-04, -5.38595305356740546715e-04,
         3.15632070903625950361e-04, -3.12754168375120860518e-04, 3.35529192635519073543e-04)
_LG_U = (-7.72156649015328655494e-02, 6.32827064025093366517e-01, 1.45492250137234768737e+00,
         9.77717527963372745603e-01, 2.28963728064692451092e-01, 1.33810918536787660377e-02)
_LG_V = (1.0, 2.45597793713041134822e+00, 2.12848976379893395361e+00, 7.69285150456672783825e-01,
         1.04222645593369134254e-01, 3.21709242282423911810e-03)
_LG_S = (-7.72156649015328655494e-02, 2.14982415960608852501e-01, 3.25778796408930981787e-01,
         1.46350472652464452805e-01, 2.66422703033638609560e-02, 1.84028451407337715652e-03,
         3.19475326584100867617e-05)
_LG_R = (1.0, 1.39200533467621045958e+00, 7.21935547567138069525e-01, 1.71933865632803078993e-01,
         1.86459191715652901344e-02, 7.77942496381893596434e-04, 7.32668430744625636189e-06)
_LG_W = (4.18938533204672725052e-01, 8.33333333333329678849e-02, -2.77777777728775536470e-03,
         7.93650558643019558500e-04, -5.95187557450339963135e-04, 8.36339918996282139126e-04,
         -1.63092934096575273989e-03)


# fdlibm's interval ends, as its high-word compares imply: below 0.9 (0x3feccccc), the
# splits of [0, 0.9) and [0.9, 2) into three expansions
LGAMMA_BELOW_09 = _hi_word(0x3feccccd)
LGAMMA_SPLITS_LO = (_hi_word(0x3FE76944), _hi_word(0x3FCDA661))
LGAMMA_SPLITS_HI = (_hi_word(0x3FFBB4C3), _hi_word(0x3FF3B4C4))
# the tables codegen/vmath.py emits: lowest degree first
LGAMMA = {"a": _LG_A, "t": _LG_T, "u": _LG_U, "v": _LG_V, "s": _LG_S, "r": _LG_R, "w": _LG_W,
          "tc": _LG_TC, "tf": _LG_TF, "tt": _LG_TT}


def _horner(x: np.ndarray, coeffs: Any) -> np.ndarray:
    """Horner's rule, lowest degree first (float64)."""
    r = np.full_like(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        r = r * x + c
    return r


def _lgamma_ref(x0: np.ndarray) -> np.ndarray:
    """fdlibm's lgamma in float64 (Python's ``math.lgamma`` is a Lanczos sum that loses
    most digits near 1 and 2, so it cannot be the oracle)."""
    x0 = _f64(x0)
    a = np.abs(x0)
    # |sin(pi a)|: a mod 2 = r exactly, r = k/2 + f with |f| <= 1/4
    r = a - 2 * np.floor(a * 0.5)
    k = np.rint(2 * r)
    f = np.pi * (r - 0.5 * k)
    sp = np.abs(np.where(k % 2 == 0, np.sin(f), np.cos(f)))
    nadj = np.log(np.pi / (sp * a))
    # below 2
    below = a < LGAMMA_BELOW_09
    i0 = np.where(below, a >= LGAMMA_SPLITS_LO[0], a >= LGAMMA_SPLITS_HI[0])
    i1 = np.where(below, a >= LGAMMA_SPLITS_LO[1], a >= LGAMMA_SPLITS_HI[1])
    y = np.where(below, np.where(i0, 1 - a, np.where(i1, a - (_LG_TC - 1), a)),
                 np.where(i0, 2 - a, np.where(i1, a - _LG_TC, a - 1)))
    z = y * y
    w3 = z * y
    c0 = (y * _horner(z, _LG_A[0::2]) + z * _horner(z, _LG_A[1::2])) - 0.5 * y
    q1, q2, q3 = (_horner(w3, _LG_T[j::3]) for j in range(3))
    c1 = _LG_TF + (z * q1 - (_LG_TT - w3 * (q2 + y * q3)))
    c2 = -0.5 * y + (y * _horner(y, _LG_U)) / _horner(y, _LG_V)
    small = np.where(below, -np.log(a), 0.0) + np.where(i0, c0, np.where(i1, c1, c2))
    # [2, 8): the rational in the fractional part and the recurrence's product
    fl = np.floor(a)
    yf = a - fl
    prod = np.ones_like(a)
    for i in range(2, 7):
        prod = np.where(fl > i, prod * (yf + i), prod)
    mid = 0.5 * yf + (yf * _horner(yf, _LG_S)) / _horner(yf, _LG_R) + np.log(prod)
    # from 8: Stirling's series
    lg = np.log(a)
    zi = 1 / a
    big = (a - 0.5) * (lg - 1) + (_LG_W[0] + zi * _horner(zi * zi, _LG_W[1:]))
    out = np.where(a < 2, small, np.where(a < 8, mid, np.where(a < 2.0 ** 58, big,
                                                               a * (lg - 1))))
    out = np.where((a == 1) | (a == 2), 0.0, out)
    tiny = a < 2.0 ** -70
    out = np.where(tiny, -lg, out)
    neg = (x0 < 0) & ~tiny
    out = np.where(neg, nadj - out, out)
    out = np.where((neg & (sp == 0)) | (a == np.inf), np.inf, out)
    return np.where(np.isnan(x0), x0, out)


# -- the constants of polygamma(n >= 2, x) ------------------------------------------------
_LIBM: Any = None


def _libm_fn(name: str, ctype: Any) -> Any:
    """The C library's ``name`` (``lgammaf``, ``expf`` ...), or None where there is none."""
    global _LIBM
    if _LIBM is None:
        import ctypes.util

        path = ctypes.util.find_library("m")
        try:
            _LIBM = ctypes.CDLL(path) if path else False
        except OSError:
            _LIBM = False
    fn = getattr(_LIBM, name, None) if _LIBM else None
    if fn is not None:
        fn.restype, fn.argtypes = ctype, [ctype]
    return fn


def polygamma_factor(n: int, t: Any) -> float:
    """ATen's ``((n % 2) ? 1 : -1) * exp(lgamma(n + 1))`` of ``calc_polygamma``, in the numpy
    float type ``t``: computed with the C library's ``lgamma``/``exp`` (``lgammaf``/``expf``
    for float32), the functions ATen's kernel calls, so it has their roundings (float32's
    differs from ``n!`` by up to ~10 ulp, and PyTorch's polygamma by that); without a C
    library, graphc's fdlibm lgamma and Python's exp."""
    f32 = t is np.float32
    ctype = ctypes.c_float if f32 else ctypes.c_double
    lg = _libm_fn("lgammaf" if f32 else "lgamma", ctype)
    ex = _libm_fn("expf" if f32 else "exp", ctype)
    with np.errstate(over="ignore"):
        if lg is not None and ex is not None:
            v = t(ex(lg(float(n) + 1.0)))
        else:
            lgv = float(t(_lgamma_ref(np.array([n + 1.0]))[0]))
            v = t(math.exp(lgv)) if lgv < 709.0 else t(np.inf)
        return float(t(1.0 if n % 2 else -1.0) * v)


# -- digamma and polygamma(1, x): ATen's series, in the operand's precision -------------------
# Cephes' asymptotic series of digamma in 1/x^2, highest degree first (polevl's order)
PSI_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
          -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
          8.33333333333333333333E-2)
PSI_10 = 2.25175258906672110764  # digamma(10)


def _log(x: np.ndarray) -> np.ndarray:
    return _in_f64(np.log, x)


def _digamma_ref(x: np.ndarray) -> np.ndarray:
    """ATen's ``calc_digamma``: reflection (its tangent in float64 for both precisions),
    recurrence up to 10, asymptotic series; -inf at +0, inf at -0, NaN at the negative
    integers."""
    t = x.dtype.type
    neg = x < 0
    r = _f64(x) - np.trunc(_f64(x))
    refl = (_PI / np.tan(_PI * r)).astype(x.dtype)
    z = np.where(neg, t(1) - x, x)
    acc = np.zeros_like(x)
    for _ in range(10):
        step = z < t(10)
        acc = np.where(step, acc - t(1) / z, acc)
        z = np.where(step, z + t(1), z)
    zz = t(1) / (z * z)
    tail = np.where(z < t(1e17), zz * _polevl(zz, PSI_A), t(0))
    out = np.where(z == t(10), acc + t(PSI_10), acc + _log(z) - t(0.5) / z - tail)
    out = np.where(neg, out - refl, out)
    out = np.where(neg & (x == np.trunc(x)), t(np.nan), out)
    return np.where(x == 0, np.copysign(t(np.inf), -x), out)


def _trigamma_ref(x: np.ndarray) -> np.ndarray:
    """ATen's ``trigamma`` (``polygamma(1, x)``): reflection below 1/2, six recurrence
    steps, the asymptotic series to x^-7."""
    t = x.dtype.type
    pi = t(_PI)
    small = x < t(0.5)
    s = _in_f64(np.sin, pi * x)
    acc = np.where(small, t(0) - (pi * pi) / (s * s), t(0))
    z = np.where(small, t(1) - x, x)
    for _ in range(6):
        acc = acc + t(1) / (z * z)
        z = z + t(1)
    ixx = t(1) / (z * z)
    series = t(1) + t(1) / (t(2) * z) + ixx * (t(1 / 6) - ixx * (t(1 / 30) - ixx * t(1 / 42)))
    acc = acc + series / z
    return np.where(small, -acc, acc)


# -- i0 and i1: ATen's Chebyshev series (Cephes), in the operand's precision ----------------
# Chebyshev series (Cephes, ATen's calc_i0 / calc_i1) of exp(-x) I(x) on [0, 8] in x/2 - 2
# (A) and of exp(-x) sqrt(x) I(x) on [8, inf) in 32/x - 2 (B), highest order first as
# ``chbevl`` consumes them; float32 i1 uses ATen's shorter float tables (the tails)
I0_A = (-4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16,
        1.71539128555513303061E-15, -1.16853328779934516808E-14, 7.67618549860493561688E-14,
        -4.85644678311192946090E-13, 2.95505266312963983461E-12, -1.72682629144155570723E-11,
        9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
        -1.30002500998624804212E-8, 6.04699502254191894932E-8, -2.67079385394061173391E-7,
        1.11738753912010371815E-6, -4.41673835845875056359E-6, 1.64484480707288970893E-5,
        -5.75419501008210370398E-5, 1.88502885095841655729E-4, -5.76375574538582365885E-4,
        1.63947561694133579842E-3, -4.32430999505057594430E-3, 1.05464603945949983183E-2,
        -2.37374148058994688156E-2, 4.93052842396707084878E-2, -9.49010970480476444210E-2,
        1.71620901522208775349E-1, -3.04682672343198398683E-1, 6.76795274409476084995E-1)
I0_B = (-7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17,
        3.46122286769746109310E-17, -2.82762398051658348494E-16, -3.42548561967721913462E-16,
        1.77256013305652638360E-15, 3.81168066935262242075E-15, -9.55484669882830764870E-15,
        -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
        7.18012445138366623367E-13, -1.79417853150680611778E-12, -1.32158118404477131188E-11,
        -3.14991652796324136454E-11, 1.18891471078464383424E-11, 4.94060238822496958910E-10,
        3.39623202570838634515E-9, 2.26666899049817806459E-8, 2.04891858946906374183E-7,
        2.89137052083475648297E-6, 6.88975834691682398426E-5, 3.36911647825569408990E-3,
        8.04490411014108831608E-1)
_I1_A64 = (2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16,
           -1.10559694773538630805E-15, 7.60068429473540693410E-15, -5.04218550472791168711E-14,
           3.22379336594557470981E-13, -1.98397439776494371520E-12, 1.17361862988909016308E-11,
           -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
           9.38153738649577178388E-9, -4.44505912879632808065E-8, 2.00329475355213526229E-7,
           -8.56872026469545474066E-7, 3.47025130813767847674E-6, -1.32731636560394358279E-5,
           4.78156510755005422638E-5, -1.61760815825896745588E-4, 5.12285956168575772895E-4,
           -1.51357245063125314899E-3, 4.15642294431288815669E-3, -1.05640848946261981558E-2,
           2.47264490306265168283E-2, -5.29459812080949914269E-2, 1.02643658689847095384E-1,
           -1.76416518357834055153E-1, 2.52587186443633654823E-1)
_I1_B64 = (7.51729631084210481353E-18, 4.41434832307170791151E-18, -4.65030536848935832153E-17,
           -3.20952592199342395980E-17, 2.96262899764595013876E-16, 3.30820231092092828324E-16,
           -1.88035477551078244854E-15, -3.81440307243700780478E-15, 1.04202769841288027642E-14,
           4.27244001671195135429E-14, -2.10154184277266431302E-14, -4.08355111109219731823E-13,
           -7.19855177624590851209E-13, 2.03562854414708950722E-12, 1.41258074366137813316E-11,
           3.25260358301548823856E-11, -1.89749581235054123450E-11, -5.58974346219658380687E-10,
           -3.83538038596423702205E-9, -2.63146884688951950684E-8, -2.51223623787020892529E-7,
           -3.88256480887769039346E-6, -1.10588938762623716291E-4, -9.76109749136146840777E-3,
           7.78576235018280120474E-1)
I1_A = {64: _I1_A64, 32: _I1_A64[12:]}
I1_B = {64: _I1_B64, 32: _I1_B64[18:]}

def _chbevl(x: np.ndarray, coeffs: Any) -> np.ndarray:
    """Clenshaw's recurrence as ATen's compiled ``chbevl`` runs it: ``x b1 - b2`` fused (for
    float32 exactly: the float64 product and difference round once more, to float32)."""
    t = x.dtype.type
    f32 = x.dtype == np.float32
    b0, b1, b2 = np.full_like(x, t(coeffs[0])), np.zeros_like(x), np.zeros_like(x)
    for c in coeffs[1:]:
        b2, b1 = b1, b0
        fused = (_f64(x) * _f64(b1) - _f64(b2)).astype(t) if f32 else x * b1 - b2
        b0 = fused + t(c)
    return t(0.5) * (b0 - b2)


def _bessel_ref(x: np.ndarray, order: int) -> np.ndarray:
    t = x.dtype.type
    bits = 32 if x.dtype == np.float32 else 64
    ca, cb = (I0_A, I0_B) if order == 0 else (I1_A[bits], I1_B[bits])
    a = np.abs(x)
    e = _in_f64(np.exp, a)
    near = _chbevl(a / t(2) - t(2), ca)
    lo = (e * a) * near if order else e * near
    hi = (e * _chbevl(t(32) / a - t(2), cb)) / np.sqrt(a)
    out = np.where(a <= t(8), lo, hi)
    return np.where(x < 0, -out, out) if order else out


# -- sinc and logit ------------------------------------------------------------------------
def _sinc_ref(x: np.ndarray) -> np.ndarray:
    """ATen: 1 at 0, else ``sin(pi x) / (pi x)`` with the product in the operand's dtype."""
    t = x.dtype.type
    p = t(_PI) * x
    return np.where(x == 0, t(1), _in_f64(np.sin, p) / p)


def _sinc_lower(e: Any, x: Any) -> Any:
    p = e.mul(e.c(_PI), x)
    return e.select(e.eq(x, e.c(0)), e.c(1), e.div(e.math("sin", p), p))


def _sinc_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``sinc_backward``: ``g (pi x cos(pi x) - sin(pi x)) / (pi x^2)``, 0 where
    ``pi x^2`` is 0."""
    x = n.inputs[0]
    xp = b.mul(x, _c(b, _PI, n))
    sq = b.mul(b.mul(x, x), _c(b, _PI, n))
    num = b.sub(b.mul(xp, b.op("cos", (xp,))), b.op("sin", (xp,)))
    out = b.div(b.mul(g, num), sq)
    zero = _c(b, 0.0, n)
    return [b.where(b.op("eq", (sq, zero)), zero, out)]


def _logodds_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``logit_backward`` without eps: ``g / (x (1 - x))`` inside [0, 1], ``g * inf``
    at 0 and 1 (its scalar kernel's form: the sign of a zero x does not flip it), NaN
    outside and at NaN."""
    x = n.inputs[0]
    one, zero = _c(b, 1.0, n), _c(b, 0.0, n)
    inside = b.op("and", (b.op("ge", (x, zero)), b.op("le", (x, one))))
    ends = b.op("or", (b.op("eq", (x, zero)), b.op("eq", (x, one))))
    d = b.where(ends, b.mul(g, _c(b, math.inf, n)), b.div(g, b.mul(x, b.sub(one, x))))
    return [b.where(inside, d, _c(b, math.nan, n))]


def _logit(T: Any, x: Any, eps: float | None = None) -> Any:
    """``log(x / (1 - x))``; with ``eps >= 0``, x clamped to ``[eps, 1 - eps]`` first (bounds
    in x's dtype, as ATen's ``lo = eps, hi = 1 - eps``) and a zero gradient outside. A
    negative eps is no eps (ATen). NaN stays NaN with a NaN gradient."""
    if eps is None or eps < 0:
        return _prim(T, "logodds", x)
    t = x.dtype.np.type
    lo, hi = t(eps), t(1) - t(eps)
    below, above = x < float(lo), x > float(hi)
    bound = T.where(below, T.as_tensor(float(lo), x.dtype), T.as_tensor(float(hi), x.dtype))
    return _prim(T, "logodds", T.where(below | above, bound.detach(), x))


# -- deg2rad, rad2deg, float_power -------------------------------------------------------------
_PI_180 = 0.017453292519943295769236907684886127134428718885417  # ATen's M_PI_180
_180_PI = 57.295779513082320876798154814105170332405472466564  # ATen's M_180_PI


def _prim(T: Any, op: str, *xs: Any) -> Any:
    return T._wrap(T.builder().op(op, [x.node for x in xs]))


def _float_power(T: Any, x: Any, y: Any) -> Any:
    """``pow`` of both operands cast to float64 (ATen's ``float_power``): the result is
    float64 whatever the inputs, and gradients flow back through the casts."""
    f64 = T.dt.float64
    return T.binary("pow", x.to(f64), y.to(f64))


# -- derivative helpers ----------------------------------------------------------------------
def _trigamma_vjp(b: Any, n: Any, g: Any) -> list:
    """PyTorch's ``polygamma_backward`` for ``n = 1``: ``grad * polygamma(2, x)``, which ATen
    computes as ``-exp(lgamma(3)) zeta(3, x)``: the same through graphc/ir/special_more.py's
    ``zeta`` primitive (whose own rule carries on to the next order)."""
    c = polygamma_factor(2, n.dtype.np.type)
    zeta3 = b.op("zeta", (_c(b, 3.0, n), n.inputs[0]))
    return [b.mul(g, b.mul(_c(b, c, n), zeta3))]


def _i1_vjp(b: Any, n: Any, g: Any) -> list:
    """ATen ``i1_backward``: ``g (i0(x) - i1(x) / x)``, with x replaced by eps where
    ``|x| <= eps`` and the limit 1/2 there."""
    x = n.inputs[0]
    eps = _c(b, float(np.finfo(n.dtype.np).eps), n)
    big = b.op("gt", (b.op("abs", (x,)), eps))
    safe = b.where(big, x, eps)
    gradx = b.sub(b.op("i0", (safe,)), b.mul(n, b.div(_c(b, 1.0, n), safe)))
    return [b.mul(g, b.where(big, gradx, _c(b, 0.5, n)))]


SPECIAL: tuple[OpDef, ...] = (
    # erfc: -2/sqrt(pi) exp(-x^2) grad; erfinv: sqrt(pi)/2 exp(erfinv(x)^2) grad
    _special("erfc", _erfc_ref, lambda b, n, g: [b.mul(b.mul(
        _c(b, -_TWO_OVER_SQRT_PI, n),
        b.op("exp", (b.neg(b.mul(n.inputs[0], n.inputs[0])),))), g)], api=_API),
    _special("erfinv", _erfinv_ref, lambda b, n, g: [b.mul(b.mul(
        _c(b, 0.5 * math.sqrt(_PI), n), b.op("exp", (b.mul(n, n),))), g)],
        domain="unit", api=_API),
    # lgamma' = digamma, digamma' = polygamma(1, x), i0' = i1
    _special("lgamma", _lgamma_ref,
             lambda b, n, g: [b.mul(g, b.op("digamma", (n.inputs[0],)))], api=_API),
    _special("digamma", _digamma_ref,
             lambda b, n, g: [b.mul(g, b.op("trigamma", (n.inputs[0],)))], api=_API),
    _special("i0", lambda x: _bessel_ref(x, 0),
             lambda b, n, g: [b.mul(g, b.op("i1", (n.inputs[0],)))], api=_API),
    # internal primitives for the derivatives above (torch.special.i1 and polygamma(1, x);
    # graphc has no ``special`` namespace)
    _special("trigamma", _trigamma_ref, _trigamma_vjp),
    _special("i1", lambda x: _bessel_ref(x, 1), _i1_vjp),
    _unary("sinc", float_only=True, ref=_sinc_ref, vjp=_sinc_vjp, lower=_sinc_lower,
           api=_API),
    # logit: the primitive has no eps; the surface entry clamps for it
    _unary("logodds", float_only=True, ref=lambda x: np.log(x / (x.dtype.type(1) - x)),
           vjp=_logodds_vjp,
           lower=lambda e, x: e.math("log", e.div(x, e.sub(e.c(1), x)))),
    # own tests: PyTorch's gradient at x = -0 depends on where the element falls in its
    # vectorised loop (tests/test_special_ops.py)
    composite("logit", _logit, float_only=True, api=_API, params=(("eps", None),),
              extra={"own_tests": True}),
    composite("deg2rad", lambda T, x: x * _PI_180, float_only=True, api=_API),
    composite("rad2deg", lambda T, x: x * _180_PI, float_only=True, api=_API),
    # two operands (a scalar on either side), float64 results: tests/test_special_ops.py
    composite("float_power", _float_power, arity=2, api=_API, extra={"own_tests": True}),
)
