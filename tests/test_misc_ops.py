"""The ``torch.*`` functions and ``Tensor`` methods of graphc/misc_ops.py against PyTorch:
values, dtypes and PyTorch's exception types eagerly (0-d, empty, broadcast and negative-dim
cases among them), values and gradients of the differentiable ones eagerly and compiled (one
compile serving two batch sizes), the random functions' streams, the global settings, the
in-place shape changes' aliasing, and the ``NotImplementedError`` of what a compiled step
cannot do."""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import numpy as np
import pytest
from _op_parity import check_compiled, check_eager
from _torch import torch

import graphc as gc
from graphc import misc_ops, nn

NAN, INF = float("nan"), float("inf")
F32MAX = float(np.finfo(np.float32).max)


# -- the harness: the same expression in both frameworks ---------------------------------------
def _np(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        t = t.detach()
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    a = np.asarray(t.numpy())
    return a.astype(np.float32) if t.dtype is gc.bfloat16 else a


def _name(d: Any) -> str:
    return str(d).rsplit(".", 1)[-1]


def _same(got: Any, want: Any, rtol: float, atol: float, exact: bool) -> None:
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _same(g, w, rtol, atol, exact)
        return
    if isinstance(want, torch.Tensor):
        assert isinstance(got, gc.Tensor), got
        assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
        assert _name(got.dtype) == _name(want.dtype), (got.dtype, want.dtype)
        g, w = _np(got), _np(want)
        if exact:
            np.testing.assert_array_equal(g, w)
            if g.dtype.kind == "f":  # signs of zeros too
                np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        return
    if isinstance(want, torch.dtype):
        assert _name(got) == _name(want), (got, want)
        return
    assert got == want or (isinstance(want, float) and math.isnan(want) and math.isnan(got)), \
        (got, want)


def agree(f: Any, *data: Any, rtol: float = 1e-6, atol: float = 1e-7,
          exact: bool = False) -> None:
    """``f(module, *tensors)`` with module torch and gc: the same results (tuples, tensors'
    shapes, dtypes and values, dtypes, Python values), or the same exception type."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = f(torch, *[torch.tensor(d) for d in data])
        except Exception as e:  # noqa: BLE001 - whatever PyTorch raises, graphc must too
            with pytest.raises(Exception) as got:
                f(gc, *[gc.tensor(d) for d in data])
            assert type(got.value) is type(e), (got.value, e)
            return
        got = f(gc, *[gc.tensor(d) for d in data])
    _same(got, want, rtol, atol, exact)


X10 = np.arange(10, dtype=np.float32)
M23 = np.arange(6, dtype=np.float32).reshape(2, 3)
T24 = np.array([[1., 2, 4, 8], [10, 20, 40, 80]], np.float32)
Y234 = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
MASK = np.array([[True, False, True], [False, True, False]])
IDX = np.array([0, 4, 2, 0])
SRC = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
FIVE = np.full((5, 3), 2, np.float32)
SPECIAL = np.array([0., -0., 1., 8., 0.3, -5.5, INF, -INF, NAN, 1e-40, 3.4e38, 2 ** -149,
                    2 ** -126, 0.99999994, -2.0 ** 127], np.float32)
NX = np.array([1., 0., -0., 1., INF, NAN, F32MAX, 1., -INF, 2 ** -149, -2 ** -149, 2 ** -126,
               2 ** -126, 1e-40, 4., 4., -4., -4., F32MAX, 0., -0.], np.float32)
NY = np.array([2., 1., 0., 1., 0., 1., INF, -INF, 0, 0, 0, 0, 1, 1, 5, 3, -5, -3, -INF, -0.,
               1.], np.float32)

# (id, f(module, *tensors), data, exact)
EAGER = [
    # splitting
    ("tensor_split_sections", lambda m, t: m.tensor_split(t, 3), (X10,), True),
    ("tensor_split_indices", lambda m, t: m.tensor_split(t, [1, 5, 3, 12]), (X10,), True),
    ("tensor_split_negative", lambda m, t: t.tensor_split((-3,)), (X10,), True),
    ("tensor_split_tensor", lambda m, t: m.tensor_split(t, m.tensor([2, 4])), (X10,), True),
    ("tensor_split_tensor_0d", lambda m, t: m.tensor_split(t, m.tensor(4)), (X10,), True),
    ("tensor_split_more_than_size", lambda m, t: m.tensor_split(t, 12), (X10,), True),
    ("tensor_split_neg_dim", lambda m, t: m.tensor_split(t.reshape(2, 5), 3, dim=-1), (X10,),
     True),
    ("tensor_split_empty", lambda m, t: m.tensor_split(t[:0].reshape(0, 5), 2), (X10,), True),
    ("tensor_split_zero", lambda m, t: m.tensor_split(t, 0), (X10,), True),
    ("tensor_split_0d", lambda m, t: m.tensor_split(t[0], 2), (X10,), True),
    ("tensor_split_float", lambda m, t: m.tensor_split(t, 2.0), (X10,), True),
    ("tensor_split_float_tensor", lambda m, t: m.tensor_split(t, m.tensor([2.0])), (X10,), True),
    ("tensor_split_2d_tensor", lambda m, t: m.tensor_split(t, m.tensor([[2]])), (X10,), True),
    ("tensor_split_bad_dim", lambda m, t: m.tensor_split(t, 2, dim=1), (X10,), True),
    ("hsplit", lambda m, t: m.hsplit(t.reshape(2, 5), [1, 2]), (X10,), True),
    ("hsplit_1d", lambda m, t: t.hsplit(5), (X10,), True),
    ("hsplit_indivisible", lambda m, t: m.hsplit(t.reshape(2, 5), 2), (X10,), True),
    ("hsplit_zero", lambda m, t: m.hsplit(t.reshape(2, 5), 0), (X10,), True),
    ("hsplit_0d", lambda m, t: m.hsplit(t[0], 1), (X10,), True),
    ("hsplit_tensor", lambda m, t: m.hsplit(t, m.tensor([1])), (X10,), True),
    ("vsplit", lambda m, t: t.reshape(2, 5).vsplit(2), (X10,), True),
    ("vsplit_1d", lambda m, t: t.vsplit(2), (X10,), True),
    ("dsplit", lambda m, t: m.dsplit(t.reshape(1, 2, 5), [3]), (X10,), True),
    ("dsplit_2d", lambda m, t: t.reshape(2, 5).dsplit(5), (X10,), True),
    ("split_with_sizes", lambda m, t: t.reshape(2, 5).split_with_sizes([1, 4], 1), (X10,), True),
    ("split_with_sizes_fn", lambda m, t: m.split_with_sizes(t, [3, 0, 7]), (X10,), True),
    ("split_with_sizes_sum", lambda m, t: t.split_with_sizes([1, 4]), (X10,), True),
    ("split_with_sizes_negative", lambda m, t: t.split_with_sizes([11, -1]), (X10,), True),
    ("split_with_sizes_int", lambda m, t: t.split_with_sizes(2), (X10,), True),
    ("split_with_sizes_0d", lambda m, t: t[0].split_with_sizes([1]), (X10,), True),
    # indices
    ("unravel_index", lambda m, i: m.unravel_index(i, (2, 3)), (np.array([4, 1, -1, 7]),), True),
    ("unravel_index_0d", lambda m, i: m.unravel_index(i, (2, 3)), (np.array(4),), True),
    ("unravel_index_int_shape", lambda m, i: m.unravel_index(i, 4), (np.array([5], np.int32),),
     True),
    ("unravel_index_2d", lambda m, i: m.unravel_index(i, (2, 3)), (np.array([[1, 5]]),), True),
    ("unravel_index_float", lambda m, i: m.unravel_index(i, 4), (np.array([5.]),), True),
    ("unravel_index_bool", lambda m, i: m.unravel_index(i, 4), (np.array([True]),), True),
    ("unravel_index_negative_shape", lambda m, i: m.unravel_index(i, (2, -3)),
     (np.array([5]),), True),
    ("unravel_index_empty_shape", lambda m, i: m.unravel_index(i, ()), (np.array([0]),), True),
    ("unravel_index_zero_size", lambda m, i: m.unravel_index(i, (0, 3)), (np.array([1]),), True),
    ("unravel_index_zero_size_empty", lambda m, i: m.unravel_index(i, (0, 3)),
     (np.array([], np.int64),), True),
    ("combinations", lambda m, t: m.combinations(t), (np.array([1., 2, 3]),), True),
    ("combinations_replacement", lambda m, t: m.combinations(t, 3, with_replacement=True),
     (np.array([1, 2, 3]),), True),
    ("combinations_r0", lambda m, t: m.combinations(t, 0), (np.array([1., 2, 3]),), True),
    ("combinations_r_past_n", lambda m, t: m.combinations(t, r=4), (np.array([1, 2, 3]),), True),
    ("combinations_negative_r", lambda m, t: m.combinations(t, r=-1), (np.array([1, 2]),), True),
    ("combinations_2d", lambda m, t: m.combinations(t), (np.array([[1, 2, 3]]),), True),
    ("combinations_empty", lambda m, t: m.combinations(t), (np.zeros(0, np.float32),), True),
    ("combinations_bool", lambda m, t: m.combinations(t), (np.array([True, False]),), True),
    ("isin", lambda m, a, b: m.isin(a, b), (np.array([1, 2, 3]), np.array([2, 5])), True),
    ("isin_scalar_test", lambda m, a: m.isin(a, 2), (np.array([1, 2, 3]),), True),
    ("isin_scalar_element", lambda m, a: m.isin(2, a), (np.array([1, 2, 3]),), True),
    ("isin_nan", lambda m, a, b: m.isin(a, b), (np.array([1., 2, NAN]), np.array([2., NAN])),
     True),
    ("isin_promotes", lambda m, a, b: m.isin(a, b), (np.array([1, 2]), np.array([2.5, 1.])),
     True),
    ("isin_0d_test_does_not_widen", lambda m, a, b: m.isin(a, b),
     (np.array([0.1], np.float32), np.array(0.1)), True),
    ("isin_scalar_float", lambda m, a: m.isin(a, 2.5), (np.array([1, 2]),), True),
    ("isin_invert_broadcast", lambda m, a, b: m.isin(a, b, invert=True),
     (np.array([[1, 2], [3, 4]]), np.array([[4]])), True),
    ("isin_empty_test", lambda m, a, b: m.isin(a, b), (np.array([1]), np.zeros(0, np.int64)),
     True),
    ("isin_empty_elements", lambda m, a, b: m.isin(a, b, assume_unique=True),
     (np.zeros((0, 2), np.int64), np.array([1])), True),
    ("isin_bool", lambda m, a, b: m.isin(a, b), (np.array([True]), np.array([1])), True),
    ("isin_numbers", lambda m: m.isin(2, 3), (), True),
    # distances and number theory
    ("dist_broadcast", lambda m, a, b: m.dist(a, b), (np.array([1., 2]), np.array([[1.], [3]])),
     False),
    *[(f"dist_p{p}", lambda m, a, b, p=p: m.dist(a, b, p),
       (np.array([1., 2, 5]), np.array([[1.], [3]])), False)
      for p in (0, 1, 3, 0.5, INF, -INF, -1)],
    ("dist_mixed_dtypes", lambda m, a, b: a.dist(b), (np.array([1., 2], np.float32),
                                                     np.array([1, 3])), False),
    ("dist_float64", lambda m, a, b: a.dist(b), (np.array([1., 2], np.float32),
                                                np.array([1., 3])), False),
    ("dist_empty", lambda m, a, b: a.dist(b), (np.zeros(0, np.float32),) * 2, False),
    ("dist_int", lambda m, a, b: m.dist(a, b), (np.array([1, 2]), np.array([1, 3])), False),
    ("dist_mismatch", lambda m, a, b: a.dist(b), (np.array([1., 2]), np.array([1., 3, 4])),
     False),
    ("dist_number", lambda m, a: a.dist(1.0), (np.array([1., 2]),), False),
    ("gcd", lambda m, a, b: m.gcd(a, b), (np.array([12, -18, 0, 0, 7, 3 * 2 ** 40, 1071]),
                                         np.array([18, 12, 0, -5, 0, 9 * 2 ** 41, 462])), True),
    ("gcd_fibonacci_worst_case", lambda m, a, b: m.gcd(a, b),
     (np.array([7540113804746346429]), np.array([4660046610375530309])), True),
    ("gcd_int32_worst_case", lambda m, a, b: a.gcd(b),
     (np.array([1836311903, 12], np.int32), np.array([1134903170, 18], np.int32)), True),
    ("gcd_mixed_ints", lambda m, a, b: m.gcd(a, b), (np.array([12], np.int32), np.array([18])),
     True),
    ("gcd_broadcast", lambda m, a, b: m.gcd(a, b), (np.array([[4], [9]]), np.array([6, 3])),
     True),
    ("gcd_0d", lambda m, a, b: m.gcd(a, b), (np.array(12, np.int32), np.array([18], np.int32)),
     True),
    ("gcd_float", lambda m, a, b: m.gcd(a, b), (np.array([12.]), np.array([18.])), True),
    ("gcd_bool", lambda m, a, b: m.gcd(a, b), (np.array([True]), np.array([True])), True),
    ("gcd_number", lambda m, a: m.gcd(a, 3), (np.array([12]),), True),
    ("lcm", lambda m, a, b: m.lcm(a, b), (np.array([4, -6, 0, 0, 2 ** 40]),
                                         np.array([6, 4, 0, 5, 3 * 2 ** 30])), True),
    ("gcd_", lambda m, a, b: a.gcd_(b), (np.array([4, 9]), np.array([6, 6])), True),
    ("lcm_", lambda m, a, b: m.lcm_(a, b), (np.array([4, 9]), np.array([6, 6])), True),
    ("lcm_float_into_long", lambda m, a, b: a.lcm_(b), (np.array([4]), np.array([6.])), True),
    ("frexp", lambda m, a: m.frexp(a), (SPECIAL,), True),
    ("frexp_float64", lambda m, a: m.frexp(a), (np.array(
        [0., -0., 1., 0.3, INF, NAN, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
         1 - 2 ** -53, 2. ** 1023]),), True),
    ("frexp_bfloat16", lambda m, a: m.frexp(a.to(m.bfloat16)), (SPECIAL,), True),
    ("frexp_method_0d", lambda m, a: a[3].frexp(), (SPECIAL,), True),
    ("frexp_int", lambda m, a: m.frexp(a), (np.array([1]),), True),
    ("ldexp", lambda m, a, b: m.ldexp(a, b), (np.array([1., 2., 3.], np.float32),
                                             np.array([3, -1, 200])), True),
    ("ldexp_ints", lambda m, a, b: m.ldexp(a, b), (np.array([1, 2]), np.array([3, -1])), True),
    ("ldexp_float_exponent", lambda m, a, b: a.ldexp(b), (np.array([1, 2]), np.array([3., -1])),
     True),
    ("ldexp_float64", lambda m, a, b: m.ldexp(a, b), (np.array([1.], np.float32),
                                                     np.array([3.])), True),
    ("ldexp_bool", lambda m, a, b: a.ldexp(b), (np.array([True]), np.array([2])), True),
    ("ldexp_number", lambda m, a: m.ldexp(a, 3), (np.array([1.]),), True),
    ("ldexp_", lambda m, a, b: m.ldexp_(a, b), (np.array([1.], np.float32), np.array([2])), True),
    ("ldexp_into_long", lambda m, a, b: a.ldexp_(b), (np.array([1]), np.array([2])), True),
    ("nextafter", lambda m, a, b: m.nextafter(a, b), (NX, NY), True),
    ("nextafter_float64", lambda m, a, b: m.nextafter(a, b), (NX.astype(np.float64),
                                                             NY.astype(np.float64)), True),
    ("nextafter_float64_tiny", lambda m, a, b: m.nextafter(a, b),
     (NX.astype(np.float64) * 1e-300, NY.astype(np.float64)), True),
    ("nextafter_bfloat16", lambda m, a, b: m.nextafter(a.to(m.bfloat16), b.to(m.bfloat16)),
     (NX[[0, 1, 3, 12, 14, 15, 16]], NY[[0, 1, 3, 12, 14, 15, 16]]), True),
    ("nextafter_promotes", lambda m, a, b: a.nextafter(b), (np.array([1.], np.float32),
                                                           np.array([2.])), True),
    ("nextafter_broadcast", lambda m, a, b: m.nextafter(a, b), (np.array([[1.], [2.]]),
                                                               np.array([0., 3.])), True),
    ("nextafter_int", lambda m, a, b: m.nextafter(a, b), (np.array([1]), np.array([2])), True),
    ("nextafter_number", lambda m, a: m.nextafter(a, 2.), (np.array([1.]),), True),
    # calculus
    ("gradient", lambda m, t: m.gradient(t), (T24,), False),
    ("gradient_dim", lambda m, t: m.gradient(t, dim=1), (T24,), False),
    ("gradient_negative_dim", lambda m, t: m.gradient(t, dim=(-1,)), (T24,), False),
    ("gradient_spacing", lambda m, t: m.gradient(t, spacing=2.0), (T24,), False),
    ("gradient_spacing_list", lambda m, t: m.gradient(t, spacing=[2.0, 0.5]), (T24,), False),
    ("gradient_spacing_0d_tensor", lambda m, t: m.gradient(t, spacing=m.tensor(2.0)), (T24,),
     False),
    ("gradient_coordinates", lambda m, t: m.gradient(
        t, spacing=(m.tensor([0., 2.]), m.tensor([0., 1., 3., 4.]))), (T24,), False),
    ("gradient_coordinates_edge2", lambda m, t: m.gradient(
        t, spacing=(m.tensor([0., 1., 3., 4.]),), dim=1, edge_order=2), (T24,), False),
    ("gradient_int_coordinates", lambda m, t: m.gradient(
        t, spacing=[m.tensor([1, 2, 3, 5])], dim=1, edge_order=2), (T24,), False),
    ("gradient_edge2", lambda m, t: m.gradient(t, dim=1, edge_order=2), (T24,), False),
    ("gradient_3d_edge2", lambda m, t: m.gradient(t * t, edge_order=2),
     (np.arange(60, dtype=np.float32).reshape(3, 4, 5) / 7,), False),
    ("gradient_int", lambda m, t: m.gradient(t), (np.array([1, 2, 4]),), False),
    ("gradient_int_spacing", lambda m, t: m.gradient(t, spacing=2), (np.array([1, 2, 4]),),
     False),
    ("gradient_int_edge2", lambda m, t: m.gradient(t, edge_order=2), (np.array([1, 2, 4, 9]),),
     False),
    ("gradient_float64", lambda m, t: m.gradient(t, spacing=0.1), (T24.astype(np.float64),),
     False),
    ("gradient_0d", lambda m, t: m.gradient(t), (np.array(1.),), False),
    ("gradient_too_short", lambda m, t: m.gradient(t, edge_order=2), (T24,), False),
    ("gradient_one_element", lambda m, t: m.gradient(t), (np.array([1.]),), False),
    ("gradient_edge3", lambda m, t: m.gradient(t, edge_order=3), (T24,), False),
    ("gradient_tensor_spacing", lambda m, t: m.gradient(t, spacing=m.tensor([1, 2, 4])),
     (np.array([1, 2, 4]),), False),
    ("gradient_spacing_length", lambda m, t: m.gradient(t, spacing=[2.0]), (T24,), False),
    ("gradient_spacing_dim_length", lambda m, t: m.gradient(t, spacing=[2.0], dim=(0, 1)),
     (T24,), False),
    ("gradient_repeated_dim", lambda m, t: m.gradient(t, dim=[0, 0]), (T24,), False),
    ("gradient_dim_out_of_range", lambda m, t: m.gradient(t, dim=2), (T24,), False),
    ("gradient_bool", lambda m, t: m.gradient(t), (np.array([True, False]),), False),
    ("gradient_0d_coordinates", lambda m, t: m.gradient(t, spacing=[m.tensor(2.)], dim=1),
     (T24,), False),
    ("gradient_2d_coordinates", lambda m, t: m.gradient(
        t, spacing=[m.tensor([[1., 2, 3, 4]])], dim=1), (T24,), False),
    ("trace", lambda m, t: m.trace(t), (np.arange(6).reshape(2, 3),), True),
    ("trace_int32", lambda m, t: m.trace(t), (np.arange(6, dtype=np.int32).reshape(2, 3),), True),
    ("trace_tall", lambda m, t: t.trace(), (np.arange(12.).reshape(4, 3),), True),
    ("trace_empty", lambda m, t: m.trace(t), (np.ones((0, 3), np.float32),), True),
    ("trace_bfloat16", lambda m, t: m.trace(t.to(m.bfloat16)), (M23,), True),
    ("trace_bool", lambda m, t: m.trace(t), (np.ones((2, 3), bool),), True),
    ("trace_1d", lambda m, t: m.trace(t), (np.ones(3),), True),
    ("rsub", lambda m, a, b: m.rsub(a, b, alpha=2), (np.array([1., 2.]), np.array([3., 4.])),
     True),
    ("rsub_number", lambda m, a: m.rsub(a, 3), (np.array([1., 2.], np.float32),), True),
    ("rsub_int_float", lambda m, a: m.rsub(a, 3.5), (np.array([1, 2]),), True),
    ("rsub_broadcast", lambda m, a, b: m.rsub(a, b), (np.array([[1], [2]]), np.array([3, 4])),
     True),
    ("rsub_float_alpha", lambda m, a: m.rsub(a, 3, alpha=0.5), (np.array([1, 2]),), True),
    ("rsub_bools", lambda m, a, b: m.rsub(a, b), (np.array([True]), np.array([True])), True),
    ("rsub_number_input", lambda m, a: m.rsub(3, a), (np.array([1, 2]),), True),
    # predicates, dtypes
    ("allclose", lambda m, a, b: m.allclose(a, b), (T24, T24 + 1e-7), True),
    ("allclose_broadcast", lambda m, a, b: a.allclose(b), (T24, T24[:1]), True),
    ("allclose_tolerances", lambda m, a, b: m.allclose(a, b, rtol=0, atol=0.5), (T24, T24 + 0.4),
     True),
    ("allclose_nan", lambda m, a: (m.allclose(a, a), m.allclose(a, a, equal_nan=True)),
     (np.array([NAN]),), True),
    ("allclose_dtypes", lambda m, a, b: m.allclose(a, b), (T24, T24.astype(np.float64)), True),
    ("allclose_mismatch", lambda m, a, b: a.allclose(b), (T24, T24[:, :2]), True),
    ("allclose_number", lambda m, a: m.allclose(a, 1.0), (T24,), True),
    ("equal", lambda m, a, b: (m.equal(a, b), a.equal(a)), (np.array([1, 2]),
                                                           np.array([1., 2.])), True),
    ("equal_shape", lambda m, a, b: m.equal(a, b), (np.array([1, 2]), np.array([[1, 2]])), True),
    ("equal_nan", lambda m, a: m.equal(a, a), (np.array([NAN]),), True),
    ("equal_empty", lambda m, a: m.equal(a, a[:0]) and a[:0].equal(a[:0]), (T24,), True),
    ("equal_number", lambda m, a: m.equal(a, 1), (np.array([1]),), True),
    ("is_signed", lambda m, a, b: (m.is_signed(a), b.is_signed()), (np.array([True]),
                                                                   np.array([1])), True),
    ("is_signed_number", lambda m: m.is_signed(1), (), True),
    ("is_tensor", lambda m, a: (m.is_tensor(a), m.is_tensor([1]), m.is_tensor(1.0)),
     (np.array([1]),), True),
    ("is_same_size", lambda m, a: (a.is_same_size(a * 2), m.is_same_size(a, a.T),
                                   a.is_same_size(a.reshape(1, 2, 4))), (T24,), True),
    ("positive", lambda m, a: m.positive(a), (T24,), True),
    ("positive_bool", lambda m, a: a.positive(), (np.array([True]),), True),
    ("sgn", lambda m, a: (m.sgn(a), a.long().sgn(), (a > 0).sgn()),
     (np.array([-2., 0, 3, NAN]),), True),
    ("rsqrt_", lambda m, a: (a.rsqrt_(), m.rsqrt_(a)), (np.array([4., 0.25], np.float32),), True),
    ("rsqrt_into_long", lambda m, a: a.rsqrt_(), (np.array([4]),), True),
    ("sum_to_size", lambda m, a: (a.sum_to_size(3, 1), a.sum_to_size((1, 3, 1)),
                                  a.sum_to_size([4]), a.sum_to_size(1, 1)), (Y234,), True),
    ("sum_to_size_same", lambda m, a: a.sum_to_size(2, 3, 4) is a, (Y234,), True),
    ("sum_to_size_0d", lambda m, a: a.sum_to_size(()), (np.array(3.),), True),
    ("sum_to_size_bool", lambda m, a: a.sum_to_size(1), (np.array([True, True]),), True),
    ("sum_to_size_int32", lambda m, a: a.sum_to_size(1), (np.array([1, 2], np.int32),), True),
    ("sum_to_size_not_expandable", lambda m, a: a.sum_to_size(2, 4), (Y234,), True),
    ("sum_to_size_more_dims", lambda m, a: a.sum_to_size(1, 2, 3, 4), (Y234,), True),
    ("sum_to_size_nothing", lambda m, a: a.sum_to_size(), (Y234,), True),
    ("stride", lambda m, a: (a.stride(), a.stride(1), a.stride(-1), a.transpose(0, 2).stride(),
                             a[:, None].stride(), a.expand(5, 2, 3, 4).stride(),
                             a[:, :, 1].stride(), a[:, ::2].stride(), a[0].t().stride()),
     (Y234,), True),
    ("stride_shapes", lambda m, a: (a.stride(), m.zeros(2, 1, 3).stride(),
                                    m.zeros(0, 3).stride(), m.zeros(2, 0, 3).stride()),
     (np.array(1.),), True),
    ("stride_dim_out_of_range", lambda m, a: a.stride(3), (Y234,), True),
    ("stride_0d_dim", lambda m, a: a.stride(0), (np.array(1.),), True),
    ("sizes", lambda m, a: (a.nbytes, a.itemsize, a.is_cpu, a.int().itemsize, a.double().nbytes,
                            a.bool().nbytes, a[:0].nbytes, a.expand(3, 2, 3, 4).nbytes),
     (Y234,), True),
    ("data_ptr", lambda m, a: (a[1:].data_ptr() - a.data_ptr(),
                               a[1, 2].data_ptr() - a.data_ptr(),
                               a.t().data_ptr() == a.data_ptr() if a.ndim == 2 else True),
     (Y234,), True),
    # in-place and scatter-like methods
    *[(f"fill_diagonal_{'x'.join(map(str, s))}{'_wrap' if w else ''}",
       lambda m, a, w=w: a.fill_diagonal_(5, wrap=w), (np.zeros(s, np.float32),), True)
      for s, w in [((3, 4), False), ((7, 3), True), ((7, 3), False), ((2, 2, 2), False),
                   ((3, 3, 3), False), ((4, 3), True), ((3, 7), True)]],
    ("fill_diagonal_unequal", lambda m, a: a.fill_diagonal_(1), (np.zeros((2, 3, 2)),), True),
    ("fill_diagonal_1d", lambda m, a: a.fill_diagonal_(1), (np.zeros(2),), True),
    ("fill_diagonal_long", lambda m, a: a.fill_diagonal_(1.5), (np.zeros((2, 2), np.int64),),
     True),
    ("fill_diagonal_bool", lambda m, a: a.fill_diagonal_(1), (np.zeros((2, 2), bool),), True),
    ("fill_diagonal_leaf", lambda m, a: a.requires_grad_().fill_diagonal_(1),
     (np.zeros((2, 2), np.float32),), True),
    ("masked_scatter", lambda m, a, k, s: a.masked_scatter(k, s), (M23 * 0, MASK, M23 + 1), True),
    ("masked_scatter_broadcast", lambda m, a, k, s: m.masked_scatter(a, k[0], s),
     (M23 * 0, MASK, M23 + 1), True),
    ("masked_scatter_mask_wider", lambda m, a, k, s: a[0].masked_scatter(k, s),
     (M23 * 0, MASK, M23 + 1), True),
    ("masked_scatter_ints", lambda m, a, k: a.masked_scatter(k, m.tensor([7, 8, 9])),
     (np.zeros((2, 3), np.int64), MASK), True),
    ("masked_scatter_bools", lambda m, a, k: a.masked_scatter(k, m.tensor([True, True, True])),
     (np.zeros((2, 3), bool), MASK), True),
    ("masked_scatter_no_true_empty_source", lambda m, a, k, s: a.masked_scatter(k & False, s[:0]),
     (M23, MASK, M23), True),
    ("masked_scatter_short_source", lambda m, a, k, s: a.masked_scatter(k, s[0, :2]),
     (M23, MASK, M23), True),
    ("masked_scatter_dtype", lambda m, a, k, s: a.masked_scatter(k, s.long()), (M23, MASK, M23),
     True),
    ("masked_scatter_long_mask", lambda m, a, k, s: a.masked_scatter(k.long(), s),
     (M23, MASK, M23), True),
    ("masked_scatter_", lambda m, a, k, s: a.masked_scatter_(k[:1], s), (M23 * 0, MASK, M23 + 1),
     True),
    ("masked_scatter__mask_wider", lambda m, a, k, s: a[0].masked_scatter_(k, s),
     (M23, MASK, M23), True),
    *[(f"index_reduce_{r}{'' if inc else '_exclude_self'}",
       lambda m, a, i, s, r=r, inc=inc: a.index_reduce(0, i, s, r, include_self=inc),
       (FIVE, IDX, SRC), False)
      for r in ("prod", "mean", "amax", "amin") for inc in (True, False)],
    ("index_reduce_dim1_int32", lambda m, a: a.index_reduce(
        1, m.tensor([0, 2], dtype=m.int32), m.ones(5, 2) * 3, "prod"), (FIVE,), False),
    ("index_reduce_negative_dim", lambda m, a: m.index_reduce(
        a, -1, m.tensor([0, 0]), m.arange(10.).reshape(5, 2), "amax", include_self=False),
     (FIVE,), False),
    ("index_reduce_int_mean_floors", lambda m, a: a.long().index_reduce(
        0, m.tensor([0, 0]), m.tensor([[3, 4, 5], [2, 2, 2]]), "mean"), (FIVE,), False),
    ("index_reduce_", lambda m, a, i, s: a.index_reduce_(0, i, s, "mean"), (FIVE, IDX, SRC),
     False),
    ("index_reduce_sum", lambda m, a, i, s: a.index_reduce(0, i, s, "sum"), (FIVE, IDX, SRC),
     False),
    ("index_reduce_float_index", lambda m, a, i, s: a.index_reduce(0, i.float(), s, "prod"),
     (FIVE, IDX, SRC), False),
    ("index_reduce_dtypes", lambda m, a, i, s: a.index_reduce(0, i, s.double(), "prod"),
     (FIVE, IDX, SRC), False),
    ("index_reduce_out_of_range", lambda m, a: a.index_reduce(0, m.tensor([5]), m.ones(1, 3),
                                                              "prod"), (FIVE,), False),
    ("index_reduce_negative_index", lambda m, a: a.index_reduce(0, m.tensor([-1]), m.ones(1, 3),
                                                                "prod"), (FIVE,), False),
    ("index_reduce_2d_index", lambda m, a: a.index_reduce(0, m.tensor([[0]]), m.ones(1, 3),
                                                          "prod"), (FIVE,), False),
    ("index_reduce_count", lambda m, a: a.index_reduce(0, m.tensor([0]), m.ones(2, 3), "prod"),
     (FIVE,), False),
    ("prelu", lambda m, a, w: m.prelu(a, w), (np.array([[-1., 2.], [3., -4.]], np.float32),
                                             np.array([0.1, 0.2], np.float32)), True),
    ("prelu_one_weight", lambda m, a, w: a.prelu(w), (np.array([[-1., 2.], [3., -4.]]),
                                                     np.array([0.1])), True),
    ("prelu_0d", lambda m, a, w: a.prelu(w), (np.array(-1., np.float32),
                                             np.array([0.1], np.float32)), True),
    ("prelu_1d_one_channel", lambda m, a, w: a.prelu(w), (np.array([-1., 2.], np.float32),
                                                         np.array([0.1, 0.3], np.float32)), True),
    ("prelu_0d_many", lambda m, a, w: a.prelu(w), (np.array(-1., np.float32),
                                                  np.array([0.1, 0.3], np.float32)), True),
    ("prelu_int", lambda m, a, w: a.prelu(w), (np.array([-1, 2]), np.array([1])), True),
    ("prelu_2d_weight", lambda m, a, w: a.prelu(w), (np.array([-1., 2]), np.array([[1.]])), True),
    ("hardshrink", lambda m, a: (m.hardshrink(a, 0.5), a.hardshrink(lambd=0.2), a.hardshrink()),
     (np.array([0.3, -1., 0.5, -0.5, NAN], np.float32),), True),
    ("hardshrink_int", lambda m, a: a.hardshrink(), (np.array([1, 2]),), True),
    ("inplace_forms", lambda m, a: (m.relu_(a.clone()), m.exp_(a.clone()), m.square_(a.clone()),
                                    m.clamp_(a.clone(), -1, 1), m.zero_(a.clone()),
                                    m.fill_(a.clone(), 3.0), m.sigmoid_(a.clone())),
     (np.array([-2., 0.5, 3.], np.float32),), False),
]


@pytest.mark.parametrize("case", EAGER, ids=[c[0] for c in EAGER])
def test_eager_matches_torch(case: Any) -> None:
    _, f, data, exact = case
    agree(f, *data, exact=exact)


# -- values and gradients, eagerly and compiled -------------------------------------------------
# (id, f(module, x)) with x of shape (batch, 3, 4): the parity harness of test_composite_ops
GRAD = [
    ("tensor_split", lambda m, x: m.cat([t.sum(-1) for t in m.tensor_split(x, 3, dim=2)], 1)),
    ("hsplit", lambda m, x: m.cat(m.hsplit(x, [1, 2]), 1) * 2),
    ("vsplit_dsplit", lambda m, x: m.stack([t.sum() for t in m.dsplit(x, 2)
                                            + x.transpose(0, 1).vsplit([1])])),
    ("split_with_sizes", lambda m, x: x.split_with_sizes([1, 3], 2)[1] * 3),
    ("dist", lambda m, x: m.dist(x, x.flip(0) * 0.5) + x.dist(x[0], 3)
     + m.dist(x, x[:, :1], INF)),
    ("gradient", lambda m, x: m.cat(m.gradient(x, dim=(1, 2)), 0)),
    ("gradient_batch_dim", lambda m, x: m.gradient(x, dim=0)[0]),
    ("gradient_edge2", lambda m, x: m.gradient(x, spacing=[0.5, 2.0], dim=[1, -1],
                                               edge_order=2)[1]),
    ("gradient_coordinates", lambda m, x: m.gradient(
        x, spacing=[m.tensor([0., 1., 3., 4.5])], dim=2, edge_order=2)[0]
     + m.gradient(x, spacing=(m.tensor([0., 1., 3.]),), dim=1)[0]),
    ("trace", lambda m, x: m.trace(x[0]) + x[1].trace()),
    ("rsub", lambda m, x: m.rsub(x, 2.0, alpha=3) + m.rsub(x, x * x)),
    ("frexp_ldexp", lambda m, x: m.frexp(x * 3)[0] + m.ldexp(x, m.tensor([1, 2, 0, 3]))
     + m.ldexp(x, x[0].detach())),
    ("masked_scatter", lambda m, x: x.masked_scatter(x > 0, x.flip(2) * 2)),
    ("index_reduce", lambda m, x: x.index_reduce(1, m.tensor([0, 2, 0]), x.flip(1) + 1, "prod")
     + x.index_reduce(2, m.tensor([3, 0]), x[:, :, :2] * 2, "amax", include_self=False)
     + x.index_reduce(1, m.tensor([1, 1]), x[:, :2], "mean")),
    ("prelu_hardshrink", lambda m, x: x.prelu(m.tensor([0.1, 0.2, 0.3])) + m.hardshrink(x, 0.4)),
    ("combinations", lambda m, x: m.combinations(x[0, 0], 2).prod(-1) + 0 * x.sum()),
    ("sum_to_size", lambda m, x: x.sum_to_size(1, 3, 1) * 2),
    ("nextafter", lambda m, x: m.nextafter(x, x.flip(-1)) * x),
    ("unravel_isin_window", lambda m, x: x * m.isin(m.unravel_index(m.arange(4), (2, 2))[0],
                                                    m.tensor([1])) * m.hann_window(4)),
]


@pytest.mark.parametrize("case", GRAD, ids=[c[0] for c in GRAD])
def test_values_and_gradients_eager_and_compiled(case: Any) -> None:
    _, f = case
    check_eager(f, (3, 4), 1e-5, 1e-5, 1e-4, 1e-5)
    check_compiled(f, (3, 4), 1e-4, 1e-5)


def test_ldexp_gradient_is_two_to_the_exponent() -> None:
    """PyTorch's derivative evaluates ``2 ** other`` in integers for an integer ``other``
    (0 where it is negative); graphc's is the power itself, as PyTorch's for float ``other``."""
    x = gc.tensor([1., 3., 5.], requires_grad=True)
    gc.ldexp(x, gc.tensor([1, -2, 0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2., 0.25, 1.])
    tx = torch.tensor([1., 3., 5.], requires_grad=True)
    torch.ldexp(tx, torch.tensor([1., -2., 0.])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_nextafter_and_normal_gradients_are_pytorchs() -> None:
    """``nextafter``: 1 for ``input``, 0 for ``other``; ``normal``: 0 for mean and std (the
    results still require grad, as in PyTorch)."""
    for m in (torch, gc):
        x = m.tensor([1., 3.], requires_grad=True)
        y = m.tensor([2., 0.], requires_grad=True)
        (m.nextafter(x, y) * m.tensor([2., 3.])).sum().backward()
        np.testing.assert_array_equal(_np(x.grad), [2., 3.])
        np.testing.assert_array_equal(_np(y.grad), [0., 0.])
        mu, sd = m.zeros(3, requires_grad=True), m.ones(3, requires_grad=True)
        outs = [m.normal(mu, sd), m.normal(mu, 2.0), m.normal(1.0, sd)]
        assert all(o.requires_grad for o in outs)
        sum(o.sum() for o in outs).backward()
        np.testing.assert_array_equal(_np(mu.grad), np.zeros(3))
        np.testing.assert_array_equal(_np(sd.grad), np.zeros(3))


def test_float64_compiled_matches_torch() -> None:
    rng = np.random.default_rng(6)
    p0 = rng.standard_normal((3, 4))
    param = nn.Parameter(gc.tensor(p0))

    def f(m: Any, x: Any) -> Any:
        return (m.gradient(x, spacing=0.25, edge_order=2)[2] + m.dist(x, x.flip(0), 1.5)
                + m.frexp(x)[0] * m.ldexp(x, x.detach()))

    @gc.compile
    def step(x: Any) -> Any:
        param.grad = None
        y = f(gc, x * param)
        (y * y + y).sum().backward()
        return y

    for batch in (3, 5):
        x = rng.standard_normal((batch, 3, 4))
        tp = torch.tensor(p0, requires_grad=True)
        ty = f(torch, torch.tensor(x) * tp)
        (ty * ty + ty).sum().backward()
        np.testing.assert_allclose(step(gc.tensor(x)).numpy(), ty.detach().numpy(), rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(param.grad.numpy(), tp.grad.numpy(), rtol=1e-9, atol=1e-11)
    assert step.compile_count == 1


def test_bit_level_functions_compiled_as_eager() -> None:
    """``frexp``, ``nextafter``, ``gcd``/``lcm`` compiled: PyTorch's values bit for bit on the
    special values (zeros' signs, denormals, infinities, NaN, the largest floats, Euclid's
    worst case)."""
    step = gc.compile(lambda a, b: (gc.nextafter(a, b), *gc.frexp(a)))
    for d in (np.float32, np.float64):
        for scale in (1.0, 1e-300) if d is np.float64 else (1.0,):
            a, b = NX.astype(d) * scale, NY.astype(d)
            want = (torch.nextafter(torch.tensor(a), torch.tensor(b)),
                    *torch.frexp(torch.tensor(a)))
            _same(step(a, b), want, 0, 0, exact=True)
    ints = gc.compile(lambda a, b: (gc.gcd(a, b), gc.lcm(a, b)))
    a = np.array([12, -18, 0, 0, 7, 3 * 2 ** 40, 7540113804746346429])
    b = np.array([18, 12, 0, -5, 0, 9 * 2 ** 41, 4660046610375530309])
    _same(ints(a, b), (torch.gcd(torch.tensor(a), torch.tensor(b)),
                       torch.lcm(torch.tensor(a), torch.tensor(b))), 0, 0, exact=True)


# -- windows ------------------------------------------------------------------------------------
WINDOWS = ["bartlett_window", "blackman_window", "hamming_window", "hann_window",
           "kaiser_window"]


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_windows_are_pytorchs(name: str, dtype: str) -> None:
    """ATen's arithmetic step by step in the window's dtype: PyTorch's values, exactly where
    no transcendental function is involved and in bfloat16, else to numpy's cos (or float64
    Bessel function) against SLEEF's: an ulp of float32."""
    exact = dtype == "bfloat16" or name == "bartlett_window"
    tol = {"float32": (1e-6, 1e-7), "float64": (1e-13, 1e-15)}.get(dtype, (0, 0))
    for n in (0, 1, 2, 3, 5, 8, 33):
        for periodic in (True, False):
            want = getattr(torch, name)(n, periodic, dtype=getattr(torch, dtype))
            got = getattr(gc, name)(n, periodic, dtype=getattr(gc, dtype))
            _same(got, want, *tol, exact=exact)
    agree(lambda m: getattr(m, name)(-1))
    agree(lambda m: getattr(m, name)(3, dtype=m.long))
    agree(lambda m: getattr(m, name)(3.0))
    assert getattr(gc, name)(4, requires_grad=True).requires_grad


