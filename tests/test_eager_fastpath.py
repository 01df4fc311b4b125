"""Eager mode's short cuts build what the general path builds.

A Python number operand is one value-only leaf holding its broadcast value; a 0-d tensor
operand's reshape and expand nodes are built directly with their known shapes; a constant
exponent is recognised from its value. Each must give PyTorch's values and gradients, keep
every gradient that is asked for (a 0-d exponent that requires grad is not a constant), and
leave no shared, writable constant behind. Grad mode and the trace context are per thread
with defaults a new thread sees.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import _context
from graphc.autograd import is_grad_enabled

X0 = np.array([-1.5, -0.25, 0.0, 0.5, 2.0, 3.0], np.float64)


def _both(fn: Any, *arrays: np.ndarray, grad: tuple[bool, ...]) -> None:
    """``fn`` on graphc and torch tensors (``grad[i]``: operand i requires grad): the
    results and every operand's gradient agree."""
    g = [gc.tensor(a, requires_grad=r) for a, r in zip(arrays, grad)]
    t = [torch.tensor(a, requires_grad=r) for a, r in zip(arrays, grad)]
    gy, ty = fn(g, gc), fn(t, torch)
    np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    gy.sum().backward()
    ty.sum().backward()
    for a, b in zip(g, t):
        if b.requires_grad:
            assert a.grad is not None
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12,
                                       atol=1e-12)


@pytest.mark.parametrize("expr", [
    lambda v, m: v[0] * 2.0 + 1,
    lambda v, m: 3 - v[0] / 4,
    lambda v, m: v[0] ** 2,
    lambda v, m: v[0] ** 3 - v[0] ** 0.0,
    lambda v, m: 2.0 ** v[0],
    lambda v, m: (v[0] > 0.25) * v[0],
    lambda v, m: m.where(v[0] > 0, v[0], 0.5),
])
def test_scalar_operands_match_torch(expr: Any) -> None:
    _both(expr, X0, grad=(True,))


@pytest.mark.parametrize("wants", [(True, True), (True, False), (False, True)])
def test_zero_d_exponent_gets_its_gradient(wants: tuple[bool, bool]) -> None:
    """``x ** e`` with a 0-d ``e``: its broadcast is a zero-stride value like a constant's,
    but when ``e`` requires grad it is not a constant and its gradient is built."""
    x = np.abs(X0) + 0.5
    _both(lambda v, m: v[0] ** v[1], x, np.array(2.0), grad=wants)


@pytest.mark.parametrize("wants", [(True, True), (True, False), (False, True)])
def test_zero_d_tensor_operand_broadcasts(wants: tuple[bool, bool]) -> None:
    _both(lambda v, m: v[1] * v[0] + v[1], X0, np.array(-0.75), grad=wants)


def test_results_are_fresh_and_writable() -> None:
    """The scalar operand's leaf is a read-only view, but what an op returns is its own
    array: writing to one result changes no other result and no later op's constant."""
    x = gc.tensor(X0.copy())
    a = x * 2.0
    b = x * 2.0
    a.add_(1.0)
    np.testing.assert_array_equal(b.numpy(), X0 * 2.0)
    np.testing.assert_array_equal((x * 2.0).numpy(), X0 * 2.0)
    z = gc.zeros(3) + 5
    z.mul_(2.0)
    np.testing.assert_array_equal(z.numpy(), [10.0, 10.0, 10.0])


def test_thread_defaults() -> None:
    """A new thread starts with grad enabled and no trace context, whatever the creating
    thread set (PyTorch's grad mode is thread-local too)."""
    seen: dict[str, Any] = {}

    def run() -> None:
        seen["grad"] = is_grad_enabled()
        seen["ctx"] = _context.current()
        x = gc.tensor(X0, requires_grad=True)
        seen["rg"] = (x * 2.0).requires_grad

    with gc.no_grad():
        t = threading.Thread(target=run)
        t.start()
        t.join()
        assert not is_grad_enabled()
    assert seen == {"grad": True, "ctx": None, "rg": True}


