"""Tensor gradient hooks (``register_hook``) and ``retain_grad``, against PyTorch.

Eagerly they run where PyTorch runs them: a leaf's hooks on each backward's gradient before
it is accumulated into ``.grad``, an interior tensor's on its whole gradient before it flows
on, in registration order, a returned tensor replacing the gradient. A compiled step traces
the hooks of the parameters it differentiates into the step and recompiles when one is
registered or removed; registering a hook or retaining a gradient inside a compiled step
raises before anything changed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc

X = np.array([[1.0, -2.0], [3.0, 0.5]], dtype=np.float32)
W = np.array([0.5, -1.5], dtype=np.float32)


def _interior_and_leaf_hooks(m: Any) -> list:
    x = m.tensor(X, requires_grad=True)
    w = m.tensor(W, requires_grad=True)
    seen: list = []
    hx = x.register_hook(lambda g: g * 2)
    w.register_hook(lambda g: seen.append(float(g.sum())))  # returns None: grad unchanged
    y = x * w
    y.retain_grad()
    z = y.exp()
    z.register_hook(lambda g: seen.append(float(g.abs().sum())))
    z.retain_grad()
    hy = y.register_hook(lambda g: g.clamp(-1, 1))
    y.register_hook(lambda g: g + 0.25)  # after the clamp: registration order
    loss = (z * z).sum()
    loss.backward(retain_graph=True)
    out = [x.grad.numpy().copy(), w.grad.numpy().copy(), y.grad.numpy().copy(),
           z.grad.numpy().copy()]
    hx.remove()
    with hy:  # a handle is a context manager that removes its hook
        pass
    loss.backward()  # accumulated: retained interior gradients sum too
    return out + [x.grad.numpy(), w.grad.numpy(), y.grad.numpy(), z.grad.numpy(),
                  np.array(seen), np.array([y.retains_grad, x.retains_grad, z.retains_grad])]


def test_eager_hooks_and_retained_grads_match_torch() -> None:
    for got, want in zip(_interior_and_leaf_hooks(gc), _interior_and_leaf_hooks(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_hook_on_the_loss_scales_every_gradient() -> None:
    for m in (torch, gc):
        w = m.tensor(W, requires_grad=True)
        loss = (w * w).sum()
        loss.register_hook(lambda g: g * 3)
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), 6 * W)


def test_errors_are_pytorchs() -> None:
    for m in (torch, gc):
        with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that "
                                               "doesn't require gradient"):
            m.ones(2).register_hook(lambda g: g)
        with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has "
                                               "requires_grad=False"):
            m.ones(2).retain_grad()
        for hook, err, msg in ((lambda g: g[:1], RuntimeError, "changed the size of value"),
                               (lambda g: g.double(), RuntimeError, "changed the type of value"),
                               (lambda g: 3, TypeError, "hook")):
            x = m.ones(2, requires_grad=True)
            x.register_hook(hook)
            with pytest.raises(err, match=msg):
                (x * 2).sum().backward()
            assert x.grad is None  # nothing accumulated


def _train(m: Any, compiled: bool) -> tuple:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.standard_normal((8, 2)).astype(np.float32)
    lin = m.nn.Linear(4, 2)
    with m.no_grad():
        lin.weight.copy_(m.tensor(rng.standard_normal((2, 4)).astype(np.float32)))
        lin.bias.zero_()
    opt = m.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)

    def step(a: Any, b: Any) -> Any:
        opt.zero_grad()
        loss = ((lin(a) - b) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fn = gc.compile(step) if compiled else step
    losses, handles = [], []
    for i in range(7):
        if i == 2:
            handles.append(lin.weight.register_hook(lambda g: g.clamp(-0.05, 0.05)))
        if i == 3:
            handles.append(lin.bias.register_hook(lambda g: g * 0.5))
            handles.append(lin.bias.register_hook(lambda g: g - 0.01))
        if i == 5:
            handles.pop(0).remove()
        losses.append(float(fn(m.tensor(x), m.tensor(y)).detach()))
    return losses, lin.weight.detach().numpy(), lin.bias.detach().numpy(), fn


def test_compiled_step_applies_parameter_hooks_and_recompiles_on_a_change() -> None:
    want = _train(torch, False)
    for compiled in (False, True):
        got = _train(gc, compiled)
        for a, b in zip(got[:3], want[:3]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert got[3].compile_count == 4  # none, + weight's, + bias's two, - weight's


def test_hooks_inside_a_compiled_step_raise_and_change_nothing() -> None:
    lin = gc.nn.Linear(3, 1)
    opt = gc.optim.SGD(lin.parameters(), lr=0.1)
    w0 = lin.weight.numpy().copy()
    x = np.ones((4, 3), dtype=np.float32)

    @gc.compile
    def hooked(a: Any) -> Any:
        opt.zero_grad()
        out = lin(a)
        out.register_hook(lambda g: g * 2)
        out.sum().backward()
        opt.step()
        return out

    @gc.compile
    def retained(a: Any) -> Any:
        opt.zero_grad()
        out = lin(a)
        out.retain_grad()
        out.sum().backward()
        opt.step()
        return out

    @gc.compile
    def on_a_parameter(a: Any) -> Any:
        lin.weight.register_hook(lambda g: g * 2)
        return lin(a)

    for fn, what in ((hooked, "register_hook"), (retained, "retain_grad"),
                     (on_a_parameter, "register_hook")):
        with pytest.raises(NotImplementedError, match=rf"{what}\(\) inside a compiled step"):
            fn(x)
        np.testing.assert_array_equal(lin.weight.numpy(), w0)
        assert lin.weight.grad is None
