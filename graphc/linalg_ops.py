"""``torch.linalg``'s dense functions (norms, products, determinants, inverses, solves, QR,
symmetric eigendecomposition, SVD and what is built on them) written with graphc's front-end
ops.

Why compositions and not primitives: every function here is matmuls, reductions, ``where``
masks, ``gather`` row swaps and slices, so its IR, its gradient (reverse-mode autodiff through
the composition) and both native lowerings come from ops graphc already has and tests; nothing
new reaches the code generators. The factorisations are Gauss-Jordan elimination with partial
pivoting, *unrolled* over a static matrix size ``n``: column by column, the pivot row is the
``argmax`` of ``|A[k:, k]|`` (the first maximum, as LAPACK's ``idamax``), the rows are swapped by
a ``gather`` whose index is built with ``where``, and one rank-1 update eliminates the column.
That is ``n`` steps of batched tensor ops (``O(n^3)`` work, as LU), the batch dims (symbolic in
a compiled step) are never looped over, and the derivative is exact for the computation done:
it matches PyTorch's analytical gradients up to rounding. The unrolling is why ``n`` is capped
(``MAX_N``): each column adds a dozen nodes to the graph.

Errors follow PyTorch (types, messages, order). Singular inputs: ``det`` is 0 and ``slogdet``
``(0, -inf)`` everywhere; ``inv`` and ``solve`` raise :class:`LinAlgError` when run eagerly, as
PyTorch does, but a compiled step cannot raise on data it has not seen, so there a singular
matrix gives inf/nan in the result (``inv_ex``'s ``info`` reports it as a tensor in both modes).
``cholesky`` (right-looking, one rank-1 update per column) likewise raises for a matrix that is
not positive-definite eagerly and gives nan from the failing column on when compiled
(``cholesky_ex``'s ``info`` reports it); ``solve_triangular`` is substitution unrolled over n.

Orthogonal and spectral factorisations. ``qr`` (and ``householder_product``) is LAPACK's
Householder QR unrolled over the columns, with ``dlarfg``'s sign convention, so Q and R equal
PyTorch's and autodiff through the reflections is the exact derivative. ``eigh`` and ``svd``
need an iteration, which a compiled step cannot run to a data-dependent convergence test:
they are cyclic Jacobi (two-sided on the symmetric matrix for ``eigh``, one-sided on the
columns for ``svd``, which keeps small singular values accurate) with a fixed number of sweeps
(:func:`jacobi_sweeps`, ``3 ceil(log2 n) + 2``, measured to converge to rounding level for
float32 and float64 up to n = 64). Each sweep is n - 1 rounds of n/2 disjoint rotations in
round-robin order, applied together as gathers and elementwise ops, and the rounds are one
:func:`graphc.loops.scan`, so the compiled graph (and its compile time) does not grow with the
sweeps. The iteration runs on a detached copy and its result is re-attached by first-order
perturbation theory (zero in value, the analytic derivative in the gradient), so the gradients
are PyTorch's formulas rather than autodiff through rotations acting on rounding noise; as in
PyTorch, eigenvector and singular-vector gradients are ill-defined for repeated values (graphc
drops the infinite terms where PyTorch returns inf/nan). ``pinv``, ``lstsq`` (all four CPU
drivers' output conventions), ``matrix_rank``, ``cond`` and ``matrix_norm``'s 2/-2/'nuc' are
built on the SVD (or ``eigh`` with ``hermitian``). The matrix sizes must be static; the smaller
of the two is capped at ``MAX_N``.

``eig``/``eigvals`` (complex results: graphc has no complex dtype) and ``lu``/``lu_factor``
(graphc's LU factors stay inside det/solve) raise ``NotImplementedError`` naming themselves and
the reason.
"""

from __future__ import annotations

import builtins
import math
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _context
from . import tensor_ops as T_
from ._tensor import Tensor, builder
from .ir import dtypes as dt
from .ir import shapes as sh
from .reduce_ops import vector_norm

_wrap = Tensor._wrap

# Above this size the unrolled elimination makes graphs too large to compile in useful time.
MAX_N = 64

SlogdetResult = namedtuple("linalg_slogdet", ["sign", "logabsdet"])
Slogdet = namedtuple("slogdet", ["sign", "logabsdet"])
InvEx = namedtuple("linalg_inv_ex", ["inverse", "info"])


class LinAlgError(RuntimeError):
    """``torch.linalg.LinAlgError``: a matrix the operation cannot handle (singular for
    ``inv``/``solve``, not positive-definite for ``cholesky``). A ``RuntimeError``, as
    PyTorch's, so ``except RuntimeError`` keeps working. Raised only eagerly: a compiled step
    cannot raise on values, it returns inf/nan instead."""


# -- helpers ----------------------------------------------------------------------------------
def _traced() -> bool:
    return _context.current() is not None


def _torch_name(d: dt.DType) -> str:
    return T_._TORCH_NAME.get(d.name, "BFloat16" if d is dt.bfloat16 else d.name)


def _as(x: Any, fn: str, arg: str = "A", pos: int = 1) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' (position {pos}) must be Tensor, not "
                        f"{type(x).__name__}")
    return x


def _check_matrix(a: Tensor, fn: str) -> None:
    if a.ndim < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")


def _check_square(a: Tensor, fn: str) -> None:
    _check_matrix(a, fn)
    if not sh.same(a.shape[-1], a.shape[-2]):
        raise RuntimeError(f"{fn}: A must be batches of square matrices, but they are "
                           f"{sh.fmt_dim(a.shape[-2])} by {sh.fmt_dim(a.shape[-1])} matrices")


def _check_float(a: Tensor, fn: str) -> None:
    if not a.dtype.is_float:
        raise RuntimeError(f"{fn}: Expected a floating point or complex tensor as input. "
                           f"Got {_torch_name(a.dtype)}")


def _static_n(a: Tensor, fn: str) -> int:
    """The matrix size as an int: the elimination is unrolled over it, so it cannot be the
    symbolic batch dim, and it is capped at ``MAX_N``."""
    n = a.shape[-1]
    if not isinstance(n, (int, np.integer)):
        raise NotImplementedError(f"{fn}: the matrix size {sh.fmt_dim(n)} is symbolic; graphc "
                                  "unrolls the elimination over a fixed size n")
    if n > MAX_N:
        raise NotImplementedError(f"{fn}: matrices of size {n} are not supported (at most "
                                  f"{MAX_N}): graphc unrolls the elimination over n, one "
                                  "step per column")
    return int(n)


def _iota(n: int) -> Tensor:
    return _wrap(builder().op("iota", (), shape=(n,), dtype=dt.int64, axis=0))


def _batch_str(pivots: Tensor, batched: bool) -> tuple[str, int] | None:
    """Eagerly: ``(batch text, 1-based column)`` of the first matrix with a zero pivot, as
    PyTorch's ``_linalg_check_errors`` words it, or None."""
    p = np.asarray(pivots.detach().numpy())
    if p.size == 0:
        return None
    zero = (p == 0).reshape(-1, p.shape[-1])
    bad = np.flatnonzero(zero.any(-1))
    if not bad.size:
        return None
    b = int(bad[0])
    return (f": (Batch element {b})" if batched else ""), int(np.argmax(zero[b])) + 1


def _eliminate(m: Tensor, n: int, full: bool,
               safe: bool) -> tuple[Tensor, list[Tensor], Tensor | None]:
    """Gauss elimination with partial pivoting of ``m`` (…, n, w), w >= n, on its first ``n``
    columns. ``full``: Gauss-Jordan (every other row eliminated, pivot rows normalised, so the
    trailing columns end as ``A^-1 B``); otherwise only rows below the pivot (LU: the pivots
    are ``U``'s diagonal). ``safe``: a zero pivot divides as 1 (its column is all zero below, so
    the elimination is a no-op and the values stay finite: ``det`` 0); otherwise it divides by
    zero, giving PyTorch's inf/nan. Returns the reduced matrix, the pivots and the parity of
    the row swaps (bool, batch-shaped; None for n = 1: no swap)."""
    rows = _iota(n)
    pivots: list[Tensor] = []
    odd = None
    for k in range(n):
        if k < n - 1:
            col = m[..., k].abs()
            cand = T_.where(rows >= k, col, -1.0) if k else col  # rows above k are done
            p = T_.argmax(cand, -1, keepdim=True)  # (…, 1)
            idx = T_.where(rows == k, p, T_.where(rows == p, k, rows))  # the swap k <-> p
            m = T_.gather(m, -2, idx.unsqueeze(-1).expand(*m.shape))
            swapped = p.squeeze(-1) != k
            odd = swapped if odd is None else odd != swapped
        piv = m[..., k, k]
        pivots.append(piv)
        d = T_.where(piv == 0, 1.0, piv) if safe else piv
        r = m[..., k, :] / d.unsqueeze(-1)  # the pivot row, normalised
        c = m[..., k]
        if full:
            c = c - (rows == k).to(m.dtype)  # row k becomes r
        else:
            c = T_.where(rows > k, c, 0.0)
        m = m - c.unsqueeze(-1) * r.unsqueeze(-2)
    return m, pivots, odd


def _prod(ts: Sequence[Tensor]) -> Tensor:
    out = ts[0]
    for t in ts[1:]:
        out = out * t
    return out


