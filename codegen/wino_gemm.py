"""3x3 stride-1 convolutions with many channels: Winograd F(2x2, 3x3) over chunks of images,
its 16 products on the float GEMM.

The Winograd kernel of ``codegen.conv`` transforms one image at a time and runs its 16
products from a packed copy of the transformed weight ``U`` (16 elements per filter). Once
``U`` is larger than L2 (256 -> 256 channels: 4 MB) every image streams it from memory
again, and the kernel runs at a fraction of its rate; maps with fewer 2x2 tiles than a
vector (ResNet-18's 4x4 last stage) do not take it at all. Here the tiles of a whole chunk
of images go through each product together, as Lavin & Gray's batched formulation (and
oneDNN's and NNPACK's Winograd kernels) do:

1. ``U[xi][m][s] = (G g G^T)[xi]`` for every filter, once per call;
2. per image of the chunk, its source channels copied into a zero-bordered grid, and each
   4x4 input tile ``d`` (tiles step by 2) transformed into ``V[xi][s][t] = (B^T d B)[xi]``,
   ``t`` running over the chunk's tiles;
3. ``M[xi] = U[xi] @ V[xi]`` for the 16 ``xi``: ``[M, S] @ [S, T]`` products on the
   float GEMM (packed, cache-blocked, split over the two threads like any product);
4. each tile's ``A^T M A`` is its 2x2 block of outputs.

The transforms run on both threads too (halves of the result channels for ``U``, of the
chunk's images for the input and output transforms, each thread with its own grid); every
value is computed by the same code on either thread, so results do not depend on the
thread count.

That is 16 multiply-adds per 2x2 outputs and source channel where the im2col product
(``codegen.conv_gemm``) takes 36. The input gradient is the same convolution of ``dY``
with the filters flipped and transposed, padded by ``2 - p``. Values are those of the
Winograd kernel: the direct sums up to rounding (a few ulps), non-finite inputs give
non-finite results (see ``codegen.conv``).

Which convolutions (``plan``): ``conv2d`` and ``conv2d_input_grad``, 3x3, stride 1, no
dilation, one group, padding at most 2, float32 or float64, static sizes but the batch,
outside debug builds, where ``U`` does not fit L2 and ``options.WINOGRAD`` is on.
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
from .llvm_util import I8P, for_range, i64, mem_type
from .parallel import KernelTask

OPS = ("conv2d", "conv2d_input_grad")
TILES = 512  # 2x2 tiles a chunk of images aims at
V_BYTES = 4 << 20  # the most a chunk's transformed input takes


class View:
    """The convolution as a stride-1 3x3 one from ``S`` source channels on an ``Hs x Ws``
    map padded by ``(qh, qw)`` to ``M`` result channels on ``Hd x Wd``."""

    def __init__(self, n: Node, g: Geometry) -> None:
        self.igrad = n.op == "conv2d_input_grad"
        if self.igrad:
            self.S, self.M = g.OC, g.C
            self.Hs, self.Ws, self.Hd, self.Wd = g.OH, g.OW, g.H, g.W
            self.qh, self.qw = 2 - g.ph, 2 - g.pw
        else:
            self.S, self.M = g.C, g.OC
            self.Hs, self.Ws, self.Hd, self.Wd = g.H, g.W, g.OH, g.OW
            self.qh, self.qw = g.ph, g.pw
        self.TH, self.TW = -(-self.Hd // 2), -(-self.Wd // 2)
        self.TT = self.TH * self.TW  # tiles an image
        self.GH, self.GW = 2 * self.TH + 2, 2 * self.TW + 2  # the grid: every tile's rows

    def images_per_chunk(self, itemsize: int) -> int:
        return max(1, min(TILES // self.TT, V_BYTES // (16 * itemsize * self.S * self.TT)))


def plan(n: Node) -> View | None:
    """The Winograd view of conv node ``n`` when this path runs it, else None."""
    if (not options.WINOGRAD or n.op not in OPS or n.dtype not in (dt.float32, dt.float64)
            or any(x.dtype is not n.dtype for x in n.inputs)):
        return None
    g = conv_geometry(n)
    if g is None or (g.KH, g.KW, g.sh, g.sw, g.dh, g.dw) != (3, 3, 1, 1, 1, 1):
        return None
    if not (0 <= g.ph <= 2 and 0 <= g.pw <= 2):
        return None
    v = View(n, g)
    if 16 * v.S * v.M * n.dtype.itemsize <= current_caches().l2:
        return None  # the per-image Winograd kernel keeps U in L2
    return v


def _layout(n: Node, v: View, wide: bool) -> dict[str, int]:
    it = n.dtype.itemsize
    t = v.images_per_chunk(it) * v.TT
    tile = choose_tile(t, wide, it)
    areas = [("gemm", 2 * align(workspace_bytes(v.M, t, v.S, tile, it))),
             ("u", 16 * v.M * v.S * it), ("v", 16 * v.S * t * it), ("m", 16 * v.M * t * it),
             ("grid", 2 * align(v.S * v.GH * v.GW * it))]
    return area_offsets(areas)


def workspace(n: Node, wide: bool) -> int:
    v = plan(n)
    assert v is not None
    return ALIGN + _layout(n, v, wide)["end"]


def describe(n: Node) -> str | None:
    v = plan(n)
    if v is None:
        return None
    nb = v.images_per_chunk(n.dtype.itemsize)
    return (f"conv: Winograd F(2x2, 3x3), 16 gemm products over chunks of {nb} images "
            f"({nb * v.TT} tiles)")


def emit(k: Any) -> bool:
    """Fill conv kernel ``k`` with this path; False when it does not serve the node."""
    n = k.node
    if getattr(k, "debug", False):
        return False
    v = plan(n)
    if v is None:
        return False
    b = k.b
    it = n.dtype.itemsize
    elt = mem_type(n.dtype)
    lay = _layout(n, v, k.L.wide)
    area = carve(b, k.work, lay, elt)
    nb = v.images_per_chunk(it)
    tmax = nb * v.TT
    tile = choose_tile(tmax, k.L.wide, it)
    wbytes = i64(align(workspace_bytes(v.M, tmax, v.S, tile, it)))
    src, w = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    # U, the two threads taking halves of the result channels
    task = KernelTask(k, "wgu", [*w.values(), area["u"]])
    lo, hi = task.split(i64(v.M))
    _transform_filters(task.b, v, w.in_task(task), task[area["u"]], lo, hi)
    task.finish()
    task.dispatch(ir.Constant(ir.IntType(1), v.M >= 2))
    nimg = k.sym(n.shape[0])
    gsize = it * v.S * v.GH * v.GW
    grids = [area["grid"], _at(b, b.bitcast(area["grid"], I8P), align(gsize), elt)]
    for grid in grids:
        _memset0(b, grid, gsize)
    with for_range(b, i64(0), nimg, name="chunk", step=i64(nb)) as i0:
        left = b.sub(nimg, i0)
        cnt = b.select(b.icmp_signed("<", left, i64(nb)), left, i64(nb))
        two = b.icmp_signed(">=", cnt, i64(2))
        # the chunk's images into V, each thread with its own grid
        task = KernelTask(k, "wgv", [*src.values(), *grids, area["v"], i0, cnt])
        tb = task.b
        grid = tb.select(task.first, task[grids[0]], task[grids[1]])
        lo, hi = task.split(task[cnt])
        with for_range(tb, lo, hi, name="ci") as i:
            _fill_grid(tb, v, grid, src.in_task(task), tb.add(task[i0], i))
            _transform_tiles(tb, v, grid, task[area["v"]], tmax, _lin(tb, (i, v.TT)))
        task.finish()
        task.dispatch(two)
        with for_range(b, i64(0), i64(16), name="xi") as xi:
            emit_gemm_call(
                b, k.L.module, k.alloca, tile, elt,
                [_gep(b, area["u"], _lin(b, (xi, v.M * v.S))), i64(v.S), i64(1),
                 _gep(b, area["v"], _lin(b, (xi, v.S * tmax))), i64(tmax), i64(1),
                 _gep(b, area["m"], _lin(b, (xi, v.M * tmax))), i64(tmax),
                 i64(v.M), _lin(b, (cnt, v.TT)), i64(v.S)],
                area["gemm"], wbytes, k.L.run2_global())
        task = KernelTask(k, "wgo", [area["m"], k.out, i0, cnt])
        lo, hi = task.split(task[cnt])
        _outputs(task.b, v, task[area["m"]], tmax, task[k.out], task[i0], lo, hi)
        task.finish()
        task.dispatch(two)
    return True


def _transform_filters(b: ir.IRBuilder, v: View, w: _Operand, u: ir.Value, lo: ir.Value,
                       hi: ir.Value) -> None:
    """``U[xi][m][s] = (G g G^T)[xi]`` for the result channels ``lo <= m < hi``, ``g`` the
    filter from source ``s`` to result ``m`` (the input gradient's: ``W[s, m]`` flipped)."""
    s0, s1, s2, s3 = w.ir
    with for_range(b, lo, hi, name="um") as m:
        with for_range(b, i64(0), i64(v.S), name="us") as s:
            o, c = (s, m) if v.igrad else (m, s)
            g = [[b.load(_gep(b, w.ptr, _lin(b, (o, s0), (c, s1), (i64(2 - kh if v.igrad
                                                                        else kh), s2),
                                             (i64(2 - kw if v.igrad else kw), s3))))
                  for kw in range(3)] for kh in range(3)]
            gg = [[wino.lin(b, wino.G[i], [g[r][j] for r in range(3)]) for j in range(3)]
                  for i in range(4)]
            for i in range(4):
                for j in range(4):
                    dst = _lin(b, (i64(i * 4 + j), v.M * v.S), (m, v.S), (s, 1))
                    b.store(wino.lin(b, wino.G[j], gg[i]), _gep(b, u, dst))


def _fill_grid(b: ir.IRBuilder, v: View, grid: ir.Value, x: _Operand, img: ir.Value
               ) -> None:
    """Image ``img``'s source channels into the grid's interior (the border stays zero)."""
    s0, s1, s2, s3 = x.ir
    rows, cols = min(v.Hs, v.GH - v.qh), min(v.Ws, v.GW - v.qw)
    with for_range(b, i64(0), i64(v.S), name="gs") as c:
        with for_range(b, i64(0), i64(rows), name="gh") as h:
            src = _lin(b, (img, s0), (c, s1), (h, s2))
            dst = b.add(_lin(b, (c, v.GH * v.GW), (h, v.GW)), i64(v.qh * v.GW + v.qw))
            with for_range(b, i64(0), i64(cols), name="gw") as ww:
                val = b.load(_gep(b, x.ptr, b.add(src, _lin(b, (ww, s3)))))
                b.store(val, _gep(b, grid, b.add(dst, ww)))


def _transform_tiles(b: ir.IRBuilder, v: View, grid: ir.Value, vbuf: ir.Value, tmax: int,
                     t0: ir.Value) -> None:
    """``V[xi][s][t0 + t] = (B^T d B)[xi]`` for the image's tiles ``t``."""
    with for_range(b, i64(0), i64(v.S), name="vs") as s:
        with for_range(b, i64(0), i64(v.TH), name="vh") as th:
            with for_range(b, i64(0), i64(v.TW), name="vw") as tw:
                at = _lin(b, (s, v.GH * v.GW), (th, 2 * v.GW), (tw, 2))
                d = [[b.load(_gep(b, grid, b.add(at, i64(r * v.GW + c)))) for c in range(4)]
                     for r in range(4)]
                tmp = [[wino.lin(b, wino.BT[j], d[r]) for j in range(4)] for r in range(4)]
                t = b.add(t0, _lin(b, (th, v.TW), (tw, 1)))
                for i in range(4):
                    for j in range(4):
                        val = wino.lin(b, wino.BT[i], [tmp[r][j] for r in range(4)])
                        dst = b.add(_lin(b, (i64(i * 4 + j), v.S * tmax), (s, tmax)), t)
                        b.store(val, _gep(b, vbuf, dst))


def _outputs(b: ir.IRBuilder, v: View, mbuf: ir.Value, tmax: int, out: ir.Value,
             i0: ir.Value, lo: ir.Value, hi: ir.Value) -> None:
    """Each tile's ``A^T M A`` into its 2x2 block of the result, for the chunk's images
    ``lo <= i < hi`` (rows and columns past an odd edge left out)."""
    with for_range(b, lo, hi, name="oi") as i:
        with for_range(b, i64(0), i64(v.M), name="om") as m:
            plane = _lin(b, (b.add(i0, i), v.M * v.Hd * v.Wd), (m, v.Hd * v.Wd))
            with for_range(b, i64(0), i64(v.TH), name="oh") as th:
                with for_range(b, i64(0), i64(v.TW), name="ow") as tw:
                    t = _lin(b, (i, v.TT), (th, v.TW), (tw, 1))
                    mv = [b.load(_gep(b, mbuf, b.add(_lin(b, (i64(xi), v.M * tmax),
                                                             (m, tmax)), t)))
                          for xi in range(16)]
                    tm = [[wino.lin(b, wino.AT[a], [mv[r * 4 + c] for r in range(4)])
                           for c in range(4)] for a in range(2)]
                    for a in range(2):
                        for c in range(2):
                            y = wino.lin(b, wino.AT[c], tm[a])
                            oh = _lin(b, (th, 2), (i64(a), 1))
                            ow = _lin(b, (tw, 2), (i64(c), 1))
                            dst = _gep(b, out, b.add(plane, _lin(b, (oh, v.Wd), (ow, 1))))
                            wino.store_output(b, y, dst, a, c, oh, ow, v.Hd, v.Wd)


__all__ = ["plan", "workspace", "describe", "emit", "View", "OPS", "TILES", "V_BYTES"]
