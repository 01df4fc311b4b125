"""Losses against PyTorch: values and input gradients, every reduction and option, eager and
compiled; out-of-range class targets raise IndexError and leave parameters unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _steps import train_step
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim

TF = torch.nn.functional

REDUCTIONS = ["mean", "sum", "none"]
RTOL = 1e-4


def _close(a: Any, b: Any, what: str) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=1e-6, err_msg=what)


def _torch_kw(kw: dict) -> dict:
    return {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


def _compare(gfn: Any, tfn: Any, x: np.ndarray, target: np.ndarray, kw: dict,
             red: str) -> None:
    tx = torch.tensor(x, requires_grad=True)
    tl = tfn(tx, torch.tensor(target), reduction=red, **_torch_kw(kw))
    tl.sum().backward()
    gx = gc.tensor(x, requires_grad=True)
    gl = gfn(gx, target, reduction=red, **kw)
    gl.sum().backward()
    _close(gl.numpy(), tl.detach().numpy(), "loss")
    _close(gx.grad.numpy(), tx.grad.numpy(), "input gradient")


_rng = np.random.default_rng(0)
X2 = _rng.standard_normal((6, 5)).astype(np.float32)
T2 = np.array([0, 4, -100, 3, 1, 1], np.int64)
W5 = _rng.uniform(0.5, 2, 5).astype(np.float32)
X4 = _rng.standard_normal((3, 4, 2, 3)).astype(np.float32)
T4 = _rng.integers(0, 4, (3, 2, 3)).astype(np.int64)
T4[0, 0, 0] = -100
P4 = _rng.random((3, 4, 2, 3)).astype(np.float32)

CE_OPTIONS = [{}, {"weight": W5}, {"ignore_index": 1}, {"label_smoothing": 0.2},
              {"weight": W5, "label_smoothing": 0.3, "ignore_index": 1}]


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("kw", CE_OPTIONS, ids=lambda k: "-".join(k) or "plain")
def test_cross_entropy_class_targets(kw: dict, red: str) -> None:
    t = T2.copy()
    if "ignore_index" in kw:
        t[2] = 0  # PyTorch rejects -100 when another index is ignored
    _compare(F.cross_entropy, TF.cross_entropy, X2, t, kw, red)
    if "label_smoothing" not in kw:
        lp = X2 - np.log(np.exp(X2).sum(1, keepdims=True))
        _compare(F.nll_loss, TF.nll_loss, lp.astype(np.float32), t, kw, red)


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("kw", [{}, {"weight": W5[:4]}, {"label_smoothing": 0.1},
                                {"weight": W5[:4], "label_smoothing": 0.25}],
                         ids=lambda k: "-".join(k) or "plain")
@pytest.mark.parametrize("prob", [False, True], ids=["class", "prob"])
def test_cross_entropy_spatial(prob: bool, kw: dict, red: str) -> None:
    _compare(F.cross_entropy, TF.cross_entropy, X4, P4 if prob else T4, kw, red)


@pytest.mark.parametrize("red", ["mean", "none"])
def test_cross_entropy_unbatched(red: str) -> None:
    _compare(F.cross_entropy, TF.cross_entropy, X2[0], np.array(3), {}, red)


def test_cross_entropy_all_ignored_is_nan() -> None:
    out = F.cross_entropy(X2[:2], np.array([-100, -100]))
    assert np.isnan(out.item())
    assert np.isnan(TF.cross_entropy(torch.tensor(X2[:2]), torch.tensor([-100, -100])).item())


def test_cross_entropy_bad_target_eager() -> None:
    with pytest.raises(IndexError):
        F.cross_entropy(X2, np.array([0, 1, 2, 3, 4, 5]))


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("kw", ["plain", "pos_weight", "both"])
def test_bce_with_logits(kw: str, red: str) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 3)) * 10).astype(np.float32)
    x[0, :2] = [40.0, -40.0]  # saturated logits: the stable form must stay finite and exact
    y = rng.random((4, 3)).astype(np.float32)
    y[0, 0] = 1.0
    opts: dict = {}
    if kw in ("pos_weight", "both"):
        opts["pos_weight"] = rng.uniform(0.5, 3, 3).astype(np.float32)
    if kw == "both":
        opts["weight"] = rng.uniform(0.5, 3, (4, 3)).astype(np.float32)
    _compare(F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits, x, y,
             opts, red)


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
def test_smooth_l1(beta: float, red: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = rng.standard_normal((5, 4)).astype(np.float32)
    _compare(F.smooth_l1_loss, TF.smooth_l1_loss, x, y, {"beta": beta}, red)


@pytest.mark.parametrize("name", ["MSELoss", "L1Loss", "SmoothL1Loss"])
@pytest.mark.parametrize("red", REDUCTIONS)
def test_regression_modules(name: str, red: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    y = rng.standard_normal((5, 4)).astype(np.float32)
    _compare(lambda a, b, reduction: getattr(nn, name)(reduction=reduction)(a, b),
             lambda a, b, reduction: getattr(torch.nn, name)(reduction=reduction)(a, b),
             x, y, {}, red)


def test_loss_modules_pass_options() -> None:
    lm = nn.CrossEntropyLoss(weight=gc.tensor(W5), ignore_index=1, label_smoothing=0.1)
    tm = torch.nn.CrossEntropyLoss(weight=torch.tensor(W5), ignore_index=1, label_smoothing=0.1)
    t = T2.copy()
    t[2] = 0
    _close(lm(X2, t).numpy(), tm(torch.tensor(X2), torch.tensor(t)).item(), "CrossEntropyLoss")
    _close(nn.NLLLoss(reduction="sum")(X2, t).numpy(),
           torch.nn.NLLLoss(reduction="sum")(torch.tensor(X2), torch.tensor(t)).item(), "NLL")
    pw = np.full(5, 2.0, np.float32)
    y = (X2 > 0).astype(np.float32)
    _close(nn.BCEWithLogitsLoss(pos_weight=pw)(X2, y).numpy(),
           torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pw))(
               torch.tensor(X2), torch.tensor(y)).item(), "BCEWithLogitsLoss")


# -- compiled -------------------------------------------------------------------------------
def _classifier(backend: str | None) -> tuple[nn.Module, Any, Any]:
    gc.manual_seed(0)
    model = nn.Linear(5, 4)
    opt = optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss(weight=gc.tensor(W5[:4]), label_smoothing=0.1)

    step = train_step(model, opt, loss_fn)
    return model, step, gc.compile(step, backend=backend)


@pytest.mark.parametrize("backend", [None, "interp"])
def test_compiled_cross_entropy_matches_eager(backend: str | None) -> None:
    model_e, step_e, _ = _classifier(backend)
    model_c, _, step_c = _classifier(backend)
    rng = np.random.default_rng(7)
    for batch in (1, 3, 7, 3):
        x = rng.standard_normal((batch, 5)).astype(np.float32)
        y = rng.integers(0, 4, batch).astype(np.int64)
        _close(np.asarray(step_c(x, y)), step_e(x, y).numpy(), f"loss at batch {batch}")
        for (k, a), b in zip(model_c.state_dict().items(), model_e.state_dict().values()):
            _close(a, b, k)
    assert step_c.compile_count == 1


@pytest.mark.parametrize("backend", [None, "interp"])
def test_compiled_out_of_range_target_raises(backend: str | None) -> None:
    model, _, step = _classifier(backend)
    x = np.ones((3, 5), np.float32)
    step(x, np.array([0, 1, 2]))
    before = {k: v.copy() for k, v in model.state_dict().items()}
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    for bad in ([0, 4, 1], [0, -3, 1]):
        with pytest.raises(IndexError):
            step(x, np.array(bad, np.int64))
        for k, v in model.state_dict().items():
            np.testing.assert_array_equal(v, before[k], err_msg=k)
        for p, g in zip(model.parameters(), grads):
            np.testing.assert_array_equal(p.grad.numpy(), g)
    step(x, np.array([3, 2, 1]))  # still usable afterwards