def test_window_parameters() -> None:
    agree(lambda m: m.hamming_window(5, False, 0.5, 0.4), exact=True)
    agree(lambda m: m.kaiser_window(7, False, 3.0), rtol=1e-6)
    agree(lambda m: m.hann_window(6, dtype=m.float64), exact=True)


# -- normal and the generator's state ----------------------------------------------------------
def _seeded(f: Any) -> Any:
    def g(m: Any, *a: Any) -> Any:
        m.manual_seed(3)
        return f(m, *a)
    return g


NORMAL = [
    ("tensor_mean", lambda m, a: m.normal(a, 2.0), (np.arange(5, dtype=np.float32),)),
    ("tensor_mean_16_or_more", lambda m, a: m.normal(a, 2.0), (np.arange(40, dtype=np.float32),)),
    ("tensor_mean_float64", lambda m, a: m.normal(a, 0.5), (np.arange(40.),)),
    ("tensor_std", lambda m, a: m.normal(1.5, a), (np.arange(20, dtype=np.float32),)),
    ("both_broadcast", lambda m, a, b: m.normal(a, b), (np.arange(3, dtype=np.float32)[:, None],
                                                        np.arange(1, 7, dtype=np.float32))),
    ("both_mean_dtype", lambda m, a, b: (m.normal(a, b), m.normal(b, a)),
     (np.arange(20, dtype=np.float32), np.arange(20.) / 7)),
    ("integer_std", lambda m, a, b: m.normal(a, b), (np.arange(3, dtype=np.float32),
                                                     np.arange(3))),
    ("size", lambda m: m.normal(2.0, 3.0, size=(4, 5)), ()),
    ("size_float64", lambda m: m.normal(2.0, 3.0, (17,), dtype=m.float64), ()),
    ("size_ints", lambda m: m.normal(0, 1, (3,)), ()),
    ("keywords", lambda m, a: (m.normal(mean=a), m.normal(a, std=a + 1)),
     (np.zeros(3, np.float32),)),
    ("empty", lambda m, a: m.normal(a, 1.), (np.zeros((0, 3), np.float32),)),
    ("0d", lambda m, a: m.normal(a, 1.), (np.array(2., np.float32),)),
    ("generator", lambda m, a: (m.normal(a, 1., generator=m.Generator().manual_seed(5)),
                                m.normal(0., 1., (20,), generator=m.Generator().manual_seed(5))),
     (np.zeros(3, np.float32),)),
    ("long_mean", lambda m, a: m.normal(a, 1.0), (np.zeros(3, np.int64),)),
    ("long_std", lambda m, a: m.normal(1.0, a), (np.ones(3, np.int64),)),
    ("negative_std", lambda m, a: m.normal(a, -1.0), (np.zeros(3, np.float32),)),
    ("negative_std_tensor", lambda m, a: m.normal(a, -a - 1), (np.zeros(3, np.float32),)),
    ("negative_std_tensor_float_mean", lambda m, a: m.normal(0.0, -a - 1),
     (np.zeros(3, np.float32),)),
    ("negative_std_size", lambda m: m.normal(0.0, -1.0, (2,)), ()),
    ("numbers_without_size", lambda m: m.normal(0.0, 1.0), ()),
    ("tensor_with_size", lambda m, a: m.normal(a, 1.0, (2,)), (np.zeros(2, np.float32),)),
    ("mismatched_shapes", lambda m, a, b: m.normal(a, b), (np.zeros(3, np.float32),
                                                           np.ones(4, np.float32))),
]