def _batch_const(a: Tensor, value: float) -> Tensor:
    """A batch-shaped (``a.shape[:-2]``) constant connected to ``a`` (zero gradient), for the
    0 x 0 matrices."""
    z = T_.sum(T_.sum(a, -1), -1)  # (…): sums of nothing
    return T_.where(T_.where(z == z, True, True), value, z)


# -- determinants -----------------------------------------------------------------------------
def _lu_pivots(a: Tensor, fn: str) -> tuple[list[Tensor], Tensor | None]:
    _check_square(a, fn)
    _check_float(a, fn)
    n = _static_n(a, fn)
    if n == 0:
        return [], None
    _, pivots, odd = _eliminate(a, n, full=False, safe=True)
    return pivots, odd


def det(A: Tensor) -> Tensor:  # noqa: N803
    """``torch.linalg.det``: the product of the LU pivots, negated for an odd number of row
    swaps (0 for a singular matrix: the zero pivot is kept)."""
    a = _as(A, "linalg_det")
    pivots, odd = _lu_pivots(a, "linalg.det")
    if not pivots:
        return _batch_const(a, 1.0)
    d = _prod(pivots)
    return d if odd is None else T_.where(odd, -d, d)


def slogdet(A: Tensor) -> SlogdetResult:  # noqa: N803
    """``torch.linalg.slogdet``: ``(sign, log|det|)`` from the LU pivots: the sign of their
    product and of the permutation, the sum of their log-magnitudes (so large or tiny
    determinants do not overflow); ``(0, -inf)`` for a singular matrix, as PyTorch."""
    a = _as(A, "linalg_slogdet")
    pivots, odd = _lu_pivots(a, "linalg.slogdet")
    if not pivots:
        return SlogdetResult(_batch_const(a, 1.0), _batch_const(a, 0.0))
    s = _prod([p.sign() for p in pivots])
    logabs = pivots[0].abs().log()
    for p in pivots[1:]:
        logabs = logabs + p.abs().log()
    return SlogdetResult(s if odd is None else T_.where(odd, -s, s), logabs)


def torch_slogdet(input: Tensor) -> Slogdet:  # noqa: A002
    """``torch.slogdet`` / ``Tensor.slogdet``: ``linalg.slogdet`` with PyTorch's older result
    type name (``torch.return_types.slogdet``)."""
    s, la = slogdet(input)
    return Slogdet(s, la)


def logdet(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.logdet``: ``log(det)``: nan for a negative determinant, -inf for a singular
    matrix (PyTorch's ``where(sign == -1, nan, logabsdet)``)."""
    a = _as(input, "logdet", "input")
    pivots, odd = _lu_pivots(a, "logdet")
    if not pivots:
        return _batch_const(a, 0.0)
    s, la = slogdet(a)
    return T_.where(s == -1, math.nan, la)


# -- inverses and solves ----------------------------------------------------------------------
def _solve_square(a: Tensor, b: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """``A^-1 B`` for ``a`` (…, n, n) and ``b`` (…, n, k) of one batch shape, and the pivots
    stacked (…, n)."""
    m = T_.cat([a, b], -1)
    m, pivots, _ = _eliminate(m, n, full=True, safe=False)
    x = m[..., :, n:]
    return x, T_.stack(pivots, -1)


def _info(pivots: Tensor) -> Tensor:
    """LAPACK's ``info`` per matrix: the 1-based index of the first zero pivot, else 0."""
    zero = pivots == 0
    first = T_.argmax(zero.to(dt.int32), -1) + 1
    return T_.where(T_.amax(zero.to(dt.int32), -1) > 0, first, 0).to(dt.int32)


def _eye_like(a: Tensor, n: int) -> Tensor:
    eye = (_iota(n).unsqueeze(-1) == _iota(n)).to(a.dtype)
    return eye.expand(*a.shape)


def _inv(a: Tensor, fn: str) -> tuple[Tensor, Tensor | None]:
    """The inverse and the pivots (None for 0 x 0 matrices)."""
    _check_square(a, fn)
    _check_float(a, fn)
    n = _static_n(a, fn)
    if n == 0:
        return a * 1, None
    return _solve_square(a, _eye_like(a, n), n)


def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvEx:  # noqa: N803
    """``torch.linalg.inv_ex``: the inverse and LAPACK's ``info`` (int32, 0 or the index of
    the zero pivot); it raises only with ``check_errors`` (eagerly)."""
    a = _as(A, "linalg_inv_ex")
    x, pivots = _inv(a, "linalg.inv_ex")
    if pivots is None:
        return InvEx(x, _batch_const(a, 0.0).to(dt.int32))
    if check_errors and not _traced():
        _raise_singular(pivots, a.ndim > 2, "linalg.inv_ex")
    return InvEx(x, _info(pivots))


def _raise_singular(pivots: Tensor, batched: bool, fn: str) -> None:
    hit = _batch_str(pivots, batched) if pivots.ndim and pivots.shape[-1] else None
    if hit is not None:
        batch, col = hit
        if "solve" in fn:
            raise LinAlgError(f"torch.{fn}{batch}: The solver failed because the input matrix "
                              "is singular.")
        raise LinAlgError(f"{fn}{batch}: The diagonal element {col} is zero, the inversion "
                          "could not be completed because the input matrix is singular.")


def inv(A: Tensor) -> Tensor:  # noqa: N803
    """``torch.linalg.inv``: Gauss-Jordan elimination of ``[A | I]``. A singular matrix raises
    :class:`LinAlgError` eagerly; in a compiled step it gives inf/nan."""
    a = _as(A, "linalg_inv")
    x, pivots = _inv(a, "linalg.inv")
    if pivots is not None and not _traced():
        _raise_singular(pivots, a.ndim > 2, "linalg.inv")
    return x


def inverse(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.inverse`` / ``Tensor.inverse``: ``linalg.inv``."""
    return inv(_as(input, "inverse", "input"))


def _is_vector_rhs(a: Tensor, b: Tensor) -> bool:
    """PyTorch's ``linalg_solve_is_vector_rhs``: ``B`` is a (batch of) vector(s)."""
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and sh.same_shape(b.shape, a.shape[:-1]))


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:  # noqa: N803
    """``torch.linalg.solve``: ``X`` with ``A X = B`` (``X A = B`` for ``left=False``), ``B``
    a vector (…, n) or matrices (…, n, k) by PyTorch's rule, batch dims broadcast. Gauss-Jordan
    elimination of ``[A | B]``; a singular ``A`` raises :class:`LinAlgError` eagerly and gives
    inf/nan in a compiled step."""
    a = _as(A, "linalg_solve")
    b = _as(B, "linalg_solve", "B", 2)
    fn = "linalg.solve"
    _check_square(a, fn)
    _check_float(a, fn)
    if b.dtype is not a.dtype:
        raise RuntimeError(f"{fn}: Expected A and B to have the same dtype, but found A of type "
                           f"{_torch_name(a.dtype)} and B of type {_torch_name(b.dtype)} instead")
    vector = _is_vector_rhs(a, b)
    if not left:
        if vector:
            raise RuntimeError(f"{fn}: Vector broadcasting of the left hand side is not "
                               "supported for left=False. In this case linalg.solve is "
                               "equivalent to B / A.squeeze(-1)")
        return solve(a.mT, b.mT).mT
    bm = b.unsqueeze(-1) if vector else b
    if bm.ndim < 2 or not sh.same(bm.shape[-2], a.shape[-1]):
        k = bm.shape[-1] if bm.ndim >= 2 else 1
        rows = bm.shape[-2] if bm.ndim >= 2 else bm.shape[-1]
        raise RuntimeError(f"{fn}: Incompatible shapes of A and B for the equation AX = B "
                           f"({sh.fmt_dim(a.shape[-2])}x{sh.fmt_dim(a.shape[-1])} and "
                           f"{sh.fmt_dim(rows)}x{sh.fmt_dim(k)})")
    n = _static_n(a, fn)
    from .composite_ops import _broadcast, _expand_to

    batch = _broadcast(bm.shape[:-2], a.shape[:-2])
    ae = _expand_to(a, [*batch, n, n])
    be = _expand_to(bm, [*batch, n, bm.shape[-1]])
    if n == 0:
        x = be * 1
    else:
        x, pivots = _solve_square(ae, be, n)
        if not _traced():
            _raise_singular(pivots, len(batch) > 0, fn)
    return x.squeeze(-1) if vector else x


# -- Cholesky and triangular solves -----------------------------------------------------------
CholeskyEx = namedtuple("linalg_cholesky_ex", ["L", "info"])


def _bool_arg(v: Any, fn: str, arg: str) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument '{arg}' must be bool, not {type(v).__name__}")
    return bool(v)


def _cholesky_lower(a: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The lower Cholesky factor of ``a`` (…, n, n), n >= 1, read from its lower triangle as
    LAPACK's ``potrf``, and the pivots ``d_k`` (…, n) (the factor's squared diagonal; not > 0
    where the leading minor of order k + 1 is not positive-definite). Right-looking: column k
    is the trailing matrix's column k over ``sqrt(d_k)``, then one rank-1 update. The values
    come from the lower triangle, the gradient flows through ``(A + A^T) / 2`` (PyTorch's
    symmetric gradient): ``sym + detach(lower - sym)``, exactly the lower triangle's values
    for a symmetric input. A pivot <= 0 gives nan from there on (no raise in a trace)."""
    rows = _iota(n)
    sym = (a + a.mT) * 0.5
    low = T_.where(rows.unsqueeze(-1) >= rows, a, a.mT)
    m = sym + (low - sym).detach()
    cols: list[Tensor] = []
    pivots: list[Tensor] = []
    for k in range(n):
        d = m[..., k, k]
        pivots.append(d)
        c = T_.where(rows >= k, m[..., :, k] / d.sqrt().unsqueeze(-1), 0.0)
        cols.append(c)
        if k < n - 1:
            m = m - c.unsqueeze(-1) * c.unsqueeze(-2)
    return T_.stack(cols, -1), T_.stack(pivots, -1)


def _not_pd_info(pivots: Tensor) -> Tensor:
    """``potrf``'s ``info``: the order of the first leading minor that is not
    positive-definite (a pivot not > 0, nan included), else 0; int32."""
    bad = T_.where(pivots > 0, 0, 1).to(dt.int32)
    first = T_.argmax(bad, -1) + 1
    return T_.where(T_.amax(bad, -1) > 0, first, 0).to(dt.int32)


def _raise_not_pd(pivots: Tensor, batched: bool, fn: str) -> None:
    p = np.asarray(pivots.detach().numpy())
    if p.size == 0:
        return
    bad = ~(p > 0).reshape(-1, p.shape[-1])
    hit = np.flatnonzero(bad.any(-1))
    if hit.size:
        b = int(hit[0])
        prefix = f"(Batch element {b}): " if batched else ""
        raise LinAlgError(f"{fn}: {prefix}The factorization could not be completed because the "
                          "input is not positive-definite (the leading minor of order "
                          f"{int(np.argmax(bad[b])) + 1} is not positive-definite).")


def _cholesky(a: Tensor, upper: bool, fn: str) -> tuple[Tensor, Tensor]:
    _check_square(a, fn)
    _check_float(a, fn)
    n = _static_n(a, fn)
    if n == 0:
        return a * 1, _batch_const(a, 0.0).to(dt.int32)
    if upper:  # A = U^T U: U^T is the lower factor of A^T (the upper triangle of A)
        low, pivots = _cholesky_lower(a.mT, n)
        return low.mT, pivots
    return _cholesky_lower(a, n)


def cholesky_ex(A: Tensor, *, upper: bool = False,  # noqa: N803
                check_errors: bool = False) -> CholeskyEx:
    """``torch.linalg.cholesky_ex``: the Cholesky factor and ``potrf``'s ``info`` (int32: 0,
    or the order of the first leading minor that is not positive-definite); it raises only
    with ``check_errors`` (eagerly). Where ``info`` > 0 the factor holds nan from that column
    on (LAPACK leaves a partial factor there; neither is meaningful)."""
    a = _as(A, "linalg_cholesky_ex", "input")
    upper = _bool_arg(upper, "linalg_cholesky_ex", "upper")
    fn = "linalg.cholesky_ex"
    f, pivots = _cholesky(a, upper, "linalg.cholesky")  # PyTorch's checks name cholesky
    if f.shape[-1] == 0:
        return CholeskyEx(f, pivots)
    if check_errors and not _traced():
        _raise_not_pd(pivots, a.ndim > 2, fn)
    return CholeskyEx(f, _not_pd_info(pivots))


def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:  # noqa: N803
    """``torch.linalg.cholesky``: ``L`` with ``A = L L^T`` from ``A``'s lower triangle (``U``
    with ``A = U^T U`` from the upper one for ``upper=True``), unrolled column by column over
    the fixed size n. A matrix that is not positive-definite raises :class:`LinAlgError`
    eagerly, with PyTorch's message; in a compiled step it gives nan in the factor (from the
    failing column on). The gradient is PyTorch's symmetric one."""
    a = _as(A, "linalg_cholesky", "input")
    upper = _bool_arg(upper, "linalg_cholesky", "upper")
    fn = "linalg.cholesky"
    f, pivots = _cholesky(a, upper, fn)
    if f.shape[-1] and not _traced():
        _raise_not_pd(pivots, a.ndim > 2, fn)
    return f


