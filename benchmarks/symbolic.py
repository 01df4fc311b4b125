"""Symbolic batch size vs a step compiled for the fixed shape (mlp_small), side by side.

``python -m benchmarks.symbolic``: the same model, optimizer state and data; one step compiled
with a symbolic batch dimension (the default), one with ``dynamic=False``. Timed blocks
alternate; the ratio symbolic/static above 1 is the price of not recompiling per batch size.
"""

from __future__ import annotations

import os
import statistics
import time


def main() -> int:
    os.environ.setdefault("GRAPHC_NUM_THREADS", "1")
    import numpy as np

    import graphc as gc
    from graphc import nn, optim

    gc.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 784)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    steps = {}
    for dynamic in (True, False):
        m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = optim.SGD(m.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
        lf = nn.CrossEntropyLoss()

        def step(a, b, m=m, opt=opt, lf=lf):
            opt.zero_grad()
            loss = lf(m(a), b)
            loss.backward()
            opt.step()
            return loss

        steps[dynamic] = gc.compile(step, example_args=(x, y), dynamic=dynamic)
    for f in steps.values():
        for _ in range(20):
            f(x, y)
    reps, times = 200, {True: [], False: []}
    for _ in range(9):
        for dyn, f in steps.items():
            t = time.perf_counter()
            for _ in range(reps):
                f(x, y)
            times[dyn].append((time.perf_counter() - t) / reps)
    sym, fix = statistics.median(times[True]), statistics.median(times[False])
    print(f"mlp_small step: symbolic B {sym * 1e6:.1f} us, fixed B=64 {fix * 1e6:.1f} us, "
          f"symbolic/fixed {sym / fix:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
