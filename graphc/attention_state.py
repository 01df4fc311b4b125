"""Which implementations ``scaled_dot_product_attention`` may use (PyTorch's ``SDPBackend``).

A compiled step that traces ``scaled_dot_product_attention`` guards on this setting (the
front end records the guard, once per trace): a step traced with the fused kernel allowed is
not reused under ``sdpa_kernel(SDPBackend.MATH)`` and the other way round, as grad mode and
autocast are guarded; steps without attention do not pay for the check. It imports nothing
of graphc. ``graphc.nn.attention`` is the public face (``sdpa_kernel``, ``SDPBackend``).
"""

from __future__ import annotations

import contextvars
import enum


class SDPBackend(enum.IntEnum):
    """PyTorch's ``torch.nn.attention.SDPBackend``. graphc has two implementations:
    ``MATH`` (matmul, softmax and matmul as separate ops) and ``FLASH_ATTENTION`` (one fused
    kernel per direction, the scores never stored). The other members are accepted and
    select nothing graphc has."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


ALL = frozenset(SDPBackend) - {SDPBackend.ERROR}
_ALLOWED: contextvars.ContextVar[frozenset] = contextvars.ContextVar("graphc_sdpa", default=ALL)


def state() -> frozenset:
    """The backends allowed here and now (the tracer's guard reads this)."""
    return _ALLOWED.get()


def set_state(allowed: frozenset) -> contextvars.Token:
    return _ALLOWED.set(allowed)


def reset_state(token: contextvars.Token) -> None:
    _ALLOWED.reset(token)


__all__ = ["SDPBackend", "ALL", "state", "set_state", "reset_state"]
