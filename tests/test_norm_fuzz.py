"""Normalisation layers trained against PyTorch, with random train/eval switches
(hypothesis).

Each draw builds ``Conv2d -> norm`` with the norm one of BatchNorm2d (momentum 0.1, 0.5 or
``None``: the cumulative average; with and without affine parameters and running
statistics), InstanceNorm2d (the same options), GroupNorm and LayerNorm over ``C x H x W``,
on maps from 1x1 up (sizes of 1 along either spatial dim included), then runs four SGD
steps compiled and in PyTorch, each step in train or eval mode at random (a mode switch
is a new compiled variant reading the same state). After every step the loss and the
whole ``state_dict`` (parameters, running statistics, ``num_batches_tracked``) must agree.
It found batch norm over ``N x C x H x 1`` maps training wrong (``channel_groups.run_dim``).

Profiles: ``ci`` (default) and ``long`` (``HYPOTHESIS_PROFILE=long``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _fuzz_settings import fuzz_settings
from _torch import torch
from hypothesis import given
from hypothesis import strategies as st

import graphc as gc
from graphc import nn, optim

FUZZ = fuzz_settings(12, 200)


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["bn", "bn", "in", "gn", "ln"]))
    c = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    n = draw(st.integers(1, 4))
    if kind == "bn" and n * h * w == 1:
        n = 2  # PyTorch: more than one value per channel in training
    if kind == "in" and h * w == 1:
        h = 2
    eps = draw(st.sampled_from([1e-5, 1e-3, 0.1]))
    affine = draw(st.booleans())
    if kind in ("bn", "in"):
        opts = dict(eps=eps, affine=affine, momentum=draw(st.sampled_from([0.1, 0.5, None])),
                    track_running_stats=draw(st.booleans()))
    elif kind == "gn":
        opts = dict(groups=draw(st.sampled_from([g for g in (1, 2, 3, 4) if c % g == 0])),
                    affine=affine, eps=eps)
    else:
        opts = dict(affine=affine, eps=eps)
    # values normalised together: two or three are ill-conditioned (the normalised values
    # are about +-1 and the gradient a difference of nearly equal terms: PyTorch's own
    # float32 result moves 1e-4 from float64 after three steps), so those maps grow to 4 rows
    count = {"bn": n * h * w, "in": h * w, "ln": c * h * w,
             "gn": c // opts.get("groups", 1) * h * w}[kind]
    if 1 < count < 4:
        h = 4
    modes = draw(st.lists(st.booleans(), min_size=4, max_size=4))
    return dict(kind=kind, n=n, c=c, hw=(h, w), opts=opts, modes=modes,
                seed=draw(st.integers(0, 2**31 - 1)))


def _norm(lib: Any, kind: str, c: int, hw: tuple, opts: dict) -> Any:
    if kind == "bn":
        return lib.BatchNorm2d(c, **opts)
    if kind == "in":
        return lib.InstanceNorm2d(c, **opts)
    if kind == "gn":
        return lib.GroupNorm(opts["groups"], c, eps=opts["eps"], affine=opts["affine"])
    return lib.LayerNorm([c, *hw], eps=opts["eps"], elementwise_affine=opts["affine"])


@FUZZ
@given(cases())
def test_norm_layers_train_like_torch(case: dict[str, Any]) -> None:
    kind, c, hw, opts = case["kind"], case["c"], case["hw"], case["opts"]
    rng = np.random.default_rng(case["seed"])
    tm = torch.nn.Sequential(torch.nn.Conv2d(2, c, 3, padding=1, bias=False),
                             _norm(torch.nn, kind, c, hw, opts))
    gm = nn.Sequential(nn.Conv2d(2, c, 3, padding=1, bias=False), _norm(nn, kind, c, hw, opts))
    state = {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}
    state["0.weight"] = (rng.standard_normal(state["0.weight"].shape) * 0.3).astype(np.float32)
    for k in state:  # affine weights away from 1
        if k == "1.weight":
            state[k] = state[k] + (rng.standard_normal(state[k].shape) * 0.1).astype(np.float32)
    tm.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    gm.load_state_dict({k: gc.tensor(v) for k, v in state.items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.1, momentum=0.9)

    @gc.compile
    def step(x: Any, t: Any) -> Any:
        gopt.zero_grad()
        loss = ((gm(x) - t) ** 2).mean()
        loss.backward()
        gopt.step()
        return loss

    for i, train in enumerate(case["modes"]):
        x = (rng.standard_normal((case["n"], 2, *hw)) * 2 + 1).astype(np.float32)
        t = rng.standard_normal((case["n"], c, *hw)).astype(np.float32)
        tm.train(train)
        gm.train(train)
        topt.zero_grad()
        try:
            tl = ((tm(torch.tensor(x)) - torch.tensor(t)) ** 2).mean()
        except ValueError:  # one value per group: PyTorch refuses, and so must graphc
            with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
                step(x, t)
            return
        tl.backward()
        topt.step()
        gl = float(step(x, t))
        # float32 tolerances loose enough for groups of two values (the normalised values
        # are +-1 and their gradient a difference of nearly equal terms: 2e-5 measured)
        np.testing.assert_allclose(gl, tl.item(), rtol=1e-3, atol=1e-5, err_msg=f"step {i}")
        gsd = gm.state_dict()
        for k, v in tm.state_dict().items():
            np.testing.assert_allclose(np.asarray(gsd[k], np.float64),
                                       v.numpy().astype(np.float64), rtol=1e-3, atol=1e-4,
                                       err_msg=f"{k} after step {i}")
