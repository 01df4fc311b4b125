"""examples/char_rnn.py: the same LSTM language model (identical initial weights, dropout 0)
trained 20 steps in PyTorch, eagerly in graphc, compiled one step a call and compiled as
``step.run`` (10 steps a native call, the scheduler between them) gives the same losses."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
from _torch import torch

import graphc as gc
from graphc import nn, optim

_PATH = Path(__file__).resolve().parent.parent / "examples" / "char_rnn.py"
_spec = importlib.util.spec_from_file_location("char_rnn_example", _PATH)
char_rnn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(char_rnn)

STEPS = 20
CFG = dict(embed=16, hidden=32, layers=2, dropout=0.0)


def _data() -> tuple[np.ndarray, np.ndarray, int]:
    text = char_rnn.load_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], np.int64)
    xs, ys = char_rnn.batches(data, STEPS, 24, 8)
    return xs, ys, len(chars)


def _run(lib: str, xs: np.ndarray, ys: np.ndarray, vocab: int) -> list[float]:
    if lib == "torch":
        model = char_rnn.define(torch.nn)(vocab, **CFG)
        state = char_rnn.initial_state(model)
        model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
        step, _, sched = char_rnn.make_trainer(model, torch.nn, torch.optim, STEPS)
    else:
        model = char_rnn.define(nn)(vocab, **CFG)
        model.load_state_dict(char_rnn.initial_state(model))
        step, _, sched = char_rnn.make_trainer(model, nn, optim, STEPS)
    if lib == "run":
        step = gc.compile(step)
        out = []
        for s in (slice(0, 10), slice(10, 20)):
            out += [float(v) for v in np.asarray(step.run(xs[s], ys[s], scheduler=sched))]
        assert step.compile_count == 1
        return out
    if lib == "compiled":
        step = gc.compile(step)
    losses = []
    for x, y in zip(xs, ys):
        if lib == "torch":
            losses.append(float(step(torch.tensor(x), torch.tensor(y)).detach()))
        else:
            losses.append(float(np.asarray(step(x, y))))
        sched.step()
    return losses


def test_char_rnn_losses_match_torch() -> None:
    xs, ys, vocab = _data()
    ref = _run("torch", xs, ys, vocab)
    assert ref[-1] < ref[0]
    for lib in ("eager", "compiled", "run"):
        np.testing.assert_allclose(_run(lib, xs, ys, vocab), ref, rtol=1e-4, err_msg=lib)


def test_main_trains_and_samples() -> None:
    out: Any = char_rnn.main(steps=6, per_call=4, verbose=False)
    assert len(out["losses"]) == 6 and out["compile_count"] == 1
    assert out["sample"].startswith("Return a ") and len(out["sample"]) > 100
