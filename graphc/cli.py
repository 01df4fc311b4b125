"""The ``graphc`` command line: inspect and build the compiled steps a training script defines.

A compiler is only as trustworthy as what its users can see of it, so ``graphc dump`` prints
every stage of a compiled step (traced, with gradients, optimized, and whatever the backend adds:
LLVM IR, assembly, PTX) without writing any code, and ``graphc aot`` builds the step into a C
library. Both work on a script as it is, without running its training loop.

How a script exposes a step
---------------------------
Best: define the step at the top level of the script and compile it with ``example_args``, so
that importing the script traces and compiles it without training; keep the training loop
under ``if __name__ == "__main__":`` (the CLI imports the script under its module name, not as
``__main__``, so that block does not run)::

    # train.py
    import numpy as np
    import graphc as gc
    from graphc import nn, optim

    model = nn.Linear(1, 1)
    opt = optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.L1Loss()
    X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
    Y = 0.7 * X + 0.3

    @gc.compile(example_args=(X, Y))      # traced at import, nothing is trained
    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if __name__ == "__main__":
        for epoch in range(100):
            train_step(X, Y)

Then ``graphc dump train.py:train_step --stage all`` prints every stage,
``graphc dump train.py:train_step --format dot -o step.svg`` draws the optimized graph,
``graphc dump train.py:train_step -o step.html`` writes a page to look at (``--format html``:
the IR beside the source, the kernel plan, the arena over time; see ``graphc/explain.py``), and
``graphc aot train.py:train_step -o build/`` builds ``train_step.h`` and ``libtrain_step.so``.
The script's directory is put first on ``sys.path`` while it is imported, so it can import its
neighbours as it would when run directly.

Steps defined anywhere else are found too, by running the script only as far as needed:

- a step at the top level without ``example_args``, called by a top-level training loop: the
  import stops at the step's first call, right after tracing it (the call itself does not run);
- a step defined inside ``main()`` (or any function), or a method compiled in ``__init__``
  (``self.step = gc.compile(self._step, ...)``): the script is run as ``__main__`` (with no
  command-line arguments) until a compiled function of that name is traced, and stopped there.
  ``FUNC`` may be the plain name (``train_step``) or a dotted qualified name without
  ``<locals>`` (``train_graphc.train_step``, ``Trainer._step``).

Whatever the script prints meanwhile goes to stderr, never into the dump on stdout. A step
traced at its first call uses that call's arguments as its example arguments; giving
``example_args`` avoids running any of the script's code beyond its definitions.

Errors a user can make (a missing file or function, a function that is not a compiled step or
was never traced, a script that raises, a stage the step does not have) print one line on
stderr and exit with status 1; usage errors exit with 2 (argparse); ``--debug`` adds the full
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# Only the standard library's lightest modules are imported here: ``graphc --help`` and usage
# errors must not pay for the compiler (sympy, llvmlite, numpy). Everything else is imported
# by the command that needs it.

PROG = "graphc"

# Stages the tool knows about, for the help text only: a step is dumped at whatever stages its
# variant actually has (a backend may add more), and asking for a missing one is a clear error.
# Keep in step with the backends' ``stages()`` (codegen/cpu.py, codegen/ptx.py): a test checks
# that every stage ``--stage all`` shows is listed here, and so in ``--help``.
KNOWN_STAGES = ("traced", "grad", "optimized", "fused", "llvm_unoptimized", "llvm", "asm",
                "ptx", "kernels")
DEFAULT_STAGE = "optimized"
RENDER_FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf"}
HTML_SUFFIXES = (".html", ".htm")  # -o step.html picks --format html (graphc/explain.py)
# input kinds that live in persistent buffers between calls (what a deployment must allocate)
STATE_KINDS = ("param", "buffer", "grad", "state", "flag")

GRAPHVIZ_HINT = ("install Graphviz, which provides it (apt install graphviz, brew install "
                 "graphviz or conda install graphviz; pip install graphviz is not enough), "
                 "or write the dot source with -o FILE.dot")


class CLIError(Exception):
    """A user error: printed as one line (``graphc: error: ...``), exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# -- loading a script ------------------------------------------------------------------------

