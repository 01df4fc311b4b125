"""One process of a hostile data-parallel run (``tests/test_distributed_hostile.py``).

``python tests/_ddp_hostile.py OUT_PREFIX MODE``: ``nan`` gives rank 1 a NaN batch at step 1
(with ``check_finite``), ``index`` gives rank 0 an out-of-range class at step 1, ``widths``
builds a wider model on rank 1. Each rank writes what it saw to ``OUT_PREFIX.<rank>.json``.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import graphc as gc
import graphc.distributed as dist
from graphc import nn, optim


def main(out: str, mode: str) -> None:
    dist.init(timeout=60)
    r = dist.rank()
    report: dict = {"rank": r, "errors": []}
    gc.manual_seed(0)
    width = 16 if (mode == "widths" and r == 1) else 8
    net = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 3))
    try:
        model = dist.DistributedDataParallel(net)
    except ValueError as e:
        report["errors"].append([-1, type(e).__name__, str(e)])
        json.dump(report, open(f"{out}.{r}.json", "w"))
        return
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lf = nn.CrossEntropyLoss()

    @gc.compile(check_finite=mode == "nan")
    def step(x, y):
        opt.zero_grad()
        loss = lf(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(r)
    snapshots = []
    for k in range(4):
        x = rng.standard_normal((6, 4)).astype(np.float32)
        y = rng.integers(0, 3, 6)
        if k == 1 and mode == "nan" and r == 1:
            x[2, 1] = np.nan
        if k == 1 and mode == "index" and r == 0:
            y[3] = 7
        before = [p.numpy().copy() for p in net.parameters()]
        try:
            step(x, y)
        except Exception as e:  # noqa: BLE001 - reported to the test
            report["errors"].append([k, type(e).__name__, str(e)])
            unchanged = all(np.array_equal(b, p.numpy()) for b, p in zip(before, net.parameters()))
            report.setdefault("unchanged", []).append(unchanged)
        snapshots.append(float(sum(float(np.abs(p.numpy()).sum()) for p in net.parameters())))
    report["checksums"] = snapshots
    json.dump(report, open(f"{out}.{r}.json", "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
