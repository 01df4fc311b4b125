"""optim.SGD against torch.optim.SGD: every option combination, two param groups, eager and
compiled, plus gradient accumulation when the step skips zero_grad()."""

import itertools

import numpy as np
import pytest
from _parity import (  # noqa: I001
    MODES,
    assert_close,
    assert_same_state,
    batches,
    groups,
    make_models,
    run_parity,
)
from _torch import torch

import graphc as gc
from graphc import nn, optim

COMBOS = [
    dict(momentum=m, dampening=d, nesterov=n, weight_decay=w, maximize=x)
    for m, d, n, w, x in itertools.product([0.0, 0.9], [0.0, 0.3], [False, True], [0.0, 1e-2],
                                           [False, True])
    if not (n and (m == 0 or d != 0))
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("opts", COMBOS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_sgd_options_match_torch(opts, mode):
    g0 = dict(lr=0.05, **opts)
    g1 = dict(lr=0.02, **{**opts, "weight_decay": opts["weight_decay"] * 3})

    def make(tm, gm):
        return (torch.optim.SGD(groups(tm, g0, g1), lr=0.1),
                optim.SGD(groups(gm, g0, g1), lr=0.1))

    run_parity(make, mode, steps=20, halve_at=7)


@pytest.mark.parametrize("mode", MODES)
def test_skipped_zero_grad_accumulates(mode):
    """Without zero_grad() in the step, .grad sums over calls and momentum sees the sum."""
    tm, gm = make_models()
    topt = torch.optim.SGD(tm.parameters(), lr=0.01, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.01, momentum=0.9)
    lf = nn.MSELoss()

    def gstep(x, y):
        loss = lf(gm(x), y)
        loss.backward()
        gopt.step()
        return loss

    if mode != "eager":
        gstep = gc.compile(gstep, backend="interp" if mode == "interp" else None)
    for i, (x, y) in enumerate(batches(6)):
        tl = torch.nn.functional.mse_loss(tm(torch.from_numpy(x)), torch.from_numpy(y))
        tl.backward()
        topt.step()
        gl = gstep(x, y)
        assert_close(np.asarray(gl), tl.item(), f"loss {i}")
        for tp, gp in zip(tm.parameters(), gm.parameters()):
            assert_close(gp.grad.numpy(), tp.grad.numpy(), f"grad after step {i}")
    assert_same_state(tm, gm, topt, gopt, "end:")
    if mode != "eager":
        # first call sees .grad absent, later calls present: two specialisations, no more
        assert gstep.compile_count == 2


@pytest.mark.parametrize("mode", MODES)
def test_zero_grad_set_to_none_false_and_none_grads_skip(mode):
    """A parameter whose grad is None is skipped by step() (no decay, no momentum)."""
    tm, gm = make_models()
    tm[2].weight.requires_grad_(False)
    gm[2].weight.requires_grad_(False)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.5, weight_decay=0.1)
    gopt = optim.SGD(gm.parameters(), lr=0.1, momentum=0.5, weight_decay=0.1)
    lf = nn.MSELoss()

    def gstep(x, y):
        gopt.zero_grad(set_to_none=False)
        loss = lf(gm(x), y)
        loss.backward()
        gopt.step()
        return loss

    if mode != "eager":
        gstep = gc.compile(gstep, backend="interp" if mode == "interp" else None)
    for x, y in batches(5):
        topt.zero_grad(set_to_none=False)
        tl = torch.nn.functional.mse_loss(tm(torch.from_numpy(x)), torch.from_numpy(y))
        tl.backward()
        topt.step()
        gl = gstep(x, y)
        assert_close(np.asarray(gl), tl.item(), "loss")
    assert gm[2].weight.grad is None
    assert_same_state(tm, gm, topt, gopt, "end:")


def test_sgd_constructor_errors():
    p = [nn.Parameter(np.zeros(2, np.float32))]
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD(p, lr=-1)
    with pytest.raises(ValueError, match="momentum"):
        optim.SGD(p, momentum=-0.1)
    with pytest.raises(ValueError, match="weight_decay"):
        optim.SGD(p, weight_decay=-1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD(p, nesterov=True)
    with pytest.raises(NotImplementedError, match="differentiable"):
        optim.SGD(p, differentiable=True)
    with pytest.raises(TypeError, match="ordered"):
        optim.SGD(set(p))
    q = nn.Parameter(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="more than one"):
        optim.SGD([{"params": [q]}, {"params": [q]}])


def test_first_momentum_step_copies_gradient():
    p = nn.Parameter(np.ones(3, np.float32))
    opt = optim.SGD([p], lr=1.0, momentum=0.9, dampening=0.5)
    p.grad = gc.tensor([1.0, 2.0, 3.0])
    opt.step()
    np.testing.assert_array_equal(opt.state[p]["momentum_buffer"].numpy(), [1.0, 2.0, 3.0])
    opt.step()  # buf = 0.9*buf + 0.5*g
    np.testing.assert_allclose(opt.state[p]["momentum_buffer"].numpy(), [1.4, 2.8, 4.2],
                               rtol=1e-6)
