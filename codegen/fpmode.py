"""Reading and setting the calling thread's floating-point mode (x86's MXCSR), for
``graphc.set_flush_denormal``: a module of two functions, compiled and loaded once per
process by ``graphc.runtime.fpmode``.

Python has no access to MXCSR (``fenv`` in C covers rounding and exception flags, not
flush-to-zero or denormals-are-zero), and the compiled steps read it from the thread that
calls them, so the mode is set where they run: in the calling thread, by native code. The
runtime pool's worker takes the caller's mode with each task (``codegen.parallel``).
"""

from __future__ import annotations

from llvmlite import ir

from .llvm_util import I8P, I32, VOID, declare

# MXCSR's flush-to-zero (results) and denormals-are-zero (inputs) bits, as PyTorch's
# ``at::cpu::set_flush_denormal`` sets them
FLUSH_ZERO = 0x8000
DENORMALS_ZERO = 0x0040
GET, SET = "graphc_get_mxcsr", "graphc_set_mxcsr"


def fp_mode_module(triple: str) -> ir.Module:
    """``i32 graphc_get_mxcsr()`` and ``void graphc_set_mxcsr(i32)`` for an x86-64 target."""
    mod = ir.Module(name="graphc_fpmode")
    mod.triple = triple
    st = declare(mod, "llvm.x86.sse.stmxcsr", VOID, [I8P])
    ld = declare(mod, "llvm.x86.sse.ldmxcsr", VOID, [I8P])
    get = ir.Function(mod, ir.FunctionType(I32, []), GET)
    b = ir.IRBuilder(get.append_basic_block("entry"))
    slot = b.alloca(I32)
    b.call(st, [b.bitcast(slot, I8P)])
    b.ret(b.load(slot))
    put = ir.Function(mod, ir.FunctionType(VOID, [I32]), SET)
    b = ir.IRBuilder(put.append_basic_block("entry"))
    slot = b.alloca(I32)
    b.store(put.args[0], slot)
    b.call(ld, [b.bitcast(slot, I8P)])
    b.ret_void()
    return mod


__all__ = ["fp_mode_module", "FLUSH_ZERO", "DENORMALS_ZERO", "GET", "SET"]
