"""The CPU code generator's LLVM side: target machines, the optimization pipeline, and a
lowered step (``codegen.lower``) compiled to an optimized module.

Pure code generation: no ctypes, no buffers, no Python objects of the front end. Loading the
object code and calling it is ``graphc.runtime.cpu``; the AOT builder uses this module to emit
objects for other machines.
"""

from __future__ import annotations

import threading
from typing import Any

import llvmlite.binding as llvm

from .lower import Lowering

_init_lock = threading.Lock()
_initialized = False


def init_llvm() -> None:
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


def host_target_machine(cpu: str | None = None, features: str | None = None,
                        reloc: str = "default", codemodel: str = "jitdefault") -> Any:
    init_llvm()
    target = llvm.Target.from_default_triple()
    if cpu is None or cpu == "native":
        cpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten() if features is None else features
    return target.create_target_machine(cpu=cpu, features=features or "", opt=3, reloc=reloc,
                                        codemodel=codemodel)


def has_avx512(tm: Any, cpu: str | None = None) -> bool:
    """Whether the target has 512-bit vectors (decides GEMM tile shapes)."""
    if cpu in (None, "native"):
        return "+avx512f" in llvm.get_host_cpu_features().flatten()
    return cpu in ("x86-64-v4", "skylake-avx512", "icelake-server", "sapphirerapids",
                   "znver4", "znver5")


def optimize(mod: Any, tm: Any) -> None:
    """Run LLVM's O3 module pipeline with both vectorisers on."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = False  # manual unrolling where it matters (GEMM); halves compile time
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def compile_module(lowering: Lowering, tm: Any) -> Any:
    """The optimized LLVM module of a lowered step, for ``tm`` (parse, verify, O3)."""
    return compile_ir(str(lowering.module), tm)


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
