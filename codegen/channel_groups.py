"""Channel groups: a normalisation's reductions and elementwise passes run channel by channel
(batch norm), or row by row (row groups: LayerNorm, a softmax's rows).

Batch norm over an ``[N, C, H, W]`` activation is a run of whole-tensor passes with
per-channel reductions between them. Forward (batch statistics): ``sum(x)``, the mean,
``sum((x - mean)^2)``, the variance, then ``relu(x * scale + shift)``: three reads of ``x``.
Backward (the closed form of ``graphc/nn/_fnorm.py``, after a ReLU): the masked gradient
``g = where(y <= 0, 0, dy)``, ``sum(g * (x - mean))``, ``sum(g)``, then ``dx``: ``g`` is
written once and read three times, ``x`` read twice. As separate kernels each pass streams
the whole tensor (8 MB for ResNet-18's first stage at batch 32) from memory again.

A channel group runs such a run of kernels with the channel loop outermost: for each channel
(the two threads take halves of the channels), its members in *passes* over that channel's
``N x H x W`` elements. A pass computes every elementwise member whose operands are ready
and accumulates every reduction whose input is; a member that reads a reduction (or a
per-channel value computed from one) starts the next pass, after the reductions of the
channel are complete and its per-channel members (the mean, ``1 / sqrt(var + eps)``) are
computed. So the backward above is two passes (the mask, both sums; then ``dx``) and the
forward three, and later passes of a channel read its slab while it is still in L2 (one
channel of ResNet-18's second stage at batch 32 is 128 KB per tensor).

Which runs qualify (``plan_channel_groups``): consecutive kernels of the plan that are
elementwise kernels of one shape ``S`` (rank 3 or more, channels on axis 1), float ``sum``
reductions of an ``S``-shaped input over every axis but 1 (kept), and elementwise kernels of
the reduced shape ``[1, C, 1, ...]``; every read of an earlier member must be at the
reader's own index (elementwise ops only in between) or, for a reduced-shape member, at the
reader's channel (elementwise ops and one ``expand`` of the reduced shape). Kernels that
may stop early (index checks, ``check_finite`` flags) and in-place state updates never
join. A run needs a reduction and another member. Every member keeps its buffer.

Row groups (``rows``) are the same plan for reductions over the last dim: consecutive
kernels that are elementwise of one shape ``S`` (rank 2 or more), float ``sum`` reductions of
an ``S``-shaped input over the last dim (kept), and elementwise kernels of that reduced shape,
read as above (at the reader's index, or at its row through an ``expand``), tried where no
channel group starts. LayerNorm's forward (``sum(h)``, ``h - mean``, ``sum((h - mean)^2)``,
``1 / sqrt(var + eps)``, the normalised and affine values) is three passes over each row, its
backward (both sums, then ``dx``) two. The kernel loops over the leading dims (the first
that is not known to be 1 split between the threads: ``row_split_dim``) and runs each pass
over the row at its exact index, so no flat run is needed and any view reads right; a row is
a few KB, so its later passes read it from L1. Measured on a Zen 4 core: a LayerNorm over
``[16, 256, 768]`` trained (forward, backward, SGD) 4.9-5.1 -> 3.1-3.4 ms a step; at 64
features (the GPT benchmark's) its separate kernels were L1-resident already, no change.

Values: elementwise members compute exactly what their own kernels compute. The sums add
blocked and pairwise (``reduce.cascade_sums``), as the ``sum`` kernel adds an expression over
``(n, h, w)``; a sum of a buffer, which that kernel reads as runs of ``h * w``, may round
differently in the last bits. Each channel is computed whole by one thread: results are
bit-identical for any thread count (a row likewise). A row's sum that fits one block is
one loop, as the ``sum`` kernel adds a last dim; a longer one blocked and pairwise.
``options.CHANNEL_GROUPS = False`` (``GRAPHC_CHANNEL_GROUPS=0``) plans no channel or row
groups, to compare.

Vector runs (``vector_group``, ``_vector_pass``). A channel group whose full-shaped members
and sums' inputs are float32 arithmetic, compares, ``where``, ``sqrt``/``abs``/``maximum``,
``fma`` and small constant powers (``vector_runs.op_ok``) over float32 buffers is written
in vectors of 16 (``LANES``) and compiled at the tile level (SROA, instcombine,
simplifycfg: no loop vectoriser, no LICM):
- every read is contiguous along the run or per channel (the plan's ``_flat``), so a read
  that depends on the run index is a vector load from the run's start (computed before the
  loop, ``KernelEmitter._run_address``) and one that does not is loaded and broadcast once
  before the loop (``KernelEmitter.hoist``); elementwise rules run on vectors
  (``emit.VectorEmit``); the last elements of a run (fewer than 16) run as scalars;
- a sum keeps ``reduce.cascade_sums``'s blocks of 2048 and pairwise combination; inside a
  block, two running vectors (two chains of additions, so the adder's latency overlaps),
  added together and across lanes at the block's end, then the scalar tail.
Why: LLVM's O3 pipeline (its loop vectoriser and what it needs) was most of the channel
groups' compile time, five times a tile module's per line of IR. Measured on an Ice Lake
Xeon (2 vCPU), ResNet-18's nine channel-group modules: 0.99-1.05 s of LLVM CPU at O3,
0.30-0.38 s written in vectors at the tile level (the entry module included in both); the
cold compile of the step took 0.8-1.3 CPU-s and 0.4-0.7 s less in three alternating pairs;
the step's channel and loop groups ran in 176M time-stamp ticks against 187M (one thread,
the minimum of three runs per kernel), the step as a whole within noise. Values equal the
scalar runs' up to the sums' order of addition (a few ulps: ``tests/test_vector_channel_groups
.py``), and are bit-identical for one and two threads as before (a channel is one thread's).
Any other op (a vector-math routine: ``exp``, ``sigmoid``...) keeps the group's runs scalar,
at O3. ``GRAPHC_VECTOR_CHANNEL_GROUPS=0`` keeps every group scalar, to compare.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import ops as gops
from graphc.ir import shapes as sh

from . import options
from .elementwise import ELEMENT_RULES
from .emitter import KernelEmitter
from .families import KERNELS
from .llvm_util import I32, REDUCE_FLAGS, fconst, for_range, i64, reg_type
from .reduce import cascade_sums, fits_one_block
from .vector_runs import LANES, op_ok
from .views import VIEW_OPS

FULL, RED, CHAN = "full", "red", "chan"
# the shortest known row a row group takes: a row's passes are loops of their own, and rows
# of two are all loop overhead where separate kernels run their elementwise parts over the
# whole tensor at once. A LayerNorm trained over 256K elements, one Zen 4 thread, separate
# kernels -> row group: 2 features 0.97 -> 1.40 ms, 4: 0.43 -> 0.39, 8 and 16 even, 256:
# 0.13-0.14 -> 0.11 (at 32, 0.14 -> 0.16: each row is one chain of horizontal sums and a
# square root, and the separate kernels' elementwise parts ran over the whole tensor)
ROW_MIN = 4


def _kind(n: Node, full: tuple | None, rows: bool = False) -> tuple[str, tuple] | None:
    """(kind, full shape) of a kernel that may be a member of a channel group (``rows``:
    of a row group), else None."""
    if n.op == "sum" and n.dtype in (dt.float32, dt.float64):
        x = n.inputs[0]
        nd = len(x.shape)
        kept = set(range(nd - 1)) if rows else {1}
        if (nd >= (2 if rows else 3) and x.dtype is n.dtype and len(n.shape) == nd
                and set(n.attrs["axes"]) == set(range(nd)) - kept
                and _wide(x.shape, rows)
                and (full is None or _same(x.shape, full))):
            return RED, tuple(x.shape)
        return None
    if n.op in KERNELS or n.op in VIEW_OPS or n.op not in ELEMENT_RULES:
        return None
    if full is None:
        nd = len(n.shape)
        if nd >= (2 if rows else 3) and _wide(n.shape, rows):
            return FULL, tuple(n.shape)
        return None
    if _same(n.shape, full):
        return FULL, full
    if _same(n.shape, _reduced(full, rows)):
        return CHAN, full
    return None


def _wide(shape: tuple, rows: bool) -> bool:
    """Whether a group's full shape has channels (not 1), or rows of at least ``ROW_MIN``
    (a symbolic last dim counts as long)."""
    if not rows:
        return not sh.same(shape[1], 1)
    d = shape[-1]
    return not (isinstance(d, int) or getattr(d, "is_Integer", False)) or int(d) >= ROW_MIN


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(sh.same(x, y) for x, y in zip(a, b))


def _reduced(full: tuple, rows: bool = False) -> tuple:
    """The shape of a group's reductions: per channel (``[1, C, 1, ...]``), or per row
    (``rows``: ``full`` with its last dim 1)."""
    if rows:
        return (*full[:-1], 1)
    return tuple(d if i == 1 else 1 for i, d in enumerate(full))


def _reads_ok(root: Node, e: Node, e_kind: str, full: tuple, mat: set[int],
              rows: bool = False) -> bool:
    """Whether every read of member ``e`` in the inline cone of ``root`` (a value at some
    index of ``full``, or of the reduced shape) is at that index (``e`` of the same shape:
    elementwise ops only on the way) or at its channel (``e`` of the reduced shape:
    elementwise ops and expands of the reduced shape to the full one)."""
    red = _reduced(full, rows)
    memo: dict[int, bool] = {}

    def reaches(x: Node) -> bool:
        if x is e:
            return True
        if x.op == "input" or (x.id in mat and x is not root):
            return False
        if x.id not in memo:
            memo[x.id] = any(reaches(y) for y in x.inputs)
        return memo[x.id]

    seen: set[int] = set()
    stack = [root]
    while stack:
        x = stack.pop()
        if x is e or x.id in seen or not reaches(x):
            continue
        seen.add(x.id)
        if x.op == "expand":
            if e_kind == FULL or not (_same(x.inputs[0].shape, red) and _same(x.shape, full)):
                return False
        elif x is not root and gops.OP_INFO[x.op].kind != "elementwise":
            return False
        elif x is root and x.op not in ELEMENT_RULES:
            return False
        stack.extend(x.inputs)
    return True


def _flat(root: Node, full: tuple, mat: set[int]) -> bool:
    """Whether the value of ``root`` (of shape ``full``) can be computed at the index
    ``(n, c, 0, ..., j)``, ``j`` running over the trailing dims as one run: every buffer
    its inline cone reads at the full shape is contiguous, everything else is broadcast
    through an ``expand`` from a shape whose trailing dims are 1 (those indices are 0 there
    either way), and nothing between reads an index but through those (no views, no
    ``iota``)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        x = stack.pop()
        if x.id in seen:
            continue
        seen.add(x.id)
        if x is not root and (x.op == "input" or x.id in mat):
            if not (_same(x.shape, full) or all(sh.same(d, 1) for d in x.shape[2:])):
                return False
            continue
        if x.op == "expand":
            if not all(sh.same(d, 1) for d in x.inputs[0].shape[2:]):
                return False
            continue
        if x.op in ("const",):
            continue
        if (x.op not in ELEMENT_RULES or x.op in ("iota", "gather")
                or gops.OP_INFO[x.op].kind != "elementwise" or not _same(x.shape, full)):
            return False
        stack.extend(x.inputs)
    return True


