"""Numerics of the native backends that need no PyTorch (issue 15, items 7 and 8).

- Float sums are blocked and pairwise (``codegen/reduce.py``): over millions of elements the
  compiled sum, mean and variance stay within a few 1e-7 of a float64 reference, for
  reductions over the last dim, over leading dims (bias gradients) and over everything.
- Bool ``max``/``maximum``/``minimum`` and integer ``pow`` compile for the CPU and agree with
  the interpreter, and they lower to PTX that ``ptxas`` assembles.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphc as gc

pytest.importorskip("graphc.codegen.cpu")


def _compiled_and_reference(fn: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    got = np.asarray(gc.compile(fn)(x)).astype(np.float64)
    ref = np.asarray(fn(gc.tensor(x.astype(np.float64))).numpy())
    return got, ref


@pytest.mark.parametrize("name, fn, shape", [
    ("flat sum", lambda x: x.sum(), (1 << 22,)),
    ("sum of a 2-D tensor", lambda x: x.sum(), (1024, 4096)),
    ("sum over the leading dim", lambda x: x.sum(0), (1 << 18, 16)),
    ("sum over the last dim", lambda x: x.sum(1), (4, 1 << 20)),
    ("mean of squares", lambda x: (x * x).mean(), (1 << 22,)),
    ("variance over the last dim", lambda x: x.var(1), (4, 1 << 20)),
])
def test_large_float32_reductions_stay_accurate(name: str, fn: Any, shape: tuple) -> None:
    """Before blocking, these were off by 1e-6 to 3e-5 at 4M elements (serial per-lane
    chains); pairwise blocks keep them within a few float32 ulps of the float64 result."""
    x = (np.random.default_rng(0).random(shape, dtype=np.float32) + 0.5).astype(np.float32)
    got, ref = _compiled_and_reference(fn, x)
    rel = np.max(np.abs(got - ref) / np.abs(ref))
    assert rel < 5e-7, f"{name}: relative error {rel:.2e}"


@pytest.mark.parametrize("n", [1, 7, 2047, 2048, 2049, 5000, 3 * 2048 + 17])
def test_blocked_sum_at_block_edges(n: int) -> None:
    """Lengths around the block size (a partial last block, an exact multiple, one more):
    every element is summed exactly once (integers in float32 add exactly)."""
    x = np.arange(n, dtype=np.float32).reshape(1, n) % 97
    y = np.ascontiguousarray(x.T)  # the same values down the leading dim
    f_last = gc.compile(lambda a: a.sum(1))
    f_lead = gc.compile(lambda a: a.sum(0))
    assert float(np.asarray(f_last(x))[0]) == float(x.sum(dtype=np.float64))
    assert float(np.asarray(f_lead(y))[0]) == float(x.sum(dtype=np.float64))


def test_leading_dim_sum_strips_and_kept_dims() -> None:
    """A leading-dim reduction with a kept middle dim and a last dim wider than one strip."""
    rng = np.random.default_rng(1)
    x = rng.integers(-50, 50, (300, 3, 700)).astype(np.float32)
    got = np.asarray(gc.compile(lambda a: a.sum(0))(x))
    np.testing.assert_array_equal(got, x.sum(0, dtype=np.float64).astype(np.float32))


@pytest.mark.parametrize("cols", [1, 3, 255])
def test_leading_dim_sum_narrow_last_dim_matches_wide(cols: int) -> None:
    """A last dim narrower than a strip gets strips of its own width: each column's sum is
    the same pairwise tree as in a 300-column strip, bit for bit (rows past ROW_BLOCK, so the
    cascade merges)."""
    x = np.random.default_rng(2).standard_normal((1000, 300)).astype(np.float32)
    wide = np.asarray(gc.compile(lambda a: a.sum(0))(x))
    narrow = np.asarray(gc.compile(lambda a: a.sum(0))(np.ascontiguousarray(x[:, :cols])))
    np.testing.assert_array_equal(narrow, wide[:cols])


def _both(fn: Any, *args: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    eager = np.asarray(fn(*[gc.tensor(a) for a in args]).numpy())
    interp = np.asarray(gc.compile(fn, backend="interp")(*args))
    native = np.asarray(gc.compile(fn)(*args))
    return eager, interp, native


BOOLS = np.array([[True, False, True], [False, False, False], [False, True, True]])


@pytest.mark.parametrize("name, fn, n_args", [
    ("max", lambda x: x.max(), 1),
    ("amax over a dim", lambda x: x.amax(1), 1),
    ("argmax", lambda x: x.argmax(1), 1),
    ("maximum", lambda x, y: gc.maximum(x, y), 2),
    ("minimum", lambda x, y: gc.minimum(x, y), 2),
])
def test_bool_max_family_native(name: str, fn: Any, n_args: int) -> None:
    """An i1 compared as a signed integer is 0 > -1: true was the smaller bool natively."""
    args = (BOOLS, np.ascontiguousarray(BOOLS[::-1]))[:n_args]
    eager, interp, native = _both(fn, *args)
    np.testing.assert_array_equal(interp, eager, err_msg=name)
    np.testing.assert_array_equal(native, eager, err_msg=name)


def test_bool_max_reference_values() -> None:
    eager, _, native = _both(lambda x: x.amax(1), BOOLS)
    np.testing.assert_array_equal(native, [True, False, True])
    eager, _, native = _both(lambda x, y: gc.maximum(x, y), BOOLS, BOOLS[::-1].copy())
    np.testing.assert_array_equal(native, BOOLS | BOOLS[::-1])
    eager, _, native = _both(lambda x, y: gc.minimum(x, y), BOOLS, BOOLS[::-1].copy())
    np.testing.assert_array_equal(native, BOOLS & BOOLS[::-1])


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_integer_pow_native(dtype: Any) -> None:
    """Square-and-multiply with wrap-around; negative exponents truncate (1, +-1, else 0)."""
    base = np.array([2, -2, 1, -1, 0, 3, 0, -1, 7, -3, 5], dtype)
    exp = np.array([-1, -1, -3, -3, -1, 0, 0, -2, 40, 5, 13], dtype)
    eager, interp, native = _both(lambda x, y: x ** y, base, exp)
    with np.errstate(over="ignore"):
        pos = np.power(base, np.maximum(exp, 0))
    want = np.where(exp >= 0, pos, np.where(base == 1, 1, np.where(
        base == -1, np.where(exp % 2 == 1, -1, 1), 0))).astype(dtype)
    for got in (eager, interp, native):
        np.testing.assert_array_equal(got, want)
    _, _, sq = _both(lambda x: x ** 2, base)
    np.testing.assert_array_equal(sq, base * base)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")
def test_int_pow_and_bool_max_assemble_for_ptx(tmp_path: Path) -> None:
    import subprocess

    def step(x: Any, y: Any, m: Any) -> Any:
        return (x ** y).sum() + m.amax(1).long().sum() + gc.maximum(m, m).long().sum()

    args = (np.ones((4, 3), np.int64), np.ones((4, 3), np.int64), BOOLS.repeat(2, 0)[:4])
    fn = gc.compile(step, device="cuda", example_args=args)
    src = tmp_path / "k.ptx"
    src.write_text(fn.ir("ptx"))
    res = subprocess.run(["ptxas", "--gpu-name", "sm_90", "-O3", str(src), "-o",
                          str(tmp_path / "k.cubin")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
