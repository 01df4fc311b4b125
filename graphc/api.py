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

import builtins
import functools
import inspect
import keyword
import threading
import types
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _context
from .ir import dtypes as dt
from .ir import shapes as sh
from .ir.ops import OpError
from .nn import module as nn_module
from .runtime import compile_log, gcpause
from .runtime.executable import Mismatch, argument_array, argument_grads
from .trace import Signature, axis_symbols, symbolic_axes, trace

compile_source = builtins.compile  # ``compile`` below is graphc's
# the thread's trace-context holder: a compiled function called while another one is being
# traced runs as plain Python inside that trace (torch.compile inlines nested compiled
# code too), instead of running natively once at trace time with its result baked in
_TRACING, _ANY_TRACING = _context._local, _context.TRACING
_MODE_EPOCH = nn_module.mode_epoch  # bumped by train()/eval(): the fast path re-checks modes


def _trace(fn: CompiledFunction, args: list[np.ndarray], arg_grad: tuple[bool, ...]) -> Any:
    """``trace`` with ``fn``'s symbolic axes; where that fails on a shape rule and some of
    those axes have size 0 or 1 in this call, again with those sizes fixed; where Python
    code needs a symbolic size as a number, again with every size fixed.

    Why: a size-1 dimension broadcasts, a symbolic one cannot (a ``[1, C, 1, 1]`` scale
    argument beside ``[N, C, H, W]`` data: ``B1`` against ``B``), so PyTorch never makes
    sizes 0 and 1 dynamic. graphc keeps them symbolic where the trace allows it (a step
    first called with one sample serves every batch size), and specialises them only
    where broadcasting needs the 1 (that variant then takes that size only). Past that, with
    the default ``dynamic``, the first dims of arguments whose first size is not the most
    common one (an attention mask ``[L, S]`` beside batched data) are fixed, and last every
    size: a step whose arguments do not all lead with the batch compiles (one variant per
    shape of those) instead of failing on ``B1`` against ``L``."""
    # a malformed ``dynamic`` raises here, not inside the trace (whose TypeError is taken
    # for Python needing a size as a number)
    axes = symbolic_axes(fn.dynamic, args, fn._arg_names(len(args)))
    try:
        return trace(fn.fn, args, fn.name, fn.dynamic, arg_grad=arg_grad)
    except TypeError:
        # Python needed a symbolic size as a number (``int(x.shape[0])``, ``len(x)``,
        # ``range(n)``, ``max(n, 2)``, ``n ** 0.5``): specialise this variant on the sizes,
        # as torch.compile does for a SymInt turned into a Python int (a new size compiles
        # a new variant). A TypeError of the code itself is raised again by that trace.
        if fn.dynamic is False or not any(a.ndim for a in args):
            raise
        return trace(fn.fn, args, fn.name, False, arg_grad=arg_grad)
    except RETRIED as err:
        # a shape rule that met a symbolic size where it needed a number: ``a @ b`` with
        # b's first, inner, size symbolic
        first = err
    tries = [{i: tuple(ax for ax in ax_i if args[i].shape[ax] > 1)
              for i, ax_i in axes.items()}]
    if getattr(first, "symbols", None) and not isinstance(fn.dynamic, dict):
        # the rule named the symbols it needs fixed (a convolution weight passed as an
        # argument: its out-channels took a symbol): fix the axes that have them, first
        syms = axis_symbols(args, axes)
        tries.insert(0, {i: tuple(ax for ax in ax_i if syms[(i, ax)] not in first.symbols)
                         for i, ax_i in axes.items()})
    if not isinstance(fn.dynamic, dict):
        # the default's symbolic first dims, where an argument's first dim is not a batch
        # (an attention mask [L, S], a recurrent state): only the arguments whose first
        # size is the most common one (the batch) stay symbolic; then every size fixed, as
        # torch.compile's default starts (a new size compiles a new variant)
        lead = Counter(int(args[i].shape[0]) for i, ax_i in axes.items() if ax_i)
        if lead:
            batch = lead.most_common(1)[0][0]
            tries.append({i: ax_i if ax_i and args[i].shape[0] == batch else ()
                          for i, ax_i in tries[0].items()})
        tries.append({i: () for i in axes})
    seen = [axes]
    for kept in tries:
        if kept in seen:
            continue
        seen.append(kept)
        try:
            return trace(fn.fn, args, fn.name, kept, arg_grad=arg_grad)
        except RETRIED:
            if kept is tries[-1]:
                raise  # every size fixed: the error is the program's, with plain numbers
    raise first


