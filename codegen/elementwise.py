"""Elementwise value rules: the value of one node at one index, given its operands' values.

``ELEMENT_RULES`` maps an op name to ``rule(k, n, idx) -> ir.Value``; ``k`` is the kernel
emitter computing the index (``codegen.emitter.KernelEmitter``, or the PTX backend's subclass),
whose ``value(x, idx)`` yields an operand inline. Every elementwise op (constants, iota and
rand, the unary and binary ops, casts, where, gather) is one rule here, so fused expressions,
loop groups and the PTX backend (which reuses most of these rules) share one definition of
what each op computes. The module depends on nothing above the LLVM helpers and strided views;
the emitter imports the table, not the other way round.
"""

from __future__ import annotations

from typing import Any

import sympy
from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import ops as gops
from graphc.ir.elementwise import ELEMENTWISE

from .emit import Emit, VectorEmit
from .llvm_util import (
    F32,
    I1,
    I64,
    fconst,
    i64,
    reg_type,
    size_fraction,
)
from .views import contiguous_strides

# the kernel emitter (codegen.emitter.KernelEmitter); typed loosely because the emitter imports
# this table
Emitter = Any

# ---------------------------------------------------------------------------------------
# element rules: value of a node at an index, given its operands' values
# ---------------------------------------------------------------------------------------
ElementRule = Any
ELEMENT_RULES: dict[str, ElementRule] = {}


def _erule(*names: str) -> Any:
    def deco(fn: Any) -> Any:
        for n in names:
            ELEMENT_RULES[n] = fn
        return fn

    return deco




def _const_value(k: Emitter, n: Node) -> ir.Value:
    v = n.attrs["value"]
    t = reg_type(n.dtype)
    if isinstance(v, sympy.Basic):
        num, den = size_fraction(v)
        if n.dtype.is_float:
            x = k.b.sitofp(k.sym(num), t)
            return x if den == 1 else k.b.fdiv(x, k.b.sitofp(k.sym(den), t))
        return k.b.trunc(k.sym(v), t) if t != I64 else k.sym(v)
    if n.dtype.is_float:
        return fconst(t, v)
    if n.dtype is dt.bool_:
        return ir.Constant(I1, int(bool(v)))
    return ir.Constant(t, int(v))


@_erule("const")
def _l_const(k, n, idx):
    return _const_value(k, n)


@_erule("iota")
def _l_iota(k, n, idx):
    i = idx[n.attrs["axis"]]
    t = reg_type(n.dtype)
    if n.dtype.is_float:
        return k.b.sitofp(i, t)
    return i if t == I64 else k.b.trunc(i, t)


def counter_uniform(b: ir.IRBuilder, lin: ir.Value, seed: ir.Value) -> ir.Value:
    """The ``rand`` op's float32 value at flat index ``lin`` (i64) under ``seed`` (i64): a
    SplitMix64 hash of the pair, its top 24 bits scaled to [0, 1) (``interpreter.rand_values``
    is the reference). Shared with the fused attention kernels, whose dropout draws the same
    values ``dropout()`` would."""
    x = b.add(lin, b.mul(seed, i64(0x100000001B3)))
    x = b.add(x, i64(0x9E3779B97F4A7C15 - (1 << 64)))
    x = b.mul(b.xor(x, b.lshr(x, i64(30))), i64(0xBF58476D1CE4E5B9 - (1 << 64)))
    x = b.mul(b.xor(x, b.lshr(x, i64(27))), i64(0x94D049BB133111EB - (1 << 64)))
    x = b.xor(x, b.lshr(x, i64(31)))
    bits = b.lshr(x, i64(40))
    return b.fmul(b.uitofp(bits, F32), fconst(F32, 2.0 ** -24))


@_erule("rand")
def _l_rand(k, n, idx):
    seed = k.value(n.inputs[0], [])
    return counter_uniform(k.b, k.linear(idx, contiguous_strides(n.shape)), seed)


@_erule(*[d.name for d in ELEMENTWISE])
def _l_table(k, n, idx):
    """Every op-table elementwise primitive: its ``lower`` expression (``lower_ptx`` on PTX
    where the entry has one), over the operands' values, in the ``Emit`` vocabulary."""
    d = gops.OP_INFO[n.op]
    if getattr(k, "lanes", 0):  # a vector run (``KernelEmitter.lanes``): CPU only
        # an operand read twice (``x * x``) computed once: the tile level has no CSE
        got: dict[int, ir.Value] = {}
        for x in n.inputs:
            if x.id not in got:
                got[x.id] = k.splat(k.value(x, idx))
        return d.lower(VectorEmit(k, n, k.lanes), *[got[x.id] for x in n.inputs])
    e = Emit(k, n)
    rule = d.lower_ptx if (e.ptx and d.lower_ptx is not None) else d.lower
    return rule(e, *[k.value(x, idx) for x in n.inputs])


@_erule("gather")
def _l_gather(k, n, idx):
    x, index = n.inputs
    ax = n.attrs["axis"]
    ix = k.value(index, idx)
    k.check_index(ix, x.shape[ax], k.linear(idx, contiguous_strides(n.shape)), n)
    sub = list(idx)
    sub[ax] = ix
    return k.value(x, sub)
