"""Elementwise kernels, convolution epilogues and loop groups written in vectors
(``codegen.vector_runs``): 32 elements an iteration, then one vector of 16, then a scalar tail,
values that are the same all along a run computed once before its loop, all compiled at the
tile level. No sum is reordered there, so they must compute what the scalar loops compute
(LLVM's O3 vectorising them) bit for bit, for every length of run (all tail; one vector; a
pair, one more and a tail; split over two threads), and what eager computes; a kernel with
an op or a read the vector runs do not take keeps its scalar loops at O3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _fuzz_settings import fuzz_settings
from _steps import train_step
from _threads import assert_bit_identical, run_per_thread_count
from graphc.codegen import options
from hypothesis import given
from hypothesis import strategies as st

import graphc as gc
from graphc import nn, optim


def _levels(step: Any) -> dict[str, str]:
    """Kernel name -> the LLVM level of its module, for a compiled step's one variant."""
    return dict(step.variants[0].exe.lowering.kernel_level)


def _equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray], what: str) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), f"{what}: {k}"


def _affine_relu(x: Any, b: Any, s: Any) -> Any:
    """A per-channel affine map (``b`` broadcast over the maps: one value per run), a
    clamp, and a ``where`` between two values of it."""
    y = gc.maximum(x * s + b, -1.5)
    return gc.where(y > 0.25, y, gc.sqrt(gc.abs(y)) - 1.0)


def _affine_ref(x: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    y = np.maximum(x * np.float32(s) + b, np.float32(-1.5))
    return np.where(y > 0.25, y, np.sqrt(np.abs(y)) - np.float32(1.0))


# maps of 1, 3x3 and 3x5 (tail only), 4x4 (one vector), 5x5 (one vector and a tail), 6x6
# and 8x8 (pairs and a tail, pairs), 7x7 (a pair, one more vector, a tail), 12x12
@pytest.mark.parametrize("hw", [(1, 1), (3, 3), (3, 5), (4, 4), (5, 5), (6, 6), (7, 7),
                                (8, 8), (12, 12)])
def test_elementwise_runs_match_scalar_loops_and_numpy(hw: tuple[int, int],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(hw[0] * 31 + hw[1])
    x = rng.standard_normal((2, 3, *hw)).astype(np.float32)
    b = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    got: dict[bool, tuple[np.ndarray, dict[str, str]]] = {}
    for vector in (True, False):
        monkeypatch.setattr(options, "VECTOR_RUNS", vector)
        step = gc.compile(lambda x, b: _affine_relu(x, b, 0.75))
        got[vector] = (np.array(step(x, b)), _levels(step))
    assert set(got[True][1].values()) == {"tile"}, got[True][1]
    assert set(got[False][1].values()) == {"O3"}, got[False][1]
    _equal({"y": got[True][0]}, {"y": got[False][0]}, f"{hw}: vector against scalar loops")
    np.testing.assert_allclose(got[True][0], _affine_ref(x, b, 0.75), rtol=1e-6, atol=1e-6)


def test_a_run_over_every_dim_with_a_runtime_scalar(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scalar argument (a buffer read the same all along the run) and no per-channel
    value: the run is the whole flat tensor, sizes from the call (a symbolic batch)."""
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((n, 37)).astype(np.float32) for n in (1, 3, 17)]
    outs: dict[bool, list[np.ndarray]] = {}
    for vector in (True, False):
        monkeypatch.setattr(options, "VECTOR_RUNS", vector)
        step = gc.compile(lambda x, s: gc.minimum(x * s, x + 1.0) / (s + 2.0))
        outs[vector] = []
        for x in xs:
            s = np.float32(len(x) / 3)
            outs[vector].append(np.array(step(x, s)))
            ref = np.minimum(x * s, x + np.float32(1)) / (s + np.float32(2))
            np.testing.assert_allclose(outs[vector][-1], ref, rtol=1e-6, atol=1e-6)
        if vector:
            assert "tile" in set(_levels(step).values())
    for a, b in zip(outs[True], outs[False]):
        assert np.array_equal(a, b)


OPTIMIZERS = {
    "sgd_nesterov_wd": lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                           weight_decay=1e-2),
    "sgd_momentum_wd": lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adam_amsgrad": lambda p: optim.Adam(p, lr=1e-2, amsgrad=True, weight_decay=1e-2),
    "adamw": lambda p: optim.AdamW(p, lr=1e-2),
    "rmsprop": lambda p: optim.RMSprop(p, lr=1e-2, centered=True, momentum=0.5),
    "adagrad": lambda p: optim.Adagrad(p, lr=1e-1, lr_decay=1e-3),
}


def _train(make_opt: Any, vector: bool | None, monkeypatch: pytest.MonkeyPatch
           ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Three steps of a small conv net (a 3x3 convolution, ReLU, a linear layer: conv
    weights of 9 x 4 elements, biases of 4 and 3, a 100 x 3 weight) under ``make_opt``:
    compiled with vector runs on or off, or eagerly (``vector`` None). Returns the losses,
    parameters and optimizer state, and the compiled step's kernel levels."""
    if vector is not None:
        monkeypatch.setattr(options, "VECTOR_RUNS", vector)
    gc.manual_seed(7)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 25, 3))
    opt = make_opt(model.parameters())
    step = train_step(model, opt, nn.CrossEntropyLoss())
    run = gc.compile(step) if vector is not None else step
    rng = np.random.default_rng(1)
    out: dict[str, np.ndarray] = {}
    for i in range(3):
        x = rng.standard_normal((6, 1, 5, 5)).astype(np.float32)
        y = rng.integers(0, 3, 6).astype(np.int64)
        out[f"loss{i}"] = np.array(run(x, y))
    for name, v in model.state_dict().items():
        out[name] = np.array(v)
    for j, state in enumerate(opt.state.values()):
        for name, v in state.items():
            out[f"state{j}.{name}"] = np.array(v)
    return out, (_levels(run) if vector is not None else {})


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_updates_match_scalar_loops_and_eager(name: str,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    vec, levels = _train(OPTIMIZERS[name], True, monkeypatch)
    scalar, scalar_levels = _train(OPTIMIZERS[name], False, monkeypatch)
    assert "O3" in set(scalar_levels.values())
    # the optimizer's loop groups are written in vectors
    assert any(lv == "tile" for k, lv in levels.items() if k.startswith("k_group")), levels
    _equal(vec, scalar, f"{name}: vector against scalar loops")
    eager, _ = _train(OPTIMIZERS[name], None, monkeypatch)
    for k in vec:
        scale = float(np.abs(eager[k]).max(initial=0.0))
        np.testing.assert_allclose(vec[k], eager[k], rtol=1e-5, atol=1e-5 * scale + 1e-7,
                                   err_msg=f"{name}: {k} against eager")


def _conv_step(side: int, vector: bool, monkeypatch: pytest.MonkeyPatch
               ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Two steps of conv - ReLU - conv - ReLU - conv at ``side`` x ``side``: the ReLUs'
    gradients run in the input-gradient convolutions' epilogues."""
    monkeypatch.setattr(options, "VECTOR_RUNS", vector)
    gc.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 4, 3, padding=1))
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x: Any, g: Any) -> Any:
        opt.zero_grad()
        y = model(x)
        (y * g).sum().backward()
        opt.step()
        return y

    run = gc.compile(step)
    rng = np.random.default_rng(side)
    out: dict[str, np.ndarray] = {}
    for i in range(2):
        x = rng.standard_normal((3, 3, side, side)).astype(np.float32)
        g = rng.standard_normal((3, 4, side, side)).astype(np.float32)
        out[f"y{i}"] = np.array(run(x, g))
        for j, p in enumerate(model.parameters()):
            out[f"grad{i}.{j}"] = np.array(p.grad)
    return out, _levels(run)


