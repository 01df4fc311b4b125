"""``step.run(xs, ys)``: K whole training steps in one native call.

Why: a compiled step costs a Python call per step (argument checks, the pointer table, the
publication of new state: about a microsecond and a half for the seed step, more than the
step's own arithmetic), and a training loop pays it K times. ``run`` takes the K batches
stacked along a new leading axis and runs the step K times inside one native function: the
step's graph becomes the body of a ``scan`` (``graphc.passes.steps``), carrying parameters,
buffers, ``.grad`` and optimizer state from one step to the next, and the trip count is a
symbol, so one compile serves every K.

What stays exactly as K separate calls would leave it:

- the batches: step ``t`` sees ``xs[t]``, ``ys[t]``;
- hyperparameters are read per step: with ``scheduler=`` (one scheduler or a list), the
  scheduler's own ``step()`` runs between the steps, as in ``for ...: loss = step(x, y);
  sched.step()``. Its K values are computed before the native call by the scheduler's own
  code (scalar work, microseconds), so every scheduler behaves as it does eagerly;
  ``ReduceLROnPlateau``, which needs each step's loss first, is refused. A schedule that
  would flip a structural decision of the step (``momentum`` becoming 0) raises before
  anything runs;
- dropout draws one seed per step from the global stream, in order;
- the returned value has the step's structure with every tensor stacked (``losses[t]``).

A call that raises changes nothing: the state is committed only after the K-th step, and the
schedulers, the parameter groups and the random stream are put back.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np

from .ir import dtypes as dt
from .runtime import compile_log, gcpause
from .runtime.executable import Mismatch, argument_array
from .tensor import Tensor
from .trace import Signature, Source, trace


def _hyper_value(ref: Any, name: str) -> float:
    group, key = ref
    v = dict.__getitem__(group, key) if isinstance(group, dict) else group[key]
    if isinstance(v, Tensor):
        if v.numel() != 1:
            raise TypeError(f"hyperparameter {name!r}: expected a number, got a tensor of "
                            f"shape {tuple(v.shape)}")
        return float(v.numpy().reshape(()))
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError(f"hyperparameter {name!r}: expected a number (or a one-element "
                        f"tensor), got {type(v).__name__}") from None


class StepsVariant:
    """The K-steps graph of one specialisation of the step, and its executable."""

    def __init__(self, fn: Any, slices: list[np.ndarray]) -> None:
        from graphc.passes.pipeline import run_pipeline
        from graphc.passes.steps import STEPS, steps_scan

        self._check_function(fn)
        with compile_log.recording(f"{fn.name}.run", fn.verbose) as log, gcpause.paused():
            with log.phase("trace"):
                traced, sig = trace(fn.fn, slices, fn.name, fn.dynamic)
            with log.phase("passes"):
                stages: dict[str, Any] = dict(run_pipeline(traced))
                self._check_signature(fn, sig)
                per_step, self.hypers, self.seed = self._per_step(stages["optimized"], sig)
                present = {n.attrs["name"] for n in stages["optimized"].inputs}
                flags = [f for f in self._flags(sig) if f in present]
                graph = steps_scan(stages["optimized"], per_step, flags)
                from graphc.passes.pipeline import verify_default

                if verify_default():
                    from graphc.ir.verify import verify

                    verify(graph)
            self.sig = self._signature(sig, stages["optimized"], STEPS)
            log.count("graph", f"{sum(1 for _ in graph.nodes())} nodes")
            self.exe = fn._backend(graph, self.sig)
        self.single = sig
        self.graph = graph
        self.stages = {"step": stages["optimized"], "steps": graph}
        self.stages.update(self.exe.stages())
        self.compile_log = log

    # -- what a many-steps call cannot do ---------------------------------------------------
    @staticmethod
    def _check_function(fn: Any) -> None:
        if fn.check_finite:
            raise NotImplementedError(
                f"{fn.name}.run: check_finite=True is not supported for many steps in one call "
                "(call the step once per batch to stop at the first non-finite step)")

    @staticmethod
    def _check_signature(fn: Any, sig: Signature) -> None:
        if sig.collectives:
            raise NotImplementedError(
                f"{fn.name}.run: a data-parallel step (gradients reduced between processes) "
                "runs one step per call")
        if any(s.kind == "random" for s in sig.sources.values()):
            raise NotImplementedError(
                f"{fn.name}.run: the step draws random values (gc.rand/gc.randn/gc.randint/"
                "gc.randperm, a Tensor fill such as bernoulli_), which are drawn per call from "
                "the generator's stream; many steps in one "
                "call would need them drawn per step (call the step once per batch, or pass "
                "the random values in as an argument)")
        cleared = {id(p) for p in sig.grads_to_clear}
        written = {id(s.ref) for s in sig.sinks.values() if s.kind == "grad"}
        for p, present in sig.grad_reads:
            after = False if id(p) in cleared else (id(p) in written or present)
            if after != present:
                name = next((n for n, s in sig.sources.items()
                             if s.kind == "tensor" and s.ref is p), "a parameter")
                raise ValueError(
                    f"{fn.name}.run: the step reads {name}.grad, which is "
                    f"{'present' if present else 'absent'} now and "
                    f"{'present' if after else 'absent'} after one step, so the second step "
                    "would not be the first one again; call the step once first, or clear "
                    "the gradients at the start of the step (optimizer.zero_grad())")

    @staticmethod
    def _per_step(g: Any, sig: Signature) -> tuple[list[str], list[tuple[str, Any]], str | None]:
        per_step, hypers, seed = [], [], None
        for n in g.inputs:
            name = n.attrs["name"]
            src = sig.sources[name]
            if src.kind == "arg":
                per_step.append(name)
            elif src.kind == "hyper":
                per_step.append(name)
                hypers.append((name, src.ref))
            elif src.kind == "seed":
                per_step.append(name)
                seed = name
        return per_step, hypers, seed

    @staticmethod
    def _flags(sig: Signature) -> list[str]:
        """Presence flags of optimizer state the step writes: true after the first step.

        ``oflag``: one state entry's presence. ``cell``: whether an optimizer's state holds
        the entries its first step creates (``optim/traced.py``), which that first step
        publishes, so it too holds from the second step on (when the step creates any)."""
        written = {(id(s.ref[0]), id(s.ref[1]), s.ref[2]) for s in sig.sinks.values()
                   if s.kind == "ostate"}
        out = []
        for name, src in sig.sources.items():
            if src.kind == "oflag":
                if (id(src.ref[0]), id(src.ref[1]), src.ref[2]) in written:
                    out.append(name)
            elif src.kind == "cell":
                if any(v.created for v in getattr(src.ref, "views", ())):
                    out.append(name)
        return out

    def _signature(self, sig: Signature, g: Any, steps: Any) -> Signature:
        arg_types = [(d, (steps,) + tuple(s)) for d, s in sig.arg_types]
        arg_names = list(sig.arg_names)
        sources = dict(sig.sources)
        for name, _ in self.hypers:
            sources[name] = Source("arg", len(arg_names))
            arg_names.append(name)
            arg_types.append((dt.float64, (steps,)))
        if self.seed is not None:
            sources[self.seed] = Source("arg", len(arg_names))
            arg_names.append(self.seed)
            arg_types.append((dt.int64, (steps,)))
        env = dict(sig.example_env)
        env[steps] = 1
        return dataclasses.replace(
            sig, arg_names=arg_names, arg_types=arg_types, sources=sources,
            symbols=sorted(list(sig.symbols) + [steps], key=lambda s: s.name),
            example_env=env)

    # -- calling ------------------------------------------------------------------------------
    def arguments(self, arrays: list[np.ndarray], k: int, hyper: np.ndarray | None = None,
                  seeds: np.ndarray | None = None) -> list[np.ndarray]:
        """The executable's arguments: the stacked batches, then one row of values per
        hyperparameter and the seeds (zeros when only matching)."""
        out = list(arrays)
        for j in range(len(self.hypers)):
            out.append(np.zeros(k, np.float64) if hyper is None else hyper[j])
        if self.seed is not None:
            out.append(np.zeros(k, np.int64) if seeds is None else seeds)
        return out

    def matches(self, arrays: list[np.ndarray]) -> bool:
        """The arguments, the structural guards and the modules' training flags fit."""
        if not all(m.training == t for m, t in self.sig.mode_reads):
            return False
        return bool(self.exe.matches(self.arguments(arrays, arrays[0].shape[0])))

    def hyper_rows(self, k: int, schedulers: list[Any], name: str) -> np.ndarray:
        """Every hyperparameter's value at each of the K steps, stepping the schedulers
        between steps (the caller restores them if anything fails)."""
        rows = np.empty((len(self.hypers), k), np.float64)
        if not schedulers:  # nothing moves them between the steps
            for j, (hname, ref) in enumerate(self.hypers):
                rows[j, :] = _hyper_value(ref, hname)
            return rows
        for t in range(k):
            if t:
                for s in schedulers:
                    s.step()
                for read, expected, what in self.single.struct_guards:
                    if read() != expected:
                        raise ValueError(
                            f"{name}.run: after {t} scheduler step{'s' if t > 1 else ''} the "
                            f"step's {what} is no longer what it was compiled for; run at most "
                            f"{t} steps per call across this change")
            for j, (hname, ref) in enumerate(self.hypers):
                rows[j, t] = _hyper_value(ref, hname)
        return rows


