"""Value snapshots for guards on Python values a trace read (module attributes, globals).

A guard compares a value now with the one the trace saw. ``frozen`` turns plain data
(numbers, strings, ``None``, and tuples, lists, sets, frozensets and dicts of them) into a
hashable snapshot that compares equal exactly when the value and every leaf's type are the
same: ``1``, ``1.0`` and ``True`` are equal in Python but give different traces (an ``int``
argument is a Python integer in shape arithmetic, a ``bool`` picks a branch), and NaN must
equal NaN, or a NaN attribute would re-trace the step at every call.
"""

from __future__ import annotations

import math
from typing import Any

_LEAVES = (bool, int, float, complex, str, bytes, type(None))
_MUTABLE = (list, dict, set, bytearray)
_NAN = ("nan",)


class Unfrozen(Exception):
    """The value has no snapshot (an object, a function, an array): guard it by identity."""


def frozen(v: Any) -> Any:
    """The hashable snapshot of ``v`` (see the module docstring); ``Unfrozen`` otherwise."""
    t = type(v)
    if t in _LEAVES:
        if t is float and math.isnan(v):
            return (t, _NAN)
        return (t, v)
    if t is tuple or t is list:
        return (t, tuple(frozen(x) for x in v))
    if t is frozenset or t is set:
        return (t, frozenset(frozen(x) for x in v))
    if t is dict:
        return (t, tuple((frozen(k), frozen(x)) for k, x in v.items()))
    raise Unfrozen


def has_mutable(v: Any) -> bool:
    """Whether ``v`` holds a list, dict or set: it may change in place, with no assignment
    any epoch counter could see."""
    if isinstance(v, _MUTABLE):
        return True
    if type(v) in (tuple, frozenset):
        return any(has_mutable(x) for x in v)
    return False


ABSENT = ("graphc: absent",)  # what ``entry_reader`` gives for a missing or unfrozen entry


def entry_reader(d: Any, name: str) -> Any:
    """A guard's ``read``: the snapshot of ``d.get(name)`` (``d``: a ``__dict__``, a module's
    globals, anything with ``get``), ``ABSENT`` when the entry is missing or has no
    snapshot."""
    def read() -> Any:
        v = d.get(name, ABSENT)
        if v is ABSENT:
            return ABSENT
        try:
            return frozen(v)
        except Unfrozen:
            return ABSENT
    return read
