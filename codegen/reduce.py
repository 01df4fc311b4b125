"""Reduction kernels for the CPU backend (and the blocked summation the PTX kernels share):
the ``sum``/``max`` kernel family, registered in ``codegen.kernels``.

Two concerns live here.

*Layout.* The general inner reduction (``direct``) nests one loop per reduced dim, so a bias
gradient (``sum`` over N, H, W of an ``[N, C, 14, 14]`` buffer) vectorises over 14 elements at
a time. When the operand is a buffer (contiguous) and two or more trailing dims are all
reduced, they are one run of ``prod(dims)`` elements: ``kernel`` reads it with a single loop
(196 or 784 elements for the cnn's layers), which LLVM vectorises with several accumulators.

*Precision.* A float sum accumulated serially loses about ``n * eps`` relative accuracy: at
16M elements the vectorised serial loop was off by 1e-5 to 1e-4 where numpy (pairwise) stays
near 1e-7. Every float ``sum`` therefore adds in blocks: a block of up to ``BLOCK`` elements is
summed by a plain loop (which LLVM vectorises with several vector accumulators, as numpy's
8-wide unrolled blocks), and block sums are combined pairwise through a binary-counter stack
(``Cascade``): the k-th block sum merges with the stored sums of equal weight, exactly like
the pairwise tree over blocks, in O(log n) memory. Reductions over the last dim use scalar
accumulators (``cascade_sum``); reductions over leading dims keep the vectorised row-wise
accumulation, on strips of ``STRIP`` output columns whose row sums are combined the same way
(``outer_sum``). Reductions whose extent is known to fit one block keep the single loop, so
small steps (a 10-class softmax, a 64-row loss) run exactly the code they ran before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir

from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh

from .emitter import KernelEmitter, loops_into
from .kernels import Kernel, register
from .llvm_util import (
    I64,
    REDUCE_FLAGS,
    bf16_to_f32,
    fconst,
    for_range,
    i64,
    intrinsic,
    reg_type,
)
from .views import contiguous_strides

BLOCK = 2048  # elements summed by one plain (vectorised) loop before a pairwise merge
ROW_BLOCK = 128  # rows of a leading-dim reduction accumulated before a pairwise merge
STRIP = 256  # output columns a leading-dim reduction accumulates at once
LEVELS = 48  # binary-counter depth: 2**48 blocks is more than any buffer holds


def fits_one_block(extent: Any, block: int = BLOCK) -> bool:
    """True when a reduced extent is a constant no larger than one block."""
    return isinstance(extent, int) and extent <= block or (
        getattr(extent, "is_Integer", False) and int(extent) <= block)


def _umin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


class Cascade:
    """Pairwise combination of block sums (``width`` lanes each) with a binary-counter stack.

    ``push(blk)`` adds a block: while the count of pushed blocks has its lowest bit set, the
    stored sum of that level (as many blocks as the current one holds) is added in front, and
    the result moves up a level. ``fold`` adds the remaining levels. ``blk`` is an alloca of
    ``width`` values that ``push`` consumes and leaves zeroed; the stack lives in the entry
    block's allocas (``LEVELS * width`` values).
    """

    def __init__(self, k: Any, t: ir.Type, width: int = 1) -> None:
        self.k, self.t, self.w = k, t, width
        self.stack = k.alloca(ir.ArrayType(t, LEVELS * width))
        self.blk = k.alloca(ir.ArrayType(t, width))
        self.count = k.alloca(I64)

    def _lanes(self, body: Callable[[ir.Value], None]) -> None:
        if self.w == 1:
            body(i64(0))
            return
        with for_range(self.k.b, i64(0), i64(self.w), name="lane") as i:
            body(i)

    def blk_ptr(self, i: ir.Value) -> ir.Value:
        return self.k.b.gep(self.blk, [i64(0), i], inbounds=True)

    def _slot(self, lvl: ir.Value, i: ir.Value) -> ir.Value:
        b = self.k.b
        at = b.add(b.mul(lvl, i64(self.w)), i) if self.w > 1 else lvl
        return b.gep(self.stack, [i64(0), at], inbounds=True)

    def reset(self) -> None:
        b = self.k.b
        b.store(i64(0), self.count)
        self._lanes(lambda i: b.store(fconst(self.t, 0.0), self.blk_ptr(i)))

    def push(self) -> None:
        """Push the block in ``blk`` (then zeroed) as the next leaf of the pairwise tree."""
        b = self.k.b
        fn = b.function
        c0 = b.load(self.count)
        pre = b.block
        head, body, done = (fn.append_basic_block(f"cas.{s}") for s in ("head", "merge", "put"))
        b.branch(head)
        b.position_at_end(head)
        lvl = b.phi(I64)
        c = b.phi(I64)
        lvl.add_incoming(i64(0), pre)
        c.add_incoming(c0, pre)
        b.cbranch(b.icmp_unsigned("!=", b.and_(c, i64(1)), i64(0)), body, done)
        b.position_at_end(body)

        def merge(i: ir.Value) -> None:
            p = self.blk_ptr(i)
            b.store(b.fadd(b.load(self._slot(lvl, i)), b.load(p)), p)

        self._lanes(merge)
        lvl.add_incoming(b.add(lvl, i64(1)), b.block)
        c.add_incoming(b.lshr(c, i64(1)), b.block)
        b.branch(head)
        b.position_at_end(done)

        def put(i: ir.Value) -> None:
            p = self.blk_ptr(i)
            b.store(b.load(p), self._slot(lvl, i))
            b.store(fconst(self.t, 0.0), p)

        self._lanes(put)
        b.store(b.add(c0, i64(1)), self.count)

    def fold(self) -> None:
        """Leave the total of every pushed block in ``blk`` (which must be zero on entry):
        the levels whose bit is set in the count, lowest first."""
        b = self.k.b
        fn = b.function
        count = b.load(self.count)
        pre = b.block
        head, body, done = (fn.append_basic_block(f"fold.{s}") for s in ("head", "add", "end"))
        b.branch(head)
        b.position_at_end(head)
        lvl = b.phi(I64)
        c = b.phi(I64)
        lvl.add_incoming(i64(0), pre)
        c.add_incoming(count, pre)
        b.cbranch(b.icmp_unsigned("!=", c, i64(0)), body, done)
        b.position_at_end(body)
        with b.if_then(b.icmp_unsigned("!=", b.and_(c, i64(1)), i64(0))):
            def add(i: ir.Value) -> None:
                p = self.blk_ptr(i)
                b.store(b.fadd(b.load(self._slot(lvl, i)), b.load(p)), p)

            self._lanes(add)
        lvl.add_incoming(b.add(lvl, i64(1)), b.block)
        c.add_incoming(b.lshr(c, i64(1)), b.block)
        b.branch(head)
        b.position_at_end(done)


def cascade_sum(k: Any, t: ir.Type, run_loops: Callable[[Callable[[], None]], None],
                extent: ir.Value, element: Callable[[ir.Value], ir.Value],
                start: ir.Value | None = None, step: ir.Value | None = None,
                block: int = BLOCK) -> ir.Value:
    """Blocked pairwise sum of ``element(j)`` for j in ``range(start, extent, step)`` inside
    every iteration of ``run_loops`` (the loops over the other reduced dims).

    Each block of ``block`` consecutive iterations is summed by its own loop (vectorised by
    LLVM: ``reassoc`` on a fresh accumulator); short runs (a small last dim) are gathered into
    one block before it is pushed, so the cascade costs a few instructions per ``block``
    elements. ``start``/``step``: the PTX per-thread strided loop (``tid``, ``ntid``); each
    thread's chunk of ``block`` iterations is then one leaf of its pairwise tree.
    """
    return cascade_sums(k, t, run_loops, extent, lambda j: [element(j)], 1, start, step,
                        block)[0]


def cascade_sums(k: Any, t: ir.Type, run_loops: Callable[[Callable[[], None]], None],
                 extent: ir.Value, elements: Callable[[ir.Value], list[ir.Value]],
                 count: int, start: ir.Value | None = None, step: ir.Value | None = None,
                 block: int = BLOCK,
                 block_sums: Callable[[ir.Value, ir.Value, list[ir.Value]], None] | None = None
                 ) -> list[ir.Value]:
    """``cascade_sum`` of ``count`` sums in one loop: ``elements(j)`` gives the j-th
    element of each (and may store other values at j: a channel group's members,
    ``codegen.channel_groups``); each sum has its own block accumulator and cascade, and
    all share the block boundaries, so each is summed exactly as ``cascade_sum`` sums it.
    ``block_sums(c0, hi, part)``, where given, stores each sum's total over the block
    ``[c0, hi)`` in its ``part`` slot instead of the loop over ``elements`` (a channel
    group's vector runs: ``channel_groups._vector_pass``); blocks and cascades stay these."""
    b = k.b
    cas = [Cascade(k, t) for _ in range(count)]
    part = [k.alloca(t) for _ in range(count)]
    filled = k.alloca(I64)
    for c in cas:
        c.reset()
    b.store(i64(0), filled)
    span = i64(block) if step is None else b.mul(step, i64(block))

    first = i64(0) if start is None else start

    def body() -> None:
        with for_range(b, first, extent, name="blk", step=span) as c0:
            hi = _umin(b, b.add(c0, span), extent)
            if block_sums is not None:
                block_sums(c0, hi, part)
            else:
                for p in part:
                    b.store(fconst(t, 0.0), p)
                with for_range(b, c0, hi, name="run", step=step) as j:
                    k.record_var(j, extent)  # j in [0, extent): codegen.affine
                    for p, v in zip(part, elements(j), strict=True):
                        b.store(b.fadd(b.load(p), v, flags=REDUCE_FLAGS), p)
            for c, p in zip(cas, part):
                blk = c.blk_ptr(i64(0))
                b.store(b.fadd(b.load(blk), b.load(p)), blk)
            n = b.sub(hi, c0)
            got = b.add(b.load(filled), n if step is None else i64(block))
            b.store(got, filled)
            with b.if_then(b.icmp_signed(">=", got, i64(block))):
                for c in cas:
                    c.push()
                b.store(i64(0), filled)

    run_loops(body)
    out = []
    for c in cas:
        c.push()
        c.fold()
        out.append(b.load(c.blk_ptr(i64(0))))
    return out


def outer_sum(k: Any) -> None:
    """A float ``sum`` whose last dim is kept: row-wise accumulation on strips of columns.

    For each ``STRIP`` columns of the last dim, rows (every combination of the reduced dims)
    are added into a strip accumulator, vectorised along the columns as before; every
    ``ROW_BLOCK`` rows the strip is pushed into a ``Cascade`` of strips, so the rows are
    combined pairwise in blocks instead of one long serial chain per column.
    """
    n = k.node
    x = n.inputs[0]
    b = k.b
    axes = set(n.attrs["axes"])
    nd = len(x.shape)
    last = nd - 1
    t = reg_type(n.dtype)
    red = [d for d in range(nd) if d in axes]
    kept_outer = [d for d in range(nd) if d not in axes and d != last]
    n_last = k.sym(x.shape[last])
    # a last dim known to be narrower than a strip: strips of exactly its width, so the
    # cascade's lane loops do not run (and LLVM does not vectorise) 256 lanes for a column
    # or two (the seed's loss sums a [B, 1] column: five 256-lane loops were half of the
    # LLVM time of its whole step); the same additions in the same order
    last_size = x.shape[last]
    width = max(1, int(last_size)) if sh.is_concrete((last_size,)) and int(last_size) < STRIP \
        else STRIP
    fac = _column_blocks(k, x.shape)
    if fac is not None:  # strips of whole blocks (``columns``)
        width = min(int(last_size), max(fac, width // fac * fac))
    cas = Cascade(k, t, width)
    rows = k.alloca(I64)

    def columns(f: list[Any], s: ir.Value | None, c0: ir.Value, w: ir.Value,
                add: Callable[[ir.Value, list[Any]], None]) -> None:
        """Strip ``s``'s columns in order. With ``fac``, in blocks of ``fac``: the column is
        ``fac * J + i1`` for a block variable ``J`` over the whole last dim, an affine form
        (``codegen.affine``) in which a view that splits the last dim (a bias gradient of
        ``[B, N, 3*H*D]`` seen through timm's ViT qkv permute) finds its source index with
        at most a division of ``J`` a block (hoisted out of the ``fac`` columns), where the
        strip's columns divided every element's index and read scattered addresses (5.6 ms
        against 0.11-0.16 for ``[16, 197, 576]``, Zen 4)."""
        if s is None:  # (no ``fac``)
            with for_range(b, i64(0), w, name="col") as i:
                f[last] = b.add(c0, i)
                add(i, f)
            return
        fs = k.forms
        nblocks = int(last_size) // fac
        j0 = b.mul(s, i64(width // fac))
        j1 = _umin(b, b.add(j0, i64(width // fac)), i64(nblocks))
        with for_range(b, j0, j1, name="colb") as jb:
            with for_range(b, i64(0), i64(fac), name="col") as i1:
                fs.var(jb, nblocks)
                fs.var(i1, fac)
                col = fs.emit(b, ({id(jb): fac, id(i1): 1}, 0))
                f[last] = col
                add(b.sub(col, c0), f)

    def strip(idx: list[Any]) -> None:
        if fac is None:
            with for_range(b, i64(0), n_last, name="strip", step=i64(width)) as c0:
                strip_at(idx, None, c0)
        else:  # strips counted, so a block's index needs no division by the width
            with for_range(b, i64(0), i64(-(-int(last_size) // width)), name="strip") as s:
                strip_at(idx, s, b.mul(s, i64(width)))

    def strip_at(idx: list[Any], s: ir.Value | None, c0: ir.Value) -> None:
        w = _umin(b, i64(width), b.sub(n_last, c0))
        cas.reset()
        b.store(i64(0), rows)
        full = list(idx)

        def add(i: ir.Value, f: list[Any]) -> None:
            p = cas.blk_ptr(i)
            b.store(b.fadd(b.load(p), k.value(x, list(f)), flags=REDUCE_FLAGS), p)

        def row(f: list[Any]) -> None:
            columns(f, s, c0, w, add)
            r = b.add(b.load(rows), i64(1))
            b.store(r, rows)
            with b.if_then(b.icmp_signed(">=", r, i64(ROW_BLOCK))):
                cas.push()
                b.store(i64(0), rows)

        loops_into(k, tuple(x.shape), red, full, row)
        cas.push()
        cas.fold()
        with for_range(b, i64(0), w, name="put") as i:
            out = [i64(0) if d in axes else idx[d] for d in range(nd)]
            out[last] = b.add(c0, i)
            k.store_out(out, b.load(cas.blk_ptr(i)))

    k.loops(tuple(x.shape), strip, order=kept_outer)


def _column_blocks(k: Any, shape: tuple) -> int | None:
    """The block size ``outer_sum`` takes its columns in (``columns``), or None: the factor
    the views it reads divide the last dim by (``KernelEmitter.inner_factor``), for a last
    dim of known size that it divides, and no wider than a strip (the strip's accumulators,
    ``Cascade``, live on the stack). Each column's additions are the same either way."""
    if k.forms is None or not sh.is_concrete((shape[-1],)):
        return None
    fac = k.inner_factor(tuple(shape))
    if fac is None or fac <= 1 or fac > STRIP or int(shape[-1]) % fac:
        return None
    return fac


def combine(k: KernelEmitter, op: str, acc: ir.Value, v: ir.Value, d: dt.DType) -> ir.Value:
    b = k.b
    if op == "sum":
        return b.fadd(acc, v, flags=REDUCE_FLAGS) if d.is_float else b.add(acc, v)
    if d.is_float:
        return b.call(intrinsic(k.L.module, "llvm.maximum", acc.type, 2), [acc, v])
    if d is dt.bool_:  # i1 compares signed as 0 > -1: the max of bools is their or
        return b.or_(acc, v)
    return b.select(b.icmp_signed(">", v, acc), v, acc)


def init(op: str, d: dt.DType) -> ir.Constant:
    t = reg_type(d)
    if op == "sum":
        return fconst(t, 0.0) if d.is_float else ir.Constant(t, 0)
    if d.is_float:
        return fconst(t, float("-inf"))
    return ir.Constant(t, -(1 << (8 * d.itemsize - 1)) if d is not dt.bool_ else 0)


def direct(k: KernelEmitter) -> None:
    """The general reduction: inner reductions accumulate in a register (blocked pairwise for
    long float sums), outer ones accumulate rows into the output buffer."""
    n = k.node
    x = n.inputs[0]
    axes = set(n.attrs["axes"])
    nd = len(x.shape)
    b = k.b
    blocked = n.op == "sum" and n.dtype.is_float and not fits_one_block(
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
                    loops_into(k, tuple(x.shape), rest, full, lambda f: body())

                def element(j: ir.Value) -> ir.Value:
                    at = list(full)
                    at[inner_d] = j
                    return k.value(x, at)

                total = cascade_sum(k, reg_type(n.dtype), run_loops, extent,
                                                    element)
                k.store_out([i64(0) if d in axes else idx[d] for d in range(nd)], total)

            k.loops(tuple(x.shape), outer_blocked, order=kept) if kept else \
                outer_blocked([None] * nd)
            return

        def outer(idx: list[Any]) -> None:
            acc_slot = k.alloca(reg_type(n.dtype))
            b.store(init(n.op, n.dtype), acc_slot)

            def inner(full: list[Any]) -> None:
                v = k.value(x, list(full))
                b.store(combine(k, n.op, b.load(acc_slot), v, n.dtype), acc_slot)

            full = list(idx)
            red_shape = tuple(x.shape)
            loops_into(k, red_shape, red, full, inner)
            out_idx = [i64(0) if d in axes else idx[d] for d in range(nd)]
            k.store_out(out_idx, b.load(acc_slot))

        k.loops(tuple(x.shape), outer, order=kept) if kept else outer([None] * nd)
        return
    if n.op == "sum" and n.dtype.is_float and not fits_one_block(
            sh.numel([x.shape[d] for d in sorted(axes)]), ROW_BLOCK):
        outer_sum(k)  # rows combined pairwise in blocks, strips of columns
        return
    # outer reduction: initialise the output, then accumulate rows into it (vectorises)
    k.loops(n.shape, lambda idx: k.store_out(idx, init(n.op, n.dtype)))

    def acc(idx: list[Any]) -> None:
        out_idx = [i64(0) if d in axes else idx[d] for d in range(nd)]
        ptr = k.out_ptr(out_idx)
        v = k.value(x, list(idx))
        b.store(combine(k, n.op, b.load(ptr), v, n.dtype), ptr)

    k.loops(tuple(x.shape), acc)


def kernel(fallback: Callable[[Any], None]) -> Callable[[Any], None]:
    """The kernel for ``sum``/``max``: the flattened-run kernel when it applies, else
    ``fallback``."""

    def emit(k: Any) -> None:
        n = k.node
        x = n.inputs[0]
        axes = set(n.attrs["axes"])
        nd = len(x.shape)
        tail = nd
        while tail > 0 and (tail - 1) in axes:
            tail -= 1
        if (getattr(k, "debug", False) or nd - tail < 2 or not k._is_buffer(x)
                or not x.dtype.is_float):
            fallback(k)
            return
        b = k.b
        run = k.sym(sh.numel(x.shape[tail:]))
        strides = contiguous_strides(x.shape)[:tail]
        kept = [d for d in range(tail) if d not in axes]
        red = [d for d in range(tail) if d in axes]
        src = k.ptr[x.id]

        def widen(v: ir.Value) -> ir.Value:  # a bf16 element as float32 (exact)
            return bf16_to_f32(b, v) if x.dtype is dt.bfloat16 else v

        blocked = n.op == "sum" and not fits_one_block(
            sh.numel([x.shape[d] for d in sorted(axes)]))

        def outer(idx: list[Any]) -> None:
            full = list(idx)
            if blocked:
                def run_loops(body: Callable[[], None]) -> None:
                    loops_into(k, tuple(x.shape), red, full, lambda f: body())

                def element(j: ir.Value) -> ir.Value:
                    row = b.gep(src, [k.linear(full[:tail], strides)], inbounds=True)
                    return widen(b.load(b.gep(row, [j], inbounds=True)))

                total = cascade_sum(k, reg_type(n.dtype), run_loops, run, element)
                k.store_out([i64(0) if d in axes else idx[d] for d in range(nd)], total)
                return
            acc = k.alloca(init(n.op, n.dtype).type)
            b.store(init(n.op, n.dtype), acc)

            def inner(full: list[Any]) -> None:
                row = b.gep(src, [k.linear(full[:tail], strides)], inbounds=True)
                with for_range(b, i64(0), run, name="run") as j:
                    v = widen(b.load(b.gep(row, [j], inbounds=True)))
                    b.store(combine(k, n.op, b.load(acc), v, n.dtype), acc)

            loops_into(k, tuple(x.shape), red, full, inner)
            k.store_out([i64(0) if d in axes else idx[d] for d in range(nd)], b.load(acc))

        if kept:
            k.loops(tuple(x.shape), outer, order=kept)
        else:
            outer([None] * nd)

    emit.__doc__ = fallback.__doc__
    return emit


KERNEL = register(Kernel("reduce", ("sum", "max"), kernel(direct)))

__all__ = ["kernel", "direct", "combine", "init", "KERNEL", "Cascade", "cascade_sum",
           "cascade_sums", "outer_sum", "fits_one_block", "BLOCK"]
