"""``graphc.utils``: data loading (``graphc.utils.data``) and activation checkpointing
(``graphc.utils.checkpoint``), as ``torch.utils``.

``data`` is imported with the package so that ``import graphc`` then ``graphc.utils.data``
works as ``torch.utils.data`` does after ``import torch``.
"""

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
