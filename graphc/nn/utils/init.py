"""``nn.utils.skip_init``: build a module without spending its initialisation.

PyTorch builds the module on the ``meta`` device (nothing allocated, nothing drawn) and then
allocates empty storage. graphc has no meta device, so the module is built normally and the
global random stream is put back where it was: as in PyTorch, the stream is not advanced by
the skipped initialisation, and the parameters hold arbitrary (here: the would-be initial)
values that the caller is expected to overwrite.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from ... import random as _random
from ..module import Module

__all__ = ["skip_init"]


def skip_init(module_cls: type, *args: Any, **kwargs: Any) -> Module:
    """``module_cls(*args, **kwargs)`` without advancing the random stream (see above); the
    class must take a ``device`` argument, as PyTorch requires."""
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    kwargs.setdefault("device", "cpu")
    state = _random._state
    saved = {k: copy.deepcopy(v) for k, v in state.items()}
    try:
        return module_cls(*args, **kwargs)
    finally:
        state.update(saved)
