"""``graphc.linalg``: the ``torch.linalg`` functions graphc has.

Norms (``vector_norm``, ``matrix_norm``, ``norm``), products (``matmul``, ``vecdot``,
``multi_dot``, ``matrix_power``, ``cross``, ``diagonal``) and the LU family (``det``,
``slogdet``, ``inv``, ``inv_ex``, ``solve``), all compositions of graphc's front-end ops
(graphc/linalg_ops.py says how, and why the matrix size is capped). Singular matrices raise
:class:`LinAlgError` eagerly, as PyTorch; in a compiled step they give inf/nan instead.
"""

from __future__ import annotations

from .composite_ops import linalg_cross as cross
from .linalg_ops import (
    LinAlgError,
    det,
    diagonal,
    inv,
    inv_ex,
    matmul,
    matrix_norm,
    matrix_power,
    multi_dot,
    norm,
    slogdet,
    solve,
    vecdot,
)
from .reduce_ops import vector_norm

__all__ = ["LinAlgError", "cross", "det", "diagonal", "inv", "inv_ex", "matmul", "matrix_norm",
           "matrix_power", "multi_dot", "norm", "slogdet", "solve", "vecdot", "vector_norm"]
