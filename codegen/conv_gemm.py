"""Convolutions with many channels on small maps: batched im2col and the float GEMM.

The implicit-GEMM kernels of ``codegen.conv`` take one image at a time and stream the whole
packed weight through their register tiles for every tile of its positions. That is right
while the weight stays in L2; but a ResNet's last stages have many channels on small maps
(512 -> 512 at 4x4: a 9.4 MB weight, 16 positions an image), where every image re-reads the
weight from memory: measured on Zen 4, one thread, batch 8, those convolutions ran at
0.33-0.59x PyTorch's rate (forward and input gradient at 256 and 512 channels).

Here such a convolution is a few real GEMMs (``codegen.gemm``: packed, cache-blocked, split
over the two threads like any product), over *chunks of images*, so the weight is read once
per chunk:

- ``conv2d``: ``col[K, q]`` (``K = C*KH*KW`` taps, ``q`` = the chunk's images x ``P``
  positions) is copied out of each image's zero-bordered grid (``conv_bf16._im2col``), then
  ``Y[O, q] = W[O, K] @ col`` and each image's ``[O, P]`` block is copied to the output.
- ``conv2d_input_grad``: the chunk's ``dY`` as ``[O, q]``, ``dcol[K, q] = W^T @ dY``, then
  per image a scatter-add into a zero-bordered grid (col2im) whose interior is the
  gradient. Every stride and dilation: no zero-dilated ``dY``, no wasted products.
- ``conv2d_weight_grad``: ``dW[O, K] = sum over chunks dY[O, q] @ col[K, q]^T``: the first
  chunk's product written into ``dW``, later ones added.

Which convolutions (``plan``): float32 or float64, one group, static sizes but the batch,
outside debug builds, where the weight (``O*K`` elements) is more than half of L2 and an
image has at most ``SMALL_MAP`` positions; not where Winograd's transformed weight (16
elements per filter) fits L2 (its 2.25x fewer multiplies win: 128 -> 128 at 8x8, batch 32,
162 against 100 GFLOP/s), nor strided input gradients (the phase kernels waste nothing
there: 128 -> 256 at 14x14 stride 2, 99 against 74). Measured against the kernels they
replace (Zen 4, one thread, batch 8, GFLOP/s forward / input gradient / weight gradient):
512 -> 512 at 4x4 45 / 40 / 53 -> 107 / 72 / 95, at 7x7 35 / 32 / 73 -> 99 / 77 / 100;
256 -> 256 at 7x7 70 / 70 / 95 -> 99 / 95 / 106; 256 -> 512 8x8 stride 2 forward 48 -> 104,
weight gradient 67 -> 97. A chunk holds up to ``POSITIONS`` positions (and its ``col`` at
most ``COL_BYTES``). The GEMM's results depend only on its K blocks, so
the thread count does not change them; chunks run in order, so neither does the batch's
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
    conv_geometry,
)
from .gemm import choose_tile, emit_gemm_call, workspace_bytes
from .hostinfo import current_caches
from .llvm_util import I8, I8P, I64, for_range, i64, mem_type

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
    if g.OC * g.K * it <= l2 // 2 or g.P > SMALL_MAP:
        return None  # the implicit GEMM's weight stays in L2, or its tiles fill
    if ((g.KH, g.KW, g.sh, g.sw, g.dh, g.dw) == (3, 3, 1, 1, 1, 1)
            and 16 * g.C * g.OC * it <= l2):
        return None  # Winograd's transformed weight stays in L2: it is faster there
    if n.op == "conv2d_input_grad" and (g.sh, g.sw) != (1, 1):
        return None  # the phase kernels (``conv.StridedIgrad``) waste no work there
    return g


def images_per_chunk(g: Geometry, itemsize: int) -> int:
    return max(1, min(POSITIONS // g.P, COL_BYTES // (itemsize * g.K * g.P)))


def _gemm_dims(n: Node, g: Geometry, q: int) -> tuple[int, int, int]:
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
    m, nn, k = _gemm_dims(n, g, q)
    tile = choose_tile(nn, wide, it)
    areas = [("gemm", 2 * align(workspace_bytes(m, nn, k, tile, it))),
             ("grid", it * g.grid), ("col", it * g.K * q), ("mat", it * g.OC * q)]
    if n.op != "conv2d_weight_grad":
        areas.append(("weight", it * g.OC * g.K))
    else:
        areas.append(("tmp", it * g.OC * g.K))
    out, at = {}, 0
    for name, size in areas:
        out[name] = at
        at += align(int(size))
    out["end"] = at
    return out


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
    base = b.inttoptr(b.and_(b.add(b.ptrtoint(k.work, I64), i64(ALIGN - 1)), i64(-ALIGN)),
                      I8P)
    lay = _layout(n, g, k.L.wide)
    elt = mem_type(n.dtype)
    it = n.dtype.itemsize
    area = {name: _at(b, base, off, I8 if name == "gemm" else elt)
            for name, off in lay.items() if name != "end"}
    nb = images_per_chunk(g, it)
    q = nb * g.P
    m, nn, kk = _gemm_dims(n, g, q)
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


def _forward(k: Any, g: Geometry, area: dict, nb: int, q: int, nimg: ir.Value,
             gemm: Any) -> None:
    n = k.node
    b = k.b
    x, w = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    wptr, wrow = _weight_matrix(k, g, w, area["weight"])
    _memset0(b, area["grid"], n.dtype.itemsize * g.grid)
    for i0, cnt in _chunks(b, nimg, nb):
        with for_range(b, i64(0), cnt, name="ci") as i:
            _fill_grid(b, g, area["grid"], x, b.add(i0, i))
            _im2col(b, g, area["grid"], area["col"], q, _lin(b, (i, g.P)))
        gemm([wptr, wrow, i64(1), area["col"], i64(q), i64(1), area["mat"], i64(q),
              i64(g.OC), _lin(b, (cnt, g.P)), i64(g.K)])
        # Y[o, i*P + p] -> out[i0 + i, o, p]
        with for_range(b, i64(0), cnt, name="si") as i:
            with for_range(b, i64(0), i64(g.OC), name="so") as o:
                src = _lin(b, (o, q), (i, g.P))
                dst = _lin(b, (b.add(i0, i), g.OC * g.P), (o, g.P))
                with for_range(b, i64(0), i64(g.P), name="sp") as p:
                    v = b.load(_gep(b, area["mat"], b.add(src, p)))
                    b.store(v, _gep(b, k.out, b.add(dst, p)))


def _gather_dy(b: ir.IRBuilder, g: Geometry, dy: _Operand, dst: ir.Value, q: int,
               i0: ir.Value, cnt: ir.Value) -> None:
    """The chunk's ``dY`` images as ``[O][q]`` (image ``i`` at columns ``i*P ...``)."""
    s0, s1, s2, s3 = dy.ir
    with for_range(b, i64(0), cnt, name="yi") as i:
        with for_range(b, i64(0), i64(g.OC), name="yo") as o:
            with for_range(b, i64(0), i64(g.OH), name="yh") as oh:
                src = _lin(b, (b.add(i0, i), s0), (o, s1), (oh, s2))
                d = _lin(b, (o, q), (i, g.P), (oh, g.OW))
                with for_range(b, i64(0), i64(g.OW), name="yw") as ow:
                    v = b.load(_gep(b, dy.ptr, b.add(src, _lin(b, (ow, s3)))))
                    b.store(v, _gep(b, dst, b.add(d, ow)))


