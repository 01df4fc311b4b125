"""3x3 stride-1 convolutions (forward and input gradient) as Winograd F(2x2, 3x3) over
blocks of tiles, channels-last, the 16 products on the float GEMM.

The Winograd kernel of ``codegen.conv`` transforms one image at a time with its vector lanes
over tiles and runs its 16 products from a packed copy of the transformed weight ``U`` (16
elements per filter). Once ``U`` is larger than L2 (256 -> 256 channels: 4 MB) every image
streams it from memory again; maps with fewer 2x2 tiles than a vector (ResNet-18's 4x4 last
stage) do not take it at all; and from 64 channels on its transforms (shuffles of tiles
across lanes) cost more than these. Here the tiles of a *block* (whole images, or rows of
one image) go through each product together, as Lavin & Gray's batched formulation (and
oneDNN's and NNPACK's Winograd kernels) do, with the channels contiguous as in
``codegen.wino_wgrad``:

1. ``U[xi][s][m] = (G g G^T)[xi]`` for every filter, once per call;
2. per image of the block, the source rows its tiles read copied channels-last into a
   zero-bordered grid (``L x L`` register transposes, ``wino_wgrad.fill``), and each 4x4
   input tile ``d`` transformed a vector of channels at a time into
   ``V[xi][t][s] = (B^T d B)[xi]`` (``wino_wgrad.input_tile``);
3. ``Mo[xi] = V[xi] @ U[xi]`` for the 16 ``xi``: ``[T, S] @ [S, M]`` products on the float
   GEMM, V read in place;
4. each tile's ``A^T Mo A`` (a vector of channels at a time) into a channels-last row
   buffer, transposed back in registers into the result's rows.

A block's ``V`` and ``Mo`` are sized to stay in L2 between the transforms and the products
(``wino_wgrad.MIN_TILES`` tiles at least), each ``xi``'s rows a cache line past a multiple of 4 KiB.
Two modes, as for the weight gradient: where ``U`` fits L2 each thread takes half of the
batch with its own grid, blocks and single-threaded products (small products do not split
well: 16 -> 16 channels on 64x64 maps took 21 ms on two threads with each product split,
2.2 ms this way); larger weights share each block, the two threads transforming halves of
it and splitting the products. Every value is computed by the same code on either thread,
so results do not depend on the thread count.

That is 16 multiply-adds per 2x2 outputs and source channel where the im2col product
(``codegen.conv_gemm``) takes 36. The input gradient is the same convolution of ``dY``
with the filters flipped and transposed, padded by ``2 - p``. Values are the direct sums up
to rounding (a few ulps), non-finite inputs give non-finite results (see ``codegen.conv``).

Which convolutions (``plan``): ``conv2d`` and ``conv2d_input_grad``, 3x3, stride 1, no
dilation, one group, padding at most 2, float32 or float64, static sizes but the batch,
outside debug builds, where ``U`` does not fit L2 or both channel counts are at least
``MIN_CHANNELS``, and ``options.WINOGRAD`` is on.
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
from .llvm_util import I8, I8P, for_range, i64, mem_type
from .parallel import CONV_PAR_MIN_MACS, KernelTask
from .vecops import V, transpose_block
from .wino_wgrad import TileBlocks, fill, input_tile

OPS = ("conv2d", "conv2d_input_grad")
# fewer source or result channels, and U within L2: ``codegen.conv``'s per-image Winograd
# kernel. Measured, batch 32, one / two Zen 4 cores, ms per forward (per-image -> here):
# 16 -> 16 on 64x64 4.5 -> 4.8 / 2.5 -> 2.2, 32 -> 32 on 32x32 3.7 -> 3.6 / 1.9 -> 2.0,
# 64 -> 64 on 16x16 4.0 -> 3.2 / 2.1 -> 1.5, 128 -> 128 on 8x8 3.7 -> 3.1 / 2.2 -> 1.7.
MIN_CHANNELS = 64


class View(TileBlocks):
    """The convolution as a stride-1 3x3 one from ``S`` source channels on an ``Hs x Ws``
    map padded by ``(qh, qw)`` to ``M`` result channels on ``Hd x Wd``; ``L`` lanes a
    vector, channel counts rounded up to vectors (``Sp``, ``Mp``)."""

    def __init__(self, n: Node, g: Geometry, lanes: int, itemsize: int) -> None:
        self.igrad = n.op == "conv2d_input_grad"
        if self.igrad:
            S, M = g.OC, g.C
            self.Hs, self.Ws, self.Hd, self.Wd = g.OH, g.OW, g.H, g.W
            self.qh, self.qw = 2 - g.ph, 2 - g.pw
        else:
            S, M = g.C, g.OC
            self.Hs, self.Ws, self.Hd, self.Wd = g.H, g.W, g.OH, g.OW
            self.qh, self.qw = g.ph, g.pw
        super().__init__(S, M, self.Hd, self.Wd, lanes, itemsize)

    @property
    def u_plane(self) -> int:
        """Elements from one position ``xi`` of ``U`` to the next: ``S`` rows of ``Mp`` and a
        cache line, so that the 16 rows the filter transform writes at once do not share
        one set of L1 (see ``strides``)."""
        return self.S * self.Mp + 64 // self.itemsize


def plan(n: Node, wide: bool = True) -> View | None:
    """The Winograd view of conv node ``n`` when this path runs it, else None."""
    if (not options.WINOGRAD or n.op not in OPS or n.dtype not in (dt.float32, dt.float64)
            or any(x.dtype is not n.dtype for x in n.inputs)):
        return None
    g = conv_geometry(n)
    if g is None or (g.KH, g.KW, g.sh, g.sw, g.dh, g.dw) != (3, 3, 1, 1, 1, 1):
        return None
    if not (0 <= g.ph <= 2 and 0 <= g.pw <= 2):
        return None
    it = n.dtype.itemsize
    v = View(n, g, (64 if wide else 32) // it, it)
    return v if v.shared or min(g.C, g.OC) >= MIN_CHANNELS else None


def _layout(n: Node, v: View, wide: bool) -> dict[str, int]:
    """``u`` and the first part's areas; the second part's (``part`` bytes on) are its own
    ``grid`` and ``ybuf`` in the shared mode, all of them otherwise."""
    it = n.dtype.itemsize
    t = v.block_tiles()
    vs, ms = v.strides()
    tile = choose_tile(v.M, wide, it)
    gemm = workspace_bytes(t, v.M, v.S, tile, it)
    lay = area_offsets([("u", 16 * v.u_plane * it),
                        ("gemm", 2 * align(gemm) if v.shared else gemm),
                        ("v", 16 * vs * it), ("mo", 16 * ms * it),
                        ("grid", v.GH * v.GW * v.Sp * it), ("ybuf", 4 * v.TW * v.Mp * it)])
    lay["part"] = lay["end"] - (lay["grid"] if v.shared else lay["gemm"])
    return lay


def workspace(n: Node, wide: bool) -> int:
    v = plan(n, wide)
    assert v is not None
    lay = _layout(n, v, wide)
    return ALIGN + lay["end"] + lay["part"]


def describe(n: Node, wide: bool = True) -> str | None:
    v = plan(n, wide)
    return None if v is None else v.describe("conv")


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
    elt = mem_type(n.dtype)
    lay = _layout(n, v, wide)
    names = ("gemm", "v", "mo", "grid", "ybuf")
    first = carve(b, k.work, {a: lay[a] for a in ("u", *names)}, elt)
    at = lay["end"] - lay["part"]  # the second part's areas: where the first part's start
    second = {a: (_at(b, b.bitcast(first["u"], I8P), lay[a] - at + lay["end"],
                      I8 if a == "gemm" else elt)
                  if not v.shared or a in ("grid", "ybuf") else first[a]) for a in names}
    parts = [first, second]
    src, w = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    # U, the two threads taking halves of the source channels
    task = KernelTask(k, "wgu", [*w.values(), first["u"]])
    lo, hi = task.split(i64(v.S))
    _transform_filters(task.b, v, w.in_task(task), task[first["u"]], lo, hi)
    task.finish()
    task.dispatch(ir.Constant(ir.IntType(1), v.S >= 2))
    nimg = k.sym(n.shape[0])
    if v.shared:
        _shared(k, v, elt, first, parts, src, nimg)
        return True
    task = KernelTask(k, "wgp", [*src.values(), first["u"], k.out, nimg,
                                 *(p[a] for p in parts for a in names)])
    tb = task.b
    area = {a: tb.select(task.first, task[parts[0][a]], task[parts[1][a]]) for a in names}
    area["u"] = task[first["u"]]
    _part(task, v, elt, area, src.in_task(task), task[k.out], task[nimg])
    task.finish()
    macs = b.mul(nimg, i64(16 * v.M * v.S * v.TT))
    task.dispatch(b.icmp_signed(">=", macs, i64(CONV_PAR_MIN_MACS)))
    return True


def _source_tiles(b: ir.IRBuilder, v: View, vec: V, src: _Operand, grid: ir.Value,
                  vbuf: ir.Value, img: ir.Value, r0: ir.Value, r1: ir.Value,
                  t0: ir.Value) -> None:
    """Tile rows ``r0 <= th < r1`` of image ``img``: the source rows they read copied
    channels-last into ``grid``, each tile transformed into ``V`` from ``t0``."""
    vs = v.strides()[0]
    h0 = b.sub(_lin(b, (r0, 2)), i64(v.qh))
    h1 = b.sub(_lin(b, (r1, 2)), i64(v.qh - 2))
    h0 = b.select(b.icmp_signed("<", h0, i64(0)), i64(0), h0)
    top = min(v.Hs, v.GH - v.qh)
    h1 = b.select(b.icmp_signed(">", h1, i64(top)), i64(top), h1)
    fill(b, vec, src.ptr, src.ir, img, v.S, v.Sp, h0, h1, min(v.Ws, v.GW - v.qw), grid,
         lambda h: _lin(b, (b.add(h, i64(v.qh)), v.GW * v.Sp), (i64(v.qw), v.Sp)))
    with for_range(b, r0, r1, name="th") as th:
        with for_range(b, i64(0), i64(v.TW), name="tw") as tw:
            t = b.add(t0, _lin(b, (b.sub(th, r0), v.TW), (tw, 1)))
            input_tile(b, vec.vt, grid, vbuf, vs, v.GW, v.Sp, th, tw, t)


def _result_rows(b: ir.IRBuilder, v: View, vec: V, mo: ir.Value, ybuf: ir.Value,
                 out: ir.Value, img: ir.Value, r0: ir.Value, r1: ir.Value,
                 t0: ir.Value) -> None:
    """Tile rows ``r0 <= th < r1`` of image ``img``: the output transform of their tiles
    (from ``Mo`` at ``t0``) and the rows stored."""
    ms = v.strides()[1]
    with for_range(b, r0, r1, name="oh") as th:
        _output_row(b, v, vec, mo, ms, b.add(t0, _lin(b, (b.sub(th, r0), v.TW))), ybuf)
        _store_rows(b, v, vec, ybuf, out, img, th)


def _products(b: ir.IRBuilder, k: Any, v: View, elt: ir.Type, area: dict, tiles: ir.Value,
              work_bytes: int, run2: Any, alloca: Any) -> None:
    """``Mo[xi] = V[xi] @ U[xi]`` for the 16 positions, the block's ``tiles`` rows."""
    vs, ms = v.strides()
    tile = choose_tile(v.M, k.L.wide, v.itemsize)
    with for_range(b, i64(0), i64(16), name="xi") as xi:
        emit_gemm_call(
            b, k.L.module, alloca, tile, elt,
            [_gep(b, area["v"], _lin(b, (xi, vs))), i64(v.Sp), i64(1),
             _gep(b, area["u"], _lin(b, (xi, v.u_plane))), i64(v.Mp), i64(1),
             _gep(b, area["mo"], _lin(b, (xi, ms))), i64(v.Mp), tiles, i64(v.M), i64(v.S)],
            b.bitcast(area["gemm"], I8P), i64(work_bytes), run2)


