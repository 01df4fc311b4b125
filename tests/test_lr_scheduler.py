"""LR schedulers: identical lr sequences to ``torch.optim.lr_scheduler`` and scheduled runs."""

import math

import numpy as np
import pytest
from _parity import assert_same_state, batches, graphc_step, groups, make_models, torch_step
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.optim import lr_scheduler as gls

tls = torch.optim.lr_scheduler


def _opts():
    tp = [torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))]
    gp = [nn.Parameter(np.ones(2, np.float32)), nn.Parameter(np.ones(3, np.float32))]
    topt = torch.optim.SGD([{"params": [tp[0]], "lr": 0.1}, {"params": [tp[1]], "lr": 0.05}])
    gopt = optim.SGD([{"params": [gp[0]], "lr": 0.1}, {"params": [gp[1]], "lr": 0.05}])
    return topt, gopt


def _lambda(epoch):
    return 0.97 ** epoch + (0.5 if epoch % 7 == 3 else 0.0)


SCHEDULERS = {
    "step": lambda m, o: m.StepLR(o, step_size=7, gamma=0.5),
    "multistep": lambda m, o: m.MultiStepLR(o, milestones=[5, 15, 15, 30], gamma=0.3),
    "exponential": lambda m, o: m.ExponentialLR(o, gamma=0.93),
    "cosine": lambda m, o: m.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    "cosine_long": lambda m, o: m.CosineAnnealingLR(o, T_max=50),
    "linear": lambda m, o: m.LinearLR(o, start_factor=0.1, end_factor=0.9, total_iters=20),
    "linear_default": lambda m, o: m.LinearLR(o),
    "lambda": lambda m, o: m.LambdaLR(o, lr_lambda=_lambda),
    "lambda_per_group": lambda m, o: m.LambdaLR(o, lr_lambda=[_lambda, lambda e: 1 / (e + 1)]),
    "constant": lambda m, o: m.ConstantLR(o, factor=0.25, total_iters=8),
    "multiplicative": lambda m, o: m.MultiplicativeLR(o, lr_lambda=lambda e: 0.95),
    "polynomial": lambda m, o: m.PolynomialLR(o, total_iters=30, power=2.0),
    "sequential": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=5), m.CosineAnnealingLR(o, T_max=20)],
        milestones=[5]),
    "sequential3": lambda m, o: m.SequentialLR(
        o, [m.ConstantLR(o, factor=0.5, total_iters=3), m.ExponentialLR(o, gamma=0.9),
            m.StepLR(o, step_size=4, gamma=0.5)], milestones=[6, 20]),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_lr_sequence_identical_to_torch(name):
    topt, gopt = _opts()
    ts, gs = SCHEDULERS[name](tls, topt), SCHEDULERS[name](gls, gopt)
    assert gs.get_last_lr() == ts.get_last_lr()
    assert [g["initial_lr"] for g in gopt.param_groups] == \
        [g["initial_lr"] for g in topt.param_groups]
    for epoch in range(50):
        topt.step()
        gopt.step()
        ts.step()
        gs.step()
        assert gs.get_last_lr() == ts.get_last_lr(), f"epoch {epoch}"
        assert [g["lr"] for g in gopt.param_groups] == [g["lr"] for g in topt.param_groups]
        assert gs.last_epoch == ts.last_epoch


@pytest.mark.parametrize("name", ["step", "multistep", "cosine", "linear", "sequential",
                                  "lambda", "exponential"])
def test_state_dict_resume_identical_to_torch(name, tmp_path):
    """Save the scheduler (and optimizer) at epoch 20 through gc.save, rebuild, continue."""
    topt, gopt = _opts()
    ts, gs = SCHEDULERS[name](tls, topt), SCHEDULERS[name](gls, gopt)
    for _ in range(20):
        for o, s in ((topt, ts), (gopt, gs)):
            o.step()
            s.step()
    gc.save({"sched": gs.state_dict(), "opt": gopt.state_dict()}, tmp_path / "ck")
    _, gopt2 = _opts()
    gs2 = SCHEDULERS[name](gls, gopt2)
    ck = gc.load(tmp_path / "ck")
    gopt2.load_state_dict(ck["opt"])
    gs2.load_state_dict(ck["sched"])
    assert gs2.get_last_lr() == ts.get_last_lr()
    for epoch in range(30):
        topt.step()
        gopt2.step()
        ts.step()
        gs2.step()
        assert gs2.get_last_lr() == ts.get_last_lr(), f"epoch {20 + epoch}"


def test_step_with_epoch_uses_closed_form_like_torch():
    topt, gopt = _opts()
    ts, gs = tls.StepLR(topt, 3, 0.5), gls.StepLR(gopt, 3, 0.5)
    with pytest.warns(UserWarning):
        ts.step(10)
    with pytest.warns(UserWarning):
        gs.step(10)
    assert gs.get_last_lr() == ts.get_last_lr()


def test_scheduler_errors():
    _, gopt = _opts()
    with pytest.raises(TypeError):
        gls.StepLR(object(), 3)
    with pytest.raises(KeyError, match="initial_lr"):
        gls.StepLR(gopt, 3, last_epoch=5)
    with pytest.raises(ValueError):
        gls.LinearLR(gopt, start_factor=0.0)
    with pytest.raises(ValueError):
        gls.SequentialLR(gopt, [gls.StepLR(gopt, 3)], milestones=[2])
    with pytest.raises(ValueError):
        gls.LambdaLR(gopt, [lambda e: 1.0])


def test_cosine_is_recursive_not_closed_form():
    """PyTorch's recursive cosine differs from the closed form in the last bits; graphc
    follows the recursion (checked against the closed form only approximately)."""
    _, gopt = _opts()
    s = gls.CosineAnnealingLR(gopt, T_max=7, eta_min=0.01)
    for epoch in range(1, 30):
        gopt.step()
        s.step()
        closed = 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * epoch / 7)) / 2
        assert s.get_last_lr()[0] == pytest.approx(closed, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("mode", ["compiled", "interp"])
def test_scheduled_compiled_run_equals_torch(mode):
    tm, gm = make_models()
    g0, g1 = dict(lr=1e-2, weight_decay=0.05), dict(lr=3e-3)
    topt = torch.optim.AdamW(groups(tm, g0, g1))
    gopt = optim.AdamW(groups(gm, g0, g1))
    ts = tls.SequentialLR(topt, [tls.LinearLR(topt, 0.2, total_iters=5),
                                 tls.CosineAnnealingLR(topt, T_max=25)], milestones=[5])
    gs = gls.SequentialLR(gopt, [gls.LinearLR(gopt, 0.2, total_iters=5),
                                 gls.CosineAnnealingLR(gopt, T_max=25)], milestones=[5])
    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, mode)
    for x, y in batches(30):
        tstep(x, y)
        gstep(x, y)
        ts.step()
        gs.step()
        assert gs.get_last_lr() == ts.get_last_lr()
    assert_same_state(tm, gm, topt, gopt)
    assert gstep.compile_count == 1
