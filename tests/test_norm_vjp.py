"""Batch, layer, instance and group norm are differentiated as one op (``affine_norm``,
the closed-form backward of PyTorch's norm kernels), not rule by rule: gradients equal
PyTorch's, eagerly and compiled, for every combination of weight, bias and layout, in float32
and float64; and a compiled batch-norm step keeps fewer activation-sized buffers than the
rule-by-rule derivative did."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch

import graphc as gc
from graphc import nn
from graphc.nn import functional as F

CASES = [  # (name, input shape, module builder in namespace m)
    ("bn2d", (5, 3, 4, 6), lambda m: m.BatchNorm2d(3)),
    ("bn2d_noaffine", (4, 3, 3, 3), lambda m: m.BatchNorm2d(3, affine=False)),
    ("bn1d_2d", (7, 4), lambda m: m.BatchNorm1d(4)),
    ("bn1d_3d", (3, 4, 5), lambda m: m.BatchNorm1d(4, track_running_stats=False)),
    ("ln_last", (3, 5, 8), lambda m: m.LayerNorm(8)),
    ("ln_two", (2, 3, 4, 6), lambda m: m.LayerNorm((4, 6))),
    ("ln_nobias", (6, 8), lambda m: m.LayerNorm(8, bias=False)),
    ("ln_noaffine", (4, 7), lambda m: m.LayerNorm(7, elementwise_affine=False)),
    ("in2d_affine", (3, 4, 5, 5), lambda m: m.InstanceNorm2d(4, affine=True)),
    ("in1d_stats", (2, 3, 6), lambda m: m.InstanceNorm1d(3, track_running_stats=True)),
    ("gn", (3, 6, 4, 4), lambda m: m.GroupNorm(3, 6)),
    ("gn_noaffine", (2, 4, 5), lambda m: m.GroupNorm(2, 4, affine=False)),
]


def _grads(fw: Any, mod: Any, x: np.ndarray, w: np.ndarray, compiled: bool) -> list:
    """The output, the input's gradient summed over the batch, the parameters' gradients.
    Compiled, ``x`` is an argument (a symbolic batch) and its gradient reaches a zero
    parameter added to it."""
    if fw is torch:
        xt = torch.tensor(x, requires_grad=True)
        y = mod(xt)
        (y * torch.tensor(w)).sum().backward()
        return [y.detach().numpy(), xt.grad.numpy().sum(0)] + [
            p.grad.numpy() for p in mod.parameters()]
    shift = nn.Parameter(np.zeros(x.shape[1:], x.dtype))

    def f(xa: Any, wa: Any) -> Any:
        y = mod(xa + shift)
        (y * wa).sum().backward()
        return y

    y = (gc.compile(f) if compiled else f)(gc.tensor(x), gc.tensor(w))
    return [np.asarray(y.detach().numpy()), shift.grad.numpy()] + [
        p.grad.numpy() for p in mod.parameters()]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,shape,make", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_torch(name: str, shape: tuple, make: Any, compiled: bool) -> None:
    rng = np.random.default_rng(len(name))
    x = (rng.standard_normal(shape) * 2 + 0.7).astype(np.float32)
    w = rng.standard_normal(shape).astype(np.float32)
    g, t = make(nn), make(torch.nn)
    with torch.no_grad():
        for pg, pt in zip(g.parameters(), t.parameters(), strict=True):
            v = rng.standard_normal(tuple(pt.shape)).astype(np.float32)
            pt.copy_(torch.tensor(v))
            pg.data = gc.tensor(v)
    got, ref = _grads(gc, g, x, w, compiled), _grads(torch, t, x, w, False)
    for k, (a, b) in enumerate(zip(got, ref, strict=True)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5, err_msg=f"{name}: result {k}")


def test_float64_gradients_equal_torch_to_rounding() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 3, 5)) * 3 - 1
    w = rng.standard_normal((6, 3, 5))
    for make in (lambda m: m.BatchNorm1d(3).double(), lambda m: m.LayerNorm(5).double()):
        g, t = make(nn), make(torch.nn)
        got, ref = _grads(gc, g, x, w, False), _grads(torch, t, x, w, False)
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_no_rule_node_without_gradients() -> None:
    """Nothing to differentiate (no_grad, eval statistics): the value only, no extra node."""
    x = gc.randn(4, 3, 2, 2)
    bn = nn.BatchNorm2d(3)
    with gc.no_grad():
        assert bn(x).node.op != "affine_norm"
    bn.eval()
    assert bn(x).node.op != "affine_norm"
    bn.train()
    assert bn(x).node.op == "affine_norm"
    assert F.layer_norm(x, (2,)).node.op != "affine_norm"  # x needs no gradient, no weight


def _bn_relu_step() -> Any:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(8)
            self.fc = nn.Linear(8, 3)

        def forward(self, x: Any) -> Any:
            return self.fc(F.relu(self.bn(self.conv(x))).mean((2, 3)))

    m = M()
    opt = gc.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        loss = F.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def test_batch_norm_step_keeps_four_activation_buffers() -> None:
    """conv output, ReLU output, ReLU's gradient and the input gradient: the rule-by-rule
    derivative also stored the normalised input and a second full-size gradient (six)."""
    step = _bn_relu_step()
    rng = np.random.default_rng(0)
    step(rng.standard_normal((4, 8, 6, 6)).astype(np.float32), rng.integers(0, 3, 4))
    text = step.ir("fused")
    full = [ln for ln in text.splitlines()
            if re.match(r"k\d+: %\d+ = \w+ : f32\[B,8,6,6\]", ln) and "registers only" not in ln]
    assert len(full) == 4, "\n".join(full)


def test_array_weights_are_constants() -> None:
    """The functional forms take numpy weights (regression: the rule node read
    ``requires_grad`` of an array); the input still gets its gradient."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 3)).astype(np.float32)
    w, b = (rng.standard_normal(6).astype(np.float32) for _ in range(2))
    tx = torch.tensor(x, requires_grad=True)
    gx = gc.tensor(x, requires_grad=True)
    for fg, ft in ((lambda t: F.instance_norm(t, weight=w, bias=b),
                    lambda t: torch.nn.functional.instance_norm(
                        t, weight=torch.tensor(w), bias=torch.tensor(b))),
                   (lambda t: F.batch_norm(t, None, None, w, b, training=True),
                    lambda t: torch.nn.functional.batch_norm(
                        t, None, None, torch.tensor(w), torch.tensor(b), training=True)),
                   (lambda t: F.group_norm(t, 3, w, b),
                    lambda t: torch.nn.functional.group_norm(t, 3, torch.tensor(w),
                                                             torch.tensor(b)))):
        np.testing.assert_allclose(fg(x).numpy(), ft(torch.tensor(x)).numpy(), rtol=1e-5,
                                   atol=1e-5)  # an array input: nothing needs a gradient
        tx.grad, gx.grad = None, None
        yg, yt = fg(gx), ft(tx)
        (yg * yg).sum().backward()
        (yt * yt).sum().backward()
        np.testing.assert_allclose(yg.detach().numpy(), yt.detach().numpy(), rtol=1e-5,
                                   atol=1e-5)
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_group_norm_with_one_value_per_group_raises_like_torch():
    """PyTorch's ``_verify_batch_size`` of ``[N * C // G, G, *spatial]`` (in eval mode as
    well): one value per group raises its ValueError, eagerly and compiled (a guard on the
    symbolic batch); graphc normalised it to zeros."""
    x = np.ones((1, 2, 1, 1), np.float32)
    with pytest.raises(ValueError) as want:
        torch.nn.functional.group_norm(torch.tensor(x), 2)
    with pytest.raises(ValueError) as got:
        F.group_norm(gc.tensor(x), 2)
    assert str(got.value) == str(want.value)
    assert F.group_norm(gc.tensor(x), 1).shape == (1, 2, 1, 1)  # two values: fine
    f = gc.compile(lambda a: F.group_norm(a, 2))
    assert f(np.ones((2, 2, 1, 1), np.float32)).shape == (2, 2, 1, 1)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        f(x)
