"""Data types: the small, closed set graphc computes in, with PyTorch-like promotion."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _bfloat16_np() -> np.dtype:
    """numpy's bfloat16, from ml_dtypes (the package JAX, TensorFlow and ONNX share).

    Imported on first use: recent ml_dtypes releases take ~0.5 s to register their types,
    which a program that never touches bf16 should not pay at ``import graphc``."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True, eq=False)
class DType:
    """A scalar type. ``short`` is the IR spelling (``f32``), ``name`` the PyTorch one.

    One object per dtype, compared by identity. ``np`` is the numpy dtype values of this
    type are held in (bfloat16's comes from ml_dtypes, loaded when first needed)."""

    name: str
    short: str
    _np: Any = field(repr=False)  # a numpy dtype, or a function making it on first use
    is_float: bool
    is_int: bool

    @property
    def np(self) -> np.dtype:
        d = self._np
        if callable(d):
            d = d()
            object.__setattr__(self, "_np", d)
        return d

    def __repr__(self) -> str:
        return f"graphc.{self.name}"

    def __copy__(self) -> DType:  # one object per dtype: copies (deepcopy of a module) share it
        return self

    def __deepcopy__(self, memo: dict) -> DType:
        return self

    def __reduce__(self) -> tuple:  # unpickles to the one object of its name
        return (from_short, (self.short,))

    @property
    def itemsize(self) -> int:
        return self.np.itemsize


float32 = DType("float32", "f32", np.dtype(np.float32), True, False)
float64 = DType("float64", "f64", np.dtype(np.float64), True, False)
# bfloat16: numpy has no such type; ml_dtypes (the one JAX, TensorFlow and ONNX share) gives
# numpy arrays of it, so the interpreter, checkpoints and ``.numpy()`` hold real bf16 values
bfloat16 = DType("bfloat16", "bf16", _bfloat16_np, True, False)
int64 = DType("int64", "i64", np.dtype(np.int64), False, True)
int32 = DType("int32", "i32", np.dtype(np.int32), False, True)
bool_ = DType("bool", "bool", np.dtype(np.bool_), False, False)

ALL = (float32, float64, bfloat16, int64, int32, bool_)
_BY_NP = {d.np: d for d in ALL if d is not bfloat16}
_BY_SHORT = {d.short: d for d in ALL}
# PyTorch's promotion: bf16 with an integer is bf16, with float32 float32, with float64 float64
_RANK = {bool_: 0, int32: 1, int64: 2, bfloat16: 3, float32: 4, float64: 5}

default_float = float32


# PyTorch's names of the dtypes in its error messages ("not implemented for 'Long'")
TORCH_NAMES = {"int64": "Long", "int32": "Int", "bool": "Bool", "float32": "Float",
               "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "uint8": "Byte",
               "int8": "Char", "int16": "Short"}


def from_numpy(dt: np.dtype) -> DType:
    """Map a numpy dtype to a graphc dtype (float16 and friends are refused explicitly)."""
    dt = np.dtype(dt)
    if dt in _BY_NP:
        return _BY_NP[dt]
    if dt.name == "bfloat16" and dt == bfloat16.np:  # ml_dtypes is loaded: the user has one
        return bfloat16
    raise TypeError(
        f"dtype {dt} is not supported; expected one of float32, float64, bfloat16, int64, "
        "int32, bool"
    )


def from_short(s: str) -> DType:
    return _BY_SHORT[s]


def as_dtype(d: object) -> DType:
    """Accept a graphc dtype, a numpy dtype or a type name."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str) and d in _BY_SHORT:
        return _BY_SHORT[d]
    if isinstance(d, str) and d == "bfloat16":  # numpy knows the name only after ml_dtypes
        return bfloat16
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
