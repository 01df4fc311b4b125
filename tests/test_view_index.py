"""Views that split an axis (attention's heads split and merged, the gradient of a split),
emitted through affine index forms (``codegen/affine.py``): the compiled step equals the
interpreter for head counts and widths that do and do not divide into whole vectors, with a
symbolic batch, and the kernels that merge heads divide no index at run time."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc as gc
from graphc import nn


def _step(T: int, H: int, D: int, extra: int, backend: str | None) -> tuple[Any, list]:
    C = H * D
    rng = np.random.default_rng(H * 100 + D)
    w = nn.Parameter(rng.standard_normal((C, 3 * C)).astype(np.float32) / C)
    e = nn.Parameter(rng.standard_normal((extra,)).astype(np.float32))
    params = [w, e]

    def f(x: Any) -> Any:
        B = x.shape[0]
        q, k, v = (x @ w).split(C, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        y = (q * 2.0 + k * v).transpose(1, 2).reshape(B, T, C)
        y = gc.cat([y + x, e.expand(B, T, extra)], dim=2)  # a concatenation: pads and adds
        (y * y).sum().backward()
        return y

    return gc.compile(f, backend=backend), params


def _run(T: int, H: int, D: int, extra: int, backend: str | None, batch: int) -> list:
    step, params = _step(T, H, D, extra, backend)
    x = np.random.default_rng(batch).standard_normal((batch, T, H * D)).astype(np.float32)
    out = step(x)
    return [np.asarray(out).copy()] + [p.grad.numpy().copy() for p in params]


@settings(max_examples=10, deadline=None, derandomize=True)
@given(T=st.sampled_from([1, 3, 8]), H=st.integers(1, 4),
       D=st.sampled_from([1, 5, 8, 16, 24, 32]), extra=st.sampled_from([1, 8, 16]),
       batch=st.sampled_from([1, 2, 5]))
def test_head_split_and_merge_native_vs_interpreter(T: int, H: int, D: int, extra: int,
                                                    batch: int) -> None:
    ref = _run(T, H, D, extra, "interp", batch)
    got = _run(T, H, D, extra, None, batch)
    for k, (a, b) in enumerate(zip(ref, got, strict=True)):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5, err_msg=f"result {k}")


@pytest.mark.parametrize("H,D", [(2, 32), (4, 16), (3, 8)])
def test_head_merge_kernels_divide_no_index(H: int, D: int) -> None:
    """Every ``sdiv``/``srem`` of the old index arithmetic is gone when the head width fills
    whole vectors (8 or more lanes); the reference run above checks the values."""
    step, _ = _step(8, H, D, 16, None)
    step(np.zeros((2, 8, H * D), np.float32))
    text = step.ir("llvm_unoptimized")
    bodies = re.split(r"\ndefine ", text)
    merged = [s for s in bodies if re.match(r'internal i32 @"k_(add|mul)', s)]
    assert merged
    for s in merged:
        assert not re.search(r"= s(div|rem) i64", s), s.split("\n")[0]


@pytest.mark.parametrize("H,D", [(3, 64), (3, 16), (2, 8)])
def test_a_materialized_head_merge_divides_no_index(H: int, D: int) -> None:
    """The head merge before an output projection (ViT's ``a.transpose(1, 2).reshape(B * N,
    C)`` into ``proj``) is a kernel of its own: a reshape read through a permute. Its columns
    are taken in blocks of ``D`` as an inline merge's are, so no element's index is divided
    by ``D`` (before, every element was, and the copy ran as gathers: 0.87 ms against 0.29
    for ``[16, 3, 197, 64]``, Ice Lake Xeon, one thread). Values equal numpy's at two batch
    sizes, one compile."""
    T = 5
    rng = np.random.default_rng(H * D)
    w = rng.standard_normal((H * D, 4)).astype(np.float32)

    @gc.compile
    def f(a: Any, w: Any) -> Any:
        return a.transpose(1, 2).reshape(a.shape[0] * T, H * D) @ w

    for batch in (3, 1):
        a = rng.standard_normal((batch, H, T, D)).astype(np.float32)
        ref = a.astype(np.float64).transpose(0, 2, 1, 3).reshape(batch * T, H * D) @ w
        np.testing.assert_allclose(np.asarray(f(a, w)), ref, rtol=1e-5, atol=1e-5)
    assert f.compile_count == 1
    text = f.ir("llvm_unoptimized")
    bodies = [s for s in re.split(r"\ndefine ", text)
              if re.search(r'@"k_reshape', s.split("\n")[0])]
    assert bodies
    for s in bodies:
        assert not re.search(rf"= [su](?:div|rem) i64 [^,]+, {D}\b", s), s.split("\n")[0]


def _stack_slices(dim: int) -> Any:
    """``stack`` of three consecutive slices of ``a`` (the gradient of timm's ViT attention,
    ``qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)``, has this shape), with the
    batch symbolic."""
    def f(a: Any) -> Any:
        n = a.shape[2] // 3
        return gc.stack([a[:, :, :n], a[:, :, n:2 * n], a[:, :, 2 * n:]], dim)

    return gc.compile(f)


@pytest.mark.parametrize("dim", [0, 1, 4])
def test_stack_of_slices_matches_numpy(dim: int) -> None:
    fn = _stack_slices(dim)
    for batch in (3, 1):
        a = np.random.default_rng(batch).standard_normal((batch, 2, 15, 16)).astype(np.float32)
        ref = np.stack([a[:, :, :5], a[:, :, 5:10], a[:, :, 10:]], dim)
        np.testing.assert_array_equal(np.asarray(fn(a)), ref)
    assert fn.compile_count == 1


def test_unsqueeze_of_a_slice_divides_no_index() -> None:
    """A reshape that only inserts a unit dim (``stack``'s) maps the index through as it is:
    no division and remainder per element by the symbolic batch (which also kept the loop
    scalar: 6.2 ms against 0.31 for ``[16, 3, 591, 64]`` on Zen 4)."""
    fn = _stack_slices(0)
    fn(np.zeros((2, 3, 12, 16), np.float32))
    text = fn.ir("llvm_unoptimized")
    bodies = [s for s in re.split(r"\ndefine ", text) if re.match(r'internal i32 @"k_add', s)]
    assert bodies
    for s in bodies:
        assert not re.search(r"= [su](div|rem) i64", s), s.split("\n")[0]


@pytest.mark.parametrize("H,D", [(3, 64), (2, 16), (4, 8)])
def test_column_sum_through_a_head_permute(H: int, D: int) -> None:
    """The bias gradient of timm's ViT qkv projection: the ``[3, B, H, N, D]`` gradient
    permuted and reshaped to ``[B, N, 3*H*D]``, summed over ``B`` and ``N``. Its columns are
    taken in blocks of ``D``, so the kernel divides no element's index, only the block
    variable (once a block of ``D`` columns; it ran at 3 ns an element before: 5.6 ms
    against 0.11-0.16 for ``B = 16, N = 197``, Zen 4), and the values equal the float64 sums at
    two batch sizes, one compile."""
    N = 13

    @gc.compile(dynamic={"a": (1,)})  # the batch is the second dim here
    def f(a: Any) -> Any:
        return a.permute(1, 3, 0, 2, 4).reshape(a.shape[1], N, 3 * H * D).sum((0, 1))

    for batch in (5, 1):
        a = np.random.default_rng(batch).standard_normal((3, batch, H, N, D)).astype(
            np.float32)
        ref = a.astype(np.float64).transpose(1, 3, 0, 2, 4).reshape(batch, N, -1).sum((0, 1))
        np.testing.assert_allclose(np.asarray(f(a)), ref, rtol=1e-5, atol=1e-5)
    assert f.compile_count == 1
    text = f.ir("llvm_unoptimized")
    bodies = [s for s in re.split(r"\ndefine ", text) if re.match(r'internal i32 @"k_sum', s)]
    assert bodies
    for s in bodies:
        divided = re.findall(r"= [su](?:div|rem) i64 (%\S+),", s)
        assert all(v == '%"colb"' for v in divided), divided


def test_reshaped_permute_keeps_its_rows_vectorised() -> None:
    """``x.permute(1, 0, 2).reshape(T * B, E)`` with a symbolic batch (nn.MultiheadAttention's
    layout change): the kept last dim maps straight through, so only the row index is
    divided by the batch and the row copy vectorises. Linearised whole, every element
    divided by the batch and the loop stayed scalar (the copies around a TransformerEncoder's
    attention took 9 % of its step; 545 -> 483 ms, Zen 4)."""
    @gc.compile
    def f(x: Any) -> Any:
        return x.permute(1, 0, 2).reshape(-1, x.shape[2]) * 2.0

    for batch in (3, 1):
        x = np.random.default_rng(batch).standard_normal((batch, 7, 64)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(f(x)),
                                      x.transpose(1, 0, 2).reshape(-1, 64) * 2.0)
    assert f.compile_count == 1
    text = f.ir("llvm")
    bodies = [s for s in re.split(r"\ndefine ", text) if re.search(r"@\"?k_mul", s.split("\n")[0])]
    assert any(re.search(r"load <\d+ x float>", s) for s in bodies), "no vector loads"


@pytest.mark.parametrize("src,dst", [((2, 3, 4, 5), (2, 12, 5)), ((2, 12, 5), (2, 3, 4, 5)),
                                     ((4, 6), (2, 2, 6)), ((3, 4, 2), (3, 2, 4)),
                                     ((2, 1, 6), (2, 6)), ((6, 5), (2, 3, 5))])
def test_reshapes_of_permuted_views_match_numpy(src: tuple, dst: tuple) -> None:
    """Reshapes that keep dims at either end, read through a permute (so not as a strided
    view), with a symbolic batch: numpy's values, at two batch sizes."""
    @gc.compile
    def f(x: Any) -> Any:
        y = x.permute(0, *range(x.ndim - 1, 0, -1))  # reverse the non-batch dims
        return y.reshape(-1, *dst) + 0.0

    for batch in (2, 1):
        x = np.random.default_rng(batch).standard_normal((batch, *src)).astype(np.float32)
        y = x.transpose(0, *range(x.ndim - 1, 0, -1))
        np.testing.assert_array_equal(np.asarray(f(x)), y.reshape(-1, *dst))
