"""Eager views share their base's memory, as PyTorch's do.

A slice (rows, columns, strided), ``t``/``T``/``permute``/``transpose``, ``unsqueeze``/
``squeeze``/``select`` and a ``reshape``/``view`` that needs no copy are views: an in-place op
on the view writes the base, an in-place op on the base changes its live views, and
``numpy()`` of a view shares the base's memory. ``reshape`` of a layout it cannot view copies
(as torch's does), ``view`` of such a layout raises torch's error, ``contiguous()`` copies a
non-contiguous tensor, an in-place op on an expanded tensor raises, and a value saved for
backward that was changed through any view of its memory raises PyTorch's version error at
``backward()``. Each case runs the same code on torch and graphc and compares every tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _torch import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc as gc

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _base(lib: Any) -> Any:
    return lib.tensor(X.copy())


def _set(t: Any, key: Any, v: float) -> None:
    t[key] = v


# name -> f(lib) returning the tensors to compare (the base first)
CASES: dict[str, Callable[[Any], list[Any]]] = {
    "column zero_": lambda m: (lambda y: (y[:, 0].zero_(), [y])[1])(_base(m)),
    "columns mul_": lambda m: (lambda y: (y[:, 1:].mul_(10.0), [y])[1])(_base(m)),
    "strided rows add_": lambda m: (lambda y: (y[::2].add_(1.0), [y])[1])(_base(m)),
    "strided columns fill_": lambda m: (lambda y: (y[:, 1::2].fill_(-1.0), [y])[1])(_base(m)),
    "last column via ellipsis": lambda m: (lambda y: (y[..., -1].fill_(7.0), [y])[1])(_base(m)),
    "row of a transpose": lambda m: (lambda y: (y.t()[0].zero_(), [y])[1])(_base(m)),
    "T mul_": lambda m: (lambda y: (y.T.mul_(2.0), [y])[1])(_base(m)),
    "permute add_": lambda m: (lambda y: (y.permute(1, 0).add_(1.0), [y])[1])(_base(m)),
    "column of a transpose": lambda m: (
        lambda y: (y.transpose(0, 1)[:, 1].sub_(1.0), [y])[1])(_base(m)),
    "unsqueeze then column": lambda m: (
        lambda y: (y.unsqueeze(0)[0, :, 2].mul_(-1.0), [y])[1])(_base(m)),
    "select of a 3-d permute": lambda m: (
        lambda y: (y.reshape(3, 2, 2).permute(2, 0, 1)[1].add_(100.0), [y])[1])(_base(m)),
    "setitem on a column view": lambda m: (
        lambda y: (_set(y[:, 2], slice(0, 2), 9.0), [y])[1])(_base(m)),
    "live column after base add_": lambda m: (
        lambda y: (lambda c: (y.add_(1.0), [y, c])[1])(y[:, 0]))(_base(m)),
    "live transpose after base mul_": lambda m: (
        lambda y: (lambda v: (y.mul_(3.0), [y, v])[1])(y.t()))(_base(m)),
    "live strided view after setitem": lambda m: (
        lambda y: (lambda v: (_set(y, 1, 4.0), [y, v])[1])(y[:, ::3]))(_base(m)),
    "live unsqueeze after zero_": lambda m: (
        lambda y: (lambda v: (y.zero_(), [y, v])[1])(y.unsqueeze(1)))(_base(m)),
    "reshape view writes": lambda m: (lambda y: (y.reshape(-1).add_(1.0), [y])[1])(_base(m)),
    "reshape of a transpose copies": lambda m: (
        lambda y: (lambda r: (r.add_(1.0), [y, r])[1])(y.t().reshape(-1)))(_base(m)),
    "contiguous of a transpose copies": lambda m: (
        lambda y: (lambda c: (c.add_(1.0), [y, c])[1])(y.t().contiguous()))(_base(m)),
    "clone of a column copies": lambda m: (
        lambda y: (lambda c: (c.add_(1.0), [y, c])[1])(y[:, 1].clone()))(_base(m)),
    "view of a compatible layout": lambda m: (
        lambda y: (y[1:].view(8).mul_(0.5), [y])[1])(_base(m)),
    "arithmetic on views": lambda m: [(lambda y: y.t() * 2 + y[:, 0:3].t()[:3].sum(0))(
        _base(m))],
}


@pytest.mark.parametrize("name", list(CASES))
def test_views_share_memory_like_torch(name: str) -> None:
    want = [t.numpy() for t in CASES[name](torch)]
    got = [t.numpy() for t in CASES[name](gc)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_clone_and_contiguous_copy_every_dtype(dtype: str) -> None:
    """``clone()`` is always a new tensor and ``contiguous()`` of a non-contiguous one too,
    for bool as well (a bool clone used to be the tensor itself), eagerly; compiled, the
    clone is written alone, and a write into ``contiguous()`` of a view (a copy or the view
    itself in torch, depending on its strides, which a trace does not have) raises."""
    x = (np.arange(6).reshape(2, 3) % 3 == 0) if dtype == "bool" else \
        np.arange(6).reshape(2, 3).astype(dtype)

    def f(m: Any, y: Any, contiguous: bool = True) -> Any:
        c, t = y.clone(), y.t().contiguous()
        c[0, 1] = 7
        if contiguous:
            t[1, 0] = 7
        return y * 1, c, t

    want = [a.numpy() for a in f(torch, torch.tensor(x))]
    for g, w in zip(f(gc, gc.tensor(x)), want):
        np.testing.assert_array_equal(g.numpy(), w)
    got = gc.compile(lambda y: f(gc, y, False), dynamic=False)(x)
    for g, w in zip(got[:2], want[:2]):
        np.testing.assert_array_equal(g.numpy(), w)
    with pytest.raises(NotImplementedError, match="on a view|live view"):
        gc.compile(lambda y: f(gc, y), dynamic=False)(x)


def test_contiguity_like_torch() -> None:
    for lib in (torch, gc):
        y = _base(lib)
        assert y.is_contiguous() and y.contiguous() is y
        assert not y.t().is_contiguous() and not y[:, 1:].is_contiguous()
        assert y[1:].is_contiguous() and y.t().contiguous().is_contiguous()
        assert y.t().t().is_contiguous()


@pytest.mark.parametrize("make", [lambda y: y.t(), lambda y: y[:, 1:], lambda y: y[::2]])
def test_view_of_an_incompatible_layout_raises_like_torch(make: Callable[[Any], Any]) -> None:
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        make(_base(torch)).view(-1)
    with pytest.raises(RuntimeError, match="view size is not compatible") as e:
        make(_base(gc)).view(-1)
    assert "reshape" in str(e.value)


def test_numpy_of_a_view_shares_the_base() -> None:
    y = _base(gc)
    a = y.t().numpy()
    assert np.shares_memory(a, y.numpy()) and not a.flags.c_contiguous
    y.add_(1.0)
    np.testing.assert_array_equal(a, X.T + 1)


def test_in_place_on_an_expanded_tensor_raises_like_torch() -> None:
    for lib in (torch, gc):
        x = lib.zeros(1, 3)
        with pytest.raises(RuntimeError, match="more than one element of the written-to"):
            x.expand(2, 3).add_(1.0)
        np.testing.assert_array_equal(x.numpy(), np.zeros((1, 3), np.float32))


@pytest.mark.parametrize("write", [
    lambda x: x[:, 0].zero_(), lambda x: x.t().mul_(2.0), lambda x: x[1].add_(1.0),
    lambda x: x.view(-1).fill_(3.0), lambda x: _set(x.t(), 0, 5.0),
])
def test_saved_value_changed_through_a_view_raises_at_backward(write: Callable) -> None:
    """``x`` is saved by ``w * x`` for ``w``'s gradient; writing it through a view bumps the
    version of its memory, as in PyTorch, so backward refuses instead of using new values."""
    for lib in (torch, gc):
        w = lib.tensor(X.copy(), requires_grad=True)
        x = _base(lib)
        s = (w * x).sum()
        write(x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            s.backward()


def test_writing_other_memory_leaves_backward_alone() -> None:
    grads = []
    for lib in (torch, gc):
        w = lib.tensor(X.copy(), requires_grad=True)
        x = _base(lib)
        s = (w * x).sum()
        x.clone()[:, 0].zero_()  # a copy: x's memory unchanged
        x.t().contiguous().mul_(2.0)
        s.backward()
        grads.append(w.grad.numpy().copy())
    np.testing.assert_array_equal(grads[1], grads[0])


def test_view_of_a_leaf_under_no_grad_writes_the_leaf() -> None:
    out = []
    for lib in (torch, gc):
        p = lib.tensor(X.copy(), requires_grad=True)
        with lib.no_grad():
            p.t()[0].zero_()
            p[:, 1].mul_(2.0)
        out.append(p.detach().numpy().copy())
    np.testing.assert_array_equal(out[1], out[0])


# -- random sequences of views and in-place writes, against torch ---------------------------
_VIEWS = st.sampled_from(["t", "col", "row", "step", "unsq", "reshape", "select", "neg_step"])
_WRITES = st.sampled_from(["add_", "mul_", "zero_", "fill_", "set", "clamp_"])


def _view(kind: str, t: Any) -> Any:
    if t.ndim == 0:
        return t
    if kind == "t":
        return t.transpose(0, -1)
    if kind == "col":
        return t[..., 1:] if t.shape[-1] > 1 else t
    if kind == "row":
        return t[:1]
    if kind == "step":
        return t[::2]
    if kind == "unsq":
        return t.unsqueeze(0)
    if kind == "reshape":
        return t.reshape(-1)
    if kind == "select":
        return t[-1]
    return t  # "neg_step": torch has no negative steps; the identity keeps the draw useful


def _write(kind: str, t: Any, v: float) -> None:
    if kind == "add_":
        t.add_(v)
    elif kind == "mul_":
        t.mul_(v)
    elif kind == "zero_":
        t.zero_()
    elif kind == "fill_":
        t.fill_(v)
    elif kind == "clamp_":
        t.clamp_(min=v)
    elif t.ndim:
        t[0] = v


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(_VIEWS, max_size=3), _WRITES,
                          st.integers(-3, 3).map(float), st.booleans()), min_size=1, max_size=6))
def test_random_view_and_write_sequences_match_torch(program: list) -> None:
    """Random chains of views of one base, each written in place, with every view made so
    far kept alive: after each write the base and all live views equal torch's."""
    state: dict[str, list[Any]] = {}
    for name, lib in (("torch", torch), ("gc", gc)):
        base = lib.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
        live = [base]
        snaps = []
        for chain, wkind, v, from_last in program:
            t = live[-1] if from_last else base
            for kind in chain:
                t = _view(kind, t)
            live.append(t)
            _write(wkind, t, v)
            snaps.append([x.numpy().copy() for x in live])
        state[name] = snaps
    for step_t, step_g in zip(state["torch"], state["gc"]):
        for a, b in zip(step_t, step_g):
            np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("name, write", [
    ("diagonal", lambda y: y[0].diagonal().fill_(-1.0)),
    ("diagonal", lambda y: y.diagonal(offset=1, dim1=1, dim2=2)[0].zero_()),
    ("unfold", lambda y: y.unfold(2, 2, 2).mul_(0.0)),
    ("unfold", lambda y: y.unfold(1, 2, 1)[0].add_(1.0)),
])
def test_in_place_on_a_copied_view_raises(name: str, write: Callable) -> None:
    """``diagonal`` and ``Tensor.unfold`` are views in PyTorch but gathers (copies) here: an
    in-place op on them, or on an eager view of them, would lose the write, so it raises
    naming the op, eagerly and in a compiled step, before anything changes."""
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    want = lib_t = torch.tensor(base.copy())
    write(lib_t)
    assert not np.array_equal(want.numpy(), base)  # torch wrote the base
    y = gc.tensor(base.copy())
    with pytest.raises(NotImplementedError, match=f"result of {name}"):
        write(y)
    np.testing.assert_array_equal(y.numpy(), base)

    def step(x: Any) -> Any:
        z = x * 1
        write(z)
        return z

    with pytest.raises(NotImplementedError, match=f"result of {name}|on a view"):
        gc.compile(step)(base.copy())


