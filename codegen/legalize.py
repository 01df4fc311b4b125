"""bfloat16 legalisation: which ops the code generators compute on bf16 values directly, and
the rewrite that gives every other op float32 operands.

bf16 follows PyTorch's CPU kernels (and the reference interpreter): an op reads its bf16
operands as float32, computes in float32 and rounds its result to bf16 once. The elementwise
rules, reductions and scans get that for free from the kernel emitter, which widens bf16
loads to float32 registers and rounds every bf16 result (``codegen.emitter``). Kernels that
address their buffers themselves (convolutions, pooling indices, sorting, scatter-add, and
matrix products where no bf16 GEMM serves the host) are given float32 operands instead:
``op(x: bf16) -> bf16`` becomes ``cast(op(cast(x, f32)), bf16)``, the same values — the
widening is exact and the result is rounded once — at the cost of a float32 copy of the
operands, which the casts usually fuse into the kernel that produces them.
"""

from __future__ import annotations

from collections.abc import Callable

from graphc.ir import Builder, Graph, Node
from graphc.ir import dtypes as dt

from .families import KERNELS

BF16_NATIVE_KERNELS = frozenset({"cumsum", "cumprod", "cummax"})


def _touches_bf16(n: Node) -> bool:
    return n.dtype is dt.bfloat16 or any(x.dtype is dt.bfloat16 for x in n.inputs)


def needs_float32(n: Node, native: Callable[[Node], bool] | None = None) -> bool:
    """Whether ``n`` (an op with a kernel of its own, touching bf16) must be computed in
    float32: ``native(n)`` may claim ops a backend serves in bf16 (the bf16 GEMM)."""
    if n.op not in KERNELS or not _touches_bf16(n) or n.op == "scan":
        return False  # a scan's body is legalised instead (``legalize_bf16``)
    if n.op in ("sum", "max"):
        # an inner reduction accumulates in a float32 register; an outer one accumulates
        # rows into its output buffer, which must then be float32
        return len(n.inputs[0].shape) - 1 not in n.attrs["axes"]
    if n.op in BF16_NATIVE_KERNELS:
        return False
    return native is None or not native(n)


def legalize_bf16(g: Graph, native: Callable[[Node], bool] | None = None) -> Graph:
    """``g`` with every ``needs_float32`` node computed in float32 between casts (``g``
    itself when there is none, which is every graph without bf16). A scan keeps its
    operands (its body's inputs are typed like them) and gets its body legalised the same
    way: the body's kernels are planned and emitted from it (``codegen.loop``)."""
    order = g.nodes()
    bodies = {n.id: legalize_bf16(n.attrs["body"], native) for n in order if n.op == "scan"}
    if not any(needs_float32(n, native) for n in order) and all(
            bodies[n.id] is n.attrs["body"] for n in order if n.op == "scan"):
        return g
    b = Builder(intern=True, track_loc=False)
    new: dict[int, Node] = {n.id: n for n in g.inputs}
    for n in order:
        if n.id in new:
            continue
        ins = [new[x.id] for x in n.inputs]
        if needs_float32(n, native):
            wide = [b.cast(x, dt.float32) if x.dtype is dt.bfloat16 else x for x in ins]
            out = b.op(n.op, wide, **n.attrs)
            if n.dtype is dt.bfloat16:
                out = b.cast(out, dt.bfloat16)
        elif n.op == "scan":
            out = b.op("scan", ins, **{**n.attrs, "body": bodies[n.id]})
        else:
            out = b.op_like(n, ins)
        if out.loc is None:
            out.loc = n.loc
        new[n.id] = out
    return Graph(g.name, list(g.inputs), [new[o.id] for o in g.outputs],
                 [(s, new[v.id]) for s, v in g.updates], list(g.guards), dict(g.meta))
