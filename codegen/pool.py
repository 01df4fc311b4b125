"""Max-pool indices (``pool_argmax``): the CPU kernel family, registered in
``codegen.kernels``, and the window arithmetic the PTX kernel shares.

The general kernel (``direct``) clamps every tap and skips the ones in the padding with a
select, and finds each window's first tap with a division: right for any padding, dilation
and ``ceil_mode``, but scalar code at ~20 cycles a window. Without padding and with every
window inside the image (``MaxPool2d(2)`` on an even size, the usual case), the taps are
plain loads at constant offsets: the loop over ``ow`` is unrolled over the taps, branch-free,
and LLVM vectorises it (strided loads become interleaved-access shuffles).

The rule is the general kernel's: the first tap starts as the maximum, a later tap replaces
it when it is strictly greater or NaN (NaN wins), and the index is ``ih * W + iw``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir

from graphc.ir import Node

from .emitter import KernelEmitter
from .kernels import Kernel, register
from .llvm_util import I32, I64, fconst, for_range, i64, reg_type
from .views import strided_view


def window_start(b: ir.IRBuilder, o: ir.Value, s: int, p: int, d: int) -> ir.Value:
    """First in-image tap of a pooling window: ``o*s - p`` advanced by whole dilation steps
    until it is >= 0 (shared by the CPU and PTX pool kernels)."""
    h0 = b.sub(b.mul(o, i64(s)), i64(p))
    steps = b.sdiv(b.add(b.sub(i64(0), h0), i64(d - 1)), i64(d))
    return b.select(b.icmp_signed("<", h0, i64(0)), b.add(h0, b.mul(steps, i64(d))), h0)


def direct(k: KernelEmitter) -> None:
    """PyTorch's max-pool index rule: first strict maximum in window order, NaN wins.

    Window taps outside the image are skipped by a select (the load index is clamped), so the
    body is branch-free.
    """
    n = k.node
    x = n.inputs[0]
    a = n.attrs
    b = k.b
    (KH, KW), (sh_, sw), (ph, pw), (dh, dw) = a["kernel"], a["stride"], a["padding"], \
        a["dilation"]
    H, W = x.shape[2:]
    t = reg_type(x.dtype)
    best_slot, arg_slot = k.alloca(t), k.alloca(I64)

    def first(o: ir.Value, s: int, p: int, d: int) -> ir.Value:
        return window_start(b, o, s, p, d)

    def clamp(v: ir.Value, size: int) -> tuple[ir.Value, ir.Value]:
        ok = b.and_(b.icmp_signed(">=", v, i64(0)), b.icmp_signed("<", v, i64(size)))
        v = b.select(b.icmp_signed("<", v, i64(0)), i64(0), v)
        return b.select(b.icmp_signed(">=", v, i64(size)), i64(size - 1), v), ok

    def window(idx: list[Any]) -> None:
        nb, c, oh, ow = idx
        b.store(fconst(t, float("-inf")), best_slot)
        b.store(b.add(b.mul(first(oh, sh_, ph, dh), i64(W)), first(ow, sw, pw, dw)), arg_slot)
        with for_range(b, i64(0), i64(KH), name="u") as u:
            ih, okh = clamp(b.add(b.sub(b.mul(oh, i64(sh_)), i64(ph)), b.mul(u, i64(dh))), H)
            with for_range(b, i64(0), i64(KW), name="v") as v:
                iw, okw = clamp(b.add(b.sub(b.mul(ow, i64(sw)), i64(pw)), b.mul(v, i64(dw))),
                                W)
                val = k.value(x, [nb, c, ih, iw])
                best = b.load(best_slot)
                take = b.or_(b.fcmp_ordered(">", val, best), b.fcmp_unordered("uno", val, val))
                take = b.and_(take, b.and_(okh, okw))
                b.store(b.select(take, val, best), best_slot)
                flat = b.add(b.mul(ih, i64(W)), iw)
                b.store(b.select(take, flat, b.load(arg_slot)), arg_slot)
        k.store_out(list(idx), b.load(arg_slot))

    k.loops(n.shape, window)


def inside(n: Node) -> bool:
    """True when every window of pool node ``n`` lies inside the image."""
    a = n.attrs
    x = n.inputs[0]
    if not all(isinstance(d, int) for d in list(x.shape[1:]) + list(n.shape[1:])):
        return False
    if any(p != 0 for p in a["padding"]):
        return False
    for i in range(2):
        last = (n.shape[2 + i] - 1) * a["stride"][i] + (a["kernel"][i] - 1) * a["dilation"][i]
        if last >= x.shape[2 + i]:
            return False
    return True



def _vector_windows(k: Any, src: ir.Value, row: ir.Value, rstride: ir.Value, ih0: ir.Value,
                    orow: ir.Value, ow0: ir.Value, lanes: int, ker: tuple[int, int],
                    steps: tuple[int, int, int], W: int, t: ir.Type) -> None:
    """``lanes`` windows of one output row at once: each tap's values are one contiguous
    load of the row span the windows cover, shuffled to every ``sw``-th element; the running
    maximum and its index (i32 lanes, widened when stored) follow the scalar rule
    lane by lane, so the results are the scalar kernel's."""
    b = k.b
    (KH, KW), (sw, dh, dw) = ker, steps
    span = (lanes - 1) * sw + 1
    st_ = ir.VectorType(t, span)
    it = ir.VectorType(I32, lanes)
    pick = ir.Constant(ir.VectorType(I32, lanes), [i * sw for i in range(lanes)])
    cols = ir.Constant(it, [i * sw for i in range(lanes)])
    iw0 = b.mul(ow0, i64(sw))
    base_idx = b.trunc(b.add(ih0, iw0), I32)
    one = b.insert_element(ir.Constant(it, ir.Undefined), base_idx, ir.Constant(I32, 0))
    base_vec = b.add(b.shuffle_vector(one, ir.Constant(it, ir.Undefined),
                                      ir.Constant(it, [0] * lanes)), cols)
    best = arg = None
    for u in range(KH):
        for v in range(KW):
            off = b.add(b.add(row, b.mul(i64(u * dh), rstride)), b.add(iw0, i64(v * dw)))
            ptr = b.bitcast(b.gep(src, [off], inbounds=True), st_.as_pointer())
            val = b.shuffle_vector(b.load(ptr, align=4), ir.Constant(st_, ir.Undefined), pick)
            flat = b.add(base_vec, ir.Constant(it, [u * dh * W + v * dw] * lanes))
            if best is None:
                best, arg = val, flat
                continue
            take = b.or_(b.fcmp_ordered(">", val, best), b.fcmp_unordered("uno", val, val))
            best = b.select(take, val, best)
            arg = b.select(take, flat, arg)
    out = b.bitcast(b.gep(k.out, [b.add(orow, ow0)], inbounds=True),
                    ir.VectorType(I64, lanes).as_pointer())
    b.store(b.sext(arg, ir.VectorType(I64, lanes)), out, align=8)

