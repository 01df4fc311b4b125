"""Guards on the module globals a traced function reads.

A compiled step runs its Python once, at trace time, so ``y * SCALE`` or ``F.dropout(x,
P_DROP)`` with module-level ``SCALE``/``P_DROP`` read the global then and baked its value into
the compiled code: reassigning ``SCALE = 3.0`` between calls changed what eager code computed
but not what the compiled step did, without a word. Dynamo guards every global it reads;
graphc traces by running Python and sees no bytecode, so after a trace it looks at the
code that ran, statically: the traced function, the methods of the modules that ran, and,
transitively, the user functions and classes their globals name. For that code (not graphc's
own modules, the standard library or the numeric libraries), the globals it loads
(``LOAD_GLOBAL``, found once per code object with ``dis``) are guarded at their values:

- numbers, strings, ``None`` and tuples or frozensets of them by value and type (a call
  compares the global's identity with the traced object, ~40 ns, and the value only when
  that differs);
- small lists, dicts and sets of those by value at every call (they change in place);
- tensors and numpy arrays by identity (a global rebound to another array re-traces; the
  contents of either are read at every call anyway);
- modules, functions, classes and other objects are not guarded (rebinding them between
  calls is rare and their contents cannot be compared cheaply).

Closure variables of that code (``t`` of an enclosing ``main()`` that rebinds it between
calls) are guarded the same way. A changed value re-traces the step; changing it back
reuses the earlier variant. Not seen: values read only by functions the static walk does
not reach (one passed as an argument or held in an attribute or a container).
"""

from __future__ import annotations

import dis
import functools
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._snapshot import ABSENT, Unfrozen, entry_reader, frozen, has_mutable
from ._tensor import Tensor

# modules whose globals are implementation, not user state
_SKIP_TOP = frozenset({"graphc", "numpy", "sympy", "llvmlite", "torch", "jax", "jaxlib",
                       "hypothesis", "_pytest", "pytest", "pluggy", "mpmath", "xdist",
                       "typing_extensions", "importlib_metadata"})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_ATTRS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_MAX_CONTAINER = 64  # larger lists/dicts/sets are guarded by identity only
_CODE_NAMES: dict[types.CodeType, tuple] = {}  # code object -> globals it loads
_MODULE_USER: dict[str, bool] = {}  # module name -> user code?


def _user_module(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    hit = _MODULE_USER.get(name)
    if hit is None:
        top = name.split(".", 1)[0]
        hit = _MODULE_USER[name] = not (top in _STDLIB or top in _SKIP_TOP)
    return hit


def _loaded_globals(code: types.CodeType) -> tuple[tuple[str, str | None], ...]:
    """The globals ``code`` loads, each as ``(name, None)``, and ``(name, attr)`` where the
    load is followed by an attribute read (``cfg.dropout``, ``args.clip``, ``config.LR``)."""
    names = _CODE_NAMES.get(code)
    if names is None:
        found: dict[tuple[str, str | None], None] = {}
        prev = None
        for ins in dis.get_instructions(code):
            if ins.opname in _LOADS and isinstance(ins.argval, str):
                found[(ins.argval, None)] = None
            elif prev is not None and ins.opname in _ATTRS and isinstance(ins.argval, str):
                found[(prev, ins.argval)] = None
            prev = ins.argval if ins.opname in _LOADS else None
        if len(_CODE_NAMES) > 4096:
            _CODE_NAMES.clear()
        names = _CODE_NAMES[code] = tuple(found)
    return names




class _CellView:
    """A closure cell seen as a one-entry dict (``get``), so the call wrapper's fast path
    and the readers take globals, attribute dicts and cells alike."""

    __slots__ = ("cell",)

    def __init__(self, cell: types.CellType) -> None:
        self.cell = cell

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self.cell.cell_contents
        except ValueError:  # emptied (``del`` in the enclosing function)
            return default


def _identity_reader(d: Any, name: str) -> Any:
    def read() -> Any:
        return id(d.get(name, ABSENT))
    return read


def _functions_of(obj: Any) -> list[types.FunctionType]:
    """The Python functions behind a callable the trace ran: a function, a bound method, the
    methods of a class and of its user base classes, an object's ``forward``/``__call__``."""
    if isinstance(obj, functools.partial):  # ``gc.compile(functools.partial(step, ...))``
        return _functions_of(obj.func)
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, type):  # its user classes' methods, inherited ones included
        return [f for cls in obj.__mro__ if _user_module(cls.__module__)
                for f in _class_functions(cls)]
    out = []
    for name in ("forward", "__call__"):
        f = getattr(type(obj), name, None)
        if isinstance(f, types.FunctionType):
            out.append(f)
    fn = getattr(obj, "fn", None)  # a compiled function: the function it compiles
    if isinstance(fn, (types.FunctionType, types.MethodType)):
        out += _functions_of(fn)
    return out


