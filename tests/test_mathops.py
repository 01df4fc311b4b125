"""atan2 against PyTorch: the one two-operand entry of ``graphc/ir/mathops.py``, which the
generated single-operand table tests (``tests/test_elementwise_table.py``) leave out.

Values and both gradients in float32 and float64, broadcasting and scalar operands, integer
operands promoted to float32, signed zeros, infinities and NaN, ``Tensor.atan2`` and its
in-place form, eagerly and compiled.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, float("inf"), float("-inf"), float("nan")]


def _tol(dtype: Any) -> dict:
    return dict(rtol=2e-6, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 5)),
                                    ((), (3,)), ((0, 2), (2,))])
def test_values_and_grads(shapes: tuple, dtype: Any) -> None:
    rng = np.random.default_rng(0)
    y = np.asarray(rng.standard_normal(shapes[0]) * 3, dtype)
    x = np.asarray(rng.standard_normal(shapes[1]) * 3, dtype)
    ty, tx = torch.tensor(y, requires_grad=True), torch.tensor(x, requires_grad=True)
    out = torch.atan2(ty, tx)
    w = np.linspace(-1, 2, out.numel()).reshape(tuple(out.shape)).astype(dtype)
    (out * torch.tensor(w)).sum().backward()
    gy, gx = gc.tensor(y, requires_grad=True), gc.tensor(x, requires_grad=True)
    got = gc.atan2(gy, gx)
    (got * gc.tensor(w)).sum().backward()
    assert got.dtype.np == dtype and got.shape == tuple(out.shape)
    np.testing.assert_allclose(got.numpy(), out.detach().numpy(), **_tol(dtype))
    np.testing.assert_allclose(gy.grad.numpy(), ty.grad.numpy(), **_tol(dtype))
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), **_tol(dtype))


def test_special_values() -> None:
    """Signed zeros, infinities and NaN: the same quadrant, sign and NaN as PyTorch; exact
    where the result is 0 or pi/2 (graphc rounds pi/4 correctly, PyTorch an ulp below)."""
    ys, xs = np.meshgrid(np.array(SPECIAL, np.float32), np.array(SPECIAL, np.float32))
    want = torch.atan2(torch.tensor(ys), torch.tensor(xs)).numpy()

    @gc.compile(example_args=(ys, xs))
    def f(y: Any, x: Any) -> Any:
        return gc.atan2(y, x)

    for got in (gc.atan2(gc.tensor(ys), gc.tensor(xs)).numpy(), np.asarray(f(ys, xs))):
        np.testing.assert_allclose(got, want, rtol=2e-7)
        num = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))
        exact = (want == 0) | (np.abs(want) == np.float32(np.pi / 2))
        np.testing.assert_array_equal(got[exact], want[exact])


def test_gradient_at_origin_matches_torch() -> None:
    """At (0, 0) ATen's backward gives NaN (0 * 1/0) for both operands."""
    ty, tx = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    torch.atan2(ty, tx).sum().backward()
    gy, gx = gc.zeros(2, requires_grad=True), gc.zeros(2, requires_grad=True)
    gc.atan2(gy, gx).sum().backward()
    np.testing.assert_array_equal(gy.grad.numpy(), ty.grad.numpy())
    np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("other", [np.array([2, -3, 0], np.int64), 2, 1.5,
                                   np.array([0.5, -1.0, 2.0], np.float64)])
def test_dtype_promotion(other: Any) -> None:
    """Integer operands become float32; a float64 operand wins; scalars do not widen."""
    y = np.array([-4, 1, 0], np.int64)
    t_other = torch.tensor(other) if isinstance(other, np.ndarray) else other
    g_other = gc.tensor(other) if isinstance(other, np.ndarray) else other
    want = torch.atan2(torch.tensor(y), t_other if isinstance(other, np.ndarray)
                       else torch.tensor(other))
    got = gc.atan2(gc.tensor(y), g_other)
    assert str(got.dtype.np) == str(want.numpy().dtype)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6)


def test_method_and_inplace() -> None:
    y = np.array([1.0, -2.0, 0.5], np.float32)
    x = np.array([-1.0, 3.0, 0.0], np.float32)
    want = torch.tensor(y).atan2(torch.tensor(x)).numpy()
    np.testing.assert_allclose(gc.tensor(y).atan2(gc.tensor(x)).numpy(), want, rtol=2e-6)
    t = gc.tensor(y)
    assert t.atan2_(gc.tensor(x)) is t
    np.testing.assert_allclose(t.numpy(), want, rtol=2e-6)


@pytest.mark.parametrize("backend", [None, "interp"])
def test_compiled_matches_torch(backend: Any) -> None:
    """One compile over batch sizes 1, 4 and 9: output and both parameter gradients."""
    rng = np.random.default_rng(3)
    p0 = (rng.standard_normal((5,)) * 2).astype(np.float32)
    param = gc.nn.Parameter(gc.tensor(p0))
    kw = {} if backend is None else {"backend": backend}

    @gc.compile(**kw)
    def step(y: Any, x: Any) -> Any:
        param.grad = None
        out = gc.atan2(y * param, x)
        out.sum().backward()
        return out

    for batch in (1, 4, 9):
        y = rng.standard_normal((batch, 5)).astype(np.float32)
        x = rng.standard_normal((batch, 5)).astype(np.float32)
        tp = torch.tensor(p0, requires_grad=True)
        want = torch.atan2(torch.tensor(y) * tp, torch.tensor(x))
        want.sum().backward()
        got = step(gc.tensor(y), gc.tensor(x))
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(param.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5)
