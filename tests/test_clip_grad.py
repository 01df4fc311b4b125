"""nn.utils.clip_grad_norm_ / clip_grad_value_: PyTorch's results, eagerly and compiled."""

import math

import numpy as np
import pytest
from _parity import assert_close, assert_same_state, batches, make_models
from _torch import torch

import graphc as gc
from graphc import nn, optim


def _grads_both(seed=0):
    tm, gm = make_models(seed)
    x, y = batches(1, seed=5)[0]
    torch.nn.functional.mse_loss(tm(torch.from_numpy(x)), torch.from_numpy(y) * 10).backward()
    nn.MSELoss()(gm(x), y * 10).backward()
    return tm, gm


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3.0, 0.5, 0.0, -math.inf])
@pytest.mark.parametrize("max_norm", [0.1, 1e6])
def test_clip_grad_norm_eager_matches_torch(norm_type, max_norm):
    tm, gm = _grads_both()
    tn = torch.nn.utils.clip_grad_norm_(tm.parameters(), max_norm, norm_type)
    gn = nn.utils.clip_grad_norm_(gm.parameters(), max_norm, norm_type)
    assert isinstance(gn, gc.Tensor) and gn.shape == ()
    assert_close(gn.numpy(), tn.numpy(), "total norm")
    for tp, gp in zip(tm.parameters(), gm.parameters()):
        assert_close(gp.grad.numpy(), tp.grad.numpy(), "clipped grad")


def test_clip_grad_value_eager_matches_torch():
    tm, gm = _grads_both()
    torch.nn.utils.clip_grad_value_(tm.parameters(), 0.05)
    nn.utils.clip_grad_value_(gm.parameters(), 0.05)
    for tp, gp in zip(tm.parameters(), gm.parameters()):
        # the gradients themselves differ from PyTorch's in the last bit (summation order)
        assert_close(gp.grad.numpy(), tp.grad.numpy(), "clipped grad")
        assert np.abs(gp.grad.numpy()).max() <= np.float32(0.05)


def test_params_without_grad_and_single_tensor():
    a = nn.Parameter(np.array([3.0, 4.0], np.float32))
    b = nn.Parameter(np.array([1.0], np.float32))
    (a * a).sum().backward()  # grad = [6, 8], norm 10; b has no grad
    n = nn.utils.clip_grad_norm_([a, b], 5.0)
    assert n.item() == pytest.approx(10.0)
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 4.0], rtol=1e-6)
    assert b.grad is None
    n = nn.utils.clip_grad_norm_(a, 100.0)  # a single tensor is accepted
    assert n.item() == pytest.approx(5.0, rel=1e-6)
    assert nn.utils.clip_grad_norm_([b], 1.0).item() == 0.0


def test_error_if_nonfinite():
    a = nn.Parameter(np.array([1.0, 2.0], np.float32))
    (a * float("inf")).sum().backward()
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([a], 1.0, error_if_nonfinite=True)
    nn.utils.clip_grad_norm_([a], 1.0)  # scales by the non-finite norm, as PyTorch does


@pytest.mark.parametrize("mode", ["compiled", "interp"])
@pytest.mark.parametrize("kind", ["norm2", "norm_inf", "value"])
def test_clipping_inside_a_compiled_step_matches_torch(kind, mode):
    if mode == "compiled":
        pytest.importorskip("graphc.codegen.cpu")
    tm, gm = make_models()
    topt = torch.optim.Adam(tm.parameters(), lr=1e-2)
    gopt = optim.Adam(gm.parameters(), lr=1e-2)
    loss_fn = nn.MSELoss()

    def clip(utils, params):
        if kind == "norm2":
            return utils.clip_grad_norm_(params, 0.5)
        if kind == "norm_inf":
            return utils.clip_grad_norm_(params, 0.2, norm_type=math.inf)
        utils.clip_grad_value_(params, 0.1)
        return None

    def step(x, y):
        gopt.zero_grad()
        loss = loss_fn(gm(x), y * 10)
        loss.backward()
        norm = clip(nn.utils, gm.parameters())
        gopt.step()
        return (loss, norm) if norm is not None else (loss, loss)

    cstep = gc.compile(step, backend=None if mode == "compiled" else "interp")
    for x, y in batches(10):
        topt.zero_grad()
        tl = torch.nn.functional.mse_loss(tm(torch.from_numpy(x)), torch.from_numpy(y) * 10)
        tl.backward()
        tn = clip(torch.nn.utils, tm.parameters())
        topt.step()
        gl, gn = cstep(x, y)
        assert_close(gl.numpy(), tl.item(), "loss")
        if tn is not None:
            assert_close(gn.numpy(), tn.numpy(), "norm")
        for tp, gp in zip(tm.parameters(), gm.parameters()):
            assert_close(gp.grad.numpy(), tp.grad.numpy(), "clipped grad")
    assert_same_state(tm, gm, topt, gopt)
    assert cstep.compile_count == 1


def test_error_if_nonfinite_inside_compile_is_refused():
    _, gm = make_models()

    @gc.compile(backend="interp")
    def step(x):
        gm(x).sum().backward()
        return nn.utils.clip_grad_norm_(gm.parameters(), 1.0, error_if_nonfinite=True)

    with pytest.raises(NotImplementedError, match="error_if_nonfinite"):
        step(np.ones((2, 4), np.float32))
