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
from .executable import Mismatch
from .nn import module as nn_module
from .tensor import Tensor
from .trace import Signature, trace

_MODE_EPOCH = nn_module.mode_epoch  # bumped by train()/eval(): the fast path re-checks modes


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
        self.stages: dict[str, Any] = dict(run_pipeline(self.graph_traced))
        self.graph = self.stages["optimized"]
        if fn.check_finite:
            from .checks import add_finite_checks

            self.graph = self.stages["optimized"] = add_finite_checks(self.graph, self.sig)
        self.exe = fn._backend(self.graph, self.sig)
        self.stages.update(self.exe.stages())


    def mode_ok(self) -> bool:
        """The ``training`` flags the trace read still have the values it saw."""
        return all(m.training == v for m, v in self.sig.mode_reads)


class CompiledFunction:
    """The callable ``gc.compile`` returns (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], device: str = "cpu",
                 example_args: tuple | None = None, dynamic: Any = True,
                 backend: str | None = None, check_finite: bool = False,
                 debug: bool | None = None) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device: expected 'cpu' or 'cuda', got {device!r}")
        if check_finite and (backend or device) == "cuda":
            raise ValueError("check_finite: supported by the 'cpu' and 'interp' backends only")
        from .checks import debug_default

        self.check_finite = bool(check_finite)
        self.debug = debug_default() if debug is None else bool(debug)
        self.fn = fn
        self.name = getattr(fn, "__name__", "step")
        self.device = device
        self.dynamic = dynamic
        self.backend_name = backend or device
        self.example_args = example_args
        self.variants: list[Variant] = []
        self.compile_count = 0
        self._lock = threading.Lock()
        self._last: Variant | None = None
        self._last_epoch = -1
        self._fast: Callable[[tuple], Any] | None = None  # the last variant's call wrapper
        functools.update_wrapper(self, fn)
        if example_args is not None:
            self._compile([_as_array(a, i, f"arg{i}") for i, a in enumerate(example_args)])

    def _backend(self, graph: Any, sig: Signature) -> Any:
        if sig.collectives:  # gradients reduced between processes: two native functions
            from .distributed.executable import DistributedExecutable

            return DistributedExecutable(graph, sig, self._backend)
        if self.backend_name == "interp":
            from .executable import InterpreterExecutable

            return InterpreterExecutable(graph, sig)
        if self.backend_name == "cuda":
            from graphc.codegen.ptx import PTXExecutable

            return PTXExecutable(graph, sig)
        if self.backend_name != "cpu":
            raise ValueError(f"backend: expected 'cpu', 'cuda' or 'interp', got "
                             f"{self.backend_name!r}")
        from graphc.codegen.cpu import CPUExecutable

        return CPUExecutable(graph, sig, debug=self.debug)

    def _compile(self, args: list[np.ndarray]) -> Variant:
        v = Variant(self, args)
        self.variants.append(v)
        self.compile_count += 1
        self._last, self._last_epoch = v, nn_module.mode_epoch[0]
        return v

    def _select(self, args: list[np.ndarray]) -> Variant:
        for v in reversed(self.variants):
            if v.mode_ok() and v.exe.matches(args):
                return v
        self._explain_mismatch(args)
        return self._compile(args)

    def _explain_mismatch(self, args: list[np.ndarray]) -> None:
        """Raise for calls that no recompilation can make right.

        A different rank, dtype or non-batch size recompiles (and tracing raises a clear
        error if the model cannot take it); but arguments that disagree on a shared batch
        symbol (x with 8 rows, y with 9) are a user error: raise naming both.
        """
        for v in self.variants:
            sig = v.sig
            if len(args) != len(sig.arg_types):
                raise TypeError(f"{self.name}() takes {len(sig.arg_types)} arguments "
                                f"({', '.join(sig.arg_names)}), got {len(args)}")
            if any(a.dtype != t.np or a.ndim != len(s) for a, (t, s) in
                   zip(args, sig.arg_types)):
                continue
            fixed_ok = all(not isinstance(p, int) or p == d for a, (_, s) in
                           zip(args, sig.arg_types) for p, d in zip(s, a.shape))
            if fixed_ok:
                env: dict = {}
                for name, a, (_, s) in zip(sig.arg_names, args, sig.arg_types):
                    sh.bind(s, a.shape, env, f"argument {name!r}")

    def __call__(self, *args: Any) -> Any:
        # acquire/try/finally measured ~60 ns cheaper than ``with lock`` on the seed step
        lock = self._lock
        lock.acquire()
        try:
            fast = self._fast
            if fast is not None and self._last_epoch == _MODE_EPOCH[0]:
                try:
                    return fast(args)
                except Mismatch:
                    pass
            return self._call_slow(args)
        finally:
            lock.release()

    def _call_slow(self, args: tuple) -> Any:
        """Re-check the training flags, pick (or compile) the variant, remember it."""
        v = self._last
        if v is not None and v.mode_ok():
            self._last_epoch = nn_module.mode_epoch[0]
            self._fast = v.exe.call
            try:
                return v.exe.call(args)
            except Mismatch:
                pass
        arrays = [_as_array(a, i, f"arg{i}") for i, a in enumerate(args)]
        v = self._select(arrays)
        self._last, self._last_epoch = v, nn_module.mode_epoch[0]
        self._fast = v.exe.call
        return v.exe.call(tuple(arrays))

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
        text = s if isinstance(s, str) else str(s)
        if stage == "optimized" and hasattr(v.exe, "memory_report"):
            text += v.exe.memory_report() + "\n"
        return text

    def profile(self) -> str:
        """Where the most recent variant's native time goes, kernel by kernel.

        Needs a profiling build (``GRAPHC_PROFILE=1`` in the environment when the step is
        compiled: each kernel call is bracketed by time-stamp-counter reads, which costs a
        few nanoseconds a kernel). Ticks are the CPU's constant-rate time-stamp counter;
        kernels are named by the node they compute (``%N op``) or, for a loop group, by its
        first and last member, as in ``ir("fused")``."""
        if not self.variants:
            raise RuntimeError(f"{self.name} has not been compiled yet")
        v = self._last or self.variants[-1]
        if not hasattr(v.exe, "profile"):
            raise RuntimeError(f"profile: the {self.backend_name!r} backend has no profiler")
        rows = v.exe.profile()
        total = sum(t for _, t, _ in rows) or 1
        calls = max((c for _, _, c in rows), default=0)
        lines = [f"{'kernel':<28} {'ticks/call':>12} {'share':>7}"]
        for name, t, c in sorted(rows, key=lambda r: -r[1]):
            lines.append(f"{name:<28} {t / max(c, 1):>12.0f} {100 * t / total:>6.1f}%")
        lines.append(f"{'total':<28} {total / max(calls, 1):>12.0f}  ({calls} calls)")
        return "\n".join(lines) + "\n"

    @property
    def stages(self) -> list[str]:
        v = self._last or (self.variants[-1] if self.variants else None)
        return list(v.stages) if v else []

    def explain(self, path: str | None = None, stages: Any = None) -> str:
        """A self-contained HTML page picturing the most recent variant (``graphc.explain``):
        the IR stages beside the source lines, the kernel plan, the scratch arena over time
        and, for a ``GRAPHC_PROFILE=1`` build, each kernel's share of the time. With ``path``
        the page is written there and the path returned; without, the HTML is returned.
        ``stages``: None (the IR graph stages), ``"all"`` or a list of stage names."""
        from . import explain

        if path is None:
            return explain.build_page(self, stages)
        return explain.write_page(self, path, stages)


def compile(fn: Callable[..., Any] | None = None, *, device: str = "cpu",  # noqa: A001
            example_args: tuple | None = None, dynamic: Any = True,
            backend: str | None = None, check_finite: bool = False,
            debug: bool | None = None) -> Any:
    """Compile a training (or inference) step; usable as ``@gc.compile`` or with arguments.

    ``dynamic``: True (default) makes the first dimension of every argument symbolic;
    False specialises on every shape; a dict ``{arg index or name: (axes...)}`` picks axes.
    ``check_finite``: raise ``gc.NonFiniteError`` (a ``FloatingPointError`` and a
    ``ValueError``) when the loss or a gradient holds NaN/Inf, without applying the update.
    ``debug``: bounds-check every native load and store (default: ``GRAPHC_DEBUG`` is set).
    See ``graphc/checks.py``.
    """
    if fn is None:
        return lambda f: CompiledFunction(f, device, example_args, dynamic, backend,
                                          check_finite, debug)
    return CompiledFunction(fn, device, example_args, dynamic, backend, check_finite, debug)


__all__ = ["compile", "CompiledFunction", "dt", "sh"]
