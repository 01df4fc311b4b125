"""What the channel-group and row-group tests share: checking a grouped training run against
the same run as separate kernels and in the interpreter (``check_runs``), and random
programs: steps over values of a "full"
shape and of the shape its group reductions give ("reduced": per channel, or per row):
elementwise ops of earlier values (a reduced value broadcast), the group's sums, arithmetic
on reduced values, and now and then a read at another index (a flip) that must keep its
kernels apart. Values used twice get buffers, so runs of kernels of the kinds the groups
take appear in many arrangements. Each program runs three ways: grouped, as separate kernels
and in the interpreter."""

from __future__ import annotations

from typing import Any

import numpy as np
from graphc.codegen import options
from hypothesis import strategies as st

import graphc as gc

OPS = ["add", "sub", "mul", "relu", "where", "sum", "sum", "sum", "red", "red", "flip"]


@st.composite
def programs(draw: Any) -> tuple[list, list, list]:
    n = draw(st.integers(3, 10))
    prog: list = []
    kinds = ["full"]
    for _ in range(n):
        op = draw(st.sampled_from(OPS))
        fulls = [i for i, k in enumerate(kinds) if k == "full"]
        reds = [i for i, k in enumerate(kinds) if k == "red"]
        a = draw(st.sampled_from(fulls))
        if op in ("add", "sub", "mul", "where"):
            b = draw(st.sampled_from(reds if reds and draw(st.booleans()) else fulls))
            prog.append((op, a, b))
            kinds.append("full")
        elif op in ("relu", "flip"):
            prog.append((op, a, None))
            kinds.append("full")
        elif op == "sum":
            prog.append((op, a, None))
            kinds.append("red")
        elif reds:
            prog.append((op, draw(st.sampled_from(reds)), None))
            kinds.append("red")
    outs = draw(st.lists(st.integers(1, len(kinds) - 1), min_size=1, max_size=3)) \
        if len(kinds) > 1 else [0]
    return prog, kinds, outs


def run_program(prog: list, outs: list, x: Any, axes: tuple, flip: int) -> list:
    """The program's outputs for input ``x``: its sums over ``axes`` (kept), its flips
    along dim ``flip``."""
    vals = [x]
    for op, a, b in prog:
        u = vals[a]
        if op == "add":
            vals.append(u + vals[b])
        elif op == "sub":
            vals.append(u - vals[b])
        elif op == "mul":
            vals.append(u * vals[b])
        elif op == "where":
            vals.append(gc.where(vals[b] > 0, u, 0.5 * u))
        elif op == "relu":
            vals.append(gc.relu(u))
        elif op == "flip":
            vals.append(u.flip(flip))
        elif op == "sum":
            vals.append(u.sum(axes, keepdim=True) / 16.0)
        else:  # arithmetic on a reduced value
            vals.append(u * u + 1.0)
    return [vals[i] for i in outs]


def check_three_ways(program: tuple, x: np.ndarray, axes: tuple, flip: int) -> None:
    """The program grouped equals it as separate kernels (to float rounding) and in the
    interpreter."""
    prog, _, outs = program
    res = {}
    saved = options.CHANNEL_GROUPS
    try:
        for mode in ("groups", "separate", "interp"):
            options.CHANNEL_GROUPS = mode != "separate"
            f = gc.compile(lambda t: run_program(prog, outs, t, axes, flip),
                           backend="interp" if mode == "interp" else None)
            res[mode] = [np.array(v) for v in f(x)]
    finally:
        options.CHANNEL_GROUPS = saved
    for g, s, i in zip(res["groups"], res["separate"], res["interp"]):
        scale = max(1.0, float(np.abs(i).max()))
        np.testing.assert_allclose(g, s, rtol=1e-5, atol=1e-5 * scale)
        np.testing.assert_allclose(g, i, rtol=1e-4, atol=1e-4 * scale)


def check_runs(grouped: tuple, separate: tuple, interp: tuple, dtype: Any) -> None:
    """A training run's ``(losses, state dict)`` with groups equals the run as separate
    kernels (to float rounding: sums may add in another order) and in the interpreter."""
    (l1, s1), (l0, s0), (li, si) = grouped, separate, interp
    f32 = dtype == np.float32
    tol = dict(rtol=1e-5, atol=1e-6) if f32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(l1, l0, **tol)
    np.testing.assert_allclose(l1, li, rtol=1e-4 if f32 else 1e-10)
    for k in s0:
        np.testing.assert_allclose(s1[k], s0[k], **tol, err_msg=k)
        np.testing.assert_allclose(s1[k], si[k], rtol=1e-3 if f32 else 1e-9,
                                   atol=1e-5 if f32 else 1e-12, err_msg=k)


def train_run(monkeypatch: Any, groups: bool, make: Any, batches: list
              ) -> tuple[list, dict, Any]:
    """One training run with the groups on or off: ``make()`` builds ``(model, compiled
    step)`` once the seed is set, the step runs on each ``(x, y)`` of ``batches``; the
    losses, the model's state afterwards and the step (what ``check_runs`` compares)."""
    monkeypatch.setattr(options, "CHANNEL_GROUPS", groups)
    gc.manual_seed(0)
    model, step = make()
    losses = [float(step(x, y)) for x, y in batches]
    return losses, {k: np.array(v) for k, v in model.state_dict().items()}, step


def train_three_ways(train: Any, dtype: Any) -> Any:
    """``train(groups, backend)`` grouped, as separate kernels and in the interpreter,
    compared by ``check_runs``; the grouped run's compiled step, for its plan."""
    l0, s0, _ = train(False, None)
    l1, s1, step = train(True, None)
    li, si, _ = train(True, "interp")
    check_runs((l1, s1), (l0, s0), (li, si), dtype)
    return step
