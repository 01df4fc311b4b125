"""Channel groups' runs written in vectors (``codegen.channel_groups``: ``vector_group``,
``_vector_pass``): 16 elements at a time from contiguous loads and per-channel values
broadcast once before the loop, a scalar tail, sums in two running vectors per block, all
compiled at the tile level. They must compute what the scalar runs compute (LLVM's O3
vectorising them) up to the order of the sums' additions, for every length of run (all
tail, whole vectors, pairs and one more, past a block), and what the interpreter computes;
a group with an op the vector runs do not take keeps the scalar runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from graphc.codegen import options

import graphc as gc
from graphc import nn, optim


def _channel_levels(run: Any) -> set[str]:
    """The LLVM levels of a compiled step's channel-group kernels (its lowering's record)."""
    kl = run.variants[0].exe.lowering.kernel_level
    return {lv for name, lv in kl.items() if name.startswith("k_channels")}


def _run(side: int, vector: bool | None, act: str, monkeypatch: pytest.MonkeyPatch,
         channels: int = 3, batch: int = 3) -> dict[str, np.ndarray]:
    """Two training steps of BatchNorm2d - activation - plus the input - BatchNorm2d, on
    ``side`` x ``side`` maps (runs of ``side**2`` elements): compiled with vector runs on or
    off, or eagerly (``vector`` None). Returns the outputs, gradients, statistics and
    parameters after the steps."""
    if vector is not None:
        monkeypatch.setattr(options, "VECTOR_CHANNEL_GROUPS", vector)
    gc.manual_seed(0)
    bn1, bn2 = nn.BatchNorm2d(channels), nn.BatchNorm2d(channels)
    params = list(bn1.parameters()) + list(bn2.parameters())
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    f = {"relu": gc.relu, "sigmoid": gc.sigmoid, "exp": gc.exp, "tanh": gc.tanh}[act]

    def step(x: Any, g: Any) -> Any:
        opt.zero_grad()
        y = bn2(f(bn1(x)) + x)  # not scale-invariant in bn1's weight (no cancellation)
        (y * g).sum().backward()
        opt.step()
        return y

    run = gc.compile(step) if vector is not None else step
    rng = np.random.default_rng(side)
    out: dict[str, np.ndarray] = {}
    for i in range(2):
        x = (rng.standard_normal((batch, channels, side, side)) * 2 + 0.5).astype(np.float32)
        g = rng.standard_normal((batch, channels, side, side)).astype(np.float32)
        out[f"y{i}"] = np.array(run(x, g))
        for j, p in enumerate(params):
            out[f"grad{i}.{j}"] = np.array(p.grad)
    for name, v in [*bn1.state_dict().items(), *bn2.state_dict().items()]:
        out[name + str(len(out))] = np.array(v)
    if vector is not None:
        out["levels"] = _channel_levels(run)  # type: ignore[assignment]
    return out


def _close(a: dict[str, np.ndarray], b: dict[str, np.ndarray], what: str) -> None:
    keys = [k for k in a if k != "levels"]
    assert keys == [k for k in b if k != "levels"]
    for k in keys:
        scale = float(np.abs(b[k]).max(initial=0.0))
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5 * scale + 1e-7,
                                   err_msg=f"{what}: {k}")


# runs of 1, 9 and 15 elements (tail only), 16 (one vector), 25, 36 and 49 (one vector or
# a pair, and a tail), 64 (two pairs), and 2116 (past a block of 2048, so two blocks of sums)
@pytest.mark.parametrize("side", [1, 3, 4, 5, 6, 7, 8, 46])
def test_vector_runs_match_scalar_runs_and_the_interpreter(side: int,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    vec = _run(side, True, "relu", monkeypatch)
    assert vec["levels"] == {"tile"}, vec["levels"]
    scalar = _run(side, False, "relu", monkeypatch)
    assert scalar["levels"] == {"O3"}, scalar["levels"]
    _close(vec, scalar, f"{side}x{side}, vector against scalar runs")
    _close(vec, _run(side, None, "relu", monkeypatch), f"{side}x{side}, against the interpreter")


def test_a_group_with_another_op_keeps_scalar_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sigmoid (a vector-math routine) in the group's pass: its runs stay scalar, at O3,
    and still compute what the interpreter does."""
    got = _run(5, True, "sigmoid", monkeypatch)
    assert got["levels"] == {"O3"}, got["levels"]
    _close(got, _run(5, None, "sigmoid", monkeypatch), "sigmoid group against the interpreter")
