"""``graphc.linalg`` (graphc/linalg_ops.py) against ``torch.linalg``: values and gradients
eagerly (float32 and float64, batched, n = 1, 2, 3, 5, 8, well- and ill-conditioned matrices
with tolerances scaled by the condition number) and compiled (one compile over two batch
sizes, the batch dim symbolic), singular matrices, empty batches, and PyTorch's exception
types and messages for bad arguments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _op_parity import loss, np_of, outs
from _torch import torch

import graphc as gc
from graphc import linalg, nn

SIZES = (1, 2, 3, 5, 8)


def _matrices(rng: np.random.Generator, batch: tuple, n: int, cond: float = 1.0) -> np.ndarray:
    """Random matrices with singular values spread log-uniformly over [1/cond, 1] (cond 1:
    plain Gaussian matrices)."""
    a = rng.standard_normal((*batch, n, n))
    if cond == 1.0:
        return a
    u, _, vt = np.linalg.svd(a)
    s = np.geomspace(1.0, 1.0 / cond, n)
    return (u * s[..., None, :]) @ vt


def _m(a: Any) -> Any:
    """The batch of matrices flattened to one batch dim."""
    return a.reshape(-1, a.shape[-2], a.shape[-1])


# (id, f(linalg module, top module, A)): A is (…, n, n), the same code runs in both frameworks
SQUARE = [
    ("det", lambda L, M, a: L.det(a)),
    ("slogdet", lambda L, M, a: tuple(L.slogdet(a))),
    ("inv", lambda L, M, a: L.inv(a)),
    ("inv_ex", lambda L, M, a: L.inv_ex(a).inverse),
    ("solve_vector", lambda L, M, a: L.solve(a, a[..., 0] + 1)),
    ("solve_matrix", lambda L, M, a: L.solve(a, a.mT * 2 + 1)),
    ("solve_left_false", lambda L, M, a: L.solve(a, a[..., :1, :] - 1, left=False)),
    ("solve_broadcast_b", lambda L, M, a: L.solve(a, a[:1, ..., :1].abs())),
    ("torch_det", lambda L, M, a: M.det(a) + a.det()),
    ("torch_logdet", lambda L, M, a: (a @ a.mT).logdet() + M.logdet(a @ a.mT)),
    ("torch_inverse", lambda L, M, a: M.inverse(a) - a.inverse()),
    ("torch_slogdet", lambda L, M, a: tuple(M.slogdet(a)) + tuple(a.slogdet())),
    ("matrix_power_0", lambda L, M, a: L.matrix_power(a, 0) * a),
    ("matrix_power_1", lambda L, M, a: L.matrix_power(a, 1)),
    ("matrix_power_5", lambda L, M, a: L.matrix_power(a, 5)),
    ("matrix_power_6", lambda L, M, a: L.matrix_power(a, 6)),
    ("matrix_power_neg2", lambda L, M, a: L.matrix_power(a, -2)),
    ("matrix_norm_fro", lambda L, M, a: L.matrix_norm(a)),
    ("matrix_norm_1", lambda L, M, a: L.matrix_norm(a, 1)),
    ("matrix_norm_neg1_keepdim", lambda L, M, a: L.matrix_norm(a, -1, keepdim=True)),
    ("matrix_norm_inf", lambda L, M, a: L.matrix_norm(a, float("inf"))),
    ("matrix_norm_neginf_dims", lambda L, M, a: L.matrix_norm(a, -float("inf"), dim=(-1, 0))),
    ("matrix_norm_inf_keepdim", lambda L, M, a: L.matrix_norm(a, float("inf"), (0, -1), True)),
    ("norm_default", lambda L, M, a: L.norm(a)),
    ("norm_dim1", lambda L, M, a: L.norm(a, 3, dim=-1)),
    ("norm_matrix_dims", lambda L, M, a: L.norm(a, 1, dim=(-2, -1))),
    ("norm_2d_ord", lambda L, M, a: L.norm(_m(a)[0], float("inf"))),
    ("norm_1d_ord", lambda L, M, a: L.norm(_m(a)[0, 0], 1)),
    ("norm_fro_str", lambda L, M, a: L.norm(_m(a)[0], "fro")),
    ("vecdot", lambda L, M, a: L.vecdot(a, a.flip(-1))),
    ("vecdot_dim", lambda L, M, a: L.vecdot(a, a[..., :1, :], dim=-2)),
    ("matmul", lambda L, M, a: L.matmul(a, a)),
    ("diagonal", lambda L, M, a: L.diagonal(a) + L.diagonal(a, offset=0, dim1=-1, dim2=-2)),
    ("multi_dot_3", lambda L, M, a: L.multi_dot([_m(a)[0], _m(a)[1].mT, _m(a)[0, 0]])),
    ("multi_dot_4", lambda L, M, a: L.multi_dot([_m(a)[0, 0], _m(a)[0], _m(a)[1],
                                                         _m(a)[1] * 2])),
]


def _close(got: Any, want: Any, rtol: float, atol: float) -> None:
    g, w = np_of(got), np_of(want)
    assert g.shape == w.shape
    assert str(g.dtype) == str(w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _run(f: Any, a: np.ndarray, rtol: float, atol: float) -> None:
    ta = torch.tensor(a, requires_grad=True)
    ty = f(torch.linalg, torch, ta)
    loss(ty).backward()
    ga = gc.tensor(a, requires_grad=True)
    gy = f(gc.linalg, gc, ga)
    loss(gy).backward()
    assert len(outs(gy)) == len(outs(ty))
    for x, y in zip(outs(gy), outs(ty)):
        _close(x, y, rtol, atol)
    scale = float(np.abs(np_of(ta.grad)).max()) + 1.0
    np.testing.assert_allclose(np_of(ga.grad), np_of(ta.grad), rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", SQUARE, ids=[c[0] for c in SQUARE])
def test_eager_float64(case: Any, n: int) -> None:
    """Batched float64 values and gradients, Gaussian matrices."""
    f = case[1]
    a = _matrices(np.random.default_rng(n), (2, 3), n)
    cond = float(np.linalg.cond(a).max())
    _run(f, a, 1e-9 * cond, 1e-9 * cond)


@pytest.mark.parametrize("n", (2, 5))
@pytest.mark.parametrize("case", SQUARE, ids=[c[0] for c in SQUARE])
def test_eager_float32(case: Any, n: int) -> None:
    """float32, well-conditioned (cond 10): float32 rounding differs from LAPACK's."""
    f = case[1]
    a = _matrices(np.random.default_rng(10 + n), (3,), n, cond=10.0).astype(np.float32)
    _run(f, a, 2e-3, 2e-3)


