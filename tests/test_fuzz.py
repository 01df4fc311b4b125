"""Differential fuzzing with hypothesis.

* Random well-typed programs built through the tensor API (unary and binary ops with
  broadcasting, reductions, matmuls, concatenation and slicing, gathers with index arguments,
  ``where``), with a symbolic batch dimension, are compiled natively and run with the
  interpreter backend at several batch sizes; outputs and parameter gradients must agree.
  Sizes include 1, odd numbers and primes (feature sizes also 0 where an op allows it).
* Random training steps (MLP sizes, loss, optimizer and its options among SGD, Adam, AdamW,
  RMSprop, Adagrad) run compiled, eagerly and — when installed — in PyTorch for a few steps;
  parameters must agree after every step.
* Either kind may be drawn in a debug build (every native load and store bounds-checked).

Profiles: ``ci`` (default; small ``max_examples``, no deadline — the whole file stays well under
three minutes) and ``long`` (``HYPOTHESIS_PROFILE=long pytest tests/test_fuzz.py``).
"""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

import numpy as np
import pytest
from _steps import compiled_train_step
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphc as gc
from graphc import nn, optim
from graphc.runtime import runner
from graphc.runtime.runner import FRESH_OUTPUT_BYTES

settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
settings.register_profile("long", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


def fuzz_settings(scale: float = 1.0) -> Any:
    """The selected profile, with ``max_examples`` scaled (the training fuzzer is slower)."""
    p = settings.get_profile(PROFILE if PROFILE in ("ci", "long") else "ci")
    return settings(p, max_examples=max(1, int(p.max_examples * scale)))


FEATURES = [1, 2, 3, 5, 7, 13, 31]
BATCHES = [1, 2, 3, 7, 17, 61, 257]

# ---------------------------------------------------------------------------------------
# random programs
# ---------------------------------------------------------------------------------------
UNARY = {
    "neg": lambda t: -t, "abs": lambda t: t.abs(), "tanh": lambda t: t.tanh(),
    "sigmoid": lambda t: t.sigmoid(), "relu": lambda t: t.relu(),
    "exp": lambda t: t.tanh().exp(), "log": lambda t: (t.abs() + 1).log(),
    "sqrt": lambda t: (t.abs() + 0.5).sqrt(), "square": lambda t: t * t,
    "scale": lambda t: t * 0.5 + 1.0,
}
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b.abs() + 1), "maximum": lambda a, b: gc.maximum(a, b),
    "where": lambda a, b: gc.where(a > b, a, b * 2),
}


@st.composite
def programs(draw: Any) -> dict[str, Any]:
    """A program as data: a list of steps over a pool of [B, F] / [1, F] / [B, 1] tensors."""
    f = draw(st.sampled_from(FEATURES + [0]))
    steps = []
    pool = 2  # x (the argument) and w * x (w a [F] parameter)
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "matmul", "cat",
                                     "gather"]))
        a = draw(st.integers(0, pool - 1))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY))), a))
        elif kind == "binary":
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), a,
                          draw(st.integers(0, pool - 1))))
        elif kind == "reduce":
            if f == 0:
                continue
            steps.append(("reduce", draw(st.sampled_from(["sum", "mean", "max"])), a,
                          draw(st.sampled_from([0, 1]))))
        elif kind == "matmul":
            steps.append(("matmul", a))
        elif kind == "cat":
            steps.append(("cat", a, draw(st.integers(0, pool - 1))))
        else:
            if f == 0:
                continue
            steps.append(("gather", a))
        pool += 1
    return {"f": f, "steps": steps, "batches": draw(st.lists(st.sampled_from(BATCHES),
                                                             min_size=1, max_size=3)),
            "debug": draw(st.booleans()), "seed": draw(st.integers(0, 2**16)),
            # results handed over uncopied from this size on (0: every array result)
            "fresh": draw(st.sampled_from([0, FRESH_OUTPUT_BYTES]))}


def _program_fn(prog: dict[str, Any], params: dict[str, Any]) -> Any:
    w, m = params["w"], params["m"]

    def fn(x: Any, idx: Any) -> Any:
        pool = program_pool(prog, x, idx, w, m)
        loss = sum((t * (k + 1) * 0.1).sum() for k, t in enumerate(pool[-2:]))
        loss = loss + (pool[1] * 0.01).sum()  # always reaches w
        loss.backward()
        return loss, pool[-1]

    return fn


