"""``torch.linalg``'s dense functions (norms, products, determinants, inverses, solves) written
with graphc's front-end ops.

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
The eigen/SVD/QR/LU-output functions raise ``NotImplementedError`` naming themselves.
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


# -- not implemented: spectral and orthogonal factorisations -----------------------------------
def _no_solver(name: str) -> Any:
    def f(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"linalg.{name} is not supported: graphc has no iterative "
                                  "eigen/SVD solver yet (nor QR/LU factorisation outputs); "
                                  "det, slogdet, inv, solve, cholesky and solve_triangular are "
                                  "available")

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``torch.linalg.{name}``: not supported, raises ``NotImplementedError``."
    return f


UNSUPPORTED = ("eigh", "eigvalsh", "svd", "svdvals", "qr", "eig", "eigvals", "lstsq", "pinv",
               "matrix_rank", "cond", "lu", "lu_factor", "householder_product")
eigh = _no_solver("eigh")
eigvalsh = _no_solver("eigvalsh")
svd = _no_solver("svd")
svdvals = _no_solver("svdvals")
qr = _no_solver("qr")
eig = _no_solver("eig")
eigvals = _no_solver("eigvals")
lstsq = _no_solver("lstsq")
pinv = _no_solver("pinv")
matrix_rank = _no_solver("matrix_rank")
cond = _no_solver("cond")
lu = _no_solver("lu")
lu_factor = _no_solver("lu_factor")
householder_product = _no_solver("householder_product")


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
    need singular values, which graphc does not compute: ``NotImplementedError``."""
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
    if ord == "nuc" or abs_ord == 2.0:
        raise NotImplementedError(f"{fn}: ord={ord!r} needs singular values (an "
                                  "SVD), which graphc does not compute; use 'fro', 1, -1, "
                                  "inf or -inf")
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
    """Attach ``det``, ``logdet``, ``inverse`` and ``slogdet`` to the Tensor class (called once
    by graphc/tensor.py)."""
    T.det = det
    T.logdet = logdet
    T.inverse = inverse
    T.slogdet = torch_slogdet


__all__ = ["LinAlgError", "MAX_N", "UNSUPPORTED", "cholesky", "cholesky_ex", "cond", "det",
           "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "householder_product", "install",
           "inv", "inv_ex", "inverse", "logdet", "lstsq", "lu", "lu_factor", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr",
           "slogdet", "solve", "solve_triangular", "svd", "svdvals", "torch_slogdet", "vecdot"]
