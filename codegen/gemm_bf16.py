"""bf16 GEMM for the CPU backend: C = A @ B with bf16 operands and float32 accumulation.

Interface (the kernels call these; the matmul kernel family wires them in):

- ``bf16_isa(features=None) -> "amx" | "avx512bf16" | "generic"``: the best variant the host
  (or an LLVM feature string) can run. Decided from features, never from a CPU name: LLVM
  names this AMX host ``rocketlake`` (a KVM guest), and AMD hosts have AVX512-BF16 without
  AMX. ``GRAPHC_BF16_ISA`` may force a lower variant (tests, A/B timing); a higher one than
  the host has is ignored, since it would fault.
- ``Bf16Gemm(isa, out, wide)``: one compiled variant (``out``: ``"f32"`` or ``"bf16"``;
  ``wide``: 512-bit vectors, only meaningful for ``generic``); ``Bf16Gemm.for_host(out)``.
- ``gemm_bf16_function(mod, kern)``: the LLVM function
  ``gemm_bf16(A: i16*, sAm, sAk, B: i16*, sBk, sBn, C, ldc, M, N, K, work: i8*)`` (all sizes
  and strides i64, in elements). A and B hold bf16 bit patterns and may have any strides
  (transposed views are swapped strides); C is row-major with row stride ``ldc`` and is
  overwritten (not accumulated into), as ``f32*`` or, for ``out="bf16"``, ``i16*`` rounded
  to nearest even with NaN -> 0x7FC0 (PyTorch's scalar float->bfloat16 rule; done with
  integer ops in every variant instead of ``vcvtneps2bf16``, which flushes denormals).
  M, N, K are run-time values, any of them may be 0 (K = 0 writes zeros).
- ``workspace_bytes_bf16(m, n, k, isa)``: the scratch ``work`` needs (sympy-compatible, for
  symbolic shapes), one copy per thread.
- ``emit_gemm_bf16_call(b, mod, alloca, kern, args, work, work_bytes, run2)``: what a kernel
  emits, like ``gemm.emit_gemm_call``: declares the routine and records ``kern`` in
  ``mod.gemm_requests`` when the module links the GEMM library (the CPU runtime's
  ``on_gemm`` hands such requests to ``library_parts`` below, which builds each variant as a
  cached piece of its own; ``gemm.build_library``, the one-module form, does not know them
  yet), defines it otherwise; splits the product over
  the two-thread pool (``run2``) when it pays, giving the second thread the ``work_bytes``
  after ``work`` (so the caller reserves twice ``workspace_bytes_bf16``).
- AMX needs the kernel's permission for tile data once per process before the first call:
  ``graphc.runtime.amx.ensure_amx()`` (a clear RuntimeError when refused).

Design (BLIS-style, one packed layout for every variant):

- Both operands are packed into bf16 blocks of 16 rows x 32 k (A) and 16 k-pairs x 16
  columns (B, VNNI order: pairs (k, k+1) adjacent), 1 KB each, contiguous: exactly AMX's
  tile shape (16 rows x 64 bytes), so the AMX microkernel loads tiles with a 64-byte stride
  and hardware prefetch sees one stream per operand. The vector variants read the same
  layout: a B block row is one 512-bit vector of 16 column pairs (``vdpbf16ps``'s operand),
  and an A pair is a 32-bit broadcast from anywhere. One packer serves three variants.
- Packing reads the operands through their strides with vector fast paths for the four
  layouts the forward and backward passes produce: A k-contiguous (64-byte row copies),
  A m-contiguous (``g.T`` in a weight gradient: two k rows interleaved into pairs, then a
  16x16 32-bit transpose), B n-contiguous (two k rows interleaved), B k-contiguous
  (``W.T``: pairs are already adjacent, 16 columns transposed as 32-bit units). Edge blocks
  (past M, N or K) take the same paths with masked loads and zero padding (a scalar edge
  loop cost ~50 us at K = 784), so every microkernel runs full blocks and zero pairs
  contribute exact zeros; only operands with no unit stride are packed element by element.
- AMX reads a k-contiguous A in place (``tileloadd`` takes any row stride): whole 32-row
  panels load their tiles from the operand up to the last whole 32 k, only K's tail and the
  last partial panel are packed. When B is k-contiguous and the larger operand (``x @ W.T``,
  W of 1024 x 784 against x of 256 rows) the routine computes C^T = B^T A^T, so W is read in
  place and only x is packed; the blocks of C^T are transposed in registers when stored.
  Packing W was a third of the time (memory-bound: 2 MB read, 2 MB written).
  fc1 at one thread, Xeon with AMX: ~835 -> ~955 GFLOP/s with this and the vector edges.
- Packing is not blocked in K: A is packed ``MC`` rows and B ``NC`` columns at a time, each
  for all of K (``workspace_bytes_bf16``; bf16 is half of fp32's bytes), and C is written
  once per element, rounded once, from float32 sums over all of K. That makes "overwrite C"
  and the bf16 output exact (no partial sums round-tripped through bf16 or C) and C is
  never read.
- AMX: a 32 x 32 block of C in the four accumulator tiles (2x2), two A and two B tiles per
  32 k, four ``tdpbf16ps``. The loops run K blocks of ``KB`` chunks (256 k) outside the A
  panels, so the B panel's block (16 KB) stays in L1 while the A panels' blocks pass by;
  each block's float32 partial sums wait in ``CBUF`` (4 KB per block, in L1) between K
  blocks. Full float32 blocks are stored from the tiles straight into C; edge blocks and bf16
  output go through the block's 4 KB of ``CBUF``. AMX and ``vdpbf16ps`` treat bf16 inputs
  and float32 results below 2^-126 as zero (hardware DAZ/FTZ, as in oneDNN's kernels that
  PyTorch uses); ``generic`` keeps denormals.
- ``avx512bf16``: an 8-row x 32-column block in 16 zmm accumulators, one ``vdpbf16ps`` per
  (row, 16 columns, k pair). ``generic``: the same loop with the pair split into two
  float32 values by shifts (bf16 -> f32 is exact) and two fused multiply-adds; 8 x 32 with
  512-bit vectors, 4 x 16 otherwise (16 ymm registers). It needs nothing beyond x86-64.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import sympy
from llvmlite import ir

from graphc.ir import shapes as sh

from .gemm import _transpose
from .hostinfo import ISAS, bf16_isa, feature_set
from .llvm_util import F32, I8, I8P, I32, I64, declare, for_range, i64
from .parallel import GEMM_PAR_MIN_MACS, TASK, context_type, pack_context, unpack_context

I16 = ir.IntType(16)
I16P = I16.as_pointer()
TK = 32  # k per packed block (16 pairs: one AMX tile row of 64 bytes)
BLOCK = 16 * TK  # i16 elements in one packed 1 KB block


class _BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no such type): the AVX512-BF16 intrinsic's operands
    are ``<32 x bfloat>`` in current LLVM; the packed pairs are bitcast to it."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


# the LLVM feature string bf16 kernels are generated for: None for this host (a JIT step);
# an AOT build or a step for a named CPU sets its target's (``bf16_target``)
_BF16_TARGET: ContextVar[str | None] = ContextVar("bf16_target", default=None)


@contextlib.contextmanager
def bf16_target(features: str | None) -> Iterator[None]:
    """Choose bf16 GEMM variants for ``features`` (an LLVM feature string; ``""``: nothing
    beyond the vector width, the portable variant) instead of the host within the block."""
    token = _BF16_TARGET.set(features)
    try:
        yield
    finally:
        _BF16_TARGET.reset(token)


def bf16_features() -> str | None:
    """The feature string ``bf16_target`` set (None: this host)."""
    return _BF16_TARGET.get()


@dataclass(frozen=True)
class Bf16Gemm:
    """One compiled variant: ``isa`` (see ``ISAS``), output dtype ``out`` (``"f32"`` or
    ``"bf16"``), ``wide`` (512-bit vectors; AMX and AVX512-BF16 imply it)."""

    isa: str
    out: str = "f32"
    wide: bool = True

    def __post_init__(self) -> None:
        if self.isa not in ISAS:
            raise ValueError(f"bf16 GEMM isa: expected one of {ISAS}, got {self.isa!r}")
        if self.out not in ("f32", "bf16"):
            raise ValueError(f"bf16 GEMM output: expected 'f32' or 'bf16', got {self.out!r}")
        if self.isa != "generic" and not self.wide:
            raise ValueError(f"bf16 GEMM: isa {self.isa!r} implies 512-bit vectors")

    @staticmethod
    def for_host(out: str = "f32", features: str | None = None) -> Bf16Gemm:
        feats = feature_set(features)
        return Bf16Gemm(bf16_isa(features), out, "avx512f" in feats)

    @property
    def name(self) -> str:
        w = "" if self.isa != "generic" else ("_w" if self.wide else "_n")
        return f"graphc_gemm_bf16_{self.isa}{w}_{self.out}"

    @property
    def task_name(self) -> str:
        return self.name.replace("graphc_gemm_bf16_", "graphc_gemm_bf16_task_")

    @property
    def spec(self) -> str:
        """The library-piece cache key (bump the version when the emitted code changes)."""
        return f"gemm-bf16|v2|{self.isa}|{self.out}|{int(self.wide)}"

    @property
    def pm(self) -> int:  # rows per packed A panel
        return 32 if self.isa == "amx" else 16

    @property
    def pn(self) -> int:  # columns per packed B panel
        return 32

    @property
    def mr(self) -> int:  # rows per vector microkernel (vector variants)
        return 8 if self.wide else 4

    @property
    def halves(self) -> int:  # 16-column vectors per vector microkernel row
        return 2 if self.wide else 1

    @property
    def out_type(self) -> ir.Type:
        return F32 if self.out == "f32" else I16


# M and N blocking: A is packed MC rows at a time for all of K, B NC columns at a time
# (a 1024 x 512 bf16 B block is 1 MB, half a 2 MB L2). A small MC costs no packing (A is
# packed once per NC block whatever MC is) and keeps an AMX K block of the A rows (64 x 256
# bf16, 32 KB) in L1 next to the B panel's (16 KB): AMX compute alone (packing stubbed out,
# Xeon with AMX, one thread) went 1,396 -> 3,103 GFLOP/s at 256x4096x256 from MC=256 to 64.
MC = 64
NC = 512
KB = 8  # AMX: 32-k chunks per K block (256 k: 16 KB of a B panel)
CBUF = MC // 32 * 4096  # AMX: float32 partial sums of one column of 32 x 32 blocks
# AMX, float32 C: whole blocks stored from the tiles straight into C (measured no worse than
# through CBUF, also at power-of-two row strides)
DIRECT_STORE = True


def workspace_bytes_bf16(m: Any, n: Any, k: Any, isa: str) -> Any:
    """Scratch bytes for one (single-thread) call: the packed A block (at most ``MC`` rows)
    and B block (at most ``NC`` columns), each for all of K padded to 32, plus 64 bytes of
    AMX tile configuration, ``CBUF`` bytes of float32 partial sums and 128 for alignment."""
    kern = Bf16Gemm(isa)
    kp = sympy.ceiling(sympy.sympify(k) / TK) * TK
    mp = sympy.Min(sympy.ceiling(sympy.sympify(m) / kern.pm) * kern.pm, MC)
    np_ = sympy.Min(sympy.ceiling(sympy.sympify(n) / kern.pn) * kern.pn, NC)
    total = (mp + np_) * kp * 2 + 128 + 64 + CBUF
    return sh.dim(total)


# ---------------------------------------------------------------------------------------
# packing


def _ceildiv(b: ir.IRBuilder, x: ir.Value, d: int) -> ir.Value:
    return b.sdiv(b.add(x, i64(d - 1)), i64(d))


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def _vload(b: ir.IRBuilder, base: ir.Value, off: ir.Value, vt: ir.VectorType, align: int
           ) -> ir.Value:
    p = b.gep(base, [off], inbounds=True)
    return b.load(b.bitcast(p, vt.as_pointer()), align=align)


def _vstore(b: ir.IRBuilder, v: ir.Value, base: ir.Value, off: ir.Value, align: int) -> None:
    p = b.gep(base, [off], inbounds=True)
    b.store(v, b.bitcast(p, v.type.as_pointer()), align=align)


def _interleave(b: ir.IRBuilder, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """Two <16 x i16> rows (k, k+1) as 16 pairs: <16 x i32> (k in the low half: little
    endian, the order AMX and ``vdpbf16ps`` expect)."""
    mask = ir.Constant(ir.VectorType(I32, 32), [j // 2 + 16 * (j % 2) for j in range(32)])
    return b.bitcast(b.shuffle_vector(lo, hi, mask), ir.VectorType(I32, 16))


V16I16 = ir.VectorType(I16, 16)
V32I16 = ir.VectorType(I16, 32)
V16I32 = ir.VectorType(I32, 16)


def _block_loops(b: ir.IRBuilder, groups: ir.Value, c_from: ir.Value, kc: ir.Value,
                 k_outer: ir.Value, block: Any) -> None:
    """``block(g, c)`` for every 16-row group and 32-k chunk ``c >= c_from``: chunks outer
    when ``k_outer`` (the source's rows run along the groups: a pass over all groups reads
    whole source lines, where groups outer would fetch each 64-byte line twice, a full K
    apart, and power-of-two row strides would alias in L1), groups outer otherwise."""
    with b.if_else(k_outer) as (by_k, by_group):
        with by_k:
            with for_range(b, c_from, kc, name="oc") as c:
                with for_range(b, i64(0), groups, name="og") as g:
                    block(g, c)
        with by_group:
            with for_range(b, i64(0), groups, name="g") as g:
                with for_range(b, c_from, kc, name="c") as c:
                    block(g, c)


def _lane_mask(b: ir.IRBuilder, count: ir.Value, n: int) -> ir.Value:
    """<n x i1>: lanes below ``count``."""
    vt = ir.VectorType(I32, n)
    c32 = b.trunc(count, I32)
    splat = b.shuffle_vector(b.insert_element(ir.Constant(vt, ir.Undefined), c32, i64(0)),
                             ir.Constant(vt, ir.Undefined), ir.Constant(vt, [0] * n))
    return b.icmp_signed("<", ir.Constant(vt, list(range(n))), splat)


def _mload(b: ir.IRBuilder, mod: ir.Module, base: ir.Value, off: ir.Value, vt: ir.VectorType,
           mask: ir.Value | None) -> ir.Value:
    """A vector of i16 at ``base + off``; with ``mask``, only those lanes (the rest zero and
    never touched: loads past the operand's end are safe)."""
    if mask is None:
        return _vload(b, base, off, vt, 2)
    fn = declare(mod, f"llvm.masked.load.v{vt.count}i16.p0", vt,
                 [vt.as_pointer(), mask.type, vt])
    p = b.bitcast(b.gep(base, [off], inbounds=True), vt.as_pointer())
    return b.call(fn, [p, mask, ir.Constant(vt, None)])


def _pack_block(b: ir.IRBuilder, mod: ir.Module, src: ir.Value, s_row: ir.Value,
                s_k: ir.Value, dst: ir.Value, blk: ir.Value, r0: ir.Value, rows: ir.Value,
                k0: ir.Value, kk: ir.Value, vnni: bool) -> None:
    """One packed 1 KB block: source rows ``r0 .. r0+15`` (A's rows, or B's columns: B is
    packed as B^T) by ``k0 .. k0+31``, zero past ``rows`` and ``kk``. ``vnni``: B's order
    (block row p holds the pairs of k0+2p, k0+2p+1 for the 16 columns), else A's (block row
    i holds source row i's 32 k).

    Vector paths for a k-contiguous source (16 rows of 32 k, as 16 x 16 pairs) and a
    row-contiguous one (pairs of k rows interleaved); A's order is the former as is and the
    latter transposed, B's the other way round. Edge blocks take the same paths with masked
    loads along the vectors and out-of-range rows or k clamped and zeroed, so no edge goes
    element by element; other strides do (``_pack_scalar``)."""
    full_r = b.icmp_signed("<=", b.add(r0, i64(16)), rows)
    full_k = b.icmp_signed("<=", b.add(k0, i64(TK)), kk)
    zero16 = ir.Constant(V16I32, None)

    def store_rows(vs: list[ir.Value]) -> None:
        for i, v in enumerate(vs):
            _vstore(b, v, dst, b.add(blk, i64(i * 32)), 64)

    def k_rows(edge: bool) -> list[ir.Value]:  # s_k == 1: per row, 32 k = 16 pairs
        mask = _lane_mask(b, b.sub(kk, k0), 32) if edge else None
        out = []
        for i in range(16):
            r = b.add(r0, i64(i))
            ok = b.icmp_signed("<", r, rows)
            rc = b.select(ok, r, i64(0)) if edge else r
            v = b.bitcast(_mload(b, mod, src, b.add(b.mul(rc, s_row), k0), V32I16, mask),
                          V16I32)
            out.append(b.select(ok, v, zero16) if edge else v)
        return out

    def pair_rows(edge: bool) -> list[ir.Value]:  # s_row == 1: per pair, 16 rows
        mask = _lane_mask(b, b.sub(rows, r0), 16) if edge else None
        out = []
        for p in range(16):
            halves = []
            for h in range(2):
                k = b.add(k0, i64(2 * p + h))
                ok = b.icmp_signed("<", k, kk)
                kc = b.select(ok, k, i64(0)) if edge else k
                v = _mload(b, mod, src, b.add(b.mul(kc, s_k), r0), V16I16, mask)
                halves.append(b.select(ok, v, ir.Constant(V16I16, None)) if edge else v)
            out.append(_interleave(b, *halves))
        return out

    def both(kind: Any, transpose: bool) -> None:
        with b.if_else(b.and_(full_r, full_k)) as (whole, edge):
            for flag, ctx in ((False, whole), (True, edge)):
                with ctx:
                    vs = kind(flag)
                    store_rows(_transpose(b, vs, 16) if transpose else vs)

    with b.if_else(b.icmp_signed("==", s_k, i64(1))) as (along_k, other):
        with along_k:
            both(k_rows, vnni)
        with other:
            with b.if_else(b.icmp_signed("==", s_row, i64(1))) as (along_r, gen):
                with along_r:
                    both(pair_rows, not vnni)
                with gen:
                    if vnni:
                        at = (lambda i, j: b.add(b.add(b.mul(b.sdiv(j, i64(2)), i64(32)),
                                                       b.mul(i, i64(2))), b.srem(j, i64(2))))
                    else:
                        at = (lambda i, j: b.add(b.mul(i, i64(32)), j))
                    _pack_scalar(b, src, s_row, s_k, dst, blk, r0, rows, k0, kk, at)


def _pack_function(mod: ir.Module, panel: int, vnni: bool) -> ir.Function:
    """``pack(src, s_row, s_k, dst, rows, K, c_from)``: source rows ``[0, rows)`` (A's rows,
    or B's columns with B's strides swapped) into panels of ``panel`` rows, chunks of 32 k
    from ``c_from`` on (earlier chunks' blocks are left alone), zero past ``rows`` up to whole
    panels and past K up to 32.

    Panel ``ip`` starts at ``ip * kc * panel * 32`` (i16 units, ``kc`` chunks of 32 k); in
    it, chunk ``c`` of row group ``g`` (16 rows) is the 1 KB block at
    ``c * panel * 32 + g * 512``, laid out as ``_pack_block`` says: A's element (m, k) at
    ``(m%16) * 32 + k%32``, B's (k, n) at ``(k%32 // 2) * 32 + (n%16) * 2 + k%2`` (each
    64-byte row holds 16 columns' pairs (k, k+1))."""
    name = f"graphc_gemm_bf16_pack_{'b' if vnni else 'a'}_{panel}"
    fn = mod.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I16P, I64, I64, I16P, I64, I64,
                                                           I64]), name=name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    for i in (0, 3):
        fn.args[i].add_attribute("noalias")
    src, s_row, s_k, dst, rows, kk, c_from = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    kc = _ceildiv(b, kk, TK)
    groups = b.mul(_ceildiv(b, rows, panel), i64(panel // 16))

    def block(g: ir.Value, c: ir.Value) -> None:
        r0 = b.mul(g, i64(16))
        blk = b.add(b.add(b.mul(b.mul(b.sdiv(r0, i64(panel)), kc), i64(panel * 32)),
                          b.mul(b.srem(r0, i64(panel)), i64(32))), b.mul(c, i64(panel * 32)))
        _pack_block(b, mod, src, s_row, s_k, dst, blk, r0, rows, b.mul(c, i64(TK)), kk, vnni)

    # row-contiguous source: k rows outer, each source row read along its length once
    _block_loops(b, groups, c_from, kc, b.icmp_signed("==", s_row, i64(1)), block)
    b.ret_void()
    return fn


def _pack_scalar(b: ir.IRBuilder, src: ir.Value, s_row: ir.Value, s_k: ir.Value,
                 dst: ir.Value, blk: ir.Value, r0: ir.Value, rows: ir.Value, k0: ir.Value,
                 kk: ir.Value, at: Any) -> None:
    """One 16 x 32 block element by element, zero outside ``rows`` x ``kk``; ``at(i, j)``
    is the element's offset in the block (row-major for A, VNNI for B)."""
    zero = ir.Constant(I16, 0)
    with for_range(b, i64(0), i64(16), name="si") as i:
        r = b.add(r0, i)
        rin = b.icmp_signed("<", r, rows)
        with for_range(b, i64(0), i64(TK), name="sj") as j:
            k = b.add(k0, j)
            inside = b.and_(rin, b.icmp_signed("<", k, kk))
            off = b.add(b.mul(b.select(inside, r, i64(0)), s_row),
                        b.mul(b.select(inside, k, i64(0)), s_k))
            v = b.load(b.gep(src, [off], inbounds=True))
            b.store(b.select(inside, v, zero), b.gep(dst, [b.add(blk, at(i, j))],
                                                     inbounds=True))


# ---------------------------------------------------------------------------------------
# epilogue


def _round_bf16(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """float32 lanes to bf16 bits: round to nearest even, NaN -> 0x7FC0 (c10's rule)."""
    n = v.type.count
    vi = ir.VectorType(I32, n)

    def splat(x: int) -> ir.Constant:
        return ir.Constant(vi, [x] * n)

    bits = b.bitcast(v, vi)
    lsb = b.and_(b.lshr(bits, splat(16)), splat(1))
    r = b.lshr(b.add(bits, b.add(lsb, splat(0x7FFF))), splat(16))
    r = b.select(b.fcmp_unordered("uno", v, v), splat(0x7FC0), r)
    return b.trunc(r, ir.VectorType(I16, n))


def _store_row(b: ir.IRBuilder, mod: ir.Module, kern: Bf16Gemm, v: ir.Value, c: ir.Value,
               off: ir.Value, ncols: ir.Value | None) -> None:
    """Store 16 float32 lanes at ``c + off`` (converted for a bf16 C); ``ncols``: only the
    first ``ncols`` (< 16) lanes, a masked store; None: all 16."""
    if kern.out == "bf16":
        v = _round_bf16(b, v)
    if ncols is None:
        _vstore(b, v, c, off, 2 if kern.out == "bf16" else 4)
        return
    vt = v.type
    sfx = "v16i16" if kern.out == "bf16" else "v16f32"
    mt = ir.VectorType(ir.IntType(1), 16)
    # LLVM 22's form: the alignment is a parameter attribute, no longer an argument
    mstore = declare(mod, f"llvm.masked.store.{sfx}.p0", ir.VoidType(),
                     [vt, vt.as_pointer(), mt])
    lane = ir.Constant(V16I32, list(range(16)))
    n32 = b.trunc(ncols, I32)
    splat = b.shuffle_vector(b.insert_element(ir.Constant(V16I32, ir.Undefined), n32, i64(0)),
                             ir.Constant(V16I32, ir.Undefined), ir.Constant(V16I32, [0] * 16))
    p = b.bitcast(b.gep(c, [off], inbounds=True), vt.as_pointer())
    b.call(mstore, [v, p, b.icmp_signed("<", lane, splat)])


def _store_block(b: ir.IRBuilder, mod: ir.Module, kern: Bf16Gemm, row: Any, c: ir.Value,
                 ldc: ir.Value, m0: ir.Value, n0: ir.Value, rows: int, halves: int,
                 mlim: ir.Value, nlim: ir.Value) -> None:
    """C[m0 + i, n0 + 16h : +16] = ``row(i, h)`` for i < rows, h < halves, cut at ``mlim``
    rows and ``nlim`` columns (both relative to m0/n0): plain stores for a whole block."""
    full = b.and_(b.icmp_signed(">=", mlim, i64(rows)),
                  b.icmp_signed(">=", nlim, i64(16 * halves)))
    with b.if_else(full) as (whole, edge):
        with whole:
            for i in range(rows):
                base = b.add(b.mul(b.add(m0, i64(i)), ldc), n0)
                for h in range(halves):
                    _store_row(b, mod, kern, row(i, h), c, b.add(base, i64(16 * h)), None)
        with edge:
            for i in range(rows):
                with b.if_then(b.icmp_signed(">", mlim, i64(i))):
                    base = b.add(b.mul(b.add(m0, i64(i)), ldc), n0)
                    for h in range(halves):
                        left = b.sub(nlim, i64(16 * h))
                        with b.if_then(b.icmp_signed(">", left, i64(0))):
                            _store_row(b, mod, kern, row(i, h), c, b.add(base, i64(16 * h)),
                                       _min(b, left, i64(16)))


# ---------------------------------------------------------------------------------------
# microkernels


def _amx_intrinsics(mod: ir.Module) -> dict[str, ir.Function]:
    v = ir.VoidType()
    return {
        "cfg": declare(mod, "llvm.x86.ldtilecfg", v, [I8P]),
        "release": declare(mod, "llvm.x86.tilerelease", v, []),
        "zero": declare(mod, "llvm.x86.tilezero", v, [I8]),
        "load": declare(mod, "llvm.x86.tileloadd64", v, [I8, I8P, I64]),
        "dp": declare(mod, "llvm.x86.tdpbf16ps", v, [I8, I8, I8]),
        "store": declare(mod, "llvm.x86.tilestored64", v, [I8, I8P, I64]),
    }


def _amx_config(b: ir.IRBuilder, cfg: ir.Value) -> None:
    """The 64-byte tile configuration: palette 1, all eight tiles 16 rows x 64 bytes
    (tiles 0-3: the 2x2 float32 accumulators, 4-5: A, 6-7: B)."""
    for i in range(64):
        val = 1 if i == 0 else 64 if 16 <= i < 32 and i % 2 == 0 else 16 if 48 <= i < 56 else 0
        b.store(ir.Constant(I8, val), b.gep(cfg, [i64(i)], inbounds=True))


def _amx_block(b: ir.IRBuilder, mod: ir.Module, kern: Bf16Gemm, amx: dict, pa: ir.Value,
               pb: ir.Value, c0: ir.Value, c1: ir.Value, first: ir.Value, last: ir.Value,
               c: ir.Value, ldc: ir.Value, m0: ir.Value, n0: ir.Value, mlim: ir.Value,
               nlim: ir.Value, stage: ir.Value, direct: tuple, trans: ir.Value) -> None:
    """Chunks ``[c0, c1)`` of K for one 32 x 32 block of C, from an A panel ``pa`` and a B
    panel ``pb`` (i8*): the accumulators start at zero (``first``) or from the block's
    float32 partial sums in ``stage`` (4 KB, rows of 128 bytes), and go back there unless
    this is the ``last`` K block, which writes C (transposed when ``trans``).

    ``direct = (src, stride, kdirect)``: chunks below ``kdirect`` load the A tiles straight
    from the (k-contiguous) source rows at ``src`` with row stride ``stride`` bytes instead
    of from the packed panel, which then only holds the chunks from ``kdirect`` on."""
    def t(x: int) -> ir.Constant:
        return ir.Constant(I8, x)

    def stage_at(acc: int) -> ir.Value:
        return b.gep(stage, [i64(16 * (acc // 2) * 128 + 64 * (acc % 2))], inbounds=True)

    with b.if_else(first) as (zero, resume):
        with zero:
            for acc in range(4):
                b.call(amx["zero"], [t(acc)])
        with resume:
            for acc in range(4):
                b.call(amx["load"], [t(acc), stage_at(acc), i64(128)])
    stride = i64(64)
    dsrc, dstride, kdirect = direct
    with for_range(b, c0, c1, name="tk") as ck:
        ao = b.mul(ck, i64(kern.pm * 64))
        bo = b.mul(ck, i64(kern.pn * 64))
        use = b.icmp_signed("<", ck, kdirect)
        a0 = b.select(use, b.gep(dsrc, [b.mul(ck, i64(TK * 2))], inbounds=True),
                      b.gep(pa, [ao], inbounds=True))
        a1 = b.select(use, b.gep(dsrc, [b.add(b.mul(ck, i64(TK * 2)), b.mul(dstride, i64(16)))],
                                 inbounds=True),
                      b.gep(pa, [b.add(ao, i64(1024))], inbounds=True))
        astride = b.select(use, dstride, stride)
        b.call(amx["load"], [t(4), a0, astride])
        b.call(amx["load"], [t(6), b.gep(pb, [bo], inbounds=True), stride])
        b.call(amx["load"], [t(5), a1, astride])
        b.call(amx["load"], [t(7), b.gep(pb, [b.add(bo, i64(1024))], inbounds=True), stride])
        b.call(amx["dp"], [t(0), t(4), t(6)])
        b.call(amx["dp"], [t(1), t(4), t(7)])
        b.call(amx["dp"], [t(2), t(5), t(6)])
        b.call(amx["dp"], [t(3), t(5), t(7)])
    with b.if_then(b.not_(last)):
        for acc in range(4):
            b.call(amx["store"], [t(acc), stage_at(acc), i64(128)])
    with b.if_then(last):
        _amx_store(b, mod, kern, amx, c, ldc, m0, n0, mlim, nlim, stage, trans)


def _amx_store(b: ir.IRBuilder, mod: ir.Module, kern: Bf16Gemm, amx: dict, c: ir.Value,
               ldc: ir.Value, m0: ir.Value, n0: ir.Value, mlim: ir.Value, nlim: ir.Value,
               stage: ir.Value, trans: ir.Value) -> None:
    """The four accumulator tiles to C (through ``stage`` unless a whole float32 block);
    ``trans``: the block is of C^T (the swapped order), each 16 x 16 quadrant transposed in
    registers and stored as 16 rows of C."""
    def t(x: int) -> ir.Constant:
        return ir.Constant(I8, x)

    with b.if_then(trans):
        for acc in range(4):
            off = i64(16 * (acc // 2) * 128 + 64 * (acc % 2))
            b.call(amx["store"], [t(acc), b.gep(stage, [off], inbounds=True), i64(128)])
        sf = b.bitcast(stage, F32.as_pointer())
        vt = ir.VectorType(F32, 16)
        for acc in range(4):
            qa, qb = acc // 2, acc % 2  # quadrant: rows 16 qa (C's columns), cols 16 qb
            rows_ = [_vload(b, sf, i64((16 * qa + i) * 32 + 16 * qb), vt, 64)
                     for i in range(16)]
            cols = _transpose(b, rows_, 16)
            _store_block(b, mod, kern, lambda i, h, cols=cols: cols[i], c, ldc,
                         b.add(n0, i64(16 * qb)), b.add(m0, i64(16 * qa)), 16, 1,
                         b.sub(nlim, i64(16 * qb)), b.sub(mlim, i64(16 * qa)))
    with b.if_then(b.not_(trans)):
        full = b.and_(b.icmp_signed(">=", mlim, i64(32)), b.icmp_signed(">=", nlim, i64(32)))
        staged = full if kern.out == "f32" and DIRECT_STORE else ir.Constant(ir.IntType(1), 0)
        with b.if_else(staged) as (direct, via):
            with direct:  # float32 C, whole block: tiles straight to C
                if kern.out == "f32":
                    ldb = b.mul(ldc, i64(4))
                    for acc in range(4):
                        off = b.add(b.mul(b.add(m0, i64(16 * (acc // 2))), ldc),
                                    b.add(n0, i64(16 * (acc % 2))))
                        p = b.bitcast(b.gep(c, [off], inbounds=True), I8P)
                        b.call(amx["store"], [t(acc), p, ldb])
            with via:
                for acc in range(4):
                    off = i64(16 * (acc // 2) * 128 + 64 * (acc % 2))
                    b.call(amx["store"], [t(acc), b.gep(stage, [off], inbounds=True), i64(128)])
                sf = b.bitcast(stage, F32.as_pointer())
                vt = ir.VectorType(F32, 16)

                def row(i: int, h: int) -> ir.Value:
                    return _vload(b, sf, i64(i * 32 + h * 16), vt, 64)

                _store_block(b, mod, kern, row, c, ldc, m0, n0, 32, 2, mlim, nlim)


def _vector_block(b: ir.IRBuilder, mod: ir.Module, kern: Bf16Gemm, alloca: Any,
                  pa: ir.Value, pb: ir.Value, kc: ir.Value, c: ir.Value, ldc: ir.Value,
                  m0: ir.Value, n0: ir.Value, mlim: ir.Value, nlim: ir.Value) -> None:
    """One 16 x 32 block of C (a packed A panel by a B panel), as microkernels of ``mr``
    rows x ``halves`` 16-column vectors, each over all of K."""
    vt = ir.VectorType(F32, 16)
    zero = ir.Constant(vt, [0.0] * 16)
    mr, nh = kern.mr, kern.halves
    pa32 = b.bitcast(pa, I32.as_pointer())
    pb32 = b.bitcast(pb, I32.as_pointer())
    if kern.isa == "avx512bf16":
        vbf = ir.VectorType(_BFloat(), 32)
        dp = declare(mod, "llvm.x86.avx512bf16.dpbf16ps.512", vt, [vt, vbf, vbf])
    else:
        fma = declare(mod, "llvm.fmuladd.v16f32", vt, [vt, vt, vt])
        hi_mask = ir.Constant(V16I32, [-65536] * 16)
        sh16 = ir.Constant(V16I32, [16] * 16)
    for r0 in range(0, 16, mr):
        for h0 in range(0, 2, nh):
            accs = [[alloca(vt) for _ in range(nh)] for _ in range(mr)]
            for row in accs:
                for acc in row:
                    b.store(zero, acc)
            with for_range(b, i64(0), kc, name="vc") as ck:
                abase = b.add(b.mul(ck, i64(16 * 16)), i64(r0 * 16))  # i32 units
                bbase = b.add(b.mul(ck, i64(kern.pn * 16)), i64(h0 * 256))
                with for_range(b, i64(0), i64(16), name="vp") as p:
                    bvs = [_vload(b, pb32, b.add(bbase, b.add(b.mul(p, i64(16)),
                                                                  i64(h * 256))), V16I32, 64)
                           for h in range(nh)]
                    if kern.isa != "avx512bf16":
                        bev = [b.bitcast(b.shl(v, sh16), vt) for v in bvs]
                        bod = [b.bitcast(b.and_(v, hi_mask), vt) for v in bvs]
                    for i in range(mr):
                        au = b.load(b.gep(pa32, [b.add(abase, b.add(i64(i * 16), p))],
                                          inbounds=True))
                        sp = b.shuffle_vector(
                            b.insert_element(ir.Constant(V16I32, ir.Undefined), au, i64(0)),
                            ir.Constant(V16I32, ir.Undefined), ir.Constant(V16I32, [0] * 16))
                        for h in range(nh):
                            acc = b.load(accs[i][h])
                            if kern.isa == "avx512bf16":
                                new = b.call(dp, [acc, b.bitcast(sp, vbf),
                                                  b.bitcast(bvs[h], vbf)])
                            else:
                                ae = b.bitcast(b.shl(sp, sh16), vt)
                                ao = b.bitcast(b.and_(sp, hi_mask), vt)
                                new = b.call(fma, [ao, bod[h], b.call(fma, [ae, bev[h], acc])])
                            b.store(new, accs[i][h])
            _store_block(b, mod, kern, lambda i, h, accs=accs: b.load(accs[i][h]), c, ldc,
                         b.add(m0, i64(r0)), b.add(n0, i64(16 * h0)), mr, nh,
                         b.sub(mlim, i64(r0)), b.sub(nlim, i64(16 * h0)))


# ---------------------------------------------------------------------------------------
# the routine


def _tile_stride_ok(b: ir.IRBuilder, rows: ir.Value) -> ir.Value:
    """Whether tiles may be loaded in place from rows ``rows`` elements apart: not for a
    multiple of 2 KB, whose 16 rows fall into two L1 sets and evict each other (measured on
    the Xeon with AMX, K = 1024 rows read in place: 1064 -> 866 GFLOP/s at 256x1024x1024,
    where packing them costs less)."""
    return b.icmp_signed("!=", b.and_(rows, i64(1023)), i64(0))


def _gemm_type(kern: Bf16Gemm) -> ir.FunctionType:
    return ir.FunctionType(ir.VoidType(), [I16P, I64, I64, I16P, I64, I64,
                                           kern.out_type.as_pointer(), I64, I64, I64, I64, I8P])


def gemm_bf16_function(mod: ir.Module, kern: Bf16Gemm) -> ir.Function:
    """The bf16 GEMM of ``kern`` in ``mod`` (emitted once per module; see the module
    docstring for the signature and the loops)."""
    fn = mod.globals.get(kern.name)
    if fn is not None:
        return fn
    fn = ir.Function(mod, _gemm_type(kern), name=kern.name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    for i in (0, 3, 6, 11):
        fn.args[i].add_attribute("noalias")
    a0, sam0, sak0, b0, sbk0, sbn0, c, ldc, m0_, n0_, kk, work = fn.args
    entry = fn.append_basic_block("entry")
    start = fn.append_basic_block("start")
    allocas = ir.IRBuilder(entry)
    br = allocas.branch(start)
    b = ir.IRBuilder(start)

    def alloca(t: ir.Type) -> ir.Value:
        allocas.position_before(br)
        return allocas.alloca(t)

    pm, pn = kern.pm, kern.pn
    if kern.isa == "amx":
        # AMX loads A tiles straight from a k-contiguous operand (no packing): when B is
        # k-contiguous (x @ W.T's W) and the larger one, or A is not k-contiguous, compute
        # C^T = B^T A^T instead, so that the big operand is read in place; the blocks of
        # C^T are transposed in registers on the way out
        trans = b.and_(b.and_(b.icmp_signed("==", sbk0, i64(1)), _tile_stride_ok(b, sbn0)),
                       b.or_(b.not_(b.and_(b.icmp_signed("==", sak0, i64(1)),
                                           _tile_stride_ok(b, sam0))),
                             b.icmp_signed(">", n0_, m0_)))
    else:
        trans = ir.Constant(ir.IntType(1), 0)

    def pick(x: ir.Value, y: ir.Value) -> ir.Value:
        return b.select(trans, y, x) if kern.isa == "amx" else x

    a, sam, sak = pick(a0, b0), pick(sam0, sbn0), pick(sak0, sbk0)
    bm, sbk, sbn = pick(b0, a0), pick(sbk0, sak0), pick(sbn0, sam0)
    m, n = pick(m0_, n0_), pick(n0_, m0_)
    done = fn.append_basic_block("done")
    work_bb = fn.append_basic_block("work")
    empty = b.or_(b.icmp_signed("<=", m, i64(0)), b.icmp_signed("<=", n, i64(0)))
    b.cbranch(empty, done, work_bb)
    b.position_at_end(work_bb)
    kc = _ceildiv(b, kk, TK)
    wi = b.and_(b.add(b.ptrtoint(work, I64), i64(63)), i64(-64))
    w = b.inttoptr(wi, I8P)
    cfg = w
    cbuf = b.gep(w, [i64(64)], inbounds=True)  # AMX: float32 partial sums, 4 KB per block
    apack = b.gep(w, [i64(64 + CBUF)], inbounds=True)
    mcap = _min(b, b.mul(_ceildiv(b, m, pm), i64(pm)), i64(MC))
    bpack = b.gep(apack, [b.mul(b.mul(mcap, kc), i64(TK * 2))], inbounds=True)
    a_panel = b.mul(kc, i64(pm * TK * 2))  # bytes
    b_panel = b.mul(kc, i64(pn * TK * 2))
    amx = _amx_intrinsics(mod) if kern.isa == "amx" else None
    if amx is not None:
        _amx_config(b, cfg)
        b.call(amx["cfg"], [cfg])
    pack_a = _pack_function(mod, pm, vnni=False)
    pack_b = _pack_function(mod, pn, vnni=True)
    with for_range(b, i64(0), n, name="jc", step=i64(NC)) as jc:
        ncols = _min(b, b.sub(n, jc), i64(NC))
        b.call(pack_b, [b.gep(bm, [b.mul(jc, sbn)], inbounds=True), sbn, sbk,
                        b.bitcast(bpack, I16P), ncols, kk, i64(0)])
        with for_range(b, i64(0), m, name="ic", step=i64(MC)) as ic:
            mrows = _min(b, b.sub(m, ic), i64(MC))
            asrc = b.gep(a, [b.mul(ic, sam)], inbounds=True)
            if amx is not None:
                # direct A (k-contiguous): whole panels read in place up to the last whole
                # chunk of K; only their K tail and the last, partial panel are packed
                direct = b.and_(b.icmp_signed("==", sak, i64(1)), _tile_stride_ok(b, sam))
                kfull = b.select(direct, b.sdiv(kk, i64(TK)), i64(0))
                whole = b.select(direct, b.mul(b.sdiv(mrows, i64(pm)), i64(pm)), i64(0))
                with b.if_then(b.icmp_signed(">", whole, i64(0))):
                    b.call(pack_a, [asrc, sam, sak, b.bitcast(apack, I16P), whole, kk, kfull])
                with b.if_then(b.icmp_signed("<", whole, mrows)):
                    b.call(pack_a, [b.gep(asrc, [b.mul(whole, sam)], inbounds=True), sam, sak,
                                    b.bitcast(b.gep(apack, [b.mul(b.sdiv(whole, i64(pm)),
                                                                  a_panel)], inbounds=True),
                                              I16P), b.sub(mrows, whole), kk, i64(0)])
            else:
                b.call(pack_a, [asrc, sam, sak, b.bitcast(apack, I16P), mrows, kk, i64(0)])
            with for_range(b, i64(0), _ceildiv(b, ncols, pn), name="jp") as jp:
                pb = b.gep(bpack, [b.mul(jp, b_panel)], inbounds=True)
                n0 = b.mul(jp, i64(pn))
                nlim = b.sub(ncols, n0)
                cn0 = b.add(jc, n0)
                npan = _ceildiv(b, mrows, pm)
                if amx is not None:
                    # K blocks of KB chunks outside the A panels: the B panel's block (16 KB)
                    # stays in L1 while every A panel's block streams past it from L2; one
                    # block even when K = 0, so that C is written
                    nkb = b.select(b.icmp_signed(">", kc, i64(0)), _ceildiv(b, kc, KB), i64(1))
                    with for_range(b, i64(0), nkb, name="kb") as kb:
                        c0 = b.mul(kb, i64(KB))
                        c1 = _min(b, b.add(c0, i64(KB)), kc)
                        first = b.icmp_signed("==", kb, i64(0))
                        last = b.icmp_signed("==", kb, b.sub(nkb, i64(1)))
                        with for_range(b, i64(0), npan, name="ip") as ip:
                            pa = b.gep(apack, [b.mul(ip, a_panel)], inbounds=True)
                            m0 = b.mul(ip, i64(pm))
                            stage = b.gep(cbuf, [b.mul(ip, i64(4096))], inbounds=True)
                            inplace = b.icmp_signed("<", m0, whole)
                            dsrc = b.bitcast(b.gep(asrc, [b.mul(m0, sam)], inbounds=True), I8P)
                            kd = b.select(inplace, kfull, i64(0))
                            _amx_block(b, mod, kern, amx, pa, pb, c0, c1, first, last, c, ldc,
                                       b.add(ic, m0), cn0, b.sub(mrows, m0), nlim, stage,
                                       (dsrc, b.mul(sam, i64(2)), kd), trans)
                else:
                    with for_range(b, i64(0), npan, name="ip") as ip:
                        pa = b.gep(apack, [b.mul(ip, a_panel)], inbounds=True)
                        m0 = b.mul(ip, i64(pm))
                        _vector_block(b, mod, kern, alloca, pa, pb, kc, c, ldc, b.add(ic, m0),
                                      cn0, b.sub(mrows, m0), nlim)
    if amx is not None:
        b.call(amx["release"], [])
    b.branch(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


# ---------------------------------------------------------------------------------------
# two threads, calls from kernels, the library


def _ctx_type(kern: Bf16Gemm) -> ir.LiteralStructType:
    cp = kern.out_type.as_pointer()
    return context_type([I16P, I64, I64, I16P, I64, I64, cp, I64, I64, I64, I64, I8P, I8P])


def gemm_bf16_task(mod: ir.Module, kern: Bf16Gemm) -> ir.Function:
    """``task(ctx, part)`` for the thread pool: part 0 the first ~half of C, part 1 the rest,
    split along N in whole B panels when C is wider than tall (each half then packs half of
    B, the larger operand, and all of A), along M in whole A panels otherwise; each part with
    its own workspace. Every element of C is computed whole by one thread with the same
    K order, so the result is bit-identical to one thread."""
    fn = mod.globals.get(kern.task_name)
    if fn is not None:
        return fn
    gemm = gemm_bf16_function(mod, kern)
    ct = _ctx_type(kern)
    fn = ir.Function(mod, TASK, name=kern.task_name)
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    a, sam, sak, bb, sbk, sbn, c, ldc, m, n, k, w0, w1 = unpack_context(b, fn.args[0], ct, 13)
    first = b.icmp_signed("==", fn.args[1], i64(0))
    work = b.select(first, w0, w1)

    def part_of(total: ir.Value, unit: int) -> tuple[ir.Value, ir.Value]:
        half = b.mul(_ceildiv(b, _ceildiv(b, total, 2), unit), i64(unit))
        half = _min(b, half, total)
        return b.select(first, i64(0), half), b.select(first, half, b.sub(total, half))

    with b.if_else(b.icmp_signed(">", n, m)) as (cols, rows_):
        with cols:
            col0, ncols = part_of(n, kern.pn)
            with b.if_then(b.icmp_signed(">", ncols, i64(0))):
                pb = b.gep(bb, [b.mul(col0, sbn)], inbounds=True)
                b.call(gemm, [a, sam, sak, pb, sbk, sbn, b.gep(c, [col0], inbounds=True),
                              ldc, m, ncols, k, work])
        with rows_:
            row0, rows = part_of(m, kern.pm)
            with b.if_then(b.icmp_signed(">", rows, i64(0))):
                pa = b.gep(a, [b.mul(row0, sam)], inbounds=True)
                pc = b.gep(c, [b.mul(row0, ldc)], inbounds=True)
                b.call(gemm, [pa, sam, sak, bb, sbk, sbn, pc, ldc, rows, n, k, work])
    b.ret_void()
    return fn


# minimum multiply-adds for two threads: the faster the instructions, the more work it takes
# to pay for waking the second thread and packing A (or B) twice
PAR_MIN_MACS = {"generic": GEMM_PAR_MIN_MACS, "avx512bf16": 2 * GEMM_PAR_MIN_MACS,
                "amx": 8 * GEMM_PAR_MIN_MACS}


def _declare_like(mod: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    fn = mod.globals.get(name)
    return fn if fn is not None else ir.Function(mod, fnty, name)


def emit_gemm_bf16_call(b: ir.IRBuilder, mod: ir.Module, alloca: Any, kern: Bf16Gemm,
                        args: list[ir.Value], work: ir.Value, work_bytes: ir.Value,
                        run2: ir.GlobalVariable | None) -> None:
    """Call the bf16 GEMM ``kern`` with ``args`` = (A, sAm, sAk, B, sBk, sBn, C, ldc, M, N,
    K) and scratch ``work`` of ``work_bytes`` (one thread's ``workspace_bytes_bf16``; with
    ``run2``, ``work`` must hold two of them), split over the two-thread pool when ``run2``
    holds a dispatcher and the product is large enough (``PAR_MIN_MACS``).

    A module with a ``gemm_requests`` set links the GEMM library: the routine is declared
    and ``kern`` recorded (``gemm.library_parts`` builds it); otherwise it is defined here."""
    a, sam, sak, bb, sbk, sbn, c, ldc, m, n, k = args
    requests = getattr(mod, "gemm_requests", None)
    if requests is not None:
        requests.add(kern)
        gemm = _declare_like(mod, kern.name, _gemm_type(kern))
    else:
        gemm = gemm_bf16_function(mod, kern)
    if run2 is None:
        b.call(gemm, args + [work])
        return
    disp = b.load(run2)
    macs = b.mul(b.mul(m, n), k)
    par = b.and_(b.icmp_unsigned("!=", b.ptrtoint(disp, I64), i64(0)),
                 b.and_(b.icmp_signed(">=", macs, i64(PAR_MIN_MACS[kern.isa])),
                        b.or_(b.icmp_signed(">=", m, i64(2 * kern.pm)),
                              b.icmp_signed(">=", n, i64(2 * kern.pn)))))
    with b.if_else(par) as (then, otherwise):
        with then:
            ctx = alloca(_ctx_type(kern))
            w1 = b.gep(work, [work_bytes], inbounds=True)
            cp = pack_context(b, ctx, args + [work, w1])
            task = (_declare_like(mod, kern.task_name, TASK) if requests is not None
                    else gemm_bf16_task(mod, kern))
            b.call(disp, [task, cp])
        with otherwise:
            b.call(gemm, args + [work])


def library_parts(requests: set[Bf16Gemm]) -> list[tuple[str, Any]]:
    """``(spec, build)`` per requested variant: its GEMM and thread-pool task as a module
    of their own with external linkage (``gemm.library_parts`` hands bf16 requests here)."""
    parts: list[tuple[str, Any]] = []
    for kern in sorted(requests, key=lambda r: r.spec):
        def build(kern: Bf16Gemm = kern) -> ir.Module:
            lib = ir.Module(name=kern.name)
            for fn in (gemm_bf16_function(lib, kern), gemm_bf16_task(lib, kern)):
                fn.linkage = ""
            return lib

        parts.append((kern.spec, build))
    return parts


def gemm_bf16_module(kerns: list[Bf16Gemm], name: str = "graphc_gemm_bf16") -> ir.Module:
    """A module defining the GEMMs of ``kerns`` (and their tasks) with external linkage:
    what tests and benchmarks compile and call directly."""
    lib = ir.Module(name=name)
    for kern in kerns:
        for fn in (gemm_bf16_function(lib, kern), gemm_bf16_task(lib, kern)):
            fn.linkage = ""
    return lib


__all__ = ["ISAS", "Bf16Gemm", "bf16_isa", "workspace_bytes_bf16", "gemm_bf16_function",
           "gemm_bf16_task", "emit_gemm_bf16_call", "library_parts", "gemm_bf16_module",
           "PAR_MIN_MACS", "MC", "NC", "bf16_target", "bf16_features"]
