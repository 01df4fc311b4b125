"""Convolutions with many channels on small maps: batched im2col and the float GEMM.

The implicit-GEMM kernels of ``codegen.conv`` take one image at a time and stream the whole
packed weight through their register tiles for every tile of its positions. That is right
while the weight stays in L2; but a ResNet's last stages have many channels on small maps
(512 -> 512 at 4x4: a 9.4 MB weight, 16 positions an image), where every image re-reads the
weight from memory: measured on Zen 4, one thread, batch 8, those convolutions ran at
0.33-0.59x PyTorch's rate (forward and input gradient at 256 and 512 channels).

Here such a convolution is a few real GEMMs (``codegen.gemm``: packed, cache-blocked, split
over the two threads like any product), over *chunks of images*, so the weight is read once
per chunk. The copies around the products (im2col, ``dY`` gathered, results scattered,
col2im) run on both threads, halves of the chunk's images, each thread with its own grid:

- ``conv2d``: ``col[K, q]`` (``K = C*KH*KW`` taps, ``q`` = the chunk's images x ``P``
  positions) is copied out of each image's zero-bordered grid (``conv_bf16._im2col``), then
  ``Y[O, q] = W[O, K] @ col`` and each image's ``[O, P]`` block is copied to the output.
- ``conv2d_input_grad``: the chunk's ``dY`` as ``[O, q]``, ``dcol[K, q] = W^T @ dY``, then
  per image a scatter-add into a zero-bordered grid (col2im) whose interior is the
  gradient. Every stride and dilation: no zero-dilated ``dY``, no wasted products.
- ``conv2d_weight_grad``: ``dW[O, K] = sum over chunks dY[O, q] @ col[K, q]^T``: the first
  chunk's product written into ``dW``, later ones added.

Which convolutions (``plan``): float32 or float64, one group, static sizes but the batch,
outside debug builds, where the weight (``O*K`` elements) takes half of L2 or more and an
image has at most ``SMALL_MAP`` positions (256 -> 512 1x1 stride 2 on 8x8, a 512 KiB weight
in a 1 MiB L2, batch 32: forward 83 -> 96, weight gradient 88 -> 100 GFLOP/s); not where Winograd's
transformed weight (16 elements per filter) fits L2 (its 2.25x fewer multiplies win:
128 -> 128 at 8x8, batch 32, 162 against 100 GFLOP/s), nor strided input gradients (the
phase kernels waste nothing there: 128 -> 256 at 14x14 stride 2, 99 against 74). Measured
against the kernels they replace (Zen 4, one thread, batch 8, GFLOP/s forward / input
gradient / weight gradient): 512 -> 512 at 4x4 45 / 40 / 53 -> 107 / 72 / 95, at 7x7
35 / 32 / 73 -> 99 / 77 / 100; 256 -> 256 at 7x7 70 / 70 / 95 -> 99 / 95 / 106; 256 -> 512
8x8 stride 2 forward 48 -> 104, weight gradient 67 -> 97 (the 3x3 stride-1 ones now run
batched Winograd, ``codegen.wino_gemm``). A chunk holds up to ``POSITIONS`` positions
(and its ``col`` at most ``COL_BYTES``). The GEMM's results depend only on its K blocks,
so the thread count does not change them; chunks run in order, so neither does the batch's
split into chunks for a given batch size.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt

from . import options
from .abi import ALIGN, align
from .conv_bf16 import (
    Geometry,
    _at,
    _col2im,
    _fill_grid,
    _gep,
    _im2col,
    _lin,
    _memset0,
    _Operand,
    _weight_matrix,
    area_offsets,
    carve,
    conv_geometry,
)
from .gemm import choose_tile, emit_gemm_call, workspace_bytes
from .hostinfo import current_caches
from .llvm_util import I8P, for_range, i64, mem_type
from .parallel import KernelTask

OPS = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")
SMALL_MAP = 64  # positions an image has at most (8x8)
POSITIONS = 512  # positions a chunk of images aims at
COL_BYTES = 4 << 20  # the most a chunk's im2col matrix takes


def plan(n: Node) -> Geometry | None:
    """The convolution behind ``n`` when this path runs it, else None."""
    if not options.CONV_GEMM or n.op not in OPS or n.dtype not in (
            dt.float32, dt.float64) or any(x.dtype is not n.dtype for x in n.inputs):
        return None
    g = conv_geometry(n)
    if g is None:
        return None
    it, l2 = n.dtype.itemsize, current_caches().l2
    if g.OC * g.K * it < l2 // 2 or g.P > SMALL_MAP:
        return None  # the implicit GEMM's weight stays in L2, or its tiles fill
    if ((g.KH, g.KW, g.sh, g.sw, g.dh, g.dw) == (3, 3, 1, 1, 1, 1)
            and 16 * g.C * g.OC * it <= l2):
        return None  # Winograd's transformed weight stays in L2: it is faster there
    if n.op == "conv2d_input_grad" and (g.sh, g.sw) != (1, 1):
        return None  # the phase kernels (``conv.StridedIgrad``) waste no work there
    return g


def images_per_chunk(g: Geometry, itemsize: int) -> int:
    return max(1, min(POSITIONS // g.P, COL_BYTES // (itemsize * g.K * g.P)))


def gemm_dims(n: Node, g: Geometry, q: int) -> tuple[int, int, int]:
    """``(M, N, K)`` of the op's product for a chunk of ``q`` positions."""
    if n.op == "conv2d":
        return g.OC, q, g.K
    if n.op == "conv2d_input_grad":
        return g.K, q, g.OC
    return g.OC, g.K, q


