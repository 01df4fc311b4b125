"""Automatic mixed precision: ``gc.autocast("cpu", dtype=gc.bfloat16)``, as ``torch.autocast``.

Inside the region, the ops PyTorch's CPU autocast runs in lower precision (matrix products,
linear, convolutions, scaled dot-product attention, prelu) cast their floating-point operands
to bfloat16 and compute there (float32 accumulation, a bf16 result), and the ops it pins to
float32 (the losses, ``prod``, ``cdist``, ``trace``, reflect/replicate padding) cast bf16
operands up to float32. Every other op runs in its operands' dtype, with the usual promotion.
These are PyTorch 2.13's CPU lists, checked op by op against ``torch.autocast("cpu")`` in
tests/test_autocast.py — not the CUDA lists (on the CPU, softmax and layer_norm stay in bf16).
float64 operands are never cast (PyTorch's eligibility rule).

The casts are ordinary ``cast`` nodes, so backward flows through them: parameters stay
float32 (master weights), their gradients arrive in float32, and optimizer state and updates
are float32. Traced into a compiled step, the region is part of the graph; a step compiled
outside any region re-traces when called inside one (the state is one of its guards).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ._context import thread_local
from .ir import dtypes as dt

F = TypeVar("F", bound=Callable[..., Any])


_local = thread_local(state=None)

# the states a thread can be in: None (off) or one interned tuple per (device, dtype), so a
# compiled step's guard is one identity comparison (see graphc.runtime.runner)
_STATES: dict[tuple[str, dt.DType], tuple[str, dt.DType]] = {}

LOWER_DTYPES = (dt.bfloat16,)


def state() -> tuple[str, dt.DType] | None:
    """The autocast state of this thread: ``None`` or ``(device_type, dtype)``."""
    return _local.state


def _set(s: tuple[str, dt.DType] | None) -> None:
    _local.state = s


def is_autocast_enabled(device_type: str = "cpu") -> bool:
    """``torch.is_autocast_enabled(device_type)``."""
    s = state()
    return s is not None and s[0] == device_type


def get_autocast_dtype(device_type: str = "cpu") -> dt.DType:
    """``torch.get_autocast_dtype``: the lower-precision dtype (bfloat16 on the CPU)."""
    s = state()
    return s[1] if s is not None and s[0] == device_type else dt.bfloat16


class autocast:  # noqa: N801 - PyTorch's name
    """``torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``: a
    context manager and decorator. ``device_type`` ``"cpu"``; ``dtype`` defaults to bfloat16,
    the only lower-precision type graphc has (float16 is refused).
    ``cache_enabled`` is accepted: casts of the same weight are merged by the tracer anyway."""

    def __init__(self, device_type: str = "cpu", dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if not isinstance(device_type, str):
            raise ValueError(f"autocast: expected device_type to be a str, got "
                             f"{type(device_type).__name__}")
        if device_type == "cuda":
            raise NotImplementedError(
                "autocast('cuda'): PyTorch's CUDA autocast lists (float16, softmax and norms "
                "in float32) are not implemented; graphc implements autocast('cpu', "
                "dtype=bfloat16), whose casts a step compiled for the GPU also follows")
        if device_type != "cpu":
            raise RuntimeError(f"autocast: device_type {device_type!r} is not supported; "
                               "expected 'cpu'")
        if dtype is None:
            d = dt.bfloat16
        else:
            from ._tensor import dtype_of

            d = dtype_of(dtype, "autocast(dtype=...)")
        if d not in LOWER_DTYPES:
            raise RuntimeError(f"autocast: in CPU autocast the only supported dtype is "
                               f"bfloat16 (float16 is not available in graphc), got {d.name}")
        self.device_type = device_type
        self.fast_dtype = d
        self.enabled = bool(enabled)
        self._prev: list[Any] = []

    def __enter__(self) -> autocast:
        self._prev.append(state())
        if self.enabled:
            key = (self.device_type, self.fast_dtype)
            _set(_STATES.setdefault(key, key))
        else:
            _set(None)
        return self

    def __exit__(self, *exc: Any) -> None:
        _set(self._prev.pop())

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.device_type, self.fast_dtype, self.enabled):
                return fn(*args, **kwargs)

        return wrapped  # type: ignore[return-value]


def _eligible(x: Any, to: dt.DType) -> bool:
    d = getattr(x, "dtype", None)
    return isinstance(d, dt.DType) and d.is_float and d is not dt.float64 and d is not to


def _cast_args(args: tuple, kwargs: dict, to: dt.DType) -> tuple[tuple, dict]:
    def c(x: Any) -> Any:
        if _eligible(x, to):
            return x.to(to)
        if isinstance(x, (list, tuple)) and any(_eligible(y, to) for y in x):
            return type(x)(c(y) for y in x)
        return x

    return tuple(c(a) for a in args), {k: c(v) for k, v in kwargs.items()}


def _policy(target: Callable[[tuple[str, dt.DType]], dt.DType | None]) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            s = state()
            if s is None:
                return fn(*args, **kwargs)
            to = target(s)
            if to is not None:
                args, kwargs = _cast_args(args, kwargs, to)
            _set(None)  # as PyTorch's autocast kernels: the op's insides are not autocast
            try:
                return fn(*args, **kwargs)
            finally:
                _set(s)

        return wrapped  # type: ignore[return-value]

    return deco


# an op on PyTorch's CPU lower-precision list: floating operands (not float64) cast down
lower_precision = _policy(lambda s: s[1])
# an op on its float32 list: lower-precision operands cast up
float32_op = _policy(lambda s: dt.float32)
# an op on neither list that graphc builds from ones that are (``mv`` from ``matmul``):
# computed in its operands' dtypes, its insides not autocast
no_autocast = _policy(lambda s: None)


__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "state",
           "lower_precision", "float32_op", "no_autocast"]
