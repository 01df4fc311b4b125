"""Reductions and scans (graphc/reduce_ops.py) against PyTorch: values and gradients eagerly,
and compiled (one compile over two batch sizes, gradients to a parameter); dtypes, 0-d and
empty inputs, zeros in ``prod``/``cumprod``, the norms' gradients at zero, ties and NaN in
``cummax``/``cummin``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _op_parity import check_compiled, check_eager
from _op_parity import np_of as _np
from _op_parity import outs as _outs
from _torch import torch

import graphc as gc

RTOL, ATOL = 1e-5, 1e-5


def _zeros(m: Any, x: Any) -> Any:
    """x with the entries of magnitude below 0.4 set to zero (they keep a path to x)."""
    return x * (x.abs() > 0.4).to(x.dtype)


# each case: (id, shape of x without the batch dim, f(module, x)); x is (batch, *shape) and the
# same expression runs with module = torch and module = gc
CASES = [
    ("var", (3, 4), lambda m, x: x.var(1)),
    ("var_all", (3, 4), lambda m, x: m.var(x)),
    ("var_correction", (3, 4), lambda m, x: m.var(x, (0, 2), correction=0, keepdim=True)),
    ("var_unbiased_false", (3, 4), lambda m, x: x.var(-1, False)),
    ("var_correction2", (3, 4), lambda m, x: x.var(dim=2, correction=2)),
    ("std", (3, 4), lambda m, x: x.std(2, keepdim=True)),
    ("std_all", (3, 4), lambda m, x: m.std(x, unbiased=False)),
    ("std_mean", (3, 4), lambda m, x: m.std_mean(x, 1)),
    ("var_mean", (3, 4), lambda m, x: m.var_mean(x, (0, 1), correction=0)),
    ("prod_dim", (3, 4), lambda m, x: x.prod(2)),
    ("prod_dim_zeros", (3, 4), lambda m, x: m.prod(_zeros(m, x), 1, keepdim=True)),
    ("prod_all", (3, 4), lambda m, x: (x * 0.5 + 1).prod()),
    ("prod_batch_dim", (3, 4), lambda m, x: x.prod(0)),
    ("cumsum", (3, 4), lambda m, x: x.cumsum(2)),
    ("cumsum_batch", (3, 4), lambda m, x: m.cumsum(x, 0)),
    ("cumsum_neg", (3, 4), lambda m, x: m.cumsum(x, dim=-2)),
    ("cumprod", (3, 4), lambda m, x: x.cumprod(2)),
    ("cumprod_zeros", (3, 6), lambda m, x: m.cumprod(_zeros(m, x), -1)),
    ("cumprod_batch", (3, 4), lambda m, x: m.cumprod(x, 0)),
    ("cummax", (3, 4), lambda m, x: m.cummax(x, 2)),
    ("cummax_batch", (3, 4), lambda m, x: x.cummax(0)),
    ("cummin", (3, 4), lambda m, x: m.cummin(x, 1)),
    ("cummax_ties", (3, 4), lambda m, x: x.round().cummax(2).values * x),
    ("logcumsumexp", (3, 4), lambda m, x: m.logcumsumexp(x, 2)),
    ("logcumsumexp_batch", (3, 4), lambda m, x: x.logcumsumexp(0)),
    ("norm", (3, 4), lambda m, x: x.norm()),
    ("norm_dim", (3, 4), lambda m, x: m.norm(x, dim=2)),
    ("norm_p1", (3, 4), lambda m, x: x.norm(1, dim=(1, 2), keepdim=True)),
    ("norm_p3", (3, 4), lambda m, x: x.norm(p=3, dim=1)),
    ("vector_norm", (3, 4), lambda m, x: m.linalg.vector_norm(x, dim=-1)),
    ("vector_norm_inf", (3, 4), lambda m, x: m.linalg.vector_norm(x, math.inf, (0, 2))),
    ("vector_norm_ninf", (3, 4), lambda m, x: m.linalg.vector_norm(x, -math.inf, 1)),
    ("vector_norm_0", (3, 4), lambda m, x: m.linalg.vector_norm(x, 0, 2) + x.sum(2)),
    ("vector_norm_half", (3, 4), lambda m, x: m.linalg.vector_norm(x, 0.5, 1, True)),
    ("vector_norm_zero_rows", (3, 4), lambda m, x: m.linalg.vector_norm(x * (x[:, :, :1] > 0)
                                                                         .to(x.dtype), dim=2)),
    ("amax_dims", (3, 4), lambda m, x: m.amax(x, (0, 2))),
    ("amin_dims", (3, 4), lambda m, x: x.amin((1, 2), keepdim=True)),
    ("max_dim", (3, 4), lambda m, x: m.max(x, 1)),
    ("min_dim", (3, 4), lambda m, x: x.min(-1, keepdim=True)),
    ("aminmax", (3, 4), lambda m, x: m.aminmax(x, dim=1)),
    ("aminmax_all", (3, 4), lambda m, x: x.aminmax()),
    ("any_all", (3, 4), lambda m, x: x * x.gt(0.5).any(2, keepdim=True).to(x.dtype)
     + x * m.all(x.gt(-1.0), 1, keepdim=True).to(x.dtype)),
    ("count_nonzero", (3, 4), lambda m, x: x * m.count_nonzero(x.gt(0.0), 2)[..., None]
     .to(x.dtype)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_matches_torch(case: Any) -> None:
    _, shape, f = case
    check_eager(f, shape, RTOL, ATOL, 1e-4, 1e-5, dtypes=True)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_torch(case: Any) -> None:
    """One compile serving batch sizes 2 and 5: outputs and the parameter's gradient."""
    _, shape, f = case
    check_compiled(f, shape, RTOL, ATOL)