def _layout(n: Node, g: Geometry, wide: bool) -> dict[str, int]:
    """Byte offsets of the workspace's areas (``"end"``: its size): the GEMM's packing (two
    thread parts), the weight as ``[O, K]`` when it must be repacked, the chunk's matrices
    and one image's grid."""
    it = n.dtype.itemsize
    q = images_per_chunk(g, it) * g.P
    m, nn, k = gemm_dims(n, g, q)
    tile = choose_tile(nn, wide, it)
    areas = [("gemm", 2 * align(workspace_bytes(m, nn, k, tile, it))),
             ("grid", 2 * align(it * g.grid)), ("col", it * g.K * q),
             ("mat", it * g.OC * q)]
    if n.op != "conv2d_weight_grad":
        areas.append(("weight", it * g.OC * g.K))
    else:
        areas.append(("tmp", it * g.OC * g.K))
    return area_offsets(areas)


def workspace(n: Node, wide: bool) -> int:
    g = plan(n)
    assert g is not None
    return ALIGN + _layout(n, g, wide)["end"]


def describe(n: Node) -> str | None:
    """For ``ir("fused")``: which convolutions run as batched im2col GEMMs."""
    g = plan(n)
    if g is None:
        return None
    q = images_per_chunk(g, n.dtype.itemsize) * g.P
    return f"conv: batched im2col + gemm, chunks of {q // g.P} images ({q} positions)"


def emit(k: Any) -> bool:
    """Fill conv kernel ``k`` with this path; False when it does not serve the node."""
    n = k.node
    if getattr(k, "debug", False):
        return False
    g = plan(n)
    if g is None:
        return False
    b = k.b
    lay = _layout(n, g, k.L.wide)
    elt = mem_type(n.dtype)
    it = n.dtype.itemsize
    area = carve(b, k.work, lay, elt)
    nb = images_per_chunk(g, it)
    q = nb * g.P
    m, nn, kk = gemm_dims(n, g, q)
    tile = choose_tile(nn, k.L.wide, it)
    wbytes = i64(align(workspace_bytes(m, nn, kk, tile, it)))

    def gemm(args: list[ir.Value]) -> None:
        emit_gemm_call(b, k.L.module, k.alloca, tile, elt, args, area["gemm"], wbytes,
                       k.L.run2_global())

    nimg = k.sym((n.inputs[0] if n.op != "conv2d_input_grad" else n).shape[0])
    if n.op == "conv2d":
        _forward(k, g, area, nb, q, nimg, gemm)
    elif n.op == "conv2d_input_grad":
        _input_grad(k, g, area, nb, q, nimg, gemm)
    else:
        _weight_grad(k, g, area, nb, q, nimg, gemm)
    return True


def _chunks(b: ir.IRBuilder, nimg: ir.Value, nb: int) -> Any:
    """``for i0 in range(0, nimg, nb)``, yielding ``(i0, images in this chunk)``."""
    with for_range(b, i64(0), nimg, name="chunk", step=i64(nb)) as i0:
        left = b.sub(nimg, i0)
        yield i0, b.select(b.icmp_signed("<", left, i64(nb)), left, i64(nb))


def _images(k: Any, suffix: str, values: list[ir.Value], cnt: ir.Value, body: Any) -> None:
    """``body(task, lo, hi)`` on the two threads, each with half of the chunk's ``cnt``
    images (a thread task reading ``values`` from the kernel)."""
    task = KernelTask(k, suffix, [*values, cnt])
    lo, hi = task.split(task[cnt])
    body(task, lo, hi)
    task.finish()
    task.dispatch(k.b.icmp_signed(">=", cnt, i64(2)))


