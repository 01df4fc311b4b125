"""The CPU code generator's LLVM side: target machines, the optimization pipeline, and a
lowered step (``codegen.lower``) compiled to an optimized module.

Pure code generation: no ctypes, no buffers, no Python objects of the front end. Loading the
object code and calling it is ``graphc.runtime.cpu``; the AOT builder uses this module to emit
objects for other machines.
"""

from __future__ import annotations

from typing import Any

import llvmlite.binding as llvm

from .llvm_objects import init_llvm, optimize, target_machine
from .lower import Lowering


def host_target_machine(cpu: str | None = None, features: str | None = None,
                        reloc: str = "default", codemodel: str = "jitdefault") -> Any:
    return target_machine(cpu, features, reloc=reloc, codemodel=codemodel)


def has_avx512(tm: Any, cpu: str | None = None) -> bool:
    """Whether the target has 512-bit vectors (decides GEMM tile shapes)."""
    if cpu in (None, "native"):
        return "+avx512f" in llvm.get_host_cpu_features().flatten()
    return cpu in ("x86-64-v4", "skylake-avx512", "icelake-server", "sapphirerapids",
                   "znver4", "znver5")


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
