"""The vocabulary the op table's element expressions are written in (``OpDef.lower``).

Why a vocabulary instead of raw llvmlite calls in the table: an expression such as
``e.mul(x, e.math("sigmoid", x))`` must work for float32/float64, signed integers and bool,
on the CPU and on PTX. ``Emit`` picks the instruction for the operand type (``fadd`` or
``add``, ordered or unordered compare, ``llvm.maximum`` or ``select``), the vector-math
routine (``vmath``, the same straight-line IR for both backends), and the few places where
PTX needs different code (``pow`` in float64: ``llvm.pow`` has no NVPTX lowering).

One ``Emit`` serves one node: ``t`` is the LLVM register type of its value operands
(``where``'s branches, not its condition) and ``node`` is there for rules that look at their
operands' graph (``pow`` specialises constant exponents).
"""

from __future__ import annotations

from typing import Any

import sympy
from llvmlite import ir

from graphc.ir import dtypes as dt

from .llvm_util import F32, F64, I1, declare, fconst, for_range, i64, intrinsic, reg_type
from .vmath import VMath

_FCMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class Emit:
    """Type-generic element operations for one node inside one kernel."""

    def __init__(self, k: Any, node: Any) -> None:
        self.k = k
        self.b: ir.IRBuilder = k.b
        self.node = node
        self.mod: ir.Module = k.L.module
        operand = node.inputs[-1] if node.inputs else node
        self.dtype: dt.DType = operand.dtype
        self.t: ir.Type = reg_type(self.dtype)
        self.is_float = self.dtype.is_float
        self.ptx = str(getattr(self.mod, "triple", "")).startswith("nvptx")

    # -- constants and calls ---------------------------------------------------------------
    def c(self, v: float) -> ir.Constant:
        """``v`` in the operand type."""
        if self.is_float:
            return fconst(self.t, v)
        if self.dtype is dt.bool_:
            return ir.Constant(I1, int(bool(v)))
        return ir.Constant(self.t, int(v))

    def intr(self, name: str, *xs: ir.Value) -> ir.Value:
        """``llvm.<name>.f32/f64`` on float operands (``sqrt``, ``fabs``, ``floor`` ...)."""
        return self.b.call(intrinsic(self.mod, f"llvm.{name}", xs[0].type, len(xs)), list(xs))

    def math(self, name: str, *xs: ir.Value) -> ir.Value:
        """A ``vmath`` routine: branch-free IR that vectorises on the CPU and lowers on PTX."""
        return getattr(VMath(self.b, self.mod), name)(*xs)

    def select(self, c: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(c, x, y)

    # -- arithmetic ------------------------------------------------------------------------
    def add(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fadd(x, y) if self.is_float else self.b.add(x, y)

    def sub(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fsub(x, y) if self.is_float else self.b.sub(x, y)

    def mul(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fmul(x, y) if self.is_float else self.b.mul(x, y)

    def fma(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        """``x * y + z`` rounded once (``llvm.fma``: the FMA instruction where the target
        has one, PTX's ``fma.rn``; the C library's ``fma`` on a target without)."""
        return self.intr("fma", x, y, z)

    def div(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """True division for floats; floor division for integers (``//``), with a zero
        divisor giving ``x // 1`` instead of trapping (the interpreter does the same)."""
        b = self.b
        if self.is_float:
            return b.fdiv(x, y)
        zero = ir.Constant(x.type, 0)
        y1 = b.select(b.icmp_signed("==", y, zero), ir.Constant(x.type, 1), y)
        q, r = b.sdiv(x, y1), b.srem(x, y1)
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.icmp_signed("!=", b.icmp_signed("<", r, zero),
                                   b.icmp_signed("<", y1, zero)))
        return b.sub(q, b.zext(fix, x.type))

    def neg(self, x: ir.Value) -> ir.Value:
        return self.b.fneg(x) if self.is_float else self.b.sub(ir.Constant(x.type, 0), x)

    def abs(self, x: ir.Value) -> ir.Value:
        if self.is_float:
            return self.intr("fabs", x)
        return self.b.select(self.lt(x, self.c(0)), self.neg(x), x)

    def max(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """NaN-propagating maximum (``torch.maximum``); for bool, ``or``."""
        if self.is_float:
            return self.intr("maximum", x, y)
        if self.dtype is dt.bool_:
            return self.b.or_(x, y)
        return self.b.select(self.gt(x, y), x, y)

    def min(self, x: ir.Value, y: ir.Value) -> ir.Value:
        if self.is_float:
            return self.intr("minimum", x, y)
        if self.dtype is dt.bool_:
            return self.b.and_(x, y)
        return self.b.select(self.lt(x, y), x, y)

    # -- comparisons (i1 results) ----------------------------------------------------------
    def _cmp(self, op: str, x: ir.Value, y: ir.Value, nan: bool) -> ir.Value:
        b = self.b
        if self.is_float:
            # ne is unordered by IEEE (NaN != NaN); nan=True makes any compare true on NaN
            if nan or op == "ne":
                return b.fcmp_unordered(_FCMP[op], x, y)
            return b.fcmp_ordered(_FCMP[op], x, y)
        if self.dtype is dt.bool_:  # i1 compares signed as 0 > -1: compare bools unsigned
            return b.icmp_unsigned(_FCMP[op], x, y)
        return b.icmp_signed(_FCMP[op], x, y)

    def lt(self, x: ir.Value, y: ir.Value, nan: bool = False) -> ir.Value:
        return self._cmp("lt", x, y, nan)

    def le(self, x: ir.Value, y: ir.Value, nan: bool = False) -> ir.Value:
        return self._cmp("le", x, y, nan)

    def gt(self, x: ir.Value, y: ir.Value, nan: bool = False) -> ir.Value:
        return self._cmp("gt", x, y, nan)

    def ge(self, x: ir.Value, y: ir.Value, nan: bool = False) -> ir.Value:
        return self._cmp("ge", x, y, nan)

    def eq(self, x: ir.Value, y: ir.Value, nan: bool = False) -> ir.Value:
        return self._cmp("eq", x, y, nan)

    def ne(self, x: ir.Value, y: ir.Value, nan: bool = True) -> ir.Value:
        return self._cmp("ne", x, y, nan)

    # -- logic -----------------------------------------------------------------------------
    def and_(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.and_(x, y)

    def or_(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.or_(x, y)

    def not_(self, x: ir.Value) -> ir.Value:
        return self.b.not_(x)

    def xor(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """Bitwise exclusive or (integers and bools)."""
        return self.b.xor(x, y)

    # -- integer shifts (PyTorch's out-of-range rules) ---------------------------------------
    def shl(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """``x << y`` as ATen's ``lshift``: 0 for a negative amount or one of at least the
        width (where LLVM's ``shl`` would give poison)."""
        b = self.b
        width = ir.Constant(x.type, x.type.width)
        bad = b.or_(b.icmp_signed("<", y, ir.Constant(x.type, 0)),
                    b.icmp_unsigned(">=", y, width))
        safe = b.select(bad, ir.Constant(x.type, 0), y)
        return b.select(bad, ir.Constant(x.type, 0), b.shl(x, safe))

    def shr(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """``x >> y`` (arithmetic) as ATen's ``rshift``: a negative amount or one of at least
        the width minus one shifts by the width minus one (the sign fill)."""
        b = self.b
        top = ir.Constant(x.type, x.type.width - 1)
        bad = b.or_(b.icmp_signed("<", y, ir.Constant(x.type, 0)),
                    b.icmp_unsigned(">=", y, top))
        return b.ashr(x, b.select(bad, top, y))

    # -- rounding divisions and remainders ---------------------------------------------------
    def _int_divisor(self, y: ir.Value) -> tuple[ir.Value, ir.Value]:
        """``y`` with 0 and -1 replaced by 1 (neither traps nor overflows in ``sdiv``), and the
        i1 "y was -1" (the quotient is then ``-x``, wrapping like PyTorch's)."""
        b = self.b
        one, m1 = ir.Constant(y.type, 1), ir.Constant(y.type, -1)
        is_m1 = b.icmp_signed("==", y, m1)
        bad = b.or_(is_m1, b.icmp_signed("==", y, ir.Constant(y.type, 0)))
        return b.select(bad, one, y), is_m1

    def fmod(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """C ``fmod`` (the remainder of truncated division, sign of ``x``). Floats: ``frem`` (the
        exact libm ``fmod`` on the CPU); on PTX, where NVPTX expands ``frem`` to
        ``x - trunc(x / y) * y``, the quotient's rounding is corrected by one ``y`` and the
        sign of a zero result is ``x``'s (exact while the quotient is below 2**24 in float32,
        2**53 in float64). Integers: ``srem``, a zero divisor giving 0."""
        b = self.b
        if not self.is_float:
            y1, _ = self._int_divisor(y)
            return b.srem(x, y1)
        r = b.frem(x, y)
        if not self.ptx:
            return r
        ay = self.intr("fabs", y)
        sy = self.intr("copysign", ay, x)
        zero = self.c(0)
        wrong_sign = b.and_(b.fcmp_ordered("!=", r, zero),
                            b.icmp_unsigned("!=", b.fcmp_ordered("<", r, zero),
                                            b.fcmp_ordered("<", x, zero)))
        r = b.select(wrong_sign, b.fadd(r, sy), r)
        r = b.select(b.fcmp_ordered(">=", self.intr("fabs", r), ay), b.fsub(r, sy), r)
        return self.intr("copysign", r, x)

    def truncdiv(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """Division rounded toward zero (``div(rounding_mode="trunc")``): ``trunc(x / y)`` for
        floats; ``sdiv`` for integers, a zero divisor giving ``x``."""
        b = self.b
        if self.is_float:
            return self.intr("trunc", b.fdiv(x, y))
        y1, is_m1 = self._int_divisor(y)
        return b.select(is_m1, self.neg(x), b.sdiv(x, y1))

    def floormod(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """Python's ``%`` (``torch.remainder``): ``fmod`` moved by ``y`` when its sign differs
        from ``y``'s (a zero integer divisor gives 0)."""
        b = self.b
        if not self.is_float:
            y1, _ = self._int_divisor(y)
            r = b.srem(x, y1)
            zero = ir.Constant(x.type, 0)
            fix = b.and_(b.icmp_signed("!=", r, zero),
                         b.icmp_unsigned("!=", b.icmp_signed("<", r, zero),
                                         b.icmp_signed("<", y1, zero)))
            return b.select(fix, b.add(r, y1), r)
        r = self.fmod(x, y)
        zero = self.c(0)
        fix = b.and_(b.fcmp_unordered("!=", r, zero),
                     b.icmp_unsigned("!=", b.fcmp_ordered("<", y, zero),
                                     b.fcmp_ordered("<", r, zero)))
        return b.select(fix, b.fadd(r, y), r)

    def floordiv(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """Division rounded toward minus infinity (``//``, ``div(rounding_mode="floor")``).
        Floats follow ATen's ``div_floor_floating`` (Python's algorithm: ``(x - fmod) / y``
        corrected by one, rounded to the nearest integer, a zero quotient signed as
        ``x / y``, a zero divisor giving ``x / y``); integers floor ``sdiv``'s quotient, a
        zero divisor giving ``x``."""
        b = self.b
        if not self.is_float:
            y1, is_m1 = self._int_divisor(y)
            q, r = b.sdiv(x, y1), b.srem(x, y1)
            zero = ir.Constant(x.type, 0)
            fix = b.and_(b.icmp_signed("!=", r, zero),
                         b.icmp_unsigned("!=", b.icmp_signed("<", r, zero),
                                         b.icmp_signed("<", y1, zero)))
            return b.select(is_m1, self.neg(x), b.sub(q, b.zext(fix, x.type)))
        zero, one = self.c(0), self.c(1)
        basic = b.fdiv(x, y)
        mod = self.fmod(x, y)
        div = b.fdiv(b.fsub(x, mod), y)
        fix = b.and_(b.fcmp_unordered("!=", mod, zero),
                     b.icmp_unsigned("!=", b.fcmp_ordered("<", y, zero),
                                     b.fcmp_ordered("<", mod, zero)))
        div = b.select(fix, b.fsub(div, one), div)
        fl = self.intr("floor", div)
        fl = b.select(b.fcmp_ordered(">", b.fsub(div, fl), self.c(0.5)), b.fadd(fl, one), fl)
        out = b.select(b.fcmp_unordered("!=", div, zero), fl,
                       self.intr("copysign", zero, basic))
        return b.select(b.fcmp_ordered("==", y, zero), basic, out)

    # -- conversions -----------------------------------------------------------------------
    def cast(self, x: ir.Value) -> ir.Value:
        """Convert from the operand dtype to the node's dtype, as numpy's ``astype``."""
        b = self.b
        src, dst = self.dtype, self.node.dtype
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
            if st == tt:  # bf16 <-> f32 share float32 registers; a bf16 result is rounded
                return x  # by the kernel emitter, as every bf16 op's is
            # f64 -> bf16 goes through float32, as PyTorch's c10::BFloat16(float(x)) does
            return b.fptrunc(x, tt) if st == F64 else b.fpext(x, tt)
        if src.is_float:
            return b.fptosi(x, tt)
        if dst.is_float:
            return b.sitofp(x, tt)
        return b.trunc(x, tt) if src.itemsize > dst.itemsize else b.sext(x, tt)

    # -- pow -------------------------------------------------------------------------------
    def pow(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """``x ** y``: small constant exponents as multiplies; float32 through ``vmath.pow``
        (vectorisable, evaluated in float64); float64 through ``llvm.pow`` on the CPU and
        ``vmath.pow`` on PTX; integers by square-and-multiply."""
        if not self.is_float:
            return self._int_pow(x, y)
        b = self.b
        base = self.node.inputs[1]
        while base.op in ("expand", "reshape"):
            base = base.inputs[0]
        if base.op == "const" and not isinstance(base.attrs["value"], sympy.Basic):
            v = float(base.attrs["value"])
            if v == 2.0:
                return b.fmul(x, x)
            if v == 1.0:
                return x
            if v == 0.5:
                return self.intr("sqrt", x)
            if v == 3.0:
                return b.fmul(b.fmul(x, x), x)
            if v == -1.0:
                return b.fdiv(fconst(x.type, 1.0), x)
        if x.type == F32 or self.ptx:
            return VMath(b, self.mod).pow(x, y)
        return self.intr("pow", x, y)

    def _int_pow(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """Integer ``x ** y`` as PyTorch computes it: square-and-multiply with wrap-around for
        ``y >= 0``; for ``y < 0`` (truncated 1 / x**|y|) 1 when x == 1, +-1 when x == -1 by the
        parity of y, else 0. One select per bit of y, so the loop has no data-dependent
        branch."""
        b, k = self.b, self.k
        t = x.type
        one, zero = ir.Constant(t, 1), ir.Constant(t, 0)
        r_slot, base_slot, e_slot = k.alloca(t), k.alloca(t), k.alloca(t)
        b.store(one, r_slot)
        b.store(x, base_slot)
        neg = b.icmp_signed("<", y, zero)
        b.store(b.select(neg, zero, y), e_slot)
        with for_range(b, i64(0), i64(t.width - 1), name="powbit"):
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


__all__ = ["Emit"]


class VectorEmit(Emit):
    """``Emit`` over vectors of ``lanes`` elements: the same rules, with constants splatted
    and intrinsics named for the vector type (``llvm.sqrt.v16f32``). LLVM's arithmetic,
    compares and ``select`` take vectors as they are. Used by the vector runs of channel
    groups and of elementwise kernels (``codegen.channel_groups.vector_group``,
    ``codegen.vector_runs``), which admit only rules written in those
    terms: no vector-math routine (``math``) is given vectors here."""

    def __init__(self, k: Any, node: Any, lanes: int) -> None:
        super().__init__(k, node)
        self.lanes = lanes
        self.t = ir.VectorType(self.t, lanes)

    def c(self, v: float) -> ir.Constant:
        """``v`` in every lane of the operand type."""
        if self.is_float:
            return ir.Constant(self.t, [float(v)] * self.lanes)
        if self.dtype is dt.bool_:
            return ir.Constant(ir.VectorType(I1, self.lanes), [int(bool(v))] * self.lanes)
        return ir.Constant(self.t, [int(v)] * self.lanes)

    def intr(self, name: str, *xs: ir.Value) -> ir.Value:
        """``llvm.<name>.v<lanes>f32/f64`` on float vector operands."""
        t = xs[0].type
        suffix = f"v{t.count}{'f32' if t.element == F32 else 'f64'}"
        return self.b.call(declare(self.mod, f"llvm.{name}.{suffix}", t, [t] * len(xs)),
                           list(xs))

    def math(self, name: str, *xs: ir.Value) -> ir.Value:
        raise NotImplementedError(f"vector-math routine {name!r} on vectors: vector runs "
                                  "admit no such op (vector_runs.op_ok)")
