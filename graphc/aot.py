"""Ahead-of-time builds: one compiled training step as a C library (``gc.aot.build``).

``build(fn, example_args, out_dir, name, target)`` writes

- ``NAME.h``: the C ABI, every function, argument, shape, dtype and ownership rule documented;
- ``NAME.o``: one position-independent relocatable object (the LLVM kernel, the initial state
  blob and the C wrapper combined with a partial link), to link into a program statically;
- ``libNAME.so``: the same as a shared library (``cc -shared ... -lm``);
- ``NAME.c``: the generated wrapper source, kept for reading and debugging.

What the library holds
----------------------
The step's *state* is everything the traced graph reads besides its arguments: parameters and
buffers, ``.grad`` tensors and optimizer state. ``NAME_create()`` allocates one copy of it,
initialised with the values the Python objects had when ``build`` ran. Those values are
embedded as a read-only data blob in a second LLVM object (bytes, so bit exact, and no 3 MB of C
array literals for the compiler to parse). Hyperparameters the trace made run-time inputs
(``lr``, Adam's betas, ...) are a struct ``NAME_hyper`` passed to every step, its defaults
being the values at build time; structural options (momentum on/off, nesterov, ...) are baked
in, as they are in the Python variant.

Presence (``.grad`` may be ``None``; optimizer state may not exist yet) is modelled by a
presence flag per tensor; buffers are always allocated, and an absent tensor's buffer holds
what the Python runtime feeds for a missing one (zeros for gradients, the optimizer's fill
value for its state), so results never depend on stale contents. The step built is the
variant for the presence *at build time*: if it read an incoming ``.grad`` (a step without
``zero_grad()``), the C step checks that presence and returns ``GRAPHC_ESTATE`` when it
differs, rather than silently computing something else. Optimizer-state flags are fed from
the presence flags, so "first step" logic (Adam's bias correction, SGD's momentum
initialisation) behaves as in Python.

The kernel commits every update only after all of its checks pass, and the wrapper updates
presence flags and counters only after a successful kernel call, so a step that returns an
error leaves the state exactly as it was.

Numerics: the kernel is the same LLVM IR the JIT compiles, for the same CPU and features, so a
library built for ``native`` reproduces the Python compiled step bit for bit on the build host.
"""

from __future__ import annotations

import difflib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sympy

from .ir import dtypes as dt

__all__ = ["build", "save_state", "AotModel", "StateTensor", "describe", "AOTError",
           "TargetError", "check_target", "llvm_catalog"]


class AOTError(RuntimeError):
    """The step cannot be built ahead of time (unsupported feature, compiler failure)."""


class TargetError(ValueError):
    """A target CPU or feature that LLVM would not accept.

    Raised before LLVM sees the name: LLVM itself only warns about an unknown CPU (once per
    subtarget it creates, so several times a build) and then aborts the whole process with
    ``LLVM ERROR: 64-bit code requested on a subtarget that doesn't support it``.
    """


@dataclass
class StateTensor:
    """One tensor of the C state (a parameter, buffer, gradient or optimizer state)."""

    name: str  # the traced name: "model.0.weight", "model.0.weight.grad", "opt.state[..].exp_avg"
    kind: str  # param | buffer | grad | optim
    dtype: dt.DType
    shape: tuple[int, ...]
    init: np.ndarray
    present: bool  # at build time (always True for params and buffers)
    module_key: tuple[str, str] | None = None  # (module variable, state_dict key)
    optim_key: tuple[str, int, str] | None = None  # (optimizer variable, param index, key)
    fill: float = 0.0  # the value an absent tensor holds (what Python feeds for "no state")

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass
class Hyper:
    """A run-time hyperparameter: one ``double`` field of ``NAME_hyper``."""

    label: str  # "opt.g0.lr", "opt.g0.betas[0]"
    field: str  # C identifier
    default: float
    where: tuple[int, str, int | None]  # (id(group dict), key, tuple index or None)


