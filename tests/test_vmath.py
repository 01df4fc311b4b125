"""The CPU backend's vector math (codegen/vmath.py) against numpy, through ``gc.compile``.

Inputs sweep the whole float range: a dense linspace over [-100, 100], a random sample of bit
patterns (every exponent, denormals, NaNs with payloads, infinities) and the boundaries where
results overflow or go denormal. Errors are measured in ulp of the correctly rounded result
(f32: reference computed in f64; f64: in long double, or ``math.erf`` for erf); results that
numpy rounds to inf or 0 must be exactly that. The assembly check confirms the point of the
module: full-width vector code, no libm call in the loop.
"""

from __future__ import annotations

import math
import platform
from typing import Any

import numpy as np
import pytest

import graphc as gc

OPS = ("exp", "log", "tanh", "sigmoid", "erf", "expm1", "log1p", "sin", "cos", "tan", "asin",
       "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2")
# measured maxima are about 1 ulp (exp, log, tanh), 2 (sigmoid) and 3 (erf; f64 erf is
# compared with math.erf, itself within an ulp); expm1 and log1p about 1.6; the f64 results
# of the other elementary functions 0.7 (asin, acos, atan), 0.8 (sin, cos), 0.9 (exp2), 1.2
# (log2), 1.3-2.2 (tan, log10, the hyperbolic functions); their f32 results are evaluated in
# f64 and rounded once (at most an ulp with double rounding)
MAX_ULP = {"exp": 2, "log": 2, "tanh": 2, "sigmoid": 3, "erf": 4, "expm1": 2, "log1p": 2,
           "sin": 1, "cos": 1, "tan": 2.5, "asin": 1, "acos": 1, "atan": 1, "sinh": 2.5,
           "cosh": 2, "asinh": 2, "acosh": 2.5, "atanh": 2, "log2": 2, "log10": 2, "exp2": 1}
NUMPY_NAME = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
              "acosh": "arccosh", "atanh": "arctanh"}
# sin, cos and tan reduce their argument exactly below 2^31 pi/2 (codegen/vmath.py); above,
# results stay in range but are not accurate (measured apart)
TRIG = ("sin", "cos", "tan")
TRIG_EXACT = 2.0 ** 31 * 1.5707963
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.0, -0.5, -2.0, 1.5, -1.5, 0.25,
           -0.25, 10.0, -10.0, 1e-3, -1e-3, 1e-9, -1e-9]


def _boundaries(dtype: Any) -> np.ndarray:
    fi = np.finfo(dtype)
    tiny, den = float(fi.tiny), float(fi.smallest_subnormal)
    if dtype == np.float32:
        edges = [88.72, 88.7228, 88.72283, 88.72284, 88.7229, 88.73, 89.0, 90.0, -87.33,
                 -87.34, -88.0, -100.0, -103.2, -103.28, -103.9, -103.97, -103.98, -104.0,
                 -105.0, -150.0, 9.0, 9.1, 3.9, 4.0, 4.1]
    else:
        edges = [709.78, 709.782, 709.7827, 709.79, 710.0, 711.0, -708.39, -708.4, -720.0,
                 -744.4, -745.1, -745.13, -745.14, -746.0, -800.0, 19.0, 19.1, 5.9, 6.0, 6.1]
    vals = edges + [tiny, den, den * 3, tiny * 0.75, float(fi.max), float(fi.eps)]
    return np.array(vals + [-v for v in vals], dtype)


