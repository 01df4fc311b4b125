"""``python -m benchmarks``: the help lists the workloads, an unknown one is a usage error
(issue 20, item 4). Nothing is timed here: these checks stop before any workload is built,
except the one run of ``python -m benchmarks.compile_time`` on the seed step (graphc only, one
round: a few seconds), which checks that its tables come out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _benchmarks(*argv: str, module: str = "benchmarks", timeout: float = 120
                ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", module, *argv], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=timeout, check=False)


def _table() -> dict[str, str]:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.__main__ import WORKLOADS
    finally:
        sys.path.remove(str(ROOT))
    return WORKLOADS


def test_help_lists_every_workload():
    proc = _benchmarks("--help")
    assert proc.returncode == 0, proc.stderr
    for name, what in _table().items():
        assert f"  {name}  " in proc.stdout or f"  {name} " in proc.stdout, name
        assert " ".join(what.split()) in " ".join(proc.stdout.split()), name


def test_unknown_workload_is_an_error_naming_the_valid_ones():
    proc = _benchmarks("nosuch", "seed")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "built and compiled" not in proc.stdout  # refused before building anything
    last = proc.stderr.strip().splitlines()[-1]
    assert "workload" in last and "'nosuch'" in last
    for name in _table():
        assert name in last, name


def test_the_table_names_every_workload_that_is_built(monkeypatch):
    """``WORKLOADS`` (what ``--help`` shows and the check accepts) matches what
    ``all_workloads`` builds; steps are left uncompiled to keep this quick."""
    import graphc

    def no_compile(fn=None, **kwargs):
        return fn if fn is not None else (lambda f: f)

    monkeypatch.setattr(graphc, "compile", no_compile)
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.workloads import all_workloads

    if not hasattr(graphc.optim, "Adam"):
        pytest.skip("this build has no Adam")
    assert [w.name for w in all_workloads(None)] == list(_table())


def test_compile_time_unknown_workload_is_a_usage_error():
    proc = _benchmarks("--workloads", "seed,nosuch", module="benchmarks.compile_time")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    last = proc.stderr.strip().splitlines()[-1]
    assert "'nosuch'" in last and "mlp_small" in last and "gpt" in last
    assert "host:" not in proc.stdout  # refused before anything ran


def test_compile_time_seed_prints_the_cpu_the_times_and_the_phases():
    """The seed step, graphc only, one round: the host CPU heads the output, the host's speed
    is measured before and after, the seed's row has cold, warm, disk-cached, import and
    later-call seconds, the cold compile's phases are
    tabled with the first call's run apart, and the disk-cached process found the cold one's
    objects in the cache."""
    proc = _benchmarks("--workloads", "seed", "--repeat", "1", "--no-torch",
                       module="benchmarks.compile_time", timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    out = proc.stdout
    host = out.splitlines()[0]
    assert host.startswith("host: ") and "usable CPUs" in host, host
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines()
                      if ln.startswith("model name")), None)
        if model:
            assert model in host, host
    assert "jax:" in out
    assert "python bytecode: cached" in out  # the default: as an installed package runs
    # the host's speed before and after: a fixed LLVM module's CPU seconds and a fixed
    # Python loop's seconds, both measured (a failed reference process says so instead)
    for when in ("before", "after"):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"host speed {when}: "))
        llvm_s = float(line.split(" tile level) ")[1].split(" CPU-s")[0])
        python_s = float(line.rsplit(" ", 2)[1])
        assert 0 < llvm_s < 30 and 0 < python_s < 30, line
    row = next(ln for ln in out.splitlines() if ln.startswith("seed "))
    cold, warm, disk, imported, later_ms = map(float, row.split()[1:])
    assert cold > 0 and warm > 0 and disk > 0 and imported > 0 and later_ms > 0, row
    cold_table = out.split("graphc cold compile per phase")[1].split("disk-cached")[0]
    for phase in ("trace", "passes", "plan", "emit LLVM IR", "llvm optimise", "link",
                  "total (log)", "first run"):
        assert f"\n{phase} " in cold_table, phase
    # the first call is the compile and one run of the step: the log's total, the first
    # run, and nothing else
    total = float(cold_table.split("\ntotal (log) ")[1].split()[0])
    run = float(cold_table.split("\nfirst run ")[1].split()[0])
    assert run > 0 and abs(total + run - cold) < 2e-3, (total, run, cold)
    assert "disk cache: miss" in cold_table
    disk_table = out.split("graphc disk-cached compile per phase")[1]
    assert "disk cache: hit" in disk_table
    # the first call's CPU: this process's and its compile workers', no less than a busy
    # half of the call's wall time, no more than every core for all of it
    if Path("/proc/self/stat").exists():
        cpu = float(cold_table.split("\nCPU, first call ")[1].split()[0])
        assert 0.5 * cold <= cpu <= (os.cpu_count() or 1) * cold + 0.05, (cpu, cold)
        assert float(disk_table.split("\nCPU, first call ")[1].split()[0]) > 0


def test_each_timed_block_follows_a_warm_up_of_its_own_system():
    """A timed block starts only after its system ran untimed for ``SETTLE_SECONDS``: the
    other system's spinning threads (PyTorch's OpenMP team) are not billed to it. The
    workload table, the per-convolution table and the GEMM table time their blocks alike
    (the convolution table once timed without the warm-up: a stride-2 convolution on two
    threads read 125 GFLOP/s there against 179 alone)."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import __main__ as bm
        from benchmarks import conv_shapes, gemm, timing
    finally:
        sys.path.remove(str(ROOT))
    assert bm._time_block is timing.time_block
    assert conv_shapes.time_block is timing.time_block
    assert gemm.time_block is timing.time_block
    calls: list[float] = []

    def step() -> None:
        calls.append(timing.time.perf_counter())

    start = timing.time.perf_counter()
    timing.time_block(step, 3)
    warm = calls[:-3]
    assert len(warm) >= 1
    assert calls[-3] - start >= timing.SETTLE_SECONDS