def test_backward_is_quiet_and_leaves_numpy_error_settings_alone() -> None:
    """One ``np.errstate`` covers an eager backward's ops (``interpreter.quiet_block``): a
    gradient that overflows gives inf without a warning, as PyTorch's does; a tensor hook
    called inside runs under the caller's own numpy settings; afterwards numpy's settings
    and the interpreter's flag are what they were."""
    import warnings

    from graphc.interpreter import QUIET

    x = gc.tensor(np.array([3e38, 1.0], np.float32), requires_grad=True)
    seen: list[Any] = []

    def hook(g: Any) -> None:
        try:
            np.array([3e38], np.float32) * np.float32(10)
            seen.append("no error")
        except FloatingPointError:
            seen.append("raised")

    y = x * 1.0
    y.register_hook(hook)
    before = np.geterr()
    with warnings.catch_warnings(), np.errstate(over="raise"):
        warnings.simplefilter("error")
        (y * y).sum().backward()  # d/dx x^2 = 2x overflows to inf for 3e38
        inner = np.geterr()
    assert inner["over"] == "raise" and np.geterr() == before and QUIET.on is False
    assert seen == ["raised"]
    assert np.isinf(x.grad.numpy()[0]) and x.grad.numpy()[1] == 2.0


def test_backward_quiet_flag_is_per_thread() -> None:
    """The quiet block an eager backward holds leaves another thread's ops alone (numpy's
    error state is per thread, so the flag that skips it must be too)."""
    from graphc.interpreter import QUIET, quiet_block

    seen: list[bool] = []
    with quiet_block():
        assert QUIET.on
        th = threading.Thread(target=lambda: seen.append(QUIET.on))
        th.start()
        th.join()
    assert seen == [False] and not QUIET.on


def test_uninitialized_tensors_raise_on_every_fast_path():
    """The eager fast paths read a tensor's node directly; an uninitialized parameter or
    buffer (whose node raises, as PyTorch does) must still raise there: a Python number,
    another tensor, in place, recorded or not."""
    for make, grad in ((gc.nn.UninitializedBuffer, True), (gc.nn.UninitializedParameter, True),
                       (gc.nn.UninitializedParameter, False)):
        u = make()
        x = gc.ones(3, requires_grad=True)
        ctx = contextlib.nullcontext() if grad else gc.no_grad()
        with ctx:
            for f in (lambda u, x: u + 1, lambda u, x: 2.0 * u, lambda u, x: u * u,
                      lambda u, x: u * x, lambda u, x: x - u, lambda u, x: u.sum()):
                with pytest.raises(ValueError, match="uninitialized parameter"):
                    f(u, x)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "atan2"])
@pytest.mark.parametrize("shapes", [((), (4,)), ((4,), ()), ((3, 1), (1, 4)), ((2, 3), (2, 3)),
                                    ((), "scalar"), ("scalar", (3,))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_recorded_binary_ops_built_directly_match_torch(op, shapes, dtype):
    """``tensor_ops._eager_recorded`` builds a recorded binary op (broadcast 0-d operands,
    Python numbers) without the general machinery: values and gradients as PyTorch's,
    through a backward that runs twice (the second from the cached program)."""
    rng = np.random.default_rng(len(op) * 7 + len(str(shapes)))
    gd, td = getattr(gc, dtype), getattr(torch, dtype)
    for _ in range(2):
        ops_g, ops_t, leaves = [], [], []
        for s in shapes:
            if s == "scalar":
                ops_g.append(1.75)
                ops_t.append(1.75)
                continue
            v = rng.uniform(0.5, 2.0, s).astype(dtype)
            g, t = gc.tensor(v, dtype=gd, requires_grad=True), torch.tensor(v, dtype=td,
                                                                           requires_grad=True)
            ops_g.append(g)
            ops_t.append(t)
            leaves.append((g, t))
        fg, ft = getattr(gc, op), getattr(torch, op)
        if op in ("add", "sub", "mul", "div", "pow"):
            sym = {"add": "__add__", "sub": "__sub__", "mul": "__mul__", "div": "__truediv__",
                   "pow": "__pow__"}[op]
            a, b = ops_g
            out_g = getattr(a, sym)(b) if isinstance(a, gc.Tensor) else getattr(
                b, "__r" + sym[2:])(a)
            a, b = ops_t
            out_t = getattr(a, sym)(b) if isinstance(a, torch.Tensor) else getattr(
                b, "__r" + sym[2:])(a)
        elif any(isinstance(o, float) for o in ops_g):
            return  # maximum/atan2 take two tensors
        else:
            out_g, out_t = fg(*ops_g), ft(*ops_t)
        assert out_g.dtype is gd and out_g.requires_grad
        np.testing.assert_allclose(out_g.detach().numpy(), out_t.detach().numpy(), rtol=1e-6)
        (out_g * out_g).sum().backward()
        (out_t * out_t).sum().backward()
        for g, t in leaves:
            np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=2e-5)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_relu_keeps_negative_zero_and_nan_as_torch(dtype):
    """Regression: relu(-0.0) was +0.0 eagerly and compiled; PyTorch's clamp_min(x, 0)
    returns -0.0 (its max keeps the first operand on a tie)."""
    x = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, -1e-30, 3.5, -2.0], np.float32)
    t = torch.relu(torch.tensor(x).to(getattr(torch, dtype))).float().numpy()
    g = gc.tensor(x).to(getattr(gc, dtype))
    for out in (gc.relu(g), gc.compile(lambda v: gc.relu(v))(g)):
        o = out.float().numpy()
        np.testing.assert_array_equal(o, t)
        num = ~np.isnan(t)  # (a NaN's sign is the conversion's business, not relu's)
        np.testing.assert_array_equal(np.signbit(o)[num], np.signbit(t)[num])