@pytest.mark.parametrize("cond", (1e3, 1e6))
@pytest.mark.parametrize("name", ("det", "slogdet", "inv", "solve_matrix"))
def test_ill_conditioned(name: str, cond: float) -> None:
    """float64 with condition numbers 1e3 and 1e6: errors grow with the condition number, as
    for any backward-stable elimination; tolerances scale with it."""
    f = dict(SQUARE)[name]
    a = _matrices(np.random.default_rng(3), (4,), 5, cond=cond)
    _run(f, a, 1e-11 * cond * cond, 1e-11 * cond * cond)


def test_pivoting_matters() -> None:
    """A zero leading entry needs a row swap; the sign of det follows the permutation."""
    a = np.array([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 1.0]])
    _run(dict(SQUARE)["det"], a, 1e-12, 1e-12)
    _run(dict(SQUARE)["inv"], a, 1e-12, 1e-12)
    _run(dict(SQUARE)["slogdet"], -a, 1e-12, 1e-12)


# -- singular matrices and empty shapes -------------------------------------------------------
SINGULAR = np.array([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]],
                     [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
                     [[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]]])


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
def test_singular_det_slogdet(dtype: Any) -> None:
    a = SINGULAR.astype(dtype)
    _close(linalg.det(gc.tensor(a)), torch.linalg.det(torch.tensor(a)), 1e-5, 1e-5)
    (gs, gl), (ts, tl) = linalg.slogdet(gc.tensor(a)), torch.linalg.slogdet(torch.tensor(a))
    # the first matrix is singular with a pivot that is exactly 0 in exact arithmetic; the LU
    # of PyTorch's LAPACK leaves it 0 on some CPUs and rounding noise on others (measured on
    # an AVX-512 Xeon: det 3.6e-7 in float32, -6.7e-16 in float64), and the sign of noise
    # means nothing; so the singular ones compare as sign * |det|, the regular one exactly
    _close(gs * np.exp(gl), ts * torch.exp(tl), 1e-5, 1e-5)
    _close(gs[2:], ts[2:], 0, 0)
    _close(gl[2:], tl[2:], 1e-5, 1e-5)
    assert float(gl[1]) == float(tl[1]) == -np.inf  # a zero row: singular on every CPU
    # logdet of the first is -inf, or log / nan of PyTorch's noise: only the zero row compares
    _close(gc.logdet(gc.tensor(a[1:2])), torch.logdet(torch.tensor(a[1:2])), 0, 0)


