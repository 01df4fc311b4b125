"""The CPU code generator's LLVM side: target machines, the optimization pipeline, and a
lowered step (``codegen.lower``) compiled to an optimized module.

Pure code generation: no ctypes, no buffers, no Python objects of the front end. Loading the
object code and calling it is ``graphc.runtime.cpu``; the AOT builder uses this module to emit
objects for other machines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import llvmlite.binding as llvm

from .llvm_objects import emit_assembly, init_llvm, optimize, target_machine

if TYPE_CHECKING:  # imported where it is used: loading a cached step lowers nothing
    from .lower import Lowering


def host_target_machine(cpu: str | None = None, features: str | None = None,
                        reloc: str = "default", codemodel: str = "jitdefault") -> Any:
    return target_machine(cpu, features, reloc=reloc, codemodel=codemodel)


def has_avx512(tm: Any, cpu: str | None = None) -> bool:
    """Whether the target has 512-bit vectors (decides GEMM tile shapes and the 16-lane
    convolution kernels).

    For the host (``cpu`` None or ``"native"``) this is the ``avx512f`` feature LLVM detects.
    For a named CPU (an AOT target, a forced JIT target) LLVM itself is asked, through the
    very target machine that will generate the code: a ``<16 x float>`` add compiled for
    ``tm`` is legal in one ``zmm`` register exactly when the CPU (with any ``+/-feature``
    overrides the machine was made with) has AVX-512F. No list of CPU names to keep up to
    date: ``rocketlake``, ``tigerlake``, ``znver5`` or a future CPU answer for themselves,
    and ``x86-64-v4``'s 256-bit preference (a tuning, not a missing feature) does not hide
    the registers. Non-x86 targets answer False (no ``zmm`` in their assembly).
    """
    if cpu in (None, "native"):
        return "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")
    return _emits_zmm(tm)


_ZMM_PROBE = """
define void @graphc_zmm_probe(ptr %p) #0 {
  %v = load <16 x float>, ptr %p, align 4
  %w = fadd <16 x float> %v, %v
  store <16 x float> %w, ptr %p, align 4
  ret void
}
attributes #0 = { "min-legal-vector-width"="512" "prefer-vector-width"="512" }
"""


def _emits_zmm(tm: Any) -> bool:
    """Whether ``tm`` compiles a 16-float vector add to 512-bit registers (about 2 ms)."""
    mod = llvm.parse_assembly(_ZMM_PROBE)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    return "%zmm" in emit_assembly(mod, tm)


def compile_module(lowering: Lowering, tm: Any) -> Any:
    """The optimized LLVM module of a lowered step, for ``tm`` (parse, verify, O3)."""
    return compile_ir(lowering.module_text(), tm)


def compile_ir(text: str, tm: Any) -> Any:
    """LLVM IR text parsed for ``tm``'s triple and data layout, verified and optimized."""
    mod = llvm.parse_assembly(text)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    optimize(mod, tm)
    return mod


__all__ = ["init_llvm", "host_target_machine", "has_avx512", "optimize", "compile_module",
           "compile_ir"]
