"""PyTorch's composite functions (graphc/composite_ops.py) against PyTorch: values and
gradients eagerly (float32 and float64) and compiled (one compile over two batch sizes, the
batch dimension symbolic), integer and bool dtypes, 0-d and empty tensors, and PyTorch's
exception types for bad arguments, with messages that name what was wrong."""

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
from graphc import composite_ops, nn

RTOL, ATOL = 1e-5, 1e-5
NAN = float("nan")
INF = float("inf")

# each case: (id, shape of x without the batch dim, f(module, x)) where module is torch or gc
# and x is (batch, *shape); the same expression runs in both frameworks
CASES = [
    ("diff", (3, 4), lambda m, x: m.diff(x)),
    ("diff_n2_dim1", (3, 4), lambda m, x: x.diff(2, 1)),
    ("diff_batch", (3, 4), lambda m, x: m.diff(x, dim=0)),
    ("diff_prepend_append", (3, 4), lambda m, x: m.diff(x, n=2, dim=-1, prepend=x[:, :, :1] * 2,
                                                        append=x[:, :, -2:])),
    ("diff_prepend_batch", (3, 4), lambda m, x: x.diff(dim=0, prepend=x[:1] * 3)),
    ("diff_n0", (3, 4), lambda m, x: m.diff(x, 0) * 2),
    ("diff_n_past_length", (3, 4), lambda m, x: m.cat([m.diff(x, n=6).reshape(-1),
                                                       x.reshape(-1)])),
    ("rot90", (3, 4), lambda m, x: m.rot90(x, 1, [1, 2])),
    ("rot90_negative_k", (3, 4), lambda m, x: x.rot90(-1, [2, 1])),
    ("rot90_k2", (3, 4), lambda m, x: m.rot90(x, 2, (-1, -2))),
    ("rot90_k3_batch", (3, 4), lambda m, x: m.rot90(x, 3, [0, 2])),
    ("rot90_k4", (3, 4), lambda m, x: x.rot90(4, [1, 2]) * 2),
    ("cross", (3, 4), lambda m, x: m.cross(x, x.flip(-1), dim=1)),
    ("cross_broadcast", (4, 3), lambda m, x: x.cross(x[:1] + 1, dim=-1)),
    ("trapezoid", (3, 4), lambda m, x: m.trapezoid(x)),
    ("trapezoid_dx", (3, 4), lambda m, x: m.trapezoid(x, dx=0.5, dim=1)),
    ("trapezoid_x", (3, 4), lambda m, x: m.trapezoid(x, x.exp().cumsum(-1))),
    ("trapezoid_x_1d", (3, 4), lambda m, x: m.trapezoid(x, x[0, 0].exp().cumsum(0))),
    ("trapezoid_x_lower_rank", (3, 4), lambda m, x: m.trapezoid(x, x[0] * 2, dim=1)),
    ("trapezoid_batch", (3, 4), lambda m, x: m.trapezoid(x, dim=0)),
    ("trapz", (3, 4), lambda m, x: m.trapz(x, dx=2) + m.trapz(x, x, dim=1).sum(-1, True)),
    ("cumulative_trapezoid", (3, 4), lambda m, x: m.cumulative_trapezoid(x)),
    ("cumulative_trapezoid_x", (3, 4), lambda m, x: m.cumulative_trapezoid(
        x, x.exp().cumsum(1), dim=1)),
    ("cumulative_trapezoid_batch", (3, 4), lambda m, x: m.cumulative_trapezoid(x, dx=0.25,
                                                                               dim=0)),
    ("nansum", (3, 4), lambda m, x: m.nansum(m.where(x > 0.8, NAN, x))),
    ("nansum_dims", (3, 4), lambda m, x: m.where(x < -1, NAN, x).nansum((0, 2), keepdim=True)),
    ("nanmean", (3, 4), lambda m, x: m.nanmean(m.where(x > 0.5, NAN, x), -1)),
    ("nanmean_keepdim", (3, 4), lambda m, x: m.where(x > 1, NAN, x).nanmean(dim=(0, 1),
                                                                             keepdim=True)),
    ("nanmean_dtype", (3, 4), lambda m, x: m.nanmean(x, 1, dtype=m.float64)),
    ("tensordot_pairs", (3, 4), lambda m, x: m.tensordot(x, x[0], dims=([1, 2], [0, 1]))),
    ("tensordot_int", (3, 4), lambda m, x: m.tensordot(x, x[0].T, 1)),
    ("tensordot_outer", (3, 4), lambda m, x: m.tensordot(x, x[0, 0], 0)),
    ("tensordot_batch", (3, 4), lambda m, x: m.tensordot(x, x.flip(0), dims=([0, 2], [0, 2]))),
    ("tensordot_size_one", (3, 4), lambda m, x: m.tensordot(x, x[:, :1], dims=([1], [1]))),
    ("tensordot_negative", (3, 4), lambda m, x: m.tensordot(x[0], x, dims=[[-1], [-1]])),
    ("inner", (3, 4), lambda m, x: m.inner(x, x[0])),
    ("inner_vector", (3, 4), lambda m, x: x.inner(x[0, 0])),
    ("inner_scalar", (3, 4), lambda m, x: m.inner(x[0, 0, 0], x)),
    ("vdot", (3, 4), lambda m, x: m.vdot(x[:, 0, 0], x[:, 1, 1])),
    ("vdot_method", (3, 4), lambda m, x: x[0, 0].vdot(x[1, 1])),
    ("addr", (3, 4), lambda m, x: m.addr(x[0], x[0, :, 0], x[1, 0])),
    ("addr_scaled_0d_input", (3, 4), lambda m, x: m.addr(x[0, 0, 0], x[0, :, 1], x[1, 1],
                                                         beta=0.5, alpha=-2.0)),
    ("addr_beta0", (3, 4), lambda m, x: m.addr(x[:, 0], x[:, 1, 0], x[0, 2], beta=0, alpha=3)),
    ("addr_method", (3, 4), lambda m, x: x[:, :, 0].addr(x[:, 0, 0], x[0, 1, :3], alpha=2)),
    ("addbmm", (3, 4), lambda m, x: m.addbmm(x[0, :, :3], x, x.transpose(1, 2))),
    ("addbmm_scaled", (3, 4), lambda m, x: x[0, :1, :1].addbmm(x, x.mT, beta=0.5, alpha=2.0)),
    ("renorm", (3, 4), lambda m, x: m.renorm(x, 2, 0, 1.0)),
    ("renorm_p1", (3, 4), lambda m, x: x.renorm(1, -1, 2.0)),
    ("renorm_inf", (3, 4), lambda m, x: m.renorm(x, INF, 1, 0.5)),
    ("renorm_p3", (3, 4), lambda m, x: m.renorm(x, 3, 2, 1.5)),
    ("atleast_1d", (3, 4), lambda m, x: m.atleast_1d(x[0, 0, 0], x)),
    ("atleast_2d", (3, 4), lambda m, x: m.atleast_2d([x[:, 0, 0], x[0, 0, 0], x])),
    ("atleast_3d", (3, 4), lambda m, x: m.atleast_3d(x[:, 0, 0], x[0], x[0, 0, 0])),
    ("atleast_3d_one", (3, 4), lambda m, x: m.atleast_3d(x[:, 0])),
    ("hstack", (3, 4), lambda m, x: m.hstack([x, x[:, :1]])),
    ("hstack_1d", (3, 4), lambda m, x: m.hstack((x[:, 0, 0], x[0, 0]))),
    ("vstack", (3, 4), lambda m, x: m.vstack([x[0], x[1, 0], x[:, 2]])),
    ("row_stack", (3, 4), lambda m, x: m.row_stack((x[:, 0, 0], x[:, 1, 1]))),
    ("dstack", (3, 4), lambda m, x: m.dstack([x[0], x[1] * 2])),
    ("dstack_1d", (3, 4), lambda m, x: m.dstack([x[:, 0, 0], x[:, 1, 1]])),
    ("column_stack", (3, 4), lambda m, x: m.column_stack([x[:, 0, 0], x[:, 1], x[:, 2, :2]])),
    ("take", (3, 4), lambda m, x: m.take(x, m.tensor([0, 5, -1, 7, 0]))),
    ("take_2d_index", (3, 4), lambda m, x: x.take(m.tensor([[11, -12], [3, 3]]))),
    ("diagflat", (3, 4), lambda m, x: m.diagflat(x[0, 0])),
    ("diagflat_offset", (3, 4), lambda m, x: x[0, :2].diagflat(-2)),
    ("diagflat_batch", (3, 4), lambda m, x: m.diagflat(x[:, 0, :2], 1)),
    # PyTorch's vander cannot be differentiated (it writes into slices in place), so its
    # values are compared here and graphc's gradient in test_vander_gradient
    ("vander", (3, 4), lambda m, x: x[0] @ m.vander(x[0, 0].detach())),
    ("vander_N_increasing", (3, 4), lambda m, x: m.vander(x[0, :, 0].detach(), N=5,
                                                          increasing=True) * x[0, :, :1]),
    ("vander_batch", (3, 4), lambda m, x: m.vander(x[:, 0, 0].detach(), 3) * x[:, 0, :3]),
    ("vander_batch_default_N", (3, 4), lambda m, x: m.vander(x[:, 0, 0].detach()) * x[:, :1, 0]),
    ("block_diag", (3, 4), lambda m, x: m.block_diag(x[0], x[0, 0, 0], x[1, 1])),
    ("block_diag_batch", (3, 4), lambda m, x: m.block_diag(x[:, 0], x[:, 1, 0])),
    ("cartesian_prod", (3, 4), lambda m, x: m.cartesian_prod(x[:, 0, 0], x[0, 0, :3])),
    ("cartesian_prod_three", (3, 4), lambda m, x: m.cartesian_prod(x[0, 0, :2], x[0, 1, :3],
                                                                   x[0, 2, :2])),
    ("cdist", (3, 4), lambda m, x: m.cdist(x, x[0] + 0.5)),
    ("cdist_p1", (3, 4), lambda m, x: m.cdist(x[:, 0], x[0] * 2, p=1)),
    ("cdist_p0", (3, 4), lambda m, x: m.cdist(x, x[1] + 0.1, p=0) * x[:, :, :1]),
    ("cdist_inf", (3, 4), lambda m, x: m.cdist(x[0], x[:, 1], p=INF)),
    ("cdist_p3_batches", (3, 4), lambda m, x: m.cdist(x, x.flip(0) + 0.25, p=3.0)),
    ("cdist_half", (3, 4), lambda m, x: m.cdist(x[0], x[1] + 0.5, p=0.5)),
    ("cdist_mm", (3, 4), lambda m, x: m.cdist(x, x[0] + 0.5,
                                              compute_mode="use_mm_for_euclid_dist")),
    ("cov", (3, 4), lambda m, x: m.cov(x[:, 0])),
    ("cov_batch_observations", (3, 4), lambda m, x: m.cov(x[:, 0].T, correction=0)),
    ("cov_1d", (3, 4), lambda m, x: x[0, 0].cov()),
    ("cov_fweights", (3, 4), lambda m, x: m.cov(x[0], fweights=m.tensor([1, 2, 0, 3]))),
    ("cov_aweights", (3, 4), lambda m, x: m.cov(x[0], aweights=x[1, 0].abs() + 0.1,
                                                correction=2)),
    ("cov_both", (3, 4), lambda m, x: x[0].cov(fweights=m.tensor([2, 1, 1, 3]),
                                               aweights=x[1, 1] * x[1, 1])),
    ("corrcoef", (3, 4), lambda m, x: m.corrcoef(x[0])),
    ("corrcoef_batch", (3, 4), lambda m, x: x[:, 0].corrcoef()),
    ("narrow_copy", (3, 4), lambda m, x: x.narrow_copy(2, 1, 2)),
    ("narrow_copy_negative", (3, 4), lambda m, x: m.narrow_copy(x, -1, -3, 2)),
    ("narrow_copy_batch", (3, 4), lambda m, x: x.narrow_copy(0, 1, 1)),
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


COMPILED64 = ["diff_prepend_append", "rot90_k3_batch", "cross", "trapezoid_x",
              "cumulative_trapezoid_batch", "nanmean", "tensordot_batch", "addbmm_scaled",
              "addr", "renorm", "vander_batch", "cdist", "cdist_mm", "cov_both", "corrcoef_batch",
              "take", "block_diag_batch"]


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


def _agree(f: Any, data: np.ndarray) -> None:
    """``f`` of ``data`` in both frameworks: the same results (values, shapes, dtypes), or
    the same exception type."""
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
    assert len(_outs(got)) == len(_outs(want))
    for a, b in zip(_outs(got), _outs(want)):
        _same(a, b)


INT = (np.arange(24, dtype=np.int64).reshape(2, 3, 4) * 7) % 11 - 4
DATA = {"f32": INT.astype(np.float32) / 3, "f64": INT / 3.0, "i64": INT,
        "i32": INT.astype(np.int32), "bool": INT > 0}

DTYPE_FUNCS = [
    lambda m, a: m.diff(a, dim=1),
    lambda m, a: a.diff(append=a[..., :1]),
    lambda m, a: m.diff(a, 2, 0, prepend=a[:1]),
    lambda m, a: m.rot90(a, 1, (1, 2)),
    lambda m, a: m.cross(a[:, :, :3], a[:, :, 1:], dim=2),
    lambda m, a: m.trapezoid(a),
    lambda m, a: m.trapezoid(a, a, dim=1),
    lambda m, a: m.trapezoid(a, dx=2),
    lambda m, a: m.trapz(a, dx=0.5, dim=0),
    lambda m, a: m.cumulative_trapezoid(a),
    lambda m, a: m.cumulative_trapezoid(a, a[0, 0], dim=-1),
    lambda m, a: m.nansum(a, 1),
    lambda m, a: m.nansum(a, dtype=m.float64),
    lambda m, a: m.nanmean(a),
    lambda m, a: m.nanmean(a, dim=(0, 2)),
    lambda m, a: m.tensordot(a, a, dims=([1, 2], [1, 2])),
    lambda m, a: m.tensordot(a, a[0], 2),
    lambda m, a: m.inner(a, a[0]),
    lambda m, a: m.vdot(a[0, 0], a[1, 1]),
    lambda m, a: m.addr(a[0], a[0, :, 0], a[1, 0]),
    lambda m, a: m.addr(a[0, 0, 0], a[0, :, 0], a[1, 0], beta=2, alpha=3),
    lambda m, a: m.addr(a[0], a[0, :, 0], a[1, 0], beta=0),
    lambda m, a: m.addbmm(a[0, :, :3], a, a.transpose(1, 2)),
    lambda m, a: m.renorm(a, 2, 0, 1),
    lambda m, a: m.atleast_3d(a[0, 0]),
    lambda m, a: m.hstack([a, a]),
    lambda m, a: m.vstack([a[0], a[1]]),
    lambda m, a: m.dstack([a[0], a[1]]),
    lambda m, a: m.column_stack([a[0, 0], a[1, 1]]),
    lambda m, a: m.take(a, m.tensor([0, -1, 5])),
    lambda m, a: m.diagflat(a[0, 0], 1),
    lambda m, a: m.vander(a[0, 0]),
    lambda m, a: m.vander(a[0, 0], 3, True),
    lambda m, a: m.block_diag(a[0], a[1, 0], a[0, 0, 0]),
    lambda m, a: m.block_diag(a[0], a[1, 0, 0].float()),
    lambda m, a: m.cartesian_prod(a[0, 0], a[1, 1]),
    lambda m, a: m.cdist(a[0], a[1]),
    lambda m, a: m.cov(a[0]),
    lambda m, a: m.cov(a[0], fweights=m.tensor([1, 2, 3, 1])),
    lambda m, a: m.corrcoef(a[0]),
    lambda m, a: m.narrow_copy(a, 1, 1, 2),
]


@pytest.mark.parametrize("kind", list(DATA))
@pytest.mark.parametrize("i", range(len(DTYPE_FUNCS)))
def test_dtypes(kind: str, i: int) -> None:
    _agree(DTYPE_FUNCS[i], DATA[kind])


EDGE_FUNCS = [
    lambda m, a: m.diff(a), lambda m, a: m.diff(a, dim=0), lambda m, a: m.rot90(a),
    lambda m, a: m.cross(a, a), lambda m, a: m.trapezoid(a), lambda m, a: m.trapezoid(a, dim=0),
    lambda m, a: m.trapezoid(a, a), lambda m, a: m.cumulative_trapezoid(a),
    lambda m, a: m.cumulative_trapezoid(a, dim=0), lambda m, a: m.nansum(a),
    lambda m, a: m.nansum(a, 0), lambda m, a: m.nansum(a, -1, keepdim=True),
    lambda m, a: m.nanmean(a), lambda m, a: m.nanmean(a, 0),
    lambda m, a: m.tensordot(a, a, 0), lambda m, a: m.tensordot(a, a, ([0], [0])),
    lambda m, a: m.inner(a, a), lambda m, a: m.vdot(a, a), lambda m, a: m.renorm(a, 2, 0, 1),
    lambda m, a: m.atleast_1d(a), lambda m, a: m.atleast_2d(a), lambda m, a: m.atleast_3d(a),
    lambda m, a: m.hstack([a, a]), lambda m, a: m.vstack([a, a]), lambda m, a: m.dstack([a, a]),
    lambda m, a: m.column_stack([a, a]), lambda m, a: m.take(a, m.tensor([0, 0])),
    lambda m, a: m.take(a, m.zeros(0, dtype=m.int64)), lambda m, a: m.diagflat(a),
    lambda m, a: m.diagflat(a, -1), lambda m, a: m.vander(a),
    lambda m, a: m.vander(a.reshape(-1), 2), lambda m, a: m.block_diag(a, a),
    lambda m, a: m.cartesian_prod(a), lambda m, a: m.cartesian_prod(a.reshape(-1), a.reshape(-1)),
    lambda m, a: m.cdist(a, a), lambda m, a: m.cdist(a, a, p=INF), lambda m, a: m.cov(a),
    lambda m, a: m.corrcoef(a), lambda m, a: m.narrow_copy(a, 0, 0, 0),
    lambda m, a: m.addr(a, a.reshape(-1), a.reshape(-1)),
]


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (3, 0)], ids=["0d", "0", "0x3", "3x0"])
@pytest.mark.parametrize("i", range(len(EDGE_FUNCS)))
def test_zero_dim_and_empty(shape: tuple, i: int) -> None:
    _agree(EDGE_FUNCS[i], np.full(shape, 2.5, np.float32))


