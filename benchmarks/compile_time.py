"""Compile time: how long graphc takes to turn a training step into native code, where that
time goes, and how long torch.compile takes on the same step.

``python -m benchmarks.compile_time [--workloads seed,mlp_small,cnn,resnet18,gpt]
[--layers 2,6,12] [--repeat N] [--no-torch]``

Workloads (``WORKLOADS``): ``seed`` (the README's linear regression: Linear(1, 1), L1 loss,
SGD, 40 samples), ``mlp_small`` (784-256-10, cross-entropy, SGD with momentum 0.9, batch 64),
``cnn`` (two conv + max-pool layers and a Linear on 28x28 images, batch 64), ``resnet18``
(``benchmarks/resnet.py``'s network, 1x64x64 images, batch 32, SGD with momentum and weight
decay) and ``gpt-L`` (``examples/gpt.py`` at L layers: block 32, 64 wide, 2 heads,
vocabulary 65, batch 16 of token ids, AdamW with gradient clipping), one per ``--layers``
entry: the compile time of a model that grows by whole blocks shows how the compiler scales
with the graph.

Every measurement starts in a fresh child process, so nothing an earlier one left in memory
(kernels, LLVM state, imported modules) counts as free unless it is meant to. Three per
workload:

- cold: an empty cache directory (``GRAPHC_CACHE_DIR`` set to a new temporary directory), the
  first call of the compiled step, compile included: what a user waits the first time a step
  runs on a machine. Its compile log (``step.compile_log``, printed by the child as JSON) gives
  the per-phase table, with the time no phase accounts for as a row of its own: which part
  of the compiler to work on.
- warm: in the same process, after the cold call, a new model and a new step function of the
  same shapes, compiled and called once: what reuse within a process (kernel objects kept in
  memory) leaves, as for a second model in a notebook or a sweep.
- disk-cached: a new process on the cache directory the cold run filled, first call: what the
  on-disk cache leaves, as for a training script run again. Its phases are tabled too (what
  the cache does not save).

A first call is a compile and one run of the step, so two more figures keep them apart: the
cold process calls the step once more (``step ms``: the step alone), and each phase table
has ``first run``, the first call's time past the compile log's total. A first run costs
more than a later one: its buffers are touched for the first time (ResNet-18's 210 MB arena,
with the huge pages numpy asks for, took 0.3-0.4 s more on an Ice Lake host where the kernel
compacts memory for them).

Each phase table ends with ``CPU, first call``: the CPU seconds of the first call, this
process's (every thread) plus its compile workers' (``graphc.runtime.compile_worker.
cpu_seconds``, from ``/proc``). On a host whose speed drifts from minute to minute, or one
shared with other work, that is the figure to compare two trees by; the wall time of a
compile that keeps both cores busy is about half of it.

Each figure is the median of ``--repeat`` runs (default 3), each with its own fresh cache
directory. Python bytecode is cached as for an installed package (``--bytecode cached``, the
default: a warm-up child writes it to a temporary ``PYTHONPYCACHEPREFIX``), since some
machines set ``PYTHONDONTWRITEBYTECODE`` and every process there compiles the source of
every module it imports; ``--bytecode env`` measures with the caller's environment.
Importing graphc (torch) is timed apart and not counted in any of them.

torch.compile (default mode) gets the same steps written against ``torch.nn``/``torch.optim``
(for the GPT, ``define(torch.nn, torch.nn.functional)``), timed the same three ways, with
``TORCHINDUCTOR_CACHE_DIR`` in the role of ``GRAPHC_CACHE_DIR``. Where it fails here (no C++
compiler, an op it cannot compile) the cell reads ``n/a`` and a note gives the reason; the
benchmark goes on. JAX has no port of these steps; the header says whether it is installed.
The host's CPU (model, the LLVM CPU graphc compiles for, ISA extensions) heads the output:
cold compile time is mostly LLVM's work, whose speed differs from host to host (and from day
to day on a shared one), so figures compare only within one run or one host.

And the host's speed at the time, before and after the workloads (``host_speed``): a fresh
process compiles one fixed LLVM module (a GEMM tile's library piece, the same text on every
host) at the tile level and runs a fixed pure-Python loop, each the fastest of three. On a
shared host the speed moved by half within minutes (the same code's cold ResNet-18 compile
read 2.3-2.5 s in a fast stretch of an Ice Lake guest and 3.2 s in a slow one, when a Python
loop took 1.9x as long), so a compile time compares across runs only next to these.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

WORKLOADS = {
    "seed": "Linear(1, 1), L1 loss, SGD: the README's linear regression",
    "mlp_small": "MLP 784-256-10, cross-entropy, SGD with momentum 0.9, batch 64",
    "cnn": "two conv (8, 16 channels) + max-pool layers and a Linear, 28x28 images, batch 64",
    "resnet18": "benchmarks/resnet.py's ResNet-18 (widths 16-32-64-128), 1x64x64 images, "
                "batch 32, SGD with momentum and weight decay",
    "gpt": "examples/gpt.py, block 32, 64 wide, 2 heads, vocabulary 65, batch 16; one per "
           "--layers entry",
}
GPT_CONFIG = dict(block_size=32, n_embd=64, n_head=2, dropout=0.0)
GPT_VOCAB, GPT_BATCH = 65, 16
SYSTEMS = {"graphc": "GRAPHC_CACHE_DIR", "torch": "TORCHINDUCTOR_CACHE_DIR"}

# The child: ``python -c CHILD ROOT SYSTEM WORKLOAD LAYERS MODE``; its last stdout line is JSON.
CHILD = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from benchmarks.compile_time import child; raise SystemExit(child(sys.argv[2:]))")

# ISA extensions worth naming for generated code (in this order, those the CPU has).
_ISA = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
        "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
        "asimd", "asimdhp", "sve", "sve2", "bf16", "i8mm")
_X86_LEVELS = (("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
               ("x86-64-v3", {"avx2", "bmi1", "bmi2", "fma", "f16c", "movbe", "abm"}),
               ("x86-64-v2", {"sse4_2", "sse4_1", "ssse3", "popcnt", "cx16"}))


def host_cpu() -> str:
    """One line naming this host's CPU: its model, the CPU LLVM compiles for here, the x86-64
    level and the ISA extensions that matter to generated code, and the usable CPUs."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in ("", platform.machine(),
                                                            platform.processor()):
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    parts = [model]
    try:
        import llvmlite.binding as llvm

        parts.append(f"LLVM CPU {llvm.get_host_cpu_name()}")
        if not flags:
            flags = {f[1:].replace(".", "_") for f in
                     llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}
    except Exception:  # noqa: BLE001 - the header is informative only
        pass
    level = next((name for name, need in _X86_LEVELS if need <= flags), None)
    isa = " ".join(f for f in _ISA if f in flags)
    if level or isa:
        parts.append(" ".join(p for p in (level and f"{level}:", isa or "no SIMD flags") if p))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts.append(f"{cpus} usable CPUs")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# The child process: build a workload's step, compile it, call it, print the figures as JSON.


