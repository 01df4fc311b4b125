"""ReduceLROnPlateau, OneCycleLR, CosineAnnealingWarmRestarts, CyclicLR, ChainedScheduler (and
PolynomialLR/SequentialLR combinations): the lr (and cycled momentum) sequences of
``torch.optim.lr_scheduler``, state-dict round trips, and scheduled compiled runs that never
recompile."""

import numpy as np
import pytest
from _parity import assert_close, assert_same_state, batches, graphc_step, make_models, torch_step
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.optim import lr_scheduler as gls

tls = torch.optim.lr_scheduler
STEPS = 60


def _opts(kind="sgd"):
    tp = [torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))]
    gp = [nn.Parameter(np.ones(2, np.float32)), nn.Parameter(np.ones(3, np.float32))]
    if kind == "sgd":
        mk = {"t": torch.optim.SGD, "g": optim.SGD}
        extra = {"momentum": 0.9}
    else:
        mk = {"t": torch.optim.Adam, "g": optim.Adam}
        extra = {}
    topt = mk["t"]([{"params": [tp[0]], "lr": 0.1}, {"params": [tp[1]], "lr": 0.05}], **extra)
    gopt = mk["g"]([{"params": [gp[0]], "lr": 0.1}, {"params": [gp[1]], "lr": 0.05}], **extra)
    return topt, gopt


class _Scale:
    """A callable object as ``scale_fn`` (saved in state dicts through its ``__dict__``)."""

    def __init__(self):
        self.base = 0.9

    def __call__(self, x):
        return self.base ** x


SCHEDULERS = {
    "onecycle_cos": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=STEPS + 5),
    "onecycle_linear": lambda m, o: m.OneCycleLR(
        o, max_lr=0.8, epochs=13, steps_per_epoch=5, pct_start=0.25,
        anneal_strategy="linear", div_factor=10.0, final_div_factor=100.0),
    "onecycle_three_phase": lambda m, o: m.OneCycleLR(
        o, max_lr=0.6, total_steps=STEPS, three_phase=True, base_momentum=[0.8, 0.7],
        max_momentum=0.95),
    "onecycle_no_momentum": lambda m, o: m.OneCycleLR(o, max_lr=0.6, total_steps=STEPS,
                                                      cycle_momentum=False),
    "warm_restarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=7),
    "warm_restarts_mult": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2,
                                                                     eta_min=0.001),
    "cyclic_triangular": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4),
    "cyclic_triangular2": lambda m, o: m.CyclicLR(
        o, base_lr=[0.01, 0.02], max_lr=[0.1, 0.3], step_size_up=3, step_size_down=5,
        mode="triangular2", base_momentum=0.7, max_momentum=0.95),
    "cyclic_exp_range": lambda m, o: m.CyclicLR(o, base_lr=0.001, max_lr=0.05, step_size_up=6,
                                                mode="exp_range", gamma=0.97),
    "cyclic_custom": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.2, step_size_up=5,
                                             scale_fn=_Scale(), scale_mode="iterations",
                                             cycle_momentum=False),
    "chained": lambda m, o: m.ChainedScheduler(
        [m.ConstantLR(o, factor=0.5, total_iters=6), m.ExponentialLR(o, gamma=0.95),
         m.CosineAnnealingLR(o, T_max=25)]),
    "chained_poly": lambda m, o: m.ChainedScheduler(
        [m.LinearLR(o, start_factor=0.2, total_iters=10), m.PolynomialLR(o, total_iters=40,
                                                                          power=1.5)],
        optimizer=o),
    "sequential_restarts": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=5),
            m.CosineAnnealingWarmRestarts(o, T_0=10)], milestones=[5]),
    "polynomial": lambda m, o: m.PolynomialLR(o, total_iters=40, power=0.5),
}
MOMENTUM = {k for k in SCHEDULERS if k.startswith(("onecycle", "cyclic"))}


def _hyper(opt):
    return [(g["lr"], g.get("momentum"), tuple(g.get("betas", ()))) for g in opt.param_groups]


def _assert_same(ts, gs, topt, gopt, when):
    assert gs.get_last_lr() == ts.get_last_lr(), when
    assert _hyper(gopt) == _hyper(topt), when
    assert getattr(gs, "last_epoch", None) == getattr(ts, "last_epoch", None), when


@pytest.mark.parametrize(("name", "kind"), [(n, "sgd") for n in SCHEDULERS]
                         + [(n, "adam") for n in SCHEDULERS if n in MOMENTUM])