# -- errors --------------------------------------------------------------------------------------
ERRORS = [
    (lambda m, x: m.diff(x, n=-1), "order"),
    (lambda m, x: m.diff(x, prepend=1.0), "prepend"),
    (lambda m, x: m.diff(x, prepend=x[0]), "prepend"),
    (lambda m, x: m.diff(x, dim=0, append=m.zeros(1, 4, 5)), "append"),
    (lambda m, x: m.diff(x, dim=3), "imension"),
    (lambda m, x: m.diff(x[0, 0, 0]), "one-dimensional"),
    (lambda m, x: m.rot90(x, 1, [0]), "dims"),
    (lambda m, x: m.rot90(x, 1, [1, 1]), "dim"),
    (lambda m, x: m.rot90(x, 1, [0, -3]), "dim"),
    (lambda m, x: m.rot90(x, 1, [0, 5]), "imension"),
    (lambda m, x: m.rot90(x[0, 0], 1), "dims"),
    (lambda m, x: m.rot90(x, 1.5), "'k'"),
    (lambda m, x: m.cross(x, x, dim=2), "dimension 2"),
    (lambda m, x: m.cross(x, x[0], dim=1), "dimensions"),
    (lambda m, x: m.cross(x, x.double(), dim=1), "scalar type"),
    (lambda m, x: m.cross(x[:, :2], x[:, :2]), "size 3"),
    (lambda m, x: m.cross(x[:, :, :3], x[:1, :2, :3], dim=2), "size of tensor"),
    (lambda m, x: m.trapezoid(x, x[0, 0, :3]), "`x`"),
    (lambda m, x: m.trapezoid(x, dx=True), "dx"),
    (lambda m, x: m.trapezoid(x > 0), "bool"),
    (lambda m, x: m.trapezoid(x, x > 0), "bool"),
    (lambda m, x: m.trapezoid(x, x, dx=2), "dx"),
    (lambda m, x: m.trapezoid(x, 2.0), "'x'"),
    (lambda m, x: m.trapezoid(x[0, 0, 0]), "dimensions"),
    (lambda m, x: m.cumulative_trapezoid(x, dx=False), "dx"),
    (lambda m, x: m.cumulative_trapezoid(x, x[0, 0, :2]), "`x`"),
    (lambda m, x: m.nanmean(x.long()), "dtype"),
    (lambda m, x: m.nansum(x, 3), "imension"),
    (lambda m, x: m.tensordot(x, x, 4), "dims"),
    (lambda m, x: m.tensordot(x, x, -1), "dims"),
    (lambda m, x: m.tensordot(x, x, ([0, 1], [0])), "dimension lists"),
    (lambda m, x: m.tensordot(x, x, ([1], [2])), "contracted dimensions"),
    (lambda m, x: m.tensordot(x, x.double(), 1), "dtype"),
    (lambda m, x: m.tensordot(x, x, 1.5), "dims"),
    (lambda m, x: m.tensordot(x, x, (0, 0)), "dims_self"),
    (lambda m, x: m.tensordot(x > 0, x > 0, ([2], [2])), "Bool"),
    (lambda m, x: m.inner(x, x[0, 0, :2]), "last dimension"),
    (lambda m, x: m.vdot(x, x), "1D"),
    (lambda m, x: m.vdot(x[0, 0], x[0, 0, :2]), "size"),
    (lambda m, x: m.vdot(x[0, 0], x[0, 0].double()), "dtype"),
    (lambda m, x: m.addr(x[0], x[0], x[0, 0]), "vec1"),
    (lambda m, x: m.addr(x[0], x[0, 0], x[0]), "vec2"),
    (lambda m, x: m.addr(x[0], x[0, :, 0], x[0, 0], beta=True), "beta"),
    (lambda m, x: m.addr(x[0], x[0, :, 0], x[0, 0], alpha=True), "alpha"),
    (lambda m, x: m.addr(x.long()[0], x.long()[0, :, 0], x.long()[0, 0], alpha=0.5), "alpha"),
    (lambda m, x: m.addr(x.long()[0], x.long()[0, :, 0], x.long()[0, 0], beta=2.5), "beta"),
    (lambda m, x: m.addr(x[0, :2], x[0, :, 0], x[0, 0]), "expanded size"),
    (lambda m, x: m.addbmm(x[0, :, :3], x, x), "Incompatible"),
    (lambda m, x: m.addbmm(x[0, :, :3], x, x[:1].mT), "batches"),
    (lambda m, x: m.addbmm(x[0, :, :3], x, x.mT.double()), "dtype"),
    (lambda m, x: m.addbmm(x[0, :, :2], x, x.mT), "expanded size"),
    (lambda m, x: m.addbmm(x[0, :, :3], x, x[0].mT), "imension"),
    (lambda m, x: m.renorm(x, 0, 0, 1.0), "norm"),
    (lambda m, x: m.renorm(x, 2, 0, -1.0), "maxnorm"),
    (lambda m, x: m.renorm(x[0, 0], 2, 0, 1.0), "dimensions"),
    (lambda m, x: m.renorm(x, 2, 3, 1.0), "imension"),
    (lambda m, x: m.renorm(x.long(), 2, 0, 1.0), "Long"),
    (lambda m, x: m.atleast_1d(3), "int"),
    (lambda m, x: m.atleast_2d([x, 3]), "element 1"),
    (lambda m, x: m.hstack(x), "tensors"),
    (lambda m, x: m.vstack([]), "non-empty"),
    (lambda m, x: m.dstack([x, 3]), "element 1"),
    (lambda m, x: m.column_stack([]), "non-empty"),
    (lambda m, x: m.row_stack([]), "non-empty"),
    (lambda m, x: m.hstack([x[0], x[0, :2]]), "izes of tensors must match"),
    (lambda m, x: m.take(x, [1]), "index"),
    (lambda m, x: m.take(x, m.tensor([1], dtype=m.int32)), "index"),
    (lambda m, x: m.take(x, m.tensor([24])), "out of range"),
    (lambda m, x: m.take(x, m.tensor([-25])), "out of range"),
    (lambda m, x: m.take(m.zeros(0), m.tensor([0])), "empty"),
    (lambda m, x: m.vander(x), "one-dimensional"),
    (lambda m, x: m.vander(x[0, 0], N=-1), "N"),
    (lambda m, x: m.vander(x[0, 0], N=2.0), "N"),
    (lambda m, x: m.block_diag(x), "dimensions"),
    (lambda m, x: m.block_diag(x[0], 3), "element 1"),
    (lambda m, x: m.cartesian_prod(x[0]), "1D"),
    (lambda m, x: m.cartesian_prod(x[0, 0], x[0, 0].long()), "dtype"),
    (lambda m, x: m.cartesian_prod(), "non-empty"),
    (lambda m, x: m.cdist(x[0, 0], x[0]), "2D"),
    (lambda m, x: m.cdist(x, x[0, :, :3]), "columns"),
    (lambda m, x: m.cdist(x.long(), x.long()), "floating"),
    (lambda m, x: m.cdist(x, x, p=-1), "p values"),
    (lambda m, x: m.cdist(x, x, compute_mode="fast"), "compute_mode"),
    (lambda m, x: m.cdist(x, x.double()), "scalar type"),
    (lambda m, x: m.cdist(x, x[:1].expand(3, 3, 4)), "size of tensor"),
    (lambda m, x: m.cov(x), "dimensions"),
    (lambda m, x: m.cov(x[0], correction=0.5), "correction"),
    (lambda m, x: m.cov(x[0] > 0), "bool"),
    (lambda m, x: m.cov(x[0], fweights=m.tensor([1.0, 2, 3, 4])), "fweights"),
    (lambda m, x: m.cov(x[0], fweights=m.tensor([1, -2, 3, 4])), "fweights"),
    (lambda m, x: m.cov(x[0], fweights=m.tensor([1, 2])), "fweights"),
    (lambda m, x: m.cov(x[0], fweights=m.tensor([[1, 2, 3, 4]])), "fweights"),
    (lambda m, x: m.cov(x[0], fweights=[1, 2, 3, 4]), "fweights"),
    (lambda m, x: m.cov(x[0], aweights=m.tensor([1, 2, 3, 4])), "aweights"),
    (lambda m, x: m.cov(x[0], aweights=m.tensor([1.0, -2, 3, 4])), "aweights"),
    (lambda m, x: m.cov(x[0], aweights=m.zeros(4)), "sum to zero"),
    (lambda m, x: m.corrcoef(x), "dimensions"),
    (lambda m, x: m.narrow_copy(x[0, 0, 0], 0, 0, 1), "0-dim"),
    (lambda m, x: m.narrow_copy(x, 1, 4, 0), "start"),
    (lambda m, x: m.narrow_copy(x, 1, 2, 2), "length"),
    (lambda m, x: m.narrow_copy(x, -4, 0, 1), "imension"),
    (lambda m, x: m.narrow_copy(x, 3, 0, 1), "dim"),
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


# -- details -------------------------------------------------------------------------------------
def test_names_are_torchs() -> None:
    """Every function is ``torch.<name>`` and ``gc.<name>``; it is a ``Tensor`` method
    exactly where PyTorch has the method (with the in-place forms PyTorch has)."""
    for name in composite_ops.FUNCTIONS:
        assert hasattr(torch, name), name
        assert getattr(gc, name) is getattr(composite_ops, name)
        assert name in gc._core.__all__ and name in gc._CORE_NAMES
        assert hasattr(gc.Tensor, name) == hasattr(torch.Tensor, name), name
    for name in ("addr_", "addbmm_", "renorm_"):
        assert hasattr(torch.Tensor, name) and hasattr(gc.Tensor, name)
    for name in ("swapaxes", "swapdims", "moveaxis", "kron"):  # there before this module
        assert callable(getattr(gc, name)) and hasattr(gc.Tensor, name)


@pytest.mark.parametrize("name, args", [
    ("addr_", lambda m, x: (x[0, :, 0], x[1, 0])),
    ("addbmm_", lambda m, x: (x, x.mT[:, :, :3])),
    ("renorm_", lambda m, x: (2, 1, 0.5)),
])
def test_inplace_forms(name: str, args: Any) -> None:
    x = np.random.default_rng(8).standard_normal((2, 3, 4)).astype(np.float32)
    base = x[0, :, :3] if name == "addbmm_" else x[0]
    g, t = gc.tensor(np.array(base)), torch.tensor(np.array(base))
    kw = {} if name == "renorm_" else {"beta": 0.5, "alpha": 2.0}
    assert getattr(g, name)(*args(gc, gc.tensor(x)), **kw) is g
    getattr(t, name)(*args(torch, torch.tensor(x)), **kw)
    _same(g, t)


def test_addr_bools() -> None:
    a = np.array([True, False, True])
    b = np.array([False, True])
    s = np.array([[True, False], [False, False], [False, True]])
    for beta, alpha in [(True, True), (False, True), (True, False), (False, False), (1, 0)]:
        _same(gc.addr(gc.tensor(s), gc.tensor(a), gc.tensor(b), beta=beta, alpha=alpha),
              torch.addr(torch.tensor(s), torch.tensor(a), torch.tensor(b), beta=beta,
                         alpha=alpha))


def test_addr_beta_zero_ignores_nan() -> None:
    s = np.full((2, 3), np.nan, np.float32)
    a, b = np.ones(2, np.float32), np.arange(3, dtype=np.float32)
    got = gc.addr(gc.tensor(s), gc.tensor(a), gc.tensor(b), beta=0, alpha=2)
    _same(got, torch.addr(torch.tensor(s), torch.tensor(a), torch.tensor(b), beta=0, alpha=2))


def test_nanmean_all_nan_and_nansum_gradient() -> None:
    x = np.array([[NAN, NAN], [1.0, NAN]], np.float32)
    _same(gc.nanmean(gc.tensor(x), 1), torch.nanmean(torch.tensor(x), 1))
    _same(gc.nanmean(gc.tensor(x)), torch.nanmean(torch.tensor(x)))
    g, t = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (gc.nansum(g) * 3).backward()
    (torch.nansum(t) * 3).backward()
    _same(g.grad, t.grad)


@pytest.mark.parametrize("p", [2.0, 1.0, 0.5, INF])
def test_cdist_zero_distance_gradient(p: float) -> None:
    """Coinciding points: distance 0 with a zero (sub)gradient, as PyTorch's backward."""
    x = np.array([[0.0, 1.0, 2.0], [1.0, -1.0, 0.5]], np.float32)
    g, t = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    gy, ty = gc.cdist(g, g.detach(), p=p), torch.cdist(t, t.detach(), p=p)
    _same(gy, ty)
    gy.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(_np(g.grad), _np(t.grad), rtol=1e-5, atol=1e-6)


def test_cdist_many_rows_takes_the_matrix_product() -> None:
    """More than 25 rows: PyTorch's matrix-product form, values and gradients."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((30, 5)).astype(np.float32)
    b = rng.standard_normal((7, 5)).astype(np.float32)
    ga, ta = gc.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    gy, ty = gc.cdist(ga, gc.tensor(b)), torch.cdist(ta, torch.tensor(b))
    np.testing.assert_allclose(_np(gy), _np(ty), rtol=1e-5, atol=1e-5)
    _loss(gy).backward()
    _loss(ty).backward()
    np.testing.assert_allclose(_np(ga.grad), _np(ta.grad), rtol=1e-4, atol=1e-4)


def test_cov_corner_cases() -> None:
    one = np.array([[1.0], [2.0]], np.float32)  # one observation
    for kw in ({}, {"fweights": [2]}, {"aweights": [0.5]}, {"fweights": [2], "aweights": [0.5]},
               {"aweights": [0.5], "dtype": np.float64}):
        dtype = kw.pop("dtype", np.float32)
        _agree(lambda m, t, kw=kw, dtype=dtype: m.cov(
            t, **{k: m.tensor(np.array(v, dtype if k == "aweights" else np.int64))
                  for k, v in kw.items()}), one)
    x = np.arange(8, dtype=np.float32).reshape(2, 4) ** 2
    for c in (0, 1, 3, 4, 7):
        _same(gc.cov(gc.tensor(x), correction=c), torch.cov(torch.tensor(x), correction=c))
        aw = np.array([0.5, 1.0, 2.0, 0.25], np.float32)
        _same(gc.cov(gc.tensor(x), correction=c, aweights=gc.tensor(aw)),
              torch.cov(torch.tensor(x), correction=c, aweights=torch.tensor(aw)))
    _same(gc.corrcoef(gc.ones(2, 3)), torch.corrcoef(torch.ones(2, 3)))


def test_diff_and_trapezoid_keep_pytorchs_dtypes() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    pre = np.zeros((2, 1), np.float64)
    _same(gc.diff(gc.tensor(x), prepend=gc.tensor(pre)),
          torch.diff(torch.tensor(x), prepend=torch.tensor(pre)))
    _same(gc.trapezoid(gc.tensor(x), dx=gc.tensor(2.0)),
          torch.trapezoid(torch.tensor(x), dx=torch.tensor(2.0)))
    i = np.arange(6).reshape(2, 3)
    _same(gc.cumulative_trapezoid(gc.tensor(i), gc.tensor(i)),
          torch.cumulative_trapezoid(torch.tensor(i), torch.tensor(i)))


def test_tensordot_dims_as_tensor_and_list_of_lists() -> None:
    x = np.random.default_rng(10).standard_normal((2, 3, 4)).astype(np.float32)
    y = x.transpose(2, 1, 0).copy()
    for dims in ([[1, 2], [1, 0]], torch.tensor([[2], [0]]), torch.tensor(1)):
        gdims = gc.tensor(dims.numpy()) if isinstance(dims, torch.Tensor) else dims
        _same(gc.tensordot(gc.tensor(x), gc.tensor(y), gdims),
              torch.tensordot(torch.tensor(x), torch.tensor(y), dims))


def test_cross_without_dim() -> None:
    x = np.random.default_rng(11).standard_normal((4, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _same(gc.cross(gc.tensor(x), gc.tensor(x[::-1].copy())),
              torch.cross(torch.tensor(x), torch.tensor(x[::-1].copy())))

        @gc.compile
        def f(t: Any) -> Any:
            return gc.cross(t, t.flip(0))

        with pytest.raises(NotImplementedError, match="pass dim"):
            f(gc.tensor(np.ones((3, 3, 2), np.float32)))

        @gc.compile
        def g(t: Any) -> Any:
            return gc.cross(t[0], t[1] + 1)  # fixed sizes only: dim 0 is the first of size 3

        for n in (2, 4):
            v = np.random.default_rng(n).standard_normal((n, 3, 2)).astype(np.float32)
            _same(g(gc.tensor(v)), torch.cross(torch.tensor(v[0]), torch.tensor(v[1] + 1)))


def test_compiled_runtime_checks() -> None:
    """What a compiled step cannot decide while tracing it checks when it runs: ``take``'s
    indices by the gather's bounds check, ``diff``'s order against the batch size by a
    guard; a batch of one still gets ``vander``'s single column."""
    idx = gc.tensor([0, 7])
    f = gc.compile(lambda x: gc.take(x, idx) * 2)
    _same(f(gc.tensor(np.arange(8, dtype=np.float32).reshape(2, 4))),
          torch.tensor([0.0, 14.0]))
    with pytest.raises(IndexError, match="out of range"):
        f(gc.tensor(np.arange(4, dtype=np.float32).reshape(1, 4)))

    d = gc.compile(lambda x: gc.diff(x, n=3, dim=0))
    x = np.arange(12, dtype=np.float32).reshape(4, 3) ** 2
    _same(d(gc.tensor(x)), torch.diff(torch.tensor(x), n=3, dim=0))
    with pytest.raises(ValueError, match="diff"):
        d(gc.tensor(x[:2]))

    v = gc.compile(lambda x: gc.vander(x[:, 0]) + 0)
    for n in (1, 3):
        a = np.arange(1, 2 * n + 1, dtype=np.float32).reshape(n, 2)
        _same(v(gc.tensor(a)), torch.vander(torch.tensor(a[:, 0])))
    assert v.compile_count == 1


def test_vander_gradient() -> None:
    """graphc's ``vander`` differentiates (a ``cumprod``): against PyTorch's gradient of the
    same columns written as powers (PyTorch's own ``vander`` has no backward)."""
    x = np.array([0.5, -1.5, 2.0, 3.0], np.float32)
    for n, increasing in ((None, False), (5, True), (2, False)):
        g, t = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        gy = gc.vander(g, n, increasing)
        k = torch.arange(len(x) if n is None else n, dtype=torch.float32)
        ty = t.unsqueeze(1) ** (k if increasing else k.flip(0))
        _same(gy, ty)
        _loss(gy).backward()
        _loss(ty).backward()
        np.testing.assert_allclose(_np(g.grad), _np(t.grad), rtol=1e-5, atol=1e-5)


def test_trapezoid_of_no_samples_and_tensor_dx_inside_a_step() -> None:
    _same(gc.trapezoid(gc.zeros(2, 0, dtype=gc.int64)),
          torch.trapezoid(torch.zeros(2, 0, dtype=torch.int64)))
    f = gc.compile(lambda x: gc.trapezoid(x, dx=gc.tensor(2.0)))
    with pytest.raises(NotImplementedError, match="dx"):
        f(gc.zeros(2, 3))


def test_step_of_composites_lowers_to_ptx(tmp_path: Any) -> None:
    """The composites and their gradients need nothing of the PTX backend beyond the
    primitives: a step using them lowers to PTX, which ptxas assembles where it is installed
    (running it needs a GPU: tests/test_ptx.py's GPU tests cover the primitives)."""
    import shutil
    import subprocess

    w = nn.Parameter(gc.tensor(np.random.default_rng(12).standard_normal((3, 4))
                               .astype(np.float32)))

    def step(x: Any) -> Any:
        w.grad = None
        y = x * w
        parts = [gc.diff(y, dim=1, prepend=y[:, :1]), gc.rot90(y, 1, [1, 2]),
                 gc.cross(y, y.flip(-1), dim=1), gc.trapezoid(y, y.exp().cumsum(-1)),
                 gc.cumulative_trapezoid(y, dim=0), gc.nansum(gc.where(y > 1, NAN, y), 0),
                 gc.nanmean(gc.where(y > 1, NAN, y), -1), gc.tensordot(y, w, ([1, 2], [0, 1])),
                 gc.inner(y, w), gc.vdot(y[:, 0, 0], y[:, 1, 1]), gc.addr(w, w[:, 0], w[0]),
                 gc.addbmm(w[:, :3], y, y.mT), gc.renorm(y, 2, 0, 1.0),
                 gc.dstack([y[0], w]), gc.column_stack([y[:, 0, 0], y[:, 1]]),
                 gc.take(y, gc.tensor([0, 5, -1])), gc.diagflat(w[0], 1),
                 gc.vander(y[:, 0, 0].detach(), 3) * y[:, 0, :3], gc.block_diag(y[:, 0], w),
                 gc.cartesian_prod(y[:, 0, 0], w[0]), gc.cdist(y, w + 0.5),
                 gc.cdist(y, w, p=1), gc.cov(y[:, 0].T), gc.corrcoef(y[:, 0]),
                 y.narrow_copy(2, 1, 2)]
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


def test_linalg_cross_semantics() -> None:
    """``composite_ops.linalg_cross`` is ``torch.linalg.cross`` (last dim by default,
    broadcasting), the function ``cross`` calls."""
    rng = np.random.default_rng(13)
    a = rng.standard_normal((2, 1, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    _same(composite_ops.linalg_cross(gc.tensor(a), gc.tensor(b[None])),
          torch.linalg.cross(torch.tensor(a), torch.tensor(b[None])))
    _same(composite_ops.linalg_cross(gc.tensor(a.transpose(2, 0, 1).copy()),
                                     gc.tensor(a.transpose(2, 1, 0).copy()), dim=0),
          torch.linalg.cross(torch.tensor(a.transpose(2, 0, 1).copy()),
                             torch.tensor(a.transpose(2, 1, 0).copy()), dim=0))


@pytest.mark.parametrize("name", ["addbmm", "tensordot", "inner", "vdot", "cdist", "cov",
                                  "corrcoef", "addr", "renorm"])
def test_autocast_dtypes_are_pytorchs(name: str) -> None:
    """Under CPU autocast: ``addbmm`` (on PyTorch's lower-precision list) and the
    composites built on a matrix product (``tensordot``, ``inner``, ``cov``...) compute in
    bfloat16, ``cdist`` (on its float32 list) in float32, ``vdot`` as ``dot`` (neither)."""
    f = {
        "addbmm": lambda m, t: m.addbmm(t[0, :, :3], t, t.mT),
        "tensordot": lambda m, t: m.tensordot(t, t[0], ([1, 2], [0, 1])),
        "inner": lambda m, t: m.inner(t, t[0]),
        "vdot": lambda m, t: m.vdot(t[0, 0], t[1, 1]),
        "cdist": lambda m, t: m.cdist(t.to(m.bfloat16), t[0]),
        "cov": lambda m, t: m.cov(t[0]),
        "corrcoef": lambda m, t: m.corrcoef(t[0]),
        "addr": lambda m, t: m.addr(t[0], t[0, :, 0], t[1, 0]),
        "renorm": lambda m, t: m.renorm(t, 2, 0, 1.0),
    }[name]
    x = np.random.default_rng(14).standard_normal((2, 3, 4)).astype(np.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = f(torch, torch.tensor(x))
    with gc.autocast("cpu", dtype=gc.bfloat16):
        got = f(gc, gc.tensor(x))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape)
