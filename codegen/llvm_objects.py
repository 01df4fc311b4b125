"""LLVM assembly text to object code, with nothing but llvmlite: the part of compiling a step
that a compile worker process runs (``graphc.runtime.compile_worker``).

It imports only llvmlite and the standard library, so a worker starts in ~0.25 s instead of
the ~1.4 s that importing graphc (numpy, sympy) costs, and it is loaded by file path there
(``serve``), not through the ``graphc`` package. ``codegen.cpu`` uses the same functions
in-process, so both sides build identical objects.

Three optimisation levels (``LEVELS``):

- ``"O3"``: LLVM's O3 module pipeline with both vectorisers, code generation at -O3; for
  kernels, where the time goes.
- ``"fast"``: the O1 pipeline and -O0 code generation (fast instruction selection, fast
  register allocation); for the entry function, straight-line glue that reads the pointer
  table, computes buffer offsets and calls the kernels once per step. Measured on a 12-layer
  GPT step (AMD EPYC, 2 vCPU): 0.9 s instead of ~3 s for that function alone.
- ``"tile"``: SROA, instcombine and simplifycfg only, then -O3 code generation; for the
  float GEMM tiles, vector code written out by hand (microkernels, packing, transposes)
  that no module pipeline improves (``graphc.runtime.cpu._level_of``). Measured on Zen 5:
  the 6x4x16 fp32 tile compiles in 0.17-0.2 s instead of 0.33-0.48 s with the O1 pipeline
  (0.73 s with O3), at the same GEMM speed (``benchmarks.gemm``, all shapes within noise).
  Code generation runs without loop strength reduction at this level (``emit_object``): the
  tiles' addresses are computed in the form the loops need already, and LSR's search over
  their many address users was 15-20 % of their code generation.
"""

from __future__ import annotations

import pickle
import struct
import sys
import threading
import time
from typing import Any, BinaryIO

import llvmlite.binding as llvm

LEVELS = ("O3", "fast", "tile")

_init_lock = threading.Lock()
_initialized = False


def init_llvm() -> None:
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


def host_cpu() -> tuple[str, str]:
    """(CPU name, feature string) code is generated with for this host: the features LLVM
    detects, tuned by ``tuned_features``."""
    init_llvm()
    return llvm.get_host_cpu_name(), tuned_features(llvm.get_host_cpu_features().flatten())


def tuned_features(features: str) -> str:
    """``features`` with ``-prefer-256-bit`` where they include AVX-512F.

    LLVM's tuning for many AVX-512 CPUs (``rocketlake``, ``icelake-server``,
    ``sapphirerapids``, ``x86-64-v4``) makes its loop vectoriser prefer 256-bit vectors, a
    guard against the clock drop 512-bit code caused on Skylake-SP. The GEMM and
    convolution tiles are written with 512-bit vectors and never saw it, but every
    elementwise kernel and reduction LLVM vectorises ran 8 lanes wide: on a Xeon with
    AVX-512 (``rocketlake`` to LLVM) exp over 131k floats took 60 us of compute, 37 us at
    16 lanes; erf 154 -> 107 us, GELU 118 -> 83 us (one thread, outputs' allocation
    subtracted). ``GRAPHC_VECTOR_WIDTH=256`` keeps LLVM's preference."""
    import os

    width = os.environ.get("GRAPHC_VECTOR_WIDTH", "512")
    if width not in ("256", "512"):
        raise ValueError(f"GRAPHC_VECTOR_WIDTH: expected '256' or '512', got {width!r}")
    if width == "512" and "+avx512f" in features.split(",") \
            and "prefer-256-bit" not in features:
        return features + ",-prefer-256-bit"
    return features


def target_machine(cpu: str | None = None, features: str | None = None,
                   reloc: str = "default", codemodel: str = "jitdefault",
                   opt: int = 3) -> Any:
    """A target machine for ``cpu`` (None or "native": this host, with its features)."""
    init_llvm()
    target = llvm.Target.from_default_triple()
    if cpu is None or cpu == "native":
        name, feats = host_cpu()
        cpu, features = name, feats if features is None else features
    return target.create_target_machine(cpu=cpu, features=features or "", opt=opt,
                                        reloc=reloc, codemodel=codemodel)


def optimize(mod: Any, tm: Any, level: str = "O3") -> None:
    """Run the module pipeline of ``level`` (see the module docstring) on ``mod``."""
    if level == "tile":
        # a tile's loops and vectors are written out already: what is left is putting its
        # accumulators and loop variables in registers (SROA), folding the address
        # arithmetic and tidying the branches; no inliner, no loop passes, no vectorisers
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=1))
        mpm = llvm.create_new_module_pass_manager()
        mpm.add_sroa_pass()
        mpm.add_instruction_combine_pass()
        mpm.add_simplify_cfg_pass()
        mpm.run(mod, pb)
        return
    if level == "fast":
        pto = llvm.create_pipeline_tuning_options(speed_level=1)
        pto.loop_vectorization = False
        pto.slp_vectorization = False
    else:
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
    pto.loop_unrolling = False  # manual unrolling where it matters (GEMM); halves compile time
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def parse(text: str, tm: Any) -> Any:
    """``text`` parsed for ``tm``'s triple and data layout, and verified."""
    mod = llvm.parse_assembly(text)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    return mod


