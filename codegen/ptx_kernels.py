"""PTX kernel emitters: one ``.entry`` per materialized node (two for scatter_add).

``PTXKernel`` reuses the CPU lowering's ``KernelEmitter`` for everything that is about *values*
(``value``/``compute`` fuse elementwise and view chains at a multi-index, views remap indices or
strides), and replaces what is about *execution*: kernels are ``ptx_kernel`` functions over
``addrspace(1)`` buffers, batch symbols arrive as ``i64`` parameters, loops over the output
become grid-stride loops (any symbolic batch size runs with any grid), index errors set a flag
in device memory instead of returning early (a thread that leaves a kernel early would skip
the barriers its block waits on). Element values come from the op table's expressions, which
both backends emit (``codegen/emit.py``; transcendental functions are ``vmath``'s plain-IR
routines, never libm calls, which NVPTX cannot lower).

Kernel shapes (``BLOCK`` threads each):

- elementwise / fused expression: one thread per output element;
- reduction: one block per output element, threads stride over the reduced elements, then a
  warp shuffle tree and one shared-memory exchange between warps; a reduction over a small
  static extent runs one thread per output instead;
- matmul: 64x64 output tiles through shared memory (16 deep), each thread a 4x4 register tile;
  operands are read through their strides, so transposed views cost nothing. Tensor-core
  ``mma.sync`` (tf32/bf16) would be the next step; it changes float32 rounding, so it would be
  opt-in;
- scatter_add: copy ``base``, then ``atomicrmw add`` per source element;
- scans (cumsum, cumprod, cummax): one thread per line, sequential along the axis;
- convolutions and max-pool indices: one thread per output element with the taps in a loop
  (the weight gradient, which sums over the batch, is a block reduction);
- attention and its gradient: one thread per output row (a query row; for the gradient a row
  of dq, dk or dv), softmax statistics by a running max with online rescaling, the scores
  recomputed from q and k, never stored. Straightforward, not tuned: a warp per row with
  k/v tiles in shared memory (FlashAttention's form) would be the next step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import ops as gops
from graphc.ir import shapes as sh

from .abi import ERR_INDEX
from .elementwise import ELEMENT_RULES, counter_uniform
from .emitter import KernelEmitter
from .llvm_util import (
    F32,
    I1,
    I8,
    I32,
    I64,
    VOID,
    SymEmitter,
    declare,
    fconst,
    for_range,
    i64,
    mem_type,
    reg_type,
)
from .pool import window_start
from .scan import outer_shape, scan_line
from .sort import outer_shape as sort_outer_shape
from .sort import sort_line
from .views import VIEW_OPS, contiguous_strides, strided_view
from .vmath import VMath

BLOCK = 256
SMALL_REDUCTION = 64  # static reduced extents up to this run one thread per output
THREAD_CHUNK = 256  # strided elements a thread sums into one partial (see ``_thread_sum``)
TILE_M = TILE_N = 64
TILE_K = 16
GLOBAL = 1
SHARED = 3




def strided_for(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: ir.Value,
                name: str) -> Any:
    """``for i in range(start, stop, step)`` (i64, step > 0): the grid-stride loop."""
    return for_range(b, start, stop, name=name, step=step)


class PTXKernel(KernelEmitter):
    """A ``.entry`` kernel for one node: ``(out, buffers..., syms..., err)``.

    ``__init__`` deliberately does not call ``KernelEmitter.__init__`` (which builds a CPU
    function); it sets up the same attributes over a kernel signature instead.
    """

    def __init__(self, lower: Any, node: Node, name: str) -> None:
        self.L = lower
        self.node = node
        self.cache: dict[int, ir.Value] = {}  # loop groups are a CPU-plan feature: none here
        self.buffers: list[Node] = []
        self._collect(node, top=True)
        mod = lower.module
        ptrs = [mem_type(node.dtype).as_pointer(GLOBAL)] + \
            [mem_type(x.dtype).as_pointer(GLOBAL) for x in self.buffers]
        arg_types = ptrs + [I64] * len(lower.symbols) + [I64.as_pointer(GLOBAL)]
        self.fn = ir.Function(mod, ir.FunctionType(VOID, arg_types), name=name)
        self.fn.calling_convention = "ptx_kernel"
        # a node the plan writes straight over its state buffer reads that buffer too
        self.direct = node.id in lower.plan.direct
        if not self.direct:
            for a in self.fn.args[:len(ptrs)]:
                a.add_attribute("noalias")
        self.name = name
        self.work = None
        entry = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        self._allocas = ir.IRBuilder(entry)
        self._entry_br = self._allocas.branch(start)
        self.b = ir.IRBuilder(start)
        self.err_block = None
        self.err_ptr = self.fn.args[-1]
        syms = self.fn.args[len(ptrs):len(ptrs) + len(lower.symbols)]
        hoist = ir.IRBuilder(entry)
        hoist.position_before(self._entry_br)
        # shape expressions are emitted in the entry block, so they dominate every loop
        self.sym = SymEmitter(_Hoisted(hoist, self._entry_br), dict(zip(lower.symbols, syms)))
        self.out = self.fn.args[0]
        self.ptr = {n.id: a for n, a in zip(self.buffers, self.fn.args[1:len(ptrs)])}
        self._sreg: dict[str, ir.Value] = {}
        if self.direct:
            # it overwrites state: do nothing if an earlier kernel flagged an error (the
            # plan puts every kernel that can fail before such kernels)
            b = self.b
            failed = b.icmp_signed("!=", b.load(self.err_ptr), i64(0))
            with b.if_then(failed, likely=False):
                b.ret_void()

    # -- thread geometry ------------------------------------------------------------------
    def sreg(self, name: str) -> ir.Value:
        """``%tid.x`` and friends as i64, read once in the entry block."""
        if name not in self._sreg:
            fn = declare(self.L.module, f"llvm.nvvm.read.ptx.sreg.{name}", I32, [])
            self._allocas.position_before(self._entry_br)
            self._sreg[name] = self._allocas.zext(self._allocas.call(fn, []), I64)
        return self._sreg[name]

    def barrier(self) -> None:
        self.b.call(declare(self.L.module, "llvm.nvvm.barrier0", VOID, []), [])

    def shared(self, t: ir.Type, n: int, tag: str) -> ir.Value:
        arr = ir.ArrayType(t, n)
        gv = ir.GlobalVariable(self.L.module, arr, f"{self.name}.{tag}", addrspace=SHARED)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(arr, ir.Undefined)
        return gv

    def smem_ptr(self, gv: ir.Value, i: ir.Value) -> ir.Value:
        return self.b.gep(gv, [ir.Constant(I32, 0), i], inbounds=True)

    def grid_stride(self, total: ir.Value, per_block: bool = False) -> Any:
        """Loop over ``range(total)``: by thread (default) or by block (``per_block``)."""
        if per_block:
            return strided_for(self.b, self.sreg("ctaid.x"), total, self.sreg("nctaid.x"),
                               "blk")
        b = self.b
        start = b.add(b.mul(self.sreg("ctaid.x"), self.sreg("ntid.x")), self.sreg("tid.x"))
        step = b.mul(self.sreg("nctaid.x"), self.sreg("ntid.x"))
        return strided_for(b, start, total, step, "gs")

    def numel(self, shape: tuple) -> ir.Value:
        return self.sym(sh.numel(shape))

    def delin(self, lin: ir.Value, shape: tuple) -> list[ir.Value]:
        """Multi-index of flat position ``lin`` in a contiguous ``shape``."""
        b = self.b
        out = []
        first = True
        for d, st in zip(shape, contiguous_strides(shape)):
            if d == 1:
                out.append(i64(0))
                continue
            q = lin if (isinstance(st, int) and st == 1) else b.udiv(lin, self.sym(st))
            out.append(q if first else b.urem(q, self.sym(d)))
            first = False
        return out

    # -- values ---------------------------------------------------------------------------
    def compute(self, n: Node, idx: list[ir.Value]) -> ir.Value:
        rule = PTX_RULES.get(n.op)
        if rule is not None:
            return rule(self, n, idx)
        return super().compute(n, idx)

    def flag_index_error(self, ix: ir.Value, size: Any, pos: ir.Value, node: Any = None
                         ) -> ir.Value:
        """Record (node, position, value) once if ix is out of range; returns 'in range'.

        The first failing thread wins a compare-and-swap on the error code, so the three
        detail words always describe one element. Callers keep going with a clamped index.
        """
        b = self.b
        ok = b.icmp_unsigned("<", ix, self.sym(size))
        with b.if_then(b.not_(ok), likely=False):
            res = b.cmpxchg(self.err_ptr, i64(0), i64(ERR_INDEX), "monotonic", "monotonic")
            with b.if_then(b.extract_value(res, 1)):
                for slot, v in ((1, i64(self.L.plan.node_index[(node or self.node).id])), (2, pos),
                                (3, ix)):
                    b.store(v, b.gep(self.err_ptr, [i64(slot)], inbounds=True))
        return ok

    def check_index(self, ix: ir.Value, size: Any, pos: ir.Value, node: Any = None) -> None:
        self.flag_index_error(ix, size, pos, node)

    def store_flat(self, lin: ir.Value, v: ir.Value) -> None:
        self.b.store(self.to_memory(self.node.dtype, v), self.b.gep(self.out, [lin],
                                                                  inbounds=True))

    def finish(self) -> None:
        self.b.ret_void()


class _Hoisted:
    """An IRBuilder stand-in that always inserts at the end of the entry block."""

    def __init__(self, b: ir.IRBuilder, term: ir.Instruction) -> None:
        self._b = b
        self._term = term

    def __getattr__(self, name: str) -> Any:
        self._b.position_before(self._term)
        return getattr(self._b, name)


# ---------------------------------------------------------------------------------------
# element rules that differ from the CPU's
# ---------------------------------------------------------------------------------------
def _r_gather(k: PTXKernel, n: Node, idx: list[ir.Value]) -> ir.Value:
    x, index = n.inputs
    ax = n.attrs["axis"]
    b = k.b
    ix = k.value(index, idx)
    ok = k.flag_index_error(ix, x.shape[ax], k.linear(idx, contiguous_strides(n.shape)), n)
    sub = list(idx)
    sub[ax] = b.select(ok, ix, i64(0))
    return k.value(x, sub)


PTX_RULES: dict[str, Callable[[PTXKernel, Node, list[ir.Value]], ir.Value]] = {
    "gather": _r_gather,
}
# ops that can be computed inline (expressions) by a PTX kernel
EXPRESSION_OPS = frozenset(ELEMENT_RULES) | frozenset(PTX_RULES) | frozenset(VIEW_OPS)


# ---------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------
def k_elementwise(k: PTXKernel) -> None:
    n = k.node
    with k.grid_stride(k.numel(n.shape)) as lin:
        k.store_flat(lin, k.compute(n, k.delin(lin, n.shape)))


def reduce_init(op: str, d: dt.DType) -> ir.Constant:
    t = reg_type(d)
    if op == "sum":
        return fconst(t, 0.0) if d.is_float else ir.Constant(t, 0)
    if d.is_float:
        return fconst(t, float("-inf"))
    return ir.Constant(t, 0 if d is dt.bool_ else -(1 << (8 * d.itemsize - 1)))


def reduce_combine(k: PTXKernel, op: str, acc: ir.Value, v: ir.Value, d: dt.DType
                   ) -> ir.Value:
    b = k.b
    if op == "sum":
        return b.fadd(acc, v, flags=("reassoc", "contract")) if d.is_float else b.add(acc, v)
    if d.is_float:
        w = 32 if acc.type == F32 else 64
        return b.call(declare(k.L.module, f"llvm.maximum.f{w}", acc.type, [acc.type] * 2),
                      [acc, v])
    if d is dt.bool_:
        return b.or_(acc, v)
    return b.select(b.icmp_signed(">", v, acc), v, acc)


def shfl_xor(k: PTXKernel, v: ir.Value, lane_mask: int) -> ir.Value:
    """``__shfl_xor_sync(0xffffffff, v, lane_mask)`` for any register type (split in i32s)."""
    b = k.b
    mod = k.L.module
    args = [ir.Constant(I32, -1), None, ir.Constant(I32, lane_mask), ir.Constant(I32, 31)]
    if v.type == F32:
        fn = declare(mod, "llvm.nvvm.shfl.sync.bfly.f32", F32, [I32, F32, I32, I32])
        return b.call(fn, [args[0], v] + args[2:])
    fn = declare(mod, "llvm.nvvm.shfl.sync.bfly.i32", I32, [I32, I32, I32, I32])
    if v.type in (I1, I8, I32):
        w = v if v.type == I32 else b.zext(v, I32)
        r = b.call(fn, [args[0], w] + args[2:])
        return r if v.type == I32 else b.trunc(r, v.type)
    bits = v if v.type == I64 else b.bitcast(v, I64)
    lo = b.call(fn, [args[0], b.trunc(bits, I32)] + args[2:])
    hi = b.call(fn, [args[0], b.trunc(b.lshr(bits, i64(32)), I32)] + args[2:])
    r = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), i64(32)))
    return r if v.type == I64 else b.bitcast(r, v.type)


def block_reduce(k: PTXKernel, v: ir.Value, combine: Callable[[ir.Value, ir.Value], ir.Value],
                 init: ir.Value, smem: ir.Value) -> ir.Value:
    """Reduce ``v`` over the block: warp butterflies, one smem exchange, warp butterflies.

    Every thread of the block must call this (it has barriers and full-mask shuffles); the
    result is valid in thread 0. It ends with a barrier so ``smem`` may be reused at once.
    """
    b = k.b
    for off in (16, 8, 4, 2, 1):
        v = combine(v, shfl_xor(k, v, off))
    tid = k.sreg("tid.x")
    lane = b.and_(tid, i64(31))
    warp = b.lshr(tid, i64(5))
    mt = smem.type.pointee.element
    with b.if_then(b.icmp_unsigned("==", lane, i64(0))):
        b.store(b.zext(v, mt) if v.type != mt else v, k.smem_ptr(smem, warp))
    k.barrier()
    nwarps = b.lshr(b.add(k.sreg("ntid.x"), i64(31)), i64(5))
    w = b.load(k.smem_ptr(smem, lane))
    w = b.trunc(w, v.type) if w.type != v.type else w
    w = b.select(b.icmp_unsigned("<", lane, nwarps), w, init)
    for off in (16, 8, 4, 2, 1):
        w = combine(w, shfl_xor(k, w, off))
    k.barrier()
    return w


def _split_reduce(x_shape: tuple, axes: set[int]) -> tuple[tuple, tuple]:
    kept = tuple(1 if i in axes else d for i, d in enumerate(x_shape))
    red = tuple(d if i in axes else 1 for i, d in enumerate(x_shape))
    return kept, red


def is_small_reduction(n: Node) -> bool:
    ext = sh.numel(_split_reduce(n.inputs[0].shape, set(n.attrs["axes"]))[1])
    return (isinstance(ext, int) or getattr(ext, "is_Integer", False)) and \
        int(ext) <= SMALL_REDUCTION


def _thread_sum(k: PTXKernel, t: ir.Type, total: ir.Value,
                element: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """This thread's share (``tid, tid + ntid, ...``) of a float sum, in two levels.

    A serial per-thread sum of 16M/256 elements lost about 1e-5 relative accuracy. Here each
    ``THREAD_CHUNK`` strided elements go into a partial that is then added to the result, so
    at 16M elements per block no chain is longer than 256 adds. Two scalars only: a third
    level, or the CPU's pairwise stack (``reduce.Cascade``, in local memory), pushed fused
    element expressions into register spills.
    """
    b = k.b
    tid, step = k.sreg("tid.x"), k.sreg("ntid.x")
    span = b.mul(step, i64(THREAD_CHUNK))
    acc, part = k.alloca(t), k.alloca(t)
    zero = fconst(t, 0.0)
    b.store(zero, acc)
    with strided_for(b, tid, total, span, "r1") as c1:
        end = b.add(c1, span)
        end = b.select(b.icmp_signed("<", end, total), end, total)
        b.store(zero, part)
        with strided_for(b, c1, end, step, "r") as r:
            b.store(b.fadd(b.load(part), element(r), flags=("contract",)), part)
        b.store(b.fadd(b.load(acc), b.load(part)), acc)
    return b.load(acc)


def k_reduce(k: PTXKernel) -> None:
    n = k.node
    x = n.inputs[0]
    kept, red = _split_reduce(x.shape, set(n.attrs["axes"]))
    b = k.b
    t = reg_type(n.dtype)
    init = reduce_init(n.op, n.dtype)

    def element(o_idx: list[ir.Value], r: ir.Value) -> ir.Value:
        r_idx = k.delin(r, red)
        full = [ri if d == 1 else oi for oi, ri, d in zip(o_idx, r_idx, kept)]
        return k.value(x, full)

    if is_small_reduction(n):
        with k.grid_stride(k.numel(n.shape)) as o:
            o_idx = k.delin(o, n.shape)
            acc = k.alloca(t)
            b.store(init, acc)
            with for_range(b, i64(0), k.numel(red), name="r") as r:
                b.store(reduce_combine(k, n.op, b.load(acc), element(o_idx, r), n.dtype), acc)
            k.store_flat(o, b.load(acc))
        return
    smem = k.shared(mem_type(n.dtype) if n.dtype is not dt.bool_ else I8, 32, "warps")
    with k.grid_stride(k.numel(n.shape), per_block=True) as o:
        o_idx = k.delin(o, n.shape)
        acc = k.alloca(t)
        if n.op == "sum" and n.dtype.is_float:
            b.store(_thread_sum(k, t, k.numel(red), lambda r: element(o_idx, r)), acc)
        else:
            b.store(init, acc)
            with strided_for(b, k.sreg("tid.x"), k.numel(red), k.sreg("ntid.x"), "r") as r:
                b.store(reduce_combine(k, n.op, b.load(acc), element(o_idx, r), n.dtype),
                        acc)
        total = block_reduce(k, b.load(acc), lambda p, q: reduce_combine(k, n.op, p, q,
                                                                          n.dtype),
                             init, smem)
        with b.if_then(b.icmp_unsigned("==", k.sreg("tid.x"), i64(0))):
            k.store_flat(o, total)


def k_matmul(k: PTXKernel) -> None:
    """Tiled GEMM: 64x64 tiles of C per block iteration, K in steps of 16 through smem."""
    n = k.node
    a, bn = n.inputs
    sa, sb = strided_view(a, k._is_buffer), strided_view(bn, k._is_buffer)
    assert sa is not None and sb is not None, "matmul operands must be addressable"
    (abuf, ast), (bbuf, bst) = sa, sb
    nbat = len(n.shape) - 2
    bshape = tuple(n.shape[:nbat])
    M, N, K = n.shape[-2], n.shape[-1], a.shape[-1]
    b = k.b
    t = reg_type(n.dtype)
    As = k.shared(t, TILE_K * TILE_M, "As")
    Bs = k.shared(t, TILE_K * TILE_N, "Bs")
    Mv, Nv, Kv = k.sym(M), k.sym(N), k.sym(K)
    tiles_m = b.udiv(b.add(Mv, i64(TILE_M - 1)), i64(TILE_M))
    tiles_n = b.udiv(b.add(Nv, i64(TILE_N - 1)), i64(TILE_N))
    total = b.mul(b.mul(tiles_m, tiles_n), k.numel(bshape))
    tid = k.sreg("tid.x")
    tx, ty = b.urem(tid, i64(16)), b.udiv(tid, i64(16))
    acc = [[k.alloca(t) for _ in range(4)] for _ in range(4)]
    zero = fconst(t, 0.0)
    out_st = contiguous_strides(n.shape)

    def guarded_load(buf: Node, idx: list[ir.Value], st: list[Any], ok: ir.Value) -> ir.Value:
        safe = [b.select(ok, i, i64(0)) for i in idx]
        return b.select(ok, k.load_buffer(buf, safe, st), zero)

    with k.grid_stride(total, per_block=True) as tile:
        tn = b.urem(tile, tiles_n)
        tm = b.urem(b.udiv(tile, tiles_n), tiles_m)
        bidx = k.delin(b.udiv(tile, b.mul(tiles_n, tiles_m)), bshape) if nbat else []
        m0, n0 = b.mul(tm, i64(TILE_M)), b.mul(tn, i64(TILE_N))
        for row in acc:
            for slot in row:
                b.store(zero, slot)
        with strided_for(b, i64(0), Kv, i64(TILE_K), "k0") as k0:
            for i in range(TILE_K * TILE_M // BLOCK):
                e = b.add(tid, i64(BLOCK * i))
                kk, mm = b.urem(e, i64(TILE_K)), b.udiv(e, i64(TILE_K))
                m, kx = b.add(m0, mm), b.add(k0, kk)
                ok = b.and_(b.icmp_signed("<", m, Mv), b.icmp_signed("<", kx, Kv))
                v = guarded_load(abuf, bidx + [m, kx], ast, ok)
                b.store(v, k.smem_ptr(As, b.add(b.mul(kk, i64(TILE_M)), mm)))
            for i in range(TILE_K * TILE_N // BLOCK):
                e = b.add(tid, i64(BLOCK * i))
                nn, kk = b.urem(e, i64(TILE_N)), b.udiv(e, i64(TILE_N))
                col, kx = b.add(n0, nn), b.add(k0, kk)
                ok = b.and_(b.icmp_signed("<", col, Nv), b.icmp_signed("<", kx, Kv))
                v = guarded_load(bbuf, bidx + [kx, col], bst, ok)
                b.store(v, k.smem_ptr(Bs, b.add(b.mul(kk, i64(TILE_N)), nn)))
            k.barrier()
            for kk in range(TILE_K):
                av = [b.load(k.smem_ptr(As, b.add(ty, i64(kk * TILE_M + 16 * i))))
                      for i in range(4)]
                bv = [b.load(k.smem_ptr(Bs, b.add(tx, i64(kk * TILE_N + 16 * j))))
                      for j in range(4)]
                for i in range(4):
                    for j in range(4):
                        s = acc[i][j]
                        b.store(b.fadd(b.load(s), b.fmul(av[i], bv[j], flags=("contract",)),
                                       flags=("contract",)), s)
            k.barrier()
        for i in range(4):
            for j in range(4):
                m = b.add(m0, b.add(ty, i64(16 * i)))
                col = b.add(n0, b.add(tx, i64(16 * j)))
                ok = b.and_(b.icmp_signed("<", m, Mv), b.icmp_signed("<", col, Nv))
                with b.if_then(ok):
                    b.store(b.load(acc[i][j]),
                            b.gep(k.out, [k.linear(bidx + [m, col], out_st)], inbounds=True))


def k_scatter_init(k: PTXKernel) -> None:
    """First scatter_add kernel: out = base (the atomics need the whole copy done first)."""
    n = k.node
    with k.grid_stride(k.numel(n.shape)) as lin:
        k.store_flat(lin, k.value(n.inputs[0], k.delin(lin, n.shape)))


def k_scatter_atomic(k: PTXKernel) -> None:
    """Second scatter_add kernel: out[.., index, ..] += src, one atomic per source element."""
    n = k.node
    _, index, src = n.inputs
    ax = n.attrs["axis"]
    b = k.b
    with k.grid_stride(k.numel(src.shape)) as lin:
        idx = k.delin(lin, src.shape)
        ix = k.value(index, idx)
        ok = k.flag_index_error(ix, n.shape[ax], lin, n)
        with b.if_then(ok):
            tgt = list(idx)
            tgt[ax] = ix
            v = k.value(src, idx)
            op = "fadd" if n.dtype.is_float else "add"
            b.atomic_rmw(op, k.out_ptr(tgt), v, "monotonic")


def k_scan(k: PTXKernel) -> None:
    """cumsum / cumprod / cummax: one thread per line, sequential along the scanned axis."""
    n = k.node
    outer = outer_shape(n)
    with k.grid_stride(k.numel(outer)) as lin:
        scan_line(k, k.delin(lin, outer))


def k_sort(k: PTXKernel) -> None:
    """sort (a stable argsort): one thread per line, an insertion sort in the output."""
    outer = sort_outer_shape(k.node)
    with k.grid_stride(k.numel(outer)) as lin:
        sort_line(k, k.delin(lin, outer))


def _conv_geometry(n: Node, x_shape: tuple, w_shape: tuple) -> dict[str, Any]:
    a = n.attrs
    return dict(s=a["stride"], p=a["padding"], d=a["dilation"], H=x_shape[2], W=x_shape[3],
                OC=w_shape[0], Cg=w_shape[1], KH=w_shape[2], KW=w_shape[3],
                Og=w_shape[0] // a["groups"])


def _in_range(b: ir.IRBuilder, v: ir.Value, size: int) -> ir.Value:
    return b.and_(b.icmp_signed(">=", v, i64(0)), b.icmp_signed("<", v, i64(size)))


def k_conv2d(k: PTXKernel) -> None:
    """y[n,o,oh,ow] = sum over c, kh, kw of x[n, g*Cg+c, ih, iw] * w[o,c,kh,kw]."""
    n = k.node
    x, w = n.inputs
    g = _conv_geometry(n, x.shape, w.shape)
    b = k.b
    t = reg_type(n.dtype)
    acc = k.alloca(t)
    with k.grid_stride(k.numel(n.shape)) as lin:
        nb, o, oh, ow = k.delin(lin, n.shape)
        b.store(fconst(t, 0.0), acc)
        cbase = b.mul(b.udiv(o, i64(g["Og"])), i64(g["Cg"]))
        with for_range(b, i64(0), i64(g["Cg"]), name="c") as c, \
                for_range(b, i64(0), i64(g["KH"]), name="kh") as kh:
            ih = b.add(b.sub(b.mul(oh, i64(g["s"][0])), i64(g["p"][0])),
                       b.mul(kh, i64(g["d"][0])))
            with for_range(b, i64(0), i64(g["KW"]), name="kw") as kw:
                iw = b.add(b.sub(b.mul(ow, i64(g["s"][1])), i64(g["p"][1])),
                           b.mul(kw, i64(g["d"][1])))
                ok = b.and_(_in_range(b, ih, g["H"]), _in_range(b, iw, g["W"]))
                xi = [nb, b.add(cbase, c), b.select(ok, ih, i64(0)), b.select(ok, iw, i64(0))]
                prod = b.fmul(k.value(x, xi), k.value(w, [o, c, kh, kw]), flags=("contract",))
                b.store(b.fadd(b.load(acc), b.select(ok, prod, fconst(t, 0.0)),
                               flags=("contract",)), acc)
        k.store_flat(lin, b.load(acc))


def k_conv2d_input_grad(k: PTXKernel) -> None:
    """dx[n,ci,ih,iw] = sum over o in ci's group, kh, kw with an integral in-range (oh, ow)."""
    n = k.node
    gy, w = n.inputs
    g = _conv_geometry(n, n.shape, w.shape)
    OH, OW = gy.shape[2], gy.shape[3]
    b = k.b
    t = reg_type(n.dtype)
    acc = k.alloca(t)

    def out_pos(i: ir.Value, tap: ir.Value, dim: int, size: int) -> tuple[ir.Value, ir.Value]:
        num = b.sub(b.add(i, i64(g["p"][dim])), b.mul(tap, i64(g["d"][dim])))
        s = i64(g["s"][dim])
        nonneg = b.icmp_signed(">=", num, i64(0))
        safe = b.select(nonneg, num, i64(0))
        q = b.udiv(safe, s)
        ok = b.and_(nonneg, b.and_(b.icmp_unsigned("==", b.urem(safe, s), i64(0)),
                                   b.icmp_signed("<", q, i64(size))))
        return b.select(ok, q, i64(0)), ok

    with k.grid_stride(k.numel(n.shape)) as lin:
        nb, ci, ih, iw = k.delin(lin, n.shape)
        b.store(fconst(t, 0.0), acc)
        grp = b.udiv(ci, i64(g["Cg"]))
        c = b.urem(ci, i64(g["Cg"]))
        with for_range(b, i64(0), i64(g["Og"]), name="oo") as oo, \
                for_range(b, i64(0), i64(g["KH"]), name="kh") as kh:
            o = b.add(b.mul(grp, i64(g["Og"])), oo)
            oh, okh = out_pos(ih, kh, 0, OH)
            with for_range(b, i64(0), i64(g["KW"]), name="kw") as kw:
                ow, okw = out_pos(iw, kw, 1, OW)
                prod = b.fmul(k.value(gy, [nb, o, oh, ow]), k.value(w, [o, c, kh, kw]),
                              flags=("contract",))
                b.store(b.fadd(b.load(acc), b.select(b.and_(okh, okw), prod, fconst(t, 0.0)),
                               flags=("contract",)), acc)
        k.store_flat(lin, b.load(acc))


