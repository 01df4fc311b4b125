"""The iterative and orthogonal factorisations of ``graphc.linalg`` (graphc/linalg_ops.py:
``qr``, ``eigh``/``eigvalsh``, ``svd``/``svdvals`` and what is built on them: ``pinv``,
``lstsq``, ``matrix_rank``, ``cond``, ``matrix_norm`` with ord 2/-2/'nuc') against PyTorch.

Singular vectors and eigenvectors are unique only up to sign, so the value-and-gradient
comparisons go through sign-invariant expressions (``V * V``, ``U diag(f(S)) Vh``, projectors);
Q and R are compared directly (graphc's Householder reflections are LAPACK's). Structural
checks (orthonormality, reconstruction, ordering) and sign-aligned vectors complement them.
Eagerly: float64 over square n = 1, 2, 5, 8 and rectangular shapes, batched (2, 3, …), float32
on a subset; compiled: one compile over two batch sizes (the batch dim symbolic) with
gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _op_parity import loss, np_of, outs
from _torch import torch

import graphc as gc
from graphc import linalg, nn
from graphc import linalg_ops as LO

SQUARE = [(2, 3, n, n) for n in (1, 2, 5, 8)]
RECT = [(2, 3, 7, 4), (2, 3, 4, 7), (3, 1), (1, 5)]


def _rng(shape: tuple, salt: int = 0) -> np.random.Generator:
    return np.random.default_rng(abs(hash((shape, salt))) % 2**32)


def _matrices(rng: np.random.Generator, shape: tuple, cond: float = 1.0) -> np.ndarray:
    """Gaussian matrices, or with singular values log-spaced over [1/cond, 1]."""
    a = rng.standard_normal(shape)
    if cond == 1.0:
        return a
    u, _, vt = np.linalg.svd(a, full_matrices=False)
    return (u * np.geomspace(1.0, 1.0 / cond, min(shape[-2:]))) @ vt


def _sym(a: Any) -> Any:
    return a + a.mT


def _k(a: Any) -> int:
    return min(a.shape[-2], a.shape[-1])


def _weights(a: Any, rows: int, cols: int) -> Any:
    """Fixed weights (…, rows, cols) from ``a``'s framework, so a weighted sum is not a
    constant (the rows and columns of an orthogonal matrix have norm 1: an unweighted sum
    of squares would have zero gradient)."""
    w = np.cos(np.arange(rows * cols).reshape(rows, cols) * 1.7 + 0.3)
    if isinstance(a, torch.Tensor):
        return torch.tensor(w, dtype=a.dtype)
    return gc.tensor(w).to(a.dtype)


# (id, f(linalg module, top module, A), shapes): sign-invariant outputs of one expression
CASES = [
    ("eigh", lambda L, M, a: (lambda r: (r.eigenvalues, r.eigenvectors ** 2))(L.eigh(_sym(a))),
     SQUARE),
    ("eigh_upper_nonsym", lambda L, M, a: (
        lambda r: (r.eigenvalues, r.eigenvectors ** 2 * _weights(a, a.shape[-1], a.shape[-1])))(
            L.eigh(a + 2 * a.tril(-1).mT, UPLO="U")), SQUARE),
    ("eigvalsh_lower_nonsym", lambda L, M, a: L.eigvalsh(a * 2 + a.triu(1)), SQUARE),
    ("eigh_projector", lambda L, M, a: (lambda r: (r.eigenvectors * r.eigenvalues.exp()
                                                   .unsqueeze(-2)) @ r.eigenvectors.mT)(
        L.eigh(_sym(a))), SQUARE),
    ("svdvals", lambda L, M, a: L.svdvals(a), SQUARE + RECT),
    ("svd_reduced", lambda L, M, a: (lambda r: (r.S, r.U ** 2 * _weights(a, *r.U.shape[-2:]),
                                                r.Vh ** 2 * _weights(a, *r.Vh.shape[-2:])))(
        L.svd(a, full_matrices=False)), SQUARE + RECT),
    ("svd_full_recon", lambda L, M, a: (lambda r: (
        r.U[..., :_k(a)] * (r.S.sqrt() + 1).unsqueeze(-2)) @ r.Vh[..., :_k(a), :])(
            L.svd(a)), SQUARE + RECT),
    ("qr_reduced", lambda L, M, a: tuple(L.qr(a)), SQUARE + RECT),
    ("qr_complete", lambda L, M, a: tuple(L.qr(a.mT if a.shape[-2] > a.shape[-1] else a,
                                               mode="complete")), SQUARE + RECT),
    # PyTorch does not differentiate mode='r' (graphc does): its values, the gradient via 'reduced'
    ("qr_r", lambda L, M, a: L.qr(a, mode="r").R.detach() * L.qr(a).R, SQUARE + RECT),
    ("pinv", lambda L, M, a: L.pinv(a), SQUARE + RECT),
    # symmetric, indefinite, distinct eigenvalues (repeated ones make eigh's gradient, and so
    # this one, ill-defined in PyTorch too)
    ("pinv_hermitian", lambda L, M, a: L.pinv(_sym(a[..., :_k(a), :_k(a)]), hermitian=True),
     SQUARE + RECT),
    ("lstsq", lambda L, M, a: L.lstsq(a, a[..., :2] * 3 - 1).solution, SQUARE + RECT),
    ("lstsq_vector", lambda L, M, a: L.lstsq(a, a[..., 0] + 1).solution, SQUARE + RECT),
    ("matrix_norms", lambda L, M, a: (L.matrix_norm(a, 2), L.matrix_norm(a, -2),
                                      L.matrix_norm(a, "nuc"), L.norm(a, 2, dim=(-1, -2))),
     SQUARE + RECT),
    ("cond", lambda L, M, a: (L.cond(a), L.cond(a, -2)), SQUARE + RECT),
]
CASE = {c[0]: c[1] for c in CASES}


def _close(got: Any, want: Any, rtol: float, atol: float) -> None:
    g, w = np_of(got), np_of(want)
    assert g.shape == w.shape
    assert str(g.dtype) == str(w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _run(f: Any, a: np.ndarray, rtol: float, atol: float) -> None:
    """Values and the input's gradient (through ``loss``) against PyTorch's."""
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


def _params(dtype_shapes: str) -> list:
    out = []
    for name, _, shapes in CASES:
        if dtype_shapes == "float64":
            out += [pytest.param(name, s, id=f"{name}-{'x'.join(map(str, s))}") for s in shapes]
        else:  # float32: one square and one rectangular shape
            out += [pytest.param(name, s, id=f"{name}-{'x'.join(map(str, s))}")
                    for s in (shapes[2], shapes[-3]) if s in shapes]
    return out


@pytest.mark.parametrize(("name", "shape"), _params("float64"))
def test_eager_float64(name: str, shape: tuple) -> None:
    """Gaussian matrices (distinct eigen/singular values, full rank); the tolerance grows
    with the condition number (pinv, lstsq and cond amplify rounding by it)."""
    a = _matrices(_rng(shape), shape)
    k = min(shape[-2:])
    s = np.linalg.svd(a, compute_uv=False)
    cond = float((s[..., 0] / s[..., k - 1]).max())
    _run(CASE[name], a, 1e-10 * cond ** 2, 1e-10 * cond ** 2)


@pytest.mark.parametrize(("name", "shape"), _params("float32"))
def test_eager_float32(name: str, shape: tuple) -> None:
    """float32, condition number 10 (float32 rounding differs from LAPACK's)."""
    a = _matrices(_rng(shape, 1), shape, cond=10.0).astype(np.float32)
    _run(CASE[name], a, 5e-3, 5e-3)


# -- structure: orthonormality, reconstruction, order, agreement up to sign --------------------
def _orthonormal_columns(q: np.ndarray, tol: float) -> None:
    k = q.shape[-1]
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(k), q.shape[
        :-2] + (k, k)), atol=tol)


