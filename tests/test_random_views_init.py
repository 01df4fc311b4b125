"""``nn.init`` on views and the layout of ``*_like`` results, against PyTorch bit for bit
after the same seed (and the stream's position afterwards).

PyTorch's initialisers are written with Tensor methods (``uniform_``, ``normal_``, ...), which
fill a transposed, permuted or sliced weight in ATen's ``TensorIterator`` order (memory
order) rather than its logical order, ``normal_`` of a non-contiguous tensor one double
sample per element; ``trunc_normal_``'s redraws go into ``empty_like`` buffers that keep the
weight's memory order. ``orthogonal_`` draws a fresh contiguous matrix and copies it in.

``rand_like``/``randn_like``/``randint_like``/``empty_like``/``zeros_like``/... use
``memory_format=torch.preserve_format``: a non-overlapping, dense input lends its strides, any
other strided input gets dense strides in its memory order (``infer_dense_strides``); the
fill of the result then draws in that memory order. float32 ``normal_`` of 16 or more
contiguous values uses vectorised sin/cos/log that differ in the last bits: those compare
with a tolerance, as in tests/test_nn_init_full.py."""

import inspect
import math
import random

import numpy as np
import pytest

import graphc as gc
from graphc import nn
from graphc.tensor import Tensor

torch = pytest.importorskip("torch")

OLD_TRUNC = "erfinv" in inspect.getsource(torch.nn.init._no_grad_trunc_normal_)
EXACT, NORMAL = "exact", "normal"

# name -> (a weight view made the same way in graphc and torch, 2-d?)
WEIGHTS = {
    "transpose": lambda m, d: m.zeros(5, 7, dtype=d).t(),
    "permute(2, 0, 1)": lambda m, d: m.zeros(3, 4, 5, dtype=d).permute(2, 0, 1),
    "conv permuted": lambda m, d: m.zeros(4, 3, 3, 2, dtype=d).permute(0, 3, 1, 2),
    "column slice": lambda m, d: m.zeros(6, 8, dtype=d)[:, 1:6],
    "step slice": lambda m, d: m.zeros(6, 8, dtype=d)[:, ::2],
    "column slice of a transpose": lambda m, d: m.zeros(8, 6, dtype=d).t()[:, 1:6],
    "small transpose": lambda m, d: m.zeros(2, 3, dtype=d).t(),
    "contiguous": lambda m, d: m.zeros(5, 7, dtype=d),
}

INITS = {
    "uniform_": lambda i, t, **k: i.uniform_(t, -0.3, 0.7, **k),
    "normal_": lambda i, t, **k: i.normal_(t, 0.5, 2.0, **k),
    "xavier_uniform_": lambda i, t, **k: i.xavier_uniform_(t, **k),
    "xavier_normal_": lambda i, t, **k: i.xavier_normal_(t, gain=1.5, **k),
    "kaiming_uniform_": lambda i, t, **k: i.kaiming_uniform_(t, a=math.sqrt(5), **k),
    "kaiming_normal_": lambda i, t, **k: i.kaiming_normal_(t, mode="fan_out", **k),
    "trunc_normal_": lambda i, t, **k: i.trunc_normal_(t, **k),
    # [-1, 1] holds 68% of the mass: normal draws, then many redraws into empty_like buffers
    "trunc_normal_ narrow": lambda i, t, **k: i.trunc_normal_(t, 0.0, 1.0, -1.0, 1.0, **k),
    # 5% of the mass: PyTorch's uniform rejection sampler, several rounds
    "trunc_normal_ window": lambda i, t, **k: i.trunc_normal_(t, 1.0, 0.5, -0.5, 0.2, **k),
    "sparse_": lambda i, t, **k: i.sparse_(t, 0.3, std=0.5, **k),
}
NORMAL_FILLS = {"normal_", "xavier_normal_", "kaiming_normal_", "sparse_"}