def _class_functions(cls: type) -> list[types.FunctionType]:
    """A class's own functions: methods, static and class methods, property accessors."""
    out = []
    for v in vars(cls).values():
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        elif isinstance(v, property):
            out += [f for f in (v.fget, v.fset) if isinstance(f, types.FunctionType)]
            continue
        if isinstance(v, types.FunctionType):
            out.append(v)
    return out


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code nested in it (lambdas, comprehensions, inner functions)."""
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def guard_globals(ctx: Any, roots: list[Any]) -> None:
    """Guard the globals that the user code of ``roots`` (the traced function, the classes
    of the modules that ran) and of the user functions and classes those globals name,
    transitively, load. Static, once per trace: a trace hook (``sys.settrace``) saw the
    functions actually entered, but slowed every trace 3-4x (Python 3.11 runs traced frames
    on its slow path)."""
    todo = [f for r in roots for f in _functions_of(r)]
    done: set[int] = set()
    seen: set[tuple[int, str]] = set()
    while todo:
        f = todo.pop()
        if id(f.__code__) in done:
            continue
        done.add(id(f.__code__))
        g = f.__globals__
        if not _user_module(g.get("__name__")):
            continue
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:  # a closure variable (``t`` of an enclosing ``main()``, rebound there)
                v = cell.cell_contents
            except ValueError:
                continue
            if isinstance(v, (types.FunctionType, type)):
                todo += _functions_of(v)
            elif (id(cell), None) not in seen:
                seen.add((id(cell), None))
                _note(ctx, cell, name, v, f"closure variable {name!r} of {f.__qualname__}")
        for code in _codes(f.__code__):
            for name, attr in _loaded_globals(code):
                if name not in g or (id(g), name, attr) in seen:
                    continue
                seen.add((id(g), name, attr))
                v = g[name]
                if attr is None:
                    if isinstance(v, (types.FunctionType, type)):
                        todo += _functions_of(v)  # a user helper or class: its globals too
                    else:
                        _note(ctx, g, name, v, f"global {name!r} of {g.get('__name__', '?')}")
                    continue
                # ``cfg.dropout`` of a config object, an argparse namespace, a user module
                d = _plain_dict(v)
                if d is not None and attr in d and (id(d), attr) not in seen:
                    seen.add((id(d), attr))
                    _note(ctx, d, attr, d[attr],
                          f"{name}.{attr} (global {name!r} of {g.get('__name__', '?')})")


def _plain_dict(v: Any) -> dict | None:
    """The attribute dict of a global whose attributes are user state: a user module, or a
    plain object (a config, a namespace); not a library module, a function, a class, a
    graphc module or tensor (guarded their own ways)."""
    if isinstance(v, types.ModuleType):
        return vars(v) if _user_module(v.__name__) else None
    if isinstance(v, (types.FunctionType, types.MethodType, type, Tensor, np.ndarray)):
        return None
    if type(v).__module__.startswith("graphc") or "_modules" in getattr(v, "__dict__", ()):
        return None  # graphc's objects; modules (their attributes: ``nn._attr_guards``)
    d = getattr(v, "__dict__", None)
    return d if type(d) is dict else None


def _note(ctx: Any, g: Any, name: str, v: Any, what: str) -> None:
    """Guard ``g[name]`` (``g``: a globals or attribute dict) or a closure cell's contents
    (``g``: the cell) at ``v``."""
    if isinstance(g, types.CellType):
        g = _CellView(g)
    if isinstance(v, (Tensor, np.ndarray)):
        read = _identity_reader(g, name)
        read.global_guard = (g, name, v)  # type: ignore[attr-defined]  # (keeps v alive)
        ctx.guard(read, id(v), what)
        return
    if isinstance(v, (list, dict, set)) and len(v) > _MAX_CONTAINER:
        return
    try:
        snap = frozen(v)
    except Unfrozen:
        return
    read = entry_reader(g, name)
    if not has_mutable(v):  # the runner's fast path: identity first (``runner``)
        read.global_guard = (g, name, v)  # type: ignore[attr-defined]
    ctx.guard(read, snap, what)