def _schedulers(scheduler: Any, name: str) -> list[Any]:
    from .optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    if scheduler is None:
        return []
    scheds = list(scheduler) if isinstance(scheduler, (list, tuple)) else [scheduler]
    for s in scheds:
        if isinstance(s, ReduceLROnPlateau):
            raise NotImplementedError(
                f"{name}.run: ReduceLROnPlateau steps on each step's loss, which exists only "
                "after that step; call the step once per batch and step it in between")
        if not isinstance(s, LRScheduler) and not callable(getattr(s, "step", None)):
            raise TypeError(f"scheduler: expected an lr scheduler (or a list of them), got "
                            f"{type(s).__name__}")
    return scheds


class _Snapshot:
    """What a many-steps call may change before its native call succeeds: the schedulers,
    the parameter groups they write, the global random stream. ``restore`` puts it back."""

    def __init__(self, schedulers: list[Any]) -> None:
        from . import random as grandom

        self.scheds = [(s, copy.deepcopy(s.state_dict())) for s in schedulers]
        self.groups = []
        seen: set[int] = set()
        for s in schedulers:
            opt = getattr(s, "optimizer", None)
            for g in getattr(opt, "param_groups", ()):
                if id(g) in seen:
                    continue
                seen.add(id(g))
                vals = {k: (v.numpy().copy() if isinstance(v, Tensor) else copy.copy(v))
                        for k, v in dict.items(g) if k != "params"}
                self.groups.append((g, vals))
        self.rng = grandom._state["rs"].get_state()

    def restore(self) -> None:
        from . import random as grandom

        for s, st in self.scheds:
            s.load_state_dict(st)
        for g, vals in self.groups:
            for k in [k for k in dict.keys(g) if k != "params" and k not in vals]:
                del g[k]
            for k, v in vals.items():
                cur = dict.get(g, k)
                if isinstance(cur, Tensor):
                    cur._node._value[...] = v
                elif cur is not v:
                    g[k] = v
        grandom._state["rs"].set_state(self.rng)