@dataclass
class Arg:
    name: str
    dtype: dt.DType
    shape: tuple[Any, ...]  # ints and sympy expressions over the batch symbols


@dataclass
class AotModel:
    """Everything the C generator needs, derived from one compiled variant."""

    name: str
    graph: Any
    args: list[Arg]
    symbols: list[sympy.Symbol]  # C arguments, in order (the signature's batch symbols)
    kernel_symbols: list[sympy.Symbol]  # the kernel's syms[] order
    tensors: list[StateTensor]
    hypers: list[Hyper]
    # one entry per graph input, in table order: (kind, index) with kind
    # arg | tensor | flag | hyper | seed (index: arg, tensor, tensor whose presence, hyper, seed)
    inputs: list[tuple[str, int]]
    outputs: list[tuple[dt.DType, tuple[Any, ...]]]
    updates: list[int]  # tensor index per update slot
    mark_present: list[int]  # tensors present after a successful step
    mark_absent: list[int]  # tensors absent after a successful step (grads set to None)
    presence_guards: list[tuple[int, bool]]  # tensor index, required presence
    baked: list[tuple[str, Any]]  # structural options fixed at build time (for the docs)
    n_seeds: int
    # (optimizer variable, its state_dict()["param_groups"], id() of each live group dict)
    optimizers: list[tuple[str, list[dict[str, Any]], list[int]]] = field(default_factory=list)
    target: str = "native"
    step_name: str = ""
    cpu: str = ""
    features: str = ""


def _c_ident(label: str, taken: set[str]) -> str:
    s = "".join(c if c.isalnum() else "_" for c in label).strip("_") or "h"
    while "__" in s:
        s = s.replace("__", "_")
    if s[0].isdigit():
        s = "h_" + s
    base, k = s, 2
    while s in taken:
        s = f"{base}_{k}"
        k += 1
    taken.add(s)
    return s


def _scopes(f: Any) -> dict[str, Any]:
    """The globals and closure variables a step function can see (as ``collect_names``)."""
    scopes: dict[str, Any] = dict(getattr(f, "__globals__", {}))
    code = getattr(f, "__code__", None)
    for var, cell in zip(code.co_freevars if code else (), getattr(f, "__closure__", None) or ()):
        try:
            scopes[var] = cell.cell_contents
        except ValueError:
            continue
    return scopes


