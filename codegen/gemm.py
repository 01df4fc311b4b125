"""Register-blocked, packed GEMM emitted in LLVM IR (C = A @ B, any operand strides).

The design follows GotoBLAS/BLIS (an llvmlite probe of this kernel reached 93-100% of the FMA
peak on Zen 4), blocked for the caches of the machine the code is for (``Tile.kc``,
``Tile.l2_budget``, ``Tile.swap_max_bytes``: sizes from ``codegen.hostinfo``, the host's by
sysfs, fixed defaults for AOT builds for a named CPU):

- columns of B in blocks of ``NC`` (a packed K block of them fills a quarter of L2), and
  within each, K in equal blocks of at most ``KC`` (the A micro-panel fills half of L1d):
  pack B into ``NR``-column panels (zero-padded), reading it through its strides, so
  transposed operands — which the backward pass is full of — cost nothing extra and need no
  explicit transpose; A is read in place when its rows or its columns are contiguous
  (activations; ``x^T`` in a weight gradient, unless its k stride spans a page or its
  panel, a line per k, would not fit L1d: ``_inplace_panel_fits``), else packed into
  ``MR``-row panels;
- a microkernel keeps an ``MR x NR`` tile of C in vector registers (``NR = NV`` vectors),
  broadcasting one A element per row and multiplying it with the B row vectors
  (``llvm.fmuladd``: an FMA where the ISA has one, mul+add otherwise); the A panel stays in
  L1 while the B panels of the block stream from L2;
- full tiles are stored with vector stores; edge tiles go through a small stack tile so
  every store stays in bounds whatever M and N are (they may be symbolic).

Every element adds the products of a K block in k order and the block sums in block order,
whatever the loop nest around it: results depend on the K blocks only, so they are the same
for either order, either thread split and any NC, and change only with ``KC`` (the caches).

Small-M Linear forwards (``x @ W.T``, B k-contiguous) are computed the other way round, as
C^T = W @ x^T, when a run-time cost rule (packed elements plus padded microkernel work, from
M, N, K and the strides) says so: W is then the row operand, read by the microkernel straight
from memory (each row once, never packed), and only x^T — 4x smaller than W at M=64, N=256 —
is packed, once for all of K; each tile is transposed in registers and written with masked
row stores. Packing W (800 KB read, 800 KB written) was most of the fixed cost at M=64:
measured single-threaded on Zen 5 (medians, ``(x @ W.T).sum()``), 64x784x256 went from
~137 us (188 GFLOP/s) to ~109 us (235 GFLOP/s), 128x784x256 from ~252 to ~220 us, the
classifier layer 64x256x10 from ~10.3 to ~4.4 us; the cubes and mlp_large's shapes keep the
plain order. Both orders add the same products in the same K blocks in the same order, so
which one runs (it may differ between a call and its two-thread halves) changes no bit.

The tile shape is chosen per instruction set and per GEMM: 512-bit vectors and up to 24
accumulators with AVX-512 (32 registers), 256-bit vectors and 12 with AVX2 (16 registers);
``NV`` shrinks for narrow outputs (N=10 classes) so no work is wasted on padding, and is 3
instead of 4 where that pads less (96 columns: 8 x 3 tiles).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
from llvmlite import ir

from graphc.ir import shapes as sh

from .hostinfo import DEFAULT_CACHES, current_caches
from .llvm_util import F32, I8P, I32, I64, declare, for_range, i64, splat
from .parallel import GEMM_PAR_MIN_MACS, TASK, context_type, pack_context, unpack_context

KC_MIN, KC_MAX = 128, 1024  # bounds of the K block (see ``Tile.kc``)


@dataclass(frozen=True)
class Tile:
    """A microkernel shape and the cache sizes its blocking is derived from (``l1d``, ``l2``:
    bytes; ``codegen.hostinfo``). Carrying the caches makes a tile's code a function of the
    tile alone, whenever and wherever its module is built."""

    vw: int  # lanes per vector
    mr: int  # rows of C per microkernel
    nv: int  # vectors per row
    l1d: int = DEFAULT_CACHES.l1d
    l2: int = DEFAULT_CACHES.l2

    @property
    def nr(self) -> int:
        return self.vw * self.nv

    def kc(self, itemsize: int) -> int:
        """The largest K block (KC). Each microkernel call loads and stores its MR x NR tile
        of C once per K block (2 * MR * NV vector accesses, cache misses included), against
        KC * MR * NV FMAs, so KC should be as large as the caches allow. The limit is L1:
        the A micro-panel (MR x KC, broadcast from one element per row and k) must stay
        there for the whole call while the B micro-panel streams through from L2, so it may
        fill half of L1d (the rest for the stream, the C tile and the stack; Low et al.'s
        analytical BLIS model keeps the reused panel in ``W - 1 - C_B`` of ``W`` ways, the
        same idea). 48 KiB (Sapphire Rapids, Zen 5) gives 1024 for the 6 x 64 fp32 tile,
        32 KiB (Zen 4) 640; measured on Sapphire Rapids, 256x1024x1024 went from 188 (KC
        256) to 207 GFLOP/s (KC 1024, with ``nc``'s blocking)."""
        kc = self.l1d // (2 * self.mr * itemsize) // 64 * 64
        return max(KC_MIN, min(KC_MAX, kc))

    def l2_budget(self, itemsize: int) -> int:
        """Elements of packed B (one K block of NC columns) kept in L2 while every row panel
        of A passes over it: a quarter of L2, since C streams through L2 alongside and L2
        sets are indexed by physical address (4 KiB pages land anywhere), so a block of
        half of L2 already thrashes at some placements (measured: 188 -> 89 GFLOP/s at one
        in four work-area offsets for a 1 MB block in a 2 MB L2; none at 512 KB)."""
        return self.l2 // 4 // itemsize

    def swap_max_bytes(self) -> int:
        """The largest packed A^T (all of K) of the swapped order: like the plain order's
        B block it is re-read for every row panel (of W, which streams from memory through
        L2 meanwhile), so it gets the same quarter of L2. Measured on Sapphire Rapids (2
        MiB L2): 128x784x256 and 128x1024x1024 (400, 512 KiB) gain 5-12% from the swap,
        256x784x1024 and 256x1024x1024 (800 KiB, 1 MiB) lose 3-7%."""
        return self.l2 // 4


def choose_tile(n: Any, wide: bool, itemsize: int = 4) -> Tile:
    """Tile shape for an output with ``n`` columns (``wide``: 512-bit vectors available),
    blocked for the caches code is being generated for (``hostinfo.current_caches``)."""
    lanes = (64 if wide else 32) // itemsize
    regs = 28 if wide else 14  # accumulators we can afford next to B vectors and A broadcasts
    nvec = (int(n) + lanes - 1) // lanes if isinstance(n, int) else 4
    nv = max(1, min(4 if wide else 2, nvec))
    if wide and nvec > 4 and -nvec % 4 >= 2 and -nvec % 3 < -nvec % 4:
        # three vectors a row where four would pad two or more: 96 columns (ConvNeXt's
        # first width) are two 48-column panels, not a 64 and a half-empty 64 (8 x 3: 24
        # accumulators, as 6 x 4). Measured on an AVX-512 Xeon (Ice Lake), one thread:
        # 384x25088x96 as x^T @ g 66-74 -> 86 GFLOP/s
        nv = 3
    # at most 8 rows: narrow tiles of 13-14 rows ran at half the rate of 8-row ones (Zen 4,
    # one thread: 4096x1024 @ 1024x10 32 -> 61 GFLOP/s, 1024x4096 @ 4096x16 56 -> 106,
    # N = 32 88 -> 104; 6 to 10 rows measured alike) and compile in twice the time
    mr = max(1, min(8, regs // nv - (1 if nv > 1 else 0)))
    if wide and nv == 4:
        mr = 6
    if not wide and nv == 2:
        mr = 6
    caches = current_caches()
    return Tile(lanes, mr, nv, caches.l1d, caches.l2)


def workspace_bytes(m: Any, n: Any, k: Any, tile: Tile, itemsize: int) -> Any:
    """Scratch for one GEMM: the packed A and B blocks of one K block (B at most
    ``l2_budget`` elements plus one panel, see ``_nc_block``), or the packed A^T (all of K,
    at most ``swap_max_bytes``) of the swapped order, whichever is larger; 128 bytes for
    aligning the panels."""
    # symbolic parts are built unevaluated and summed by ``shapes.plus``: sympy's
    # simplification of these costs more than the whole plan, and its first ``Add`` of a
    # process imports sympy.tensor (see shapes.plus)
    kcm = tile.kc(itemsize)
    kc = sympy.Min(kcm, k, evaluate=False) if not isinstance(k, int) else min(kcm, k)
    mp = sh.ceil_mul(m, tile.mr)
    np_ = sh.ceil_mul(n, tile.nr)
    if isinstance(n, int) and isinstance(k, int):
        bpart: Any = min(int(np_) * kc, tile.l2_budget(itemsize) + tile.nr * kc)
    else:
        bpart = sympy.Min(np_ * kc, sh.plus(tile.l2_budget(itemsize), sh.scale(kc, tile.nr)),
                          evaluate=False)
    plain = sh.scale(sh.plus(mp * kc, bpart), itemsize)
    if tile.mr > tile.vw:  # no swapped order for this tile (see gemm_function)
        return sh.plus(plain, 128)
    swap_max = tile.swap_max_bytes()
    swapped = sh.ceil_mul(m, tile.nr) * k * itemsize
    if isinstance(swapped, int) and isinstance(plain, int):
        return max(plain, min(swapped, swap_max)) + 128
    swapped = sympy.Min(swapped, swap_max, evaluate=False)
    return sh.plus(sympy.Max(plain, swapped, evaluate=False), 128)


def gemm_function(mod: ir.Module, tile: Tile, elt: ir.Type) -> ir.Function:
    """The GEMM for one tile shape, emitted once per module and shared by every matmul.

    ``gemm(A, sAm, sAk, B, sBk, sBn, C, ldc, M, N, K, work, packed)``: C[m, n] = sum_k
    A[m, k] B[k, n] with element strides for A and B (any layout, e.g. transposed views), C
    row-major with row stride ``ldc``, ``work`` a scratch area of ``workspace_bytes`` bytes.
    ``packed``: null, or B already packed by ``emit_pack_all`` (then B's own pointer and strides
    are not read): a loop-invariant weight of a recurrent step, packed once before the loop.
    One shared, ``noinline`` function keeps compile time flat however many matmuls a step
    has.
    """
    name = _gemm_name(tile, elt)
    fn = mod.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mod, _gemm_type(elt), name=name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    for i in (0, 3, 6, 11):
        fn.args[i].add_attribute("noalias")
    a, sam, sak, b, sbk, sbn, c, ldc, m, n, kk, work, packed = fn.args
    itemsize = 4 if elt == F32 else 8
    entry = fn.append_basic_block("entry")
    start = fn.append_basic_block("start")
    allocas = ir.IRBuilder(entry)
    br = allocas.branch(start)
    bld = ir.IRBuilder(start)

    def alloca(t: ir.Type) -> ir.Value:
        allocas.position_before(br)
        return allocas.alloca(t)

    def normal() -> None:
        _gemm_body(bld, mod, alloca, c, ldc, m, n, kk, work, tile, elt, raw_a=(a, sam, sak),
                   raw_b=(b, sbk, sbn), packed=packed)

    if tile.mr > tile.vw:  # the transposed store needs a tile column to fit one vector
        normal()
    else:
        swap = _swap_pays(bld, tile, m, n, kk, sak, sbk, itemsize)
        # a packed B is never packed again: the plain order
        swap = bld.and_(swap, bld.icmp_unsigned("==", bld.ptrtoint(packed, I64), i64(0)))
        with bld.if_else(swap) as (swapped, plain):
            with swapped:
                _gemm_swapped(bld, mod, alloca, c, ldc, (a, sam, sak), (b, sbn), m, n, kk,
                              work, tile, elt)
            with plain:
                normal()
    bld.ret_void()
    return fn


# an A read in place by columns is packed instead from this k stride (bytes) on: a page
COLS_PACK_BYTES = 4096
PACK_COST = 11  # MACs of microkernel time that packing one element costs (measured)


def _swap_pays(bld: ir.IRBuilder, tile: Tile, m: ir.Value, n: ir.Value, k: ir.Value,
               sak: ir.Value, sbk: ir.Value, itemsize: int) -> ir.Value:
    """Whether to compute C^T = B^T A^T (``_gemm_swapped``) instead of C = A B.

    Only for a k-contiguous B (``x @ W.T``): B^T is then read in place as the row operand,
    and only A (the small activation side, M x K) is packed. The rule compares, per unit of
    K, packed elements (weighted by ``PACK_COST``) plus padded microkernel work of both
    orders, and requires all of K of the packed A^T to fit ``Tile.swap_max_bytes``.
    """
    mr, nr = tile.mr, tile.nr

    def pad(x: ir.Value, t: int) -> ir.Value:
        return bld.mul(_ceildiv(bld, x, t), i64(t))

    mp, np_ = pad(m, mr), pad(n, nr)  # C = A B: rows of A and columns of B, padded
    mp2, np2 = pad(n, mr), pad(m, nr)  # C^T = B^T A^T
    # C = A B packs A only when its rows are not contiguous (``_gemm_body`` reads them in
    # place otherwise). An A with contiguous columns is read in place too now, but still
    # counted as packed here: a conservative rule, which may keep the swapped order where
    # the plain one would since have become as fast (only when B's columns are contiguous
    # as well, as in x^T @ W^T: not measured)
    packs_a = bld.select(bld.icmp_signed("==", sak, i64(1)), i64(0), mp)
    plain = bld.add(bld.mul(i64(PACK_COST), bld.add(packs_a, np_)), bld.mul(mp, np_))
    swapped = bld.add(bld.mul(i64(PACK_COST), np2), bld.mul(mp2, np2))
    fits = bld.icmp_signed("<=", bld.mul(np2, k), i64(tile.swap_max_bytes() // itemsize))
    return bld.and_(bld.and_(bld.icmp_signed("==", sbk, i64(1)), fits),
                    bld.icmp_signed("<", swapped, plain))


def _inplace_panel_fits(bld: ir.IRBuilder, tile: Tile, kc: ir.Value, sak: ir.Value,
                        n: ir.Value, itemsize: int) -> ir.Value:
    """Whether an A with contiguous columns is as well read in place as packed: its K
    block's micro-panel stays in L1d, as the packed one does (``Tile.kc``), or is read only
    once. In place, each k of the panel is its own cache line (``sak`` elements apart: a
    whole line once ``sak`` spans one), so the panel takes ``kc`` lines, not ``MR * kc``
    elements: 64 KiB at KC 1024 against 24 KiB packed; past L1d every column panel of B
    after the first re-reads it from L2. With one column panel (N <= NR) nothing re-reads
    it, and packing is pure cost. Measured on an AVX-512 Xeon (Ice Lake, 48 KiB L1d, one
    thread, ``x^T @ g``, GFLOP/s in place -> packed): 384x25088x96 45-66 -> 74-86,
    384x4096x384 68-90 -> 87-102, ViT's 576x3152x192 81-83 -> 98-103; but 192x2048x64 (one
    panel) 95-117 -> 69-73, and 256x512x64 (a 32 KiB panel) 90 -> 43-55."""
    line = bld.select(bld.icmp_signed("<", sak, i64(64 // itemsize)),
                      bld.mul(sak, i64(itemsize)), i64(64))
    return bld.or_(bld.icmp_signed("<=", bld.mul(kc, line), i64(tile.l1d)),
                   bld.icmp_signed("<=", n, i64(tile.nr)))


def _kblocks(bld: ir.IRBuilder, k: ir.Value, kcmax: int) -> tuple[ir.Value, ir.Value]:
    """(number of K blocks, block size): K split into ``ceil(K / kcmax)`` blocks of equal
    size (the last one shorter by the remainder), not ``kcmax`` blocks and a sliver: K = 784
    with KC 256 was 256 + 256 + 256 + 16, a fourth pass over C for 2% of the work. Both GEMM
    orders and both threads' halves use this, so their sums agree bit for bit."""
    nblk = _ceildiv(bld, k, kcmax)
    nblk = bld.select(bld.icmp_signed(">", nblk, i64(0)), nblk, i64(1))
    kcb = bld.sdiv(bld.add(k, bld.sub(nblk, i64(1))), nblk)
    return nblk, kcb


def _kblock(bld: ir.IRBuilder, k: ir.Value, kcb: ir.Value, pcb: ir.Value
            ) -> tuple[ir.Value, ir.Value]:
    """(first k, length) of K block ``pcb`` (see ``_kblocks``)."""
    pc = bld.mul(pcb, kcb)
    rem = bld.sub(k, pc)
    return pc, bld.select(bld.icmp_signed("<", rem, kcb), rem, kcb)


def _nc_block(bld: ir.IRBuilder, tile: Tile, kc: ir.Value, itemsize: int) -> ir.Value:
    """NC: columns of B per L2 block, a multiple of NR, so that a packed K block of them
    (``kc`` x NC) fits ``Tile.l2_budget``; at least one panel."""
    per = bld.sdiv(i64(tile.l2_budget(itemsize)), bld.mul(kc, i64(tile.nr)))
    return bld.mul(bld.select(bld.icmp_signed(">", per, i64(1)), per, i64(1)), i64(tile.nr))


def _gemm_swapped(bld: ir.IRBuilder, mod: ir.Module, alloca: Any, out: ir.Value,
                  ldc: ir.Value, raw_a: tuple, raw_bt: tuple, Mv: ir.Value, Nv: ir.Value,
                  Kv: ir.Value, work: ir.Value, tile: Tile, elt: ir.Type) -> None:
    """C = A B computed as C^T = B^T A^T, for a k-contiguous B (``x @ W.T`` with few rows).

    The row operand is B^T (W itself): its MR rows are read straight from memory by the
    microkernel, each once, never packed. The column operand A^T is packed for all of K up
    front (``np2 * K`` elements, 4x fewer than W at M=64, N=256) and reused by every row
    panel. Each tile of C^T runs through the K blocks of ``KC`` as ``_gemm_body`` does,
    adding the block sums in the same order (a running tile in ``tot``), so both orders give
    bit-identical results; the finished tile is transposed in registers and written to C
    with one masked store per row of C.
    """
    vt = ir.VectorType(elt, tile.vw)
    suffix = f"v{tile.vw}{'f32' if elt == F32 else 'f64'}"
    fma = declare(mod, f"llvm.fmuladd.{suffix}", vt, [vt, vt, vt])
    mr, nr, nv, vw = tile.mr, tile.nr, tile.nv, tile.vw
    w = 1
    while w < mr:
        w *= 2
    wt = ir.VectorType(elt, w)
    mt = ir.VectorType(ir.IntType(1), w)
    mstore = declare(mod, f"llvm.masked.store.v{w}{'f32' if elt == F32 else 'f64'}.p0",
                     ir.VoidType(), [wt, elt.as_pointer(), mt])
    zvec = ir.Constant(vt, [0.0] * vw)
    pack = _pack_b_function(mod, tile, elt)
    abase, sam, sak = raw_a
    bbase, sbn = raw_bt
    np2 = bld.mul(_ceildiv(bld, Mv, nr), i64(nr))
    wi = bld.and_(bld.add(bld.ptrtoint(work, I64), i64(63)), i64(-64))
    packb = bld.inttoptr(wi, elt.as_pointer())
    accs = [[alloca(vt) for _ in range(nv)] for _ in range(mr)]
    tot = [[alloca(vt) for _ in range(nv)] for _ in range(mr)]
    nblk, kcb = _kblocks(bld, Kv, tile.kc(4 if elt == F32 else 8))

    def block(pcb: ir.Value) -> tuple[ir.Value, ir.Value]:
        return _kblock(bld, Kv, kcb, pcb)

    # A^T as the packed B' of C^T: block pc sits at packb + pc * np2, laid out as _pack_b's
    with for_range(bld, i64(0), nblk, name="spk") as pcb:
        pc, kc = block(pcb)
        bld.call(pack, [abase, sak, sam, bld.gep(packb, [bld.mul(pc, np2)], inbounds=True),
                        pc, kc, Mv, np2])
    nlast = bld.sub(Nv, i64(1))
    lane = ir.Constant(ir.VectorType(I32, w), list(range(w)))
    with for_range(bld, i64(0), _ceildiv(bld, Nv, mr), name="sir") as ip:
        n0 = bld.mul(ip, i64(mr))
        # rows of W past N: clamped to the last one; their columns of C are never stored
        rows = []
        for i in range(mr):
            r = bld.add(n0, i64(i))
            r = bld.select(bld.icmp_signed("<", r, Nv), r, nlast)
            rows.append(bld.gep(bbase, [bld.mul(r, sbn)], inbounds=True))
        nlim = bld.sub(Nv, n0)
        nlim = bld.select(bld.icmp_signed("<", nlim, i64(mr)), nlim, i64(mr))
        nl32 = bld.trunc(nlim, I32)
        nmask = bld.icmp_signed("<", lane, splat(bld, nl32, w))
        with for_range(bld, i64(0), bld.sdiv(np2, i64(nr)), name="sjr") as jp:
            m0 = bld.mul(jp, i64(nr))
            with for_range(bld, i64(0), nblk, name="spc") as pcb:
                pc, kc = block(pcb)
                bp = bld.gep(packb, [bld.add(bld.mul(pc, np2), bld.mul(bld.mul(jp, kc),
                                                                       i64(nr)))],
                             inbounds=True)
                for row in accs:
                    for acc in row:
                        bld.store(zvec, acc)
                rk = [bld.gep(r, [pc], inbounds=True) for r in rows]
                _microkernel(bld, fma, accs, tile, kc, bp,
                             lambda kk, i: bld.gep(rk[i], [kk], inbounds=True))
                first = bld.icmp_signed("==", pcb, i64(0))
                for i in range(mr):
                    for j in range(nv):
                        acc = bld.load(accs[i][j])
                        bld.store(bld.select(first, acc, bld.fadd(bld.load(tot[i][j]), acc)),
                                  tot[i][j])
            undef = ir.Constant(vt, ir.Undefined)
            low = ir.Constant(ir.VectorType(I32, w), list(range(w)))
            none = ir.Constant(mt, [0] * w)
            for j in range(nv):
                cols = _transpose(bld, [bld.load(tot[i][j]) for i in range(mr)]
                                  + [undef] * (vw - mr), vw)
                for lidx in range(vw):
                    r = bld.add(m0, i64(j * vw + lidx))
                    inside = bld.icmp_signed("<", r, Mv)
                    r = bld.select(inside, r, bld.sub(Mv, i64(1)))
                    dst = bld.gep(out, [bld.add(bld.mul(r, ldc), n0)], inbounds=True)
                    v = cols[lidx] if w == vw else bld.shuffle_vector(cols[lidx], undef, low)
                    bld.call(mstore, [v, dst, bld.select(inside, nmask, none)])


def _ctx_type(elt: ir.Type) -> ir.LiteralStructType:
    """The task context of a split GEMM: the call's arguments and the two workspaces."""
    ep = elt.as_pointer()
    return context_type([ep, I64, I64, ep, I64, I64, ep, I64, I64, I64, I64, I8P, I8P, ep])


def gemm_task(mod: ir.Module, tile: Tile, elt: ir.Type) -> ir.Function:
    """``task(ctx, part)`` for the thread pool: part 0 computes the first ~half of C (rows in
    multiples of MR, or columns in multiples of NR when C is wider than tall), part 1 the
    rest, each with its own packing workspace."""
    name = _task_name(tile, elt)
    fn = mod.globals.get(name)
    if fn is not None:
        return fn
    gemm = gemm_function(mod, tile, elt)
    ct = _ctx_type(elt)
    fn = ir.Function(mod, TASK, name=name)
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    f = unpack_context(b, fn.args[0], ct, 14)
    part = fn.args[1]
    a, sam, sak, bb, sbk, sbn, c, ldc, m, n, k, w0, w1, packed = f
    first = b.icmp_signed("==", part, i64(0))
    work = b.select(first, w0, w1)
    # split the dimension whose operand is larger: each half then packs half of the big
    # operand and all of the small one (splitting rows would make both pack all of B)
    def part_of(total: ir.Value, unit: int) -> tuple[ir.Value, ir.Value]:
        """(start, count) of this part: the first ~half, in whole tiles, or the rest."""
        half = b.mul(_ceildiv(b, _ceildiv(b, total, 2), unit), i64(unit))
        half = b.select(b.icmp_signed("<", half, total), half, total)
        return b.select(first, i64(0), half), b.select(first, half, b.sub(total, half))

    by_cols = b.icmp_signed(">", n, m)
    with b.if_else(by_cols) as (cols, rows_):
        with cols:
            col0, ncols = part_of(n, tile.nr)
            with b.if_then(b.icmp_signed(">", ncols, i64(0))):
                pb = b.gep(bb, [b.mul(col0, sbn)], inbounds=True)
                pc = b.gep(c, [col0], inbounds=True)
                # a packed B's panels of NR columns lie K * NR elements apart (``emit_pack_all``)
                pp = b.gep(packed, [b.mul(col0, k)], inbounds=True)
                pp = b.select(b.icmp_unsigned("==", b.ptrtoint(packed, I64), i64(0)), packed,
                              pp)
                b.call(gemm, [a, sam, sak, pb, sbk, sbn, pc, ldc, m, ncols, k, work, pp])
        with rows_:
            row0, rows = part_of(m, tile.mr)
            with b.if_then(b.icmp_signed(">", rows, i64(0))):
                pa = b.gep(a, [b.mul(row0, sam)], inbounds=True)
                pc = b.gep(c, [b.mul(row0, ldc)], inbounds=True)
                b.call(gemm, [pa, sam, sak, bb, sbk, sbn, pc, ldc, rows, n, k, work, packed])
    b.ret_void()
    return fn


SMALL_MACS = 8192  # below this, packing costs more than the multiply: plain loops


def gemm_small_function(mod: ir.Module, elt: ir.Type) -> ir.Function:
    """Unpacked triple loop for tiny products (the seed's 40x1x1): no packing, no tiles."""
    name = _small_name(elt)
    fn = mod.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mod, _small_type(elt), name=name)
    fn.linkage = "internal"
    a, sam, sak, b, sbk, sbn, c, ldc, m, n, k = fn.args
    entry = fn.append_basic_block("entry")
    bld = ir.IRBuilder(entry)
    acc = bld.alloca(elt)
    with for_range(bld, i64(0), m, name="m") as i:
        with for_range(bld, i64(0), n, name="n") as j:
            bld.store(ir.Constant(elt, 0.0), acc)
            with for_range(bld, i64(0), k, name="k") as kk:
                av = bld.load(bld.gep(a, [bld.add(bld.mul(i, sam), bld.mul(kk, sak))],
                                      inbounds=True))
                bv = bld.load(bld.gep(b, [bld.add(bld.mul(kk, sbk), bld.mul(j, sbn))],
                                      inbounds=True))
                bld.store(bld.fadd(bld.load(acc), bld.fmul(av, bv)), acc)
            bld.store(bld.load(acc), bld.gep(c, [bld.add(bld.mul(i, ldc), j)], inbounds=True))
    bld.ret_void()
    return fn


def degenerate_product(m: Any, n: Any, k: Any) -> bool:
    """Whether two of a product's sizes are constants whose product is at most 4 (see
    ``emit_gemm_call``)."""
    consts = [d for d in (m, n, k) if isinstance(d, int)]
    return len(consts) >= 2 and sorted(consts)[0] * sorted(consts)[1] <= 4


def _small_request(mod: ir.Module, elt: ir.Type) -> ir.Function:
    """The small product's declaration in a library-linked module, its piece requested."""
    mod.gemm_requests.add((None, "f32" if elt == F32 else "f64"))  # type: ignore[attr-defined]
    return _declare_like(mod, _small_name(elt), _small_type(elt))


def emit_gemm_call(b: ir.IRBuilder, mod: ir.Module, alloca: Any, tile: Tile, elt: ir.Type,
                   args: list[ir.Value], work: ir.Value, work_bytes: ir.Value,
                   run2: ir.GlobalVariable | None, degenerate: bool = False,
                   packed: ir.Value | None = None) -> None:
    """Call the GEMM, split over two threads when the pool is there and it pays off.

    When ``mod`` carries a ``gemm_requests`` set (see ``build_library``), the GEMM routines
    are only declared here and the tile is recorded; otherwise they are defined in ``mod``.
    ``packed``: B packed by ``emit_pack_all`` for this tile (``gemm_function``); the small
    unpacked product reads B itself, so B's pointer and strides must stay valid."""
    a, sam, sak, bb, sbk, sbn, c, ldc, m, n, k = args
    if degenerate:
        # two of M, N, K are tiny constants (a matrix-vector product with a 1-wide
        # operand, an outer product): packing can never pay, whatever the third; the plain
        # loops alone, and no tile to compile (the seed step's ~1.5 s of LLVM work)
        b.call(gemm_small_function(mod, elt) if getattr(mod, "gemm_requests", None) is None
               else _small_request(mod, elt), args)
        return
    requests = getattr(mod, "gemm_requests", None)
    if requests is not None:
        requests.add((tile, "f32" if elt == F32 else "f64"))
        gemm = _declare_like(mod, _gemm_name(tile, elt), _gemm_type(elt))
        small_fn = _declare_like(mod, _small_name(elt), _small_type(elt))
    else:
        gemm = gemm_function(mod, tile, elt)
        small_fn = gemm_small_function(mod, elt)
    small = b.icmp_signed("<", b.mul(b.mul(m, n), k), i64(SMALL_MACS))
    with b.if_else(small) as (tiny, big):
        with tiny:
            b.call(small_fn, args)
        with big:
            pk = ir.Constant(elt.as_pointer(), None) if packed is None else packed
            _emit_gemm_big(b, mod, alloca, tile, elt, args, work, work_bytes, run2, gemm, pk)


def _gemm_name(tile: Tile, elt: ir.Type) -> str:
    return f"graphc_gemm_{'f32' if elt == F32 else 'f64'}_{tile.mr}x{tile.nv}x{tile.vw}"


def _task_name(tile: Tile, elt: ir.Type) -> str:
    return f"graphc_gemm_task_{'f32' if elt == F32 else 'f64'}_{tile.mr}x{tile.nv}x{tile.vw}"


def _small_name(elt: ir.Type) -> str:
    return f"graphc_gemm_small_{'f32' if elt == F32 else 'f64'}"


def _gemm_type(elt: ir.Type) -> ir.FunctionType:
    ep = elt.as_pointer()
    return ir.FunctionType(ir.VoidType(), [ep, I64, I64, ep, I64, I64, ep, I64, I64, I64, I64,
                                           I8P, ep])


def _small_type(elt: ir.Type) -> ir.FunctionType:
    ep = elt.as_pointer()
    return ir.FunctionType(ir.VoidType(), [ep, I64, I64, ep, I64, I64, ep, I64, I64, I64, I64])


def _declare_like(mod: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    fn = mod.globals.get(name)
    return fn if fn is not None else ir.Function(mod, fnty, name)


def build_library(requests: set[tuple[Tile, str]], name: str = "graphc_gemm") -> ir.Module:
    """The GEMM routines a step's kernels declared (``gemm_requests``), as a module of their
    own with external linkage.

    They are most of a small step's LLVM work (two tile shapes: ~0.65 s of ~0.9 s for
    mlp_small) and depend only on the tile shapes, the element type and the target, so the
    JIT compiles them once per set of tiles and caches the object code (in memory and on
    disk) for every step that needs the same set."""
    from .llvm_util import F64

    lib = ir.Module(name=name)
    for tile, dtn in sorted(requests, key=lambda r: (r[1], repr(r[0]))):
        elt = F32 if dtn == "f32" else F64
        fns = [gemm_small_function(lib, elt)]
        if tile is not None:
            fns += [gemm_function(lib, tile, elt), gemm_task(lib, tile, elt),
                    _pack_b_function(lib, tile, elt)]
        for fn in fns:
            fn.linkage = ""
    return lib


def library_parts(requests: set[tuple[Tile, str]]) -> list[tuple[str, Any]]:
    """``build_library`` as separately compiled pieces: ``(spec, build)`` with one piece per
    requested tile (its GEMM and its thread-pool task) and one per element type (the small
    unpacked product), ``build()`` giving the piece's module.

    A piece depends on its spec alone, so the JIT caches each by spec, and can compile a
    tile's GEMM as soon as the first matmul that needs it is lowered, while the rest of the
    step is still being lowered."""
    from .llvm_util import F64

    parts: list[tuple[str, Any]] = []
    tiles = [r for r in requests if r[0] is not None]  # (None, dtype): the small one only
    for tile, dtn in sorted(tiles, key=lambda r: (r[1], r[0].vw, r[0].mr, r[0].nv)):
        elt = F32 if dtn == "f32" else F64

        def build(tile: Tile = tile, elt: ir.Type = elt) -> ir.Module:
            lib = ir.Module(name=f"graphc_gemm_{_gemm_name(tile, elt)}")
            for fn in (gemm_function(lib, tile, elt), gemm_task(lib, tile, elt),
                       _pack_b_function(lib, tile, elt)):
                fn.linkage = ""
            return lib

        parts.append((f"gemm-tile|{dtn}|{tile.vw}|{tile.mr}|{tile.nv}", build))
    for dtn in sorted({d for _, d in requests}):
        elt = F32 if dtn == "f32" else F64

        def build_small(elt: ir.Type = elt, dtn: str = dtn) -> ir.Module:
            lib = ir.Module(name=f"graphc_gemm_small_{dtn}")
            gemm_small_function(lib, elt).linkage = ""
            return lib

        parts.append((f"gemm-small|{dtn}", build_small))
    return parts


def _emit_gemm_big(b: ir.IRBuilder, mod: ir.Module, alloca: Any, tile: Tile, elt: ir.Type,
                   args: list[ir.Value], work: ir.Value, work_bytes: ir.Value,
                   run2: ir.GlobalVariable | None, gemm: ir.Function,
                   packed: ir.Value) -> None:
    if run2 is None:
        b.call(gemm, args + [work, packed])
        return
    a, sam, sak, bb, sbk, sbn, c, ldc, m, n, k = args
    disp = b.load(run2)
    macs = b.mul(b.mul(m, n), k)
    par = b.and_(b.icmp_unsigned("!=", b.ptrtoint(disp, I64), i64(0)),
                 b.and_(b.icmp_signed(">=", macs, i64(GEMM_PAR_MIN_MACS)),
                        b.or_(b.icmp_signed(">=", m, i64(2 * tile.mr)),
                              b.icmp_signed(">=", n, i64(2 * tile.nr)))))
    with b.if_else(par) as (then, otherwise):
        with then:
            ct = _ctx_type(elt)
            ctx = alloca(ct)
            w1 = b.gep(work, [work_bytes], inbounds=True)
            cp = pack_context(b, ctx, args + [work, w1, packed])
            if getattr(mod, "gemm_requests", None) is not None:
                task = _declare_like(mod, _task_name(tile, elt), TASK)
            else:
                task = gemm_task(mod, tile, elt)
            b.call(disp, [task, cp])
        with otherwise:
            b.call(gemm, args + [work, packed])


def _gemm_body(bld: ir.IRBuilder, mod: ir.Module, alloca: Any, out: ir.Value, ldc: ir.Value,
               Mv: ir.Value, Nv: ir.Value, Kv: ir.Value, work: ir.Value, tile: Tile,
               elt: ir.Type, raw_a: tuple, raw_b: tuple, packed: ir.Value) -> None:
    """The packed GEMM loops (see the module docstring); ``raw_a``/``raw_b`` are (base, row
    stride, column stride) of A and B; ``packed``: null, or all of B packed by ``emit_pack_all``
    (its blocks are then read from there, never packed here).

    Loop nest: K blocks (``_kblocks``) > pack A (when neither its rows nor its columns are
    contiguous) > column blocks of NC (``_nc_block``) > pack B's block > row panels of A >
    column panels of B > microkernel. A is packed once per K block for all column blocks
    (BLIS repacks it per column block; with NC a quarter of L2 that was 8% of a
    1024x256x784 weight gradient)."""
    vt = ir.VectorType(elt, tile.vw)
    suffix = f"v{tile.vw}{'f32' if elt == F32 else 'f64'}"
    fma = declare(mod, f"llvm.fmuladd.{suffix}", vt, [vt, vt, vt])
    mr, nr, nv, vw = tile.mr, tile.nr, tile.nv, tile.vw
    itemsize = 4 if elt == F32 else 8
    zero = ir.Constant(elt, 0.0)
    zvec = ir.Constant(vt, [0.0] * vw)
    abase, sam, sak = raw_a
    bbase, sbk, sbn = raw_b

    def load_a(r: ir.Value, col: ir.Value) -> ir.Value:
        off = bld.add(bld.mul(r, sam), bld.mul(col, sak))
        return bld.load(bld.gep(abase, [off], inbounds=True))

    mp = bld.mul(_ceildiv(bld, Mv, mr), i64(mr))
    np_all = bld.mul(_ceildiv(bld, Nv, nr), i64(nr))
    wf = bld.bitcast(work, elt.as_pointer())
    # 64-byte align the packed panels
    wi = bld.ptrtoint(wf, I64)
    wi = bld.and_(bld.add(wi, i64(63)), i64(-64))
    packb = bld.inttoptr(wi, elt.as_pointer())
    accs = [[alloca(vt) for _ in range(nv)] for _ in range(mr)]
    tilebuf = alloca(ir.ArrayType(elt, mr * nr))
    tptr = bld.bitcast(tilebuf, elt.as_pointer())
    packfn = _pack_b_function(mod, tile, elt)

    nblk, kcb = _kblocks(bld, Kv, tile.kc(itemsize))
    nc = _nc_block(bld, tile, kcb, itemsize)
    ncp = bld.select(bld.icmp_signed("<", np_all, nc), np_all, nc)  # widest packed block
    ncblk = bld.sdiv(bld.add(Nv, bld.sub(nc, i64(1))), nc)
    # A with contiguous rows (activations, ``g @ W``) is read in place: each of the MR
    # rows of a panel is one stream along k, as W's rows are in the swapped order.
    # Packing it cost a strided scalar store per element, a fifth of the time of a
    # 600x256x64 product (139 -> 203 GFLOP/s without); other layouts are packed.
    direct = bld.icmp_signed("==", sak, i64(1))
    # A with contiguous columns (x^T in a weight gradient x^T @ g) is read in place too:
    # the MR rows of one k are MR consecutive elements, the next k ``sak`` further on
    # (packing it cost ~30% of a 256x512x64 product) -- unless ``sak`` spans a page or
    # more: then every k of a panel is a new page (a TLB miss per few FMAs, and no
    # prefetch across pages), and the panel is packed by ``_pack_a_cols`` (an LSTM's
    # 1024x256 gate weight gradient over 2048 rows: 40 -> 65 GFLOP/s packed) -- or unless
    # the panel read in place does not fit L1d (``_inplace_panel_fits``)
    cols = bld.and_(bld.icmp_signed("==", sam, i64(1)), bld.not_(direct))
    far = bld.and_(cols, bld.or_(
        bld.icmp_signed(">=", sak, i64(COLS_PACK_BYTES // itemsize)),
        bld.not_(_inplace_panel_fits(bld, tile, kcb, sak, Nv, itemsize))))
    cols = bld.and_(cols, bld.not_(far))
    direct = bld.or_(direct, cols)
    astride = bld.select(cols, sak, i64(1))  # elements per k of A read in place
    mlast = bld.sub(Mv, i64(1))  # rows past M read the last row; never stored
    with for_range(bld, i64(0), nblk, name="pc") as pcb:
        pc, kc = _kblock(bld, Kv, kcb, pcb)
        packa = bld.gep(packb, [bld.mul(ncp, kc)], inbounds=True)
        # pack A: panel ip holds, for each k, MR consecutive rows; pack B: panel jp holds
        # rows k of NR columns. The loop order follows the operand's contiguous dimension
        # (chosen at run time from the strides), so packing streams through memory.
        with bld.if_then(bld.not_(direct)):
            with bld.if_else(far) as (by_rows, other):
                with by_rows:
                    _pack_a_cols(bld, abase, sak, packa, pc, kc, Mv, mp, mr, zero)
                with other:
                    _pack_a(bld, load_a, packa, pc, kc, Mv, mp, mr, zero)
        first = bld.icmp_signed("==", pcb, i64(0))
        with for_range(bld, i64(0), ncblk, name="jc") as jc:
            nj0 = bld.mul(jc, nc)
            rem = bld.sub(Nv, nj0)
            nn = bld.select(bld.icmp_signed("<", rem, nc), rem, nc)
            np_ = bld.mul(_ceildiv(bld, nn, nr), i64(nr))
            pack_args = [bld.gep(bbase, [bld.mul(nj0, sbn)], inbounds=True), sbk, sbn,
                         packb, pc, kc, nn, np_]
            has = bld.icmp_unsigned("!=", bld.ptrtoint(packed, I64), i64(0))
            with bld.if_then(bld.not_(has)):
                bld.call(packfn, pack_args)
            # panel jp of ``emit_pack_all``'s layout holds all of K: this block's rows start
            # pc rows in, and the next panel is K * NR elements on
            pre = bld.gep(packed, [bld.add(bld.mul(nj0, Kv), bld.mul(pc, i64(nr)))],
                          inbounds=True)
            bpan = bld.select(has, pre, packb)
            pstride = bld.select(has, bld.mul(Kv, i64(nr)), bld.mul(kc, i64(nr)))
            outj = bld.gep(out, [nj0], inbounds=True)
            _panels(bld, fma, tile, accs, tptr, zvec, outj, ldc, Mv, nn, mp, np_, kc, pc,
                    packa, bpan, direct, first, abase, sam, mlast, astride, pstride)


def _panels(bld: ir.IRBuilder, fma: ir.Function, tile: Tile, accs: list, tptr: ir.Value,
            zvec: ir.Constant, out: ir.Value, ldc: ir.Value, Mv: ir.Value, Nv: ir.Value,
            mp: ir.Value, np_: ir.Value, kc: ir.Value, pc: ir.Value, packa: ir.Value,
            packb: ir.Value, direct: ir.Value, first: ir.Value, abase: ir.Value,
            sam: ir.Value, mlast: ir.Value, astride: ir.Value, pstride: ir.Value) -> None:
    """One packed block of B against all row panels of A: microkernels, then C's tiles
    stored (first K block) or accumulated (later ones). The last column panel runs a
    microkernel with only as many vectors as it has columns (N = 784 with 64-column panels
    left 48 of the last panel's columns padding, 6% of the work)."""
    mr, nr, nv, vw = tile.mr, tile.nr, tile.nv, tile.vw
    vt = zvec.type
    with for_range(bld, i64(0), bld.sdiv(mp, i64(mr)), name="ir") as ip:
        ap = bld.gep(packa, [bld.mul(bld.mul(ip, kc), i64(mr))], inbounds=True)
        m0 = bld.mul(ip, i64(mr))
        arows = []
        for i in range(mr):
            r = bld.add(m0, i64(i))
            r = bld.select(bld.icmp_signed("<", r, Mv), r, mlast)
            arows.append(bld.gep(abase, [bld.add(bld.mul(r, sam), bld.mul(pc, astride))],
                                 inbounds=True))
        with for_range(bld, i64(0), bld.sdiv(np_, i64(nr)), name="jr") as jp:
            bp = bld.gep(packb, [bld.mul(jp, pstride)], inbounds=True)
            n0 = bld.mul(jp, i64(nr))
            for row in accs:
                for acc in row:
                    bld.store(zvec, acc)

            # one microkernel for every layout of A: row i of the panel starts at
            # ``abase_i`` and steps ``astep`` elements per k (its row in place: 1; its
            # column in place: A's k stride; the packed panel: MR), so the code holds each
            # width once
            astep = bld.select(direct, astride, i64(mr))
            abases = [bld.select(direct, arows[i], bld.gep(ap, [i64(i)], inbounds=True))
                      for i in range(mr)]

            def kernel(nvu: int) -> None:
                _microkernel(bld, fma, accs, tile, kc, bp, lambda kk, i: bld.gep(
                    abases[i], [bld.mul(kk, astep)], inbounds=True), nvu)

            def narrowed(nvu: int, vecs: ir.Value) -> None:
                if nvu == nv:
                    kernel(nv)
                    return
                with bld.if_else(bld.icmp_signed("<=", vecs, i64(nvu))) as (few, more):
                    with few:
                        kernel(nvu)
                    with more:
                        narrowed(nvu + 1, vecs)

            left = bld.sub(Nv, n0)
            narrowed(1, _ceildiv(bld, bld.select(bld.icmp_signed("<", left, i64(nr)), left,
                                                 i64(nr)), vw))
            full = bld.and_(bld.icmp_signed("<=", bld.add(m0, i64(mr)), Mv),
                            bld.icmp_signed("<=", bld.add(n0, i64(nr)), Nv))
            with bld.if_else(full) as (then, otherwise):
                with then:
                    # the first K block stores, later ones accumulate: C is not read
                    # before it has been written (a K=64 weight gradient is store-bound)
                    ptrs = []
                    for i in range(mr):
                        rowp = bld.gep(out, [bld.add(bld.mul(bld.add(m0, i64(i)), ldc),
                                                     n0)], inbounds=True)
                        for j in range(nv):
                            ptrs.append((i, j, bld.bitcast(
                                bld.gep(rowp, [i64(j * vw)], inbounds=True),
                                vt.as_pointer())))
                    with bld.if_else(first) as (store, accumulate):
                        with store:
                            for i, j, cp in ptrs:
                                bld.store(bld.load(accs[i][j]), cp, align=4)
                        with accumulate:
                            for i, j, cp in ptrs:
                                new = bld.fadd(bld.load(cp, align=4), bld.load(accs[i][j]))
                                bld.store(new, cp, align=4)
                with otherwise:
                    for i in range(mr):
                        for j in range(nv):
                            tp = bld.gep(tptr, [i64(i * nr + j * vw)], inbounds=True)
                            bld.store(bld.load(accs[i][j]),
                                      bld.bitcast(tp, vt.as_pointer()), align=4)
                    mlim = bld.sub(Mv, m0)
                    mlim = bld.select(bld.icmp_signed("<", mlim, i64(mr)), mlim, i64(mr))
                    nlim = bld.sub(Nv, n0)
                    nlim = bld.select(bld.icmp_signed("<", nlim, i64(nr)), nlim, i64(nr))
                    with for_range(bld, i64(0), mlim, name="ei") as ei:
                        with for_range(bld, i64(0), nlim, name="ej") as ej:
                            src = bld.load(bld.gep(tptr, [bld.add(bld.mul(ei, i64(nr)), ej)],
                                                   inbounds=True))
                            cp = bld.gep(out, [bld.add(bld.mul(bld.add(m0, ei), ldc),
                                                       bld.add(n0, ej))], inbounds=True)
                            new = bld.select(first, src, bld.fadd(bld.load(cp), src))
                            bld.store(new, cp)


def _microkernel(bld: ir.IRBuilder, fma: ir.Function, accs: list, tile: Tile, kc: ir.Value,
                 bp: ir.Value, a_at: Any, nvu: int | None = None) -> None:
    """``accs[i][j] += A[i, k] * Bpanel[k, j*vw:(j+1)*vw]`` for k < kc and j < ``nvu`` (all
    NV by default): ``nvu`` vector loads of the packed B row, one broadcast per row of A
    (``a_at(k, i)`` points at it, packed or not)."""
    vt = fma.args[0].type
    nvu = tile.nv if nvu is None else nvu
    with for_range(bld, i64(0), kc, name="uk") as kk:
        bvs = []
        for j in range(nvu):
            p = bld.gep(bp, [bld.add(bld.mul(kk, i64(tile.nr)), i64(j * tile.vw))],
                        inbounds=True)
            bvs.append(bld.load(bld.bitcast(p, vt.as_pointer()), align=64))
        for i in range(tile.mr):
            av = bld.load(a_at(kk, i))
            sp = splat(bld, av, tile.vw)
            for j in range(nvu):
                bld.store(bld.call(fma, [sp, bvs[j], bld.load(accs[i][j])]), accs[i][j])


def _transpose(bld: ir.IRBuilder, rows: list[ir.Value], vw: int) -> list[ir.Value]:
    """Transpose a vw x vw block held as vw vectors: log2(vw) rounds that swap the
    off-diagonal h x h sub-blocks of every 2h x 2h block (LLVM lowers each to a permute)."""
    rows = list(rows)
    h = vw // 2
    while h:
        lo = ir.Constant(ir.VectorType(I32, vw), [c if c & h == 0 else vw + c - h
                                                   for c in range(vw)])
        hi = ir.Constant(ir.VectorType(I32, vw), [c + h if c & h == 0 else vw + c
                                                   for c in range(vw)])
        for i in range(vw):
            if i & h == 0:
                a, b = rows[i], rows[i + h]
                rows[i] = bld.shuffle_vector(a, b, lo)
                rows[i + h] = bld.shuffle_vector(a, b, hi)
        h //= 2
    return rows


def pack_b_transposed(bld: ir.IRBuilder, base: ir.Value, sbn: ir.Value, packb: ir.Value,
                       pc: ir.Value, kc: ir.Value, Nv: ir.Value, np_: ir.Value, nr: int,
                       vw: int, zero: ir.Constant) -> None:
    """Pack a k-contiguous B (``x @ W.T``'s W): vw columns x vw k at a time are loaded as
    vectors along k, transposed in registers and stored as vectors along n — contiguous
    reads and writes instead of a strided scalar copy."""
    elt = zero.type
    vt = ir.VectorType(elt, vw)
    with for_range(bld, i64(0), bld.sdiv(np_, i64(vw)), name="pbg") as grp:
        c0 = bld.mul(grp, i64(vw))
        jp = bld.sdiv(c0, i64(nr))
        pbase = bld.add(bld.mul(bld.mul(jp, kc), i64(nr)), bld.srem(c0, i64(nr)))
        full = bld.icmp_signed("<=", bld.add(c0, i64(vw)), Nv)
        kv = bld.mul(bld.sdiv(kc, i64(vw)), i64(vw))
        srcs = [bld.gep(base, [bld.add(bld.mul(bld.add(c0, i64(t)), sbn), pc)], inbounds=True)
                for t in range(vw)]
        with bld.if_else(full) as (fast, edge):
            with fast:
                with for_range(bld, i64(0), kv, name="pbt", step=i64(vw)) as kb:
                    rows = [bld.load(bld.bitcast(bld.gep(src, [kb], inbounds=True),
                                                 vt.as_pointer()), align=4) for src in srcs]
                    for u, v in enumerate(_transpose(bld, rows, vw)):
                        dst = bld.gep(packb, [bld.add(pbase, bld.mul(bld.add(kb, i64(u)),
                                                                     i64(nr)))], inbounds=True)
                        bld.store(v, bld.bitcast(dst, vt.as_pointer()), align=4)
                with for_range(bld, kv, kc, name="pbr") as kk:
                    row = bld.add(pbase, bld.mul(kk, i64(nr)))
                    for t, src in enumerate(srcs):
                        bld.store(bld.load(bld.gep(src, [kk], inbounds=True)),
                                  bld.gep(packb, [bld.add(row, i64(t))], inbounds=True))
            with edge:  # the last, partial group of columns: scalar, zero past N
                with for_range(bld, i64(0), i64(vw), name="pbc") as t:
                    col = bld.add(c0, t)
                    inside = bld.icmp_signed("<", col, Nv)
                    src = bld.gep(base, [bld.add(bld.mul(bld.select(inside, col, i64(0)), sbn),
                                                 pc)], inbounds=True)
                    with for_range(bld, i64(0), kc, name="pbe") as kk:
                        v = bld.load(bld.gep(src, [kk], inbounds=True))
                        dst = bld.add(bld.add(pbase, bld.mul(kk, i64(nr))), t)
                        bld.store(bld.select(inside, v, zero),
                                  bld.gep(packb, [dst], inbounds=True))


def emit_pack_all(b: ir.IRBuilder, mod: ir.Module, tile: Tile, elt: ir.Type, raw_b: tuple,
                  dst: ir.Value, n: ir.Value, k: ir.Value) -> None:
    """Pack all of B (``raw_b``: base, k stride, n stride) into ``dst`` for ``gemm``'s
    ``packed`` argument: panels of NR columns (the last zero-padded), each all K rows of NR
    contiguous elements, panel after panel: the one K block ``0..K`` of ``_pack_b``'s
    layout. A block ``pc..pc+kc`` of panel ``jp`` is then ``kc`` consecutive rows at
    ``dst + jp * K * NR + pc * NR``, so any K blocking and any column split in whole panels
    reads it in place."""
    if getattr(mod, "gemm_requests", None) is not None:
        # the pack routine is exported by the tile's library piece (``library_parts``)
        mod.gemm_requests.add((tile, "f32" if elt == F32 else "f64"))  # type: ignore
        pack = _declare_like(mod, _pack_b_name(tile, elt), _pack_b_type(elt))
    else:
        pack = _pack_b_function(mod, tile, elt)
    base, sbk, sbn = raw_b
    np_ = b.mul(_ceildiv(b, n, tile.nr), i64(tile.nr))
    b.call(pack, [base, sbk, sbn, dst, i64(0), k, n, np_])


def _pack_b_name(tile: Tile, elt: ir.Type) -> str:
    return f"graphc_gemm_packb_{'f32' if elt == F32 else 'f64'}_{tile.nr}x{tile.vw}"


def _pack_b_type(elt: ir.Type) -> ir.FunctionType:
    ep = elt.as_pointer()
    return ir.FunctionType(ir.VoidType(), [ep, I64, I64, ep, I64, I64, I64, I64])


def _pack_b_function(mod: ir.Module, tile: Tile, elt: ir.Type) -> ir.Function:
    """``pack(B, sBk, sBn, dst, pc, kc, N, Np)``: ``_pack_b`` of one K block as a function of
    its own, shared by both GEMM orders (emitted inline in each, it doubled compile time)."""
    name = _pack_b_name(tile, elt)
    fn = mod.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mod, _pack_b_type(elt), name=name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fn.attributes.add("optsize")
    for i in (0, 3):
        fn.args[i].add_attribute("noalias")
    base, sbk, sbn, dst, pc, kc, n, np_ = fn.args
    bld = ir.IRBuilder(fn.append_basic_block("entry"))

    def load_b(r: ir.Value, col: ir.Value) -> ir.Value:
        off = bld.add(bld.mul(r, sbk), bld.mul(col, sbn))
        return bld.load(bld.gep(base, [off], inbounds=True))

    _pack_b(bld, load_b, (base, sbk, sbn), dst, pc, kc, n, np_, tile.nr, ir.Constant(elt, 0.0),
            tile.vw)
    bld.ret_void()
    return fn


def _pack_b(bld: ir.IRBuilder, load_b: Any, raw: tuple | None, packb: ir.Value, pc: ir.Value,
            kc: ir.Value, Nv: ir.Value, np_: ir.Value, nr: int, zero: ir.Constant,
            vw: int = 16) -> None:
    def generic() -> None:
        with for_range(bld, i64(0), bld.sdiv(np_, i64(nr)), name="pbj") as jp:
            pbase = bld.mul(bld.mul(jp, kc), i64(nr))
            with for_range(bld, i64(0), kc, name="pbk") as kk:
                row = bld.add(pbase, bld.mul(kk, i64(nr)))
                with for_range(bld, i64(0), i64(nr), name="pbn") as j:
                    col = bld.add(bld.mul(jp, i64(nr)), j)
                    inside = bld.icmp_signed("<", col, Nv)
                    v = load_b(bld.add(pc, kk), bld.select(inside, col, i64(0)))
                    bld.store(bld.select(inside, v, zero),
                              bld.gep(packb, [bld.add(row, j)], inbounds=True))

    if raw is None:
        generic()
        return
    base, sbk, sbn = raw
    by_rows = bld.icmp_signed("==", sbn, i64(1))
    by_cols = bld.icmp_signed("==", sbk, i64(1))
    with bld.if_else(by_rows) as (rows, other):
        with rows:  # B rows contiguous: copy NR-wide row segments (vector loads/stores)
            with for_range(bld, i64(0), bld.sdiv(np_, i64(nr)), name="pbj") as jp:
                pbase = bld.mul(bld.mul(jp, kc), i64(nr))
                c0 = bld.mul(jp, i64(nr))
                full = bld.icmp_signed("<=", bld.add(c0, i64(nr)), Nv)
                with bld.if_else(full) as (f, part):
                    with f:
                        _copy_runs(bld, base, sbk, c0, packb, pbase, pc, kc, nr, vw)
                    with part:
                        with for_range(bld, i64(0), kc, name="pbk") as kk:
                            row = bld.add(pbase, bld.mul(kk, i64(nr)))
                            with for_range(bld, i64(0), i64(nr), name="pbn") as j:
                                col = bld.add(c0, j)
                                inside = bld.icmp_signed("<", col, Nv)
                                v = load_b(bld.add(pc, kk), bld.select(inside, col, i64(0)))
                                bld.store(bld.select(inside, v, zero),
                                          bld.gep(packb, [bld.add(row, j)], inbounds=True))
        with other:
            with bld.if_else(by_cols) as (cols, gen):
                with cols:  # B columns contiguous (a transposed weight): transpose blocks
                    pack_b_transposed(bld, base, sbn, packb, pc, kc, Nv, np_, nr, vw, zero)
                with gen:
                    generic()


def _copy_runs(bld: ir.IRBuilder, base: ir.Value, stride: ir.Value, start: ir.Value,
               dst: ir.Value, dbase: ir.Value, pc: ir.Value, kc: ir.Value, width: int,
               vw: int) -> None:
    """dst[dbase + k*width + j] = base[(pc + k)*stride + start + j] for k < kc, j < width: a
    panel whose rows are contiguous runs of whole vectors (``vw`` lanes; B's NR-wide panels)
    in the source, moved as vectors, written out here rather than left to LLVM's SLP
    vectoriser, which the tiles' pipeline does not run (``_level_of``)."""
    assert width % vw == 0, (width, vw)
    vt = ir.VectorType(dst.type.pointee, vw)
    with for_range(bld, i64(0), kc, name="cpk") as kk:
        src = bld.gep(base, [bld.add(bld.mul(bld.add(pc, kk), stride), start)], inbounds=True)
        out = bld.gep(dst, [bld.add(dbase, bld.mul(kk, i64(width)))], inbounds=True)
        for j in range(0, width, vw):
            v = bld.load(bld.bitcast(bld.gep(src, [i64(j)], inbounds=True),
                                     vt.as_pointer()), align=4)
            bld.store(v, bld.bitcast(bld.gep(out, [i64(j)], inbounds=True),
                                     vt.as_pointer()), align=4)


def _pack_a(bld: ir.IRBuilder, load_a: Any, packa: ir.Value, pc: ir.Value, kc: ir.Value,
            Mv: ir.Value, mp: ir.Value, mr: int, zero: ir.Constant) -> None:
    """Pack a K block of an A that is read neither by rows nor by columns in place (neither
    stride 1, ``_gemm_body``): panel ip holds, for each k, MR consecutive rows, rows past M
    zero."""
    with for_range(bld, i64(0), bld.sdiv(mp, i64(mr)), name="pai") as ip:
        pbase = bld.mul(bld.mul(ip, kc), i64(mr))
        with for_range(bld, i64(0), kc, name="pak") as kk:
            for i in range(mr):
                r = bld.add(bld.mul(ip, i64(mr)), i64(i))
                inside = bld.icmp_signed("<", r, Mv)
                v = load_a(bld.select(inside, r, i64(0)), bld.add(pc, kk))
                dst = bld.add(bld.add(pbase, bld.mul(kk, i64(mr))), i64(i))
                bld.store(bld.select(inside, v, zero), bld.gep(packa, [dst], inbounds=True))


def _pack_a_cols(bld: ir.IRBuilder, abase: ir.Value, sak: ir.Value, packa: ir.Value,
                 pc: ir.Value, kc: ir.Value, Mv: ir.Value, mp: ir.Value, mr: int,
                 zero: ir.Constant) -> None:
    """``_pack_a`` for an A with contiguous columns (``A[m, k]`` at ``m + k * sak``): row k
    of the K block is read once, front to back, and dealt out MR elements to each panel,
    so the source is streamed a page at a time instead of one page per k of each panel.
    Whole panels move as one MR-element vector each (unaligned; the scalar copy ran at a
    third of the speed), the last panel, which may pass M, element by element."""
    vt = ir.VectorType(zero.type, mr)
    al = 4 if zero.type == F32 else 8  # f32 or f64, the GEMM's types
    whole = bld.sdiv(Mv, i64(mr))  # panels inside M
    with for_range(bld, i64(0), kc, name="pck") as kk:
        row = bld.gep(abase, [bld.mul(bld.add(pc, kk), sak)], inbounds=True)

        def dst_of(ip: ir.Value) -> ir.Value:
            return bld.add(bld.mul(bld.mul(ip, kc), i64(mr)), bld.mul(kk, i64(mr)))

        with for_range(bld, i64(0), whole, name="pcv") as ip:
            src = bld.gep(row, [bld.mul(ip, i64(mr))], inbounds=True)
            v = bld.load(bld.bitcast(src, vt.as_pointer()), align=al)
            dst = bld.gep(packa, [dst_of(ip)], inbounds=True)
            bld.store(v, bld.bitcast(dst, vt.as_pointer()), align=al)
        with for_range(bld, whole, bld.sdiv(mp, i64(mr)), name="pci") as ip:
            m0 = bld.mul(ip, i64(mr))
            dst = dst_of(ip)
            for i in range(mr):
                r = bld.add(m0, i64(i))
                inside = bld.icmp_signed("<", r, Mv)
                v = bld.load(bld.gep(row, [bld.select(inside, r, i64(0))], inbounds=True))
                bld.store(bld.select(inside, v, zero),
                          bld.gep(packa, [bld.add(dst, i64(i))], inbounds=True))


def _ceildiv(b: ir.IRBuilder, x: ir.Value, d: int) -> ir.Value:
    return b.sdiv(b.add(x, i64(d - 1)), i64(d))