def k_conv2d_weight_grad(k: PTXKernel) -> None:
    """dw[o,c,kh,kw] = sum over n, oh, ow of gy * x: a block per weight, threads over (n,oh,ow)."""
    n = k.node
    x, gy = n.inputs
    g = _conv_geometry(n, x.shape, n.shape)
    red = (gy.shape[0], gy.shape[2], gy.shape[3])
    b = k.b
    t = reg_type(n.dtype)
    smem = k.shared(t, 32, "warps")
    acc = k.alloca(t)
    with k.grid_stride(k.numel(n.shape), per_block=True) as lin:
        o, c, kh, kw = k.delin(lin, n.shape)
        ci = b.add(b.mul(b.udiv(o, i64(g["Og"])), i64(g["Cg"])), c)
        b.store(fconst(t, 0.0), acc)
        with strided_for(b, k.sreg("tid.x"), k.numel(red), k.sreg("ntid.x"), "r") as r:
            nb, oh, ow = k.delin(r, red)
            ih = b.add(b.sub(b.mul(oh, i64(g["s"][0])), i64(g["p"][0])),
                       b.mul(kh, i64(g["d"][0])))
            iw = b.add(b.sub(b.mul(ow, i64(g["s"][1])), i64(g["p"][1])),
                       b.mul(kw, i64(g["d"][1])))
            ok = b.and_(_in_range(b, ih, g["H"]), _in_range(b, iw, g["W"]))
            xv = k.value(x, [nb, ci, b.select(ok, ih, i64(0)), b.select(ok, iw, i64(0))])
            prod = b.fmul(k.value(gy, [nb, o, oh, ow]), xv, flags=("contract",))
            b.store(b.fadd(b.load(acc), b.select(ok, prod, fconst(t, 0.0)),
                           flags=("reassoc", "contract")), acc)
        total = block_reduce(k, b.load(acc), lambda p, q: b.fadd(p, q), fconst(t, 0.0), smem)
        with b.if_then(b.icmp_unsigned("==", k.sreg("tid.x"), i64(0))):
            k.store_flat(lin, total)