def _framework(system: str) -> SimpleNamespace:
    """nn, F, optim and a numpy-to-input conversion for graphc or torch (same API)."""
    if system == "torch":
        import torch

        return SimpleNamespace(nn=torch.nn, F=torch.nn.functional, optim=torch.optim,
                               tensor=torch.from_numpy, compile=torch.compile)
    import graphc
    from graphc.nn import functional as F

    return SimpleNamespace(nn=graphc.nn, F=F, optim=graphc.optim, tensor=lambda a: a,
                           compile=graphc.compile)


def build(workload: str, layers: int, fw: SimpleNamespace) -> tuple[Callable[..., Any], tuple]:
    """A new model, optimizer and (uncompiled) training step for ``workload`` in framework
    ``fw``, with its arguments: each call gives new objects of the same shapes."""
    import numpy as np

    nn, optim = fw.nn, fw.optim
    rng = np.random.default_rng(0)
    if workload == "seed":
        x = np.arange(0, 1, 0.02, dtype=np.float32)[:40, None]
        y = (0.7 * x + 0.3).astype(np.float32)
        m, lf = nn.Linear(1, 1), nn.L1Loss()
        opt = optim.SGD(m.parameters(), lr=0.01)

        def seed_step(a: Any, b: Any) -> Any:
            loss = lf(m(a), b)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        return seed_step, (fw.tensor(x), fw.tensor(y))
    if workload == "gpt":
        if str(ROOT / "examples") not in sys.path:
            sys.path.insert(0, str(ROOT / "examples"))
        import gpt

        model = gpt.define(nn, fw.F)(GPT_VOCAB, n_layer=layers, **GPT_CONFIG)
        step, _, _ = gpt.make_trainer(model, nn, fw.F, optim, 100)
        shape = (GPT_BATCH, GPT_CONFIG["block_size"])
        x, y = (rng.integers(0, GPT_VOCAB, shape).astype(np.int64) for _ in range(2))
        return step, (fw.tensor(x), fw.tensor(y))
    if workload == "resnet18":
        from benchmarks import resnet

        m = resnet.build(nn)
        x = rng.standard_normal((32, resnet.IN_CHANNELS, 64, 64)).astype(np.float32)
        y = rng.integers(0, resnet.NUM_CLASSES, 32).astype(np.int64)
        opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    else:
        if workload == "mlp_small":
            m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
            x = rng.standard_normal((64, 784)).astype(np.float32)
        elif workload == "cnn":
            m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(784, 10))
            x = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
        else:
            raise ValueError(f"workload: expected one of {', '.join(WORKLOADS)}, "
                             f"got {workload!r}")
        y = rng.integers(0, 10, 64).astype(np.int64)
        opt = optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
    lf = nn.CrossEntropyLoss()

    def train_step(a: Any, b: Any) -> Any:
        opt.zero_grad()
        loss = lf(m(a), b)
        loss.backward()
        opt.step()
        return loss

    return train_step, (fw.tensor(x), fw.tensor(y))


