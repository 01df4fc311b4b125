"""Max-pool indices (``pool_argmax``): the CPU kernel family, registered in
``codegen.kernels``, and the window arithmetic the PTX kernel shares.

The general kernel (``direct``) clamps every tap and skips the ones in the padding with a
select, and finds each window's first tap with a division: right for any padding, dilation
and ``ceil_mode``, but scalar code at ~20 cycles a window (and more: ~68 ticks a window for
a 3x3 one), so it runs only for debug builds and symbolic sizes. Windows inside the image
(all of them without padding, ``MaxPool2d(2)`` on an even size; all but the border with
it, ``MaxPool2d(3, 2, 1)``) have their taps at constant offsets: unrolled over the taps,
branch-free, whole vectors of windows at once along a contiguous row (``kernel``); the
border windows take the general rule, one at a time.

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


def takes(b: ir.IRBuilder, val: ir.Value, best: ir.Value) -> ir.Value:
    """Whether tap value ``val`` replaces the running maximum ``best``: strictly greater,
    or NaN (NaN wins; a later NaN replaces an earlier one), ATen's rule (scalar or lanes)."""
    return b.or_(b.fcmp_ordered(">", val, best), b.fcmp_unordered("uno", val, val))


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
                take = b.and_(takes(b, val, best), b.and_(okh, okw))
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
    return all(interior(n.shape[2 + i], x.shape[2 + i], a["kernel"][i], a["stride"][i],
                        a["padding"][i], a["dilation"][i]) == (0, n.shape[2 + i])
               for i in range(2))