def _align(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """``got``'s columns with the signs of ``want``'s."""
    sign = np.sign(np.sum(got * want, -2, keepdims=True))
    return got * np.where(sign == 0, 1.0, sign)


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("n", (1, 2, 5, 8))
def test_eigh_structure(n: int, dtype: Any) -> None:
    """``A V = V diag(w)``, ``V^T V = I``, ascending eigenvalues, PyTorch's eigenvalues and
    its eigenvectors up to sign."""
    tol = 1e-12 if dtype == np.float64 else 2e-5
    a = _matrices(_rng((n,), 2), (2, 3, n, n)).astype(dtype)
    sym = a + np.swapaxes(a, -1, -2)
    w, v = (np_of(t) for t in linalg.eigh(gc.tensor(sym)))
    tw, tv = (np_of(t) for t in torch.linalg.eigh(torch.tensor(sym)))
    assert w.dtype == v.dtype == dtype
    assert (np.diff(w, axis=-1) >= 0).all()
    _orthonormal_columns(v, 10 * n * tol)
    np.testing.assert_allclose(sym @ v, v * w[..., None, :], atol=10 * n * tol)
    np.testing.assert_allclose(w, tw, rtol=0, atol=10 * n * tol)
    gap = float(np.diff(tw, axis=-1).min()) if n > 1 else 1.0
    np.testing.assert_allclose(_align(v, tv), tv, atol=10 * n * tol / gap)
    np.testing.assert_array_equal(np_of(linalg.eigvalsh(gc.tensor(sym))), w)


@pytest.mark.parametrize("dtype", (np.float32, np.float64))
@pytest.mark.parametrize("shape", [(2, 3, n, n) for n in (1, 2, 5, 8)] + [(2, 7, 4), (2, 4, 7),
                                                                           (6, 1), (1, 6)])
@pytest.mark.parametrize("full", (True, False))
def test_svd_structure(shape: tuple, dtype: Any, full: bool) -> None:
    """``U diag(S) Vh = A``, orthonormal U and Vh (with the completion for
    ``full_matrices``), descending S equal to PyTorch's, U and Vh as PyTorch's up to sign."""
    tol = 1e-12 if dtype == np.float64 else 2e-5
    a = _matrices(_rng(shape, 3), shape).astype(dtype)
    m, n = shape[-2:]
    k = min(m, n)
    u, s, vh = (np_of(t) for t in linalg.svd(gc.tensor(a), full_matrices=full))
    tu, ts, tvh = (np_of(t) for t in torch.linalg.svd(torch.tensor(a), full_matrices=full))
    assert u.shape == tu.shape and s.shape == ts.shape and vh.shape == tvh.shape
    assert u.dtype == s.dtype == vh.dtype == dtype
    assert (np.diff(s, axis=-1) <= 0).all() and (s >= 0).all()
    np.testing.assert_allclose(s, ts, atol=10 * max(m, n) * tol)
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a,
                               atol=10 * max(m, n) * tol)
    _orthonormal_columns(u, 10 * max(m, n) * tol)
    _orthonormal_columns(np.swapaxes(vh, -1, -2), 10 * max(m, n) * tol)
    gap = float(np.abs(np.diff(ts, axis=-1)).min()) if k > 1 else 1.0
    np.testing.assert_allclose(_align(u[..., :k], tu[..., :k]), tu[..., :k],
                               atol=10 * max(m, n) * tol / gap)
    vt, tvt = np.swapaxes(vh[..., :k, :], -1, -2), np.swapaxes(tvh[..., :k, :], -1, -2)
    np.testing.assert_allclose(_align(vt, tvt), tvt, atol=10 * max(m, n) * tol / gap)
    np.testing.assert_array_equal(np_of(linalg.svdvals(gc.tensor(a))), s)


