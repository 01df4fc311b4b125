"""Algebraic simplification, CSE and dead-code elimination in one rebuild.

Takes any verified graph; gives an equivalent graph in which every node is rebuilt through an
interning builder (so structurally equal nodes are merged), identities that are exact in
floating point are removed (``x*1``, ``x/1``, ``--x``, same-type casts, no-op movement), and
nodes that no output or update needs are gone; scans that are one loop storing more or less
per step become one (``_scan_merges``), and a scan's results that stack the same body value
are read from the first (``_first_stacking``). Rewrites never change a value's bits.
"""

from __future__ import annotations

from graphc.ir import Builder, Graph, Node


def _const(n: Node, value: float) -> bool:
    return n.op == "const" and n.attrs["value"] == value and not isinstance(
        n.attrs["value"], bool)


def _rewrite(b: Builder, n: Node, ins: list[Node]) -> Node:
    op = n.op
    if op == "mul":
        x, y = ins
        if _const(y, 1.0) and y.dtype.is_float:
            return x
        if _const(x, 1.0) and x.dtype.is_float:
            return y
    elif op == "div" and _const(ins[1], 1.0) and ins[1].dtype.is_float:
        return ins[0]
    elif op == "neg" and ins[0].op == "neg":
        return ins[0].inputs[0]
    elif op == "cast":
        return b.cast(ins[0], n.attrs["dtype"])
    elif op == "reshape":
        return b.reshape(ins[0], n.shape)
    elif op == "permute":
        x, perm = ins[0], tuple(n.attrs["perm"])
        r = len(perm)
        if x.op == "matmul" and r >= 2 and perm == tuple(range(r - 2)) + (r - 1, r - 2):
            # (A B)^T = B^T A^T: the same products summed in the same order, but the result
            # is produced in the layout its consumers read (weight gradients feed updates)
            swap = tuple(range(r - 2)) + (r - 1, r - 2)
            a, bb = x.inputs
            return b.op("matmul", (b.permute(bb, swap), b.permute(a, swap)))
        return b.permute(x, perm)
    elif op == "expand":
        return b.expand(ins[0], n.shape)
    elif op in ("detach", "affine_norm"):  # differentiated already: only the value is left
        return ins[0]
    elif op == "where" and ins[0].op == "const":
        return ins[1] if ins[0].attrs["value"] else ins[2]
    elif op == "scan_out":
        first = _first_stacking(ins[0], n.attrs["index"])
        if first != n.attrs["index"]:
            return b.op("scan_out", (ins[0],), index=first)
    return b.op_like(n, ins)  # no rewrite: the same op over inputs of the same types


def _first_stacking(scan: Node, index: int) -> int:
    """The first per-step output of ``scan`` that stacks the same body value as output
    ``index`` does (``index`` itself if none before it). A backward LSTM step returns its
    gates' gradient twice, once for each weight gradient after the loop: read from one
    stacked result, the loop stores it once (``codegen.loop`` copies no output that nothing
    reads)."""
    k = scan.attrs["carries"]
    outs = scan.attrs["body"].outputs
    if index < k:
        return index
    return next(j for j in range(k, index + 1) if outs[j] is outs[index])


def _scan_merges(nodes: list[Node]) -> dict[int, Node]:
    """Scans that are one loop: the same operands and options, bodies with the same inputs
    whose outputs extend one another (the backward pass builds a forward scan that stores
    more per step, ``passes/loops.py``). Maps each to the one with the most outputs, whose
    results at the shorter one's indices are the shorter one's."""
    groups: dict[tuple, list[Node]] = {}
    for n in nodes:
        if n.op == "scan":
            a = n.attrs
            key = (tuple(x.id for x in n.inputs), a["carries"], a["xs"],
                   bool(a.get("reverse")), bool(a.get("remat")),
                   tuple(p.id for p in a["body"].inputs))
            groups.setdefault(key, []).append(n)
    out: dict[int, Node] = {}
    for grp in groups.values():
        if len(grp) < 2:
            continue
        big = max(grp, key=lambda s: len(s.attrs["body"].outputs))
        big_outs = big.attrs["body"].outputs
        for s in grp:
            outs = s.attrs["body"].outputs
            if s is not big and all(x is y for x, y in zip(outs, big_outs)):
                out[s.id] = big
    return out


def simplify(g: Graph) -> Graph:
    b = Builder(intern=True, track_loc=False)
    new: dict[int, Node] = {n.id: n for n in g.inputs}
    nodes = g.nodes()
    merged = _scan_merges(nodes)
    for n in nodes:
        if n.id in new:
            continue
        src = merged.get(n.id)
        if src is not None:  # the same loop, storing more: computed once
            if src.id not in new:
                new[src.id] = _rewrite(b, src, [new[x.id] for x in src.inputs])
            new[n.id] = new[src.id]
            continue
        out = _rewrite(b, n, [new[x.id] for x in n.inputs])
        if out.loc is None:
            out.loc = n.loc
        new[n.id] = out
    return Graph(g.name, list(g.inputs), [new[o.id] for o in g.outputs],
                 [(s, new[v.id]) for s, v in g.updates], list(g.guards), dict(g.meta))
