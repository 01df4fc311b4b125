"""``gc.compile``: trace once, lower the whole step to one native function, call it cheaply.

A ``CompiledFunction`` keeps one ``Variant`` per specialisation (argument dtypes/ranks/non-batch
dims, module training flags, structural optimizer guards, incoming ``.grad`` presence). Batch
sizes are symbolic, so a new batch size reuses the same variant. Each call:

1. checks arguments against the variant's signature (binding the batch symbols; a mismatch
   raises before anything is touched);
2. fills a prepared pointer table with the live buffers (parameters, grads, optimizer state)
   and the current hyperparameters;
3. calls the native step, which computes every update into scratch and commits them only
   after all checks inside the native code have passed;
4. publishes new ``.grad`` tensors and optimizer state the first time they appear.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from . import dtypes as dt
from . import shapes as sh
from .nn import module as nn_module
from .tensor import Tensor
from .trace import Signature, trace, unflatten


def _as_array(x: Any, i: int, name: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, Tensor):
        return x.numpy()
    try:
        return np.asarray(x)
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"argument {name!r}: expected an array or tensor, got "
                        f"{type(x).__name__}") from e


class Variant:
    """One compiled specialisation: the graphs at each stage, the executable, the runtime."""

    def __init__(self, fn: CompiledFunction, args: list[np.ndarray]) -> None:
        from graphc.passes.pipeline import run_pipeline

        self.graph_traced, self.sig = trace(fn.fn, args, fn.name, fn.dynamic)
        self.stages = run_pipeline(self.graph_traced)
        self.graph = self.stages["optimized"]
        self.mode_flags = fn._mode_flags()
        self.exe = fn._backend(self.graph, self.sig)
        self.stages.update(self.exe.stages())

    def matches(self, args: list[np.ndarray], mode_flags: tuple) -> bool:
        sig = self.sig
        if len(args) != len(sig.arg_types) or mode_flags != self.mode_flags:
            return False
        env: dict = {}
        for a, (dtype, shape) in zip(args, sig.arg_types):
            if a.dtype != dtype.np or a.ndim != len(shape):
                return False
            for p, d in zip(shape, a.shape):
                if isinstance(p, int):
                    if p != d:
                        return False
                elif env.setdefault(p, d) != d:
                    return False
        return all(read() == expected for read, expected, _ in sig.struct_guards)


class CompiledFunction:
    """The callable ``gc.compile`` returns (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], device: str = "cpu",
                 example_args: tuple | None = None, dynamic: Any = True,
                 backend: str | None = None) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device: expected 'cpu' or 'cuda', got {device!r}")
        self.fn = fn
        self.name = getattr(fn, "__name__", "step")
        self.device = device
        self.example_args = example_args  # kept for `graphc aot` and re-tracing
        self.dynamic = dynamic
        self.backend_name = backend or ("interp" if device == "cpu" and _NO_NATIVE else device)
        self.variants: list[Variant] = []
        self.compile_count = 0
        self._lock = threading.Lock()
        self._modules = _modules_of(fn)
        self._last: Variant | None = None
        self._last_epoch = -1
        functools.update_wrapper(self, fn)
        if example_args is not None:
            self._compile([_as_array(a, i, f"arg{i}") for i, a in enumerate(example_args)])

    def _backend(self, graph: Any, sig: Signature) -> Any:
        if self.backend_name == "interp":
            from .executable import InterpreterExecutable

            return InterpreterExecutable(graph, sig)
        if self.backend_name == "cuda":
            from graphc.codegen.ptx import PTXExecutable

            return PTXExecutable(graph, sig)
        from graphc.codegen.cpu import CPUExecutable

        return CPUExecutable(graph, sig)

    def _mode_flags(self) -> tuple:
        return tuple(m.training for m in self._modules)

    def _compile(self, args: list[np.ndarray]) -> Variant:
        v = Variant(self, args)
        self.variants.append(v)
        self.compile_count += 1
        return v

    def _select(self, args: list[np.ndarray]) -> Variant:
        flags = self._mode_flags()
        for v in self.variants:
            if v.matches(args, flags):
                return v
        if self.variants:
            self._explain_mismatch(args)
        return self._compile(args)

    def _explain_mismatch(self, args: list[np.ndarray]) -> None:
        """Raise for changes that can never be right (a wrong dtype for an integer target)."""
        ref = self.variants[0].sig
        if len(args) != len(ref.arg_types):
            raise TypeError(
                f"{self.name}() takes {len(ref.arg_types)} arguments, got {len(args)}"
            )

    def __call__(self, *args: Any) -> Any:
        arrays = [_as_array(a, i, f"arg{i}") for i, a in enumerate(args)]
        with self._lock:
            v = self._last
            epoch = nn_module.mode_epoch[0]
            if v is None or epoch != self._last_epoch or not v.matches(arrays, v.mode_flags):
                v = self._select(arrays)
                self._last, self._last_epoch = v, epoch
            outs = v.exe.run(arrays)
        return unflatten(v.sig.output_tree, [Tensor._from_array(o) for o in outs])

    def ir(self, stage: str = "optimized") -> str:
        """The IR (or LLVM IR, assembly, PTX) of the most recent variant at ``stage``."""
        if not self.variants:
            raise RuntimeError(
                f"{self.name} has not been compiled yet: call it once or pass example_args"
            )
        v = self._last or self.variants[-1]
        if stage not in v.stages:
            raise ValueError(f"stage: expected one of {sorted(v.stages)}, got {stage!r}")
        s = v.stages[stage]
        if callable(s):
            s = v.stages[stage] = s()  # lazily rendered (LLVM IR, assembly)
        return s if isinstance(s, str) else str(s)

    @property
    def stages(self) -> list[str]:
        v = self._last or (self.variants[-1] if self.variants else None)
        return list(v.stages) if v else []


_NO_NATIVE = False


def _modules_of(fn: Callable[..., Any]) -> list[Any]:
    """Modules reachable from the function's globals and closure (their training flags are
    part of the specialisation)."""
    from .nn.module import Module

    scopes = dict(getattr(fn, "__globals__", {}))
    code = getattr(fn, "__code__", None)
    for var, cell in zip(code.co_freevars if code else (), getattr(fn, "__closure__", None) or ()):
        try:
            scopes[var] = cell.cell_contents
        except ValueError:
            continue
    mods: list[Any] = []
    seen: set[int] = set()
    for obj in scopes.values():
        if isinstance(obj, Module):
            for m in obj.modules():
                if id(m) not in seen:
                    seen.add(id(m))
                    mods.append(m)
    return mods


def compile(fn: Callable[..., Any] | None = None, *, device: str = "cpu",  # noqa: A001
            example_args: tuple | None = None, dynamic: Any = True,
            backend: str | None = None) -> Any:
    """Compile a training (or inference) step; usable as ``@gc.compile`` or with arguments.

    ``dynamic``: True (default) makes the first dimension of every argument symbolic;
    False specialises on every shape; a dict ``{arg index or name: (axes...)}`` picks axes.
    """
    if fn is None:
        return lambda f: CompiledFunction(f, device, example_args, dynamic, backend)
    return CompiledFunction(fn, device, example_args, dynamic, backend)


__all__ = ["compile", "CompiledFunction", "dt", "sh"]