def describe(fn: Any, variant: Any, name: str) -> AotModel:
    """Map a compiled variant's signature onto a C state layout (see the module docstring)."""
    from .nn.module import Module
    from .optim.optimizer import Optimizer
    from .tensor import Tensor

    g, sig = variant.graph, variant.sig
    if sig.collectives:
        raise AOTError(f"{name}: a DistributedDataParallel step reduces gradients between "
                       "processes; ahead-of-time builds do not support that")
    scopes = _scopes(fn.fn)
    module_of: dict[int, tuple[str, str]] = {}
    optims: list[tuple[str, Any]] = []
    for var, obj in scopes.items():
        if isinstance(obj, Module):
            for pname, p in obj.named_parameters():
                module_of.setdefault(id(p), (var, pname))
            for bname, b in obj.named_buffers():
                module_of.setdefault(id(b), (var, bname))
        elif isinstance(obj, Optimizer) and all(o is not obj for _, o in optims):
            optims.append((var, obj))
    param_index: dict[tuple[int, int], int] = {}  # (id(opt), id(p)) -> state_dict index
    for _, opt in optims:
        k = 0
        for group in opt.param_groups:
            for p in group["params"]:
                if (id(opt), id(p)) not in param_index:
                    param_index[(id(opt), id(p))] = k
                    k += 1
    opt_var = {id(o): v for v, o in optims}

    tensors: list[StateTensor] = []
    by_key: dict[Any, int] = {}

    def add(key: Any, t: StateTensor) -> int:
        if key not in by_key:
            by_key[key] = len(tensors)
            tensors.append(t)
        return by_key[key]

    def fixed_shape(shape: tuple, what: str) -> tuple[int, ...]:
        if not all(isinstance(d, int) for d in shape):
            raise AOTError(f"{what}: state tensors must have fixed shapes, got {shape}")
        return tuple(int(d) for d in shape)

    def param_name(p: Tensor) -> str:
        for n in g.inputs:
            s = sig.sources[n.attrs["name"]]
            if s.kind == "tensor" and s.ref is p:
                return n.attrs["name"]
        return f"t{len(tensors)}"

    def grad_tensor(p: Tensor, node_dtype: dt.DType, shape: tuple) -> int:
        present = p._grad is not None
        init = (np.array(p._grad._node._value, dtype=node_dtype.np, copy=True) if present
                else np.zeros(shape, node_dtype.np))
        pn = param_name(p)
        return add(("grad", id(p)), StateTensor(f"{pn}.grad", "grad", node_dtype,
                                                fixed_shape(shape, pn), init, present))

    def optim_tensor(ref: tuple, label: str, node: Any, fill: float) -> int:
        opt, p, key = ref
        st = opt.state[p].get(key) if p in opt.state else None
        shape = fixed_shape(node.shape, label)
        if st is None:
            init, present = np.full(shape, fill, node.dtype.np), False
        else:
            arr = st._node._value if isinstance(st, Tensor) else np.asarray(st)
            init, present = np.array(arr, dtype=node.dtype.np, copy=True).reshape(shape), True
        okey = None
        if id(opt) in opt_var and (id(opt), id(p)) in param_index:
            okey = (opt_var[id(opt)], param_index[(id(opt), id(p))], key)
        return add(("ostate", id(opt), id(p), key),
                   StateTensor(label, "optim", node.dtype, shape, init, present, None, okey,
                               float(fill)))

    inputs: list[tuple[str, int]] = []
    hypers: list[Hyper] = []
    taken: set[str] = set()
    n_seeds = 0
    for n in g.inputs:
        nm = n.attrs["name"]
        src = sig.sources[nm]
        if src.kind == "arg":
            inputs.append(("arg", int(src.ref)))
        elif src.kind == "tensor":
            t = src.ref
            kind = "param" if n.attrs.get("kind") == "param" else "buffer"
            shape = fixed_shape(n.shape, nm)
            init = np.array(t._node._value, dtype=n.dtype.np, copy=True).reshape(shape)
            inputs.append(("tensor", add(("tensor", id(t)), StateTensor(
                nm, kind, n.dtype, shape, init, True, module_of.get(id(t))))))
        elif src.kind == "grad":
            inputs.append(("tensor", grad_tensor(src.ref, n.dtype, n.shape)))
        elif src.kind == "ostate":
            inputs.append(("tensor", optim_tensor(src.ref, nm, n, src.fill)))
        elif src.kind == "oflag":
            opt, p, key = src.ref
            k = ("ostate", id(opt), id(p), key)
            if k not in by_key:
                raise AOTError(f"{nm}: presence flag without its optimizer state")
            inputs.append(("flag", by_key[k]))
        elif src.kind == "cell":  # "the first step's optimizer state exists"
            entry = src.ref.tensor_entry()
            k = None if entry is None else ("ostate", id(entry[0]), id(entry[1]), entry[2])
            if k is None or k not in by_key:
                raise AOTError(f"{nm}: optimizer state presence without a state tensor")
            inputs.append(("flag", by_key[k]))
        elif src.kind == "hyper":
            group, key = src.ref
            if n.dtype != dt.float64:
                raise AOTError(f"{nm}: hyperparameters must be float64")
            where = ((id(group.group), group.key, group.index) if hasattr(group, "index")
                     else (id(group), key, None))
            hypers.append(Hyper(nm, _c_ident(nm, taken), float(group[key]), where))
            inputs.append(("hyper", len(hypers) - 1))
        elif src.kind == "seed":
            inputs.append(("seed", n_seeds))
            n_seeds += 1
        else:
            raise AOTError(f"{nm}: unsupported input source {src.kind!r}")

    updates: list[int] = []
    mark_present: list[int] = []
    for slot, node in g.updates:
        sink = sig.sinks[slot]
        if sink.kind == "tensor":
            k = ("tensor", id(sink.ref))
            if k not in by_key:
                raise AOTError(f"{slot}: update of a tensor the step never reads")
            updates.append(by_key[k])
        elif sink.kind == "grad":
            updates.append(grad_tensor(sink.ref, node.dtype, node.shape))
            mark_present.append(updates[-1])
        elif sink.kind == "ostate":
            opt, p, key = sink.ref
            k = ("ostate", id(opt), id(p), key)
            if k not in by_key:
                raise AOTError(f"{slot}: optimizer state written before being read")
            updates.append(by_key[k])
            mark_present.append(updates[-1])
        else:
            raise AOTError(f"{slot}: unsupported update sink {sink.kind!r}")
        t = tensors[updates[-1]]
        if t.dtype != node.dtype or t.shape != fixed_shape(node.shape, slot):
            raise AOTError(f"{slot}: update type differs from the state tensor's")
    mark_absent = [by_key[("grad", id(p))] for p in sig.grads_to_clear
                   if ("grad", id(p)) in by_key]

    guards: list[tuple[int, bool]] = []
    baked: list[tuple[str, Any]] = []
    for read, expected, what in sig.struct_guards:
        p = (read.__defaults__ or (None,))[0] if callable(read) else None
        if isinstance(p, Tensor) and what.endswith(".grad"):
            if ("grad", id(p)) in by_key:
                guards.append((by_key[("grad", id(p))], bool(expected)))
            elif expected:
                raise AOTError(f"{what}: the step needs a gradient it never reads")
            continue
        baked.append((what, expected))

    optimizers: list[tuple[str, list[dict[str, Any]], list[int]]] = []
    for var, opt in optims:
        gids = [id(gr) for gr in opt.param_groups]
        if any(t.optim_key is not None and t.optim_key[0] == var for t in tensors) or any(
                h.where[0] in gids for h in hypers):
            optimizers.append((var, opt.state_dict()["param_groups"], gids))

    return AotModel(
        name=name, graph=g,
        args=[Arg(a, t, tuple(s)) for a, (t, s) in zip(sig.arg_names, sig.arg_types)],
        symbols=list(sig.symbols), kernel_symbols=list(g.symbols()), tensors=tensors,
        hypers=hypers, inputs=inputs,
        outputs=[(o.dtype, tuple(o.shape)) for o in g.outputs], updates=updates,
        mark_present=sorted(set(mark_present)),
        mark_absent=sorted(set(mark_absent) - set(mark_present)),
        presence_guards=guards, baked=baked, n_seeds=n_seeds, optimizers=optimizers,
    )