@pytest.mark.parametrize("case", NORMAL, ids=[c[0] for c in NORMAL])
def test_normal_is_pytorchs(case: Any) -> None:
    """PyTorch's values after the same seed, to the last few bits (graphc's ``normal_`` fill
    computes Box-Muller with numpy's log/cos/sin, PyTorch with SLEEF's: a few float32 ulps
    apart), dtypes, shapes and errors."""
    _, f, data = case
    agree(_seeded(f), *data, rtol=2e-6, atol=1e-6)


def test_normal_is_graphcs_fill_bit_for_bit() -> None:
    """The overloads are ATen's composition of the fill: ``normal_(0, std) + mean``,
    ``normal_(0, 1) * std + mean``."""
    mean = gc.arange(20).float()
    std = gc.arange(20).float() / 7
    gc.manual_seed(2)
    got = [gc.normal(mean, 2.0), gc.normal(1.5, std), gc.normal(mean, std),
           gc.normal(0.5, 2.0, (20,))]
    gc.manual_seed(2)
    want = [gc.empty(20).normal_(0, 2.0) + mean, gc.empty(20).normal_() * std + 1.5,
            gc.empty(20).normal_() * std + mean, gc.empty(20).normal_(0.5, 2.0)]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_normal_in_a_compiled_step_draws_each_call_as_eager_does() -> None:
    def f(x: Any) -> Any:
        return (gc.normal(x, 2.0), gc.normal(0.5, 2.0, (3,)), gc.normal(1.0, x.abs() + 1),
                gc.normal(x, x.abs()))

    step = gc.compile(f)
    xs = [np.linspace(-1, 1, n * 3, dtype=np.float32).reshape(n, 3) for n in (2, 2, 6)]
    gc.manual_seed(4)
    eager = [f(gc.tensor(x)) for x in xs]
    gc.manual_seed(4)
    got = [step(x) for x in xs]
    for e, g in zip(eager, got):
        np.testing.assert_array_equal(g[0].numpy(), e[0].numpy())  # the draws themselves
        np.testing.assert_array_equal(g[1].numpy(), e[1].numpy())
        for a, b in zip(g[2:], e[2:]):  # a compiled multiply-add may round once
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
    assert not np.array_equal(got[0][0].numpy(), got[1][0].numpy())
    assert step.compile_count == 1