def test_singular_inv_and_solve_raise() -> None:
    for fn, call in (("inv", lambda L, a: L.inv(a)),
                     ("solve", lambda L, a: L.solve(a, a[..., 0])),
                     ("inverse", lambda L, a: a.inverse())):
        for a in (SINGULAR[0], SINGULAR):
            with pytest.raises(RuntimeError) as want:
                call(torch.linalg, torch.tensor(a))
            with pytest.raises(linalg.LinAlgError) as got:
                call(linalg, gc.tensor(a))
            assert str(got.value) == str(want.value), fn
    assert issubclass(linalg.LinAlgError, RuntimeError)


def test_inv_ex_info() -> None:
    a = SINGULAR[1:]
    got, want = linalg.inv_ex(gc.tensor(a)), torch.linalg.inv_ex(torch.tensor(a))
    assert got._fields == ("inverse", "info")
    assert type(got).__name__ == type(want).__name__
    _close(got.info, want.info, 0, 0)
    _close(got.inverse[1], want.inverse[1], 1e-12, 1e-12)
    with pytest.raises(linalg.LinAlgError, match="Batch element 0"):
        linalg.inv_ex(gc.tensor(a), check_errors=True)


def test_result_types() -> None:
    a = np.eye(2)
    assert type(gc.slogdet(gc.tensor(a))).__name__ == type(torch.slogdet(torch.tensor(a))).__name__
    assert linalg.slogdet(gc.tensor(a))._fields == ("sign", "logabsdet")
    assert type(linalg.slogdet(gc.tensor(a))).__name__ == "linalg_slogdet"


@pytest.mark.parametrize("shape", ((0, 3, 3), (2, 0, 0), (0, 1, 1)))
def test_empty(shape: tuple) -> None:
    a = np.zeros(shape)
    for f in (lambda L, M, a: L.det(a), lambda L, M, a: tuple(L.slogdet(a)),
              lambda L, M, a: L.inv(a), lambda L, M, a: L.solve(a, a),
              lambda L, M, a: L.matrix_norm(a, 1) if a.shape[-1] else L.matrix_norm(a)):
        for x, y in zip(outs(f(linalg, gc, gc.tensor(a))), outs(f(torch.linalg, torch,
                                                                  torch.tensor(a)))):
            _close(x, y, 0, 0)


def test_size_limit() -> None:
    with pytest.raises(NotImplementedError, match="65.*unrolls"):
        linalg.det(gc.zeros(65, 65))


def test_integer_matrix_power() -> None:
    a = np.arange(9).reshape(3, 3) - 4
    _close(linalg.matrix_power(gc.tensor(a), 3), torch.linalg.matrix_power(torch.tensor(a), 3),
           0, 0)
    _close(linalg.multi_dot([gc.tensor(a), gc.tensor(a)]),
           torch.linalg.multi_dot([torch.tensor(a), torch.tensor(a)]), 0, 0)


