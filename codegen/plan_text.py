"""The ``fused`` stage: how the optimized graph is cut into native kernels.

One block per materialized node: the nodes it computes inline, the buffers it reads, where its
result lives (arena offset, written in place into a state buffer, or nowhere: a value only
later members of its loop group read, kept in registers), and the arena size — so a user can
see what fused with what, and why a buffer exists. Members of one loop group (same-shaped
elementwise kernels run as a single loop) are listed under a ``loop group`` line; a scan's
results under a ``scan loop`` line, and its body's kernels after the step's, indented; a
convolution and the consumer it runs as its epilogue under a ``convolution with epilogue`` line.
"""

from __future__ import annotations

from collections.abc import Callable

from graphc.ir import Graph, Node
from graphc.ir import shapes as sh
from graphc.ir.text import type_str

from .planning import Plan, closure_of, reads_of


def _scan_lines(n: Node, p: Plan, outs: int) -> list[str]:
    from graphc.ir.loops import trip_count

    steps = sh.fmt_dim(trip_count(n))
    kernels = len(p.bodies[n.id].units())
    rev = ", reversed" if n.attrs.get("reverse") else ""
    return [f"scan loop of {steps} steps{rev}: its body's {kernels} kernels per step "
            f"(below), writing {outs} result(s):"]


def format_plan(g: Graph, p: Plan, note: Callable[[Node], str | None] | None = None) -> str:
    """The kernels of plan ``p`` as text (``ir("fused")``); ``note(node)``: a backend's
    extra line for a kernel (which GEMM variant a product runs on)."""
    names: dict[int, str] = {n.id: n.attrs["name"] for n in g.inputs}
    for n in p.order:
        if n.op != "input":
            names[n.id] = f"%{p.node_index[n.id]}"
    mat = {n.id for n in p.materialized}
    slots = p.slots or [s for s, _ in g.updates]
    lines = [f"kernels of {g.name}: {len(p.units())} kernels ({len(p.materialized)} "
             f"materialized nodes, {len(p.groups) - len(p.epilogues)} loop groups), "
             f"{sum(len(closure_of(n, mat)) for n in p.materialized)} nodes"]
    for i, n in enumerate(p.materialized):
        gi = p.group_of.get(n.id)
        if gi is not None and p.groups[gi][0] is n:
            grp = p.groups[gi]
            if n.op == "scan":
                lines += _scan_lines(n, p, len(grp) - 1)
            elif gi in p.epilogues:
                lines.append("convolution with epilogue (its consumer runs in the "
                             "convolution's kernel, image by image where that runs images):")
            elif gi in p.passes:
                over = next((m.inputs[0] for m in grp if m.op == "sum"), n)
                what = ("row group", "row by row") if gi in p.row_groups else \
                    ("channel group", "channel by channel")
                npass = len(set(p.passes[gi]))
                lines.append(f"{what[0]} of {len(grp)} ({what[1]}, {npass} "
                             f"pass{'' if npass == 1 else 'es'} over {type_str(over)}):")
            else:
                lines.append(f"loop group of {len(grp)} (one loop over {type_str(n)}):")
        inline = [x for x in closure_of(n, mat) if x is not n]
        reads = ", ".join(names[x.id] for x in reads_of(n, mat))
        if n.id in p.direct:
            where = f"in place -> {slots[p.direct[n.id]]}"
        elif n.id in p.out_direct:
            where = f"output {p.out_direct[n.id]}"
        elif n.op == "scan":
            where = "the loop's workspace"
        elif n.id in p.virtual and p.group_of.get(n.id) in p.epilogues:
            where = f"in {names[p.groups[p.group_of[n.id]][-1].id]}'s buffer"
        elif n.id in p.virtual:
            where = "registers only"
        else:
            where = f"arena+{sh.fmt_dim(p.offsets[n.id])}"
        lines.append(f"k{i}: {names[n.id]} = {n.op} : {type_str(n)}  [{where}]")
        if inline:
            fused = ", ".join(f"{names[x.id]} {x.op}" for x in
                              sorted(inline, key=lambda x: p.node_index[x.id]))
            lines.append(f"    fuses: {fused}")
        lines.append(f"    reads: {reads}")
        extra = note(n) if note is not None else None
        if extra:
            lines.append(f"    {extra}")
    for n in p.materialized:  # each scan body's own kernels, indented
        if n.op == "scan":
            body = format_plan(n.attrs["body"], p.bodies[n.id], note)
            lines += [f"  | {line}" for line in
                      [f"body of {names[n.id]}:"] + body.splitlines()]
    lines.append(f"arena: {sh.fmt_dim(p.scratch_bytes)} bytes (GEMM packing from "
                 f"{sh.fmt_dim(p.work_offset)})")
    return "\n".join(lines) + "\n"