def k_pool_argmax(k: PTXKernel) -> None:
    """PyTorch's max-pool index rule (first strict maximum in window order, NaN wins)."""
    n = k.node
    x = n.inputs[0]
    a = n.attrs
    (KH, KW), (sh_, sw), (ph, pw), (dh, dw) = a["kernel"], a["stride"], a["padding"], \
        a["dilation"]
    H, W = x.shape[2], x.shape[3]
    b = k.b
    t = reg_type(x.dtype)
    best_slot, arg_slot = k.alloca(t), k.alloca(I64)

    def first(o: ir.Value, s: int, p: int, d: int) -> ir.Value:
        return window_start(b, o, s, p, d)

    with k.grid_stride(k.numel(n.shape)) as lin:
        nb, c, oh, ow = k.delin(lin, n.shape)
        b.store(fconst(t, float("-inf")), best_slot)
        b.store(b.add(b.mul(first(oh, sh_, ph, dh), i64(W)), first(ow, sw, pw, dw)), arg_slot)
        with for_range(b, i64(0), i64(KH), name="u") as u:
            ih = b.add(b.sub(b.mul(oh, i64(sh_)), i64(ph)), b.mul(u, i64(dh)))
            okh = _in_range(b, ih, H)
            with for_range(b, i64(0), i64(KW), name="v") as v:
                iw = b.add(b.sub(b.mul(ow, i64(sw)), i64(pw)), b.mul(v, i64(dw)))
                ok = b.and_(okh, _in_range(b, iw, W))
                val = k.value(x, [nb, c, b.select(ok, ih, i64(0)), b.select(ok, iw, i64(0))])
                best = b.load(best_slot)
                take = b.or_(b.fcmp_ordered(">", val, best), b.fcmp_unordered("uno", val, val))
                take = b.and_(take, ok)
                b.store(b.select(take, val, best), best_slot)
                flat = b.add(b.mul(ih, i64(W)), iw)
                b.store(b.select(take, flat, b.load(arg_slot)), arg_slot)
        k.store_flat(lin, b.load(arg_slot))


