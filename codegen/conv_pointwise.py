"""1x1 stride-1 convolutions as products on the float GEMM, read and written in place.

A 1x1 convolution with stride 1 and no padding is a matrix product per image: in NCHW each
image is a ``[C, H*W]`` matrix, so ``Y[n] = W @ X[n]`` (``W`` the ``[O, C]`` weight). The
implicit-GEMM kernels of ``codegen.conv`` first copy each image into a zero-bordered grid
and run their own register tiles over it with the whole weight streamed per image; the
float GEMM (``codegen.gemm``: packed, cache-blocked, split over the two threads) runs the
same product faster once an image has more than a few dozen positions. Measured on Zen 4,
one thread, batch 8 (ResNet-50's bottleneck convolutions at 224x224, GFLOP/s, the previous
kernel -> this path, PyTorch's oneDNN in brackets) in ``benchmarks/RESULTS.md``.

Each op is one GEMM call per image, its operands the tensors themselves (strides passed
to the GEMM, nothing copied or repacked but by the GEMM's own packing):

- ``conv2d``: ``Y[n][O, P] = W[O, C] @ X[n][C, P]``;
- ``conv2d_input_grad``: ``dX[n][C, P] = W^T @ dY[n][O, P]`` (``W^T`` through strides);
- ``conv2d_weight_grad``: ``dW[O, C] = sum_n dY[n][O, P] @ X[n]^T``: the first image's
  product written into ``dW``, each later one into a scratch matrix and added, in image
  order, so the sum's order depends on neither the thread count nor anything else.

The GEMM's results depend only on its K blocks, so the thread count does not change them.

Which convolutions (``plan``): float32 or float64, one group, a 1x1 kernel, stride 1, no
padding (dilation does not matter for 1x1), static sizes but the batch, outside debug
builds, at least ``MIN_CHANNELS`` channels on each side and more than ``SMALL_MAP``
positions an image (smaller maps go to ``codegen.conv_gemm``'s chunks of images, whose
products are larger), and each image's positions one contiguous run in every operand
(``H x W`` with unit stride; every buffer is, and a view only when it keeps them so).
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
    _gep,
    _lin,
    _memset0,
    _Operand,
    area_offsets,
    carve,
    conv_geometry,
)
from .conv_epilogue import after_image, call_epilogue, epilogue_values, out_image
from .conv_gemm import SMALL_MAP, accumulate, add_into, gemm_dims
from .gemm import choose_tile, emit_gemm_call, workspace_bytes
from .llvm_util import for_range, i64, mem_type
from .parallel import KernelTask
from .views import strided_view

OPS = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")
MIN_CHANNELS = 64  # fewer: products too thin for the GEMM's tiles (16 -> 16: 42 GFLOP/s)
# positions from which an image's product runs here even when it reduces (K > M): the
# forward of 256 -> 64 at 56x56 gained 5 % here, while 1024 -> 256 at 14x14 and 512 -> 128 at
# 28x28 ran 3-4 % slower than the implicit GEMM's tiles (Zen 4, one thread, batch 8)
WIDE_MAP = 1024

# what a kernel operand's planner makes of it: views stay views, anything else is a buffer
_VIEWS = ("reshape", "permute", "expand", "detach", "affine_norm")


def _positions_contiguous(x: Node) -> bool:
    """Whether every image of 4-d operand ``x`` has its ``H x W`` positions as one
    contiguous run, as the kernel will see it (``views.strided_view`` with any node that is
    not a view taken as a buffer: conv operands are buffers or views of them)."""
    sv = strided_view(x, lambda m: m.op not in _VIEWS)
    if sv is None:
        return True  # a slice or a pad: the planner gives the operand a buffer of its own
    st = sv[1]
    return bool(st[3] == 1 and st[2] == x.shape[3])


def plan(n: Node) -> Geometry | None:
    """The convolution behind ``n`` when this path runs it, else None."""
    if not options.CONV_GEMM or n.op not in OPS or n.dtype not in (
            dt.float32, dt.float64) or any(x.dtype is not n.dtype for x in n.inputs):
        return None
    g = conv_geometry(n)
    if g is None or (g.KH, g.KW, g.sh, g.sw, g.ph, g.pw) != (1, 1, 1, 1, 0, 0):
        return None
    if min(g.C, g.OC) < MIN_CHANNELS or g.P <= SMALL_MAP:
        return None
    m, _, k = gemm_dims(n, g, g.P)
    if n.op != "conv2d_weight_grad" and m < k and g.P < WIDE_MAP:
        return None  # a product that reduces (K > M) on a modest map: the tiles do as well
    # the per-image operands: x (conv2d), dY (input grad), both (weight grad)
    images = n.inputs if n.op == "conv2d_weight_grad" else n.inputs[:1]
    return g if all(_positions_contiguous(x) for x in images) else None


def _layout(n: Node, g: Geometry, wide: bool) -> dict[str, int]:
    """Byte offsets of the workspace's areas (``"end"``: its size): the GEMM's packing, two
    parts (one per thread, or the two halves of one split product), and for the weight
    gradient each half's running sum's scratch (``tmp0``, ``tmp1``) and the second half's
    sum (``acc1``; the first half's is ``dW`` itself)."""
    it = n.dtype.itemsize
    m, nn, k = gemm_dims(n, g, g.P)
    areas = [("gemm", 2 * align(workspace_bytes(m, nn, k, choose_tile(nn, wide, it), it)))]
    if n.op == "conv2d_weight_grad":
        areas += [(name, it * g.OC * g.C) for name in ("tmp0", "tmp1", "acc1")]
    return area_offsets(areas)


def workspace(n: Node, wide: bool) -> int:
    g = plan(n)
    assert g is not None
    return ALIGN + _layout(n, g, wide)["end"]


def describe(n: Node) -> str | None:
    """For ``ir("fused")``: which convolutions run as one GEMM per image, in place."""
    g = plan(n)
    if g is None:
        return None
    what = {"conv2d": "conv", "conv2d_input_grad": "conv input grad",
            "conv2d_weight_grad": "conv weight grad"}[n.op]
    m, nn, k = gemm_dims(n, g, g.P)
    return (f"{what}: 1x1 stride 1, one gemm per image read in place "
            f"([{m}, {k}] @ [{k}, {nn}])")


def _matrix(b: ir.IRBuilder, x: _Operand, img: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Image ``img`` of operand ``x`` as a ``[channels, positions]`` matrix: its first
    element and its row (channel) stride; positions have unit stride (``plan``)."""
    s0, s1, _, _ = x.ir
    return _gep(b, x.ptr, _lin(b, (img, s0))), s1


def emit(k: Any) -> bool:
    """Fill conv kernel ``k`` with this path; False when it does not serve the node.

    Two or more images: each thread takes half of them (``KernelTask.split``), one
    single-threaded GEMM per image on its own packing area; one image: its product split
    over the two threads. Either way each output element comes from the same GEMM code
    over the same K blocks, so results do not depend on the thread count. The weight
    gradient sums each half of the batch on its own (image by image, in order) and adds
    the second half's sum to the first's: the same additions on one thread or two."""
    n = k.node
    if getattr(k, "debug", False):
        return False
    g = plan(n)
    if g is None:
        return False
    b = k.b
    it = n.dtype.itemsize
    elt = mem_type(n.dtype)
    area = carve(b, k.work, _layout(n, g, k.L.wide), elt)
    m, nn, kk = gemm_dims(n, g, g.P)
    tile = choose_tile(nn, k.L.wide, it)
    part_bytes = align(workspace_bytes(m, nn, kk, tile, it))
    wgrad = n.op == "conv2d_weight_grad"
    a_op, b_op = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    for op in (a_op, b_op) if wgrad else (a_op,):  # as ``plan`` saw them (W == OW here)
        assert op.inner_mergeable(g.W), f"{n.op}: an image's positions are not contiguous"
    nimg = k.sym((n if n.op == "conv2d_input_grad" else n.inputs[0]).shape[0])

    def product(bb: ir.IRBuilder, ops: tuple[_Operand, _Operand], img: ir.Value,
                dst: ir.Value, work: ir.Value, alloca: Any, run2: Any) -> None:
        """Image ``img``'s product into ``dst`` (the image's place in the result, its
        staging buffer, or for the weight gradient the sum's matrix)."""
        x, y = ops
        if n.op == "conv2d":  # Y[O, P] = W[O, C] @ X[C, P]
            xp, xr = _matrix(bb, x, img)
            args = [y.ptr, y.ir[0], y.ir[1], xp, xr, i64(1), dst, i64(g.P)]
        elif n.op == "conv2d_input_grad":  # dX[C, P] = W^T @ dY[O, P]: A[c, o] = W[o, c]
            dp, dr = _matrix(bb, x, img)
            args = [y.ptr, y.ir[1], y.ir[0], dp, dr, i64(1), dst, i64(g.P)]
        else:  # dW[O, C] = dY[O, P] @ X[C, P]^T: B[p, c] = X[c, p]
            xp, xr = _matrix(bb, x, img)
            dp, dr = _matrix(bb, y, img)
            args = [dp, dr, i64(1), xp, i64(1), xr, dst, i64(g.C)]
        emit_gemm_call(bb, k.L.module, alloca, tile, elt, [*args, i64(m), i64(nn), i64(kk)],
                       work, i64(part_bytes), run2)

    def halves(task: KernelTask, lo: ir.Value, hi: ir.Value) -> None:
        tb = task.b
        ops = (a_op.in_task(task), b_op.in_task(task))
        raw = task[area["gemm"]]  # bytes (``carve``)
        work = tb.select(task.first, raw, tb.gep(raw, [i64(part_bytes)]))
        if not wgrad:
            with for_range(tb, lo, hi, name="pimg") as i:
                out, at = out_image(task, task[k.out], i)  # a staging buffer: epilogue
                product(tb, ops, i, _gep(tb, out, _lin(tb, (at, m * g.P))), work,
                        task.alloca, None)
                after_image(task, i)
            return
        acc = tb.select(task.first, task[k.out], task[area["acc1"]])
        tmp = tb.select(task.first, task[area["tmp0"]], task[area["tmp1"]])
        with for_range(tb, lo, hi, name="pimg") as i:
            head = tb.icmp_signed("==", i, lo)
            product(tb, ops, i, tb.select(head, acc, tmp), work, task.alloca, None)
            with tb.if_then(tb.not_(head)):
                accumulate(tb, acc, tmp, i64(0), i64(g.OC * g.C))

    values = [*a_op.values(), *b_op.values(), k.out, area["gemm"], *epilogue_values(k)]
    if wgrad:
        values += [area["tmp0"], area["tmp1"], area["acc1"]]
    several = b.icmp_signed(">=", nimg, i64(2))
    with b.if_else(several) as (split_images, one_image):
        with split_images:
            task = KernelTask(k, "imgs", [*values, nimg])
            lo, hi = task.split(task[nimg])
            halves(task, lo, hi)
            task.finish()
            task.dispatch(ir.Constant(ir.IntType(1), 1))
            if wgrad:
                add_into(k, k.out, area["acc1"], g.OC * g.C)
        with one_image:
            with b.if_then(b.icmp_signed("==", nimg, i64(1))):
                epi = None if wgrad else k.epilogue  # (the planner gives dW none)
                # with an epilogue, staged as the task's images are: the entry function
                # passes one form of the consumer for the whole kernel
                dst = k.out if epi is None else b.bitcast(epi.stages[0], k.out.type)
                product(b, (a_op, b_op), i64(0), dst, area["gemm"], k.alloca,
                        k.L.run2_global())
                if epi is not None:
                    call_epilogue(b, epi.fn, [epi.ctx, epi.stages[0], i64(0), i64(1)])
            if wgrad:  # no images: the gradient is zero
                with b.if_then(b.icmp_signed("<=", nimg, i64(0))):
                    _memset0(b, k.out, it * g.OC * g.C)
    return True


__all__ = ["plan", "workspace", "describe", "emit", "OPS", "MIN_CHANNELS", "WIDE_MAP"]