def _inputs(dtype: Any) -> np.ndarray:
    rng = np.random.default_rng(1)
    it = np.uint32 if dtype == np.float32 else np.uint64
    bits = rng.integers(0, np.iinfo(it).max, 100_000, dtype=it, endpoint=True).view(dtype)
    lin = np.linspace(-100, 100, 100_001).astype(dtype)
    small = (rng.standard_normal(20_000) * 10.0 ** rng.integers(-40, 3, 20_000)).astype(dtype)
    unit = rng.uniform(-1, 1, 20_000).astype(dtype)  # asin, acos, atanh
    ge1 = (1 + 10.0 ** rng.uniform(-15, 3, 20_000)).astype(dtype)  # acosh near 1
    trig = (rng.uniform(-1, 1, 20_000) * 10.0 ** rng.uniform(0, 9.5, 20_000)).astype(dtype)
    return np.concatenate([lin, bits, small, unit, ge1, trig, _boundaries(dtype),
                           np.array(SPECIAL, dtype)])


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64))


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    """High-precision reference: f64 for f32 inputs, long double for f64 inputs."""
    if name == "erf":
        return _erf(x)
    w = np.float64 if x.dtype == np.float32 else np.longdouble
    z = x.astype(w)
    with np.errstate(all="ignore"):
        if name == "sigmoid":
            e = np.exp(-np.abs(z))
            return np.where(z >= 0, 1 / (1 + e), e / (1 + e))
        return getattr(np, NUMPY_NAME.get(name, name))(z)


def ulp_error(got: np.ndarray, ref: np.ndarray, dtype: Any) -> np.ndarray:
    """|got - ref| in units of the spacing at the correctly rounded result; exact specials."""
    with np.errstate(all="ignore"):
        r = ref.astype(dtype)
        same = (got == r) | (np.isnan(got) & np.isnan(r))
        w = np.longdouble if dtype == np.float64 else np.float64
        err = np.abs(got.astype(w) - ref.astype(w)) / np.spacing(np.abs(r)).astype(w)
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))


@pytest.fixture(scope="module", params=[np.float32, np.float64], ids=["f32", "f64"])
def results(request: Any) -> tuple[Any, np.ndarray, dict[str, np.ndarray], Any]:
    dtype = request.param
    x = _inputs(dtype)

    @gc.compile(example_args=(x,))
    def step(x: Any) -> Any:
        return tuple(getattr(x, name)() for name in OPS)

    outs = step(x)
    return dtype, x, {k: np.asarray(o) for k, o in zip(OPS, outs)}, step


@pytest.mark.parametrize("name", OPS)
def test_ulp_error(results: Any, name: str) -> None:
    dtype, x, got, _ = results
    assert got[name].dtype == dtype
    err = ulp_error(got[name], _reference(name, x), dtype)
    if name in TRIG:
        err[np.abs(x) >= TRIG_EXACT] = 0
    i = int(np.argmax(err))
    assert err[i] <= MAX_ULP[name], f"{name}: {err[i]:.2f} ulp at x={x[i]!r}: {got[name][i]!r}"


@pytest.mark.parametrize("name", OPS)
def test_special_values_exact(results: Any, name: str) -> None:
    """NaN, infinities, signed zeros and the overflow/underflow boundaries, bit for bit where
    the result is not rounded (0, inf, nan, +-1, signed zero)."""
    dtype, x, got, _ = results
    ref = _reference(name, x).astype(dtype)
    g = got[name]
    exact = ~np.isfinite(ref) | (ref == 0) | (np.abs(ref) == 1) | ~np.isfinite(x) | (x == 0)
    if name in TRIG:
        exact &= ~(np.abs(x) >= TRIG_EXACT)
    np.testing.assert_array_equal(np.isnan(g[exact]), np.isnan(ref[exact]))
    ok = exact & ~np.isnan(ref)
    np.testing.assert_array_equal(g[ok], ref[ok])
    np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(ref[ok]))


def test_trig_beyond_exact_reduction(results: Any) -> None:
    """Above 2^31 pi/2 sin and cos stay in [-1, 1] and tan is finite (documented accuracy
    loss, no NaN for finite inputs); NaN and infinities give NaN."""
    dtype, x, got, _ = results
    far = np.isfinite(x) & (np.abs(x) >= TRIG_EXACT)
    assert far.sum() > 1000
    for name in TRIG:
        assert np.isfinite(got[name][far]).all()
        assert np.isnan(got[name][~np.isfinite(x)]).all()
    assert (np.abs(got["sin"][far]) <= 1).all() and (np.abs(got["cos"][far]) <= 1).all()


