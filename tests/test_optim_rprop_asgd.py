"""Rprop and ASGD: parity with ``torch.optim`` (eager and compiled), and SparseAdam's refusal.

Both optimizers are written in the public style (``group[...]``, lazily created
``self.state[p]``, in-place ops), so these tests check the update rules and that such code
traces: state created on the first ``step()`` merged with later steps (one compile), group
numbers (``etas``, ``step_sizes``, ``lambd``, ``alpha``, ``t0`` included) as run-time scalars, so
schedulers and manual changes never recompile, ASGD's ``mu != 1`` branch taken at run time
(a small ``t0`` starts the averaging inside the run), and PyTorch's state dict loaded into
graphc continuing the same trajectory.
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

NAMES = ["Rprop", "ASGD"]

# per optimizer: (group 0 overrides, group 1 overrides, option combinations)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = {
    "Rprop": (dict(lr=1e-2), dict(lr=3e-3, etas=(0.4, 1.3)), [
        dict(),
        dict(maximize=True, step_sizes=(1e-4, 0.02)),
        dict(etas=(0.3, 1.1), foreach=True),  # PyTorch's foreach path: the same values
        dict(capturable=True),  # graphc only (PyTorch refuses it on CPU): the same values
    ]),
    "ASGD": (dict(lr=1e-2, t0=4), dict(lr=3e-2, lambd=1e-2, alpha=0.6, t0=2), [
        dict(),
        dict(weight_decay=0.05, maximize=True),
        dict(weight_decay=0.01, t0=1e6),  # averaging never starts: ax copies the param
    ]),
}
PARAMS = [(name, i) for name in NAMES for i in range(len(CASES[name][2]))]


def _make(name: str, kw: dict[str, Any]) -> Any:
    """(torch, graphc) optimizers; ``capturable`` is given to graphc alone (PyTorch asserts
    a supported device for it, which a CPU is not; its values equal the default path's)."""
    g0, g1, _ = CASES[name]
    tkw = {k: v for k, v in kw.items() if k != "capturable"}

    def make(tm: Any, gm: Any) -> tuple[Any, Any]:
        return (getattr(torch.optim, name)(groups(tm, g0, g1), **tkw),
                getattr(optim, name)(groups(gm, g0, g1), **kw))
    return make


@pytest.mark.parametrize("mode", ["eager", "compiled", "interp"])
@pytest.mark.parametrize("name, combo", PARAMS, ids=[f"{n}-{i}" for n, i in PARAMS])
def test_matches_torch(name: str, combo: int, mode: str) -> None:
    """20 steps, two groups with different hyperparameters, every group's lr halved at step
    10 through ``param_groups``: losses, parameters and every state entry (keys, shapes,
    dtypes, values) match, and a compiled step compiles once."""
    run_parity(_make(name, CASES[name][2][combo]), mode, steps=20)


@pytest.mark.parametrize("name", NAMES)
def test_scheduler_compiles_once(name: str) -> None:
    """A StepLR schedule changes every group's lr between compiled calls: no recompile
    (ASGD reads lr at every step; Rprop only when a parameter's state is created)."""
    tm, gm = make_models()
    topt, gopt = _make(name, {})(tm, gm)
    tsched = torch.optim.lr_scheduler.StepLR(topt, step_size=4, gamma=0.5)
    gsched = lr_scheduler.StepLR(gopt, step_size=4, gamma=0.5)
    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, "compiled")
    for x, y in batches(12):
        tstep(x, y)
        gstep(x, y)
        tsched.step()
        gsched.step()
    assert_same_state(tm, gm, topt, gopt, "after 12 scheduled steps:")
    assert gopt.param_groups[0]["lr"] == topt.param_groups[0]["lr"]
    assert gstep.compile_count == 1


def test_hyperparameter_changes_do_not_recompile() -> None:
    """etas, step_sizes (Rprop) and lambd, alpha, t0, weight decay (ASGD) changed between
    compiled calls take effect at once, without recompiling (weight decay stays nonzero:
    switching it off would change the trace's structure)."""
    for name, change in [
        ("Rprop", dict(etas=(0.25, 1.5), step_sizes=(1e-3, 0.01))),
        ("ASGD", dict(lambd=1e-3, alpha=0.9, t0=1, weight_decay=0.2)),
    ]:
        tm, gm = make_models()
        kw = dict(weight_decay=0.01) if name == "ASGD" else {}
        topt, gopt = _make(name, kw)(tm, gm)
        tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, "compiled")
        for i, (x, y) in enumerate(batches(10)):
            if i == 4:
                for opt in (topt, gopt):
                    opt.param_groups[1].update(change)
            tstep(x, y)
            gstep(x, y)
        assert_same_state(tm, gm, topt, gopt, f"{name} after the changes:")
        assert gstep.compile_count == 1, name


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_from_torch_continues_identically(name: str) -> None:
    """Train 5 steps in PyTorch, load its weights and ``state_dict()`` into graphc, then
    both continue (graphc compiled, one compile); a graphc-to-graphc round trip of the
    result continues the same way eagerly."""
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