def _input_grad(k: Any, g: Geometry, area: dict, nb: int, q: int, nimg: ir.Value,
                gemm: Any) -> None:
    n = k.node
    b = k.b
    dy, w = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    wptr, wrow = _weight_matrix(k, g, w, area["weight"])
    it = n.dtype.itemsize
    for i0, cnt in _chunks(b, nimg, nb):
        _gather_dy(b, g, dy, area["mat"], q, i0, cnt)
        # dcol[K, q] = W^T @ dY: A[r, o] = W[o, r]
        gemm([wptr, i64(1), wrow, area["mat"], i64(q), i64(1), area["col"], i64(q),
              i64(g.K), _lin(b, (cnt, g.P)), i64(g.OC)])
        with for_range(b, i64(0), cnt, name="fi") as i:
            _memset0(b, area["grid"], it * g.grid)
            col = _gep(b, area["col"], _lin(b, (i, g.P)))
            _col2im(b, g, col, q, area["grid"], i64(0), i64(g.OH))
            with for_range(b, i64(0), i64(g.C), name="oc") as c:
                with for_range(b, i64(0), i64(g.H), name="oh") as h:
                    s = b.add(_lin(b, (c, g.Hp * g.Wp), (h, g.Wp)), i64(g.ph * g.Wp + g.pw))
                    d = _lin(b, (b.add(i0, i), g.C * g.H * g.W), (c, g.H * g.W), (h, g.W))
                    with for_range(b, i64(0), i64(g.W), name="ow") as ww:
                        v = b.load(_gep(b, area["grid"], b.add(s, ww)))
                        b.store(v, _gep(b, k.out, b.add(d, ww)))


def _weight_grad(k: Any, g: Geometry, area: dict, nb: int, q: int, nimg: ir.Value,
                 gemm: Any) -> None:
    n = k.node
    b = k.b
    x, dy = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    _memset0(b, area["grid"], n.dtype.itemsize * g.grid)
    total = g.OC * g.K
    for i0, cnt in _chunks(b, nimg, nb):
        with for_range(b, i64(0), cnt, name="ci") as i:
            _fill_grid(b, g, area["grid"], x, b.add(i0, i))
            _im2col(b, g, area["grid"], area["col"], q, _lin(b, (i, g.P)))
        _gather_dy(b, g, dy, area["mat"], q, i0, cnt)
        first = b.icmp_signed("==", i0, i64(0))
        # the first chunk's product is dW; later ones go to tmp and are added
        dst = b.select(first, k.out, area["tmp"])
        gemm([area["mat"], i64(q), i64(1), area["col"], i64(1), i64(q), dst, i64(g.K),
              i64(g.OC), i64(g.K), _lin(b, (cnt, g.P))])
        with b.if_then(b.not_(first)):
            with for_range(b, i64(0), i64(total), name="acc") as j:
                p = _gep(b, k.out, j)
                b.store(b.fadd(b.load(p), b.load(_gep(b, area["tmp"], j))), p)
    # no images: the gradient is zero
    with b.if_then(b.icmp_signed("<=", nimg, i64(0))):
        _memset0(b, k.out, n.dtype.itemsize * total)


__all__ = ["plan", "workspace", "describe", "emit", "images_per_chunk", "OPS", "SMALL_MAP",
           "POSITIONS", "COL_BYTES"]
