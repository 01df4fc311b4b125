"""Random fills of views that are not row-major (transposes, permutations, column and step
slices, views with size-1 dims, views of views): PyTorch's values bit for bit after the same
seed, and PyTorch's stream position afterwards.

ATen fills any tensor through ``TensorIterator``, whose loop runs over the dims sorted by
stride (the smallest innermost), so a transposed view gets its values in memory order, not
in its logical order; ``normal_`` takes its 16-at-a-time fill only for contiguous tensors
and otherwise one double Box-Muller sample per element, float32 included (so those compare
exactly, unlike the vectorised float32 fill of 16 or more contiguous values). Inside a
compiled step a fill of a strided tensor made outside it draws in eager's order.

PyTorch builds with MKL draw ``bernoulli_(p)`` with a number ``p`` (and, in some versions,
``exponential_``) from MKL's own stream on Intel CPUs; there those cases are skipped."""

import random

import numpy as np
import pytest
from _torch import INTEL, torch

import graphc as gc
from graphc import random as grandom
from graphc.random_ops import _iteration_order

MKL_STREAM = {"bernoulli_", "exponential_"}  # drawn from MKL's stream on Intel CPUs

# name -> a view of a fresh zero tensor, made the same way in graphc and in torch
VIEWS = {
    "transpose": lambda m, d: m.zeros(5, 7, dtype=d).t(),
    "small transpose": lambda m, d: m.zeros(2, 3, dtype=d).t(),
    "permute(2, 0, 1)": lambda m, d: m.zeros(3, 4, 5, dtype=d).permute(2, 0, 1),
    "permute(1, 2, 0)": lambda m, d: m.zeros(3, 4, 5, dtype=d).permute(1, 2, 0),
    "column slice": lambda m, d: m.zeros(6, 8, dtype=d)[:, 1:4],
    "step slice": lambda m, d: m.zeros(6, 8, dtype=d)[:, ::2],
    "1-d step slice": lambda m, d: m.zeros(40, dtype=d)[::2],
    "row step of a transpose": lambda m, d: m.zeros(6, 8, dtype=d)[::2].t(),
    "size-1 dim permuted": lambda m, d: m.zeros(5, 1, 7, dtype=d).permute(2, 1, 0),
    "unsqueeze of a transpose": lambda m, d: m.zeros(3, 4, dtype=d).t().unsqueeze(1),
    "None-indexed transpose": lambda m, d: m.zeros(3, 4, dtype=d).t()[None, :, None],
    "select": lambda m, d: m.zeros(3, 4, 5, dtype=d)[:, 1],
    "narrow, transposed": lambda m, d: m.zeros(3, 8, dtype=d).narrow(1, 2, 5).t(),
    "view of a slice, transposed":
        lambda m, d: m.zeros(4, 6, dtype=d)[1:3].view(2, 2, 3).transpose(1, 2),
    "view of a view": lambda m, d: m.zeros(4, 6, 5, dtype=d)[:, ::2].transpose(0, 2)[1:],
    "large permuted step": lambda m, d: m.zeros(9, 11, 3, dtype=d).permute(1, 2, 0)[::2],
    "one element": lambda m, d: m.zeros(3, 4, dtype=d)[1:2, 2:3],
    "contiguous transpose (1, n)": lambda m, d: m.zeros(1, 7, dtype=d).t(),
    "0-size": lambda m, d: m.zeros(0, 4, dtype=d).t(),
    "row slice (contiguous)": lambda m, d: m.zeros(6, 8, dtype=d)[2:5],
    "contiguous": lambda m, d: m.zeros(4, 5, dtype=d),
}