def parse_target(spec: str) -> tuple[str, str]:
    """``SCRIPT.py:FUNC`` -> (script path, function name); the last colon separates them, so
    a Windows drive letter in the path is fine."""
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise argparse.ArgumentTypeError(
            f"expected SCRIPT.py:FUNC (a script path, a colon, a function name), got {spec!r}")
    return path, func


@contextlib.contextmanager
def _script_module(path: Path) -> Iterator[str]:
    """Make a unique module name for ``path`` and put its directory first on ``sys.path`` for
    the duration (restored afterwards, so in-process callers such as tests stay clean)."""
    stem = path.stem
    name = stem if stem.isidentifier() and stem not in sys.modules else None
    if name is None:
        base = "_graphc_script_" + "".join(c if c.isalnum() else "_" for c in stem)
        name, k = base, 1
        while name in sys.modules:
            k += 1
            name = f"{base}_{k}"
    saved_path = list(sys.path)
    sys.path.insert(0, str(path.parent))
    try:
        yield name
    finally:
        sys.path[:] = saved_path
        sys.modules.pop(name, None)


def _where_in_script(exc: BaseException, path: Path) -> str:
    """`` (at SCRIPT:LINE)`` for the innermost frame of ``exc`` inside the script, if any."""
    import traceback

    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        try:
            if Path(frame.filename).resolve() == path:
                line = frame.lineno
        except OSError:
            continue
    return f" (at {path.name}:{line})" if line is not None else ""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def qualified_name(fn: Any) -> str:
    """``fn``'s qualified name without ``<locals>`` parts (``train_graphc.train_step``)."""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "name", "?")
    return str(qual).replace("<locals>.", "")


def names_step(fn: Any, func: str) -> bool:
    """Whether ``SCRIPT.py:func`` names the compiled function ``fn``: its plain name, its
    qualified name, or a dotted tail of the qualified name (``Trainer._step``)."""
    qual = qualified_name(fn)
    return func in (getattr(fn, "name", None), qual) or qual.endswith("." + func)


class _Traced(BaseException):
    """Stops the user's script right after the wanted step was traced.

    A ``BaseException`` (as ``KeyboardInterrupt``) so that the script's own ``except
    Exception`` handlers do not swallow it: what follows the trace is the training loop.
    """

    def __init__(self, fn: Any) -> None:
        super().__init__(fn.name)
        self.fn = fn


# Example arguments of steps the CLI saw traced at their first call (they have no
# ``example_args``), for ``graphc aot``; weak so that in-process callers leak nothing.
_CALL_ARGS: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()


def example_args_of(fn: Any) -> tuple | None:
    """The step's ``example_args``, else the arguments of the first call the CLI traced."""
    given = getattr(fn, "example_args", None)
    return tuple(given) if given is not None else _CALL_ARGS.get(fn)


