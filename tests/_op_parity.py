"""Shared harness for op parity tests against PyTorch (test_reduce_ops, test_shape_ops).

A case is ``(id, shape of x without the batch dim, f(module, x))``: the same expression runs
with module = torch and module = gc on ``x * p`` for a parameter ``p``, eagerly (values and
``p``'s gradient) and compiled (one compile serving two batch sizes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from _torch import torch

import graphc as gc
from graphc import nn


def np_of(t: Any) -> np.ndarray:
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.numpy())


def outs(y: Any) -> list:
    return list(y) if isinstance(y, (tuple, list)) else [y]


def loss(y: Any) -> Any:
    """A loss with distinct gradients per element: sum of y * y + y over the float outputs."""
    total = None
    for t in outs(y):
        if not t.dtype.is_floating_point if isinstance(t, torch.Tensor) else not t.dtype.is_float:
            continue
        term = (t * t + t).sum()
        total = term if total is None else total + term
    return total


def check_eager(f: Any, shape: tuple, rtol: float, atol: float, grad_rtol: float,
                grad_atol: float, dtypes: bool = False) -> None:
    """Eager values and the parameter's gradient for batch sizes 2 and 3; ``dtypes``: the
    outputs' dtypes and namedtuple fields must match PyTorch's too."""
    rng = np.random.default_rng(0)
    for batch in (2, 3):
        x = rng.standard_normal((batch, *shape)).astype(np.float32)
        p = rng.standard_normal(shape).astype(np.float32)
        tp = torch.tensor(p, requires_grad=True)
        ty = f(torch, torch.tensor(x) * tp)
        loss(ty).backward()
        gp = gc.tensor(p, requires_grad=True)
        gy = f(gc, gc.tensor(x) * gp)
        loss(gy).backward()
        assert type(gy) is not tuple or isinstance(ty, tuple)
        assert len(outs(gy)) == len(outs(ty))
        if dtypes and hasattr(ty, "_fields"):
            assert gy._fields == ty._fields
        for a, b in zip(outs(gy), outs(ty)):
            assert tuple(a.shape) == tuple(b.shape)
            if dtypes:
                assert str(np_of(a).dtype) == str(np_of(b).dtype)
            np.testing.assert_allclose(np_of(a), np_of(b), rtol=rtol, atol=atol)
        np.testing.assert_allclose(np_of(gp.grad), np_of(tp.grad), rtol=grad_rtol,
                                   atol=grad_atol)


def check_compiled(f: Any, shape: tuple, rtol: float, atol: float) -> None:
    """One compile serving batch sizes 2 and 5: outputs (as float32) and the parameter's
    gradient."""
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(shape).astype(np.float32)
    param = nn.Parameter(gc.tensor(p0))

    @gc.compile
    def step(x: Any) -> Any:
        param.grad = None
        y = f(gc, x * param)
        loss(y).backward()
        return gc.cat([t.reshape(-1).to(gc.float32) for t in outs(y)])

    for batch in (2, 5):
        x = rng.standard_normal((batch, *shape)).astype(np.float32)
        tp = torch.tensor(p0, requires_grad=True)
        ty = f(torch, torch.tensor(x) * tp)
        loss(ty).backward()
        got = step(gc.tensor(x))
        want = torch.cat([t.reshape(-1).to(torch.float32) for t in outs(ty)])
        np.testing.assert_allclose(np_of(got), np_of(want), rtol=rtol, atol=atol)
        np.testing.assert_allclose(np_of(param.grad), np_of(tp.grad), rtol=1e-4, atol=1e-4)
    assert step.compile_count == 1
