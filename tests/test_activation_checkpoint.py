"""``graphc.utils.checkpoint`` (``torch.utils.checkpoint``) and ``gc.where(cond)``: values
and gradients equal PyTorch's, eagerly and in a compiled step; PyTorch's argument checks."""

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.utils.checkpoint import checkpoint, checkpoint_sequential


def _pair(seed: int = 0):
    gc.manual_seed(seed)
    g = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    t = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                            torch.nn.ReLU(), torch.nn.Linear(8, 2))
    t.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in g.state_dict().items()})
    return g, t


X = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)


def test_checkpoint_and_sequential_equal_torch_eagerly():
    g, t = _pair()
    gx, tx = gc.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    a = checkpoint(lambda z: g[:2](z) * 2.0, gx, use_reentrant=False)
    out = checkpoint_sequential(g[2:], 2, a, use_reentrant=False)
    ta = torch.utils.checkpoint.checkpoint(lambda z: t[:2](z) * 2.0, tx, use_reentrant=False)
    tout = torch.utils.checkpoint.checkpoint_sequential(t[2:], 2, ta, use_reentrant=False)
    out.pow(2).sum().backward()
    tout.pow(2).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    for p, tp in zip(g.parameters(), t.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_checkpoint_inside_a_compiled_step_equals_torch():
    g, t = _pair(2)
    opt, topt = optim.SGD(g.parameters(), lr=0.1), torch.optim.SGD(t.parameters(), lr=0.1)

    @gc.compile
    def step(x):
        opt.zero_grad()
        h = checkpoint(g[:3], x, use_reentrant=False)
        loss = g[3:](h).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    for k in range(3):
        x = np.random.default_rng(k).standard_normal((6, 4)).astype(np.float32)
        loss = step(x)
        topt.zero_grad()
        th = torch.utils.checkpoint.checkpoint(t[:3], torch.tensor(x), use_reentrant=False)
        tl = t[3:](th).pow(2).mean()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5)
    assert step.compile_count == 1


def test_checkpoint_argument_checks_as_in_torch():
    f = nn.Linear(4, 2)
    x = gc.tensor(X)
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        checkpoint(f, x)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(lambda z, scale: f(z) * scale, x, scale=2.0, use_reentrant=True)
    np.testing.assert_allclose(
        checkpoint(lambda z, scale: f(z) * scale, x, scale=2.0, use_reentrant=False).numpy(),
        (f(x) * 2.0).numpy())
    with pytest.raises(ValueError, match="determinism_check"):
        checkpoint(f, x, use_reentrant=False, determinism_check="strict")
    with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
        checkpoint(f, x, use_reentrant=True, debug=True)


def test_where_with_the_condition_alone_is_nonzero():
    c = np.array([[True, False], [False, True], [True, True]])
    got = gc.where(gc.tensor(c))
    want = torch.where(torch.tensor(c))
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(TypeError, match="condition alone or a condition and two values"):
        gc.where(gc.tensor(c), 1.0)