@pytest.mark.parametrize("side", [3, 5, 8, 11])
def test_convolution_epilogues_match_scalar_loops(side: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    vec, levels = _conv_step(side, True, monkeypatch)
    scalar, scalar_levels = _conv_step(side, False, monkeypatch)
    epi = {k: lv for k, lv in levels.items() if k.startswith("k_epilogue")}
    assert epi and set(epi.values()) == {"tile"}, levels
    assert {lv for k, lv in scalar_levels.items() if k.startswith("k_epilogue")} == {"O3"}
    _equal(vec, scalar, f"{side}x{side}: vector against scalar loops")


def test_other_ops_and_reads_keep_scalar_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """An op with a vector-math routine (``exp``), a transposed read (not contiguous along
    the run): their kernels stay at O3, and compute what numpy does."""
    monkeypatch.setattr(options, "VECTOR_RUNS", True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, 24)).astype(np.float32)
    y = rng.standard_normal((24, 20)).astype(np.float32)
    for f, ref in ((lambda x, y: gc.exp(x) + 1.0, np.exp(x) + np.float32(1)),
                   (lambda x, y: x * 2.0 + y.T, x * np.float32(2) + y.T)):
        step = gc.compile(f)
        np.testing.assert_allclose(np.array(step(x, y)), ref, rtol=1e-6, atol=1e-6)
        assert set(_levels(step).values()) == {"O3"}, _levels(step)


_THREADS_SCRIPT = """
import numpy as np, os
import graphc as gc
from graphc import nn, optim
from graphc.codegen import options
options.VECTOR_RUNS = os.environ["VR"] == "1"
gc.manual_seed(0)
model = nn.Sequential(nn.Linear(96, 333), nn.ReLU(), nn.Linear(333, 7))
opt = optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-3)
@gc.compile
def step(x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss
rng = np.random.default_rng(0)
out = {}
for i in range(2):
    x = rng.standard_normal((5, 96)).astype(np.float32)
    y = rng.standard_normal((5, 7)).astype(np.float32)
    out[f"loss{i}"] = np.array(step(x, y))
for k, v in model.state_dict().items():
    out[k] = np.array(v)
np.savez(OUT, **out)
levels = step.variants[0].exe.lowering.kernel_level
groups = {lv for k, lv in levels.items() if k.startswith("k_group")}
assert groups == ({"tile"} if options.VECTOR_RUNS else {"O3"}), levels
from graphc.runtime import pool
st = pool.stats()
with open(OUT + ".dispatches", "w") as f:
    f.write(str(st["parallel"] if st is not None else 0))
"""


