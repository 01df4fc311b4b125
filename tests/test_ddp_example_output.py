"""examples/ddp_mlp.py writes each line of output whole (issue 20, item 6).

Under ``mpirun`` the ranks' stdout streams meet on one terminal; a line written in two pieces
(``print`` with unbuffered output writes the text, then the newline) lets another rank's line
land in between: ``checksum 453.51rank 0: ...``. Here stdout is replaced by exactly what
``python -u`` gives (a write-through text layer straight over the file) with a recorder of
every write underneath, so the test needs no MPI; a real two-process run is checked too where
``mpirun`` and mpi4py are installed.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_mlp.py"
LINE = re.compile(r"^(epoch \d+: rank 0 mean loss |rank \d+: accuracy )")


class _RecordingFile(io.RawIOBase):
    """A raw stdout that records each write as the operating system would see it."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.chunks.append(bytes(b))
        return len(b)

    def fileno(self) -> int:
        return 1


def test_every_line_is_one_write(monkeypatch):
    raw = _RecordingFile()
    stdout = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # as python -u
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if fd == 1:
            return raw.write(data)
        return real_write(fd, data)

    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(os, "write", write)
    spec = importlib.util.spec_from_file_location("_ddp_mlp_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(epochs=2)
    stdout.flush()
    assert len(raw.chunks) == 3, raw.chunks  # two epoch lines and the final one
    for chunk in raw.chunks:
        text = chunk.decode()
        assert text.endswith("\n") and text.count("\n") == 1, raw.chunks
        assert LINE.match(text), text


def _mpirun() -> list[str] | None:
    exe = shutil.which("mpirun")
    if exe is None or importlib.util.find_spec("mpi4py") is None:
        return None
    cmd = [exe, "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


@pytest.mark.slow
@pytest.mark.skipif(_mpirun() is None, reason="needs mpirun (Open MPI) and mpi4py")
def test_two_ranks_lines_do_not_run_together():
    env = {**os.environ, "GRAPHC_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "PYTHONUNBUFFERED": "1"}
    res = subprocess.run([*_mpirun(), "-np", "2", sys.executable, str(EXAMPLE)],
                         capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert lines and all(LINE.match(ln) for ln in lines), res.stdout
    assert sorted(ln.split(":")[0] for ln in lines if ln.startswith("rank")) == ["rank 0",
                                                                                 "rank 1"]
