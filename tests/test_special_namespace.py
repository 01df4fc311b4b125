"""``graphc.special`` (graphc/special.py) against ``torch.special``: the namespace resolves
like ``torch.special``, its second names are graphc's very functions, and every function
matches PyTorch eagerly and compiled (values and gradients, float32 and float64, integer
inputs, the tails of the normal CDF) with PyTorch's errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _op_parity import check_compiled, check_eager
from _op_parity import np_of as _np
from _torch import torch

import graphc as gc
import graphc.special as gs

ROOT = Path(__file__).resolve().parents[1]
NAN = float("nan")
INF = float("inf")

# torch.special's second names: the same function objects as gc's
SAME = {"expit": "sigmoid", "logit": "logit", "erf": "erf", "erfc": "erfc",
        "erfinv": "erfinv", "gammaln": "lgamma", "digamma": "digamma", "psi": "digamma",
        "i0": "i0", "sinc": "sinc", "xlogy": "xlogy", "logsumexp": "logsumexp",
        "log1p": "log1p", "expm1": "expm1", "exp2": "exp2", "round": "round"}


def test_the_namespace_is_torch_specials() -> None:
    assert gc.special is gs and "special" in dir(gc)
    assert gc.special.expit is gs.expit
    for name in gs.__all__:
        assert hasattr(torch.special, name), name
        assert callable(getattr(gs, name))
    for name, gc_name in SAME.items():
        assert getattr(gs, name) is getattr(gc, gc_name), name
    assert {"ndtr", "log_ndtr", "entr", "xlog1py", "multigammaln", "softmax",
            "log_softmax"} <= set(gs.__all__)


def test_import_graphc_special_first() -> None:
    """``import graphc.special`` works on its own, and ``gc.special`` after ``import graphc``
    (the package resolves it on first use)."""
    code = ("import graphc.special as s, graphc as gc\n"
            "assert gc.special is s and s.gammaln is gc.lgamma\n"
            "import graphc\nprint(graphc.special.ndtr(gc.tensor([0.0])).item())")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert float(res.stdout) == 0.5


CASES = [
    ("expit", (3, 4), lambda m, x: m.special.expit(x)),
    ("logit", (3, 4), lambda m, x: m.special.logit(m.special.expit(x))),
    ("logit_eps", (3, 4), lambda m, x: m.special.logit(m.special.expit(x * 3), eps=0.1)),
    ("erf", (3, 4), lambda m, x: m.special.erf(x)),
    ("erfc", (3, 4), lambda m, x: m.special.erfc(x)),
    ("erfinv", (3, 4), lambda m, x: m.special.erfinv(m.special.expit(x) * 1.8 - 0.9)),
    ("gammaln", (3, 4), lambda m, x: m.special.gammaln(x.abs() + 0.5)),
    ("digamma", (3, 4), lambda m, x: m.special.digamma(x.abs() + 0.5)),
    ("psi", (3, 4), lambda m, x: m.special.psi(x * x + 1)),
    ("i0", (3, 4), lambda m, x: m.special.i0(x)),
    ("sinc", (3, 4), lambda m, x: m.special.sinc(x)),
    ("xlogy", (3, 4), lambda m, x: m.special.xlogy(x, x * x + 0.5)),
    ("logsumexp", (3, 4), lambda m, x: m.special.logsumexp(x, -1)),
    ("log1p", (3, 4), lambda m, x: m.special.log1p(x.abs())),
    ("expm1", (3, 4), lambda m, x: m.special.expm1(x)),
    ("exp2", (3, 4), lambda m, x: m.special.exp2(x)),
    ("round", (3, 4), lambda m, x: m.special.round(x * 10, decimals=1) + x),
    ("softmax", (3, 4), lambda m, x: m.special.softmax(x, -1)),
    ("softmax_batch", (3, 4), lambda m, x: m.special.softmax(x, 0)),
    ("log_softmax", (3, 4), lambda m, x: m.special.log_softmax(x, 1)),
    ("ndtr", (3, 4), lambda m, x: m.special.ndtr(x * 2)),
    ("log_ndtr", (3, 4), lambda m, x: m.special.log_ndtr(x * 4)),
    ("entr", (3, 4), lambda m, x: m.special.entr(x.abs() + 0.01)),
    ("entr_zero_negative", (3, 4), lambda m, x: m.special.entr(m.where(x > 0, x, 0.0).detach())
     + x),
    ("xlog1py", (3, 4), lambda m, x: m.special.xlog1py(x, x * x)),
    ("xlog1py_scalars", (3, 4), lambda m, x: m.special.xlog1py(2.0, x.abs())
     + m.special.xlog1py(x, 3)),
    ("multigammaln", (3, 4), lambda m, x: m.special.multigammaln(x.abs() + 2, 3)),
    ("multigammaln_small", (3, 4), lambda m, x: m.special.multigammaln(x.abs() + 0.1, 2)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_matches_torch(case: Any) -> None:
    _, shape, f = case
    check_eager(f, shape, 1e-5, 1e-5, 1e-4, 1e-5, dtypes=True)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_torch(case: Any) -> None:
    _, shape, f = case
    check_compiled(f, shape, 1e-4, 1e-5)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_float64_matches_torch(case: Any) -> None:
    _, shape, f = case
    rng = np.random.default_rng(5)
    for batch in (2, 3):
        x = rng.standard_normal((batch, *shape))
        p = rng.standard_normal(shape)
        tp = torch.tensor(p, requires_grad=True)
        ty = f(torch, torch.tensor(x) * tp)
        ty.sum().backward()
        gp = gc.tensor(p, requires_grad=True)
        gy = f(gc, gc.tensor(x) * gp)
        gy.sum().backward()
        assert str(_np(gy).dtype) == str(_np(ty).dtype)
        np.testing.assert_allclose(_np(gy), _np(ty), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(_np(gp.grad), _np(tp.grad), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["ndtr", "log_ndtr"])
def test_normal_cdf_tails(name: str, dtype: Any) -> None:
    """Far into both tails, where ``erfc`` underflows (``log_ndtr`` keeps its accuracy by
    the asymptotic series), and the derivative (the density over the CDF)."""
    x = np.concatenate([np.linspace(-300, 30, 3301), [-20.0, -10.0, -1.0, 0.0, -0.7071]])
    x = x.astype(dtype)
    want = getattr(torch.special, name)(torch.tensor(x)).numpy()
    got = getattr(gs, name)(gc.tensor(x)).numpy()
    rtol = 1e-6 if dtype is np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6 if dtype is np.float32 else 1e-15)
    xs = np.linspace(-35 if name == "log_ndtr" else -8, 8, 301).astype(dtype)
    t, g = torch.tensor(xs, requires_grad=True), gc.tensor(xs, requires_grad=True)
    getattr(torch.special, name)(t).sum().backward()
    getattr(gs, name)(g).sum().backward()
    np.testing.assert_allclose(_np(g.grad), _np(t.grad), rtol=1e-4 if dtype is np.float32
                               else 1e-10, atol=1e-30)


def test_special_values_are_pytorchs() -> None:
    """``entr`` at 0, below 0 and NaN; ``xlog1py`` with a zero ``input`` (0 unless ``other``
    is NaN, whatever ``other`` is)."""
    for d in (np.float32, np.float64):
        x = np.array([0.0, -1.0, NAN, 0.5, 2.0, 1e-30, INF], d)
        np.testing.assert_array_equal(_np(gs.entr(gc.tensor(x))),
                                      _np(torch.special.entr(torch.tensor(x))))
        a = np.array([0, 0, 0, 0, 1, 2, -1.5, NAN], d)
        b = np.array([-1, -2, NAN, INF, -1, 0.5, 3, 1], d)
        np.testing.assert_allclose(_np(gs.xlog1py(gc.tensor(a), gc.tensor(b))),
                                   _np(torch.special.xlog1py(torch.tensor(a), torch.tensor(b))),
                                   rtol=1e-6)


def test_gradients_at_the_edges() -> None:
    """``xlog1py``'s ``input`` gradient where ``input == 0`` is ``log1p(other)`` (0 where
    ``other <= -1``), as PyTorch's; ``entr``'s is PyTorch's above 0."""
    a = np.array([0.0, 0.0, 1.0, 2.0], np.float64)
    b = np.array([0.5, -2.0, -0.5, 3.0], np.float64)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ga, gb = gc.tensor(a, requires_grad=True), gc.tensor(b, requires_grad=True)
    torch.special.xlog1py(ta, tb).sum().backward()
    gs.xlog1py(ga, gb).sum().backward()
    np.testing.assert_allclose(_np(ga.grad), _np(ta.grad), rtol=1e-12)
    np.testing.assert_allclose(_np(gb.grad), _np(tb.grad), rtol=1e-12)