def test_types_and_fields() -> None:
    """PyTorch's result type names and fields."""
    a = np.eye(3) + 0.1
    for got, want in ((linalg.eigh(gc.tensor(a)), torch.linalg.eigh(torch.tensor(a))),
                      (linalg.svd(gc.tensor(a)), torch.linalg.svd(torch.tensor(a))),
                      (linalg.qr(gc.tensor(a)), torch.linalg.qr(torch.tensor(a))),
                      (linalg.lstsq(gc.tensor(a), gc.tensor(a)),
                       torch.linalg.lstsq(torch.tensor(a), torch.tensor(a))),
                      (gc.tensor(a).svd(), torch.tensor(a).svd()),
                      (gc.tensor(a).qr(), torch.tensor(a).qr())):
        assert type(got).__name__ == type(want).__name__
        assert len(got) == len(want)
        for name in got._fields:
            assert np_of(getattr(got, name)).shape == np_of(getattr(want, name)).shape
    q = linalg.qr(gc.tensor(a), mode="r").Q
    assert tuple(q.shape) == (0,) and q.dtype == gc.float64


def test_qr_complete_tall() -> None:
    """``mode='complete'`` with m > n: Q (m x m) and R (m x n) are LAPACK's (PyTorch does not
    differentiate this case, so values only)."""
    a = np.random.default_rng(12).standard_normal((2, 7, 3))
    for x, y in zip(linalg.qr(gc.tensor(a), mode="complete"),
                    torch.linalg.qr(torch.tensor(a), mode="complete")):
        _close(x, y, 1e-13, 1e-13)


