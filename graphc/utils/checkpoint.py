"""``graphc.utils.checkpoint``: ``torch.utils.checkpoint``'s API.

Why it exists: activation checkpointing is how PyTorch programs trade compute for memory, and
models written for PyTorch call it in their forward (``checkpoint(block, x,
use_reentrant=False)``); without it they would not run. What it does here: it calls the
function. Checkpointing changes no value and no gradient in PyTorch (with
``preserve_rng_state`` the recomputation draws the same dropout masks), so calling the function
gives PyTorch's results and gradients exactly; the memory side is the compiler's (a compiled
step's activations live in one planned arena, ``ir("optimized")`` shows its size), and an
eager graphc tape keeps them. The arguments PyTorch checks are checked the same way.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["checkpoint", "checkpoint_sequential", "noop_context_fn"]

_REENTRANT_WARNING = (
    "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting "
    "in PyTorch 2.9, calling checkpoint without use_reentrant will raise an exception. "
    "use_reentrant=False is recommended, but if you need to preserve the current default "
    "behavior, you can pass use_reentrant=True. Refer to docs for more details on the "
    "differences between the two variants.")


def noop_context_fn() -> tuple[Any, Any]:
    """The default ``context_fn``: no context around the forward or the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None,
               context_fn: Callable[[], tuple[Any, Any]] = noop_context_fn,
               determinism_check: str = "default", debug: bool = False,
               early_stop: bool = True, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)``, with ``torch.utils.checkpoint.checkpoint``'s checks
    (see the module docstring for why no recomputation is needed)."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING, UserWarning, stacklevel=2)
        use_reentrant = True
    kwargs.pop("preserve_rng_state", True)  # the same masks either way: nothing is redrawn
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check}")
    if use_reentrant:
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError("Passing `context_fn` or `debug` is only supported when "
                             "use_reentrant=False.")
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        return function(*args)
    forward_ctx, _recompute_ctx = context_fn()
    with forward_ctx:
        return function(*args, **kwargs)


def checkpoint_sequential(functions: Any, segments: int, input: Any,  # noqa: A002
                          use_reentrant: bool | None = None, **kwargs: Any) -> Any:
    """``torch.utils.checkpoint.checkpoint_sequential``: the modules (or functions) in
    order, in ``segments`` checkpointed runs."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING, UserWarning, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    fns = list(functions.children()) if hasattr(functions, "children") else list(
        functions if isinstance(functions, Iterable) else [functions])
    if not 0 < segments:
        raise ValueError(f"checkpoint_sequential: segments must be positive, got {segments}")
    size = len(fns) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(_run(fns, start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return _run(fns, end + 1, len(fns) - 1)(input)


def _run(fns: list, start: int, end: int) -> Callable[[Any], Any]:
    def forward(x: Any) -> Any:
        for j in range(start, end + 1):
            x = fns[j](x)
        return x

    return forward
