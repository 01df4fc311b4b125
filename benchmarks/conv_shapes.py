"""``python -m benchmarks.conv_shapes [--threads 1,2] [--batch 32] [--size 64] [--blocks 5]
[--widths 16,32,64,128] [--net resnet18|resnet50]``

Every distinct convolution of the ``resnet18`` workload (``benchmarks.resnet``: ResNet-18 with
widths 16-32-64-128 on one-channel ``size`` x ``size`` images; with ``--net resnet50``,
torchvision's ResNet-50 on three-channel images), timed in graphc and in PyTorch
per direction: forward, input gradient and weight gradient, printed as GFLOP/s (2 FLOPs per
multiply-add; every direction has the forward's multiply-adds) with the ratio
``graphc / torch`` of the rates (above 1: graphc is faster), and the host's CPU.

How it measures. graphc: one compiled function per shape and direction, each of which is a
single kernel (check with ``fn.ir("fused")``): the forward is ``F.conv2d(x, w)`` under
``no_grad``; the input gradient is ``F.conv_transpose2d(gy, w)`` under ``no_grad``, which is
the ``conv2d_input_grad`` node the autodiff pass emits for a training step; the weight
gradient is ``zero_grad(); (F.conv2d(x, w) * gy).sum().backward()``, which dead-code
elimination reduces to the one ``conv2d_weight_grad`` kernel writing ``w.grad`` (the forward
convolution is dropped because the loss is not returned). The times are wall-clock times of
calling the compiled function, so they include its call overhead (about a microsecond) and,
for the forward and input gradient, allocating the new array the result is written into
(graphc's kernels write a result of 128 KiB or more straight into the array the call hands
back): the same work a PyTorch call does when it allocates its output. PyTorch:
``F.conv2d`` under ``no_grad`` for the forward and ``torch.ops.aten.convolution_backward``
with the output mask selecting only the input or only the weight gradient, which is what
autograd calls in a training step.

Each thread count runs in a child process (graphc's and PyTorch's thread pools are sized when
they start): ``GRAPHC_NUM_THREADS``, ``torch.set_num_threads`` and the BLAS variables all get
the same count, and with one thread the child is pinned to one CPU. Timed blocks alternate
between the systems, each after an untimed warm-up of the same system
(``benchmarks.timing``: PyTorch's OpenMP threads spin after its calls and would otherwise
share the second CPU with graphc's next block); the table shows medians. The stem's input
gradient is not timed: the images need no gradient, so a training step never computes it.
The last line estimates the convolution time of one training step: every convolution of the
net (repeats included) in all the directions the step runs. No numbers are asserted anywhere;
shared machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .timing import calibrate, time_block

ROOT = Path(__file__).resolve().parents[1]
DIRECTIONS = ("forward", "input grad", "weight grad")

Shape = tuple[int, int, int, int, int, int, int]  # cin, cout, h, w, kernel, stride, padding


NETS = ("resnet18", "resnet50")


def distinct_shapes(size: int, widths: tuple[int, ...] | None = None, net: str = "resnet18"
                    ) -> list[tuple[Shape, int]]:
    """The ResNet's convolutions on ``size`` x ``size`` inputs (``widths``: the four stages'
    channels, the workload's by default; ``net="resnet50"``: torchvision's ResNet-50,
    bottleneck blocks on three-channel images, widths 64-512 by default), each distinct
    shape once with how many times a forward pass runs it, in forward order."""
    from .resnet import RESNET50, WIDTHS, conv_shapes

    if net == "resnet50":
        cfg = {**RESNET50, "widths": widths or RESNET50["widths"]}
        every = conv_shapes(size, **cfg)
    else:
        every = conv_shapes(size, widths or WIDTHS)
    counts = Counter(every)
    return [(s, counts[s]) for s in dict.fromkeys(every)]


def _out_hw(shape: Shape) -> tuple[int, int]:
    _, _, h, w, k, s, p = shape
    return (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1


def _graphc_fns(shape: Shape, x: np.ndarray, gy: np.ndarray, w0: np.ndarray
                ) -> dict[str, Callable[[], Any]]:
    """The three single-kernel compiled functions for ``shape`` (see the module docstring)."""
    import graphc as gc
    import graphc.nn.functional as F
    from graphc import nn, optim

    _, _, h, _, k, s, p = shape
    holder = nn.Module()
    holder.w = nn.Parameter(gc.from_numpy(w0.copy()))
    w = holder.w
    opt = optim.SGD([w], lr=0.0)
    oh, _ = _out_hw(shape)
    opad = h - ((oh - 1) * s - 2 * p + k)

    @gc.compile(example_args=(x,))
    def fwd(a: Any) -> Any:
        with gc.no_grad():
            return F.conv2d(a, w, stride=s, padding=p)

    @gc.compile(example_args=(gy,))
    def dgrad(g: Any) -> Any:
        with gc.no_grad():
            return F.conv_transpose2d(g, w, stride=s, padding=p, output_padding=opad)

    @gc.compile(example_args=(x, gy))
    def wgrad(a: Any, g: Any) -> None:
        opt.zero_grad()
        (F.conv2d(a, w, stride=s, padding=p) * g).sum().backward()

    return {"forward": lambda: fwd(x), "input grad": lambda: dgrad(gy),
            "weight grad": lambda: wgrad(x, gy)}


def _torch_fns(torch: Any, shape: Shape, x: np.ndarray, gy: np.ndarray, w0: np.ndarray
               ) -> dict[str, Callable[[], Any]]:
    """PyTorch's forward and its two backward kernels, as autograd calls them."""
    _, _, _, _, _, s, p = shape
    tx, tg, tw = torch.from_numpy(x), torch.from_numpy(gy), torch.from_numpy(w0)
    conv_bwd = torch.ops.aten.convolution_backward
    args = (tg, tx, tw, None, [s, s], [p, p], [1, 1], False, [0, 0], 1)

    def fwd() -> Any:
        with torch.no_grad():
            return torch.nn.functional.conv2d(tx, tw, stride=s, padding=p)

    return {"forward": fwd,
            "input grad": lambda: conv_bwd(*args, [True, False, False]),
            "weight grad": lambda: conv_bwd(*args, [False, True, False])}