FILLS = {
    "uniform_": lambda m, x, kw: x.uniform_(-1, 2, **kw),
    "normal_": lambda m, x, kw: x.normal_(0.5, 2.0, **kw),
    "exponential_": lambda m, x, kw: x.exponential_(1.5, **kw),
    "cauchy_": lambda m, x, kw: x.cauchy_(**kw),
    "log_normal_": lambda m, x, kw: x.log_normal_(0.1, 0.5, **kw),
    "geometric_": lambda m, x, kw: x.geometric_(0.3, **kw),
    "random_(0, 100)": lambda m, x, kw: x.random_(0, 100, **kw),
    "random_()": lambda m, x, kw: x.random_(**kw),
    "bernoulli_": lambda m, x, kw: x.bernoulli_(0.4, **kw),
    "bernoulli_(tensor)": lambda m, x, kw: x.bernoulli_(
        m.linspace(0, 1, x.shape[-1]), **kw),
    "bernoulli_(f64 tensor)": lambda m, x, kw: x.bernoulli_(
        m.linspace(0, 1, x.shape[-1], dtype=m.float64), **kw),
}


def _run(m, view, fill, dtype, generator_seed=None):
    """The base tensor after the fill of its view, and draws that show where the global
    stream (and the generator's, with its cached normal sample) stands afterwards."""
    m.manual_seed(1)
    g = None if generator_seed is None else m.Generator().manual_seed(generator_seed)
    v = VIEWS[view](m, getattr(m, dtype))
    FILLS[fill](m, v, {} if g is None else {"generator": g})
    after = [m.rand(3).numpy(), m.randn(3).numpy()]
    if g is not None:
        after.append(m.randn(3, generator=g, dtype=m.float64).numpy())
    return v.numpy().copy(), after


def _check(view, fill, dtype, generator_seed=None):
    if INTEL and fill in MKL_STREAM:
        pytest.skip("drawn from MKL's stream on Intel CPUs")
    a, a_after = _run(gc, view, fill, dtype, generator_seed)
    b, b_after = _run(torch, view, fill, dtype, generator_seed)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b, err_msg=f"{fill} of {view} ({dtype})")
    for x, y in zip(a_after, b_after):
        np.testing.assert_array_equal(x, y, err_msg=f"stream after {fill} of {view}")


def _vectorised_f32_normal(view, fill, dtype):
    """float32 ``normal_`` of 16 or more contiguous values: PyTorch's vectorised sin/cos/log
    differ from numpy's in the last bits (compared with a tolerance in test_random.py)."""
    if fill != "normal_" or dtype != "float32":
        return False
    v = VIEWS[view](torch, torch.float32)
    return v.is_contiguous() and v.numel() >= 16


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("view", list(VIEWS))
def test_fill_of_a_view_is_pytorchs(view, fill, dtype):
    if _vectorised_f32_normal(view, fill, dtype):
        pytest.skip("vectorised float32 normal_fill: compared with a tolerance elsewhere")
    _check(view, fill, dtype)


@pytest.mark.parametrize("fill", ["uniform_", "normal_", "exponential_", "log_normal_",
                                  "random_(0, 100)", "bernoulli_(tensor)"])
@pytest.mark.parametrize("view", ["transpose", "permute(2, 0, 1)", "step slice",
                                  "view of a view", "1-d step slice"])
def test_fill_of_a_view_with_a_generator(view, fill):
    """A ``Generator``'s stream (and its cached Box-Muller sample) advances as PyTorch's;
    the global stream is left alone."""
    for dtype in ("float32", "float64"):
        _check(view, fill, dtype, generator_seed=3)


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
@pytest.mark.parametrize("fill", ["random_(0, 100)", "random_()", "geometric_",
                                  "bernoulli_", "bernoulli_(tensor)"])
@pytest.mark.parametrize("view", ["transpose", "permute(1, 2, 0)", "step slice",
                                  "size-1 dim permuted"])
def test_integer_fill_of_a_view_is_pytorchs(view, fill, dtype):
    if dtype == "bool" and fill in ("random_(0, 100)", "geometric_"):
        pytest.skip("not a bool fill")
    _check(view, fill, dtype)


