"""Reductions whose trailing reduced dims form one contiguous run of a buffer (CPU backend).

The general inner reduction in ``lower.py`` nests one loop per reduced dim, so a bias
gradient (``sum`` over N, H, W of an ``[N, C, 14, 14]`` buffer) vectorises over 14 elements
at a time. When the operand is a buffer (contiguous) and two or more trailing dims are all
reduced, they are one run of ``prod(dims)`` elements: this kernel reads it with a single
loop (196 or 784 elements for the cnn's layers), which LLVM vectorises with several
accumulators. Everything else goes to the general kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphc import shapes as sh

from .llvm_util import for_range, i64


def kernel(fallback: Callable[[Any], None]) -> Callable[[Any], None]:
    """The KERNELS entry for ``sum``/``max``: the flattened-run kernel when it applies."""

    def emit(k: Any) -> None:
        from .lower import _combine, _init, _loops_into, contiguous_strides

        n = k.node
        x = n.inputs[0]
        axes = set(n.attrs["axes"])
        nd = len(x.shape)
        tail = nd
        while tail > 0 and (tail - 1) in axes:
            tail -= 1
        if (getattr(k, "debug", False) or nd - tail < 2 or not k._is_buffer(x)
                or not x.dtype.is_float):
            fallback(k)
            return
        b = k.b
        run = k.sym(sh.numel(x.shape[tail:]))
        strides = contiguous_strides(x.shape)[:tail]
        kept = [d for d in range(tail) if d not in axes]
        red = [d for d in range(tail) if d in axes]
        src = k.ptr[x.id]

        def outer(idx: list[Any]) -> None:
            acc = k.alloca(_init(n.op, n.dtype).type)
            b.store(_init(n.op, n.dtype), acc)

            def inner(full: list[Any]) -> None:
                row = b.gep(src, [k.linear(full[:tail], strides)], inbounds=True)
                with for_range(b, i64(0), run, name="run") as j:
                    v = b.load(b.gep(row, [j], inbounds=True))
                    b.store(_combine(k, n.op, b.load(acc), v, n.dtype), acc)

            full = list(idx)
            _loops_into(k, tuple(x.shape), red, full, inner)
            k.store_out([i64(0) if d in axes else idx[d] for d in range(nd)], b.load(acc))

        if kept:
            k.loops(tuple(x.shape), outer, order=kept)
        else:
            outer([None] * nd)

    emit.__doc__ = fallback.__doc__
    return emit


__all__ = ["kernel"]
