"""Vector helpers shared by the convolution kernels (``codegen.conv``,
``codegen.wino_wgrad``): masked loads and stores, splats, horizontal sums, and the register
transpose of a square block of vectors."""

from __future__ import annotations

from llvmlite import ir

from .llvm_util import F32, I1, I32, declare


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
        self.zero = ir.Constant(self.vt, [0.0] * lanes)
        self.iota = ir.Constant(ir.VectorType(I32, lanes), list(range(lanes)))

    def splat(self, v: ir.Value) -> ir.Value:
        """An element as a vector."""
        return self.broadcast(v)

    def broadcast(self, v: ir.Value) -> ir.Value:
        """Any scalar (an element, or an address for a gather) as a vector of ``lanes``."""
        b = self.b
        t = ir.VectorType(v.type, self.lanes)
        one = b.insert_element(ir.Constant(t, ir.Undefined), v, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(t, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes))

    def load(self, p: ir.Value) -> ir.Value:
        return self.b.load(self.b.bitcast(p, self.vt.as_pointer()), align=4)

    def const_mask(self, n: int) -> ir.Constant:
        return ir.Constant(ir.VectorType(I1, self.lanes), [int(i < n) for i in range(self.lanes)])

    def mask(self, n: ir.Value) -> ir.Value:
        """Lanes ``< n`` (a run-time i64)."""
        b = self.b
        n32 = b.trunc(n, I32)
        one = b.insert_element(ir.Constant(self.iota.type, ir.Undefined), n32,
                               ir.Constant(I32, 0))
        sp = b.shuffle_vector(one, ir.Constant(self.iota.type, ir.Undefined),
                              ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes))
        return b.icmp_signed("<", self.iota, sp)

    def hsum(self, v: ir.Value) -> ir.Value:
        b = self.b
        w = self.lanes
        while w > 1:
            h = w // 2
            undef = ir.Constant(ir.VectorType(self.elt, w), ir.Undefined)
            lo = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, h), list(range(h))))
            hi = b.shuffle_vector(v, undef,
                                  ir.Constant(ir.VectorType(I32, h), list(range(h, w))))
            v = b.fadd(lo, hi)
            w = h
        return b.extract_element(v, ir.Constant(I32, 0))



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