def _how(init, weight, dtype):
    """Whether PyTorch's values pass through a float32 ``normal_`` of 16 or more contiguous
    values (vectorised: last bits), given the weight's layout."""
    if dtype != "float32":
        return EXACT
    w = WEIGHTS[weight](torch, torch.float32)
    if w.numel() < 16:
        return EXACT
    if init in NORMAL_FILLS:
        return NORMAL if w.is_contiguous() else EXACT
    if init in ("trunc_normal_", "trunc_normal_ narrow"):  # redraws into empty_like(w)
        return NORMAL if torch.empty_like(w).is_contiguous() else EXACT
    return EXACT


def _compare(a, b, how, name):
    assert a.dtype == b.dtype and a.shape == b.shape, name
    if how == EXACT:
        np.testing.assert_array_equal(a, b, err_msg=name)
    else:
        scale = max(float(np.abs(b).max()), 1e-30)
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-7 * scale, err_msg=name)


def _init_run(m, init_mod, weight, init, dtype, generator):
    m.manual_seed(3)
    g = m.Generator().manual_seed(8) if generator else None
    w = WEIGHTS[weight](m, getattr(m, dtype))
    assert INITS[init](init_mod, w, **({"generator": g} if generator else {})) is w
    after = [m.rand(3).numpy(), m.randn(3, dtype=m.float64).numpy()]
    if generator:
        after.append(m.randn(3, generator=g, dtype=m.float64).numpy())
    return w.numpy().copy(), after