def _first_call(fw: SimpleNamespace, workload: str, layers: int
                ) -> tuple[float, float, Any, tuple]:
    """Seconds to compile a new step and call it once (building the model not counted), this
    process's CPU seconds meanwhile (every thread), the step and its arguments."""
    fn, args = build(workload, layers, fw)
    c0, t0 = time.process_time(), time.perf_counter()
    step = fw.compile(fn)
    float(step(*args))  # the loss, materialised
    return time.perf_counter() - t0, time.process_time() - c0, step, args


def _worker_cpu(system: str) -> float | None:
    """CPU seconds graphc's compile workers of this process have used (None for torch, or
    where ``/proc`` does not say)."""
    if system != "graphc":
        return None
    from graphc.runtime import compile_worker

    return compile_worker.cpu_seconds()


def _later_call(step: Any, args: tuple) -> float:
    """Seconds of one more call of a compiled step: what its first call spent running the
    step rather than compiling it, near enough (a first run also touches its memory for
    the first time)."""
    t0 = time.perf_counter()
    float(step(*args))
    return time.perf_counter() - t0


def _reason(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = f"{type(e).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 160 else text[:157] + "..."


def child(argv: Sequence[str]) -> int:
    """The child process's work: ``SYSTEM WORKLOAD LAYERS MODE`` (MODE ``cold``: first and
    second compile; ``disk``: first only). Prints one JSON object as the last stdout line."""
    system, workload, layers, mode = argv[0], argv[1], int(argv[2]), argv[3]
    import numpy  # noqa: F401 - a common dependency, not counted in the import time

    out: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        fw = _framework(system)
        out["import"] = time.perf_counter() - t0
        out["first"], cpu, step, args = _first_call(fw, workload, layers)
        workers = _worker_cpu(system)  # started by this first call, if at all
        if workers is not None:
            out["cpu"] = cpu + workers
        log = getattr(step, "compile_log", None)
        if log is not None:
            out.update(phases=dict(log.phases), counts={k: str(v) for k, v in
                                                        log.counts.items()}, total=log.total)
            out["run"] = out["first"] - log.total
            if mode == "cold":  # graphc's row reads it; torch.compile's has no column for it
                out["step"] = _later_call(step, args)
        if mode == "cold":
            out["warm"], _, _, _ = _first_call(fw, workload, layers)
    except Exception as e:  # noqa: BLE001 - reported as n/a by the parent, with the reason
        out["error"] = _reason(e)
    sys.stdout.flush()
    print("\n" + json.dumps(out), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# The host's speed: one fixed job, timed in a fresh process.

SPEED = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from benchmarks.compile_time import speed_child; raise SystemExit(speed_child())")


def speed_child() -> int:
    """Print (as JSON) the CPU seconds LLVM takes to compile one fixed module at the tile
    level, and the seconds a fixed pure-Python loop takes, each the fastest of three: the
    module is a GEMM tile's library piece of fixed sizes and caches, so its text (about 0.3
    MB of IR) is the same on every host and in every version that keeps that tile's code."""
    from graphc.codegen.gemm import Tile, library_parts
    from graphc.codegen.irtext import module_text
    from graphc.codegen.llvm_objects import compile_timed

    (_, build), *_ = library_parts({(Tile(vw=16, mr=6, nv=4, l1d=48 << 10, l2=1280 << 10),
                                     "f32")})
    text = module_text(build())
    llvm_s = []
    for _ in range(3):
        t0 = time.process_time()
        compile_timed(text, None, None, "tile")
        llvm_s.append(time.process_time() - t0)
    python_s = []
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        for i in range(5_000_000):
            total += i
        python_s.append(time.perf_counter() - t0)
    print(json.dumps({"llvm": min(llvm_s), "python": min(python_s), "chars": len(text)}))
    return 0


def host_speed(timeout: float) -> dict[str, float] | None:
    """``speed_child``'s figures from a fresh process, or None where it failed."""
    try:
        proc = subprocess.run([sys.executable, "-c", SPEED, str(ROOT)], capture_output=True,
                              text=True, timeout=timeout)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        return out if isinstance(out, dict) else None
    except (subprocess.TimeoutExpired, IndexError, ValueError):
        return None


def speed_line(when: str, speed: dict[str, float] | None) -> str:
    """The host-speed line printed before and after the workloads."""
    if speed is None:
        return f"host speed {when}: not measured (the reference process failed)"
    return (f"host speed {when}: a fixed LLVM module ({speed['chars'] / 1e6:.2f} MB of IR, "
            f"tile level) {speed['llvm']:.3f} CPU-s, a fixed Python loop (5M additions) "
            f"{speed['python']:.3f} s")


# ---------------------------------------------------------------------------------------------
# The parent: run the children, take medians, print the tables.


def run_child(system: str, workload: str, layers: int, cache: str, mode: str,
              timeout: float) -> dict[str, Any]:
    """Run one child process with ``cache`` as ``system``'s cache directory; its figures, or
    ``{"error": reason}`` when it failed, timed out or printed no figures."""
    env = {**os.environ, SYSTEMS[system]: cache}
    env.pop("GRAPHC_CACHE", None)  # the disk cache on, whatever the caller's shell says
    if BYTECODE["prefix"] is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = BYTECODE["prefix"]
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(ROOT), system, workload,
                             str(layers), mode], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and its compile workers
        proc.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
        if not isinstance(result, dict):
            raise ValueError(lines[-1])
    except (IndexError, ValueError):
        err = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        return {"error": f"exit status {proc.returncode}: " + (err[-1] if err else "no output")}
    return result


# ``--bytecode cached`` (the default): the children read Python bytecode from a cache that a
# warm-up child filled (``PYTHONPYCACHEPREFIX``, a temporary directory), as every process of
# an installed package does (pip writes the ``.pyc`` files at install time). Some machines set
# ``PYTHONDONTWRITEBYTECODE``; then every process compiles the source of every module it
# imports, ~0.1 s of graphc's lazily imported code generator inside the first compile, which
# no user of an installed graphc pays. ``--bytecode env`` keeps the caller's environment.
BYTECODE: dict[str, str | None] = {"prefix": None}


def warm_bytecode(systems: Sequence[str], timeout: float) -> None:
    """Fill the bytecode cache: one untimed child per system compiles and runs the seed step
    (importing everything a compile imports), on a cache directory of its own."""
    for system in systems:
        with tempfile.TemporaryDirectory(prefix=f"compile-time-warm-{system}-") as cache:
            run_child(system, "seed", 0, cache, "disk", timeout)


def measure(system: str, workload: str, layers: int, repeat: int, timeout: float
            ) -> list[dict[str, Any]]:
    """``repeat`` rounds of cold (+ warm) and disk-cached runs, each round on its own fresh
    cache directory: ``[{"cold": figures, "disk": figures}, ...]``."""
    rounds = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix=f"compile-time-{system}-") as cache:
            cold = run_child(system, workload, layers, cache, "cold", timeout)
            disk = (run_child(system, workload, layers, cache, "disk", timeout)
                    if "error" not in cold else cold)
        rounds.append({"cold": cold, "disk": disk})
        if "error" in cold:
            break  # it fails the same way every time
    return rounds


