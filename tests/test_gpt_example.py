"""examples/gpt.py: the same GPT (identical initial weights, dropout 0) trained 20 steps eagerly
in graphc, compiled by graphc and in PyTorch gives the same losses."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.nn import functional as F

_PATH = Path(__file__).resolve().parent.parent / "examples" / "gpt.py"
_spec = importlib.util.spec_from_file_location("gpt_example", _PATH)
gpt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpt)

STEPS = 20
CFG = dict(block_size=16, n_embd=32, n_head=4, n_layer=2, dropout=0.0)


def _data() -> tuple[np.ndarray, int]:
    text = gpt.load_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    return np.array([stoi[c] for c in text], np.int64), len(chars)


def _run(lib: str, data: np.ndarray, vocab: int, mixed: bool = False,
         steps: int = STEPS) -> list[float]:
    if lib == "torch":
        model = gpt.define(torch.nn, torch.nn.functional)(vocab, **CFG)
        state = gpt.initial_state(model, CFG["n_layer"])
        model.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
        amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if mixed else None
        step, _, sched = gpt.make_trainer(model, torch.nn, torch.nn.functional, torch.optim,
                                          STEPS, amp=amp)
        conv: Any = torch.tensor
    else:
        model = gpt.define(nn, F)(vocab, **CFG)
        model.load_state_dict(gpt.initial_state(model, CFG["n_layer"]), strict=False)
        amp = (lambda: gc.autocast("cpu", dtype=gc.bfloat16)) if mixed else None
        step, _, sched = gpt.make_trainer(model, nn, F, optim, STEPS, amp=amp)
        if lib == "compiled":
            step = gc.compile(step)
        conv = np.asarray
    assert model.lm_head.weight is model.wte.weight
    losses = []
    for x, y in gpt.batches(data, steps, CFG["block_size"], 8):
        losses.append(float(np.asarray(step(conv(x), conv(y)).detach()
                                       if lib == "torch" else step(x, y))))
        sched.step()
    if lib == "compiled":
        assert step.compile_count == 1
    return losses


def test_gpt_losses_match_torch() -> None:
    data, vocab = _data()
    ref = _run("torch", data, vocab)
    assert ref[-1] < ref[0]
    for lib in ("eager", "compiled"):
        losses = _run(lib, data, vocab)
        np.testing.assert_allclose(losses, ref, rtol=1e-4, err_msg=lib)


def test_gpt_losses_under_autocast_match_torch_autocast() -> None:
    """The example's AMP form (forward and loss under ``autocast("cpu", bfloat16)``, float32
    master weights and AdamW state): eager and compiled graphc follow PyTorch's autocast run
    within bf16 rounding, and compiled agrees with eager more closely still."""
    data, vocab = _data()
    ref = _run("torch", data, vocab, mixed=True, steps=8)
    eager = _run("eager", data, vocab, mixed=True, steps=8)
    compiled = _run("compiled", data, vocab, mixed=True, steps=8)
    np.testing.assert_allclose(eager, ref, rtol=2e-3)
    np.testing.assert_allclose(compiled, ref, rtol=2e-3)
    np.testing.assert_allclose(compiled, eager, rtol=5e-4)


def test_text_is_available() -> None:
    text = gpt.load_text()
    if len(text) < 5000:
        pytest.skip("docstrings stripped (python -OO)")
    assert len(set(text)) > 40
