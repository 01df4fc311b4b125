"""The active trace context (thread-local). Kept tiny so every module can import it."""

from __future__ import annotations

import threading
from typing import Any


def thread_local(**defaults: Any) -> threading.local:
    """A ``threading.local`` whose attributes start at ``defaults`` in every thread (class
    attributes). Reading a missing attribute of a plain one through ``getattr(..., default)``
    raises and catches an AttributeError each time (~1.2 us), and eager ops read the trace
    context and the grad mode several times each."""
    return type("ThreadLocal", (threading.local,), dict(defaults))()


_local = thread_local(ctx=None)


def current() -> Any | None:
    """The TraceContext being recorded on this thread, or None in eager mode."""
    return _local.ctx


# how many threads are tracing now: a compiled call tests this list item (~15 ns) before
# the thread-local (~100 ns) to see whether it is being called from inside a trace
TRACING = [0]
_TRACING_LOCK = threading.Lock()


# called with True when the first thread starts tracing and with False when the last one
# stops (``nn._attr_guards`` routes module attribute reads through its guard only meanwhile)
TRACING_HOOKS: list[Any] = []


def set_current(ctx: Any | None) -> Any | None:
    prev = _local.ctx
    _local.ctx = ctx
    change = (ctx is not None) - (prev is not None)
    if change:
        with _TRACING_LOCK:
            was = TRACING[0]
            TRACING[0] += change
            if (was == 0) != (TRACING[0] == 0):
                for hook in TRACING_HOOKS:
                    hook(TRACING[0] > 0)
    return prev


# Bumped by every Python-side change that a compiled step's slow guards depend on:
# ``requires_grad`` flips, ``.data`` and ``.grad`` assignments, optimizer param-group and state
# structure changes. A compiled call compares one integer with the value it last checked at and
# re-runs the full guard set only when it moved (the way PyTorch's version counters let
# Dynamo's guards stay cheap), so an unchanged world costs one comparison per call.
state_epoch = [0]


def bump() -> None:
    """Note a change that may invalidate compiled steps' guards (see ``state_epoch``)."""
    state_epoch[0] += 1


# Bumped by every write to an optimizer param group (``ParamGroup``): compiled steps re-read
# their hyperparameters and re-test group options only when it moved (or when a value is a
# tensor, which can change in place), instead of looking each one up on every call.
hyper_epoch = [0]


class Mismatch(Exception):
    """A call does not fit a compiled variant's specialisation (the caller selects another).

    Defined here, at the bottom of the front end, because guards raise it from the tracer,
    from the optimizer containers and from the executables alike."""


# The container types a step's names are read from (``model.0.weight``), registered by the
# modules that define them (graphc/nn/module.py, graphc/optim/optimizer.py), so the tracer
# finds them without importing nn or optim.
named_types: dict[str, type] = {}