# the errors a trace with symbolic sizes retries with fewer of them (``_trace``): shape
# rules' (ShapeError, and the OpError of an op whose operands' sizes disagree). A genuine
# error repeats on the last try, every size fixed, and is raised from there. Not
# RuntimeError: what cannot take a symbolic size at all says so and what to do
# (NotImplementedError: ``pdist`` over symbolic rows, ``unfold`` of the batch)
RETRIED = (sh.ShapeError, OpError)


class Variant:
    """One compiled specialisation: the graphs at each stage, the executable, the runtime."""

    def __init__(self, fn: CompiledFunction, args: list[np.ndarray],
                 arg_grad: tuple[bool, ...] = ()) -> None:
        from graphc.passes.pipeline import run_pipeline

        # the collector held off: a compile's objects all live until it ends (gcpause)
        with compile_log.recording(fn.name, fn.verbose) as log, gcpause.paused():
            with log.phase("trace"):
                self.graph_traced, self.sig = _trace(fn, args, arg_grad)
                self.sig.arg_grad_checked = not fn._forced_arg_grad
            with log.phase("passes"):
                self.stages: dict[str, Any] = dict(run_pipeline(self.graph_traced))
                self.graph = self.stages["optimized"]
                if fn.check_finite:
                    from .checks import add_finite_checks

                    self.graph = self.stages["optimized"] = add_finite_checks(self.graph,
                                                                              self.sig)
            log.count("graph", f"{sum(1 for _ in self.graph.nodes())} nodes")
            self.exe = fn._backend(self.graph, self.sig)
            self.stages.update(self.exe.stages())
        self.compile_log = log
        fn.compile_log = log


    def mode_ok(self) -> bool:
        """The ``training`` flags the trace read still have the values it saw."""
        return all(m.training == v for m, v in self.sig.mode_reads)


def _plain_parameters(fn: Any) -> tuple[str, ...] | None:
    """The parameter names of ``fn`` (``forward``'s for a module) when they are all plain
    (positional-or-keyword, no defaults): such a step gets a ``__call__`` with those very
    parameters (``_named_call_class``). None otherwise."""
    target = fn.forward if isinstance(fn, nn_module.Module) else fn
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    if not 1 <= len(params) <= 32 or any(
            p.kind is not p.POSITIONAL_OR_KEYWORD or p.default is not p.empty
            or not p.name.isidentifier() or keyword.iskeyword(p.name)
            or p.name.startswith("_graphc_") for p in params):
        return None
    return tuple(p.name for p in params)


_NAMED_CALL: dict[tuple[tuple[str, ...], str], type] = {}


def _named_call_class(names: tuple[str, ...], qualname: str) -> type:
    """A subclass of ``CompiledFunction`` whose ``__call__`` has the step's own parameters.

    Keyword calls (``step(x=X, y=Y)``) then bind in CPython itself, with Python's own errors
    naming the step (``train_step() missing 1 required positional argument: 'y'``), and a
    positional call costs what it did before keywords were accepted: ``**kwargs`` in the
    generic ``__call__`` allocates a dict on every call (~25-40 ns here), which this avoids.
    Steps with defaults, ``*args`` or keyword-only parameters use the generic one."""
    key = (names, qualname)
    cls = _NAMED_CALL.get(key)
    if cls is None:
        params = ", ".join(names)
        # *_graphc_extra: too many arguments are reported with the step's own count
        # (CPython's message would count the hidden self)
        src = (f"def __call__(_graphc_self, {params}, *_graphc_extra):\n"
               "    if _graphc_extra:\n"
               f"        raise TypeError('{qualname}() takes {len(names)} positional argument"
               f"{'' if len(names) == 1 else 's'} but ' + str({len(names)} + "
               "len(_graphc_extra)) + ' were given')\n"
               "    if _ANY_TRACING[0] and _TRACING.ctx is not None:\n"
               f"        return _graphc_self.fn({params})\n"
               f"    args = ({params},)\n"
               "    lock = _graphc_self._lock\n"
               "    lock.acquire()\n"
               "    if _graphc_self._busy:\n"
               "        _graphc_self._reentered()\n"
               "    _graphc_self._busy = True\n"
               "    try:\n"
               "        fast = _graphc_self._fast\n"
               "        if fast is not None and _graphc_self._last_epoch == _MODE_EPOCH[0]:\n"
               "            try:\n"
               "                return fast(args)\n"
               "            except Mismatch:\n"
               "                pass\n"
               "        return _graphc_self._call_slow(args)\n"
               "    finally:\n"
               "        _graphc_self._busy = False\n"
               "        lock.release()\n")
        scope: dict[str, Any] = {"_MODE_EPOCH": _MODE_EPOCH, "Mismatch": Mismatch,
                                 "_TRACING": _TRACING, "_ANY_TRACING": _ANY_TRACING}
        exec(compile_source(src, f"<graphc call wrapper of {qualname}>", "exec"), scope)
        call = scope["__call__"]
        call.__qualname__ = qualname  # what CPython's argument errors name
        cls = type("CompiledFunction", (CompiledFunction,), {"__call__": call,
                                                             "__module__": __name__})
        _NAMED_CALL[key] = cls
    return cls