def test_split_runs_are_bit_identical_over_thread_counts(tmp_path: Path) -> None:
    """The loop groups of a 96 x 333 weight (all of them vector runs, the script checks)
    split over two threads (the run is each thread's share of the flat range), against one
    thread and against scalar loops; on two threads, the step hands the second thread as
    many parts with vector runs as with scalar loops, and some."""
    def dispatches() -> int:
        return int((tmp_path / "t2.npz.dispatches").read_text())

    vec = run_per_thread_count(tmp_path, _THREADS_SCRIPT, env={"VR": "1"})
    assert_bit_identical(vec, min_arrays=6)
    split_vec = dispatches()
    scalar = run_per_thread_count(tmp_path, _THREADS_SCRIPT, threads=(2,), env={"VR": "0"})
    assert_bit_identical([vec[1], scalar[0]], min_arrays=6)
    assert split_vec == dispatches() > 0


def test_a_checked_index_the_same_along_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``x * w[i]``: the gathered scalar (an index check among its ops, so blocks of its
    own) is computed once before the run's loop; in range it gives numpy's values, out of
    range the same error, naming the same position, as the scalar loops (regression: the
    check's branch was once emitted into the middle of the block before the loop)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 40)).astype(np.float32)
    w = np.arange(5, dtype=np.float32)
    errors = []
    for vector in (True, False):
        monkeypatch.setattr(options, "VECTOR_RUNS", vector)
        step = gc.compile(lambda x, w, i: x * w[i] + 1.0)
        np.testing.assert_array_equal(np.array(step(x, w, np.array(3))),
                                      x * np.float32(3) + np.float32(1))
        assert set(_levels(step).values()) == {"tile" if vector else "O3"}
        with pytest.raises(IndexError) as e:
            step(x, w, np.array(7))
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "'i'" in errors[0], errors


# -- random programs -------------------------------------------------------------------------
_UNARY = {
    "neg": lambda a: -a, "abs": gc.abs, "relu": gc.relu, "sqrt_abs": lambda a: gc.sqrt(gc.abs(a)),
    "square": lambda a: a ** 2, "half": lambda a: a * 0.5 - 0.25,
    # ops the vector runs do not take: their kernels keep the scalar loops
    "exp_clip": lambda a: gc.exp(gc.minimum(a, 2.0)), "tanh": gc.tanh,
}
_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "max": gc.maximum, "min": gc.minimum, "where": lambda a, b: gc.where(a > b, a, b - 1.0),
    "div": lambda a, b: a / (gc.abs(b) + 1.0),
}


@st.composite
def _programs(draw: Any) -> tuple[tuple[int, ...], list[tuple[str, int, int]]]:
    """A shape ``[N, C, H, W]`` and a recipe: each step an op on two earlier values of the
    pool (x, y at the full shape, a per-channel b, a scalar s, y's maps transposed when they
    are square, then the steps' results)."""
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 9)),
             draw(st.integers(1, 9)))
    steps = []
    for i in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(sorted(_UNARY) + sorted(_BINARY)))
        steps.append((op, draw(st.integers(0, 4 + i)), draw(st.integers(0, 4 + i))))
    return shape, steps


def _program_fn(steps: list[tuple[str, int, int]]) -> Any:
    def f(x: Any, y: Any, b: Any, s: Any) -> Any:
        yt = y.permute(0, 1, 3, 2) if y.shape[2] == y.shape[3] else y * 1.5
        pool = [x, y, b, s, yt]
        for op, i, j in steps:
            a, c = pool[i], pool[j]
            pool.append(_UNARY[op](a) if op in _UNARY else _BINARY[op](a, c))
        return pool[-1] + x  # at the full shape whatever the last step's is
    return f


@fuzz_settings(ci_examples=10, long_examples=200)
@given(_programs())
def test_random_programs_match_scalar_loops_and_eager(
        program: tuple[tuple[int, ...], list[tuple[str, int, int]]]) -> None:
    """Random elementwise programs over full, per-channel, scalar and transposed operands:
    compiled with vector runs, bit for bit what the scalar loops compute, and what eager
    computes (float32 tolerance)."""
    shape, steps = program
    rng = np.random.default_rng(len(steps) * 97 + sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal((1, shape[1], 1, 1)).astype(np.float32)
    s = np.float32(rng.standard_normal())
    f = _program_fn(steps)
    got = {}
    for vector in (True, False):
        saved = options.VECTOR_RUNS
        options.VECTOR_RUNS = vector
        try:
            got[vector] = np.array(gc.compile(f)(x, y, b, s))
        finally:
            options.VECTOR_RUNS = saved
    assert np.array_equal(got[True], got[False], equal_nan=True), steps
    eager = np.array(f(gc.tensor(x), gc.tensor(y), gc.tensor(b), gc.tensor(s)))
    np.testing.assert_allclose(got[True], eager, rtol=1e-5, atol=1e-5, equal_nan=True)
