"""`graphc dump` on the shipped examples: every stage of every compiled step prints."""

from pathlib import Path

import pytest

from graphc.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("target", ["examples/seed_linreg.py:train_step",
                                    "examples/seed_linreg.py:test_step"])
def test_dump_every_stage_of_the_seed_example(target, capsys):
    assert main(["dump", str(ROOT / target), "--stage", "all"]) == 0
    out = capsys.readouterr().out
    for stage in ("traced", "grad", "optimized", "fused", "llvm", "asm"):
        assert f"==== {stage} ====" in out, stage
    assert "graph " in out and "define" in out


def test_dump_dot_of_the_seed_example(capsys):
    assert main(["dump", str(ROOT / "examples/seed_linreg.py:train_step"), "--format", "dot"]
                ) == 0
    assert capsys.readouterr().out.startswith("digraph")
