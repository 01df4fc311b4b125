"""Convolutions as implicit GEMMs over a padded grid (CPU backend).

The direct loops over ``(n, o, c, kh, kw, oh, ow)`` vectorise along ``ow`` only, 14 or 28
columns for the usual small images: too short for 16-wide vectors. These kernels copy each
image's source channels once into a zero-bordered *grid* (row stride ``wg = OW + (KW-1)*dw``,
so a tap ``(kh, kw)`` of channel ``c`` is a constant offset ``c*hg*wg + kh*dh*wg + kw*dw``
from the output position ``oh*wg + ow``). Every tap is then a contiguous vector load at
``offset[k] + start`` and the convolution is a register-blocked GEMM whose ``B`` operand is
the grid itself: no im2col matrix, no packing, the padding costs nothing in the inner loop.

- ``conv2d``: ``y[m, oh, ow] = sum_k A[k, m] * grid[offset[k] + oh*wg + ow]`` with ``A`` the
  weight repacked once per call as ``[group][k][m]`` (``k = (c, kh, kw)``); an ``RM x NV``
  tile of accumulators (RM output channels, NV vectors of output positions) takes one
  broadcast per row and one grid load per vector for each ``k``. Lanes past ``OW`` in a row
  compute garbage and are not stored (a masked store for a row's last partial vector only).
- ``conv2d_input_grad`` (stride 1): the same kernel on the output gradient, padded by
  ``(KH-1)*dh - ph``, with the weight flipped and transposed (``k = (o, kh', kw')``).
- ``conv2d_weight_grad``: ``dW[m, k] = sum_n sum_pos dY[n, m, pos] * grid_n[offset[k] + pos]``.
  When the output channels fill a vector (``wgrad_by_channels``), vectors over output
  channels: each image's ``dY`` transposed to ``[position][channel]`` (in registers, a
  ``lanes x lanes`` block at a time), and an ``RK x NV`` tile (taps x channel vectors) takes
  one channel vector per ``NV`` and ``RK`` broadcast grid elements per position, in blocks
  of rows that stay in L1 (``_emit_wgrad_channels``). Otherwise both operands contiguous
  along positions: an ``RO x RK`` tile of vector accumulators runs over the positions of a
  pass of images (masked loads zero the lanes past ``OW``, so data from the next row never
  meets a zero and ``Inf * 0`` cannot appear), reduces across lanes and adds that to ``dW``
  once per pass.

Two threads (``parallel.run2``, when the pool is there and a convolution has at least
``parallel.CONV_PAR_MIN_MACS`` multiply-adds): the forward and input-gradient kernels repack
the weight (on both threads where it is packed in channel panels), then split the images in
halves, each thread with its own grid (the workspace holds two); an odd batch's last image
(all of a batch of one) goes to both threads, each with its own copy of its grid and half of
its register tiles, stored straight to the output with the epilogue run over it afterwards;
the position-vector weight gradient builds the grids split by images, then splits its
``RO x RK`` tile list in halves (the tile shape is chosen for the busiest half); the
channel-vector one gives each thread half of the images with all tiles and its own sums,
added part 0 first (an odd batch's last image: half of the tiles each). ResNet-18 at batch 1
on two Zen 4 cores went from 1.05-1.13x to 1.53-1.64x PyTorch's speed. Each output element
is computed
by the same code on either thread, and a one-thread step runs part 0 then part 1 of the same
task, so the results are bit-identical. Each part is a ``task(ctx, part)`` that unpacks a stack
struct and calls a body whose pointer arguments are ``noalias`` (without that LLVM did not
vectorise the grid copies: +20 % on one thread). Measured on the cnn benchmark (batch 64,
2-vCPU znver5, time-stamp ticks per call, one -> two threads): forward 8->16 345k -> 177k,
input gradient 16->8 360k -> 187k, weight gradients 385k -> 228k and 167k -> 69k (the second
also from the 2x9 tile), forward 1->8 115k -> 57k. The 8->16 weight gradient scales least: its
grid building (~15 % of it) and both threads streaming all 64 images' grids from L2.

Strided forward and weight-gradient convolutions use *phase grids*: the padded input split by
``(row mod s, col mod s)``, so each tap again reads contiguous vectors of one phase (only the
phases some tap reads are built). The channel-vector forward broadcasts single elements and
needs no phases: it copies one zero-bordered grid (``FlatGrid``). The strided input
gradient is one stride-1 implicit GEMM per *output* phase (``StridedIgrad``: the taps
reaching input positions ``(a + s*i, b + s*j)`` read one grid of ``dY`` at fixed offsets;
results scattered to the phase's positions), with none of the work a zero-dilated ``dY``
would waste. Debug builds (bounds-checked loads) use the direct
loops of ``codegen.conv_direct``.

3x3 stride-1 forward and input-gradient convolutions with at least 8 channels each side run as
Winograd F(2x2, 3x3) (``Wino``): 16 multiply-adds per 2x2 outputs and source channel instead of
36, as 16 register-tiled GEMMs over blocks of tiles that stay in L2, the input tiles read as
vectors from the 2x2 phase grids (or, for images whose rows hold fewer tiles than a vector,
from a tile-major copy). Finite inputs give the direct sums up to rounding (a few ulps, well
inside float32 tolerance against PyTorch); an infinite input can come out as NaN where the
direct sum gives +-Inf (the transforms subtract tile elements from each other), as in every
Winograd convolution (cuDNN's, NNPACK's): both are non-finite, which ``check_finite`` and a
user's loss check see alike; ``GRAPHC_CONV_WINOGRAD=0`` keeps the direct sums. The weight
gradient accumulates in passes over a few images whose
grids fit in L2 (``wgrad_pass_images``). Measured on a ResNet-18-style step (widths
16-32-64-128, 64x64 inputs, batch 32, one thread, 2-vCPU AMD EPYC znver3, time-stamp ticks per
step): 1.71G -> 0.92G, mostly from the strided input gradient (0.50G -> 0.04G), Winograd
(3x3 stride-1 forward and input gradient 0.47G -> 0.31G) and the weight-gradient passes.

Small images with many channels (``by_channels``: a row's position vectors at most half
used, as ResNet-18's 8x8 last stage in 16 lanes, and at least a vector of channels) turn the
tiles around, as oneDNN's channel-blocked layouts do: vectors over output channels (the
packed weight's rows, padded to whole vectors) times broadcast grid elements of real
positions, so no lane is wasted past ``OW``. Measured on Zen 5 (one thread, batch 32):
64->128 16x16 stride 2 forward 95 -> 149, input gradient 88 -> 119. The weight gradient
takes channel vectors at every map size (``wgrad_by_channels``): on a Xeon with AVX-512,
one thread, ResNet-18's weight gradients went 23-71 -> 32-114 GFLOP/s, the step
1.35x -> 1.46x PyTorch's speed.

These kernels are compiled at the GEMM tiles' ``tile`` level (no module pipeline: their
vectors, zero fills and grid copies are written out here), which took ResNet-18's
convolutions from 5.4 to 2.5 CPU-s of LLVM work at the same speed.

The kernels form one family, registered in ``codegen.kernels`` with this module's
``workspace_bytes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh

from . import conv_bf16, conv_gemm, conv_pointwise, options, wino_gemm, wino_wgrad
from . import winograd as wino
from .abi import ALIGN, align
from .conv_direct import DIRECT
from .conv_epilogue import (
    call_epilogue,
    epilogue_values,
    part_images,
)
from .gemm import pack_b_transposed
from .gemm_bf16 import bf16_features
from .hostinfo import current_caches
from .kernels import Kernel, register
from .llvm_util import (
    F32,
    I1,
    I8,
    I8P,
    I32,
    I64,
    VOID,
    declare,
    for_range,
    i64,
    mem_type,
    splat,
)
from .parallel import CONV_PAR_MIN_MACS, odd_last
from .parallel import KernelTask as _Task
from .vecops import V as _V
from .vecops import transpose_block
from .views import strided_view
from .wino_wgrad import fill

OPS = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")


@dataclass(frozen=True)
class Problem:
    """One convolution op seen as an implicit GEMM over padded grids of its source.

    ``src`` (channels ``G*S``, spatial ``H x W``) is copied per image into ``phases`` grids of
    ``S x hg x wg``; grid ``(a, b)`` row ``r`` column ``col`` holds source pixel
    ``(r*s + a - ph, col*s + b - pw)`` (zero outside). Output position ``(oh, ow)`` of tap
    ``(kh, kw)`` reads phase ``(kh*dh % s, kw*dw % s)`` at ``(oh + kh*dh // s, ...)``.
    """

    G: int  # groups
    M: int  # GEMM rows per group: result channels (forward, input grad) or weight rows
    S: int  # source channels per group
    H: int
    W: int
    ph: int
    pw: int
    KH: int
    KW: int
    dh: int
    dw: int
    sh: int  # stride along rows
    sw: int  # stride along columns
    OH: int
    OW: int
    lanes: int

    @property
    def K(self) -> int:  # noqa: N802 - the GEMM's K
        return self.S * self.KH * self.KW

    @property
    def hg(self) -> int:
        return self.OH + (self.KH - 1) * self.dh // self.sh

    @property
    def wg(self) -> int:
        return self.OW + (self.KW - 1) * self.dw // self.sw

    @property
    def qv(self) -> int:  # vectors per output row
        return -(-self.OW // self.lanes)

    @property
    def phase_elems(self) -> int:
        return self.S * self.hg * self.wg

    @property
    def grid_elems(self) -> int:
        # two vectors of zeroed slack: the last row's garbage lanes read past the end
        return self.sh * self.sw * self.phase_elems + 2 * self.lanes

    @property
    def grid_strides(self) -> tuple[int, int]:
        """How the grid splits into phases (``_build_grid``): the stride, rows and columns."""
        return self.sh, self.sw

    @property
    def used_phases(self) -> frozenset[tuple[int, int]]:
        """The phase grids some tap reads (a 1x1 kernel at stride 2 reads one of four):
        only those are zeroed and filled."""
        return frozenset(((kh * self.dh) % self.sh, (kw * self.dw) % self.sw)
                         for kh in range(self.KH) for kw in range(self.KW))

    def offsets(self) -> list[int]:
        """Grid offset of each ``k = (c, kh, kw)`` relative to the output position."""
        out = []
        for c in range(self.S):
            for kh in range(self.KH):
                for kw in range(self.KW):
                    a, r = divmod(kh * self.dh, self.sh)
                    b, q = divmod(kw * self.dw, self.sw)
                    out.append((r * self.sw + q) * self.phase_elems + c * self.hg * self.wg
                               + a * self.wg + b)
        return out


@dataclass(frozen=True)
class FlatGrid:
    """The channel-vector forward's grid (``by_channels``): the source zero-padded but not
    split into phases. Those tiles broadcast one grid element per position and tap, so
    they need no contiguous vectors of a phase; output position ``(oh, ow)`` of tap
    ``(kh, kw)`` reads row ``oh*sh + kh*dh``, column ``ow*sw + kw*dw``. Copying whole rows
    instead of ``sh * sw`` phase rows of ``1 / sw`` of their length each was the point: on
    a 16x16 map the phase rows are 8 elements, and the copy took 14 % of the kernel (64->128
    3x3 stride 2, Zen 4, one thread). Attribute names follow ``Problem`` where
    ``_build_grid`` and ``_zero_grid`` read them."""

    p: Problem

    @property
    def S(self) -> int:  # noqa: N802
        return self.p.S

    @property
    def H(self) -> int:  # noqa: N802
        return self.p.H

    @property
    def W(self) -> int:  # noqa: N802
        return self.p.W

    @property
    def ph(self) -> int:
        return self.p.ph

    @property
    def pw(self) -> int:
        return self.p.pw

    @property
    def lanes(self) -> int:
        return self.p.lanes

    @property
    def K(self) -> int:  # noqa: N802
        return self.p.K

    @property
    def hg(self) -> int:  # the rows some tap reads
        p = self.p
        return (p.OH - 1) * p.sh + (p.KH - 1) * p.dh + 1

    @property
    def wg(self) -> int:
        p = self.p
        return (p.OW - 1) * p.sw + (p.KW - 1) * p.dw + 1

    @property
    def grid_strides(self) -> tuple[int, int]:
        return 1, 1

    @property
    def used_phases(self) -> frozenset[tuple[int, int]]:
        return frozenset({(0, 0)})

    @property
    def phase_elems(self) -> int:
        return self.S * self.hg * self.wg

    @property
    def grid_elems(self) -> int:
        return self.phase_elems

    def offsets(self) -> list[int]:
        """Grid offset of each ``k = (c, kh, kw)`` relative to the position's element."""
        p = self.p
        return [c * self.hg * self.wg + kh * p.dh * self.wg + kw * p.dw
                for c in range(p.S) for kh in range(p.KH) for kw in range(p.KW)]


def igemm_grid(p: Problem) -> Problem | FlatGrid:
    """The grid the forward / input-gradient implicit GEMM copies each image into: a
    ``FlatGrid`` for the channel-vector tiles, else ``p``'s phase grids."""
    return FlatGrid(p) if by_channels(p) else p


def lanes_for(itemsize: int, wide: bool) -> int:
    return (64 if wide else 32) // itemsize


def problem(n: Node, wide: bool) -> Problem | None:
    """The implicit-GEMM view of conv node ``n``, or None when the direct loops must run."""
    if n.op not in OPS or not n.dtype.is_float:
        return None
    a = n.attrs
    (sh_, sw), (ph, pw), (dh, dw), g = a["stride"], a["padding"], a["dilation"], a["groups"]
    if n.op == "conv2d_input_grad" and (sh_, sw) != (1, 1):
        return None  # ``strided_igrad``
    if n.op == "conv2d":
        x, w = n.inputs
        src, y = x, n
    elif n.op == "conv2d_input_grad":
        gy, w = n.inputs
        src, y = gy, n
    else:
        x, gy = n.inputs
        w, src, y = n, x, gy
    oc, Cg, KH, KW = w.shape
    dims = list(src.shape[1:]) + list(y.shape[1:]) + [oc, Cg]
    if not all(isinstance(d, int) for d in dims):
        return None
    lanes = lanes_for(n.dtype.itemsize, wide)
    OH, OW = y.shape[2:]
    H, W = src.shape[2:]
    if n.op == "conv2d_input_grad":
        # a stride-1 convolution of the output gradient with the flipped, transposed weight
        return Problem(g, Cg, oc // g, H, W, (KH - 1) * dh - ph, (KW - 1) * dw - pw, KH, KW,
                       dh, dw, 1, 1, OH, OW, lanes)
    return Problem(g, oc // g, Cg, H, W, ph, pw, KH, KW, dh, dw, sh_, sw, OH, OW, lanes)


@dataclass(frozen=True)
class Tile:
    rm: int  # accumulator rows
    nv: int  # accumulator vectors per row (forward) or columns (weight grad)


def pick_tile(m: int, n: int, wide: bool, max_rm: int = 16, max_nv: int = 8,
              parts: int = 1) -> Tile:
    """The ``rm x nv`` accumulator tile that covers an ``m x n`` block (n in vectors or
    columns) with the fewest cycles: a step costs max(FMAs, loads)/2 plus loop overhead,
    so tiles that do not divide the block pay for their padding; tiles that would spill
    registers are not considered. ``parts``: the tiles are shared out between that many
    threads, so the cost is the busiest thread's (the total breaks ties)."""
    regs = 32 if wide else 16
    best: tuple[tuple[float, float], Tile] | None = None
    for rm in range(1, max_rm + 1):
        for nv in range(1, max_nv + 1):
            if rm * nv + nv + 1 > regs:  # accumulators, the nv loaded vectors, a broadcast
                continue
            steps = -(-m // rm) * -(-n // nv)
            step = max(rm * nv, rm + nv) / 2 + 1.5
            cost = (-(-steps // parts) * step, steps * step)
            if best is None or cost < best[0]:
                best = (cost, Tile(rm, nv))
    assert best is not None
    return best[1]


def workspace_bytes(n: Node, wide: bool) -> Any:
    """Scratch that conv node ``n``'s kernel needs (0 when it runs the direct loops):
    the repacked weight and two grids (one per thread, each working through half of the
    images), or, for the weight gradient, every image's grid (the tiles accumulate over the
    whole batch in registers)."""
    kern = conv_bf16.gemm_kernel(n, "f32", bf16_features())
    if kern is not None:  # bf16 operands on the matrix units
        return conv_bf16.workspace_bytes(n, kern.isa)
    if wino_gemm.plan(n) is not None:  # 3x3 stride 1, U past L2 or 64+ channels: batched Winograd
        p = wino_igemm_batch(n, wide)
        if p is not None:  # small batches run the implicit GEMM
            return max(wino_gemm.workspace(n, wide), _igemm_workspace(p, n.dtype.itemsize, wide))
        return wino_gemm.workspace(n, wide)
    if wino_wgrad.plan(n, wide) is not None:  # 3x3 stride-1 weight gradients: Winograd
        return wino_wgrad.workspace(n, wide)
    if conv_pointwise.plan(n) is not None:  # 1x1 stride 1: one GEMM per image, in place
        return conv_pointwise.workspace(n, wide)
    if conv_gemm.plan(n) is not None:  # many channels on small maps
        return conv_gemm.workspace(n, wide)
    p = problem(n, wide)
    it = n.dtype.itemsize
    if p is None:
        sp = strided_igrad(n, wide)
        return 0 if sp is None else _strided_igrad_workspace(sp, it, wide)
    if n.op == "conv2d_weight_grad":
        per_image = align(p.grid_elems * it)
        if not wgrad_by_channels(p):
            return sh.plus(align(sh.dim(n.inputs[0].shape[0] * per_image)), ALIGN)
        # per thread part: one image's grid and transposed dY, and its tiles' accumulators
        return 2 * sum(_wgrad_channel_part(p, wide, it)) * it + ALIGN
    wg = winograd(n, wide)
    igemm = _igemm_workspace(p, it, wide)
    if wg is not None:  # the implicit GEMM's too: the Winograd kernel may fall back to it
        return max(_wino_workspace(wg, it, wide), igemm)
    return igemm


# ---------------------------------------------------------------------------------------
# emission helpers
# ---------------------------------------------------------------------------------------
def _igemm_workspace(p: Problem, it: int, wide: bool) -> int:
    """The implicit GEMM's scratch: the packed weight and two grids (one per thread)."""
    _, mp = igemm_layout(p, wide)
    return align(p.G * p.K * mp * it) + 2 * align(igemm_grid(p).grid_elems * it) + ALIGN


def _gep(b: ir.IRBuilder, p: ir.Value, i: ir.Value) -> ir.Value:
    return b.gep(p, [i], inbounds=True)


def _mul(b: ir.IRBuilder, x: ir.Value, c: Any) -> ir.Value:
    return b.mul(x, c if isinstance(c, ir.Value) else i64(c), flags=("nsw",))


def _add(b: ir.IRBuilder, *xs: ir.Value) -> ir.Value:
    out = xs[0]
    for x in xs[1:]:
        out = b.add(out, x, flags=("nsw",))
    return out


def _zero_fill(b: ir.IRBuilder, p: ir.Value, count: Any, elt: ir.Type) -> None:
    """``count`` zero elements at ``p``: a ``memset`` call (these kernels are compiled
    without the pass that would turn a store loop into one)."""
    size = _ELT_BYTES.get(str(elt))
    n = count if isinstance(count, ir.Value) else i64(count)
    if size is None:  # not a float type these kernels take: a store loop
        with for_range(b, i64(0), n, name="z") as i:
            b.store(ir.Constant(elt, 0.0), _gep(b, p, i))
        return
    memset = declare(b.module, "llvm.memset.p0.i64", VOID, [I8P, I8, I64, I1])
    b.call(memset, [b.bitcast(p, I8P), ir.Constant(I8, 0), _mul(b, n, size),
                    ir.Constant(I1, 0)])


_ELT_BYTES = {"float": 4, "double": 8}



def _zero_grid(b: ir.IRBuilder, p: Any, grid: ir.Value, elt: ir.Type) -> None:
    """Zero the phase grids the taps read, and the slack after the last one."""
    used = getattr(p, "used_phases", None)
    sh_, sw = p.grid_strides
    if used is None or len(used) == sh_ * sw:
        _zero_fill(b, grid, p.grid_elems, elt)
        return
    for a, bb in sorted(used):
        _zero_fill(b, _gep(b, grid, i64((a * sw + bb) * p.phase_elems)), p.phase_elems, elt)
    tail = sh_ * sw * p.phase_elems
    _zero_fill(b, _gep(b, grid, i64(tail)), p.grid_elems - tail, elt)

def _carve(b: ir.IRBuilder, work: ir.Value, offset: int, elt: ir.Type) -> ir.Value:
    """``work`` rounded up to 64 bytes, plus ``offset`` bytes, as an element pointer."""
    wi = b.and_(b.add(b.ptrtoint(work, I64), i64(ALIGN - 1)), i64(-ALIGN))
    return b.inttoptr(b.add(wi, i64(offset)), elt.as_pointer())


def _offset_table(mod: ir.Module, p: Any, name: str) -> ir.Value:
    return _table(mod, f"{name}.offsets", p.offsets())


def _build_grid(b: ir.IRBuilder, p: Problem, grid: ir.Value, src: ir.Value,
                st: list[ir.Value], nb: ir.Value, g: ir.Value) -> None:
    """Copy image ``nb``'s channels of group ``g`` into the (pre-zeroed) phase grids: a call
    of a function of its own (``noinline``).

    Inlined, the copy's loop-invariant values (the permutation vectors that pick a stride-2
    row's even elements) were hoisted out of the image loop and stayed live across the
    register tiles that follow, whose 24 accumulators, 6 operand vectors and a broadcast
    take all 32 vector registers: the register allocator spilled an accumulator inside the
    innermost loop (16 -> 32 channels, 3x3 stride 2 on 64x64, batch 32, one Ice Lake
    core: 6.9 ms, 8.7 with the spill)."""
    fn = _outlined(b, "grid", [grid, src, *st, nb, g])
    fb = ir.IRBuilder(fn.append_basic_block("entry"))
    a = list(fn.args)
    _build_grid_body(fb, p, a[0], a[1], [x if isinstance(x, ir.Constant) else y
                                          for x, y in zip(st, a[2:6])], a[6], a[7])
    fb.ret_void()


def _outlined(b: ir.IRBuilder, what: str, args: list[ir.Value]) -> ir.Function:
    """A new ``noinline`` internal function of ``args``' types (pointers ``noalias``),
    called here with ``args``; the caller emits its body."""
    mod = b.module
    ftype = ir.FunctionType(VOID, [a.type for a in args])
    fn = ir.Function(mod, ftype, name=mod.get_unique_name(f"{b.function.name}.{what}"))
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    for a in fn.args:
        if isinstance(a.type, ir.PointerType):
            a.add_attribute("noalias")
    b.call(fn, args)
    return fn


def _build_grid_body(b: ir.IRBuilder, p: Problem, grid: ir.Value, src: ir.Value,
                     st: list[ir.Value], nb: ir.Value, g: ir.Value) -> None:
    s, sc_ = p.grid_strides  # rows, columns
    used = getattr(p, "used_phases", None)
    unit = isinstance(st[3], ir.Constant) and st[3].constant == 1  # rows contiguous
    for a in range(s):
        for bb in range(sc_):
            if used is not None and (a, bb) not in used:
                continue
            # grid row r holds source row r*s + a - ph: rows with 0 <= r*s + a - ph < H
            r0 = max(0, -(-(p.ph - a) // s))
            r1 = min(p.hg, (p.H - 1 + p.ph - a) // s + 1)
            c0 = max(0, -(-(p.pw - bb) // sc_))
            c1 = min(p.wg, (p.W - 1 + p.pw - bb) // sc_ + 1)
            if r1 <= r0 or c1 <= c0:
                continue
            base = (a * sc_ + bb) * p.phase_elems
            with for_range(b, i64(0), i64(p.S), name="gc") as c:
                sc = _add(b, _mul(b, nb, st[0]), _mul(b, _add(b, _mul(b, g, p.S), c), st[1]))
                dc = _add(b, i64(base), _mul(b, c, p.hg * p.wg))
                with for_range(b, i64(r0), i64(r1), name="gr") as r:
                    ih = b.sub(_add(b, _mul(b, r, s), i64(a)), i64(p.ph))
                    srow = _gep(b, src, _add(b, sc, _mul(b, ih, st[2])))
                    drow = _gep(b, grid, _add(b, dc, _mul(b, r, p.wg)))
                    if unit and sc_ <= 2:
                        _copy_row(b, p.lanes, _gep(b, drow, i64(c0)),
                                  _gep(b, srow, i64(c0 * sc_ + bb - p.pw)), c1 - c0, sc_)
                        continue
                    with for_range(b, i64(c0), i64(c1), name="gcol") as col:
                        iw = b.sub(_add(b, _mul(b, col, sc_), i64(bb)), i64(p.pw))
                        v = b.load(_gep(b, srow, _mul(b, iw, st[3])))
                        b.store(v, _gep(b, drow, col))


def _copy_row(b: ir.IRBuilder, lanes: int, dst: ir.Value, src: ir.Value, n: int,
              s: int) -> None:
    """``dst[j] = src[j*s]`` for ``j < n`` (``s`` 1 or 2) in vectors of ``lanes``, the last
    one masked: loads never reach past ``src[(n-1)*s]``, stores past ``dst[n-1]``. Written
    out because these kernels are compiled without LLVM's loop vectoriser (``kernel``); a
    stride-2 row is two contiguous loads and one shuffle keeping the even elements."""
    vec = _V(b, b.module, src.type.pointee, lanes)
    span = lanes * s  # source elements per vector stored
    full, tail = divmod(n, lanes)

    def load(p: ir.Value, avail: int | None) -> ir.Value:
        if avail is None or avail >= span:
            if s == 1:
                return vec.load(p)
            lo, hi = vec.load(p), vec.load(_gep(b, p, i64(lanes)))
        else:  # the row's last source elements only
            parts = []
            for h in range(s):
                m = min(max(avail - h * lanes, 0), lanes)
                parts.append(b.call(vec.mload, [_gep(b, p, i64(h * lanes)), vec.const_mask(m),
                                                vec.zero]) if m else vec.zero)
            if s == 1:
                return parts[0]
            lo, hi = parts
        return b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, lanes),
                                                    list(range(0, 2 * lanes, 2))))

    if full:
        # the vectors whose loads (``span`` elements each) stay inside the row's needed part
        last_full = full if full * span <= (n - 1) * s + 1 else full - 1
        if last_full:
            with for_range(b, i64(0), i64(last_full), name="gv") as j:
                off = _mul(b, j, lanes)
                b.store(load(_gep(b, src, _mul(b, j, span)), None),
                        b.bitcast(_gep(b, dst, off), vec.vt.as_pointer()), align=4)
        for j in range(last_full, full):  # a full vector whose loads need a mask
            v = load(_gep(b, src, i64(j * span)), (n - 1) * s + 1 - j * span)
            b.store(v, b.bitcast(_gep(b, dst, i64(j * lanes)), vec.vt.as_pointer()), align=4)
    if tail:
        v = load(_gep(b, src, i64(full * span)), (n - 1) * s + 1 - full * span)
        b.call(vec.mstore, [v, _gep(b, dst, i64(full * lanes)), vec.const_mask(tail)])



def _zero_accs(b: ir.IRBuilder, vec: _V, accs: list) -> None:
    """Zero a register tile's accumulator slots."""
    for row in accs:
        for acc in row:
            b.store(vec.zero, acc)


# products a register tile sums from zero before adding them to its running totals
# (``_chunked_sum``)
ACC_CHUNK = 256


def _accumulate(b: ir.IRBuilder, vec: _V, accs: list, K: Any, bvecs: Callable,
                arow: Callable, kmax: int | None = None) -> None:
    """The register tile's inner product: for each ``k < K`` broadcast the ``RM`` values at
    ``arow(k)`` and multiply-add them with the ``NV`` vectors ``bvecs(k)``, into ``accs``
    (``RM x NV`` vector slots, summed in chunks: ``_chunked_sum``). Shared by the implicit
    GEMM, the strided input gradient's phases and the Winograd GEMMs."""

    def step(kk: ir.Value) -> None:
        bvs = bvecs(kk)
        ap = arow(kk)
        for i, row in enumerate(accs):
            av = vec.splat(b.load(_gep(b, ap, i64(i))))
            for v, acc in enumerate(row):
                b.store(b.call(vec.fma, [av, bvs[v], b.load(acc)]), acc)

    _chunked_sum(b, vec, accs, K, step, kmax)


def _chunked_sum(b: ir.IRBuilder, vec: _V, accs: list, K: Any,
                 step: Callable[[ir.Value], None], kmax: int | None = None) -> None:
    """``accs`` = the sum over ``k < K`` of what ``step(k)`` adds to them, in chunks of
    ``ACC_CHUNK``: each chunk sums from zero and is then added to the tile's totals, so an
    element is a sum of ``K / ACC_CHUNK`` chunk sums instead of one running sum of ``K``
    products, and its rounding error grows with ``ACC_CHUNK + K / ACC_CHUNK`` instead of
    ``K`` (as the GEMM's K blocks do). A 5x5 input gradient over 128 channels (3,200
    products) measured 7.1x PyTorch's float32 error against a float64 result with one
    running sum, 0.7-0.9x in chunks. The totals live outside the inner loop: a chunk adds
    one load, add and store per accumulator to its ``ACC_CHUNK`` multiply-adds (a 5x5
    64->64 convolution at 28x28, ``K`` = 1600, one thread on a Zen 4 host: 52.4-52.8 ->
    53.1-53.5 ms; chunks of 64 cost 3%). ``K <= ACC_CHUNK`` is one chunk: Winograd's
    GEMMs up to 256 channels and ResNet-18's 3x3 layers to 28 channels sum as before.
    ``kmax``: a bound on a run-time ``K`` (the strided input gradient's phase loop), one
    chunk when within ``ACC_CHUNK``."""
    Kv = K if isinstance(K, ir.Value) else i64(K)
    _zero_accs(b, vec, accs)
    bound = K if isinstance(K, int) else kmax
    if bound is not None and bound <= ACC_CHUNK:
        with for_range(b, i64(0), Kv, name="kk") as kk:
            step(kk)
        return
    with b.goto_entry_block():
        tots = [[b.alloca(vec.vt) for _ in row] for row in accs]
    _zero_accs(b, vec, tots)

    def chunk(k0: ir.Value, k1: ir.Value) -> None:
        _zero_accs(b, vec, accs)
        with for_range(b, k0, k1, name="kk") as kk:
            step(kk)
        for row, trow in zip(accs, tots):
            for acc, tot in zip(row, trow):
                b.store(b.fadd(b.load(tot), b.load(acc)), tot)

    # whole chunks (a constant trip count for the inner loop), then the rest
    nfull = b.udiv(Kv, i64(ACC_CHUNK))
    with for_range(b, i64(0), nfull, name="kc") as c:
        k0 = b.mul(c, i64(ACC_CHUNK))
        chunk(k0, b.add(k0, i64(ACC_CHUNK)))
    rest = b.mul(nfull, i64(ACC_CHUNK))
    if not isinstance(K, int):
        with b.if_then(b.icmp_signed("<", rest, Kv)):
            chunk(rest, Kv)
    elif K % ACC_CHUNK:
        chunk(rest, Kv)
    for row, trow in zip(accs, tots):
        for acc, tot in zip(row, trow):
            b.store(b.load(tot), acc)


def _operand(k: Any, n: Node) -> tuple[ir.Value, list[ir.Value]] | None:
    sv = strided_view(n, k._is_buffer)
    if sv is None:
        return None
    base, strides = sv
    return k.ptr[base.id], [k.sym(x) for x in strides]


# ---------------------------------------------------------------------------------------
# forward and input gradient: out[m, pos] = sum_k A[k, m] * grid[offset[k] + pos]
# ---------------------------------------------------------------------------------------
def _emit_igemm(k: Any, p: Problem) -> bool:
    n = k.node
    b = k.b
    elt = mem_type(n.dtype)
    fwd = n.op == "conv2d"
    src_node, w_node = n.inputs
    ops = _operand(k, src_node), _operand(k, w_node)
    if ops[0] is None or ops[1] is None:
        return False
    (src, sst), (wp, wst) = ops
    t, mp = igemm_layout(p, k.L.wide)
    K = p.K
    it = n.dtype.itemsize
    chans = by_channels(p)
    nw = t.nv * p.lanes
    gp = igemm_grid(p)
    apack = _carve(b, k.work, 0, elt)
    abytes = align(p.G * K * mp * it)
    grids = [_carve(b, k.work, abytes + i * align(gp.grid_elems * it), elt) for i in range(2)]
    offs = _offset_table(k.L.module, gp, k.fn.name)

    # the weight as [group][k][m] (zero rows past M); the input gradient flips the taps
    # and swaps the channel roles: A[k=(o, kh', kw'), m=c] = W[o, c, KH-1-kh', KW-1-kw']
    if chans and _rows_contiguous(wst, p):
        # register transposes, the two threads taking halves of the panels (forward) or of
        # the rows (input gradient): at batch 1 a 512 -> 512 convolution on 7x7 maps packs
        # 9.4 MB of weight for 115 M multiply-adds
        if not fwd and mp > _mpad(p):  # whole vectors of channels past M: zero
            _zero_fill(b, apack, p.G * K * mp, elt)
        task = _Task(k, "pack", [wp, *wst, apack])
        tb = task.b
        twp, twst, tap = task[wp], [task[x] for x in wst], task[apack]
        if fwd:
            # the channel-vector forward's panels are W's rows transposed, as the GEMM
            # packs x @ W.T's W
            lo, hi = task.split(i64(mp // nw))
            with for_range(tb, i64(0), i64(p.G), name="ag") as g:
                c0 = _add(tb, _mul(tb, g, p.M), _mul(tb, lo, nw))
                left = tb.sub(i64(p.M), _mul(tb, lo, nw))
                cols = _mul(tb, tb.sub(hi, lo), nw)
                pack_b_transposed(tb, _gep(tb, twp, _mul(tb, c0, twst[0])), twst[0],
                                  _gep(tb, tap, _add(tb, _mul(tb, g, K * mp),
                                                     _mul(tb, lo, K * nw))),
                                  i64(0), i64(K), tb.select(tb.icmp_signed("<", left, cols),
                                                            left, cols),
                                  cols, nw, p.lanes, ir.Constant(elt, 0.0))
        else:
            _pack_flipped_panels(tb, p, twp, twst, tap, mp, nw, elt, task.split(i64(p.S)))
        task.finish()
        task.dispatch(ir.Constant(I1, p.G * p.M * K >= PACK_PAR_MIN))
        return _igemm_dispatch(k, p, t, elt, offs, src, sst, apack, grids)
    _zero_fill(b, apack, p.G * K * mp, elt)
    with for_range(b, i64(0), i64(p.G), name="ag") as g:
        with for_range(b, i64(0), i64(p.M), name="am") as m:
            with for_range(b, i64(0), i64(p.S), name="ac") as c:
                with for_range(b, i64(0), i64(p.KH), name="akh") as kh:
                    with for_range(b, i64(0), i64(p.KW), name="akw") as kw:
                        kk = _add(b, _mul(b, _add(b, _mul(b, c, p.KH), kh), p.KW), kw)
                        if fwd:
                            o, ci, wkh, wkw = _add(b, _mul(b, g, p.M), m), c, kh, kw
                        else:
                            o, ci = _add(b, _mul(b, g, p.S), c), m
                            wkh = b.sub(i64(p.KH - 1), kh)
                            wkw = b.sub(i64(p.KW - 1), kw)
                        wi = _add(b, _mul(b, o, wst[0]), _mul(b, ci, wst[1]),
                                  _mul(b, wkh, wst[2]), _mul(b, wkw, wst[3]))
                        v = b.load(_gep(b, wp, wi))
                        if chans:  # [group][channel tile][k][the tile's channels]
                            mt, j = b.udiv(m, i64(nw)), b.urem(m, i64(nw))
                            dst = _add(b, _mul(b, g, K * mp), _mul(b, mt, K * nw),
                                       _mul(b, kk, nw), j)
                        else:
                            dst = _add(b, _mul(b, _add(b, _mul(b, g, K), kk), mp), m)
                        b.store(v, _gep(b, apack, dst))
    return _igemm_dispatch(k, p, t, elt, offs, src, sst, apack, grids)


# weight elements from which a channel-vector convolution packs its weight on two threads
PACK_PAR_MIN = 1 << 16


def _pack_flipped_panels(b: ir.IRBuilder, p: Problem, wp: ir.Value, wst: list[ir.Value],
                         apack: ir.Value, mp: int, nw: int, elt: ir.Type,
                         rows: tuple[ir.Value, ir.Value]) -> None:
    """The channel-vector input gradient's weight panels (``apack`` zeroed past ``_mpad``):
    ``A[k = (o, t')][c] = W[o, c, T-1-t']`` over the ``T = KH*KW`` taps, in panels of
    ``nw`` channels ``c`` (``_channel_gemm``). For each ``o`` and vector of channels, the
    channels' rows of taps (contiguous, ``_rows_contiguous``) are loaded ``lanes`` taps at
    a time and transposed in registers, and each tap's vector of channels is one store: the
    element-by-element copy took 70 % of a 512 -> 512 input gradient on 7x7 maps at batch 1
    (Zen 4, one thread: 9.4 MB of weight per call). ``rows``: the range of ``o``."""
    vec = _V(b, b.module, elt, p.lanes)
    L, T = p.lanes, p.KH * p.KW
    with for_range(b, i64(0), i64(p.G), name="fg") as g:
        with for_range(b, rows[0], rows[1], name="fo") as o:
            orow = _mul(b, _add(b, _mul(b, g, p.S), o), wst[0])
            with for_range(b, i64(0), i64(-(-p.M // L)), name="fcb") as cb:
                c0 = _mul(b, cb, L)
                taps = []  # each channel's row of taps
                for j in range(L):  # channels past M: the last one's row, zeroed
                    c = _add(b, c0, i64(j))
                    real = b.icmp_signed("<", c, i64(p.M))
                    c = b.select(real, c, i64(p.M - 1))
                    taps.append((_gep(b, wp, _add(b, orow, _mul(b, c, wst[1]))), real))
                mt = b.udiv(c0, i64(nw))
                panel = _add(b, _mul(b, g, p.K * mp), _mul(b, mt, p.K * nw),
                             b.sub(c0, _mul(b, mt, nw)))
                for t0 in range(0, T, L):
                    n = min(L, T - t0)
                    vs = []
                    for ptr, real in taps:
                        at = _gep(b, ptr, i64(t0))
                        v = (vec.load(at) if n == L else
                             b.call(vec.mload, [at, vec.const_mask(n), vec.zero]))
                        vs.append(b.select(real, v, vec.zero))
                    for u, col in enumerate(transpose_block(b, vs)[:n]):
                        kk = _add(b, _mul(b, o, T), i64(T - 1 - (t0 + u)))
                        dst = _gep(b, apack, _add(b, panel, _mul(b, kk, nw)))
                        b.store(col, b.bitcast(dst, vec.vt.as_pointer()), align=4)


def _rows_contiguous(wst: list[ir.Value], p: Problem) -> bool:
    """Whether each output channel's weights ``(c, kh, kw)`` are one contiguous row."""
    want = (p.KH * p.KW, p.KW, 1)
    return all(isinstance(x, ir.Constant) and x.constant == w for x, w in zip(wst[1:], want))


def _igemm_dispatch(k: Any, p: Problem, t: Tile, elt: ir.Type, offs: ir.Value,
                    src: ir.Value, sst: list[ir.Value], apack: ir.Value,
                    grids: list[ir.Value]) -> bool:
    """The implicit GEMM's images on the two threads, each with its own grid: half of an
    even batch each, then an odd batch's last image split by tiles (``_igemm_groups``)."""
    n, b = k.node, k.b
    K = p.K
    nimg = k.sym(n.shape[0])
    task = _Task(k, "igemm", [src, *sst, apack, *grids, k.out, nimg, *epilogue_values(k)])
    chans = by_channels(p)
    images = _igemm_images_by_channels if chans else _igemm_images
    images(task, p, t, elt, offs, task[src], [task[x] for x in sst], task[apack],
           [task[x] for x in grids], task[k.out], task[nimg])
    macs = b.mul(nimg, i64(p.G * p.M * K * p.OH * p.OW))
    # both bodies split an odd batch's last image by tiles: any batch splits
    task.dispatch(b.icmp_signed(">=", macs, i64(CONV_PAR_MIN_MACS)))
    _odd_epilogue(k, nimg, p.G * p.M * p.OH * p.OW)
    return True


def _odd_epilogue(k: Any, nimg: ir.Value, per_image: int) -> None:
    """After a task whose parts split an odd batch's last image (stored straight to the
    output, not staged): the epilogue, if any, over that image, in place in the output
    (its staged form, pointed at the image: the consumer reads each element before it
    writes it)."""
    epi = k.epilogue
    if epi is None:
        return
    b = k.b
    with odd_last(b, nimg) as last:
        img = _gep(b, k.out, _mul(b, last, per_image))
        call_epilogue(b, epi.fn, [epi.ctx, b.bitcast(img, I8P), last, b.add(last, i64(1))])


def igemm_layout(p: Problem, wide: bool) -> tuple[Tile, int]:
    """The forward / input-gradient kernel's register tile and the packed weight's row
    length: ``RM`` output channels x ``NV`` position vectors, rows padded to whole tiles;
    or, ``by_channels``, ``RM`` positions x ``NV`` channel vectors, rows padded to whole
    vectors."""
    if by_channels(p):
        t = pick_tile(p.OH * p.OW, -(-p.M // p.lanes), wide, max_rm=BY_CHANNELS_RM)
        nw = t.nv * p.lanes
        return t, -(-p.M // nw) * nw
    t = pick_tile(p.M, p.OH * p.qv, wide)
    return t, -(-p.M // t.rm) * t.rm


def _igemm_images_by_channels(task: _Task, p: Problem, t: Tile, elt: ir.Type,
                              offs: ir.Value, src: ir.Value, sst: list[ir.Value],
                              apack: ir.Value, grids: ir.Value, out: ir.Value,
                              nimg: ir.Value) -> None:
    """The task body when ``by_channels``: ``RM`` output positions (real ones only, in
    row-major order) x ``NV`` vectors of output channels per tile; for each ``k`` the tile
    broadcasts its positions' grid elements and loads ``NV`` vectors of the packed weight
    row, and at the end stores each lane to its channel's plane."""
    b = task.b
    K, P = p.K, p.OH * p.OW
    mp = igemm_layout(p, task.k.L.wide)[1]
    fg = igemm_grid(p)
    vec = _V(b, task.k.L.module, elt, p.lanes)
    cout = p.G * p.M
    accs = [[task.alloca(vec.vt) for _ in range(t.nv)] for _ in range(t.rm)]
    buf = task.alloca(ir.ArrayType(elt, t.rm * t.nv * p.lanes))
    ntiles = -(-P // t.rm) * (mp // (t.nv * p.lanes))
    for _, g, grid, abase, o, ni, split in _igemm_groups(task, p, elt, src, sst, apack,
                                                         grids, out, nimg, mp, fg):
        for q0, m0, tile in _channel_tiles(b, vec, accs, buf, K, offs, abase, mp, grid, P,
                                           p.OW, fg.wg * p.sh, p.sw, split(i64(ntiles))):
            with _tile_lanes(b, t, p.lanes, m0, p.M, q0, P) as (i, c, val):
                ch = _add(b, _mul(b, ni, cout), _mul(b, g, p.M), _add(b, m0, c))
                dst = _gep(b, o, _add(b, _mul(b, ch, P), _add(b, q0, i)))
                b.store(val(tile), dst)
    task.finish()


def _igemm_groups(task: _Task, p: Problem, elt: ir.Type, src: ir.Value, sst: list[ir.Value],
                  apack: ir.Value, grids: list[ir.Value], out: ir.Value, nimg: ir.Value,
                  mp: int, gp: Any = None) -> Iterator[tuple]:
    """The implicit GEMM's loops, shared by both task bodies: each image copied group by
    group into this part's grid (``gp``'s: ``p``'s phase grids unless given). Yields
    ``(image, group, grid, the group's packed weight rows, where to store the image, its
    index there, split)`` for the body to emit its tiles in, once for this part's images
    (``part_images``): the body takes ``split``'s share of each image's tiles."""
    b = task.b
    gp = p if gp is None else gp
    grid = b.select(task.first, grids[0], grids[1])
    for im in part_images(task, out, nimg, lambda: _zero_grid(b, gp, grid, elt)):
        with for_range(b, i64(0), i64(p.G), name="grp") as g:
            _build_grid(b, gp, grid, src, sst, im.nb, g)
            yield im.nb, g, grid, _gep(b, apack, _mul(b, g, p.K * mp)), im.o, im.ni, im.split


def _grid_starts(b: ir.IRBuilder, grid: ir.Value, q0: ir.Value, n: int, Q: int,
                 per_row: int, wg: int, step: int) -> list[ir.Value]:
    """Grid pointers of a tile's ``n`` items ``q0 .. q0+n-1`` of ``Q`` (items past the last
    one: the last one again, their results are not stored), ``per_row`` items to a grid
    row of ``wg`` elements, ``step`` elements apart: vectors of positions (``step`` =
    lanes) or single positions (``step`` = 1, the channel-vector tiles)."""
    # rows that hold their items back to back (no padding after the last): item q is at
    # q * step, and the row split (a division by per_row and its remainder, which LLVM
    # would have to fold back into one product) is left out
    dense = wg == per_row * step
    out = []
    for i in range(n):
        q = _add(b, q0, i64(i))
        q = b.select(b.icmp_signed("<", q, i64(Q)), q, i64(Q - 1))
        if dense:
            out.append(_gep(b, grid, q if step == 1 else _mul(b, q, step)))
            continue
        r, c = b.udiv(q, i64(per_row)), b.urem(q, i64(per_row))
        out.append(_gep(b, grid, _add(b, _mul(b, r, wg), c if step == 1 else _mul(b, c, step))))
    return out


def _channel_tiles(b: ir.IRBuilder, vec: _V, accs: list, buf: ir.Value, K: Any,
                   offs: ir.Value, abase: ir.Value, mp: int, grid: ir.Value, P: int,
                   per_row: int, wg: int, step: int,
                   part: tuple[ir.Value, ir.Value], kmax: int | None = None
                   ) -> Iterator[tuple[ir.Value, ir.Value, ir.Value]]:
    """The channel-vector tiles over ``P`` positions (``per_row`` to a grid row of ``wg``
    elements, ``step`` apart) and ``mp`` padded channels (whole tiles): each tile's inner
    product (``_channel_gemm``), spilled; yields ``(first position, first channel, spilled
    tile)`` for the caller's stores. ``part``: the tiles ``lo <= t < hi`` of the image's
    (``PartImage.split``), in that order, channel tiles inner."""
    rm, nv = len(accs), len(accs[0])
    nmt = -(-mp // (nv * vec.lanes))
    with for_range(b, part[0], part[1], name="ct") as ti:
        pt, mt = b.udiv(ti, i64(nmt)), b.urem(ti, i64(nmt))
        q0 = _mul(b, pt, rm)
        gpos = _grid_starts(b, grid, q0, rm, P, per_row, wg, step)
        m0 = _mul(b, mt, nv * vec.lanes)
        _channel_gemm(b, vec, accs, K, offs, abase, m0, gpos, kmax)
        yield q0, m0, _spill(b, vec, accs, buf)


def _channel_columns(b: ir.IRBuilder, m0: ir.Value, nv: int, lanes: int,
                     mp: int) -> list[ir.Value]:
    """The first channel of each of a channel-vector tile's ``nv`` vectors; vectors past
    the padded channel count ``mp`` read the last one again (their lanes are not stored)."""
    cols = []
    for v in range(nv):
        mv = _add(b, m0, i64(v * lanes))
        cols.append(b.select(b.icmp_signed("<", mv, i64(mp)), mv, i64(mp - lanes)))
    return cols


def _channel_gemm(b: ir.IRBuilder, vec: _V, accs: list, K: Any, offs: ir.Value,
                  abase: ir.Value, m0: ir.Value, gpos: list[ir.Value],
                  kmax: int | None = None) -> None:
    """A channel-vector tile's inner product (``_chunked_sum``) into ``accs`` (``RM``
    positions x ``NV`` channel vectors): for each ``k < K`` load the ``NV`` vectors of the
    tile's packed weight row and multiply-add them with each position's grid element at
    ``gpos[i] + offs[k]``, broadcast.

    The weight is packed in panels, ``[channel tile][k][NV * lanes]`` from ``abase``, so a
    tile's weight is one contiguous stream over ``k``. Rows of all the (padded) channels,
    as before, put each ``k``'s vectors a row apart, 2 KB for 512 channels: those lines fall
    in a few cache sets and evicted each other (256->512 3x3 stride-2 forward on 28x28, Zen
    4, one thread: 92 -> 101 GFLOP/s)."""
    nw = len(accs[0]) * vec.lanes
    mcol = [i64(v * vec.lanes) for v in range(len(accs[0]))]
    pbase = _gep(b, abase, _mul(b, m0, K))

    def step(kk: ir.Value) -> None:
        off = _offset_at(b, offs, kk)
        arow = _gep(b, pbase, _mul(b, kk, nw))
        ws = [vec.load(_gep(b, arow, c)) for c in mcol]
        for i, row in enumerate(accs):
            xv = vec.splat(b.load(_gep(b, gpos[i], off)))
            for j, acc in enumerate(row):
                b.store(b.call(vec.fma, [xv, ws[j], b.load(acc)]), acc)

    _chunked_sum(b, vec, accs, K, step, kmax)


def _offset_at(b: ir.IRBuilder, offs: ir.Value, kk: ir.Value) -> ir.Value:
    """Entry ``kk`` of an offset table: a table global, or a pointer into one (a phase's
    part of the strided input gradient's table, ``_phase_runs``)."""
    if isinstance(offs.type.pointee, ir.ArrayType):
        return b.load(b.gep(offs, [i64(0), kk], inbounds=True))
    return b.load(b.gep(offs, [kk], inbounds=True))


def _spill(b: ir.IRBuilder, vec: _V, accs: list, buf: ir.Value) -> ir.Value:
    """The ``RM x NV`` accumulators stored to ``buf`` row by row (``RM`` rows of ``NV``
    vectors): a channel-vector tile's results go out lane by lane from there, in loops
    instead of ``RM * NV * lanes`` stores written out (``_tile_lanes``)."""
    p = b.bitcast(buf, vec.elt.as_pointer())
    nv = len(accs[0])
    for i, row in enumerate(accs):
        for j, acc in enumerate(row):
            b.store(b.load(acc), b.bitcast(_gep(b, p, i64((i * nv + j) * vec.lanes)),
                                           vec.vt.as_pointer()), align=4)
    return p


def _spill_add(b: ir.IRBuilder, vec: _V, accs: list, buf: ir.Value) -> None:
    """``buf += accs`` in ``_spill``'s layout: a block's partial sums added to the sums of
    the blocks before it."""
    p = b.bitcast(buf, vec.elt.as_pointer())
    nv = len(accs[0])
    for i, row in enumerate(accs):
        for j, acc in enumerate(row):
            q = _gep(b, p, i64((i * nv + j) * vec.lanes))
            b.store(b.fadd(vec.load(q), b.load(acc)),
                    b.bitcast(q, vec.vt.as_pointer()), align=4)


@contextmanager
def _tile_lanes(b: ir.IRBuilder, t: Tile, lanes: int, m0: ir.Value, M: int, r0: ir.Value,
                R: int) -> Iterator[tuple[ir.Value, ir.Value, Callable]]:
    """Loops over a spilled channel-vector tile's real elements: rows ``i`` with
    ``r0 + i < R`` and channels ``c`` with ``m0 + c < M``; the body gets ``(i, c, value)``,
    ``value(tile)`` loading the element from the spilled tile."""
    width = t.nv * lanes
    left = b.sub(i64(M), m0)
    mcount = b.select(b.icmp_signed("<", left, i64(width)), left, i64(width))
    rleft = b.sub(i64(R), r0)
    rcount = b.select(b.icmp_signed("<", rleft, i64(t.rm)), rleft, i64(t.rm))
    with for_range(b, i64(0), rcount, name="si") as i:
        with for_range(b, i64(0), mcount, name="sc") as c:
            yield i, c, lambda tile: b.load(_gep(b, tile, _add(b, _mul(b, i, width), c)))


def _igemm_images(task: _Task, p: Problem, t: Tile, elt: ir.Type, offs: ir.Value,
                  src: ir.Value, sst: list[ir.Value], apack: ir.Value, grids: list[ir.Value],
                  out: ir.Value, nimg: ir.Value) -> None:
    """The task body: this part's images, each copied into this part's grid and multiplied
    by the packed weight in ``RM x NV`` tiles."""
    b = task.b
    K = p.K
    mp = -(-p.M // t.rm) * t.rm
    vec = _V(b, task.k.L.module, elt, p.lanes)
    Q = p.OH * p.qv
    nq = -(-Q // t.nv)
    cout = p.G * p.M
    accs = [[task.alloca(vec.vt) for _ in range(t.nv)] for _ in range(t.rm)]
    for _, g, grid, abase, o, ni, split in _igemm_groups(task, p, elt, src, sst, apack,
                                                         grids, out, nimg, mp):
        for mi, qi in _tile_pairs(b, mp // t.rm, nq, split):
            m0 = _mul(b, mi, t.rm)
            q0 = _mul(b, qi, t.nv)
            starts = _grid_starts(b, grid, q0, t.nv, Q, p.qv, p.wg, p.lanes)
            _accumulate(
                b, vec, accs, K,
                lambda kk, starts=starts: [vec.load(_gep(b, st, b.load(b.gep(
                    offs, [i64(0), kk], inbounds=True)))) for st in starts],
                lambda kk, m0=m0, abase=abase: _gep(b, abase,
                                                    _add(b, _mul(b, kk, mp), m0)))
            for v in range(t.nv):
                q = _add(b, q0, i64(v))
                with b.if_then(b.icmp_signed("<", q, i64(Q))):
                    oh, vr = b.udiv(q, i64(p.qv)), b.urem(q, i64(p.qv))
                    col = _mul(b, vr, p.lanes)
                    # plain stores for whole vectors: a masked store costs
                    # far more than a store on some x86 cores (AMD's
                    # vmaskmovps), a sixth of a 16-channel layer's time
                    tail = p.OW % p.lanes
                    full = vec.const_mask(p.lanes)

                    def put(mask: ir.Value, oh: ir.Value = oh, col: ir.Value = col,
                            v: int = v, m0: ir.Value = m0, ni: ir.Value = ni,
                            g: ir.Value = g, o: ir.Value = o) -> None:
                        for i in range(t.rm):
                            m = _add(b, m0, i64(i))
                            ch = _add(b, _mul(b, ni, cout), _mul(b, g, p.M), m)
                            dst = _gep(b, o, _add(b, _mul(b, ch, p.OH * p.OW),
                                                    _mul(b, oh, p.OW), col))
                            if p.M % t.rm:
                                with b.if_then(b.icmp_signed("<", m, i64(p.M))):
                                    b.call(vec.mstore, [b.load(accs[i][v]), dst,
                                                        mask])
                            else:
                                b.call(vec.mstore, [b.load(accs[i][v]), dst, mask])

                    if tail == 0:
                        put(full)
                    elif p.qv == 1:
                        put(vec.const_mask(tail))
                    else:
                        last = b.icmp_signed("==", vr, i64(p.qv - 1))
                        with b.if_else(last) as (then, otherwise):
                            with then:
                                put(vec.const_mask(tail))
                            with otherwise:
                                put(full)
    task.finish()


# ---------------------------------------------------------------------------------------
# weight gradient: dW[m, k] = sum_n sum_pos dY[n, m, pos] * grid_n[offset[k] + pos]
# ---------------------------------------------------------------------------------------
def _emit_wgrad(k: Any, p: Problem) -> bool:
    n = k.node
    b = k.b
    elt = mem_type(n.dtype)
    x_node, gy_node = n.inputs
    ops = _operand(k, x_node), _operand(k, gy_node)
    if ops[0] is None or ops[1] is None:
        return False
    (xp, xst), (gp, gst) = ops
    channels = wgrad_by_channels(p)
    if not channels and not (isinstance(gst[3], ir.Constant) and gst[3].constant == 1):
        return False  # dY rows are read as vectors
    K = p.K
    it = n.dtype.itemsize
    gsz = align(p.grid_elems * it) // it
    grids = _carve(b, k.work, 0, elt)
    offs = _offset_table(k.L.module, p, k.fn.name)
    nimg = k.sym(x_node.shape[0])
    macs = b.mul(nimg, i64(p.G * p.M * K * p.OH * p.OW))
    big = b.icmp_signed(">=", macs, i64(CONV_PAR_MIN_MACS))
    if channels:
        _emit_wgrad_channels(k, p, elt, xp, xst, gp, gst, grids, offs, nimg, big)
        return True
    # the tile loop split in two halves of the (o, k) tile list, with the tile that
    # balances the halves best (on one thread it measured as fast as the one-thread best:
    # the shape does not change any dW element's summation order either way)
    t = pick_tile(p.M, K, k.L.wide, max_nv=12, parts=2)
    ntiles = -(-p.M // t.rm) * -(-K // t.nv)
    with for_range(b, i64(0), i64(p.G), name="grp") as g:
        gt = _Task(k, "wgrid", [xp, *xst, grids, nimg, g])
        lo, hi = gt.split(gt[nimg])
        with for_range(gt.b, lo, hi, name="gimg") as nb:
            gb = _gep(gt.b, gt[grids], _mul(gt.b, nb, gsz))
            _zero_grid(gt.b, p, gb, elt)
            _build_grid(gt.b, p, gb, gt[xp], [gt[x] for x in xst], nb, gt[g])
        gt.finish()
        gt.dispatch(b.and_(big, b.icmp_signed(">=", nimg, i64(2))))
        tt = _Task(k, "wtiles", [gp, *gst, grids, k.out, nimg, g])
        _wgrad_tiles(tt, p, t, elt, offs, gsz, tt[gp], [tt[x] for x in gst], tt[grids],
                     tt[k.out], tt[nimg], tt[g])
        tt.dispatch(big if ntiles > 1 else ir.Constant(I1, 0))
    return True


# broadcasts per step of a channel-vector tile (``by_channels``): its broadcast operand is a
# scattered grid element, not a packed row, and tiles of more rows measured slower than the
# model of ``pick_tile`` says (64->128 16x16 3x3 stride 2 forward, Zen 5, one thread:
# 13x2 85 GFLOP/s, 6x4 146-157, 5x4 148, 8x3 140, 4x4 134; position vectors 93-97)
BY_CHANNELS_RM = 8


# the shortest sum (source channels x taps) for which a row's partly used last position
# vector sends a convolution to channel vectors (``by_channels``), in vectors
RAGGED_MIN_K_VECTORS = 12


def by_channels(p: Problem) -> bool:
    """Vectors over output channels instead of over output positions in the forward /
    input-gradient implicit GEMM (``_igemm_images_by_channels``), where the channels fill a
    vector and

    - a row's position vectors would be at most half used (``OW`` of 8 in 16 lanes:
      ResNet's last stage); or
    - its last vector would be partly used (``OW`` of 28 or 14 in 16 lanes: ResNet-18's
      stages at 224x224 inputs, 12.5% of the lanes idle), with at least four vectors of
      channels (a full ``6 x 4`` tile) and a sum of at least ``RAGGED_MIN_K_VECTORS``
      vectors (192 products for float32): the channel tile stores lane by lane, which a
      short sum does not pay for. Measured on Zen 4, one thread, batch 16, GFLOP/s,
      position -> channel vectors, by the sum's length K: 3x3 stride 2 forward 64->128 on
      56x56 (K 576) 84 -> 97, 128->256 on 28x28 89 -> 98, 32->64 on 56x56 (288) 82 -> 87;
      5x5 forward 16->64 on 28x28 (400) 92 -> 99, 8->64 (200) 86 -> 96, 64->64 94 -> 109
      and its input gradient 92 -> 106; a 1x1 256->256 on 30x30 (256) 80 -> 83. Shorter
      sums lost: 3x3 16->64 stride 2 (144) 86 -> 84, 1x1 stride 2 128->256 (128) 77 -> 70,
      64->128 (64) 62 -> 47, the one-channel stem (9) 29 -> 16. Rows of whole vectors stay
      on position vectors (16->32 on 64x64 stride 2: 76 -> 44 on channel vectors).

    At larger maps of few channels the results would go out element by element (measured
    slower than the position vectors and Winograd there: 16->16 64x64 forward 41-43
    against 60-65 GFLOP/s, Xeon, one thread). The weight gradient has its own rule,
    ``wgrad_by_channels``."""
    if p.M < p.lanes:
        return False
    half = p.qv * p.lanes >= 2 * p.OW
    return half or _ragged(p.OW, p.lanes, p.M, p.K)


def _ragged(cols: int, lanes: int, channels: int, k: int) -> bool:
    """``by_channels``'s second case: a partly used last vector, enough channels and a sum
    long enough."""
    return (cols % lanes != 0 and channels >= 4 * lanes
            and k >= RAGGED_MIN_K_VECTORS * lanes)


def wgrad_by_channels(p: Problem) -> bool:
    """The weight gradient's layout: channel vectors (``_emit_wgrad_channels``) whenever the
    output channels fill a vector, at every map size and kernel. Each position is then one
    vector load of the transposed ``dY`` per ``NV`` and ``RK`` broadcast grid elements
    folded into the multiply-adds, where the position-vector tiles load ``RO + RK`` vectors,
    the grid's unaligned (its rows are ``OW + KW - 1`` long); and each image's operands are
    built just before its tiles use them. Measured against the position-vector tiles (Xeon
    with AVX-512, one thread, batch 32, GFLOP/s): 16->16 64x64 3x3 34 -> 84, 32->32 32x32
    34 -> 107, 64->64 16x16 63 -> 114, 16->32 64x64 1x1 stride 2 23-28 -> 32-34, 32->64 32x32
    1x1 stride 2 33-38 -> 47-56; the one-channel stem (9 taps) about even."""
    return p.M >= p.lanes


def wgrad_channel_tile(p: Problem, wide: bool) -> Tile:
    """The ``RK x NV`` tile of the channel-vector weight gradient (taps x channel vectors)."""
    return pick_tile(p.K, -(-p.M // p.lanes), wide, max_rm=BY_CHANNELS_RM, parts=2)


def _wgrad_tiles_of(p: Problem, t: Tile) -> int:
    return -(-p.K // t.rm) * -(-p.M // (t.nv * p.lanes))


def wgrad_block_rows(p: Problem, itemsize: int) -> int:
    """Output rows of one image that the channel-vector weight gradient's tiles take in
    turn: every tile of a block reads the block's transposed ``dY`` (``OW * mpad`` elements
    a row), so it is sized to stay in half of L1d while the tiles go through it; each tile
    keeps its accumulators in the workspace between blocks (a load and a store per
    accumulator per block, against ``rows * OW`` multiply-adds each). Blocks are of equal
    size (the last may be shorter) and at least 64 positions."""
    row = p.OW * _mpad(p) * itemsize
    rows = max(1, (current_caches().l1d // 2) // row, -(-64 // p.OW))
    rows = min(rows, p.OH)
    nblk = -(-p.OH // rows)
    return -(-p.OH // nblk)


def _mpad(p: Problem) -> int:
    """Output channels rounded up to whole vectors (the transposed ``dY``'s row length)."""
    return -(-p.M // p.lanes) * p.lanes


def _transpose_dy(b: ir.IRBuilder, p: Problem, dst: ir.Value, gp: ir.Value,
                  gst: list[ir.Value], nb: ir.Value, g: ir.Value, elt: ir.Type) -> None:
    """Image ``nb``'s ``dY`` of group ``g`` as ``[position][channel]`` (rows of ``_mpad``
    channels, the padding zero): the channel-vector weight gradient reads a whole vector of
    channels per position. The channels-last copy of the Winograd paths
    (``wino_wgrad.fill``: register transposes where ``dY``'s rows are contiguous)."""
    mp = _mpad(p)
    group = _gep(b, gp, _mul(b, _mul(b, g, p.M), gst[1]))  # the group's first channel
    fill(b, _V(b, b.module, elt, p.lanes), group, gst, nb, p.M, mp, i64(0), i64(p.OH), p.OW,
         dst, lambda h: _mul(b, h, p.OW * mp))


def _wgrad_passes(b: ir.IRBuilder, p: Problem, nimg: ir.Value, lo: ir.Value,
                  hi: ir.Value) -> Iterator[tuple[ir.Value, ir.Value, ir.Value, ir.Value]]:
    """The weight gradient's passes over a few images at a time (``wgrad_pass_images``),
    and inside each this part's tiles ``[lo, hi)``: yields ``(first pass, first image, end
    image, tile)`` for a tile body to emit in the loops."""
    per = wgrad_pass_images(p)
    npass = b.udiv(_add(b, nimg, i64(per - 1)), i64(per))
    with for_range(b, i64(0), npass, name="wpass") as ps:
        i0 = _mul(b, ps, per)
        i1 = _add(b, i0, i64(per))
        i1 = b.select(b.icmp_signed("<", i1, nimg), i1, nimg)
        first = b.icmp_signed("==", ps, i64(0))
        with for_range(b, lo, hi, name="tile") as ti:
            yield first, i0, i1, ti


def _tap_offsets(b: ir.IRBuilder, offs: ir.Value, k0: ir.Value, n: int,
                 K: int) -> list[ir.Value]:
    """The grid offsets of taps ``k0 .. k0+n-1`` (past ``K``: the last tap's again)."""
    out = []
    for j in range(n):
        kk = _add(b, k0, i64(j))
        kk = b.select(b.icmp_signed("<", kk, i64(K)), kk, i64(K - 1))
        out.append(b.load(b.gep(offs, [i64(0), kk], inbounds=True)))
    return out


def _wgrad_channel_part(p: Problem, wide: bool, itemsize: int) -> tuple[int, int, int]:
    """Elements of one thread part's grid, transposed ``dY`` and tile accumulators in the
    channel-vector weight gradient's workspace (two parts, one after the other)."""
    t = wgrad_channel_tile(p, wide)
    return (align(p.grid_elems * itemsize) // itemsize,
            align(p.OH * p.OW * _mpad(p) * itemsize) // itemsize,
            align(_wgrad_tiles_of(p, t) * t.rm * t.nv * p.lanes * itemsize) // itemsize)


def _emit_wgrad_channels(k: Any, p: Problem, elt: ir.Type, xp: ir.Value,
                         xst: list[ir.Value], gp: ir.Value, gst: list[ir.Value],
                         work: ir.Value, offs: ir.Value, nimg: ir.Value,
                         big: ir.Value) -> None:
    """The weight gradient when ``wgrad_by_channels``: two thread parts, each with half of
    the images and all of group ``g``'s ``RK x NV`` tiles (``RK`` taps, ``NV`` vectors of
    output channels) over them, then ``dW`` = part 0's sums + part 1's, in that order. An
    odd batch's last image (all of a batch of one) goes to both parts, each with half of
    the tiles (batch 1 used one core of two).

    A part takes its images one at a time: the image's grid and its ``dY`` transposed to
    ``[position][channel]``, then blocks of output rows (``wgrad_block_rows``), every tile
    through a block before the next: for each position ``NV`` vector loads of the
    transposed ``dY`` and ``RK`` broadcast grid elements (only real positions: no lanes
    past ``OW``). A tile's accumulators start each block at zero and are added to the
    part's ``acc`` at its end. So an image's operands are built just before they are used,
    while they are in L2 (building every image's first, as the position-vector path does,
    streamed 17 MB from memory for 16 channels at 64x64, batch 32), and the workspace does
    not grow with the batch. Each ``dW`` element is a sum over each part's blocks (images,
    then blocks of rows, in order) of each block's running sum over its positions, then the
    two parts added: it depends on the shapes only, never on the thread count. Summing in
    two levels keeps the rounding error of ``n`` products near ``(n / blocks + blocks) *
    eps`` instead of ``n * eps``: a 7x2 kernel's weight gradient over 31 images of 57x61
    positions (98k products an element) measured 9.6x PyTorch's float32 error against a
    float64 result with one running sum, 1.4-1.6x with block sums."""
    b = k.b
    K, mp = p.K, _mpad(p)
    t = wgrad_channel_tile(p, k.L.wide)
    gsz, tsz, asz = _wgrad_channel_part(p, k.L.wide, k.node.dtype.itemsize)
    nmt = -(-p.M // (t.nv * p.lanes))
    per_tile = t.rm * t.nv * p.lanes
    ntiles = _wgrad_tiles_of(p, t)
    rows = wgrad_block_rows(p, k.node.dtype.itemsize)
    nblk = -(-p.OH // rows)

    def tile_origin(bb: ir.IRBuilder, ti: ir.Value) -> tuple[ir.Value, ir.Value]:
        return (_mul(bb, bb.udiv(ti, i64(nmt)), t.rm),
                _mul(bb, bb.urem(ti, i64(nmt)), t.nv * p.lanes))

    def image(task: _Task, tb: ir.IRBuilder, nb: ir.Value, grid: ir.Value, dyt: ir.Value,
              acc: ir.Value, accs: list, vec: _V, tiles: tuple[ir.Value, ir.Value]) -> None:
        """Image ``nb``'s grid and transposed ``dY``, then its blocks of rows through the
        tiles ``tiles[0] <= ti < tiles[1]``, into ``acc``."""
        _build_grid(tb, p, grid, task[xp], [task[x] for x in xst], nb, task[g])
        _transpose_dy(tb, p, dyt, task[gp], [task[x] for x in gst], nb, task[g], elt)
        with for_range(tb, i64(0), i64(nblk), name="wblk") as blk:
            r0 = _mul(tb, blk, rows)
            r1 = _add(tb, r0, i64(rows))
            r1 = tb.select(tb.icmp_signed("<", r1, i64(p.OH)), r1, i64(p.OH))
            with for_range(tb, tiles[0], tiles[1], name="tile") as ti:
                k0, m0 = tile_origin(tb, ti)
                tacc = _gep(tb, acc, _mul(tb, ti, per_tile))
                xb = [_gep(tb, grid, o) for o in _tap_offsets(tb, offs, k0, t.rm, K)]
                yb = [_gep(tb, dyt, c) for c in _channel_columns(tb, m0, t.nv, p.lanes, mp)]
                for row in accs:
                    for a in row:
                        tb.store(vec.zero, a)
                with for_range(tb, r0, r1, name="woh") as oh:
                    with for_range(tb, i64(0), i64(p.OW), name="wow") as ow:
                        q = _add(tb, _mul(tb, oh, p.OW), ow)
                        gq = _add(tb, _mul(tb, oh, p.wg), ow)
                        dys = [vec.load(_gep(tb, y, _mul(tb, q, mp))) for y in yb]
                        xs = [vec.splat(tb.load(_gep(tb, x, gq))) for x in xb]
                        for i in range(t.rm):
                            for j in range(t.nv):
                                tb.store(tb.call(vec.fma, [xs[i], dys[j],
                                                           tb.load(accs[i][j])]),
                                         accs[i][j])
                _spill_add(tb, vec, accs, tacc)

    with for_range(b, i64(0), i64(p.G), name="grp") as g:
        task = _Task(k, "wchan", [xp, *xst, gp, *gst, work, nimg, g])
        tb = task.b
        vec = _V(tb, k.L.module, elt, p.lanes)
        accs = [[task.alloca(vec.vt) for _ in range(t.nv)] for _ in range(t.rm)]
        part = _gep(tb, task[work], _mul(tb, task.part, gsz + tsz + asz))
        grid, dyt, acc = part, _gep(tb, part, i64(gsz)), _gep(tb, part, i64(gsz + tsz))
        _zero_fill(tb, acc, ntiles * per_tile, elt)
        # an even batch: half of the images to each part, with all tiles; an odd batch's
        # last image: half of the tiles to each part (summed into its own ``acc``)
        # once: every image rewrites the same interior, the zero border stays (as the
        # forward's grids, ``_igemm_groups``); no output per image (``dW`` is summed)
        for im in part_images(task, None, task[nimg], lambda: _zero_grid(tb, p, grid, elt)):
            image(task, tb, im.nb, grid, dyt, acc, accs, vec, im.split(i64(ntiles)))
        task.finish()
        task.dispatch(big)
        # dW[m, k] from both parts' tiles, part 0 first
        acc0 = _gep(b, work, i64(gsz + tsz))
        acc1 = _gep(b, acc0, i64(gsz + tsz + asz))
        with for_range(b, i64(0), i64(ntiles), name="wout") as ti:
            k0, m0 = tile_origin(b, ti)
            off = _mul(b, ti, per_tile)
            t0, t1 = _gep(b, acc0, off), _gep(b, acc1, off)
            with _tile_lanes(b, t, p.lanes, m0, p.M, k0, K) as (i, c, val):
                m = _add(b, m0, c)
                dst = _gep(b, k.out, _add(b, _mul(b, _add(b, _mul(b, g, p.M), m), K),
                                          _add(b, k0, i)))
                b.store(b.fadd(val(t0), val(t1)), dst)


# images whose grids one pass of the weight gradient's tiles shares: every tile of the
# pass reads their grids (from L2 when they fit) instead of streaming the whole batch's from
# memory once per tile (16->16 channels at 64x64, batch 32: 71 -> 90 GFLOP/s when the batch
# is 2); at least this many vectors of positions per pass keep the per-pass reduction
# across lanes cheap
WGRAD_PASS_BYTES = 384 * 1024
WGRAD_PASS_VECTORS = 128


def wgrad_pass_images(p: Problem) -> int:
    """Images per pass of the weight gradient's tiles."""
    vectors = p.OH * p.qv
    by_work = -(-WGRAD_PASS_VECTORS // vectors)
    by_cache = max(1, WGRAD_PASS_BYTES // (p.grid_elems * 4))
    return max(1, min(by_work, by_cache)) if by_work > 1 else 1


def _wgrad_tiles(task: _Task, p: Problem, t: Tile, elt: ir.Type, offs: ir.Value, gsz: int,
                 gp: ir.Value, gst: list[ir.Value], grids: ir.Value, out: ir.Value,
                 nimg: ir.Value, g: ir.Value) -> None:
    """The task body: this part's half of group ``g``'s ``RO x RK`` tiles (``(o, k)`` tile
    order), in passes over a few images at a time (``wgrad_pass_images``): each tile sums
    a pass's images and positions in vector accumulators, reduces them across lanes and adds
    that to its ``dW`` elements (the first pass stores). Each element's summation order
    depends on the shapes only, never on the thread split."""
    b = task.b
    K = p.K
    vec = _V(b, task.k.L.module, elt, p.lanes)
    accs = [[task.alloca(vec.vt) for _ in range(t.nv)] for _ in range(t.rm)]
    masks = [vec.const_mask(p.OW - v * p.lanes) for v in range(p.qv)]
    nkt = -(-K // t.nv)
    lo, hi = task.split(i64(-(-p.M // t.rm) * nkt))
    for first, i0, i1, ti in _wgrad_passes(b, p, nimg, lo, hi):
        o0 = _mul(b, b.udiv(ti, i64(nkt)), t.rm)
        k0 = _mul(b, b.urem(ti, i64(nkt)), t.nv)
        koff = _tap_offsets(b, offs, k0, t.nv, K)
        rows = []
        for i in range(t.rm):
            o = _add(b, o0, i64(i))
            o = b.select(b.icmp_signed("<", o, i64(p.M)), o, i64(p.M - 1))
            rows.append(_mul(b, _add(b, _mul(b, g, p.M), o), gst[1]))
        _zero_accs(b, vec, accs)
        with for_range(b, i0, i1, name="wimg") as nb:
            gb = _gep(b, grids, _mul(b, nb, gsz))
            xb = [_gep(b, gb, o) for o in koff]
            yb = [_gep(b, gp, _add(b, _mul(b, nb, gst[0]), r)) for r in rows]
            with for_range(b, i64(0), i64(p.OH), name="woh") as oh:
                yoff = _mul(b, oh, gst[2])
                xoff = _mul(b, oh, p.wg)
                for v in range(p.qv):
                    col = i64(v * p.lanes)
                    dys = [b.call(vec.mload, [_gep(b, r, _add(b, yoff, col)), masks[v],
                                              vec.zero]) for r in yb]
                    xs = [b.call(vec.mload, [_gep(b, r, _add(b, xoff, col)), masks[v],
                                             vec.zero]) for r in xb]
                    for i in range(t.rm):
                        for j in range(t.nv):
                            b.store(b.call(vec.fma, [dys[i], xs[j], b.load(accs[i][j])]),
                                    accs[i][j])
        for i in range(t.rm):
            for j in range(t.nv):
                o = _add(b, o0, i64(i))
                kk = _add(b, k0, i64(j))
                ok = b.and_(b.icmp_signed("<", o, i64(p.M)),
                            b.icmp_signed("<", kk, i64(K)))
                with b.if_then(ok):
                    dst = _gep(b, out, _add(b, _mul(b, _add(b, _mul(b, g, p.M), o), K), kk))
                    part = vec.hsum(b.load(accs[i][j]))
                    prev = b.select(first, ir.Constant(elt, 0.0), b.load(dst))
                    b.store(b.fadd(prev, part), dst)
    task.finish()



# ---------------------------------------------------------------------------------------
# strided input gradient: one stride-1 implicit GEMM per output phase
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Phase:
    """Input positions ``(a + s_h*i, b + s_w*j)`` of a strided input gradient: the taps
    ``(kh, kw)`` that reach them, each at a fixed offset ``(dr, dc)`` in ``dY``."""

    a: int
    b: int
    rows: int  # i in range(rows)
    cols: int  # j in range(cols)
    taps: tuple[tuple[int, int, int, int], ...]  # (kh, kw, dr, dc)


@dataclass(frozen=True)
class StridedIgrad:
    """``conv2d_input_grad`` with stride > 1 as ``s_h * s_w`` stride-1 GEMMs sharing one grid.

    ``dX[c, ih, iw] = sum dY[o, oh, ow] * W[o, c, kh, kw]`` over ``ih = oh*s - ph + kh*dh``:
    input row ``ih = a + s*i`` only meets the taps with ``(a + ph - kh*dh) % s == 0``, at
    ``oh = i + (a + ph - kh*dh) // s``. So each phase ``(a, b)`` of the input positions is a
    stride-1 correlation of ``dY`` with its own subset of taps, all phases reading one
    zero-bordered grid of ``dY`` (``top``/``left`` rows and columns of border). A phase no
    tap reaches (a 1x1 kernel at stride 2) gets K = 0, so its positions are stored as zeros.
    Compared with the direct loops this vectorises over output columns and reuses each
    loaded grid vector for ``RM`` channels (the ResNet stride-2 input gradients: 5-8x); it
    does no multiply a zero-dilated ``dY`` would waste (``s_h*s_w`` times the work).

    Attribute names follow ``Problem`` where ``_build_grid`` reads them: the grid holds
    ``S`` channels of ``H x W`` (``dY``), row ``r`` = ``dY`` row ``r - ph``.
    """

    G: int
    M: int  # input channels per group (the GEMM's rows)
    S: int  # dY channels per group (the grid's channels)
    H: int  # dY rows
    W: int
    ph: int  # border above dY in the grid (``top``)
    pw: int
    hg: int
    wg: int
    IH: int  # dX rows
    IW: int
    sh: int
    sw: int
    KH: int
    KW: int
    phases: tuple[Phase, ...]
    lanes: int

    @property
    def grid_strides(self) -> tuple[int, int]:
        """The grid is not split into phases (``_build_grid``)."""
        return 1, 1

    @property
    def phase_elems(self) -> int:
        return self.S * self.hg * self.wg

    @property
    def grid_elems(self) -> int:
        return self.phase_elems + 2 * self.lanes

    @property
    def ks(self) -> list[int]:
        """K of each phase: dY channels times its taps."""
        return [self.S * len(ph.taps) for ph in self.phases]

    @property
    def positions(self) -> int:
        """Vectors of positions in the largest phase (sizes the tile)."""
        return max(ph.rows * -(-ph.cols // self.lanes) for ph in self.phases)

    def offsets(self, ph: Phase) -> list[int]:
        """Grid offset of each ``k = (o, tap)`` of phase ``ph`` from position ``(i, j)``."""
        return [o * self.hg * self.wg + (dr + self.ph) * self.wg + dc + self.pw
                for o in range(self.S) for (_, _, dr, dc) in ph.taps]


def strided_igrad(n: Node, wide: bool) -> StridedIgrad | None:
    """The phase view of a strided ``conv2d_input_grad`` node, or None (not one, symbolic
    sizes, an integer dtype)."""
    if n.op != "conv2d_input_grad" or not n.dtype.is_float:
        return None
    a = n.attrs
    (sh_, sw), (ph, pw), (dh, dw), g = a["stride"], a["padding"], a["dilation"], a["groups"]
    if sh_ == 1 and sw == 1:
        return None
    gy, w = n.inputs
    oc, Cg, KH, KW = w.shape
    dims = list(gy.shape[1:]) + list(n.shape[1:]) + [oc, Cg]
    if not all(isinstance(d, int) for d in dims):
        return None
    OH, OW = gy.shape[2:]
    IH, IW = n.shape[2:]

    def axis(s: int, p: int, d: int, k: int, size: int) -> list[tuple[int, int, list]]:
        # per residue r: (r, positions, [(tap, offset)])
        out = []
        for r in range(s):
            taps = [(t, (r + p - t * d) // s) for t in range(k) if (r + p - t * d) % s == 0]
            out.append((r, len(range(r, size, s)), taps))
        return out

    rows, cols = axis(sh_, ph, dh, KH, IH), axis(sw, pw, dw, KW, IW)
    phases = tuple(Phase(r, c, nr, nc, tuple((kh, kw, dr, dc) for kh, dr in tr
                                             for kw, dc in tc))
                   for r, nr, tr in rows for c, nc, tc in cols if nr and nc)
    lanes = lanes_for(n.dtype.itemsize, wide)
    drs = [t[2] for p_ in phases for t in p_.taps] or [0]
    dcs = [t[3] for p_ in phases for t in p_.taps] or [0]
    top, left = max(0, -min(drs)), max(0, -min(dcs))
    hg = max(p_.rows for p_ in phases) + max(drs) + top
    wg = max(p_.cols for p_ in phases) + max(dcs) + left
    return StridedIgrad(g, Cg, oc // g, OH, OW, top, left, max(hg, 1), max(wg, 1), IH, IW,
                        sh_, sw, KH, KW, phases, lanes)


def _igrad_by_channels(p: StridedIgrad) -> bool:
    """Vectors over input channels for the strided input gradient, by ``by_channels``'s
    rule for the other kernels: where the channels fill a vector and the widest phase's
    rows would fill at most half their vectors (a 16x16 input at stride 2: phases of 8
    columns), or leave part of the last one idle with four vectors of channels and a long
    enough sum (56x56 at stride 2: phases of 28 columns)."""
    if p.M < p.lanes:
        return False
    cols = max(ph.cols for ph in p.phases)
    half = -(-cols // p.lanes) * p.lanes >= 2 * cols
    phases = [k for k in p.ks if k]  # the phases' sums, their mean as the sum's length
    return half or _ragged(cols, p.lanes, p.M, sum(phases) // max(1, len(phases)))


def _igrad_layout(p: StridedIgrad, wide: bool) -> tuple[Tile, int]:
    """The tile and the packed weight's row length (``igemm_layout``'s rule)."""
    if _igrad_by_channels(p):
        rows = max(ph.rows * ph.cols for ph in p.phases)
        t = pick_tile(rows, -(-p.M // p.lanes), wide, max_rm=BY_CHANNELS_RM)
        nw = t.nv * p.lanes
        return t, -(-p.M // nw) * nw  # whole panels (``_channel_gemm``)
    t = pick_tile(p.M, p.positions, wide)
    return t, -(-p.M // t.rm) * t.rm


def _strided_igrad_workspace(p: StridedIgrad, it: int, wide: bool) -> int:
    _, mp = _igrad_layout(p, wide)
    return align(p.G * sum(p.ks) * mp * it) + 2 * align(p.grid_elems * it) + ALIGN


def _emit_strided_igrad(k: Any, p: StridedIgrad) -> bool:
    n = k.node
    b = k.b
    elt = mem_type(n.dtype)
    gy_node, w_node = n.inputs
    ops = _operand(k, gy_node), _operand(k, w_node)
    if ops[0] is None or ops[1] is None:
        return False
    (src, sst), (wp, wst) = ops
    t, mp = _igrad_layout(p, k.L.wide)
    chans, nw = _igrad_by_channels(p), t.nv * p.lanes
    it = n.dtype.itemsize
    ktot = sum(p.ks)
    apack = _carve(b, k.work, 0, elt)
    abytes = align(p.G * ktot * mp * it)
    grids = [_carve(b, k.work, abytes + i * align(p.grid_elems * it), elt) for i in range(2)]
    mod = k.L.module

    # per phase: the weight's taps as A[k = (o, tap)][m = c], zero rows past M
    _zero_fill(b, apack, p.G * ktot * mp, elt)
    offs = _phase_tables(mod, k.fn.name, p)
    ptask = _Task(k, "pack", [wp, *wst, apack])
    _pack_strided_igrad(ptask, p, ptask[wp], [ptask[x] for x in wst], ptask[apack], mp, nw,
                        chans)
    ptask.finish()
    ptask.dispatch(ir.Constant(I1, p.G * p.M * ktot >= PACK_PAR_MIN))

    nimg = k.sym(n.shape[0])
    task = _Task(k, "igrad", [src, *sst, apack, *grids, k.out, nimg, *epilogue_values(k)])
    images = (_strided_igrad_images_by_channels if _igrad_by_channels(p)
              else _strided_igrad_images)
    images(task, p, t, elt, offs, task[src], [task[x] for x in sst], task[apack],
           [task[x] for x in grids], task[k.out], task[nimg], mp)
    macs = b.mul(nimg, i64(p.G * p.M * p.S * sum(len(ph.taps) * ph.rows * ph.cols
                                                 for ph in p.phases)))
    # an odd batch's last image is split by tiles (``_igrad_phases``), straight into the
    # output: its positions no tap reaches zeroed before, its epilogue run after
    per_image = p.G * p.M * p.IH * p.IW
    if any(not ph.taps for ph in p.phases):
        with odd_last(b, nimg) as last:
            _zero_fill(b, _gep(b, k.out, _mul(b, last, per_image)), per_image, elt)
    task.dispatch(b.icmp_signed(">=", macs, i64(CONV_PAR_MIN_MACS)))
    _odd_epilogue(k, nimg, per_image)
    return True


def _pack_strided_igrad(task: _Task, p: StridedIgrad, wp: ir.Value, wst: list[ir.Value],
                        apack: ir.Value, mp: int, nw: int, chans: bool) -> None:
    """The strided input gradient's packed weight (``apack`` zeroed): per phase its taps as
    ``A[k = (o, tap)][m = c]``, in panels of ``nw`` channels when ``chans``; the two parts
    take halves of the rows ``o`` (at batch 1 the pack is a tenth of the work)."""
    b = task.b
    mod = task.k.L.module
    ktot = sum(p.ks)
    olo, ohi = task.split(i64(p.S))
    kstart = 0
    for pi, ph in enumerate(p.phases):
        kk = len(ph.taps)
        name = f"{task.k.fn.name}.pack"
        kh_t = _table(mod, f"{name}.kh{pi}", [tap[0] for tap in ph.taps] or [0])
        kw_t = _table(mod, f"{name}.kw{pi}", [tap[1] for tap in ph.taps] or [0])
        if kk:
            with for_range(b, i64(0), i64(p.G), name="ag") as g:
                with for_range(b, olo, ohi, name="ao") as o:
                    with for_range(b, i64(0), i64(kk), name="at") as tap:
                        wkh = b.load(b.gep(kh_t, [i64(0), tap], inbounds=True))
                        wkw = b.load(b.gep(kw_t, [i64(0), tap], inbounds=True))
                        base = _mul(b, _add(b, _mul(b, g, ktot), i64(kstart)), mp)
                        kr = _add(b, _mul(b, o, kk), tap)
                        with for_range(b, i64(0), i64(p.M), name="am") as m:
                            wi = _add(b, _mul(b, _add(b, _mul(b, g, p.S), o), wst[0]),
                                      _mul(b, m, wst[1]), _mul(b, wkh, wst[2]),
                                      _mul(b, wkw, wst[3]))
                            if chans:  # the phase's rows as [channel tile][k][nw] panels
                                mt, j = b.udiv(m, i64(nw)), b.urem(m, i64(nw))
                                at = _add(b, base, _mul(b, mt, p.S * kk * nw),
                                          _mul(b, kr, nw), j)
                            else:
                                at = _add(b, base, _mul(b, kr, mp), m)
                            b.store(b.load(_gep(b, wp, wi)), _gep(b, apack, at))
        kstart += p.S * kk


def _table(mod: ir.Module, name: str, values: list[int]) -> ir.Value:
    arr = ir.ArrayType(I64, len(values))
    gv = ir.GlobalVariable(mod, arr, name=name)
    gv.global_constant = True
    gv.linkage = "internal"
    gv.initializer = ir.Constant(arr, values)
    return gv


@dataclass
class PhaseRun:
    """One phase GEMM of the strided input gradient as a task body emits it
    (``_phase_runs``): its positions' ``rows x cols`` (the same for every phase the loop
    covers), where they start (``a``, ``b``: i64 values), ``K`` (a value, at most
    ``kmax``), its offset table (``off``: an ``i64*``) and its packed weight rows
    (``abase``)."""

    rows: int
    cols: int
    a: ir.Value
    b: ir.Value
    K: Any  # an int when the phase is written out
    kmax: int
    off: ir.Value
    abase: ir.Value


def _phase_tables(mod: ir.Module, name: str, p: StridedIgrad) -> Any:
    """The offset tables of ``p``'s phases with taps: for one loop over them
    (``_phase_runs``), when they share their positions' shape (every ``s_h x s_w`` phase of
    an input whose sizes the strides divide), ``(descriptors, offsets)``: per phase ``(K,
    first packed row, a, b, first offset)`` and all phases' offsets, one after the other;
    otherwise a table per phase."""
    live = [ph for ph in p.phases if ph.taps]
    if len(live) > 1 and len({(ph.rows, ph.cols) for ph in live}) == 1:
        desc, allo, kstart = [], [], 0
        for ph in p.phases:
            K = p.S * len(ph.taps)
            if K:
                desc += [K, kstart, ph.a, ph.b, len(allo)]
                allo += p.offsets(ph)
            kstart += K
        return (_table(mod, f"{name}.phases", desc), _table(mod, f"{name}.offsets", allo))
    return [_table(mod, f"{name}.offsets{pi}", p.offsets(ph)) for pi, ph in enumerate(p.phases)]


def _phase_runs(b: ir.IRBuilder, p: StridedIgrad, tables: Any, apack: ir.Value,
                g: ir.Value, mp: int) -> Iterator[PhaseRun]:
    """``p``'s phase GEMMs for group ``g``: one loop over the phases' descriptors, its body
    emitted once, when ``_phase_tables`` made them (the four phases of a stride-2 input
    gradient were four copies of the GEMM and its stores: 75 % of the kernel's code, and
    the most expensive of ResNet-18's modules to compile), else each phase written out."""
    ktot = sum(p.ks)
    gbase = _mul(b, g, ktot * mp)
    if isinstance(tables, tuple):
        desc, allo = tables
        live = [ph for ph in p.phases if ph.taps]
        with for_range(b, i64(0), i64(len(live)), name="phase") as pi:
            K, kstart, a, bb, o0 = (
                b.load(b.gep(desc, [i64(0), _add(b, _mul(b, pi, 5), i64(j))], inbounds=True))
                for j in range(5))
            yield PhaseRun(live[0].rows, live[0].cols, a, bb, K, max(p.ks),
                           b.gep(allo, [i64(0), o0], inbounds=True),
                           _gep(b, apack, _add(b, gbase, _mul(b, kstart, mp))))
        return
    kstart = 0
    for ph, off_t in zip(p.phases, tables):
        K = p.S * len(ph.taps)
        if K:
            yield PhaseRun(ph.rows, ph.cols, i64(ph.a), i64(ph.b), K, K,
                           b.gep(off_t, [i64(0), i64(0)], inbounds=True),
                           _gep(b, apack, _add(b, gbase, i64(kstart * mp))))
        kstart += K


def _igrad_phases(task: _Task, p: StridedIgrad, elt: ir.Type, src: ir.Value,
                  sst: list[ir.Value], apack: ir.Value, out: ir.Value, grids: list[ir.Value],
                  nimg: ir.Value, mp: int, offs: Any) -> Iterator[tuple]:
    """The strided input gradient's loops, shared by both task bodies: this part's images
    (``part_images``), each copied once into this part's grid of ``dY`` (the positions no
    tap reaches zeroed), then per group the phases with taps (``_phase_runs``), yielded as
    ``(PhaseRun, group, grid, split, where to store the image, its index there)``
    for the body to emit a phase's GEMM inside the loops."""
    b = task.b
    cin = p.G * p.M
    grid = b.select(task.first, grids[0], grids[1])
    for im in part_images(task, out, nimg, lambda: _zero_fill(b, grid, p.grid_elems, elt)):
        if any(not ph.taps for ph in p.phases):
            # positions no tap reaches (three in four for a 1x1 kernel at stride 2) are
            # zero: one memset of the image instead of scattering zeros (the kernel zeroes
            # an odd batch's last image, which both parts share, before the task:
            # ``_emit_strided_igrad``)
            with b.if_then(b.not_(im.last)):
                _zero_fill(b, _gep(b, im.o, _mul(b, im.ni, cin * p.IH * p.IW)),
                           cin * p.IH * p.IW, elt)
        with for_range(b, i64(0), i64(p.G), name="grp") as g:
            _build_grid(b, p, grid, src, sst, im.nb, g)
            for run in _phase_runs(b, p, offs, apack, g, mp):
                yield run, g, grid, im.split, im.o, im.ni


def _strided_igrad_images_by_channels(task: _Task, p: StridedIgrad, t: Tile, elt: ir.Type,
                                      offs: Any, src: ir.Value,
                                      sst: list[ir.Value], apack: ir.Value,
                                      grids: list[ir.Value], out: ir.Value, nimg: ir.Value,
                                      mp: int) -> None:
    """The task body when ``_igrad_by_channels``: as ``_strided_igrad_images``, each
    phase's GEMM with ``RM`` of its positions (real ones only) x ``NV`` vectors of input
    channels per tile, as ``_igemm_images_by_channels``."""
    b = task.b
    vec = _V(b, task.k.L.module, elt, p.lanes)
    cin = p.G * p.M
    accs = [[task.alloca(vec.vt) for _ in range(t.nv)] for _ in range(t.rm)]
    buf = task.alloca(ir.ArrayType(elt, t.rm * t.nv * p.lanes))
    for ph, g, grid, split, o, ni in _igrad_phases(
            task, p, elt, src, sst, apack, out, grids, nimg, mp, offs):
        P = ph.rows * ph.cols
        part = split(i64(-(-P // t.rm) * (mp // (t.nv * p.lanes))))
        for q0, m0, tile in _channel_tiles(b, vec, accs, buf, ph.K, ph.off, ph.abase, mp,
                                           grid, P, ph.cols, p.wg, 1, part, ph.kmax):
            with _tile_lanes(b, t, p.lanes, m0, p.M, q0, P) as (i, c, val):
                q = _add(b, q0, i)
                r, col = b.udiv(q, i64(ph.cols)), b.urem(q, i64(ph.cols))
                ih = _add(b, _mul(b, r, p.sh), ph.a)
                iw = _add(b, _mul(b, col, p.sw), ph.b)
                ch = _add(b, _mul(b, ni, cin), _mul(b, g, p.M), _add(b, m0, c))
                dst = _gep(b, o, _add(b, _mul(b, ch, p.IH * p.IW),
                                        _mul(b, ih, p.IW), iw))
                b.store(val(tile), dst)
    task.finish()


def _tile_pairs(b: ir.IRBuilder, n0: int, n1: int,
                split: Any) -> Iterator[tuple[ir.Value, ir.Value]]:
    """``split``'s share (``PartImage.split``) of the ``(i, j)`` over ``n0 x n1`` tiles,
    ``j`` inner, in that order."""
    lo, hi = split(i64(n0 * n1))
    with for_range(b, lo, hi, name="tp") as t:
        yield b.udiv(t, i64(n1)), b.urem(t, i64(n1))


def _strided_igrad_images(task: _Task, p: StridedIgrad, t: Tile, elt: ir.Type,
                          offs: Any, src: ir.Value, sst: list[ir.Value],
                          apack: ir.Value, grids: list[ir.Value], out: ir.Value,
                          nimg: ir.Value, mp: int) -> None:
    """The task body: this part's images, each copied once into this part's grid of ``dY``,
    then every phase's GEMM, its results scattered to the phase's positions in ``dX``."""
    b = task.b
    vec = _V(b, task.k.L.module, elt, p.lanes)
    sfx = f"v{p.lanes}{'f32' if elt == F32 else 'f64'}"
    pvt = ir.VectorType(elt.as_pointer(), p.lanes)
    scatter = declare(task.k.L.module, f"llvm.masked.scatter.{sfx}.v{p.lanes}p0",
                      ir.VoidType(), [vec.vt, pvt, I32, ir.VectorType(I1, p.lanes)])
    it = 4 if elt == F32 else 8
    align_ = ir.Constant(I32, it)
    lane_bytes = ir.Constant(ir.VectorType(I64, p.lanes), [i * p.sw * it for i in range(p.lanes)])
    cin = p.G * p.M
    accs = [[task.alloca(vec.vt) for _ in range(t.nv)] for _ in range(t.rm)]
    for ph, g, grid, split, o, ni in _igrad_phases(
            task, p, elt, src, sst, apack, out, grids, nimg, mp, offs):
        qv = -(-ph.cols // p.lanes)
        Q = ph.rows * qv
        nq = -(-Q // t.nv)
        for mi, qi in _tile_pairs(b, mp // t.rm, nq, split):
            m0 = _mul(b, mi, t.rm)
            q0 = _mul(b, qi, t.nv)
            starts = _grid_starts(b, grid, q0, t.nv, Q, qv, p.wg, p.lanes)
            _accumulate(
                b, vec, accs, ph.K,
                lambda kk, starts=starts, ph=ph: [vec.load(_gep(
                    b, st, _offset_at(b, ph.off, kk))) for st in starts],
                lambda kk, m0=m0, ph=ph: _gep(b, ph.abase, _add(b, _mul(b, kk, mp), m0)),
                ph.kmax)
            for v in range(t.nv):
                q = _add(b, q0, i64(v))
                with b.if_then(b.icmp_signed("<", q, i64(Q))):
                    r, vr = b.udiv(q, i64(qv)), b.urem(q, i64(qv))
                    col = _mul(b, vr, p.lanes)
                    # a constant all-true mask for whole vectors: the
                    # scatter becomes plain stores, no lane tests
                    tail = ph.cols % p.lanes
                    mask = (vec.const_mask(p.lanes) if tail == 0
                            else vec.const_mask(ph.cols) if qv == 1
                            else vec.mask(b.sub(i64(ph.cols), col)))
                    ih = _add(b, _mul(b, r, p.sh), ph.a)
                    iw = _add(b, _mul(b, col, p.sw), ph.b)
                    for i in range(t.rm):
                        m = _add(b, m0, i64(i))
                        ch = _add(b, _mul(b, ni, cin), _mul(b, g, p.M), m)
                        base = _gep(b, o, _add(
                            b, _mul(b, ch, p.IH * p.IW), _mul(b, ih, p.IW), iw))
                        sp = splat(b, b.ptrtoint(base, I64), p.lanes)
                        ptrs = b.inttoptr(b.add(sp, lane_bytes), pvt)
                        args = [b.load(accs[i][v]), ptrs, align_, mask]
                        if p.M % t.rm:
                            with b.if_then(b.icmp_signed("<", m, i64(p.M))):
                                b.call(scatter, args)
                        else:
                            b.call(scatter, args)
    task.finish()



# ---------------------------------------------------------------------------------------
# Winograd F(2x2, 3x3): 3x3 stride-1 convolutions at 16 multiplies per 2x2 outputs
# ---------------------------------------------------------------------------------------
# bytes of transformed input a block of tiles may take (the block's V and M stay in L2)
WINO_BLOCK_BYTES = 96 * 1024
# fewer source or result channels than this: the transforms cost more than the multiplies
# saved (the 1 -> 16 stem at 64x64 took twice the implicit GEMM's time)
WINO_MIN_CHANNELS = 8
# the flat layout (rows of fewer tiles than a vector: small maps) pays only with more
# channels: its tile-major copy and lane-by-lane stores are fixed costs per tile that a
# short channel sum does not cover. Measured on Zen 4 (AVX-512, one thread, GFLOP/s of
# the direct sum's work, Winograd / implicit GEMM, forward): 8->16 at 14x14 57 / 83,
# 16->16 at 14x14 52 / 90, at 16x16 71 / 103, at 28x28 63 / 88, 32->32 at 14x14 70 / 93,
# at 16x16 93 / 106, 24->24 at 14x14 88 / 94 and at 8x8 116 / 77, 32->32 at 8x8 121 / 101,
# at 12x12 100 / 82, 40->40 at 14x14 101 / 94, 48->48 at 14x14 102 / 94, 64->64 at 16x16
# 148 / 109, 128->128 at 8x8 161 / 106 (maps with a row of a vector of tiles or more:
# 8->16 at 32x32 103 / 93, 16->16 at 64x64 108 / 90, unchanged). So: at least
# WINO_FLAT_MIN_CHANNELS, or WINO_FLAT_FEW_CHANNELS when an image's tiles fill at most
# WINO_FLAT_FEW_VECTORS vectors. The cnn benchmark's 8- and 16-channel layers at 28x28 and
# 14x14 left Winograd by this: its step 2.61 -> 1.81 ms on one thread, 1.77 -> 1.28 on two.
WINO_FLAT_MIN_CHANNELS = 40
WINO_FLAT_FEW_CHANNELS = 24
WINO_FLAT_FEW_VECTORS = 3


@dataclass(frozen=True)
class Wino:
    """A 3x3, stride-1, undilated, ungrouped convolution (forward, or the input gradient
    seen as one) as Lavin & Gray's F(2x2, 3x3): each 4x4 input tile ``d`` becomes
    ``V = B^T d B``, each 3x3 filter ``U = G g G^T``, the 16 positions of the transformed
    tiles are 16 GEMMs ``M[xi] = U[xi] V[xi]`` over the source channels, and each
    ``A^T M A`` is a 2x2 block of outputs: 16 multiply-adds per 2x2 outputs and source
    channel instead of 36 (2.25x fewer), for a few additions in the transforms.

    Vector lanes run over tiles along a row, so the input tiles are read from the 2x2 phase
    grids of ``_build_grid`` (tile element ``(r, c)`` of consecutive tiles is contiguous in
    phase ``(r % 2, c % 2)``). Tiles are taken in blocks that keep their V and M in L2.
    Attribute names follow ``Problem`` where ``_build_grid`` reads them."""

    M: int  # result channels
    S: int  # source channels
    H: int
    W: int
    ph: int
    pw: int
    OH: int
    OW: int
    lanes: int
    flip: bool  # the input gradient: g[m, s] = W[s, m, 2 - kh, 2 - kw]

    @property
    def grid_strides(self) -> tuple[int, int]:
        """The 2x2 phase grids of ``_build_grid``."""
        return 2, 2

    @property
    def TH(self) -> int:  # noqa: N802 - tile rows
        return -(-self.OH // 2)

    @property
    def TW(self) -> int:  # noqa: N802
        return -(-self.OW // 2)

    @property
    def qv(self) -> int:
        return -(-self.TW // self.lanes)

    @property
    def flat(self) -> bool:
        """Rows of fewer tiles than a vector: lanes run over the image's tiles in row-major
        order, read from a tile-major copy of the input (``D[(r, c)][s][tile]``) instead of
        the phase grids, and the results are stored lane by lane."""
        return self.TW < self.lanes

    @property
    def Q(self) -> int:  # noqa: N802 - tile vectors per image
        return -(-self.TH * self.TW // self.lanes) if self.flat else self.TH * self.qv

    @property
    def hg(self) -> int:
        return self.TH + 1

    @property
    def wg(self) -> int:
        return self.TW + 1

    @property
    def phase_elems(self) -> int:
        return self.S * self.hg * self.wg

    @property
    def grid_elems(self) -> int:
        return 4 * self.phase_elems + 2 * self.lanes

    @property
    def tiles_elems(self) -> int:
        """The flat mode's tile-major copy ``D`` (none otherwise)."""
        return 16 * self.S * self.Q * self.lanes if self.flat else 0

    def tile(self, wide: bool) -> Tile:
        return pick_tile(self.M, min(self.Q, self._qb0(wide)), wide)

    def _qb0(self, wide: bool) -> int:
        return max(1, WINO_BLOCK_BYTES // (16 * self.S * self.lanes * 4))

    def block(self, wide: bool) -> int:
        """Tile vectors per block: a multiple of the GEMM tile's, at most what the image has."""
        nv = self.tile(wide).nv
        qb = max(nv, self._qb0(wide) // nv * nv)
        return min(qb, -(-self.Q // nv) * nv)

    def mp(self, wide: bool) -> int:
        rm = self.tile(wide).rm
        return -(-self.M // rm) * rm


def winograd(n: Node, wide: bool) -> Wino | None:
    """The F(2x2, 3x3) view of conv node ``n``, or None where it does not apply or would
    not pay: rows of fewer than one vector of tiles (the lanes past them are wasted work)."""
    p = problem(n, wide)
    if (p is None or n.op == "conv2d_weight_grad" or p.G != 1 or (p.KH, p.KW) != (3, 3)
            or (p.dh, p.dw, p.sh, p.sw) != (1, 1, 1, 1)):
        return None
    w = Wino(p.M, p.S, p.H, p.W, p.ph, p.pw, p.OH, p.OW, p.lanes,
             n.op == "conv2d_input_grad")
    if w.TH * w.TW < w.lanes or min(w.M, w.S) < WINO_MIN_CHANNELS or not options.WINOGRAD:
        return None
    if w.flat and not (min(w.M, w.S) >= WINO_FLAT_MIN_CHANNELS or (
            min(w.M, w.S) >= WINO_FLAT_FEW_CHANNELS and w.Q <= WINO_FLAT_FEW_VECTORS)):
        return None
    return w


def _wino_workspace(w: Wino, it: int, wide: bool) -> int:
    qb, mp = w.block(wide), w.mp(wide)
    per_part = (align(w.grid_elems * it) + align(w.tiles_elems * it)
                + align(16 * w.S * qb * w.lanes * it)
                + align(16 * mp * qb * w.lanes * it))
    return align(16 * w.S * mp * it) + 2 * per_part + ALIGN


def _emit_winograd(k: Any, w: Wino) -> bool:
    n = k.node
    b = k.b
    elt = mem_type(n.dtype)
    src_node, w_node = n.inputs
    ops = _operand(k, src_node), _operand(k, w_node)
    if ops[0] is None or ops[1] is None:
        return False
    (src, sst), (wp, wst) = ops
    it = n.dtype.itemsize
    wide = k.L.wide
    qb, mp = w.block(wide), w.mp(wide)
    upack = _carve(b, k.work, 0, elt)
    off = align(16 * w.S * mp * it)
    parts = []
    for _ in range(2):
        grid = _carve(b, k.work, off, elt)
        off += align(w.grid_elems * it)
        tiles = _carve(b, k.work, off, elt)
        off += align(w.tiles_elems * it)
        vbuf = _carve(b, k.work, off, elt)
        off += align(16 * w.S * qb * w.lanes * it)
        mbuf = _carve(b, k.work, off, elt)
        off += align(16 * mp * qb * w.lanes * it)
        parts.append((grid, tiles, vbuf, mbuf))

    # U[xi][s][m] = (G g G^T)[xi] for g the 3x3 filter from source channel s to result m;
    # the padding columns M <= m < mp, which the register tiles read, are zeros
    if mp > w.M:
        _zero_fill(b, upack, 16 * w.S * mp, elt)
    wino.transform_filters(b, _V(b, b.module, elt, lanes_for(it, wide)), wp, wst, w.flip, w.S,
                           w.M, upack, mp, i64(0), i64(w.S))

    nimg = k.sym(n.shape[0])
    flat = [x for part in parts for x in part]
    task = _Task(k, "wino", [src, *sst, upack, *flat, k.out, nimg, *epilogue_values(k)])
    _wino_images(task, w, elt, task[src], [task[x] for x in sst], task[upack],
                 [tuple(task[x] for x in part) for part in parts], task[k.out], task[nimg])
    macs = b.mul(nimg, i64(16 * w.M * w.S * w.TH * w.TW))
    task.dispatch(b.icmp_signed(">=", macs, i64(CONV_PAR_MIN_MACS)))
    _odd_epilogue(k, nimg, w.M * w.OH * w.OW)
    return True


def _wino_images(task: _Task, w: Wino, elt: ir.Type, src: ir.Value, sst: list[ir.Value],
                 upack: ir.Value, parts: list[tuple], out: ir.Value, nimg: ir.Value) -> None:
    """The task body: this part's images; per image the phase grids, then per block of
    tiles the input transform, the 16 GEMMs and the output transform."""
    b = task.b
    wide = task.k.L.wide
    t = w.tile(wide)
    qb, mp = w.block(wide), w.mp(wide)
    L = w.lanes
    vec = _V(b, task.k.L.module, elt, L)
    grid, tiles, vbuf, mbuf = (b.select(task.first, x0, x1) for x0, x1 in zip(*parts))
    accs = [[task.alloca(vec.vt) for _ in range(t.nv)] for _ in range(t.rm)]
    nblocks = -(-w.Q // qb)
    inter = ir.Constant(ir.VectorType(I32, 2 * L), [x for i in range(L) for x in (i, L + i)])
    halves = [ir.Constant(ir.VectorType(I32, L), list(range(h * L, (h + 1) * L)))
              for h in range(2)]
    undef2 = ir.Constant(ir.VectorType(elt, 2 * L), ir.Undefined)
    tail = w.OW - 2 * (w.qv - 1) * L  # columns in a row's last vector pair
    def image(nb: ir.Value, o: ir.Value, ni: ir.Value,
              blocks: tuple[ir.Value, ir.Value]) -> None:
        """Image ``nb``'s grids, then its tile blocks ``blocks[0] <= bi < blocks[1]``."""
        _build_grid(b, w, grid, src, sst, nb, i64(0))
        if w.flat:
            _build_tiles(b, w, tiles, grid)
        with for_range(b, blocks[0], blocks[1], name="blk") as bi:
            q0 = _mul(b, bi, qb)
            left = b.sub(i64(w.Q), q0)
            qn = b.select(b.icmp_signed("<", left, i64(qb)), left, i64(qb))
            # input transform: V[xi][s][qq] = (B^T d B)[xi] for the block's tiles
            with for_range(b, i64(0), i64(w.S), name="vs") as s:
                with for_range(b, i64(0), qn, name="vq") as qq:
                    q = _add(b, q0, qq)
                    if w.flat:
                        base = _add(b, _mul(b, s, w.Q * L), _mul(b, q, L))
                        d = [[vec.load(_gep(b, tiles, _add(b, base, i64(
                            (r * 4 + c) * w.S * w.Q * L)))) for c in range(4)]
                             for r in range(4)]
                    else:
                        th, vr = b.udiv(q, i64(w.qv)), b.urem(q, i64(w.qv))
                        base = _add(b, _mul(b, s, w.hg * w.wg), _mul(b, th, w.wg),
                                    _mul(b, vr, L))
                        d = [[vec.load(_gep(b, grid, _add(b, base, i64(
                            ((r % 2) * 2 + c % 2) * w.phase_elems + (r // 2) * w.wg
                            + c // 2)))) for c in range(4)] for r in range(4)]
                    tmp = [[wino.lin(b, wino.BT[j], d[r]) for j in range(4)] for r in range(4)]
                    for i in range(4):
                        for j in range(4):
                            v = wino.lin(b, wino.BT[i], [tmp[r][j] for r in range(4)])
                            dst = _mul(b, _add(b, _mul(b, _add(b, _mul(b, i64(i * 4 + j),
                                                                     w.S), s), qb), qq), L)
                            b.store(v, b.bitcast(_gep(b, vbuf, dst), vec.vt.as_pointer()),
                                    align=ALIGN if L * 4 >= ALIGN else 4)
            # the 16 GEMMs: M[xi][m][qq] = sum_s U[xi][s][m] * V[xi][s][qq]
            nqt = b.udiv(_add(b, qn, i64(t.nv - 1)), i64(t.nv))
            with for_range(b, i64(0), i64(16), name="xi") as xi:
                ub = _gep(b, upack, _mul(b, xi, w.S * mp))
                vb = _gep(b, vbuf, _mul(b, xi, w.S * qb * L))
                mb = _gep(b, mbuf, _mul(b, xi, mp * qb * L))
                with for_range(b, i64(0), i64(mp // t.rm), name="wmt") as mi:
                    m0 = _mul(b, mi, t.rm)
                    with for_range(b, i64(0), nqt, name="wqt") as qi:
                        qs = []
                        for v in range(t.nv):
                            qq = _add(b, _mul(b, qi, t.nv), i64(v))
                            qs.append(qq)
                        last = b.sub(qn, i64(1))
                        starts = [_gep(b, vb, _mul(b, b.select(
                            b.icmp_signed("<", qq, qn), qq, last), L)) for qq in qs]
                        _accumulate(
                            b, vec, accs, w.S,
                            lambda s, starts=starts: [vec.load(_gep(b, st, _mul(
                                b, s, qb * L))) for st in starts],
                            lambda s, m0=m0, ub=ub: _gep(b, ub, _add(b, _mul(b, s, mp), m0)))
                        for v, qq in enumerate(qs):
                            with b.if_then(b.icmp_signed("<", qq, qn)):
                                for i in range(t.rm):
                                    dst = _mul(b, _add(b, _mul(b, _add(b, m0, i64(i)), qb),
                                                       qq), L)
                                    b.store(b.load(accs[i][v]), b.bitcast(
                                        _gep(b, mb, dst), vec.vt.as_pointer()), align=4)
            # output transform: the 2x2 block A^T M A of each tile, rows interleaved
            with for_range(b, i64(0), i64(w.M), name="om") as m:
                ch = _add(b, _mul(b, ni, w.M), m)
                with for_range(b, i64(0), qn, name="oq") as qq:
                    mv = [vec.load(_gep(b, mbuf, _mul(b, _add(b, _mul(b, _add(
                        b, _mul(b, i64(xi), mp), m), qb), qq), L))) for xi in range(16)]
                    tm = [[wino.lin(b, wino.AT[i], [mv[r * 4 + c] for r in range(4)])
                           for c in range(4)] for i in range(2)]
                    y = [[wino.lin(b, wino.AT[j], tm[i]) for j in range(2)] for i in range(2)]
                    q = _add(b, q0, qq)
                    if w.flat:
                        _store_tiles(b, w, y, o, ch, q)
                    else:
                        th, vr = b.udiv(q, i64(w.qv)), b.urem(q, i64(w.qv))
                        col = _mul(b, vr, 2 * L)
                        for a in range(2):
                            oh = _add(b, _mul(b, th, 2), i64(a))
                            both = b.shuffle_vector(y[a][0], y[a][1], inter)
                            vals = [b.shuffle_vector(both, undef2, hv) for hv in halves]
                            row = _gep(b, o, _add(b, _mul(b, ch, w.OH * w.OW),
                                                    _mul(b, oh, w.OW), col))
                            dsts = [row, _gep(b, row, i64(L))]

                            def put(masks: list, vals: list = vals, dsts: list = dsts) -> None:
                                for val, dst, mk in zip(vals, dsts, masks):
                                    if mk is not None:
                                        b.call(vec.mstore, [val, dst, mk])

                            def store_row() -> None:
                                full = [vec.const_mask(L)] * 2
                                if tail == 2 * L:
                                    put(full)
                                    return
                                ends = [vec.const_mask(min(tail, L)),
                                        vec.const_mask(tail - L) if tail > L else None]
                                if w.qv == 1:
                                    put(ends)
                                    return
                                with b.if_else(b.icmp_signed("==", vr, i64(w.qv - 1))) as (
                                        then, otherwise):
                                    with then:
                                        put(ends)
                                    with otherwise:
                                        put(full)

                            if a == 1 and w.OH % 2:
                                with b.if_then(b.icmp_signed("<", oh, i64(w.OH))):
                                    store_row()
                            else:
                                store_row()

    # this part's images (``part_images``): an odd batch's last image with half of its
    # tile blocks to each part
    def zero_grids() -> None:
        _zero_fill(b, grid, w.grid_elems, elt)
        if w.flat:  # the lanes past the last tile stay zero
            _zero_fill(b, tiles, w.tiles_elems, elt)

    for im in part_images(task, out, nimg, zero_grids):
        image(im.nb, im.o, im.ni, im.split(i64(nblocks)))
    task.finish()



def _build_tiles(b: ir.IRBuilder, w: Wino, d: ir.Value, grid: ir.Value) -> None:
    """Flat mode: ``D[(r, c)][s][tile]``, element ``(r, c)`` of every 4x4 input tile with
    the tiles in row-major order, copied from the phase grids (row ``th + r // 2`` of phase
    ``(r % 2, c % 2)`` holds that element of tile row ``th``'s tiles, contiguous)."""
    ql = w.Q * w.lanes
    with for_range(b, i64(0), i64(w.S), name="ds") as s:
        with for_range(b, i64(0), i64(w.TH), name="dth") as th:
            for r in range(4):
                for c in range(4):
                    sp = _add(b, i64(((r % 2) * 2 + c % 2) * w.phase_elems + c // 2),
                              _mul(b, s, w.hg * w.wg), _mul(b, _add(b, th, i64(r // 2)), w.wg))
                    dp = _add(b, i64((r * 4 + c) * w.S * ql), _mul(b, s, ql),
                              _mul(b, th, w.TW))
                    for tw in range(w.TW):
                        b.store(b.load(_gep(b, grid, _add(b, sp, i64(tw)))),
                                _gep(b, d, _add(b, dp, i64(tw))))


def _store_tiles(b: ir.IRBuilder, w: Wino, y: list, out: ir.Value, ch: ir.Value,
                 q: ir.Value) -> None:
    """Flat mode: lane ``l`` of ``y[a][c]`` is output ``(2*th + a, 2*tw + c)`` of tile
    ``q*lanes + l``; lanes past the last tile, and rows or columns past an odd edge, are
    not stored."""
    base = _mul(b, ch, w.OH * w.OW)
    for lane in range(w.lanes):
        t = _add(b, _mul(b, q, w.lanes), i64(lane))
        with b.if_then(b.icmp_signed("<", t, i64(w.TH * w.TW))):
            th, tw = b.udiv(t, i64(w.TW)), b.urem(t, i64(w.TW))
            for a in range(2):
                for c in range(2):
                    oh = _add(b, _mul(b, th, 2), i64(a))
                    ow = _add(b, _mul(b, tw, 2), i64(c))
                    v = b.extract_element(y[a][c], ir.Constant(I32, lane))
                    dst = _gep(b, out, _add(b, base, _mul(b, oh, w.OW), ow))
                    wino.store_output(b, v, dst, a, c, oh, ow, w.OH, w.OW)


def winograd_in_float32(n: Node, wide: bool) -> bool:
    """Whether conv node ``n`` (bf16 operands) would run as Winograd F(2x2, 3x3) if its
    operands were float32 (``codegen.matmul.bf16_native``: where only AVX512-BF16 is there,
    those convolutions are faster in float32 than as bf16 products)."""
    f32 = Node(n.op, tuple(Node(x.op, (), x.shape, dt.float32, {}) for x in n.inputs),
               n.shape, dt.float32, n.attrs)
    if n.op == "conv2d_weight_grad":
        return wino_wgrad.plan(f32, wide) is not None
    return wino_gemm.plan(f32, wide) is not None or winograd(f32, wide) is not None


def describe(n: Node, wide: bool) -> str | None:
    """For ``ir("fused")`` and ``graphc dump``: which of this module's kernels runs float conv
    node ``n``, in the order ``kernel`` tries them, with its layout and register tile (the
    batched and bf16 paths describe themselves first: ``codegen.matmul.describe``). From the
    node alone: the one choice made at emission from operand strides (a weight gradient of
    the position-vector form whose ``dY`` rows are not contiguous takes the direct loops) is
    described as planned."""
    if n.op not in OPS or not n.dtype.is_float:
        return None
    p = problem(n, wide)
    sp = None if p is not None else strided_igrad(n, wide)
    if sp is not None:
        t, _ = _igrad_layout(sp, wide)
        tile = (f"{t.rm} positions x {t.nv} channel vectors (the weight in panels of "
                f"{t.nv * sp.lanes} channels)" if _igrad_by_channels(sp)
                else f"{t.rm} channels x {t.nv} position vectors")
        empty = sum(1 for ph in sp.phases if not ph.taps)
        zeros = f" ({empty} that no tap reaches: zeros)" if empty else ""
        return (f"conv input grad: {len(sp.phases)} stride-1 phase GEMMs{zeros} per image "
                f"over one zero-bordered dY grid, register tiles of {tile}")
    wg = winograd(n, wide)
    if wg is not None:
        t = wg.tile(wide)
        lay = ("a tile-major copy (rows of fewer tiles than a vector)" if wg.flat
               else "2x2 phase grids")
        what = "conv input grad" if wg.flip else "conv"
        return (f"{what}: Winograd F(2x2, 3x3) per image from {lay}, blocks of "
                f"{wg.block(wide)} tile vectors, register tiles of {t.rm} channels x {t.nv} "
                f"tile vectors")
    if p is None:
        return "conv: direct loops"
    if n.op == "conv2d_weight_grad":
        if wgrad_by_channels(p):
            t = wgrad_channel_tile(p, wide)
            return (f"conv weight grad: implicit GEMM per image, dY transposed channels-last, "
                    f"register tiles of {t.rm} taps x {t.nv} channel vectors, "
                    f"{wgrad_block_rows(p, n.dtype.itemsize)} output rows a block")
        t = pick_tile(p.M, p.K, wide, max_nv=12, parts=2)
        return (f"conv weight grad: implicit GEMM over every image's grid, register tiles of "
                f"{t.rm} channels x {t.nv} taps")
    what = "conv input grad" if n.op == "conv2d_input_grad" else "conv"
    return f"{what}: {_igemm_text(p, wide)}"


def _igemm_text(p: Problem, wide: bool) -> str:
    t, _ = igemm_layout(p, wide)
    grid = (f"{len(p.used_phases)} of {p.sh * p.sw} stride-phase grids"
            if p.sh * p.sw > 1 and not by_channels(p) else "a zero-bordered grid")
    tile = (f"{t.rm} positions x {t.nv} channel vectors (the weight in panels of "
            f"{t.nv * p.lanes} channels)" if by_channels(p)
            else f"{t.rm} channels x {t.nv} position vectors")
    return f"implicit GEMM per image from {grid}, register tiles of {tile}"


def kernel(fallback: Callable[[Any], None]) -> Callable[[Any], None]:
    """The kernel for a conv op: the implicit GEMM when it applies, else
    ``fallback`` (the direct loops), which debug builds always use for their bounds checks."""

    def emit(k: Any) -> None:
        if conv_bf16.emit(k, bf16_features()):  # bf16 operands: im2col + the bf16 GEMM
            return
        # the batched Winograd kernels are vector code written out too (transforms a
        # vector of channels at a time, register transposes, the GEMM called): the
        # ``tile`` level below. At O3 they were ResNet-18's largest modules; its cold
        # compile spent 0.35-0.9 CPU-s less in LLVM with them at ``tile`` (Zen 4), the
        # step's time unchanged
        p = None if getattr(k, "debug", False) else wino_igemm_batch(k.node, k.L.wide)
        if p is not None:  # by the batch: the implicit GEMM, or batched Winograd
            _emit_wino_or_igemm(k, p)
            k.level = "tile"
            return
        if wino_gemm.emit(k):  # 3x3 stride 1, 64+ channels: batched Winograd
            k.level = "tile"
            return
        if wino_wgrad.emit(k):  # 3x3 stride-1 weight gradients: Winograd on the GEMM
            k.level = "tile"
            return
        if conv_pointwise.emit(k):  # 1x1 stride 1: one GEMM per image, in place
            return
        if conv_gemm.emit(k):  # many channels on small maps: batched im2col + the GEMM
            return
        debug = getattr(k, "debug", False)
        p = None if debug else problem(k.node, k.L.wide)
        sp = None if debug or p is not None else strided_igrad(k.node, k.L.wide)
        # the implicit-GEMM and Winograd kernels are vector code written out (register
        # tiles, vector loads of the grids): compiled at the GEMM tiles' level, without
        # LLVM's module pipeline (``graphc.runtime.cpu._level_of``); the direct loops are
        # plain loops for LLVM to vectorise, at O3
        if sp is not None and _emit_strided_igrad(k, sp):
            k.level = "tile"
            return
        wg = None if debug else winograd(k.node, k.L.wide)
        if wg is not None and _emit_winograd(k, wg):
            k.level = "tile"
            return
        if p is not None:
            done = (_emit_wgrad(k, p) if k.node.op == "conv2d_weight_grad"
                    else _emit_igemm(k, p))
            if done:
                k.level = "tile"
                return
        fallback(k)

    emit.__doc__ = fallback.__doc__
    return emit


# multiply-adds a batch must save (per pair of channels) for batched Winograd's filter
# transform, 16 planes of U written and read per call, to pay: below, the implicit GEMM
# runs (``wino_igemm_batch``). Measured on Zen 4, one thread, 512 -> 512 on 7x7 maps (185
# saved per image), GFLOP/s of the direct sums, Winograd against the channel-vector
# implicit GEMM: forward batch 1 50 / 79, batch 2 74 / 95, batch 4 105 / 101, batch 8
# 128 / 102; on 14x14 (980 saved per image) Winograd won from batch 1 (146 / 104)
WINO_MIN_SAVED = 512


def wino_igemm_batch(n: Node, wide: bool) -> Problem | None:
    """The implicit GEMM of a conv node that batched Winograd runs (``wino_gemm``) where
    small batches run it instead (``_emit_wino_or_igemm``), or None. Forward and input
    gradient, on channel vectors (the small maps with many channels where the filter
    transform is most of the work at batch 1: ResNet's last stage)."""
    if n.op == "conv2d_weight_grad" or wino_gemm.plan(n, wide) is None:
        return None
    p = problem(n, wide)
    if p is None or not by_channels(p) or wino_min_batch(p) <= 1:
        return None
    return p


def wino_min_batch(p: Problem) -> int:
    """The smallest batch that batched Winograd runs for ``p`` (3x3 stride 1): the
    multiply-adds it saves per image and pair of channels, ``9 * OH * OW`` against ``16``
    per 2x2 tile, reach ``WINO_MIN_SAVED``."""
    saved = 9 * p.OH * p.OW - 16 * (-(-p.OH // 2)) * (-(-p.OW // 2))
    return -(-WINO_MIN_SAVED // max(saved, 1))


def describe_batch_choice(n: Node, wide: bool) -> str | None:
    """``describe`` for a convolution whose kernel picks its path by the batch."""
    p = wino_igemm_batch(n, wide)
    if p is None:
        return None
    return (f"{wino_gemm.describe(n, wide)}; below {wino_min_batch(p)} images: the "
            f"{_igemm_text(p, wide)}")


def _emit_wino_or_igemm(k: Any, p: Problem) -> None:
    """Both kernels in one, chosen by the batch (``wino_min_batch``). The implicit GEMM's
    branch writes the whole result and the epilogue, if any, runs over it at the end, as
    after batched Winograd (the kernel has one form of epilogue)."""
    b = k.b
    nimg = k.sym(k.node.shape[0])
    small = b.icmp_signed("<", nimg, i64(wino_min_batch(p)))
    epi = k.epilogue
    with b.if_else(small) as (direct, wino):
        with direct:
            k.epilogue = None
            try:
                done = _emit_igemm(k, p)
            finally:
                k.epilogue = epi
            assert done, "the implicit GEMM reads both operands through strides"
        with wino:
            done = wino_gemm.emit(k)
            assert done


def unit_stride_operands(n: Node, wide: bool) -> tuple[int, ...]:
    """The operands read as row vectors (``Kernel.unit_stride``): ``dY`` of a weight
    gradient on position-vector tiles (``_wgrad_tiles`` loads its rows as vectors; the
    channel-vector form and the grids read through any strides)."""
    if n.op != "conv2d_weight_grad" or not n.dtype.is_float:
        return ()
    p = problem(n, wide)
    return (1,) if p is not None and not wgrad_by_channels(p) else ()


KERNEL = register(Kernel("conv", OPS, kernel(lambda k: DIRECT[k.node.op](k)),
                         workspace=workspace_bytes, dense_operands=True,
                         unit_stride=unit_stride_operands))

__all__ = ["Problem", "problem", "StridedIgrad", "strided_igrad", "workspace_bytes", "kernel",
           "describe",
           "pick_tile", "OPS", "KERNEL"]
