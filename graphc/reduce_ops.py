"""Reductions and scans beyond sum/mean/max (std/var variants, prod, any/all, cumsum/cumprod/
cummax/cummin, logcumsumexp, norms, count_nonzero); attached to ``Tensor`` by ``install``."""

from __future__ import annotations

from ._tensor import Tensor


def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py)."""


__all__: list[str] = []

