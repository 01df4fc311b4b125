"""Gradients through a compiled call (``graphc.compiled_grad``): a compiled model's result
carries an autograd graph as the eager one does, so ``loss.backward()`` outside the compiled
function reaches its parameters (values and gradients against eager graphc and PyTorch);
where that cannot be honoured (state updates, random draws, arguments that require grad, a
parameter changed before the backward) a clear error is raised before any ``.grad`` moves."""

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim


def _mlp(seed: int = 0) -> nn.Module:
    gc.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _torch_copy(m: nn.Module) -> "torch.nn.Module":
    t = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    t.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in m.state_dict().items()})
    return t


def _x(n: int = 5, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def test_backward_outside_reaches_parameters_like_eager_and_torch():
    m = _mlp()
    tm = _torch_copy(m)
    fwd = gc.compile(m)
    w = nn.Parameter(gc.tensor(np.array([1.0, -2.0, 0.5], np.float32)))
    tw = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    for step in range(3):
        x = _x(seed=step)
        out = fwd(gc.tensor(x))
        assert out.requires_grad and out.grad_fn is not None
        loss = (out * w).sum() + (w * w).sum()  # a compiled result mixed into eager code
        loss.backward()
        tl = (tm(torch.tensor(x)) * tw).sum() + (tw * tw).sum()
        tl.backward()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5, atol=1e-6)
        for p, tp in zip(m.parameters(), tm.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert fwd.compile_count == 1


def test_training_loop_with_compiled_forward_matches_torch():
    m = _mlp(3)
    tm = _torch_copy(m)
    fwd = gc.compile(m)
    opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    y = np.array([0, 2, 1, 1, 0])
    for step in range(4):
        x = _x(seed=10 + step)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(fwd(gc.tensor(x)), gc.tensor(y))
        loss.backward()
        opt.step()
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5, atol=1e-6)
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_several_results_and_a_nonlinear_use_of_them():
    m = _mlp(5)
    tm = _torch_copy(m)

    @gc.compile
    def two(x):
        h = m(x)
        return h.sin(), {"sq": h * h}

    x = _x(seed=7)
    a, d = two(gc.tensor(x))
    ((a * d["sq"]).sum() + a.exp().mean()).backward()
    th = tm(torch.tensor(x))
    ta, tsq = th.sin(), th * th
    ((ta * tsq).sum() + ta.exp().mean()).backward()
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_finite_differences_through_a_compiled_result():
    gc.manual_seed(0)
    lin = nn.Linear(3, 2).double()
    fwd = gc.compile(lambda x: (lin(x) ** 3).tanh())
    x = np.random.default_rng(2).standard_normal((4, 3))
    fwd(gc.tensor(x)).sum().backward()
    g = lin.weight.grad.numpy().copy()
    w = lin.weight.numpy()
    eps = 1e-6
    for i in range(2):
        for j in range(3):
            w0 = w[i, j]
            with gc.no_grad():
                lin.weight.data[i, j] = w0 + eps
                up = fwd(gc.tensor(x)).sum().item()
                lin.weight.data[i, j] = w0 - eps
                dn = fwd(gc.tensor(x)).sum().item()
                lin.weight.data[i, j] = w0
            assert abs((up - dn) / (2 * eps) - g[i, j]) < 1e-6


def test_whole_step_results_stay_plain_values():
    m = _mlp()
    opt = optim.SGD(m.parameters(), lr=0.1)

    @gc.compile
    def step(x, y):
        opt.zero_grad()
        logits = m(x)
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        return loss, logits

    loss, logits = step(gc.tensor(_x()), gc.tensor(np.array([0, 1, 2, 0, 1])))
    assert not loss.requires_grad and not logits.requires_grad


def test_no_grad_results_are_plain_values():
    fwd = gc.compile(_mlp())
    with gc.no_grad():
        out = fwd(gc.tensor(_x()))
    assert not out.requires_grad


def _grads(m):
    return [None if p.grad is None else p.grad.numpy().copy() for p in m.parameters()]


def test_state_updating_function_raises_on_backward_and_changes_nothing():
    gc.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    fwd = gc.compile(m)
    out = fwd(gc.tensor(_x(8)))  # the running statistics move once, as eagerly
    with pytest.raises(NotImplementedError, match="updates state"):
        out.sum().backward()
    assert all(g is None for g in _grads(m))


def test_random_function_raises_on_backward():
    gc.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), nn.Linear(6, 2))
    out = gc.compile(m)(gc.tensor(_x()))
    with pytest.raises(NotImplementedError, match="random numbers"):
        out.sum().backward()
    assert all(g is None for g in _grads(m))


def test_parameter_changed_before_backward_raises():
    m = _mlp()
    fwd = gc.compile(m)
    out = fwd(gc.tensor(_x()))
    with gc.no_grad():
        m[0].weight.data.mul_(2.0)  # through .data: no eager version bump, still caught
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    assert all(g is None for g in _grads(m))


def test_argument_that_requires_grad_is_refused_with_its_name():
    m = _mlp()
    fwd = gc.compile(lambda x: m(x))
    x = gc.tensor(_x(), requires_grad=True)
    before = [p.numpy().copy() for p in m.parameters()]
    for _ in range(2):  # the slow path, then the compiled variant's fast path
        with pytest.raises(NotImplementedError, match="argument 'x' requires grad"):
            fwd(x)
        fwd(gc.tensor(_x()))
    with gc.no_grad():
        assert not fwd(x).requires_grad
    for b, p in zip(before, m.parameters()):
        np.testing.assert_array_equal(b, p.numpy())


def test_argument_requiring_grad_in_a_step_with_backward_is_refused():
    m = _mlp()

    @gc.compile
    def saliency(x):
        m(x).sum().backward()

    with pytest.raises(NotImplementedError, match="argument 'x' requires grad"):
        saliency(gc.tensor(_x(), requires_grad=True))
    assert all(g is None for g in _grads(m))
