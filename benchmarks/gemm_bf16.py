"""bf16 GEMM microbenchmark: graphc's bf16 kernels (codegen/gemm_bf16.py) per ISA variant,
next to PyTorch's float32 and bf16 matmuls, in GFLOP/s.

``python -m benchmarks.gemm_bf16 [--threads 1|2] [--out f32|bf16] [--isa amx,generic]
[--blocks 9]`` prints the CPU model and its bf16-relevant ISA flags, then one row per shape:
mlp_large's forward products (``x @ W.T``), its input gradient (``g @ W``) and weight
gradients (``g.T @ x``: a transposed A), and the 1024 cube. Each variant the host can run is
compiled once (one module) and called through ctypes on bf16 bit patterns; with
``--threads 2`` through the two-thread pool's dispatch (``gemm_bf16_task``). PyTorch gets
the same thread count (``torch.set_num_threads``). Timed blocks of all contenders alternate
and the table shows medians, since the machine is shared and timings are noisy; with one
thread the clock is the calling thread's CPU time (``time.thread_time``: time other
processes take from this core does not count; everything, PyTorch included, runs in the
calling thread), with two it is wall time. PyTorch
returns a fresh result tensor each call where graphc writes into one buffer: at these sizes
that allocation is a few microseconds of a few hundred.
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import statistics
import time
from typing import Any

import numpy as np

SHAPES = [  # (label, M, K, N, layout): A is M x K, B is K x N; T = a transposed view
    ("fc1 x @ W1.T", 256, 784, 1024, "NT"),
    ("fc2 x @ W2.T", 256, 1024, 1024, "NT"),
    ("dX g @ W2", 256, 1024, 1024, "NN"),
    ("dX g @ W1", 256, 1024, 784, "NN"),
    ("dW2 g.T @ h", 1024, 256, 1024, "TN"),
    ("dW1 g.T @ x", 1024, 256, 784, "TN"),
    ("cube", 1024, 1024, 1024, "NN"),
]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, nearest even (NaN handling not needed for random data)."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def build(kerns: list[Any]) -> tuple[Any, dict, dict]:
    """The variants in one MCJIT module: (engine, gemm functions, task addresses)."""
    import llvmlite.binding as llvm
    from graphc.codegen import gemm_bf16 as G
    from graphc.codegen.llvm_objects import host_cpu, init_llvm, optimize

    init_llvm()
    name, feats = host_cpu()
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=name, features=feats, opt=3, codemodel="jitdefault")
    mod = llvm.parse_assembly(str(G.gemm_bf16_module(kerns)))
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    optimize(mod, tm)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    P, L = ctypes.c_void_p, ctypes.c_int64
    ft = ctypes.CFUNCTYPE(None, P, L, L, P, L, L, P, L, L, L, L, P)
    fns = {k: ft(engine.get_function_address(k.name)) for k in kerns}
    tasks = {k: engine.get_function_address(k.task_name) for k in kerns}
    return engine, fns, tasks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gemm_bf16")
    ap.add_argument("--threads", type=int, default=1, choices=(1, 2))
    ap.add_argument("--out", default="f32", choices=("f32", "bf16"))
    ap.add_argument("--isa", default="", help="comma-separated variants (default: all the "
                    "host runs)")
    ap.add_argument("--blocks", type=int, default=9)
    a = ap.parse_args(argv)
    import os

    os.environ["GRAPHC_NUM_THREADS"] = str(a.threads)
    import torch
    from graphc.codegen import gemm_bf16 as G
    from graphc.codegen.llvm_objects import host_cpu

    torch.set_num_threads(a.threads)
    feats = host_cpu()[1]
    best = G.bf16_isa(feats)
    flags = [f for f in ("avx2", "fma", "avx512f", "avx512bf16", "amx-tile", "amx-bf16")
             if f"+{f}" in feats]
    print(f"CPU: {cpu_model()} (LLVM: {host_cpu()[0]}); flags: {' '.join(flags)}; "
          f"best bf16 variant: {best}")
    isas = [i for i in (a.isa.split(",") if a.isa else G.ISAS)
            if G.ISAS.index(i) <= G.ISAS.index(best)]
    if "amx" in isas:
        from graphc.runtime.amx import ensure_amx

        ensure_amx()
    kerns = [G.Bf16Gemm(i, a.out, i != "generic" or "+avx512f" in feats) for i in isas]
    engine, fns, tasks = build(kerns)
    run2 = None
    if a.threads == 2:
        from graphc.runtime.pool import dispatch_address

        addr = dispatch_address()
        if not addr:
            raise SystemExit("the two-thread pool is not available here")
        run2 = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addr)
    print(f"threads {a.threads}, output {a.out}, GFLOP/s (medians of {a.blocks} blocks)")
    cols = [k.isa for k in kerns] + ["torch f32", "torch bf16"]
    print(f"{'shape':<14} {'M x K x N':<16} " + " ".join(f"{c:>11}" for c in cols))
    rng = np.random.default_rng(0)
    for label, m, k, n, lay in SHAPES:
        af = rng.standard_normal((k, m) if lay[0] == "T" else (m, k)).astype(np.float32)
        bf = rng.standard_normal((n, k) if lay[1] == "T" else (k, n)).astype(np.float32)
        A, B = to_bf16(af), to_bf16(bf)
        ta, tb = torch.from_numpy(af), torch.from_numpy(bf)
        if lay[0] == "T":
            A, ta = A.T, ta.T
        if lay[1] == "T":
            B, tb = B.T, tb.T
        ha, hb = ta.bfloat16(), tb.bfloat16()  # keeps the views' strides (preserve_format)
        runs: dict[str, Any] = {}
        keep = []
        for kern in kerns:
            out = np.empty((m, n), np.float32 if kern.out == "f32" else np.uint16)
            ws = int(G.workspace_bytes_bf16(m, n, k, kern.isa))
            work = np.zeros(2 * ws + 64, np.uint8)
            args = [A.ctypes.data, A.strides[0] // 2, A.strides[1] // 2, B.ctypes.data,
                    B.strides[0] // 2, B.strides[1] // 2, out.ctypes.data, n, m, n, k]
            keep += [out, work]
            if run2 is None:
                runs[kern.isa] = (lambda f=fns[kern], args=args, w=work.ctypes.data:
                                  f(*args, w))
            else:
                ctx = np.array(args + [work.ctypes.data, work.ctypes.data + ws], np.int64)
                keep.append(ctx)
                runs[kern.isa] = (lambda t=tasks[kern], c=ctx.ctypes.data: run2(t, c))
        runs["torch f32"] = lambda x=ta, y=tb: torch.matmul(x, y)
        runs["torch bf16"] = lambda x=ha, y=hb: torch.matmul(x, y)
        flops = 2.0 * m * n * k
        reps = max(3, int(2e8 / flops))
        times: dict[str, list[float]] = {c: [] for c in runs}
        for f in runs.values():
            f()
        clock = time.thread_time if a.threads == 1 else time.perf_counter
        for _ in range(a.blocks):
            for c, f in runs.items():
                t = clock()
                for _ in range(reps):
                    f()
                times[c].append((clock() - t) / reps)
        rates = {c: flops / statistics.median(v) / 1e9 for c, v in times.items()}
        print(f"{label:<14} {f'{m}x{k}x{n}':<16} "
              + " ".join(f"{rates[c]:>11.0f}" for c in cols), flush=True)
    del engine
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
