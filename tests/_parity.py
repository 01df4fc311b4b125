"""Shared harness for optimizer parity tests against ``torch.optim``.

A small MLP (Linear + ReLU + Linear, MSELoss) is built in both frameworks with identical
weights; each optimizer gets two param groups with different hyperparameters. The graphc side
runs eagerly, compiled with the default backend, or compiled with the interpreter backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn

RTOL = 2e-4
ATOL = 1e-7  # float32 state entries that are ~0 after cancellation
MODES = ["eager", "compiled", "interp"]


def make_models(seed: int = 0) -> tuple[torch.nn.Module, nn.Module]:
    torch.manual_seed(seed)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    gm = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, gm


def batches(n: int, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((16, 4)).astype(np.float32),
             rng.standard_normal((16, 3)).astype(np.float32)) for _ in range(n)]


def groups(model: Any, g0: dict[str, Any], g1: dict[str, Any]) -> list[dict[str, Any]]:
    """Two param groups: the first Linear layer and the second."""
    return [dict(params=list(model[0].parameters()), **g0),
            dict(params=list(model[2].parameters()), **g1)]


def torch_step(model: torch.nn.Module, opt: Any) -> Callable[[np.ndarray, np.ndarray], Any]:
    def step(x: np.ndarray, y: np.ndarray) -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        return loss
    return step


def graphc_step(model: nn.Module, opt: Any, mode: str) -> Any:
    loss_fn = nn.MSELoss()

    def train_step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if mode == "eager":
        return train_step
    if mode == "compiled":
        pytest.importorskip("graphc.codegen.cpu", reason="the native CPU backend is not built")
        return gc.compile(train_step)
    assert mode == "interp"
    return gc.compile(train_step, backend="interp")


def assert_close(actual: Any, expected: Any, what: str) -> None:
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=RTOL, atol=ATOL,
                               err_msg=what)


def assert_same_state(tm: torch.nn.Module, gm: nn.Module, topt: Any, gopt: Any,
                      when: str = "") -> None:
    """Parameters and every optimizer state tensor match (and the state keys are PyTorch's)."""
    gsd = gm.state_dict()
    for k, v in tm.state_dict().items():
        assert_close(gsd[k], v.detach().numpy(), f"{when} parameter {k}")
    tparams = [p for g in topt.param_groups for p in g["params"]]
    gparams = [p for g in gopt.param_groups for p in g["params"]]
    for i, (tp, gp) in enumerate(zip(tparams, gparams)):
        tst = topt.state.get(tp, {})
        gst = gopt.state.get(gp, {}) if gp in gopt.state else {}
        assert set(gst) == set(tst), f"{when} state keys of param {i}: {set(gst)} != {set(tst)}"
        for key, tv in tst.items():
            gv = gst[key]
            tv = tv.detach().numpy() if isinstance(tv, torch.Tensor) else tv
            assert np.asarray(gv).shape == np.asarray(tv).shape, f"{when} state[{i}][{key}]"
            assert np.asarray(gv).dtype == np.asarray(tv).dtype, f"{when} state[{i}][{key}]"
            assert_close(gv, tv, f"{when} state[{i}][{key}]")


def run_parity(make_opts: Callable[[Any, Any], tuple[Any, Any]], mode: str, steps: int = 30,
               halve_at: int = 10) -> None:
    """``steps`` training steps in both frameworks; the lr of every group is halved (through
    ``param_groups``) before step ``halve_at``. Compiled runs must compile exactly once."""
    tm, gm = make_models()
    topt, gopt = make_opts(tm, gm)
    tstep, gstep = torch_step(tm, topt), graphc_step(gm, gopt, mode)
    for i, (x, y) in enumerate(batches(steps)):
        if i == halve_at:
            for opt in (topt, gopt):
                for g in opt.param_groups:
                    g["lr"] = g["lr"] * 0.5
        tl = tstep(x, y)
        gl = gstep(x, y)
        assert_close(np.asarray(gl), tl.item(), f"loss at step {i}")
        if i in (0, halve_at):
            assert_same_state(tm, gm, topt, gopt, f"after step {i}:")
    assert_same_state(tm, gm, topt, gopt, f"after {steps} steps:")
    if mode != "eager":
        assert gstep.compile_count == 1