def plan_channel_groups(p: Any, mat: set[int], may_fail: set[int],
                        reads: dict[int, list[Node]]) -> None:
    """Find the channel groups and row groups of plan ``p`` (see the module docstring) and
    record them as groups (``p.groups``, ``p.group_of``) with each member's pass
    (``p.passes``), the row groups' indices in ``p.row_groups``. ``may_fail``: ids of
    kernels that may stop early; ``reads``: the buffers each kernel reads
    (``planning.reads_of``)."""
    i = 0
    seq = p.materialized
    while i < len(seq):
        rows = False
        run, phases = _grow(seq, i, p, mat, may_fail, reads)
        if len(run) < 2:
            rows = True
            run, phases = _grow(seq, i, p, mat, may_fail, reads, rows=True)
        if len(run) >= 2:  # (a run holds a sum)
            gi = len(p.groups)
            p.groups.append(run)
            p.passes[gi] = phases
            if rows:
                p.row_groups.add(gi)
            for m in run:
                p.group_of[m.id] = gi
            i += len(run)
        else:
            i += 1


def _grow(seq: list[Node], i: int, p: Any, mat: set[int], may_fail: set[int],
          reads: dict[int, list[Node]], rows: bool = False) -> tuple[list[Node], list[int]]:
    """The longest run of kernels from ``seq[i]`` that can be one channel group (``rows``:
    one row group), with each member's pass (no run without a sum). A member's pass is the
    latest of the passes its reads need: a full-shaped member read at the same index, the
    same pass (its value is in a register); a sum or a per-channel (per-row) value, the pass
    after the one that completes it. Passes never go back along the run, so the members
    keep their order."""
    run: list[Node] = []
    kinds: list[str] = []
    phases: list[int] = []
    full: tuple | None = None
    cur = 0
    for n in seq[i:]:
        if n.id in may_fail or n.id in p.direct or n.id in p.group_of:
            break
        got = _kind(n, full, rows)
        if got is None or (not run and got[0] == CHAN):
            break
        kind, full = got
        root = n.inputs[0] if kind == RED else n
        if kind == RED and (root.op == "input" or root.id in mat):
            if not _same(root.shape, full):  # a sum of a buffer: contiguous
                break
        elif kind != CHAN and not rows and not _flat(root, full, mat):
            break
        index = {m.id: j for j, m in enumerate(run)}
        phase = cur
        ok = True
        for x in reads[n.id]:
            j = index.get(x.id)
            if j is None:
                continue
            ek = kinds[j]
            if kind == CHAN and ek == FULL:
                ok = False
                break
            if kind == RED and root is x:
                phase = max(phase, phases[j])
                continue
            if not _reads_ok(root, x, ek, full, mat, rows):
                ok = False
                break
            if kind == CHAN:
                phase = max(phase, phases[j])
            else:
                phase = max(phase, phases[j] + (0 if ek == FULL else 1))
        if not ok:
            break
        run.append(n)
        kinds.append(kind)
        phases.append(phase)
        cur = phase
    # a run must hold a reduction (else it is an ordinary loop group's business)
    while run and RED not in kinds:
        run.pop()
        kinds.pop()
        phases.pop()
    return run, phases


