"""Adadelta, Adamax, NAdam and RAdam: parity with ``torch.optim`` (eager and compiled).

The four optimizers are written in the public style a user would write (``group[...]``,
lazily created ``self.state[p]``, in-place ops), so these tests check both the update rules
and that such code traces: state created on the first ``step()`` merged with later steps,
group numbers as run-time scalars (an lr change or a scheduler never recompiles), RAdam's
``rho_t > 5`` switch taken at run time, and a state dict loaded from PyTorch continuing the
same trajectory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _parity import (
    assert_same_state,
    batches,
    graphc_step,
    groups,
    make_models,
    run_parity,
    torch_step,
)
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.optim import lr_scheduler

NAMES = ["Adadelta", "Adamax", "NAdam", "RAdam"]

# per optimizer: (group 0 overrides, group 1 overrides, option combinations)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = {
    "Adadelta": (dict(lr=1.0), dict(lr=0.5, rho=0.8), [
        dict(),
        dict(weight_decay=0.05, maximize=True, eps=1e-5),
        dict(weight_decay=0.01, foreach=True, capturable=True),
    ]),
    "Adamax": (dict(lr=1e-2), dict(lr=3e-3, eps=1e-6), [
        dict(),
        dict(weight_decay=0.05, maximize=True),
        dict(betas=(0.3, 0.99), weight_decay=0.01),  # lerp's other rounding branch
    ]),
    "NAdam": (dict(lr=1e-2), dict(lr=3e-3, momentum_decay=1e-2), [
        dict(),
        dict(weight_decay=0.05, maximize=True),
        dict(weight_decay=0.1, decoupled_weight_decay=True, betas=(0.8, 0.99)),
    ]),
    "RAdam": (dict(lr=1e-2), dict(lr=3e-3, betas=(0.8, 0.99)), [
        dict(),
        dict(weight_decay=0.05, maximize=True),
        dict(weight_decay=0.1, decoupled_weight_decay=True, capturable=True),
    ]),
}
PARAMS = [(name, i) for name in NAMES for i in range(len(CASES[name][2]))]


def _make(name: str, kw: dict[str, Any]) -> Any:
    """(torch, graphc) optimizers; ``capturable``/``foreach`` only select kernels (PyTorch
    refuses ``capturable`` on CPU), so they are given to graphc alone: the math is the same."""
    g0, g1, _ = CASES[name]
    tkw = {k: v for k, v in kw.items() if k not in ("capturable", "foreach")}

    def make(tm: Any, gm: Any) -> tuple[Any, Any]:
        return (getattr(torch.optim, name)(groups(tm, g0, g1), **tkw),
                getattr(optim, name)(groups(gm, g0, g1), **kw))
    return make


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name, combo", PARAMS, ids=[f"{n}-{i}" for n, i in PARAMS])
def test_matches_torch(name: str, combo: int, mode: str) -> None:
    """30 steps, two groups with different lr, every group's lr halved at step 10 through
    ``param_groups``; parameters and every state entry (keys, shapes, dtypes, values) match,
    and the compiled step compiles once (RAdam crosses ``rho_t > 5`` on the way)."""
    run_parity(_make(name, CASES[name][2][combo]), mode)


@pytest.mark.parametrize("name", NAMES)
def test_scheduler_compiles_once(name: str) -> None:
    """A StepLR schedule changes every group's lr between compiled calls: no recompile."""
    tm, gm = make_models()
    topt, gopt = _make(name, dict(weight_decay=0.01))(tm, gm)
    tsched = torch.optim.lr_scheduler.StepLR(topt, step_size=4, gamma=0.5)
    gsched = lr_scheduler.StepLR(gopt, step_size=4, gamma=0.5)
    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, "compiled")
    for x, y in batches(12):
        tstep(x, y)
        gstep(x, y)
        tsched.step()
        gsched.step()
    assert_same_state(tm, gm, topt, gopt, "after 12 scheduled steps:")
    assert gstep.compile_count == 1


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_from_torch_continues_identically(name: str) -> None:
    """Train 5 steps in PyTorch, load its weights and ``state_dict()`` into graphc, then
    both continue 10 steps (graphc compiled); a graphc-to-graphc round trip of the result
    continues the same way eagerly."""
    kw = CASES[name][2][1]
    tm, gm = make_models()
    topt, _ = _make(name, kw)(tm, gm)
    tstep = torch_step(tm, topt)
    for x, y in batches(5, seed=3):
        tstep(x, y)
    gm.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    g0, g1, _ = CASES[name]
    gopt = getattr(optim, name)(groups(gm, g0, g1), **kw)
    gopt.load_state_dict(topt.state_dict())
    assert_same_state(tm, gm, topt, gopt, "after loading:")
    gstep = graphc_step(gm, gopt, "compiled")
    data = batches(10, seed=4)
    for x, y in data[:6]:
        tstep(x, y)
        gstep(x, y)
    assert_same_state(tm, gm, topt, gopt, "6 steps after loading:")
    assert gstep.compile_count == 1

    # graphc -> graphc: a fresh model and optimizer from the saved dicts, run eagerly
    gm2 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    gm2.load_state_dict({k: np.array(v, copy=True) for k, v in gm.state_dict().items()})
    gopt2 = getattr(optim, name)(groups(gm2, g0, g1), **kw)
    gopt2.load_state_dict(gopt.state_dict())
    gstep2 = graphc_step(gm2, gopt2, "eager")
    for x, y in data[6:]:
        tstep(x, y)
        gstep(x, y)
        gstep2(x, y)
    assert_same_state(tm, gm, topt, gopt, "10 steps after loading:")
    assert_same_state(tm, gm2, topt, gopt2, "round trip:")
    assert gstep.compile_count == 1