def test_sequence_identical_to_torch(name, kind):
    """SGD cycles ``momentum``, Adam ``betas[0]``."""
    topt, gopt = _opts(kind)
    ts, gs = SCHEDULERS[name](tls, topt), SCHEDULERS[name](gls, gopt)
    _assert_same(ts, gs, topt, gopt, "after construction")
    assert {k for g in gopt.param_groups for k in g} == {k for g in topt.param_groups for k in g}
    for epoch in range(STEPS):
        topt.step()
        gopt.step()
        ts.step()
        gs.step()
        _assert_same(ts, gs, topt, gopt, f"epoch {epoch}")


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_state_dict_resume_identical_to_torch(name, tmp_path):
    """Save at epoch 25 through gc.save, rebuild both sides, load, continue to STEPS."""
    topt, gopt = _opts()
    ts, gs = SCHEDULERS[name](tls, topt), SCHEDULERS[name](gls, gopt)
    for _ in range(25):
        for o, s in ((topt, ts), (gopt, gs)):
            o.step()
            s.step()
    sd = gs.state_dict()
    assert set(sd) == set(ts.state_dict()), "state_dict keys are PyTorch's"
    gc.save({"sched": sd, "opt": gopt.state_dict()}, tmp_path / "ck")
    _, gopt2 = _opts()
    gs2 = SCHEDULERS[name](gls, gopt2)
    ck = gc.load(tmp_path / "ck")
    gopt2.load_state_dict(ck["opt"])
    gs2.load_state_dict(ck["sched"])
    _assert_same(ts, gs2, topt, gopt2, "after loading")
    for epoch in range(25, STEPS):
        topt.step()
        gopt2.step()
        ts.step()
        gs2.step()
        _assert_same(ts, gs2, topt, gopt2, f"epoch {epoch}")


def test_cyclic_custom_scale_object_state_round_trip():
    _, gopt = _opts()
    s = gls.CyclicLR(gopt, 0.01, 0.1, step_size_up=3, scale_fn=_Scale(), cycle_momentum=False)
    s._scale_fn_custom.base = 0.5
    sd = s.state_dict()
    assert sd["_scale_fn_custom"] == {"base": 0.5} and "_scale_fn_ref" not in sd
    _, gopt2 = _opts()
    s2 = gls.CyclicLR(gopt2, 0.01, 0.1, step_size_up=3, scale_fn=_Scale(), cycle_momentum=False)
    s2.load_state_dict(sd)
    assert s2._scale_fn_custom.base == 0.5
    assert "_scale_fn_custom" in sd  # the caller's dict is left as it was


def test_warm_restarts_fractional_epochs_like_torch():
    topt, gopt = _opts()
    ts = tls.CosineAnnealingWarmRestarts(topt, T_0=4, T_mult=2, eta_min=0.01)
    gs = gls.CosineAnnealingWarmRestarts(gopt, T_0=4, T_mult=2, eta_min=0.01)
    iters = 5
    for epoch in range(12):
        for i in range(iters):
            topt.step()
            gopt.step()
            ts.step(epoch + i / iters)
            gs.step(epoch + i / iters)
            _assert_same(ts, gs, topt, gopt, f"epoch {epoch} + {i}/{iters}")
    with pytest.raises(ValueError):
        gs.step(-1)


METRICS = [1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.89, 0.9, 0.9, 0.9, 0.9, 0.9, 0.5, 0.6, 0.7,
           0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.69999, 0.7, 0.7, 0.7, 0.7]


@pytest.mark.parametrize("kw", [
    {},
    {"patience": 2, "factor": 0.5},
    {"patience": 1, "cooldown": 2, "factor": 0.3, "min_lr": [0.01, 0.02]},
    {"mode": "max", "patience": 0, "threshold": 0.05, "threshold_mode": "abs"},
    {"patience": 1, "threshold_mode": "abs", "threshold": 0.0, "eps": 0.01, "min_lr": 0.001},
])
def test_reduce_on_plateau_like_torch(kw, tmp_path):
    topt, gopt = _opts()
    ts, gs = tls.ReduceLROnPlateau(topt, **kw), gls.ReduceLROnPlateau(gopt, **kw)
    for i, metric in enumerate(METRICS * 2):
        ts.step(metric)
        gs.step(gc.tensor(metric, dtype=gc.float64) if i % 2 else metric)  # 0-d tensor too
        assert gs.get_last_lr() == ts.get_last_lr(), f"epoch {i}"
        assert [g["lr"] for g in gopt.param_groups] == [g["lr"] for g in topt.param_groups]
        assert (gs.best, gs.num_bad_epochs, gs.cooldown_counter) == \
            (ts.best, ts.num_bad_epochs, ts.cooldown_counter)
        if i == 20:
            gc.save(gs.state_dict(), tmp_path / "s")
            _, gopt2 = _opts()
            gopt2.load_state_dict(gopt.state_dict())
            gs2 = gls.ReduceLROnPlateau(gopt2, **kw)
            gs2.load_state_dict(gc.load(tmp_path / "s"))
    assert set(gs.state_dict()) == set(ts.state_dict())
    for metric in METRICS:
        gs2.step(metric)
    assert gs2.last_epoch == 20 + len(METRICS) + 1