class CompiledFunction:
    """The callable ``gc.compile`` returns (see the module docstring)."""

    _is_compiled_function = True  # what ``nn.Module`` tests to hold a compiled module

    def __init__(self, fn: Callable[..., Any], device: str = "cpu",
                 example_args: tuple | None = None, dynamic: Any = True,
                 backend: str | None = None, check_finite: bool = False,
                 debug: bool | None = None, max_variants: int | None = None,
                 verbose: bool | None = None) -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device: expected 'cpu' or 'cuda', got {device!r}")
        if check_finite and (backend or device) == "cuda":
            raise ValueError("check_finite: supported by the 'cpu' and 'interp' backends only")
        from .checks import debug_default

        # the options again, for the per-instance functions of a compiled method (__get__)
        self._options = {"device": device, "dynamic": dynamic, "backend": backend,
                         "check_finite": check_finite, "debug": debug,
                         "max_variants": max_variants, "verbose": verbose}
        self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.check_finite = bool(check_finite)
        # which arguments the trace treats as requiring grad whatever is passed (the
        # backward ``graphc.compiled_grad`` compiles is called with saved arrays)
        self._forced_arg_grad: tuple[bool, ...] = ()
        self.debug = debug_default() if debug is None else bool(debug)
        # print each compile's time per phase (GRAPHC_COMPILE_LOG=1 by default)
        self.verbose = compile_log.enabled_by_env() if verbose is None else bool(verbose)
        self.compile_log: compile_log.CompileLog | None = None  # the last compile's
        self.fn = fn
        self.name = getattr(fn, "__name__", None) or type(fn).__name__
        self.device = device
        self.dynamic = dynamic
        self.backend_name = backend or device
        self.example_args = example_args
        self.variants: list[Variant] = []
        self.compile_count = 0
        # re-entrant, so that the thread already inside a call gets an error, not a deadlock
        self._lock = threading.RLock()
        self._busy = False  # a call is running (re-entry detection)
        self._by_key: OrderedDict[tuple, list[Variant]] = OrderedDict()  # LRU by arg key
        self.max_variants = _max_variants(max_variants)
        self._evict_warned = False
        self._values_warned = False  # ``_note_value_variants``
        self._last: Variant | None = None
        self._last_epoch = -1
        self._fast: Callable[[tuple], Any] | None = None  # the last variant's call wrapper
        self._params: list[inspect.Parameter] | None = None  # for keyword calls, on first use
        self._steps: dict[tuple, list[Any]] = {}  # many-steps variants (``run``), by arg key
        self._last_steps: Any = None  # the many-steps variant ``run`` used last
        if isinstance(fn, nn_module.Module):
            # not update_wrapper: it would copy the module's __dict__ (parameters, training
            # flag) into this object as stale snapshots; attributes are forwarded instead
            self.__doc__ = type(fn).__doc__
        else:
            functools.update_wrapper(self, fn)
        names = _plain_parameters(fn)
        if names is not None:
            self.__class__ = _named_call_class(names, self.name)
        if example_args is not None:
            self._compile([argument_array(a, i, f"arg{i}") for i, a in enumerate(example_args)])

    def _backend(self, graph: Any, sig: Signature) -> Any:
        if sig.collectives:  # gradients reduced between processes: two native functions
            from .distributed.executable import DistributedExecutable

            return DistributedExecutable(graph, sig, self._backend)
        from .runtime import backends

        return backends.create(self.backend_name, graph, sig, debug=self.debug)

    def _compile(self, args: list[np.ndarray], arg_grad: tuple[bool, ...] = ()) -> Variant:
        arg_grad = self._forced_arg_grad or arg_grad
        v = Variant(self, args, arg_grad)
        self.variants.append(v)
        key = self._key(args, arg_grad)
        self._by_key.setdefault(key, []).append(v)
        self._by_key.move_to_end(key)
        self.compile_count += 1
        self._last, self._last_epoch = v, nn_module.mode_epoch[0]
        if v.sig.arg_values:
            self._note_value_variants(v, self._by_key[key])
        if len(self.variants) > self.max_variants:
            self._evict()
        return v

    VALUE_VARIANTS_WARN = 8  # torch.compile's recompile limit

    def _note_value_variants(self, v: Variant, group: list[Variant]) -> None:
        """Say once when arguments used as Python values have taken many values: each one
        compiled a variant of its own (a step counter passed that way recompiles every
        call)."""
        if self._values_warned:
            return
        seen = {tuple(sorted(u.sig.arg_values.items())) for u in group if u.sig.arg_values}
        if len(seen) < self.VALUE_VARIANTS_WARN:
            return
        self._values_warned = True
        names = ", ".join(repr(v.sig.arg_names[i]) for i in v.sig.arg_values)
        import warnings

        warnings.warn(
            f"{self.name}: {len(seen)} variants compiled for values of {names}, which the "
            "step uses as Python values (a loop count, a flag), so each new value compiles "
            "again: pass a value that changes often as a tensor and keep it in tensor ops, "
            "or bind it outside (functools.partial)", RuntimeWarning, stacklevel=4)

    def _key(self, args: list[np.ndarray], arg_grad: tuple[bool, ...] = ()) -> tuple:
        """What decides which variants can take ``args``: dtypes, ranks and the sizes that
        are not symbolic (dispatch is a dict lookup, not a scan over every variant), and
        which arguments require grad (``arg_grad``, all False: empty)."""
        dyn = self.dynamic
        key: list[Any] = [self._forced_arg_grad or (arg_grad if any(arg_grad) else ())]
        for a in args:
            if dyn is True or dyn is None:
                fixed = a.shape[1:]
            elif dyn is False:
                fixed = a.shape
            else:  # per-argument axes: ranks and dtypes only (matches() checks the rest)
                fixed = ()
            key.append((a.dtype.str, a.ndim, fixed))
        return tuple(key)

    def _select(self, args: list[np.ndarray], arg_grad: tuple[bool, ...] = ()) -> Variant:
        key = self._key(args, arg_grad)
        for v in reversed(self._by_key.get(key, ())):
            if v.mode_ok() and v.exe.matches(args):
                self._by_key.move_to_end(key)
                return v
        self._explain_mismatch(args)
        return self._compile(args, arg_grad)

    def _evict(self) -> None:
        """Drop the least recently used variant (its native code and buffers go with it) and
        say once which argument's sizes keep changing."""
        key, group = next(iter(self._by_key.items()))
        old = group.pop(0)
        if not group:
            del self._by_key[key]
        self.variants.remove(old)
        if self._last is old:
            self._last, self._fast = None, None
        if not self._evict_warned:
            self._evict_warned = True
            keys = list(self._by_key) + [key]
            names = old.sig.arg_names
            varying = [names[i] for i in range(len(names))
                       if len({k[i + 1] for k in keys if i + 1 < len(k)}) > 1]
            import warnings

            if varying or len(set(keys)) > 1:
                why = (f"The sizes or dtypes of {', '.join(map(repr, varying)) or 'its arguments'}"
                       " keep changing: make those dimensions dynamic (gc.compile(fn, "
                       "dynamic={arg: (axes,)})) or pad them to a few sizes")
            else:  # same arguments: a guarded Python value changes from call to call
                stale = [what for read, expected, what in old.sig.struct_guards
                         if read() != expected]
                stale += [f"argument {names[i]!r}, used as a Python value"
                          for i in old.sig.arg_values]
                which = stale[0] if stale else "a module attribute the step reads"
                why = (f"A Python value it reads keeps changing ({which}), and each new value "
                       "is traced anew: pass a value that changes every call as a tensor "
                       "argument, or keep it in a buffer or an optimizer param group")
            warnings.warn(
                f"{self.name}: more than {self.max_variants} compiled variants; the least "
                f"recently used are dropped. {why} (max_variants= or GRAPHC_MAX_VARIANTS "
                "raises the cap)", RuntimeWarning, stacklevel=4)

    def _explain_mismatch(self, args: list[np.ndarray]) -> None:
        """Raise for calls that no recompilation can make right.

        A different rank, dtype or non-batch size recompiles (and tracing raises a clear
        error if the model cannot take it); but arguments that disagree on a shared batch
        symbol (x with 8 rows, y with 9) are a user error: raise naming both.
        """
        for v in self.variants:
            sig = v.sig
            if len(args) != len(sig.arg_types):
                if self._takes(len(args)):
                    continue  # another arity the function allows (defaults): a new variant
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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _ANY_TRACING[0] and _TRACING.ctx is not None:  # called while tracing: inlined
            return self.fn(*args, **kwargs)
        if kwargs:
            args = self._bind(args, kwargs)
        # acquire/try/finally measured ~60 ns cheaper than ``with lock`` on the seed step
        lock = self._lock
        lock.acquire()
        if self._busy:
            self._reentered()
        self._busy = True
        try:
            fast = self._fast
            if fast is not None and self._last_epoch == _MODE_EPOCH[0]:
                try:
                    return fast(args)
                except Mismatch:
                    pass
            return self._call_slow(args)
        finally:
            self._busy = False
            lock.release()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """``@gc.compile`` on a method (``def forward(self, x)`` in a class body, which
        ``@torch.compile`` allows): read through an instance, it is that instance's own
        compiled function of the bound method (made on first use, kept while the instance
        lives), so ``self`` is the object the trace reads, not an argument."""
        if obj is None:
            return self
        try:
            bound = self._bound.get(obj)
        except TypeError:  # not weakly referenceable or not hashable
            raise TypeError(f"gc.compile on method {self.name!r}: instances of "
                            f"{type(obj).__name__} cannot be weakly referenced; compile the "
                            "bound method instead (gc.compile(obj.method))") from None
        if bound is None:
            bound = CompiledFunction(types.MethodType(self.fn, obj), **self._options)
            self._bound[obj] = bound
        return bound

    def _reentered(self) -> None:
        """The (re-entrant) lock was acquired by the thread already inside this very step: a
        signal handler, or an argument's ``__array__``, called it again. A plain lock would
        deadlock here; undo this acquisition and raise, and the running call goes on
        unaffected (another thread simply waits in ``acquire``)."""
        self._lock.release()
        raise RuntimeError(
                f"{self.name}() was called again while it is running on this thread (from a "
                "signal handler, or from an argument's __array__ or __len__); a compiled step "
                "is not re-entrant: call it again after the running call returns")

    def _bind(self, args: tuple, kwargs: dict[str, Any]) -> tuple:
        """Positional arguments for a call that names some by keyword, bound as Python binds
        them to the original function's parameters (``forward``'s, for a module).

        A compiled step takes its arguments by position (each is an array, matched against the
        variant's signature), so keywords become positions. Parameters left out at the end keep
        the function's own defaults (applied while tracing, as in a positional call that stops
        early); one left out before a parameter given by keyword gets its default value passed
        in its place."""
        params = self._params
        if params is None:
            target = self.fn.forward if isinstance(self.fn, nn_module.Module) else self.fn
            try:
                params = list(inspect.signature(target).parameters.values())
            except (TypeError, ValueError) as e:
                raise TypeError(f"{self.name}(): keyword arguments need the signature of the "
                                f"compiled function, which is unavailable ({e}); pass the "
                                "arguments by position") from None
            self._params = params
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                      p.POSITIONAL_OR_KEYWORD)]
        index = {p.name: i for i, p in enumerate(positional)}
        for key in kwargs:
            i = index.get(key)
            if i is None:
                if any(p.name == key for p in params):  # keyword-only
                    raise TypeError(f"{self.name}(): keyword-only parameter {key!r} is not "
                                    "supported by a compiled step (its arguments are "
                                    "positional arrays)")
                if any(p.kind is p.VAR_KEYWORD for p in params):
                    raise TypeError(f"{self.name}(): keyword {key!r} would go to its **kwargs, "
                                    "which a compiled step does not support (its arguments "
                                    "are positional arrays)")
                raise TypeError(f"{self.name}() got an unexpected keyword argument {key!r}")
            if positional[i].kind is inspect.Parameter.POSITIONAL_ONLY:
                raise TypeError(f"{self.name}() got some positional-only arguments passed as "
                                f"keyword arguments: {key!r}")
            if i < len(args):
                raise TypeError(f"{self.name}() got multiple values for argument {key!r}")
        missing = [p.name for p in positional[len(args):]
                   if p.name not in kwargs and p.default is p.empty]
        if missing:
            names = [repr(m) for m in missing]
            listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            raise TypeError(f"{self.name}() missing {len(missing)} required positional "
                            f"argument{'s' if len(missing) > 1 else ''}: {listed}")
        bound = list(args)
        for p in positional[len(args):max(index[k] for k in kwargs) + 1]:
            bound.append(kwargs[p.name] if p.name in kwargs else p.default)
        return tuple(bound)

    def _takes(self, n: int) -> bool:
        """Whether the original function accepts ``n`` positional arguments (parameters with
        defaults make several counts valid, each its own variant)."""
        target = self.fn.forward if isinstance(self.fn, nn_module.Module) else self.fn
        try:
            params = inspect.signature(target).parameters.values()
        except (TypeError, ValueError):
            return False
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            return True
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY,
                                                      p.POSITIONAL_OR_KEYWORD)]
        required = sum(1 for p in positional if p.default is p.empty)
        return required <= n <= len(positional)

    def __getattr__(self, name: str) -> Any:
        """For a compiled module, what the module has (``parameters()``, ``train()``,
        ``eval()``, ``state_dict()``, submodules ...), as torch.compile's ``OptimizedModule``
        forwards to ``_orig_mod``. Reached only for names this object lacks, so the call path
        never comes here."""
        fn = self.__dict__.get("fn")
        if isinstance(fn, nn_module.Module) and not name.startswith("__"):
            return getattr(fn, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        fn = self.__dict__.get("fn")
        extra = dir(fn) if isinstance(fn, nn_module.Module) else []
        return sorted(set(super().__dir__()) | set(extra))

    @property
    def _orig_mod(self) -> Any:
        """The compiled module or function (the name torch.compile's wrapper uses)."""
        return self.fn

    def _call_slow(self, args: tuple) -> Any:
        """Re-check the training flags, pick (or compile) the variant, remember it."""
        v = self._last
        if v is not None and v.mode_ok():
            self._last_epoch = nn_module.mode_epoch[0]
            self._fast = call = self._caller(v)
            try:
                return call(args)
            except Mismatch:
                pass
        names = self._arg_names(len(args))
        arg_grad = argument_grads(args)
        arrays = [argument_array(a, i, names[i], True) for i, a in enumerate(args)]
        v = self._select(arrays, arg_grad)
        self._last, self._last_epoch = v, nn_module.mode_epoch[0]
        self._fast = call = self._caller(v)
        try:
            # results with a graph to the arguments need the caller's tensors themselves
            return call(tuple(args) if any(v.sig.arg_grad) else tuple(arrays))
        except Mismatch:
            # the variant was selected (or just compiled) for these arguments, so only a
            # value no variant can take is left (a batch size of 0): say which
            check = getattr(v.exe, "check_args", None)
            if check is not None:
                check(arrays)
            shapes = ", ".join(f"{n}: {list(a.shape)}" for n, a in zip(v.sig.arg_names, arrays))
            raise ValueError(f"{self.name}(): the arguments fit no compiled variant "
                             f"({shapes})") from None

    def _arg_names(self, n: int) -> list[str]:
        """The names arguments have in errors: the function's parameters where known."""
        from .trace import argument_names

        return argument_names(self.fn, n)

    def derived(self, fn: Callable[..., Any], arg_grad: tuple[bool, ...] = (),
                **options: Any) -> CompiledFunction:
        """A compiled function for ``fn`` with this one's backend and checks (the backward
        ``graphc.compiled_grad`` builds for this function's results)."""
        out = compile(fn, device=self.device, check_finite=self.check_finite, **options)
        out._forced_arg_grad = tuple(arg_grad)
        return out

    def _caller(self, v: Variant) -> Callable[[tuple], Any]:
        """The variant's call, through ``compiled_grad.wrap_results`` when some of its results
        carry an autograd graph (``sig.live_outputs``)."""
        call = v.exe.call
        if not v.sig.live_outputs:
            return call
        from .compiled_grad import call_recorded, wrap_results

        sig = v.sig

        def call_live(args: tuple) -> Any:
            if sig.draws and not sig.impure:  # the recomputing backward replays the draws
                out, draws = call_recorded(call, args)
                return wrap_results(self, sig, args, out, draws)
            return wrap_results(self, sig, args, call(args), [])

        return call_live

    def run(self, *args: Any, scheduler: Any = None) -> Any:
        """Run the step once per batch of stacked arguments, all in one native call.

        ``step.run(xs, ys)`` with ``xs.shape == (K,) + x.shape`` does what ``for t in
        range(K): step(xs[t], ys[t])`` does (and, with ``scheduler=`` one lr scheduler or a
        list of them, ``scheduler.step()`` after each step), and returns the step's result
        with every tensor stacked over the K steps (the K losses). One compile serves every
        K; a call that raises changes nothing. See ``graphc/multistep.py``."""
        from .multistep import run_steps

        lock = self._lock
        lock.acquire()
        if self._busy:
            self._reentered()
        self._busy = True
        try:
            return run_steps(self, args, scheduler)
        finally:
            self._busy = False
            lock.release()

    def ir(self, stage: str = "optimized", steps: bool = False) -> str:
        """The IR (or LLVM IR, assembly, PTX) of the most recent variant at ``stage``;
        ``steps=True``: of the most recently used many-steps variant (``run``), whose
        ``optimized`` stage is the loop over the step (``steps``)."""
        if steps:
            v = self._last_steps
            if v is None:
                raise RuntimeError(f"{self.name}.run has not been called yet")
            if stage == "optimized":
                stage = "steps"
        else:
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


MODES = {
    None: "the default",
    "default": "the default: the whole step compiled once to native code",
    "reduce-overhead": "the default: every call already goes through a generated wrapper of "
                       "a few inlined checks (about 1.4 us for the seed step); no CUDA graphs",
    "max-autotune": "the default: the kernel plan is fixed (packed GEMM, fused loops); "
                    "there is nothing to autotune",
    "max-autotune-no-cudagraphs": "as max-autotune",
}
BACKENDS = {
    "inductor": "torch.compile's default: here the device's own backend",
    "cpu": "native code for the host CPU (llvmlite)",
    "cuda": "PTX for NVIDIA GPUs",
    "interp": "the numpy reference interpreter running the traced graph",
}
OPTIONS = ("check_finite", "debug", "verbose")


def _max_variants(value: int | None) -> int:
    """The cap on compiled variants per function: the argument, else ``GRAPHC_MAX_VARIANTS``,
    else 64."""
    import os

    if value is None:
        env = os.environ.get("GRAPHC_MAX_VARIANTS", "")
        try:
            value = int(env) if env else 64
        except ValueError:
            raise ValueError(f"GRAPHC_MAX_VARIANTS: expected a positive integer, got "
                             f"{env!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_variants: expected a positive integer, got {value!r}")
    return value


def _check_compile_options(mode: Any, fullgraph: Any, backend: Any, options: Any,
                           dynamic: Any) -> tuple[str | None, dict[str, Any]]:
    """Validate ``torch.compile``'s keywords; the backend name and the options to apply."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {[m for m in MODES]}, got {mode!r}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"fullgraph: expected True or False, got {fullgraph!r}")
    if dynamic is not None and not isinstance(dynamic, (bool, dict)):
        raise TypeError(f"dynamic: expected None, True, False or a dict {{argument: axes}}, "
                        f"got {type(dynamic).__name__}")
    if backend is not None:
        if not isinstance(backend, str):
            raise TypeError(f"backend: custom backends (callables) are not supported; expected "
                            f"one of {sorted(BACKENDS)}, got {type(backend).__name__}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {sorted(BACKENDS)}, got {backend!r}")
        if backend == "inductor":
            backend = None
    opts = dict(options or {})
    unknown = sorted(k for k in opts if k not in OPTIONS)
    if unknown:
        raise ValueError(f"options: graphc knows {list(OPTIONS)}, got {unknown} (torch "
                         "inductor's options have no meaning here)")
    return backend, opts


def compile(fn: Callable[..., Any] | None = None, *,  # noqa: A001
            mode: str | None = None, fullgraph: bool = False, dynamic: Any = None,
            backend: str | None = None, options: dict[str, Any] | None = None,
            disable: bool = False, device: str = "cpu", example_args: tuple | None = None,
            check_finite: bool = False, debug: bool | None = None,
            max_variants: int | None = None, verbose: bool | None = None) -> Any:
    """Compile a training (or inference) step; usable as ``@gc.compile`` or with arguments.

    ``dynamic``: None or True (default) makes the first dimension of every argument symbolic,
    so every batch size shares one variant; False specialises on every shape; a dict
    ``{arg index or name: (axes...)}`` picks the symbolic axes.
    ``check_finite``: raise ``gc.NonFiniteError`` (a ``FloatingPointError`` and a
    ``ValueError``) when the loss or a gradient holds NaN/Inf, without applying the update.
    ``debug``: bounds-check every native load and store (default: ``GRAPHC_DEBUG`` is set).
    See ``graphc/checks.py``.
    ``verbose``: print where each compile's time went (trace, passes, plan, LLVM IR
    emission, LLVM optimisation and code emission, link) to stderr; the default is
    ``GRAPHC_COMPILE_LOG`` being set. The last compile's figures are ``step.compile_log``
    either way.
    ``max_variants``: how many specialisations to keep (default ``GRAPHC_MAX_VARIANTS`` or
    64); past it the least recently used is dropped, with one warning naming the argument
    whose sizes keep changing.

    ``torch.compile``'s other keywords are accepted, so code written for it runs unchanged,
    with the meaning they can have here:

    - ``mode``: None, ``"default"``, ``"reduce-overhead"``, ``"max-autotune"`` or
      ``"max-autotune-no-cudagraphs"``. All compile the same way: the whole step becomes one
      native function called through a generated low-overhead wrapper (what reduce-overhead
      is after), with one fixed kernel plan (nothing to autotune, no CUDA graphs). Any other
      string raises ``ValueError`` listing these.
    - ``fullgraph``: True or False. graphc always captures the whole step as one graph: it
      never falls back to Python between pieces, and a function it cannot trace raises.
    - ``backend``: ``"inductor"`` (torch's default) means the device's own backend; graphc's
      ``"cpu"``, ``"cuda"`` and ``"interp"`` (the reference interpreter) choose one. Other
      names raise ``ValueError``; callables (custom torch backends) raise ``TypeError``.
    - ``options``: a dict of graphc's options (``check_finite``, ``debug``, ``verbose``);
      inductor's keys raise ``ValueError``.
    - ``disable``: True returns ``fn`` itself, uncompiled (eager), as torch does.

    A compiled ``nn.Module`` forwards attribute access to the module (``parameters()``,
    ``train()``, ``state_dict()`` ...), as torch.compile's ``OptimizedModule`` does. A compiled
    step also takes its arguments by keyword, bound to the original function's parameters.
    """
    backend, opts = _check_compile_options(mode, fullgraph, backend, options, dynamic)
    check_finite = bool(opts.get("check_finite", check_finite))
    debug = opts.get("debug", debug)
    dyn = True if dynamic is None else dynamic

    def build(f: Callable[..., Any]) -> Any:
        if disable:
            return f
        return CompiledFunction(f, device, example_args, dyn, backend, check_finite, debug,
                                max_variants, opts.get("verbose", verbose))

    return build if fn is None else build(fn)


__all__ = ["compile", "CompiledFunction", "MODES", "BACKENDS", "dt", "sh"]
