"""Building an ahead-of-time step: kernel and data objects, the C wrapper, and the link.

:func:`build` compiles the step's variant with LLVM for the chosen target (the same lowering
as the JIT), emits the initial state as a second object, writes ``NAME.h`` / ``NAME.c``
(:mod:`graphc.aot.csource`), compiles the wrapper with the system C compiler (``$CC``,
default ``cc``), combines the three objects into one relocatable ``NAME.o`` (``ld -r``) and
links ``libNAME.so`` from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from graphc.codegen.abi import ALIGN
from graphc.codegen.llvm_objects import emit_object
from graphc.runtime import gcpause

from .csource import generate_header, generate_source
from .model import AOTError, AotModel, describe, variant_for
from .target import target_machine

__all__ = ["build"]


def _run(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise AOTError(f"{what} failed ({' '.join(cmd)}):\n{r.stderr.strip()}")


def _privatize(mod: Any, entry: str) -> None:
    """Keep the kernel object's symbols out of the way of other libraries.

    Helper functions and globals the lowering defines (GEMM routines, the JIT's thread-pool
    hook, which stays null here: AOT steps run on the calling thread) get internal linkage, so
    two AOT objects link into one program without duplicate symbols; the entry point is
    hidden, so only the wrapper's ``NAME_*`` functions are exported from ``libNAME.so``.
    """
    for fn in mod.functions:
        if fn.name == entry:
            fn.visibility = "hidden"
        elif not fn.is_declaration and str(fn.linkage) not in ("Linkage.internal",
                                                               "Linkage.private"):
            fn.linkage = "internal"
    for gv in mod.global_variables:
        if not gv.is_declaration and str(gv.linkage) not in ("Linkage.internal",
                                                             "Linkage.private"):
            gv.linkage = "internal"


def _data_object(tm: Any, model: AotModel) -> tuple[bytes, list[int]]:
    """An object file holding the initial state values as one aligned read-only blob."""
    import llvmlite.binding as llvm
    from llvmlite import ir

    offsets: list[int] = []
    blob = bytearray()
    for t in model.tensors:
        blob.extend(b"\0" * (-len(blob) % ALIGN))
        offsets.append(len(blob))
        blob.extend(np.ascontiguousarray(t.init, t.dtype.np).tobytes())
    if not blob:
        blob.extend(b"\0")
    mod = ir.Module(name=f"{model.name}_data")
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    arr_t = ir.ArrayType(ir.IntType(8), len(blob))
    gv = ir.GlobalVariable(mod, arr_t, name=f"{model.name}_init_blob")
    gv.global_constant = True
    gv.initializer = ir.Constant(arr_t, blob)
    gv.align = ALIGN
    m = llvm.parse_assembly(str(mod))
    m.get_global_variable(gv.name).visibility = "hidden"  # (llvmlite.ir does not print it)
    m.verify()
    return emit_object(m, tm), offsets


def build(fn: Any, example_args: Any, out_dir: str | os.PathLike[str], name: str,
          target: str | None = None) -> dict[str, str]:
    """Build ``fn``'s step for ``example_args`` as ``NAME.h``, ``NAME.o`` and ``libNAME.so``.

    Returns ``{"header", "object", "shared", "source"}`` paths. See the package docstring
    (:mod:`graphc.aot`) for what the library holds and the generated header for the ABI.
    """
    from graphc.codegen.cpu import compile_module
    from graphc.codegen.hostinfo import DEFAULT_CACHES, host_caches, tuned_for
    from graphc.codegen.lower import Lowering
    from graphc.codegen.matmul import bf16_target

    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"name: expected a C identifier, got {name!r}")
    if example_args is None:
        raise ValueError("example_args: an ahead-of-time build needs example arguments")
    from ..runtime.executable import argument_array

    args = [argument_array(a, i, f"arg{i}") for i, a in enumerate(example_args)]
    variant = variant_for(fn, args)
    model = describe(fn, variant, name)
    tm, cpu, features, wide = target_machine(target)
    model.target, model.cpu, model.features = target or "native", cpu, features
    model.step_name = fn.name

    # tuning that LLVM's CPU name does not carry (the GEMM's cache blocking) follows this
    # host only for a native build; for a named CPU the build host says nothing about the
    # machines the object will run on, and the same build must give the same object anywhere
    caches = host_caches() if target in (None, "native") else DEFAULT_CACHES
    # bf16 products: the target's AVX512-BF16 when it has it, never AMX (a C program would
    # have to ask the kernel for tile data first; ``graphc.runtime.amx``)
    bf16 = ",".join(f for f in (features or "").split(",") if not f.startswith("+amx"))
    with tuned_for(caches), bf16_target(bf16), gcpause.paused():
        lowering = Lowering(variant.graph, name=f"{name}_kernel", triple=tm.triple,
                            data_layout=str(tm.target_data), wide=wide)
        mod = compile_module(lowering, tm)
    _privatize(mod, lowering.name)
    kernel_obj = emit_object(mod, tm)
    data_obj, offsets = _data_object(tm, model)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = generate_header(model)
    source = generate_source(model, offsets)
    paths = {"header": str(out / f"{name}.h"), "object": str(out / f"{name}.o"),
             "shared": str(out / f"lib{name}.so"), "source": str(out / f"{name}.c")}
    Path(paths["header"]).write_text(header)
    Path(paths["source"]).write_text(source)
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory(prefix="graphc_aot_") as tmp:
        k_o, d_o, w_o = (os.path.join(tmp, f) for f in ("kernel.o", "data.o", "wrapper.o"))
        Path(k_o).write_bytes(kernel_obj)
        Path(d_o).write_bytes(data_obj)
        _run([cc, "-std=c99", "-O2", "-fPIC", "-Wall", "-Wextra",
              "-Werror=implicit-function-declaration", "-I", str(out), "-c",
              paths["source"], "-o", w_o], "compiling the C wrapper")
        combined = os.path.join(tmp, "combined.o")
        ld = shutil.which("ld")
        if ld:
            _run([ld, "-r", "-o", combined, k_o, d_o, w_o], "partial link (ld -r)")
        else:
            _run([cc, "-r", "-nostdlib", "-o", combined, k_o, d_o, w_o], "partial link (cc -r)")
        shutil.copyfile(combined, paths["object"])
        _run([cc, "-shared", "-o", paths["shared"], paths["object"], "-lm"],
             "linking the shared library")
    return paths
