"""Max-pool indices (``pool_argmax``) for windows that lie inside the image (CPU backend).

The general kernel in ``lower.py`` clamps every tap and skips the ones in the padding with a
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

from graphc.ir import Node

from .llvm_util import for_range, i64


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


def kernel(fallback: Callable[[Any], None]) -> Callable[[Any], None]:
    """The KERNELS entry for ``pool_argmax``: the unrolled kernel when every window is
    inside the image (and not in debug builds), else ``fallback``."""

    def emit(k: Any) -> None:
        from .lower import strided_view

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
        with for_range(b, i64(0), k.sym(n.shape[0]), name="pn") as nb:
            with for_range(b, i64(0), i64(C), name="pc") as c:
                plane = b.add(b.mul(nb, strides[0]), b.mul(c, strides[1]))
                obase = b.mul(b.add(b.mul(nb, i64(C)), c), i64(OH * OW))
                with for_range(b, i64(0), i64(OH), name="poh") as oh:
                    row = b.add(plane, b.mul(b.mul(oh, i64(sh_)), strides[2]))
                    orow = b.add(obase, b.mul(oh, i64(OW)))
                    ih0 = b.mul(oh, i64(sh_ * W))
                    with for_range(b, i64(0), i64(OW), name="pow") as ow:
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

    emit.__doc__ = fallback.__doc__
    return emit


__all__ = ["inside", "kernel"]