def _init_check(weight, init, dtype, generator=False):
    if "trunc" in init and OLD_TRUNC:
        pytest.skip("this PyTorch draws trunc_normal_ by the inverse CDF")
    if init == "sparse_" and WEIGHTS[weight](torch, torch.float32).ndim != 2:
        pytest.skip("sparse_ takes 2-d tensors")
    a, a_after = _init_run(gc, nn.init, weight, init, dtype, generator)
    b, b_after = _init_run(torch, torch.nn.init, weight, init, dtype, generator)
    name = f"{init} of {weight} ({dtype})"
    _compare(a, b, _how(init, weight, dtype), name)
    for x, y in zip(a_after, b_after):
        np.testing.assert_array_equal(x, y, err_msg=f"stream after {name}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("init", list(INITS))
@pytest.mark.parametrize("weight", list(WEIGHTS))
def test_init_of_a_view_is_pytorchs(weight, init, dtype):
    _init_check(weight, init, dtype)


@pytest.mark.parametrize("init", ["normal_", "trunc_normal_ narrow", "trunc_normal_ window",
                                  "sparse_", "kaiming_uniform_"])
@pytest.mark.parametrize("weight", ["transpose", "permute(2, 0, 1)", "column slice",
                                    "column slice of a transpose"])
def test_init_of_a_view_with_a_generator(weight, init):
    for dtype in ("float32", "float64"):
        _init_check(weight, init, dtype, generator=True)


def test_trunc_normal_of_a_transpose_is_drawn_in_memory_order():
    """The values of ``trunc_normal_(w.t())`` are those of ``trunc_normal_`` of the
    row-major (memory-order) tensor, transposed: every step of the sampler is elementwise,
    and both the fill and the redraw buffers are visited in memory order, one double
    Box-Muller sample per element."""
    gc.manual_seed(6)
    a = gc.zeros(5, 7, dtype=gc.float64)
    nn.init.trunc_normal_(a.t(), 0.0, 1.0, -1.0, 1.0)
    torch.manual_seed(6)
    b = torch.zeros(5, 7, dtype=torch.float64)
    torch.nn.init.trunc_normal_(b.t(), 0.0, 1.0, -1.0, 1.0)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert a.numpy().min() >= -1.0 and a.numpy().max() <= 1.0


def _numpy_qr(monkeypatch):
    monkeypatch.setattr(gc.linalg, "qr", lambda a: tuple(
        gc.tensor(x) for x in np.linalg.qr(a.numpy())))
    return monkeypatch


@pytest.mark.parametrize("weight", ["transpose", "permute(2, 0, 1)", "column slice",
                                    "step slice", "column slice of a transpose"])
def test_orthogonal_of_a_view_keeps_logical_order(monkeypatch, weight):
    """``orthogonal_`` draws a fresh contiguous matrix (logical order) and copies it in, so a
    view gets the same values as a contiguous tensor of its shape (numpy's QR stands in for
    LAPACK's: last bits)."""
    _numpy_qr(monkeypatch)
    outs = []
    for m, init in ((gc, nn.init), (torch, torch.nn.init)):
        m.manual_seed(4)
        w = WEIGHTS[weight](m, m.float64)
        init.orthogonal_(w, gain=2.0)
        outs.append((w.numpy().copy(), m.rand(3).numpy()))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("make", [lambda m: m.zeros(3, 4, 5)[:, :, ::2],
                                  lambda m: WEIGHTS["conv permuted"](m, m.float32)],
                         ids=["step slice", "conv permuted"])
def test_orthogonal_of_a_view_that_cannot_be_flattened_raises_as_pytorch(monkeypatch, make):
    """PyTorch writes through ``tensor.view_as(q)``, which raises (after drawing) for a
    layout whose trailing dims cannot be flattened without a copy; so does graphc, and the
    stream has moved as far."""
    _numpy_qr(monkeypatch)
    after = []
    for m, init in ((gc, nn.init), (torch, torch.nn.init)):
        m.manual_seed(0)
        w = make(m)
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            init.orthogonal_(w)
        assert not w.numpy().any()
        after.append(m.rand(3).numpy())
    np.testing.assert_array_equal(after[0], after[1])


def test_compiled_trunc_normal_of_a_strided_tensor_is_eagers():
    """Inside a compiled step ``trunc_normal_`` of ``t.data`` (``t`` strided, made outside)
    draws on every call in the order of ``t``'s memory, as the eager call does."""
    if OLD_TRUNC:
        pytest.skip("this PyTorch draws trunc_normal_ by the inverse CDF")

    def run(compiled):
        gc.manual_seed(2)
        b = gc.zeros(4, 6, dtype=gc.float64).t()

        def f(x):
            nn.init.trunc_normal_(b.data, 0.0, 1.0, -1.0, 1.0)
            return x + b * 1

        g = gc.compile(f) if compiled else f
        x = np.zeros((1, 6, 4)) if compiled else gc.zeros(1, 6, 4, dtype=gc.float64)
        return [g(x).numpy().copy() for _ in range(2)]

    eager, compiled = run(False), run(True)
    for u, v in zip(eager, compiled):
        np.testing.assert_array_equal(v, u)
    assert not np.array_equal(compiled[0], compiled[1])
    torch.manual_seed(2)
    t = torch.zeros(4, 6, dtype=torch.float64).t()
    torch.nn.init.trunc_normal_(t, 0.0, 1.0, -1.0, 1.0)
    np.testing.assert_array_equal(eager[0][0], t.numpy())


# -- *_like: preserve_format ------------------------------------------------------------------
INPUTS = {
    "transpose": lambda m, d: m.zeros(6, 4, dtype=d).t(),
    "large transpose": lambda m, d: m.zeros(9, 7, dtype=d).t(),
    "permute(2, 0, 1)": lambda m, d: m.zeros(2, 3, 4, dtype=d).permute(2, 0, 1),
    "permute(1, 2, 0)": lambda m, d: m.zeros(3, 4, 5, dtype=d).permute(1, 2, 0),
    "channels-last permute": lambda m, d: m.zeros(2, 3, 4, 5, dtype=d).permute(0, 2, 3, 1),
    "column slice (row-major, not dense)": lambda m, d: m.zeros(6, 8, dtype=d)[:, 1:4],
    "step slice of a transpose": lambda m, d: m.zeros(6, 8, dtype=d).t()[:, ::2],
    "row step of a transpose": lambda m, d: m.zeros(6, 8, dtype=d)[::2].t(),
    "permuted step slice": lambda m, d: m.zeros(2, 3, 4, dtype=d).permute(1, 2, 0)[:, ::2],
    "block of a transpose": lambda m, d: m.zeros(5, 6, dtype=d).t()[1:4, 1:3],
    "expanded": lambda m, d: m.zeros(3, 1, dtype=d).expand(3, 4),
    "expanded, transposed": lambda m, d: m.zeros(1, 4, dtype=d).expand(3, 4).t(),
    "contiguous": lambda m, d: m.zeros(5, 6, dtype=d),
}

LIKES = {
    "rand_like": lambda m, x: m.rand_like(x),
    "randn_like": lambda m, x: m.randn_like(x),
    "randn_like f64": lambda m, x: m.randn_like(x, dtype=m.float64),
    "randint_like(3, 100)": lambda m, x: m.randint_like(x, 3, 100),
    "randint_like(10) int32": lambda m, x: m.randint_like(x, 10, dtype=m.int32),
    "empty_like.normal_": lambda m, x: m.empty_like(x).normal_(0.5, 2.0),
    "empty_like.uniform_": lambda m, x: m.empty_like(x).uniform_(-1, 1),
    "zeros_like.uniform_": lambda m, x: m.zeros_like(x).uniform_(),
    "ones_like.log_normal_": lambda m, x: m.ones_like(x).log_normal_(0.1, 0.5),
    "full_like.cauchy_": lambda m, x: m.full_like(x, 2.0).cauchy_(),
    "empty_like.random_": lambda m, x: m.empty_like(x).random_(0, 1000),
    "zeros_like": lambda m, x: m.zeros_like(x),
    "full_like int": lambda m, x: m.full_like(x, 7, dtype=m.int64),
}


def _like_run(m, inp, like, dtype):
    m.manual_seed(7)
    y = LIKES[like](m, INPUTS[inp](m, getattr(m, dtype)))
    after = [m.rand(3).numpy(), m.randn(3, dtype=m.float64).numpy()]
    return y, after


def _like_how(inp, like, dtype):
    """float32 ``normal_`` fills of a contiguous result of 16 or more values: last bits."""
    if like not in ("randn_like", "empty_like.normal_") or dtype != "float32":
        return EXACT
    x = torch.empty_like(INPUTS[inp](torch, torch.float32))
    return NORMAL if x.is_contiguous() and x.numel() >= 16 else EXACT


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("like", list(LIKES))
@pytest.mark.parametrize("inp", list(INPUTS))
def test_like_of_a_view_is_pytorchs(inp, like, dtype):
    """Values, strides, contiguity and the stream afterwards of a ``*_like`` of a view (and
    of the fill of it), as PyTorch's."""
    (a, a_after), (b, b_after) = (_like_run(m, inp, like, dtype) for m in (gc, torch))
    name = f"{like} of {inp} ({dtype})"
    assert a.stride() == b.stride(), name
    assert a.is_contiguous() == b.is_contiguous(), name
    assert a.dtype.name == str(b.dtype).rsplit(".", 1)[-1], name
    _compare(a.numpy(), b.numpy(), _like_how(inp, like, dtype), name)
    for x, y in zip(a_after, b_after):
        np.testing.assert_array_equal(x, y, err_msg=f"stream after {name}")


def test_like_strides_match_aten_for_strided_memory():
    """``empty_like`` of ``as_strided`` views of a buffer (dense or not, overlapping ones with
    zero and tied strides, size-1 dims with any stride) against PyTorch's layout: the strides
    of the dims with more than one element (numpy's own rule picks the others in a
    contiguous array) and ``is_contiguous``."""
    rng = random.Random(0)
    for trial in range(400):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 4))]
        if trial % 2:  # a permutation of a contiguous tensor, maybe with gaps
            perm = list(range(len(shape)))
            rng.shuffle(perm)
            strides, cur = [0] * len(shape), 1
            for d in reversed(perm):
                strides[d] = cur
                cur *= shape[d] * rng.choice([1, 1, 2])
        else:
            strides = [rng.choice([0, 1, 2, 3, 4, 6, 8, 12, 24]) for _ in shape]
        size = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
        want = torch.empty_like(torch.zeros(size).as_strided(shape, strides))
        buf = np.zeros(size, np.float32)
        a = np.lib.stride_tricks.as_strided(buf, shape, [s * 4 for s in strides],
                                            writeable=False)
        got = gc.empty_like(Tensor._from_array(a))
        big = [d for d, n in enumerate(shape) if n > 1]
        name = f"{shape} {strides}"
        assert [got.stride(d) for d in big] == [want.stride(d) for d in big], name
        assert got.is_contiguous() == want.is_contiguous(), name