@pytest.mark.parametrize("name, call", [
    ("expit", lambda m, t: m.special.expit(t)), ("ndtr", lambda m, t: m.special.ndtr(t)),
    ("log_ndtr", lambda m, t: m.special.log_ndtr(t)), ("entr", lambda m, t: m.special.entr(t)),
    ("i0", lambda m, t: m.special.i0(t)), ("gammaln", lambda m, t: m.special.gammaln(t)),
    ("xlog1py", lambda m, t: m.special.xlog1py(t, 2)),
    ("xlog1py_left", lambda m, t: m.special.xlog1py(3, t)),
    ("multigammaln", lambda m, t: m.special.multigammaln(t + 2, 2)),
    ("softmax_dtype", lambda m, t: m.special.softmax(t, 0, dtype=m.float64)),
    ("log_softmax_dtype", lambda m, t: m.special.log_softmax(t, -1, dtype=m.float64)),
])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
def test_integer_inputs(name: str, call: Any, dtype: Any) -> None:
    """Integers and bools promote to float32 as in PyTorch (or PyTorch's exception)."""
    data = np.array([[0, 1, 3], [2, 5, 1]]).astype(dtype)
    try:
        want = call(torch, torch.tensor(data))
    except Exception as e:  # noqa: BLE001 - whatever PyTorch raises, graphc must too
        with pytest.raises(type(e)):
            call(gc, gc.tensor(data))
        return
    got = call(gc, gc.tensor(data))
    assert str(_np(got).dtype) == str(_np(want).dtype)
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-6, atol=1e-6)


ERRORS = [
    (lambda m, x: m.special.multigammaln(x.abs() + 1, 0), RuntimeError, "greater than or equal"),
    (lambda m, x: m.special.multigammaln(x.abs() + 3, 2.0), TypeError, "p"),
    (lambda m, x: m.special.xlog1py(2, 3), TypeError, "xlog1py"),
    (lambda m, x: m.special.ndtr([1.0]), TypeError, "input"),
    (lambda m, x: m.special.entr(2.0), TypeError, "input"),
    (lambda m, x: m.special.softmax(x.long(), 0), NotImplementedError, "softmax_kernel_impl"),
    (lambda m, x: m.special.softmax(x.long(), -1), NotImplementedError, "lastdim"),
    (lambda m, x: m.special.log_softmax(x > 0, 1), NotImplementedError, "Bool"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_are_pytorchs(i: int) -> None:
    f, kind, word = ERRORS[i]
    x = np.random.default_rng(7).standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(kind):
        f(torch, torch.tensor(x))
    with pytest.raises(kind) as got:
        f(gc, gc.tensor(x))
    assert word in str(got.value), (word, str(got.value))
