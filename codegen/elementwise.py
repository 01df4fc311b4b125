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

from .llvm_util import (
    F32,
    FAST_ADD,
    I1,
    I64,
    fconst,
    for_range,
    i64,
    intrinsic,
    reg_type,
)
from .views import contiguous_strides
from .vmath import UNARY as VMATH_UNARY
from .vmath import VMath

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
        num, den = sympy.fraction(sympy.together(v))
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


@_erule("rand")
def _l_rand(k, n, idx):
    b = k.b
    seed = k.value(n.inputs[0], [])
    lin = k.linear(idx, contiguous_strides(n.shape))
    x = b.add(lin, b.mul(seed, i64(0x100000001B3)))
    x = b.add(x, i64(0x9E3779B97F4A7C15 - (1 << 64)))
    x = b.mul(b.xor(x, b.lshr(x, i64(30))), i64(0xBF58476D1CE4E5B9 - (1 << 64)))
    x = b.mul(b.xor(x, b.lshr(x, i64(27))), i64(0x94D049BB133111EB - (1 << 64)))
    x = b.xor(x, b.lshr(x, i64(31)))
    bits = b.lshr(x, i64(40))
    return b.fmul(b.uitofp(bits, F32), fconst(F32, 2.0 ** -24))


def _unary_float(k: Emitter, n: Node, x: ir.Value) -> ir.Value:
    b = k.b
    t = x.type
    mod = k.L.module
    op = n.op
    if op == "neg":
        return b.fneg(x)
    if op == "abs":
        return b.call(intrinsic(mod, "llvm.fabs", t), [x])
    if op == "sqrt":
        return b.call(intrinsic(mod, "llvm.sqrt", t), [x])
    if op in VMATH_UNARY:
        # inline IR, not libm: LLVM would scalarise llvm.exp & co. into one call per lane
        return getattr(VMath(b, mod), op)(x)
    if op == "relu":
        return b.select(b.fcmp_unordered(">", x, fconst(t, 0.0)), x, fconst(t, 0.0))
    if op == "sign":
        pos = b.fcmp_ordered(">", x, fconst(t, 0.0))
        neg = b.fcmp_ordered("<", x, fconst(t, 0.0))
        return b.select(pos, fconst(t, 1.0), b.select(neg, fconst(t, -1.0), x))
    raise NotImplementedError(f"no CPU lowering for {op} on floats")


def _unary_int(k: Emitter, n: Node, x: ir.Value) -> ir.Value:
    b = k.b
    t = x.type
    zero = ir.Constant(t, 0)
    op = n.op
    if op == "not":
        return b.not_(x)
    if op == "neg":
        return b.sub(zero, x)
    if op == "abs":
        return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
    if op == "relu":
        return b.select(b.icmp_signed(">", x, zero), x, zero)
    if op == "sign":
        pos = b.zext(b.icmp_signed(">", x, zero), t)
        neg = b.zext(b.icmp_signed("<", x, zero), t)
        return b.sub(pos, neg)
    raise NotImplementedError(f"no CPU lowering for {op} on integers")


@_erule(*[o for o in gops.UNARY if o != "cast"])
def _l_unary(k, n, idx):
    x = k.value(n.inputs[0], idx)
    return _unary_float(k, n, x) if n.inputs[0].dtype.is_float else _unary_int(k, n, x)


@_erule("cast")
def _l_cast(k, n, idx):
    x = k.value(n.inputs[0], idx)
    src, dst = n.inputs[0].dtype, n.dtype
    b = k.b
    st, tt = reg_type(src), reg_type(dst)
    if src is dst:
        return x
    if dst is dt.bool_:
        if src.is_float:
            return b.fcmp_unordered("!=", x, fconst(st, 0.0))
        return b.icmp_signed("!=", x, ir.Constant(st, 0))
    if src is dt.bool_:
        return b.uitofp(x, tt) if dst.is_float else b.zext(x, tt)
    if src.is_float and dst.is_float:
        return b.fptrunc(x, tt) if src.itemsize > dst.itemsize else b.fpext(x, tt)
    if src.is_float:
        return b.fptosi(x, tt)
    if dst.is_float:
        return b.sitofp(x, tt)
    return b.trunc(x, tt) if src.itemsize > dst.itemsize else b.sext(x, tt)


_FCMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=="}
_ICMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _pow(k: Emitter, n: Node, x: ir.Value, y: ir.Value) -> ir.Value:
    b = k.b
    e = n.inputs[1]
    base = e
    while base.op in ("expand", "reshape"):
        base = base.inputs[0]
    if base.op == "const" and not isinstance(base.attrs["value"], sympy.Basic):
        v = float(base.attrs["value"])
        if v == 2.0:
            return b.fmul(x, x)
        if v == 1.0:
            return x
        if v == 0.5:
            return b.call(intrinsic(k.L.module, "llvm.sqrt", x.type), [x])
        if v == 3.0:
            return b.fmul(b.fmul(x, x), x)
        if v == -1.0:
            return b.fdiv(fconst(x.type, 1.0), x)
    if x.type == F32:
        return VMath(b, k.L.module).pow(x, y)  # vectorisable, evaluated in f64
    return b.call(intrinsic(k.L.module, "llvm.pow", x.type, 2), [x, y])


