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
