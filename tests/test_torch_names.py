"""PyTorch's second names (``arccos``, ``multiply``, ``clip`` ...) and the functional forms of
tensor methods (``torch.add(x, y, alpha=2)``, ``torch.reshape(x, s)``, ``torch.pow(2, x)``):
a program written against ``torch.`` ports by changing its import. Each form is checked
against PyTorch eagerly and compiled (values and gradients, several shapes, broadcasting,
0-d and empty tensors, negative dims), and the tables against PyTorch's own names."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _op_parity import check_compiled, check_eager
from _op_parity import np_of as _np
from _torch import torch

import graphc as gc
from graphc.aliases import ALIASES, METHOD_FORMS

RTOL, ATOL = 1e-5, 1e-5

CASES = [
    ("add", (3, 4), lambda m, x: m.add(x, x.flip(-1), alpha=2)),
    ("add_broadcast", (3, 4), lambda m, x: m.add(x, x[0, 0], alpha=-0.5)),
    ("add_number_left", (3, 4), lambda m, x: m.add(2.5, x, alpha=3)),
    ("sub", (3, 4), lambda m, x: m.sub(x, x[:, :1], alpha=1.5)),
    ("sub_number_left", (3, 4), lambda m, x: m.sub(1, x)),
    ("subtract", (3, 4), lambda m, x: m.subtract(x, 0.25, alpha=2) * x),
    ("mul", (3, 4), lambda m, x: m.mul(x, x[:, 1:2])),
    ("mul_number_left", (3, 4), lambda m, x: m.mul(-2, x)),
    ("multiply", (3, 4), lambda m, x: m.multiply(x, x)),
    ("div", (3, 4), lambda m, x: m.div(x, x * x + 1)),
    ("div_number_left", (3, 4), lambda m, x: m.div(1.0, x * x + 1)),
    ("divide_floor", (3, 4), lambda m, x: m.divide(x * 7, 2, rounding_mode="floor") + x),
    ("true_divide", (3, 4), lambda m, x: m.true_divide(x, 4)),
    ("pow", (3, 4), lambda m, x: m.pow(x, 2)),
    ("pow_tensor", (3, 4), lambda m, x: m.pow(x * x + 1, x)),
    ("pow_number_base", (3, 4), lambda m, x: m.pow(2, x)),
    ("neg", (3, 4), lambda m, x: m.neg(x) + m.negative(x[0])),
    ("rsqrt", (3, 4), lambda m, x: m.rsqrt(x * x + 1)),
    ("reciprocal", (3, 4), lambda m, x: m.reciprocal(x * x + 0.5)),
    ("erf", (3, 4), lambda m, x: m.erf(x)),
    ("addcmul", (3, 4), lambda m, x: m.addcmul(x, x, x[0], value=0.5)),
    ("addcdiv", (3, 4), lambda m, x: m.addcdiv(x, x, x * x + 1, value=-2)),
    ("logsumexp", (3, 4), lambda m, x: m.logsumexp(x, -1)),
    ("logsumexp_keepdim", (3, 4), lambda m, x: m.logsumexp(x, (0, 2), keepdim=True)),
    ("clip", (3, 4), lambda m, x: m.clip(x, -0.5, 0.5) + x.clip(max=0.2)),
    ("reshape", (3, 4), lambda m, x: m.reshape(x, (-1, 6))),
    ("transpose", (3, 4), lambda m, x: m.transpose(x, 0, -1)),
    ("permute", (3, 4), lambda m, x: m.permute(x, (2, 0, 1))),
    ("squeeze", (1, 4), lambda m, x: m.squeeze(x, 1) + m.squeeze(x).sum()),
    ("unsqueeze", (3, 4), lambda m, x: m.unsqueeze(x, -2)),
    ("flatten", (3, 4), lambda m, x: m.flatten(x, 1)),
    ("ravel", (3, 4), lambda m, x: m.ravel(x) * 2 + x.ravel()),
    ("clone", (3, 4), lambda m, x: m.clone(x) * x.clone(memory_format=m.contiguous_format)),
    ("detach", (3, 4), lambda m, x: x * m.detach(x)),
    ("broadcast_to", (1, 4), lambda m, x: m.broadcast_to(x, (3, -1, 2, 4)) * x),
    ("broadcast_tensors", (3, 1), lambda m, x: sum(m.broadcast_tensors(x, x[0, 0], x.mT))),
    ("absolute", (3, 4), lambda m, x: m.absolute(x) + x.absolute()),
    ("arc_functions", (3, 4), lambda m, x: m.arcsin(x * 0.3) + m.arccos(x * 0.2)
     + m.arctan(x) + m.arcsinh(x) + m.arctanh(x * 0.4) + m.arccosh(x * x + 1.5)),
    ("arctan2", (3, 4), lambda m, x: m.arctan2(x, x.flip(0) + 0.1)),
    ("comparisons", (3, 4), lambda m, x: x * (m.greater(x, 0) | m.less_equal(x, -1))
     + x * m.greater_equal(x, x[0]) - x * m.less(x, 0.5) + x * m.not_equal(x, x[0, 0])),
    ("fix", (3, 4), lambda m, x: m.fix(x * 3) + x),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_matches_torch(case: Any) -> None:
    _, shape, f = case
    check_eager(f, shape, RTOL, ATOL, RTOL, ATOL, dtypes=True)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_torch(case: Any) -> None:
    """One compile serving batch sizes 2 and 5: outputs and the parameter's gradient."""
    _, shape, f = case
    check_compiled(f, shape, RTOL, ATOL)


