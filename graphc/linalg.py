"""``graphc.linalg``: the ``torch.linalg`` functions graphc has (vector norms)."""

from __future__ import annotations

from .composite_ops import linalg_cross as cross
from .reduce_ops import vector_norm

__all__ = ["cross", "vector_norm"]
