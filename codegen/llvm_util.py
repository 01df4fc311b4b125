"""Small llvmlite helpers: types, loops, symbolic-shape expressions, scalar math.

These keep the kernel emitter readable (numba's ``cgutils`` style): a loop is a context
manager, a sympy dimension becomes i64 arithmetic on the run-time symbol values.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sympy
from llvmlite import ir

from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
VOID = ir.VoidType()
I8P = I8.as_pointer()

# bfloat16 lives in memory as its 16 bits and in registers as the float32 of equal value
# (every bf16 is exactly a float32): kernels compute in float32 and round when they store
_LL = {dt.float32: F32, dt.float64: F64, dt.int64: I64, dt.int32: I32, dt.bool_: I1,
       dt.bfloat16: F32}
_MEM = {dt.float32: F32, dt.float64: F64, dt.int64: I64, dt.int32: I32, dt.bool_: I8,
        dt.bfloat16: I16}

FAST_ADD = ("contract",)
REDUCE_FLAGS = ("reassoc", "contract")


def reg_type(d: dt.DType) -> ir.Type:
    """Register type of a dtype (bool is i1)."""
    return _LL[d]


def mem_type(d: dt.DType) -> ir.Type:
    """In-memory type of a dtype (bool is one byte, as numpy stores it)."""
    return _MEM[d]


def bf16_to_f32(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """A bf16 (i16 bits) as float32: the bits are the float's upper half, so this is exact."""
    return b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), F32)


