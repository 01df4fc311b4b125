"""Running a script once per thread count, for the tests that compare one thread with two.

The script runs in a fresh process (the thread pool is sized when it starts) with
``GRAPHC_NUM_THREADS`` set, no disk cache and no debug build; it gets ``OUT``, the path of an
``.npz`` file to save its arrays in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np


def run_per_thread_count(tmp_path: Path, script: str, threads: tuple[int, ...] = (1, 2),
                         env: dict[str, str] | None = None,
                         drop: tuple[str, ...] = ()) -> list[dict[str, np.ndarray]]:
    """The arrays ``script`` saved, one dict per thread count; ``env`` adds variables and
    ``drop`` removes the named ones (switches the test means to leave at their defaults)."""
    out = []
    for n in threads:
        path = tmp_path / f"t{n}.npz"
        e = {**os.environ, "GRAPHC_NUM_THREADS": str(n), "GRAPHC_CACHE": "0", **(env or {})}
        for var in ("GRAPHC_DEBUG", *drop):
            e.pop(var, None)
        r = subprocess.run([sys.executable, "-c", f"OUT = {str(path)!r}\n" + script], env=e,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        with np.load(path) as z:
            out.append({k: z[k] for k in z.files})
    return out


def assert_bit_identical(runs: list[dict[str, np.ndarray]], min_arrays: int = 1) -> None:
    first = runs[0]
    assert len(first) >= min_arrays
    for other in runs[1:]:
        assert other.keys() == first.keys()
        for k in first:
            assert first[k].dtype == other[k].dtype and np.array_equal(first[k], other[k]), k