def full_shape(unit: list[Node]) -> tuple:
    """The full shape a channel group's passes run over."""
    for m in unit:
        if m.op == "sum":
            return tuple(m.inputs[0].shape)
    return tuple(unit[0].shape)


def run_dim(full: tuple) -> int:
    """The dim a pass's flat index ``j`` (over all trailing dims) is put in: the last one
    whose size is not 1. Every other trailing index is 0, as the loops of other kernels
    give a size-1 dim, so views read them alike: an ``expand`` passes a size-1 dim's index
    through to its source, and a ``j`` there (the last dim, when it is 1) read a
    per-channel value ``j`` elements past the channel's (batch norm over ``W = 1`` maps
    trained wrong)."""
    for d in range(len(full) - 1, 1, -1):
        if not sh.same(full[d], 1):
            return d
    return len(full) - 1


def emit_channel_group(k: KernelEmitter, phases: list[int], rows: bool = False) -> None:
    """One kernel for a channel group: for each channel (``k.split_range``: a thread's
    share of the channels), its passes in order (``phases``: each member's pass). A row
    group (``rows``): for each row (the thread's share along ``row_split_dim``, every index
    of the other leading dims), its passes over the row's last dim."""
    members = k.members
    full = full_shape(members)
    b = k.b
    for m in members:  # later passes read earlier members from their buffers
        if m.id in k.outs:
            k.ptr[m.id] = k.outs[m.id]
    t = reg_type(next(m for m in members if m.op == "sum").dtype)
    if rows:
        _emit_rows(k, phases, full, t)
        return
    lo, hi = k.split_range if k.split_range is not None else (i64(0), k.sym(full[1]))
    # the trailing dims as one run of h * w elements at index (n, c, 0, .., j, .., 0) (``j``
    # in ``run_dim``): every value read is contiguous there or broadcast from a per-channel
    # one (``_flat``)
    run = k.sym(sh.numel(full[2:]))

    lanes = LANES if vector_group(k, members) else 0
    if lanes:
        k.level = "tile"  # every run written in vectors: nothing left for O3 to vectorise
    nd = len(full)
    with for_range(b, lo, hi, name="chan") as c:
        k.record_var(c, full[1])
        idx: list[Any] = [i64(0)] * nd
        idx[1] = c
        at_c = [i64(0) if d != 1 else c for d in range(nd)]

        def images(body: Any) -> None:
            with for_range(b, i64(0), k.sym(full[0]), name="img") as n:
                k.record_var(n, full[0])
                idx[0] = n
                body()

        for ph in sorted(set(phases)):
            here = [m for m, q in zip(members, phases) if q == ph]
            _emit_pass(k, idx, run_dim(full), at_c, images, here, full, t, run,
                       lanes=lanes)
    k.cache.clear()
    k.node = members[0]
    k.out = k.outs.get(members[0].id)


