"""``python -m benchmarks.steps [--threads N] [--rounds R]``: K training steps in one native call
(``step.run``) against the same compiled step called K times.

Each workload is built twice from the same seed (one model per path, so both train from the
same weights), and every round times, alternately, K calls of the step with a new batch array
each call (what a data loader hands over), K calls with one batch array reused, and one
``step.run(xs, ys)`` over the K batches stacked. The table gives medians of per-step times
and the ratio ``calls / run`` (above 1: the single call is faster). Workloads: the seed
(Linear(1, 1), L1 loss, SGD, its 200 epochs as one call), mlp_small with SGD momentum and
with Adam, and the lstm language model of ``benchmarks.workloads``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _seed() -> tuple[Callable[[], Any], np.ndarray, np.ndarray]:
    import graphc as gc
    from graphc import nn, optim

    gc.manual_seed(0)
    m, lf = nn.Linear(1, 1), nn.L1Loss()
    opt = optim.SGD(m.parameters(), lr=0.01)

    def step(x: Any, y: Any) -> Any:
        loss = lf(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    x = np.arange(0, 1, 0.02, dtype=np.float32)[:40, None]
    return step, x, (0.7 * x + 0.3).astype(np.float32)


def _mlp(adam: bool) -> tuple[Callable[[], Any], np.ndarray, np.ndarray]:
    import graphc as gc
    from graphc import nn, optim

    gc.manual_seed(0)
    m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = (optim.Adam(m.parameters(), lr=1e-3) if adam
           else optim.SGD(m.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4))
    lf = nn.CrossEntropyLoss()

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = lf(m(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    return (step, rng.standard_normal((64, 784)).astype(np.float32),
            rng.integers(0, 10, 64).astype(np.int64))


def _lstm() -> tuple[Callable[[], Any], np.ndarray, np.ndarray]:
    import graphc as gc
    from graphc import nn, optim

    from .workloads import char_lstm, char_lstm_step

    gc.manual_seed(0)
    rng = np.random.default_rng(0)
    return (char_lstm_step(nn, optim, char_lstm(nn)),
            rng.integers(0, 96, (32, 64)).astype(np.int64),
            rng.integers(0, 96, (32, 64)).astype(np.int64))


WORKLOADS: dict[str, tuple[Callable[[], Any], int]] = {
    "seed": (_seed, 200),
    "mlp_small": (lambda: _mlp(False), 50),
    "adam": (lambda: _mlp(True), 50),
    "lstm": (_lstm, 8),
}


def measure(name: str, rounds: int) -> dict[str, float]:
    """Median seconds per step of each path for one workload."""
    import graphc as gc

    make, k = WORKLOADS[name]
    step_a, x, y = make()
    step_b, _, _ = make()
    calls, single = gc.compile(step_a), gc.compile(step_b)
    # a batch per step, each its own array (as a data loader yields), and the same stacked
    xs = [x + np.float32(0) if x.dtype.kind == "f" else x.copy() for _ in range(k)]
    ys = [y + np.float32(0) if y.dtype.kind == "f" else y.copy() for _ in range(k)]
    xs_k, ys_k = np.stack(xs), np.stack(ys)
    calls(x, y)
    single.run(xs_k[:1], ys_k[:1])
    t_new, t_same, t_run = [], [], []
    for _ in range(rounds):
        t = time.perf_counter()
        for i in range(k):
            calls(xs[i], ys[i])
        t_new.append((time.perf_counter() - t) / k)
        t = time.perf_counter()
        for _ in range(k):
            calls(x, y)
        t_same.append((time.perf_counter() - t) / k)
        t = time.perf_counter()
        single.run(xs_k, ys_k)
        t_run.append((time.perf_counter() - t) / k)
    return {"k": k, "new": statistics.median(t_new), "same": statistics.median(t_same),
            "run": statistics.median(t_run)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.steps",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", choices=[[], *WORKLOADS], metavar="WORKLOAD",
                    help="workloads (default: all): " + ", ".join(WORKLOADS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args(argv)
    os.environ["GRAPHC_NUM_THREADS"] = str(a.threads)
    if a.threads == 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from graphc.codegen.hostinfo import describe_host

    print(describe_host())
    print(f"threads {a.threads}; medians of {a.rounds} rounds, microseconds per step")
    print(f"{'workload':<10} {'K':>4} {'calls, new batch':>17} {'calls, same batch':>18} "
          f"{'run':>10} {'new/run':>8} {'same/run':>9}")
    for name in a.workloads or list(WORKLOADS):
        r = measure(name, a.rounds)
        print(f"{name:<10} {r['k']:>4} {r['new'] * 1e6:>17.1f} {r['same'] * 1e6:>18.1f} "
              f"{r['run'] * 1e6:>10.1f} {r['new'] / r['run']:>8.2f} "
              f"{r['same'] / r['run']:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
