"""Recurrent layers under ``autocast("cpu", bfloat16)``: PyTorch's dtypes, eager and compiled
equal, PyTorch's values within bf16 rounding.

Regressions: a compiled LSTM under autocast failed in bf16 legalisation (the scan's operands
were widened to float32 while its body's inputs stayed bf16); PyTorch's LSTM returns bf16
(oneDNN's ``mkldnn_rnn_layer`` is on the CPU autocast list) where graphc returned float32;
a compiled Elman RNN returned float32 where eager returned bf16 (the traced layer added the
input bias in float32 after the autocast projection), and a projected LSTM failed to trace
(its h changed dtype between the first step and the next)."""

from __future__ import annotations

import numpy as np
import pytest
from _torch import torch

import graphc as gc

CASES = [("LSTM", {}), ("LSTM", {"proj_size": 4}), ("LSTM", {"bidirectional": True}),
         ("GRU", {}), ("RNN", {}), ("RNN", {"nonlinearity": "relu"}),
         ("GRU", {"bidirectional": True})]


def _pair(name, kw):
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(8, 16, 2, batch_first=True, **kw)
    gm = getattr(gc.nn, name)(8, 16, 2, batch_first=True, **kw)
    gm.load_state_dict({k: gc.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return tm, gm


def _first(out):
    y, h = out
    return y, (h[0] if isinstance(h, tuple) else h)


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}{sorted(k.items())}" for n, k in CASES])
def test_recurrent_layers_under_autocast(name, kw):
    tm, gm = _pair(name, kw)
    x = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ty, th = _first(tm(torch.tensor(x)))
    with gc.autocast("cpu", dtype=gc.bfloat16):
        ey, eh = _first(gm(gc.tensor(x)))

    @gc.compile(example_args=(x,))
    def f(a):
        with gc.autocast("cpu", dtype=gc.bfloat16):
            return _first(gm(a))

    cy, ch = f(x)
    tname = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
    for t, e, c in ((ty, ey, cy), (th, eh, ch)):
        assert e.dtype.name == tname[t.dtype] and c.dtype is e.dtype
        ev, cv = e.detach().float().numpy(), c.detach().float().numpy()
        # compiled computes what eager does, up to float32 rounding of the elementwise math
        # (which may move a bf16 result by its last bit)
        rtol = 2.0 ** -7 if e.dtype is gc.bfloat16 else 1e-5
        np.testing.assert_allclose(cv, ev, rtol=rtol, atol=1e-6)
        np.testing.assert_allclose(ev, t.detach().float().numpy(), atol=8e-3, rtol=0)


def test_compiled_lstm_language_model_trains_under_autocast():
    """An embedding + 2-layer LSTM + read-out trained 3 Adam steps under autocast: the
    compiled step compiles once, its losses follow PyTorch's autocast run, and the
    parameters stay float32 (master weights)."""
    torch.manual_seed(1)
    temb, tl, tout = torch.nn.Embedding(20, 8), torch.nn.LSTM(8, 16, 2), torch.nn.Linear(16, 20)
    mods = [(temb, gc.nn.Embedding(20, 8)), (tl, gc.nn.LSTM(8, 16, 2)),
            (tout, gc.nn.Linear(16, 20))]
    for t, g in mods:
        g.load_state_dict({k: gc.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    gparams = [p for _, g in mods for p in g.parameters()]
    topt = torch.optim.Adam([p for t, _ in mods for p in t.parameters()], lr=1e-2)
    gopt = gc.optim.Adam(gparams, lr=1e-2)
    gemb, glstm, gout = (g for _, g in mods)

    def gstep(x, y):
        gopt.zero_grad()
        with gc.autocast("cpu", dtype=gc.bfloat16):
            h, _ = glstm(gemb(x))
            loss = gc.nn.functional.cross_entropy(gout(h).reshape(-1, 20), y.reshape(-1))
        loss.backward()
        gopt.step()
        return loss

    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 20, (6, 4)), rng.integers(0, 20, (6, 4))
    step = gc.compile(gstep, example_args=(x, y))
    for _ in range(3):
        topt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            th, _ = tl(temb(torch.tensor(x)))
            tloss = torch.nn.functional.cross_entropy(tout(th).reshape(-1, 20),
                                                      torch.tensor(y).reshape(-1))
        tloss.backward()
        topt.step()
        gloss = step(x, y)
        assert abs(float(gloss) - float(tloss)) < 2e-2 * max(1.0, abs(float(tloss)))
    assert step.compile_count == 1
    assert all(p.dtype is gc.float32 and p.grad.dtype is gc.float32 for p in gparams)
