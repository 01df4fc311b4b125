"""Timed blocks for benchmarks that alternate systems in one process.

Why a settle before every block: the blocks alternate between systems, and PyTorch's OpenMP
threads spin (GOMP_SPINCOUNT: 300,000 pauses, 7.5 ms measured on a Zen 4 host) after each of
its parallel regions. A graphc block that started straight after a PyTorch block shared the
second CPU with that spinning thread: mlp_large on two threads, blocks of 4 steps, 14.3 ms
against 12.4 ms with the warm-up; a 64->128 stride-2 convolution on two threads, 125 against
179 GFLOP/s. Each system runs untimed for ``SETTLE_SECONDS`` before its block, so neither
times the other's leftovers, and every system gets the same warm-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SETTLE_SECONDS = 0.015


def settle(fn: Callable[[], Any]) -> None:
    """Run ``fn`` untimed for at least ``SETTLE_SECONDS`` (at least once)."""
    end = time.perf_counter() + SETTLE_SECONDS
    fn()
    while time.perf_counter() < end:
        fn()


def time_block(fn: Callable[[], Any], n: int) -> float:
    """Seconds per call of ``fn`` over ``n`` calls, after ``settle``."""
    settle(fn)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def calibrate(fn: Callable[[], Any], target: float = 0.05, most: int = 100000) -> int:
    """Calls per block for a block of about ``target`` seconds (at most ``most`` calls
    while probing)."""
    n = 1
    while True:
        dt = time_block(fn, n)
        if dt * n > target or n > most:
            return max(1, int(target / max(dt, 1e-9)))
        n *= 4


__all__ = ["SETTLE_SECONDS", "settle", "time_block", "calibrate"]