@pytest.mark.parametrize("cond", (1e6, 1e10))
def test_svd_ill_conditioned(cond: float) -> None:
    """One-sided Jacobi keeps the small singular values (eigh of A^T A would lose them to
    the squared condition number): S as PyTorch's, U and Vh orthonormal, A rebuilt."""
    a = _matrices(np.random.default_rng(7), (3, 6, 5), cond=cond)
    u, s, vh = (np_of(t) for t in linalg.svd(gc.tensor(a), full_matrices=False))
    ts = np_of(torch.linalg.svdvals(torch.tensor(a)))
    np.testing.assert_allclose(s, ts, rtol=1e-14 * cond, atol=1e-14)
    np.testing.assert_allclose(s[..., -1], 1 / cond, rtol=1e-15 * cond)
    _orthonormal_columns(u, 1e-13)
    _orthonormal_columns(np.swapaxes(vh, -1, -2), 1e-13)
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, a, atol=1e-14)


def test_jacobi_sweeps_converge_at_n16() -> None:
    """The fixed sweep count suffices beyond the sizes above (n = 16, float64): graded
    symmetric matrices (eigenvalues 1 .. 1e-12, the slowest case measured) and clustered
    ones (gaps 1e-6) reach eigenvalues as accurate as LAPACK's and orthonormal vectors."""
    n = 16
    rng = np.random.default_rng(11)
    q = np.linalg.qr(rng.standard_normal((2, n, n)))[0]
    graded = np.geomspace(1.0, 1e-12, n) * rng.choice([-1.0, 1.0], n)
    clustered = 1 + 1e-6 * rng.standard_normal(n)
    a = (q * np.stack([graded, clustered])[:, None, :]) @ np.swapaxes(q, -1, -2)
    a = (a + np.swapaxes(a, -1, -2)) / 2
    w, v = (np_of(t) for t in linalg.eigh(gc.tensor(a)))
    np.testing.assert_allclose(w, np_of(torch.linalg.eigvalsh(torch.tensor(a))), atol=1e-14)
    _orthonormal_columns(v, 1e-13)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=1e-14)
    b = _matrices(rng, (2, n + 3, n), cond=1e6)
    u, s, vh = (np_of(t) for t in linalg.svd(gc.tensor(b), full_matrices=False))
    _orthonormal_columns(u, 1e-13)
    np.testing.assert_allclose(s, np_of(torch.linalg.svdvals(torch.tensor(b))), atol=1e-14)


