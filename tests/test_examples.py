"""The examples run end to end (shortened) and reach their accuracy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_digits_cnn_trains() -> None:
    """Four epochs of the digits CNN (cosine schedule over four epochs): > 90% test accuracy,
    one compiled variant for the training step (the last partial batch reuses it)."""
    pytest.importorskip("sklearn")
    digits = _load("digits_cnn")
    out = digits.main(epochs=4, use_torch=False, verbose=False)
    g = out["graphc"]
    assert g["accuracy"] > 0.90, g["history"]
    assert g["compiles"] == 1


def test_resnet_digits_trains_quickly() -> None:
    """The ResNet digits example, shortened: two epochs on 512 training images (a few seconds
    compiled, most of it compiling), one compiled variant for the training step, and clearly
    better than chance (ten classes) on the full test split."""
    pytest.importorskip("sklearn")
    example = _load("resnet_digits")
    out = example.main(epochs=2, use_torch=False, verbose=False, subset=512)
    g = out["graphc"]
    assert g["compiles"] == 1
    assert len(g["epoch_seconds"]) == 2
    assert g["accuracy"] > 0.3, g["history"]