@pytest.mark.parametrize("name", NAMES)
def test_graphc_state_dict_loads_into_torch(name: str) -> None:
    """The other direction: graphc's ``state_dict()`` (numpy arrays) loads into PyTorch's
    optimizer, and both continue identically."""
    tm, gm = make_models()
    _, gopt = _make(name, {})(tm, gm)
    gstep = graphc_step(gm, gopt, "eager")
    for x, y in batches(4, seed=5):
        gstep(x, y)
    tm.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in gm.state_dict().items()})
    topt, _ = _make(name, {})(tm, gm)
    sd = gopt.state_dict()
    sd["state"] = {i: {k: torch.tensor(np.asarray(v)) for k, v in st.items()}
                   for i, st in sd["state"].items()}
    topt.load_state_dict(sd)
    tstep = torch_step(tm, topt)
    for x, y in batches(4, seed=6):
        tstep(x, y)
        gstep(x, y)
    assert_same_state(tm, gm, topt, gopt, "after loading into torch:")


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
    assert list(gsd["state"][0]) == list(tsd["state"][0])  # the same keys, in the same order
    for k, tv in tsd["state"][0].items():
        gv = np.asarray(gsd["state"][0][k])
        assert gv.dtype == tv.numpy().dtype and gv.shape == tuple(tv.shape), k
        np.testing.assert_array_equal(gv, tv.numpy(), err_msg=k)
    assert set(gsd["param_groups"][0]) == set(tsd["param_groups"][0])


def test_params_without_grad_are_skipped() -> None:
    """``.grad`` None: no update, no state (PyTorch's rule)."""
    for name in NAMES:
        w = nn.Parameter(np.ones(2, np.float32))
        u = nn.Parameter(np.ones(2, np.float32))
        opt = getattr(optim, name)([w, u], lr=0.1)
        (w * 2.0).sum().backward()
        opt.step()
        assert not opt.state.get(u), name
        np.testing.assert_array_equal(u.numpy(), [1.0, 1.0])
        assert opt.state[w]["step"].shape == () and float(opt.state[w]["step"]) == 1.0


def test_rprop_float64_params_match_torch() -> None:
    """float64 parameters: ``step_size`` and ``prev`` in float64, ``step`` still float32."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((5,))
    tw = torch.nn.Parameter(torch.tensor(w0))
    gw = nn.Parameter(gc.tensor(w0))
    topt = torch.optim.Rprop([tw], lr=0.05, step_sizes=(1e-3, 0.2))
    gopt = optim.Rprop([gw], lr=0.05, step_sizes=(1e-3, 0.2))
    for _ in range(8):
        target = rng.standard_normal((5,))
        tloss = ((tw - torch.tensor(target)) ** 3).sum()
        gloss = ((gw - gc.tensor(target)) ** 3).sum()
        topt.zero_grad()
        gopt.zero_grad()
        tloss.backward()
        gloss.backward()
        topt.step()
        gopt.step()
    np.testing.assert_allclose(gw.numpy(), tw.detach().numpy(), rtol=1e-12)
    for key in ("prev", "step_size", "step"):
        tv, gv = topt.state[tw][key].numpy(), gopt.state[gw][key].numpy()
        assert gv.dtype == tv.dtype, key
        np.testing.assert_allclose(gv, tv, rtol=1e-12, err_msg=key)


_BAD = [
    ("Rprop", dict(lr=-1.0), "Invalid learning rate"),
    ("Rprop", dict(etas=(1.0, 1.2)), "Invalid eta values"),
    ("Rprop", dict(etas=(0.5, 1.0)), "Invalid eta values"),
    ("Rprop", dict(etas=(0.0, 1.2)), "Invalid eta values"),
    ("ASGD", dict(lr=-1.0), "Invalid learning rate"),
    ("ASGD", dict(weight_decay=-0.1), "Invalid weight_decay value"),
]


@pytest.mark.parametrize("name, kwargs, message", _BAD)
def test_validation_matches_torch(name: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        getattr(optim, name)([nn.Parameter(np.ones(1, np.float32))], **kwargs)
    with pytest.raises(ValueError, match=message):
        getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(1))], **kwargs)


@pytest.mark.parametrize("name, option", [("Rprop", "differentiable"),
                                          ("ASGD", "differentiable"), ("ASGD", "foreach"),
                                          ("ASGD", "capturable")])
def test_unsupported_options_raise(name: str, option: str) -> None:
    """Options whose PyTorch path computes other values raise NotImplementedError naming
    the option, instead of silently running the default path."""
    p = nn.Parameter(np.ones(1, np.float32))
    with pytest.raises(NotImplementedError, match=option):
        getattr(optim, name)([p], **{option: True})


def test_asgd_group_cannot_switch_on_foreach() -> None:
    opt = optim.ASGD([nn.Parameter(np.ones(1, np.float32))])
    with pytest.raises(NotImplementedError, match="foreach"):
        opt.add_param_group({"params": [nn.Parameter(np.ones(1, np.float32))],
                             "foreach": True})


def test_rprop_kernel_options_are_accepted_and_stored() -> None:
    """``foreach`` and ``capturable`` select kernels with the same values: stored as given."""
    opt = optim.Rprop([nn.Parameter(np.ones(1, np.float32))], foreach=True, capturable=True)
    assert opt.param_groups[0]["foreach"] is True
    assert opt.param_groups[0]["capturable"] is True


def test_sparse_adam_raises_with_reason() -> None:
    with pytest.raises(NotImplementedError, match="no sparse gradients.*optim.Adam"):
        optim.SparseAdam([nn.Parameter(np.ones(2, np.float32))], lr=1e-3)
    assert "SparseAdam" in optim.__all__ and "Rprop" in optim.__all__ and "ASGD" in optim.__all__
