"""Adam / AdamW parity with ``torch.optim`` (eager and compiled), and their argument checks."""

import itertools

import numpy as np
import pytest
from _parity import MODES, groups, make_models, run_parity
from _torch import torch

import graphc as gc
from graphc import nn, optim

COMBOS = list(itertools.product([False, True], [False, True], [False, True], [False, True]))


def _ids(c):
    decoupled, amsgrad, maximize, wd = c
    return (f"{'adamw' if decoupled else 'adam'}-ams{int(amsgrad)}-max{int(maximize)}"
            f"-wd{int(wd)}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("combo", COMBOS, ids=[_ids(c) for c in COMBOS])
def test_adam_matches_torch(combo, mode):
    decoupled, amsgrad, maximize, wd = combo
    g0 = dict(lr=1e-2, weight_decay=0.1 if wd else 0.0)
    g1 = dict(lr=3e-3, weight_decay=0.01 if wd else 0.0)
    kw = dict(amsgrad=amsgrad, maximize=maximize, betas=(0.9, 0.99))

    def make(tm, gm):
        if decoupled:
            return (torch.optim.AdamW(groups(tm, g0, g1), **kw),
                    optim.AdamW(groups(gm, g0, g1), **kw))
        return (torch.optim.Adam(groups(tm, g0, g1), **kw),
                optim.Adam(groups(gm, g0, g1), **kw))

    run_parity(make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_adam_flags_that_only_pick_kernels(mode):
    """capturable/foreach/fused select kernels in PyTorch; the math is the default one."""
    g0, g1 = dict(lr=1e-2), dict(lr=2e-2, eps=1e-6)

    def make(tm, gm):
        return (torch.optim.Adam(groups(tm, g0, g1), weight_decay=0.05),
                optim.Adam(groups(gm, g0, g1), weight_decay=0.05, capturable=True,
                           foreach=True))

    run_parity(make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_adam_decoupled_flag_equals_adamw(mode):
    g0, g1 = dict(lr=1e-2, weight_decay=0.2), dict(lr=3e-3, weight_decay=0.0)

    def make(tm, gm):
        return (torch.optim.AdamW(groups(tm, g0, g1)),
                optim.Adam(groups(gm, g0, g1), decoupled_weight_decay=True))

    run_parity(make, mode)


def test_adam_beta1_at_least_half_uses_the_other_lerp_branch():
    """lerp's rounding branch flips at weight 0.5; a compiled step recompiles, not drifts."""
    def make(tm, gm):
        return (torch.optim.Adam(tm.parameters(), lr=1e-2, betas=(0.3, 0.9)),
                optim.Adam(gm.parameters(), lr=1e-2, betas=(0.3, 0.9)))

    run_parity(make, "interp")


def test_adam_betas_change_without_recompiling():
    tm, gm = make_models()
    topt = torch.optim.Adam(tm.parameters(), lr=1e-2)
    gopt = optim.Adam(gm.parameters(), lr=1e-2)
    from _parity import assert_same_state, batches, graphc_step, torch_step

    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, "interp")
    for i, (x, y) in enumerate(batches(12)):
        if i == 6:
            for opt in (topt, gopt):
                opt.param_groups[0]["betas"] = (0.8, 0.95)
                opt.param_groups[0]["eps"] = 1e-4
        tstep(x, y)
        gstep(x, y)
    assert_same_state(tm, gm, topt, gopt)
    assert gstep.compile_count == 1


def test_adam_skips_params_without_grad():
    """A parameter whose .grad is None gets no update and no state (PyTorch's rule)."""
    w = nn.Parameter(np.ones((2,), np.float32))
    u = nn.Parameter(np.ones((2,), np.float32))
    opt = optim.Adam([w, u], lr=0.1)
    (w * 2.0).sum().backward()
    opt.step()
    assert u not in opt.state or not opt.state[u]
    np.testing.assert_array_equal(u.numpy(), [1.0, 1.0])
    assert set(opt.state[w]) == {"step", "exp_avg", "exp_avg_sq"}
    assert opt.state[w]["step"].numpy().dtype == np.float32
    assert opt.state[w]["step"].shape == ()


def test_adamw_defaults():
    p = nn.Parameter(np.ones((1,), np.float32))
    g = optim.AdamW([p]).param_groups[0]
    assert g["weight_decay"] == 1e-2 and g["decoupled_weight_decay"] is True
    g = optim.Adam([p]).param_groups[0]
    assert g["lr"] == 1e-3 and g["betas"] == (0.9, 0.999) and g["eps"] == 1e-8
    assert g["weight_decay"] == 0 and g["amsgrad"] is False and g["maximize"] is False
    assert g["decoupled_weight_decay"] is False


@pytest.mark.parametrize("kwargs, message", [
    (dict(lr=-1.0), "Invalid learning rate"),
    (dict(eps=-1.0), "Invalid epsilon value"),
    (dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0"),
    (dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1"),
    (dict(weight_decay=-0.1), "Invalid weight_decay value"),
])
@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
def test_adam_validation_matches_torch(cls, kwargs, message):
    p = nn.Parameter(np.ones((1,), np.float32))
    with pytest.raises(ValueError, match=message):
        getattr(optim, cls)([p], **kwargs)
    with pytest.raises(ValueError, match=message):
        getattr(torch.optim, cls)([torch.nn.Parameter(torch.ones(1))], **kwargs)


def test_adam_differentiable_not_supported():
    p = nn.Parameter(np.ones((1,), np.float32))
    with pytest.raises(NotImplementedError, match="differentiable"):
        optim.Adam([p], differentiable=True)
    with pytest.raises(NotImplementedError, match="differentiable"):
        optim.AdamW([p], differentiable=True)


def test_adam_state_dict_layout_matches_torch():
    tm, gm = make_models()
    topt = torch.optim.Adam(groups(tm, dict(lr=1e-2), dict(lr=1e-3)), amsgrad=True)
    gopt = optim.Adam(groups(gm, dict(lr=1e-2), dict(lr=1e-3)), amsgrad=True)
    x = np.ones((2, 4), np.float32)
    tm(torch.from_numpy(x)).sum().backward()
    topt.step()
    gm(gc.tensor(x)).sum().backward()
    gopt.step()
    tsd, gsd = topt.state_dict(), gopt.state_dict()
    assert list(gsd["state"]) == list(tsd["state"])
    for i in tsd["state"]:
        assert list(gsd["state"][i]) == list(tsd["state"][i])
    for tg, gg in zip(tsd["param_groups"], gsd["param_groups"]):
        assert set(gg) == set(tg)
        assert gg["params"] == tg["params"]