class _Watch:
    """Watches every ``gc.compile`` while user code runs, to find the step named ``func``.

    ``stop_at_example_args``: whether a step traced from its ``example_args`` (at
    ``gc.compile`` time) stops the script too. While the script is imported it does not (the
    module's top level is what the CLI looks in, so the import runs to its end); when the
    script runs as ``__main__`` it does (what follows is training). A step traced by a call
    always stops the script: the call would run the step.
    """

    def __init__(self, func: str) -> None:
        self.func = func
        self.stop_at_example_args = False
        self.created: list[Any] = []  # compiled functions named func, in creation order
        self.seen: list[str] = []  # qualified names of every compiled function created
        self.from_example_args: Any = None  # a named step traced from its example_args
        self.by_call: Any = None  # the named step traced at its first call
        self._constructing: Any = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Wrap ``CompiledFunction.__init__`` and ``_compile`` for the duration."""
        from .api import CompiledFunction

        init, compile_ = CompiledFunction.__init__, CompiledFunction._compile
        watch = self

        def __init__(fn: Any, *args: Any, **kwargs: Any) -> None:
            saved, watch._constructing = watch._constructing, fn
            try:
                init(fn, *args, **kwargs)
            finally:
                watch._constructing = saved
                if hasattr(fn, "name"):
                    watch.note_created(fn)

        def _compile(fn: Any, args: list[Any], *rest: Any) -> Any:
            variant = compile_(fn, args, *rest)
            watch.note_created(fn)
            if not names_step(fn, watch.func):
                return variant
            if watch._constructing is fn:  # traced from example_args inside gc.compile
                watch.from_example_args = watch.from_example_args or fn
                if watch.stop_at_example_args:
                    raise _Traced(fn)
                return variant
            _CALL_ARGS.setdefault(fn, tuple(args))
            watch.by_call = fn
            raise _Traced(fn)

        CompiledFunction.__init__ = __init__  # type: ignore[method-assign]
        CompiledFunction._compile = _compile  # type: ignore[method-assign]
        try:
            yield
        finally:
            CompiledFunction.__init__ = init  # type: ignore[method-assign]
            CompiledFunction._compile = compile_  # type: ignore[method-assign]

    def note_created(self, fn: Any) -> None:
        """Record a compiled function (once), and whether it is named like the step."""
        qual = qualified_name(fn)
        if qual not in self.seen:
            self.seen.append(qual)
        if names_step(fn, self.func) and not any(f is fn for f in self.created):
            self.created.append(fn)


@contextlib.contextmanager
def _user_output_to_stderr() -> Iterator[None]:
    """Send what the user's script prints to stderr, so stdout holds only the dump.

    Both ``sys.stdout`` (Python's prints) and file descriptor 1 (C code, child processes)
    are redirected, and both are restored afterwards.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to protect
        saved = -1
    if saved >= 0:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        if saved >= 0:
            os.dup2(saved, 1)
            os.close(saved)


def _note(message: str) -> None:
    print(f"{PROG}: note: {_one_line(message)}", file=sys.stderr)


HOW_TO_GIVE_EXAMPLE_ARGS = ("give it example arguments, e.g. @gc.compile(example_args=(X[:32], "
                            "Y[:32])) with arrays shaped like one batch, so that defining it "
                            "traces it without training")


def _first_call_note(fn: Any, path_str: str) -> None:
    _note(f"{fn.name} has no example_args, so {path_str} was run until its first call, "
          f"which was traced (with that call's arguments) and not run; to skip running the "
          f"script, {HOW_TO_GIVE_EXAMPLE_ARGS}")


@contextlib.contextmanager
def loaded_step(path_str: str, func: str) -> Iterator[Any]:
    """Load the script and yield its compiled, traced step ``func`` (see the module docstring).

    First the script is imported (not as ``__main__``) and ``func`` looked up at its top
    level; if it is not there, or there but never traced, the script is run as ``__main__``
    until a step of that name is traced. The script stays importable (its directory on
    ``sys.path``, its module registered) until the block ends, because a command may call back
    into user code (an ahead-of-time build re-traces the step); both are undone afterwards so
    in-process callers stay clean.
    """
    import inspect

    from .api import CompiledFunction

    path = Path(path_str)
    if not path.exists():
        raise CLIError(f"no such file: {path_str}")
    if not path.is_file():
        raise CLIError(f"not a file: {path_str}")
    path = path.resolve()
    watch = _Watch(func)
    with _script_module(path) as modname:
        spec = importlib_util().spec_from_file_location(modname, path)
        if spec is None or spec.loader is None:
            raise CLIError(f"cannot import {path_str}: not a Python script")
        module = importlib_util().module_from_spec(spec)
        sys.modules[modname] = module
        try:
            with _user_output_to_stderr(), watch.active():
                spec.loader.exec_module(module)
        except _Traced as t:  # a top-level loop called the step: stopped before it ran
            _first_call_note(t.fn, path_str)
            yield t.fn
            return
        except SystemExit as e:
            raise CLIError(f"{path_str} called sys.exit({e.code!r}) while being imported; keep "
                           "the training code under `if __name__ == \"__main__\":`") from e
        except Exception as e:  # noqa: BLE001 - any failure of user code is reported, not raised
            raise CLIError(f"{path_str} raised {type(e).__name__} while being imported"
                           f"{_where_in_script(e, path)}: {_one_line(e)}") from e
        obj: Any = module
        for part in func.split("."):
            obj = getattr(obj, part, _MISSING)
            if obj is _MISSING:
                break
        not_compiled = None
        if obj is not _MISSING and not isinstance(obj, CompiledFunction):
            not_compiled = (f"{path_str}:{func} is a {type(obj).__name__}, not a compiled step; "
                            "decorate it with @gc.compile(example_args=(...))")
            if not inspect.isfunction(obj):  # a function may be compiled at run time
                raise CLIError(not_compiled)  # (``gc.compile(self._step)`` in ``__init__``)
        elif obj is not _MISSING and obj.variants:
            yield obj
            return
        elif obj is not _MISSING:
            watch.note_created(obj)
        elif watch.from_example_args is not None:  # traced inside a function the import ran
            yield watch.from_example_args
            return
        fn = _run_as_main(path, path_str, func, watch, not_compiled)
        if fn is watch.by_call:
            _first_call_note(fn, path_str)
        yield fn


_MISSING = object()


def importlib_util() -> Any:
    import importlib.util

    return importlib.util


def _run_as_main(path: Path, path_str: str, func: str, watch: _Watch,
                 not_compiled: str | None = None) -> Any:
    """Run the script as ``__main__`` until the step ``func`` is traced; return it.

    The step is not at the script's top level (or is there but untraced), so it is made by
    the script's main code: ``main()``, a trainer class, a loop. ``sys.argv`` is the script
    alone, as for ``python SCRIPT.py``.
    """
    import runpy

    watch.stop_at_example_args = True
    saved_argv = sys.argv
    sys.argv = [str(path)]
    ended = "ran to its end"
    try:
        with _user_output_to_stderr(), watch.active():
            runpy.run_path(str(path), run_name="__main__")
    except _Traced as t:
        return t.fn
    except SystemExit as e:
        ended = f"exited (sys.exit({e.code!r}))"
    except Exception as e:  # noqa: BLE001 - any failure of user code is reported, not raised
        raise CLIError(f"{path_str} raised {type(e).__name__} while running as __main__ to "
                       f"find {func!r}{_where_in_script(e, path)}: {_one_line(e)}") from e
    finally:
        sys.argv = saved_argv
    if not_compiled is not None and not watch.created:
        raise CLIError(not_compiled)
    if watch.created:
        raise CLIError(f"{path_str}:{func} was compiled without example_args and never called: "
                       f"not while importing the script, nor while running it as __main__ "
                       f"(it {ended}); {HOW_TO_GIVE_EXAMPLE_ARGS}")
    seen = ", ".join(watch.seen) or "none"
    raise CLIError(f"{path_str} defines no compiled step {func!r}: not at its top level, and "
                   f"running it as __main__ (it {ended}) traced none of that name (compiled "
                   f"steps seen: {seen})")


def _variant(fn: Any) -> Any:
    """The variant whose stages ``fn.ir`` shows (the most recent one)."""
    return fn._last or fn.variants[-1]


def _stage_names(fn: Any) -> list[str]:
    return list(_variant(fn).stages)


def resolve_stages(fn: Any, stage: str, func: str) -> list[str]:
    """The stages to show for ``--stage`` (``all`` -> every stage the variant has)."""
    names = _stage_names(fn)
    if stage == "all":
        return names
    if stage not in names:
        hint = ""
        if stage in ("llvm", "asm", "ptx") and getattr(fn, "backend_name", None) == "interp":
            hint = " (it was compiled with the interpreter backend, which has no native code)"
        raise CLIError(f"{func} has no stage {stage!r}{hint}; its stages are: "
                       + ", ".join(names))
    return [stage]


# -- rendering ---------------------------------------------------------------------------------

def _is_graph(obj: Any) -> bool:
    from .ir import Graph

    return isinstance(obj, Graph)


def stage_value(fn: Any, name: str) -> Any:
    """A stage's Graph or text. Backends may store text stages (LLVM IR, assembly) as
    callables rendered on first use, as ``CompiledFunction.ir`` does; render and cache them."""
    v = _variant(fn)
    s = v.stages[name]
    if callable(s) and not _is_graph(s):
        s = v.stages[name] = s()
    return s


def dump_text(fn: Any, stages: list[str]) -> str:
    """The IR at each stage; several stages get ``==== stage ====`` headers."""
    if len(stages) == 1:
        text = str(stage_value(fn, stages[0]))
        return text if text.endswith("\n") else text + "\n"
    parts = []
    for name in stages:
        text = str(stage_value(fn, name))
        parts.append(f"==== {name} ====\n{text.rstrip()}\n")
    return "\n".join(parts)


def dump_dot(fn: Any, stages: list[str], func: str) -> str:
    """One digraph per graph stage (text stages such as assembly cannot be drawn)."""
    from .dotgraph import format_dot

    v = _variant(fn)
    graphs = [s for s in stages if _is_graph(v.stages[s])]
    if not graphs:
        raise CLIError(f"stage {stages[0]!r} of {func} is text, not an IR graph; --format dot "
                       "draws the graph stages: "
                       + ", ".join(s for s in v.stages if _is_graph(v.stages[s])))
    return "".join(format_dot(stage_value(fn, s), f"{func} ({s})") for s in graphs)


def _fmt(d: Any) -> str:
    import sympy

    from .ir import shapes as sh

    return sh.fmt_dim(d) if isinstance(d, sympy.Basic) else str(d)


def _counts(d: dict[str, Any]) -> str:
    return ", ".join(f"{k} {_fmt(v)}" for k, v in d.items()) if d else "none"


def _add(a: Any, b: Any) -> Any:
    import sympy

    from .ir import shapes as sh

    return sh.dim(sympy.sympify(a) + sympy.sympify(b))


def graph_stats(graph: Any) -> dict[str, Any]:
    """Op counts, inputs and update slots by kind, and bytes per input kind (symbolic
    expressions such as ``8*B`` where a shape has a batch symbol)."""
    from .dotgraph import slot_kind
    from .ir import shapes as sh

    ops: dict[str, int] = {}
    for n in graph.nodes():
        if n.op != "input":
            ops[n.op] = ops.get(n.op, 0) + 1
    inputs: dict[str, int] = {}
    nbytes: dict[str, Any] = {}
    for n in graph.inputs:
        kind = str(n.attrs["kind"])
        inputs[kind] = inputs.get(kind, 0) + 1
        nbytes[kind] = _add(nbytes.get(kind, 0), sh.dim(sh.numel(n.shape) * n.dtype.itemsize))
    updates: dict[str, int] = {}
    for slot, _ in graph.updates:
        kind = slot_kind(graph, slot)
        updates[kind] = updates.get(kind, 0) + 1
    state = 0
    for k in STATE_KINDS:
        state = _add(state, nbytes.get(k, 0))
    return {"nodes": sum(ops.values()), "ops": dict(sorted(ops.items())), "inputs": inputs,
            "updates": updates, "bytes": nbytes, "state_bytes": state}


def dump_stats(fn: Any, stages: list[str], func: str) -> str:
    """The ``--stats`` report: one block per stage."""
    v = _variant(fn)
    lines = [f"{func}: {len(v.stages)} stages ({', '.join(v.stages)}), "
             f"{len(fn.variants)} variant(s), backend {getattr(fn, 'backend_name', '?')}"]
    for name in stages:
        s = stage_value(fn, name)
        if not _is_graph(s):
            text = str(s)
            lines.append(f"stage {name}: text, {len(text.splitlines())} lines, "
                         f"{len(text)} characters")
            continue
        st = graph_stats(s)
        n_upd = sum(st["updates"].values())
        lines += [
            f"stage {name}: {st['nodes']} nodes",
            f"  ops: {_counts(st['ops'])}",
            f"  inputs: {_counts(st['inputs'])}",
            f"  update slots: {n_upd}" + (f" ({_counts(st['updates'])})" if n_upd else ""),
            f"  bytes by input kind: {_counts(st['bytes'])}",
            f"  state buffer bytes ({'+'.join(STATE_KINDS)}): {_fmt(st['state_bytes'])}",
        ]
    return "\n".join(lines) + "\n"


def write_output(text: str, out: str | None, is_dot: bool) -> None:
    """Print, write, or (for ``.svg``/``.png``/``.pdf``) render dot source with Graphviz."""
    if out is None:
        sys.stdout.write(text)
        return
    target = Path(out)
    fmt = RENDER_FORMATS.get(target.suffix.lower())
    if fmt is not None:
        if not is_dot:
            raise CLIError(f"{out}: an image needs --format dot", code=2)
        import shutil
        import subprocess

        exe = shutil.which("dot")
        if exe is None:
            raise CLIError(f"rendering {out} needs the Graphviz 'dot' program, which is not "
                           f"installed: {GRAPHVIZ_HINT}")
        try:
            proc = subprocess.run([exe, f"-T{fmt}", "-o", str(target)], input=text, text=True,
                                  capture_output=True, timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CLIError(f"running Graphviz dot failed: {_one_line(e)}") from e
        if proc.returncode != 0:
            raise CLIError(f"Graphviz dot failed (status {proc.returncode}): "
                           f"{_one_line(proc.stderr) or 'no message'}")
        return
    try:
        target.write_text(text)
    except OSError as e:
        raise CLIError(f"cannot write {out}: {e.strerror or _one_line(e)}") from e


# -- commands --------------------------------------------------------------------------------

def cmd_dump(args: argparse.Namespace) -> int:
    path, func = args.target
    with loaded_step(path, func) as fn:
        return _dump(fn, func, args)


def _dump(fn: Any, func: str, args: argparse.Namespace) -> int:
    stage = args.stage or ("all" if args.stats else DEFAULT_STAGE)
    stages = resolve_stages(fn, stage, func)
    fmt = args.format
    if fmt is None:
        out_suffix = Path(args.output).suffix.lower() if args.output else ""
        fmt = "dot" if out_suffix in RENDER_FORMATS or out_suffix in (".dot", ".gv") else "text"
        fmt = "html" if out_suffix in HTML_SUFFIXES else fmt
    if fmt == "html" and not args.stats:
        from .explain import build_page

        # without --stage the page shows the IR graph stages (the ones with source lines)
        write_output(build_page(fn, stages if args.stage else None), args.output, False)
    elif args.stats:
        write_output(dump_stats(fn, stages, func), args.output, False)
    elif fmt == "dot":
        text = dump_dot(fn, stages, func)
        if (args.output and Path(args.output).suffix.lower() in RENDER_FORMATS
                and sum(_is_graph(_variant(fn).stages[s]) for s in stages) > 1):
            raise CLIError(f"{args.output}: one image holds one stage; pick one with --stage "
                           "or write all of them with -o FILE.dot")
        write_output(text, args.output, True)
    else:
        write_output(dump_text(fn, stages), args.output, False)
    return 0


def _aot_module() -> Any:
    """``graphc.aot`` if this build has it (it is optional: it needs the native backend)."""
    try:
        spec = importlib_util().find_spec("graphc.aot")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    import graphc.aot as aot

    return aot


def cmd_aot(args: argparse.Namespace) -> int:
    aot = _aot_module()
    if aot is None:
        raise CLIError("ahead-of-time builds are not available in this build", code=2)
    check_target_arg(aot, args.target_cpu)  # a usage error: before the script runs
    path, func = args.target
    with loaded_step(path, func) as fn:
        return _aot(fn, path, func, aot, args)


def check_target_arg(aot: Any, target: str | None) -> None:
    """``--target`` checked before LLVM sees it: LLVM warns about an unknown CPU once per
    subtarget and then aborts the process, which no ``except`` can report."""
    try:
        aot.check_target(target)
    except ValueError as e:
        raise CLIError(f"--{e}", code=2) from e


def _written(result: Any, out_dir: Path, name: str) -> list[Path]:
    """Every file the build wrote: the paths ``build`` returned, else the ones it makes."""
    if isinstance(result, dict):
        paths = [Path(p) for p in result.values()]
    else:
        paths = [out_dir / f for f in (f"{name}.h", f"{name}.c", f"{name}.o", f"lib{name}.so")]
    return [p for p in paths if p.exists()]


def _aot(fn: Any, path: str, func: str, aot: Any, args: argparse.Namespace) -> int:
    example_args = example_args_of(fn)
    if example_args is None:
        raise CLIError(f"{path}:{func} has no recorded example_args; an ahead-of-time build "
                       f"needs them: {HOW_TO_GIVE_EXAMPLE_ARGS}")
    name = args.name or fn.name
    out_dir = Path(args.output)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CLIError(f"cannot create {args.output}: {e.strerror or _one_line(e)}") from e
    result = aot.build(fn, example_args, str(out_dir), name, target=args.target_cpu)
    made = _written(result, out_dir, name)
    print(f"built {name} in {out_dir}" + (": " + ", ".join(p.name for p in made) if made
                                          else ""))
    return 0


class _ListTargets(argparse.Action):
    """``--target help``: print the CPUs LLVM knows here and exit, as ``llc -mcpu=help``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if values != "help":
            setattr(namespace, self.dest, values)
            return
        aot = _aot_module()
        if aot is None:
            parser.exit(2, f"{PROG}: error: ahead-of-time builds are not available in this "
                           "build\n")
        triple, cpus, _ = aot.llvm_catalog()
        print(f"CPUs LLVM can target on {triple} (--target NAME; 'native', the default, is "
              "this host with all its features; 32-bit CPUs such as i686 cannot build "
              "64-bit code):")
        width = max(map(len, cpus), default=8) + 2
        per_line = max(1, 96 // width)
        for i in range(0, len(cpus), per_line):
            print("  " + "".join(c.ljust(width) for c in cpus[i:i + per_line]).rstrip())
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true",
                        help="show full Python tracebacks for errors")

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect and build the compiled training steps a script defines. "
                    "SCRIPT.py:FUNC names a gc.compile'd step: best at the script's top level "
                    "with @gc.compile(example_args=...), so importing the script traces it "
                    "without training; a step defined elsewhere (inside main(), a method) or "
                    "without example_args is found by running the script until the step is "
                    "traced, and stopped there. The script's output goes to stderr.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    d = sub.add_parser(
        "dump", parents=[common], help="print the IR of a compiled step at a stage",
        description="Print the IR of a compiled step at a stage (default: optimized), "
                    "as text or as a Graphviz graph.")
    d.add_argument("target", type=parse_target, metavar="SCRIPT.py:FUNC",
                   help="the script and the compiled step's name (or dotted qualified name: "
                        "main.train_step, Trainer.step)")
    d.add_argument("--stage", metavar="STAGE",
                   help="one of the step's stages or 'all' for every stage it has, with "
                        "headers (default: " + DEFAULT_STAGE + "; with --stats: all). Every "
                        "backend has traced, grad and optimized; the cpu backend adds fused "
                        "(the kernel plan), llvm_unoptimized, llvm and asm; the cuda backend "
                        "adds llvm_unoptimized, llvm, ptx (asm is the same text) and kernels")
    d.add_argument("--format", choices=("text", "dot", "html"), default=None,
                   help="text (default), a Graphviz digraph of an IR graph stage (default "
                        "when -o ends in .dot, .gv, .svg, .png or .pdf), or html: one "
                        "self-contained page with the IR stages beside the source lines, the "
                        "kernel plan, the scratch arena over time and, for a GRAPHC_PROFILE=1 "
                        "build, each kernel's share of the time (default when -o ends in "
                        ".html; without --stage it shows the IR graph stages, with --stage all "
                        "the native text too)")
    d.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE instead of stdout; .svg, .png and .pdf are rendered "
                        "with Graphviz's dot program")
    d.add_argument("--stats", action="store_true",
                   help="print node counts by op, inputs and update slots by kind, and "
                        "state buffer sizes per stage instead of the IR")
    d.set_defaults(handler=cmd_dump)

    a = sub.add_parser(
        "aot", parents=[common], help="build a compiled step ahead of time (C header + library)",
        description="Build the step into NAME.h (the C ABI), NAME.c (the wrapper source, "
                    "kept for reading), NAME.o and libNAME.so, using the step's example_args "
                    "for the argument shapes.")
    a.add_argument("target", type=parse_target, metavar="SCRIPT.py:FUNC",
                   help="the script and the compiled step's name (or dotted qualified name: "
                        "main.train_step, Trainer.step)")
    a.add_argument("-o", "--output", metavar="DIR", required=True,
                   help="directory to write the build into (created if missing)")
    a.add_argument("--name", help="base name of the outputs (default: the function's name)")
    a.add_argument("--target", dest="target_cpu", metavar="CPU", default=None,
                   action=_ListTargets,
                   help="LLVM CPU to generate code for: native (the default: this host), "
                        "x86-64-v2|v3|v4 (portable levels), znver4, ...; --target help "
                        "lists them")
    a.set_defaults(handler=cmd_aot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphc`` console script and ``python -m graphc``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    debug = bool(getattr(args, "debug", False))
    try:
        if args.command == "dump" and args.stats and args.format in ("dot", "html"):
            parser.error(f"--stats prints a text report; drop --format {args.format}")
        return int(args.handler(args))
    except CLIError as e:
        if debug and e.__cause__ is not None:
            import traceback

            traceback.print_exception(e.__cause__)
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line unless --debug, as promised
        if debug:
            import traceback

            traceback.print_exc()
        hint = "" if debug else " (run with --debug for the traceback)"
        print(f"{PROG}: error: {type(e).__name__}: {_one_line(e)}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
