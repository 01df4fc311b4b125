"""bf16 convolutions on the matrix units: per-image im2col and the bf16 GEMM (CPU backend).

Under ``autocast`` a convolution's operands are bf16 and its result is rounded to bf16 once
from float32 sums (PyTorch's CPU rule; oneDNN runs such convolutions on AMX). Without this
module ``codegen.legalize`` widens them to float32 and the float32 kernels of ``codegen.conv``
run, with casts around: on an AMX host a ResNet-18 step was *slower* under autocast than in
float32 (516 vs 384 ms, one thread), while PyTorch's autocast step ran at 349 ms. Here the
three conv ops become products for the bf16 GEMM of ``codegen.gemm_bf16`` where the target
has AMX or AVX512-BF16 (elsewhere the float32 kernels stay faster than the GEMM's portable
variant, so ``native`` declines and legalisation keeps its casts):

- ``conv2d``: per image, the input is copied into a zero-bordered bf16 grid (``C x Hp x Wp``,
  the border written once per thread), the im2col matrix ``col[K, P]`` (``K = C*KH*KW`` taps,
  ``P = OH*OW`` positions) is copied out of it row by row without a bounds test, and
  ``y_n[O, P] = W[O, K] @ col`` is one GEMM whose bf16 result is rounded once from float32
  sums. The weight is read in place as ``[O, K]`` when its strides allow (a contiguous
  parameter always does), ``col`` stays in L2 (one image at a time).
- ``conv2d_input_grad``: ``dcol[K, P] = W^T @ dY_n`` (float32, in chunks of output rows so a
  chunk stays near L2), scatter-added (col2im) into a zero-bordered float32 grid of the
  image, whose interior is rounded into ``dx`` once. Every stride and dilation takes this
  path: no zero-dilated ``dY``, no wasted products.
- ``conv2d_weight_grad``: ``dW[O, K] = sum_n dY_n @ col_n^T``: chunks of ``nb`` images
  (``nb * P`` about 1K positions: the 8x8 maps of a ResNet's last stage would otherwise give
  products with K = 64) are one GEMM each, ``col`` of the chunk laid out ``[K][nb*P]`` and
  ``dY`` copied to ``[O][nb*P]`` when it is not one image in place; each product lands in a
  float32 scratch block added into a float32 accumulator, rounded into ``dW`` at the end.

Two threads split the images (``parallel.KernelTask``): each part has its own grid, im2col
matrix, GEMM scratch and (weight gradient) accumulator, and calls the GEMM single-threaded;
the weight gradient adds the two parts' accumulators afterwards. A one-thread run computes
part 0 then part 1 with the same code, so results are bit-identical across thread counts.
AMX and ``vdpbf16ps`` treat bf16 inputs and float32 results below 2^-126 as zero, as the
bf16 GEMM documents (and oneDNN's kernels do). Groups other than 1, symbolic spatial sizes
and debug builds keep the float32 path. The kernels are plain loops around GEMM calls,
compiled at O3 so LLVM vectorises the grid and im2col copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh

from .abi import ALIGN, align
from .gemm_bf16 import Bf16Gemm, emit_gemm_bf16_call, workspace_bytes_bf16
from .hostinfo import BF16_CONV_OPS
from .llvm_util import F32, I1, I8, I8P, I16, I64, VOID, declare, f32_to_bf16, for_range, i64
from .parallel import CONV_PAR_MIN_MACS, KernelTask
from .views import StridedOperand

OPS = BF16_CONV_OPS
# matrix-unit variants this path runs on (the portable variant is slower than float32 convs)
ISAS = ("amx", "avx512bf16")
DCOL_BYTES = 512 * 1024  # input gradient: float32 dcol per chunk of output rows
WGRAD_POSITIONS = 1024  # weight gradient: positions per GEMM (images per chunk * P)
WGRAD_MAX_IMAGES = 16


@dataclass(frozen=True)
class Geometry:
    """The convolution ``x[N, C, H, W] * w[O, C, KH, KW] -> y[N, O, OH, OW]`` behind a conv
    node (whichever of the three ops it is), with every size but the batch known."""

    C: int
    OC: int
    H: int
    W: int
    KH: int
    KW: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    OH: int
    OW: int

    @property
    def K(self) -> int:  # noqa: N802 - the GEMM's K: taps (c, kh, kw)
        return self.C * self.KH * self.KW

    @property
    def P(self) -> int:  # noqa: N802 - output positions per image
        return self.OH * self.OW

    @property
    def Hp(self) -> int:  # noqa: N802 - padded grid rows
        return self.H + 2 * self.ph

    @property
    def Wp(self) -> int:  # noqa: N802
        return self.W + 2 * self.pw

    @property
    def grid(self) -> int:
        return self.C * self.Hp * self.Wp

    @property
    def rows_per_chunk(self) -> int:
        """Input gradient: output rows per dcol chunk (float32 ``K x rows*OW``)."""
        return max(1, min(self.OH, DCOL_BYTES // (4 * self.K * self.OW)))

    @property
    def images_per_chunk(self) -> int:
        """Weight gradient: images per GEMM."""
        return max(1, min(WGRAD_MAX_IMAGES, WGRAD_POSITIONS // self.P))


def geometry(n: Node) -> Geometry | None:
    """The convolution behind ``n`` when this path can run it: one of ``OPS``, bf16
    operands, one group, every size but the batch static."""
    if n.op not in OPS or any(x.dtype is not dt.bfloat16 for x in n.inputs):
        return None
    if n.dtype not in (dt.bfloat16, dt.float32):
        return None
    return conv_geometry(n)


def conv_geometry(n: Node) -> Geometry | None:
    """The convolution behind conv node ``n`` (any of ``OPS``, any dtype) when it has one
    group and every size but the batch is static (``codegen.conv_gemm`` shares it)."""
    a = n.attrs
    if a["groups"] != 1:
        return None
    if n.op == "conv2d":
        x, w = n.inputs
        y = n
    elif n.op == "conv2d_input_grad":
        y, w = n.inputs
        x = n
    else:
        x, y = n.inputs
        w = n
    dims = list(x.shape[1:]) + list(y.shape[1:]) + list(w.shape)
    if not all(isinstance(d, int) for d in dims):
        return None
    (s_h, s_w), (ph, pw), (dh, dw) = a["stride"], a["padding"], a["dilation"]
    OC, C, KH, KW = w.shape  # noqa: N806
    return Geometry(C, OC, x.shape[2], x.shape[3], KH, KW, s_h, s_w, ph, pw, dh, dw,
                    y.shape[2], y.shape[3])


def gemm_kernel(n: Node, out: str, features: str | None) -> Bf16Gemm | None:
    """The bf16 GEMM variant the target would run ``n``'s products on, or None when this
    path does not serve ``n`` there."""
    if geometry(n) is None:
        return None
    kern = Bf16Gemm.for_host(out, features)
    return kern if kern.isa in ISAS else None


def native(n: Node, features: str | None) -> bool:
    """Whether the CPU backend can convolve ``n``'s bf16 operands as they are
    (``features``: the target's LLVM feature string, None for this host); whether it does
    is ``codegen.matmul.bf16_native``'s call."""
    return gemm_kernel(n, "f32", features) is not None


def describe(n: Node, features: str | None) -> str | None:
    """The variant a bf16 convolution runs on, for ``ir("fused")`` and ``graphc dump``."""
    kern = gemm_kernel(n, "f32", features)
    if kern is None:
        return None
    return f"conv: im2col + bf16 gemm on {kern.isa}, {n.dtype.name} result"


# ---------------------------------------------------------------------------------------
# workspace: a shared prefix (the weight repacked, when its strides need it), then one
# region per thread part
# ---------------------------------------------------------------------------------------
def _part_layout(n: Node, g: Geometry, isa: str) -> dict[str, int]:
    """Byte offsets of one part's areas (``"end"``: its size)."""
    if n.op == "conv2d":
        areas = [("gemm", workspace_bytes_bf16(g.OC, g.P, g.K, isa)), ("grid", 2 * g.grid),
                 ("col", 2 * g.K * g.P)]
    elif n.op == "conv2d_input_grad":
        pc = g.rows_per_chunk * g.OW
        areas = [("gemm", workspace_bytes_bf16(g.K, pc, g.OC, isa)), ("dcol", 4 * g.K * pc),
                 ("acc", 4 * g.grid), ("dy", 2 * g.OC * g.P)]
    else:
        q = g.images_per_chunk * g.P
        areas = [("gemm", workspace_bytes_bf16(g.OC, g.K, q, isa)), ("grid", 2 * g.grid),
                 ("col", 2 * g.K * q), ("dy", 2 * g.OC * q), ("tmp", 4 * g.OC * g.K),
                 ("acc", 4 * g.OC * g.K)]
    return area_offsets(areas)


def area_offsets(areas: list[tuple[str, Any]]) -> dict[str, int]:
    """Byte offsets of ``(name, bytes)`` areas laid out one after the other, each aligned;
    ``"end"``: the total (``codegen.conv_gemm`` and ``codegen.wino_gemm`` lay out theirs
    the same way)."""
    out, at = {}, 0
    for name, size in areas:
        out[name] = at
        at += align(int(size))
    out["end"] = at
    return out


def carve(b: ir.IRBuilder, work: ir.Value, layout: dict[str, int], elt: ir.Type
          ) -> dict[str, ir.Value]:
    """The areas of ``layout`` in the kernel's workspace ``work`` (aligned first) as
    ``elt`` pointers, the GEMM's packing area (``"gemm"``) as bytes."""
    base = b.inttoptr(b.and_(b.add(b.ptrtoint(work, I64), i64(ALIGN - 1)), i64(-ALIGN)), I8P)
    return {name: _at(b, base, off, I8 if name == "gemm" else elt)
            for name, off in layout.items() if name != "end"}


def _prefix_bytes(n: Node, g: Geometry) -> int:
    return align(2 * g.OC * g.K) if n.op != "conv2d_weight_grad" else 0


def workspace_bytes(n: Node, isa: str) -> int:
    g = geometry(n)
    assert g is not None
    return ALIGN + _prefix_bytes(n, g) + 2 * _part_layout(n, g, isa)["end"]


# ---------------------------------------------------------------------------------------
# emission helpers
# ---------------------------------------------------------------------------------------
def _gep(b: ir.IRBuilder, p: ir.Value, i: ir.Value | int) -> ir.Value:
    return b.gep(p, [i if isinstance(i, ir.Value) else i64(i)], inbounds=True)


def _at(b: ir.IRBuilder, base: ir.Value, offset: int | ir.Value, elt: ir.Type) -> ir.Value:
    off = offset if isinstance(offset, ir.Value) else i64(offset)
    return b.bitcast(b.gep(base, [off], inbounds=True), elt.as_pointer())


def _lin(b: ir.IRBuilder, *terms: tuple[ir.Value, ir.Value | int]) -> ir.Value:
    """``sum(i * s)`` over ``(index, stride)`` pairs (i64)."""
    out: ir.Value = i64(0)
    for i, s in terms:
        if isinstance(s, int):
            if s == 0:
                continue
            t = i if s == 1 else b.mul(i, i64(s), flags=("nsw",))
        else:
            t = b.mul(i, s, flags=("nsw",))
        out = t if (isinstance(out, ir.Constant) and out.constant == 0) else b.add(
            out, t, flags=("nsw",))
    return out


def _memset0(b: ir.IRBuilder, p: ir.Value, nbytes: int | ir.Value) -> None:
    memset = declare(b.module, "llvm.memset.p0.i64", VOID, [I8P, I8, I64, I1])
    size = nbytes if isinstance(nbytes, ir.Value) else i64(nbytes)
    b.call(memset, [b.bitcast(p, I8P), ir.Constant(I8, 0), size, ir.Constant(I1, 0)])


class _Operand(StridedOperand):
    """A 4-d operand: its buffer pointer and strides (static dims where known, and as IR)."""

    def mergeable(self, dims: tuple[int, int, int]) -> bool:
        """Whether dims 1..3 (sizes ``dims``) form one contiguous run."""
        s = self.static
        return (sh.same(s[3], 1) and sh.same(s[2], dims[2])
                and sh.same(s[1], dims[1] * dims[2]))

    def inner_mergeable(self, ow: int) -> bool:
        """Whether dims 2, 3 (``OH x OW``) form one contiguous run."""
        s = self.static
        return sh.same(s[3], 1) and sh.same(s[2], ow)


def _fill_grid(b: ir.IRBuilder, g: Geometry, grid: ir.Value, x: _Operand, img: ir.Value
               ) -> None:
    """Image ``img`` of ``x`` into the interior of the zero-bordered bf16 grid."""
    s0, s1, s2, s3 = x.ir
    with for_range(b, i64(0), i64(g.C), name="gc") as c:
        with for_range(b, i64(0), i64(g.H), name="gh") as h:
            src = _lin(b, (img, s0), (c, s1), (h, s2))
            dst = _lin(b, (c, g.Hp * g.Wp), (h, g.Wp))
            dst = b.add(dst, i64(g.ph * g.Wp + g.pw))
            with for_range(b, i64(0), i64(g.W), name="gw") as w:
                v = b.load(_gep(b, x.ptr, b.add(src, _lin(b, (w, s3)))))
                b.store(v, _gep(b, grid, b.add(dst, w)))


def _im2col(b: ir.IRBuilder, g: Geometry, grid: ir.Value, col: ir.Value, ld: int,
            col0: ir.Value) -> None:
    """``col[r, col0 + oh*OW + ow] = grid[c, oh*sh + kh*dh, ow*sw + kw*dw]`` for every tap
    ``r = (c*KH + kh)*KW + kw`` (rows ``ld`` apart)."""
    with for_range(b, i64(0), i64(g.C), name="ic") as c:
        with for_range(b, i64(0), i64(g.KH), name="ikh") as kh:
            with for_range(b, i64(0), i64(g.KW), name="ikw") as kw:
                r = _lin(b, (c, g.KH * g.KW), (kh, g.KW), (kw, 1))
                row = b.add(_lin(b, (r, ld)), col0)
                src0 = _lin(b, (c, g.Hp * g.Wp), (kh, g.dh * g.Wp), (kw, g.dw))
                with for_range(b, i64(0), i64(g.OH), name="ioh") as oh:
                    src = b.add(src0, _lin(b, (oh, g.sh * g.Wp)))
                    dst = b.add(row, _lin(b, (oh, g.OW)))
                    with for_range(b, i64(0), i64(g.OW), name="iow") as ow:
                        v = b.load(_gep(b, grid, b.add(src, _lin(b, (ow, g.sw)))))
                        b.store(v, _gep(b, col, b.add(dst, ow)))


def _weight_matrix(k: Any, g: Geometry, w: _Operand, prefix: ir.Value
                   ) -> tuple[ir.Value, ir.Value]:
    """The weight as ``[O, K]`` with unit k stride: ``(pointer, row stride)``, in place when
    its strides allow, else repacked into the workspace prefix."""
    b = k.b
    if w.mergeable((g.C, g.KH, g.KW)):
        return w.ptr, w.ir[0]
    s0, s1, s2, s3 = w.ir
    with for_range(b, i64(0), i64(g.OC), name="wo") as o:
        with for_range(b, i64(0), i64(g.C), name="wc") as c:
            with for_range(b, i64(0), i64(g.KH), name="wkh") as kh:
                with for_range(b, i64(0), i64(g.KW), name="wkw") as kw:
                    v = b.load(_gep(b, w.ptr, _lin(b, (o, s0), (c, s1), (kh, s2), (kw, s3))))
                    dst = _lin(b, (o, g.K), (c, g.KH * g.KW), (kh, g.KW), (kw, 1))
                    b.store(v, _gep(b, prefix, dst))
    return prefix, i64(g.K)


def _gemm(tb: ir.IRBuilder, mod: ir.Module, kern: Bf16Gemm, work: ir.Value, args: list
          ) -> None:
    """One single-threaded bf16 GEMM call (the parts already split the images)."""
    emit_gemm_bf16_call(tb, mod, None, kern, args, work, i64(0), None)


def _part_regions(task: KernelTask, layout: dict[str, int], base: ir.Value
                  ) -> dict[str, ir.Value]:
    """This part's areas as ``i8*`` (part p's region starts ``p * layout["end"]`` after
    ``base``)."""
    b = task.b
    start = b.add(b.ptrtoint(base, I64), b.mul(task.part, i64(layout["end"])))
    return {name: b.inttoptr(b.add(start, i64(off)), I8P) for name, off in layout.items()
            if name != "end"}


# ---------------------------------------------------------------------------------------
# the three ops
# ---------------------------------------------------------------------------------------
def _weighted_task(k: Any, g: Geometry, kern: Bf16Gemm, base: ir.Value, prefix: ir.Value,
                   name: str) -> tuple[KernelTask, dict[str, ir.Value], _Operand, ir.Value,
                                       ir.Value, ir.Value]:
    """The forward's and input gradient's common start: the weight as an ``[O, K]`` matrix
    (in place or repacked into the prefix), a thread task over the images, its part's
    regions and the 4-d operand (input 0) as the task sees it."""
    n = k.node
    x, w = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    wptr, wrow = _weight_matrix(k, g, w, k.b.bitcast(prefix, I16.as_pointer()))
    nimg = k.sym(n.shape[0])
    task = KernelTask(k, name, [base, x.ptr, *x.ir, wptr, wrow, k.out, nimg])
    regions = _part_regions(task, _part_layout(n, g, kern.isa), task[base])
    return task, regions, x.in_task(task), wptr, wrow, nimg


def _forward(k: Any, g: Geometry, kern: Bf16Gemm, base: ir.Value, prefix: ir.Value) -> None:
    task, r, xt, wptr, wrow, nimg = _weighted_task(k, g, kern, base, prefix, "bf16conv")
    tb = task.b
    grid = tb.bitcast(r["grid"], I16.as_pointer())
    col = tb.bitcast(r["col"], I16.as_pointer())
    lo, hi = task.split(task[nimg])
    _memset0(tb, grid, 2 * g.grid)
    with for_range(tb, lo, hi, name="img") as img:
        _fill_grid(tb, g, grid, xt, img)
        _im2col(tb, g, grid, col, g.P, i64(0))
        out = _at(tb, task[k.out], _lin(tb, (img, g.OC * g.P)), kern.out_type)
        _gemm(tb, k.L.module, kern, r["gemm"],
              [task[wptr], task[wrow], i64(1), col, i64(g.P), i64(1), out, i64(g.P),
               i64(g.OC), i64(g.P), i64(g.K)])
    task.finish()
    _dispatch(k, task, nimg, g)


def _input_grad(k: Any, g: Geometry, kern: Bf16Gemm, base: ir.Value, prefix: ir.Value
                ) -> None:
    n = k.node
    task, r, dy, wptr, wrow, nimg = _weighted_task(k, g, kern, base, prefix, "bf16igrad")
    tb = task.b
    dcol = tb.bitcast(r["dcol"], F32.as_pointer())
    acc = tb.bitcast(r["acc"], F32.as_pointer())
    dyp, dys = dy.ptr, dy.ir
    in_place = dy.inner_mergeable(g.OW)
    rc = g.rows_per_chunk
    pc = rc * g.OW
    lo, hi = task.split(task[nimg])
    with for_range(tb, lo, hi, name="img") as img:
        if in_place:
            src, ch_stride = _gep(tb, dyp, _lin(tb, (img, dys[0]))), dys[1]
        else:  # dY's image as [O][P]
            src, ch_stride = tb.bitcast(r["dy"], I16.as_pointer()), i64(g.P)
            with for_range(tb, i64(0), i64(g.OC), name="yo") as o:
                with for_range(tb, i64(0), i64(g.OH), name="yh") as oh:
                    with for_range(tb, i64(0), i64(g.OW), name="yw") as ow:
                        v = tb.load(_gep(tb, dyp, _lin(tb, (img, dys[0]), (o, dys[1]),
                                                       (oh, dys[2]), (ow, dys[3]))))
                        tb.store(v, _gep(tb, src, _lin(tb, (o, g.P), (oh, g.OW), (ow, 1))))
        _memset0(tb, acc, 4 * g.grid)
        with for_range(tb, i64(0), i64(g.OH), name="chunk", step=i64(rc)) as oh0:
            left = tb.sub(i64(g.OH), oh0)
            rows = tb.select(tb.icmp_signed("<", left, i64(rc)), left, i64(rc))
            _gemm(tb, k.L.module, kern, r["gemm"],
                  [task[wptr], i64(1), task[wrow], _gep(tb, src, _lin(tb, (oh0, g.OW))),
                   ch_stride, i64(1), dcol, i64(pc), i64(g.K), _lin(tb, (rows, g.OW)),
                   i64(g.OC)])
            _col2im(tb, g, dcol, pc, acc, oh0, rows)
        # the grid's interior, rounded once, is the image's gradient
        with for_range(tb, i64(0), i64(g.C), name="oc") as c:
            with for_range(tb, i64(0), i64(g.H), name="oh") as h:
                s = _b_add(tb, _lin(tb, (c, g.Hp * g.Wp), (h, g.Wp)), g.ph * g.Wp + g.pw)
                d = _lin(tb, (img, g.C * g.H * g.W), (c, g.H * g.W), (h, g.W))
                with for_range(tb, i64(0), i64(g.W), name="ow") as ww:
                    v = tb.load(_gep(tb, acc, tb.add(s, ww)))
                    _store_result(tb, n, task[k.out], tb.add(d, ww), v)
    task.finish()
    _dispatch(k, task, nimg, g)


def _b_add(b: ir.IRBuilder, v: ir.Value, c: int) -> ir.Value:
    return v if c == 0 else b.add(v, i64(c))


def _store_result(b: ir.IRBuilder, n: Node, out: ir.Value, i: ir.Value, v: ir.Value) -> None:
    """A float32 result into ``n``'s output: rounded to bf16 bits, or as it is."""
    b.store(f32_to_bf16(b, v) if n.dtype is dt.bfloat16 else v, _gep(b, out, i))


def _col2im(b: ir.IRBuilder, g: Geometry, dcol: ir.Value, ld: int, acc: ir.Value,
            oh0: ir.Value, rows: ir.Value) -> None:
    """``acc[c, oh*sh + kh*dh, ow*sw + kw*dw] += dcol[r, (oh - oh0)*OW + ow]`` for the output
    rows ``oh0 .. oh0 + rows`` of every tap ``r``."""
    with for_range(b, i64(0), i64(g.C), name="fc") as c:
        with for_range(b, i64(0), i64(g.KH), name="fkh") as kh:
            with for_range(b, i64(0), i64(g.KW), name="fkw") as kw:
                r = _lin(b, (c, g.KH * g.KW), (kh, g.KW), (kw, 1))
                dst0 = _lin(b, (c, g.Hp * g.Wp), (kh, g.dh * g.Wp), (kw, g.dw))
                with for_range(b, i64(0), rows, name="foh") as j:
                    dst = b.add(dst0, _lin(b, (b.add(oh0, j), g.sh * g.Wp)))
                    src = _lin(b, (r, ld), (j, g.OW))
                    with for_range(b, i64(0), i64(g.OW), name="fow") as ow:
                        p = _gep(b, acc, b.add(dst, _lin(b, (ow, g.sw))))
                        v = b.load(_gep(b, dcol, b.add(src, ow)))
                        b.store(b.fadd(b.load(p), v), p)


def _weight_grad(k: Any, g: Geometry, kern: Bf16Gemm, base: ir.Value) -> None:
    n = k.node
    b = k.b
    x, dy = _Operand(k, n.inputs[0]), _Operand(k, n.inputs[1])
    nimg = k.sym(n.inputs[0].shape[0])
    layout = _part_layout(n, g, kern.isa)
    nb = g.images_per_chunk
    q = nb * g.P
    in_place = nb == 1 and dy.inner_mergeable(g.OW)
    task = KernelTask(k, "bf16wgrad", [base, x.ptr, *x.ir, dy.ptr, *dy.ir, nimg])
    tb = task.b
    r = _part_regions(task, layout, task[base])
    grid = tb.bitcast(r["grid"], I16.as_pointer())
    col = tb.bitcast(r["col"], I16.as_pointer())
    dyc = tb.bitcast(r["dy"], I16.as_pointer())
    tmp = tb.bitcast(r["tmp"], F32.as_pointer())
    acc = tb.bitcast(r["acc"], F32.as_pointer())
    xt = x.in_task(task)
    dyp, dys = task[dy.ptr], [task[s] for s in dy.ir]
    lo, hi = task.split(task[nimg])
    _memset0(tb, grid, 2 * g.grid)
    _memset0(tb, acc, 4 * g.OC * g.K)
    with for_range(tb, lo, hi, name="chunk", step=i64(nb)) as i0:
        left = tb.sub(hi, i0)
        cnt = tb.select(tb.icmp_signed("<", left, i64(nb)), left, i64(nb))
        with for_range(tb, i64(0), cnt, name="ci") as i:
            img = tb.add(i0, i)
            _fill_grid(tb, g, grid, xt, img)
            _im2col(tb, g, grid, col, q, _lin(tb, (i, g.P)))
            if not in_place:  # dY's images as [O][nb*P]
                with for_range(tb, i64(0), i64(g.OC), name="yo") as o:
                    with for_range(tb, i64(0), i64(g.OH), name="yh") as oh:
                        with for_range(tb, i64(0), i64(g.OW), name="yw") as ow:
                            v = tb.load(_gep(tb, dyp, _lin(tb, (img, dys[0]), (o, dys[1]),
                                                           (oh, dys[2]), (ow, dys[3]))))
                            d = _lin(tb, (o, q), (i, g.P), (oh, g.OW), (ow, 1))
                            tb.store(v, _gep(tb, dyc, d))
        if in_place:
            a, sam = _gep(tb, dyp, _lin(tb, (i0, dys[0]))), dys[1]
        else:
            a, sam = dyc, i64(q)
        _gemm(tb, k.L.module, kern, r["gemm"],
              [a, sam, i64(1), col, i64(1), i64(q), tmp, i64(g.K), i64(g.OC), i64(g.K),
               _lin(tb, (cnt, g.P))])
        with for_range(tb, i64(0), i64(g.OC * g.K), name="acc") as j:
            p = _gep(tb, acc, j)
            tb.store(tb.fadd(tb.load(p), tb.load(_gep(tb, tmp, j))), p)
    task.finish()
    _dispatch(k, task, nimg, g)
    # the two parts' sums, rounded once
    acc0 = _at(b, base, layout["acc"], F32)
    acc1 = _at(b, base, layout["end"] + layout["acc"], F32)
    with for_range(b, i64(0), i64(g.OC * g.K), name="dw") as j:
        v = b.fadd(b.load(_gep(b, acc0, j)), b.load(_gep(b, acc1, j)))
        _store_result(b, n, k.out, j, v)


def _dispatch(k: Any, task: KernelTask, nimg: ir.Value, g: Geometry) -> None:
    b = k.b
    macs = b.mul(nimg, i64(g.OC * g.K * g.P))
    task.dispatch(b.and_(b.icmp_signed(">=", macs, i64(CONV_PAR_MIN_MACS)),
                         b.icmp_signed(">=", nimg, i64(2))))


def emit(k: Any, features: str | None) -> bool:
    """Fill conv kernel ``k`` on the matrix units; False when this path does not serve its
    node (the caller emits the float32 kernels)."""
    n = k.node
    if getattr(k, "debug", False):
        return False
    out = "bf16" if n.dtype is dt.bfloat16 and n.op == "conv2d" else "f32"
    kern = gemm_kernel(n, out, features)
    g = geometry(n)
    if kern is None or g is None:
        return False
    b = k.b
    base = b.inttoptr(b.and_(b.add(b.ptrtoint(k.work, I64), i64(ALIGN - 1)), i64(-ALIGN)),
                      I8P)
    prefix = base
    base = _at(b, base, _prefix_bytes(n, g), I8)
    if n.op == "conv2d":
        _forward(k, g, kern, base, prefix)
    elif n.op == "conv2d_input_grad":
        _input_grad(k, g, kern, base, prefix)
    else:
        _weight_grad(k, g, kern, base)
    return True


__all__ = ["Geometry", "geometry", "conv_geometry", "area_offsets", "carve", "gemm_kernel",
           "native", "describe", "workspace_bytes", "emit", "OPS", "ISAS"]
