"""Eager backward through cached programs (graphc/backward_plan.py): a program is built once
per tape structure and reused only where everything the VJP rules look at is the same."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphc as gc
from graphc import backward_plan

torch = pytest.importorskip("torch")


def _pair(values, requires_grad=True):
    return (gc.tensor(values, requires_grad=requires_grad),
            torch.tensor(values, requires_grad=requires_grad))


def test_a_loop_builds_one_program_and_matches_torch():
    backward_plan.clear()
    xs = np.linspace(-math.pi, math.pi, 50, dtype=np.float32)
    x, tx = gc.tensor(xs), torch.tensor(xs)
    y, ty = gc.sin(x), torch.sin(tx)
    (a, ta), (b, tb) = _pair(0.3), _pair(-0.2)
    for step in range(6):
        for p, q, xx, yy in ((a, b, x, y), (ta, tb, tx, ty)):
            loss = ((p + q * xx ** 2 - yy) ** 2).sum()
            loss.backward()
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5)
        np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-5)
        with gc.no_grad(), torch.no_grad():
            for p, tp in ((a, ta), (b, tb)):
                p -= 1e-3 * p.grad
                tp -= 1e-3 * tp.grad
                p.grad, tp.grad = None, None
        if step == 0:
            built = len(backward_plan._PLANS)
    assert built == 1 and len(backward_plan._PLANS) == 1


@pytest.mark.parametrize("exps", [(2, 3, 2), (2.0, 0.5, -1.0), (0.0, -0.0, 1.0)])
def test_a_program_is_reused_only_for_the_same_constant_exponent(exps):
    """``x ** k`` has the same structure for every k; its VJP reads k (PyTorch's scalar
    exponent paths), so a program built for one k must not serve another."""
    for k in exps:
        (x, tx) = _pair([0.0, 0.5, 1.5, 2.0])
        (x ** k).sum().backward()
        (tx ** k).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
        assert np.array_equal(np.signbit(x.grad.numpy()), np.signbit(tx.grad.numpy()))


def test_a_broadcast_exponent_and_a_tensor_exponent_get_their_own_programs():
    """A tensor exponent holding the same numbers as a Python scalar is a different
    operand to the rules (no zero strides): the cached scalar program must not run."""
    for exp_of in (lambda x: 2.0, lambda x: gc.full_like(x, 2.0), lambda x: 2.0):
        x, tx = _pair([0.0, -1.0, 3.0])
        e = exp_of(x)
        (x ** e).sum().backward()
        te = e if isinstance(e, float) else torch.full_like(tx, 2.0)
        (tx ** te).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_attributes_tell_signed_zeros_apart():
    for lo in (0.0, -0.0, 0.0):
        x, tx = _pair([-1.0, 0.0, 2.0])
        (x.clamp(min=lo) * 3).sum().backward()
        (tx.clamp(min=lo) * 3).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_sharing_differs_from_structure_alone():
    """``x * x`` and ``x * y`` are the same op on the same shapes; the program must follow
    which operands are the same tensor."""
    for same in (True, False, True):
        x, tx = _pair([1.0, 2.0])
        y, ty = _pair([3.0, 4.0])
        (x * (x if same else y)).sum().backward()
        (tx * (tx if same else ty)).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
        assert (y.grad is None) == (ty.grad is None)


def test_hooks_and_retain_grad_still_run_between_gradients():
    seen = []
    for _ in range(2):
        x, tx = _pair([1.0, 2.0, 3.0])
        h = x * 2
        h.retain_grad()
        h.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 10)
        (h ** 2).sum().backward()
        th = tx * 2
        th.retain_grad()
        th.register_hook(lambda g: g * 10)
        (th ** 2).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
        np.testing.assert_allclose(h.grad.numpy(), th.grad.numpy())
    assert len(seen) == 2


def test_bfloat16_and_float64_tapes():
    for dtype, tdtype in ((gc.bfloat16, torch.bfloat16), (gc.float64, torch.float64)):
        for _ in range(2):
            w, tw = _pair([0.5, -1.25, 2.0])
            w, tw = w.detach().to(dtype).requires_grad_(), tw.detach().to(tdtype).requires_grad_()
            ((w * 3 - 1).exp() * w).sum().backward()
            ((tw * 3 - 1).exp() * tw).sum().backward()
            assert w.grad.dtype == dtype
            np.testing.assert_allclose(w.grad.float().numpy(), tw.grad.float().numpy(),
                                       rtol=1e-2 if dtype is gc.bfloat16 else 1e-12)


def test_a_failed_backward_leaves_grads_unchanged_and_the_next_one_works():
    x, tx = _pair([1.0, 2.0])
    (x * 2).sum().backward()
    loss = (x * 2).sum()
    with pytest.raises(RuntimeError):
        loss.backward(gc.ones(3))  # a seed of the wrong shape
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0])


@pytest.mark.parametrize("make", ["mul", "double", "bfloat16", "compiled"])
def test_requires_grad_on_a_tensor_an_op_made_receives_its_gradient(make):
    """Regression: ``(x * 2).requires_grad_()`` or ``w.double().requires_grad_()`` made a
    leaf whose gradient backward() computed and then dropped (``.grad`` stayed None)."""
    base = gc.tensor([0.5, -1.0, 2.0])
    if make == "mul":
        t = base * 2
    elif make == "double":
        t = base.double()
    elif make == "bfloat16":
        t = base.to(gc.bfloat16)
    else:
        t = gc.compile(lambda x: x * 2)(base)
    t.requires_grad_()
    (t * t).sum().backward()
    assert t.grad is not None and t.grad.dtype == t.dtype
    np.testing.assert_allclose(t.grad.float().numpy(), 2 * t.detach().float().numpy())
    if make == "compiled":  # another result of the same step is a tensor of its own
        other = gc.compile(lambda x: x * 2)(base)
        assert other.grad is None and not other.requires_grad


def test_two_results_of_a_compiled_step_in_one_tape_keep_their_own_values():
    """Regression: compiled results share one node id; a backward program that placed
    operands by id bound the first result's values for both."""
    f = gc.compile(lambda x: (x * 2, x * 3))
    for _ in range(3):
        o1, o2 = f(gc.tensor([1.0, 2.0]))
        w, tw = _pair([1.0, 1.0])
        (o1 * w + o2 * w * w).sum().backward()
        t1, t2 = torch.tensor([2.0, 4.0]), torch.tensor([3.0, 6.0])
        (t1 * tw + t2 * tw * tw).sum().backward()
        np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