def _emit_pass(k: KernelEmitter, idx: list[Any], inner: int, at_red: list[Any],
               outer: Any, here: list[Node], full: tuple, t: ir.Type, run: ir.Value,
               plain: bool = False, lanes: int = 0) -> None:
    """One pass of a group over one channel or row: its full-shaped members computed and
    stored at each index (``idx`` with ``j`` in dim ``inner``, inside ``outer``'s loops over
    the other reduced dims: a channel's images, nothing for a row), its sums accumulated
    there and stored at ``at_red``, then its reduced-shape members computed there.
    ``plain``: the sums take one loop each (a row that fits one block), else blocked and
    pairwise (``reduce.cascade_sums``). ``lanes``: the run in vectors of that many elements
    and a scalar tail (``_vector_pass``; the group passed ``vector_group``)."""
    b = k.b
    sums = [m for m in here if m.op == "sum"]
    elem = [m for m in here if m.op != "sum" and _same(m.shape, full)]
    reduced = [m for m in here if m.op != "sum" and not _same(m.shape, full)]

    def store(m: Node, at: list[Any], v: ir.Value) -> None:
        k.node, k.out = m, k.outs[m.id]
        k.store_out(at, v)

    def values(j: ir.Value) -> list[ir.Value]:
        k.cache.clear()
        at = list(idx)
        at[inner] = j
        for m in elem:
            k.node, k.out = m, k.outs[m.id]
            v = k.splat(k.compute(m, at))
            k.cache[m.id] = v
            store(m, at, v)
        out = [k.splat(k.value(m.inputs[0], at)) for m in sums]
        k.cache.clear()
        return out

    if lanes:
        for m, v in zip(sums, _vector_pass(k, lanes, idx, outer, run, values, sums, elem, t)):
            store(m, at_red, v)
    elif sums and plain:
        parts = [k.alloca(t) for _ in sums]
        for q in parts:
            b.store(fconst(t, 0.0), q)
        with for_range(b, i64(0), run, name="run") as j:
            k.record_var(j, run)
            for q, v in zip(parts, values(j), strict=True):
                b.store(b.fadd(b.load(q), v, flags=REDUCE_FLAGS), q)
        for m, q in zip(sums, parts):
            store(m, at_red, b.load(q))
    elif sums:
        totals = cascade_sums(k, t, outer, run, values, len(sums))
        for m, v in zip(sums, totals):
            store(m, at_red, v)
    elif elem:
        def plane() -> None:
            with for_range(b, i64(0), run, name="run") as j:
                k.record_var(j, run)
                values(j)

        outer(plane)
    for m in reduced:
        k.cache.clear()
        store(m, at_red, k.compute(m, at_red))