def measure(batch: int, size: int, blocks: int, widths: tuple[int, ...] | None = None,
            net: str = "resnet18") -> list[dict[str, Any]]:
    """Time every shape and direction in this process (threads already configured)."""
    try:
        import torch
    except ImportError:
        torch = None
    rows = []
    rng = np.random.default_rng(0)
    for idx, (shape, count) in enumerate(distinct_shapes(size, widths, net)):
        cin, cout, h, w_, k, _, _ = shape
        oh, ow = _out_hw(shape)
        x = rng.standard_normal((batch, cin, h, w_)).astype(np.float32)
        gy = rng.standard_normal((batch, cout, oh, ow)).astype(np.float32)
        w0 = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cout * k * k))
              ).astype(np.float32)
        t0 = time.perf_counter()
        gfns = _graphc_fns(shape, x, gy, w0)
        compile_s = time.perf_counter() - t0
        tfns = _torch_fns(torch, shape, x, gy, w0) if torch is not None else {}
        flops = 2.0 * batch * cin * cout * k * k * oh * ow
        for d in DIRECTIONS:
            if idx == 0 and d == "input grad":
                continue  # the images need no gradient: a training step never runs it
            systems = {"graphc": gfns[d]}
            if d in tfns:
                systems["torch"] = tfns[d]
            for fn in systems.values():
                for _ in range(2):
                    fn()
            reps = {name: calibrate(fn, most=10000) for name, fn in systems.items()}
            times: dict[str, list[float]] = {name: [] for name in systems}
            for _ in range(blocks):
                for name, fn in systems.items():
                    times[name].append(time_block(fn, reps[name]))
            med = {name: statistics.median(ts) for name, ts in times.items()}
            rows.append({"shape": list(shape), "count": count, "direction": d, "flops": flops,
                         "seconds": med, "compile_s": compile_s})
    return rows


def _child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["GRAPHC_NUM_THREADS"] = str(threads)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def child(threads: int, batch: int, size: int, blocks: int,
          widths: tuple[int, ...] | None = None, net: str = "resnet18") -> int:
    """Measure at ``threads`` threads (environment set by the parent); print JSON."""
    if threads == 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    try:
        import torch

        torch.set_num_threads(threads)
        version = torch.__version__
    except ImportError:
        version = "absent"
    rows = measure(batch, size, blocks, widths, net)
    print(json.dumps({"threads": threads, "torch": version, "rows": rows}))
    return 0