def _grids(k: Any, g: Geometry, area: dict, zero: bool) -> list[ir.Value]:
    """The two threads' grids (zeroed once when their borders stay zero)."""
    b = k.b
    size = k.node.dtype.itemsize * g.grid
    raw = b.bitcast(area["grid"], I8P)
    grids = [area["grid"], _at(b, raw, align(size), area["grid"].type.pointee)]
    if zero:
        for grid in grids:
            _memset0(b, grid, size)
    return grids


def _fill_cols(k: Any, g: Geometry, x: _Operand, grids: list[ir.Value], col: ir.Value,
               q: int, i0: ir.Value, cnt: ir.Value, extra: Any = None,
               extra_values: tuple = ()) -> None:
    """The chunk's images into ``col`` (each thread its half, through its own grid);
    ``extra(task, lo, hi)`` adds more per-image work to the same task, reading
    ``extra_values`` from the kernel."""
    def body(task: KernelTask, lo: ir.Value, hi: ir.Value) -> None:
        tb = task.b
        grid = tb.select(task.first, task[grids[0]], task[grids[1]])
        xt = x.in_task(task)
        with for_range(tb, lo, hi, name="ci") as i:
            _fill_grid(tb, g, grid, xt, tb.add(task[i0], i))
            _im2col(tb, g, grid, task[col], q, _lin(tb, (i, g.P)))
        if extra is not None:
            extra(task, lo, hi)

    _images(k, "cols", [*x.values(), *grids, col, i0, *extra_values], cnt, body)


def _forward(k: Any, g: Geometry, area: dict, nb: int, q: int, nimg: ir.Value,
             gemm: Any) -> None:
    n = k.node
    b = k.b
    x, w = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    wptr, wrow = _weight_matrix(k, g, w, area["weight"])
    grids = _grids(k, g, area, True)
    for i0, cnt in _chunks(b, nimg, nb):
        _fill_cols(k, g, x, grids, area["col"], q, i0, cnt)
        gemm([wptr, wrow, i64(1), area["col"], i64(q), i64(1), area["mat"], i64(q),
              i64(g.OC), _lin(b, (cnt, g.P)), i64(g.K)])

        def scatter(task: KernelTask, lo: ir.Value, hi: ir.Value, i0: ir.Value = i0) -> None:
            # Y[o, i*P + p] -> out[i0 + i, o, p]
            tb = task.b
            with for_range(tb, lo, hi, name="si") as i:
                with for_range(tb, i64(0), i64(g.OC), name="so") as o:
                    src = _lin(tb, (o, q), (i, g.P))
                    dst = _lin(tb, (tb.add(task[i0], i), g.OC * g.P), (o, g.P))
                    with for_range(tb, i64(0), i64(g.P), name="sp") as p:
                        v = tb.load(_gep(tb, task[area["mat"]], tb.add(src, p)))
                        tb.store(v, _gep(tb, task[k.out], tb.add(dst, p)))

        _images(k, "out", [area["mat"], k.out, i0], cnt, scatter)


def _gather_dy(task: KernelTask, g: Geometry, dy: _Operand, dst: ir.Value, q: int,
               i0: ir.Value, lo: ir.Value, hi: ir.Value) -> None:
    """The chunk's ``dY`` images ``lo <= i < hi`` as ``[O][q]`` (image ``i`` at columns
    ``i*P ...``), in ``task`` (``dy``, ``dst`` and ``i0`` as the kernel has them)."""
    tb = task.b
    d_t = dy.in_task(task)
    s0, s1, s2, s3 = d_t.ir
    with for_range(tb, lo, hi, name="yi") as i:
        with for_range(tb, i64(0), i64(g.OC), name="yo") as o:
            with for_range(tb, i64(0), i64(g.OH), name="yh") as oh:
                src = _lin(tb, (tb.add(task[i0], i), s0), (o, s1), (oh, s2))
                d = _lin(tb, (o, q), (i, g.P), (oh, g.OW))
                with for_range(tb, i64(0), i64(g.OW), name="yw") as ow:
                    v = tb.load(_gep(tb, d_t.ptr, tb.add(src, _lin(tb, (ow, s3)))))
                    tb.store(v, _gep(tb, task[dst], tb.add(d, ow)))