def _changes_between_calls(name: str, steps: int = 12) -> Any:
    """A compiled run in which betas (or rho), weight decay and eps change after step 3, and
    PyTorch's state_dict (and weights) are loaded after step 7; returns the graphc step."""
    tm, gm = make_models()
    topt, gopt = _make(name, dict(weight_decay=0.01))(tm, gm)
    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, "compiled")
    for i, (x, y) in enumerate(batches(steps)):
        if i == 4:
            for opt in (topt, gopt):
                g = opt.param_groups[1]
                g["weight_decay"], g["eps"] = 0.05, 1e-4
                if name == "Adadelta":
                    g["rho"] = 0.7
                else:
                    g["betas"] = (0.8, 0.95)
        if i == 8:
            gm.load_state_dict({k: v.detach().numpy().copy()
                                for k, v in tm.state_dict().items()})
            gopt.load_state_dict(topt.state_dict())
        tstep(x, y)
        gstep(x, y)
    assert_same_state(tm, gm, topt, gopt, f"after {steps} steps:")
    return gstep


@pytest.mark.parametrize("name", NAMES)
def test_changes_between_compiled_calls_take_effect(name: str) -> None:
    """Hyperparameter changes and a state load between compiled calls: same values as
    PyTorch (whether or not the step re-traced)."""
    _changes_between_calls(name)


def test_betas_change_and_state_load_do_not_recompile() -> None:
    model = nn.Linear(3, 1)
    opt = optim.NAdam(model.parameters(), lr=0.1)

    @gc.compile
    def step(x: Any) -> Any:
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss

    x = np.ones((2, 3), np.float32)
    step(x)
    step(x)
    opt.param_groups[0]["betas"] = (0.8, 0.99)  # lerp weight 0.1 -> 0.2: same branch
    step(x)
    opt.load_state_dict(opt.state_dict())  # same keys, shapes and dtypes
    step(x)
    assert step.compile_count == 1


@pytest.mark.parametrize("name", NAMES)
def test_defaults_and_state_dict_layout_match_torch(name: str) -> None:
    tp = torch.nn.Parameter(torch.ones(3))
    gp = nn.Parameter(np.ones(3, np.float32))
    topt, gopt = getattr(torch.optim, name)([tp]), getattr(optim, name)([gp])
    tg, gg = topt.param_groups[0], gopt.param_groups[0]
    assert set(gg) == set(tg)
    for k in tg:
        if k != "params":
            assert gg[k] == tg[k], k
    tp.grad = torch.full((3,), 0.5)
    gp.grad = gc.tensor(np.full(3, 0.5, np.float32))
    topt.step()
    gopt.step()
    tsd, gsd = topt.state_dict(), gopt.state_dict()
    assert list(gsd["state"][0]) == list(tsd["state"][0])
    for k, tv in tsd["state"][0].items():
        gv = np.asarray(gsd["state"][0][k])
        assert gv.dtype == tv.numpy().dtype and gv.shape == tuple(tv.shape), k
    assert set(gsd["param_groups"][0]) == set(tsd["param_groups"][0])


def test_params_without_grad_are_skipped() -> None:
    """``.grad`` None: no update, no state (PyTorch's rule), for every optimizer."""
    for name in NAMES:
        w = nn.Parameter(np.ones(2, np.float32))
        u = nn.Parameter(np.ones(2, np.float32))
        opt = getattr(optim, name)([w, u], lr=0.1)
        (w * 2.0).sum().backward()
        opt.step()
        assert not opt.state.get(u), name
        np.testing.assert_array_equal(u.numpy(), [1.0, 1.0])
        assert opt.state[w]["step"].shape == () and float(opt.state[w]["step"]) == 1.0


_BAD = [
    ("Adadelta", dict(lr=-1.0), "Invalid learning rate"),
    ("Adadelta", dict(rho=1.5), "Invalid rho value"),
    ("Adadelta", dict(eps=-1.0), "Invalid epsilon value"),
    ("Adadelta", dict(weight_decay=-0.1), "Invalid weight_decay value"),
    ("NAdam", dict(momentum_decay=-0.1), "Invalid momentum_decay value"),
] + [(name, kw, msg) for name in ["Adamax", "NAdam", "RAdam"] for kw, msg in [
    (dict(lr=-1.0), "Invalid learning rate"),
    (dict(eps=-1.0), "Invalid epsilon value"),
    (dict(betas=(1.0, 0.9)), "Invalid beta parameter at index 0"),
    (dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1"),
    (dict(weight_decay=-0.1), "Invalid weight_decay value"),
]]


@pytest.mark.parametrize("name, kwargs, message", _BAD)
def test_validation_matches_torch(name: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        getattr(optim, name)([nn.Parameter(np.ones(1, np.float32))], **kwargs)
    with pytest.raises(ValueError, match=message):
        getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(1))], **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_differentiable_not_supported(name: str) -> None:
    with pytest.raises(NotImplementedError, match="differentiable"):
        getattr(optim, name)([nn.Parameter(np.ones(1, np.float32))], differentiable=True)
