"""In-place ops on tensors in the autograd graph, eager and compiled, against PyTorch.

An in-place op on an intermediate rebases its autograd history onto the op (PyTorch's rule),
so ``relu_``, ``ReLU(inplace=True)``, ``exp_``, ``mul_``, ``+=`` ... differentiate like their
out-of-place forms; a value a later backward needs that was changed in place raises
PyTorch's error; in-place on a leaf that requires grad raises, except under ``no_grad``;
in-place on a view of a tensor that requires grad raises ``NotImplementedError``. Also
``np.array(t)`` copies and ``np.asarray(t)`` / ``t.numpy()`` share memory.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn

A0 = np.array([[-1.0, 2.0, -3.0], [0.5, -0.25, 1.5]], np.float64)
W0 = np.array([[0.75, -1.25, 2.0], [1.5, 0.5, -0.5]], np.float64)
C0 = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]], np.float64)

# (name, in-place op on the intermediate ``o`` given the leaf ``w``); each returns nothing
OPS: list[tuple[str, Callable[[Any, Any, Any], None]]] = [
    ("relu_", lambda o, w, m: o.relu_()),
    ("ReLU(inplace)", lambda o, w, m: m.nn.ReLU(inplace=True)(o)),
    ("F.relu(inplace)", lambda o, w, m: m.nn.functional.relu(o, inplace=True)),
    ("exp_", lambda o, w, m: o.exp_()),
    ("sigmoid_", lambda o, w, m: o.sigmoid_()),
    ("tanh_", lambda o, w, m: o.tanh_()),
    ("mul_ scalar", lambda o, w, m: o.mul_(3.0)),
    ("mul_ tensor", lambda o, w, m: o.mul_(w)),
    ("add_ alpha", lambda o, w, m: o.add_(w, alpha=2.0)),
    ("sub_", lambda o, w, m: o.sub_(w)),
    ("div_", lambda o, w, m: o.div_(w)),
    ("clamp_", lambda o, w, m: o.clamp_(-1.0, 1.0)),
    ("pow_", lambda o, w, m: o.pow_(2)),
    ("abs_", lambda o, w, m: o.abs_()),
    ("addcmul_", lambda o, w, m: o.addcmul_(w, w, value=0.5)),
    ("lerp_", lambda o, w, m: o.lerp_(w, 0.25)),
    ("leaky_relu(inplace)", lambda o, w, m: m.nn.functional.leaky_relu(o, 0.1, inplace=True)),
    ("iadd", lambda o, w, m: o.__iadd__(w)),
    ("imul", lambda o, w, m: o.__imul__(w)),
    ("copy_", lambda o, w, m: o.copy_(w * 2)),
    ("zero_", lambda o, w, m: o.zero_()),
    ("fill_", lambda o, w, m: o.fill_(2.5)),
    ("three in a row", lambda o, w, m: (o.add_(w), o.mul_(3.0), o.relu_())),
]


def _torch_run(fn: Callable[..., None]) -> tuple[np.ndarray, Any, Any]:
    a = torch.tensor(A0, requires_grad=True)
    w = torch.tensor(W0, requires_grad=True)
    o = a * 1.5 + 0.25
    fn(o, w, torch)
    (o * torch.tensor(C0)).sum().backward()
    return (o.detach().numpy(), None if a.grad is None else a.grad.numpy(),
            None if w.grad is None else w.grad.numpy())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,fn", OPS, ids=[n for n, _ in OPS])
def test_inplace_on_intermediate_matches_torch(name: str, fn: Callable[..., None],
                                               compiled: bool) -> None:
    a = gc.tensor(A0, requires_grad=True)
    w = gc.tensor(W0, requires_grad=True)
    c = gc.tensor(C0)

    def step() -> Any:
        a.grad = None
        w.grad = None
        o = a * 1.5 + 0.25
        fn(o, w, gc)
        (o * c).sum().backward()
        return o

    run = gc.compile(step) if compiled else step
    for _ in range(2 if compiled else 1):  # the compiled step's second call runs the kernels
        o = run()
    to, ta, tw = _torch_run(fn)
    np.testing.assert_allclose(o.numpy(), to, rtol=1e-12, atol=1e-12)
    for g, want in ((a.grad, ta), (w.grad, tw)):
        if want is None:  # not on the loss's path (unused, or overwritten by copy_)
            assert g is None or not g.numpy().any()
        else:
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-12, atol=1e-12)


def test_issue_repro() -> None:
    a = gc.tensor(np.array([-1.0, 2.0, -3.0, 0.5], np.float32), requires_grad=True)
    o = a * 2
    o.relu_()
    o.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0, 2, 0, 2])
    assert o.grad_fn == "relu" and o.requires_grad and not o.is_leaf


def test_inplace_writes_the_shared_memory() -> None:
    """The tensor's memory changes as in PyTorch: ``detach()`` and ``numpy()`` see it."""
    a = gc.tensor(np.array([-1.0, 2.0], np.float32), requires_grad=True)
    o = a * 2
    d, arr = o.detach(), o.numpy()
    o.relu_()
    np.testing.assert_array_equal(d.numpy(), [0, 4])
    np.testing.assert_array_equal(arr, [0, 4])