def test_like_memory_formats():
    """``contiguous_format`` is row-major (the values of ``rand`` of the shape); an explicit
    ``preserve_format`` is the default; others raise before anything is drawn."""
    x = gc.zeros(5, 3).t()
    gc.manual_seed(1)
    a = gc.rand_like(x, memory_format=gc.contiguous_format)
    assert a.is_contiguous() and a.stride() == (5, 1)
    gc.manual_seed(1)
    np.testing.assert_array_equal(a.numpy(), gc.rand(3, 5).numpy())
    gc.manual_seed(1)
    b = gc.rand_like(x, memory_format=gc.preserve_format)
    torch.manual_seed(1)
    c = torch.rand_like(torch.zeros(5, 3).t(), memory_format=torch.preserve_format)
    assert b.stride() == c.stride() == (1, 3)
    np.testing.assert_array_equal(b.numpy(), c.numpy())
    for f in (gc.rand_like, gc.randn_like, gc.zeros_like, gc.ones_like, gc.empty_like,
              lambda x, **k: gc.full_like(x, 1.0, **k), lambda x, **k: gc.randint_like(x, 5, **k)):
        gc.manual_seed(2)
        with pytest.raises(NotImplementedError, match="channels_last"):
            f(x, memory_format=gc.channels_last)
        after = gc.rand(2).numpy()
        gc.manual_seed(2)
        np.testing.assert_array_equal(after, gc.rand(2).numpy())