def program_pool(prog: dict[str, Any], x: Any, idx: Any, w: Any, m: Any) -> list:
    """Every value of a random program on ``x`` (``idx``: gather indices; ``w``, ``m``: its
    parameters), in order; the program's results are the last ones."""
    f = prog["f"]
    pool = [x, w * x]
    for s in prog["steps"]:
        kind = s[0]
        if kind == "unary":
            out = UNARY[s[1]](pool[s[2]])
        elif kind == "binary":
            out = BINARY[s[1]](pool[s[2]], pool[s[3]])
        elif kind == "reduce":
            t, dim = pool[s[2]], s[3]
            if s[1] == "max":
                out = t.max(dim, keepdim=True)[0] if dim == 1 else t.max(dim, keepdim=True)
                out = out[0] if isinstance(out, tuple) else getattr(out, "values", out)
            else:
                out = getattr(t, s[1])(dim, keepdim=True)
            out = out.expand(*pool[0].shape) if out.shape[dim] == 1 else out
        elif kind == "matmul":
            out = pool[s[1]] @ m
        elif kind == "cat":
            both = gc.cat([pool[s[1]], pool[s[2]]], dim=1)
            out = both[:, f:] * 0.5 + both[:, :f]
        else:  # gather: per row, index columns of the tensor
            out = gc.gather(pool[s[1]], 1, idx)
        if tuple(out.shape)[1:] != (f,):
            out = out.expand(pool[0].shape[0], f)
        pool.append(out)
    return pool


def _run_program(prog: dict[str, Any], backend: str | None) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(prog["seed"])
    f = prog["f"]
    params = {"w": nn.Parameter(rng.standard_normal(f).astype(np.float32)),
              "m": nn.Parameter((rng.standard_normal((f, f)) / max(f, 1)).astype(np.float32))}
    step = gc.compile(_program_fn(prog, params), backend=backend,
                      debug=prog["debug"] if backend is None else None)
    results, held = [], []
    with mock.patch.object(runner, "FRESH_OUTPUT_BYTES", prog["fresh"]):
        for b in prog["batches"]:
            x = rng.standard_normal((b, f)).astype(np.float32)
            idx = rng.integers(0, max(f, 1), (b, f))
            for p in params.values():
                p.grad = None
            loss, out = step(x, idx)
            res = [loss.numpy(), out.numpy()]
            res += [np.zeros(p.shape, np.float32) if p.grad is None else p.grad.numpy().copy()
                    for p in params.values()]
            results.append(res)
            held.append((res[1], res[1].copy()))
    assert step.compile_count == 1
    for out, kept in held:  # no later call wrote into a result the caller holds
        assert np.array_equal(out, kept, equal_nan=True)
    return results


def _close(a: np.ndarray, b: np.ndarray, what: str, rtol: float = 2e-4) -> None:
    assert a.shape == b.shape, what
    atol = 2e-5 * (1 + float(np.max(np.abs(a), initial=0)))
    np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, err_msg=what)


@fuzz_settings()
@given(programs())
def test_random_programs_native_vs_interpreter(prog: dict[str, Any]) -> None:
    ref = _run_program(prog, "interp")
    got = _run_program(prog, None)
    for b, r, g in zip(prog["batches"], ref, got):
        for k, (x, y) in enumerate(zip(r, g)):
            _close(x, y, f"{prog} B={b} result {k}")


# ---------------------------------------------------------------------------------------
# random training steps
# ---------------------------------------------------------------------------------------