# -- errors -----------------------------------------------------------------------------------
z = np.zeros
ERRORS = [
    ("det_1d", lambda L, M, t: L.det(t(z(3)))),
    ("det_nonsquare", lambda L, M, t: L.det(t(z((2, 3))))),
    ("det_long", lambda L, M, t: L.det(t(z((2, 2), np.int64)))),
    ("logdet_1d", lambda L, M, t: M.logdet(t(z(3)))),
    ("logdet_long", lambda L, M, t: M.logdet(t(z((2, 2), np.int64)))),
    ("slogdet_nonsquare", lambda L, M, t: L.slogdet(t(z((2, 3))))),
    ("inv_nonsquare", lambda L, M, t: L.inv(t(z((2, 3))))),
    ("inv_long", lambda L, M, t: L.inv(t(z((2, 2), np.int64)))),
    ("inverse_1d", lambda L, M, t: M.inverse(t(z(2)))),
    ("solve_b_vector_size", lambda L, M, t: L.solve(t(np.eye(2)), t(z(3)))),
    ("solve_b_matrix_size", lambda L, M, t: L.solve(t(np.eye(2)), t(z((3, 2))))),
    ("solve_dtypes", lambda L, M, t: L.solve(t(np.eye(2, dtype=np.float32)), t(z(2)))),
    ("solve_long", lambda L, M, t: L.solve(t(np.eye(2, dtype=np.int64)),
                                           t(z(2, np.int64)))),
    ("solve_nonsquare", lambda L, M, t: L.solve(t(z((2, 3))), t(z(2)))),
    ("solve_batch", lambda L, M, t: L.solve(t(z((4, 2, 2))), t(z((5, 2, 3))))),
    ("matrix_norm_1d", lambda L, M, t: L.matrix_norm(t(z(3)))),
    ("matrix_norm_long", lambda L, M, t: L.matrix_norm(t(z((3, 3), np.int64)))),
    ("matrix_norm_ord", lambda L, M, t: L.matrix_norm(t(z((3, 3))), ord=3)),
    ("matrix_norm_ord_str", lambda L, M, t: L.matrix_norm(t(z((3, 3))), ord="abc")),
    ("matrix_norm_same_dims", lambda L, M, t: L.matrix_norm(t(z((3, 3))), dim=(0, -2))),
    ("matrix_norm_one_dim", lambda L, M, t: L.matrix_norm(t(z((3, 3))), dim=(0,))),
    ("norm_3d_ord", lambda L, M, t: L.norm(t(z((3, 3, 3))), ord=2)),
    ("norm_str_dim1", lambda L, M, t: L.norm(t(z((3, 3))), ord="fro", dim=0)),
    ("norm_three_dims", lambda L, M, t: L.norm(t(z((3, 3, 3))), dim=(0, 1, 2))),
    ("vecdot_dtypes", lambda L, M, t: L.vecdot(t(z(3, np.float32)), t(z(3)))),
    ("vecdot_long", lambda L, M, t: L.vecdot(t(z(3, np.int64)), t(z(3, np.int64)))),
    ("multi_dot_one", lambda L, M, t: L.multi_dot([t(z(3))])),
    ("multi_dot_first_3d", lambda L, M, t: L.multi_dot([t(z((3, 3, 3))), t(z((3, 3)))])),
    ("multi_dot_middle_1d", lambda L, M, t: L.multi_dot([t(z((3, 3))), t(z(3)), t(z(3))])),
    ("multi_dot_last_3d", lambda L, M, t: L.multi_dot([t(z((3, 3))), t(z((3, 3, 3)))])),
    ("multi_dot_shapes", lambda L, M, t: L.multi_dot([t(z((3, 4))), t(z((3, 3)))])),
    ("multi_dot_dtypes", lambda L, M, t: L.multi_dot([t(z((3, 3), np.float32)),
                                                      t(z((3, 3)))])),
    ("multi_dot_not_list", lambda L, M, t: L.multi_dot(t(z((3, 3))))),
    ("matrix_power_float_n", lambda L, M, t: L.matrix_power(t(z((3, 3))), 1.5)),
    ("matrix_power_nonsquare", lambda L, M, t: L.matrix_power(t(z((3, 4))), 2)),
    ("matrix_power_1d", lambda L, M, t: L.matrix_power(t(z(3)), 2)),
    ("matrix_power_long_neg", lambda L, M, t: L.matrix_power(t(z((3, 3), np.int64)), -1)),
]


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors_match_torch(case: Any) -> None:
    """The same exception type and message as PyTorch."""
    f = case[1]
    with pytest.raises(Exception) as want:
        f(torch.linalg, torch, torch.tensor)
    with pytest.raises(type(want.value)) as got:
        f(linalg, gc, gc.tensor)
    assert str(got.value) == str(want.value)


# -- compiled ---------------------------------------------------------------------------------
COMPILED = ["det", "slogdet", "inv", "solve_vector", "solve_matrix", "torch_logdet",
            "matrix_power_5", "matrix_power_neg2", "matrix_norm_1", "matrix_norm_inf",
            "norm_default", "vecdot", "diagonal", "multi_dot_3", "inv_ex"]