_MISSING: Any = object()


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool = _MISSING,  # noqa: N803
                     left: bool = True, unitriangular: bool = False) -> Tensor:
    """``torch.linalg.solve_triangular``: ``X`` with ``A X = B`` (``X A = B`` for
    ``left=False``), ``A`` triangular (only its ``upper`` or lower triangle is read; with
    ``unitriangular`` its diagonal is taken as ones), ``B`` matrices (…, n, k), batch dims
    broadcast; the result has ``A``'s dtype, as PyTorch. Forward/back substitution unrolled
    over n, column-oriented: ``x_i = r_i / A_ii`` then ``r -= A[:, i] x_i`` for the rows still
    to solve. A zero on the diagonal gives inf/nan, as PyTorch (no error)."""
    a = _as(A, "linalg_solve_triangular")
    b = _as(B, "linalg_solve_triangular", "B", 2)
    if upper is _MISSING:  # keyword-only and required, worded as PyTorch's binding
        raise TypeError('linalg_solve_triangular() missing 1 required positional arguments: '
                        '"upper"')
    upper = _bool_arg(upper, "linalg_solve_triangular", "upper")
    left = _bool_arg(left, "linalg_solve_triangular", "left")
    unitriangular = _bool_arg(unitriangular, "linalg_solve_triangular", "unitriangular")
    fn = "linalg.solve_triangular"
    _check_square(a, fn)
    if b.ndim < 2:
        raise RuntimeError(f"{fn}: The input tensor B must have at least 2 dimensions.")
    if not sh.same(b.shape[-2] if left else b.shape[-1], a.shape[-1]):
        raise RuntimeError(f"{fn}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({sh.fmt_dim(a.shape[-2])}x"
                           f"{sh.fmt_dim(a.shape[-1])} and {sh.fmt_dim(b.shape[-2])}x"
                           f"{sh.fmt_dim(b.shape[-1])})")
    if not a.dtype.is_float:
        raise NotImplementedError(f"\"triangular_solve_cpu\" not implemented for "
                                  f"'{_torch_name(a.dtype)}'")
    if b.dtype is not a.dtype:
        b = b.to(a.dtype)
    if not left:  # X A = B  <=>  A^T X^T = B^T, A^T triangular the other way
        return solve_triangular(a.mT, b.mT, upper=not upper, unitriangular=unitriangular).mT
    n = _static_n(a, fn)
    from .composite_ops import _broadcast, _expand_to

    batch = _broadcast(b.shape[:-2], a.shape[:-2])
    a = _expand_to(a, [*batch, n, n])
    r = _expand_to(b, [*batch, n, b.shape[-1]])
    if n == 0:
        return r * 1
    rows = _iota(n)
    xs: list[Tensor | None] = [None] * n
    for i in (range(n - 1, -1, -1) if upper else range(n)):
        x = r[..., i, :]
        if not unitriangular:
            x = x / a[..., i, i].unsqueeze(-1)
        xs[i] = x
        if (i > 0) if upper else (i < n - 1):
            c = T_.where(rows < i if upper else rows > i, a[..., :, i], 0.0)
            r = r - c.unsqueeze(-1) * x.unsqueeze(-2)
    return T_.stack(xs, -2)


# -- QR: Householder reflections --------------------------------------------------------------
QRResult = namedtuple("linalg_qr", ["Q", "R"])
TorchQR = namedtuple("qr", ["Q", "R"])


def _static_mn(a: Tensor, fn: str) -> tuple[int, int]:
    """Both matrix sizes as ints (the factorisations index and build matrices with them). Only
    the smaller one is capped at ``MAX_N``: it is the number of reflections and of Jacobi
    columns the graph unrolls or scans over, while the longer side is just a vector length,
    so a tall least-squares problem (m = 10000, n = 3) costs three reflections."""
    for d in (a.shape[-2], a.shape[-1]):
        if not isinstance(d, (int, np.integer)):
            raise NotImplementedError(f"{fn}: the matrix size {sh.fmt_dim(d)} is symbolic; "
                                      "graphc unrolls the factorisation over fixed sizes")
    m, n = int(a.shape[-2]), int(a.shape[-1])
    if min(m, n) > MAX_N:
        raise NotImplementedError(f"{fn}: {m} x {n} matrices are not supported (the smaller "
                                  f"size at most {MAX_N}): graphc unrolls the factorisation "
                                  "over it")
    return m, n


def _filled(value: float, shape: Sequence[Any], dtype: dt.DType) -> Tensor:
    """A constant tensor (an empty result: ``qr``'s Q for ``mode='r'``, ``lstsq``'s unused
    fields), built in the trace when there is one."""
    if _traced():
        return _wrap(builder().const(value, tuple(shape), dtype))
    return Tensor._from_array(np.full(tuple(shape), value, dtype.np))