# -- vector runs (``codegen.vector_runs``: the ops they take, their width) -----------------


def vector_group(k: KernelEmitter, members: list[Node]) -> bool:
    """Whether every run of a channel group can be written in vectors: float32 throughout,
    every full-shaped member and every sum's input computed from ``vector_runs.VECTOR_OPS``
    (``vector_runs.op_ok``) over float32 buffers. What makes the vector loads right is the
    plan's (``_flat``): every buffer a channel group reads at the full shape is read
    contiguously along the run, everything else is broadcast per channel, so a read either
    depends on the run index with stride 1 (a vector load) or not at all (a scalar,
    broadcast). Per-channel members are computed between the passes as scalars, whatever
    their ops."""
    if not options.VECTOR_CHANNEL_GROUPS or k.debug:
        return False
    full = full_shape(members)
    member_ids = {m.id for m in members}
    todo: list[tuple[Node, bool]] = []  # (node, computed here rather than read)
    for m in members:
        if m.op == "sum":
            if m.dtype is not dt.float32:
                return False
            todo.append((m.inputs[0], False))
        elif _same(m.shape, full):
            todo.append((m, True))
    seen: set[tuple[int, bool]] = set()
    while todo:
        n, own = todo.pop()
        if (n.id, own) in seen:
            continue
        seen.add((n.id, own))
        if not own and (n.id in member_ids or k._is_buffer(n)):
            if n.dtype is not dt.float32:  # read from a buffer: floats only
                return False
            continue
        if not op_ok(n) or (own and n.dtype is not dt.float32):
            return False  # (a member stored from vectors: float32, not a compare's bools)
        todo.extend((x, False) for x in n.inputs)
    return True