def test_exact_values(results: Any) -> None:
    """Results numpy gives exactly: log2 and exp2 at powers of two, log1p(-1), acos(1)."""
    dtype, _, _, _ = results
    k = np.arange(-20, 21).astype(dtype)

    @gc.compile(example_args=(k,))
    def f(k: Any) -> Any:
        return gc.exp2(k), gc.log2(gc.exp2(k)), gc.log1p(-(k * 0 + 1)), gc.acos(k * 0 + 1)

    e2, l2, l1p, ac = (np.asarray(o) for o in f(k))
    np.testing.assert_array_equal(e2, np.exp2(k))
    np.testing.assert_array_equal(l2, k)
    assert (l1p == -np.inf).all() and (ac == 0).all()


ATAN2_SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, np.inf, -np.inf, np.nan, 1e-300, 1e300]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_atan2_matches_numpy(dtype: Any) -> None:
    """atan2: C99's signed zeros, infinities and NaN exactly, values within an ulp (f32) or
    two (f64)."""
    ys, xs = np.meshgrid(np.array(ATAN2_SPECIAL, dtype), np.array(ATAN2_SPECIAL, dtype))
    rng = np.random.default_rng(4)
    y = np.concatenate([ys.ravel(), (rng.standard_normal(50_000)
                                     * 10.0 ** rng.integers(-30, 30, 50_000)).astype(dtype)])
    x = np.concatenate([xs.ravel(), (rng.standard_normal(50_000)
                                     * 10.0 ** rng.integers(-30, 30, 50_000)).astype(dtype)])

    @gc.compile(example_args=(y, x))
    def f(y: Any, x: Any) -> Any:
        return gc.atan2(y, x)

    got = np.asarray(f(y, x))
    assert got.dtype == dtype
    with np.errstate(all="ignore"):
        want = np.arctan2(y, x)
        w = np.float64 if dtype == np.float32 else np.longdouble
        ref = np.arctan2(y.astype(w), x.astype(w))
    sp = np.zeros(got.shape, bool)
    sp[:ys.size] = True
    sp &= (y == 0) | (x == 0) | ~np.isfinite(y) | ~np.isfinite(x)  # pi/4 multiples, 0, nan
    np.testing.assert_array_equal(got[sp], want[sp])
    np.testing.assert_array_equal(np.signbit(got[sp]), np.signbit(want[sp]))
    # f64: the rounded quotient y / x adds up to half an ulp (measured 1.35); f32 rounds once
    assert ulp_error(got, ref, dtype).max() <= (1 if dtype == np.float32 else 2)
    assert "call\tatan2" not in f.ir("asm")


def test_boundaries_match_numpy(results: Any) -> None:
    """exp overflows to inf and underflows to 0 / denormals at the same inputs as numpy."""
    dtype, x, got, step = results
    b = _boundaries(dtype)
    with np.errstate(all="ignore"):
        want = np.exp(b)
    e = np.asarray(step(b)[0])
    np.testing.assert_array_equal(np.isinf(e), np.isinf(want))
    np.testing.assert_array_equal(e == 0, want == 0)
    assert ulp_error(e, _reference("exp", b), dtype).max() <= MAX_ULP["exp"]
    if dtype == np.float32:
        assert np.isinf(e[list(b).index(np.float32(89.0))])
        den = e[(b < -87.4) & (b > -103.9)]
        assert (den > 0).all() and (den < np.finfo(np.float32).tiny).all()


def test_vectorised_without_libm(results: Any) -> None:
    _, _, _, step = results
    asm = step.ir("asm")
    for name in OPS:
        for fn in (f"{name}f", f"{name}@"):
            assert f"call\t{fn}" not in asm and f"{fn}PLT" not in asm
    if platform.machine() in ("x86_64", "AMD64") and "zmm" in asm:
        # vectorised: wide registers throughout (LLVM may pick 256-bit ones for float64 on
        # hosts whose tuning prefers them, e.g. sapphirerapids' prefer-256-bit)
        assert asm.count("zmm") + asm.count("ymm") > 100


