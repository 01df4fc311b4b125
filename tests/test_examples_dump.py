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


@pytest.mark.parametrize("func, first_line", [
    ("train_step", "graph train_step(x: f32[B,1,8,8], y: i64[B])"),
    ("predict", "graph predict(x: f32[B,1,8,8])"),
])
def test_dump_of_steps_defined_inside_the_digits_example(func, first_line, capsys):
    """Both steps are compiled inside ``train_graphc()``, called from ``main()``: the script
    runs as ``__main__`` until the step is traced and stops before training; what it prints
    goes to stderr, never into the dump."""
    pytest.importorskip("sklearn")
    assert main(["dump", str(ROOT / f"examples/digits_cnn.py:{func}")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(first_line + "\n"), out[:200]
    assert "digits:" not in out and "digits:" in err
    assert "| test acc" not in out + err  # stopped before the training loop