def _compiled(f: Any, n: int, dtype: Any, rtol: float, atol: float) -> None:
    """One compile for batch sizes 2 and 5: outputs and the parameter's gradient. The
    matrices are ``x * p + n I`` (diagonally weighted, so float32 stays well-conditioned)."""
    rng = np.random.default_rng(n)
    p0 = rng.standard_normal((n, n)).astype(dtype)
    shift = n * np.eye(n, dtype=dtype)
    param = nn.Parameter(gc.tensor(p0))
    gshift = gc.tensor(shift)
    gdt = gc.float32 if dtype == np.float32 else gc.float64

    @gc.compile
    def step(x: Any) -> Any:
        param.grad = None
        y = f(gc.linalg, gc, x * param + gshift)
        loss(y).backward()
        return gc.cat([t.reshape(-1).to(gdt) for t in outs(y)])

    for batch in (2, 5):
        x = rng.standard_normal((batch, n, n)).astype(dtype)
        tp = torch.tensor(p0, requires_grad=True)
        ty = f(torch.linalg, torch, torch.tensor(x) * tp + torch.tensor(shift))
        loss(ty).backward()
        got = step(gc.tensor(x))
        want = torch.cat([t.reshape(-1).to(tp.dtype) for t in outs(ty)])
        np.testing.assert_allclose(np_of(got), np_of(want), rtol=rtol, atol=atol)
        scale = float(np.abs(np_of(tp.grad)).max()) + 1.0
        np.testing.assert_allclose(np_of(param.grad), np_of(tp.grad), rtol=rtol,
                                   atol=atol * scale)
    assert step.compile_count == 1


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_float32(name: str) -> None:
    _compiled(dict(SQUARE)[name], 3, np.float32, 1e-3, 1e-3)


@pytest.mark.parametrize("n", (1, 5, 8))
@pytest.mark.parametrize("name", ("det", "slogdet", "inv", "solve_matrix"))
def test_compiled_float64(name: str, n: int) -> None:
    _compiled(dict(SQUARE)[name], n, np.float64, 1e-9, 1e-9)


def test_compiled_singular_gives_values() -> None:
    """A step cannot raise on data: det is 0, inv of a singular matrix is inf/nan."""

    @gc.compile
    def step(a: Any) -> Any:
        return linalg.det(a), linalg.inv(a), linalg.inv_ex(a).info

    d, i, info = step(gc.tensor(SINGULAR))
    np.testing.assert_allclose(np_of(d), [0.0, 0.0, 18.0], atol=1e-12)
    assert not np.isfinite(np_of(i)[:2]).all()
    assert np_of(info).tolist() == torch.linalg.inv_ex(torch.tensor(SINGULAR)).info.tolist()


# -- Cholesky and triangular solves -----------------------------------------------------------
def _spd(M: Any, a: Any) -> Any:
    """A symmetric positive-definite matrix from any square ``a``: ``a a^T + n I``."""
    n = a.shape[-1]
    return a @ a.mT + n * M.eye(n, dtype=a.dtype)


def _tri(M: Any, a: Any) -> Any:
    """``a`` with a dominant diagonal (only one triangle is read by solve_triangular)."""
    n = a.shape[-1]
    return a + 2 * n * M.eye(n, dtype=a.dtype)


