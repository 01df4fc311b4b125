"""Rounding, remainders, comparisons and predicates, bitwise/logical and other pointwise
ops as op-table entries (``gc.<op>``, ``Tensor.<op>``, PyTorch's names and semantics).
"""

from __future__ import annotations

from .opdef import OpDef

POINTWISE: tuple[OpDef, ...] = ()
