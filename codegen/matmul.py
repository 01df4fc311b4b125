"""The matrix-product kernel family (``matmul``) for the CPU backend.

The kernel addresses both operands through strided views (a transposed weight is the same
buffer read with swapped strides) and calls the GEMM routines of ``codegen.gemm`` for floats;
integer products use plain loops. Its scratch is one packing area per thread, which the
planner reserves through the ``workspace`` hook. Separate from ``codegen.gemm``, which only
builds GEMM routines (no graph nodes, no kernel emitter), so the AOT and JIT paths can compile
and cache those on their own.
"""

from __future__ import annotations

from typing import Any

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh

from . import conv, conv_bf16, conv_gemm, conv_pointwise, options, wino_gemm, wino_wgrad
from .abi import align
from .emitter import KernelEmitter
from .gemm import choose_tile, degenerate_product, emit_gemm_call, workspace_bytes
from .gemm_bf16 import (
    Bf16Gemm,
    bf16_features,
    bf16_target,
    emit_gemm_bf16_call,
    workspace_bytes_bf16,
)
from .kernels import Kernel, register
from .llvm_util import FAST_ADD, REDUCE_FLAGS, fconst, for_range, i64, reg_type
from .views import contiguous_strides, strided_view


def bf16_kernel(n: Node, wide: bool) -> Bf16Gemm | None:
    """The bf16 GEMM variant for a product of bf16 operands (``None`` for other dtypes):
    the best the target runs (AMX, AVX512-BF16, else float32 FMAs on widened pairs), never
    beyond what the target's vector width allows."""
    if n.inputs[0].dtype is not dt.bfloat16:
        return None
    out = "bf16" if n.dtype is dt.bfloat16 else "f32"
    kern = Bf16Gemm.for_host(out, bf16_features())
    return kern if wide and kern.wide else Bf16Gemm("generic", out, False)


def describe(n: Node, wide: bool, debug: bool = False) -> str | None:
    """The kernel a convolution runs as (every path, in the order ``conv.kernel`` tries
    them; a debug build's are the bounds-checked direct loops) or the GEMM variant a bf16
    product runs on, for ``ir("fused")`` and ``graphc dump``."""
    if n.op in conv_bf16.OPS:
        if debug:
            return "conv: direct loops (debug build: bounds-checked)"
        return (conv_bf16.describe(n, bf16_features())
                or conv.describe_batch_choice(n, wide) or wino_gemm.describe(n)
                or wino_wgrad.describe(n, wide) or conv_pointwise.describe(n)
                or conv_gemm.describe(n) or conv.describe(n, wide))
    kern = bf16_kernel(n, wide) if n.op == "matmul" else None
    if kern is None:
        return None
    return f"gemm: bf16 operands on {kern.isa}, {kern.out} result"


def bf16_native(n: Node, debug: bool = False) -> bool:
    """For ``codegen.legalize``: the CPU backend multiplies bf16 operands as they are, and
    convolves them where the target has matrix units (``codegen.conv_bf16``; not in debug
    builds, whose bounds-checked direct loops take float32).

    Not where only AVX512-BF16 is there and the float32 kernels would run the convolution
    as Winograd F(2x2, 3x3): its 2.25x fewer multiply-adds beat ``vdpbf16ps``'s two per
    lane, so it is computed in float32 between casts (the operands are bf16 values either
    way, the products accumulate in float32 either way, and the result is rounded to its
    dtype as PyTorch's autocast convolution's is). Measured, the ``resnet18`` workload
    under ``--autocast bf16`` on a Zen 4 host: 236 -> 207 ms on one thread, 128 -> 114-116
    ms on two (PyTorch autocast: 224-231 and 134-147 ms). AMX tiles keep every
    convolution; ``options.BF16_WINOGRAD`` off keeps them all too."""
    if n.op in conv_bf16.OPS:
        kern = None if debug else conv_bf16.gemm_kernel(n, "f32", bf16_features())
        if kern is None:
            return False
        return (kern.isa == "amx" or not options.BF16_WINOGRAD
                or not conv.winograd_in_float32(n, kern.wide))
    return n.op == "matmul"


def workspace(n: Node, wide: bool) -> Any:
    """Packing workspace of a float matmul: one area per thread (0 for integer products)."""
    if not n.dtype.is_float:
        return 0
    kern = bf16_kernel(n, wide)
    if kern is not None:
        return 2 * align(workspace_bytes_bf16(n.shape[-2], n.shape[-1], n.inputs[0].shape[-1],
                                              kern.isa))
    t = choose_tile(n.shape[-1], wide, n.dtype.itemsize)
    need = workspace_bytes(n.shape[-2], n.shape[-1], n.inputs[0].shape[-1], t,
                           n.dtype.itemsize)
    return 2 * align(need)


