"""Data types: the small, closed set graphc computes in, with PyTorch-like promotion."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """A scalar type. ``short`` is the IR spelling (``f32``), ``name`` the PyTorch one."""

    name: str
    short: str
    np: np.dtype
    is_float: bool
    is_int: bool

    def __repr__(self) -> str:
        return f"graphc.{self.name}"

    def __copy__(self) -> DType:  # one object per dtype: copies (deepcopy of a module) share it
        return self

    def __deepcopy__(self, memo: dict) -> DType:
        return self

    @property
    def itemsize(self) -> int:
        return self.np.itemsize


float32 = DType("float32", "f32", np.dtype(np.float32), True, False)
float64 = DType("float64", "f64", np.dtype(np.float64), True, False)
int64 = DType("int64", "i64", np.dtype(np.int64), False, True)
int32 = DType("int32", "i32", np.dtype(np.int32), False, True)
bool_ = DType("bool", "bool", np.dtype(np.bool_), False, False)

ALL = (float32, float64, int64, int32, bool_)
_BY_NP = {d.np: d for d in ALL}
_BY_SHORT = {d.short: d for d in ALL}
_RANK = {bool_: 0, int32: 1, int64: 2, float32: 3, float64: 4}

default_float = float32


def from_numpy(dt: np.dtype) -> DType:
    """Map a numpy dtype to a graphc dtype (float16 and friends are refused explicitly)."""
    dt = np.dtype(dt)
    if dt in _BY_NP:
        return _BY_NP[dt]
    raise TypeError(
        f"dtype {dt} is not supported; expected one of float32, float64, int64, int32, bool"
    )


def from_short(s: str) -> DType:
    return _BY_SHORT[s]


def as_dtype(d: object) -> DType:
    """Accept a graphc dtype, a numpy dtype or a type name."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str) and d in _BY_SHORT:
        return _BY_SHORT[d]
    if d is bool:
        return bool_
    if d is float:
        return float32
    if d is int:
        return int64
    return from_numpy(np.dtype(d))  # type: ignore[arg-type]


def promote(a: DType, b: DType) -> DType:
    """Tensor-tensor promotion (the higher category and width wins)."""
    return a if _RANK[a] >= _RANK[b] else b


def promote_scalar(t: DType, value: object) -> DType:
    """PyTorch's weak scalar rule: a Python scalar never widens a tensor of its category."""
    if isinstance(value, bool):
        return t
    if isinstance(value, int):
        return t if t is not bool_ else int64
    if isinstance(value, float):
        return t if t.is_float else default_float
    return t
