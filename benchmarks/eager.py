"""Eager mode next to PyTorch eager: a tutorial training loop end to end, and single ops.

``python -m benchmarks.eager [--steps N] [--repeat R]``

The loop is PyTorch's "Learning PyTorch with Examples" polynomial fit written once against
either library: ``y = sin(x)`` on 2000 points fitted by ``a + b x + c x^2 + d x^3``, the
four 0-d parameters updated by hand under ``no_grad`` and their ``.grad`` set to None,
``--steps`` steps (default 2000, as in the tutorial). The per-op table times one call of
small ops on 2000-element float32 tensors, and one ``backward()`` of the loop's loss graph.
Both libraries run in this process, alternating, one thread each; medians of ``--repeat``.
The host CPU heads the output.

Eager graphc builds an IR node for every op, runs the op table's reference implementation
on it (numpy) and differentiates through the same VJP rules the compiler uses, all in
Python; the figures here are what that costs next to PyTorch's C++ dispatch.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import timeit
from typing import Any


def poly_fit(lib: Any, steps: int) -> tuple[float, float]:
    """Seconds for ``steps`` steps of the tutorial loop in ``lib``, and the final loss."""
    x = lib.linspace(-math.pi, math.pi, 2000)
    y = lib.sin(x)
    lib.manual_seed(0)
    a, b, c, d = (lib.randn((), requires_grad=True) for _ in range(4))
    lr = 1e-6
    loss = None
    t0 = time.perf_counter()
    for _ in range(steps):
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        loss = (y_pred - y).pow(2).sum()
        loss.backward()
        with lib.no_grad():
            for p in (a, b, c, d):
                p -= lr * p.grad
                p.grad = None
    return time.perf_counter() - t0, float(loss.item())


def op_cases(lib: Any) -> dict[str, Any]:
    """name -> a zero-argument call of ``lib`` doing that op once."""
    x = lib.linspace(-3.0, 3.0, 2000)
    y = lib.linspace(3.0, -3.0, 2000)
    w = lib.randn((), requires_grad=True)

    def backward() -> None:
        loss = ((w * x + w) ** 2).sum()
        loss.backward()
        w.grad = None

    return {"x * y": lambda: x * y, "w * x (w 0-d, requires grad)": lambda: w * x,
            "x ** 2": lambda: x ** 2, "x.exp()": lambda: x.exp(),
            "x.sum()": lambda: x.sum(), "backward of ((w x + w)^2).sum()": backward}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.eager")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    import torch
    from graphc.codegen.hostinfo import describe_host

    import graphc as gc

    torch.set_num_threads(1)
    print(describe_host())
    print(f"torch {torch.__version__}, one thread; medians of {a.repeat}")
    runs: dict[str, list[float]] = {"graphc": [], "torch": []}
    losses = {}
    for _ in range(a.repeat):
        for name, lib in (("torch", torch), ("graphc", gc)):
            sec, losses[name] = poly_fit(lib, a.steps)
            runs[name].append(sec)
    g, t = statistics.median(runs["graphc"]), statistics.median(runs["torch"])
    print(f"\npolynomial fit, {a.steps} steps: graphc {g:.3f} s, PyTorch {t:.3f} s "
          f"(graphc {g / t:.1f}x the time); final loss graphc {losses['graphc']:.4f}, "
          f"PyTorch {losses['torch']:.4f}")
    print(f"\n{'op (2000 floats)':<38} {'graphc us':>10} {'torch us':>9} {'ratio':>6}")
    gcases, tcases = op_cases(gc), op_cases(torch)
    for name in gcases:
        per = {}
        for lib, fn in (("graphc", gcases[name]), ("torch", tcases[name])):
            n = 2000
            per[lib] = statistics.median(timeit.repeat(fn, number=n, repeat=a.repeat)) / n
        print(f"{name:<38} {per['graphc'] * 1e6:>10.1f} {per['torch'] * 1e6:>9.1f} "
              f"{per['graphc'] / per['torch']:>6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