def test_rank_deficient() -> None:
    """Exactly rank-deficient matrices: zero singular values last, U still orthonormal (the
    QR completes the zero columns), and matrix_rank, pinv, lstsq as PyTorch's."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 6, 4))
    a[0, :, 3] = a[0, :, 0] - a[0, :, 1]
    a[1, :, 2:] = 0.0
    a[2] = 0.0
    u, s, vh = (np_of(t) for t in linalg.svd(gc.tensor(a)))
    _orthonormal_columns(u, 1e-13)
    _orthonormal_columns(np.swapaxes(vh, -1, -2), 1e-13)
    np.testing.assert_allclose((u[..., :4] * s[..., None, :]) @ vh, a, atol=1e-13)
    np.testing.assert_allclose(s, np_of(torch.linalg.svdvals(torch.tensor(a))), atol=1e-13)
    ta = torch.tensor(a)
    _close(linalg.matrix_rank(gc.tensor(a)), torch.linalg.matrix_rank(ta), 0, 0)
    _close(linalg.pinv(gc.tensor(a)), torch.linalg.pinv(ta), 1e-12, 1e-12)
    b = rng.standard_normal((3, 6, 2))
    # an explicit rcond: a[0]'s dependent column leaves |R[3,3]| (gelsy's pivoted QR) and its
    # last singular value at rounding level, about a tenth of the default rcond (eps * 6),
    # where PyTorch's threaded LAPACK has once ranked it 4 (a different solution); 1e-10
    # decides the rank by a margin of a million either way
    rc = 1e-10
    got = linalg.lstsq(gc.tensor(a), gc.tensor(b), rcond=rc)
    want = torch.linalg.lstsq(ta, torch.tensor(b), rcond=rc)
    _close(got.solution, want.solution, 1e-12, 1e-12)
    _close(got.rank, want.rank, 0, 0)
    got = linalg.lstsq(gc.tensor(a), gc.tensor(b), rcond=rc, driver="gelsd")
    want = torch.linalg.lstsq(ta, torch.tensor(b), rcond=rc, driver="gelsd")
    for x, y in zip(got, want):
        _close(x, y, 1e-12, 1e-12)  # residuals empty: not every matrix has full rank
    ea = np.zeros((2, 3, 3))
    ea[0] = np.diag([2.0, 1.0, 0.0])
    got, want = linalg.eigh(gc.tensor(ea)), torch.linalg.eigh(torch.tensor(ea))
    _close(got.eigenvalues, want.eigenvalues, 0, 1e-15)
    _orthonormal_columns(np_of(got.eigenvectors), 1e-15)


LSTSQ_SHAPES = [((2, 6, 3), (2, 6, 2)), ((2, 3, 3), (2, 3, 4)), ((2, 3, 6), (2, 3, 2)),
                ((6, 3), (6,)), ((2, 6, 3), (2, 6)), ((1, 6, 3), (4, 6, 2))]


@pytest.mark.parametrize("driver", (None, "gels", "gelsy", "gelsd", "gelss"))
@pytest.mark.parametrize("shapes", LSTSQ_SHAPES, ids=lambda s: f"{s[0]}-{s[1]}")
def test_lstsq_fields(shapes: tuple, driver: Any) -> None:
    """Every field's shape, dtype and value as PyTorch's CPU drivers: rank for the rank-
    revealing drivers, singular values for gelsd/gelss, residuals for m > n with gels (and
    gelsd/gelss, full rank), vector right-hand sides, broadcast batches."""
    rng = np.random.default_rng(len(shapes[0]) + shapes[0][-1])
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    got = linalg.lstsq(gc.tensor(a), gc.tensor(b), driver=driver)
    want = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    for x, y in zip(got, want):
        _close(x, y, 1e-11, 1e-11)
    if driver in ("gelsd", "gelss"):  # gelsy decides the rank by QR with pivoting instead
        got = linalg.lstsq(gc.tensor(a), gc.tensor(b), 0.5, driver=driver)
        want = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), 0.5, driver=driver)
        for x, y in zip(got, want):
            _close(x, y, 1e-11, 1e-11)


def test_tolerances() -> None:
    """``pinv`` and ``matrix_rank`` cut singular values at ``max(atol, rtol * S_max)`` with
    PyTorch's defaults and argument forms (floats, batch-shaped tensors, the older
    positional ``rcond``/``tol``, ``hermitian``)."""
    rng = np.random.default_rng(9)
    u = np.linalg.qr(rng.standard_normal((3, 5, 5)))[0]
    s = np.array([[4.0, 2.0, 1.0, 0.5, 1e-3], [3.0, 1.0, 0.2, 0.1, 0.0],
                  [1.0, 1.0, 0.9, 0.35, 0.25]])  # none at a threshold
    a = (u * s[:, None, :]) @ np.swapaxes(u, -1, -2)  # symmetric PSD: hermitian applies
    ga, ta = gc.tensor(a), torch.tensor(a)
    tol = np.array([0.05, 0.15, 0.4])
    for kw in ({}, {"atol": 0.3}, {"rtol": 0.1}, {"atol": 0.3, "rtol": 0.2}, {"atol": 0.0},
               {"hermitian": True}, {"hermitian": True, "atol": 0.6}):
        _close(linalg.matrix_rank(ga, **kw), torch.linalg.matrix_rank(ta, **kw), 0, 0)
        _close(linalg.pinv(ga, **kw), torch.linalg.pinv(ta, **kw), 1e-9, 1e-9)
    _close(linalg.matrix_rank(ga, atol=gc.tensor(tol)),
           torch.linalg.matrix_rank(ta, atol=torch.tensor(tol)), 0, 0)
    _close(linalg.pinv(ga, rtol=gc.tensor(tol)), torch.linalg.pinv(ta, rtol=torch.tensor(tol)),
           1e-9, 1e-9)
    _close(linalg.matrix_rank(ga, 0.4), torch.linalg.matrix_rank(ta, 0.4), 0, 0)
    _close(linalg.pinv(ga, 0.2), torch.linalg.pinv(ta, 0.2), 1e-9, 1e-9)
    _close(gc.tensor(a).pinverse(0.2), torch.tensor(a).pinverse(0.2), 1e-9, 1e-9)


def test_cond_all_orders() -> None:
    """Every ``p``: singular-value ratios for None/2/-2 (rectangular too), ``norm(A) *
    norm(inv(A))`` otherwise, inf for a singular matrix, as PyTorch."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 4, 4))
    a[2, 3] = a[2, 0] * 2
    for p in (None, 2, -2, "fro", "nuc", float("inf"), -float("inf"), 1, -1):
        got, want = linalg.cond(gc.tensor(a), p), torch.linalg.cond(torch.tensor(a), p)
        g, w = np_of(got), np_of(want)
        assert g.shape == w.shape
        np.testing.assert_allclose(g[:2], w[:2], rtol=1e-10)
        assert (np.abs(g[2]) > 1e14) == (np.abs(w[2]) > 1e14), p  # singular
    _close(linalg.cond(gc.tensor(a[:, :3])), torch.linalg.cond(torch.tensor(a[:, :3])), 1e-10, 0)


