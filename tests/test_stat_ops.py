"""Order statistics, searching, counting and binning (graphc/stat_ops.py) against PyTorch:
values, indices and gradients eagerly (float32 and float64) and compiled (one compile over
two batch sizes, the batch dimension symbolic), integer and bool dtypes, 0-d and empty
tensors, NaNs and ties, PyTorch's return types and exception types, and the
``NotImplementedError`` of the ops whose output shape depends on the data when traced."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from _op_parity import check_compiled, check_eager
from _op_parity import loss as _loss
from _op_parity import np_of as _np
from _op_parity import outs as _outs
from _torch import torch

import graphc as gc
from graphc import nn, stat_ops

RTOL, ATOL = 1e-5, 1e-5
NAN = float("nan")
INF = float("inf")

def _q(m: Any, x: Any, qs: list) -> Any:
    """A tensor of quantiles (or bin edges) in ``x``'s dtype, as PyTorch requires."""
    return m.tensor(qs, dtype=x.dtype)


# each case: (id, shape of x without the batch dim, f(module, x)) where module is torch or gc
# and x is (batch, *shape); the same expression runs in both frameworks. ``cat([x, x])``
# makes exact ties that keep their gradient; integer results are multiplied into ``x`` so
# the loss has a gradient to compare; histograms are not differentiable in PyTorch, so they
# read ``x.detach()``.
CASES = [
    ("median_all", (3, 4), lambda m, x: m.median(x)),
    ("median_all_ties", (3, 4), lambda m, x: m.median(m.cat([x, x], -1))),
    ("median_all_method", (3, 4), lambda m, x: x[0].median() * x),
    ("median_dim", (3, 4), lambda m, x: m.median(x, -1)),
    ("median_dim_keepdim", (3, 4), lambda m, x: x.median(1, keepdim=True)),
    ("median_batch_dim", (3, 4), lambda m, x: m.median(x, 0)),
    ("median_dim_ties", (3, 4), lambda m, x: m.median(m.cat([x, x.flip(-1)], -1), -1)),
    ("median_nan_propagates", (3, 4), lambda m, x: m.median(m.where(x > 0.8, NAN, x), 2)),
    ("nanmedian_all", (3, 4), lambda m, x: m.nanmedian(m.where(x > 0.8, NAN, x))),
    ("nanmedian_dim", (3, 4), lambda m, x: m.nanmedian(m.where(x > 0.3, NAN, x), 1)),
    ("nanmedian_batch_keepdim", (3, 4), lambda m, x: m.where(x < -0.5, NAN, x).nanmedian(
        -3, True)),
    ("quantile_scalar", (3, 4), lambda m, x: m.quantile(x, 0.3)),
    ("quantile_q_tensor_dim", (3, 4), lambda m, x: m.quantile(x, _q(m, x, [0.1, 0.5, 0.9]),
                                                              dim=-1, keepdim=True)),
    ("quantile_batch_dim", (3, 4), lambda m, x: x.quantile(0.75, 0)),
    ("quantile_keepdim_all", (3, 4), lambda m, x: m.quantile(x, _q(m, x, [0.2, 1.0]),
                                                             keepdim=True)),
    ("quantile_lower", (3, 4), lambda m, x: m.quantile(x, 0.4, 1, interpolation="lower")),
    ("quantile_higher", (3, 4), lambda m, x: m.quantile(x, 0.4, 1, interpolation="higher")),
    ("quantile_midpoint", (3, 4), lambda m, x: m.quantile(x, _q(m, x, [0.0, 0.4, 0.5]), 2,
                                                          interpolation="midpoint")),
    ("quantile_nearest", (3, 4), lambda m, x: m.quantile(x, _q(m, x, [0.125, 0.375, 0.625]),
                                                         2, interpolation="nearest")),
    ("quantile_ties", (3, 4), lambda m, x: m.quantile(m.cat([x, x], -1), 0.4, -1)),
    ("quantile_nan", (3, 4), lambda m, x: m.quantile(m.where(x > 1.0, NAN, x), 0.5, -1)),
    ("nanquantile", (3, 4), lambda m, x: m.nanquantile(m.where(x > 0.5, NAN, x), 0.4, 1)),
    ("nanquantile_q_tensor", (3, 4), lambda m, x: x.nanquantile(
        _q(m, x, [0.25, 0.75]), -1, interpolation="midpoint")),
    ("mode", (3, 4), lambda m, x: m.mode(m.cat([x, x[..., :2], x[..., :1]], -1))),
    ("mode_unique_values", (3, 4), lambda m, x: x.mode(1)),
    ("mode_tied_counts", (3, 4), lambda m, x: m.mode(m.cat([x, x.flip(-1)], -1), -1)),
    ("mode_batch_keepdim", (3, 4), lambda m, x: m.mode(m.cat([x, x[:1]], 0), 0, True)),
    ("searchsorted", (3, 4), lambda m, x: x[0] * m.searchsorted(x[1].sort(-1).values, x[0])),
    ("searchsorted_right_1d", (3, 4), lambda m, x: x * m.searchsorted(
        x[0, 0].sort().values, x, side="right")),
    ("searchsorted_sorter", (3, 4), lambda m, x: x * m.searchsorted(
        x[0, 0], x, right=True, sorter=x[0, 0].argsort())),
    ("searchsorted_int32", (3, 4), lambda m, x: x * m.searchsorted(
        m.tensor([-1.0, 0.0, 1.0]), x, out_int32=True)),
    ("bucketize", (3, 4), lambda m, x: x * m.bucketize(x, m.tensor([-1.0, 0.0, 0.5]))),
    ("bucketize_right", (3, 4), lambda m, x: x * m.bucketize(x.round(), m.tensor(
        [-1.0, 0.0, 1.0]), right=True)),
    ("histc", (3, 4), lambda m, x: (m.histc(x.detach(), 5, -2, 2), x)),
    ("histc_method_bins", (3, 4), lambda m, x: (x.detach().histc(bins=3, min=-1, max=0.5), x)),
    ("histogram_range", (3, 4), lambda m, x: (*m.histogram(x.detach(), 4, range=(-2.0, 2.0)),
                                              x)),
    ("histogram_weight_density", (3, 4), lambda m, x: (*m.histogram(
        x.detach(), 4, range=(-2.0, 2.0), weight=x.detach().abs(), density=True), x)),
    ("histogram_edges", (3, 4), lambda m, x: (*m.histogram(x.detach(), _q(
        m, x, [-3.0, -0.5, 0.0, 0.25, 3.0])), x)),
]
BY_ID = {c[0]: c for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_matches_torch(case: Any) -> None:
    _, shape, f = case
    check_eager(f, shape, RTOL, ATOL, 1e-4, 1e-5, dtypes=True)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_torch(case: Any) -> None:
    """One compile serving batch sizes 2 and 5: outputs and the parameter's gradient."""
    _, shape, f = case
    check_compiled(f, shape, 1e-4, 1e-5)


# -- float64 ------------------------------------------------------------------------------------
def _eager64(f: Any, shape: tuple) -> None:
    rng = np.random.default_rng(5)
    for batch in (2, 3):
        x = rng.standard_normal((batch, *shape))
        p = rng.standard_normal(shape)
        tp = torch.tensor(p, requires_grad=True)
        ty = f(torch, torch.tensor(x) * tp)
        _loss(ty).backward()
        gp = gc.tensor(p, requires_grad=True)
        gy = f(gc, gc.tensor(x) * gp)
        _loss(gy).backward()
        for a, b in zip(_outs(gy), _outs(ty)):
            assert tuple(a.shape) == tuple(b.shape)
            assert str(_np(a).dtype) == str(_np(b).dtype)
            np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(_np(gp.grad), _np(tp.grad), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_float64_matches_torch(case: Any) -> None:
    _, shape, f = case
    _eager64(f, shape)


COMPILED64 = ["median_all_ties", "median_batch_dim", "nanmedian_dim", "quantile_q_tensor_dim",
              "quantile_nearest", "nanquantile", "mode", "searchsorted_sorter",
              "histogram_weight_density", "histc"]


@pytest.mark.parametrize("cid", COMPILED64)
def test_compiled_float64_matches_torch(cid: str) -> None:
    """The float64 step: one compile for two batch sizes, values and gradients."""
    _, shape, f = BY_ID[cid]
    rng = np.random.default_rng(6)
    p0 = rng.standard_normal(shape)
    param = nn.Parameter(gc.tensor(p0))

    @gc.compile
    def step(x: Any) -> Any:
        param.grad = None
        y = f(gc, x * param)
        _loss(y).backward()
        return gc.cat([t.reshape(-1).to(gc.float64) for t in _outs(y)])

    for batch in (2, 5):
        x = rng.standard_normal((batch, *shape))
        tp = torch.tensor(p0, requires_grad=True)
        ty = f(torch, torch.tensor(x) * tp)
        _loss(ty).backward()
        got = step(gc.tensor(x))
        want = torch.cat([t.reshape(-1).to(torch.float64) for t in _outs(ty)])
        np.testing.assert_allclose(_np(got), _np(want), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(_np(param.grad), _np(tp.grad), rtol=1e-9, atol=1e-11)
    assert step.compile_count == 1


# -- dtypes, 0-d and empty tensors: PyTorch's result or PyTorch's exception --------------------
def _same(a: Any, b: Any) -> None:
    assert tuple(a.shape) == tuple(b.shape), (tuple(a.shape), tuple(b.shape))
    assert str(_np(a).dtype) == str(_np(b).dtype), (_np(a).dtype, _np(b).dtype)
    np.testing.assert_allclose(_np(a), _np(b), rtol=RTOL, atol=ATOL)


def _fields(r: Any) -> tuple:
    """A named result's field names: a namedtuple's, or a ``torch.return_types`` struct
    sequence's (``__match_args__``, which both have)."""
    return tuple(getattr(type(r), "__match_args__", ())) if isinstance(r, tuple) else ()


def _agree(f: Any, data: np.ndarray) -> None:
    """``f`` of ``data`` in both frameworks: the same results (values, shapes, dtypes, the
    named tuple's type name and fields), or the same exception type."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = f(torch, torch.tensor(data))
        except Exception as e:  # noqa: BLE001 - whatever PyTorch raises, graphc must too
            with pytest.raises(Exception) as got:
                f(gc, gc.tensor(data))
            assert type(got.value) is type(e), (got.value, e)
            return
        got = f(gc, gc.tensor(data))
    assert isinstance(got, tuple) == isinstance(want, tuple)
    if _fields(want) or _fields(got):
        assert type(got).__name__ == type(want).__name__
        assert _fields(got) == _fields(want)
    assert len(_outs(got)) == len(_outs(want))
    for a, b in zip(_outs(got), _outs(want)):
        _same(a, b)


INT = (np.arange(24, dtype=np.int64).reshape(2, 3, 4) * 7) % 11 - 4
DATA = {"f32": INT.astype(np.float32) / 3, "f64": INT / 3.0, "i64": INT,
        "i32": INT.astype(np.int32), "bool": INT > 0}

DTYPE_FUNCS = [
    lambda m, a: m.median(a),
    lambda m, a: m.median(a, 1),
    lambda m, a: a.median(-1, True),
    lambda m, a: m.nanmedian(a),
    lambda m, a: m.nanmedian(a, 0),
    lambda m, a: m.quantile(a, 0.25),
    lambda m, a: m.quantile(a, 0.6, 2, interpolation="nearest"),
    lambda m, a: m.nanquantile(a, 0.5, 1),
    lambda m, a: m.mode(a),
    lambda m, a: m.mode(a, 1, True),
    lambda m, a: m.searchsorted(a.sort(-1).values, a),
    lambda m, a: m.searchsorted(a[0, 0].sort().values, a, right=True),
    lambda m, a: m.searchsorted(a[0, 0].sort().values, 1),
    lambda m, a: m.searchsorted(a[0, 0].sort().values, 0.5, side="right"),
    lambda m, a: m.searchsorted(m.tensor([-1.0, 0.5, 2.0]), a),
    lambda m, a: m.searchsorted(m.tensor([-1, 0, 2]), a),
    lambda m, a: m.bucketize(a, m.tensor([-1, 0, 2]), out_int32=True),
    lambda m, a: m.bucketize(2, a[0, 0].sort().values),
    lambda m, a: m.histc(a, 4, -1, 2),
    lambda m, a: m.histc(a, 6),
    lambda m, a: m.histogram(a, 3),
    lambda m, a: m.histogram(a, 3, range=(0, 1)),
    lambda m, a: m.bincount(a.reshape(-1) + 4),
    lambda m, a: m.bincount(a[0, 0].abs(), m.tensor([0.5, 1.0, 2.0, 3.0])),
    lambda m, a: m.bincount(a[0, 0].abs(), m.tensor([1, 2, 3, 4]), minlength=9),
    lambda m, a: m.unique(a),
    lambda m, a: m.unique(a, return_inverse=True, return_counts=True),
    lambda m, a: a.unique(sorted=False, return_counts=True, dim=1),
    lambda m, a: m.unique_consecutive(a.reshape(-1).sort().values, return_counts=True),
    lambda m, a: a.unique_consecutive(return_inverse=True, dim=-1),
]


@pytest.mark.parametrize("kind", list(DATA))
@pytest.mark.parametrize("i", range(len(DTYPE_FUNCS)))
def test_dtypes(kind: str, i: int) -> None:
    _agree(DTYPE_FUNCS[i], DATA[kind])


EDGE_FUNCS = [
    lambda m, a: m.median(a), lambda m, a: m.median(a, 0), lambda m, a: m.median(a, -1, True),
    lambda m, a: m.nanmedian(a), lambda m, a: m.nanmedian(a, 0),
    lambda m, a: m.quantile(a, 0.5), lambda m, a: m.quantile(a, 0.5, 0, True),
    lambda m, a: m.nanquantile(a, m.tensor([0.5, 1.0]), -1),
    lambda m, a: m.mode(a), lambda m, a: m.mode(a, 0),
    lambda m, a: m.searchsorted(m.tensor([0.0, 3.0]), a),
    lambda m, a: m.searchsorted(a.reshape(-1), a.reshape(-1)),
    lambda m, a: m.bucketize(a, m.tensor([0.0, 3.0])),
    lambda m, a: m.histc(a, 3), lambda m, a: m.histc(a, 3, 0, 4),
    lambda m, a: m.histogram(a, 2), lambda m, a: m.histogram(a, 2, range=(0.0, 4.0)),
    lambda m, a: m.bincount(a.long().reshape(-1), minlength=2),
    lambda m, a: m.unique(a, return_inverse=True, return_counts=True),
    lambda m, a: m.unique(a, dim=0, return_inverse=True, return_counts=True),
    lambda m, a: m.unique_consecutive(a, return_inverse=True, return_counts=True),
]


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (3, 0), (1,)],
                         ids=["0d", "0", "0x3", "3x0", "1"])
@pytest.mark.parametrize("i", range(len(EDGE_FUNCS)))
def test_zero_dim_and_empty(shape: tuple, i: int) -> None:
    _agree(EDGE_FUNCS[i], np.full(shape, 2.5, np.float32))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
@pytest.mark.parametrize("shape", [(), (0,), (2, 0)])
def test_integer_zero_dim_and_empty(shape: tuple, dtype: Any) -> None:
    """The median of no elements is NaN, which ATen converts to an integer dtype's minimum;
    the other edge functions as for float32."""
    for f in EDGE_FUNCS:
        _agree(f, np.full(shape, 2, dtype))


# -- NaNs, infinities and ties --------------------------------------------------------------------
NAN_DATA = [
    np.array([3.0, NAN, 1.0, 2.0, NAN], np.float32),
    np.array([NAN, NAN, NAN], np.float32),
    np.array([[1.0, NAN, 2.0, 0.5], [NAN, NAN, NAN, NAN], [4.0, 3.0, 2.0, 2.0]], np.float32),
    np.array([[INF, -INF, 1.0], [-INF, -INF, 2.0]], np.float64),
]
NAN_FUNCS = [
    lambda m, a: m.median(a), lambda m, a: m.median(a, -1), lambda m, a: m.median(a, 0),
    lambda m, a: m.nanmedian(a), lambda m, a: m.nanmedian(a, -1),
    lambda m, a: m.nanmedian(a, 0, True), lambda m, a: m.quantile(a, 0.3),
    lambda m, a: m.quantile(a, m.tensor([0.3, 0.9], dtype=a.dtype), -1),
    lambda m, a: m.nanquantile(a, 0.3), lambda m, a: m.nanquantile(a, 0.7, -1),
    lambda m, a: m.nanquantile(a, 0.5, 0, interpolation="nearest"),
    lambda m, a: m.searchsorted(m.tensor([0.0, 2.0, 3.0], dtype=a.dtype), a),
    lambda m, a: m.histc(a, 3, 0, 3),
]


@pytest.mark.parametrize("d", range(len(NAN_DATA)))
@pytest.mark.parametrize("i", range(len(NAN_FUNCS)))
def test_nans_and_infinities(d: int, i: int) -> None:
    _agree(NAN_FUNCS[i], NAN_DATA[d])


@pytest.mark.parametrize("data", [
    [1.0, 2.0, 2.0, 3.0], [2.0, 2.0, 2.0, 3.0, NAN], [-INF, -INF, 2.0], [INF, 1.0, INF, INF],
    [5.0, 5.0, 5.0], [0.0, -1.0, 0.0, 1.0],
], ids=["ties", "nan", "neg_inf", "pos_inf", "all_equal", "zeros"])
@pytest.mark.parametrize("fn", ["median", "nanmedian"])
def test_all_element_gradient_is_shared_by_ties(data: list, fn: str) -> None:
    """PyTorch's ``evenly_distribute_backward``: the elements equal to the median (the NaNs
    when it is NaN) share the gradient equally."""
    x = np.array(data, np.float32)
    g, t = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    gy, ty = getattr(gc, fn)(g), getattr(torch, fn)(t)
    _same(gy, ty)
    (gy * 3).backward()
    (ty * 3).backward()
    np.testing.assert_allclose(_np(g.grad), _np(t.grad), rtol=1e-6)


def test_indices_are_pytorchs() -> None:
    """Median along a dim: the stable order's element (ATen partitions with the index as tie
    breaker), the first NaN when there is one, ``std::nth_element``'s pick for an all-NaN
    ``nanmedian`` row; mode: the smallest of the most frequent values, at its last
    occurrence."""
    rows = np.array([[3, 1, 3, 1, 3, 1], [2, 2, 1, 1, 0, 5], [7, 7, 7, 7, 7, 7],
                     [1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1], [0, 9, 9, 0, 4, 4]], np.float32)
    for data in (rows, np.where(rows > 5, NAN, rows), np.full((2, 5), NAN, np.float32)):
        # NaN breaks the ordering PyTorch's mode sorts with (its result is then the sort
        # algorithm's accident), so mode is compared on NaN-free data only
        for fn in ("median", "nanmedian") + (("mode",) if data is rows else ()):
            want = getattr(torch, fn)(torch.tensor(data), 1)
            got = getattr(gc, fn)(gc.tensor(data), 1)
            assert type(got).__name__ == type(want).__name__ == fn
            assert _fields(got) == _fields(want) == ("values", "indices")
            np.testing.assert_array_equal(_np(got.indices), _np(want.indices), err_msg=fn)
            np.testing.assert_array_equal(_np(got.values), _np(want.values), err_msg=fn)
    for n in range(1, 40):  # all-NaN rows of every length
        nan_rows = np.full((2, n), NAN, np.float32)
        np.testing.assert_array_equal(
            _np(gc.nanmedian(gc.tensor(nan_rows), 1).indices),
            _np(torch.nanmedian(torch.tensor(nan_rows), 1).indices), err_msg=str(n))
    counts = np.random.default_rng(3).integers(0, 3, (40, 9))  # short rows: PyTorch's order
    want, got = torch.mode(torch.tensor(counts), 1), gc.mode(gc.tensor(counts), 1)
    np.testing.assert_array_equal(_np(got.values), _np(want.values))
    np.testing.assert_array_equal(_np(got.indices), _np(want.indices))


def test_long_rows_mode_value_and_a_valid_index() -> None:
    """Past 16 elements PyTorch's index among equal values follows ``std::sort``; the value
    is still PyTorch's and graphc's index holds it (its last occurrence)."""
    data = np.random.default_rng(4).integers(0, 4, (6, 300))
    want, got = torch.mode(torch.tensor(data), 1), gc.mode(gc.tensor(data), 1)
    np.testing.assert_array_equal(_np(got.values), _np(want.values))
    idx = _np(got.indices)
    for r in range(6):
        assert data[r, idx[r]] == _np(got.values)[r]
        assert idx[r] == np.nonzero(data[r] == data[r, idx[r]])[0][-1]


def test_quantile_q_rounding_and_every_interpolation() -> None:
    """``q`` is rounded to the input's dtype before the rank is computed (as ATen's
    ``scalar_tensor(q, self.options())``), and ``nearest`` rounds half to even."""
    x = np.arange(11, dtype=np.float32) ** 1.5
    qs = [0.0, 0.05, 0.1, 0.15, 1 / 3, 0.45, 0.5, 0.55, 0.95, 1.0]
    for interpolation in ("linear", "lower", "higher", "midpoint", "nearest"):
        for d in (np.float32, np.float64):
            for q in qs:
                _same(gc.quantile(gc.tensor(x.astype(d)), q, interpolation=interpolation),
                      torch.quantile(torch.tensor(x.astype(d)), q,
                                     interpolation=interpolation))
            qt = np.array(qs, d)
            _same(gc.nanquantile(gc.tensor(x.astype(d)), gc.tensor(qt),
                                 interpolation=interpolation),
                  torch.nanquantile(torch.tensor(x.astype(d)), torch.tensor(qt),
                                    interpolation=interpolation))


def test_search_promotes_as_pytorch() -> None:
    """Sequence and values compare in their promoted dtype (a Python number as a weak
    scalar): ``2.5`` among int64 boundaries, an int64 value among float ones."""
    s = np.array([1, 2, 2, 3])
    for seq, v in ((s, 2.5), (s.astype(np.float32), 2), (s, np.array([2.5, 3.0], np.float32)),
                   (s.astype(np.float32), np.array([2, 3])),
                   (s.astype(np.float32), np.array(2.0, np.float64))):
        for right in (False, True):
            gv = gc.tensor(v) if isinstance(v, np.ndarray) else v
            tv = torch.tensor(v) if isinstance(v, np.ndarray) else v
            _same(gc.searchsorted(gc.tensor(seq), gv, right=right),
                  torch.searchsorted(torch.tensor(seq), tv, right=right))
            if not isinstance(v, np.ndarray) or v.ndim:
                _same(gc.bucketize(gv, gc.tensor(seq), right=right),
                      torch.bucketize(tv, torch.tensor(seq), right=right))


def test_histograms_match_on_random_data() -> None:
    rng = np.random.default_rng(8)
    for d in (np.float32, np.float64):
        x = (rng.standard_normal(500) * 3).astype(d)
        w = rng.random(500).astype(d)
        for bins, lo, hi in ((10, -2, 2), (7, 0, 0), (33, -9.5, 1.25), (1, -1, 1)):
            _same(gc.histc(gc.tensor(x), bins, lo, hi), torch.histc(torch.tensor(x), bins, lo, hi))
        for kw in ({}, {"range": (-3.0, 4.0)}, {"weight": w}, {"density": True},
                   {"weight": w, "density": True, "range": (-1, 1)}):
            targs = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
            gargs = {k: gc.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
            want = torch.histogram(torch.tensor(x), 12, **targs)
            got = gc.histogram(gc.tensor(x), 12, **gargs)
            assert type(got).__name__ == "histogram" and _fields(got) == _fields(want)
            _same(got.hist, want.hist)
            _same(got.bin_edges, want.bin_edges)
        edges = np.sort(rng.standard_normal(6) * 3).astype(d)
        want = torch.histogram(torch.tensor(x), torch.tensor(edges), weight=torch.tensor(w))
        got = gc.histogram(gc.tensor(x), gc.tensor(edges), weight=gc.tensor(w))
        _same(got.hist, want.hist)
        _same(got.bin_edges, want.bin_edges)


def test_unique_orders_and_nans() -> None:
    """Every NaN is a value of its own (PyTorch's kernels compare with ``==``), -0.0 equals
    0.0, rows with a NaN never equal, and the inverse maps each element to its value."""
    cases = [np.array([3.0, 1.0, 2.0, NAN, 1.0, NAN, 3.0], np.float32),
             np.array([-0.0, 0.0, 1.0], np.float32),
             np.array([[1.0, NAN], [1.0, NAN], [0.0, 2.0]], np.float32),
             np.array([[3, 1, 2], [3, 1, 2], [0, 0, 0], [3, 1, 2]]),
             np.array([True, False, True, True])]
    for a in cases:
        for kw in ({}, {"return_inverse": True}, {"return_counts": True},
                   {"return_inverse": True, "return_counts": True}):
            _agree(lambda m, t, kw=kw: m.unique(t, **kw), a)
            _agree(lambda m, t, kw=kw: m.unique_consecutive(t, **kw), a)
            if a.ndim == 2:
                for dim in (0, 1, -1):
                    _agree(lambda m, t, kw=kw, dim=dim: m.unique(t, dim=dim, **kw), a)
                    _agree(lambda m, t, kw=kw, dim=dim: t.unique_consecutive(dim=dim, **kw), a)


# -- errors --------------------------------------------------------------------------------------
ERRORS = [
    (lambda m, x: m.median(x, 3), "imension"),
    (lambda m, x: m.median(x, 1.5), "dim"),
    (lambda m, x: m.median(x, (0, 1)), "dim"),
    (lambda m, x: m.median(x, keepdim=True), "dim"),
    (lambda m, x: m.median(x > 0), "Bool"),
    (lambda m, x: m.median(x > 0, 0), "Bool"),
    (lambda m, x: m.median(m.zeros(0, 3), 0), "non-zero size"),
    (lambda m, x: m.median([1.0]), "input"),
    (lambda m, x: m.nanmedian(x > 0), "Bool"),
    (lambda m, x: m.nanmedian(m.zeros(2, 0), 1), "non-zero size"),
    (lambda m, x: m.quantile(x, 1.1), "q must be in the range"),
    (lambda m, x: m.quantile(x, -0.5), "q must be in the range"),
    (lambda m, x: m.quantile(x, m.tensor([0.5, 1.5])), "q values"),
    (lambda m, x: m.quantile(x, m.tensor([0.5], dtype=m.float64)), "same dtype"),
    (lambda m, x: m.quantile(x, m.tensor([[0.5]])), "1D"),
    (lambda m, x: m.quantile(x.long(), 0.5), "float or double"),
    (lambda m, x: m.quantile(x.to(m.bfloat16), 0.5), "float or double"),
    (lambda m, x: m.quantile(m.zeros(0), 0.5), "non-empty"),
    (lambda m, x: m.quantile(x, 0.5, interpolation="foo"), "interpolation"),
    (lambda m, x: m.quantile(x, [0.5]), "quantile"),
    (lambda m, x: m.quantile(x, 0.5, dim=1.0), "quantile"),
    (lambda m, x: m.quantile(x, 0.5, dim=3), "imension"),
    (lambda m, x: m.nanquantile(x, 2.0), "q must be in the range"),
    (lambda m, x: m.mode(x, 3), "imension"),
    (lambda m, x: m.mode(m.zeros(3, 0)), "non-zero size"),
    (lambda m, x: m.searchsorted(x[0, 0], x[0, 0], side="middle"), "side"),
    (lambda m, x: m.searchsorted(x[0, 0], x[0, 0], side="left", right=True), "opposites"),
    (lambda m, x: m.searchsorted(x[0], x[0, 0, 0]), "scalar only"),
    (lambda m, x: m.searchsorted(x[0], x[1, :2]), "first N-1 dimensions"),
    (lambda m, x: m.searchsorted(x[0, 0, 0], x), "positive dimension"),
    (lambda m, x: m.searchsorted(x[0, 0], x, sorter=m.tensor([0, 1])), "sorter"),
    (lambda m, x: m.searchsorted(x[0, 0], x, sorter=m.tensor([0.0, 1, 2, 3])), "sorter"),
    (lambda m, x: m.searchsorted(x[0, 0], x, sorter=m.tensor([0, 1, 2, 4])), "out of range"),
    (lambda m, x: m.searchsorted(x[0, 0] > 0, x > 0), "Bool"),
    (lambda m, x: m.searchsorted([1.0, 2.0], x), "searchsorted"),
    (lambda m, x: m.bucketize(x, x[0]), "1 dimension"),
    (lambda m, x: m.histc(x, 0), "bins must be > 0"),
    (lambda m, x: m.histc(x, -2, 0, 1), "bins must be > 0"),
    (lambda m, x: m.histc(x, 2.0), "bins"),
    (lambda m, x: m.histc(x, 4, 3, 1), "max must be larger than min"),
    (lambda m, x: m.histc(x, 4, 1, INF), "not finite"),
    (lambda m, x: m.histc(m.where(x > 0, NAN, x), 4), "not finite"),
    (lambda m, x: m.histc(x.long(), 4), "Long"),
    (lambda m, x: m.histc(x, 4, min="a"), "min"),
    (lambda m, x: m.histogram(x, 0), "bins must be > 0"),
    (lambda m, x: m.histogram(x, 2, range=(3.0, 1.0)), "min should not exceed max"),
    (lambda m, x: m.histogram(x, 2, range=(0.0, 1.0, 2.0)), "2 elements"),
    (lambda m, x: m.histogram(x, 2, range=(0.0, INF)), "not finite"),
    (lambda m, x: m.histogram(m.where(x > 0, NAN, x), 3), "not finite"),
    (lambda m, x: m.histogram(x, m.tensor([1.0])), "bins must be > 0"),
    (lambda m, x: m.histogram(x, m.tensor([[1.0, 2.0]])), "one dimension"),
    (lambda m, x: m.histogram(x, m.tensor([1, 2])), "same dtype"),
    (lambda m, x: m.histogram(x, 2, weight=x.double()), "same dtype"),
    (lambda m, x: m.histogram(x, 2, weight=x[0]), "same shape"),
    (lambda m, x: m.histogram(x.long(), 2), "Long"),
    (lambda m, x: m.bincount(x), "Float"),
    (lambda m, x: m.bincount(x > 0), "Bool"),
    (lambda m, x: m.bincount(m.tensor([0, -3, 1])), "non-negative"),
    (lambda m, x: m.bincount(m.tensor([[0, 3]])), "1-d"),
    (lambda m, x: m.bincount(m.tensor([1, 2]), weights=m.tensor([1.0])), "weights"),
    (lambda m, x: m.bincount(m.tensor([1]), minlength=-1), "minlength"),
    (lambda m, x: m.bincount(m.tensor([1]), minlength=1.5), "minlength"),
    (lambda m, x: m.unique(x, dim=3), "imension"),
    (lambda m, x: m.unique(m.zeros(0, 2), dim=1), "0 sized dimensions"),
    (lambda m, x: m.unique(m.tensor(2.0), dim=0), "no dimensions"),
    (lambda m, x: m.unique_consecutive(m.zeros(2, 0), dim=0), "0 sized dimensions"),
    (lambda m, x: m.unique_consecutive(x, dim=-4), "imension"),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_are_pytorchs(i: int) -> None:
    """PyTorch's exception type, and a message naming the argument or the rule broken."""
    f, word = ERRORS[i]
    x = np.random.default_rng(7).standard_normal((2, 3, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as want:
            f(torch, torch.tensor(x))
        with pytest.raises(Exception) as got:
            f(gc, gc.tensor(x))
    assert type(got.value) is type(want.value), (got.value, want.value)
    assert word in str(got.value), (word, str(got.value))


# -- compiled: what traces and what cannot --------------------------------------------------------
@pytest.mark.parametrize("f, word", [
    (lambda x: gc.bincount(x.long().abs().reshape(-1)), "bincount"),
    (lambda x: gc.unique(x), "unique"),
    (lambda x: x.unique(return_counts=True), "unique"),
    (lambda x: gc.unique_consecutive(x, dim=0), "unique_consecutive"),
    (lambda x: gc.histc(x, 4), "histc"),
    (lambda x: gc.histc(x, 4, min=1, max=1), "histc"),
    (lambda x: x.histogram(3), "histogram"),
], ids=["bincount", "unique", "unique_method", "unique_consecutive", "histc_data_range",
        "histc_min_eq_max", "histogram_data_range"])
def test_data_dependent_shapes_raise_when_traced(f: Any, word: str) -> None:
    """Output lengths (or bin edges) that the data decides cannot be traced: a clear
    ``NotImplementedError`` naming the function, raised while tracing."""
    step = gc.compile(f)
    with pytest.raises(NotImplementedError, match=word) as e:
        step(gc.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
    assert "compiled" in str(e.value)


def test_compiled_ranges_and_values_are_data_not_code() -> None:
    """A compiled median, mode and searchsorted read the values of each call: ties, NaNs and
    a batch of one included (one compile)."""
    seq = gc.tensor([-1.0, 0.0, 2.0])

    @gc.compile
    def step(x: Any) -> Any:
        m = gc.median(x, 0)
        return (m.values, m.indices, gc.mode(x, 0).indices, gc.nanmedian(x),
                gc.searchsorted(seq, x), gc.histc(x, 3, -1, 2))

    for data in (np.array([[1.0, NAN], [1.0, 2.0], [0.0, 2.0]], np.float32),
                 np.array([[5.0, 5.0]], np.float32),
                 np.array([[NAN, 1.0], [NAN, -1.0], [2.0, -1.0], [2.0, 7.0]], np.float32)):
        got = step(gc.tensor(data))
        t = torch.tensor(data)
        tm = torch.median(t, 0)
        for a, b in zip(got, (tm.values, tm.indices, torch.mode(t, 0).indices,
                              torch.nanmedian(t), torch.searchsorted(torch.tensor(
                                  [-1.0, 0.0, 2.0]), t), torch.histc(t, 3, -1, 2))):
            _same(a, b)
    assert step.compile_count == 1


def test_step_of_stat_ops_lowers_to_ptx(tmp_path: Any) -> None:
    """The functions and their gradients need nothing of the PTX backend beyond the
    primitives: a step using them lowers to PTX, which ptxas assembles where it is
    installed."""
    import shutil
    import subprocess

    w = nn.Parameter(gc.tensor(np.random.default_rng(12).standard_normal((3, 4))
                               .astype(np.float32)))

    def step(x: Any) -> Any:
        w.grad = None
        y = x * w
        parts = [gc.median(y), gc.median(y, -1).values, gc.nanmedian(y, 0).values,
                 gc.quantile(y, gc.tensor([0.25, 0.5]), dim=1),
                 gc.nanquantile(y, 0.3, interpolation="nearest"), gc.mode(y, -1).values,
                 y * gc.searchsorted(gc.tensor([-1.0, 0.0, 1.0]), y),
                 y * gc.bucketize(y, gc.tensor([0.0]), right=True),
                 gc.histc(y.detach(), 4, -1, 1), gc.histogram(y.detach(), 3, range=(-2, 2))[0]]
        loss = sum((p * p).sum() for p in parts)
        loss.backward()
        return loss

    fn = gc.compile(step, device="cuda", example_args=(np.ones((5, 3, 4), np.float32),))
    text = fn.ir("ptx")
    assert ".visible .entry" in text
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return
    (tmp_path / "k.ptx").write_text(text)
    res = subprocess.run([ptxas, "--gpu-name", "sm_80", "-O3", str(tmp_path / "k.ptx"), "-o",
                          str(tmp_path / "k.cubin")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]


# -- names ---------------------------------------------------------------------------------------
def test_names_are_torchs() -> None:
    """Every function is ``torch.<name>`` and ``gc.<name>``; it is a ``Tensor`` method
    exactly where PyTorch has the method; the named tuples are PyTorch's return types."""
    for name in stat_ops.FUNCTIONS:
        assert hasattr(torch, name), name
        assert getattr(gc, name) is getattr(stat_ops, name)
        assert name in gc._core.__all__ and name in gc._CORE_NAMES
        assert hasattr(gc.Tensor, name) == hasattr(torch.Tensor, name), name
    assert gc.count_nonzero is gc._core.count_nonzero  # there before this module
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for fn, args in (("median", (1,)), ("nanmedian", (1,)), ("mode", (1,)),
                     ("histogram", (3,))):
        want = getattr(torch, fn)(torch.tensor(x), *args)
        got = getattr(gc, fn)(gc.tensor(x), *args)
        assert type(got).__name__ == type(want).__name__ == fn
        assert _fields(got) == _fields(want)
