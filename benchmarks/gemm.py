"""GEMM microbenchmark: graphc's packed GEMM vs numpy's sgemm, side by side.

``python -m benchmarks.gemm [--threads N]`` times C = A @ B (and A @ B.T, the layout of a
Linear forward) at 256, 512 and 1024 and in the shapes of mlp_large's forward and backward
GEMMs and mlp_small's, alternating timed blocks between the two, and prints medians in GFLOP/s
and the ratio (above 1: graphc is faster). Both sides time ``(A @ B).sum()``, so that returning
a fresh multi-megabyte result array (a copy, not GEMM work) is not what is measured; the result
itself is checked once against numpy. The first line names the host: CPU model, LLVM's CPU
name, the ISA flags that pick graphc's kernels and the cache sizes the GEMM is blocked for.
numpy's BLAS gets the same thread count (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS are set before
numpy is imported). With two threads, OpenBLAS's workers keep spinning after each call and take
the second core from graphc's pool in the next block (the warm-up before each block only
partly helps): two-thread scaling is measured without a BLAS in the process by
``benchmarks.gemm_scaling``. Where PyTorch is installed, its matmul (MKL's sgemm in the x86
wheels: the GEMM the step benchmarks' PyTorch side runs) is timed the same way in a third
column, with the same thread count; ``--no-torch`` leaves it out.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from .timing import time_block


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gemm")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch's matmul column")
    a = ap.parse_args(argv)
    if "numpy" in sys.modules:
        print("note: numpy was imported before the thread count could be set")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    os.environ["GRAPHC_NUM_THREADS"] = str(a.threads)
    import numpy as np

    import graphc as gc

    rng = np.random.default_rng(0)
    shapes = [(256, 256, 256, False), (512, 512, 512, False), (1024, 1024, 1024, False),
              (256, 784, 1024, True),    # mlp_large layer 1 forward: x @ W1.T
              (256, 1024, 1024, True),   # layer 2 forward
              (256, 1024, 784, False),   # input gradient: g @ W1
              (1024, 256, 784, False),   # weight gradient: g.T @ x (as laid out here)
              (64, 784, 256, True),      # mlp_small forward: x @ W1.T
              (256, 64, 784, False)]     # mlp_small weight gradient (as laid out here)
    from graphc.codegen.hostinfo import describe_host

    torch = None
    if not a.no_torch:
        try:
            import torch
        except ImportError:
            pass
        else:
            torch.set_num_threads(a.threads)
    print(describe_host())
    print(f"threads {a.threads}")
    head = f"{'M x K x N':<18} {'layout':<6} {'graphc':>8} {'numpy':>8} {'ratio':>6}"
    if torch is not None:
        head += f" {'torch':>8} {'ratio':>6}"
    print(head + "  (GFLOP/s; ratio: graphc / other)")
    for m, k, n, nt in shapes:
        A = rng.standard_normal((m, k)).astype(np.float32)
        B = rng.standard_normal((n, k) if nt else (k, n)).astype(np.float32)
        W = gc.tensor(B)
        if nt:
            full = gc.compile(lambda x, W=W: x @ W.T, dynamic=False)
            f = gc.compile(lambda x, W=W: (x @ W.T).sum(), dynamic=False)
            g = lambda x, B=B: (x @ B.T).sum()  # noqa: E731
            tb = torch.from_numpy(B).T if torch is not None else None
            ref = A @ B.T
        else:
            full = gc.compile(lambda x, W=W: x @ W, dynamic=False)
            f = gc.compile(lambda x, W=W: (x @ W).sum(), dynamic=False)
            g = lambda x, B=B: (x @ B).sum()  # noqa: E731
            tb = torch.from_numpy(B) if torch is not None else None
            ref = A @ B
        np.testing.assert_allclose(full(A).numpy(), ref, rtol=2e-3, atol=2e-3)
        flops = 2.0 * m * n * k
        reps = max(3, int(2e9 / flops))
        tf, tn, tt = [], [], []
        ta = torch.from_numpy(A) if torch is not None else None
        for _ in range(a.blocks):
            # each block after a warm-up of its own library (``benchmarks.timing``): a
            # thread pool that spins after its last call (OpenBLAS's, ours, OpenMP's) would
            # otherwise hold the second core at the start of the other library's block
            tf.append(time_block(lambda f=f, A=A: f(A), reps))
            tn.append(time_block(lambda g=g, A=A: g(A), reps))
            if torch is not None:
                tt.append(time_block(lambda ta=ta, tb=tb: (ta @ tb).sum(), reps))
        gf, gn = flops / statistics.median(tf) / 1e9, flops / statistics.median(tn) / 1e9
        line = (f"{f'{m}x{k}x{n}':<18} {'NT' if nt else 'NN':<6} {gf:>8.1f} {gn:>8.1f} "
                f"{gf / gn:>6.2f}")
        if torch is not None:
            gt = flops / statistics.median(tt) / 1e9
            line += f" {gt:>8.1f} {gf / gt:>6.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