def _part(task: KernelTask, v: View, elt: ir.Type, area: dict, src: _Operand,
          out: ir.Value, nimg: ir.Value) -> None:
    """One part's images (``TileBlocks.for_part_blocks``), a block at a time: input
    transform, the 16 single-threaded products, output transform."""
    b = task.b
    it = v.itemsize
    vec = V(b, b.module, elt, v.L)
    wbytes = workspace_bytes(v.block_tiles(), v.M, v.S, choose_tile(v.M, task.k.L.wide, it),
                             it)
    _memset0(b, area["grid"], v.GH * v.GW * v.Sp * it)

    def block(img: ir.Value, r0: ir.Value, count: ir.Value, whole: ir.Value) -> None:
        v.for_tiles(b, img, r0, i64(0), count, whole, lambda im, a, z, t: _source_tiles(
            b, v, vec, src, area["grid"], area["v"], im, a, z, t))
        _products(b, task.k, v, elt, area, v.tiles_of(b, count, whole), wbytes, None,
                  task.alloca)
        v.for_tiles(b, img, r0, i64(0), count, whole, lambda im, a, z, t: _result_rows(
            b, v, vec, area["mo"], area["ybuf"], out, im, a, z, t))

    v.for_part_blocks(b, task, nimg, block)


def _shared(k: Any, v: View, elt: ir.Type, area: dict, parts: list[dict], src: _Operand,
            nimg: ir.Value) -> None:
    """The shared mode: the whole batch a block at a time; per block the two threads
    transform halves of its images (or tile rows) with their own grids, the 16 products
    split over the threads like any GEMM, then the threads transform halves back."""
    b = k.b
    it = v.itemsize
    wbytes = align(workspace_bytes(v.block_tiles(), v.M, v.S, choose_tile(v.M, k.L.wide, it),
                                   it))
    grids = [p["grid"] for p in parts]
    ybufs = [p["ybuf"] for p in parts]
    for grid in grids:
        _memset0(b, grid, v.GH * v.GW * v.Sp * it)

    def block(img: ir.Value, r0: ir.Value, count: ir.Value, whole: ir.Value) -> None:
        def split(name: str, values: list[ir.Value], body: Any) -> None:
            task = KernelTask(k, name, [img, r0, count, *values])
            tb = task.b
            vec = V(tb, tb.module, elt, v.L)
            v.for_part_tiles(tb, task.split, task[img], task[r0], task[count], whole,
                             lambda im, a, z, t: body(task, vec, im, a, z, t))
            task.finish()
            task.dispatch(v.splits(b, count, whole))

        def transform(task: KernelTask, vec: V, im: ir.Value, a: ir.Value, z: ir.Value,
                      t0: ir.Value) -> None:
            tb = task.b
            grid = tb.select(task.first, task[grids[0]], task[grids[1]])
            _source_tiles(tb, v, vec, src.in_task(task), grid, task[area["v"]], im, a, z, t0)

        def output(task: KernelTask, vec: V, im: ir.Value, a: ir.Value, z: ir.Value,
                   t0: ir.Value) -> None:
            tb = task.b
            ybuf = tb.select(task.first, task[ybufs[0]], task[ybufs[1]])
            _result_rows(tb, v, vec, task[area["mo"]], ybuf, task[k.out], im, a, z, t0)

        split("wgv", [*src.values(), *grids, area["v"]], transform)
        _products(b, k, v, elt, area, v.tiles_of(b, count, whole), wbytes,
                  k.L.run2_global(), k.alloca)
        split("wgo", [area["mo"], *ybufs, k.out], output)

    v.for_blocks(b, i64(0), nimg, block)


