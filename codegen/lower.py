"""Lowering an optimized Graph to one LLVM function (shared by the JIT and AOT paths).

Plan: a node gets its own buffer (is *materialized*) when it is a reduction, a matmul, a
scatter, a graph output or update, or when its value is used by more than one consumer; every
other node is an *expression* that its consumer recomputes inline at each index, so chains of
elementwise ops, broadcasts, transposes and reshapes fuse into their consumer's loop. Movement
ops never copy: they remap the index vector (or, over a buffer, its strides).

Each materialized node becomes a kernel (an internal function whose buffer arguments are
``noalias``, so LLVM vectorises without run-time alias checks); the entry function
``<name>(i8** table) -> i32`` reads the pointer table, checks that the scratch arena is large
enough for the run-time shapes, runs the kernels in order and only then commits outputs and
state updates (``memcpy``), so an error found by a kernel (an out-of-range class index) returns
a non-zero code with no state modified.

Table layout: ``[syms, scratch, scratch_info, err, inputs..., outputs..., updates...]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import sympy
from llvmlite import ir

from graphc.ir import Graph, Node
from graphc.ir import dtypes as dt
from graphc.ir import ops as gops
from graphc.ir import shapes as sh

from . import conv as conv_lowering
from . import pool as pool_lowering
from . import reduce as reduce_lowering
from .abi import (  # noqa: F401  (re-exported until every user imports abi)
    ALIGN,
    ERR_BOUNDS,
    ERR_INDEX,
    ERR_NONFINITE,
    ERR_OK,
    ERR_SCRATCH,
    PROFILE_SYMBOL,
    RUN2_SYMBOL,
    TABLE_FIXED,
)
from .elementwise import ELEMENT_RULES
from .gemm import choose_tile, emit_gemm_call, workspace_bytes
from .llvm_util import (
    F32,
    F64,
    FAST_ADD,
    I8,
    I8P,
    I32,
    I64,
    REDUCE_FLAGS,
    VOID,
    SymEmitter,
    declare,
    fconst,
    for_range,
    i64,
    intrinsic,
    mem_type,
    reg_type,
)
from .views import VIEW_OPS, contiguous_strides, strided_view

# merge same-shaped elementwise kernels into single loops (``_plan_groups``); tests and
# benchmarks switch it off to compare against one loop per kernel
LOOP_GROUPS = True

HEAVY = ("sum", "max", "matmul", "scatter_add", "conv2d", "conv2d_input_grad",
         "conv2d_weight_grad", "pool_argmax")
# ops whose kernels read every operand element many times: operands get their own buffers
# (or are buffers seen through strided views) instead of being recomputed inline
DENSE_OPERANDS = ("matmul", "conv2d", "conv2d_input_grad", "conv2d_weight_grad", "pool_argmax")


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
    input_index: dict[int, int] = field(default_factory=dict)  # node id -> input slot
    node_index: dict[int, int] = field(default_factory=dict)  # node id -> printed index
    # loop groups: runs of same-shaped elementwise kernels emitted as one loop (see
    # ``_plan_groups``); ``group_of`` maps a member's id to its group's index in ``groups``
    groups: list[list[Node]] = field(default_factory=list)
    group_of: dict[int, int] = field(default_factory=dict)
    virtual: set[int] = field(default_factory=set)  # group-internal values: no buffer

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


def _nbytes(n: Node) -> Any:
    return sh.numel(n.shape) * n.dtype.itemsize


def _align(x: Any) -> Any:
    if isinstance(x, int):
        return (x + ALIGN - 1) // ALIGN * ALIGN
    return _align_sym(sympy.sympify(x))


@lru_cache(maxsize=4096)
def _align_sym(x: sympy.Expr) -> Any:
    """Round a symbolic byte count up to ``ALIGN``. Sizes are mostly ``c * B`` with ``c`` a
    multiple of 64, already aligned for every integer ``B``: recognised from the terms' integer
    coefficients without asking sympy to simplify a floor (which cost a tenth of a small
    step's compile time)."""
    terms = x.as_coefficients_dict()
    if all(c.is_Integer and int(c) % ALIGN == 0 and (k == 1 or k.is_integer)
           for k, c in terms.items()):
        return x
    return sympy.floor((x + ALIGN - 1) / ALIGN, evaluate=False) * ALIGN


def plan(g: Graph, wide: bool = True, debug: bool = False, loop_groups: bool = False) -> Plan:
    """Decide which nodes get buffers and lay them out in the scratch arena.

    ``debug``: every kernel may stop with a bounds error, so no update is written in place
    (a failing debug step must still change nothing). ``loop_groups``: merge runs of
    same-shaped elementwise kernels into single loops (the CPU backend; see
    ``_plan_groups``)."""
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
        if n.id in roots or n.op in HEAVY:
            mat.add(n.id)
        elif n.op not in VIEW_OPS and n.op not in ("const", "iota") and eff_users(n) > 1:
            mat.add(n.id)
    # matmul/conv operands must be addressable with strides: a buffer seen through views
    for n in order:
        if n.op in DENSE_OPERANDS:
            for x in n.inputs:
                base = x
                while base.op in VIEW_OPS:
                    base = base.inputs[0]
                if base.op != "input" and base.id not in mat:
                    mat.add(base.id)
                if strided_view(x, lambda m: m.op == "input" or m.id in mat) is None:
                    mat.add(x.id)
    materialized = [n for n in order if n.id in mat]
    if loop_groups and not debug:
        materialized = _hoist_scalars(materialized, mat)
    p = Plan(g, order, materialized)
    if not debug:
        _plan_direct_writes(p, mat)
        if loop_groups:
            _plan_groups(p, mat)
    off = _assign_offsets(p, mat, roots)
    needs: list[Any] = []
    for n in materialized:
        if n.op == "matmul" and n.dtype.is_float:
            t = choose_tile(n.shape[-1], wide, n.dtype.itemsize)
            need = workspace_bytes(n.shape[-2], n.shape[-1], n.inputs[0].shape[-1], t,
                                   n.dtype.itemsize)
            needs.append(2 * _align(need))  # one packing area per thread
        elif n.op in conv_lowering.OPS:
            need = conv_lowering.workspace_bytes(n, wide)  # weight repack, padded grids
            if not (isinstance(need, int) and need == 0):
                needs.append(need)
    work = _max_of(needs)
    p.work_offset = off
    p.scratch_bytes = sh.dim(off + _align(work))
    p.input_index = {n.id: i for i, n in enumerate(g.inputs)}
    k = 0
    for n in order:
        if n.op != "input":
            p.node_index[n.id] = k
            k += 1
    return p


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


def _reads(n: Node, mat: set[int]) -> list[Node]:
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


CHECKED_OPS = ("gather", "scatter_add")  # ops whose kernels may stop with an error code


def _closure(n: Node, mat: set[int]) -> list[Node]:
    """``n`` and the expression nodes its kernel computes inline."""
    out, seen, stack = [n], {n.id}, list(n.inputs)
    while stack:
        x = stack.pop()
        if x.id in seen or x.op == "input" or x.id in mat:
            continue
        seen.add(x.id)
        out.append(x)
        stack.extend(x.inputs)
    return out


def _pointwise(v: Node, old: Node, mat: set[int]) -> bool:
    """True when every read of ``old`` in ``v``'s kernel is at ``v``'s own index (only
    elementwise ops between them), so writing ``v`` over ``old`` in place is safe."""
    closure = _closure(v, mat)
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

    return all(gops.OP_INFO[x.op].kind == "elementwise" for x in closure if reaches(x))


def _plan_direct_writes(p: Plan, mat: set[int]) -> None:
    """Let an update's kernel write straight into the state buffer when that is safe.

    Safe means: no kernel after it reads the old state, its own reads of the old state are
    pointwise, and no kernel that can fail (an index check) runs after it — so a failing step
    still changes nothing. This removes a scratch copy and a commit ``memcpy`` per update.
    """
    g = p.graph
    index = {n.id: i for i, n in enumerate(p.materialized)}
    reads = [{x.id for x in _reads(n, mat)} for n in p.materialized]
    flags = {n.id for n in g.meta.get("finite_flags", ())}  # check_finite: may stop too
    may_fail = [i for i, n in enumerate(p.materialized)
                if n.id in flags or any(x.op in CHECKED_OPS for x in _closure(n, mat))]
    last_fail = max(may_fail, default=-1)
    by_name = {n.attrs["name"]: n for n in g.inputs}
    outputs = {o.id for o in g.outputs}
    for j, (slot, v) in enumerate(g.updates):
        i = index.get(v.id)
        if i is None or i <= last_fail or v.id in p.direct or v.id in outputs:
            continue
        old = by_name.get(slot)
        if old is not None:
            readers = [k for k, r in enumerate(reads) if old.id in r]
            if any(k > i for k in readers):
                continue
            if i in readers and not _pointwise(v, old, mat):
                continue
        p.direct[v.id] = j


def _is_scalar(n: Node) -> bool:
    return all(isinstance(d, int) and d == 1 for d in n.shape)


def _hoist_scalars(materialized: list[Node], mat: set[int]) -> list[Node]:
    """Move one-element kernels (hyperparameter casts, ``1 - dampening``, a loss divisor) to
    just after the last kernel they read: left where the topological order put them, they sit
    between the optimizer's per-tensor loops and keep those loops from merging."""
    out: list[Node] = []
    for n in materialized:
        if not _is_scalar(n):
            out.append(n)
            continue
        deps = {x.id for x in _reads(n, mat)}
        at = max((i + 1 for i, m in enumerate(out) if m.id in deps), default=0)
        out.insert(at, n)
    return out


def _groupable(n: Node, mat: set[int], flags: set[int]) -> bool:
    """A kernel that is one plain loop over its own shape and can never stop early."""
    return (n.op not in KERNELS and (n.op in VIEW_OPS or n.op in ELEMENT_RULES)
            and n.id not in flags and not _is_scalar(n)
            and not any(x.op in CHECKED_OPS for x in _closure(n, mat)))


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
    slots = [s for s, _ in g.updates]
    reads = {n.id: {x.id for x in _reads(n, mat)} for n in p.materialized}

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
        if _groupable(n, mat, flags):
            if cur and fits(cur, n):
                cur.append(n)
                continue
            runs.append(cur)
            cur = [n]
        else:
            runs.append(cur)
            cur = []
    runs.append(cur)
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
            readers = [n for n in p.materialized if m.id in reads[n.id]]
            if readers and all(r.id in ids for r in readers):
                p.virtual.add(m.id)


def _provably_ge(a: Any, b: Any) -> bool:
    """a >= b for every positive value of the symbols (polynomials with nonneg coefficients)."""
    d = sympy.expand(sympy.sympify(a) - sympy.sympify(b))
    if d.is_number:
        return bool(d >= 0)
    poly = d.as_poly()
    return poly is not None and all(c >= 0 for c in poly.coeffs())


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
        for x in _reads(n, mat):
            if x.id in last and x.id not in roots:
                last[x.id] = max(last[x.id], last_of.get(n.id, i))
    free: list[tuple[Any, Any]] = []  # (offset, size)
    live: list[tuple[int, Any, Any]] = []  # (last use, offset, size)
    top: Any = 0
    for i, n in enumerate(p.materialized):
        start = first_of.get(n.id, i)
        still = []
        for lu, o, sz in live:
            (free.append((o, sz)) if lu < start else still.append((lu, o, sz)))
        live = still
        if n.id in p.direct or n.id in p.virtual:
            continue  # written straight into its state buffer, or never stored
        need = _align(_nbytes(n))
        pick = next((j for j, (_, sz) in enumerate(free) if _provably_ge(sz, need)), None)
        if pick is not None:
            o, sz = free.pop(pick)
        else:
            o, sz = top, need
            top = sh.dim(top + need)
        p.offsets[n.id] = o
        live.append((last[n.id], o, sz))
    p.no_reuse_bytes = sh.dim(sum((_align(_nbytes(n)) for n in p.materialized
                                   if n.id not in p.virtual), 0))
    return top


class KernelEmitter:
    """Emits one kernel function: loops over a node's index space, values computed inline."""

    debug = False  # bounds checks (set per instance; subclasses with their own __init__: off)

    def __init__(self, lower: Lowering, node: Node, name: str,
                 group: list[Node] | None = None) -> None:
        self.L = lower
        self.node = node
        # a loop group computes several nodes per index (``Plan.groups``): members read
        # earlier members' values from ``cache`` (registers), never from their buffers
        self.members = group or [node]
        self.cache: dict[int, ir.Value] = {}
        virtual = getattr(getattr(lower, "plan", None), "virtual", set())
        self.stored = [m for m in self.members if m.id not in virtual]
        # buffers this kernel reads: materialized/input nodes reachable through expressions
        self.buffers: list[Node] = []
        skip = {m.id for m in self.members} if group else set()
        for m in self.members:
            self._collect(m, top=True, skip=skip)
        mod = lower.module
        arg_types = [I8P for _ in self.stored] + [I8P for _ in self.buffers] + [
            I8P, I64.as_pointer(), I64.as_pointer()]
        self.fn = ir.Function(mod, ir.FunctionType(I32, arg_types), name=name)
        self.fn.linkage = "internal"
        for a in self.fn.args[:-2]:
            a.add_attribute("noalias")
        self.work = self.fn.args[-3]
        entry = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        self._allocas = ir.IRBuilder(entry)
        self._entry_br = self._allocas.branch(start)
        self.b = ir.IRBuilder(start)
        self.err_block: ir.Block | None = None
        syms_ptr = self.fn.args[-2]
        self.err_ptr = self.fn.args[-1]
        symvals = {s: self.b.load(self.b.gep(syms_ptr, [i64(i)], inbounds=True), name=s.name)
                   for i, s in enumerate(lower.symbols)}
        self.sym = SymEmitter(self.b, symvals)
        # debug builds: buffer extents, emitted here so that they dominate every check
        self.debug = getattr(lower, "debug", False)  # the PTX backend reuses this class
        self.extent = {n.id: self.sym(sh.numel(n.shape)) for n in [node] + self.buffers} \
            if self.debug else {}
        self.ptr: dict[int, ir.Value] = {}
        self.outs = {m.id: self.b.bitcast(a, mem_type(m.dtype).as_pointer())
                     for m, a in zip(self.stored, self.fn.args)}
        self.out = self.outs.get(node.id)
        for n, a in zip(self.buffers, self.fn.args[len(self.stored):-3]):
            self.ptr[n.id] = self.b.bitcast(a, mem_type(n.dtype).as_pointer())

    def _is_buffer(self, n: Node) -> bool:
        return n.op == "input" or n.id in self.L.mat_ids

    def _collect(self, n: Node, top: bool = False, skip: set[int] | frozenset = frozenset()
                 ) -> None:
        seen: set[int] = set()
        stack = list(n.inputs) if top else [n]
        while stack:
            x = stack.pop()
            if x.id in seen or x.id in skip:
                continue
            seen.add(x.id)
            if self._is_buffer(x):
                if all(x is not y for y in self.buffers):
                    self.buffers.append(x)
                continue
            stack.extend(x.inputs)

    # -- index helpers -------------------------------------------------------------------
    def linear(self, idx: list[ir.Value], strides: list[Any]) -> ir.Value:
        b = self.b
        terms = []
        for i, s in zip(idx, strides):
            if (isinstance(s, int) and s == 0) or (isinstance(i, ir.Constant)
                                                   and i.constant == 0):
                continue
            terms.append(i if (isinstance(s, int) and s == 1)
                         else b.mul(i, self.sym(s), flags=("nsw",)))
        if not terms:
            return i64(0)
        out = terms[0]
        for t in terms[1:]:
            out = b.add(out, t, flags=("nsw",))
        return out

    def alloca(self, t: ir.Type) -> ir.Value:
        """A stack slot in the entry block (allocas inside loops would grow the stack)."""
        self._allocas.position_before(self._entry_br)
        return self._allocas.alloca(t)

    def load_buffer(self, n: Node, idx: list[ir.Value], strides: list[Any] | None = None
                    ) -> ir.Value:
        strides = contiguous_strides(n.shape) if strides is None else strides
        lin = self.linear(idx, strides)
        if self.debug:
            self.check_bounds(lin, n)
        ptr = self.b.gep(self.ptr[n.id], [lin], inbounds=True)
        v = self.b.load(ptr)
        if n.dtype is dt.bool_:
            v = self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def store_out(self, idx: list[ir.Value], v: ir.Value) -> None:
        ptr = self.out_ptr(idx)
        if self.node.dtype is dt.bool_:
            v = self.b.zext(v, I8)
        self.b.store(v, ptr)

    def out_ptr(self, idx: list[ir.Value]) -> ir.Value:
        lin = self.linear(idx, contiguous_strides(self.node.shape))
        if self.debug:
            self.check_bounds(lin, self.node)
        return self.b.gep(self.out, [lin], inbounds=True)

    def check_bounds(self, lin: ir.Value, buf: Node) -> None:
        """Debug builds: stop with ERR_BOUNDS (node, element, extent) unless ``lin`` is an
        element of ``buf``'s buffer."""
        b = self.b
        size = self.extent[buf.id]
        bad = b.icmp_unsigned(">=", lin, size)
        ok = self.fn.append_basic_block("bounds.ok")
        fail = self.fn.append_basic_block("bounds.bad")
        b.cbranch(bad, fail, ok)
        b.position_at_end(fail)
        for j, v in enumerate((i64(ERR_BOUNDS), i64(self.L.plan.node_index[self.node.id]),
                               lin, size)):
            b.store(v, b.gep(self.err_ptr, [i64(j)], inbounds=True))
        b.ret(ir.Constant(I32, ERR_BOUNDS))
        b.position_at_end(ok)

    # -- values --------------------------------------------------------------------------
    def value(self, n: Node, idx: list[ir.Value]) -> ir.Value:
        """The value of node ``n`` at multi-index ``idx`` (fusing expressions inline)."""
        if n.id in self.cache:  # an earlier loop-group member, read at its own index
            return self.cache[n.id]
        if self._is_buffer(n):
            return self.load_buffer(n, idx)
        return self.compute(n, idx)

    def compute(self, n: Node, idx: list[ir.Value]) -> ir.Value:
        """Like ``value`` but never loads ``n`` itself (used for the node being computed)."""
        if n.op == "pad":
            return self._padded(n, idx)
        if n.op in VIEW_OPS:
            sv = strided_view(n, lambda m: m is not n and self._is_buffer(m))
            if sv is not None:
                base, strides = sv
                return self.load_buffer(base, idx, strides)
            return self.value(n.inputs[0], self.map_index(n, idx))
        rule = ELEMENT_RULES.get(n.op)
        if rule is None:
            raise NotImplementedError(f"no CPU lowering for op {n.op!r} used as an expression")
        return rule(self, n, idx)

    def _padded(self, n: Node, idx: list[ir.Value]) -> ir.Value:
        """Zero padding without branches: clamp the index into the source, load, select.

        The clamped load is always in bounds, so the loop stays straight-line code that
        LLVM can vectorise; positions in the padding select zero.
        """
        b = self.b
        src = n.inputs[0].shape
        inside: ir.Value | None = None
        sub = []
        for i, (d, (lo, _)) in zip(idx, zip(src, n.attrs["pads"])):
            if isinstance(lo, int) and lo == 0 and sh.same(d, n.shape[len(sub)]):
                sub.append(i)
                continue
            j = b.sub(i, self.sym(lo)) if not (isinstance(lo, int) and lo == 0) else i
            ok = b.and_(b.icmp_signed(">=", j, i64(0)), b.icmp_signed("<", j, self.sym(d)))
            inside = ok if inside is None else b.and_(inside, ok)
            top = b.sub(self.sym(d), i64(1))
            j = b.select(b.icmp_signed("<", j, i64(0)), i64(0), j)
            sub.append(b.select(b.icmp_signed(">", j, top), top, j))
        v = self.value(n.inputs[0], sub)
        if inside is None:
            return v
        t = reg_type(n.dtype)
        zero = fconst(t, 0.0) if n.dtype.is_float else ir.Constant(t, 0)
        return b.select(inside, v, zero)

    def map_index(self, n: Node, idx: list[ir.Value]) -> list[ir.Value]:
        """Index into ``n.inputs[0]`` for index ``idx`` of view node ``n``."""
        src = n.inputs[0].shape
        if n.op == "detach":
            return idx
        if n.op == "slice":
            out = []
            for i, b0, st in zip(idx, n.attrs["starts"], n.attrs["steps"]):
                j = i if st == 1 else self.b.mul(i, i64(st), flags=("nsw",))
                out.append(j if (isinstance(b0, int) and b0 == 0)
                           else self.b.add(j, self.sym(b0), flags=("nsw",)))
            return out
        if n.op == "permute":
            out: list[Any] = [None] * len(idx)
            for i, p in enumerate(n.attrs["perm"]):
                out[p] = idx[i]
            return out
        if n.op == "expand":
            return [i64(0) if (s == 1 and not sh.same(d, 1)) else i
                    for s, d, i in zip(src, n.shape, idx)]
        # reshape: linearise in the output shape, delinearise in the input shape
        lin = self.linear(idx, contiguous_strides(n.shape))
        res = []
        for s, d in zip(contiguous_strides(src), src):
            q = self.b.sdiv(lin, self.sym(s)) if s != 1 else lin
            res.append(self.b.srem(q, self.sym(d)) if d != 1 else i64(0))
        return res

    def error_exit(self) -> ir.Block:
        if self.err_block is None:
            cur = self.b.block
            self.err_block = self.fn.append_basic_block("error")
            self.b.position_at_end(self.err_block)
            self.b.ret(ir.Constant(I32, ERR_INDEX))
            self.b.position_at_end(cur)
        return self.err_block

    def check_index(self, ix: ir.Value, size: Any, pos: ir.Value, node: Node | None = None
                    ) -> None:
        """Branch to the error exit (recording node, position, value) when ix ∉ [0, size).

        ``node`` is the indexing op (it may be computed inline inside another node's kernel);
        its index lets the runtime name the offending argument."""
        b = self.b
        bad = b.icmp_unsigned(">=", ix, self.sym(size))
        ok = self.fn.append_basic_block("idx.ok")
        fail = self.fn.append_basic_block("idx.bad")
        b.cbranch(bad, fail, ok)
        b.position_at_end(fail)
        b.store(i64(self.L.plan.node_index[(node or self.node).id]),
                b.gep(self.err_ptr, [i64(1)], inbounds=True))
        b.store(pos, b.gep(self.err_ptr, [i64(2)], inbounds=True))
        b.store(ix, b.gep(self.err_ptr, [i64(3)], inbounds=True))
        b.store(i64(ERR_INDEX), self.err_ptr)
        b.branch(self.error_exit())
        b.position_at_end(ok)

    # -- loop nests ----------------------------------------------------------------------
    def loops(self, shape: tuple, body: Any, order: list[int] | None = None) -> None:
        dims = list(range(len(shape))) if order is None else order
        idx: list[Any] = [None] * len(shape)

        def rec(k: int) -> None:
            if k == len(dims):
                body(idx)
                return
            d = dims[k]
            if shape[d] == 1:
                idx[d] = i64(0)
                rec(k + 1)
                return
            with for_range(self.b, i64(0), self.sym(shape[d]), name=f"i{d}") as i:
                idx[d] = i
                rec(k + 1)

        rec(0)

    def finish(self) -> None:
        self.b.ret(ir.Constant(I32, ERR_OK))


# ---------------------------------------------------------------------------------------
# kernels for materialized nodes
# ---------------------------------------------------------------------------------------
def _k_elementwise(k: KernelEmitter) -> None:
    n = k.node
    rule = ELEMENT_RULES.get(n.op)
    if n.op in VIEW_OPS or rule is not None:
        def body(idx: list[ir.Value]) -> None:
            k.store_out(idx, k.compute(n, idx))

        k.loops(n.shape, body)
        return
    raise NotImplementedError(f"no CPU kernel for op {n.op!r}")


def _k_group(k: KernelEmitter) -> None:
    """One loop for a loop group: each member's value at the index, in order, stored unless
    the member is group-internal."""
    def body(idx: list[ir.Value]) -> None:
        for m in k.members:
            k.node, k.out = m, k.outs.get(m.id)
            v = k.compute(m, idx)
            k.cache[m.id] = v
            if k.out is not None:
                k.store_out(idx, v)
        k.node = k.members[0]

    k.loops(k.members[0].shape, body)


def _combine(k: KernelEmitter, op: str, acc: ir.Value, v: ir.Value, d: dt.DType) -> ir.Value:
    b = k.b
    if op == "sum":
        return b.fadd(acc, v, flags=REDUCE_FLAGS) if d.is_float else b.add(acc, v)
    if d.is_float:
        return b.call(intrinsic(k.L.module, "llvm.maximum", acc.type, 2), [acc, v])
    if d is dt.bool_:  # i1 compares signed as 0 > -1: the max of bools is their or
        return b.or_(acc, v)
    return b.select(b.icmp_signed(">", v, acc), v, acc)


def _init(op: str, d: dt.DType) -> ir.Constant:
    t = reg_type(d)
    if op == "sum":
        return fconst(t, 0.0) if d.is_float else ir.Constant(t, 0)
    if d.is_float:
        return fconst(t, float("-inf"))
    return ir.Constant(t, -(1 << (8 * d.itemsize - 1)) if d is not dt.bool_ else 0)


def _k_reduce(k: KernelEmitter) -> None:
    n = k.node
    x = n.inputs[0]
    axes = set(n.attrs["axes"])
    nd = len(x.shape)
    b = k.b
    blocked = n.op == "sum" and n.dtype.is_float and not reduce_lowering.fits_one_block(
        sh.numel([x.shape[d] for d in sorted(axes)]))
    if nd and (nd - 1) in axes:
        # inner reduction: kept dims outside, reduced dims inside, accumulator in a register
        kept = [d for d in range(nd) if d not in axes]
        red = [d for d in range(nd) if d in axes]
        if blocked:
            # float sums longer than one block: blocked pairwise summation over the
            # innermost reduced dim that is not 1 (see ``reduce.cascade_sum``)
            inner_d = max(d for d in red if not sh.same(x.shape[d], 1))
            extent = k.sym(x.shape[inner_d])
            rest = [d for d in red if d != inner_d]

            def outer_blocked(idx: list[Any]) -> None:
                full = list(idx)
                full[inner_d] = i64(0)

                def run_loops(body: Any) -> None:
                    _loops_into(k, tuple(x.shape), rest, full, lambda f: body())

                def element(j: ir.Value) -> ir.Value:
                    at = list(full)
                    at[inner_d] = j
                    return k.value(x, at)

                total = reduce_lowering.cascade_sum(k, reg_type(n.dtype), run_loops, extent,
                                                    element)
                k.store_out([i64(0) if d in axes else idx[d] for d in range(nd)], total)

            k.loops(tuple(x.shape), outer_blocked, order=kept) if kept else \
                outer_blocked([None] * nd)
            return

        def outer(idx: list[Any]) -> None:
            acc_slot = k.alloca(reg_type(n.dtype))
            b.store(_init(n.op, n.dtype), acc_slot)

            def inner(full: list[Any]) -> None:
                v = k.value(x, list(full))
                b.store(_combine(k, n.op, b.load(acc_slot), v, n.dtype), acc_slot)

            full = list(idx)
            red_shape = tuple(x.shape)
            _loops_into(k, red_shape, red, full, inner)
            out_idx = [i64(0) if d in axes else idx[d] for d in range(nd)]
            k.store_out(out_idx, b.load(acc_slot))

        k.loops(tuple(x.shape), outer, order=kept) if kept else outer([None] * nd)
        return
    if n.op == "sum" and n.dtype.is_float and not reduce_lowering.fits_one_block(
            sh.numel([x.shape[d] for d in sorted(axes)]), reduce_lowering.ROW_BLOCK):
        reduce_lowering.outer_sum(k)  # rows combined pairwise in blocks, strips of columns
        return
    # outer reduction: initialise the output, then accumulate rows into it (vectorises)
    k.loops(n.shape, lambda idx: k.store_out(idx, _init(n.op, n.dtype)))

    def acc(idx: list[Any]) -> None:
        out_idx = [i64(0) if d in axes else idx[d] for d in range(nd)]
        ptr = k.out_ptr(out_idx)
        v = k.value(x, list(idx))
        b.store(_combine(k, n.op, b.load(ptr), v, n.dtype), ptr)

    k.loops(tuple(x.shape), acc)


def _loops_into(k: KernelEmitter, shape: tuple, dims: list[int], idx: list[Any], body: Any
                ) -> None:
    def rec(j: int) -> None:
        if j == len(dims):
            body(idx)
            return
        d = dims[j]
        if shape[d] == 1:
            idx[d] = i64(0)
            rec(j + 1)
            return
        with for_range(k.b, i64(0), k.sym(shape[d]), name=f"r{d}") as i:
            idx[d] = i
            rec(j + 1)

    rec(0)


def _k_matmul(k: KernelEmitter) -> None:
    n = k.node
    a, bnode = n.inputs
    sa = strided_view(a, k._is_buffer)
    sb = strided_view(bnode, k._is_buffer)
    assert sa is not None and sb is not None, "matmul operands must be addressable"
    (abuf, ast), (bbuf, bst) = sa, sb
    nb = len(n.shape) - 2
    M, N = n.shape[-2], n.shape[-1]
    K = a.shape[-1]
    b = k.b
    t = reg_type(n.dtype)
    out_st = contiguous_strides(n.shape)

    def batch_body(bidx: list[Any]) -> None:
        if n.dtype.is_float:
            tile = choose_tile(N, k.L.wide, n.dtype.itemsize)
            origin = b.gep(k.out, [k.linear(bidx + [i64(0), i64(0)], out_st)], inbounds=True)
            zero2 = [i64(0), i64(0)]
            pa = b.gep(k.ptr[abuf.id], [k.linear(bidx + zero2, ast)], inbounds=True)
            pb = b.gep(k.ptr[bbuf.id], [k.linear(bidx + zero2, bst)], inbounds=True)
            args = [pa, k.sym(ast[-2]), k.sym(ast[-1]), pb, k.sym(bst[-2]), k.sym(bst[-1]),
                    origin, k.sym(out_st[-2]), k.sym(M), k.sym(N), k.sym(K)]
            wbytes = k.sym(_align(workspace_bytes(M, N, K, tile, n.dtype.itemsize)))
            if k.debug and not any(isinstance(d, int) and d == 0 for d in (M, N, K)):
                # the GEMM's first and last element of each operand must be in range
                last = [k.sym(sh.dim(d - 1)) for d in (M, K, N)]
                for buf, st, i0, i1 in ((abuf, ast, last[0], last[1]),
                                        (bbuf, bst, last[1], last[2])):
                    k.check_bounds(k.linear(bidx + zero2, st), buf)
                    k.check_bounds(k.linear(bidx + [i0, i1], st), buf)
                k.check_bounds(k.linear(bidx + [last[0], last[2]], out_st), n)
            emit_gemm_call(b, k.L.module, k.alloca, tile, t, args, k.work, wbytes,
                           k.L.run2_global())
            return
        if sh.same(bst[-1], 1) or not sh.same(bst[-2], 1):
            # i-k-j: broadcast A[m,k] along a contiguous row of B (vectorises over n)
            with for_range(b, i64(0), k.sym(M), name="m") as m:
                with for_range(b, i64(0), k.sym(N), name="n0") as j:
                    b.store(fconst(t, 0.0), k.out_ptr(bidx + [m, j]))
                with for_range(b, i64(0), k.sym(K), name="k") as kk:
                    av = k.load_buffer(abuf, bidx + [m, kk], ast)
                    with for_range(b, i64(0), k.sym(N), name="n") as j:
                        ptr = k.out_ptr(bidx + [m, j])
                        bv = k.load_buffer(bbuf, bidx + [kk, j], bst)
                        b.store(b.fadd(b.load(ptr), b.fmul(av, bv, flags=FAST_ADD),
                                       flags=FAST_ADD), ptr)
        else:
            # dot products along k (B is k-contiguous, as for x @ W.T)
            with for_range(b, i64(0), k.sym(M), name="m") as m:
                with for_range(b, i64(0), k.sym(N), name="n") as j:
                    acc = k.alloca(t)
                    b.store(fconst(t, 0.0), acc)
                    with for_range(b, i64(0), k.sym(K), name="k") as kk:
                        av = k.load_buffer(abuf, bidx + [m, kk], ast)
                        bv = k.load_buffer(bbuf, bidx + [kk, j], bst)
                        b.store(b.fadd(b.load(acc), b.fmul(av, bv, flags=REDUCE_FLAGS),
                                       flags=REDUCE_FLAGS), acc)
                    b.store(b.load(acc), k.out_ptr(bidx + [m, j]))

    if nb:
        k.loops(tuple(n.shape[:nb]), lambda bidx: batch_body(list(bidx)))
    else:
        batch_body([])


def _k_scatter_add(k: KernelEmitter) -> None:
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


@dataclass
class _ConvIdx:
    nb: ir.Value  # batch
    o: ir.Value  # output channel
    c: ir.Value  # input channel within the group (weight dim 1)
    ci: ir.Value  # input channel in the full input
    kh: ir.Value
    kw: ir.Value
    oh: ir.Value
    ow: ir.Value
    ih: ir.Value
    iw: ir.Value


def _conv_loops(k: KernelEmitter, x_shape: tuple, w_shape: tuple, y_shape: tuple,
                body: Any, batch_inner: bool = False, before: Any = None,
                after: Any = None) -> None:
    """The loop nest shared by the three convolution kernels.

    ``for n, o, c, kh, kw: for oh in [lo, hi): for ow in [lo, hi): body(ix)``, with the output
    ranges narrowed per kernel tap to the positions whose input pixel lies inside the image:
    the inner loop needs no padding test and vectorises along ``ow``. With ``batch_inner``
    the batch loop moves inside the taps (the weight gradient reduces over it), and
    ``before``/``after`` run around the reduction loops for each (o, c, kh, kw).
    """
    a = k.node.attrs
    b = k.b
    (sh_, sw), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    H, W = x_shape[2:]
    OC, Cg, KH, KW = w_shape
    OH, OW = y_shape[2:]
    Og = OC // a["groups"]

    def out_range(tap: ir.Value, d: int, p: int, s: int, size: int, osize: int
                  ) -> tuple[ir.Value, ir.Value]:
        # o*s + tap*d - p must lie in [0, size): o in [ceil(off/s), floor((off+size-1)/s)]
        off = b.sub(i64(p), b.mul(tap, i64(d)))
        lo = b.sub(i64(0), k.sym.floordiv(b.sub(i64(0), off), i64(s)))
        lo = b.select(b.icmp_signed("<", lo, i64(0)), i64(0), lo)
        hi = b.add(k.sym.floordiv(b.add(off, i64(size - 1)), i64(s)), i64(1))
        hi = b.select(b.icmp_signed(">", hi, i64(osize)), i64(osize), hi)
        return lo, hi

    def spatial(nb: ir.Value, o: ir.Value, c: ir.Value, ci: ir.Value, kh: ir.Value,
                kw: ir.Value) -> None:
        hlo, hhi = out_range(kh, dh, ph, sh_, H, OH)
        wlo, whi = out_range(kw, dw, pw, sw, W, OW)
        with for_range(b, hlo, hhi, name="oh") as oh:
            ih = b.add(b.mul(oh, i64(sh_)), b.sub(b.mul(kh, i64(dh)), i64(ph)))
            with for_range(b, wlo, whi, name="ow") as ow:
                iw = b.add(b.mul(ow, i64(sw)), b.sub(b.mul(kw, i64(dw)), i64(pw)))
                body(_ConvIdx(nb, o, c, ci, kh, kw, oh, ow, ih, iw))

    def channels(nb: ir.Value | None) -> None:
        with for_range(b, i64(0), i64(OC), name="o") as o:
            with for_range(b, i64(0), i64(Cg), name="c") as c:
                ci = b.add(b.mul(b.udiv(o, i64(Og)), i64(Cg)), c) if a["groups"] > 1 else c
                with for_range(b, i64(0), i64(KH), name="kh") as kh:
                    with for_range(b, i64(0), i64(KW), name="kw") as kw:
                        if nb is not None:
                            spatial(nb, o, c, ci, kh, kw)
                        else:
                            state = before(o, c, kh, kw) if before else None
                            with for_range(b, i64(0), k.sym(x_shape[0]), name="n") as nb2:
                                spatial(nb2, o, c, ci, kh, kw)
                            if after:
                                after(o, c, kh, kw, state)

    if batch_inner:
        channels(None)
    else:
        with for_range(b, i64(0), k.sym(x_shape[0]), name="n") as nb:
            channels(nb)


def _zero_out(k: KernelEmitter) -> None:
    t = reg_type(k.node.dtype)
    k.loops(k.node.shape, lambda idx: k.store_out(idx, fconst(t, 0.0)))


def _conv_accumulate(k: KernelEmitter, image: Node, inputs: bool) -> None:
    """The direct loops of conv2d and of its input gradient: ``out[image position] +=
    image[other position] * w[o, c, kh, kw]``, the output zeroed first. ``inputs``: the
    output is indexed by input positions (the input gradient reads dY at output positions)."""
    n, w, b = k.node, k.node.inputs[1], k.b
    _zero_out(k)

    def body(ix: _ConvIdx) -> None:
        at_in, at_out = [ix.nb, ix.ci, ix.ih, ix.iw], [ix.nb, ix.o, ix.oh, ix.ow]
        ptr = k.out_ptr(at_in if inputs else at_out)
        prod = b.fmul(k.value(image, at_out if inputs else at_in),
                      k.value(w, [ix.o, ix.c, ix.kh, ix.kw]), flags=FAST_ADD)
        b.store(b.fadd(b.load(ptr), prod, flags=FAST_ADD), ptr)

    x_shape, y_shape = (n.shape, image.shape) if inputs else (image.shape, n.shape)
    _conv_loops(k, x_shape, w.shape, y_shape, body)


def _k_conv2d(k: KernelEmitter) -> None:
    """y[n,o,oh,ow] += x[n,ci,ih,iw] * w[o,c,kh,kw], accumulated in the output buffer."""
    _conv_accumulate(k, k.node.inputs[0], inputs=False)


def _k_conv2d_input_grad(k: KernelEmitter) -> None:
    """dx[n,ci,ih,iw] += gy[n,o,oh,ow] * w[o,c,kh,kw] (the transposed convolution)."""
    _conv_accumulate(k, k.node.inputs[0], inputs=True)


def _k_conv2d_weight_grad(k: KernelEmitter) -> None:
    """dw[o,c,kh,kw] = sum over n, oh, ow of gy[n,o,oh,ow] * x[n,ci,ih,iw] (a register sum)."""
    n = k.node
    x, gy = n.inputs
    b = k.b
    t = reg_type(n.dtype)
    slot: list[Any] = [None]

    def before(o: ir.Value, c: ir.Value, kh: ir.Value, kw: ir.Value) -> None:
        if slot[0] is None:
            slot[0] = k.alloca(t)
        b.store(fconst(t, 0.0), slot[0])

    def body(ix: _ConvIdx) -> None:
        prod = b.fmul(k.value(gy, [ix.nb, ix.o, ix.oh, ix.ow]),
                      k.value(x, [ix.nb, ix.ci, ix.ih, ix.iw]), flags=REDUCE_FLAGS)
        b.store(b.fadd(b.load(slot[0]), prod, flags=REDUCE_FLAGS), slot[0])

    def after(o: ir.Value, c: ir.Value, kh: ir.Value, kw: ir.Value, _: Any) -> None:
        k.store_out([o, c, kh, kw], b.load(slot[0]))

    _conv_loops(k, x.shape, n.shape, gy.shape, body, batch_inner=True, before=before,
                after=after)


def window_start(b: ir.IRBuilder, o: ir.Value, s: int, p: int, d: int) -> ir.Value:
    """First in-image tap of a pooling window: ``o*s - p`` advanced by whole dilation steps
    until it is >= 0 (shared by the CPU and PTX pool kernels)."""
    h0 = b.sub(b.mul(o, i64(s)), i64(p))
    steps = b.sdiv(b.add(b.sub(i64(0), h0), i64(d - 1)), i64(d))
    return b.select(b.icmp_signed("<", h0, i64(0)), b.add(h0, b.mul(steps, i64(d))), h0)


def _k_pool_argmax(k: KernelEmitter) -> None:
    """PyTorch's max-pool index rule: first strict maximum in window order, NaN wins.

    Window taps outside the image are skipped by a select (the load index is clamped), so the
    body is branch-free.
    """
    n = k.node
    x = n.inputs[0]
    a = n.attrs
    b = k.b
    (KH, KW), (sh_, sw), (ph, pw), (dh, dw) = a["kernel"], a["stride"], a["padding"], \
        a["dilation"]
    H, W = x.shape[2:]
    t = reg_type(x.dtype)
    best_slot, arg_slot = k.alloca(t), k.alloca(I64)

    def first(o: ir.Value, s: int, p: int, d: int) -> ir.Value:
        return window_start(b, o, s, p, d)

    def clamp(v: ir.Value, size: int) -> tuple[ir.Value, ir.Value]:
        ok = b.and_(b.icmp_signed(">=", v, i64(0)), b.icmp_signed("<", v, i64(size)))
        v = b.select(b.icmp_signed("<", v, i64(0)), i64(0), v)
        return b.select(b.icmp_signed(">=", v, i64(size)), i64(size - 1), v), ok

    def window(idx: list[Any]) -> None:
        nb, c, oh, ow = idx
        b.store(fconst(t, float("-inf")), best_slot)
        b.store(b.add(b.mul(first(oh, sh_, ph, dh), i64(W)), first(ow, sw, pw, dw)), arg_slot)
        with for_range(b, i64(0), i64(KH), name="u") as u:
            ih, okh = clamp(b.add(b.sub(b.mul(oh, i64(sh_)), i64(ph)), b.mul(u, i64(dh))), H)
            with for_range(b, i64(0), i64(KW), name="v") as v:
                iw, okw = clamp(b.add(b.sub(b.mul(ow, i64(sw)), i64(pw)), b.mul(v, i64(dw))),
                                W)
                val = k.value(x, [nb, c, ih, iw])
                best = b.load(best_slot)
                take = b.or_(b.fcmp_ordered(">", val, best), b.fcmp_unordered("uno", val, val))
                take = b.and_(take, b.and_(okh, okw))
                b.store(b.select(take, val, best), best_slot)
                flat = b.add(b.mul(ih, i64(W)), iw)
                b.store(b.select(take, flat, b.load(arg_slot)), arg_slot)
        k.store_out(list(idx), b.load(arg_slot))

    k.loops(n.shape, window)


KERNELS = {"sum": reduce_lowering.kernel(_k_reduce), "max": reduce_lowering.kernel(_k_reduce),
           "matmul": _k_matmul,
           "scatter_add": _k_scatter_add, "conv2d": conv_lowering.kernel(_k_conv2d),
           "conv2d_input_grad": conv_lowering.kernel(_k_conv2d_input_grad),
           "conv2d_weight_grad": conv_lowering.kernel(_k_conv2d_weight_grad),
           "pool_argmax": pool_lowering.kernel(_k_pool_argmax)}


def _emit_finite_exit(b: ir.IRBuilder, flag: Node, buf: ir.Value, err: ir.Value, check: int,
                      node_index: int) -> None:
    """check_finite: return ERR_NONFINITE when a flag (sum of x*0, NaN iff some x is NaN or
    Inf) is not zero. Emitted right after the flag's kernel, so before any in-place write
    that follows it (``_plan_direct_writes`` counts flag kernels as kernels that may fail)."""
    v = b.load(b.bitcast(buf, mem_type(flag.dtype).as_pointer()))
    bad = b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
    with b.if_then(bad, likely=False):
        for j, x in enumerate((ERR_NONFINITE, check, node_index, 0)):
            b.store(i64(x), b.gep(err, [i64(j)], inbounds=True))
        b.ret(ir.Constant(I32, ERR_NONFINITE))


# ---------------------------------------------------------------------------------------
# the entry function
# ---------------------------------------------------------------------------------------
class Lowering:
    """Builds the LLVM module for one graph (see the module docstring)."""

    def __init__(self, g: Graph, name: str = "graphc_step", triple: str = "",
                 data_layout: str = "", wide: bool = True, debug: bool = False,
                 loop_groups: bool | None = None, profile: bool = False,
                 gemm_library: bool = False) -> None:
        self.graph = g
        self.profile = profile  # count time-stamp ticks per kernel (``PROFILE_SYMBOL``)
        self.unit_names: list[str] = []
        self.wide = wide
        self.debug = debug  # bounds-check every load and store (graphc.debug)
        self.plan = plan(g, wide, debug,
                         loop_groups=LOOP_GROUPS if loop_groups is None else loop_groups)
        self.mat_ids = {n.id for n in self.plan.materialized}
        self.symbols = g.symbols()
        self.module = ir.Module(name=name)
        if triple:
            self.module.triple = triple
        if data_layout:
            self.module.data_layout = data_layout
        self.name = name
        self.n_inputs = len(g.inputs)
        self.n_outputs = len(g.outputs)
        self.n_updates = len(g.updates)
        # gemm_library: GEMM routines only declared here, their tiles recorded for
        # ``gemm.build_library`` (the JIT compiles and caches them separately)
        self.gemm_requests: set | None = set() if gemm_library else None
        if gemm_library:
            self.module.gemm_requests = self.gemm_requests  # type: ignore[attr-defined]
        self._build()

    def run2_global(self) -> ir.GlobalVariable:
        """``graphc_parallel_run2``: the thread pool's dispatch function, set by the JIT
        runtime after loading (null — single-threaded — in ahead-of-time builds)."""
        g = self.module.globals.get(RUN2_SYMBOL)
        if g is None:
            from .parallel import TASK

            fty = ir.FunctionType(VOID, [TASK.as_pointer(), I8P]).as_pointer()
            g = ir.GlobalVariable(self.module, fty, RUN2_SYMBOL)
            g.initializer = ir.Constant(fty, None)
        return g

    def table_size(self) -> int:
        return TABLE_FIXED + self.n_inputs + self.n_outputs + self.n_updates

    def _build(self) -> None:
        g, p, mod = self.graph, self.plan, self.module
        fn = ir.Function(mod, ir.FunctionType(I32, [I8P.as_pointer()]), name=self.name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        tbl = fn.args[0]

        def slot(i: int) -> ir.Value:
            return b.load(b.gep(tbl, [i64(i)], inbounds=True))

        syms_ptr = b.bitcast(slot(0), I64.as_pointer())
        scratch = slot(1)
        info = b.bitcast(slot(2), I64.as_pointer())
        err = b.bitcast(slot(3), I64.as_pointer())
        symvals = {s: b.load(b.gep(syms_ptr, [i64(i)], inbounds=True), name=s.name)
                   for i, s in enumerate(self.symbols)}
        sym = SymEmitter(b, symvals)
        # scratch capacity check
        need = sym(p.scratch_bytes)
        cap = b.load(info)
        small = b.icmp_signed("<", cap, need)
        with b.if_then(small, likely=False):
            b.store(need, b.gep(info, [i64(1)], inbounds=True))
            b.ret(ir.Constant(I32, ERR_SCRATCH))
        b.store(i64(ERR_OK), err)
        bufs: dict[int, ir.Value] = {}
        for i, n in enumerate(g.inputs):
            bufs[n.id] = slot(TABLE_FIXED + i)
        upd_base = TABLE_FIXED + self.n_inputs + self.n_outputs
        for n in p.materialized:
            if n.id in p.virtual:
                continue
            if n.id in p.direct:
                bufs[n.id] = slot(upd_base + p.direct[n.id])
            else:
                bufs[n.id] = b.gep(scratch, [sym(p.offsets[n.id])], inbounds=True)
        work = b.gep(scratch, [sym(p.work_offset)], inbounds=True)
        finite = {n.id: i for i, n in enumerate(g.meta.get("finite_flags", ()))}
        units = p.units()
        prof = None
        if self.profile:
            clock = declare(mod, "llvm.readcyclecounter", I64, [])
            arr = ir.ArrayType(I64, 2 * len(units))
            prof = ir.GlobalVariable(mod, arr, PROFILE_SYMBOL)
            prof.initializer = ir.Constant(arr, None)
        # kernels
        for u, unit in enumerate(units):
            n = unit[0]
            if len(unit) > 1:
                k = KernelEmitter(self, n, f"g{p.node_index[n.id]}_group", group=unit)
                _k_group(k)
            else:
                k = KernelEmitter(self, n, f"k{p.node_index[n.id]}_{n.op}")
                KERNELS.get(n.op, _k_elementwise)(k)
            k.finish()
            self.unit_names.append(
                f"%{p.node_index[n.id]} {n.op}" if len(unit) == 1 else
                f"%{p.node_index[n.id]}..%{p.node_index[unit[-1].id]} loop group")
            args = [bufs[m.id] for m in k.stored] + [bufs[x.id] for x in k.buffers] + [
                work, syms_ptr, err]
            t0 = b.call(clock, []) if prof is not None else None
            rc = b.call(k.fn, args)
            if prof is not None:
                dt_ = b.sub(b.call(clock, []), t0)
                for j, add in ((2 * u, dt_), (2 * u + 1, i64(1))):
                    cell = b.gep(prof, [ir.Constant(I32, 0), ir.Constant(I32, j)],
                                 inbounds=True)
                    b.store(b.add(b.load(cell), add), cell)
            bad = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
            with b.if_then(bad, likely=False):
                b.ret(rc)
            if n.id in finite:
                _emit_finite_exit(b, n, bufs[n.id], err, finite[n.id], p.node_index[n.id])
        # commit: outputs then updates
        memcpy = declare(mod, "memcpy", I8P, [I8P, I8P, I64])
        base = TABLE_FIXED + self.n_inputs
        for j, o in enumerate(g.outputs):
            b.call(memcpy, [slot(base + j), bufs[o.id], sym(_nbytes(o))])
        base += self.n_outputs
        for j, (_, v) in enumerate(g.updates):
            if p.direct.get(v.id) != j:
                b.call(memcpy, [slot(base + j), bufs[v.id], sym(_nbytes(v))])
        b.ret(ir.Constant(I32, ERR_OK))


__all__ = ["Lowering", "plan", "Plan", "F32", "F64", "VOID"]