# -- exact zeros, ties, NaN ------------------------------------------------------------------
def _grad_pair(f: Any, data: Any) -> None:
    t = torch.tensor(data, dtype=torch.float64, requires_grad=True)
    g = gc.tensor(np.asarray(data, np.float64), requires_grad=True)
    ty, gy = f(torch, t), f(gc, g)
    for a, b in zip(_outs(gy), _outs(ty)):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-12, atol=1e-12)
    w = np.arange(1, _np(_outs(ty)[0]).size + 1, dtype=np.float64).reshape(_outs(ty)[0].shape)
    (_outs(ty)[0] * torch.tensor(w)).sum().backward()
    (_outs(gy)[0] * gc.tensor(w)).sum().backward()
    want = _np(t.grad) if t.grad is not None else np.zeros(t.shape)
    np.testing.assert_allclose(_np(g.grad), want, rtol=1e-12, atol=1e-12)


ZEROS = [[2.0, 0.0, 3.0, 0.0, 5.0], [0.0, 1.5, -2.0, 4.0, 1.0], [1.0, 2.0, 3.0, 0.5, 0.0],
         [0.0, 0.0, 0.0, 2.0, 3.0]]


@pytest.mark.parametrize("f", [
    lambda m, x: m.cumprod(x, 1),
    lambda m, x: m.cumprod(x, 0),
    lambda m, x: x.prod(1),
    lambda m, x: x.prod(0, keepdim=True),
    lambda m, x: x.prod(),
    lambda m, x: x[1].prod(),
    lambda m, x: x.norm(dim=1),
    lambda m, x: (x * 0).norm(),
    lambda m, x: m.linalg.vector_norm(x * 0, 3.0, 1),
    lambda m, x: m.linalg.vector_norm(x, 0.5, 1),
    lambda m, x: m.linalg.vector_norm(x, math.inf, 1),
    lambda m, x: m.linalg.vector_norm(x, 0),
    lambda m, x: x.abs().max(1),
    lambda m, x: x.abs().cummax(1),
    lambda m, x: x.abs().cummin(1),
    lambda m, x: x.std(1),
], ids=["cumprod1", "cumprod0", "prod1", "prod0", "prod_all", "prod_row", "norm2", "norm_zero",
        "norm3_zero", "norm_half", "norm_inf_ties", "norm0", "max_ties", "cummax_ties",
        "cummin_ties", "std"])
def test_exact_zeros_and_ties(f: Any) -> None:
    _grad_pair(f, ZEROS)


