"""A character-level GPT-style decoder, its training step compiled by graphc.

``python examples/gpt.py [--steps N]``. The text is the docstrings of a few Python standard
library modules and of their public functions and classes (``collections``, ``functools``,
``itertools``, ``textwrap``, ``json``, ``string``, ``heapq``, ``bisect``): they ship with every
Python (unless it runs with ``-OO``), so nothing is downloaded.

The model is GPT-2's shape at toy size: token and position embeddings, pre-LayerNorm blocks of
causal self-attention (``F.scaled_dot_product_attention(is_causal=True)``) and a GELU MLP, a
final LayerNorm and an output layer tied to the token embedding. Training uses AdamW with
weight decay on the matrices only, gradient-norm clipping, and a linear warm-up followed by a
cosine decay of the learning rate (``LambdaLR``). ``define(nn, F)`` builds the classes from a
module namespace, so the same code gives the PyTorch model too (tests/test_gpt_example.py
trains both side by side).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import math
import time
from typing import Any

import numpy as np

import graphc as gc
from graphc import nn, optim
from graphc.nn import functional as F

SEED = 0
MODULES = ("collections", "functools", "itertools", "textwrap", "json", "string", "heapq",
           "bisect")
CONFIG = dict(block_size=32, n_embd=48, n_head=4, n_layer=2, dropout=0.1)
BATCH = 16
LR, WARMUP, WEIGHT_DECAY, CLIP = 3e-3, 20, 0.1, 1.0


def load_text() -> str:
    """Docstrings of the standard-library modules in ``MODULES`` and of their public members."""
    parts = []
    for name in MODULES:
        mod = importlib.import_module(name)
        parts.append(inspect.getdoc(mod) or "")
        for attr in sorted(dir(mod)):
            obj = getattr(mod, attr)
            if attr.startswith("_") or not (inspect.isclass(obj) or callable(obj)):
                continue
            doc = inspect.getdoc(obj)
            if doc:
                parts.append(doc)
    return "\n\n".join(p for p in parts if p)


def define(nn: Any, F: Any) -> Any:
    """The GPT class, written against ``nn`` and ``F`` (graphc's or PyTorch's)."""

    class CausalSelfAttention(nn.Module):
        def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.resid_drop = nn.Dropout(dropout)
            self.n_head, self.dropout = n_head, dropout

        def forward(self, x: Any) -> Any:
            B, T, C = x.shape
            qkv = self.c_attn(x)
            q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, self.n_head, C // self.n_head)
                       .transpose(1, 2) for i in range(3))
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
            y = y.transpose(1, 2).reshape(B, T, C)
            return self.resid_drop(self.c_proj(y))

    class Block(nn.Module):
        def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention(n_embd, n_head, dropout)
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                     nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout))

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, vocab_size: int, block_size: int, n_embd: int, n_head: int,
                     n_layer: int, dropout: float) -> None:
            super().__init__()
            self.block_size = block_size
            self.wte = nn.Embedding(vocab_size, n_embd)
            self.wpe = nn.Embedding(block_size, n_embd)
            self.drop = nn.Dropout(dropout)
            self.h = nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.lm_head.weight = self.wte.weight  # weight tying

        def forward(self, idx: Any) -> Any:
            T = idx.shape[1]
            x = self.drop(self.wte(idx) + self.wpe.weight[:T])
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT


def initial_state(model: Any, n_layer: int) -> None:
    """GPT-2's initialisation: N(0, 0.02) matrices and embeddings, zero biases, residual
    projections scaled by 1/sqrt(2 n_layer). Drawn with numpy so every framework gets the
    same initial weights."""
    rng = np.random.default_rng(SEED)
    state = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        if name.endswith("bias"):
            state[name] = np.zeros(shape, np.float32)
        elif name.startswith("ln") or ".ln_" in name:
            state[name] = np.ones(shape, np.float32)
        else:
            std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("c_proj.weight",
                                                                  "mlp.2.weight")) else 0.02
            state[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return state


def param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on the matrices and embeddings (rank >= 2), none on biases and LayerNorm
    weights."""
    decay = [p for _, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_lambda(total: int) -> Any:
    def f(step: int) -> float:
        if step < WARMUP:
            return (step + 1) / WARMUP
        t = (step - WARMUP) / max(1, total - WARMUP)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))
    return f


def batches(data: np.ndarray, steps: int, block: int, batch: int, seed: int = 1) -> Any:
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        ix = rng.integers(0, len(data) - block - 1, batch)
        x = np.stack([data[i:i + block] for i in ix])
        y = np.stack([data[i + 1:i + 1 + block] for i in ix])
        yield x, y


def make_trainer(model: Any, nn: Any, F: Any, optim: Any, steps: int,
                 amp: Any = None) -> tuple[Any, Any, Any]:
    """(train_step, optimizer, scheduler) for ``model``: the step zeroes the gradients, takes
    the loss, back-propagates, clips and updates; the scheduler steps outside it. ``amp``: a
    function returning the mixed-precision context the forward and loss run in (e.g.
    ``lambda: gc.autocast("cpu", dtype=gc.bfloat16)``), as PyTorch's AMP recipe has it."""
    opt = optim.AdamW(param_groups(model, WEIGHT_DECAY), lr=LR, betas=(0.9, 0.95))
    sched = optim.lr_scheduler.LambdaLR(opt, lr_lambda(steps))

    def train_step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        with amp() if amp is not None else contextlib.nullcontext():
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        return loss

    return train_step, opt, sched


def sample(model: Any, stoi: dict[str, int], itos: list[str], prompt: str, n: int,
           temperature: float = 0.8) -> str:
    """``n`` characters after ``prompt``, drawn from the model's softmax (eager, eval mode)."""
    model.eval()
    rng = np.random.default_rng(SEED)
    ids = [stoi[c] for c in prompt if c in stoi] or [0]
    with gc.no_grad():
        for _ in range(n):
            ctx = np.array([ids[-model.block_size:]], np.int64)
            logits = np.asarray(model(ctx))[0, -1].astype(np.float64) / temperature
            p = np.exp(logits - logits.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    model.train()
    return "".join(itos[i] for i in ids)


def main(steps: int = 300, verbose: bool = True) -> dict[str, Any]:
    text = load_text()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], np.int64)
    if verbose:
        print(f"text: {len(text)} characters of docstrings from {', '.join(MODULES)}; "
              f"vocabulary {len(chars)}")
    gc.manual_seed(SEED)
    model = define(nn, F)(len(chars), **CONFIG)
    model.load_state_dict(initial_state(model, CONFIG["n_layer"]), strict=False)
    train_step, opt, sched = make_trainer(model, nn, F, optim, steps)
    step = gc.compile(train_step)
    losses = []
    t0 = time.perf_counter()
    for i, (x, y) in enumerate(batches(data, steps, CONFIG["block_size"], BATCH)):
        losses.append(float(np.asarray(step(x, y))))
        sched.step()
        if verbose and (i % 50 == 0 or i == steps - 1):
            print(f"step {i:4d} | loss {losses[-1]:.4f} | lr {sched.get_last_lr()[0]:.2e} | "
                  f"{time.perf_counter() - t0:.1f}s")
    text_out = sample(model, stoi, chars, "Return a ", 120)
    if verbose:
        print("sample:", repr(text_out))
    return {"losses": losses, "sample": text_out, "compile_count": step.compile_count}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    main(ap.parse_args().steps)
