"""A guard after the step's arena, for the tests that a kernel writes no byte past the
workspace its plan reserved (``test_conv_gemm``, ``test_wino_wgrad``).

``guard_scratch(monkeypatch)`` makes every step compiled afterwards fill its scratch with
0xA5 and a megabyte more; ``assert_nothing_past_arena(exe)`` checks, after a call, that the
bytes past what the step asked for still hold it."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphc.runtime import cpu as runtime_cpu

GUARD = 1 << 20
PATTERN = 0xA5


def _guarded_scratch(self: Any, nbytes: int) -> None:
    """``CPUExecutable._set_scratch`` with its bytes set to ``PATTERN`` (and ``GUARD`` more).
    The first arena is empty, so that a step asks for the size it needs (``info[1]``) even
    when that is less than the runtime's first 4 KiB (a step whose results are written
    straight into its output buffers may need only its workspace)."""
    if not hasattr(self, "arena_at"):
        nbytes = 0
    self.scratch = np.full(int(nbytes) + 64 + GUARD, PATTERN, np.uint8)
    base = self.scratch.ctypes.data
    aligned = (base + 63) // 64 * 64
    self.table[1] = aligned
    self.info[0] = int(nbytes)
    self.arena_at = aligned - base


def guard_scratch(monkeypatch: Any) -> None:
    monkeypatch.setattr(runtime_cpu.CPUExecutable, "_set_scratch", _guarded_scratch)


def assert_nothing_past_arena(exe: Any) -> None:
    need = int(exe.info[1])  # what the step asked for (the arena got twice that)
    assert need < int(exe.info[0]) or need == int(exe.info[0]) == 0
    tail = exe.scratch[exe.arena_at + need:]
    assert (tail == PATTERN).all(), (
        f"{int((tail != PATTERN).sum())} bytes written past the arena")
