"""``graphc.linalg``: the ``torch.linalg`` functions graphc has.

Norms (``vector_norm``, ``matrix_norm``, ``norm``), products (``matmul``, ``vecdot``,
``multi_dot``, ``matrix_power``, ``cross``, ``diagonal``) and the LU family (``det``,
``slogdet``, ``inv``, ``inv_ex``, ``solve``), ``cholesky``/``cholesky_ex`` and
``solve_triangular``, the decompositions ``qr`` (Householder), ``eigh``/``eigvalsh``
(Jacobi sweeps) and ``svd``/``svdvals`` (one-sided Jacobi) with what builds on them
(``pinv``, ``lstsq``, ``matrix_rank``, ``cond``, ``householder_product``), all compositions
of graphc's front-end ops (graphc/linalg_ops.py says how, and why the matrix size is capped).
Singular matrices raise :class:`LinAlgError` eagerly, as PyTorch (and matrices that are not
positive-definite, for ``cholesky``); in a compiled step they give inf/nan instead. ``eig``
and ``eigvals`` (complex results: graphc has no complex dtype), ``lu`` and ``lu_factor``
raise ``NotImplementedError`` naming themselves.
"""

from __future__ import annotations

from .composite_ops import linalg_cross as cross
from .linalg_ops import (
    LinAlgError,
    cholesky,
    cholesky_ex,
    cond,
    det,
    diagonal,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    householder_product,
    inv,
    inv_ex,
    lstsq,
    lu,
    lu_factor,
    matmul,
    matrix_norm,
    matrix_power,
    matrix_rank,
    multi_dot,
    norm,
    pinv,
    qr,
    slogdet,
    solve,
    solve_triangular,
    svd,
    svdvals,
    vecdot,
)
from .reduce_ops import vector_norm

__all__ = ["LinAlgError", "cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal", "eig",
           "eigh", "eigvals", "eigvalsh", "householder_product", "inv", "inv_ex", "lstsq", "lu",
           "lu_factor", "matmul", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot",
           "norm", "pinv", "qr", "slogdet", "solve", "solve_triangular", "svd", "svdvals",
           "vecdot", "vector_norm"]