def _hsum(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A vector's lanes added: halves added until one lane is left."""
    n = v.type.count
    undef = ir.Constant(v.type, None)
    while n > 1:
        h = n // 2
        lo = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, h), list(range(h))))
        hi = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, h), list(range(h, n))))
        v, n = b.fadd(lo, hi), h
        undef = ir.Constant(v.type, None)
    return b.extract_element(v, ir.Constant(I32, 0))


def _vector_pass(k: KernelEmitter, lanes: int, idx: list[Any], outer: Any, run: ir.Value,
                 values: Any, sums: list[Node], elem: list[Node], t: ir.Type
                 ) -> list[ir.Value]:
    """A pass's loops with the run in vectors: ``values(j)`` emitted once with
    ``k.lanes`` set (``lanes`` elements from ``j``), once as scalars for the tail of fewer
    than ``lanes``. The sums are ``reduce.cascade_sums``'s (blocks of ``BLOCK`` elements,
    pairwise between blocks), each block summed here: two running vectors, added together
    and across lanes at the block's end, then the block's scalar tail. Returns the sums'
    totals."""
    b = k.b

    def vector_end(lo: ir.Value, hi: ir.Value) -> ir.Value:
        return b.add(lo, b.and_(b.sub(hi, lo), i64(-lanes)))

    def vector_values(j: ir.Value, before: ir.Block) -> list[ir.Value]:
        # the indices around the run (image, channel) are defined before its loop
        k.lanes, k.lane_var, k.hoist = lanes, j, (before, tuple(idx))
        try:
            return values(j)
        finally:
            k.lanes, k.lane_var, k.hoist = 0, None, None

    def add(slots: list[ir.Value], vals: list[ir.Value]) -> None:
        for q, v in zip(slots, vals, strict=True):
            b.store(b.fadd(b.load(q), v, flags=REDUCE_FLAGS), q)

    if not sums:
        def plane() -> None:
            end = vector_end(i64(0), run)
            before = b.block
            with for_range(b, i64(0), end, name="vrun", step=i64(lanes)) as j:
                k.record_var(j, run)
                vector_values(j, before)
            with for_range(b, end, run, name="run") as j:
                k.record_var(j, run)
                values(j)

        if elem:
            outer(plane)
        return []
    vt = ir.VectorType(t, lanes)
    # two running sums per sum, so that consecutive vectors' additions overlap (one chain
    # of dependent additions would wait out the adder's latency at every vector)
    vpart = [(k.alloca(vt), k.alloca(vt)) for _ in sums]

    def block_sums(c0: ir.Value, hi: ir.Value, part: list[ir.Value]) -> None:
        end = vector_end(c0, hi)
        pairs = b.add(c0, b.and_(b.sub(end, c0), i64(-2 * lanes)))
        for vp in vpart:
            for q in vp:
                b.store(ir.Constant(vt, [0.0] * lanes), q)
        before = b.block
        with for_range(b, c0, pairs, name="vrun", step=i64(2 * lanes)) as j:
            k.record_var(j, run)
            add([vp[0] for vp in vpart], vector_values(j, before))
            j2 = b.add(j, i64(lanes))
            k.record_var(j2, run)
            add([vp[1] for vp in vpart], vector_values(j2, before))
        with b.if_then(b.icmp_signed("<", pairs, end)):  # one vector more
            add([vp[0] for vp in vpart], vector_values(pairs, b.block))
        for p, vp in zip(part, vpart):
            b.store(_hsum(b, b.fadd(b.load(vp[0]), b.load(vp[1]))), p)
        with for_range(b, end, hi, name="run") as j:
            k.record_var(j, run)
            add(part, values(j))

    return cascade_sums(k, t, outer, run, values, len(sums), block_sums=block_sums)


