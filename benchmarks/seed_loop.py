"""The seed's whole 200-epoch loop (train step, then the test loss under inference_mode, each
epoch, with model.train()/model.eval() switches), end to end, graphc vs PyTorch eager.

``python -m benchmarks.seed_loop``
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

    X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
    Y = (0.7 * X + 0.3).astype(np.float32)
    xtr, ytr, xte, yte = X[:40], Y[:40], X[40:], Y[40:]
    model = nn.Linear(1, 1)
    lf = nn.L1Loss()
    opt = optim.SGD(model.parameters(), lr=0.01)

    @gc.compile(example_args=(xtr, ytr))
    def train_step(x, y):
        loss = lf(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    @gc.compile(example_args=(xte, yte))
    def test_step(x, y):
        with gc.inference_mode():
            return lf(model(x), y)

    def graphc_loop() -> None:
        for _ in range(200):
            model.train()
            train_step(xtr, ytr)
            model.eval()
            test_step(xte, yte)

    runs = {"graphc": graphc_loop}
    try:
        import torch

        torch.set_num_threads(1)
        tm, tl = torch.nn.Linear(1, 1), torch.nn.L1Loss()
        to = torch.optim.SGD(tm.parameters(), lr=0.01)
        t_xtr, t_ytr, t_xte, t_yte = map(torch.from_numpy, (xtr, ytr, xte, yte))

        def torch_loop() -> None:
            for _ in range(200):
                tm.train()
                loss = tl(tm(t_xtr), t_ytr)
                to.zero_grad()
                loss.backward()
                to.step()
                tm.eval()
                with torch.inference_mode():
                    tl(tm(t_xte), t_yte)

        runs["torch"] = torch_loop
    except ImportError:
        pass
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(3):
        for f in runs.values():
            f()
    for _ in range(15):
        for k, f in runs.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    g = statistics.median(times["graphc"])
    line = f"seed 200-epoch loop: graphc {g * 1e3:.3f} ms"
    if "torch" in times:
        t = statistics.median(times["torch"])
        line += f", PyTorch eager {t * 1e3:.2f} ms, ratio {t / g:.1f}"
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
