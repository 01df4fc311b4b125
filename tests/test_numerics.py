"""Numerical edge cases against PyTorch 2.13 (issue 15, items 6 and 8).

Each case runs eagerly, through the interpreter backend and natively on the CPU, and is
compared with PyTorch's values (not only with each other):

- cross-entropy / nll_loss with every target equal to ``ignore_index``: mean loss NaN (0/0),
  gradients exactly 0, an SGD step with momentum leaves the parameters unchanged;
- ``pow`` gradients where PyTorch defines them by continuity: d(x**0)/dx = 0 at x = 0,
  d(0**y)/dy = 0 for y >= 0, d(x**y)/dy = 0 at x = 0, y >= 0 (and -inf for y < 0);
- the cases whose fix is in the front end (``tensor_ops``: ``clamp``'s gradient at the
  bounds, integer ``min``/``argmin`` at the type's minimum, ``var`` over an empty dim) are
  marked xfail(strict) with what is missing, so they turn into failures once fixed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim

pytest.importorskip("graphc.codegen.cpu")
BACKENDS = ("eager", "interp", "cpu")


def _run(step: Any, backend: str, *args: np.ndarray) -> Any:
    if backend == "eager":
        return step(*[gc.tensor(a) for a in args])
    return gc.compile(step, backend="interp" if backend == "interp" else None)(*args)


def _value(v: Any) -> np.ndarray:
    return np.asarray(v.numpy() if hasattr(v, "numpy") else v)


# -- item 6: an all-ignore_index batch ---------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["ce", "ce_smoothing", "ce_weight", "nll"])
def test_all_ignored_batch_has_zero_gradients(backend: str, kind: str) -> None:
    gc.manual_seed(0)
    model = nn.Linear(4, 5)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    w0, b0 = model.weight.numpy().copy(), model.bias.numpy().copy()
    cw = np.linspace(0.5, 2.0, 5).astype(np.float32)

    def loss_of(out: Any, t: Any, lib: Any, weight: Any) -> Any:
        if kind == "nll":
            return lib.nll_loss(lib.log_softmax(out, 1), t)
        return lib.cross_entropy(out, t, weight=weight if kind == "ce_weight" else None,
                                 label_smoothing=0.2 if kind == "ce_smoothing" else 0.0)

    def step(x: Any, t: Any) -> Any:
        opt.zero_grad()
        loss = loss_of(model(x), t, F, gc.tensor(cw))
        loss.backward()
        opt.step()
        return loss

    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    t = np.full(6, -100, np.int64)
    loss = _value(_run(step, backend, x, t))
    tx = torch.tensor(np.random.default_rng(1).standard_normal((6, 5)).astype(np.float32),
                      requires_grad=True)
    tl = loss_of(tx, torch.tensor(t), torch.nn.functional, torch.tensor(cw))
    tl.backward()
    assert np.isnan(loss) and bool(torch.isnan(tl))
    assert np.all(tx.grad.numpy() == 0)
    np.testing.assert_array_equal(model.weight.grad.numpy(), np.zeros_like(w0))
    np.testing.assert_array_equal(model.bias.grad.numpy(), np.zeros_like(b0))
    np.testing.assert_array_equal(model.weight.numpy(), w0)
    np.testing.assert_array_equal(model.bias.numpy(), b0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_partly_ignored_batch_matches_torch(backend: str) -> None:
    """Ignored rows still drop out of the mean; the others match PyTorch's gradient, and an
    ignored row whose class-0 log-probability is -inf does not turn the loss into NaN."""
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    x[1, 0] = -np.inf
    t = np.array([2, -100, 0, -100, 3], np.int64)

    for_torch = torch.tensor(x, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(for_torch, torch.tensor(t))
    tl.backward()
    xs = gc.tensor(x, requires_grad=True)
    loss = F.cross_entropy(xs, gc.tensor(t))
    loss.backward()
    assert np.isfinite(float(loss.numpy()))
    np.testing.assert_allclose(float(loss.numpy()), float(tl.detach()), rtol=1e-6)
    np.testing.assert_allclose(xs.grad.numpy(), for_torch.grad.numpy(), rtol=1e-6, atol=1e-7)
    if backend != "eager":
        gc.manual_seed(0)
        model = nn.Linear(4, 4)
        fn = gc.compile(lambda a, b: F.cross_entropy(model(a), b),
                        backend="interp" if backend == "interp" else None)
        got = float(_value(fn(x.copy(), t)))
        with gc.no_grad():
            want = float(F.cross_entropy(model(gc.tensor(x)), gc.tensor(t)).numpy())
        np.testing.assert_allclose(got, want, rtol=1e-6)


# -- item 8: pow gradients at zero ---------------------------------------------------------
def _grads(backend: str, fn: Any, *arrays: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    params = [nn.Parameter(a.copy()) for a in arrays]

    def step() -> Any:
        for p in params:
            p.grad = None
        out = fn(*params)
        out.sum().backward()
        return out

    if backend == "eager":
        out = _value(step())
    else:
        out = _value(gc.compile(step, backend="interp" if backend == "interp" else None)())
    return out, [None if p.grad is None else p.grad.numpy().copy() for p in params]


def _torch_grads(fn: Any, *arrays: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


POW_CASES = {
    "x ** 0.0": (lambda x: x ** 0.0, [np.array([0.0, -0.0, 1.0, 2.0, -1.5], np.float32)]),
    "x ** 2.0": (lambda x: x ** 2.0, [np.array([0.0, -0.0, 1.0, 2.0, -1.5], np.float32)]),
    "0 ** y": (lambda y: 0.0 ** y, [np.array([0.0, 0.5, 1.0, 2.0, -1.0, -0.5], np.float32)]),
    "x ** y": (lambda x, y: x ** y,
               [np.array([0.0, 0.0, 0.0, 0.0, 0.0, -0.0, 1.0, 2.0, -2.0], np.float32),
                np.array([0.0, 0.5, 1.0, 2.0, -1.0, -1.0, 0.0, 0.0, 3.0], np.float32)]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(POW_CASES))
def test_pow_gradients_at_zero_match_torch(backend: str, case: str) -> None:
    fn, arrays = POW_CASES[case]
    out, grads = _grads(backend, fn, *arrays)
    tout, tgrads = _torch_grads(fn, *arrays)
    np.testing.assert_allclose(out, tout, rtol=1e-6)
    for g, tg in zip(grads, tgrads):
        np.testing.assert_allclose(g, tg, rtol=1e-6, atol=0)


# -- item 8: front-end cases (graphc/tensor_ops.py) --------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_clamp_gradient_is_one_at_the_bounds(backend: str) -> None:
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0], np.float32)
    _, grads = _grads(backend, lambda a: a.clamp(0.0, 1.0), x)
    _, tgrads = _torch_grads(lambda a: a.clamp(0.0, 1.0), x)
    np.testing.assert_array_equal(grads[0], tgrads[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_int32_min_at_the_type_minimum(backend: str) -> None:
    x = np.array([[5, -2147483648, 3], [1, 2, -7]], np.int32)
    got = _value(_run(lambda a: a.amin(1), backend, x))
    idx = _value(_run(lambda a: a.argmin(1), backend, x))
    tx = torch.tensor(x)
    np.testing.assert_array_equal(got, tx.amin(1).numpy())
    np.testing.assert_array_equal(idx, tx.argmin(1).numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_var_over_an_empty_dim_is_nan(backend: str) -> None:
    x = np.zeros((2, 0), np.float32)
    got = _value(_run(lambda a: a.var(1), backend, x))
    with pytest.warns(UserWarning):
        want = torch.tensor(x).var(1).numpy()
    assert np.isnan(want).all() and np.isnan(got).all()