def run_steps(fn: Any, args: tuple, scheduler: Any = None) -> Any:
    """``fn.run(*stacked_args, scheduler=...)`` (see the module docstring)."""
    from . import random as grandom

    name = fn.name
    if not args:
        raise TypeError(f"{name}.run() needs the stacked batches of at least one argument")
    arrays = []
    k = None
    for i, a in enumerate(args):
        arr = a if isinstance(a, np.ndarray) else argument_array(a, i, fn_arg_name(fn, i))
        label = None if arr.ndim >= 1 and (k is None or arr.shape[0] == k) else \
            fn_arg_name(fn, i)
        if arr.ndim < 1:
            raise ValueError(f"argument {label!r}: run() takes batches stacked along a new "
                             f"leading axis (K, ...), got a 0-d array")
        if k is None:
            k = arr.shape[0]
        elif arr.shape[0] != k:
            raise ValueError(f"argument {label!r}: expected {k} stacked batches (the leading "
                             f"dim of the first argument), got {arr.shape[0]}")
        arrays.append(arr)
    assert k is not None
    if k < 1:
        raise ValueError(f"{name}.run: needs at least one step, got {k} stacked batches")
    scheds = _schedulers(scheduler, name)
    slices = [a[0] for a in arrays]
    v = _select(fn, arrays, slices)
    snap = _Snapshot(scheds)
    try:
        rows = v.hyper_rows(k, scheds, name)
        seeds = grandom.next_seeds(k) if v.seed is not None else None
        full = v.arguments(arrays, k, rows, seeds)
        try:
            out = v.exe.call(tuple(full))
        except Mismatch:
            raise RuntimeError(f"{name}.run: the step's guards changed between selecting "
                               "and running its many-steps variant") from None
    except BaseException:
        snap.restore()
        raise
    # the scheduler step after the last step, outside the undo: the K steps are committed,
    # so a scheduler that raises here leaves what the same loop run eagerly would leave
    for s in scheds:
        s.step()
    return out


def fn_arg_name(fn: Any, i: int) -> str:
    """The name of the step's ``i``-th parameter (``arg<i>`` when it has none)."""
    import inspect

    from .nn import module as nn_module

    target = fn.fn.forward if isinstance(fn.fn, nn_module.Module) else fn.fn
    try:
        params = [p.name for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return params[i] if i < len(params) else f"arg{i}"


def _select(fn: Any, arrays: list[np.ndarray], slices: list[np.ndarray]) -> StepsVariant:
    key = fn._key(slices)
    for v in reversed(fn._steps.get(key, ())):
        if v.matches(arrays):
            fn._last_steps = v
            return v
    v = StepsVariant(fn, slices)
    fn._steps.setdefault(key, []).append(v)
    fn.compile_count += 1
    fn.compile_log = v.compile_log
    fn._last_steps = v
    return v


__all__ = ["StepsVariant", "run_steps"]