def _int_pow(k: Emitter, x: ir.Value, y: ir.Value) -> ir.Value:
    """Integer ``x ** y`` as PyTorch computes it: square-and-multiply with wrap-around for
    ``y >= 0``; for ``y < 0`` (truncated 1 / x**|y|) 1 when x == 1, +-1 when x == -1 by the
    parity of y, else 0. One select per bit of y, so the loop has no data-dependent branch."""
    b = k.b
    t = x.type
    one, zero = ir.Constant(t, 1), ir.Constant(t, 0)
    r_slot, base_slot, e_slot = k.alloca(t), k.alloca(t), k.alloca(t)
    b.store(one, r_slot)
    b.store(x, base_slot)
    neg = b.icmp_signed("<", y, zero)
    b.store(b.select(neg, zero, y), e_slot)
    bits = t.width - 1
    with for_range(b, i64(0), i64(bits), name="powbit"):
        e = b.load(e_slot)
        r, base = b.load(r_slot), b.load(base_slot)
        odd = b.icmp_unsigned("!=", b.and_(e, one), zero)
        b.store(b.select(odd, b.mul(r, base), r), r_slot)
        b.store(b.mul(base, base), base_slot)
        b.store(b.lshr(e, one), e_slot)
    r = b.load(r_slot)
    y_odd = b.icmp_unsigned("!=", b.and_(y, one), zero)
    m1 = ir.Constant(t, -1)
    negr = b.select(b.icmp_signed("==", x, one), one,
                    b.select(b.icmp_signed("==", x, m1), b.select(y_odd, m1, one), zero))
    return b.select(neg, negr, r)


@_erule(*[o for o in gops.BINARY])
def _l_binary(k, n, idx):
    x = k.value(n.inputs[0], idx)
    y = k.value(n.inputs[1], idx)
    b = k.b
    op = n.op
    t = n.inputs[0].dtype
    if t.is_float:
        if op == "add":
            return b.fadd(x, y, flags=FAST_ADD)
        if op == "sub":
            return b.fsub(x, y, flags=FAST_ADD)
        if op == "mul":
            return b.fmul(x, y, flags=FAST_ADD)
        if op == "div":
            return b.fdiv(x, y)
        if op == "pow":
            return _pow(k, n, x, y)
        if op in ("maximum", "minimum"):
            name = "llvm.maximum" if op == "maximum" else "llvm.minimum"
            return b.call(intrinsic(k.L.module, name, x.type, 2), [x, y])
        if op == "ne":
            return b.fcmp_unordered("!=", x, y)
        if op in _FCMP:
            return b.fcmp_ordered(_FCMP[op], x, y)
    else:
        if op == "add":
            return b.add(x, y)
        if op == "sub":
            return b.sub(x, y)
        if op == "mul":
            return b.mul(x, y)
        if op == "div":
            zero = ir.Constant(x.type, 0)
            y1 = b.select(b.icmp_signed("==", y, zero), ir.Constant(x.type, 1), y)
            q = b.sdiv(x, y1)
            r = b.srem(x, y1)
            fix = b.and_(b.icmp_signed("!=", r, zero),
                         b.icmp_signed("!=", b.icmp_signed("<", r, zero),
                                       b.icmp_signed("<", y1, zero)))
            return b.sub(q, b.zext(fix, x.type))
        if op in ("maximum", "minimum"):
            pred = ">" if op == "maximum" else "<"
            if t is dt.bool_:  # i1 compares signed as 0 > -1: true is the larger bool
                return b.or_(x, y) if op == "maximum" else b.and_(x, y)
            return b.select(b.icmp_signed(pred, x, y), x, y)
        if op == "pow":
            return _int_pow(k, x, y)
        if op == "and":
            return b.and_(x, y)
        if op == "or":
            return b.or_(x, y)
        if op in _ICMP:
            return b.icmp_signed(_ICMP[op], x, y) if t is not dt.bool_ else \
                b.icmp_unsigned(_ICMP[op], x, y)
    raise NotImplementedError(f"no CPU lowering for {op} on {t.name}")


@_erule("where")
def _l_where(k, n, idx):
    c = k.value(n.inputs[0], idx)
    return k.b.select(c, k.value(n.inputs[1], idx), k.value(n.inputs[2], idx))


@_erule("gather")
def _l_gather(k, n, idx):
    x, index = n.inputs
    ax = n.attrs["axis"]
    ix = k.value(index, idx)
    k.check_index(ix, x.shape[ax], k.linear(idx, contiguous_strides(n.shape)), n)
    sub = list(idx)
    sub[ax] = ix
    return k.value(x, sub)
