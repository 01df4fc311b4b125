"""The calling thread's floating-point mode: flush-to-zero and denormals-are-zero
(``graphc.set_flush_denormal``).

Arithmetic on denormal numbers (float32 magnitudes below 1.2e-38) takes microcode assists on
x86 cores, 10-100x a normal operation's time. A training run whose values drift toward zero
(a loss that reaches 0, weight decay on weights no gradient reaches) can then slow down many
times over: a ResNet-18 trained on one repeated image went from 13-17 ms to 420-500 ms a
step after about 20 steps, PyTorch's eager step likewise (41 -> 680-810 ms). PyTorch's
answer is ``torch.set_flush_denormal(True)``, which sets two MXCSR bits in the calling
thread; this is the same, for eager ops (numpy runs in the calling thread) and compiled
steps (they run in the calling thread, and the runtime pool's worker takes the caller's mode
with each task: ``codegen.parallel``).

The two functions that read and write MXCSR are compiled once per process, on first use.
"""

from __future__ import annotations

import ctypes
import platform
import threading
from typing import Any

from graphc.codegen.fpmode import DENORMALS_ZERO, FLUSH_ZERO

_BITS = FLUSH_ZERO | DENORMALS_ZERO

_lock = threading.Lock()
_fns: tuple[Any, Any] | None = None
_engine: Any = None  # keeps the functions' code alive


def supported() -> bool:
    """Whether this host has the two bits: every x86-64 CPU (SSE2 has flush-to-zero, and
    denormals-are-zero came with SSE3, which every x86-64 CPU LLVM targets here has)."""
    return platform.machine() in ("x86_64", "AMD64")


def _functions() -> tuple[Any, Any]:
    global _fns, _engine
    with _lock:
        if _fns is None:
            import llvmlite.binding as llvm

            from graphc.codegen.cpu import host_target_machine, init_llvm
            from graphc.codegen.fpmode import GET, SET, fp_mode_module
            from graphc.codegen.llvm_objects import emit_object

            init_llvm()
            tm = host_target_machine()
            mod = llvm.parse_assembly(str(fp_mode_module(tm.triple)))
            mod.verify()
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
            engine.add_object_file(llvm.ObjectFileRef.from_data(emit_object(mod, tm)))
            engine.finalize_object()
            get = ctypes.CFUNCTYPE(ctypes.c_uint32)(engine.get_function_address(GET))
            put = ctypes.CFUNCTYPE(None, ctypes.c_uint32)(engine.get_function_address(SET))
            _engine, _fns = engine, (get, put)
        return _fns


def flush_denormal() -> bool:
    """Whether the calling thread flushes denormals (both bits set)."""
    return supported() and _functions()[0]() & _BITS == _BITS


def set_flush_denormal(on: bool) -> bool:
    """Set or clear both bits in the calling thread's MXCSR; False (nothing changed) where
    the host has no such mode."""
    if not supported():
        return False
    get, put = _functions()
    csr = get()
    put((csr | _BITS) if on else (csr & ~_BITS & 0xFFFFFFFF))
    return True


__all__ = ["supported", "flush_denormal", "set_flush_denormal"]
