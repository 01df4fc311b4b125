"""``python -m benchmarks.vmath [--n N] [--blocks K]``: throughput of exp/log/tanh (f32).

Three loops over the same array, each a native ``out[i] = f(x[i])`` loop built with llvmlite
and optimised by the backend's pipeline, next to numpy (``out=``, no allocation):

- ``vmath``: the backend's inline IR routines (codegen/vmath.py), what compiled steps use;
- ``libm``: what the backend emitted before: ``llvm.exp``/``llvm.log`` intrinsics and
  ``tanhf`` calls, which LLVM scalarises into one libm call per lane;
- ``graphc``: the whole compiled function ``gc.compile(lambda x: x.exp())``, including the
  call and allocating the result.

Reports medians in Gelem/s (the machine is noisy: read ratios).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from graphc.codegen.cpu import host_target_machine, optimize
from graphc.codegen.llvm_util import F32, I64, declare, for_range, i64
from graphc.codegen.vmath import VMath
from llvmlite import ir

import graphc as gc

OPS = ("exp", "log", "tanh")


def native_loop(op: str, how: str) -> Any:
    """Compile ``out[i] = op(x[i])`` over f32 with the vmath routine or the libm path."""
    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [F32.as_pointer()] * 2 + [I64]), "f")
    for a in fn.args[:2]:
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block())
    with for_range(b, i64(0), fn.args[2]) as i:
        x = b.load(b.gep(fn.args[1], [i], inbounds=True))
        if how == "vmath":
            y = getattr(VMath(b, mod), op)(x)
        elif op == "tanh":
            y = b.call(declare(mod, "tanhf", F32, [F32]), [x])
        else:
            y = b.call(declare(mod, f"llvm.{op}.f32", F32, [F32]), [x])
        b.store(y, b.gep(fn.args[0], [i], inbounds=True))
    b.ret_void()
    tm = host_target_machine()
    m = llvm.parse_assembly(str(mod))
    m.triple, m.data_layout = tm.triple, str(tm.target_data)
    optimize(m, tm)
    ee = llvm.create_mcjit_compiler(m, tm)
    ee.finalize_object()
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        ee.get_function_address("f"))

    def run(x: np.ndarray, out: np.ndarray) -> None:
        f(out.ctypes.data, x.ctypes.data, len(x))

    run.keep = ee  # type: ignore[attr-defined]
    run.asm = tm.emit_assembly(m)  # type: ignore[attr-defined]
    return run


def _median_time(fn: Any, blocks: int, reps: int) -> float:
    ts = []
    for _ in range(blocks):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        ts.append((time.perf_counter() - t) / reps)
    return statistics.median(ts)


def _rates(op: str, xi: np.ndarray, out: np.ndarray, blocks: int) -> dict[str, float]:
    fv, fl = native_loop(op, "vmath"), native_loop(op, "libm")
    step = gc.compile(lambda t: getattr(t, op)(), example_args=(xi,))
    npf = getattr(np, op)
    cands = {"vmath": lambda: fv(xi, out), "libm": lambda: fl(xi, out),
             "graphc": lambda: step(xi), "numpy": lambda: npf(xi, out=out)}
    for f in cands.values():
        f()
    return {k: len(xi) / _median_time(f, blocks, 5) / 1e9 for k, f in cands.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.vmath")
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--blocks", type=int, default=9)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.uniform(-10, 10, a.n).astype(np.float32)
    inputs = {"exp": x, "log": np.abs(x) + np.float32(1e-3), "tanh": x}
    out = np.empty_like(x)
    print(f"{a.n} float32 elements, Gelem/s (median of {a.blocks} blocks)")
    print(f"{'op':<6} {'vmath':>8} {'libm':>8} {'graphc':>8} {'numpy':>8} {'vs libm':>8} "
          f"{'vs numpy':>9}")
    for op in OPS:
        rate = _rates(op, inputs[op], out, a.blocks)
        print(f"{op:<6} {rate['vmath']:>8.2f} {rate['libm']:>8.2f} {rate['graphc']:>8.2f} "
              f"{rate['numpy']:>8.2f} {rate['vmath'] / rate['libm']:>7.1f}x "
              f"{rate['vmath'] / rate['numpy']:>8.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