class Table:
    """Medians of one system's rounds for one workload."""

    def __init__(self, rounds: list[dict[str, Any]]) -> None:
        self.rounds = rounds

    def error(self, kind: str) -> str | None:
        return next((r[kind]["error"] for r in self.rounds if "error" in r[kind]), None)

    def median(self, kind: str, key: str) -> float | None:
        vals = [r[kind][key] for r in self.rounds if key in r[kind]]
        return statistics.median(vals) if vals and self.error(kind) is None else None

    def phases(self, kind: str) -> dict[str, float]:
        names: dict[str, None] = {}
        for r in self.rounds:
            names.update(dict.fromkeys(r[kind].get("phases", {})))
        if self.error(kind) is not None:
            return {}
        return {n: statistics.median(r[kind].get("phases", {}).get(n, 0.0)
                                     for r in self.rounds) for n in names}


def _unlogged(phases: dict[str, float], total: float | None) -> float | None:
    """The part of ``total`` no phase accounts for. The LLVM phases (parse, optimise, emit)
    are CPU seconds, mostly spent in the compile workers while this process was still
    lowering the step; ``llvm (wait)`` is what this process waited for them afterwards, so
    that counts and they do not."""
    if total is None or not phases:
        return None
    return total - sum(v for k, v in phases.items() if k not in _LLVM_CPU)


