"""Results written straight into the caller's output buffers (``planning._plan_direct_outputs``).

The JIT's kernels write a step's array results in place, into 64-byte aligned buffers. A
result of 128 KiB or more gets a new buffer each call, handed to the caller uncopied
(``runner.FRESH_OUTPUT_BYTES``); a smaller one is written into a buffer kept between calls
and copied out. What must hold:
values equal eager; a returned array is never written again by a later call (the caller owns
it); a result fed back as the next call's input reads right; a call that raises changes no
array the caller holds; ahead-of-time steps, whose output buffers a C program may share with
its inputs, keep writing results at the end."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphc as gc
import graphc.nn.functional as F
from graphc import nn
from graphc.runtime.runner import FRESH_OUTPUT_BYTES


def _conv_fn() -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    w = nn.Parameter(gc.from_numpy((rng.standard_normal((16, 1, 3, 3)) * 0.3).astype(np.float32)))

    def fwd(a: Any) -> Any:
        with gc.no_grad():
            return F.relu(F.conv2d(a, w, padding=1))

    return fwd, gc.compile(fwd, example_args=(np.zeros((4, 1, 32, 32), np.float32),))


def _images(seed: int, n: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 1, 32, 32)).astype(np.float32)


def test_a_large_result_is_written_in_place_and_handed_over_uncopied() -> None:
    fwd, cf = _conv_fn()
    x1, x2 = _images(1), _images(2)
    a = cf(x1).numpy()
    assert "[output 0]" in cf.ir("fused")
    assert a.nbytes >= FRESH_OUTPUT_BYTES
    assert a.ctypes.data % 64 == 0  # the arena's alignment, which kernels may rely on
    kept = a.copy()
    b = cf(x2).numpy()
    # the second call wrote a new buffer: the caller's first result is untouched
    assert not np.shares_memory(a, b)
    assert np.array_equal(a, kept)
    assert np.array_equal(a, fwd(gc.from_numpy(x1)).numpy())
    assert np.array_equal(b, fwd(gc.from_numpy(x2)).numpy())


def test_results_of_a_changing_batch_size_small_and_large() -> None:
    """The batch symbol moves the result across ``FRESH_OUTPUT_BYTES``: kept buffer and
    fresh buffers alternate, values equal eager every call."""
    fwd, cf = _conv_fn()
    held = []
    for i, n in enumerate([4, 1, 8, 1, 1, 3, 16]):  # 1 image: 64 KiB, 2: 128 KiB
        x = _images(10 + i, n)
        r = cf(x).numpy()
        assert np.array_equal(r, fwd(gc.from_numpy(x)).numpy())
        held.append((r, r.copy()))
    for r, kept in held:  # no later call wrote into an earlier result
        assert np.array_equal(r, kept)


def test_small_results_are_copies_of_a_kept_buffer() -> None:
    lin = nn.Linear(8, 3)

    @gc.compile(example_args=(np.zeros((5, 8), np.float32),))
    def f(x: Any) -> Any:
        with gc.no_grad():
            return lin(x) * 2.0

    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    a, b = f(x).numpy(), f(x + 1).numpy()
    assert a.nbytes < FRESH_OUTPUT_BYTES
    assert not np.shares_memory(a, b)
    with gc.no_grad():
        assert np.allclose(a, (lin(gc.from_numpy(x)) * 2.0).numpy(), rtol=1e-6, atol=1e-6)
        assert np.allclose(b, (lin(gc.from_numpy(x + 1)) * 2.0).numpy(), rtol=1e-6, atol=1e-6)


def test_a_result_fed_back_as_the_next_input() -> None:
    """``h = step(h)``: the caller's previous result is this call's input while the kernels
    write the new result; the two buffers never overlap."""
    rng = np.random.default_rng(3)
    w = gc.from_numpy((rng.standard_normal((256, 256)) / 16).astype(np.float32))

    def cell(h: Any) -> Any:
        return gc.tanh(h @ w + h)

    cf = gc.compile(cell, example_args=(np.zeros((128, 256), np.float32),))
    h0 = rng.standard_normal((128, 256)).astype(np.float32)
    h, e = h0, gc.from_numpy(h0)
    for _ in range(5):
        h = cf(h).numpy()
        e = cell(e)
        assert h.nbytes >= FRESH_OUTPUT_BYTES
        assert np.allclose(h, e.numpy(), rtol=1e-5, atol=1e-5)
    assert "[output 0]" in cf.ir("fused")


def test_a_call_that_raises_changes_no_result_the_caller_holds() -> None:
    """The product is written into the call's output buffer before the gather finds the
    bad index; the call raises, and the arrays of earlier calls keep their values."""
    rng = np.random.default_rng(4)
    w = gc.from_numpy(rng.standard_normal((64, 512)).astype(np.float32))
    table = gc.from_numpy(rng.standard_normal((10, 4)).astype(np.float32))

    @gc.compile(dynamic=False)
    def f(x: Any, idx: Any) -> Any:
        return x @ w, table[idx].sum()

    x = rng.standard_normal((256, 64)).astype(np.float32)
    good = np.array([1, 2, 3])
    y, s = f(x, good)
    y = y.numpy()
    kept = y.copy()
    with pytest.raises(IndexError, match="out of range"):
        f(x * 3, np.array([1, 12, 3]))
    assert np.array_equal(y, kept)
    y2, s2 = f(x, good)
    assert np.array_equal(y2.numpy(), kept)
    assert s2.item() == s.item()


def test_a_result_returned_twice_and_a_result_that_is_an_update() -> None:
    rng = np.random.default_rng(5)
    p = nn.Parameter(gc.from_numpy(rng.standard_normal((128, 160)).astype(np.float32)))

    def step(x: Any) -> Any:
        with gc.no_grad():
            p.add_(x)
            y = p * 2.0
            return y, y, p

    x = rng.standard_normal((128, 160)).astype(np.float32)
    start = p.numpy().copy()
    cf = gc.compile(step, example_args=(x,), dynamic=False)
    y1, y2, q = (t.numpy() for t in cf(x))
    assert np.array_equal(y1, (start + x) * 2.0) and np.array_equal(y2, y1)
    assert not np.shares_memory(y1, y2)
    assert np.array_equal(q, start + x) and np.array_equal(p.numpy(), start + x)
    y1b, _, qb = (t.numpy() for t in cf(x))
    assert np.array_equal(qb, (start + x) + x) and np.array_equal(y1, (start + x) * 2.0)


def test_ahead_of_time_lowering_writes_results_at_the_end() -> None:
    """A C program's output buffer may be one of its inputs: only the JIT's lowering plans
    direct outputs."""
    from graphc.codegen.lower import Lowering

    _, cf = _conv_fn()
    cf(_images(1))
    graph = cf.variants[-1].graph
    assert Lowering(graph).plan.out_direct == {}
    assert Lowering(graph, direct_outputs=True).plan.out_direct


@pytest.mark.parametrize("kind", ["transpose", "strided slice", "flat reshape", "compare",
                                  "argmax", "int cast", "the input itself"])
def test_results_of_every_kind_stay_as_handed_over(kind: str) -> None:
    """Views of the input (copied by a kernel into the result), bool and integer results,
    and an input returned unchanged (no kernel writes it: the entry copies it at the end),
    at batch sizes on both sides of ``FRESH_OUTPUT_BYTES``; each result keeps its values
    through the next call."""
    fns = {"transpose": lambda a: a.T, "strided slice": lambda a: a[::2, 1:],
           "flat reshape": lambda a: a.reshape(-1), "compare": lambda a: a > 0,
           "argmax": lambda a: a.argmax(1), "int cast": lambda a: (a * 10).to(gc.int32),
           "the input itself": lambda a: a}
    f = fns[kind]
    x = np.random.default_rng(6).standard_normal((256, 300)).astype(np.float32)
    cf = gc.compile(f, example_args=(x,))
    for xx in (x, x[:17], x[:1], x):
        got = cf(xx).numpy()
        cf(xx * 2 - 1)
        assert np.array_equal(got, f(gc.from_numpy(xx)).numpy())
    assert ("[output 0]" in cf.ir("fused")) == (kind != "the input itself")