def interior(out: int, size: int, k: int, s: int, p: int, d: int) -> tuple[int, int]:
    """The outputs ``[lo, hi)`` along one axis whose windows lie inside the image: the first
    tap at or after 0 (``o*s - p >= 0``) and the last before ``size`` (``o*s - p + (k-1)*d
    <= size - 1``); ``lo == hi`` when there are none."""
    lo = min(out, -(-p // s))
    top = size - 1 - (k - 1) * d + p
    hi = min(out, top // s + 1) if top >= 0 else 0
    return lo, max(lo, hi)


def _vector_windows(k: Any, src: ir.Value, row: ir.Value, rstride: ir.Value, ih0: ir.Value,
                    orow: ir.Value, ow0: ir.Value, lanes: int, ker: tuple[int, int],
                    steps: tuple[int, int, int], W: int, t: ir.Type, pw: int) -> None:
    """``lanes`` windows of one output row at once (every one inside the image): each tap's
    values are one contiguous load of the row span the windows cover, shuffled to every
    ``sw``-th element; the running maximum and its index (i32 lanes, widened when stored)
    follow the scalar rule lane by lane, so the results are the scalar kernel's. ``row``:
    the first tap row's offset in ``src``, ``ih0`` its index times ``W``."""
    b = k.b
    (KH, KW), (sw, dh, dw) = ker, steps
    span = (lanes - 1) * sw + 1
    st_ = ir.VectorType(t, span)
    it = ir.VectorType(I32, lanes)
    pick = ir.Constant(ir.VectorType(I32, lanes), [i * sw for i in range(lanes)])
    cols = ir.Constant(it, [i * sw for i in range(lanes)])
    iw0 = b.sub(b.mul(ow0, i64(sw)), i64(pw))
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
            take = takes(b, val, best)
            best = b.select(take, val, best)
            arg = b.select(take, flat, arg)
    out = b.bitcast(b.gep(k.out, [b.add(orow, ow0)], inbounds=True),
                    ir.VectorType(I64, lanes).as_pointer())
    b.store(b.sext(arg, ir.VectorType(I64, lanes)), out, align=8)


def kernel(fallback: Callable[[Any], None]) -> Callable[[Any], None]:
    """The kernel for ``pool_argmax``: the unrolled kernel when the sizes are static (and
    not in debug builds), else ``fallback``.

    Windows inside the image (all of them without padding; with it, all but a border one
    or two windows wide: ``MaxPool2d(3, 2, 1)`` after a ResNet's stem) run unrolled over
    the taps, in whole vectors of windows along a row where the row is contiguous. The
    border windows take the general rule one at a time, every tap clamped and those in
    the padding skipped, branch-free. Measured on a ResNet-18 step at 224x224 (batch 8,
    one thread, Zen 4), its stem's ``MaxPool2d(3, 2, 1)`` took 109M time-stamp ticks when
    every window went through ``direct`` (5.6 % of the step), 16.2M this way. Rows of fewer
    windows than a vector take narrower vectors (down to four lanes): the cnn benchmark's
    two ``MaxPool2d(2)`` (14 and 7 windows a row) went from 577K and 285K ticks to 311-350K
    and 176-201K, from 16 % of its step to 10 %."""

    def emit(k: Any) -> None:
        n = k.node
        sv = strided_view(n.inputs[0], k._is_buffer)
        x = n.inputs[0]
        static = all(isinstance(d, int) for d in list(x.shape[1:]) + list(n.shape[1:]))
        if getattr(k, "debug", False) or sv is None or not static:
            fallback(k)
            return
        base, st = sv
        src = k.ptr[base.id]
        b = k.b
        a = n.attrs
        (KH, KW), (sh_, sw), (ph, pw), (dh, dw) = a["kernel"], a["stride"], a["padding"], \
            a["dilation"]
        H, W = x.shape[2:]
        OH, OW = n.shape[2:]
        C = n.shape[1]
        hlo, hhi = interior(OH, H, KH, sh_, ph, dh)
        wlo, whi = interior(OW, W, KW, sw, pw, dw)
        strides = [k.sym(s) for s in st]
        t = reg_type(x.dtype)
        # whole vectors of windows along a row when its elements are contiguous
        vector = (isinstance(st[3], int) and st[3] == 1 and x.dtype.is_float
                  and H * W < 2 ** 31)  # indices in i32 lanes
        lanes = (64 if k.L.wide else 32) // x.dtype.itemsize
        while whi - wlo < lanes and lanes > 4:
            # rows shorter than a vector of windows (the cnn's 14 and 7 windows) take
            # narrower vectors, the rest scalar, instead of every window scalar
            lanes //= 2
        lo, hi = k.split_range or (i64(0), k.sym(n.shape[0]))

        with for_range(b, lo, hi, name="pn") as nb:
            with for_range(b, i64(0), i64(C), name="pc") as c:
                plane = b.add(b.mul(nb, strides[0]), b.mul(c, strides[1]))
                obase = b.mul(b.add(b.mul(nb, i64(C)), c), i64(OH * OW))
                with for_range(b, i64(0), i64(OH), name="poh") as oh:
                    orow = b.add(obase, b.mul(oh, i64(OW)))
                    ih = b.sub(b.mul(oh, i64(sh_)), i64(ph))  # the window's first row

                    def border(ow: ir.Value) -> None:
                        """``direct``'s rule: taps in the padding are skipped, the index
                        starts at the window's first tap inside the image."""
                        first = b.add(b.mul(window_start(b, oh, sh_, ph, dh), i64(W)),
                                      window_start(b, ow, sw, pw, dw))
                        best, arg = fconst(t, float("-inf")), first
                        iw = b.sub(b.mul(ow, i64(sw)), i64(pw))
                        for u in range(KH):
                            r = b.add(ih, i64(u * dh))
                            okh = b.and_(b.icmp_signed(">=", r, i64(0)),
                                         b.icmp_signed("<", r, i64(H)))
                            r = b.select(okh, r, i64(0))
                            for v in range(KW):
                                col = b.add(iw, i64(v * dw))
                                ok = b.and_(okh, b.and_(b.icmp_signed(">=", col, i64(0)),
                                                        b.icmp_signed("<", col, i64(W))))
                                col = b.select(ok, col, i64(0))
                                off = b.add(plane, b.add(b.mul(r, strides[2]),
                                                         b.mul(col, strides[3])))
                                val = b.load(b.gep(src, [off], inbounds=True))
                                take = b.and_(ok, takes(b, val, best))
                                best = b.select(take, val, best)
                                arg = b.select(take, b.add(b.mul(r, i64(W)), col), arg)
                        b.store(arg, b.gep(k.out, [b.add(orow, ow)], inbounds=True))

                    def columns(lo_: int, hi_: int, body: Callable[[ir.Value], None]) -> None:
                        if lo_ < hi_:
                            with for_range(b, i64(lo_), i64(hi_), name="pow") as ow:
                                body(ow)

                    inner = b.and_(b.icmp_signed(">=", oh, i64(hlo)),
                                   b.icmp_signed("<", oh, i64(hhi)))
                    with b.if_else(inner) as (rows_in, rows_border):
                        with rows_in:
                            row = b.add(plane, b.mul(ih, strides[2]))
                            ih0 = b.mul(ih, i64(W))

                            def scalar(ow: ir.Value) -> None:
                                iw0 = b.sub(b.mul(ow, i64(sw)), i64(pw))
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
                                        take = takes(b, val, best)
                                        best = b.select(take, val, best)
                                        arg = b.select(take, flat, arg)
                                b.store(arg, b.gep(k.out, [b.add(orow, ow)], inbounds=True))

                            columns(0, wlo, border)
                            vend = wlo + (whi - wlo) // lanes * lanes if vector else wlo
                            if vend > wlo:
                                with for_range(b, i64(wlo), i64(vend), name="pvow",
                                               step=i64(lanes)) as ow0:
                                    _vector_windows(k, src, row, strides[2], ih0, orow, ow0,
                                                    lanes, (KH, KW), (sw, dh, dw), W, t, pw)
                            columns(vend, whi, scalar)
                            columns(whi, OW, border)
                        with rows_border:
                            columns(0, OW, border)

    emit.__doc__ = fallback.__doc__
    return emit


KERNEL = register(Kernel("pool", ("pool_argmax",), kernel(direct), dense_operands=True))

__all__ = ["inside", "interior", "kernel", "direct", "takes", "window_start", "KERNEL"]