def _eye(a: Tensor, m: int, k: int) -> Tensor:
    """The first ``k`` columns of the ``m x m`` identity in ``a``'s dtype, expanded to ``a``'s
    batch dims."""
    eye = (_iota(m).unsqueeze(-1) == _iota(k)).to(a.dtype)
    return eye.expand(*a.shape[:-2], m, k)


def _diag(x: Tensor, n: int) -> Tensor:
    """The diagonal (…, n) of the leading ``n x n`` block of ``x``."""
    rows = _iota(n)
    return T_.sum(T_.where(rows.unsqueeze(-1) == rows, x[..., :n, :n], 0.0), -1)


def _householder(a: Tensor, m: int, n: int) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """LAPACK's unblocked ``geqr2`` on ``a`` (…, m, n): ``R`` (…, m, n), upper triangular, and
    the reflectors ``(v, tau)`` with ``H_j = I - tau v v^T``. Each is ``dlarfg``'s: ``v[j] = 1``,
    ``beta = -sign(alpha) * ||x||`` (``+`` for ``alpha = 0``), ``tau = (beta - alpha) / beta``,
    ``tau = 0`` when nothing is below the diagonal (so R's diagonal signs, Q and R are
    LAPACK's, which PyTorch returns). ``v`` is kept at full length with zeros above ``j``, so
    each step is one batched rank-1 update of the whole matrix, and autodiff through it is the
    exact derivative of the factorisation."""
    rows = _iota(m)
    refl: list[tuple[Tensor, Tensor]] = []
    r = a
    for j in range(min(m - 1, n)):  # a last row has nothing below it: tau = 0, no reflector
        alpha = r[..., j, j]
        xb = T_.where(rows > j, r[..., :, j], 0.0)
        sq = T_.sum(xb * xb, -1)
        flat = sq == 0  # H = I; the guards keep the unused branch (and its gradient) finite
        nrm = T_.where(flat, 1.0, alpha * alpha + sq).sqrt()
        beta = T_.where(alpha >= 0, -nrm, nrm)
        tau = T_.where(flat, 0.0, (beta - alpha) / beta)
        v = xb / T_.where(flat, 1.0, alpha - beta).unsqueeze(-1) + (rows == j).to(a.dtype)
        w = T_.sum(v.unsqueeze(-1) * r, -2) * tau.unsqueeze(-1)  # tau v^T R
        r = r - v.unsqueeze(-1) * w.unsqueeze(-2)
        refl.append((v, tau))
    return r.triu(), refl


def _apply_q(refl: Sequence[tuple[Tensor, Tensor]], e: Tensor) -> Tensor:
    """``H_0 H_1 … H_{k-1} e``, applied right to left as LAPACK's ``org2r`` forms Q."""
    q = e
    for v, tau in reversed(refl):
        w = T_.sum(v.unsqueeze(-1) * q, -2) * tau.unsqueeze(-1)
        q = q - v.unsqueeze(-1) * w.unsqueeze(-2)
    return q


def qr(A: Tensor, mode: str = "reduced") -> QRResult:  # noqa: N803
    """``torch.linalg.qr``: ``A = Q R`` by Householder reflections (LAPACK's ``geqrf`` then
    ``orgqr``, unrolled over the fixed sizes, so Q and R are LAPACK's, R's diagonal signs
    included). ``mode``: ``'reduced'`` (Q m x k, R k x n, k = min(m, n)), ``'complete'``
    (Q m x m, R m x n) or ``'r'`` (R only; Q is an empty tensor, as PyTorch). The gradient is
    autodiff through the reflections; unlike PyTorch it is also given for ``'complete'`` with
    m > n (the derivative of this particular completion of Q)."""
    a = _as(A, "linalg_qr")
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           "'reduced' (default), 'r', or 'complete'")
    fn = "linalg.qr"
    _check_matrix(a, fn)
    _check_lapack_float(a, fn, "geqrf_cpu")
    m, n = _static_mn(a, fn)
    r, refl = _householder(a, m, n)
    rows = m if mode == "complete" else min(m, n)
    r = r[..., :rows, :]
    if mode == "r":
        return QRResult(_filled(0.0, (0,), a.dtype), r)
    return QRResult(_apply_q(refl, _eye(a, m, rows)), r)


def torch_qr(input: Tensor, some: bool = True) -> TorchQR:  # noqa: A002
    """``torch.qr`` / ``Tensor.qr``: ``linalg.qr`` with ``some`` (reduced) or not (complete)
    and PyTorch's older result type name."""
    q, r = qr(_as(input, "qr", "input"), "reduced" if some else "complete")
    return TorchQR(q, r)


def householder_product(A: Tensor, tau: Tensor) -> Tensor:  # noqa: N803
    """``torch.linalg.householder_product``: the first n columns of ``H_0 … H_{k-1}``, the
    reflectors stored as LAPACK's ``geqrf`` leaves them (``v_j`` below the diagonal of column
    j of ``A``, ``v_j[j] = 1``), k = ``tau.shape[-1]``; autodiff gives the gradient."""
    a = _as(A, "linalg_householder_product", "input")
    t = _as(tau, "linalg_householder_product", "tau", 2)
    fn = "torch.linalg.householder_product"
    if a.ndim < 2:
        raise RuntimeError(f"{fn}: input must have at least 2 dimensions.")
    m, n = _static_mn(a, "linalg.householder_product")
    k = t.shape[-1] if t.ndim else 0
    if m < n:
        raise RuntimeError(f"{fn}: input.shape[-2] must be greater than or equal to "
                           "input.shape[-1]")
    if not isinstance(k, (int, np.integer)) or k > n:
        raise RuntimeError(f"{fn}: input.shape[-1] must be greater than or equal to "
                           "tau.shape[-1]")
    if t.ndim != a.ndim - 1:
        raise RuntimeError(f"{fn}: Expected tau to have one dimension less than input, but "
                           f"got tau.ndim equal to {t.ndim} and input.ndim is equal to "
                           f"{a.ndim}")
    _check_float(a, fn)
    if t.dtype is not a.dtype:
        raise RuntimeError(f"{fn}: tau dtype {_torch_name(t.dtype)} does not match input "
                           f"dtype {_torch_name(a.dtype)}")
    rows = _iota(m)
    refl = [(T_.where(rows > j, a[..., :, j], 0.0) + (rows == j).to(a.dtype), t[..., j])
            for j in range(int(k))]
    return _apply_q(refl, _eye(a, m, n))


# -- eigh and SVD: parallel-ordered cyclic Jacobi ----------------------------------------------
EighResult = namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])
SVDResult = namedtuple("linalg_svd", ["U", "S", "Vh"])
TorchSVD = namedtuple("svd", ["U", "S", "V"])


def jacobi_sweeps(n: int) -> int:
    """The fixed number of Jacobi sweeps for matrices of size ``n`` (either dtype).

    A compiled step cannot test for convergence, so the count is chosen up front. Cyclic
    Jacobi converges quadratically once the off-diagonal part is below the eigenvalue gaps,
    and the sweeps that takes grow like ``log n``. Measured with this round-robin ordering
    (the sweep after which every off-diagonal is at rounding level, 20 batches of Gaussian,
    clustered (gaps 1e-6), rank-1-plus-identity and graded (1 .. 1e-12) symmetric matrices, and
    for the SVD Gaussian, rank-deficient and cond-1e6 rectangular ones): float64 needs 4 at
    n = 3, 5 at 5, 7 at 8, 9-12 at 16, 12-16 at 32, 15-20 at 64; float32 a few less. The count
    ``3 ceil(log2 n) + 2`` (5 at n = 2, 11 at 8, 20 at 64) covers every case measured, so a
    sweep past convergence, which costs time but not accuracy (the rotations are then the
    identity to rounding), is the price of a graph that needs no data-dependent loop."""
    if n < 2:
        return 0
    return 3 * math.ceil(math.log2(n)) + 2


