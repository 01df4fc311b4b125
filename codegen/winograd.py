"""Winograd F(2x2, 3x3)'s transforms (Lavin & Gray), shared by the per-image kernel of
``codegen.conv`` and the batched one of ``codegen.wino_gemm``: the matrices ``B^T``, ``G``
and ``A^T``, their application as sums of scaled values (scalars or vectors alike), the
filter transform ``U = G g G^T`` a vector of result channels at a time, and the store of
one element of a tile's 2x2 output block, which an odd map's last row or column leaves
out."""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from .llvm_util import F32, I1, I32, I64, declare, for_range, i64
from .vecops import V

BT = ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1))
G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
AT = ((1, 1, 1, 0), (0, 1, -1, -1))


def lin(b: ir.IRBuilder, coef: tuple, xs: list[ir.Value]) -> ir.Value:
    """``sum coef[i] * xs[i]`` with the zero terms left out and +-1 as adds/subtractions."""
    out = None
    for c, x in zip(coef, xs):
        if c == 0:
            continue
        if c not in (1, -1):
            x = b.fmul(x, ir.Constant(x.type, _splat(x.type, float(c))))
            c = 1
        if out is None:
            out = x if c == 1 else b.fsub(ir.Constant(x.type, _splat(x.type, 0.0)), x)
        else:
            out = b.fadd(out, x) if c == 1 else b.fsub(out, x)
    assert out is not None
    return out


def _splat(t: ir.Type, v: float) -> Any:
    return [v] * t.count if isinstance(t, ir.VectorType) else v


def store_output(b: ir.IRBuilder, v: ir.Value, dst: ir.Value, a: int, c: int, oh: ir.Value,
                 ow: ir.Value, height: int, width: int) -> None:
    """Store element ``(a, c)`` of a tile's 2x2 output block (at row ``oh``, column ``ow``
    of a ``height x width`` map) unless it lies past an odd map's last row or column."""
    ok = None
    if a and height % 2:
        ok = b.icmp_signed("<", oh, i64(height))
    if c and width % 2:
        okc = b.icmp_signed("<", ow, i64(width))
        ok = okc if ok is None else b.and_(ok, okc)
    if ok is None:
        b.store(v, dst)
    else:
        with b.if_then(ok):
            b.store(v, dst)


def transform_filters(b: ir.IRBuilder, vec: V, w: ir.Value, wst: list[ir.Value], flip: bool,
                      S: int, M: int, u: ir.Value, ld: int, lo: ir.Value, hi: ir.Value,
                      plane: int | None = None) -> None:
    """``U[xi][s][m] = (G g G^T)[xi]`` (planes ``plane`` elements apart, ``S * ld`` unless
    given; rows ``ld``) for the source channels ``lo <= s < hi`` and every result channel
    ``m < M``; ``g`` is the 3x3 filter ``w[m, s]`` of a forward convolution, or ``w[s, m]``
    flipped for an input gradient (``flip``); ``wst``: ``w``'s four strides (elements).
    Columns ``M <= m < ld`` are not written.

    A vector of result channels at a time: each of the nine taps is one gather (the
    channels are ``w``'s stride apart), the sums are ``lin``'s on vectors, and each of the
    16 results is one store into a row of U. Every lane computes exactly the scalar sums,
    so U does not change by a bit. The two kernels each had a scalar copy of this loop (a
    filter at a time, nine loads and 16 scalar stores). The lanes' offsets are 64-bit
    whatever the stride: 32-bit ones, which LLVM turns into one 16-lane ``vgatherdps``,
    were slower (the 512 -> 512 convolution below at batch 1: 3.3-3.8 against 2.7-3.4 ms,
    alternating runs). Measured on a Zen 4 core: the transform alone, 512 -> 512 channels
    (262,144 filters), scalar 1.9-2.8 ms, vectors 1.3-1.7 ms; the whole batched
    convolution on 4x4 maps against the scalar loops, batch 1 3.6-4.2 -> 3.0-3.5 ms, the
    input gradient at batch 8 6.3 -> 5.9 ms (the products and writing U's 16 MB dominate
    there)."""
    L = vec.lanes
    plane = S * ld if plane is None else plane
    it = 4 if vec.elt == F32 else 8
    sfx = f"v{L}{'f32' if it == 4 else 'f64'}"
    mt = ir.VectorType(I1, L)
    pt = ir.VectorType(vec.elt.as_pointer(), L)
    gather = declare(b.module, f"llvm.masked.gather.{sfx}.v{L}p0", vec.vt,
                     [pt, I32, mt, vec.vt])
    s_st, m_st = (wst[0], wst[1]) if flip else (wst[1], wst[0])
    i64v = ir.VectorType(I64, L)
    lane_bytes = b.mul(ir.Constant(i64v, list(range(L))), vec.broadcast(b.mul(m_st, i64(it))))
    base = b.ptrtoint(w, I64)

    def filters(s: ir.Value, m0: ir.Value, n: int) -> None:
        mask = vec.const_mask(n)
        first = b.add(b.mul(s, s_st), b.mul(m0, m_st))
        g = []
        for kh in range(3):
            row = []
            for kw in range(3):
                fh, fw = (2 - kh, 2 - kw) if flip else (kh, kw)
                at = b.add(first, b.add(b.mul(i64(fh), wst[2]), b.mul(i64(fw), wst[3])))
                addr = b.add(base, b.mul(at, i64(it)))
                ptrs = b.inttoptr(b.add(vec.broadcast(addr), lane_bytes), pt)
                row.append(b.call(gather, [ptrs, ir.Constant(I32, it), mask, vec.zero]))
            g.append(row)
        gg = [[lin(b, G[i], [g[r][j] for r in range(3)]) for j in range(3)] for i in range(4)]
        for i in range(4):
            for j in range(4):
                dst = b.gep(u, [b.add(i64((i * 4 + j) * plane), b.add(b.mul(s, i64(ld)), m0))],
                            inbounds=True)
                val = lin(b, G[j], gg[i])
                if n == L:
                    b.store(val, b.bitcast(dst, vec.vt.as_pointer()), align=it)
                else:
                    b.call(vec.mstore, [val, dst, mask])

    # the source channels outermost: the 16 planes' rows are then written whole, one after
    # the other (with them innermost, 16 rows ``ld`` apart were open in each plane at once:
    # 512 -> 512 channels 3.5-4.3 against 1.3-2.2 ms)
    with for_range(b, lo, hi, name="us") as s:
        if M // L:
            with for_range(b, i64(0), i64(M // L), name="um") as mv:
                filters(s, b.mul(mv, i64(L)), L)
        if M % L:
            filters(s, i64(M // L * L), M % L)
