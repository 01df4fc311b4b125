"""Segments of a loop over an axis that zero pads cut: each pad wholly inside or outside.

Why: ``cat`` is a sum of zero-padded views (``graphc.tensor_ops.cat``) and the gradient of a
slice is a pad (``passes.autodiff``), so the gradient of ``chunk`` (an LSTM's four gates, a
GPT's q, k and v) and every concatenation reach the kernel emitter as
``pad(a) + pad(b) + ...``. Emitted at every index, each pad clamps its index into the source,
loads and selects zero outside it: every element computes every piece's expression and
throws all but one away. An LSTM step's gate gradient (``[32, 1024]`` from four such pieces)
took 4.3 ns an element that way (Zen 4). Cut into the segments between the pads' edges, the loop
over that axis knows in each segment which pads hold values (the source read at ``i - lo``,
no clamp, no select) and which hold zeros (a constant, and the expression under it is not
computed at all); each segment is a plain loop LLVM vectorises.

The values are the same, bit for bit: a pad's zeros still enter the sums as ``0.0``, in the
same order, so ``+0.0`` and ``-0.0`` come out as before.

Only pads that every path from the kernel's result reaches at the kernel's own index (through
elementwise ops, not through views, gathers or reductions) are used, so a segment's bounds
are bounds of the pad's own index; the cut axis and every edge on it must be known integers.
"""

from __future__ import annotations

from collections.abc import Callable

from graphc.ir import Node

from .elementwise import ELEMENT_RULES
from .views import VIEW_OPS

# more segments than this and the repeated loop bodies cost more code than they save
MAX_SEGMENTS = 16
# elementwise rules whose operands are not read at the result's index
_NOT_POINTWISE = ("gather", "rand", "iota", "const")

# (axis, [(start, stop, {pad node id: inside}), ...])
Segments = tuple[int, list[tuple[int, int, dict[int, bool]]]]


def _direct_pads(members: list[Node], shape: tuple, stop: Callable[[Node], bool]
                 ) -> dict[int, Node]:
    """The pads of ``shape`` that the members' inline expressions read only at the loop's
    own index. ``stop(n)``: ``n`` is read from memory (a buffer, an earlier member), not
    computed inline."""
    shape = tuple(shape)
    direct: dict[int, Node] = {}
    tainted: set[int] = set()
    seen: set[tuple[int, bool]] = set()
    todo: list[tuple[Node, bool]] = []
    for m in members:
        todo.append((m, True))
    roots = {m.id for m in members}
    while todo:
        n, at_index = todo.pop()
        if (n.id, at_index) in seen:
            continue
        seen.add((n.id, at_index))
        if n.id not in roots and stop(n):
            continue
        if n.op == "pad":
            if at_index and tuple(n.shape) == shape:
                direct[n.id] = n
            else:
                tainted.add(n.id)
            todo.extend((x, False) for x in n.inputs)
            continue
        pointwise = n.op == "detach" or (n.op in ELEMENT_RULES and n.op not in VIEW_OPS
                                         and n.op not in _NOT_POINTWISE)
        for x in n.inputs:
            todo.append((x, at_index and pointwise and tuple(x.shape) == shape))
    return {i: p for i, p in direct.items() if i not in tainted}


def segments(members: list[Node], shape: tuple, stop: Callable[[Node], bool],
             block: Callable[[int], int | None]) -> Segments | None:
    """How to cut the loop nest over ``shape`` (see the module docstring), or None.

    The axis cut is the one most of the direct pads pad (the innermost of equals).
    ``block(axis)``: the factor that axis's loop is split into blocks by (the edges must
    fall on whole blocks), None when it is not split."""
    pads = _direct_pads(members, shape, stop)
    by_axis: dict[int, list[tuple[int, int, int]]] = {}
    for p in pads.values():
        src = p.inputs[0].shape
        for ax, ((lo, hi), d) in enumerate(zip(p.attrs["pads"], src)):
            if isinstance(lo, int) and isinstance(hi, int) and lo == 0 and hi == 0:
                continue
            if not (isinstance(lo, int) and isinstance(d, int)
                    and isinstance(shape[ax], int)):
                continue
            by_axis.setdefault(ax, []).append((p.id, lo, lo + d))
    if not by_axis:
        return None
    ax = max(by_axis, key=lambda a: (len(by_axis[a]), a))
    ext = shape[ax]
    f = block(ax)
    edges = sorted({0, ext} | {e for _, lo, hi in by_axis[ax] for e in (lo, hi)
                               if 0 < e < ext})
    if f is not None and any(e % f for e in edges):
        return None
    if not 2 < len(edges) <= MAX_SEGMENTS + 1:
        return None
    segs = []
    for start, stop_ in zip(edges, edges[1:]):
        sides = {pid: lo <= start and stop_ <= hi for pid, lo, hi in by_axis[ax]}
        segs.append((start, stop_, sides))
    return ax, segs


__all__ = ["segments", "MAX_SEGMENTS", "Segments"]