def _pairings(n: int) -> list[np.ndarray]:
    """The rounds of a round-robin tournament over ``n`` indices (the circle method; with n
    odd, one index sits out each round): each round is the partner of every index (itself
    when it sits out), disjoint pairs, so one round's rotations commute and are applied
    together as batched ops; every pair meets once per sweep."""
    m = n + n % 2
    players = list(range(m))
    out = []
    for _ in range(m - 1):
        partner = np.arange(n)
        for i in range(m // 2):
            p, q = players[i], players[m - 1 - i]
            if p < n and q < n:
                partner[p], partner[q] = q, p
        out.append(partner)
        players = [players[0], players[-1], *players[1:-1]]
    return out


def _rotation(d: Tensor, dq: Tensor, apq: Tensor, lead: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The Jacobi rotations of one round, one entry per index r with partner q: ``d`` its
    diagonal entry, ``dq`` its partner's, ``apq`` their (shared) off-diagonal entry, ``lead``
    +1 for the pair's first index, -1 for the second. Rutishauser's formulas:
    ``theta = (d_q - d_p) / (2 a_pq)`` from the first index's side, ``t = sign(theta) /
    (|theta| + sqrt(theta^2 + 1))`` (the smaller angle), ``c = 1 / sqrt(t^2 + 1)``; per index
    ``t_r = lead * t`` and ``s_r = t_r c``, so the rotation is ``J = diag(c) + diag(s) P`` (P
    the pairing permutation), exactly orthogonal because both indices see the same theta
    (``(d_q - d_p) * lead`` is the same number from both sides; a sign taken from theta alone
    would differ for theta = 0). ``a_pq = 0`` rotates nothing (the division is guarded so the
    unused branch stays finite); an overflowing theta gives t = 0, as it should. Returns
    (c, s, t)."""
    flat = apq == 0
    theta = (dq - d) * lead * 0.5 / T_.where(flat, 1.0, apq)
    t = 1.0 / (theta.abs() + (theta * theta + 1.0).sqrt())
    t = T_.where(flat, 0.0, t * T_.where(theta >= 0, lead, -lead))
    c = (t * t + 1.0).rsqrt()
    return c, t * c, t


def _round_table(n: int, dtype: dt.DType) -> tuple[Tensor, Tensor, Tensor]:
    """The rounds of all ``jacobi_sweeps(n)`` sweeps, one row per round, as the sequences a
    :func:`graphc.loops.scan` steps over: the partner of each index (int64), the pair's first
    index (where the shared off-diagonal entry is read) and the ±1 side of each index."""
    partner = np.tile(np.stack(_pairings(n)), (jacobi_sweeps(n), 1))
    first = np.minimum(partner, np.arange(n))
    side = np.where(np.arange(n) <= partner, 1.0, -1.0)
    return (T_.as_tensor(partner.astype(np.int64)), T_.as_tensor(first.astype(np.int64)),
            T_.as_tensor(side).to(dtype))


def _jacobi_eigh(m: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Eigenvalues (ascending) and eigenvectors of the symmetric ``m`` (…, n, n) by cyclic
    Jacobi in round-robin order: each round rotates n/2 disjoint pairs at once, as a row and a
    column update of the off-diagonal part (gathers by the partner permutation), then zeroes
    the pairs' entries; the diagonal is kept as a vector updated by ``d_r - t_r a_pq``
    (Rutishauser), which is also why the pair blocks need no other care: the rotation
    involves a diagonal entry only inside a pair block. The rounds are one
    :func:`graphc.loops.scan` (a Python loop eagerly, one loop node compiled, so the compile
    time does not grow with the sweeps); no data-dependent control, so eager mode and a
    compiled step compute the same thing."""
    from .loops import scan

    rows = _iota(n)
    eye = rows.unsqueeze(-1) == rows
    off = T_.where(eye, 0.0, m)
    d = T_.sum(T_.where(eye, m, 0.0), -1)
    v = _eye(m, n, n)
    if n < 2:
        return d, v

    def step(carry: tuple[Tensor, ...], x: tuple[Tensor, ...]) -> tuple[tuple, tuple]:
        off, d, v = carry
        p, first, side = x
        pcols = p.expand(*off.shape)
        apq = T_.gather(off, -1, p.unsqueeze(-1).expand(*d.shape, 1)).squeeze(-1)
        apq = T_.gather(apq, -1, first.expand(*d.shape))
        c, s, t = _rotation(d, T_.gather(d, -1, p.expand(*d.shape)), apq, side)
        d = d - t * apq
        off = c.unsqueeze(-1) * off \
            - s.unsqueeze(-1) * T_.gather(off, -2, p.unsqueeze(-1).expand(*off.shape))
        cs, ss = c.unsqueeze(-2), s.unsqueeze(-2)
        block = eye | (p.unsqueeze(-1) == rows)
        off = T_.where(block, 0.0, off * cs - T_.gather(off, -1, pcols) * ss)
        return (off, d, v * cs - T_.gather(v, -1, pcols) * ss), ()

    (_, d, v), _ = scan(step, (off, d, v), _round_table(n, m.dtype))
    order = d.argsort(-1)
    return T_.gather(d, -1, order), T_.gather(v, -1, order.unsqueeze(-2).expand(*m.shape))


def _jacobi_svd(a: Tensor, m: int, n: int, full: bool) -> tuple[Tensor, Tensor, Tensor]:
    """One-sided (Hestenes) Jacobi on ``a`` (…, m, n), m >= n: rotate pairs of columns until
    they are orthogonal (Jacobi on ``a^T a`` without forming it, so small singular values keep
    their relative accuracy, which ``eigh(a^T a)`` would square away), accumulating the
    rotations in V. Round-robin pairs and one ``scan`` as ``_jacobi_eigh``; the column norms
    and inner products are recomputed from the columns every round. Then S = the column
    norms, descending, and U = the normalised columns, made exactly orthonormal (and completed
    to m x m for ``full``) by a Householder QR: a zero singular value leaves a zero column,
    which the QR replaces by an orthonormal one. Returns U (…, m, n or m), S (…, n), V (…, n,
    n)."""
    from .loops import scan

    v = _eye(a, n, n)
    alone = n % 2 == 1  # the index sitting out a round is paired with itself: no rotation
    rows = _iota(n)

    def step(carry: tuple[Tensor, ...], x: tuple[Tensor, ...]) -> tuple[tuple, tuple]:
        u, v = carry
        p, _, side = x
        uq = T_.gather(u, -1, p.expand(*u.shape))
        d = T_.sum(u * u, -2)
        g = T_.sum(u * uq, -2)  # the same products, in the same order, from both sides
        if alone:
            g = T_.where(p == rows, 0.0, g)
        c, s, _ = _rotation(d, T_.gather(d, -1, p.expand(*d.shape)), g, side)
        cs, ss = c.unsqueeze(-2), s.unsqueeze(-2)
        return (u * cs - uq * ss, v * cs - T_.gather(v, -1, p.expand(*v.shape)) * ss), ()

    u = a
    if n >= 2:
        (u, v), _ = scan(step, (a, v), _round_table(n, a.dtype))
    s = T_.sum(u * u, -2).sqrt()
    order = s.argsort(-1, descending=True)
    s = T_.gather(s, -1, order)
    u = T_.gather(u, -1, order.unsqueeze(-2).expand(*u.shape))
    v = T_.gather(v, -1, order.unsqueeze(-2).expand(*v.shape))
    u = u / T_.where(s == 0, 1.0, s).unsqueeze(-2)
    r, refl = _householder(u, m, n)
    sign = T_.where(_diag(r, n) < 0, -1.0, 1.0)  # Q's first n columns are ±u's
    q = _apply_q(refl, _eye(a, m, m if full else n))
    if q.shape[-1] > n:  # the completion's columns keep their sign
        return T_.cat([q[..., :n] * sign.unsqueeze(-2), q[..., n:]], -1), s, v
    return q * sign.unsqueeze(-2), s, v


def _inv_or_zero(x: Tensor) -> Tensor:
    """``1 / x``, 0 where x is 0 (guarded both ways, so the gradient stays finite too)."""
    zero = x == 0
    return T_.where(zero, 0.0, 1.0 / T_.where(zero, 1.0, x))


def _check_lapack_float(a: Tensor, fn: str, kernel: str) -> None:
    """float32/float64 only: PyTorch's CPU kernels (LAPACK) reject low precision (with
    ``kernel``'s name), and the fixed sweep count assumes at least float32's precision."""
    _check_float(a, fn)
    if a.dtype not in (dt.float32, dt.float64):
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_torch_name(a.dtype)}'")


def _eigh(a: Tensor, uplo: str, fn: str, vectors: bool) -> tuple[Tensor, Tensor]:
    """Eigenvalues and eigenvectors of the symmetric matrix given by ``a``'s ``uplo`` triangle.

    The Jacobi iteration runs on a detached copy and its result is re-attached by first-order
    perturbation theory: ``w = w0 + diag(V0^T dA V0)``, ``V = V0 + V0 (F o V0^T dA V0)`` with
    ``dA = A - detach(A)`` (zero in value, the identity in the gradient) and ``F_ij = 1 / (w_j -
    w_i)``. So the values are Jacobi's exactly and the gradient is PyTorch's analytic one
    (``V (diag(gw) + F o skew(V^T gV)) V^T``, symmetric: ``dA`` is taken from ``(A + A^T) / 2``
    as for ``cholesky``), not autodiff through hundreds of rotations, whose last sweeps act on
    rounding noise. Degenerate eigenvalues give F = 0 where PyTorch gives inf/nan eigenvector
    gradients."""
    if uplo not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {uplo}")
    _check_square(a, fn)
    if a.dtype not in (dt.float32, dt.float64):
        raise NotImplementedError(f"\"linalg_eigh_cpu\" not implemented for "
                                  f"'{_torch_name(a.dtype)}'")
    n = _static_n(a, fn)
    rows = _iota(n)
    tri = rows.unsqueeze(-1) >= rows if uplo == "L" else rows.unsqueeze(-1) <= rows
    full = T_.where(tri, a, a.mT)
    if not a.requires_grad:
        return _jacobi_eigh(full, n)
    sym = (a + a.mT) * 0.5
    x = sym + (full - sym).detach()
    x0 = x.detach()
    w0, v0 = _jacobi_eigh(x0, n)
    dxv = T_.matmul(x - x0, v0)
    w = w0 + T_.sum(v0 * dxv, -2)
    if not vectors:
        return w, v0
    f = _inv_or_zero(w0.unsqueeze(-2) - w0.unsqueeze(-1))
    return w, v0 + T_.matmul(v0, f * T_.matmul(v0.mT, dxv))


def eigh(A: Tensor, UPLO: str = "L") -> EighResult:  # noqa: N803
    """``torch.linalg.eigh``: eigenvalues (ascending) and orthonormal eigenvectors (columns) of
    a real symmetric matrix, read from its ``UPLO`` triangle only, as LAPACK. Cyclic Jacobi in
    round-robin order with a fixed number of sweeps (:func:`jacobi_sweeps`), so it compiles;
    the gradient is PyTorch's analytic one (see ``_eigh``). The eigenvectors' signs are
    arbitrary, as PyTorch's (they need not match PyTorch's)."""
    w, v = _eigh(_as(A, "linalg_eigh", "input"), UPLO, "linalg.eigh", True)
    return EighResult(w, v)


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803
    """``torch.linalg.eigvalsh``: ``eigh``'s eigenvalues (the gradient ``V diag(gw) V^T``)."""
    return _eigh(_as(A, "linalg_eigvalsh", "input"), UPLO, "linalg.eigh", False)[0]


def _svd(a: Tensor, fn: str, uv: bool, full: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(U, S, Vh)`` of ``a`` (U and Vh only when ``uv``). One-sided Jacobi on the tall
    orientation (``a^T`` for a wide ``a``, then U and V swap) on a detached copy, re-attached by
    first-order perturbation (Townsend's formulas, the derivative PyTorch's ``svd_backward``
    implements): with ``P = U^T dA V`` and ``F_ij = 1 / (s_j^2 - s_i^2)``, ``S = S0 + diag(P)``,
    ``U = U0 + U0 (F o (P S + S P^T)) + (I - U0 U0^T) dA V0 S^-1`` and ``V = V0 + V0 (F o (S P +
    P^T S))``, all zero in value. With ``full`` the completion columns of U (or rows of Vh)
    are detached: PyTorch ignores their gradient too. Repeated or zero singular values give
    F or 1/S = 0 where PyTorch gives inf/nan."""
    _check_matrix(a, fn)
    _check_lapack_float(a, fn, "linalg_svd_cpu")
    m, n = _static_mn(a, fn)
    wide = m < n
    x = a.mT if wide else a
    mm, k = max(m, n), min(m, n)
    grad = x.requires_grad
    x0 = x.detach() if grad else x
    if k == 0:
        u, s, v = _eye(x0, mm, mm if full else 0), T_.sum(x0, -2), _eye(x0, 0, 0)
        return (v, s, u.mT) if wide else (u, s, v.mT)
    u0, s0, v0 = _jacobi_svd(x0, mm, k, full and uv)
    u, s, v = u0, s0, v0
    if grad:
        dxv = T_.matmul(x - x0, v0)
        uk0 = u0[..., :k] if u0.shape[-1] > k else u0
        s = s0 + T_.sum(uk0 * dxv, -2)
        if uv:
            p = T_.matmul(uk0.mT, dxv)
            sq = s0 * s0
            f = _inv_or_zero(sq.unsqueeze(-2) - sq.unsqueeze(-1))
            ps, sp = p * s0.unsqueeze(-2), s0.unsqueeze(-1) * p
            uk = uk0 + T_.matmul(uk0, f * (ps + ps.mT)) \
                + (dxv - T_.matmul(uk0, p)) * _inv_or_zero(s0).unsqueeze(-2)
            v = v0 + T_.matmul(v0, f * (sp + sp.mT))
            u = T_.cat([uk, u0[..., k:]], -1) if u0.shape[-1] > k else uk
    return (v, s, u.mT) if wide else (u, s, v.mT)


def svd(A: Tensor, full_matrices: bool = True, *, driver: Any = None) -> SVDResult:  # noqa: N803
    """``torch.linalg.svd``: ``A = U diag(S) Vh``, S descending; ``full_matrices`` gives U
    m x m and Vh n x n, otherwise k = min(m, n) columns/rows. One-sided Jacobi (see
    ``_jacobi_svd``), accurate for ill-conditioned matrices, with a fixed sweep count so it
    compiles; PyTorch's gradient (see ``_svd``). Singular vectors are unique only up to sign
    (and within repeated singular values), as PyTorch's. ``driver`` is for CUDA only, as in
    PyTorch."""
    a = _as(A, "linalg_svd")
    full_matrices = _bool_arg(full_matrices, "linalg_svd", "full_matrices")
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on "
                           "CUDA inputs with cuSOLVER backend.")
    return SVDResult(*_svd(a, "linalg.svd", True, full_matrices))


def svdvals(A: Tensor, *, driver: Any = None) -> Tensor:  # noqa: N803
    """``torch.linalg.svdvals``: the singular values, descending (gradient ``U diag(gS)
    Vh``)."""
    a = _as(A, "linalg_svdvals")
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on "
                           "CUDA inputs with cuSOLVER backend.")
    return _svd(a, "linalg.svd", False, False)[1]


def torch_svd(input: Tensor, some: bool = True, compute_uv: bool = True) -> TorchSVD:  # noqa: A002
    """``torch.svd`` / ``Tensor.svd``: ``(U, S, V)`` with V, not Vh; ``some`` is the reduced
    SVD. Without ``compute_uv`` U and V are zero-filled m x m and n x n, as PyTorch's."""
    a = _as(input, "svd", "input")
    if not compute_uv:
        s = svdvals(a)
        m, n = _static_mn(a, "linalg.svd")
        return TorchSVD(_eye(a, m, m) * 0.0, s, _eye(a, n, n) * 0.0)
    u, s, vh = svd(a, full_matrices=not some)
    return TorchSVD(u, s, vh.mT)


# -- built on the SVD: pinv, matrix_rank, lstsq, cond ---------------------------------------
LstsqResult = namedtuple("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"])


def _threshold(a: Tensor, smax: Tensor, atol: Any, rtol: Any) -> Tensor:
    """``max(atol, rtol * smax)`` with PyTorch's defaults: no tolerance given, ``rtol = eps *
    max(m, n)``; only ``atol`` given, ``rtol = 0`` where atol > 0. Tensor tolerances are
    batch-shaped (PyTorch unsqueezes them against the singular values); ``smax`` is (…, 1)."""
    default = float(np.finfo(a.dtype.np).eps) * builtins.max(int(a.shape[-2]), int(a.shape[-1]))

    def col(x: Any) -> Any:
        return x.to(a.dtype).unsqueeze(-1) if isinstance(x, Tensor) else float(x)

    if atol is None and rtol is None:
        atol, rtol = 0.0, default
    elif rtol is None:
        atol = col(atol)
        rtol = T_.where(atol > 0, 0.0, default) if isinstance(atol, Tensor) else \
            (0.0 if atol > 0 else default)
    else:
        atol, rtol = (0.0 if atol is None else col(atol)), col(rtol)
    tol = smax * rtol
    return T_.where(tol > atol, tol, atol) if isinstance(atol, Tensor) or atol else tol


def _amax_or_empty(s: Tensor) -> Tensor:
    """The largest entry along the last dim, kept as (…, 1); (…, 0) when there is none (an
    empty matrix: nothing to compare with it)."""
    return T_.amax(s, -1, keepdim=True) if s.shape[-1] else s


def pinv(A: Tensor, rcond: Any = None, hermitian: bool = False, *,  # noqa: N803
         atol: Any = None, rtol: Any = None) -> Tensor:
    """``torch.linalg.pinv``: ``V diag(1/S) U^T`` over the singular values above ``max(atol,
    rtol * S_max)`` (PyTorch's defaults, see ``_threshold``; the older positional ``rcond`` is
    ``rtol`` with ``atol = 0``); ``hermitian`` uses ``eigh`` of the lower triangle and
    ``|eigenvalues|``, as PyTorch. The gradient comes through the SVD's (or eigh's)."""
    a = _as(A, "linalg_pinv", "input")
    if a.ndim < 2 or not a.dtype.is_float:
        raise RuntimeError(f"linalg.pinv({_torch_name(a.dtype)}{{{_sizes(a.shape)}}}): "
                           "expected a tensor with 2 or more dimensions of float, double, "
                           "cfloat or cdouble types")
    if rcond is not None:
        atol, rtol = 0.0, rcond
    if hermitian:
        w, v = eigh(a)
        aw = w.abs()
        keep = aw > _threshold(a, _amax_or_empty(aw), atol, rtol)
        winv = T_.where(keep, 1.0 / T_.where(keep, w, 1.0), 0.0)
        return T_.matmul(v * winv.unsqueeze(-2), v.mT)
    u, s, vh = svd(a, full_matrices=False)
    keep = s > _threshold(a, s[..., :1], atol, rtol)  # S descends: S[0] is the largest
    sinv = T_.where(keep, 1.0 / T_.where(keep, s, 1.0), 0.0)
    return T_.matmul(vh.mT * sinv.unsqueeze(-2), u.mT)


def pinverse(input: Tensor, rcond: float = 1e-15) -> Tensor:  # noqa: A002
    """``torch.pinverse`` / ``Tensor.pinverse``: ``linalg.pinv`` with ``rtol = rcond``."""
    return pinv(_as(input, "pinverse", "input"), rcond)


def matrix_rank(A: Tensor, tol: Any = None, hermitian: bool = False, *,  # noqa: N803
                atol: Any = None, rtol: Any = None) -> Tensor:
    """``torch.linalg.matrix_rank``: the number (int64) of singular values (|eigenvalues| for
    ``hermitian``) above ``max(atol, rtol * S_max)``, PyTorch's defaults; the older ``tol``
    is ``atol`` with ``rtol = 0``. No gradient (an integer), so the SVD runs detached."""
    a = _as(A, "linalg_matrix_rank", "input")
    if a.ndim < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at "
                           "least 2 dimensions.")
    if a.dtype not in (dt.float32, dt.float64):
        raise RuntimeError("This function doesn't handle types other than float and double")
    if tol is not None:
        atol, rtol = tol, 0.0
    x = a.detach()
    s = _eigh(x, "L", "linalg.eigh", False)[0].abs() if hermitian else svdvals(x)
    keep = s > _threshold(a, _amax_or_empty(s), atol, rtol)
    return T_.sum(keep.to(dt.int64), -1)