_TMS: dict[tuple[str | None, str | None, int], Any] = {}

# LLVM's code generation options are process-wide (``set_option``), so a module's are set
# and put back around its emission, under one lock: no emission elsewhere in the process
# (another thread's, the AOT builder's, the PTX backend's) sees another level's setting
_emit_lock = threading.Lock()

# ``-disable-lsr`` is TargetPassConfig's option in every LLVM llvmlite has shipped (up to 22,
# checked); LLVM's option parser exits the process on an option it does not know, so a newer
# LLVM is not asked for it until it has been checked there (its tiles then keep LSR)
_LSR_OPTION = llvm.llvm_version_info[0] <= 22


def emit_object(mod: Any, tm: Any, level: str = "O3") -> bytes:
    """``mod``'s object code, generated as ``level`` asks: for ``tile`` modules without loop
    strength reduction. Every object and assembly text graphc generates goes through here
    or ``emit_assembly``, so none is generated while a tile module's setting is in force.

    Why no LSR for the tiles: their loops step pointers and offsets written out by the
    emitter, so LSR has nothing to rewrite, but it still searched every address use of the
    unrolled microkernels. Measured on an Ice Lake Xeon (2 vCPU), ResNet-18's 41 tile
    modules (convolution kernels, GEMM tiles): 4.07 s of CPU to compile with LSR, 3.39 s
    without, and the kernels' per-call ticks within noise (``GRAPHC_PROFILE``: ResNet-18's
    convolutions 0.98x, ConvNeXt's products 0.97x). Other levels keep LLVM's default: their
    loops are LLVM's own (vectorised by it), where LSR is what makes the addressing cheap."""
    with _emit_lock:
        if level != "tile" or not _LSR_OPTION:
            return tm.emit_object(mod)
        llvm.set_option("", "-disable-lsr=true")
        try:
            return tm.emit_object(mod)
        finally:
            llvm.set_option("", "-disable-lsr=false")


def emit_assembly(mod: Any, tm: Any) -> str:
    """``mod``'s assembly text with LLVM's default options (``emit_object``'s lock)."""
    with _emit_lock:
        return tm.emit_assembly(mod)


def compile_object(text: str, cpu: str | None, features: str | None, level: str) -> bytes:
    """Object code of the module ``text`` at ``level`` for ``cpu``/``features``."""
    return compile_timed(text, cpu, features, level)[0]


def compile_timed(text: str, cpu: str | None, features: str | None, level: str
                  ) -> tuple[bytes, tuple[float, float, float]]:
    """``compile_object``, and the seconds it spent parsing, optimising and emitting.

    Each call parses into a context of its own, dropped afterwards: types and constants
    uniqued in LLVM's global context would otherwise stay for the life of the process."""
    if level not in LEVELS:
        raise ValueError(f"level: expected one of {LEVELS}, got {level!r}")
    key = (cpu, features, 0 if level == "fast" else 3)
    tm = _TMS.get(key)
    if tm is None:
        tm = _TMS[key] = target_machine(cpu, features, opt=key[2])
    ctx = llvm.create_context()
    mod = None
    try:
        t0 = time.perf_counter()
        mod = llvm.parse_assembly(text, ctx)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        t1 = time.perf_counter()
        optimize(mod, tm, level)
        t2 = time.perf_counter()
        obj = emit_object(mod, tm, level)
        return obj, (t1 - t0, t2 - t1, time.perf_counter() - t2)
    finally:
        if mod is not None:
            mod.close()  # before its context: disposing the context frees the module
        ctx.close()


# -- the worker process's side ------------------------------------------------------------
_MAX_MESSAGE = 1 << 30  # a module's assembly or object is far smaller


def _read(f: BinaryIO) -> Any:
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    if n > _MAX_MESSAGE:
        raise ValueError(f"compile worker message of {n} bytes: the stream is out of step")
    data = f.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


def _write(f: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _max_rss_kib() -> int:
    """This process's peak resident memory (KiB; 0 where the platform does not say).

    Every run of LLVM's pass pipeline keeps some memory for good (~30-200 KiB, in llvmlite's
    pipeline construction and LLVM's pass registry), so the parent retires a worker whose
    peak grew past a bound and starts a fresh one."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    except (ImportError, OSError):
        return 0


def serve(inp: BinaryIO | None = None, out: BinaryIO | None = None) -> None:
    """Answer ``(text, cpu, features, level)`` requests with ``("ok", object, seconds,
    peak RSS in KiB)`` or ``("error", message, None, peak RSS)`` until the input closes (its
    parent exited or let it go)."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout.buffer
    _write(out, ("ready", host_cpu()))
    while True:
        req = _read(inp)
        if req is None:
            return
        text, cpu, features, level = req
        try:
            obj, seconds = compile_timed(text, cpu, features, level)
            _write(out, ("ok", obj, seconds, _max_rss_kib()))
        except Exception as e:  # noqa: BLE001 - reported to the parent, which re-raises
            _write(out, ("error", f"{type(e).__name__}: {e}", None, _max_rss_kib()))


__all__ = ["LEVELS", "init_llvm", "host_cpu", "tuned_features", "target_machine", "optimize",
           "parse", "emit_object", "emit_assembly", "compile_object", "compile_timed", "serve"]
