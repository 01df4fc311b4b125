"""The active trace context (thread-local). Kept tiny so every module can import it."""

from __future__ import annotations

import threading
from typing import Any

_local = threading.local()


def current() -> Any | None:
    """The TraceContext being recorded on this thread, or None in eager mode."""
    return getattr(_local, "ctx", None)


def set_current(ctx: Any | None) -> Any | None:
    prev = getattr(_local, "ctx", None)
    _local.ctx = ctx
    return prev