def test_errors_like_torch():
    _, gopt = _opts()
    tsgd, _ = _opts()
    for m, o in ((tls, tsgd), (gls, gopt)):
        with pytest.raises(ValueError):
            m.ReduceLROnPlateau(o, factor=1.0)
        with pytest.raises(ValueError):
            m.ReduceLROnPlateau(o, mode="avg")
        with pytest.raises(ValueError):
            m.ReduceLROnPlateau(o, min_lr=[0.1])
        with pytest.raises(ValueError):
            m.OneCycleLR(o, max_lr=0.1)
        with pytest.raises(ValueError):
            m.OneCycleLR(o, max_lr=0.1, total_steps=10, anneal_strategy="exp")
        with pytest.raises(ValueError):
            m.OneCycleLR(o, max_lr=[0.1], total_steps=10)
        with pytest.raises(ValueError):
            m.CosineAnnealingWarmRestarts(o, T_0=0)
        with pytest.raises(ValueError):
            m.CyclicLR(o, 0.1, 1.0, mode="square")
        with pytest.raises(ValueError):
            m.ChainedScheduler([])
        with pytest.raises(ValueError):
            m.ChainedScheduler([m.ReduceLROnPlateau(o)])
    s = gls.OneCycleLR(gopt, max_lr=0.1, total_steps=3)
    for _ in range(3):
        s.step()
    with pytest.raises(ValueError, match="total steps"):
        s.step()


def test_cycle_momentum_needs_momentum_or_betas():
    class Plain(optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 0.1})

        def step(self, closure=None):
            pass

    o = Plain([nn.Parameter(np.ones(1, np.float32))])
    with pytest.raises(ValueError, match="momentum"):
        gls.OneCycleLR(o, max_lr=0.1, total_steps=10)
    with pytest.raises(ValueError, match="momentum"):
        gls.CyclicLR(o, 0.01, 0.1)
    gls.CyclicLR(o, 0.01, 0.1, cycle_momentum=False)


# -- scheduled compiled runs: the lr and momentum are run-time inputs --------------------------
COMPILED = {
    "onecycle": ("sgd", lambda m, o: m.OneCycleLR(o, max_lr=[0.05, 0.02], total_steps=STEPS)),
    "onecycle_adam": ("adam", lambda m, o: m.OneCycleLR(o, max_lr=0.01, total_steps=STEPS,
                                                         three_phase=True)),
    "cyclic": ("sgd", lambda m, o: m.CyclicLR(o, base_lr=0.001, max_lr=0.05, step_size_up=7,
                                              mode="triangular2")),
    "cyclic_adam": ("adam", lambda m, o: m.CyclicLR(o, base_lr=0.001, max_lr=0.01,
                                                    step_size_up=5, mode="exp_range",
                                                    gamma=0.99)),
    "warm_restarts": ("sgd", lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=8, T_mult=2)),
    "chained": ("adam", lambda m, o: m.ChainedScheduler(
        [m.LinearLR(o, start_factor=0.3, total_iters=10), m.ExponentialLR(o, gamma=0.97)])),
    "polynomial": ("sgd", lambda m, o: m.PolynomialLR(o, total_iters=45, power=2.0)),
}


def _make_opt(kind, model, mod):
    g = [dict(params=list(model[0].parameters()), lr=0.02, weight_decay=0.01),
         dict(params=list(model[2].parameters()), lr=0.01)]
    if kind == "sgd":
        return mod.SGD(g, lr=0.01, momentum=0.9)
    return mod.Adam(g, lr=0.01)


@pytest.mark.parametrize("mode", ["compiled", "interp"])
@pytest.mark.parametrize("name", list(COMPILED))
def test_scheduled_compiled_run_equals_torch(name, mode):
    kind, make = COMPILED[name]
    tm, gm = make_models()
    topt, gopt = _make_opt(kind, tm, torch.optim), _make_opt(kind, gm, optim)
    ts, gs = make(tls, topt), make(gls, gopt)
    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, mode)
    for i, (x, y) in enumerate(batches(STEPS)):
        tl = tstep(x, y)
        gl = gstep(x, y)
        assert_close(np.asarray(gl), tl.item(), f"loss at step {i}")
        ts.step()
        gs.step()
        assert gs.get_last_lr() == ts.get_last_lr(), f"step {i}"
        assert _hyper(gopt) == _hyper(topt), f"step {i}"
    assert_same_state(tm, gm, topt, gopt, f"after {STEPS} steps:")
    assert gstep.compile_count == 1


@pytest.mark.parametrize("mode", ["compiled", "interp"])
def test_reduce_on_plateau_compiled_run_equals_torch(mode):
    """The step's returned loss drives ReduceLROnPlateau between calls."""
    tm, gm = make_models()
    topt, gopt = _make_opt("sgd", tm, torch.optim), _make_opt("sgd", gm, optim)
    ts = tls.ReduceLROnPlateau(topt, patience=1, factor=0.5, threshold=0.02)
    gs = gls.ReduceLROnPlateau(gopt, patience=1, factor=0.5, threshold=0.02)
    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, mode)
    x, y = batches(1)[0]
    reductions = 0
    for i in range(STEPS):
        tl = tstep(x, y)
        gl = gstep(x, y)
        assert_close(np.asarray(gl), tl.item(), f"loss at step {i}")
        before = gs.get_last_lr()
        ts.step(tl.item())
        gs.step(gl)
        reductions += gs.get_last_lr() != before
        assert gs.get_last_lr() == ts.get_last_lr(), f"step {i}"
    assert reductions >= 2
    assert_same_state(tm, gm, topt, gopt, f"after {STEPS} steps:")
    assert gstep.compile_count == 1