_LLVM_CPU = ("llvm parse", "llvm optimise", "llvm emit")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: unknown workloads or bad numbers are usage errors."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.compile_time",
        description="Compile time of graphc (cold, warm, disk-cached; per phase) beside "
                    "torch.compile's, each measurement in a fresh process.",
        epilog="workloads:\n" + "\n".join(f"  {k:<10} {v}" for k, v in WORKLOADS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated subset (default: all): " + ", ".join(WORKLOADS))
    ap.add_argument("--layers", default="2,6,12",
                    help="GPT depths, comma-separated (default 2,6,12)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds per workload, medians reported (default 3)")
    ap.add_argument("--no-torch", action="store_true", help="skip torch.compile")
    ap.add_argument("--bytecode", choices=("cached", "env"), default="cached",
                    help="cached (default): children read Python bytecode a warm-up child "
                         "wrote, as an installed package's processes do; env: the "
                         "caller's environment as it is (PYTHONDONTWRITEBYTECODE included)")
    ap.add_argument("--timeout", type=float, default=900,
                    help="seconds per child process before it is killed (default 900)")
    a = ap.parse_args(argv)
    a.workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    unknown = [w for w in a.workloads if w not in WORKLOADS]
    if unknown or not a.workloads:
        ap.error(f"--workloads: expected names from {', '.join(WORKLOADS)}, got "
                 f"{', '.join(map(repr, unknown)) or 'none'}")
    try:
        a.layers = [int(n) for n in a.layers.split(",") if n.strip()]
    except ValueError:
        ap.error(f"--layers: expected comma-separated positive integers, got {a.layers!r}")
    if not a.layers or min(a.layers) < 1:
        ap.error(f"--layers: expected comma-separated positive integers, got {a.layers!r}")
    if a.repeat < 1:
        ap.error(f"--repeat: expected a positive number of rounds, got {a.repeat}")
    return a


def _jax_line() -> str:
    import importlib.util

    from . import jax_workloads

    if jax_workloads.available():
        return "jax: installed; not timed (no JAX port of these steps)"
    if importlib.util.find_spec("jax") is None:
        return "jax: not installed"
    return "jax: installed without optax; not timed"


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    jobs = [(w, n, f"gpt-{n}" if w == "gpt" else w)
            for w in a.workloads for n in (a.layers if w == "gpt" else [0])]
    systems = ["graphc"] + ([] if a.no_torch else ["torch"])
    import importlib.metadata

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
        if "torch" in systems:
            systems.remove("torch")
    print(f"host: {host_cpu()}")
    print(f"python {platform.python_version()}, torch {torch_version}"
          + (" (not timed: --no-torch)" if a.no_torch else "")
          + f"; median of {a.repeat} round(s), every measurement in a fresh process")
    print(_jax_line())
    bytecode_dir = None
    if a.bytecode == "cached":
        bytecode_dir = tempfile.TemporaryDirectory(prefix="compile-time-pycache-")
        BYTECODE["prefix"] = bytecode_dir.name
        print("python bytecode: cached, as for an installed package (a warm-up child wrote "
              "it; --bytecode env measures without)")
        warm_bytecode(systems, a.timeout)
    elif os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set, so every process compiles the Python "
              "source it imports:\nthe import times, and graphc's lazily imported code "
              "generator in the first compile, include it")
    print(speed_line("before", host_speed(a.timeout)), flush=True)
    results: dict[tuple[str, str], Table] = {}
    for w, n, name in jobs:
        for s in systems:
            t0 = time.perf_counter()
            results[name, s] = Table(measure(s, w, n, a.repeat, a.timeout))
            print(f"  measured {name} ({s}) in {time.perf_counter() - t0:.0f} s", flush=True)
    names = [name for _, _, name in jobs]
    notes: list[str] = []

    def cell(s: str, name: str, kind: str, key: str, width: int, scale: float = 1.0) -> str:
        t = results.get((name, s))
        if t is None:
            return f"{'-':>{width}}"
        why = t.error(kind)
        if why is not None:
            why = f"{'torch.compile' if s == 'torch' else s}, {name}: {why}"
            if why not in notes:
                notes.append(why)
            return f"{f'n/a [{notes.index(why) + 1}]':>{width}}"
        v = t.median(kind, key)
        return f"{v * scale:>{width}.3f}" if v is not None else f"{'-':>{width}}"

    wn = max(8, *map(len, names))
    print(f"\ncompile time, seconds: first call of a compiled step (median of {a.repeat})")
    head = (f"{'workload':<{wn}}  {'graphc cold':>11} {'warm':>7} {'disk':>7} {'import':>7}"
            f" {'step ms':>8}")
    if "torch" in systems:
        head += f"  {'torch.compile cold':>18} {'warm':>7} {'disk':>7} {'import':>7}"
    print(head)
    for name in names:
        row = (f"{name:<{wn}}  {cell('graphc', name, 'cold', 'first', 11)} "
               f"{cell('graphc', name, 'cold', 'warm', 7)} "
               f"{cell('graphc', name, 'disk', 'first', 7)} "
               f"{cell('graphc', name, 'cold', 'import', 7)} "
               f"{cell('graphc', name, 'cold', 'step', 8, 1e3)}")
        if "torch" in systems:
            row += (f"  {cell('torch', name, 'cold', 'first', 18)} "
                    f"{cell('torch', name, 'cold', 'warm', 7)} "
                    f"{cell('torch', name, 'disk', 'first', 7)} "
                    f"{cell('torch', name, 'cold', 'import', 7)}")
        print(row)
    print("cold: empty cache; warm: a new model of the same shapes compiled next in the same "
          "process;\ndisk: a new process on the cache the cold run filled; import: not counted "
          "in the others;\nstep ms: graphc's second call in the cold process, milliseconds: the "
          "step alone (a first call also runs it once)")
    for kind, title in (("cold", "cold compile"), ("disk", "disk-cached compile")):
        tables = {name: results[name, "graphc"].phases(kind) for name in names}
        phases: dict[str, None] = {}
        for p in tables.values():
            phases.update(dict.fromkeys(p))
        if not phases:
            continue
        pw = max(len("not in a phase"), *map(len, phases))
        cw = max(9, *map(len, names))
        print(f"\ngraphc {title} per phase, seconds (median of {a.repeat})")
        print(f"{'phase':<{pw}}" + "".join(f" {n:>{cw}}" for n in names))
        for p in phases:
            print(f"{p:<{pw}}" + "".join(
                f" {tables[n][p]:>{cw}.3f}" if p in tables[n] else f" {'-':>{cw}}"
                for n in names))
        other = {n: _unlogged(tables[n], results[n, "graphc"].median(kind, "total"))
                 for n in names}
        print(f"{'not in a phase':<{pw}}" + "".join(
            f" {other[n]:>{cw}.3f}" if other[n] is not None else f" {'-':>{cw}}" for n in names))
        print(f"{'total (log)':<{pw}}" + "".join(f" {cell('graphc', n, kind, 'total', cw)}"
                                                 for n in names))
        print(f"{'first run':<{pw}}" + "".join(f" {cell('graphc', n, kind, 'run', cw)}"
                                               for n in names))
        print(f"{'CPU, first call':<{pw}}" + "".join(f" {cell('graphc', n, kind, 'cpu', cw)}"
                                                     for n in names))
        for n in names:
            first = next((r[kind] for r in results[n, "graphc"].rounds
                          if r[kind].get("counts")), None)
            if first:
                print(f"  {n}: " + "; ".join(f"{k}: {v}" for k, v in first["counts"].items()))
        if "llvm (wait)" in phases:
            print("llvm parse/optimise/emit are CPU seconds summed over the compile workers "
                  "(they overlap the lowering);\n'llvm (wait)' is how long the step waited "
                  "for them after it ('not in a phase' counts it, not them).")
        print("first run: the first call's time past the compile log's total: running the "
              "step, its buffers touched for the first time;\nCPU, first call: this process's "
              "CPU seconds in the first call (every thread) plus its compile workers' (start "
              "included):\nsteadier than wall time on a noisy host, and about twice it while "
              "the compile keeps two cores busy")
    for i, why in enumerate(notes, 1):
        print(f"[{i}] {why}")
    print("\n" + speed_line("after", host_speed(a.timeout)))
    print("(the same code's compile times move with these: compare runs only next to them)")
    failed = [n for n in names if any(results[n, "graphc"].error(k) for k in ("cold", "disk"))]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
