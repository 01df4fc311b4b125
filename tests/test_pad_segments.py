"""Loops cut at zero pads' edges (``codegen.pad_segments``): ``cat`` and the gradient of
``chunk``/``split`` are sums of pads, and each segment of the loop computes only the pieces
that hold values there. The values must be what they were: compiled equals eager (bit for bit
where the ops are exact) and PyTorch, on every axis, with views under the pads, on two
threads, and where a pad is also read at another index."""

from __future__ import annotations

import re

import numpy as np
import pytest
from _fuzz_settings import fuzz_settings
from _threads import assert_bit_identical, run_per_thread_count
from hypothesis import given
from hypothesis import strategies as st

import graphc as gc

torch = pytest.importorskip("torch")


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _both(fn, *args, dynamic=False):
    """``fn`` compiled and run eagerly on ``args`` (numpy arrays): (compiled, eager, step)."""
    step = gc.compile(fn, dynamic=dynamic)
    got = np.asarray(step(*args))
    eager = fn(*[gc.tensor(a) for a in args]).numpy()
    return got, eager, step


def _kernel_bodies(step, op: str) -> list[str]:
    """The unoptimised LLVM text of the step's ``op`` kernels (their loop functions, not the
    thread pool's task wrappers)."""
    text = step.ir("llvm_unoptimized")
    out = []
    for m in re.finditer(rf'^define internal i32 @"k_{op}_[0-9a-f]+(\.par)?"\(.*?^}}',
                         text, re.M | re.S):
        out.append(m.group(0))
    return out


def test_cat_runs_one_loop_per_piece_without_clamps_or_selects() -> None:
    rng = _rng()
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((5, 8), (5, 24), (5, 16)))

    def f(a, b, c):
        return gc.cat([a * 2.0, b + 1.0, c * c], 1)

    got, eager, step = _both(f, a, b, c, dynamic=True)
    want = np.concatenate([a * 2.0, b + 1.0, c * c], 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(eager, want)
    code = "\n".join(_kernel_bodies(step, "add"))
    assert "fadd" in code, step.ir("llvm_unoptimized")
    # every piece is read at i - lo in its own segment: no clamped index, no select
    assert " select " not in code, code
    assert code.count("fmul") == 2, code  # a * 2 and c * c, once each


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cat_on_every_axis_matches_numpy_and_eager(axis: int) -> None:
    rng = _rng(axis)
    shapes = [[3, 4, 5], [3, 4, 5], [3, 4, 5]]
    shapes[1][axis] = 7
    shapes[2][axis] = 2
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]

    def f(x, y, z):
        return gc.cat([x - 1.0, y * 3.0, z.abs()], axis) * 0.5

    got, eager, _ = _both(f, *xs)
    want = np.concatenate([xs[0] - 1.0, xs[1] * 3.0, np.abs(xs[2])], axis) * 0.5
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(eager, got)


def test_cat_under_a_reshape_keeps_the_split_loop() -> None:
    """Heads merged after a cat (GPT's q, k, v gradient): the reshape splits the innermost
    loop into blocks, and the pieces' edges fall on whole blocks."""
    rng = _rng(1)
    q, k, v = (rng.standard_normal((2, 6, 2, 16)).astype(np.float32) for _ in range(3))

    def f(q, k, v):
        parts = [t.reshape(2, 6, 32) * s for t, s in ((q, 1.0), (k, 2.0), (v, 3.0))]
        return gc.cat(parts, 2) + 1.0

    got, eager, _ = _both(f, q, k, v)
    want = np.concatenate([q.reshape(2, 6, 32), k.reshape(2, 6, 32) * 2,
                           v.reshape(2, 6, 32) * 3], 2) + 1.0
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(eager, got)


