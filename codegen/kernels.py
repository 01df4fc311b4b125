"""The kernel-family registry: which ops have a kernel of their own on the CPU backend.

Most nodes are computed by the elementwise rules (``codegen.elementwise``), inline in their
consumer's loop or in a plain loop over their own shape. A few op families need a real kernel:
reductions (``codegen.reduce``), matrix products (``codegen.matmul``), convolutions
(``codegen.conv``), max-pool indices (``codegen.pool``) and scatter-add (``codegen.scatter``).
Each family module registers a ``Kernel`` here when it is imported; the planner and the entry
function ask the registry (``kernel_for``) instead of knowing the ops, the way numba's lowering
asks its registry. ``codegen.families`` imports every family, so a module that needs the
registry complete imports that.

This module imports nothing from the code generator, so every family can import it without a
cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphc.ir import Node

# emit(k): fills the kernel function of a ``codegen.emitter.KernelEmitter``
Emit = Callable[[Any], None]


class Kernel:
    """One op family's kernel.

    ``ops``: the ops it serves; ``applies(node)`` may narrow that further (a node it does not
    apply to falls back to the elementwise loop). ``workspace(node, wide)``: bytes of scratch
    the kernel needs besides its output (a GEMM's packing areas, a convolution's grids), 0 for
    none; the planner reserves the largest. ``dense_operands``: the kernel reads each operand
    element many times, so its operands get buffers of their own (or are buffers seen through
    strided views) instead of being recomputed inline. ``unit_stride(node, wide)``: the
    indices of the operands the kernel reads as vectors along their last dim; the planner
    gives such an operand a contiguous buffer of its own when it would otherwise be a view
    whose last stride is not 1 (a permuted, channels-last tensor), because the kernel's
    only other way to read it is element by element.
    """

    def __init__(self, name: str, ops: tuple[str, ...], emit: Emit,
                 workspace: Callable[[Node, bool], Any] | None = None,
                 dense_operands: bool = False,
                 unit_stride: Callable[[Node, bool], tuple[int, ...]] | None = None) -> None:
        self.name = name
        self.ops = ops
        self._emit = emit
        self._workspace = workspace
        self.dense_operands = dense_operands
        self._unit_stride = unit_stride

    def applies(self, n: Node) -> bool:
        return n.op in self.ops

    def workspace(self, n: Node, wide: bool) -> Any:
        return 0 if self._workspace is None else self._workspace(n, wide)

    def unit_stride(self, n: Node, wide: bool) -> tuple[int, ...]:
        return () if self._unit_stride is None else self._unit_stride(n, wide)

    def emit(self, k: Any) -> None:
        self._emit(k)

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, ops={self.ops!r})"


# op name -> the family kernel serving it (filled by ``register``)
KERNELS: dict[str, Kernel] = {}


def register(kernel: Kernel) -> Kernel:
    """Make ``kernel`` the kernel of each of its ops (a family module imported again, as
    ``importlib.reload`` does, replaces its own entry)."""
    for op in kernel.ops:
        KERNELS[op] = kernel
    return kernel


def kernel_for(n: Node) -> Kernel | None:
    """The family kernel that computes node ``n``, or None (an elementwise loop)."""
    kern = KERNELS.get(n.op)
    return kern if kern is not None and kern.applies(n) else None


__all__ = ["Kernel", "KERNELS", "register", "kernel_for"]
