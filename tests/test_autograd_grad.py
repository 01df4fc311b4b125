"""``graphc.autograd.grad`` (``torch.autograd.grad``), eager and inside a compiled step:
values and gradients against PyTorch, double backward (``create_graph=True``: gradient
penalties), PyTorch's errors, and nothing written to ``.grad``."""

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.autograd import BACKWARD_TWICE

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 4)).astype(np.float32)
X = RNG.standard_normal((5, 4)).astype(np.float32)


def _penalty(lib, w, x):
    y = (x @ w.T).tanh()
    (g,) = lib.autograd.grad(y.pow(2).sum(), x, create_graph=True)
    return (g.norm(dim=1) - 1).pow(2).mean()


def test_gradient_penalty_eager_matches_torch():
    w, tw = nn.Parameter(gc.tensor(W)), torch.nn.Parameter(torch.tensor(W))
    x, tx = gc.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    p, tp = _penalty(gc, w, x), _penalty(torch, tw, tx)
    p.backward()
    tp.backward()
    np.testing.assert_allclose(p.item(), tp.item(), rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_first_order_grads_of_leaves_and_interior_tensors_leave_grad_alone():
    w, tw = nn.Parameter(gc.tensor(W)), torch.nn.Parameter(torch.tensor(W))
    x, tx = gc.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    h, th = (x @ w.T).sin(), (tx @ tw.T).sin()
    go = RNG.standard_normal((5, 3)).astype(np.float32)
    got = gc.autograd.grad(h * h, [w, x, h], grad_outputs=gc.tensor(go))
    want = torch.autograd.grad(th * th, [tw, tx, th], grad_outputs=torch.tensor(go))
    for a, b in zip(got, want):
        assert not a.requires_grad
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert w.grad is None and x.grad is None


def test_errors_and_unused_inputs_as_in_torch():
    w = nn.Parameter(gc.tensor(W))
    x = gc.tensor(X, requires_grad=True)
    unused = gc.tensor(np.ones(2, np.float32), requires_grad=True)
    y = (x @ w.T).exp().sum()
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        gc.autograd.grad(y, [w, unused], retain_graph=True)
    gw, gu = gc.autograd.grad(y, [w, unused], allow_unused=True, retain_graph=True)
    assert gu is None and gw.shape == w.shape
    _, zu = gc.autograd.grad(y, [w, unused], materialize_grads=True, retain_graph=True)
    np.testing.assert_array_equal(zu.numpy(), np.zeros(2, np.float32))
    with pytest.raises(RuntimeError, match="does not require grad"):
        gc.autograd.grad(y, gc.tensor(X), retain_graph=True)
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        gc.autograd.grad(x @ w.T, w)
    with pytest.raises(NotImplementedError, match="is_grads_batched"):
        gc.autograd.grad(y, w, is_grads_batched=True)
    gc.autograd.grad(y, w)  # frees the graph (retain_graph defaults to create_graph)
    with pytest.raises(RuntimeError, match="second time") as err:
        gc.autograd.grad(y, w)
    assert str(err.value) == BACKWARD_TWICE


def test_gradient_penalty_in_a_compiled_step_matches_torch():
    w2, tw2 = nn.Parameter(gc.tensor(W)), torch.nn.Parameter(torch.tensor(W))
    opt, topt = optim.SGD([w2], lr=0.1, momentum=0.5), torch.optim.SGD([tw2], lr=0.1,
                                                                      momentum=0.5)

    @gc.compile
    def step(xb):
        opt.zero_grad()
        h = xb @ w2.T
        (gw,) = gc.autograd.grad(h.tanh().pow(2).sum(), w2, create_graph=True)
        loss = h.mean() + gw.pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(5)
    for _ in range(3):
        xb = rng.standard_normal((6, 4)).astype(np.float32)
        loss = step(xb)
        topt.zero_grad()
        th = torch.tensor(xb) @ tw2.T
        (tgw,) = torch.autograd.grad(th.tanh().pow(2).sum(), tw2, create_graph=True)
        tl = th.mean() + tgw.pow(2).sum()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5)
        np.testing.assert_allclose(w2.numpy(), tw2.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert step.compile_count == 1


def test_compiled_grad_returns_without_touching_grad():
    w = nn.Parameter(gc.tensor(W))

    @gc.compile
    def grads(xb):
        loss = (xb @ w.T).sigmoid().sum()
        (g,) = gc.autograd.grad(loss, [w])
        return g

    eager = gc.autograd.grad((gc.tensor(X) @ w.T).sigmoid().sum(), [w])[0]
    np.testing.assert_allclose(grads(X).numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)
    assert w.grad is None
