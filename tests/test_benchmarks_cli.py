"""``python -m benchmarks``: the help lists the workloads, an unknown one is a usage error
(issue 20, item 4). Nothing is timed here: these checks stop before any workload is built."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _benchmarks(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "benchmarks", *argv], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120, check=False)


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