def test_non_contiguous_float32_normal_is_per_element_and_exact():
    """ATen's 16-at-a-time fill needs a contiguous tensor: a transposed float32 tensor of 35
    values gets 35 double Box-Muller samples, in memory order, exactly PyTorch's."""
    gc.manual_seed(5)
    a = gc.zeros(5, 7)
    a.t().normal_()
    torch.manual_seed(5)
    b = torch.zeros(5, 7)
    b.t().normal_()
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    # the same values as a contiguous float64 fill of 35 draws one by one in memory order
    gc.manual_seed(5)
    ref = grandom._normal_doubles(35, 0.0, 1.0).astype(np.float32).reshape(5, 7)
    np.testing.assert_array_equal(a.numpy(), ref)


def test_contiguous_fills_keep_their_algorithm():
    """A tensor whose memory order is its logical order draws as before: the plain draw
    functions, ``normal_``'s 16-at-a-time fill included."""
    for shape in [(4, 5), (3, 1, 6), (2, 3)]:
        for d in (gc.float32, gc.float64):
            gc.manual_seed(9)
            got = gc.zeros(*shape, dtype=d).normal_(1.0, 0.5).numpy()
            gc.manual_seed(9)
            np.testing.assert_array_equal(got, grandom.normal(shape, 1.0, 0.5, d.np))
            gc.manual_seed(9)
            got = gc.zeros(*shape, dtype=d)[:].uniform_(-2, 2).numpy()
            gc.manual_seed(9)
            np.testing.assert_array_equal(got, grandom.uniform(shape, -2, 2, d.np))


def test_iteration_order_matches_aten_for_strided_memory():
    """``_iteration_order`` against PyTorch's own fills of ``as_strided`` views of a buffer:
    the elements of a fill come from the stream in the order the function gives, for random
    shapes and strides (size-1 dims with any stride, overlapping views with tied strides)."""
    rng = random.Random(0)
    checked = 0
    for trial in range(300):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(2, 4))]
        strides = [rng.choice([0, 1, 2, 3, 4, 6, 8, 12, 24]) if n == 1 else
                   rng.choice([1, 2, 3, 4, 5, 6, 8, 12, 24]) for n in shape]
        size = 2 + sum((n - 1) * s for n, s in zip(shape, strides))
        torch.manual_seed(trial)
        buf = torch.zeros(size, dtype=torch.float64)
        buf.as_strided(shape, strides, 1).uniform_()
        order = _iteration_order(tuple(shape), tuple(strides))
        torch.manual_seed(trial)
        values = iter(torch.zeros(int(np.prod(shape)), dtype=torch.float64).uniform_().tolist())
        want = np.zeros(size)
        for idx in np.ndindex(*[shape[d] for d in order]):  # later writes win, as in ATen
            want[1 + sum(i * strides[d] for i, d in zip(idx, order))] = next(values)
        np.testing.assert_array_equal(buf.numpy(), want, err_msg=f"{shape} {strides}")
        checked += 1
    assert checked == 300


def test_fill_of_an_expanded_view_raises_before_drawing():
    for m in (gc, torch):
        m.manual_seed(0)
        with pytest.raises(RuntimeError, match="more than one element of the written-to"):
            m.zeros(3, 1).expand(3, 4).uniform_()
    after = gc.rand(3).numpy()
    torch.manual_seed(0)
    np.testing.assert_array_equal(after, torch.rand(3).numpy())


def _views_outside():
    """Strided tensors made outside a step (views of buffers a step fills in place)."""
    return (gc.zeros(6, 5).t(), gc.zeros(4, 6, 3, dtype=gc.float64).permute(2, 0, 1),
            gc.zeros(8, 8)[:, ::2])