def test_edges_off_the_blocks_and_pads_also_read_through_a_view() -> None:
    rng = _rng(2)
    a = rng.standard_normal((6, 3)).astype(np.float32)
    b = rng.standard_normal((6, 3)).astype(np.float32)

    def f(a, b):
        y = gc.cat([a + 1.0, b * 2.0], 1)  # [6, 6]: read at its index and transposed
        return y + y.T

    got, eager, _ = _both(f, a, b)
    y = np.concatenate([a + 1.0, b * 2.0], 1)
    np.testing.assert_array_equal(got, y + y.T)
    np.testing.assert_array_equal(eager, got)


def test_signed_zeros_and_integer_and_bool_pieces_as_eager() -> None:
    z = np.full((2, 3), -0.0, np.float32)
    one = np.ones((2, 5), np.float32)
    got, eager, _ = _both(lambda z, o: gc.cat([z * 1.0, o], 1), z, one)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(eager))
    np.testing.assert_array_equal(got, eager)
    i = np.arange(12, dtype=np.int64).reshape(3, 4)
    got, eager, _ = _both(lambda x, y: gc.cat([x * 2, y + 1], 0), i, i)
    np.testing.assert_array_equal(got, np.concatenate([i * 2, i + 1], 0))
    np.testing.assert_array_equal(eager, got)
    m = i % 3 == 0
    got, eager, _ = _both(lambda x, y: gc.cat([x, ~y], 1), m, m)
    np.testing.assert_array_equal(got, np.concatenate([m, ~m], 1))
    np.testing.assert_array_equal(eager, got)