@pytest.mark.parametrize("keepdim", (False, True))
@pytest.mark.parametrize("ord", (2, -2, "nuc"))
def test_matrix_norm_svd_orders_dims(ord: Any, keepdim: bool) -> None:  # noqa: A002
    """Singular-value norms over any two dims, keepdim, dtype, and through ``linalg.norm``."""
    a = np.random.default_rng(6).standard_normal((3, 4, 5))
    for dims in ((-2, -1), (0, 2), (2, 0), (1, 0)):
        _run(lambda L, M, x, d=dims: L.matrix_norm(x, ord, d, keepdim), a, 1e-10, 1e-10)
    _run(lambda L, M, x: L.norm(x[0], ord), a, 1e-10, 1e-10)
    a32 = a.astype(np.float32)
    got = linalg.matrix_norm(gc.tensor(a32), ord, dtype=gc.float64)
    _close(got, torch.linalg.matrix_norm(torch.tensor(a32), ord, dtype=torch.float64), 1e-12,
           1e-12)


@pytest.mark.parametrize("shape", ((2, 5, 3), (4, 4), (3, 1)))
def test_torch_svd_qr_and_householder_product(shape: tuple) -> None:
    """``torch.svd`` (V, ``some``, ``compute_uv``), ``Tensor.qr(some)`` and
    ``householder_product`` on ``geqrf``'s output, values and gradients."""
    a = _matrices(np.random.default_rng(8), shape)
    for some in (True, False):
        _run(lambda L, M, x, s=some: (lambda r: (r.S, r.U[..., :_k(x)] ** 2,
                                                 r.V[..., :_k(x)] ** 2))(x.svd(some=s)),
             a, 1e-10, 1e-10)
        if some or shape[-2] <= shape[-1]:  # PyTorch does not differentiate the other case
            _run(lambda L, M, x, s=some: tuple(x.qr(some=s)), a, 1e-10, 1e-10)
    for x, y in zip(gc.tensor(a).qr(some=False), torch.tensor(a).qr(some=False)):
        _close(x, y, 1e-12, 1e-12)
    got, want = gc.tensor(a).svd(compute_uv=False), torch.tensor(a).svd(compute_uv=False)
    for x, y in zip(got, want):
        _close(x, y, 1e-12, 1e-12)
    refl, tau = torch.geqrf(torch.tensor(a))
    _run(lambda L, M, x: L.householder_product(x, (x[..., 0, :_k(x)] * 0.1).sigmoid()), a,
         1e-12, 1e-12)
    _close(linalg.householder_product(gc.tensor(np_of(refl)), gc.tensor(np_of(tau))),
           torch.linalg.qr(torch.tensor(a)).Q, 1e-12, 1e-12)


