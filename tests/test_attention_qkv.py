"""A GPT block's q, k and v cut from one biased projection: the bias add is computed in the
three copies that feed the attention kernel, not stored first (``codegen.planning``)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import graphc as gc
from graphc.nn import functional as F

torch = pytest.importorskip("torch")

B, T, C, H = 3, 10, 24, 2


def _data() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((B, T, C)).astype(np.float32)
    w = (rng.standard_normal((3 * C, C)) * 0.2).astype(np.float32)
    b = rng.standard_normal(3 * C).astype(np.float32)
    g = rng.standard_normal((B, T, C)).astype(np.float32)
    return [x, w, b, g]


def _graphc(x, w, b, g, compiled: bool):
    xs, ws, bs = (gc.nn.Parameter(gc.tensor(a)) for a in (x, w, b))

    def step(go):
        for p in (xs, ws, bs):
            p.grad = None
        qkv = F.linear(xs, ws, bs)
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        (y * go).sum().backward()
        return y

    fn = gc.compile(step, dynamic=False) if compiled else step
    out = fn(g if compiled else gc.tensor(g))
    res = [np.asarray(out.numpy() if hasattr(out, "numpy") else out)]
    return res + [p.grad.numpy() for p in (xs, ws, bs)], fn


def _torch(x, w, b, g):
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    qkv = torch.nn.functional.linear(tx, tw, tb)
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = y.transpose(1, 2).reshape(B, T, C)
    (y * torch.tensor(g)).sum().backward()
    return [y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]


def test_qkv_bias_add_is_computed_in_the_copies_and_values_match_torch() -> None:
    data = _data()
    want = _torch(*data)
    got, fn = _graphc(*data, compiled=True)
    eager, _ = _graphc(*data, compiled=False)
    for name, a, e, t in zip(("out", "dx", "dw", "db"), got, eager, want):
        tol = 1e-5 * (1 + np.abs(t).max())
        np.testing.assert_allclose(a, t, rtol=1e-5, atol=tol, err_msg=name)
        np.testing.assert_allclose(e, t, rtol=1e-5, atol=tol, err_msg=name)
    text = fn.ir("fused")
    assert "= attention " in text, text
    # the projection plus bias has no kernel of its own: each copy fuses the add (the one
    # add of that shape left is the backward's, summing dq, dk and dv into one gradient)
    own = re.findall(rf"^k\d+: %\d+ = add : f32\[{B},{T},{3 * C}\]", text, re.M)
    assert len(own) == 1, text
    fused_in = [line for line in text.splitlines()
                if line.strip().startswith("fuses:") and " add" in line and "slice" in line]
    assert len(fused_in) >= 3, text
