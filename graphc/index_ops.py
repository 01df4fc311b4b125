"""Indexing beyond slices: tensor, list and bool indices, ``index_put_`` / item assignment,
``index_select``, scatter/gather variants, sort/topk; attached to ``Tensor`` by ``install``."""

from __future__ import annotations

from ._tensor import Tensor


def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py)."""


__all__: list[str] = []

