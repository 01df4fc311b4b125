"""Python's cyclic garbage collector held off while a step compiles.

Why: a compile allocates millions of small objects that live until it ends (IR nodes, and
above all llvmlite's instructions, values and their cached text), and CPython starts a
full (generation 2) collection each time the long-lived heap has grown by a quarter, so the
collector walks the whole growing heap again and again. Measured on the ResNet-18 compile
(2-vCPU AMD EPYC Zen 5): seven full collections took 1.2 s of the 2.4 s spent emitting LLVM
IR, collecting almost nothing (30k objects). Holding collection off for the compile and
letting the next automatic collection find its garbage is what long-running Python services
do for the same reason (``gc.freeze``/``gc.disable`` around start-up).

A pause starts with a collection of the young generations. Without it, compiling and
dropping steps in a loop (a sweep) grew the process by ~680 KiB a step
(``test_compile_and_drop_keeps_memory_bounded``): the dropped steps' objects, never
collected during their compiles, waited for a rare full collection.

Nested and concurrent compiles share one pause: the collector goes back on when the last of
them ends, and only if it was on when the first began (a program that turned it off keeps
it off).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """Hold off cyclic garbage collection for the block (reference counting still frees
    everything that is not in a cycle)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            if _was_enabled:
                # the young generations first (cheap: not the whole heap), so a step
                # compiled and dropped before this one is freed now: its objects sat in the
                # young generations, never collected during its own paused compile
                gc.collect(1)
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


__all__ = ["paused"]