def test_cummax_cummin_nan_and_ties() -> None:
    data = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, np.nan, 5.0], [2.0, 2.0, 1.0, 1.0, 0.5, 2.0,
                                                                  -1.0]])
    for name in ("cummax", "cummin"):
        want = getattr(torch, name)(torch.tensor(data), 1)
        got = getattr(gc, name)(gc.tensor(data), 1)
        assert type(got).__name__ == name and got._fields == ("values", "indices")
        np.testing.assert_array_equal(_np(got.values), _np(want.values))
        np.testing.assert_array_equal(_np(got.indices), _np(want.indices))


# -- dtypes, 0-d, empty, errors --------------------------------------------------------------
def _same(a: Any, b: Any) -> None:
    assert tuple(a.shape) == tuple(b.shape)
    assert str(_np(a).dtype) == str(_np(b).dtype), (_np(a).dtype, _np(b).dtype)
    np.testing.assert_allclose(_np(a), _np(b), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("data", [np.array([[3, -1, 0], [2, 5, 7]], np.int64),
                                  np.array([[True, False, True], [True, True, True]]),
                                  np.array([[3, -1, 0], [2, 5, 7]], np.int32)],
                         ids=["int64", "bool", "int32"])
@pytest.mark.parametrize("f", [
    lambda m, x: m.cumsum(x, 1), lambda m, x: x.cumprod(0), lambda m, x: m.prod(x),
    lambda m, x: x.prod(1), lambda m, x: m.cummax(x, 1), lambda m, x: x.cummin(0),
    lambda m, x: m.any(x), lambda m, x: x.all(1), lambda m, x: m.any(x, 0, True),
    lambda m, x: m.count_nonzero(x), lambda m, x: x.count_nonzero(1),
    lambda m, x: m.amax(x, (0, 1)), lambda m, x: m.cumsum(x, 1, dtype=m.float64),
], ids=["cumsum", "cumprod", "prod", "prod_dim", "cummax", "cummin", "any", "all_dim",
        "any_keep", "count_nonzero", "count_nonzero_dim", "amax", "cumsum_dtype"])
def test_non_float_dtypes(data: np.ndarray, f: Any) -> None:
    want = f(torch, torch.tensor(data))
    got = f(gc, gc.tensor(data))
    for a, b in zip(_outs(got), _outs(want)):
        _same(a, b)


@pytest.mark.parametrize("f", [
    lambda m, x: m.cumsum(x, 0), lambda m, x: x.cumprod(-1), lambda m, x: m.cummax(x, 0),
    lambda m, x: x.logcumsumexp(0), lambda m, x: x.prod(), lambda m, x: x.prod(0),
    lambda m, x: m.std(x, correction=0), lambda m, x: x.var(), lambda m, x: x.norm(),
    lambda m, x: x.any(), lambda m, x: m.all(x, 0), lambda m, x: m.count_nonzero(x),
    lambda m, x: m.aminmax(x),
], ids=["cumsum", "cumprod", "cummax", "logcumsumexp", "prod", "prod0", "std", "var", "norm",
        "any", "all", "count_nonzero", "aminmax"])
def test_zero_dim(f: Any) -> None:
    want = f(torch, torch.tensor(1.5))
    got = f(gc, gc.tensor(1.5))
    for a, b in zip(_outs(got), _outs(want)):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(_np(a), _np(b), equal_nan=True)


@pytest.mark.parametrize("f", [
    lambda m, x: m.cumsum(x, 1), lambda m, x: x.cumprod(1), lambda m, x: x.logcumsumexp(1),
    lambda m, x: x.prod(), lambda m, x: x.prod(1), lambda m, x: x.var(1),
    lambda m, x: x.std(), lambda m, x: x.norm(dim=1), lambda m, x: x.any(1),
    lambda m, x: x.all(), lambda m, x: m.count_nonzero(x, 1), lambda m, x: m.cummax(x, 1),
], ids=["cumsum", "cumprod", "logcumsumexp", "prod", "prod_dim", "var", "std", "norm", "any",
        "all", "count_nonzero", "cummax"])
def test_empty(f: Any) -> None:
    want = f(torch, torch.zeros((2, 0)))
    got = f(gc, gc.zeros((2, 0)))
    for a, b in zip(_outs(got), _outs(want)):
        _same(a, b) if not np.isnan(_np(b)).any() else np.testing.assert_array_equal(
            np.isnan(_np(a)), np.isnan(_np(b)))


def test_logcumsumexp_infinities() -> None:
    data = np.array([[-np.inf, -np.inf, 1.0, np.inf, 2.0], [-1.0, -2.0, -3.0, -4.0, 30.0]],
                    np.float32)
    _same(gc.tensor(data).logcumsumexp(1), torch.tensor(data).logcumsumexp(1))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_logcumsumexp_far_below_the_maximum_and_its_gradient(compiled: bool) -> None:
    """Prefixes hundreds below the line's maximum stay finite (a max-shifted cumsum of exp
    underflowed them to -inf), and the gradient (PyTorch's log-space formula) matches for
    cotangents of both signs, in float32 and float64."""
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64):
        data = np.array([[-300.0, -200.0, 0.0, 5.0, -1.0, 2.0],
                         [3.0, -1.0, 2.5, -400.0, 1.0, 0.5]], dtype)
        w = rng.standard_normal(data.shape).astype(dtype)
        gx = gc.nn.Parameter(data)  # state of the compiled step: its .grad is written
        tx = torch.tensor(data, requires_grad=True)

        def f(wa: Any, gx: Any = gx) -> Any:
            y = gx.logcumsumexp(1)
            (y * wa).sum().backward()
            return y

        y = (gc.compile(f, dynamic=False) if compiled else f)(gc.tensor(w))
        ty = tx.logcumsumexp(1)
        (ty * torch.tensor(w)).sum().backward()
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(_np(y), ty.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)
        assert np.isfinite(_np(y)).all()


