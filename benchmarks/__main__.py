"""``python -m benchmarks [workload ...] [--threads N] [--blocks K]``

Workloads (``WORKLOADS`` below; all of them when none is named): seed, mlp_small, mlp_large,
infer, cnn, adam, resnet18, resnet18_imagenet, resnet50, convnext, vit, lstm, gpt, gpt_long
(only the named ones are built and compiled).

Runs each workload in graphc and PyTorch eager side by side in one process: timed blocks
alternate between the systems, and the table reports medians of per-step times and the ratio
``torch / graphc`` (above 1: graphc is faster), with GFLOP/s for GEMM-bound steps as a
percentage of the sgemm rate measured at the start of the run (numpy's BLAS at 1024^3 with the
same thread count). Every system gets the same threads; with ``--threads 1`` the whole process
is pinned to one CPU, so runtimes with their own thread pools (XLA) cannot use more.
Each timed block follows an untimed warm-up of the same system (``benchmarks.timing``), so it
does not pay for the other system's threads still spinning. Machines are noisy: read medians
and ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

from .timing import calibrate as _calibrate
from .timing import time_block as _time_block

# Every workload ``workloads.all_workloads`` builds, with what it measures: listed by
# ``--help`` and checked before anything is built (building compiles every step, which takes
# seconds, and a misspelt name used to end in "built and compiled 0 workloads"). A test keeps
# this table and ``all_workloads`` in step.
WORKLOADS = {
    "seed": "Linear(1, 1), L1 loss, SGD: the README's example; per-call overhead",
    "mlp_small": "MLP 784-256-10, cross-entropy, SGD with momentum, batch 64",
    "mlp_large": "MLP 784-1024-1024-10, batch 256: GEMM-bound",
    "infer": "mlp_small's forward pass only, under inference_mode",
    "cnn": "two conv (8, 16 channels) + max-pool layers and a Linear, 28x28 images, batch 64",
    "adam": "mlp_small with Adam",
    "resnet18": "ResNet-18 (BasicBlocks, BatchNorm, widths 16-128), 1x64x64 images, batch 32, "
                "SGD momentum + weight decay, cosine lr schedule",
    "resnet18_imagenet": "torchvision's ResNet-18 (widths 64-512, 7x7 stride-2 stem, 3x3 "
                         "max-pool, 1000 classes), 3x224x224 images, batch 8, trained as "
                         "resnet18",
    "resnet50": "torchvision's ResNet-50 (bottleneck blocks 3-4-6-3, widths 64-512 x4, the "
                "ImageNet stem, 1000 classes), 3x224x224 images, batch 8, trained as resnet18",
    "convnext": "ConvNeXt (dims 96-768, depths 2-2-2-1: 7x7 depthwise convolutions, "
                "channels-last LayerNorm and MLP, layer scale), 3x224x224 images, batch 8, "
                "AdamW",
    "vit": "ViT-Tiny's width (192, 3 heads, 4 blocks, timm's qkv unbind, SDPA), 16x16 "
           "patches of 3x224x224 images, batch 16, AdamW",
    "lstm": "character LSTM language model: embedding 64, 2-layer LSTM hidden 256, batch 32, "
            "length 64, Adam, clip_grad_norm_",
    "gpt": "examples/gpt.py's training step: 2 layers, n_embd 64, 2 heads, block 32, batch 16, "
           "AdamW with two groups, clip_grad_norm_, cosine lr",
    "gpt_long": "the gpt step on 256 positions, batch 8: causal attention a third of the work",
}


def _epilog() -> str:
    width = max(map(len, WORKLOADS))
    return "workloads (default: all):\n" + "\n".join(
        f"  {name:<{width}}  {what}" for name, what in WORKLOADS.items())


def build_parser() -> argparse.ArgumentParser:
    """The command line; ``--help`` lists the workloads with what each measures."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time graphc against PyTorch eager (and torch.compile, JAX when present) "
                    "on the same workloads, side by side in one process.",
        epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                    help="workloads to run (default: all): " + ", ".join(WORKLOADS))
    ap.add_argument("--threads", type=int, default=1,
                    help="threads for every system (default 1: the process is pinned to one "
                         "CPU)")
    ap.add_argument("--blocks", type=int, default=7,
                    help="timed blocks per system and workload (default 7; medians reported)")
    ap.add_argument("--torch-compile", action="store_true",
                    help="also time torch.compile (default mode) on each PyTorch step")
    ap.add_argument("--write", metavar="FILE", help="append the table to FILE (markdown)")
    ap.add_argument("--no-jax", action="store_true", help="skip JAX even when installed")
    ap.add_argument("--autocast", choices=["bf16"], default=None,
                    help="run the training steps' forward and loss under autocast "
                         "(graphc's and PyTorch's, bfloat16); JAX is skipped")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check the arguments; unknown workloads are a usage error (exit status 2)."""
    ap = build_parser()
    a = ap.parse_args(argv)
    unknown = [w for w in a.workloads if w not in WORKLOADS]
    if unknown:
        ap.error(f"workload: expected one or more of {', '.join(WORKLOADS)}, got "
                 f"{', '.join(map(repr, unknown))}")
    if a.threads < 1:
        ap.error(f"--threads: expected a positive number of threads, got {a.threads}")
    if a.blocks < 1:
        ap.error(f"--blocks: expected a positive number of timed blocks, got {a.blocks}")
    return a


def _sgemm_rate() -> float:
    """Best-of-5 GFLOP/s of numpy's sgemm at 1024^3 (the reference peak for the table)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        a @ a
        best = max(best, 2 * 1024**3 / (time.perf_counter() - t) / 1e9)
    return best


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    # the same thread count for every system (set before numpy/torch/jax are imported)
    os.environ["GRAPHC_NUM_THREADS"] = str(a.threads)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    if a.threads == 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ.setdefault("XLA_FLAGS", f"--xla_cpu_multi_thread_eigen={str(a.threads > 1).lower()}"
                          f" intra_op_parallelism_threads={a.threads}")
    from .workloads import AUTOCAST, all_workloads

    if a.autocast:
        AUTOCAST["dtype"] = "bfloat16"
        a.no_jax = True  # the JAX steps have no mixed-precision form
    try:
        import torch

        torch.set_num_threads(a.threads)
    except ImportError:
        torch = None
    print(f"machine: {platform.processor() or platform.machine()}, python "
          f"{platform.python_version()}, torch {getattr(torch, '__version__', 'absent')}, "
          f"threads {a.threads}" + (f", autocast {a.autocast}" if a.autocast else ""))
    from graphc.codegen.hostinfo import describe_host

    print(describe_host())
    peak_rate = _sgemm_rate()
    print(f"reference peak: numpy sgemm 1024^3 = {peak_rate:.1f} GFLOP/s on {a.threads} "
          f"thread(s)")
    t0 = time.perf_counter()
    wls = [w for w in all_workloads(torch, a.workloads)
           if not a.workloads or w.name in a.workloads]
    missing = sorted(set(a.workloads) - {w.name for w in wls})
    if missing or not wls:  # WORKLOADS lists one that this build cannot make (no Adam?)
        print(f"python -m benchmarks: error: workload: {', '.join(missing) or 'all'} could "
              f"not be built here; built: {', '.join(w.name for w in wls) or 'none'}",
              file=sys.stderr)
        return 1
    print(f"built and compiled {len(wls)} workloads in {time.perf_counter() - t0:.2f} s")
    from . import jax_workloads

    jax_steps = (jax_workloads.steps({w.name for w in wls})
                 if (not a.no_jax and jax_workloads.available()) else {})
    head = (f"{'workload':<10} {'graphc us':>10} {'torch us':>10} {'ratio':>7} {'GFLOP/s':>8} "
            f"{'% sgemm':>7}" + (f" {'t.compile us':>12} {'ratio':>6} {'compile s':>9}"
                                if a.torch_compile else "")
            + (f" {'jax us':>8} {'ratio':>6}" if jax_steps else ""))
    print(head)
    rows = []
    for w in wls:
        tc, tc_compile = None, float("nan")
        if a.torch_compile and w.torch_step is not None and torch is not None:
            tc = torch.compile(w.torch_step)
            t1 = time.perf_counter()
            tc()
            tc_compile = time.perf_counter() - t1
        for _ in range(3):
            w.graphc_step()
            if w.torch_step:
                w.torch_step()
        ng = _calibrate(w.graphc_step)
        nt = _calibrate(w.torch_step) if w.torch_step else 0
        nc = _calibrate(tc) if tc is not None else 0
        jx = jax_steps.get(w.name)
        if jx is not None:
            for _ in range(3):
                jx()
        nj = _calibrate(jx) if jx is not None else 0
        gs, ts, cs, js = [], [], [], []
        for _ in range(a.blocks):
            gs.append(_time_block(w.graphc_step, ng))
            if w.torch_step:
                ts.append(_time_block(w.torch_step, nt))
            if tc is not None:
                cs.append(_time_block(tc, nc))
            if jx is not None:
                js.append(_time_block(jx, nj))
        g = statistics.median(gs)
        t = statistics.median(ts) if ts else float("nan")
        c = statistics.median(cs) if cs else float("nan")
        j = statistics.median(js) if js else float("nan")
        gf = w.flops / g / 1e9 if w.flops else float("nan")
        peak = 100 * gf / peak_rate if w.flops else float("nan")
        row = (f"{w.name:<10} {g * 1e6:>10.1f} {t * 1e6:>10.1f} {t / g:>7.2f} {gf:>8.1f} "
               f"{peak:>7.1f}" + (f" {c * 1e6:>12.1f} {c / g:>6.2f} {tc_compile:>9.1f}"
                                  if a.torch_compile else "")
               + (f" {j * 1e6:>8.1f} {j / g:>6.2f}" if jax_steps else ""))
        print(row)
        rows.append(row)
    pool_line = _pool_line()
    if pool_line:
        print(pool_line)
        rows.append(pool_line)
    if a.write:
        with open(a.write, "a") as f:
            f.write(f"\n```\n{head}\n" + "\n".join(rows) + "\n```\n")
    return 0


def _pool_line() -> str | None:
    """How graphc's second thread fared (``graphc.runtime.pool.stats``): two-thread timings on
    a shared machine move with it, so the table says how many dispatches found the worker late
    (its core taken by another process or the hypervisor) and how many ran on one thread
    because of that."""
    from graphc.runtime import pool

    st = pool.stats()
    if st is None:
        return None
    return (f"graphc pool: {st['parallel']} two-thread dispatches, {st['late']} with the worker "
            f"late ({st['late_ns'] / 1e6:.1f} ms waited), {st['held']} run on one thread in "
            f"{st['holds']} holds")


if __name__ == "__main__":
    raise SystemExit(main())
