"""In-place ops inside a compiled step where eager PyTorch semantics rely on shared storage.

Eagerly a view shares its base's memory: writing a view writes the base, writing a base
changes its live views, writing an argument changes the caller's tensor. A trace is
functional (an in-place op rebinds the tensor to a new node), so those three would silently
differ from eager; each raises NotImplementedError at trace time instead, before the step
changes anything. In-place ops on tensors nothing else aliases keep working.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _view_add(m: Any, x: Any) -> Any:
    y = x * 1
    y[0].add_(5.0)
    return y


def _reshape_mul(m: Any, x: Any) -> Any:
    y = x * 1
    y.view(-1).mul_(2.0)
    return y


def _transpose_zero(m: Any, x: Any) -> Any:
    y = x + 1
    y.t()[0].zero_()
    return y


def _arg_add(m: Any, x: Any) -> Any:
    x.add_(1.0)
    return x * 2


def _live_view(m: Any, x: Any) -> Any:
    y = x * 1
    z = y.view(-1)
    y.add_(1.0)
    return z


def _live_slice_setitem(m: Any, x: Any) -> Any:
    y = x * 1
    row = y[1]
    y[1] = 7.0
    return row * 1


@pytest.mark.parametrize("f, what", [
    (_view_add, "on a view"), (_reshape_mul, "on a view"), (_transpose_zero, "on a view"),
    (_arg_add, "on argument 'x'"), (_live_view, "live view"), (_live_slice_setitem, "live view"),
])
def test_storage_sharing_in_place_ops_raise_when_compiled(f: Any, what: str) -> None:
    """Each of these gives PyTorch's values eagerly; compiled, it raises naming the case
    rather than returning the unshared result."""
    want = f(torch, torch.tensor(X)).numpy()
    np.testing.assert_array_equal(f(gc, gc.tensor(X)).numpy(), want)
    step = gc.compile(lambda x: f(gc, x))
    with pytest.raises(NotImplementedError, match=what):
        step(X.copy())


@pytest.mark.parametrize("f", [
    lambda m, x: (x * 2).add_(1.0),
    lambda m, x: m.nn.functional.relu(x * 2 - 3, inplace=True),
    lambda m, x: (lambda y: (y.__setitem__(0, 5.0), y)[1])(x * 1),
    lambda m, x: (lambda y: (y.masked_fill_(y > 2, -1.0), y)[1])(x + 0),
    lambda m, x: (x * 1).view(-1).add(1.0),
])
def test_in_place_ops_without_aliasing_still_compile(f: Any) -> None:
    want = f(torch, torch.tensor(X)).numpy()
    got = gc.compile(lambda x: f(gc, x))(X.copy()).numpy()
    np.testing.assert_array_equal(got, want)


def test_a_training_step_with_inplace_relu_compiles_and_matches_eager() -> None:
    """``nn.ReLU(inplace=True)`` writes an activation nothing else aliases: three compiled
    steps give eager's losses and parameters."""
    runs = []
    for compiled in (False, True):
        gc.manual_seed(0)
        m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True), nn.Linear(4, 1))
        sgd = gc.optim.SGD(m.parameters(), lr=0.1)

        def train(x: Any, m: Any = m, sgd: Any = sgd) -> Any:
            sgd.zero_grad()
            out = m(x).pow(2).mean()
            out.backward()
            sgd.step()
            return out

        f = gc.compile(train) if compiled else train
        losses = [float(f(X if compiled else gc.tensor(X))) for _ in range(3)]
        runs.append((losses, [p.numpy().copy() for p in m.parameters()]))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-5)
    for a, b in zip(runs[1][1], runs[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert runs[1][0][0] > runs[1][0][2]


def test_index_assignment_through_data_updates_the_parameter() -> None:
    """``p.data[0] = v`` in a step: the index assignment goes through the trace's ``.data``
    alias, so the compiled step writes the parameter as eager does (it used to rebind the
    alias alone, and the write was lost)."""
    results = []
    for mode in ("eager", "compiled"):
        gc.manual_seed(0)
        m = nn.Linear(3, 2)

        def step(x: Any, m: Any = m) -> Any:
            with gc.no_grad():
                m.weight.data[0] = 0.0
            return m(x).sum()

        f = gc.compile(step) if mode == "compiled" else step
        x = np.ones((2, 3), np.float32)
        out = f(x if mode == "compiled" else gc.tensor(x))
        results.append((float(out), m.weight.numpy().copy()))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert not results[1][1][0].any() and results[1][1][1].any()
