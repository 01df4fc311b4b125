"""Memory checking of ahead-of-time steps (see ``scripts/asan_check.py``): a C harness calls
the seed step and an MLP with ``CrossEntropyLoss`` with good and bad inputs (batch sizes 1..300,
out-of-range targets, NULL, aliasing, checkpoints) under AddressSanitizer + UBSan, and — when
``GRAPHC_VALGRIND=1`` — under valgrind, which also sees the uninstrumented kernel code."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("asan_check", ROOT / "scripts" / "asan_check.py")
asan = importlib.util.module_from_spec(_spec)
assert _spec.loader is not None
_spec.loader.exec_module(asan)

CC = os.environ.get("CC", "cc")


@pytest.mark.slow
@pytest.mark.skipif(not asan.has_asan(CC), reason="the C compiler has no -fsanitize=address")
def test_aot_steps_clean_under_address_sanitizer(tmp_path: Path) -> None:
    r = asan.run(tmp_path, cc=CC)
    report = r.stdout + r.stderr
    assert r.returncode == 0, report[-4000:]
    assert "harness OK" in r.stdout
    assert "AddressSanitizer" not in report and "runtime error" not in report


@pytest.mark.skipif(os.environ.get("GRAPHC_VALGRIND") != "1" or shutil.which("valgrind") is None,
                    reason="set GRAPHC_VALGRIND=1 (and install valgrind) to run")
def test_aot_steps_clean_under_valgrind(tmp_path: Path) -> Any:
    r = asan.run(tmp_path, valgrind=True, cc=CC)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "harness OK" in r.stdout