def _label(shape: list[int]) -> str:
    cin, cout, h, w, k, s, p = shape
    return f"{cin:>3}->{cout:<3} {h}x{w} k{k} s{s} p{p}"


def report(results: list[dict[str, Any]]) -> str:
    """The table: one row per shape and direction, a column group per thread count."""
    heads = "".join(f" | {r['threads']}t graphc  torch  ratio" for r in results)
    lines = [f"{'shape (cin->cout HxW kernel stride pad)':<34} {'n':>2} {'direction':<11}{heads}",
             "(GFLOP/s; ratio = graphc / torch rate, above 1: graphc faster)"]
    by_key = [{(tuple(row["shape"]), row["direction"]): row for row in r["rows"]}
              for r in results]
    totals = [{"graphc": 0.0, "torch": 0.0} for _ in results]
    for key in by_key[0]:
        shape, d = key
        row0 = by_key[0][key]
        cells = []
        for i, rows in enumerate(by_key):
            row = rows[key]
            sec = row["seconds"]
            g = row["flops"] / sec["graphc"] / 1e9
            t = row["flops"] / sec["torch"] / 1e9 if "torch" in sec else float("nan")
            for name in sec:
                totals[i][name] += row["count"] * sec[name]
            cells.append(f" | {g:>10.1f} {t:>6.1f} {g / t:>6.2f}")
        lines.append(f"{_label(list(shape)):<34} {row0['count']:>2} {d:<11}" + "".join(cells))
    lines.append("convolution time of one training step (ms, every conv and direction it runs):")
    lines.append("  " + "; ".join(
        f"{r['threads']} thread(s): graphc {1e3 * tot['graphc']:.1f}, torch "
        f"{1e3 * tot['torch']:.1f}" for r, tot in zip(results, totals, strict=True)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.conv_shapes",
                                 description=__doc__.splitlines()[3].strip(),
                                 epilog="See the module docstring for how each direction is "
                                        "measured.")
    ap.add_argument("--threads", default="1,2",
                    help="comma-separated thread counts, one child process each (default 1,2)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    ap.add_argument("--size", type=int, default=64, help="input height and width (default 64)")
    ap.add_argument("--blocks", type=int, default=5,
                    help="timed blocks per system, shape and direction (default 5; medians)")
    ap.add_argument("--widths", default=None,
                    help="the four stages' channels, comma-separated (default the workload's "
                         "16,32,64,128; torchvision's ResNet-18 has 64,128,256,512)")
    ap.add_argument("--net", choices=NETS, default="resnet18",
                    help="whose convolutions: the resnet18 workload's (default) or "
                         "torchvision's ResNet-50 (bottleneck blocks; try --batch 8 --size "
                         "224)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        threads = [int(t) for t in a.threads.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--threads: expected comma-separated integers, got {a.threads!r}")
    if not threads or min(threads) < 1:
        ap.error(f"--threads: expected positive thread counts, got {a.threads!r}")
    if min(a.batch, a.size, a.blocks) < 1:
        ap.error("--batch, --size and --blocks must be positive")
    widths = None
    if a.widths is not None:
        try:
            widths = tuple(int(w) for w in a.widths.split(","))
        except ValueError:
            widths = ()
        if len(widths) != 4 or min(widths) < 1:
            ap.error(f"--widths: expected four positive channel counts, got {a.widths!r}")
    if a.child is not None:
        return child(a.child, a.batch, a.size, a.blocks, widths, a.net)
    from .compile_time import host_cpu
    from .resnet import RESNET50, WIDTHS

    print(f"host: {host_cpu()}")
    default = RESNET50["widths"] if a.net == "resnet50" else WIDTHS
    print(f"{a.net} convolutions, widths {','.join(map(str, widths or default))}, batch "
          f"{a.batch}, {a.size}x{a.size} inputs, float32")
    results = []
    for n in threads:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.conv_shapes", "--child", str(n), "--batch",
             str(a.batch), "--size", str(a.size), "--blocks", str(a.blocks), "--net", a.net]
            + ([] if widths is None else ["--widths", ",".join(map(str, widths))]),
            capture_output=True, text=True, cwd=ROOT, env=_child_env(n), check=False)
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return proc.returncode
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{n} thread(s): torch {res['torch']}, measured in "
              f"{time.perf_counter() - t0:.0f} s")
        results.append(res)
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