# -- attention ---------------------------------------------------------------------------
def _static_int(d: Any) -> int | None:
    if isinstance(d, int):
        return d
    return int(d) if getattr(d, "is_Integer", False) else None


class _AttentionRows:
    """One thread's share of scaled dot-product attention at batch index ``bidx``: scores,
    a query row's softmax statistics and sums of weighted rows, over the node's q
    [*b, L, E], k and v [*b, S, E] (and, for the gradient, g [*b, L, E]).

    ``p_ij = exp(s_ij - m_i) / l_i`` with ``s_ij = scale * dot(q_i, k_j)`` over the keys of
    row i (``j <= i`` when causal); a row whose every score is -inf, or that has no key, is
    "dead" and all its weights are 0 (the interpreter's ``_attention_weights``). Each call
    site takes its own stack slots (``k.alloca``), so the helpers nest freely.
    """

    def __init__(self, k: PTXKernel, bidx: list[ir.Value]) -> None:
        n = k.node
        self.k, self.b, self.bidx = k, k.b, bidx
        self.q, self.kk, self.v = n.inputs[:3]
        grad = n.op == "attention_grad"
        self.g = n.inputs[3] if grad else None
        # the optional additive mask [*b, L, S] and dropout seed, after the tensors
        self.mask, seed = gops.attention_extras(n.op, n.inputs, n.attrs)
        self.t = reg_type(n.dtype)
        self.seed = k.value(seed, []) if seed is not None else None
        rate = float(n.attrs.get("dropout", 0.0))
        self.thr = fconst(F32, float(np.float32(1.0 - rate)))
        self.cdrop = fconst(self.t, float(np.asarray(1.0 / (1.0 - rate) if rate else 1.0,
                                                     n.dtype.np)))
        batch = tuple(self.q.shape[:-2])  # the flat head index, for dropout's element index
        self.head = k.linear(bidx, contiguous_strides(batch)) if batch else i64(0)
        self.E = self.q.shape[-1]
        self.Lv, self.Sv = k.sym(self.q.shape[-2]), k.sym(self.kk.shape[-2])
        self.scale = fconst(self.t, float(n.attrs["scale"]))
        self.causal = bool(n.attrs["causal"])
        self.vm = VMath(k.b, k.L.module)
        self.ninf = fconst(self.t, float("-inf"))
        self.zero = fconst(self.t, 0.0)

    def at(self, x: Node, row: ir.Value, e: ir.Value) -> ir.Value:
        return self.k.value(x, self.bidx + [row, e])

    def madd(self, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        b = self.b
        return b.fadd(acc, b.fmul(x, y, flags=("contract",)), flags=("contract",))

    def dot(self, x: Node, i: ir.Value, y: Node, j: ir.Value) -> ir.Value:
        """sum over e of x[i, e] * y[j, e]."""
        b = self.b
        acc = self.k.alloca(self.t)
        b.store(self.zero, acc)
        with for_range(b, i64(0), self.k.sym(self.E), name="de") as e:
            b.store(self.madd(b.load(acc), self.at(x, i, e), self.at(y, j, e)), acc)
        return b.load(acc)

    def score(self, i: ir.Value, j: ir.Value) -> ir.Value:
        s = self.b.fmul(self.dot(self.q, i, self.kk, j), self.scale)
        if self.mask is not None:  # scores * scale + mask, the composite's order
            s = self.b.fadd(s, self.k.value(self.mask, self.bidx + [i, j]))
        return s

    def keys_end(self, i: ir.Value) -> ir.Value:
        """One past the last key of query row i: S, or min(i + 1, S) when causal."""
        if not self.causal:
            return self.Sv
        b = self.b
        i1 = b.add(i, i64(1))
        return b.select(b.icmp_signed("<", i1, self.Sv), i1, self.Sv)

    def queries_start(self, j: ir.Value) -> ir.Value:
        """The first query row that key j takes part in: 0, or j when causal."""
        return j if self.causal else i64(0)

    def stats(self, i: ir.Value, with_d: bool = False) -> tuple[ir.Value, ir.Value, Any]:
        """Row i's ``(m, 1 / l, D)`` in one pass over its keys with online rescaling:
        ``m`` the largest score (0 for a dead row, so ``exp(s - m)`` is 0 there), ``1 / l``
        the reciprocal of ``sum_j exp(s_ij - m)`` (0 for a dead row) and, with ``with_d``,
        ``D = sum_j p_ij dp_ij`` with ``dp_ij = dot(g_i, v_j)`` (else None)."""
        b, t, vm = self.b, self.t, self.vm
        m_slot, l_slot = self.k.alloca(t), self.k.alloca(t)
        d_slot = self.k.alloca(t) if with_d else None
        b.store(self.ninf, m_slot)
        b.store(self.zero, l_slot)
        if d_slot is not None:
            b.store(self.zero, d_slot)
        maximum = declare(self.k.L.module, f"llvm.maximum.f{32 if t == F32 else 64}", t,
                          [t, t])
        with for_range(b, i64(0), self.keys_end(i), name="sj") as j:
            s = self.score(i, j)
            m_old = b.load(m_slot)
            m_new = b.call(maximum, [m_old, s])
            # all scores so far -inf: rescale from 0 instead (exp(-inf - -inf) is NaN)
            m_safe = b.select(b.fcmp_ordered("==", m_new, self.ninf), self.zero, m_new)
            corr = vm.exp(b.fsub(m_old, m_safe))
            p = vm.exp(b.fsub(s, m_safe))
            b.store(self.madd(p, b.load(l_slot), corr), l_slot)
            if d_slot is not None:
                dp = self.dweight(i, j)
                b.store(self.madd(b.fmul(p, dp), b.load(d_slot), corr), d_slot)
            b.store(m_new, m_slot)
        m = b.load(m_slot)
        dead = b.fcmp_ordered("==", m, self.ninf)
        m = b.select(dead, self.zero, m)
        rl = b.select(dead, self.zero, b.fdiv(fconst(t, 1.0), b.load(l_slot)))
        d = b.fmul(b.load(d_slot), rl) if d_slot is not None else None
        return m, rl, d

    def prob(self, i: ir.Value, j: ir.Value, st: tuple[ir.Value, ir.Value, Any]) -> ir.Value:
        """p_ij from row i's statistics ``st``."""
        b = self.b
        return b.fmul(self.vm.exp(b.fsub(self.score(i, j), st[0])), st[1])

    def keep(self, i: ir.Value, j: ir.Value) -> ir.Value:
        """dropout()'s keep factor (1 or 0) of weight (i, j): the ``rand`` op's value at its
        index in the ``[*b, L, S]`` weights, below ``1 - p``."""
        b = self.b
        lin = b.add(b.mul(b.add(b.mul(self.head, self.Lv), i), self.Sv), j)
        kept = b.fcmp_ordered("<", counter_uniform(b, lin, self.seed), self.thr)
        return b.select(kept, fconst(self.t, 1.0), self.zero)

    def dropped(self, i: ir.Value, j: ir.Value, st: tuple[ir.Value, ir.Value, Any]
                ) -> ir.Value:
        """The weight the output sums: ``(p_ij * keep) * c`` under dropout, else p_ij."""
        p = self.prob(i, j, st)
        if self.seed is None:
            return p
        return self.b.fmul(self.b.fmul(p, self.keep(i, j)), self.cdrop)

    def dweight(self, i: ir.Value, j: ir.Value) -> ir.Value:
        """The weight's gradient: dp_ij = dot(g_i, v_j), through dropout's product as its VJP
        ``(dp * c) * keep``."""
        dp = self.dot(self.g, i, self.v, j)
        if self.seed is None:
            return dp
        return self.b.fmul(self.b.fmul(dp, self.cdrop), self.keep(i, j))

    def dscore(self, i: ir.Value, j: ir.Value, st: tuple[ir.Value, ir.Value, Any]
               ) -> ir.Value:
        """ds_ij = p_ij (dw_ij - D_i) with dw the weight's gradient, from
        ``stats(i, True)``."""
        b = self.b
        return b.fmul(self.prob(i, j, st), b.fsub(self.dweight(i, j), st[2]))

    def accumulate(self, start: ir.Value, stop: ir.Value,
                   weight: Callable[[ir.Value], ir.Value],
                   row: Callable[[ir.Value, ir.Value], ir.Value],
                   store: Callable[[ir.Value, ir.Value], None]) -> None:
        """``store(e, sum over r in [start, stop) of weight(r) * row(r, e))`` for each e < E.

        A static E keeps the E sums in a stack array, so each ``weight(r)`` is computed once
        (r outer, e inner); a symbolic E loops over e outside, recomputing the weights."""
        b, t = self.b, self.t
        E = _static_int(self.E)
        if E is None:
            acc = self.k.alloca(t)
            with for_range(b, i64(0), self.k.sym(self.E), name="ae") as e:
                b.store(self.zero, acc)
                with for_range(b, start, stop, name="ar") as r:
                    b.store(self.madd(b.load(acc), weight(r), row(r, e)), acc)
                store(e, b.load(acc))
            return
        arr = self.k.alloca(ir.ArrayType(t, max(E, 1)))

        def slot(e: ir.Value) -> ir.Value:
            return b.gep(arr, [i64(0), e], inbounds=True)

        with for_range(b, i64(0), i64(E), name="az") as e:
            b.store(self.zero, slot(e))
        with for_range(b, start, stop, name="ar") as r:
            w = weight(r)
            with for_range(b, i64(0), i64(E), name="ae") as e:
                b.store(self.madd(b.load(slot(e)), w, row(r, e)), slot(e))
        with for_range(b, i64(0), i64(E), name="as") as e:
            store(e, b.load(slot(e)))


@contextlib.contextmanager
def _attention_rows(k: PTXKernel) -> Iterator[tuple[ir.Value, list[ir.Value], ir.Value]]:
    """Grid-stride over the output's rows (every axis but the last): yields (flat row,
    batch index, row within the batch)."""
    n = k.node
    rows = tuple(n.shape[:-1])
    with k.grid_stride(k.numel(rows)) as r:
        idx = k.delin(r, rows)
        yield r, idx[:-1], idx[-1]


def _row_store(k: PTXKernel, r: ir.Value, scale: ir.Value | None = None
               ) -> Callable[[ir.Value, ir.Value], None]:
    """Stores element e of flat output row ``r`` (times ``scale`` if given)."""
    b = k.b
    E = k.sym(k.node.shape[-1])

    def store(e: ir.Value, v: ir.Value) -> None:
        k.store_flat(b.add(b.mul(r, E), e), v if scale is None else b.fmul(v, scale))

    return store


def k_attention(k: PTXKernel) -> None:
    """out[i] = sum_j p_ij v[j]: a thread per query row, a pass over its keys for the softmax
    statistics (running max with online rescaling), a second for the weighted sum of v."""
    with _attention_rows(k) as (r, bidx, i):
        a = _AttentionRows(k, bidx)
        st = a.stats(i)
        a.accumulate(i64(0), a.keys_end(i), lambda j: a.dropped(i, j, st),
                     lambda j, e: a.at(a.v, j, e), _row_store(k, r))


def k_attention_grad(k: PTXKernel) -> None:
    """[dq; dk; dv], a thread per output row, the weights recomputed from q and k:

    - dq row i: ``scale * sum_j ds_ij k[j]`` after one pass for row i's (m, l, D);
    - dk row j: ``scale * sum_i ds_ij q[i]`` over the query rows j takes part in, each with
      its own statistics pass (O(L S E) per row: simple, not fast);
    - dv row j: ``sum_i p_ij g[i]``, likewise.
    """
    b = k.b
    with _attention_rows(k) as (r, bidx, row):
        a = _AttentionRows(k, bidx)
        with b.if_else(b.icmp_signed("<", row, a.Lv)) as (dq, rest):
            with dq:
                i = row
                st = a.stats(i, with_d=True)
                a.accumulate(i64(0), a.keys_end(i), lambda j: a.dscore(i, j, st),
                             lambda j, e: a.at(a.kk, j, e), _row_store(k, r, a.scale))
            with rest:
                j = b.sub(row, a.Lv)
                with b.if_else(b.icmp_signed("<", j, a.Sv)) as (dk, dv):
                    with dk:
                        a.accumulate(a.queries_start(j), a.Lv,
                                     lambda i: a.dscore(i, j, a.stats(i, with_d=True)),
                                     lambda i, e: a.at(a.q, i, e), _row_store(k, r, a.scale))
                    with dv:
                        jv = b.sub(j, a.Sv)
                        a.accumulate(a.queries_start(jv), a.Lv,
                                     lambda i: a.dropped(i, jv, a.stats(i)),
                                     lambda i, e: a.at(a.g, i, e), _row_store(k, r))


# node op -> the kernels it runs, in order (suffix, emitter, launch kind)
KERNELS: dict[str, list[tuple[str, Callable[[PTXKernel], None], str]]] = {
    "sum": [("", k_reduce, "reduce")],
    "max": [("", k_reduce, "reduce")],
    "matmul": [("", k_matmul, "gemm")],
    "scatter_add": [("_init", k_scatter_init, "flat"), ("_atomic", k_scatter_atomic, "src")],
    "conv2d": [("", k_conv2d, "flat")],
    "conv2d_input_grad": [("", k_conv2d_input_grad, "flat")],
    "conv2d_weight_grad": [("", k_conv2d_weight_grad, "blocks")],
    "pool_argmax": [("", k_pool_argmax, "flat")],
    "cumsum": [("", k_scan, "flat")],
    "cumprod": [("", k_scan, "flat")],
    "cummax": [("", k_scan, "flat")],
    "logcumsumexp": [("", k_scan, "flat")],
    "sort": [("", k_sort, "flat")],
    # a thread per output row: the launch's thread count (one per element) covers them
    "attention": [("", k_attention, "rows")],
    "attention_grad": [("", k_attention_grad, "rows")],
}
ELEMENTWISE = [("", k_elementwise, "flat")]


def kernels_for(n: Node) -> list[tuple[str, Callable[[PTXKernel], None], str]]:
    if n.op in KERNELS:
        return KERNELS[n.op]
    if n.op in EXPRESSION_OPS:
        return ELEMENTWISE
    raise NotImplementedError(f"no PTX kernel for op {n.op!r}")


def supported_ops() -> set[str]:
    """Ops the PTX backend lowers (checked against ``ops.OP_INFO`` by the tests)."""
    # scan / scan_out: the host runs the body's launches once per step (codegen.ptx)
    return (set(EXPRESSION_OPS) | set(KERNELS) | {"input", "scan", "scan_out"}) \
        & set(gops.OP_INFO)