CHOL = [
    ("cholesky", lambda L, M, a: L.cholesky(_spd(M, a))),
    ("cholesky_upper", lambda L, M, a: L.cholesky(_spd(M, a), upper=True)),
    ("cholesky_ex", lambda L, M, a: tuple(L.cholesky_ex(_spd(M, a)))),
    ("cholesky_ex_upper", lambda L, M, a: L.cholesky_ex(_spd(M, a), upper=True).L),
    # the values come from one triangle only, the gradient is the symmetric one
    ("cholesky_nonsym", lambda L, M, a: L.cholesky(_spd(M, a) + a.tril(-1))),
    ("cholesky_nonsym_upper", lambda L, M, a: L.cholesky(_spd(M, a) + a.tril(-1), upper=True)),
    ("tri_lower", lambda L, M, a: L.solve_triangular(_tri(M, a), a.mT * 2 + 1, upper=False)),
    ("tri_upper", lambda L, M, a: L.solve_triangular(_tri(M, a), a * 2 - 1, upper=True)),
    ("tri_lower_right", lambda L, M, a: L.solve_triangular(_tri(M, a), a[..., :2, :] + 1,
                                                           upper=False, left=False)),
    ("tri_upper_right", lambda L, M, a: L.solve_triangular(_tri(M, a), a.mT[..., :1, :],
                                                           upper=True, left=False)),
    ("tri_unit_lower", lambda L, M, a: L.solve_triangular(a / a.shape[-1], a + 1, upper=False,
                                                          unitriangular=True)),
    ("tri_unit_upper_right", lambda L, M, a: L.solve_triangular(
        a / a.shape[-1], a - 1, upper=True, left=False, unitriangular=True)),
    ("tri_broadcast", lambda L, M, a: L.solve_triangular(_tri(M, a), a[:1, ..., :2].abs(),
                                                         upper=True)),
    ("tri_chol_solve", lambda L, M, a: L.solve_triangular(
        L.cholesky(_spd(M, a)), a[..., :1], upper=False)),
]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", CHOL, ids=[c[0] for c in CHOL])
def test_chol_tri_eager_float64(case: Any, n: int) -> None:
    _run(case[1], _matrices(np.random.default_rng(n), (2, 3), n), 1e-9, 1e-9)


@pytest.mark.parametrize("n", (2, 5))
@pytest.mark.parametrize("case", CHOL, ids=[c[0] for c in CHOL])
def test_chol_tri_eager_float32(case: Any, n: int) -> None:
    a = _matrices(np.random.default_rng(10 + n), (3,), n).astype(np.float32)
    _run(case[1], a, 2e-4, 2e-4)


COMPILED_CHOL = ["cholesky", "cholesky_upper", "cholesky_ex", "tri_lower", "tri_upper_right",
                 "tri_unit_lower", "tri_chol_solve"]


@pytest.mark.parametrize("name", COMPILED_CHOL)
def test_chol_tri_compiled_float32(name: str) -> None:
    _compiled(dict(CHOL)[name], 3, np.float32, 1e-3, 1e-3)


@pytest.mark.parametrize("n", (1, 5, 8))
@pytest.mark.parametrize("name", COMPILED_CHOL)
def test_chol_tri_compiled_float64(name: str, n: int) -> None:
    _compiled(dict(CHOL)[name], n, np.float64, 1e-9, 1e-9)


NOT_PD = np.array([[[4.0, 1.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 2.0]],
                   [[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                   [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, -1.0]],
                   [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])


def test_cholesky_not_pd_raises() -> None:
    """Eagerly: PyTorch's LinAlgError and message, with the batch element when batched."""
    calls = (lambda L, a: L.cholesky(a), lambda L, a: L.cholesky(a, upper=True),
             lambda L, a: L.cholesky_ex(a, check_errors=True))
    for call in calls:
        for a in (NOT_PD[1], NOT_PD[2], NOT_PD[3], NOT_PD, NOT_PD[2:],
                  NOT_PD[:2].reshape(1, 2, 3, 3)):
            with pytest.raises(RuntimeError) as want:
                call(torch.linalg, torch.tensor(a))
            with pytest.raises(linalg.LinAlgError) as got:
                call(linalg, gc.tensor(a))
            assert str(got.value) == str(want.value)
    got = linalg.cholesky_ex(gc.tensor(NOT_PD))
    want = torch.linalg.cholesky_ex(torch.tensor(NOT_PD))
    assert type(got).__name__ == type(want).__name__ and got._fields == ("L", "info")
    _close(got.info, want.info, 0, 0)
    _close(got.L[0], want.L[0], 1e-12, 1e-12)


def test_cholesky_compiled_not_pd_gives_nan() -> None:
    """A step cannot raise on data: the factor is nan from the failing column on; info as
    PyTorch's."""

    @gc.compile
    def step(a: Any) -> Any:
        return linalg.cholesky(a), linalg.cholesky_ex(a).info

    f, info = step(gc.tensor(NOT_PD))
    f = np_of(f)
    np.testing.assert_allclose(f[0], np_of(torch.linalg.cholesky(torch.tensor(NOT_PD[0]))),
                               atol=1e-12)
    assert np.isnan(f[1:, -1, -1]).all()  # the lower triangle from the failing column on
    assert np_of(info).tolist() == torch.linalg.cholesky_ex(torch.tensor(NOT_PD)).info.tolist()


def test_solve_triangular_zero_diagonal() -> None:
    a, b = np.triu(np.ones((3, 3))) - np.diag([0.0, 1.0, 0.0]), np.ones((3, 2))
    got = np_of(linalg.solve_triangular(gc.tensor(a), gc.tensor(b), upper=True))
    want = np_of(torch.linalg.solve_triangular(torch.tensor(a), torch.tensor(b), upper=True))
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))


