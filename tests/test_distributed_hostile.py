"""Data-parallel steps when one process's batch is bad, or the processes' models differ.

Every process must raise the same kind of error at the same step, no process may update its
parameters for that step, training must go on identically afterwards, and nothing may wait for
the watchdog. Models of different widths must fail at ``DistributedDataParallel`` with an
error naming the parameter and both shapes, not with a raw MPI error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_distributed import MPIRUN, ROOT, needs_mpi

WORKER = Path(__file__).with_name("_ddp_hostile.py")


def _run(tmp_path: Path, mode: str) -> list[dict]:
    assert MPIRUN is not None
    out = tmp_path / mode
    proc = subprocess.run([*MPIRUN, "-np", "2", sys.executable, str(WORKER), str(out), mode],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(2)]


@needs_mpi
@pytest.mark.parametrize("mode,error", [("nan", "NonFiniteError"), ("index", "IndexError")])
def test_one_bad_batch_fails_the_step_on_every_process(tmp_path: Path, mode: str,
                                                       error: str) -> None:
    reports = _run(tmp_path, mode)
    for rep in reports:
        assert [e[:2] for e in rep["errors"]] == [[1, error]], rep
        assert rep["unchanged"] == [True], rep
    bad = 1 if mode == "nan" else 0
    assert "rank" in reports[1 - bad]["errors"][0][2]  # the other process names the culprit
    # afterwards every process trains on and stays in step
    assert reports[0]["checksums"] == pytest.approx(reports[1]["checksums"], rel=1e-6)


@needs_mpi
def test_models_of_different_widths_are_refused_with_both_shapes(tmp_path: Path) -> None:
    reports = _run(tmp_path, "widths")
    for rep in reports:
        assert len(rep["errors"]) == 1 and rep["errors"][0][1] == "ValueError", rep
        msg = rep["errors"][0][2]
        assert "'0.weight'" in msg and "(8, 4)" in msg and "(16, 4)" in msg, msg