def test_chunk_gradient_as_an_lstm_cell_matches_torch() -> None:
    """The LSTM's gate gradient: four pieces of ``chunk(4, 1)``, each through its own
    nonlinearity, summed back into one ``[B, 4H]`` gradient in a loop group."""
    rng = _rng(4)
    g = rng.standard_normal((6, 64)).astype(np.float32)
    c = rng.standard_normal((6, 16)).astype(np.float32)
    w = rng.standard_normal((6, 16)).astype(np.float32)

    def cell(mod, g, c, w):
        i, f, gg, o = g.chunk(4, 1)
        c2 = mod.sigmoid(f) * c + mod.sigmoid(i) * mod.tanh(gg)
        h = mod.sigmoid(o) * mod.tanh(c2)
        return (h * w).sum() + (c2 * c2).sum()

    gp = gc.nn.Parameter(gc.tensor(g))

    def step(c, w):
        gp.grad = None
        loss = cell(gc, gp, c, w)
        loss.backward()
        return loss

    fn = gc.compile(step, dynamic=False)
    fn(c, w)
    got = gp.grad.numpy().copy()
    gp.grad = None
    cell(gc, gp, gc.tensor(c), gc.tensor(w)).backward()
    eager = gp.grad.numpy()
    tg = torch.tensor(g, requires_grad=True)
    cell(torch, tg, torch.tensor(c), torch.tensor(w)).backward()
    np.testing.assert_allclose(got, tg.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(eager, got, rtol=1e-6, atol=1e-7)
    assert "pad" in fn.ir("fused")


_THREADS_SCRIPT = """
import numpy as np, graphc as gc
rng = np.random.default_rng(5)
a = rng.standard_normal((3000, 16)).astype(np.float32)
b = rng.standard_normal((1096, 16)).astype(np.float32)
f = gc.compile(lambda a, b: gc.cat([a * 2.0, b.exp()], 0) - 1.0, dynamic=False)
np.savez(OUT, y=np.asarray(f(a, b)),
         want=np.concatenate([a * 2.0, np.exp(b)], 0) - 1.0)
"""


def test_cat_on_the_axis_the_two_threads_split(tmp_path) -> None:
    """65,536 elements: the outermost loop is split between the threads, and the pieces'
    segments are clipped to each thread's half."""
    runs = run_per_thread_count(tmp_path, _THREADS_SCRIPT)
    assert_bit_identical(runs)
    y, want = runs[0]["y"], runs[0]["want"]
    np.testing.assert_array_equal(y[:3000], want[:3000])
    np.testing.assert_allclose(y[3000:], want[3000:], rtol=2e-6, atol=3e-7)


# -- random concatenations -----------------------------------------------------------------

_PIECE_OPS = {
    "id": lambda t: t, "scale": lambda t: t * 1.5, "shift": lambda t: t - 0.25,
    "square": lambda t: t * t, "tanh": lambda t: t.tanh(), "neg": lambda t: -t,
}


@st.composite
def _concats(draw):
    """A concatenation as data: rank, axis, the pieces' extents on it, an op per piece, a
    view under one piece (a reshape split, or none), and an op over the whole."""
    rank = draw(st.integers(1, 3))
    axis = draw(st.integers(0, rank - 1))
    base = [draw(st.sampled_from([1, 2, 3, 8, 16])) for _ in range(rank)]
    n = draw(st.integers(2, 6))
    extents = [draw(st.sampled_from([1, 2, 3, 8, 16, 24])) for _ in range(n)]
    ops = [draw(st.sampled_from(sorted(_PIECE_OPS))) for _ in range(n)]
    return {"base": base, "axis": axis, "extents": extents, "ops": ops,
            "reshape_first": draw(st.booleans()), "outer": draw(st.sampled_from(
                ["none", "scale", "transpose_add", "chunk_grad"])),
            "seed": draw(st.integers(0, 2**16))}


@fuzz_settings(ci_examples=12, long_examples=200)
@given(_concats())
def test_random_concatenations_compiled_equal_eager(c) -> None:
    """Random ``cat``s (1-3 dims, 2-6 pieces of mixed extents, per-piece ops, a piece
    reshaped from a split view, the whole transposed and added to itself, or the gradient
    of a ``chunk`` back through them): compiled equals eager, bit for bit where no
    transcendental op is drawn (``tanh`` differs by ulps between the two implementations,
    as it did before the segments)."""
    rng = np.random.default_rng(c["seed"])
    shapes = []
    for e in c["extents"]:
        s = list(c["base"])
        s[c["axis"]] = e
        shapes.append(tuple(s))
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    axis, ops = c["axis"], [_PIECE_OPS[o] for o in c["ops"]]
    exact = "tanh" not in c["ops"]

    def f(*ts):
        parts = [op(t) for op, t in zip(ops, ts)]
        if c["reshape_first"] and parts[0].shape[-1] % 2 == 0 and parts[0].shape[-1] > 1:
            p0 = parts[0]
            parts[0] = p0.reshape(*p0.shape[:-1], 2, p0.shape[-1] // 2).reshape(p0.shape)
        y = gc.cat(parts, axis)
        if c["outer"] == "scale":
            y = y * 0.5 + 1.0
        elif c["outer"] == "transpose_add" and y.ndim >= 2 and y.shape[-1] == y.shape[-2]:
            y = y + y.transpose(-1, -2)
        return y

    if c["outer"] == "chunk_grad":
        total = sum(c["extents"])
        params = [gc.nn.Parameter(gc.tensor(x)) for x in xs]

        def step(g):
            for p in params:
                p.grad = None
            y = f(*params)
            k = 2 if total % 2 == 0 else 1
            pieces = y.chunk(k, axis)
            loss = sum(((p * (i + 1.0)) ** 2 * g.narrow(axis, i * (total // k),
                                                        total // k)).sum()
                       for i, p in enumerate(pieces))
            loss.backward()
            return loss

        gshape = list(c["base"])
        gshape[axis] = total
        g = rng.standard_normal(gshape).astype(np.float32)
        fn = gc.compile(step, dynamic=False)
        fn(g)
        got = [p.grad.numpy().copy() for p in params]
        step(gc.tensor(g))
        for a, p in zip(got, params):
            _same(a, p.grad.numpy(), exact)
        return
    got, eager, _ = _both(f, *xs)
    _same(got, eager, exact)


def _same(a: np.ndarray, b: np.ndarray, exact: bool) -> None:
    if exact:
        np.testing.assert_array_equal(a, b)
    else:  # tanh's backward 1 - t^2 turns its ulps into ~1e-7 absolute differences
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