_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A: Tensor, B: Tensor, rcond: Any = None, *,  # noqa: N803
          driver: str | None = None) -> LstsqResult:
    """``torch.linalg.lstsq``: the minimum-norm least-squares solution of ``A X = B`` (``B``
    matrices (…, m, k) or vectors (…, m), batch dims broadcast), from the SVD with singular
    values at or below ``rcond * S_max`` dropped (``rcond`` defaults to ``eps * max(m, n)``;
    none dropped for ``'gels'``, which assumes full rank). The other fields follow PyTorch's
    CPU drivers: ``rank`` for gelsy (the default), gelsd and gelss, ``singular_values`` for
    gelsd and gelss, ``residuals`` (the squared column norms of ``A X - B``) for m > n with
    gels, and with gelsd/gelss when every matrix has full rank; otherwise empty tensors. That
    last rule makes an output's shape depend on the values, which a compiled step cannot do:
    gelsd/gelss with m > n raise ``NotImplementedError`` there. The solution of a full-rank
    problem equals LAPACK's up to rounding (gelsy's rank decision is by QR with pivoting, so
    at the threshold a nearly rank-deficient matrix may be cut differently)."""
    a = _as(A, "linalg_lstsq", "input")
    b = _as(B, "linalg_lstsq", "b", 2)
    fn = "torch.linalg.lstsq"
    if driver is not None and driver not in _DRIVERS:
        raise RuntimeError(f"{fn}: parameter `driver` should be one of "
                           f"({', '.join(_DRIVERS)})")
    drv = driver or "gelsy"
    if a.ndim < 2:
        raise RuntimeError(f"{fn}: input must have at least 2 dimensions.")
    if b.ndim < 1:
        raise RuntimeError(f"{fn}: other must have at least 1 dimension.")
    _check_float(a, fn)
    if b.dtype is not a.dtype:
        raise RuntimeError(f"{fn}: Expected input and other to have the same dtype, but got "
                           f"input's dtype {_torch_name(a.dtype)} and other's dtype "
                           f"{_torch_name(b.dtype)}")
    vector = b.ndim == a.ndim - 1
    bm = b.unsqueeze(-1) if vector else b
    if not sh.same(bm.shape[-2], a.shape[-2]):
        raise RuntimeError(f"{fn}: input.size(-2) should match other.size(-2)")
    m, n = _static_mn(a, "linalg.lstsq")
    if drv in ("gelsd", "gelss") and m > n and _traced():
        raise NotImplementedError(f"{fn}: driver '{drv}' with m > n returns residuals only when "
                                  "every matrix has full rank, an output shape that depends on "
                                  "the values; a compiled step cannot do that (use 'gelsy' or "
                                  "'gels')")
    u, s, vh = svd(a, full_matrices=False)
    if drv == "gels":
        keep = s != 0
    else:
        rc = float(np.finfo(a.dtype.np).eps) * builtins.max(m, n) if rcond is None else rcond
        keep = s > s[..., :1] * rc
    sinv = T_.where(keep, 1.0 / T_.where(keep, s, 1.0), 0.0)
    x = T_.matmul(vh.mT, T_.matmul(u.mT, bm) * sinv.unsqueeze(-1))
    rank = T_.sum(keep.to(dt.int64), -1) if drv != "gels" else _filled(0, (0,), dt.int64)
    sv = s if drv in ("gelsd", "gelss") else _filled(0.0, (0,), a.dtype)
    res = _filled(0.0, (0,), a.dtype)
    if m > n and (drv == "gels" or (drv in ("gelsd", "gelss")
                                    and bool(np.all(rank.numpy() == n)))):
        r = T_.matmul(a, x) - bm
        res = T_.sum(r * r, -2)
    return LstsqResult(x.squeeze(-1) if vector else x, res, rank, sv)  # residuals keep k = 1


