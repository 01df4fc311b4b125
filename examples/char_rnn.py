"""A character-level LSTM language model, its training compiled by graphc, many steps a call.

``python examples/char_rnn.py [--steps N] [--per-call K]``. The text is the docstrings of a few
Python standard-library modules (the same text as ``examples/gpt.py``: it ships with every
Python, so nothing is downloaded).

The model is an embedding, a two-layer ``nn.LSTM`` (``batch_first``, dropout between the
layers) and a linear read-out. The LSTM is one loop node in the compiled step (``scan``), so
the step compiles once for every sequence length. Training uses Adam, gradient-norm clipping
and a cosine learning-rate decay; ``step.run(xs, ys, scheduler=sched)`` runs ``K`` whole
training steps (forward, backward, clipping, update, the scheduler between steps) in one
native call. ``define(nn)`` builds the class from a module namespace, so the same code gives
the PyTorch model too (tests/test_char_rnn_example.py trains both side by side).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

import graphc as gc
from graphc import nn, optim

SEED = 0
CONFIG = dict(embed=32, hidden=128, layers=2, dropout=0.1)
SEQ, BATCH = 48, 16
LR, CLIP = 3e-3, 1.0


def load_text() -> str:
    """The docstrings examples/gpt.py trains on."""
    path = Path(__file__).resolve().parent / "gpt.py"
    spec = importlib.util.spec_from_file_location("gpt_example", path)
    assert spec is not None and spec.loader is not None
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)
    return gpt.load_text()


def define(nn: Any) -> Any:
    """The CharLSTM class, written against ``nn`` (graphc's or PyTorch's)."""

    class CharLSTM(nn.Module):
        def __init__(self, vocab: int, embed: int, hidden: int, layers: int,
                     dropout: float) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, embed)
            self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True,
                                dropout=dropout)
            self.head = nn.Linear(hidden, vocab)

        def forward(self, idx: Any, state: Any = None) -> Any:
            out, state = self.lstm(self.embed(idx), state)
            return self.head(out), state

    return CharLSTM


def initial_state(model: Any) -> dict[str, np.ndarray]:
    """PyTorch's own initialisation, drawn with numpy so every framework starts equal:
    U(-1/sqrt(hidden), 1/sqrt(hidden)) for the LSTM, N(0, 1) embeddings, U(-1/sqrt(fan_in),
    ...) for the read-out."""
    rng = np.random.default_rng(SEED)
    state = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        if name.startswith("embed"):
            v = rng.standard_normal(shape)
        elif name.startswith("lstm"):
            k = 1.0 / math.sqrt(model.lstm.hidden_size)
            v = rng.uniform(-k, k, shape)
        else:
            k = 1.0 / math.sqrt(model.head.in_features)
            v = rng.uniform(-k, k, shape)
        state[name] = v.astype(np.float32)
    return state


def make_trainer(model: Any, nn: Any, optim: Any, steps: int) -> tuple[Any, Any, Any]:
    """(train_step, optimizer, scheduler): the step zeroes the gradients, takes the
    cross-entropy of the next character, back-propagates, clips and updates."""
    opt = optim.Adam(model.parameters(), lr=LR)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=LR / 10)
    loss_fn = nn.CrossEntropyLoss()

    def train_step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        logits, _ = model(x)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        return loss

    return train_step, opt, sched


def batches(data: np.ndarray, steps: int, seq: int, batch: int, seed: int = 1
            ) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` batches of ``batch`` random windows, stacked: ``(steps, batch, seq)``."""
    rng = np.random.default_rng(seed)
    ix = rng.integers(0, len(data) - seq - 1, (steps, batch))
    offs = np.arange(seq)
    return data[ix[..., None] + offs], data[ix[..., None] + offs + 1]


def sample(model: Any, stoi: dict[str, int], itos: list[str], prompt: str, n: int,
           temperature: float = 0.8) -> str:
    """``n`` characters after ``prompt`` (eager, eval mode), the LSTM state carried along."""
    model.eval()
    rng = np.random.default_rng(SEED)
    ids = [stoi[c] for c in prompt if c in stoi] or [0]
    with gc.no_grad():
        logits, state = model(np.array([ids], np.int64))
        for _ in range(n):
            z = np.asarray(logits)[0, -1].astype(np.float64) / temperature
            p = np.exp(z - z.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
            logits, state = model(np.array([[ids[-1]]], np.int64), state)
    model.train()
    return "".join(itos[i] for i in ids)


def main(steps: int = 200, per_call: int = 25, verbose: bool = True) -> dict[str, Any]:
    text = load_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], np.int64)
    if verbose:
        print(f"text: {len(text)} characters, vocabulary {len(chars)}")
    gc.manual_seed(SEED)
    model = define(nn)(len(chars), **CONFIG)
    model.load_state_dict(initial_state(model))
    train_step, opt, sched = make_trainer(model, nn, optim, steps)
    step = gc.compile(train_step)
    xs, ys = batches(data, steps, SEQ, BATCH)
    losses: list[float] = []
    t0 = time.perf_counter()
    for start in range(0, steps, per_call):
        chunk = step.run(xs[start:start + per_call], ys[start:start + per_call],
                         scheduler=sched)
        losses.extend(float(v) for v in np.asarray(chunk))
        if verbose:
            print(f"step {len(losses) - 1:4d} | loss {losses[-1]:.4f} | "
                  f"lr {sched.get_last_lr()[0]:.2e} | {time.perf_counter() - t0:.1f}s")
    text_out = sample(model, stoi, chars, "Return a ", 120)
    if verbose:
        print("sample:", repr(text_out))
    return {"losses": losses, "sample": text_out, "compile_count": step.compile_count}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--per-call", type=int, default=25)
    a = ap.parse_args()
    main(a.steps, a.per_call)
