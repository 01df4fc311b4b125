"""RMSprop and Adagrad parity with ``torch.optim`` (eager and compiled), and argument checks."""

import itertools

import numpy as np
import pytest
from _parity import MODES, groups, make_models, run_parity
from _torch import torch

import graphc as gc
from graphc import nn, optim

RMS_COMBOS = list(itertools.product([False, True], [0.0, 0.9], [False, True], [False, True]))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "combo", RMS_COMBOS,
    ids=[f"cent{int(c)}-mom{m}-wd{int(w)}-max{int(x)}" for c, m, w, x in RMS_COMBOS])
def test_rmsprop_matches_torch(combo, mode):
    centered, momentum, wd, maximize = combo
    g0 = dict(lr=3e-3, weight_decay=0.1 if wd else 0.0)
    g1 = dict(lr=1e-3, weight_decay=0.01 if wd else 0.0, alpha=0.9)
    kw = dict(centered=centered, momentum=momentum, maximize=maximize)

    def make(tm, gm):
        return (torch.optim.RMSprop(groups(tm, g0, g1), **kw),
                optim.RMSprop(groups(gm, g0, g1), **kw))

    run_parity(make, mode)


ADAGRAD_COMBOS = list(itertools.product([0.0, 0.05], [False, True], [0.0, 0.1], [False, True]))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "combo", ADAGRAD_COMBOS,
    ids=[f"decay{d}-wd{int(w)}-init{i}-max{int(x)}" for d, w, i, x in ADAGRAD_COMBOS])
def test_adagrad_matches_torch(combo, mode):
    lr_decay, wd, init, maximize = combo
    g0 = dict(lr=3e-2, weight_decay=0.1 if wd else 0.0)
    g1 = dict(lr=1e-2, weight_decay=0.01 if wd else 0.0)
    kw = dict(lr_decay=lr_decay, initial_accumulator_value=init, maximize=maximize)

    def make(tm, gm):
        return (torch.optim.Adagrad(groups(tm, g0, g1), **kw),
                optim.Adagrad(groups(gm, g0, g1), **kw))

    run_parity(make, mode)


def test_adagrad_state_exists_at_construction_like_torch():
    tm, gm = make_models()
    topt = torch.optim.Adagrad(tm.parameters(), initial_accumulator_value=0.25)
    gopt = optim.Adagrad(gm.parameters(), initial_accumulator_value=0.25)
    tsd, gsd = topt.state_dict(), gopt.state_dict()
    assert list(gsd["state"]) == list(tsd["state"])
    for i, tst in tsd["state"].items():
        assert list(gsd["state"][i]) == list(tst)
        for k, v in tst.items():
            np.testing.assert_array_equal(gsd["state"][i][k], v.numpy())
            assert gsd["state"][i][k].dtype == v.numpy().dtype


def test_rmsprop_state_keys_and_defaults():
    p = nn.Parameter(np.ones((3,), np.float32))
    opt = optim.RMSprop([p], momentum=0.5, centered=True)
    g = opt.param_groups[0]
    assert g["lr"] == 1e-2 and g["alpha"] == 0.99 and g["eps"] == 1e-8
    (p * p).sum().backward()
    opt.step()
    assert set(opt.state[p]) == {"step", "square_avg", "momentum_buffer", "grad_avg"}
    g = optim.Adagrad([nn.Parameter(np.ones((1,), np.float32))]).param_groups[0]
    assert g["lr"] == 1e-2 and g["eps"] == 1e-10 and g["lr_decay"] == 0


def test_rmsprop_compiled_lr_and_alpha_are_runtime_inputs():
    tm, gm = make_models()
    topt = torch.optim.RMSprop(tm.parameters(), lr=1e-3, momentum=0.5, centered=True)
    gopt = optim.RMSprop(gm.parameters(), lr=1e-3, momentum=0.5, centered=True)
    from _parity import assert_same_state, batches, graphc_step, torch_step

    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, "interp")
    for i, (x, y) in enumerate(batches(12)):
        if i == 5:
            for opt in (topt, gopt):
                opt.param_groups[0].update(alpha=0.95, momentum=0.8, eps=1e-6)
        tstep(x, y)
        gstep(x, y)
    assert_same_state(tm, gm, topt, gopt)
    assert gstep.compile_count == 1


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=-1.0), "Invalid learning rate"),
    (dict(eps=-1.0), "Invalid epsilon value"),
    (dict(momentum=-0.5), "Invalid momentum value"),
    (dict(weight_decay=-0.1), "Invalid weight_decay value"),
    (dict(alpha=-0.1), "Invalid alpha value"),
])
def test_rmsprop_validation_matches_torch(kwargs, message):
    with pytest.raises(ValueError, match=message):
        optim.RMSprop([nn.Parameter(np.ones((1,), np.float32))], **kwargs)
    with pytest.raises(ValueError, match=message):
        torch.optim.RMSprop([torch.nn.Parameter(torch.ones(1))], **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=-1.0), "Invalid learning rate"),
    (dict(lr_decay=-1.0), "Invalid lr_decay value"),
    (dict(weight_decay=-0.1), "Invalid weight_decay value"),
    (dict(initial_accumulator_value=-0.1), "Invalid initial_accumulator_value value"),
    (dict(eps=-1.0), "Invalid epsilon value"),
])
def test_adagrad_validation_matches_torch(kwargs, message):
    with pytest.raises(ValueError, match=message):
        optim.Adagrad([nn.Parameter(np.ones((1,), np.float32))], **kwargs)
    with pytest.raises(ValueError, match=message):
        torch.optim.Adagrad([torch.nn.Parameter(torch.ones(1))], **kwargs)


@pytest.mark.parametrize("cls", ["RMSprop", "Adagrad"])
def test_differentiable_not_supported(cls):
    with pytest.raises(NotImplementedError, match="differentiable"):
        getattr(optim, cls)([nn.Parameter(np.ones((1,), np.float32))], differentiable=True)


def test_adagrad_param_without_grad_keeps_initial_state():
    w = nn.Parameter(np.ones((2,), np.float32))
    u = nn.Parameter(np.ones((2,), np.float32))
    opt = optim.Adagrad([w, u], lr=0.1)
    (w * gc.tensor([1.0, 2.0])).sum().backward()
    opt.step()
    assert float(opt.state[u]["step"]) == 0.0 and float(opt.state[w]["step"]) == 1.0
    np.testing.assert_array_equal(u.numpy(), [1.0, 1.0])
