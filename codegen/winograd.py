"""Winograd F(2x2, 3x3)'s transforms (Lavin & Gray), shared by the per-image kernel of
``codegen.conv`` and the batched one of ``codegen.wino_gemm``: the matrices ``B^T``, ``G``
and ``A^T``, their application as sums of scaled values (scalars or vectors alike), and the
store of one element of a tile's 2x2 output block, which an odd map's last row or column
leaves out."""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from .llvm_util import i64

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