def test_strided_like_is_a_leaf_with_its_own_memory():
    """A strided result is a new leaf (``requires_grad`` as asked, gradients flow), not a
    view of the input, and in-place ops keep its layout."""
    x = gc.zeros(4, 3).t()
    y = gc.randn_like(x, requires_grad=True)
    assert y.is_leaf and y.requires_grad and y.stride() == (1, 3)
    (y * 2).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.full((3, 4), 2, np.float32))
    z = gc.zeros_like(x)
    z.add_(1)
    assert z.stride() == (1, 3) and not x.numpy().any()
    np.testing.assert_array_equal(z.numpy(), np.ones((3, 4), np.float32))


def test_compiled_like_of_a_strided_tensor_made_outside_is_eagers():
    """Inside a compiled step the ``*_like`` of a strided tensor made outside draws in the
    memory order of PyTorch's result (its strides are known while tracing) on every call,
    as eager does; the first call is PyTorch's."""
    def run(compiled):
        gc.manual_seed(2)
        w = gc.zeros(4, 6).t()

        def f(x):
            return (x + gc.rand_like(w), gc.randn_like(w, dtype=gc.float64) * 1,
                    gc.randint_like(w, 0, 50) * 1, gc.zeros_like(w) + 1)

        g = gc.compile(f) if compiled else f
        x = np.zeros((2, 6, 4), np.float32) if compiled else gc.zeros(2, 6, 4)
        return [[t.numpy().copy() for t in g(x)] for _ in range(2)]

    eager, compiled = run(False), run(True)
    for e, c in zip(eager, compiled):
        for u, v in zip(e, c):
            np.testing.assert_array_equal(v, u)
    assert not np.array_equal(compiled[0][0], compiled[1][0])
    torch.manual_seed(2)
    w = torch.zeros(4, 6).t()
    np.testing.assert_array_equal(eager[0][0][0], torch.rand_like(w).numpy())
    np.testing.assert_array_equal(eager[0][1], torch.randn_like(w, dtype=torch.float64).numpy())


def test_gumbel_softmax_of_a_transpose_draws_row_major():
    """PyTorch's ``gumbel_softmax`` draws its exponentials into
    ``empty_like(logits, memory_format=torch.legacy_contiguous_format)``: row-major whatever
    the logits' layout."""
    x = np.random.RandomState(0).randn(4, 6)
    gc.manual_seed(1)
    a = gc.nn.functional.gumbel_softmax(gc.tensor(x).t(), tau=0.7, dim=0).numpy()
    torch.manual_seed(1)
    b = torch.nn.functional.gumbel_softmax(torch.tensor(x).t(), tau=0.7, dim=0).numpy()
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