def _input_grad(k: Any, g: Geometry, area: dict, nb: int, q: int, nimg: ir.Value,
                gemm: Any) -> None:
    n = k.node
    b = k.b
    dy, w = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    wptr, wrow = _weight_matrix(k, g, w, area["weight"])
    it = n.dtype.itemsize
    grids = _grids(k, g, area, False)
    for i0, cnt in _chunks(b, nimg, nb):
        _images(k, "dy", [*dy.values(), area["mat"], i0], cnt,
                lambda task, lo, hi, i0=i0: _gather_dy(task, g, dy, area["mat"], q, i0,
                                                       lo, hi))
        # dcol[K, q] = W^T @ dY: A[r, o] = W[o, r]
        gemm([wptr, i64(1), wrow, area["mat"], i64(q), i64(1), area["col"], i64(q),
              i64(g.K), _lin(b, (cnt, g.P)), i64(g.OC)])

        def col2im(task: KernelTask, lo: ir.Value, hi: ir.Value, i0: ir.Value = i0) -> None:
            tb = task.b
            grid = tb.select(task.first, task[grids[0]], task[grids[1]])
            with for_range(tb, lo, hi, name="fi") as i:
                _memset0(tb, grid, it * g.grid)
                col = _gep(tb, task[area["col"]], _lin(tb, (i, g.P)))
                _col2im(tb, g, col, q, grid, i64(0), i64(g.OH))
                with for_range(tb, i64(0), i64(g.C), name="oc") as c:
                    with for_range(tb, i64(0), i64(g.H), name="oh") as h:
                        s = tb.add(_lin(tb, (c, g.Hp * g.Wp), (h, g.Wp)),
                                   i64(g.ph * g.Wp + g.pw))
                        d = _lin(tb, (tb.add(task[i0], i), g.C * g.H * g.W), (c, g.H * g.W),
                                 (h, g.W))
                        with for_range(tb, i64(0), i64(g.W), name="ow") as ww:
                            v = tb.load(_gep(tb, grid, tb.add(s, ww)))
                            tb.store(v, _gep(tb, task[k.out], tb.add(d, ww)))

        _images(k, "dx", [*grids, area["col"], k.out, i0], cnt, col2im)


def accumulate(b: ir.IRBuilder, dst: ir.Value, src: ir.Value, lo: ir.Value,
               hi: ir.Value) -> None:
    """``dst[j] += src[j]`` for ``lo <= j < hi``, on this thread."""
    with for_range(b, lo, hi, name="acc") as j:
        p = _gep(b, dst, j)
        b.store(b.fadd(b.load(p), b.load(_gep(b, src, j))), p)


def add_into(k: Any, dst: ir.Value, src: ir.Value, total: int) -> None:
    """In kernel ``k``: ``dst[j] += src[j]`` for ``j < total``, halves on the two threads
    (each element added by the same code either way)."""
    task = KernelTask(k, "acc", [dst, src])
    accumulate(task.b, task[dst], task[src], *task.split(i64(total)))
    task.finish()
    task.dispatch(ir.Constant(ir.IntType(1), total >= 1 << 15))


def _weight_grad(k: Any, g: Geometry, area: dict, nb: int, q: int, nimg: ir.Value,
                 gemm: Any) -> None:
    n = k.node
    b = k.b
    x, dy = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    grids = _grids(k, g, area, True)
    total = g.OC * g.K
    for i0, cnt in _chunks(b, nimg, nb):
        _fill_cols(k, g, x, grids, area["col"], q, i0, cnt,
                   lambda task, lo, hi, i0=i0: _gather_dy(task, g, dy, area["mat"], q, i0,
                                                          lo, hi),
                   (*dy.values(), area["mat"]))
        first = b.icmp_signed("==", i0, i64(0))
        # the first chunk's product is dW; later ones go to tmp and are added
        dst = b.select(first, k.out, area["tmp"])
        gemm([area["mat"], i64(q), i64(1), area["col"], i64(1), i64(q), dst, i64(g.K),
              i64(g.OC), i64(g.K), _lin(b, (cnt, g.P))])
        with b.if_then(b.not_(first)):
            add_into(k, k.out, area["tmp"], total)
    # no images: the gradient is zero
    with b.if_then(b.icmp_signed("<=", nimg, i64(0))):
        _memset0(b, k.out, n.dtype.itemsize * total)


__all__ = ["plan", "workspace", "describe", "emit", "images_per_chunk", "gemm_dims", "add_into",
           "accumulate", "OPS", "SMALL_MAP", "POSITIONS", "COL_BYTES"]
