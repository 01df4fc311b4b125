"""Elementwise kernels and loop groups written in vectors, compiled at the ``tile`` level.

An elementwise kernel (a convolution's epilogue included) or a loop group is a loop nest
whose innermost loop LLVM's O3 pipeline vectorises. That pipeline (the loop vectoriser and
what it needs) costs about five times what the ``tile`` level does per line of IR, and after
the batch norms' channel groups (``codegen.channel_groups``) these kernels were most of what
was left at O3. Measured on an Ice Lake Xeon (2 vCPU), ResNet-18's O3 modules: 0.71 s of LLVM
CPU with scalar loops, 0.27 s with these (every module compiled in one process, alternating);
the step no slower.

Here such a kernel's run is written in vectors of ``LANES`` elements (two an iteration, one
more, a scalar tail), as the channel groups' runs are, when (``run_start``):

- every value that varies along the run is computed by an op ``op_ok`` takes (LLVM
  arithmetic, compares, ``select``, ``sqrt``, ``fabs``, ``maximum``/``minimum``, ``fma``, small
  constant powers: rules ``emit.VectorEmit`` writes for vectors) on float32 values (bool for
  compares), from float32 reads contiguous with the output's layout along the run (a buffer
  at the kernel's own index or seen through views that only move strides:
  ``views.strided_view``); the run is the longest suffix of the dims where that holds;
- every other value is the same all along the run (a per-channel bias, a learning rate, a
  bias correction from the step count, a gathered scalar): whatever its ops and dtypes, it is
  computed once, as scalars, before the run's loop (``KernelEmitter._before_run``: the tile
  level has no LICM), only when the run has a vector, at its first element;
- a reshape of computed values (an optimizer's update of a flattened weight) only where the
  run is every dim, whose flat offset is then the index in both shapes.

The run is one flat loop over its dims (the index is ``j`` in the last of them that is not 1,
zero in the others: right for exactly those reads), the dims before it loops as before with
the first split over the threads; where the run takes every dim, it is the thread's share of
the flat range. Any other kernel keeps its scalar loops at O3, as do debug builds and the PTX
backend. ``GRAPHC_VECTOR_RUNS=0`` keeps them all there, to compare. The values are the scalar
loops' bit for bit: no sum is reordered (a lane computes what the scalar loop computed at its
index with the same operations; O3 contracts nothing here either, ``fmadd`` is ``llvm.fma``
both ways).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh
from graphc.ir.elementwise import ELEMENTWISE

from . import options
from .llvm_util import for_range, i64
from .views import VIEW_OPS, closure_of, contiguous_strides, strided_view

LANES = 16  # floats a vector run computes at once (AVX-512's width; two AVX2 registers)

# the ops a vector run computes: LLVM arithmetic, compares, ``select`` and the intrinsics
# ``VectorEmit`` names for vectors (``sqrt``, ``fabs``, ``maximum``, ``minimum``, ``fma``);
# the views that only move an index (an ``expand`` of a per-channel value, a ``reshape``)
VECTOR_OPS = frozenset({"add", "sub", "mul", "div", "neg", "abs", "sqrt", "relu", "sign",
                        "maximum", "minimum", "where", "lt", "le", "gt", "ge", "eq", "ne",
                        "const", "expand", "reshape", "fmadd"})
COMPARES = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})


def real_dims(shape: tuple) -> list[int]:
    """The dims of ``shape`` that are not 1 (a run's index goes in the last of them)."""
    return [d for d in range(len(shape)) if not sh.same(shape[d], 1)]


def flat_index(shape: tuple, j: ir.Value) -> list[ir.Value]:
    """The index of flat offset ``j`` in a contiguous ``shape`` as a vector run writes it:
    ``j`` in the last dim that is not 1, zero in the others (right for the reads a run takes:
    contiguous with that shape, or the same all along it)."""
    at: list[ir.Value] = [i64(0)] * len(shape)
    at[real_dims(shape)[-1]] = j
    return at


# float32 powers ``Emit.pow`` writes as multiplies or a square root, which take vectors
_POWERS = (1.0, 2.0, 3.0, 0.5)


def op_ok(n: Node) -> bool:
    """Whether a vector run computes node ``n`` itself: a ``VECTOR_OPS`` op on float32 (a
    compare giving bool, a float32 or bool constant), or a float32 power by a constant in
    ``_POWERS`` (a squared error)."""
    if n.op == "pow":
        y = n.inputs[1]
        while y.op in ("expand", "reshape"):
            y = y.inputs[0]
        return (n.dtype is dt.float32 and y.op == "const"
                and isinstance(y.attrs["value"], (int, float))
                and float(y.attrs["value"]) in _POWERS)
    if n.op not in VECTOR_OPS:
        return False
    if n.op in COMPARES:
        return n.dtype is dt.bool_
    if n.op == "const":
        return n.dtype in (dt.float32, dt.bool_)
    return n.dtype is dt.float32


# ops whose value at an index is a function of their operands' values there alone (the
# ``_l_table`` rule of every op-table primitive, constants): computed once before the run
# when their operands are the same all along it, whatever the op and dtype
_PURE = frozenset({d.name for d in ELEMENTWISE} | {"const"})
INV, VAR = "invariant", "varying"


class _Classify:
    """Which values of a kernel's members vary along a run over dims ``dims`` (``VAR``) and
    which are the same all along it (``INV``), or None: some value cannot be in a vector run
    (an op outside ``VECTOR_OPS`` that varies, a varying read that is not contiguous float32,
    a view that is not a strided view of buffers: a slice, a pad, a reshape that divides an
    index). The loop runs over ``shape``; ``last``: the run index's dim."""

    def __init__(self, k: Any, shape: tuple, dims: list[int], last: int,
                 whole: bool = False, members: bool = True) -> None:
        self.k, self.dims, self.last = k, dims, last
        self.cs = contiguous_strides(shape)
        self.nd = len(shape)
        self.shape = shape
        # the run is every dim that is not 1 (its index is the flat offset itself)
        self.whole = whole
        # the members' values may be read (at the loop's own index; not in a reshape's
        # source, whose index is another)
        self.ids = {m.id for m in k.members} if members else set()
        self.memo: dict[tuple[int, bool], str | None] = {}
        self.inner: list[_Classify] = []  # the reshapes' sources, each in its own shape

    def read(self, base: Node, strides: list[Any], dtype: Any) -> str | None:
        if len(strides) != self.nd:
            return None
        st = list(strides)
        if base.id == self.k.staged_id:  # one image of it (``load_buffer``)
            st[0] = 0
        if all(sh.same(st[d], 0) for d in self.dims):
            return INV
        if (dtype is dt.float32 and sh.same(st[self.last], 1)
                and all(sh.same(st[d], self.cs[d]) for d in self.dims)):
            return VAR
        return None

    def __call__(self, n: Node, own: bool = False) -> str | None:
        key = (n.id, own)
        if key not in self.memo:
            self.memo[key] = None  # (a cycle cannot occur; a graph is acyclic)
            self.memo[key] = self._of(n, own)
        return self.memo[key]

    def _of(self, n: Node, own: bool) -> str | None:
        k = self.k
        if not own and n.id in self.ids:
            return self(n, True)  # an earlier member: its value is in a register
        if not own and k._is_buffer(n):
            if len(n.shape) != self.nd or not all(
                    sh.same(a, b) for a, b in zip(n.shape, self.shape)):
                return None
            return self.read(n, contiguous_strides(n.shape), n.dtype)
        if n.op in VIEW_OPS:
            sv = strided_view(n, lambda m: m is not n and k._is_buffer(m))
            if sv is not None:
                return self.read(sv[0], sv[1], sv[0].dtype)
            # a view of computed values: values that read no buffer at all, or (a run
            # over every dim) a reshape of values computed from contiguous reads of its
            # source's shape, whose flat offset is the run's (``flat_index``)
            if _reads_nothing(n.inputs[0], k):
                return INV
            src = n.inputs[0].shape
            if (n.op == "expand" and len(src) == self.nd
                    and all(sh.same(src[d], 1) for d in self.dims)
                    and not _reads_members(n.inputs[0], k)):
                return INV  # broadcast along the whole run: computed once, as scalars
            if n.op != "reshape" or not self.whole:
                return None
            real = real_dims(src)
            if not real:
                return None
            c = _Classify(k, src, real, real[-1], whole=True, members=False)
            got = c(n.inputs[0])
            if got is None:
                return None
            self.inner.append(c)
            return got
        if n.op not in _PURE:
            return None
        got = [self(x) for x in n.inputs]
        if any(g is None for g in got):
            return None
        if all(g == INV for g in got):
            return INV
        return VAR if op_ok(n) else None


def _cone(n: Node, k: Any) -> list[Node]:
    """``n`` and what its value is computed from, down to the buffers it reads (included,
    not passed): the kernel's inline closure (``views.closure_of``) and its buffers."""
    if k._is_buffer(n):
        return [n]
    inline = closure_of(n, k.L.mat_ids)
    return inline + [y for x in inline for y in x.inputs if k._is_buffer(y)]


def _reads_members(n: Node, k: Any) -> bool:
    """Whether ``n``'s value reads a member's (held at the loop's own index)."""
    ids = {m.id for m in k.members}
    return any(x.id in ids for x in _cone(n, k))


def _reads_nothing(n: Node, k: Any) -> bool:
    """Whether ``n``'s value reads no buffer and no index: constants and pure ops on them."""
    return not any(k._is_buffer(x) or (x.op not in _PURE and x.op not in VIEW_OPS)
                   for x in _cone(n, k))


def run_start(k: Any, shape: tuple) -> tuple[int, int, frozenset[int]] | None:
    """``(s, last, invariant)``: the run is dims ``s..`` of the loop over ``shape`` (the
    longest such suffix), its index in dim ``last`` (the last of them that is not 1);
    ``invariant``: the ids of the values that are the same all along the run (computed once
    before its loop). None when the kernel cannot be written in vector runs (see the module
    docstring). ``k``: the kernel emitter, its members set."""
    if not options.VECTOR_RUNS or k.debug or k.forms is None:
        return None
    nd = len(shape)
    real = real_dims(shape)
    if not real:
        return None
    last = real[-1]
    for m in k.members:
        if m.id in k.outs and (m.dtype is not dt.float32 or len(m.shape) != nd or not all(
                sh.same(a, b) for a, b in zip(m.shape, shape))):
            return None  # every store is of float32 vectors at the loop's own index
    for s in real:
        c = _Classify(k, shape, [d for d in real if d >= s], last, whole=s == real[0])
        got = [c(m, True) for m in k.members]
        if all(g is not None for g in got) and VAR in got:
            inv: set[int] = set()
            todo = [c]
            while todo:
                x = todo.pop()
                inv.update(i for (i, _), g in x.memo.items() if g == INV)
                todo.extend(x.inner)
            return s, last, frozenset(inv)
    return None


def emit_runs(k: Any, shape: tuple, body: Any) -> bool:
    """The loop nest over ``shape`` with its run in vector runs (``run_start``): ``body(idx)``
    emitted with ``k.lanes`` set for each vector (two in the loop, one more after it) and
    once for the scalar tail; False (nothing emitted) when the kernel does not qualify. Sets
    the kernel's level to ``tile``. (``k.cache`` is empty here: the members' values are made
    by ``body``.)"""
    got = run_start(k, shape)
    if got is None:
        return False
    s, last, k.invariant = got
    k.level = "tile"  # every run written in vectors: nothing left for O3 to vectorise
    b = k.b
    nd = len(shape)
    idx: list[Any] = [i64(0)] * nd
    real = real_dims(shape)
    outer = [d for d in real if d < s]
    split = k.split_range

    def run() -> None:
        if outer:
            start, end = i64(0), k.sym(sh.numel(shape[s:]))
        else:  # the run is every dim: the thread's share of the flat range
            d0 = real[0]
            inner = k.sym(sh.numel(shape[d0 + 1:]))
            lo, hi = split if split is not None else (i64(0), k.sym(shape[d0]))
            start, end = b.mul(lo, inner), b.mul(hi, inner)
        vend = b.add(start, b.and_(b.sub(end, start), i64(-LANES)))
        # two vectors an iteration, then one more, then the scalar tail: at one vector an
        # iteration, the loop's own instructions were a good part of a short run's time
        pend = b.add(start, b.and_(b.sub(end, start), i64(-2 * LANES)))
        # the values the same all along the run are computed before its vectors, and only
        # when there is one (an index check among them reports nothing a scalar loop over
        # no elements would not)
        with b.if_then(b.icmp_signed("<", start, vend)):
            before = b.block
            k.run_values, k.run_scalars, k.run_first = {}, {}, start
            hoist = [(before, tuple(idx[d] for d in outer))]  # (moves as values go there)

            def vector(j: ir.Value) -> None:
                k.record_var(j, None)
                idx[last] = j
                k.lanes, k.lane_var, k.hoist = LANES, j, hoist[0]
                try:
                    body(idx)
                finally:
                    hoist[0] = k.hoist
                    k.lanes, k.lane_var, k.hoist = 0, None, None

            with for_range(b, start, pend, name="vrun", step=i64(2 * LANES)) as j:
                vector(j)
                vector(b.add(j, i64(LANES)))
            with b.if_then(b.icmp_signed("<", pend, vend)):
                vector(pend)
            k.run_values, k.run_scalars, k.run_first = None, None, None
        with for_range(b, vend, end, name="run") as j:
            k.record_var(j, None)
            idx[last] = j
            body(idx)
        k.invariant = frozenset()

    def rec(i: int, rng: tuple[ir.Value, ir.Value] | None) -> None:
        if i == len(outer):
            run()
            return
        d = outer[i]
        lo, hi = rng if rng is not None else (i64(0), k.sym(shape[d]))
        with for_range(b, lo, hi, name=f"i{d}") as v:
            k.record_var(v, shape[d])
            idx[d] = v
            rec(i + 1, None)

    rec(0, split)
    return True


__all__ = ["LANES", "VECTOR_OPS", "COMPARES", "op_ok", "real_dims", "flat_index",
           "run_start", "emit_runs"]