def test_out_of_place_use_of_copied_views_is_unchanged() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for f in (lambda m, y: m.diagonal(y, 0, 1, 2) * 2, lambda m, y: y.unfold(2, 2, 1).sum(-1)):
        np.testing.assert_array_equal(f(gc, gc.tensor(x)).numpy(), f(torch, torch.tensor(x)))


@pytest.mark.parametrize("dim, index", [(0, 1), (1, -1), (2, 0), (-1, 3)])
def test_select_is_a_view_like_torch(dim: int, index: int) -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = []
    for lib in (torch, gc):
        y = lib.tensor(x.copy())
        v = lib.select(y, dim, index)
        s = v * 1
        y.select(dim, index).add_(10.0)
        out.append((s.numpy().copy(), v.numpy().copy(), y.numpy().copy()))
    for a, b in zip(*out):
        np.testing.assert_array_equal(b, a)
    with pytest.raises(IndexError, match="out of range"):
        gc.tensor(x).select(1, 3)


def test_select_compiled_with_gradients() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    w0 = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    grads = []
    for lib, compiled in ((torch, False), (gc, False), (gc, True)):
        w = lib.tensor(w0.copy(), requires_grad=True)

        def f(a: Any, w: Any = w, lib: Any = lib) -> Any:
            loss = (lib.select(w * a, 1, 2) ** 2).sum()
            loss.backward()
            return loss

        run = gc.compile(f, dynamic=False) if compiled else f
        loss = run(x if compiled else lib.tensor(x))
        grads.append((float(loss), w.grad.numpy().copy()))
    for loss, g in grads[1:]:
        assert loss == pytest.approx(grads[0][0], rel=1e-6)
        np.testing.assert_allclose(g, grads[0][1], rtol=1e-6)


def test_data_writes_stay_off_the_version_counter() -> None:
    """torch gives ``.data`` its own version counter: writing it (or a view of it) between
    forward and backward does not raise, and the backward reads the new values."""
    got = []
    for lib in (torch, gc):
        w = lib.tensor(X.copy(), requires_grad=True)
        x = lib.tensor(X.copy(), requires_grad=True)
        s = (w * x).sum()
        x.data[:, 0].zero_()
        x.data.mul_(2.0)
        s.backward()
        got.append(w.grad.numpy().copy())
    np.testing.assert_array_equal(got[1], got[0])
