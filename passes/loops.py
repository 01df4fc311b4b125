"""The derivative of a ``scan``: a reverse scan (backpropagation through time).

Why this shape: the gradient of a loop is a loop over the same steps in the other order, whose
carries are the cotangents of the forward carries (plus an accumulator for an invariant
operand whose gradient has no better form) and whose per-step outputs are the cotangents of
the sequence operands. Each backward step needs the forward step's values:

- the sequence slices are operands already; the carries entering each step are stacked by
  the forward scan (the front end builds a differentiable scan with them as extra outputs,
  ``graphc.loops``);
- the body's other intermediates the backward step reads (an LSTM's gates, ``tanh(c)``) are
  *stored* by default: the forward scan stacks them too (a forward scan with more outputs,
  which ``simplify`` merges with the original), and the backward body reads them instead of
  recomputing them, so the hidden-state GEMM runs once per step, not twice. With
  ``remat=True`` on the scan only the carries are stored and the backward step recomputes
  the body from them (``T x carries`` values instead of ``T x`` intermediates);
- a weight gradient ``sum_t a_t^T g_t`` (every cell's hidden-state weight) is one product
  over all steps' rows after the loop, from ``a`` and ``g`` stacked (cuDNN's weight
  gradient), and a bias gradient equal to a stacked ``g`` its sum over the steps.

The backward body is built by copying the forward body (``loops.clone_into``) and running the
ordinary VJP pass on the copy, so a body may hold any differentiable op, a nested scan
included (whose own loop is recomputed in the backward step rather than stored).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from graphc.autograd import enable_grad, no_grad
from graphc.ir import Builder, Graph, Node
from graphc.ir import loops as L
from graphc.ir import shapes as sh

Vjp = Callable[[Builder, Sequence[Node], Sequence[Node], Sequence[Node]], list[Node | None]]


def _find_stored(n: Node, wanted: Sequence[Node]) -> list[int | None]:
    """For each body node of ``wanted``, the index of a result of the scan ``n`` that stacks
    it (a per-step output returning it), or None."""
    body, k = n.attrs["body"], n.attrs["carries"]
    out: list[int | None] = []
    for v in wanted:
        out.append(next((k + j for j, y in enumerate(body.outputs[k:]) if y is v), None))
    return out


def _forward_storing(b: Builder, n: Node, wanted: Sequence[Node]) -> list[Node]:
    """The per-step values ``wanted`` (body nodes) stacked over the steps: results of the
    forward scan ``n`` where it returns them already, else of a forward scan whose body
    returns them too (the same body, more outputs: ``simplify`` merges the two scans into
    the one that stores more, so the forward still runs once)."""
    body = n.attrs["body"]
    found = _find_stored(n, wanted)
    missing = [v for v, i in zip(wanted, found) if i is None]
    src = n
    if missing:
        extra = Graph(body.name, body.inputs, list(body.outputs) + list(dict.fromkeys(missing)))
        src = b.op("scan", n.inputs, **{**n.attrs, "body": extra})
        found = _find_stored(src, wanted)
    return [b.op("scan_out", (src,), index=i) for i in found]


def _store_residuals(bwd: Graph, fwd_copy: dict[int, Node], at: int
                     ) -> tuple[Graph, list[Node]]:
    """Store instead of recompute: the copies of forward body nodes that the backward
    nodes read (``fwd_copy``: copy id -> forward body node) become per-step inputs of the
    backward body (inserted at input position ``at``: after its sequences), so the copies that only
    fed them, the recomputed hidden-state GEMM among them, drop out. Returns the new body
    and the forward nodes to stack, in input order."""
    order = bwd.nodes()
    res: list[Node] = []
    seen: set[int] = set()

    def mark(x: Node) -> None:
        f = fwd_copy.get(x.id)
        # a nested scan's tuple is not a value to stack (its loop is recomputed instead)
        if f is not None and x.op not in ("input", "const", "iota", "scan") \
                and x.id not in seen:
            seen.add(x.id)
            res.append(x)

    for v in order:
        if v.id not in fwd_copy and v.op != "input":
            for x in v.inputs:
                mark(x)
    for o in bwd.outputs:
        mark(o)
    if not res:
        return bwd, []
    res.sort(key=lambda x: x.id)
    nb = Builder(intern=True, track_loc=False)
    new: dict[int, Node] = {}
    ins = []
    for q, r in enumerate(res):
        ins.append(nb.input(f"r{q}", "arg", r.shape, r.dtype))
        new[r.id] = ins[-1]
    for x in bwd.inputs:
        new[x.id] = x
    for v in L.reachable(bwd.outputs, stop=set(new)):
        if v.id not in new:
            new[v.id] = nb.op_like(v, [new[x.id] for x in v.inputs])
    inputs = list(bwd.inputs[:at]) + ins + list(bwd.inputs[at:])
    return (Graph(bwd.name, inputs, [new[o.id] for o in bwd.outputs]),
            [fwd_copy[r.id] for r in res])


def scan_vjp(b: Builder, n: Node, cots: dict[int, Node], vjp: Vjp) -> list[Node | None]:
    """Gradients of a scan's operands given the cotangents ``cots`` of its results
    (``{result index: cotangent}``; absent results have none), as one reverse scan."""
    body, k, m = n.attrs["body"], n.attrs["carries"], n.attrs["xs"]
    carries0, xs, consts = L.operand_groups(n)
    ny = len(body.outputs) - k
    fl_c = [i for i in range(k) if carries0[i].dtype.is_float]
    need_x = [j for j in range(m) if xs[j].dtype.is_float and xs[j].rg]
    need_w = [p for p, w in enumerate(consts) if w.dtype.is_float and w.rg]
    have_y = [j for j in range(ny) if (k + j) in cots and body.outputs[k + j].dtype.is_float]
    if not fl_c and not need_x and not need_w:
        return [None] * len(n.inputs)

    # the backward body: carries (g_c for float carries, g_w accumulators), sequences
    # (the stored carries, the forward sequences, the cotangents of the stacked outputs),
    # invariants (the forward invariants)
    bb = Builder(intern=True, track_loc=False)
    bi = body.inputs

    def inp(name: str, like: Node, rg: bool) -> Node:
        x = bb.input(name, "arg", like.shape, like.dtype)
        x.rg = rg
        return x

    g_c = [inp(f"g_c{i}", bi[i], False) for i in fl_c]
    c_in = [inp(f"c{i}", bi[i], bi[i].dtype.is_float) for i in range(k)]
    x_in = [inp(f"x{j}", bi[k + j], j in need_x) for j in range(m)]
    g_y = [inp(f"g_y{j}", body.outputs[k + j], False) for j in have_y]
    w_in = [inp(f"w{p}", bi[k + m + p], p in need_w) for p in range(len(consts))]
    fenv: dict[int, Node] = {}
    with enable_grad():
        outs = L.clone_into(bb, body, c_in + x_in + w_in, fenv)
    by_id = {v.id: v for v in body.nodes()}
    fwd_copy = {fenv[i].id: by_id[i] for i in fenv if by_id[i].op != "input"}
    roots = [outs[i] for i in fl_c] + [outs[k + j] for j in have_y]
    seeds = g_c + g_y
    wrt = [c_in[i] for i in fl_c] + [x_in[j] for j in need_x] + [w_in[p] for p in need_w]
    with no_grad():
        grads = vjp(bb, roots, seeds, wrt)

        def zero_if_none(g: Node | None, like: Node) -> Node:
            return g if g is not None else bb.const(0.0, like.shape, like.dtype)

        nc, nx = len(fl_c), len(need_x)
        new_gc = [zero_if_none(g, c_in[i]) for g, i in zip(grads[:nc], fl_c)]
        gx = [zero_if_none(g, x_in[j]) for g, j in zip(grads[nc:nc + nx], need_x)]
        kinds, extra = _weight_grads(grads[nc + nx:], c_in, x_in)
        g_w = {p: inp(f"g_w{p}", bi[k + m + p], False)
               for p, kd in zip(need_w, kinds) if kd[0] == "carry"}
        new_gw = [g_w[p] if g is None else bb.add(g_w[p], g)
                  for p, g, kd in zip(need_w, grads[nc + nx:], kinds) if kd[0] == "carry"]
    acc = [p for p in need_w if p in g_w]
    bwd = Graph(f"{body.name}_vjp", g_c + [g_w[p] for p in acc] + c_in + x_in + g_y + w_in,
                new_gc + new_gw + gx + extra)
    residual: list[Node] = []
    if not n.attrs.get("remat"):
        bwd, residual = _store_residuals(bwd, fwd_copy, len(bwd.inputs) - len(w_in))
    stacks = _forward_storing(b, n, list(body.inputs[:k]) + residual)
    stored = stacks[:k]

    # the reverse scan over the same steps
    init = [cots.get(i) if i in cots else b.const(0.0, carries0[i].shape, carries0[i].dtype)
            for i in fl_c]
    init += [b.const(0.0, consts[p].shape, consts[p].dtype) for p in acc]
    seqs = stored + list(xs) + [cots[k + j] for j in have_y] + stacks[k:]
    rs = b.op("scan", init + seqs + list(consts), body=bwd, carries=len(init),
              xs=len(seqs), reverse=not n.attrs.get("reverse", False))
    out: list[Node | None] = [None] * len(n.inputs)
    for r, i in enumerate(fl_c):
        out[i] = b.op("scan_out", (rs,), index=r)
    for r, j in enumerate(need_x):
        out[k + j] = b.op("scan_out", (rs,), index=len(init) + r)
    first_extra = len(init) + len(need_x)

    def seq(src: tuple[str, int]) -> Node:
        """A per-step value stacked over the steps, outside the loop."""
        what, i = src
        if what == "c":
            return stored[i]
        if what == "x":
            return xs[i]
        return b.op("scan_out", (rs,), index=first_extra + i)

    for p, kd in zip(need_w, kinds):
        w = consts[p]
        if kd[0] == "carry":
            out[k + m + p] = b.op("scan_out", (rs,), index=len(fl_c) + acc.index(p))
        elif kd[0] == "sum":
            out[k + m + p] = b.reshape(b.op("sum", (seq(kd[1]),), axes=(0,)), w.shape)
        else:  # sum_t a_t^T g_t as one product over all steps' rows (cuDNN's weight grad)
            a_s, g_s = seq(kd[1]), seq(kd[2])
            rows = sh.dim(a_s.shape[0] * a_s.shape[1])
            a2 = b.reshape(a_s, (rows, a_s.shape[2]))
            g2 = b.reshape(g_s, (rows, g_s.shape[2]))
            if kd[0] == "mm":
                out[k + m + p] = b.op("matmul", (b.permute(a2, (1, 0)), g2))
            else:  # its transpose, g^T a: the same products summed in the same order
                out[k + m + p] = b.op("matmul", (b.permute(g2, (1, 0)), a2))
    return out


Kind = tuple  # ("carry",) | ("sum", src) | ("mm" | "mmT", src_a, src_g); src = ("c"|"x"|"y", i)


def _weight_grads(grads: Sequence[Node | None], c_in: list[Node], x_in: list[Node]
                  ) -> tuple[list[Kind], list[Node]]:
    """How each invariant operand's gradient is summed over the steps, and the per-step
    values the backward body must stack for it (``extra`` outputs).

    A step's gradient ``a_t^T g_t`` (a matmul with a transposed, per-step 2-D operand: the
    hidden-state weight of every recurrent cell) is summed outside the loop as one product
    over ``T*B`` rows, from ``a`` and ``g`` stacked: no weight-sized accumulator is read,
    added and copied at every step, and the product is one large GEMM instead of ``T``
    small ones. A gradient that is itself such a stacked ``g`` (a bias broadcast over the
    batch) is a sum over the steps of it. Anything else accumulates in a carry."""
    extra: list[Node] = []
    ids: dict[int, tuple[str, int]] = {}
    for i, c in enumerate(c_in):
        ids[c.id] = ("c", i)
    for j, x in enumerate(x_in):
        ids[x.id] = ("x", j)

    def stack(v: Node) -> tuple[str, int]:
        src = ids.get(v.id)
        if src is None:
            src = ids[v.id] = ("y", len(extra))
            extra.append(v)
        return src

    def product(g: Node | None) -> bool:  # a_t^T g_t of 2-D per-step operands
        return (g is not None and g.op == "matmul" and g.ndim == 2
                and g.inputs[0].op == "permute" and g.inputs[0].attrs["perm"] == (1, 0)
                and g.inputs[0].inputs[0].ndim == 2 and g.inputs[1].ndim == 2)

    kinds: list[Kind] = []
    for g in grads:
        if product(g):
            kinds.append(("mm", stack(g.inputs[0].inputs[0]), stack(g.inputs[1])))
        elif (g is not None and g.op == "permute" and g.attrs["perm"] == (1, 0)
              and product(g.inputs[0])):
            # (a_t^T g_t)^T: the weight enters the body untransposed (``x @ W.T``)
            mm = g.inputs[0]
            kinds.append(("mmT", stack(mm.inputs[0].inputs[0]), stack(mm.inputs[1])))
        else:
            kinds.append(("carry",))
    for r, g in enumerate(grads):  # a gradient already stacked for a product: a sum
        if kinds[r][0] == "carry" and g is not None and ids.get(g.id, ("",))[0] == "y":
            kinds[r] = ("sum", ids[g.id])
    return kinds, extra


__all__ = ["scan_vjp"]