def test_chol_tri_empty_and_dtype() -> None:
    for shape in ((0, 3, 3), (2, 0, 0)):
        a = np.zeros(shape)
        _close(linalg.cholesky(gc.tensor(a)), torch.linalg.cholesky(torch.tensor(a)), 0, 0)
        _close(linalg.cholesky_ex(gc.tensor(a)).info, torch.linalg.cholesky_ex(
            torch.tensor(a)).info, 0, 0)
        _close(linalg.solve_triangular(gc.tensor(a), gc.tensor(a), upper=True),
               torch.linalg.solve_triangular(torch.tensor(a), torch.tensor(a), upper=True), 0, 0)
    for da, db in ((np.float32, np.float64), (np.float64, np.float32)):
        a, b = np.eye(2, dtype=da) * 2, np.ones((2, 3), db)
        _close(linalg.solve_triangular(gc.tensor(a), gc.tensor(b), upper=False),
               torch.linalg.solve_triangular(torch.tensor(a), torch.tensor(b), upper=False), 0, 0)


@pytest.mark.parametrize(("name", "why"), [("eig", "complex"), ("eigvals", "complex"),
                                         ("lu", "LU factors"), ("lu_factor", "LU factors")])
def test_unsupported_name_themselves(name: str, why: str) -> None:
    """What graphc cannot compute raises, naming the function and the reason (the eigen/SVD
    family is tested in test_linalg_decomp.py)."""
    with pytest.raises(NotImplementedError, match=f"linalg.{name} is not supported: .*{why}"):
        getattr(linalg, name)(gc.eye(3))


CHOL_ERRORS = [
    ("cholesky_1d", lambda L, M, t: L.cholesky(t(z(3)))),
    ("cholesky_nonsquare", lambda L, M, t: L.cholesky(t(z((2, 3))))),
    ("cholesky_long", lambda L, M, t: L.cholesky(t(z((2, 2), np.int64)))),
    ("cholesky_upper_none", lambda L, M, t: L.cholesky(t(np.eye(2)), upper=None)),
    ("cholesky_not_tensor", lambda L, M, t: L.cholesky(3)),
    ("cholesky_ex_nonsquare", lambda L, M, t: L.cholesky_ex(t(z((2, 3))))),
    ("cholesky_ex_long", lambda L, M, t: L.cholesky_ex(t(z((2, 2), np.int64)))),
    ("tri_b_1d", lambda L, M, t: L.solve_triangular(t(np.eye(2)), t(z(2)), upper=True)),
    ("tri_no_upper", lambda L, M, t: L.solve_triangular(t(np.eye(2)), t(z((2, 3))))),
    ("tri_a_nonsquare", lambda L, M, t: L.solve_triangular(t(z((2, 3))), t(z((2, 3))),
                                                           upper=True)),
    ("tri_a_1d", lambda L, M, t: L.solve_triangular(t(z(3)), t(z((2, 3))), upper=True)),
    ("tri_shapes", lambda L, M, t: L.solve_triangular(t(np.eye(2)), t(z((3, 3))), upper=True)),
    ("tri_shapes_right", lambda L, M, t: L.solve_triangular(t(np.eye(2)), t(z((3, 3))),
                                                            upper=True, left=False)),
    ("tri_long", lambda L, M, t: L.solve_triangular(t(np.eye(2, dtype=np.int64)),
                                                    t(z((2, 3), np.int64)), upper=True)),
    ("tri_batch", lambda L, M, t: L.solve_triangular(t(z((4, 2, 2))), t(z((5, 2, 3))),
                                                     upper=True)),
    ("tri_b_not_tensor", lambda L, M, t: L.solve_triangular(t(np.eye(2)), 3, upper=True)),
]


@pytest.mark.parametrize("case", CHOL_ERRORS, ids=[c[0] for c in CHOL_ERRORS])
def test_chol_tri_errors_match_torch(case: Any) -> None:
    test_errors_match_torch(case)
