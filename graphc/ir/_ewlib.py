"""Helpers shared by the op-table sections (``elementwise.py``, ``activations.py``, ...).

Kept apart so each section imports downward from here instead of from the module that
aggregates the sections.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .opdef import OpDef


def _c(b: Any, v: float, like: Any) -> Any:
    """A constant node shaped and typed like ``like`` (for VJP rules)."""
    return b.const(v, like.shape, like.dtype)


def _wants(x: Any) -> bool:
    """Whether a VJP rule should build operand ``x``'s gradient at all. Autodiff keeps only
    contributions to live nodes, and a node that does not require grad is never live
    (``passes.autodiff.vjp``: every node it differentiates with respect to requires grad,
    and any other live node is on a path from one); eagerly, where each node is computed as
    it is built, skipping the dead side saves its ops over the whole operand (``w * x`` with
    a constant ``x``: one product of x's size)."""
    return getattr(x, "rg", True)


def _no_grad(b: Any, n: Any, g: Any) -> list[None]:
    return [None] * len(n.inputs)


def _float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f"


def _sigmoid_ref(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _unary(name: str, **kw: Any) -> OpDef:
    """A one-operand elementwise primitive."""
    return OpDef(name, "elementwise", 1, **kw)


def _binary(name: str, **kw: Any) -> OpDef:
    """A two-operand elementwise primitive (operands of one shape and dtype)."""
    return OpDef(name, "elementwise", 2, **kw)


def composite(name: str, decompose: Any, arity: int = 1, **kw: Any) -> OpDef:
    """An op written in terms of other ops (see ``OpDef.decompose``)."""
    return OpDef(name, "composite", arity, decompose=decompose, **kw)
