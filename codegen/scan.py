"""Scan kernels (``cumsum``, ``cumprod``, ``cummax``, ``logcumsumexp``): an inclusive prefix
combination along one axis, for the CPU backend (registered in ``codegen.kernels``) and the
PTX backend (``scan_line``, shared by ``codegen.ptx_kernels``).

Each line along the scanned axis runs sequentially in element order (reversed for
``reverse=True``), so a float ``cumsum`` adds in the same order as PyTorch's CPU kernel; the
lines themselves are independent (one loop iteration on the CPU, one thread on the GPU).
``cummax`` propagates NaN: once a NaN is seen it stays the running value.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from graphc.ir import Node

from .kernels import Kernel, register
from .llvm_util import fconst, for_range, i64, reg_type
from .vmath import VMath

SCAN_OPS = ("cumsum", "cumprod", "cummax", "logcumsumexp")


def outer_shape(n: Node) -> tuple:
    """The node's shape with the scanned axis collapsed to 1: one entry per line."""
    ax = n.attrs["axis"]
    return tuple(1 if i == ax else d for i, d in enumerate(n.shape))


def _init(n: Node, t: ir.Type) -> ir.Constant:
    fl = n.dtype.is_float
    if n.op == "cumsum":
        return fconst(t, 0.0) if fl else ir.Constant(t, 0)
    if n.op == "cumprod":
        return fconst(t, 1.0) if fl else ir.Constant(t, 1)
    # cummax and logcumsumexp: the identity of max and of log-add-exp
    return fconst(t, float("-inf")) if fl else ir.Constant(t, -(1 << (t.width - 1)))


def _log_add_exp(k: Any, acc: ir.Value, v: ir.Value) -> ir.Value:
    """``log(exp(acc) + exp(v))`` as PyTorch's ``_log_add_exp_helper``: ``max + log1p(exp(min
    - max))``, except that two equal infinities give themselves (not NaN); NaN propagates."""
    b = k.b
    vm = VMath(b, k.L.module)
    t = acc.type
    up = b.fcmp_ordered(">", acc, v)
    hi, lo = b.select(up, acc, v), b.select(up, v, acc)
    both_inf = b.and_(b.fcmp_ordered("==", lo, hi),
                      b.fcmp_unordered("uno", b.fsub(lo, lo), fconst(t, 0.0)))
    return b.select(both_inf, hi, b.fadd(hi, vm.log1p(vm.exp(b.fsub(lo, hi)))))


def _combine(k: Any, n: Node, acc: ir.Value, v: ir.Value) -> ir.Value:
    b = k.b
    fl = n.dtype.is_float
    if n.op == "logcumsumexp":
        return _log_add_exp(k, acc, v)
    if n.op == "cumsum":
        return b.fadd(acc, v) if fl else b.add(acc, v)
    if n.op == "cumprod":
        return b.fmul(acc, v) if fl else b.mul(acc, v)
    if fl:  # NaN wins and stays: v > acc is false once acc is NaN
        take = b.or_(b.fcmp_ordered(">", v, acc), b.fcmp_unordered("uno", v, v))
    else:
        take = b.icmp_signed(">", v, acc)
    return b.select(take, v, acc)


def scan_line(k: Any, idx: list[Any]) -> None:
    """Scan the line through multi-index ``idx`` (its scanned entry is ignored) of
    ``k.node``, reading the operand through ``k.value`` and writing ``k.out``."""
    n = k.node
    x = n.inputs[0]
    ax = n.attrs["axis"]
    b = k.b
    t = reg_type(n.dtype)
    acc = k.alloca(t)
    b.store(_init(n, t), acc)
    size = k.sym(n.shape[ax])
    with for_range(b, i64(0), size, name="scan") as i:
        pos = b.sub(b.sub(size, i64(1)), i) if n.attrs.get("reverse") else i
        sub = list(idx)
        sub[ax] = pos
        v = _combine(k, n, b.load(acc), k.value(x, sub))
        b.store(v, acc)
        k.store_out(sub, v)


def emit(k: Any) -> None:
    k.loops(outer_shape(k.node), lambda idx: scan_line(k, list(idx)))


KERNEL = register(Kernel("scan", SCAN_OPS, emit))

__all__ = ["KERNEL", "SCAN_OPS", "emit", "outer_shape", "scan_line"]
