"""The ``scatter_add`` kernel (CPU backend): copy the base, then add the source at checked
indices.

A kernel of its own (registered in ``codegen.kernels``) because the writes go to
data-dependent positions: it cannot be an expression computed inline at each output index.
"""

from __future__ import annotations

from typing import Any

from .emitter import KernelEmitter
from .kernels import Kernel, register
from .views import contiguous_strides


def emit(k: KernelEmitter) -> None:
    """``out = base``, then ``out[..., index[i], ...] += src[i]`` with every index checked
    (an index out of range stops the step with ``ERR_INDEX`` before any state is written)."""
    n = k.node
    base, index, src = n.inputs
    ax = n.attrs["axis"]
    b = k.b
    k.loops(n.shape, lambda idx: k.store_out(idx, k.value(base, list(idx))))

    def body(idx: list[Any]) -> None:
        ix = k.value(index, list(idx))
        k.check_index(ix, n.shape[ax], k.linear(idx, contiguous_strides(src.shape)), n)
        tgt = list(idx)
        tgt[ax] = ix
        ptr = k.out_ptr(tgt)
        v = k.value(src, list(idx))
        add = b.fadd(b.load(ptr), v) if n.dtype.is_float else b.add(b.load(ptr), v)
        b.store(add, ptr)

    k.loops(tuple(src.shape), body)


KERNEL = register(Kernel("scatter_add", ("scatter_add",), emit))

__all__ = ["emit", "KERNEL"]
