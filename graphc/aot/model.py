"""The C state layout of an ahead-of-time step: what ``NAME_state`` holds and why.

:func:`describe` maps one compiled variant's signature (its graph inputs, updates and
guards) onto the library's state: the tensors (parameters, buffers, gradients, optimizer
state) with their build-time values and presence, the run-time hyperparameters, and the
order in which the kernel's pointer table reads them. :class:`AotModel` is everything the C
generator (:mod:`graphc.aot.csource`) and the checkpoint writer
(:mod:`graphc.aot.checkpoint`) need; the package docstring (:mod:`graphc.aot`) explains the
presence and hyperparameter rules it encodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from ..ir import dtypes as dt

__all__ = ["AOTError", "AotModel", "Arg", "Hyper", "StateTensor", "describe", "variant_for"]


class AOTError(RuntimeError):
    """The step cannot be built ahead of time (unsupported feature, compiler failure)."""


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
    from ..nn.module import Module
    from ..optim.optimizer import Optimizer
    from ..tensor import Tensor

    g, sig = variant.graph, variant.sig
    if sig.collectives:
        raise AOTError(f"{name}: a DistributedDataParallel step reduces gradients between "
                       "processes; ahead-of-time builds do not support that")
    if sig.arg_values:
        which = ", ".join(repr(sig.arg_names[i]) for i in sig.arg_values)
        raise AOTError(f"{name}: the step uses argument(s) {which} as Python values (a "
                       "flag or count it branches or loops on), so its code holds only the "
                       "values traced; a C caller could pass another. Bind them in Python "
                       "(functools.partial) before building")
    for n in list(g.inputs) + list(g.outputs):
        if n.dtype.name == "bfloat16":
            # inside the step (autocast) bf16 is fine; at the C boundary it would need a C
            # type and a checkpoint encoding the library does not define yet
            raise NotImplementedError(
                f"{name}: {n.attrs.get('name', 'an output')!r} is a bfloat16 tensor at the "
                "step's boundary; ahead-of-time builds take and return float32, float64, "
                "int64, int32 and bool (keep parameters float32 and use gc.autocast inside)")
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
        elif src.kind == "random":
            raise AOTError(f"{nm}: the step draws random values (gc.rand/gc.randn/gc.randint, "
                           "a Tensor fill such as bernoulli_: drawn per call from the Python "
                           "generator's stream), which an AOT step cannot draw; pass "
                           "the random values in as an argument")
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
        gg = getattr(read, "global_guard", None)  # a module global: its value, not a snapshot
        baked.append((what, expected if gg is None else gg[2] if isinstance(
            gg[2], (int, float, str, bool, tuple, type(None))) else f"<{type(gg[2]).__name__}>"))

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


def variant_for(fn: Any, args: list[np.ndarray]) -> Any:
    """The compiled variant that a call with ``args`` would run (compiled if needed)."""
    for v in reversed(fn.variants):
        if v.mode_ok() and v.exe.matches(args):
            return v
    return fn._compile(args)
