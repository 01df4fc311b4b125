"""Weight gradients of 3x3 stride-1 convolutions as Winograd F(2x2, 3x3), the 16 products
on the float GEMM.

The forward of a tile is ``Y = A^T (U * V) A`` with ``U = G g G^T`` the transformed filter
and ``V = B^T d B`` the transformed 4x4 input tile (``codegen.winograd``). ``Y`` is linear in
``U``, so the gradient of a filter is

    dg = G^T (sum over tiles of (A dY A^T) * V) G

with ``dY`` the tile's 2x2 block of the output gradient: per position ``xi`` of the 4x4
transformed tiles, one product ``dU[xi] = Md[xi] @ V[xi]^T`` (result channels x tiles
times tiles x source channels), summed over the batch. That is 16 multiply-adds per 2x2
outputs and channel pair where the direct weight gradient takes 36 (2.25x fewer), as in
oneDNN's Winograd backward-weights kernels.

Layout. The products run over the tiles (their K), so both transformed operands keep the
*channels* contiguous: ``V[xi][t][s]`` and ``Md[xi][t][m]``, channel counts rounded up to a
vector (``Sp``, ``Mp``). Each image is first copied channels-last into zero-bordered grids
(``X`` padded by the convolution's padding, ``dY`` past an odd edge by zeros), so every
transform reads and writes whole vectors of channels: 16 vector loads, the additions and 16
vector stores per tile and vector of channels, where the lanes-over-tiles transforms of the
forward kernels need shuffles. ``Md`` is the GEMM's A read in place (contiguous columns),
``V`` its row-major B.

Threads and blocks. The tiles go a *block* at a time (whole images, or rows of one image
when an image's tiles are many), the block's ``V`` and ``Md`` sized to stay in L2 between
the transforms that write them and the products that read them. Two modes:

- *a dU per thread* (``dU``, 16 times the weight, fits L2): the two threads take halves of
  the batch (``KernelTask``'s parts), each with its own grids, blocks and ``dU``, and run
  each block's 16 products as single-threaded GEMMs. Splitting the images rather than each
  GEMM: products of few channels (16 x 16 results) do not split well, and the transforms
  then scale too (two threads, 128 -> 128 channels on 8x8 maps: 280 -> 304
  GFLOP/s-equivalent; 16 -> 16 on 64x64: 82 -> 118). A batch of one image runs on one
  thread.
- *shared* (larger weights): one ``dU``; per block the two threads transform halves of its
  images (or tile rows) into their own grids and the shared ``V`` and ``Md``, and the
  products split over the threads like any GEMM. (256 -> 256 channels on 8x8 maps, batch
  32: 23.5 -> 12.8 ms on one Zen 4 core, 11.9 -> 6.9 ms on two; 512 -> 512 on 4x4:
  24.9 -> 13.8 and 12.4 -> 7.5 ms.)

A block's products go to ``tmp`` and are added to ``dU`` (in the shared mode the first
block's go to ``dU`` itself). The final ``G^T dU G`` splits the result channels. The parts
are the same whether one thread runs both or two run one each, so results do not depend on
the thread count.

Values are the direct sums up to rounding (the transforms only add, subtract and halve;
float32 errs about half as much as PyTorch's direct sums against float64, measured);
non-finite inputs give non-finite gradients.

Which weight gradients (``plan``): 3x3, stride 1, no dilation, one group, padding at most 2,
float32 or float64, static sizes but the batch, at least ``MIN_CHANNELS`` source and result
channels, outside debug builds, when ``options.WINOGRAD`` and ``options.WINOGRAD_WGRAD`` are
on.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt

from . import options
from . import winograd as wino
from .abi import ALIGN, align
from .conv_bf16 import (
    Geometry,
    _at,
    _gep,
    _lin,
    _memset0,
    _Operand,
    area_offsets,
    carve,
    conv_geometry,
)
from .gemm import choose_tile, emit_gemm_call, workspace_bytes
from .hostinfo import current_caches
from .llvm_util import I8, I8P, I32, for_range, i64, mem_type
from .parallel import CONV_PAR_MIN_MACS, KernelTask, is_odd
from .vecops import V, transpose_block

OPS = ("conv2d_weight_grad",)
MIN_CHANNELS = 16  # fewer source or result channels: the direct kernel (measured, see RESULTS)
MIN_TILES = 256  # tiles a block has at least (the products' K; fewer and C's loads and
# stores dominate them: 128 -> 128 channels on 8x8 maps 3.6 ms with blocks of 32, 3.1 ms with
# 256, one Zen 4 core)

# G^T's rows: column ``k`` of G, applied to the four transformed positions
GT = tuple(tuple(wino.G[i][k] for i in range(4)) for k in range(3))
# A's rows (A = (A^T)^T): element i of A g for a 2-vector g
A = tuple(tuple(wino.AT[a][i] for a in range(2)) for i in range(4))


class TileBlocks:
    """Blocks of 2x2 tiles (``TH x TW`` an image, ``TT`` in all) and the channels-last
    ``V``/second operand they fill, ``Sp`` and ``Mp`` channels a tile of ``itemsize``-byte
    elements; shared with the forward's ``codegen.wino_gemm.View``. ``shared``: one block
    at a time for both threads (else each thread its own half of the batch)."""

    def __init__(self, S: int, M: int, rows: int, cols: int, lanes: int,  # noqa: N803
                 itemsize: int) -> None:
        """``S`` source and ``M`` result channels, the tiles covering a ``rows x cols``
        result map (its grid: every tile's rows), ``lanes`` a vector."""
        self.S, self.M, self.L, self.itemsize = S, M, lanes, itemsize
        self.Sp, self.Mp = -(-S // lanes) * lanes, -(-M // lanes) * lanes
        self.TH, self.TW = -(-rows // 2), -(-cols // 2)
        self.TT = self.TH * self.TW  # tiles an image
        self.GH, self.GW = 2 * self.TH + 2, 2 * self.TW + 2
        # 16 of the weight's size (U, dU) past L2: the products are large, the two threads
        # share each block and split them; else each thread takes half of the images, with
        # its own blocks and single-threaded products (see the module docstring)
        self.shared = 16 * S * M * itemsize > current_caches().l2

    def blocks(self) -> tuple[int, int]:
        """``(images, tile rows)`` a block of tiles takes: as many tiles as keep its ``V``
        and ``Md`` within half of L2 (the products read them right after the transforms
        wrote them), but ``MIN_TILES`` at least; whole images where one fits, else rows of
        one image. (Many channels, the shared mode: 256 -> 256 channels on 8x8 maps and
        512 -> 512 on 4x4 ran as fast with blocks of 256 tiles as with 512 or 1024, and
        with V and Md capped at 8, 16 or 32 MB; the smallest is taken.)"""
        per_tile = 16 * self.itemsize * (self.Sp + self.Mp)
        tiles = max(MIN_TILES, current_caches().l2 // 2 // per_tile)
        if self.TT > tiles:
            return 1, max(1, tiles // self.TW)
        return tiles // self.TT, self.TH

    def block_tiles(self) -> int:
        nb, rows = self.blocks()
        return nb * rows * self.TW

    def strides(self) -> tuple[int, int]:
        """Elements from one position ``xi`` of ``V`` and of ``Md`` to the next: a block's
        tiles and one cache line more. Without the line the 16 positions a tile's transform
        stores to lie a multiple of 4 KiB apart, in one set of L1 (8 ways): 16 -> 16
        channels on 64x64 maps spent 2.6 ms of 6.4 in the transforms, 1.0 ms with it (one
        Zen 4 core)."""
        t, pad = self.block_tiles(), 64 // self.itemsize
        return t * self.Sp + pad, t * self.Mp + pad

    def describe(self, what: str) -> str:
        """The path as ``ir("fused")`` and ``graphc dump`` show it."""
        nb, rows = self.blocks()
        blocks = f"{nb} images" if rows == self.TH else f"{rows} of {self.TH} tile rows of an image"
        how = "split over the threads" if self.shared else "on each thread's half of the batch"
        return (f"{what}: Winograd F(2x2, 3x3) channels-last, blocks of {blocks} "
                f"({self.block_tiles()} tiles), 16 gemm products a block {how}")

    def for_blocks(self, b: ir.IRBuilder, lo: ir.Value, hi: ir.Value, body: Any) -> None:
        """``body(img, r0, count, whole)`` for each block of images ``lo <= i < hi``:
        ``count`` whole images from ``img`` (``whole``, an i1), or ``count`` tile rows of
        image ``img`` from row ``r0``."""
        nb, rows = self.blocks()
        if rows == self.TH:
            with for_range(b, lo, hi, name="chunk", step=i64(nb)) as i0:
                body(i0, i64(0), _at_most(b, b.sub(hi, i0), nb), _bit(1))
            return
        with for_range(b, lo, hi, name="wi") as img:
            with for_range(b, i64(0), i64(self.TH), name="rows", step=i64(rows)) as r0:
                body(img, r0, _at_most(b, b.sub(i64(self.TH), r0), rows), _bit(0))

    def for_part_blocks(self, b: ir.IRBuilder, task: KernelTask, nimg: ir.Value,
                        body: Any) -> None:
        """``for_blocks`` for one thread part of ``task``, which gives each part its own
        blocks: half of the images of an even batch each (``KernelTask.split_even``), then,
        when the batch is odd, half of the last image's tile rows each (a batch of one
        would otherwise leave a thread idle), in blocks of at most a block's rows.

        One loop over both kinds of block, ``body`` emitted once: the ``n`` blocks of the
        part's whole images first, then those of its rows of the last image, each block's
        origin and size selected at run time (``conv_epilogue.part_images`` does the same
        for the other convolution kernels; the second copy of the body cost as much LLVM
        time as the first)."""
        nb, rows = self.blocks()
        lo, hi = task.split_even(nimg)
        odd = is_odd(b, nimg)
        last = b.sub(nimg, i64(1))
        rlo, rhi = task.split(i64(self.TH))
        # blocks of whole images (``rows == TH``: ``nb`` images a block) or of rows of them
        span = b.sub(hi, lo)
        per = -(-self.TH // rows)
        n = (b.udiv(b.add(span, i64(nb - 1)), i64(nb)) if rows == self.TH
             else b.mul(span, i64(per)))
        nodd = b.select(odd, b.udiv(b.add(b.sub(rhi, rlo), i64(rows - 1)), i64(rows)), i64(0))
        with for_range(b, i64(0), b.add(n, nodd), name="pblk") as i:
            mine = b.icmp_signed("<", i, n)
            if rows == self.TH:
                wimg = b.add(lo, b.mul(i, i64(nb)))
                wr0, wcount = i64(0), _at_most(b, b.sub(hi, wimg), nb)
            else:
                wimg = b.add(lo, b.udiv(i, i64(per)))
                wr0 = b.mul(b.urem(i, i64(per)), i64(rows))
                wcount = _at_most(b, b.sub(i64(self.TH), wr0), rows)
            or0 = b.add(rlo, b.mul(b.sub(i, n), i64(rows)))
            ocount = _at_most(b, b.sub(rhi, or0), rows)
            body(b.select(mine, wimg, last), b.select(mine, wr0, or0),
                 b.select(mine, wcount, ocount),
                 b.and_(mine, _bit(1 if rows == self.TH else 0)))

    def for_tiles(self, b: ir.IRBuilder, img: ir.Value, r0: ir.Value, lo: ir.Value,
                  hi: ir.Value, whole: ir.Value, fn: Any) -> None:
        """``fn(image, row0, row1, t0)`` for the part ``lo <= j < hi`` of a block of
        ``for_blocks``: its images ``img + j`` (tile rows 0..TH, tiles from ``j * TT``), or,
        ``whole`` false, the tile rows ``r0 + lo .. r0 + hi`` of ``img`` (tiles from
        ``lo * TW``) in one call. ``fn`` is emitted once, the two kinds selected at run
        time."""
        some = b.zext(b.icmp_signed("<", lo, hi), ir.IntType(64))
        end = b.select(whole, hi, b.add(lo, some))
        with for_range(b, lo, end, name="bi") as j:
            fn(b.select(whole, b.add(img, j), img), b.select(whole, i64(0), b.add(r0, lo)),
               b.select(whole, i64(self.TH), b.add(r0, hi)),
               b.select(whole, _lin(b, (j, self.TT)), _lin(b, (lo, self.TW))))

    def for_part_tiles(self, b: ir.IRBuilder, split: Any, img: ir.Value, r0: ir.Value,
                       count: ir.Value, whole: ir.Value, fn: Any) -> None:
        """``for_tiles`` over one thread part's share of a block (``split``: its task's
        ``split``): half of its images, or of its tile rows when it is rows of an image or
        a single whole image (a batch of one)."""
        one = b.and_(whole, b.icmp_signed("==", count, i64(1)))
        lo, hi = split(b.select(one, i64(self.TH), count))
        self.for_tiles(b, img, b.select(one, i64(0), r0), lo, hi, b.and_(whole, b.not_(one)),
                       fn)

    def splits(self, b: ir.IRBuilder, count: ir.Value, whole: ir.Value) -> ir.Value:
        """Whether ``for_part_tiles`` gives both parts work: two images or rows, or one
        whole image of two tile rows."""
        two = b.icmp_signed(">=", count, i64(2))
        return b.or_(b.and_(whole, _bit(1 if self.TH >= 2 else 0)), two)

    def tiles_of(self, b: ir.IRBuilder, count: ir.Value, whole: ir.Value) -> ir.Value:
        """The tiles of a block of ``count`` images or tile rows."""
        return b.mul(count, b.select(whole, i64(self.TT), i64(self.TW)))


def _bit(v: int) -> ir.Constant:
    """An i1 constant (``TileBlocks``' ``whole`` flags)."""
    return ir.Constant(ir.IntType(1), v)


def _at_most(b: ir.IRBuilder, x: ir.Value, n: int) -> ir.Value:
    return b.select(b.icmp_signed("<", x, i64(n)), x, i64(n))


class View(TileBlocks):
    """The weight gradient's sizes: ``S`` source channels on ``H x W`` (padded by ``ph,
    pw``), ``M`` result channels on ``OH x OW``, ``L`` lanes a vector."""

    def __init__(self, g: Geometry, lanes: int, itemsize: int) -> None:
        super().__init__(g.C, g.OC, g.OH, g.OW, lanes, itemsize)
        self.H, self.W, self.OH, self.OW = g.H, g.W, g.OH, g.OW
        self.ph, self.pw = g.ph, g.pw


def _lanes(n: Node, wide: bool) -> int:
    return (64 if wide else 32) // n.dtype.itemsize


def plan(n: Node, wide: bool = True) -> View | None:
    """The Winograd view of weight-gradient node ``n`` when this path runs it, else None."""
    if (not (options.WINOGRAD and options.WINOGRAD_WGRAD) or n.op not in OPS
            or n.dtype not in (dt.float32, dt.float64)
            or any(x.dtype is not n.dtype for x in n.inputs)):
        return None
    g = conv_geometry(n)
    if g is None or (g.KH, g.KW, g.sh, g.sw, g.dh, g.dw) != (3, 3, 1, 1, 1, 1):
        return None
    if not (0 <= g.ph <= 2 and 0 <= g.pw <= 2) or min(g.C, g.OC) < MIN_CHANNELS:
        return None
    if g.OH < 1 or g.OW < 1:
        return None
    return View(g, _lanes(n, wide), n.dtype.itemsize)


def _layout(n: Node, v: View, wide: bool) -> dict[str, int]:
    """One part's areas; each of the two parts has its own (``end`` bytes apart), but in
    the shared mode only the first part's GEMM area (twice the size: the GEMM's two
    threads), ``dU``, ``tmp``, ``V`` and ``Md`` are used."""
    it = n.dtype.itemsize
    t = v.block_tiles()
    vs, ms = v.strides()
    tile = choose_tile(v.S, wide, it)
    gemm = workspace_bytes(v.M, v.S, t, tile, it)
    areas = [("gemm", 2 * align(gemm) if v.shared else gemm),
             ("du", 16 * v.M * v.S * it), ("tmp", 16 * v.M * v.S * it),
             ("v", 16 * vs * it), ("md", 16 * ms * it),
             ("gx", v.GH * v.GW * v.Sp * it), ("gd", 4 * v.TT * v.Mp * it)]
    return area_offsets(areas)


def _part_bytes(n: Node, v: View, wide: bool) -> int:
    lay = _layout(n, v, wide)
    # the shared mode's second part: its grids only
    return lay["end"] - lay["gx"] if v.shared else lay["end"]


def workspace(n: Node, wide: bool) -> int:
    v = plan(n, wide)
    assert v is not None
    return ALIGN + _layout(n, v, wide)["end"] + _part_bytes(n, v, wide)


def describe(n: Node, wide: bool = True) -> str | None:
    v = plan(n, wide)
    return None if v is None else v.describe("conv weight grad")


def emit(k: Any) -> bool:
    """Fill conv kernel ``k`` with this path; False when it does not serve the node."""
    n = k.node
    if getattr(k, "debug", False):
        return False
    wide = k.L.wide
    v = plan(n, wide)
    if v is None:
        return False
    b = k.b
    it = n.dtype.itemsize
    elt = mem_type(n.dtype)
    lay = _layout(n, v, wide)
    parts = [carve(b, k.work, lay, elt)]
    second = _at(b, b.bitcast(parts[0]["gemm"], I8P), lay["end"], I8)
    parts.append({a: _at(b, second, off - lay["gx"] * v.shared, I8 if a == "gemm" else elt)
                  for a, off in lay.items() if a != "end" and (a in ("gx", "gd")
                                                               or not v.shared)})
    x, dy = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    nimg = k.sym(n.inputs[0].shape[0])
    if v.shared:
        _shared(k, v, lay, elt, parts, x, dy, nimg)
        dus = [parts[0]["du"]]
    else:
        names = ("gemm", "du", "tmp", "v", "md", "gx", "gd")
        task = KernelTask(k, "ww", [*x.values(), *dy.values(),
                                    *(p[a] for p in parts for a in names), nimg])
        tb = task.b
        area = {a: tb.select(task.first, task[parts[0][a]], task[parts[1][a]])
                for a in names}
        _part(task, v, lay, elt, area, x.in_task(task), dy.in_task(task), task[nimg])
        task.finish()
        macs = b.mul(nimg, i64(16 * v.M * v.S * v.TT))
        task.dispatch(b.icmp_signed(">=", macs, i64(CONV_PAR_MIN_MACS)))
        dus = [parts[0]["du"], parts[1]["du"]]
    with b.if_else(b.icmp_signed("<=", nimg, i64(0))) as (empty, some):
        with empty:  # no images: the gradient is zero
            _memset0(b, k.out, it * v.M * v.S * 9)
        with some:
            task = KernelTask(k, "wwg", [*dus, k.out])
            lo, hi = task.split(i64(v.M))
            _filters(task.b, v, [task[d] for d in dus], task[k.out], lo, hi)
            task.finish()
            task.dispatch(ir.Constant(ir.IntType(1), v.M * v.S >= 1 << 12))
    return True


def _products(b: ir.IRBuilder, k: Any, v: View, tile: Any, elt: ir.Type, area: dict,
              dst: ir.Value, tiles: ir.Value, work: ir.Value, work_bytes: int,
              run2: Any, alloca: Any) -> None:
    """``dst[xi] = Md[xi] @ V[xi]^T`` for the 16 positions, K = ``tiles``."""
    vs, ms = v.strides()
    with for_range(b, i64(0), i64(16), name="xi") as xi:
        emit_gemm_call(
            b, k.L.module, alloca, tile, elt,
            [_gep(b, area["md"], _lin(b, (xi, ms))), i64(1), i64(v.Mp),
             _gep(b, area["v"], _lin(b, (xi, vs))), i64(v.Sp), i64(1),
             _gep(b, dst, _lin(b, (xi, v.M * v.S))), i64(v.S),
             i64(v.M), i64(v.S), tiles],
            work, i64(work_bytes), run2)


def _part(task: KernelTask, v: View, lay: dict[str, int], elt: ir.Type, area: dict,
          x: _Operand, dy: _Operand, nimg: ir.Value) -> None:
    """One part's images (``TileBlocks.for_part_blocks``), a block of tiles at a time: the
    block's tiles into ``V`` and ``Md``, the 16 products into ``tmp``, added to the part's
    ``dU`` (zero for a part without images)."""
    b = task.b
    it = v.itemsize
    vec = V(b, b.module, elt, v.L)
    tile = choose_tile(v.S, task.k.L.wide, it)
    total = 16 * v.M * v.S
    _memset0(b, area["gx"], v.GH * v.GW * v.Sp * it)
    _memset0(b, area["gd"], 4 * v.TT * v.Mp * it)
    _memset0(b, area["du"], total * it)

    def block(img: ir.Value, r0: ir.Value, count: ir.Value, whole: ir.Value) -> None:
        v.for_tiles(b, img, r0, i64(0), count, whole,
                    lambda im, a, z, t: _tiles(b, v, vec, area, x, dy, im, a, z, t))
        _products(b, task.k, v, tile, elt, area, area["tmp"], v.tiles_of(b, count, whole),
                  b.bitcast(area["gemm"], I8P), align(lay["du"]), None, task.alloca)
        _accumulate(b, vec.vt, area["du"], area["tmp"], i64(0), i64(total // v.L))

    v.for_part_blocks(b, task, nimg, block)


def _shared(k: Any, v: View, lay: dict[str, int], elt: ir.Type, parts: list[dict],
            x: _Operand, dy: _Operand, nimg: ir.Value) -> None:
    """The shared mode: the whole batch a block at a time; per block, the two threads
    transform halves of its images (or of its tile rows), the 16 products split over the
    threads like any GEMM, the first block's into ``dU``, later ones' into ``tmp`` and
    added (the two threads taking halves)."""
    b = k.b
    it = v.itemsize
    area = parts[0]
    tile = choose_tile(v.S, k.L.wide, it)
    total = 16 * v.M * v.S
    gemm_bytes = align(workspace_bytes(v.M, v.S, v.block_tiles(), tile, it))
    grids = [(p["gx"], p["gd"]) for p in parts]
    for gx, gd in grids:
        _memset0(b, gx, v.GH * v.GW * v.Sp * it)
        _memset0(b, gd, 4 * v.TT * v.Mp * it)

    def block(img: ir.Value, r0: ir.Value, count: ir.Value, whole: ir.Value) -> None:
        """The block from image ``img`` (``count`` images from it, or ``count`` tile rows
        of it from row ``r0``): transforms, products, accumulation."""
        first = b.icmp_signed("==", b.or_(img, r0), i64(0))
        task = KernelTask(k, "wwt", [*x.values(), *dy.values(), *grids[0], *grids[1],
                                     area["v"], area["md"], img, r0, count])
        tb = task.b
        vec = V(tb, tb.module, elt, v.L)
        tarea = {"gx": tb.select(task.first, task[grids[0][0]], task[grids[1][0]]),
                 "gd": tb.select(task.first, task[grids[0][1]], task[grids[1][1]]),
                 "v": task[area["v"]], "md": task[area["md"]]}
        xo, do = x.in_task(task), dy.in_task(task)
        v.for_part_tiles(tb, task.split, task[img], task[r0], task[count], whole,
                         lambda im, a, z, t: _tiles(tb, v, vec, tarea, xo, do, im, a, z, t))
        task.finish()
        task.dispatch(v.splits(b, count, whole))
        dst = b.select(first, area["du"], area["tmp"])
        _products(b, k, v, tile, elt, area, dst, v.tiles_of(b, count, whole), area["gemm"],
                  gemm_bytes, k.L.run2_global(), k.alloca)
        with b.if_then(b.not_(first)):
            task = KernelTask(k, "wwa", [area["du"], area["tmp"]])
            tb = task.b
            lo, hi = task.split(i64(total // v.L))
            _accumulate(tb, ir.VectorType(elt, v.L), task[area["du"]], task[area["tmp"]],
                        lo, hi)
            task.finish()
            task.dispatch(ir.Constant(ir.IntType(1), total >= 1 << 15))

    v.for_blocks(b, i64(0), nimg, block)


def _accumulate(b: ir.IRBuilder, vt: ir.VectorType, du: ir.Value, tmp: ir.Value,
                lo: ir.Value, hi: ir.Value) -> None:
    """``du += tmp`` over vectors ``lo <= j < hi`` (``16 M S`` elements, a multiple of the
    lanes): written as vector code, since the kernel is compiled without LLVM's loop
    vectoriser (the ``tile`` level, ``codegen.conv.kernel``)."""
    al = 4 if isinstance(vt.element, ir.FloatType) else 8
    with for_range(b, lo, hi, name="acc") as j:
        at = _lin(b, (j, vt.count))
        p = _vec(b, vt, du, at)
        b.store(b.fadd(b.load(p, align=al), b.load(_vec(b, vt, tmp, at), align=al)), p,
                align=al)


def _tiles(b: ir.IRBuilder, v: View, vec: V, area: dict, x: _Operand, dy: _Operand,
           img: ir.Value, r0: ir.Value, r1: ir.Value, t0: ir.Value) -> None:
    """Tile rows ``r0 <= th < r1`` of image ``img``: the rows of ``X`` and ``dY`` they
    read copied into the grids, then transformed into ``V`` and ``Md`` from ``t0``."""
    h0 = b.sub(_lin(b, (r0, 2)), i64(v.ph))
    h1 = b.sub(_lin(b, (r1, 2)), i64(v.ph - 2))
    h0 = b.select(b.icmp_signed("<", h0, i64(0)), i64(0), h0)
    h1 = b.select(b.icmp_signed(">", h1, i64(v.H)), i64(v.H), h1)
    fill(b, vec, x.ptr, x.ir, img, v.S, v.Sp, h0, h1, v.W, area["gx"],
          lambda h: _lin(b, (b.add(h, i64(v.ph)), v.GW * v.Sp), (i64(v.pw), v.Sp)))
    d1 = _lin(b, (r1, 2))
    d1 = b.select(b.icmp_signed(">", d1, i64(v.OH)), i64(v.OH), d1)
    fill(b, vec, dy.ptr, dy.ir, img, v.M, v.Mp, _lin(b, (r0, 2)), d1, v.OW, area["gd"],
          lambda h: _lin(b, (h, 2 * v.TW * v.Mp)))
    _transform(b, v, vec.vt, area, r0, r1, t0)


def fill(b: ir.IRBuilder, vec: V, ptr: ir.Value, strides: list[ir.Value], img: ir.Value,
         C: int, Cp: int, h0: ir.Value, h1: ir.Value, cols: int, grid: ir.Value,
         row_at: Any) -> None:
    """Element ``(c, h, w)`` of image ``img`` of the 4-d source at ``ptr`` (``strides``;
    ``C x rows x cols`` an image) to ``grid[row_at(h) + w * Cp + c]``, for the rows
    ``h0 <= h < h1``; the channels ``C <= c < Cp`` of those positions are zero. Where the
    source's rows are contiguous, in ``L x L`` blocks (``L`` channels of ``L`` columns, the
    last block of a row loaded under a mask, channels past ``C`` read as zero) transposed in
    registers: stored element by element, each store would go to a new cache line (30-40%
    of a 16- or 32-channel weight gradient at 32x32-64x64 on a Xeon). Also the channel-vector
    weight gradient's transposed ``dY`` (``codegen.conv``)."""
    s0, s1, s2, s3 = strides
    if not (isinstance(s3, ir.Constant) and s3.constant == 1):
        if Cp > C:
            with for_range(b, h0, h1, name="fzh") as h:
                with for_range(b, i64(0), i64(cols), name="fzw") as w:
                    at = b.add(row_at(h), _lin(b, (w, Cp)))
                    with for_range(b, i64(C), i64(Cp), name="fzc") as c:
                        b.store(ir.Constant(vec.elt, 0.0), _gep(b, grid, b.add(at, c)))
        with for_range(b, i64(0), i64(C), name="fc") as c:
            with for_range(b, h0, h1, name="fh") as h:
                at = _lin(b, (img, s0), (c, s1), (h, s2))
                dst = b.add(row_at(h), c)
                with for_range(b, i64(0), i64(cols), name="fw") as w:
                    val = b.load(_gep(b, ptr, b.add(at, _lin(b, (w, s3)))))
                    b.store(val, _gep(b, grid, b.add(dst, _lin(b, (w, Cp)))))
        return
    L = vec.lanes
    with for_range(b, i64(0), i64(Cp // L), name="fcb") as cb:
        c0 = _lin(b, (cb, L))
        chans = []
        for i in range(L):  # past C: the last channel's row, zeroed
            c = b.add(c0, i64(i))
            real = b.icmp_signed("<", c, i64(C))
            c = b.select(real, c, i64(C - 1))
            chans.append((_gep(b, ptr, _lin(b, (img, s0), (c, s1))), real))
        with for_range(b, h0, h1, name="fh") as h:
            roff = _lin(b, (h, s2))
            dst = b.add(row_at(h), c0)

            def block(w0: ir.Value, n: int) -> None:
                vs = []
                for row, real in chans:
                    ptr = _gep(b, row, b.add(roff, w0))
                    val = (vec.load(ptr) if n == L else
                           b.call(vec.mload, [ptr, vec.const_mask(n), vec.zero]))
                    vs.append(b.select(real, val, vec.zero))
                for j, t in enumerate(transpose_block(b, vs)[:n]):
                    at = b.add(dst, _lin(b, (b.add(w0, i64(j)), Cp)))
                    b.store(t, b.bitcast(_gep(b, grid, at), vec.vt.as_pointer()), align=4)

            if cols // L:
                with for_range(b, i64(0), i64(cols // L), name="fwb") as wb:
                    block(_lin(b, (wb, L)), L)
            if cols % L:
                block(i64(cols // L * L), cols % L)


def _vec(b: ir.IRBuilder, vt: ir.VectorType, base: ir.Value, at: ir.Value) -> ir.Value:
    return b.bitcast(_gep(b, base, at), vt.as_pointer())


def _transform(b: ir.IRBuilder, v: View, vt: ir.VectorType, area: dict,
               th0: ir.Value, th1: ir.Value, t0: ir.Value) -> None:
    """The grids' tile rows ``th0 <= th < th1``, tile ``(th, tw)`` at
    ``t = t0 + (th - th0) * TW + tw``: ``V[xi][t][s] = (B^T d B)[xi]`` and
    ``Md[xi][t][m] = (A g A^T)[xi]``, a vector of channels at a time."""
    gx, gd, vbuf, mbuf = area["gx"], area["gd"], area["v"], area["md"]
    vs, ms = v.strides()
    L, al = v.L, 4 if isinstance(vt.element, ir.FloatType) else 8
    with for_range(b, th0, th1, name="th") as th:
        with for_range(b, i64(0), i64(v.TW), name="tw") as tw:
            t = b.add(t0, _lin(b, (b.sub(th, th0), v.TW), (tw, 1)))
            input_tile(b, vt, gx, vbuf, vs, v.GW, v.Sp, th, tw, t)
            with for_range(b, i64(0), i64(v.Mp // L), name="mv") as mv:
                at = _lin(b, (th, 4 * v.TW * v.Mp), (tw, 2 * v.Mp), (mv, L))
                g = [[b.load(_vec(b, vt, gd, b.add(at, i64((a * 2 * v.TW + c) * v.Mp))),
                             align=al) for c in range(2)] for a in range(2)]
                tmp = [[wino.lin(b, A[j], g[a]) for j in range(4)] for a in range(2)]
                for i in range(4):
                    for j in range(4):
                        val = wino.lin(b, A[i], [tmp[a][j] for a in range(2)])
                        dst = _lin(b, (i64(i * 4 + j), ms), (t, v.Mp), (mv, L))
                        b.store(val, _vec(b, vt, mbuf, dst), align=al)


def input_tile(b: ir.IRBuilder, vt: ir.VectorType, gx: ir.Value, vbuf: ir.Value, vs: int,
               GW: int, Sp: int, th: ir.Value, tw: ir.Value, t: ir.Value) -> None:  # noqa: N803
    """``V[xi][t][s] = (B^T d B)[xi]`` of the 4x4 tile at rows ``2 th``, columns ``2 tw`` of
    a channels-last grid ``gx`` (rows of ``GW`` positions of ``Sp`` channels), a vector of
    channels at a time; ``vs``: elements from one ``xi`` to the next (``codegen.wino_gemm``
    transforms its inputs with it too)."""
    L = vt.count
    al = 4 if isinstance(vt.element, ir.FloatType) else 8
    with for_range(b, i64(0), i64(Sp // L), name="sv") as sv:
        at = _lin(b, (th, 2 * GW * Sp), (tw, 2 * Sp), (sv, L))
        d = [[b.load(_vec(b, vt, gx, b.add(at, i64((r * GW + c) * Sp))), align=al)
              for c in range(4)] for r in range(4)]
        tmp = [[wino.lin(b, wino.BT[j], d[r]) for j in range(4)] for r in range(4)]
        for i in range(4):
            for j in range(4):
                val = wino.lin(b, wino.BT[i], [tmp[r][j] for r in range(4)])
                dst = _lin(b, (i64(i * 4 + j), vs), (t, Sp), (sv, L))
                b.store(val, _vec(b, vt, vbuf, dst), align=al)


def _filters(b: ir.IRBuilder, v: View, dus: list[ir.Value], out: ir.Value, lo: ir.Value,
             hi: ir.Value) -> None:
    """``dW[m][s] = G^T dU[.][m][s] G`` for the result channels ``lo <= m < hi``, ``dU``
    the sum of ``dus`` (the two parts' or the shared one).

    A vector of source channels at a time: the nine taps of ``L`` filters are nine vectors,
    interleaved by one shuffle into the ``9 L`` contiguous elements those filters occupy
    and stored at once (the form LLVM's loop vectoriser gives a stride-9 store group; the
    kernel is compiled without it, at the ``tile`` level). Element by element at that level,
    the 128 x 128 weight gradients of ResNet-18's last stage took 10-12 % longer than at O3
    (Zen 4). Channels past the last whole vector go one at a time, the same sums in the same
    order, so every element is the same as the vector path would give."""
    L = v.L
    elt = dus[0].type.pointee
    vt = ir.VectorType(elt, L)
    al = 4 if isinstance(elt, ir.FloatType) else 8
    nvec = v.S // L

    def taps(load: Any, at: ir.Value) -> list[ir.Value]:
        """The nine taps ``kh * 3 + kw`` of the filters from ``dU``'s element ``at``."""
        u = [[load(b.add(at, i64((i * 4 + j) * v.M * v.S))) for j in range(4)]
             for i in range(4)]
        e = [[wino.lin(b, GT[kw], u[i]) for kw in range(3)] for i in range(4)]
        return [wino.lin(b, GT[kh], [e[i][kw] for i in range(4)])
                for kh in range(3) for kw in range(3)]

    def load(at: ir.Value) -> ir.Value:
        vals = [b.load(_gep(b, du, at)) for du in dus]
        return vals[0] if len(vals) == 1 else b.fadd(*vals)

    def vload(at: ir.Value) -> ir.Value:
        vals = [b.load(_vec(b, vt, du, at), align=al) for du in dus]
        return vals[0] if len(vals) == 1 else b.fadd(*vals)

    with for_range(b, lo, hi, name="fm") as m:
        if nvec:
            with for_range(b, i64(0), i64(nvec), name="fsv") as sv:
                at = _lin(b, (m, v.S), (sv, L))
                vals = taps(vload, at)
                wide = _concat(b, vals)
                mask = [q * L + lane for lane in range(L) for q in range(9)]
                inter = b.shuffle_vector(wide, ir.Constant(wide.type, ir.Undefined),
                                         ir.Constant(ir.VectorType(I32, 9 * L), mask))
                dst = _gep(b, out, _lin(b, (at, 9)))
                b.store(inter, b.bitcast(dst, inter.type.as_pointer()), align=al)
        if v.S % L:
            with for_range(b, i64(nvec * L), i64(v.S), name="fs") as s_:
                at = _lin(b, (m, v.S), (s_, 1))
                base = _lin(b, (at, 9))
                for q, val in enumerate(taps(load, at)):
                    b.store(val, _gep(b, out, b.add(base, i64(q))))


def _concat(b: ir.IRBuilder, vals: list[ir.Value]) -> ir.Value:
    """The vectors ``vals`` (equal types) end to end, as one vector of their total lanes
    padded to a power of two of vectors (the padding undefined)."""
    n = vals[0].type.count
    undef = ir.Constant(vals[0].type, ir.Undefined)
    level = list(vals)
    while len(level) & (len(level) - 1):
        level.append(undef)
    while len(level) > 1:
        width = level[0].type.count
        mask = ir.Constant(ir.VectorType(I32, 2 * width), list(range(2 * width)))
        level = [b.shuffle_vector(level[i], level[i + 1], mask)
                 for i in range(0, len(level), 2)]
    assert level[0].type.count >= n * len(vals)
    return level[0]


__all__ = ["TileBlocks", "fill", "input_tile", "plan", "workspace", "describe", "emit", "View",
           "OPS", "MIN_CHANNELS", "MIN_TILES"]
