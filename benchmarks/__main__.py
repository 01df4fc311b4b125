"""``python -m benchmarks [workload ...] [--threads N] [--blocks K]``

Runs each workload in graphc and PyTorch eager side by side in one process: timed blocks
alternate between the systems, and the table reports medians of per-step times and the ratio
``torch / graphc`` (above 1: graphc is faster), with GFLOP/s for GEMM-bound steps against the
FMA peak (about 116 GFLOP/s a core on Zen 4). Machines are noisy: read medians and ratios.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from typing import Any

from .workloads import all_workloads

PEAK_PER_CORE = 116.0


def _time_block(fn: Any, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def _calibrate(fn: Any, target: float = 0.05) -> int:
    n = 1
    while True:
        dt = _time_block(fn, n)
        if dt * n > target or n > 100000:
            return max(1, int(target / max(dt, 1e-9)))
        n *= 4


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks")
    ap.add_argument("workloads", nargs="*")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=7)
    a = ap.parse_args(argv)
    try:
        import torch

        torch.set_num_threads(a.threads)
    except ImportError:
        torch = None
    print(f"machine: {platform.processor() or platform.machine()}, python "
          f"{platform.python_version()}, torch {getattr(torch, '__version__', 'absent')}, "
          f"threads {a.threads}")
    t0 = time.perf_counter()
    wls = [w for w in all_workloads(torch) if not a.workloads or w.name in a.workloads]
    print(f"built and compiled {len(wls)} workloads in {time.perf_counter() - t0:.2f} s")
    print(f"{'workload':<10} {'graphc us':>10} {'torch us':>10} {'ratio':>7} {'GFLOP/s':>8} "
          f"{'% peak':>7}")
    for w in wls:
        for _ in range(3):
            w.graphc_step()
            if w.torch_step:
                w.torch_step()
        ng = _calibrate(w.graphc_step)
        nt = _calibrate(w.torch_step) if w.torch_step else 0
        gs, ts = [], []
        for _ in range(a.blocks):
            gs.append(_time_block(w.graphc_step, ng))
            if w.torch_step:
                ts.append(_time_block(w.torch_step, nt))
        g = statistics.median(gs)
        t = statistics.median(ts) if ts else float("nan")
        gf = w.flops / g / 1e9 if w.flops else float("nan")
        peak = 100 * gf / (PEAK_PER_CORE * a.threads) if w.flops else float("nan")
        print(f"{w.name:<10} {g * 1e6:>10.1f} {t * 1e6:>10.1f} {t / g:>7.2f} {gf:>8.1f} "
              f"{peak:>7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
