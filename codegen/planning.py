"""Kernel and memory planning: which nodes get buffers, which kernels run as one loop, where
every buffer lives in the scratch arena.

A node gets its own buffer (is *materialized*) when it is a family kernel's output (a
reduction, a matmul, a convolution, a scatter: ``codegen.kernels``), a graph output or
update, or when its value is used by more than one consumer; every other node is an
*expression* that its consumer recomputes inline at each index, so chains of elementwise ops,
broadcasts, transposes and reshapes fuse into their consumer's loop. Updates whose kernel can
safely write over the old state do so in place (``_plan_direct_writes``); runs of same-shaped
elementwise kernels become one loop (``_plan_groups``); buffers reuse the space of buffers
whose last reader has run (``_assign_offsets``).

The plan is data (``Plan``), shared by the CPU entry function (``codegen.lower``), the PTX
program (``codegen.ptx``), the printed plan (``codegen.plan_text``) and ``graphc.explain``;
it is separate from the emitters because none of it emits code.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import sympy

from graphc.ir import Graph, Node
from graphc.ir import ops as gops
from graphc.ir import shapes as sh

from . import options
from .abi import align
from .channel_groups import plan_channel_groups
from .elementwise import ELEMENT_RULES
from .families import KERNELS, kernel_for
from .views import VIEW_OPS, closure_of, strided_view

# ops whose kernels may stop with an error code (a scan: any kernel of its body)
CHECKED_OPS = ("gather", "scatter_add", "scan")


def _dense_operands(n: Node) -> bool:
    """Whether ``n``'s kernel reads every operand element many times (matmul, convolution,
    pooling): its operands then get their own buffers (or are buffers seen through strided
    views) instead of being recomputed inline."""
    kern = KERNELS.get(n.op)
    return kern is not None and kern.dense_operands


@dataclass
class Plan:
    graph: Graph
    order: list[Node]
    materialized: list[Node]  # non-input nodes with buffers, in execution order
    offsets: dict[int, Any] = field(default_factory=dict)  # node id -> byte offset (sympy)
    scratch_bytes: Any = 0
    work_offset: Any = 0  # GEMM packing workspace (shared: kernels run one at a time)
    no_reuse_bytes: Any = 0  # what the buffers would take without reuse (for reports)
    direct: dict[int, int] = field(default_factory=dict)  # node id -> update it writes in place
    # node id -> the graph output whose buffer its kernel writes (``_plan_direct_outputs``)
    out_direct: dict[int, int] = field(default_factory=dict)
    # what ``direct`` indexes: the update slots, then (a scan body's) the carried inputs' names
    slots: list[str] = field(default_factory=list)
    carries: int = 0  # a scan body's carries (``plan``)
    # a scan operand that is a reshape of a buffer (a projection of every time step seen as
    # [T, B, G]) -> that buffer's node: the loop reads it in place, no copy is made
    aliases: dict[int, int] = field(default_factory=dict)
    input_index: dict[int, int] = field(default_factory=dict)  # node id -> input slot
    node_index: dict[int, int] = field(default_factory=dict)  # node id -> printed index
    # loop groups: runs of same-shaped elementwise kernels emitted as one loop (see
    # ``_plan_groups``); ``group_of`` maps a member's id to its group's index in ``groups``
    groups: list[list[Node]] = field(default_factory=list)
    group_of: dict[int, int] = field(default_factory=dict)
    virtual: set[int] = field(default_factory=set)  # group-internal values: no buffer
    # scan id -> the plan of its body (``codegen.loop``); the scan and its scan_out nodes
    # are one unit in ``groups`` (the loop writes every result), the scan itself virtual
    bodies: dict[int, Plan] = field(default_factory=dict)
    # channel groups (``codegen.channel_groups``): group index -> each member's pass
    passes: dict[int, list[int]] = field(default_factory=dict)
    # which of those groups run row by row (reductions over the last dim: LayerNorm)
    row_groups: set[int] = field(default_factory=set)
    # convolutions with an epilogue (``_plan_conv_epilogues``): indices of groups
    # ``[conv, consumer]``, the conv virtual, its consumer computed per image in its kernel
    epilogues: set[int] = field(default_factory=set)

    def units(self) -> list[list[Node]]:
        """Kernels in execution order: a loop group, or a single materialized node."""
        out: list[list[Node]] = []
        for n in self.materialized:
            gi = self.group_of.get(n.id)
            if gi is None:
                out.append([n])
            elif self.groups[gi][0] is n:
                out.append(self.groups[gi])
        return out


# elementwise ops cheap enough to recompute in every consumer (one instruction)
RECOMPUTE_OPS = ("add", "sub", "mul", "neg")
# operands of at most this many elements count as small (BatchNorm's per-channel vectors)
SMALL_OPERAND = 4096


def _recompute(n: Node, mat: set[int]) -> bool:
    """Whether ``n``, used more than once, is recomputed inline in each consumer instead of
    getting a buffer: a one-instruction op whose operands are buffers (or views of buffers,
    or constants) of which at most one is large, like BatchNorm's ``x - mean``. Each
    consumer then reads the large operand where it would have read ``n``'s buffer: the same
    traffic, minus writing ``n`` (a whole pass over a ResNet activation) and its kernel."""
    if n.op not in RECOMPUTE_OPS or not n.dtype.is_float:
        return False
    large = 0
    for x in n.inputs:
        base = x
        while base.op in VIEW_OPS:
            base = base.inputs[0]
        if base.op in ("const", "iota"):
            continue
        if base.op != "input" and base.id not in mat:
            return False
        size = sh.numel(base.shape)
        if not (isinstance(size, int) and size <= SMALL_OPERAND):
            large += 1
    return large <= 1


def _unit_stride_operands(n: Node, wide: bool, mat: set[int]) -> None:
    """Give the operands that ``n``'s kernel reads as vectors along their last dim
    (``Kernel.unit_stride``) a contiguous buffer of their own where they are views with
    another last stride. A depthwise convolution's weight gradient behind a channels-last
    permute (ConvNeXt's ``dwconv(x).permute(0, 2, 3, 1)``) took the element-by-element
    loops instead: 100 ms a call against 6 ms with the copy, whose own cost is one pass over
    ``dY`` (Zen 4, one thread, 8 x 96 x 56 x 56, 7x7)."""
    kern = KERNELS.get(n.op)
    if kern is None:
        return
    for i in kern.unit_stride(n, wide):
        x = n.inputs[i]
        sv = strided_view(x, lambda m: m.op == "input" or m.id in mat)
        if sv is not None and x.op in VIEW_OPS and not sh.same(sv[1][-1], 1):
            mat.add(x.id)


def nbytes(n: Node) -> Any:
    return sh.numel(n.shape) * n.dtype.itemsize


def plan(g: Graph, wide: bool = True, debug: bool = False, loop_groups: bool = False,
         carries: int = 0, epilogues: bool = True, direct_outputs: bool = False) -> Plan:
    """Decide which nodes get buffers and lay them out in the scratch arena.

    ``carries``: ``g`` is a scan body whose first ``carries`` inputs and outputs are the
    carried state; a carry's new value is planned like an update of its input (written over
    it in place when that is safe: ``Plan.direct``, indices past the updates'), so the loop
    keeps one copy of that carry instead of two it alternates between.

    ``debug``: every kernel may stop with a bounds error, so no update is written in place
    (a failing debug step must still change nothing). ``loop_groups``: merge runs of
    same-shaped elementwise kernels into single loops (the CPU backend; see
    ``_plan_groups``), and, with ``epilogues`` (not in a scan body, whose kernels the loop
    calls with plain arguments), give convolutions their consumer as an epilogue
    (``_plan_conv_epilogues``). ``direct_outputs``: the caller's output buffers are its
    own until the step returns (the JIT's), so kernels may write results straight into
    them (``_plan_direct_outputs``)."""
    order = g.nodes()
    users: dict[int, list[Node]] = {n.id: [] for n in order}
    for n in order:
        for x in n.inputs:
            users[x.id].append(n)
    roots = {n.id for n in g.roots}

    eff_cache: dict[int, int] = {}

    def eff_users(n: Node) -> int:
        if n.id in eff_cache:
            return eff_cache[n.id]
        c = 1 if n.id in roots else 0
        for u in users[n.id]:
            c += eff_users(u) if (u.op in VIEW_OPS and u.id not in roots) else 1
        eff_cache[n.id] = c
        return c

    mat: set[int] = set()
    for n in order:
        if n.op == "input":
            continue
        if n.id in roots or n.op in KERNELS:
            mat.add(n.id)
        elif (n.op not in VIEW_OPS and n.op not in ("const", "iota") and eff_users(n) > 1
              and not _recompute(n, mat)):
            mat.add(n.id)
    # matmul/conv operands must be addressable with strides: a buffer seen through views.
    # Where even a buffer of the node under the views would not make the operand a strided
    # view (a slice: attention's q, k and v cut from one projection), the operand gets a
    # buffer of its own, and the node under it is left to the rules above: before, both got
    # one, and a GPT step wrote the qkv projection's bias add to memory only for the three
    # copies to read it back (0.7-1.3 % of the step, Zen 4)
    for n in order:
        if _dense_operands(n):
            for x in n.inputs:
                base = x
                while base.op in VIEW_OPS:
                    base = base.inputs[0]
                if strided_view(x, lambda m: m.op == "input" or m.id in mat) is not None:
                    continue  # read in place already (a buffer, or a view of one)
                if strided_view(x, lambda m, b=base: m.op == "input" or m.id in mat
                                or m is b) is None:
                    mat.add(x.id)
                else:
                    mat.add(base.id)
            _unit_stride_operands(n, wide, mat)
    scans = [n for n in order if n.op == "scan"]
    aliases: dict[int, int] = {}
    for n in scans:  # the body reads its operands as plain contiguous buffers
        for x in n.inputs:
            if x.op == "input":
                continue
            base = x
            while base.op in ("reshape", "detach"):
                base = base.inputs[0]
            if base is not x and (base.op == "input" or base.id in mat):
                aliases[x.id] = base.id  # the same bytes: a reshape of a whole buffer
            else:
                mat.add(x.id)
    materialized = [n for n in order if n.id in mat]
    if loop_groups and not debug:
        materialized = _hoist_scalars(materialized, mat)
    if scans:
        materialized = _scan_units_together(materialized)
    p = Plan(g, order, materialized)
    p.aliases = aliases
    p.slots = [s for s, _ in g.updates] + [n.attrs["name"] for n in g.inputs[:carries]]
    p.carries = carries
    if not debug:
        _plan_direct_writes(p, mat)
        if direct_outputs and not carries:
            _plan_direct_outputs(p, mat)
        if loop_groups:
            if options.CONV_EPILOGUE and epilogues:
                _plan_conv_epilogues(p, mat)
            if options.CHANNEL_GROUPS:
                plan_channel_groups(p, mat, _may_fail(p, mat),
                                    {n.id: reads_of(n, mat) for n in p.materialized})
            _plan_groups(p, mat)
    needs: list[Any] = []
    for n in scans:
        _plan_scan(p, n, wide, debug, loop_groups, needs)
    off = _assign_offsets(p, mat, roots)
    for n in materialized:
        kern = kernel_for(n)
        need = kern.workspace(n, wide) if kern is not None else 0  # GEMM packing, conv grids
        if p.group_of.get(n.id) in p.epilogues and n.id in p.virtual:
            # then a staging buffer of one image per thread (``codegen.lower``)
            need = sh.plus(align(need), 2 * align(stage_bytes(n)))
        if not (isinstance(need, int) and need == 0):
            needs.append(need)
    work = _max_of(needs)
    p.work_offset = off
    p.scratch_bytes = sh.plus(off, align(work))
    p.input_index = {n.id: i for i, n in enumerate(g.inputs)}
    k = 0
    for n in order:
        if n.op != "input":
            p.node_index[n.id] = k
            k += 1
    return p


def _scan_units_together(materialized: list[Node]) -> list[Node]:
    """Each scan's scan_out nodes right after the scan: the loop writes them all, so they
    are one unit (``_plan_scan``) and their buffers are live from the loop on."""
    outs: dict[int, list[Node]] = {}
    for n in materialized:
        if n.op == "scan_out":
            outs.setdefault(n.inputs[0].id, []).append(n)
    out: list[Node] = []
    for n in materialized:
        if n.op == "scan_out":
            continue
        out.append(n)
        out += outs.get(n.id, [])
    return out


def _plan_scan(p: Plan, n: Node, wide: bool, debug: bool, loop_groups: bool,
               needs: list[Any]) -> None:
    """A scan: its body planned like a step, the scan and its scan_out nodes one unit
    (the scan itself has no buffer), its workspace (body arena, carry copies) reserved."""
    from .loop import scan_layout

    body = n.attrs["body"]
    bp = plan(body, wide, debug, loop_groups=loop_groups, carries=n.attrs["carries"],
              epilogues=False)
    p.bodies[n.id] = bp
    unit = [n] + [m for m in p.materialized if m.op == "scan_out" and m.inputs[0] is n]
    gi = len(p.groups)
    p.groups.append(unit)
    for m in unit:
        p.group_of[m.id] = gi
    p.virtual.add(n.id)
    needs.append(scan_layout(n, bp)["size"])


def _max_of(xs: list[Any]) -> Any:
    """max of sizes (ints or sympy expressions), 0 for none. Symbolic terms stay an
    unevaluated ``Max``: sympy's pairwise simplification of a few dozen GEMM workspace
    expressions took a quarter of a small step's compile time, and the arena only needs
    the value at run time."""
    ints = [x for x in xs if isinstance(x, int)]
    syms = list(dict.fromkeys(x for x in xs if not isinstance(x, int)))
    if not syms:
        return max(ints, default=0)
    terms = syms + ([max(ints)] if ints else [])
    return terms[0] if len(terms) == 1 else sympy.Max(*terms, evaluate=False)


def reads_of(n: Node, mat: set[int]) -> list[Node]:
    """Buffers (materialized or input nodes) that the kernel computing ``n`` reads."""
    out: list[Node] = []
    seen: set[int] = set()
    stack = list(n.inputs)
    while stack:
        x = stack.pop()
        if x.id in seen:
            continue
        seen.add(x.id)
        if x.op == "input" or x.id in mat:
            out.append(x)
        else:
            stack.extend(x.inputs)
    return out


def _between(v: Node, old: Node, mat: set[int]) -> list[Node]:
    """The nodes ``v``'s kernel computes inline whose value depends on ``old``: the ops
    between a read of ``old`` and ``v``."""
    closure = closure_of(v, mat)
    ids = {x.id for x in closure}
    memo: dict[int, bool] = {}

    def reaches(x: Node) -> bool:
        if x is old:
            return True
        if x.id not in ids:
            return False
        if x.id not in memo:
            memo[x.id] = any(reaches(y) for y in x.inputs)
        return memo[x.id]

    return [x for x in closure if reaches(x)]


def _pointwise(v: Node, old: Node, mat: set[int]) -> bool:
    """True when every read of ``old`` in ``v``'s kernel is at ``v``'s own index (only
    elementwise ops between them), so writing ``v`` over ``old`` in place is safe."""
    return all(gops.OP_INFO[x.op].kind == "elementwise" for x in _between(v, old, mat))


def _reads_in_order(v: Node, old: Node, mat: set[int]) -> bool:
    """True when ``v``'s kernel reads ``old`` only at ``v``'s own linear index: through
    elementwise ops and reshapes that keep the first dim (a ``Conv1d``'s ``[B, C, 1, L]``
    result read as ``[B, C, L]``), so image ``n`` of ``v`` reads image ``n`` of ``old``."""
    def in_order(x: Node) -> bool:
        if gops.OP_INFO[x.op].kind == "elementwise":
            return True
        src = x.inputs[0] if x.inputs else None
        return (x.op == "reshape" and src is not None and bool(x.shape) and bool(src.shape)
                and sh.same(x.shape[0], src.shape[0]))

    return all(in_order(x) for x in _between(v, old, mat))


def _plan_direct_writes(p: Plan, mat: set[int]) -> None:
    """Let an update's kernel write straight into the state buffer when that is safe.

    Safe means: no kernel after it reads the old state, its own reads of the old state are
    pointwise, and no kernel that can fail (an index check) runs after it — so a failing step
    still changes nothing. This removes a scratch copy and a commit ``memcpy`` per update.
    """
    g = p.graph
    index = {n.id: i for i, n in enumerate(p.materialized)}
    reads = [{x.id for x in reads_of(n, mat)} for n in p.materialized]
    flags = {n.id for n in g.meta.get("finite_flags", ())}  # check_finite: may stop too
    may_fail = [i for i, n in enumerate(p.materialized)
                if n.id in flags or any(x.op in CHECKED_OPS for x in closure_of(n, mat))]
    last_fail = max(may_fail, default=-1)
    readers_of: dict[int, list[int]] = {}  # node id -> indices of the kernels reading it
    for k, r in enumerate(reads):
        for x in r:
            readers_of.setdefault(x, []).append(k)
    by_name = {n.attrs["name"]: n for n in g.inputs}
    k = p.carries
    outputs = {o.id for o in g.outputs[k:]}  # a carry's own output is its "update"
    carried = [o.id for o in g.outputs[:k]]
    every_out = {o.id for o in g.outputs}
    pairs = list(g.updates) + [(q.attrs["name"], o) for q, o in zip(g.inputs[:k],
                                                                     g.outputs[:k])]
    for j, (slot, v) in enumerate(pairs):
        i = index.get(v.id)
        if i is None or i <= last_fail or v.id in p.direct or v.id in outputs:
            continue
        if j >= len(g.updates) and (carried.count(v.id) > 1 or by_name[slot].id in every_out):
            # one value carried twice needs a buffer per carry; a carry's old value that is
            # itself a result (stacked for a reverse scan, passed on as another carry) is
            # read when the step's results are committed, after every kernel
            continue
        if v.op == "scan_out" and v.attrs["index"] >= v.inputs[0].attrs["carries"]:
            continue  # a stacked result: the loop writes it step by step, may stop half-way
        # (a final carry is copied out once, after the last step succeeded: that copy can
        # go straight to the state it updates)
        old = by_name.get(slot)
        if old is not None:
            readers = readers_of.get(old.id, [])
            if any(k > i for k in readers):
                continue
            if i in readers and not _pointwise(v, old, mat):
                continue
        p.direct[v.id] = j


def _plan_direct_outputs(p: Plan, mat: set[int]) -> None:
    """Let a result's kernel write straight into the output buffer, instead of into the
    arena with a ``memcpy`` into the output at the end.

    Only for callers whose output buffers nobody else can see until the step has returned
    (``plan``'s ``direct_outputs``: the JIT's, whose call wrapper hands the caller either
    the buffer it took for this call or a copy of one it keeps, and neither when the step
    fails), so a failing step still changes nothing visible and no output can alias an
    input. A C program's output buffers (ahead-of-time steps)
    may be its inputs too, so they are written only at the end. A result that is also an
    update (written in place into the state) or listed twice is copied as before, as is a
    loop's stacked result (``scan_out``: the loop lays out its own buffers).

    Measured on a compiled ``conv2d`` (1 -> 16 channels, 3x3, 64x64, batch 32) returning
    its 8 MiB result, AMD Zen 4: 1.46 -> 0.52 ms a call on one thread, 1.03 -> 0.29 ms on
    two. The two copies (arena to output buffer, then to the caller's array) took two
    thirds of the call, and did not speed up with a second thread."""
    for j, o in enumerate(p.graph.outputs):
        if (o.id not in mat or o.id in p.out_direct or o.id in p.direct
                or o.op == "scan_out"):
            continue
        p.out_direct[o.id] = j


def _may_fail(p: Plan, mat: set[int]) -> set[int]:
    """Ids of the kernels that may stop early: index checks, check_finite flags."""
    flags = {n.id for n in p.graph.meta.get("finite_flags", ())}
    return flags | {n.id for n in p.materialized
                    if any(x.op in CHECKED_OPS for x in closure_of(n, mat))}


def _is_scalar(n: Node) -> bool:
    return all(isinstance(d, int) and d == 1 for d in n.shape)


def _hoist_scalars(materialized: list[Node], mat: set[int]) -> list[Node]:
    """Move one-element kernels (hyperparameter casts, ``1 - dampening``, a loss divisor) to
    just after the last kernel they read: left where the topological order put them, they sit
    between the optimizer's per-tensor loops and keep those loops from merging."""
    out: list[Node] = []
    placed: set[int] = set()
    for n in materialized:
        placed.add(n.id)
        if not _is_scalar(n):
            out.append(n)
            continue
        deps = {x.id for x in reads_of(n, mat)} & placed
        at = 0
        if deps:  # just after the last one (scanning from the end: it is usually near)
            at = next(i + 1 for i in range(len(out) - 1, -1, -1) if out[i].id in deps)
        out.insert(at, n)
    return out


def _groupable(n: Node, mat: set[int], flags: set[int]) -> bool:
    """A kernel that is one plain loop over its own shape and can never stop early."""
    return (n.op not in KERNELS and (n.op in VIEW_OPS or n.op in ELEMENT_RULES)
            and n.id not in flags and not _is_scalar(n)
            and not any(x.op in CHECKED_OPS for x in closure_of(n, mat)))


def _plan_groups(p: Plan, mat: set[int]) -> None:
    """Merge runs of consecutive same-shaped elementwise kernels into one loop.

    An optimizer step is a chain of such kernels per parameter (``g + wd * p``; the momentum
    buffer, written in place; the parameter, written in place): as separate loops each pass
    streams the whole tensor through the caches again, and the value shared by two
    consumers gets a buffer of its own. In one loop every value is loaded once, a member's
    result is reused from registers by later members, and a member that only later members
    read needs no buffer at all (``Plan.virtual``).

    A kernel joins the run when it has the run's shape, every read of an earlier member is
    at its own index (only elementwise ops between them), and, if it writes a state buffer
    in place, every earlier member reads that state's old value at its own index too — so
    interleaving the loops changes no value any of them reads. Kernels that may stop early
    (index checks, check_finite flags) never join: a failing step must change nothing.
    """
    g = p.graph
    flags = {n.id for n in g.meta.get("finite_flags", ())}
    roots = {n.id for n in g.roots}
    by_name = {n.attrs["name"]: n for n in g.inputs}
    slots = p.slots
    reads = {n.id: {x.id for x in reads_of(n, mat)} for n in p.materialized}

    def fits(run: list[Node], n: Node) -> bool:
        first = run[0]
        if len(n.shape) != len(first.shape) or not all(
                sh.same(a, b) for a, b in zip(n.shape, first.shape)):
            return False
        for e in run:
            if e.id in reads[n.id] and not _pointwise(n, e, mat):
                return False
        if n.id in p.direct:
            old = by_name.get(slots[p.direct[n.id]])
            if old is not None and any(old.id in reads[e.id] and not _pointwise(e, old, mat)
                                       for e in run):
                return False
        return True

    runs: list[list[Node]] = []
    cur: list[Node] = []
    for n in p.materialized:
        if n.id not in p.group_of and _groupable(n, mat, flags):
            if cur and fits(cur, n):
                cur.append(n)
                continue
            runs.append(cur)
            cur = [n]
        else:
            runs.append(cur)
            cur = []
    runs.append(cur)
    readers_of: dict[int, list[int]] = {}  # node id -> ids of the kernels reading it
    for n in p.materialized:
        for x in reads[n.id]:
            readers_of.setdefault(x, []).append(n.id)
    for run in runs:
        if len(run) < 2:
            continue
        gi = len(p.groups)
        p.groups.append(run)
        ids = {m.id for m in run}
        for m in run:
            p.group_of[m.id] = gi
        for m in run:
            if m.id in roots or m.id in p.direct:
                continue
            readers = readers_of.get(m.id, [])
            if readers and all(r in ids for r in readers):
                p.virtual.add(m.id)


EPILOGUE_CONVS = ("conv2d", "conv2d_input_grad")


def stage_bytes(n: Node) -> Any:
    """Bytes of one image of convolution ``n``'s result: what a thread's staging buffer
    holds when ``n`` has an epilogue (``_plan_conv_epilogues``)."""
    return sh.numel(tuple(n.shape[1:])) * n.dtype.itemsize


def _plan_conv_epilogues(p: Plan, mat: set[int]) -> None:
    """Give a convolution the elementwise kernel that alone reads its result as an epilogue.

    A convolution's result is usually read once, by an elementwise kernel of its own shape:
    the bias and ReLU after a ``Conv2d``, an eval-mode BatchNorm (a per-channel scale and
    shift) with the block's residual and ReLU, the ReLU mask on an input gradient. As two
    kernels, the convolution writes its whole result to memory and the next kernel streams
    it back. As one, the convolution's kernel stages each image's result and runs the
    consumer over that image into the consumer's buffer while the image is still in the
    cache (``codegen.conv``; the consumer's loop is an O3 kernel of its own, called through
    a pointer, ``codegen.lower``): the convolution's buffer is gone and its result is read
    from cache instead of memory. oneDNN's post-ops and cuDNN's fused
    convolution-bias-activation do the same.

    Planned before the channel groups: in a ResNet's backward the input gradient's reader
    is the ReLU mask with the residual gradient added, the first member such a group would
    take; as the input gradient's epilogue it no longer writes and re-reads that gradient,
    and the group keeps the BatchNorm sums and ``dx`` (ResNet-18 step, Zen 4, A/B in one
    process: 1.1-1.4 % faster on one thread, unchanged on two).

    The pair ``[conv, consumer]`` becomes a group (the conv ``virtual``), the consumer moved
    to just after the conv. Only when that changes no value: the consumer is the conv's only
    reader, reads it at its own index (through elementwise ops and reshapes that keep the
    batch first: ``_reads_in_order``), writes no state in place and may not stop, and every
    other buffer it reads is ready before the conv runs.
    """
    g = p.graph
    flags = {n.id for n in g.meta.get("finite_flags", ())}
    roots = {n.id for n in g.roots}
    index = {n.id: i for i, n in enumerate(p.materialized)}
    reads = {n.id: reads_of(n, mat) for n in p.materialized}
    readers: dict[int, list[Node]] = {}
    for n in p.materialized:
        for x in reads[n.id]:
            readers.setdefault(x.id, []).append(n)
    aliased = set(p.aliases.values())
    pairs: list[tuple[Node, Node]] = []
    for c in p.materialized:
        if (c.op not in EPILOGUE_CONVS or c.id in roots or c.id in p.direct
                or c.id in p.group_of or c.id in aliased or not c.dtype.is_float):
            continue
        rd = readers.get(c.id, [])
        if len(rd) != 1:
            continue
        e = rd[0]
        if (e.id in p.group_of or e.id in p.direct or e.dtype != c.dtype
                or not _groupable(e, mat, flags) or not e.shape
                or not sh.same(e.shape[0], c.shape[0])
                or not sh.same(sh.numel(tuple(e.shape[1:])), sh.numel(tuple(c.shape[1:])))
                or not _reads_in_order(e, c, mat)):
            continue
        if any(x is not c and x.op != "input" and index[x.id] > index[c.id]
               for x in reads[e.id]):
            continue  # a buffer it reads is computed after the conv
        pairs.append((c, e))
    if not pairs:
        return
    moved = {e.id for _, e in pairs}
    after = {c.id: e for c, e in pairs}
    order: list[Node] = []
    for n in p.materialized:
        if n.id in moved:
            continue
        order.append(n)
        if n.id in after:
            order.append(after[n.id])
    p.materialized[:] = order
    for c, e in pairs:
        gi = len(p.groups)
        p.groups.append([c, e])
        p.group_of[c.id] = p.group_of[e.id] = gi
        p.virtual.add(c.id)
        p.epilogues.add(gi)


def _provably_ge(a: Any, b: Any) -> bool:
    """a >= b for every positive value of the symbols (polynomials with nonneg coefficients)."""
    d = sympy.expand(sympy.sympify(a) - sympy.sympify(b))
    if d.is_number:
        return bool(d >= 0)
    poly = d.as_poly()
    return poly is not None and all(c >= 0 for c in poly.coeffs())


class _SizeOrder:
    """``_provably_ge`` for many pairs drawn from few sizes, without sympy in the loop.

    Each distinct size is expanded once into its coefficients per monomial (``None`` when it
    is not a polynomial in its generators, as ``as_poly`` decides); ``a >= b`` is provable
    when every coefficient of ``a - b`` is non-negative, which is the same test as
    ``_provably_ge`` with the subtraction done on dictionaries. Memory planning asks it
    O(buffers x free blocks) times: ~76,000 questions for a 12-layer GPT step, 34 s through
    sympy, well under 0.1 s this way."""

    def __init__(self) -> None:
        self._coeffs: dict[Any, dict[Any, Any] | None] = {}
        self._pairs: dict[tuple[Any, Any], bool] = {}  # few sizes, asked about many times

    def coeffs(self, e: Any) -> dict[Any, Any] | None:
        c = self._coeffs.get(e, False)
        if c is False:
            x = sympy.expand(sympy.sympify(e))
            if x.is_number:
                c = {sympy.S.One: x}
            elif x.as_poly() is None:
                c = None
            else:
                c = dict(x.as_coefficients_dict())
            self._coeffs[e] = c
        return c

    def ge(self, a: Any, b: Any) -> bool:
        r = self._pairs.get((a, b))
        if r is None:
            ca, cb = self.coeffs(a), self.coeffs(b)
            if a == b:
                r = True
            elif ca is None or cb is None:
                r = _provably_ge(a, b)
            else:
                r = all(ca.get(m, 0) - cb.get(m, 0) >= 0 for m in ca.keys() | cb.keys())
            self._pairs[(a, b)] = r
        return r


def _assign_offsets(p: Plan, mat: set[int], roots: set[int]) -> Any:
    """Memory planning: buffers get arena offsets, reusing space whose last reader has run.

    A buffer is live from its kernel until the last kernel that reads it (outputs and state
    updates stay live to the end: they are committed after the last kernel). A freed block is
    reused by a later buffer that provably fits in it for every value of the batch symbols.
    Returns the arena size before the GEMM workspace.
    """
    index = {n.id: i for i, n in enumerate(p.materialized)}
    end = len(p.materialized)
    # a loop group runs its members interleaved: what any member reads stays live to the
    # group's last member, and no member reuses a block freed inside the group
    first_of = {n.id: index[grp[0].id] for grp in p.groups for n in grp}
    last_of = {n.id: index[grp[-1].id] for grp in p.groups for n in grp}
    last = {n.id: (end if n.id in roots else last_of.get(n.id, index[n.id]))
            for n in p.materialized}
    for i, n in enumerate(p.materialized):
        for x in reads_of(n, mat):
            if x.id in last and x.id not in roots:
                last[x.id] = max(last[x.id], last_of.get(n.id, i))
    # First fit: a new buffer takes the earliest freed block that fits. Freed blocks are kept
    # per size (few distinct sizes, each a queue in freeing order) and live ones in a heap by
    # last use, so each buffer costs O(distinct sizes + log live), not a scan of every live
    # and free block (0.5 s of planning a 12-layer GPT step). Same choices as the scans.
    order = _SizeOrder()
    free: dict[Any, deque[tuple[int, Any]]] = {}  # size -> (freed seq, offset), oldest first
    live: list[tuple[int, int, Any, Any]] = []  # heap of (last use, live seq, offset, size)
    seq = 0
    top: Any = 0
    for i, n in enumerate(p.materialized):
        start = first_of.get(n.id, i)
        done = []
        while live and live[0][0] < start:
            done.append(heapq.heappop(live))
        for _, _, o, sz in sorted(done, key=lambda e: e[1]):  # in the order they went live
            free.setdefault(sz, deque()).append((seq, o))
            seq += 1
        if n.id in p.direct or n.id in p.virtual or n.id in p.out_direct:
            continue  # written straight into its state or output buffer, or never stored
        need = align(nbytes(n))
        pick = None
        for sz, q in free.items():
            if q and (pick is None or q[0][0] < free[pick][0][0]) and order.ge(sz, need):
                pick = sz
        if pick is not None:
            o, sz = free[pick].popleft()[1], pick
        else:
            o, sz = top, need
            top = sh.plus(top, need)
        p.offsets[n.id] = o
        heapq.heappush(live, (last[n.id], seq, o, sz))
        seq += 1
    p.no_reuse_bytes = sh.plus(*(align(nbytes(n)) for n in p.materialized
                                 if n.id not in p.virtual))
    return top
