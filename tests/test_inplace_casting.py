"""In-place arithmetic whose result torch cannot cast into the written tensor raises, and the
augmented assignments (``|=``, ``//=``, ``**=``, ...) write in place.

torch refuses ``int_t += 1.5``, ``int_t /= 2``, ``int_t.clamp_(min=1.5)`` and
``bool_t.add_(1)`` (its ``canCast``); graphc used to store the cast result silently. And
without ``__ior__`` and kin, Python rebinds ``a |= b`` to a new tensor, so a view or another
holder of ``a`` kept the old values. Each case runs on torch and graphc, eagerly and (for the
raising ones) in a compiled step, where the error comes at trace time, before any state moves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc

RAISING: dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]] = {
    "int += float": (lambda m: m.tensor([1, 2, 3]), lambda m, a: a.__iadd__(1.5)),
    "int.add_(float)": (lambda m: m.tensor([1, 2, 3]), lambda m, a: a.add_(1.5)),
    "int.sub_(alpha float)": (lambda m: m.tensor([1, 2, 3]), lambda m, a: a.sub_(1, alpha=0.5)),
    "int.mul_(float tensor)": (lambda m: m.tensor([1, 2, 3]),
                               lambda m, a: a.mul_(m.tensor([1.5, 2.0, 3.0]))),
    "int /= 2": (lambda m: m.tensor([1, 2, 3]), lambda m, a: a.__itruediv__(2)),
    "int.div_(2)": (lambda m: m.tensor([1, 2, 3]), lambda m, a: a.div_(2)),
    "int.clamp_(float)": (lambda m: m.tensor([1, 4, 9]), lambda m, a: a.clamp_(min=1.5)),
    "int **= 0.5": (lambda m: m.tensor([1, 4, 9]), lambda m, a: a.__ipow__(0.5)),
    "int.sqrt_()": (lambda m: m.tensor([1, 4, 9]), lambda m, a: a.sqrt_()),
    "bool.add_(1)": (lambda m: m.tensor([True, False]), lambda m, a: a.add_(1)),
    "fill_ with a 1-d tensor": (lambda m: m.tensor([1.0, 2.0]),
                                lambda m, a: a.fill_(m.tensor([7.0]))),
}


@pytest.mark.parametrize("name", list(RAISING))
def test_uncastable_in_place_results_raise_like_torch(name: str) -> None:
    make, op = RAISING[name]
    with pytest.raises(RuntimeError):
        op(torch, make(torch))
    a = make(gc)
    before = a.numpy().copy()
    with pytest.raises(RuntimeError, match="can't be cast|only supports 0-dimension"):
        op(gc, a)
    np.testing.assert_array_equal(a.numpy(), before)


@pytest.mark.parametrize("name", [n for n in RAISING if "fill_" not in n])
def test_uncastable_in_place_results_raise_when_compiled(name: str) -> None:
    make, op = RAISING[name]
    arg = make(gc).numpy()

    def step(x: Any) -> Any:
        y = x.clone()
        op(gc, y)
        return y

    with pytest.raises(RuntimeError, match="can't be cast"):
        gc.compile(step, dynamic=False)(arg)


CASTING_OK: dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]] = {
    "float.add_(int)": (lambda m: m.tensor([1.0, 2.0]), lambda m, a: a.add_(m.tensor([1, 2]))),
    "float += double": (lambda m: m.tensor([1.0, 2.0]),
                        lambda m, a: a.__iadd__(m.tensor(np.array([0.5, 0.25])))),
    "int.copy_(float)": (lambda m: m.tensor([1, 2]), lambda m, a: a.copy_(m.tensor([2.7, -1.5]))),
    "int setitem float": (lambda m: m.tensor([1, 2]), lambda m, a: a.__setitem__(0, 2.7)),
    "int.masked_fill_(float)": (lambda m: m.tensor([1, 4]),
                                lambda m, a: a.masked_fill_(a > 3, 2.5)),
    "float.eq_(float)": (lambda m: m.tensor([1.0, 2.0]), lambda m, a: a.eq_(m.tensor([1.0, 0.0]))),
    "bool |= bool": (lambda m: m.tensor([False, True]),
                     lambda m, a: a.__ior__(m.tensor([True, False]))),
    "int //= 2": (lambda m: m.tensor([5, -7]), lambda m, a: a.__ifloordiv__(2)),
    "int %= 3": (lambda m: m.tensor([5, -7]), lambda m, a: a.__imod__(3)),
    "int **= 2": (lambda m: m.tensor([5, -7]), lambda m, a: a.__ipow__(2)),
    "int <<= 1": (lambda m: m.tensor([5, 7]), lambda m, a: a.__ilshift__(1)),
    "int >>= 1": (lambda m: m.tensor([5, 7]), lambda m, a: a.__irshift__(1)),
    "int ^= int": (lambda m: m.tensor([5, 7]), lambda m, a: a.__ixor__(m.tensor([3, 3]))),
    "int &= int": (lambda m: m.tensor([5, 7]), lambda m, a: a.__iand__(m.tensor([6, 6]))),
    "float //= 2.5": (lambda m: m.tensor([5.0, -7.0]), lambda m, a: a.__ifloordiv__(2.5)),
}


@pytest.mark.parametrize("name", list(CASTING_OK))
def test_castable_in_place_ops_write_the_tensor_and_its_views(name: str) -> None:
    make, op = CASTING_OK[name]
    out = []
    for lib in (torch, gc):
        a = make(lib)
        view, alias = a[:], a
        op(lib, a)
        assert alias is a
        out.append((str(a.dtype).rsplit(".", 1)[-1], a.tolist(), view.tolist()))
    assert out[1] == out[0]


def test_augmented_assignment_writes_in_place() -> None:
    """``a |= b`` in Python: the same tensor object, written, as in torch."""
    for lib in (torch, gc):
        a = lib.tensor([False, True])
        keep = a
        a |= lib.tensor([True, False])
        assert a is keep and a.tolist() == [True, True]
