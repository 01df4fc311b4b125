"""``python -m benchmarks.versions REV [--rounds N]``: a step's per-call time, this tree vs REV.

Code versions cannot share one process, so this alternates processes: each round runs a small
timing script once against this working tree and once against a ``git worktree`` of REV (in
alternating order), and the ratio of the medians is reported. On a shared, noisy machine the
ratio is what to read, not the absolute times. Workloads: the seed step (``Linear(1, 1)``,
L1 loss, SGD: almost all of its time is the Python call boundary and its guards) and the
``mlp_small`` step (SGD with momentum).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import os, sys, time, statistics
os.environ["GRAPHC_NUM_THREADS"] = "1"
sys.path.insert(0, sys.argv[1])
import numpy as np
import graphc as gc
from graphc import nn, optim

def seed():
    gc.manual_seed(0)
    m = nn.Linear(1, 1); lf = nn.L1Loss(); opt = optim.SGD(m.parameters(), lr=0.01)
    x = np.arange(0, 1, 0.025, dtype=np.float32)[:, None]; y = 0.7 * x + 0.3
    @gc.compile
    def step(x, y):
        loss = lf(m(x), y); opt.zero_grad(); loss.backward(); opt.step(); return loss
    return step, (x, y), 20000

def mlp_small():
    gc.manual_seed(0)
    m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    lf = nn.CrossEntropyLoss(); opt = optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 784)).astype(np.float32); y = rng.integers(0, 10, 64)
    @gc.compile
    def step(x, y):
        opt.zero_grad(); loss = lf(m(x), y); loss.backward(); opt.step(); return loss
    return step, (x, y), 300

out = []
for make in (seed, mlp_small):
    step, args, n = make()
    for _ in range(50):
        step(*args)
    times = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            step(*args)
        times.append((time.perf_counter() - t) / n)
    out.append(statistics.median(times))
print(" ".join(f"{t:.9f}" for t in out))
'''


def _run(src: Path) -> list[float]:
    env = dict(os.environ, GRAPHC_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(src)], capture_output=True,
                       text=True, env=env, check=True)
    return [float(v) for v in r.stdout.split()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", help="the git revision to compare with (e.g. HEAD~3)")
    ap.add_argument("--rounds", type=int, default=5, help="process pairs (default 5)")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error(f"--rounds: expected a positive count, got {a.rounds}")
    with tempfile.TemporaryDirectory() as tmp:
        wt = Path(tmp) / "rev"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(wt), a.rev],
                       check=True, capture_output=True)
        try:
            # the old tree's packages are found through the same package-dir mapping
            for sub in ("passes", "codegen"):
                if not (wt / "graphc" / sub).exists():
                    (wt / "graphc" / sub).symlink_to(wt / sub)
            new: list[list[float]] = []
            old: list[list[float]] = []
            for i in range(a.rounds):
                order = [(ROOT, new), (wt, old)] if i % 2 == 0 else [(wt, old), (ROOT, new)]
                for src, acc in order:
                    acc.append(_run(src))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)],
                           check=False, capture_output=True)
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"host: {cpu}, {os.cpu_count()} CPUs; one thread; {a.rounds} process pairs")
    print(f"{'workload':<10} {'this tree us':>13} {a.rev + ' us':>14} {'ratio':>7}")
    for j, name in enumerate(("seed", "mlp_small")):
        n = statistics.median(r[j] for r in new)
        o = statistics.median(r[j] for r in old)
        print(f"{name:<10} {n * 1e6:>13.2f} {o * 1e6:>14.2f} {n / o:>7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
