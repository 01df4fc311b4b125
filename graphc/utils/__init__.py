"""``graphc.utils``: data loading (``graphc.utils.data``), as ``torch.utils``.

``data`` is imported with the package so that ``import graphc`` then ``graphc.utils.data``
works as ``torch.utils.data`` does after ``import torch``.
"""

from . import data

__all__ = ["data"]