_COND_NORMS = ("fro", "nuc")


def cond(A: Tensor, p: Any = None) -> Tensor:  # noqa: N803
    """``torch.linalg.cond``: ``S_max / S_min`` for ``p`` None or 2 (``S_min / S_max`` for
    -2), from the singular values (any shape; inf for a singular matrix); for ``'fro'``,
    ``'nuc'``, inf, -inf, 1, -1 ``norm(A, p) * norm(inv(A), p)`` (square matrices; inf where
    ``inv_ex`` reports a singular one, as PyTorch, which never raises here)."""
    a = _as(A, "linalg_cond", "input")
    if isinstance(p, str):
        ok = p in _COND_NORMS
    else:
        ok = p is None or (isinstance(p, (int, float, np.number)) and not isinstance(p, bool)
                           and float(p) in (2.0, -2.0, 1.0, -1.0, math.inf, -math.inf))
    if not ok:
        raise RuntimeError(f"linalg.cond got an invalid norm type: {_ord_text(p)}")
    if a.ndim < 2:
        raise RuntimeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    if p is None or (not isinstance(p, str) and abs(float(p)) == 2.0):
        s = svdvals(a)
        if p is not None and float(p) < 0:
            return s[..., -1] / s[..., 0]
        return s[..., 0] / s[..., -1]
    fn = f"linalg.cond(ord={_ord_text(p)})"
    _check_square(a, fn)
    x, info = inv_ex(a)
    r = matrix_norm(a, p) * matrix_norm(x, p)
    return T_.where(info > 0, math.inf, r)


# -- not implemented: complex spectra and LU outputs ------------------------------------------
def _no_solver(name: str, why: str) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"linalg.{name} is not supported: {why}")

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``torch.linalg.{name}``: not supported, raises ``NotImplementedError``: {why}."
    return f


_COMPLEX = ("the eigenvalues of a general real matrix are complex and graphc has no complex "
            "dtype (for a symmetric matrix use linalg.eigh / eigvalsh)")
_LU = ("graphc does not return LU factors and pivots (its LU stays inside det, slogdet, inv "
       "and solve; use those)")
UNSUPPORTED = ("eig", "eigvals", "lu", "lu_factor")
eig = _no_solver("eig", _COMPLEX)
eigvals = _no_solver("eigvals", _COMPLEX)
lu = _no_solver("lu", _LU)
lu_factor = _no_solver("lu_factor", _LU)