@pytest.mark.parametrize("shape", ((0, 3, 3), (2, 0, 0), (2, 3, 0), (2, 0, 3)))
def test_empty(shape: tuple) -> None:
    a = np.zeros(shape)
    m, n = shape[-2:]
    calls = [lambda L, a: tuple(L.svd(a)), lambda L, a: tuple(L.svd(a, full_matrices=False)),
             lambda L, a: L.svdvals(a), lambda L, a: tuple(L.qr(a)),
             lambda L, a: tuple(L.qr(a, mode="complete")), lambda L, a: L.pinv(a),
             lambda L, a: L.matrix_rank(a)]
    if m == n:
        calls += [lambda L, a: tuple(L.eigh(a)), lambda L, a: L.eigvalsh(a)]
    for call in calls:
        for x, y in zip(outs(call(linalg, gc.tensor(a))), outs(call(torch.linalg,
                                                                    torch.tensor(a)))):
            _close(x, y, 0, 0)


# -- compiled ---------------------------------------------------------------------------------
COMPILED = [
    ("eigh", (3, 3)), ("eigh_upper_nonsym", (4, 4)), ("svd_reduced", (4, 3)),
    ("svd_full_recon", (3, 5)), ("qr_reduced", (5, 3)), ("qr_complete", (3, 4)),
    ("pinv", (4, 3)), ("lstsq", (5, 3)), ("matrix_norms", (3, 3)), ("cond", (2, 3)),
]


def _compiled(f: Any, shape: tuple, dtype: Any, rtol: float, atol: float) -> None:
    """One compile for batch sizes 2 and 5: outputs and the parameter's gradient, as
    test_linalg's (the matrices are ``x * p + I``-like, well-conditioned)."""
    rng = np.random.default_rng(sum(shape))
    p0 = rng.standard_normal(shape).astype(dtype)
    shift = 2 * np.eye(*shape, dtype=dtype)
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
        x = rng.standard_normal((batch, *shape)).astype(dtype)
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


@pytest.mark.parametrize(("name", "shape"), COMPILED, ids=[c[0] for c in COMPILED])
def test_compiled_float64(name: str, shape: tuple) -> None:
    _compiled(CASE[name], shape, np.float64, 1e-9, 1e-9)


@pytest.mark.parametrize("name", ("eigh", "svd_reduced", "qr_reduced"))
def test_compiled_float32(name: str) -> None:
    _compiled(CASE[name], dict(COMPILED)[name], np.float32, 2e-3, 2e-3)


def test_compiled_limits() -> None:
    """What a compiled step cannot do raises, naming the function: gelsd/gelss residuals
    (their shape depends on the ranks) and a symbolic matrix size."""

    @gc.compile
    def gelsd(a: Any, b: Any) -> Any:
        return linalg.lstsq(a, b, driver="gelsd").solution

    with pytest.raises(NotImplementedError, match="lstsq: driver 'gelsd'"):
        gelsd(gc.ones(2, 5, 3), gc.ones(2, 5, 1))

    @gc.compile
    def square(a: Any) -> Any:
        return linalg.svdvals(a.reshape(-1, 2, 2).mT.reshape(2, 2, -1))

    with pytest.raises(NotImplementedError, match="linalg.svd: the matrix size .* symbolic"):
        square(gc.ones(4, 2, 2))


def test_size_limit() -> None:
    """Only the smaller matrix size is capped (it is what the graph unrolls over)."""
    for call in (lambda: linalg.svd(gc.zeros(66, 65)), lambda: linalg.qr(gc.zeros(65, 70)),
                 lambda: linalg.eigh(gc.zeros(65, 65))):
        with pytest.raises(NotImplementedError, match="65.*unroll"):
            call()


