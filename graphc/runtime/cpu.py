"""The CPU backend's executable: load a compiled step (JIT or from the compile cache) and call
it through one pointer table.

Calling costs are what matter for small steps (measured here: a ctypes call with one pointer
argument costs ~0.15 µs, fetching an array's data pointer ~1 µs). So the pointer table is a
ctypes array built once; per call only the slots whose buffers changed are rewritten (arrays
are cached by identity), hyperparameters are written into preallocated scalars, and the
native code does the rest.

The code generation it drives (lowering, LLVM, the GEMM library) is ``graphc.codegen``; this
module holds what only a running process needs: the MCJIT engine, ctypes, buffers, the
compile cache, the thread pool's dispatch address and the error reports.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import llvmlite.binding as llvm
import numpy as np
import sympy

from graphc.codegen import options as codegen_options
from graphc.codegen.abi import (
    ALIGN,
    ERR_BOUNDS,
    ERR_INDEX,
    ERR_NONFINITE,
    ERR_SCRATCH,
    PROFILE_SYMBOL,
    RUN2_SYMBOL,
    TABLE_FIXED,
)
from graphc.codegen.cpu import has_avx512, host_target_machine, init_llvm
from graphc.codegen.hostinfo import BF16_CONV_OPS, DEFAULT_CACHES, bf16_isa, host_caches, tuned_for
from graphc.codegen.irtext import module_text
from graphc.codegen.llvm_objects import emit_assembly, host_cpu
from graphc.ir import Graph
from graphc.ir import shapes as sh
from graphc.tensor import Tensor
from graphc.trace import Signature

from . import cache, compile_log, compile_worker
from .amx import ensure_amx
from .executable import Runtime
from .guard import GuardMixin
from .pool import dispatch_address
from .runner import build_runner

if TYPE_CHECKING:
    from graphc.codegen.lower import Lowering

# objects shared between steps (GEMM tiles, kernel modules), by content key, most recently
# used last; bounded, as they are on disk as well
_LIBRARIES: OrderedDict[str, bytes] = OrderedDict()
_LIBRARIES_MAX_BYTES = 64 << 20


def _remember(k: str, obj: bytes) -> None:
    _LIBRARIES[k] = obj
    _LIBRARIES.move_to_end(k)
    total = sum(len(o) for o in _LIBRARIES.values())
    while total > _LIBRARIES_MAX_BYTES and len(_LIBRARIES) > 1:
        total -= len(_LIBRARIES.popitem(last=False)[1])


def _library_object(k: str) -> bytes | None:
    obj = _LIBRARIES.get(k)
    if obj is None:
        obj = cache.load(k)
        if obj is not None:
            _remember(k, obj)
    else:
        _LIBRARIES.move_to_end(k)
    return obj


_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)


# the spec prefix of a kernel module at each level (``Lowering.on_kernels``); O3's is the
# one every kernel module had before levels were chosen per kernel, so its cache keys stay
_KERNEL_SPEC = {"O3": "kernels|", "tile": "kernels-tile|"}


def _level_of(spec: str) -> str:
    """The optimisation level of a shared object (``codegen.llvm_objects.LEVELS``).

    A float GEMM tile is vector code written out by hand (the microkernel's FMAs, the
    packing's vector moves and transposes), so LLVM's module pipelines have nothing left to
    find in it: the ``tile`` level (SROA, instcombine, simplifycfg; -O3 code generation)
    gives the same speed and compiles in well under half the time. Measured on Zen 5 (one
    thread, ``benchmarks.gemm``, 9 shapes): 1.60-2.20x numpy's sgemm with ``tile``,
    1.48-2.25x with O3 in the same run; the 6x4x16 tile 0.73 s (O3), 0.33-0.48 s (the O1
    pipeline this level used before), 0.17-0.2 s now. The convolutions' implicit-GEMM and
    Winograd kernels, batched or not, are written the same way (``codegen.conv``) and get
    the same level.
    ``GRAPHC_TILE_LEVEL=O3`` puts LLVM's O3 pipeline back for both. Other kernels keep O3:
    their loops are vectorised by LLVM."""
    if spec.startswith(("gemm-tile|", _KERNEL_SPEC["tile"])):
        level = os.environ.get("GRAPHC_TILE_LEVEL", "tile")
        if level not in ("O3", "tile"):
            raise ValueError(f"GRAPHC_TILE_LEVEL: expected 'O3' or 'tile', got {level!r}")
        return level
    return "O3"


def _uses_amx(graph: Graph) -> bool:
    """Whether the step's bf16 products or convolutions (``codegen.gemm_bf16``,
    ``codegen.conv_bf16``) may run on AMX tiles here. A superset is harmless (asking for tile
    permission twice costs a system call); a miss kills the process with SIGILL."""
    return bf16_isa() == "amx" and any(
        n.op in ("matmul", *BF16_CONV_OPS) and n.inputs[0].dtype.name == "bfloat16"
        for n in graph.nodes())



def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def aligned_empty(shape: tuple, dtype: np.dtype) -> tuple[np.ndarray, int]:
    """An uninitialised C-contiguous array whose data starts on an ``ALIGN`` (64-byte)
    boundary, as every arena buffer does (kernels that write an output in place may store
    whole aligned vectors; numpy's own allocations are only 16-byte aligned), and that
    address. Taken once per call for large results, so it is kept cheap: ~2.7 us on a Zen 4
    core with ``math.prod``, ``frombuffer`` and one address lookup, 5.7 us with numpy's
    ``prod`` and a second lookup."""
    count = math.prod(shape)
    raw = np.empty(count * dtype.itemsize + ALIGN, np.uint8)
    base = _ptr(raw)
    off = -base % ALIGN
    return np.frombuffer(raw, dtype, count, off).reshape(shape), base + off


def _position_in_argument(sig: Signature, name: str, args: Any, value: int, pos: int) -> Any:
    """Where ``value`` first occurs in argument ``name`` (flat, and as an index for rank > 1);
    the kernel's ``pos`` counts elements of the indexing op instead (an Embedding's gather
    runs over [B, n, dim]), which is what remains when the value was computed, not passed."""
    from .runner import _as_array

    try:
        a = _as_array(args[sig.arg_names.index(name)])
        hits = np.flatnonzero(a.reshape(-1) == value)
    except Exception:  # noqa: BLE001 - a best-effort refinement of the message
        return pos
    if not len(hits):
        return f"{pos} of the indexing op"
    flat = int(hits[0])
    index = tuple(int(i) for i in np.unravel_index(flat, a.shape))
    return flat if a.ndim <= 1 else f"{flat} (index {index})"


class CPUExecutable(GuardMixin, Runtime):
    """A JIT-compiled step plus the bookkeeping to call it from Python."""

    def __init__(self, graph: Graph, sig: Signature, cpu: str | None = None,
                 debug: bool = False) -> None:
        super().__init__(graph, sig)
        self.debug = debug
        init_llvm()
        self.tm = host_target_machine(cpu)
        self.wide = has_avx512(self.tm, cpu)
        self.name = "graphc_step"
        native = cpu in (None, "native")
        cpu_name, feats = host_cpu() if native else (cpu, "")
        target = f"{self.tm.triple}|{cpu_name}|{feats}|{self.wide}" + ("|debug" if debug else "")
        # the GEMM's cache blocking follows this host's caches, unless code is generated for a
        # named CPU: that stands for other machines (an AOT target checked here), tuned as
        # the AOT build tunes it, so both give the same bits (``codegen.hostinfo``)
        self.caches = host_caches() if native else DEFAULT_CACHES
        # bf16 products: the host's best GEMM (AMX, AVX512-BF16); for a named CPU the portable
        # one, since the build host's features say nothing about it (``codegen.matmul``)
        self.bf16_features = None if native else ""
        target += f"|bf16-{bf16_isa(self.bf16_features)}"
        self.loop_groups = codegen_options.LOOP_GROUPS
        target += "" if self.loop_groups else "|no-loop-groups"
        target += "" if codegen_options.WINOGRAD else "|no-winograd"
        target += "" if codegen_options.CHANNEL_GROUPS else "|no-channel-groups"
        target += "" if codegen_options.CONV_GEMM else "|no-conv-gemm"
        target += "" if codegen_options.WINOGRAD_WGRAD else "|no-winograd-wgrad"
        target += "" if codegen_options.BF16_WINOGRAD else "|no-bf16-winograd"
        target += "" if codegen_options.CONV_EPILOGUE else "|no-conv-epilogue"
        target += "" if codegen_options.GENERIC_KERNELS else "|no-generic-kernels"
        target += "" if codegen_options.VECTOR_CHANNEL_GROUPS else "|no-vector-channel-groups"
        target += "" if codegen_options.VECTOR_RUNS else "|no-vector-runs"
        self.profiling = os.environ.get("GRAPHC_PROFILE", "") not in ("", "0")
        target += "|profile" if self.profiling else ""
        # the printed graph groups inputs by kind; the native table follows the inputs' (and
        # updates') order, so that order is part of the key: two steps that print the same
        # but bind their buffers in another order must not share an object
        layout = "\n".join(["inputs: " + " ".join(n.attrs["name"] for n in graph.inputs),
                             "updates: " + " ".join(s for s, _ in graph.updates)])
        with compile_log.current().phase("cache key"):
            self.cache_key = cache.key(str(graph) + "\n" + layout, target)
        self._target = target
        self._lowering: Lowering | None = None
        self._ir_lowering: Lowering | None = None
        self._mod: Any = None
        self._lib_mod: Any = None
        # the step's own object, plus the GEMM library it links against (cached separately
        # by tile set: a new step whose tiles were compiled before compiles only its kernels)
        with compile_log.current().phase("cache lookup"):
            obj = cache.load(self.cache_key)
            deps = cache.load(self.cache_key, ".deps") if obj is not None else None
            libs = ([_library_object(k) for k in deps.decode("ascii", "replace").split()]
                    if deps is not None else [])
        self.cache_hit = obj is not None and deps is not None and all(o is not None
                                                                       for o in libs)
        compile_log.current().count("disk cache", "hit" if self.cache_hit else "miss")
        if not self.cache_hit:
            compile_worker.prestart()  # starts while the step is lowered
            obj, keys, libs = self._compile_objects(cpu)
            cache.store(self.cache_key, " ".join(keys).encode(), ".deps")
            cache.store(self.cache_key, obj)
        if self.cache_hit and _uses_amx(graph):
            ensure_amx()  # a step from the disk cache: on_gemm did not run in this process
        with compile_log.current().phase("link"):
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.tm)
            for o in [obj, *libs]:
                self.engine.add_object_file(llvm.ObjectFileRef.from_data(o))
            self.engine.finalize_object()
        self.fn = _FN(self.engine.get_function_address(self.name))
        self._profile: np.ndarray | None = None
        if self.profiling:
            addr = self.engine.get_global_value_address(PROFILE_SYMBOL)
            n_units = len(self.lowering.plan.units())
            self._profile = np.ctypeslib.as_array(
                (ctypes.c_int64 * (2 * n_units)).from_address(addr)).reshape(n_units, 2)
        run2 = self.engine.get_global_value_address(RUN2_SYMBOL)
        if run2:
            ctypes.c_void_p.from_address(run2).value = dispatch_address() or None
        self.symbols = graph.symbols()
        n = TABLE_FIXED + len(graph.inputs) + len(graph.outputs) + len(graph.updates)
        self.table = (ctypes.c_void_p * n)()
        self.table_addr = ctypes.addressof(self.table)
        self.sym_arr = np.zeros(max(1, len(self.symbols)), np.int64)
        self.scratch = np.zeros(0, np.uint8)
        self.info = np.zeros(2, np.int64)
        self.err = np.zeros(4, np.int64)
        self.table[0] = _ptr(self.sym_arr)
        self.table[2] = _ptr(self.info)
        self.table[3] = _ptr(self.err)
        self._set_scratch(4096)
        self._cache: list[Any] = [None] * n  # the object whose buffer is in each slot
        self.out_shapes = [o.shape for o in graph.outputs]
        self.out_dtypes = [np.dtype(o.dtype.np) for o in graph.outputs]
        self.upd_nodes = [v for _, v in graph.updates]
        self._keep: dict[int, np.ndarray] = {}
        self.scalar_inputs = {}
        for i, node in enumerate(self.input_nodes):
            src = sig.sources[node.attrs["name"]]
            if src.kind in ("hyper", "oflag", "seed", "cell", "onum"):  # 0-d, written in place
                self.scalar_inputs[i] = np.zeros((), node.dtype.np)
                self.table[TABLE_FIXED + i] = _ptr(self.scalar_inputs[i])
        with compile_log.current().phase("guards and call wrapper"):
            self._init_guard()
            self._runner = build_runner(self)
        self.call = self._runner  # callers use the generated wrapper directly

    def _set_scratch(self, nbytes: int) -> None:
        self.scratch = np.zeros(int(nbytes) + 64, np.uint8)
        base = _ptr(self.scratch)
        aligned = (base + 63) // 64 * 64
        self.table[1] = aligned
        self.info[0] = int(nbytes)

    @property
    def lowering(self) -> Lowering:
        """The LLVM lowering (built lazily: a cache hit does not need it)."""
        if self._lowering is None:
            self._lowering = self._lower()
        return self._lowering

    def _lower(self, **stream: Any) -> Lowering:
        # the code generator is imported here, not with this module: a step loaded from the
        # disk cache never lowers (measured: 25-35 ms of its first call)
        from graphc.codegen.lower import Lowering
        from graphc.codegen.matmul import bf16_target

        with tuned_for(self.caches), bf16_target(self.bf16_features):
            return Lowering(self.graph, name=self.name, wide=self.wide, debug=self.debug,
                            loop_groups=self.loop_groups, profile=self.profiling,
                            gemm_library=True, direct_outputs=True, **stream)

    def _compile_objects(self, cpu: str | None) -> tuple[bytes, list[str], list[bytes]]:
        """The entry function's object, and the keys and objects of what it links: its
        GEMM tiles (``gemm.library_parts``) and its kernels (``Lowering.on_kernels``), each
        compiled only if no earlier step (or process) compiled the same text. Both are
        handed to the compile workers while the step is still being lowered
        (``compile_worker.Batch``); the entry function goes last."""
        from graphc.codegen.gemm import library_parts
        from graphc.codegen.gemm_bf16 import Bf16Gemm
        from graphc.codegen.gemm_bf16 import library_parts as bf16_library_parts

        log = compile_log.current()
        batch = compile_worker.Batch(cpu, None if cpu in (None, "native") else "")
        keys: list[str] = []
        objs: list[bytes | None] = []
        pending: dict[int, int] = {}  # batch job -> its slot in keys/objs

        def shared(spec: str, text: Any) -> None:
            level = _level_of(spec)
            k = cache.key(spec if level == "O3" else f"{spec}|{level}", self._target)
            if k in keys:
                return
            keys.append(k)
            objs.append(_library_object(k))
            if objs[-1] is None:
                pending[batch.submit(text(), level)] = len(objs) - 1

        def on_gemm(req: Any) -> None:
            if isinstance(req, Bf16Gemm):  # a bf16 variant (codegen.gemm_bf16): its own piece
                if req.isa == "amx":
                    ensure_amx()  # tile data permission, before the step can run
                parts = bf16_library_parts({req})
            else:
                parts = library_parts({req})
            for spec, build in parts:
                shared(spec, lambda build=build: module_text(build()))

        try:
            # lowered here, on a cache miss, before anything could ask for a stage
            low = self._lowering = self._lower(
                on_kernels=lambda t, level: shared(_KERNEL_SPEC[level] + t, lambda: t),
                on_gemm=on_gemm)
            with log.phase("entry module"):
                entry = batch.submit(low.entry_text(), "fast")
        except BaseException:
            batch.cancel()  # an op with no CPU lowering, an interrupt: no threads left behind
            raise
        for name, seconds in low.timings.items():
            log.add(name, seconds)
        log.count("kernels", f"{len(low.plan.units())} in the step, {low.kernels_emitted} "
                  f"emitted, {low.kernels_distinct} distinct, {low.generic_calls} calls of "
                  "shape-generic kernels")
        log.count("shared objects", f"{len(keys)} (GEMM tiles, kernel modules), "
                  f"{len(keys) - len(pending)} reused from memory or disk")
        # every module is with the workers: keep the plan, not the IR objects (release_ir),
        # freed while they compile
        with log.phase("release IR"):
            low.release_ir()
        with log.phase("llvm (wait)"):
            done = batch.finish()
        for j, slot in pending.items():
            objs[slot] = done[j]
            _remember(keys[slot], done[j])
            cache.store(keys[slot], done[j])
        return done[entry], keys, [o for o in objs if o is not None]

    def ir_lowering(self) -> Lowering:
        """The lowering with its LLVM IR. The compile's own lowering released its IR once
        the objects were built (``Lowering.release_ir``), so a stage that prints IR lowers
        the graph again, once; lowering is deterministic, so it is the IR that was
        compiled (``test_streamed_modules_cover_the_module``)."""
        low = self.lowering
        if low.module is not None:
            return low
        if self._ir_lowering is None:
            self._ir_lowering = self._lower()
        return self._ir_lowering

    @property
    def lib_mod(self) -> Any:
        """The optimized GEMM library module (None when the step has no matmul)."""
        from graphc.codegen.cpu import compile_ir
        from graphc.codegen.gemm import build_library

        req = self.lowering.gemm_requests
        if self._lib_mod is None and req:
            lib = build_library(req, name=f"{self.name}_gemm")
            self._lib_mod = compile_ir(module_text(lib), self.tm)
        return self._lib_mod

    @property
    def mod(self) -> Any:
        """The optimized LLVM module (built lazily, like ``lowering``)."""
        from graphc.codegen.cpu import compile_module

        if self._mod is None:
            self._mod = compile_module(self.ir_lowering(), self.tm)
        return self._mod

    def memory_report(self) -> str:
        """Peak memory of one step: the scratch arena (after buffer reuse) and the state."""
        p = self.lowering.plan
        state = sh.dim(sum((sh.numel(n.shape) * n.dtype.itemsize for n in self.graph.inputs
                            if n.attrs["kind"] in ("param", "grad", "state", "buffer")), 0))
        env = self.sig.example_env
        at = ", ".join(f"{s}={v}" for s, v in env.items())

        def fmt(e: Any) -> str:
            e = sympy.sympify(e)
            mb = f"{sh.evaluate(e, env) / 2**20:.2f} MiB"
            return mb if e.is_number else f"{mb} at {at}"

        return (f"# memory: scratch arena {fmt(p.scratch_bytes)} (intermediates "
                f"{fmt(p.work_offset)}, {fmt(p.no_reuse_bytes)} without buffer reuse; GEMM "
                f"packing {fmt(sympy.sympify(p.scratch_bytes) - p.work_offset)}); persistent "
                f"state {fmt(state)}\n# scratch bytes = {sh.fmt_dim(p.scratch_bytes)}")

    def _lib_text(self, render: Any) -> str:
        lib = self.lib_mod
        return "" if lib is None else f"\n; GEMM library (a separate object)\n{render(lib)}"

    def profile(self) -> list[tuple[str, int, int]]:
        """``(kernel, time-stamp ticks, calls)`` accumulated since compilation (profiling
        builds: ``GRAPHC_PROFILE=1`` when the step was compiled)."""
        if self._profile is None:
            raise RuntimeError("profile: this step was compiled without profiling; set "
                               "GRAPHC_PROFILE=1 before compiling it")
        return [(name, int(t), int(c)) for name, (t, c) in
                zip(self.lowering.unit_names, self._profile)]

    def stages(self) -> dict[str, Any]:
        def fused() -> str:
            from graphc.codegen.matmul import describe as describe_matmul
            from graphc.codegen.plan_text import format_plan

            low = self.lowering

            def note(n: Any) -> str | None:
                lines = [describe_matmul(n, self.wide, self.debug), low.generic_notes.get(n.id)]
                return "\n    ".join(x for x in lines if x) or None

            # the kernels' choices follow the caches the code was generated for
            with tuned_for(self.caches):
                return format_plan(self.graph, low.plan, note)

        return {"fused": fused,
                "llvm": lambda: str(self.mod) + self._lib_text(str),
                "asm": lambda: emit_assembly(self.mod, self.tm) + self._lib_text(
                    lambda m: emit_assembly(m, self.tm)),
                "llvm_unoptimized": lambda: str(self.ir_lowering().module)}

    # -- calling --------------------------------------------------------------------------
    def bind_input(self, slot: int, arr: np.ndarray) -> None:
        """Point a table slot at an input buffer (copied first if it is not C-contiguous;
        a copy is not cached by identity: the caller may change the original in place)."""
        self.rebound = True
        if not arr.flags.c_contiguous:
            self._cache[slot] = None
            self._keep[slot] = self._bound[slot] = arr = np.ascontiguousarray(arr)
            self.table[slot] = _ptr(arr)
            return
        self._keep.pop(slot, None)
        self._cache[slot] = self._bound[slot] = arr
        self.table[slot] = _ptr(arr)

    def bind_output(self, slot: int, shape: tuple, j: int) -> np.ndarray:
        """A new buffer for output ``j``, pointed to by its table slot: kernels may write
        results straight into it (``planning._plan_direct_outputs``), so it is 64-byte
        aligned like every buffer of the arena (``codegen.abi.ALIGN``). The call wrapper
        takes a new one each call for a result of ``runner.FRESH_OUTPUT_BYTES`` or more and
        hands it to the caller uncopied; a smaller result keeps its buffer from call to call
        and is copied out."""
        buf, self.table[slot] = aligned_empty(shape, self.out_dtypes[j])
        self._cache[slot] = buf
        return buf

    def bind_target(self, slot: int, j: int, shape: tuple, fresh: bool = False) -> None:
        name, node = self.graph.updates[j]
        buf = self.sink_buffer(name, shape, node.dtype.np, fresh)
        if self._cache[slot] is not buf:
            self._cache[slot] = self._bound[slot] = buf
            self.table[slot] = _ptr(buf)
            self.rebound = True

    def on_error(self, rc: int, args: list[np.ndarray]) -> int:
        if rc == ERR_SCRATCH:
            self._set_scratch(int(self.info[1]) * 2)
            rc = self.fn(self.table_addr)
            if rc == 0:
                return 0
        if rc == ERR_INDEX:
            self._raise_index_error(args)
        if rc == ERR_NONFINITE:
            self._raise_nonfinite()
        if rc == ERR_BOUNDS:
            self._raise_bounds()
        raise RuntimeError(f"compiled step failed with code {rc}")

    def call(self, args: tuple) -> Any:
        return self._runner(args)

    def _raise_index_error(self, args: list[Any]) -> None:
        # the call wrapper passes the caller's objects: gc.Tensor arguments as they are
        args = [a.numpy() if isinstance(a, Tensor) else np.asarray(a) for a in args]
        _, node_idx, pos, value = (int(v) for v in self.err)
        node = next((n for n in self.lowering.plan.order
                     if self.lowering.plan.node_index.get(n.id) == node_idx), None)
        what = "an index"
        size: Any = "?"
        if node is not None:
            from graphc.ir import toposort

            named = [x for x in toposort([node.inputs[1]])
                     if x.op == "input" and x.attrs["kind"] == "arg" and not x.dtype.is_float]
            if named:
                what = f"argument {named[0].attrs['name']!r}"
                pos = _position_in_argument(self.sig, named[0].attrs["name"], args, value, pos)
            ax = node.attrs.get("axis", 0)
            size = node.inputs[0].shape[ax] if node.op == "gather" else node.shape[ax]
            size = sh.evaluate(size, self.check_args(args))
        raise IndexError(
            f"{what}: value {value} at flat position {pos} is out of range "
            f"[0, {size}) (no parameter was modified)"
        )


__all__ = ["CPUExecutable", "Tensor"]