def kernel(fallback: Callable[[Any], None]) -> Callable[[Any], None]:
    """The kernel for ``pool_argmax``: the unrolled kernel when every window is
    inside the image (and not in debug builds), else ``fallback``."""

    def emit(k: Any) -> None:
        n = k.node
        sv = strided_view(n.inputs[0], k._is_buffer)
        if getattr(k, "debug", False) or sv is None or not inside(n):
            fallback(k)
            return
        base, st = sv
        src = k.ptr[base.id]
        b = k.b
        a = n.attrs
        (KH, KW), (sh_, sw), (dh, dw) = a["kernel"], a["stride"], a["dilation"]
        W = n.inputs[0].shape[3]
        OH, OW = n.shape[2:]
        C = n.shape[1]
        strides = [k.sym(s) for s in st]
        t = reg_type(n.inputs[0].dtype)
        # whole vectors of windows along a row when its elements are contiguous
        vector = (isinstance(st[3], int) and st[3] == 1 and n.inputs[0].dtype.is_float
                  and n.inputs[0].shape[2] * W < 2 ** 31)  # indices in i32 lanes
        lanes = (64 if k.L.wide else 32) // n.inputs[0].dtype.itemsize
        lo, hi = k.split_range or (i64(0), k.sym(n.shape[0]))
        with for_range(b, lo, hi, name="pn") as nb:
            with for_range(b, i64(0), i64(C), name="pc") as c:
                plane = b.add(b.mul(nb, strides[0]), b.mul(c, strides[1]))
                obase = b.mul(b.add(b.mul(nb, i64(C)), c), i64(OH * OW))
                with for_range(b, i64(0), i64(OH), name="poh") as oh:
                    row = b.add(plane, b.mul(b.mul(oh, i64(sh_)), strides[2]))
                    orow = b.add(obase, b.mul(oh, i64(OW)))
                    ih0 = b.mul(oh, i64(sh_ * W))
                    def scalar(ow: ir.Value) -> None:
                        iw0 = b.mul(ow, i64(sw))
                        best = arg = None
                        for u in range(KH):
                            for v in range(KW):
                                off = b.add(b.add(row, b.mul(i64(u * dh), strides[2])),
                                            b.mul(b.add(iw0, i64(v * dw)), strides[3]))
                                val = b.load(b.gep(src, [off], inbounds=True))
                                flat = b.add(b.add(ih0, i64(u * dh * W + v * dw)), iw0)
                                if best is None:
                                    best, arg = val, flat
                                    continue
                                take = b.or_(b.fcmp_ordered(">", val, best),
                                             b.fcmp_unordered("uno", val, val))
                                best = b.select(take, val, best)
                                arg = b.select(take, flat, arg)
                        b.store(arg, b.gep(k.out, [b.add(orow, ow)], inbounds=True))

                    nvec = OW // lanes * lanes if vector else 0
                    if nvec:
                        with for_range(b, i64(0), i64(nvec), name="pvow",
                                       step=i64(lanes)) as ow0:
                            _vector_windows(k, src, row, strides[2], ih0, orow, ow0, lanes,
                                            (KH, KW), (sw, dh, dw), W, t)
                    if nvec < OW:
                        with for_range(b, i64(nvec), i64(OW), name="pow") as ow:
                            scalar(ow)

    emit.__doc__ = fallback.__doc__
    return emit


KERNEL = register(Kernel("pool", ("pool_argmax",), kernel(direct), dense_operands=True))

__all__ = ["inside", "kernel", "direct", "window_start", "KERNEL"]
