"""The ``sort`` kernel: a stable argsort along one axis, for the CPU backend (registered in
``codegen.kernels``) and the PTX backend (``sort_line``, shared by ``codegen.ptx_kernels``).

Each line along the sorted axis is one insertion sort of the indices, in place in the
output: stable (an element moves before another only when strictly ordered before it), NaN
ordered as the largest value (last ascending, first descending) as PyTorch does. The lines
are independent (one loop iteration on the CPU, one thread on the GPU); a line costs
O(n^2) comparisons at worst, fine for the lengths sorted inside training steps.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from graphc.ir import Node

from .kernels import Kernel, register
from .llvm_util import I64, for_range, i64


def outer_shape(n: Node) -> tuple:
    """The node's shape with the sorted axis collapsed to 1: one entry per line."""
    ax = n.attrs["axis"]
    return tuple(1 if i == ax else d for i, d in enumerate(n.shape))


def _before(b: ir.IRBuilder, x: Node, a: ir.Value, c: ir.Value, descending: bool
            ) -> ir.Value:
    """``a`` strictly ordered before ``c`` (NaN is the largest value)."""
    if x.dtype.is_float:
        a_nan = b.fcmp_unordered("uno", a, a)
        c_nan = b.fcmp_unordered("uno", c, c)
        if descending:  # NaN first; otherwise larger first
            return b.or_(b.and_(a_nan, b.not_(c_nan)), b.fcmp_ordered(">", a, c))
        return b.and_(b.not_(a_nan), b.or_(c_nan, b.fcmp_ordered("<", a, c)))
    if x.dtype.name == "bool":
        return b.icmp_unsigned(">" if descending else "<", a, c)
    return b.icmp_signed(">" if descending else "<", a, c)


def sort_line(k: Any, idx: list[Any]) -> None:
    """Sort the line through multi-index ``idx`` (its sorted entry is ignored) of
    ``k.node``: the output holds the line's indices in sorted order."""
    n = k.node
    x = n.inputs[0]
    ax = n.attrs["axis"]
    desc = bool(n.attrs.get("descending", False))
    b = k.b
    size = k.sym(n.shape[ax])

    def at(pos: ir.Value) -> list[Any]:
        sub = list(idx)
        sub[ax] = pos
        return sub

    with for_range(b, i64(0), size, name="init") as i:
        k.store_out(at(i), i)
    j_slot = k.alloca(I64)
    with for_range(b, i64(1), size, name="ins") as i:
        key = b.load(k.out_ptr(at(i)))
        kv = k.value(x, at(key))
        b.store(b.sub(i, i64(1)), j_slot)
        fn = b.function
        cond = fn.append_basic_block("sort_cond")
        body = fn.append_basic_block("sort_body")
        done = fn.append_basic_block("sort_done")
        b.branch(cond)
        b.position_at_end(cond)
        j = b.load(j_slot)
        live = b.icmp_signed(">=", j, i64(0))
        jj = b.select(live, j, i64(0))  # never read before the line
        other = b.load(k.out_ptr(at(jj)))
        move = b.and_(live, _before(b, x, kv, k.value(x, at(other)), desc))
        b.cbranch(move, body, done)
        b.position_at_end(body)
        b.store(other, k.out_ptr(at(b.add(j, i64(1)))))
        b.store(b.sub(j, i64(1)), j_slot)
        b.branch(cond)
        b.position_at_end(done)
        b.store(key, k.out_ptr(at(b.add(b.load(j_slot), i64(1)))))


def emit(k: Any) -> None:
    k.loops(outer_shape(k.node), lambda idx: sort_line(k, list(idx)))


KERNEL = register(Kernel("sort", ("sort",), emit, dense_operands=True))

__all__ = ["KERNEL", "emit", "outer_shape", "sort_line"]