def test_inplace_makes_a_plain_tensor_require_grad() -> None:
    w = gc.tensor(W0, requires_grad=True)
    buf = gc.zeros(2, 3, dtype=gc.float64)
    buf.add_(w * 3)
    assert buf.requires_grad and not buf.is_leaf
    buf.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 3.0))


# -- errors ---------------------------------------------------------------------------------
def _version_error(build: Callable[[Any, Any], Any], m: Any) -> str | None:
    a = m.tensor(A0, requires_grad=True)
    try:
        build(a, m).sum().backward()
    except RuntimeError as e:
        return str(e)
    return None


def _exp_then_mul(a: Any, m: Any) -> Any:
    y = a.exp()  # saves its result
    y.mul_(2)
    return y


def _mul_saved_then_add(a: Any, m: Any) -> Any:
    o = a * 2
    y = o * a  # saves o
    o.add_(1)
    return y + o


def _relu_result_then_modify_input(a: Any, m: Any) -> Any:
    o = a * 2
    y = o.relu()  # saves its result only: modifying o is fine
    o.add_(1)
    return y


def _scalar_mul_then_modify(a: Any, m: Any) -> Any:
    o = a * 2
    y = o * 3  # saves nothing of o
    o.relu_()
    return y + o


def _no_grad_write_of_saved(a: Any, m: Any) -> Any:
    o = a * 2
    y = o * a
    with m.no_grad():
        o.mul_(5)
    return y


def _detach_write_of_saved(a: Any, m: Any) -> Any:
    o = a * 2
    y = o.sigmoid()
    y.detach().zero_()
    return y


def _leaf_param_step_then_backward(a: Any, m: Any) -> Any:
    y = a * a
    with m.no_grad():
        a.sub_(0.1)
    return y


VERSION_CASES = [_exp_then_mul, _mul_saved_then_add, _relu_result_then_modify_input,
                 _scalar_mul_then_modify, _no_grad_write_of_saved, _detach_write_of_saved,
                 _leaf_param_step_then_backward]


@pytest.mark.parametrize("build", VERSION_CASES, ids=[f.__name__ for f in VERSION_CASES])
def test_modified_saved_value_raises_like_torch(build: Callable[[Any, Any], Any]) -> None:
    want = _version_error(build, torch)
    got = _version_error(build, gc)
    assert (got is None) == (want is None), (got, want)
    if want is not None:
        assert "modified by an inplace operation" in want
        assert got.startswith("one of the variables needed for gradient computation has been "
                              "modified by an inplace operation")


LEAF_OPS = [lambda t, m: t.relu_(), lambda t, m: t.mul_(2), lambda t, m: t.add_(1),
            lambda t, m: m.nn.ReLU(inplace=True)(t), lambda t, m: t.__iadd__(1),
            lambda t, m: t.zero_(), lambda t, m: t.copy_(m.ones(3)),
            lambda t, m: t.exp_()]


@pytest.mark.parametrize("k", range(len(LEAF_OPS)))
def test_inplace_on_leaf_requiring_grad_raises(k: int) -> None:
    msg = "a leaf Variable that requires grad is being used in an in-place operation."
    for m in (torch, gc):
        a = m.tensor([-1.0, 2.0, 3.0], requires_grad=True)
        with pytest.raises(RuntimeError, match=msg):
            LEAF_OPS[k](a, m)


def test_inplace_on_leaf_under_no_grad() -> None:
    a = gc.tensor(np.array([-1.0, 2.0, 3.0], np.float32), requires_grad=True)
    ta = torch.tensor([-1.0, 2.0, 3.0], requires_grad=True)
    with gc.no_grad():
        a.relu_().mul_(2).add_(1)
    with torch.no_grad():
        ta.relu_().mul_(2).add_(1)
    assert a.is_leaf and a.requires_grad
    np.testing.assert_array_equal(a.numpy(), ta.detach().numpy())
    (a * a).sum().backward()
    (ta * ta).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), ta.grad.numpy())


VIEWS = [("o[0].relu_()", lambda o: o[0].relu_()), ("o[:, 1].mul_(2)", lambda o: o[:, 1].mul_(2)),
         ("o.view(-1).exp_()", lambda o: o.view(-1).exp_()),
         ("o.T.add_(1)", lambda o: o.T.add_(1)), ("o[0] += 1", lambda o: o[0].__iadd__(1))]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,fn", VIEWS, ids=[n for n, _ in VIEWS])