def _rne_bits(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """The float32 bits of ``v`` rounded to nearest even at bit 16 (the bf16 in the top half;
    the low half is garbage). NaN is handled by the callers."""
    bits = b.bitcast(v, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    return b.add(b.add(bits, ir.Constant(I32, 0x7FFF)), lsb)


def f32_to_bf16(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A float32 rounded to bf16 bits (i16), to nearest even; NaN becomes the quiet NaN
    0x7FC0 (PyTorch's ``round_to_nearest_even``, and the reference interpreter's rule)."""
    hi = b.trunc(b.lshr(_rne_bits(b, v), ir.Constant(I32, 16)), I16)
    return b.select(b.fcmp_unordered("uno", v, v), ir.Constant(I16, 0x7FC0), hi)


def round_bf16(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A float32 rounded to the nearest bf16 value, kept as float32 (what a bf16 op's result
    is in registers); NaN stays NaN."""
    r = b.bitcast(b.and_(_rne_bits(b, v), ir.Constant(I32, -65536)), F32)
    return b.select(b.fcmp_unordered("uno", v, v), v, r)


def i64(v: int) -> ir.Constant:
    """An i64 constant, one object per value: llvmlite caches a value's printed text on the
    object, so the tens of thousands of offsets and bounds a network's kernels name are
    formatted once each instead of once per use."""
    return _i64(int(v))


@functools.lru_cache(maxsize=4096)
def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


_i32_zero = ir.Constant(ir.IntType(32), 0)


class _Literal(ir.Constant):
    """A constant printed as the literal given (``undef``): llvmlite spells a vector
    ``undef`` out lane by lane (``<16 x float> <float undef, ...>``, each lane a constant
    formatted on its own), a tenth of the printing time of a convolution's kernels, for what
    LLVM reads as one word."""

    def __init__(self, typ: ir.Type, text: str) -> None:
        self.type = typ
        self.constant = text

    def _get_reference(self) -> str:
        return self.constant


@functools.lru_cache(maxsize=256)
def undef(t: ir.Type) -> ir.Constant:
    """``t``'s ``undef`` (one object per type, printed once)."""
    return _Literal(t, "undef")


def splat(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """The scalar ``v`` in every lane of a ``lanes``-wide vector (insert into lane 0, then a
    shuffle with an all-zero mask: what LLVM turns into a broadcast)."""
    t = ir.VectorType(v.type, lanes)
    one = b.insert_element(undef(t), v, _i32_zero)
    return b.shuffle_vector(one, undef(t), lane_indices((0,) * lanes))


@functools.lru_cache(maxsize=1024)
def lane_indices(idx: tuple[int, ...]) -> ir.Constant:
    """A vector of i32 lane numbers (a shuffle's mask), one object per mask, printed once."""
    return ir.Constant(ir.VectorType(I32, len(idx)), list(idx))


def fconst(t: ir.Type, v: float) -> ir.Constant:
    """A floating-point constant of type ``t`` (scalar)."""
    return ir.Constant(t, float(v))


def log_special_cases(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """log's IEEE special values over a result ``y`` valid for finite positive ``x``:
    log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, log(NaN) = NaN (the CPU and PTX
    vector-math routines share them)."""
    t = x.type
    y = b.select(b.fcmp_ordered("==", x, fconst(t, 0.0)), fconst(t, float("-inf")), y)
    y = b.select(b.fcmp_ordered("<", x, fconst(t, 0.0)), fconst(t, float("nan")), y)
    y = b.select(b.fcmp_ordered("==", x, fconst(t, float("inf"))), x, y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


@contextmanager
def for_range(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, name: str = "i",
              step: ir.Value | None = None) -> Iterator[ir.Value]:
    """``for i in range(start, stop[, step])`` with an i64 induction variable (``step > 0``;
    unit steps get nuw/nsw increments, which the vectoriser wants)."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.end")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", i, stop), body, done)
    b.position_at_end(body)
    yield i
    if step is None:
        nxt = b.add(i, i64(1), name=f"{name}.next", flags=("nuw", "nsw"))
    else:
        nxt = b.add(i, step, flags=("nsw",))
    i.add_incoming(nxt, b.block)
    b.branch(head)
    b.position_at_end(done)


def size_fraction(e: sympy.Expr) -> tuple[Any, Any]:
    """``(numerator, denominator)`` of a floor's or ceiling's argument: a sum of monomials
    with rational coefficients without sympy's symbolic arithmetic (``shapes.plus``), any
    other expression through ``together``."""
    if _rational_poly(e):
        return sh.numerator_denominator(e)
    return sympy.fraction(sympy.together(e))


def _integer_valued(m: sympy.Expr) -> bool:
    """A product of symbols (positive integer powers), floors, ceilings, Min/Max and Mod
    terms: an integer for every value of the (integer) size symbols."""
    if m.is_Symbol or isinstance(m, (sympy.floor, sympy.ceiling, sympy.Min, sympy.Max,
                                     sympy.Mod)):
        return True
    if m.is_Pow:
        return m.exp.is_Integer and int(m.exp) > 0 and _integer_valued(m.base)
    return m.is_Mul and all(_integer_valued(a) for a in m.args)


def _rational_poly(e: sympy.Expr) -> bool:
    """Whether ``e`` is a sum of rational multiples of integer-valued terms (what sizes,
    offsets and their floors are made of)."""
    for t in (e.args if e.is_Add else (e,)):
        if t.is_Rational:
            continue
        c, m = t.as_coeff_Mul()
        if not (c.is_Rational and _integer_valued(m)):
            return False
    return True


class SymEmitter:
    """Emits sympy integer expressions as i64 values, caching per function."""

    def __init__(self, b: ir.IRBuilder, syms: dict[sympy.Symbol, ir.Value]) -> None:
        self.b = b
        self.syms = syms
        self.cache: dict[Any, ir.Value] = {}

    def __call__(self, e: Any) -> ir.Value:
        if isinstance(e, int):
            return i64(e)
        e = sympy.sympify(e)
        if e.is_Integer:
            return i64(int(e))
        hit = self.cache.get(e)
        if hit is not None:
            return hit
        v = self._emit(e)
        self.cache[e] = v
        return v

    def _emit(self, e: sympy.Expr) -> ir.Value:
        b = self.b
        if e.is_Symbol:
            return self.syms[e]
        if e.is_Add:
            args = [self(a) for a in e.args]
            out = args[0]
            for a in args[1:]:
                out = b.add(out, a)
            return out
        if e.is_Mul:
            num, den = sympy.fraction(e)
            if den != 1:
                return self.floordiv(self(num), self(den))
            args = [self(a) for a in e.args]
            out = args[0]
            for a in args[1:]:
                out = b.mul(out, a)
            return out
        if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
            base = self(e.base)
            out = base
            for _ in range(int(e.exp) - 1):
                out = b.mul(out, base)
            return out
        if isinstance(e, sympy.floor):
            num, den = size_fraction(e.args[0])
            return self.floordiv(self(num), self(den))
        if isinstance(e, sympy.ceiling):
            num, den = size_fraction(e.args[0])
            n, d = self(num), self(den)
            return b.sub(i64(0), self.floordiv(b.sub(i64(0), n), d))
        if isinstance(e, sympy.Mod):
            x, m = self(e.args[0]), self(e.args[1])
            return b.sub(x, b.mul(self.floordiv(x, m), m))
        if isinstance(e, (sympy.Max, sympy.Min)):
            args = [self(a) for a in e.args]
            out = args[0]
            pred = ">" if isinstance(e, sympy.Max) else "<"
            for a in args[1:]:
                out = b.select(b.icmp_signed(pred, out, a), out, a)
            return out
        raise NotImplementedError(f"cannot lower shape expression {e}")

    def floordiv(self, x: ir.Value, y: ir.Value) -> ir.Value:
        b = self.b
        q = b.sdiv(x, y)
        r = b.srem(x, y)
        fix = b.and_(b.icmp_signed("!=", r, i64(0)),
                     b.icmp_signed("!=", b.icmp_signed("<", r, i64(0)),
                                   b.icmp_signed("<", y, i64(0))))
        return b.sub(q, b.zext(fix, I64))


def declare(mod: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = mod.globals.get(name)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(ret, args), name)
    return fn


def intrinsic(mod: ir.Module, name: str, t: ir.Type, n: int = 1) -> ir.Function:
    suffix = "f32" if t == F32 else "f64"
    return declare(mod, f"{name}.{suffix}", t, [t] * n)


def libm(mod: ir.Module, name: str, t: ir.Type) -> ir.Function:
    return declare(mod, name + ("f" if t == F32 else ""), t, [t])