# -- products ---------------------------------------------------------------------------------
def _matmul_any(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` for (batched) matrices of any dtype: the matmul primitive for floats, a
    broadcast product summed over k for integers (the primitive is float-only)."""
    if a.dtype.is_float:
        return T_.matmul(a, b)
    return T_.sum(a.unsqueeze(-1) * b.unsqueeze(-3), -2).to(a.dtype)


def matrix_power(A: Tensor, n: int) -> Tensor:  # noqa: N803
    """``torch.linalg.matrix_power``: ``A^n`` by repeated squaring in PyTorch's order (so the
    rounding matches); ``n < 0`` is ``inv(A)^-n``; ``n == 0`` the identity (zero gradient)."""
    a = _as(A, "linalg_matrix_power")
    from .composite_ops import _int_arg

    n = _int_arg(n, "linalg_matrix_power", "n", 2)
    _check_square(a, "linalg.matrix_power")
    if n == 0:
        size = a.shape[-1]
        if not isinstance(size, (int, np.integer)):
            raise NotImplementedError("linalg.matrix_power: n=0 of a matrix of symbolic size "
                                      f"{sh.fmt_dim(size)}")
        eye = _eye_like(a, int(size))
        return T_.where(T_.where(a == a, True, True), eye, a)
    if n < 0:
        a = inv(a)
        n = -n
    if n == 1:
        return a * 1
    z = result = None
    while n > 0:
        bit, n = n % 2, n // 2
        z = a if z is None else _matmul_any(z, z)
        if bit:
            result = z if result is None else _matmul_any(result, z)
    return result


def vecdot(x: Tensor, y: Tensor, *, dim: int = -1) -> Tensor:
    """``torch.linalg.vecdot``: ``(x * y).sum(dim)`` (real tensors: no conjugate), broadcast;
    floats of one dtype, as PyTorch."""
    x = _as(x, "linalg_vecdot", "x")
    y = _as(y, "linalg_vecdot", "y", 2)
    _check_float(x, "linalg.vecdot")
    if x.dtype is not y.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found "
                           f"x of type {_torch_name(x.dtype)} and y of type "
                           f"{_torch_name(y.dtype)} instead")
    return T_.sum(x * y, dim)


def matmul(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.linalg.matmul``: an alias of ``torch.matmul``."""
    return T_.matmul(_as(input, "linalg_matmul", "input"), _as(other, "linalg_matmul",
                                                                 "other", 2))


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: N803
    """``torch.linalg.diagonal``: ``torch.diagonal`` with defaults over the last two dims
    (batches of matrices) and keyword-only arguments."""
    return _as(A, "linalg_diagonal").diagonal(offset, dim1, dim2)


_DTYPE_TEXT = {"float32": "float", "float64": "double", "int64": "long int", "int32": "int",
               "bool": "bool", "bfloat16": "c10::BFloat16"}


def _sizes(shape: Sequence[Any]) -> str:
    """A shape as PyTorch prints ``sizes()``: ``[3, 4]``."""
    return "[" + ", ".join(sh.fmt_dim(d) for d in shape) + "]"


def _chain_order(dims: list[int]) -> list[list[int]]:
    """The optimal split points of a matrix chain (PyTorch's ``matrix_chain_order``, the
    textbook dynamic programme over ``dims``: matrix i is ``dims[i] x dims[i+1]``)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = 2 ** 63
            for k in range(i, j):
                q = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if q < cost[i][j]:
                    cost[i][j], split[i][j] = q, k
    return split


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.linalg.multi_dot``: the product of a chain of matrices in the cheapest order
    (PyTorch's choice, so the rounding matches); the first and last may be vectors. With a
    symbolic (batch) size in the chain the order is left to right."""
    from .composite_ops import _mm, _tensors

    ts = _tensors(tensors, "linalg_multi_dot")
    n = len(ts)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    orig = list(ts)
    out_shape: list[Any] = []
    if ts[0].ndim == 1:
        ts[0] = ts[0].unsqueeze(0)
    elif ts[0].ndim == 2:
        out_shape.append(ts[0].shape[0])
    else:
        raise RuntimeError(f"multi_dot(): the first tensor must be 1D or 2D but got "
                           f"{ts[0].ndim}D")
    if ts[-1].ndim == 1:
        ts[-1] = ts[-1].unsqueeze(-1)
    elif ts[-1].ndim == 2:
        out_shape.append(ts[-1].shape[1])
    else:
        raise RuntimeError(f"multi_dot(): the last tensor must be 1D or 2D but got "
                           f"{ts[-1].ndim}D")
    for i in range(1, n - 1):
        if ts[i].ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {ts[i].ndim}D")
    for i in range(1, n):
        if ts[i].dtype is not ts[0].dtype:
            raise RuntimeError(
                "multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                f"{_DTYPE_TEXT.get(ts[0].dtype.name, ts[0].dtype.name)} and tensor {i} "
                f"{_DTYPE_TEXT.get(ts[i].dtype.name, ts[i].dtype.name)}")
        if not sh.same(ts[i - 1].shape[-1], ts[i].shape[0]):
            raise RuntimeError(f"multi_dot(): tensors {i - 1} and {i} with shapes "
                               f"{_sizes(orig[i - 1].shape)} and {_sizes(orig[i].shape)} "
                               "cannot be multiplied")
    dims = [t.shape[0] for t in ts] + [ts[-1].shape[1]]
    if not builtins.all(isinstance(d, (int, np.integer)) for d in dims):
        result = ts[0]
        for t in ts[1:]:
            result = _mm(result, t)
    elif n == 2:
        result = _mm(ts[0], ts[1])
    elif n == 3:
        a, b, c, d = dims
        if (a * c) * (b + d) > (b * d) * (a + c):
            result = _mm(ts[0], _mm(ts[1], ts[2]))
        else:
            result = _mm(_mm(ts[0], ts[1]), ts[2])
    else:
        split = _chain_order([int(d) for d in dims])

        def chain(i: int, j: int) -> Tensor:
            if i == j:
                return ts[i]
            return _mm(chain(i, split[i][j]), chain(split[i][j] + 1, j))

        result = chain(0, n - 1)
    return result.reshape(out_shape)


# -- norms ------------------------------------------------------------------------------------
def _ord_text(o: Any) -> str:
    if isinstance(o, str):
        return o
    f = float(o)
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return str(int(f)) if f == int(f) else repr(f)


def _dims_text(dim: Sequence[int]) -> str:
    return str(dim[0]) if len(dim) == 1 else "[" + ", ".join(str(d) for d in dim) + "]"


def matrix_norm(A: Tensor, ord: Any = "fro", dim: Sequence[int] = (-2, -1),  # noqa: N803, A002
                keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``torch.linalg.matrix_norm``: ``'fro'`` (the 2-norm of the entries), 1 / -1 (largest /
    smallest column abs-sum), inf / -inf (largest / smallest row abs-sum), over the two dims
    ``dim``; reductions in PyTorch's order, so values and gradients match. ``'nuc'``, 2 and -2
    are the sum, largest and smallest of the singular values (``svdvals``), as PyTorch."""
    a = _as(A, "linalg_matrix_norm")
    fn = "linalg.matrix_norm"
    if isinstance(ord, str):
        if ord not in ("fro", "nuc"):
            raise RuntimeError(f"{fn}: Order {ord} not supported.")
        abs_ord = None
    else:
        abs_ord = abs(float(ord))
        if abs_ord not in (1.0, 2.0, math.inf):
            raise RuntimeError(f"{fn}: Order {_ord_text(ord)} not supported.")
    dim = [dim] if isinstance(dim, (int, np.integer)) else list(dim)
    _check_matrix(a, fn)
    _check_float(a, fn)
    if len(dim) != 2:
        raise RuntimeError(f"{fn}: dim must be a 2-tuple. Got {_dims_text(dim)}")
    d0, d1 = (sh.norm_axis(d, a.ndim, fn) for d in dim)
    if d0 == d1:
        raise RuntimeError(f"{fn}: dims must be different. Got ({d0}, {d1})")
    if ord == "nuc" or abs_ord == 2.0:  # from the singular values of the (d0, d1) planes
        x = a if dtype is None else a.to(dtype)
        s = svdvals(x.permute(*[i for i in range(a.ndim) if i not in (d0, d1)], d0, d1))
        if ord == "nuc":
            r = T_.sum(s, -1)
        else:
            r = T_.amax(s, -1) if float(ord) > 0 else T_.amin(s, -1)
        if keepdim:
            for d in sorted((d0, d1)):
                r = r.unsqueeze(d)
        return r
    if ord == "fro":
        return vector_norm(a, 2, (d0, d1), keepdim, dtype=dtype)
    if abs_ord == math.inf:
        d0, d1 = d1, d0
    if not keepdim and d0 < d1:
        d1 -= 1
    sums = vector_norm(a, 1, d0, keepdim, dtype=dtype)
    return T_.amax(sums, d1, keepdim) if float(ord) > 0 else T_.amin(sums, d1, keepdim)


def norm(A: Tensor, ord: Any = None, dim: Any = None, keepdim: bool = False, *,  # noqa: N803, A002
         dtype: Any = None) -> Tensor:
    """``torch.linalg.norm``: a vector norm (``vector_norm``) or a matrix norm
    (``matrix_norm``), chosen as PyTorch chooses: a matrix norm when ``ord`` is given and
    ``dim`` has two entries (or is None for a 2-D input), or ``ord`` is a string; without
    ``ord`` the 2-norm of all entries (the Frobenius norm for a matrix)."""
    a = _as(A, "linalg_norm")
    dims = None if dim is None else ([dim] if isinstance(dim, (int, np.integer)) else list(dim))
    if dims is not None:
        if len(dims) not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. "
                               f"Got {_dims_text(dims)}")
    elif ord is not None and a.ndim not in (1, 2):
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be "
                           f"1D or 2D. Got {a.ndim}D.")
    if isinstance(ord, str) or (ord is not None and (
            (dims is not None and len(dims) == 2) or (dims is None and a.ndim == 2))):
        return matrix_norm(a, ord, dims if dims is not None else (0, 1), keepdim, dtype=dtype)
    return vector_norm(a, 2 if ord is None else ord, dims, keepdim, dtype=dtype)


def install(T: type[Tensor]) -> None:
    """Attach ``det``, ``logdet``, ``inverse``, ``slogdet``, ``qr``, ``svd`` and ``pinverse`` to
    the Tensor class (called once by graphc/tensor.py)."""
    T.det = det
    T.logdet = logdet
    T.inverse = inverse
    T.slogdet = torch_slogdet
    T.qr = torch_qr
    T.svd = torch_svd
    T.pinverse = pinverse


__all__ = ["EighResult", "LinAlgError", "LstsqResult", "MAX_N", "QRResult", "SVDResult",
           "UNSUPPORTED", "cholesky", "cholesky_ex", "cond", "det", "diagonal", "eig", "eigh",
           "eigvals", "eigvalsh", "householder_product", "install", "inv", "inv_ex", "inverse",
           "jacobi_sweeps", "logdet", "lstsq", "lu", "lu_factor", "matmul", "matrix_norm",
           "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "pinverse", "qr",
           "slogdet", "solve", "solve_triangular", "svd", "svdvals", "torch_qr", "torch_slogdet",
           "torch_svd", "vecdot"]