def emit(k: KernelEmitter) -> None:
    """``C = A @ B`` (batched over leading dims): the packed, tiled GEMM for floats, split over
    two threads when that pays (``codegen.gemm``); plain loops for integers."""
    n = k.node
    a, bnode = n.inputs
    sa = strided_view(a, k._is_buffer)
    sb = strided_view(bnode, k._is_buffer)
    assert sa is not None and sb is not None, "matmul operands must be addressable"
    (abuf, ast), (bbuf, bst) = sa, sb
    nb = len(n.shape) - 2
    M, N = n.shape[-2], n.shape[-1]
    K = a.shape[-1]
    b = k.b
    t = reg_type(n.dtype)
    out_st = contiguous_strides(n.shape)

    kern = bf16_kernel(n, k.L.wide)

    def batch_body(bidx: list[Any]) -> None:
        if kern is not None:  # bf16 operands: the bf16 GEMM (codegen.gemm_bf16)
            zero2 = [i64(0), i64(0)]
            origin = b.gep(k.out, [k.linear(bidx + zero2, out_st)], inbounds=True)
            pa = b.gep(k.ptr[abuf.id], [k.linear(bidx + zero2, ast)], inbounds=True)
            pb = b.gep(k.ptr[bbuf.id], [k.linear(bidx + zero2, bst)], inbounds=True)
            args = [pa, k.sym(ast[-2]), k.sym(ast[-1]), pb, k.sym(bst[-2]), k.sym(bst[-1]),
                    origin, k.sym(out_st[-2]), k.sym(M), k.sym(N), k.sym(K)]
            wbytes = k.sym(align(workspace_bytes_bf16(M, N, K, kern.isa)))
            emit_gemm_bf16_call(b, k.L.module, k.alloca, kern, args, k.work, wbytes,
                                k.L.run2_global())
            return
        if n.dtype.is_float:
            tile = choose_tile(N, k.L.wide, n.dtype.itemsize)
            origin = b.gep(k.out, [k.linear(bidx + [i64(0), i64(0)], out_st)], inbounds=True)
            zero2 = [i64(0), i64(0)]
            pa = b.gep(k.ptr[abuf.id], [k.linear(bidx + zero2, ast)], inbounds=True)
            pb = b.gep(k.ptr[bbuf.id], [k.linear(bidx + zero2, bst)], inbounds=True)
            args = [pa, k.sym(ast[-2]), k.sym(ast[-1]), pb, k.sym(bst[-2]), k.sym(bst[-1]),
                    origin, k.sym(out_st[-2]), k.sym(M), k.sym(N), k.sym(K)]
            wbytes = k.sym(align(workspace_bytes(M, N, K, tile, n.dtype.itemsize)))
            if k.debug and not any(isinstance(d, int) and d == 0 for d in (M, N, K)):
                # the GEMM's first and last element of each operand must be in range
                last = [k.sym(sh.dim(d - 1)) for d in (M, K, N)]
                for buf, st, i0, i1 in ((abuf, ast, last[0], last[1]),
                                        (bbuf, bst, last[1], last[2])):
                    k.check_bounds(k.linear(bidx + zero2, st), buf)
                    k.check_bounds(k.linear(bidx + [i0, i1], st), buf)
                k.check_bounds(k.linear(bidx + [last[0], last[2]], out_st), n)
            # a scan's loop-invariant B packed before its loop (``codegen.loop``): the
            # operand's argument holds the packed panels (``gemm.emit_pack_all``)
            packed = pb if n.id in getattr(k.L, "prepacked", ()) else None  # (PTX: none)
            emit_gemm_call(b, k.L.module, k.alloca, tile, t, args, k.work, wbytes,
                           k.L.run2_global(), degenerate_product(M, N, K), packed)
            return
        if sh.same(bst[-1], 1) or not sh.same(bst[-2], 1):
            # i-k-j: broadcast A[m,k] along a contiguous row of B (vectorises over n)
            with for_range(b, i64(0), k.sym(M), name="m") as m:
                with for_range(b, i64(0), k.sym(N), name="n0") as j:
                    b.store(fconst(t, 0.0), k.out_ptr(bidx + [m, j]))
                with for_range(b, i64(0), k.sym(K), name="k") as kk:
                    av = k.load_buffer(abuf, bidx + [m, kk], ast)
                    with for_range(b, i64(0), k.sym(N), name="n") as j:
                        ptr = k.out_ptr(bidx + [m, j])
                        bv = k.load_buffer(bbuf, bidx + [kk, j], bst)
                        b.store(b.fadd(b.load(ptr), b.fmul(av, bv, flags=FAST_ADD),
                                       flags=FAST_ADD), ptr)
        else:
            # dot products along k (B is k-contiguous, as for x @ W.T)
            with for_range(b, i64(0), k.sym(M), name="m") as m:
                with for_range(b, i64(0), k.sym(N), name="n") as j:
                    acc = k.alloca(t)
                    b.store(fconst(t, 0.0), acc)
                    with for_range(b, i64(0), k.sym(K), name="k") as kk:
                        av = k.load_buffer(abuf, bidx + [m, kk], ast)
                        bv = k.load_buffer(bbuf, bidx + [kk, j], bst)
                        b.store(b.fadd(b.load(acc), b.fmul(av, bv, flags=REDUCE_FLAGS),
                                       flags=REDUCE_FLAGS), acc)
                    b.store(b.load(acc), k.out_ptr(bidx + [m, j]))

    if nb:
        k.loops(tuple(n.shape[:nb]), lambda bidx: batch_body(list(bidx)))
    else:
        batch_body([])


KERNEL = register(Kernel("matmul", ("matmul",), emit, workspace=workspace, dense_operands=True))

__all__ = ["emit", "workspace", "bf16_kernel", "bf16_native", "bf16_target", "describe",
           "KERNEL"]