def row_split_dim(full: tuple) -> int:
    """The dim a row group's rows are split by between the threads: the first leading dim
    not known to be 1 (``[1, T, C]`` splits its ``T`` rows)."""
    return next((d for d in range(len(full) - 1) if not sh.same(full[d], 1)), 0)


def _emit_rows(k: KernelEmitter, phases: list[int], full: tuple, t: ir.Type) -> None:
    """A row group's loops over the leading dims, ``row_split_dim`` over this thread's
    share (``k.split_range``), and in each row the passes in order, each a loop over the
    last dim at the row's exact index (every member's read of another is at its own index
    or at its row's: ``_reads_ok``)."""
    members = k.members
    b = k.b
    nd = len(full)
    sd = row_split_dim(full)
    run = k.sym(full[-1])
    idx: list[Any] = [i64(0)] * nd

    def leading(d: int) -> None:
        if d == nd - 1:
            at_row = [*idx[:nd - 1], i64(0)]
            for ph in sorted(set(phases)):
                here = [m for m, q in zip(members, phases) if q == ph]
                _emit_pass(k, list(idx), nd - 1, at_row, lambda body: body(), here, full,
                           t, run, plain=fits_one_block(full[-1]))
            return
        if d == sd and k.split_range is not None:
            lo, hi = k.split_range
        elif sh.same(full[d], 1):
            idx[d] = i64(0)
            leading(d + 1)
            return
        else:
            lo, hi = i64(0), k.sym(full[d])
        with for_range(b, lo, hi, name=f"row{d}") as i:
            idx[d] = i
            k.record_var(i, full[d])
            leading(d + 1)

    leading(0)
    k.cache.clear()
    k.node = members[0]
    k.out = k.outs.get(members[0].id)


__all__ = ["plan_channel_groups", "emit_channel_group", "full_shape", "row_split_dim"]