def test_inplace_updates_written_directly_keep_torchs_values_errors_and_versions():
    """``p.add_(g, alpha=-lr)``, ``buf.mul_(m)``, ``p -= x`` under ``no_grad`` write their
    value directly (tensor_ops.fast_inplace*): PyTorch's values, its leaf error under grad
    mode, and a write a later backward sees."""
    v = np.array([0.5, -1.5, 2.0], np.float32)
    g, t = gc.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    d = np.array([0.25, 1.0, -3.0], np.float32)
    with gc.no_grad(), torch.no_grad():
        for lib_p, lib_d in ((g, gc.tensor(d)), (t, torch.tensor(d))):
            lib_p.add_(lib_d, alpha=-0.1)
            lib_p.sub_(lib_d, alpha=3)
            lib_p.mul_(0.9)
            lib_p -= lib_d
            lib_p += 2
    np.testing.assert_array_equal(g.detach().numpy(), t.detach().numpy())
    for f in (lambda p: p.add_(1.0, alpha=2), lambda p: p.mul_(2.0), lambda p: p.sub_(p)):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            f(g)
    x = gc.tensor(v, requires_grad=True)
    h = x * 2
    y = (h * h).sum()
    with gc.no_grad():
        h.add_(gc.ones(3), alpha=0.5)  # the saved h changed: backward must refuse
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_unrecorded_where_matches_torch_and_recorded_where_keeps_its_gradient(dtype):
    """``tensor_ops._eager_where`` computes a ``where`` no graph records straight from the
    values: PyTorch's values and dtypes for tensor and Python-number operands, broadcast;
    an operand that requires grad still takes the recorded path."""
    rng = np.random.default_rng(2)
    c = rng.random((3, 4)) > 0.5
    x = (rng.standard_normal((3, 4)) * 10).astype(dtype)
    y = (rng.standard_normal((1, 4)) * 10).astype(dtype)
    for args in ((x, y), (x, 2), (5, y), (x, x[0])) + (((x, 0.5),) if dtype != "int64" else ()):
        outs = []
        for lib in (gc, torch):
            conv = [lib.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
            outs.append(lib.where(lib.tensor(c), *conv))
        assert str(outs[0].dtype).split(".")[-1] == str(outs[1].dtype).split(".")[-1]
        np.testing.assert_array_equal(outs[0].numpy(), outs[1].numpy())
    if dtype != "int64":
        w, tw = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        (gc.where(gc.tensor(c), w, 0.0) * 3).sum().backward()
        (torch.where(torch.tensor(c), tw, 0.0) * 3).sum().backward()
        np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
