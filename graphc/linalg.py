"""``graphc.linalg``: the ``torch.linalg`` functions graphc has (vector norms)."""

from __future__ import annotations

from .reduce_ops import vector_norm

__all__ = ["vector_norm"]