def test_var_argument_forms() -> None:
    x = np.random.default_rng(3).standard_normal((4, 5))
    g, t = gc.tensor(x), torch.tensor(x)
    _same(gc.var(g, True), torch.var(t, True))
    _same(gc.var(g, False), torch.var(t, False))
    _same(g.var(1, True, True), t.var(1, True, True))
    _same(g.std(dim=0, correction=3), t.std(dim=0, correction=3))
    _same(g.var(0, correction=0.5), t.var(0, correction=0.5))
    _same(g.var(0, correction=5), t.var(0, correction=5))
    with pytest.raises(RuntimeError, match="floating point"):
        gc.var(gc.tensor([1, 2, 3]))
    with pytest.raises(RuntimeError, match="both"):
        gc.var(g, 0, True, correction=1)


def test_errors() -> None:
    with pytest.raises(NotImplementedError, match="nuc"):
        gc.tensor([[1.0, 2.0]]).norm("nuc")
    with pytest.raises(RuntimeError, match="floating point"):
        gc.linalg.vector_norm(gc.tensor([1, 2]))
    with pytest.raises(IndexError):
        gc.cumsum(gc.tensor([1.0, 2.0]), 1)
    with pytest.raises(TypeError):
        gc.prod(gc.tensor([[1.0, 2.0]]), (0, 1))


def test_in_place_scans() -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    g, t = gc.tensor(x), torch.tensor(x)
    g.cumsum_(1)
    t.cumsum_(1)
    _same(g, t)
    g.cumprod_(0)
    t.cumprod_(0)
    _same(g, t)


def test_scans_compile_to_one_kernel_each() -> None:
    """A cumsum in a compiled step is the scan primitive (not a quadratic composition)."""
    @gc.compile
    def step(x: Any) -> Any:
        return x.cumsum(1) + x.cumprod(1) + x.cummax(1).values

    x = np.random.default_rng(4).standard_normal((3, 50)).astype(np.float32)
    got = step(gc.tensor(x))
    t = torch.tensor(x)
    want = t.cumsum(1) + t.cumprod(1) + t.cummax(1).values
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-5, atol=1e-5)
    text = step.ir("optimized")
    assert "cumsum" in text and "cumprod" in text and "cummax" in text