def test_the_tables_name_torchs_own() -> None:
    """Every alias and functional form is one PyTorch has, under the same name: the alias
    on ``Tensor`` (and its in-place form where the op has one) is the very method it
    stands for, and ``gc.<alias>`` the very function."""
    for alias, name in ALIASES.items():
        assert hasattr(torch, alias) and hasattr(torch.Tensor, alias), alias
        assert getattr(gc.Tensor, alias) is getattr(gc.Tensor, name)
        assert getattr(gc, alias) is getattr(gc, name)
        if hasattr(gc.Tensor, name + "_"):
            assert getattr(gc.Tensor, alias + "_") is getattr(gc.Tensor, name + "_")
    for name in METHOD_FORMS:
        assert hasattr(torch, name) and hasattr(torch.Tensor, name), name
        assert callable(getattr(gc, name)) and name in gc._core._FROM_TABLE


def test_dtypes_of_number_operands() -> None:
    """A Python number as ``input`` promotes as PyTorch's Scalar overloads do: an int with
    an int tensor stays in its dtype, a float makes float32, rounding modes keep integers."""
    xi = np.array([7, -7, 5, 0], dtype=np.int32)
    ops = [
        lambda m, x: m.add(2, x, alpha=3), lambda m, x: m.sub(2.5, x),
        lambda m, x: m.mul(True, x), lambda m, x: m.pow(2, x.abs()),
        lambda m, x: m.div(7, x + 10), lambda m, x: m.true_divide(7, x + 10),
        lambda m, x: m.div(7, x + 10, rounding_mode="floor"),
        lambda m, x: m.divide(-7.5, x + 10, rounding_mode="trunc"),
        lambda m, x: m.div(7, (x > -100), rounding_mode="floor"),
    ]
    for f in ops:
        want, got = f(torch, torch.tensor(xi)), f(gc, gc.tensor(xi))
        assert str(_np(got).dtype) == str(_np(want).dtype)
        np.testing.assert_array_equal(_np(got), _np(want))


@pytest.mark.parametrize("shape", [(), (0, 3), (2, 0)])
def test_zero_d_and_empty(shape: tuple) -> None:
    x = np.ones(shape, dtype=np.float32) * 0.5
    for f in (lambda m, t: m.add(t, t, alpha=2), lambda m, t: m.pow(3, t),
              lambda m, t: m.ravel(t), lambda m, t: m.clip(t, 0, 0.25),
              lambda m, t: m.broadcast_to(t, (2, *shape)), lambda m, t: m.arccos(t),
              lambda m, t: m.logsumexp(t, -1) if t.ndim else m.neg(t)):
        want = f(torch, torch.tensor(x))
        got = f(gc, gc.tensor(x))
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(_np(got), _np(want), rtol=RTOL)


def test_errors_are_pytorchs() -> None:
    x = gc.ones(2, 3)
    with pytest.raises(TypeError, match=r"neg\(\): argument 'input' \(position 1\) must be "
                                        r"Tensor, not int"):
        gc.neg(3)
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        gc.add(1.0, 2.0)  # no tensor at all
    with pytest.raises(NotImplementedError, match=r"graphc.add\(out=...\)"):
        gc.add(x, x, out=x)
    with pytest.raises(NotImplementedError, match="channels_last"):
        gc.clone(x, memory_format=gc.channels_last)
    with pytest.raises(RuntimeError, match="cannot be broadcast to a single shape"):
        gc.broadcast_tensors(x, gc.ones(4))
    assert gc.broadcast_shapes((2, 1), (3, 1, 4), 4) == torch.broadcast_shapes((2, 1),
                                                                               (3, 1, 4), 4)
    for lib in (torch, gc):
        with pytest.raises(RuntimeError, match="with more than one value is ambiguous"):
            lib.ones(2).is_nonzero()
        with pytest.raises(RuntimeError, match="with no values is ambiguous"):
            lib.ones(0).is_nonzero()
        assert lib.is_nonzero(lib.ones(1)) and not lib.zeros(()).is_nonzero()
        assert lib.is_floating_point(lib.ones(1)) and not lib.ones(1).long().is_floating_point()
        assert not lib.is_complex(lib.ones(1))
        assert lib.ones(1).long().is_signed() and not (lib.ones(1) > 0).is_signed()


def test_in_place_aliases_write_like_torch() -> None:
    x = np.array([[0.2, -0.7], [1.4, -2.6]], dtype=np.float32)
    for name in ("absolute_", "arctan_", "negative_", "fix_", "clip_"):
        args = (-0.5, 0.5) if name == "clip_" else ()
        t, g = torch.tensor(x), gc.tensor(x)
        getattr(t, name)(*args)
        getattr(g, name)(*args)
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=RTOL)
    t, g = torch.tensor(x), gc.tensor(x)
    t.multiply_(t).divide_(2).subtract_(1, alpha=2)
    g.multiply_(g).divide_(2).subtract_(1, alpha=2)
    np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=RTOL)


def test_clone_keeps_negative_zero() -> None:
    """``clone()`` is a bit copy: -0.0, NaN and infinities come back as they were (it was
    ``x + 0``, which turned -0.0 into +0.0), eagerly and compiled."""
    x = np.array([-0.0, 0.0, np.nan, -np.inf, 1e-40], dtype=np.float32)
    for got in (gc.tensor(x).clone(), gc.clone(gc.tensor(x)),
                gc.compile(lambda a: a.clone())(x)):
        np.testing.assert_array_equal(np.signbit(np.asarray(got.numpy())), np.signbit(x))
        np.testing.assert_array_equal(np.asarray(got.numpy()), x)