def test_inplace_on_view_of_intermediate_raises(name: str, fn: Callable[[Any], Any],
                                                compiled: bool) -> None:
    a = gc.tensor(A0, requires_grad=True)

    def step() -> Any:
        o = a * 2
        fn(o)
        o.sum().backward()
        return o

    run = gc.compile(step) if compiled else step
    with pytest.raises(NotImplementedError, match="in-place operation on a view"):
        run()


def test_inplace_on_view_of_leaf_raises_like_torch() -> None:
    a = gc.tensor(A0, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        a[0].relu_()
    ta = torch.tensor(A0, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        ta[0].relu_()


# -- a BasicBlock-style module trained one step, eager and compiled ----------------------------
class _Block:
    """conv-bn-ReLU(inplace)-conv-bn, ``out += identity``, ReLU(inplace), as torchvision's."""

    @staticmethod
    def build(m: Any) -> Any:
        class Block(m.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv1 = m.nn.Conv2d(2, 2, 3, padding=1, bias=False)
                self.bn1 = m.nn.BatchNorm2d(2)
                self.relu = m.nn.ReLU(inplace=True)
                self.conv2 = m.nn.Conv2d(2, 2, 3, padding=1, bias=False)
                self.bn2 = m.nn.BatchNorm2d(2)
                self.head = m.nn.Sequential(m.nn.Flatten(), m.nn.Linear(32, 3),
                                            m.nn.ReLU(inplace=True), m.nn.Linear(3, 3))

            def forward(self, x: Any) -> Any:
                identity = x
                out = self.relu(self.bn1(self.conv1(x)))
                out = self.bn2(self.conv2(out))
                out += identity
                out = self.relu(out)
                return self.head(out)

        return Block()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_basic_block_one_step_matches_torch(compiled: bool) -> None:
    gc.manual_seed(0)
    gm = _Block.build(gc).double()
    tm = _Block.build(torch).double()
    with torch.no_grad():
        for (gn, gp), (tn, tp) in zip(gm.named_parameters(), tm.named_parameters()):
            assert gn == tn
            tp.copy_(torch.from_numpy(np.array(gp.numpy())))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2, 4, 4))
    y = np.array([0, 2, 1])
    go = gc.optim.SGD(gm.parameters(), lr=0.1)
    to = torch.optim.SGD(tm.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    def step(xb: Any, yb: Any) -> Any:
        go.zero_grad()
        loss = loss_fn(gm(xb), yb)
        loss.backward()
        go.step()
        return loss

    run = gc.compile(step) if compiled else step
    gloss = float(run(gc.tensor(x), gc.tensor(y)).item())
    to.zero_grad()
    tloss = torch.nn.CrossEntropyLoss()(tm(torch.from_numpy(x)), torch.from_numpy(y))
    tloss.backward()
    to.step()
    assert gloss == pytest.approx(float(tloss.item()), rel=1e-10)
    for (name, gp), tp in zip(gm.named_parameters(), tm.parameters()):
        np.testing.assert_allclose(gp.grad.numpy(), tp.grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)
        np.testing.assert_allclose(gp.numpy(), tp.detach().numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=name)


# -- the NumPy array protocol -----------------------------------------------------------------
def test_np_array_copies() -> None:
    t = gc.zeros(3)
    a = np.array(t)
    a[0] = 5
    assert t.numpy()[0] == 0.0
    b = np.array(t, copy=True)
    assert not np.shares_memory(b, t.numpy())
    tt = torch.zeros(3)  # PyTorch: np.array copies, np.asarray and .numpy() share
    with warnings.catch_warnings():  # torch's __array__ takes no copy= (numpy copies)
        warnings.simplefilter("ignore", DeprecationWarning)
        ta = np.array(tt)
    ta[0] = 5
    assert tt[0].item() == 0.0


def test_np_asarray_and_numpy_share() -> None:
    t = gc.zeros(3)
    a = np.asarray(t)
    a[1] = 7
    assert t.numpy()[1] == 7.0
    assert np.shares_memory(t.numpy(), np.asarray(t))
    assert np.shares_memory(np.array(t, copy=False), t.numpy())
    tt = torch.zeros(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        np.asarray(tt)[1] = 7
    assert tt[1].item() == 7.0


def test_np_array_dtype_and_copy_false() -> None:
    t = gc.tensor(np.array([1.5, 2.5], np.float32))
    a = np.array(t, dtype=np.float64)
    assert a.dtype == np.float64 and a.tolist() == [1.5, 2.5]
    with pytest.raises(ValueError):
        np.array(t, dtype=np.float64, copy=False)
    same = np.asarray(t, dtype=np.float32)
    assert np.shares_memory(same, t.numpy())
    assert t.__array__(copy=True) is not t.numpy()