def _variant_for(fn: Any, args: list[np.ndarray]) -> Any:
    """The compiled variant that a call with ``args`` would run (compiled if needed)."""
    for v in reversed(fn.variants):
        if v.mode_ok() and v.exe.matches(args):
            return v
    return fn._compile(args)


@functools.cache
def llvm_catalog() -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(triple, CPU names, feature names) that LLVM knows for this host's target.

    llvmlite has no API for these lists, but LLVM prints both tables to stderr when a target
    machine is created for the CPU ``help`` (what ``llc -mcpu=help`` shows), once per process;
    the output is captured at the file-descriptor level and parsed. Empty tuples when nothing
    could be parsed (validation is then left to LLVM rather than refusing every target).
    """
    import llvmlite.binding as llvm

    from graphc.codegen.cpu import init_llvm

    init_llvm()
    triple = llvm.get_default_triple()
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as f:
            os.dup2(f.fileno(), 2)
            try:
                llvm.Target.from_triple(triple).create_target_machine(cpu="help", features="")
            finally:
                os.dup2(saved, 2)
            f.seek(0)
            text = f.read().decode("utf-8", "replace")
    finally:
        os.close(saved)
    tables: dict[str, list[str]] = {"CPUs": [], "features": []}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("Available "):
            current = tables.get(line.split()[1])
        elif current is not None and line.startswith("  ") and line.split():
            current.append(line.split()[0])
        elif current is not None and line.strip() and not line.startswith(" "):
            current = None
    return triple, tuple(tables["CPUs"]), tuple(tables["features"])


@functools.cache
def _probe_cpu(cpu: str) -> str | None:
    """Why LLVM cannot generate code for ``cpu`` on this triple, or None when it can.

    A CPU can be known to LLVM and still unusable here: the 32-bit x86 CPUs (``i686``,
    ``pentium4``, ...) exist in the x86 table but abort the process on an x86-64 triple as
    soon as a function is compiled. That abort cannot be caught, so a child process tries it
    (a target machine and one empty function), and its complaint is reported instead.
    """
    code = ("import llvmlite.binding as llvm\n"
            "llvm.initialize_native_target(); llvm.initialize_native_asmprinter()\n"
            f"tm = llvm.Target.from_default_triple().create_target_machine(cpu={cpu!r})\n"
            "tm.emit_object(llvm.parse_assembly('define void @f() {\\n ret void\\n}\\n'))\n")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None  # cannot tell: let the build try
    if r.returncode == 0 and "not a recognized" not in r.stderr:
        return None
    lines = [ln.removeprefix("LLVM ERROR: ").strip() for ln in r.stderr.splitlines()
             if ln.strip()]
    return lines[-1] if lines else f"LLVM exited with status {r.returncode}"


def check_target(target: str | None, features: str | None = None) -> None:
    """Raise :class:`TargetError` unless LLVM accepts ``target`` and ``features`` here.

    ``target``: ``None``, ``"native"`` or an LLVM CPU name for this host's triple;
    ``features``: LLVM's ``+feature,-feature`` list. The message names the argument, the bad
    value and the closest valid names, so a typo is fixed without reading LLVM's tables.
    """
    triple, cpus, feats = llvm_catalog()
    if target not in (None, "native"):
        if not isinstance(target, str) or not target:
            raise TargetError(f"target: expected 'native' or an LLVM CPU name, got {target!r}")
        if cpus and target not in cpus:
            close = difflib.get_close_matches(target, cpus, n=4, cutoff=0.6)
            levels = [c for c in cpus if c.startswith("x86-64")]
            hint = (f"did you mean {', '.join(map(repr, close))}? " if close else "")
            raise TargetError(
                f"target: expected 'native' or a CPU LLVM knows for {triple}, got {target!r}; "
                f"{hint}portable choices: {', '.join(['native', *levels]) or 'native'} "
                f"({len(cpus)} CPUs in all; `graphc aot --target help` lists them)")
        why = _probe_cpu(target)
        if why is not None:
            raise TargetError(f"target: expected a CPU that can generate code for {triple}, "
                              f"got {target!r} (LLVM: {why})")
    for item in (features or "").split(","):
        item = item.strip()
        if not item:
            continue
        name = item[1:]
        if item[0] not in "+-" or not name:
            raise TargetError(f"features: expected '+name' or '-name' items separated by "
                              f"commas, got {item!r} in {features!r}")
        if feats and name not in feats:
            close = difflib.get_close_matches(name, feats, n=4, cutoff=0.6)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise TargetError(f"features: expected features LLVM knows for {triple}, got "
                              f"{name!r} in {features!r}{hint}")


def target_machine(target: str | None) -> tuple[Any, str, str, bool]:
    """(target machine, cpu, features, wide tiles) for an AOT target name.

    ``None``/``"native"``: this host's CPU and features; anything else is an LLVM CPU name
    (``x86-64-v3``, ``x86-64-v4``, ``znver4``, ...) with that CPU's default features, so the
    object runs on any machine of that level. Objects are position independent
    (``reloc='pic'``) with the default code model, so they link into shared libraries and PIE
    executables alike.
    """
    import llvmlite.binding as llvm

    from graphc.codegen.cpu import has_avx512, host_target_machine, init_llvm

    init_llvm()
    check_target(target)
    if target in (None, "native"):
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    else:
        cpu, features = target, ""
    tm = host_target_machine(cpu, features, reloc="pic", codemodel="default")
    return tm, cpu, features, has_avx512(tm, None if target in (None, "native") else target)


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
        blob.extend(b"\0" * (-len(blob) % 64))
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
    gv.align = 64
    m = llvm.parse_assembly(str(mod))
    m.get_global_variable(gv.name).visibility = "hidden"  # (llvmlite.ir does not print it)
    m.verify()
    return tm.emit_object(m), offsets


def build(fn: Any, example_args: Any, out_dir: str | os.PathLike[str], name: str,
          target: str | None = None) -> dict[str, str]:
    """Build ``fn``'s step for ``example_args`` as ``NAME.h``, ``NAME.o`` and ``libNAME.so``.

    Returns ``{"header", "object", "shared", "source"}`` paths. See the module docstring for
    what the library holds and the generated header for the ABI.
    """
    from graphc.codegen.cpu import compile_module
    from graphc.codegen.lower import Lowering

    from .aot_c import generate_header, generate_source

    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"name: expected a C identifier, got {name!r}")
    if example_args is None:
        raise ValueError("example_args: an ahead-of-time build needs example arguments")
    from .api import _as_array

    args = [_as_array(a, i, f"arg{i}") for i, a in enumerate(example_args)]
    variant = _variant_for(fn, args)
    model = describe(fn, variant, name)
    tm, cpu, features, wide = target_machine(target)
    model.target, model.cpu, model.features = target or "native", cpu, features
    model.step_name = fn.name

    lowering = Lowering(variant.graph, name=f"{name}_kernel", triple=tm.triple,
                        data_layout=str(tm.target_data), wide=wide)
    mod = compile_module(lowering, tm)
    _privatize(mod, lowering.name)
    kernel_obj = tm.emit_object(mod)
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


def save_state(fn: Any, path: str | os.PathLike[str], name: str | None = None,
               example_args: Any = None) -> None:
    """Write the step's *current* Python state as a checkpoint ``NAME_load`` reads.

    So a model trained (or loaded) in Python can continue training in C: the archive has one
    ``.npy`` entry per present state tensor, named as in the C library, plus the step count
    (0) and the current run-time hyperparameters, in the ``gc.load`` format (written by numpy,
    atomically as ``gc.save`` does).
    """
    import json

    from .api import _as_array
    from .serialization import _encode, _fsync_dir

    ex = example_args if example_args is not None else fn.example_args
    if ex is None:
        raise ValueError("example_args: needed to pick the step's variant")
    v = _variant_for(fn, [_as_array(a, i, f"arg{i}") for i, a in enumerate(ex)])
    model = describe(fn, v, name or fn.name)
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for t in model.tensors:
        if t.present:
            arrays[t.name] = t.init
        entries.append([t.name, {"$array": t.name} if t.present else None])
    arrays["__aot_steps__"] = np.array(0, np.int64)
    arrays["__aot_hyper__"] = np.array([h.default for h in model.hypers], np.float64)
    root = {"$dict": [
        ["format", "graphc.aot.state"], ["version", 1], ["name", model.name],
        ["steps", {"$scalar": "__aot_steps__"}], ["tensors", {"$dict": entries}],
        ["hyper", {"$dict": [[h.label, _encode(h.default, {}, h.label)]
                             for h in model.hypers]}]]}
    doc = json.dumps({"format": "graphc.checkpoint", "version": 1, "root": root},
                     allow_nan=False)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, __graphc__=np.array(doc), **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