def test_rng_state_round_trip_repeats_the_draws() -> None:
    gc.manual_seed(5)
    gc.randn(3)  # leaves the cached second normal sample in the state
    state = gc.get_rng_state()
    assert state.dtype is gc.int64
    first = [gc.randn(3), gc.rand(20), gc.randn(40), gc.randint(0, 9, (4,)),
             gc.nn.functional.dropout(gc.ones(8), 0.5)]
    gc.manual_seed(9)
    gc.set_rng_state(state)
    again = [gc.randn(3), gc.rand(20), gc.randn(40), gc.randint(0, 9, (4,)),
             gc.nn.functional.dropout(gc.ones(8), 0.5)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert gc.initial_seed() == 5
    # a compiled step draws from the restored stream too
    step = gc.compile(lambda x: x + gc.randn(x.shape[0]))
    state = gc.get_rng_state()
    one = step(np.zeros(4, np.float32)).numpy()
    gc.set_rng_state(state)
    np.testing.assert_array_equal(step(np.zeros(4, np.float32)).numpy(), one)


def test_rng_state_errors_and_seed() -> None:
    with pytest.raises(TypeError, match="expected a graphc.LongTensor"):
        gc.set_rng_state([1])
    with pytest.raises(TypeError, match="RNG state must be"):
        gc.set_rng_state(gc.zeros(631))
    with pytest.raises(RuntimeError, match="size to be 5"):
        gc.set_rng_state(gc.zeros(5, dtype=gc.long))
    s = gc.seed()
    assert isinstance(s, int) and 0 <= s < 2 ** 63 and gc.initial_seed() == s
    a = gc.rand(3).numpy()
    gc.manual_seed(s)
    np.testing.assert_array_equal(gc.rand(3).numpy(), a)


# -- global settings ----------------------------------------------------------------------------
def test_default_dtype() -> None:
    assert gc.get_default_dtype() is gc.float32
    assert gc.set_default_dtype(gc.float32) is None and gc.set_default_dtype(torch.float32) is None
    with pytest.raises(NotImplementedError, match="always make float32"):
        gc.set_default_dtype(gc.float64)
    agree(lambda m: m.set_default_dtype(m.int64))
    agree(lambda m: m.set_default_dtype("float"))
    assert gc.get_default_dtype() is gc.float32


def test_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The setting is the runtime pool's: ``GRAPHC_NUM_THREADS``, one or two threads."""
    monkeypatch.delenv("GRAPHC_NUM_THREADS", raising=False)
    gc.set_num_threads(1)
    assert os.environ["GRAPHC_NUM_THREADS"] == "1" and gc.get_num_threads() == 1
    gc.set_num_threads(8)
    assert os.environ["GRAPHC_NUM_THREADS"] == "2" and gc.get_num_threads() == 2
    agree(lambda m: m.set_num_threads(0))
    agree(lambda m: m.set_num_threads(-1))
    agree(lambda m: m.set_num_threads(1.5))


@pytest.mark.parametrize("pair", [("float32", 1.0), ("float32", "float64"), ("f64_0d", "int64"),
                                  ("int32", 2), ("int32", "i64_0d"), ("i32_0d", "i64_0d"),
                                  ("bool", 2), ("bfloat16", 2.0), ("bfloat16", "f32_0d"),
                                  ("bfloat16", "float32"), (1, 1.0), (1, True), (True, True),
                                  (2.5, "int64"), ("str", 1)])
def test_result_type(pair: Any) -> None:
    def arg(m: Any, a: Any) -> Any:
        if not isinstance(a, str):
            return a
        if a == "str":
            return "a"
        if a.endswith("_0d"):
            d = {"f64": m.float64, "i64": m.int64, "i32": m.int32, "f32": m.float32}[a[:3]]
            return m.tensor(1, dtype=d)
        return m.tensor([1], dtype=getattr(m, a))

    agree(lambda m: m.result_type(arg(m, pair[0]), arg(m, pair[1])))


@pytest.mark.parametrize("a", ["bool", "int32", "int64", "bfloat16", "float32", "float64"])
def test_promote_types_and_can_cast(a: str) -> None:
    for b in ("bool", "int32", "int64", "bfloat16", "float32", "float64"):
        agree(lambda m, b=b: (m.promote_types(getattr(m, a), getattr(m, b)),
                              m.can_cast(getattr(m, a), getattr(m, b))))
    agree(lambda m: m.promote_types(1, getattr(m, a)))
    agree(lambda m: m.can_cast(getattr(m, a), 1))
    assert gc.promote_types(torch.int32, gc.float32) is gc.float32  # torch dtypes accepted


def test_constants() -> None:
    assert (gc.pi, gc.e, gc.inf, gc.newaxis) == (torch.pi, torch.e, torch.inf, torch.newaxis)
    assert math.isnan(gc.nan)
    assert gc.zeros(2, 3)[:, gc.newaxis].shape == (2, 1, 3)


# -- in-place shape changes ---------------------------------------------------------------------
def test_inplace_shape_changes_alias_as_in_pytorch() -> None:
    """The tensor takes the new shape and strides over the same memory; views taken before
    keep theirs and still see later writes."""
    for m in (torch, gc):
        x = m.zeros(2, 3)
        v = x[0]
        assert x.transpose_(0, 1) is x
        x.add_(1)
        assert tuple(x.shape) == (3, 2) and x.stride() == (1, 3) and not x.is_contiguous()
        assert _np(v).tolist() == [1., 1., 1.]
        x.unsqueeze_(0)
        assert tuple(x.shape) == (1, 3, 2)
        x.squeeze_()
        assert tuple(x.shape) == (3, 2)
        y = m.zeros(1, 3, 1)
        y.squeeze_(0)
        assert tuple(y.shape) == (3, 1)
        y.squeeze_((0, 1))
        assert tuple(y.shape) == (3,)
        z = m.arange(6.).reshape(2, 3)
        z.t_()
        assert tuple(z.shape) == (3, 2) and _np(z).tolist() == [[0., 3.], [1., 4.], [2., 5.]]
        z.swapaxes_(0, 1)
        z.swapdims_(1, 0)
        assert tuple(z.shape) == (3, 2)


def test_inplace_shape_changes_autograd_and_errors() -> None:
    for m in (torch, gc):
        p = m.zeros(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            p.unsqueeze_(0)
        with m.no_grad():
            p.unsqueeze_(0)
        assert tuple(p.shape) == (1, 3) and p.requires_grad
        q = m.ones(2, 3, requires_grad=True)
        h = q * 2
        h.unsqueeze_(0)
        h.transpose_(1, 2)
        (h * m.arange(6.).reshape(1, 3, 2)).sum().backward()
        assert _np(q.grad).tolist() == [[0., 4., 8.], [2., 6., 10.]]
        with pytest.raises(IndexError):
            m.zeros(3).unsqueeze_(5)
        with pytest.raises(RuntimeError, match=r"t_\(\) expects a tensor with <= 2"):
            m.zeros(2, 3, 4).t_()
    out = gc.compile(lambda x: x * 2)(np.ones((2, 3), np.float32))  # a compiled result
    out.unsqueeze_(1)
    assert out.shape == (2, 1, 3) and out.numpy().sum() == 12


def test_inplace_shape_changes_compiled() -> None:
    p = nn.Parameter(gc.ones(3))

    def f(x: Any) -> Any:
        h = x * p
        h.unsqueeze_(0)
        h.transpose_(1, 2)
        h.squeeze_(0)
        return h.sum(0)

    step = gc.compile(f)
    for n in (2, 4):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        np.testing.assert_array_equal(step(x).numpy(), f(gc.tensor(x)).detach().numpy())
    assert step.compile_count == 1
    for bad in (lambda x: x.unsqueeze_(0), lambda x: p.unsqueeze_(0)):
        with pytest.raises(NotImplementedError, match="changes that tensor's shape"):
            gc.compile(bad)(np.ones(3, np.float32))
    assert p.shape == (3,)


# -- what a compiled step cannot do ------------------------------------------------------------
@pytest.mark.parametrize("fn,match", [
    (lambda x: gc.allclose(x, x), "returns a Python bool"),
    (lambda x: gc.equal(x, x), "returns a Python bool"),
    (lambda x: gc.get_rng_state(), "state at trace time"),
    (lambda x: gc.seed(), "seed it between calls"),
    (lambda x: gc.tensor_split(x, 2), "symbolic size"),
    (lambda x: gc.combinations(x[:, 0]), "symbolic size"),
    (lambda x: (x * 1).fill_diagonal_(0), "symbolic size"),
    (lambda x: x.data_ptr(), "no memory"),
    (lambda x: gc.normal(0.0, 1.0, (2,), requires_grad=True), "create the leaf outside"),
], ids=["allclose", "equal", "get_rng_state", "seed", "tensor_split_batch",
        "combinations_batch", "fill_diagonal_batch", "data_ptr", "normal_requires_grad"])
def test_compiled_step_raises_not_implemented(fn: Any, match: str) -> None:
    with pytest.raises(NotImplementedError, match=match):
        gc.compile(fn)(np.ones((2, 3), np.float32))


def test_traced_strides_are_row_major() -> None:
    seen = []

    def f(x: Any) -> Any:
        seen.append((x.stride(), x.unsqueeze(0).stride(1), x.t().stride()))
        return x * 2

    gc.compile(f)(np.ones((4, 3), np.float32))
    assert seen[0][0] == (3, 1) and seen[0][1] == 3 and seen[0][2][1] == 1


def test_missing_dtypes_raise() -> None:
    x = gc.ones(2)
    for name, dtype in (("short", "int16"), ("byte", "uint8"), ("char", "int8")):
        with pytest.raises(NotImplementedError, match=f"no {dtype} dtype"):
            getattr(x, name)()


# -- registration -------------------------------------------------------------------------------
def test_every_function_is_public_and_pytorchs() -> None:
    import graphc.trace  # noqa: F401  (the submodule must not replace gc.trace)

    for name in misc_ops.FUNCTIONS:
        assert gc._ELSEWHERE[name] == "misc_ops" and name in dir(gc)
        assert getattr(gc, name) is getattr(misc_ops, name)
        assert hasattr(torch, name), name
    assert gc.trace is misc_ops.trace
    from graphc.nn import functional as F

    for name in ("pdist", "pairwise_distance", "cosine_similarity"):
        assert getattr(gc, name) is getattr(F, name)
    agree(lambda m, a, b: m.cosine_similarity(a, b, dim=0), T24, T24[::-1].copy())


def test_inplace_forms_call_graphcs_methods() -> None:
    for name in misc_ops.INPLACE_FORMS:
        assert hasattr(gc.Tensor, name) and hasattr(torch, name), name
    x = gc.tensor([-1., 4.])
    assert gc.sqrt_(gc.relu_(x)) is x and x.tolist() == [0., 2.]
    with pytest.raises(TypeError, match="must be Tensor"):
        gc.exp_(1.0)


METHODS = ["allclose", "equal", "dist", "trace", "tensor_split", "hsplit", "vsplit", "dsplit",
           "split_with_sizes", "sum_to_size", "is_same_size", "squeeze_", "unsqueeze_",
           "transpose_", "swapaxes_", "swapdims_", "t_", "fill_diagonal_", "positive", "sgn",
           "rsqrt_", "stride", "nbytes", "itemsize", "is_cpu", "data_ptr", "short", "byte",
           "char", "masked_scatter", "masked_scatter_", "index_reduce", "index_reduce_", "gcd",
           "lcm", "gcd_", "lcm_", "frexp", "ldexp", "ldexp_", "nextafter", "prelu",
           "hardshrink"]


def test_tensor_methods_exist_as_in_pytorch() -> None:
    for name in METHODS:
        assert hasattr(gc.Tensor, name) and hasattr(torch.Tensor, name), name


def test_functional_prelu_is_torch_prelu() -> None:
    """``F.prelu`` had a rule of its own that took dim 0 of a 1-D input as its channels (three
    weights on a length-3 vector passed; PyTorch's one-channel rule refuses it)."""
    import graphc.nn.functional as F

    assert F.prelu is gc.prelu
    for m, f in ((gc, F.prelu), (torch, torch.nn.functional.prelu)):
        with pytest.raises(RuntimeError, match="Mismatch of parameter numbers"):
            f(m.ones(3), m.ones(3))
