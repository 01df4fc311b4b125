"""The backend registry: a backend's name -> the factory that builds a step's executable.

``gc.compile(..., backend=...)`` (and ``device=``) name a backend; ``graphc.api`` asks this
registry for it instead of an if-chain over the names it knows, so a backend is added by
registering a factory, not by editing the front end. Factories import their backend on first
use: the CPU backend needs llvmlite, the PTX backend its code generator, and neither should be
loaded to run the interpreter.

A factory is ``factory(graph, sig, **options) -> Runtime``; the options it understands are its
own (``debug`` for the CPU backend).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Factory = Callable[..., Any]

BACKENDS: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> Factory:
    """Make ``factory`` build the executables of backend ``name`` (replacing any before)."""
    BACKENDS[name] = factory
    return factory


def create(name: str, graph: Any, sig: Any, **options: Any) -> Any:
    """The executable of backend ``name`` for ``graph`` (raises ValueError naming the known
    backends for an unknown name)."""
    factory = BACKENDS.get(name)
    if factory is None:
        names = [repr(n) for n in BACKENDS]
        known = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
        raise ValueError(f"backend: expected {known}, got {name!r}")
    return factory(graph, sig, **options)


def _cpu(graph: Any, sig: Any, debug: bool = False, **_: Any) -> Any:
    from .cpu import CPUExecutable

    return CPUExecutable(graph, sig, debug=debug)


def _cuda(graph: Any, sig: Any, **_: Any) -> Any:
    from .ptx import PTXExecutable

    return PTXExecutable(graph, sig)


def _interp(graph: Any, sig: Any, **_: Any) -> Any:
    from .executable import InterpreterExecutable

    return InterpreterExecutable(graph, sig)


register("cpu", _cpu)
register("cuda", _cuda)
register("interp", _interp)

__all__ = ["BACKENDS", "register", "create", "Factory"]