def _step(x, views):
    a, b, c = views
    a.normal_(1.0, 2.0)  # 30 float32 values, per element (not contiguous)
    b.uniform_(-1, 1)
    c.bernoulli_(gc.linspace(0, 1, 4))
    return x + a, b * 1, c * 1, gc.randn(2)


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_compiled_fill_of_a_transposed_view_is_eagers(backend):
    """A compiled step fills a strided tensor made outside it in eager's element order (the
    strides are known when tracing), on every call; the first call is also PyTorch's."""
    gc.manual_seed(4)
    views = _views_outside()
    eager = [[t.numpy().copy() for t in _step(gc.zeros(2, 5, 6), views)] for _ in range(2)]
    gc.manual_seed(4)
    views = _views_outside()
    f = gc.compile(lambda x: _step(x, views), backend=backend)
    got = [[t.numpy().copy() for t in f(np.zeros((2, 5, 6), np.float32))] for _ in range(2)]
    for e, g in zip(eager, got):
        for u, v in zip(e, g):
            np.testing.assert_array_equal(v, u)
    assert not np.array_equal(got[0][0], got[1][0])
    assert f.compile_count == 1
    torch.manual_seed(4)
    a = torch.zeros(6, 5).t()
    a.normal_(1.0, 2.0)
    np.testing.assert_array_equal(eager[0][0][0], a.numpy())


def test_compiled_fill_through_data_of_a_strided_tensor_is_eagers():
    """``t.data.normal_()`` inside a step: the traced stand-in for ``t.data`` draws in the
    order of ``t``'s strided memory, as the eager call does."""
    def run(compiled):
        gc.manual_seed(2)
        b = gc.zeros(4, 6, dtype=gc.float64).t()

        def f(x):
            b.data.normal_()
            return x + b * 1

        g = gc.compile(f) if compiled else f
        x = np.zeros((1, 6, 4)) if compiled else gc.zeros(1, 6, 4, dtype=gc.float64)
        return [g(x).numpy().copy() for _ in range(2)]

    for u, v in zip(run(False), run(True)):
        np.testing.assert_array_equal(v, u)


def test_compiled_fill_of_a_view_made_inside_the_step_raises():
    """A view made inside a step has no memory of its own in the compiled code: the fill
    would not reach its base, so it raises (naming the view) instead of drawing."""
    def f(x):
        y = gc.zeros(4, 3)
        y.t().uniform_()
        return x + y

    with pytest.raises(NotImplementedError, match="in-place op on a view"):
        gc.compile(f)(np.zeros((2, 4, 3), np.float32))


def _fill_then_relayout(compiled: bool, fill) -> tuple:
    gc.manual_seed(0)
    w = gc.zeros(4, 3).t()  # column-major: drawn in memory order, per element for normal_
    out = []

    def step(x):
        return fill(w), x.sum()

    f = gc.compile(step) if compiled else step
    for _ in range(2):
        r, _ = f(gc.ones(2))
        out.append((w.numpy().copy(), np.asarray(r).copy()))
        w.data = gc.zeros(3, 4)  # row-major from now on (.data = copies in C order)
    return out, getattr(f, "compile_count", 1)


@pytest.mark.parametrize("name", ["normal_", "uniform_", "rand_like", "randn_like"])
def test_a_compiled_fill_follows_the_tensors_layout_at_each_call(name):
    """Regression: the element order (and ``normal_``'s algorithm) of a fill of a tensor from
    outside the step, and the layout of a ``*_like`` of it, were read at trace time only; a
    tensor given an array of another layout between calls was then filled in the first
    call's order. The step is now guarded on that layout and re-traced when it changes."""
    fill = {"normal_": lambda w: w.normal_().sum(), "uniform_": lambda w: w.uniform_().sum(),
            "rand_like": lambda w: gc.rand_like(w) * 1.0,
            "randn_like": lambda w: gc.randn_like(w) * 1.0}[name]
    eager, _ = _fill_then_relayout(False, fill)
    compiled, count = _fill_then_relayout(True, fill)
    for (we, re), (wc, rc) in zip(eager, compiled):
        np.testing.assert_array_equal(wc, we)
        np.testing.assert_allclose(rc, re, rtol=1e-6)
    assert count == 2