@st.composite
def trainings(draw: Any) -> dict[str, Any]:
    name = draw(st.sampled_from(["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]))
    # adaptive optimizers normalise by sqrt(v) + eps: with lr = 0.1 a tiny net saturates its
    # tanh units after one step, and gradients like (1 - tanh^2) * ... near eps make the
    # update ill-conditioned (float32 rounding differences of eager mode grow to 1e-3, while
    # compiled and PyTorch still agree to 1e-7) — so those get the learning rates people use
    lr = draw(st.sampled_from([1e-3, 1e-2, 0.1] if name == "SGD" else [1e-3, 1e-2]))
    kw: dict[str, Any] = {"lr": lr}
    wd = draw(st.sampled_from([0.0, 0.0, 1e-2]))
    if name == "SGD":
        mom = draw(st.sampled_from([0.0, 0.9]))
        kw.update(momentum=mom, weight_decay=wd,
                  nesterov=mom > 0 and draw(st.booleans()),
                  dampening=0.0 if mom == 0 else draw(st.sampled_from([0.0, 0.1])),
                  maximize=draw(st.booleans()))
        if kw["nesterov"]:
            kw["dampening"] = 0.0
    elif name in ("Adam", "AdamW"):
        kw.update(betas=draw(st.sampled_from([(0.9, 0.999), (0.8, 0.99)])),
                  amsgrad=draw(st.booleans()), weight_decay=wd if name == "Adam" else 1e-2)
    elif name == "RMSprop":
        kw.update(alpha=draw(st.sampled_from([0.99, 0.9])), weight_decay=wd,
                  momentum=draw(st.sampled_from([0.0, 0.5])), centered=draw(st.booleans()))
    else:
        kw.update(lr_decay=draw(st.sampled_from([0.0, 0.01])), weight_decay=wd)
    dims = [draw(st.sampled_from([1, 3, 8, 13]))]
    dims += draw(st.lists(st.sampled_from([1, 5, 16, 31]), min_size=0, max_size=2))
    dims.append(draw(st.sampled_from([1, 2, 7])))
    return {"opt": name, "kw": kw, "dims": dims, "loss": draw(st.sampled_from(["ce", "mse"])),
            "batches": draw(st.lists(st.sampled_from(BATCHES[:6]), min_size=1, max_size=3)),
            "debug": draw(st.booleans()), "zero_grad": draw(st.booleans())}


def _build(cfg: dict[str, Any], lib: Any, o: Any, params_from: Any = None) -> tuple[Any, Any]:
    dims = cfg["dims"]
    layers: list[Any] = []
    for k, (i, j) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(lib.Linear(i, j))
        if k < len(dims) - 2:
            layers.append(lib.Tanh())
    model = lib.Sequential(*layers)
    if params_from is not None:
        import torch

        with torch.no_grad():
            for (_, tp), (_, gp) in zip(model.named_parameters(), params_from.named_parameters()):
                tp.copy_(torch.from_numpy(gp.numpy().copy()))
    return model, getattr(o, cfg["opt"])(model.parameters(), **cfg["kw"])


def _data(cfg: dict[str, Any], b: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(b * 31 + k)
    x = rng.standard_normal((b, cfg["dims"][0])).astype(np.float32)
    if cfg["loss"] == "ce":
        return x, rng.integers(0, cfg["dims"][-1], b)
    return x, rng.standard_normal((b, cfg["dims"][-1])).astype(np.float32)


def _train(cfg: dict[str, Any], compiled: bool) -> tuple[list[list[np.ndarray]], Any]:
    gc.manual_seed(0)
    model, opt = _build(cfg, nn, optim)
    init = [p.numpy().copy() for p in model.parameters()]
    loss_fn = nn.CrossEntropyLoss() if cfg["loss"] == "ce" else nn.MSELoss()

    def step(x: Any, y: Any) -> Any:
        if cfg["zero_grad"]:
            opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if not cfg["zero_grad"]:
            opt.zero_grad()
        return loss

    fn = gc.compile(step, debug=cfg["debug"]) if compiled else step
    traj = []
    for k, b in enumerate(cfg["batches"] * 2):
        fn(*_data(cfg, b, k))
        traj.append([p.numpy().copy() for p in model.parameters()])
    return traj, init


def _train_torch(cfg: dict[str, Any], init: list[np.ndarray]) -> list[list[np.ndarray]]:
    import torch

    model, opt = _build(cfg, torch.nn, torch.optim)
    with torch.no_grad():
        for p, v in zip(model.parameters(), init):
            p.copy_(torch.from_numpy(v))
    loss_fn = torch.nn.CrossEntropyLoss() if cfg["loss"] == "ce" else torch.nn.MSELoss()
    traj = []
    for k, b in enumerate(cfg["batches"] * 2):
        x, y = (torch.from_numpy(a) for a in _data(cfg, b, k))
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        traj.append([p.detach().numpy().copy() for p in model.parameters()])
    return traj


@pytest.mark.slow
@fuzz_settings(0.75)
@given(trainings())
def test_random_training_steps_compiled_vs_eager_vs_torch(cfg: dict[str, Any]) -> None:
    got, init = _train(cfg, compiled=True)
    ref, init2 = _train(cfg, compiled=False)
    assert all(np.array_equal(a, b) for a, b in zip(init, init2))
    for k, (r, g) in enumerate(zip(ref, got)):
        for j, (a, b) in enumerate(zip(r, g)):
            _close(a, b, f"{cfg} step {k} param {j} (eager vs compiled)", rtol=1e-3)
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    tr = _train_torch(cfg, init)
    for k, (r, t) in enumerate(zip(ref, tr)):
        for j, (a, b) in enumerate(zip(r, t)):
            _close(b, a, f"{cfg} step {k} param {j} (torch vs eager)", rtol=1e-3)


def test_profiles_registered() -> None:
    assert settings.get_profile("ci").max_examples <= 20
    assert settings.get_profile("long").max_examples >= 200
    if PROFILE == "ci":
        pytest.skip("the ci profile is running")  # a reminder in -rs that `long` exists


@fuzz_settings(0.5)
@given(trainings(), st.integers(0, 10**6), st.sampled_from([np.nan, np.inf, -np.inf]),
       st.sampled_from([None, "interp"]))
def test_check_finite_never_applies_a_non_finite_update(cfg: dict[str, Any], where: int,
                                                        bad: float, backend: Any) -> None:
    gc.manual_seed(0)
    model, opt = _build(cfg, nn, optim)
    loss_fn = nn.CrossEntropyLoss() if cfg["loss"] == "ce" else nn.MSELoss()

    step = compiled_train_step(model, opt, loss_fn, check_finite=True, backend=backend,
                               debug=cfg["debug"] if backend is None else None)

    b = cfg["batches"][0]
    x, y = _data(cfg, b, 0)
    step(x, y)

    def snap() -> list[np.ndarray]:
        out = [p.numpy().copy() for p in model.parameters()]
        out += [p.grad.numpy().copy() for p in model.parameters() if p.grad is not None]
        out += [np.array(np.asarray(v), copy=True) for p in model.parameters()
                for _, v in sorted(opt.state.get(p, {}).items())]
        return out

    before = snap()
    xb = x.copy()
    xb.reshape(-1)[where % xb.size] = bad
    with pytest.raises(gc.NonFiniteError, match="contains NaN or Inf"):
        step(xb, y)
    after = snap()
    assert len(before) == len(after)
    assert all(np.array_equal(u, v) for u, v in zip(before, after))
