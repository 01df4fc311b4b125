"""Where a compile's time goes: trace, passes, plan, kernel emission, LLVM optimisation and
code emission (in this process and the compile worker), link.

``gc.compile(..., verbose=True)`` or ``GRAPHC_COMPILE_LOG=1`` prints the breakdown of every
compile of a step to stderr; ``step.compile_log`` keeps the last one (a ``CompileLog``) either
way, so benchmarks read the same figures. The phases are recorded by whoever does the work
(the front end's trace and passes, the CPU runtime's lowering and linking), through the log
that is current in this thread (``recording`` / ``current``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from graphc._context import thread_local


def enabled_by_env() -> bool:
    return os.environ.get("GRAPHC_COMPILE_LOG", "").strip() not in ("", "0")


class CompileLog:
    """Seconds per phase (in the order first seen) and a few counts, for one compile.

    LLVM phases done in two processes at once are summed over both (CPU seconds), and
    ``llvm (wall)`` says how long the step waited for them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.phases: dict[str, float] = {}
        self.counts: dict[str, Any] = {}
        self.total = 0.0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def count(self, name: str, value: Any) -> None:
        self.counts[name] = value

    def format(self) -> str:
        lines = [f"graphc: compiled {self.name} in {self.total:.3f} s"]
        width = max((len(k) for k in self.phases), default=0)
        for k, v in self.phases.items():
            lines.append(f"  {k:<{width}}  {v:8.3f} s")
        for k, v in self.counts.items():
            lines.append(f"  {k}: {v}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.format()


class _Discard(CompileLog):
    """The log when nobody records: phases cost a clock read and are dropped."""

    def add(self, name: str, seconds: float) -> None:
        pass

    def count(self, name: str, value: Any) -> None:
        pass



_local = thread_local(log=None)
_DISCARD = _Discard("")


def current() -> CompileLog:
    """The log of the compile running in this thread (a discarding one outside compiles)."""
    return _local.log or _DISCARD


@contextmanager
def recording(name: str, verbose: bool = False) -> Iterator[CompileLog]:
    """Make a new log current for the block; print it at the end when ``verbose``."""
    log = CompileLog(name)
    prev = _local.log
    _local.log = log
    t0 = time.perf_counter()
    try:
        yield log
    finally:
        log.total = time.perf_counter() - t0
        _local.log = prev
    if verbose:
        print(log.format(), file=sys.stderr, flush=True)


__all__ = ["CompileLog", "current", "recording", "enabled_by_env"]
