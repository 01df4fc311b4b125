"""``python -m benchmarks.overhead [--blocks K]``: what the call-boundary checks cost.

For the seed and ``mlp_small`` steps, timed blocks alternate between the generated wrapper
with the reliability checks (aliasing check after a rebinding, interrupt-safe publishing:
``graphc/runtime/guard.py``) and the same wrapper built without them (``build_runner(exe,
safe=False)``), on the same executable and arrays. The argument checks (count, rank, shape,
dtype, batch symbols, shape guards) are in both: they bind the batch size, so the step cannot
run without them. Reports medians per step and the ratio checked / unchecked. The native index
checks (class targets, embeddings) are inside the kernels in both.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from graphc.runtime.runner import build_runner

from .workloads import all_workloads


def _block(fn: Any, args: tuple, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn(args)
    return (time.perf_counter() - t) / n


def measure(step: Any, args: tuple, blocks: int = 15, target: float = 0.05
            ) -> tuple[float, float, float]:
    """Median seconds per call of the checked and the unchecked wrapper, and the median of
    the paired per-block differences (steadier than the difference of medians on a busy
    machine)."""
    exe = step._last.exe
    checked, unchecked = exe._runner, build_runner(exe, safe=False)
    for fn in (checked, unchecked):
        for _ in range(5):
            fn(args)
    n = max(1, int(target / max(_block(checked, args, 20), 1e-9)))
    a, b = [], []
    for _ in range(blocks):
        a.append(_block(checked, args, n))
        b.append(_block(unchecked, args, n))
    return statistics.median(a), statistics.median(b), \
        statistics.median(x - y for x, y in zip(a, b))


def _step_and_args(call: Any) -> tuple[Any, tuple]:
    """The compiled function a workload's ``lambda: step(X, Y)`` calls, and its arguments."""
    from graphc.api import CompiledFunction

    cells = [c.cell_contents for c in call.__closure__ or ()]
    step = next(c for c in cells if isinstance(c, CompiledFunction))
    seen: list[tuple] = []
    exe = step._last.exe
    orig = exe.call
    exe.call = lambda args: (seen.append(tuple(args)), orig(args))[1]
    try:
        call()
    finally:
        del exe.call
    return step, seen[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.overhead")
    ap.add_argument("--blocks", type=int, default=15)
    a = ap.parse_args(argv)
    print(f"{'workload':<10} {'checked us':>11} {'unchecked us':>13} {'ratio':>7} "
          f"{'paired delta us':>16}")
    for w in all_workloads(None):
        if w.name not in ("seed", "mlp_small"):
            continue
        step, args = _step_and_args(w.graphc_step)
        c, u, d = measure(step, args, a.blocks)
        print(f"{w.name:<10} {c * 1e6:>11.2f} {u * 1e6:>13.2f} {c / u:>7.3f} {d * 1e6:>16.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