def test_tall_least_squares() -> None:
    """A tall problem (m = 300 > MAX_N, n = 3): lstsq, pinv, qr and svdvals as PyTorch's."""
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((300, 3)), rng.standard_normal((300, 2))
    ga, ta = gc.tensor(a), torch.tensor(a)
    for x, y in zip(linalg.lstsq(ga, gc.tensor(b), driver="gels"),
                    torch.linalg.lstsq(ta, torch.tensor(b), driver="gels")):
        _close(x, y, 1e-10, 1e-12)
    _close(linalg.pinv(ga), torch.linalg.pinv(ta), 1e-10, 1e-12)
    _close(linalg.svdvals(ga.mT), torch.linalg.svdvals(ta.mT), 1e-12, 0)
    for x, y in zip(linalg.qr(ga), torch.linalg.qr(ta)):
        _close(x, y, 1e-12, 1e-13)


def test_sweeps_formula() -> None:
    """The documented count: 3 ceil(log2 n) + 2 sweeps (none below n = 2)."""
    assert [LO.jacobi_sweeps(n) for n in (1, 2, 3, 5, 8, 9, 64)] == [0, 5, 8, 11, 11, 14, 20]


# -- errors -----------------------------------------------------------------------------------
z = np.zeros
ERRORS = [
    ("eigh_nonsquare", lambda L, M, t: L.eigh(t(z((3, 4))))),
    ("eigh_1d", lambda L, M, t: L.eigh(t(z(3)))),
    ("eigh_uplo", lambda L, M, t: L.eigh(t(z((3, 3))), UPLO="X")),
    ("eigh_long", lambda L, M, t: L.eigh(t(z((3, 3), np.int64)))),
    ("eigvalsh_nonsquare", lambda L, M, t: L.eigvalsh(t(z((2, 3))))),
    ("svd_1d", lambda L, M, t: L.svd(t(z(3)))),
    ("svd_long", lambda L, M, t: L.svd(t(z((3, 3), np.int64)))),
    ("svd_driver", lambda L, M, t: L.svd(t(z((3, 3))), driver="gesvd")),
    ("svdvals_1d", lambda L, M, t: L.svdvals(t(z(3)))),
    ("qr_mode", lambda L, M, t: L.qr(t(z((3, 3))), mode="x")),
    ("qr_1d", lambda L, M, t: L.qr(t(z(3)))),
    ("qr_long", lambda L, M, t: L.qr(t(z((3, 3), np.int64)))),
    ("pinv_1d", lambda L, M, t: L.pinv(t(z(3)))),
    ("pinv_long", lambda L, M, t: L.pinv(t(z((3, 3), np.int64)))),
    ("matrix_rank_1d", lambda L, M, t: L.matrix_rank(t(z(3)))),
    ("lstsq_driver", lambda L, M, t: L.lstsq(t(z((3, 3))), t(z((3, 3))), driver="x")),
    ("lstsq_rows", lambda L, M, t: L.lstsq(t(z((3, 3))), t(z((4, 3))))),
    ("lstsq_dtypes", lambda L, M, t: L.lstsq(t(z((3, 3), np.float32)), t(z((3, 3))))),
    ("lstsq_1d", lambda L, M, t: L.lstsq(t(z(3)), t(z(3)))),
    ("cond_1d", lambda L, M, t: L.cond(t(z(3)))),
    ("cond_ord", lambda L, M, t: L.cond(t(z((3, 3))), 3)),
    ("cond_ord_str", lambda L, M, t: L.cond(t(z((3, 3))), "abc")),
    ("cond_fro_nonsquare", lambda L, M, t: L.cond(t(z((3, 4))), "fro")),
    ("eigh_not_tensor", lambda L, M, t: L.eigh(3)),
    ("lstsq_not_tensor", lambda L, M, t: L.lstsq(3, t(z((3, 3))))),
    ("cond_not_tensor", lambda L, M, t: L.cond(3)),
    ("svd_bf16", lambda L, M, t: L.svd(t(z((3, 3))).to(M.bfloat16))),
    ("qr_bf16", lambda L, M, t: L.qr(t(z((3, 3))).to(M.bfloat16))),
    ("matrix_rank_long", lambda L, M, t: L.matrix_rank(t(z((3, 3), np.int64)))),
    ("householder_wide", lambda L, M, t: L.householder_product(t(z((2, 3))), t(z(1)))),
    ("householder_tau", lambda L, M, t: L.householder_product(t(z((3, 2))), t(z(3)))),
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