def _transform_filters(b: ir.IRBuilder, v: View, w: _Operand, u: ir.Value, lo: ir.Value,
                       hi: ir.Value) -> None:
    """``U[xi][s][m] = (G g G^T)[xi]`` for the source channels ``lo <= s < hi``, ``g`` the
    filter from source ``s`` to result ``m`` (the input gradient's: ``W[s, m]`` flipped),
    a vector of result channels at a time (``winograd.transform_filters``)."""
    vec = V(b, b.module, u.type.pointee, v.L)
    wino.transform_filters(b, vec, w.ptr, list(w.ir), v.igrad, v.S, v.M, u, v.Mp, lo, hi,
                           v.u_plane)


def _output_row(b: ir.IRBuilder, v: View, vec: V, mo: ir.Value, ms: int, t0: ir.Value,
                ybuf: ir.Value) -> None:
    """The tiles ``t0 .. t0 + TW`` of one tile row: each ``A^T Mo A``, a vector of channels
    at a time, into ``ybuf[a][col][m]`` (the row pair's outputs, channels-last)."""
    L, vt = v.L, vec.vt
    al = 4 if isinstance(vt.element, ir.FloatType) else 8
    with for_range(b, i64(0), i64(v.TW), name="ow") as tw:
        t = b.add(t0, tw)
        with for_range(b, i64(0), i64(v.Mp // L), name="om") as mv:
            at = _lin(b, (t, v.Mp), (mv, L))
            mvals = [b.load(_vec(b, vt, mo, b.add(at, i64(xi * ms))), align=al)
                     for xi in range(16)]
            tm = [[wino.lin(b, wino.AT[a], [mvals[r * 4 + c] for r in range(4)])
                   for c in range(4)] for a in range(2)]
            for a in range(2):
                for c in range(2):
                    y = wino.lin(b, wino.AT[c], tm[a])
                    dst = _lin(b, (b.add(_lin(b, (tw, 2)), i64(a * 2 * v.TW + c)), v.Mp),
                               (mv, L))
                    b.store(y, _vec(b, vt, ybuf, dst), align=al)


def _store_rows(b: ir.IRBuilder, v: View, vec: V, ybuf: ir.Value, out: ir.Value,
                img: ir.Value, th: ir.Value) -> None:
    """Rows ``2 th`` and ``2 th + 1`` (the second only inside the map) of image ``img``'s
    result from the channels-last ``ybuf``: ``L`` columns of ``L`` channels at a time
    transposed in registers, each channel's run stored under a mask at the map's edge."""
    L = v.L
    plane = v.Hd * v.Wd
    for a in range(2):
        oh = b.add(_lin(b, (th, 2)), i64(a))

        def rows(a: int = a, oh: ir.Value = oh) -> None:
            with for_range(b, i64(0), i64(v.Mp // L), name="sm") as mb:
                m0 = _lin(b, (mb, L))
                base = b.add(_lin(b, (img, v.M * plane), (m0, plane)), _lin(b, (oh, v.Wd)))

                def cols(c0: ir.Value, n: int) -> None:
                    vs = [vec.load(_gep(b, ybuf, _lin(b, (b.add(c0, i64(a * 2 * v.TW + j)),
                                                          v.Mp), (m0, 1))))
                          for j in range(n)] + [vec.zero] * (L - n)
                    mask = vec.const_mask(n)
                    for i, row in enumerate(transpose_block(b, vs)):
                        dst = _gep(b, out, b.add(base, _lin(b, (i64(i), plane), (c0, 1))))

                        def put(row: ir.Value = row, dst: ir.Value = dst) -> None:
                            if n == L:
                                b.store(row, b.bitcast(dst, vec.vt.as_pointer()), align=4)
                            else:
                                b.call(vec.mstore, [row, dst, mask])

                        if v.M % L and i >= v.M % L:  # past the last channel: not stored
                            with b.if_then(b.icmp_signed("<", b.add(m0, i64(i)), i64(v.M))):
                                put()
                        else:
                            put()

                if v.Wd // L:
                    with for_range(b, i64(0), i64(v.Wd // L), name="sc") as cb:
                        cols(_lin(b, (cb, L)), L)
                if v.Wd % L:
                    cols(i64(v.Wd // L * L), v.Wd % L)

        if a == 1 and v.Hd % 2:
            with b.if_then(b.icmp_signed("<", oh, i64(v.Hd))):
                rows()
        else:
            rows()


def _vec(b: ir.IRBuilder, vt: ir.VectorType, base: ir.Value, at: ir.Value) -> ir.Value:
    return b.bitcast(_gep(b, base, at), vt.as_pointer())


__all__ = ["plan", "workspace", "describe", "emit", "View", "OPS", "MIN_CHANNELS"]