POW_X = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, np.inf, -np.inf, np.nan, 3.7, -8.0, 1e-30,
         1e30, 1e-42]
POW_Y = [0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, np.inf, -np.inf, np.nan, 2.5, 1e10,
         -1e10, 7.0, 1.0 / 3.0, 150.0, -150.0]


def test_pow_f32_matches_numpy() -> None:
    """pow with a run-time exponent: C99/numpy special cases exactly, values within an ulp."""
    xs, ys = np.meshgrid(np.array(POW_X, np.float32), np.array(POW_Y, np.float32))
    rng = np.random.default_rng(2)
    xr = rng.uniform(0, 10, 20_000).astype(np.float32)
    yr = rng.uniform(-30, 30, 20_000).astype(np.float32)
    x = np.concatenate([xs.ravel(), xr])
    y = np.concatenate([ys.ravel(), yr])

    @gc.compile(example_args=(x, y))
    def pw(a: Any, b: Any) -> Any:
        return a ** b

    got = np.asarray(pw(x, y))
    with np.errstate(all="ignore"):
        want = np.power(x, y)
        ref = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    # an exact tie in the denormal range (0.5 ** 150) may round either way: 1 ulp
    tie = (want == 0) & (np.abs(ref) == 2.0 ** -150)
    special = fin & (~np.isfinite(want) | (want == 0) | (np.abs(want) == 1)) & ~tie
    np.testing.assert_array_equal(got[special], want[special])
    np.testing.assert_array_equal(np.signbit(got[fin]), np.signbit(want[fin]))
    assert np.abs(got[tie]).max(initial=0) <= np.finfo(np.float32).smallest_subnormal
    assert ulp_error(got[fin], ref[fin].astype(np.float64), np.float32).max() <= 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_exp_below_underflow_mixed_lanes(dtype: Any) -> None:
    """Inputs at or below exp's underflow threshold (a causal mask's -inf, -1e30, the
    threshold itself) are exactly +0 whatever sits in the neighbouring lanes of the same
    vector, and those lanes (normal results, denormal results, NaN, inf) are unaffected: the
    kernel evaluates exp(0) for the underflowing lanes and selects 0 afterwards (so no product
    underflows there), which must not leak into the other lanes."""
    lo = -104.0 if dtype == np.float32 else -746.0
    mid = -100.0 if dtype == np.float32 else -740.0  # a denormal result
    pattern = [-np.inf, 0.5, -1e30, mid, lo, np.nan, np.inf, lo - 1.0, -2.0, lo + 0.03, 3.0]
    x = np.array(pattern * 7, dtype)  # 77 elements: full vectors and a tail
    got = np.asarray(gc.compile(lambda t: t.exp())(x))
    with np.errstate(all="ignore"):
        want = np.exp(x)
    under = x <= lo
    assert (got[under] == 0).all() and not np.signbit(got[under]).any()
    rest = ~under
    assert ulp_error(got[rest], _reference("exp", x[rest]), dtype).max() <= MAX_ULP["exp"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_causal_softmax_masked_entries_exactly_zero() -> None:
    """A causally masked softmax (the -inf entries the attention step produces) gives exact
    zeros above the diagonal and numpy's values below, compiled and eager."""
    rng = np.random.default_rng(3)
    s = rng.standard_normal((4, 16, 16)).astype(np.float32)
    mask = np.triu(np.ones((16, 16), bool), 1)
    s[:, mask] = -np.inf
    e = np.exp(s - s.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    soft = lambda t: gc.nn.functional.softmax(t, dim=-1)  # noqa: E731
    for got in (np.asarray(gc.compile(soft)(s)), soft(gc.tensor(s)).numpy()):
        assert (got[:, mask] == 0).all()
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
