"""Vector helpers shared by the convolution kernels (``codegen.conv``,
``codegen.wino_wgrad``): masked loads and stores, splats, horizontal sums, and the register
transpose of a square block of vectors."""

from __future__ import annotations

import functools

from llvmlite import ir

from .llvm_util import F32, I1, I32, declare, lane_indices, splat, undef


class V:
    """Vector helpers for one element type and width."""

    def __init__(self, b: ir.IRBuilder, mod: ir.Module, elt: ir.Type, lanes: int) -> None:
        self.b, self.elt, self.lanes = b, elt, lanes
        self.vt = ir.VectorType(elt, lanes)
        sfx = f"v{lanes}{'f32' if elt == F32 else 'f64'}"
        self.fma = declare(mod, f"llvm.fmuladd.{sfx}", self.vt, [self.vt] * 3)
        ep = elt.as_pointer()
        mt = ir.VectorType(I1, lanes)
        self.mload = declare(mod, f"llvm.masked.load.{sfx}.p0", self.vt, [ep, mt, self.vt])
        self.mstore = declare(mod, f"llvm.masked.store.{sfx}.p0", ir.VoidType(),
                              [self.vt, ep, mt])
        self.zero = _zero_vector(self.vt)
        self.iota = lane_indices(tuple(range(lanes)))

    def splat(self, v: ir.Value) -> ir.Value:
        """An element as a vector."""
        return self.broadcast(v)

    def broadcast(self, v: ir.Value) -> ir.Value:
        """Any scalar (an element, or an address for a gather) as a vector of ``lanes``."""
        return splat(self.b, v, self.lanes)

    def load(self, p: ir.Value) -> ir.Value:
        return self.b.load(self.b.bitcast(p, self.vt.as_pointer()), align=4)

    def const_mask(self, n: int) -> ir.Constant:
        return _mask(self.lanes, n)

    def mask(self, n: ir.Value) -> ir.Value:
        """Lanes ``< n`` (a run-time i64)."""
        b = self.b
        return b.icmp_signed("<", self.iota, splat(b, b.trunc(n, I32), self.lanes))

    def hsum(self, v: ir.Value) -> ir.Value:
        b = self.b
        w = self.lanes
        while w > 1:
            h = w // 2
            u = undef(ir.VectorType(self.elt, w))
            lo = b.shuffle_vector(v, u, lane_indices(tuple(range(h))))
            hi = b.shuffle_vector(v, u, lane_indices(tuple(range(h, w))))
            v = b.fadd(lo, hi)
            w = h
        return b.extract_element(v, ir.Constant(I32, 0))



@functools.lru_cache(maxsize=64)
def _zero_vector(vt: ir.VectorType) -> ir.Constant:
    return ir.Constant(vt, [0.0] * vt.count)


@functools.lru_cache(maxsize=1024)
def _mask(lanes: int, n: int) -> ir.Constant:
    """Lanes ``< n`` as a constant (one object per mask: printed once)."""
    return ir.Constant(ir.VectorType(I1, lanes), [int(i < n) for i in range(lanes)])


def transpose_block(b: ir.IRBuilder, vs: list[ir.Value]) -> list[ir.Value]:
    """The transpose of ``n`` vectors of ``n`` lanes (``n`` a power of two): one stage per
    bit of the index swaps that bit between row and column, ``n`` two-input shuffles a
    stage (``n log n`` in all, which x86 lowers to unpack/permute instructions)."""
    n = len(vs)
    vs = list(vs)
    bit = 1
    while bit < n:
        lo = [c if not c & bit else n + (c ^ bit) for c in range(n)]
        hi = [c | bit if not c & bit else n + c for c in range(n)]
        lo_m = ir.Constant(ir.VectorType(I32, n), lo)
        hi_m = ir.Constant(ir.VectorType(I32, n), hi)
        for r in range(n):
            if r & bit:
                continue
            a, c = vs[r], vs[r | bit]
            vs[r], vs[r | bit] = b.shuffle_vector(a, c, lo_m), b.shuffle_vector(a, c, hi_m)
        bit <<= 1
    return vs


__all__ = ["V", "transpose_block"]
