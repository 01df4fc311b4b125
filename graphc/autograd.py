"""Grad modes (``no_grad``, ``enable_grad``, ``inference_mode``), thread-local as in PyTorch."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ._context import thread_local

F = TypeVar("F", bound=Callable[..., Any])


_state = thread_local(enabled=True, inference=False)

# ops whose backward reads no saved value: PyTorch lets a graph made only of these be
# differentiated twice without ``retain_graph`` (nothing was freed), so graphc does too
NO_SAVED_VALUES = frozenset({"input", "const", "add", "sub", "neg", "sum", "reshape",
                             "broadcast_to", "transpose", "permute", "detach", "cast"})
BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)


def is_grad_enabled() -> bool:
    return _state.enabled


def is_inference_mode_enabled() -> bool:
    return _state.inference


def set_grad_enabled(mode: bool) -> None:
    _state.enabled = bool(mode)


class _Mode:
    """Base for grad-mode context managers; also usable as decorators."""

    _enabled = True
    _inference: bool | None = None

    def __enter__(self) -> None:
        self._prev = (is_grad_enabled(), is_inference_mode_enabled())
        _state.enabled = self._enabled
        if self._inference is not None:
            _state.inference = self._inference

    def __exit__(self, *exc: object) -> None:
        _state.enabled, _state.inference = self._prev

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            with type(self)():
                return fn(*a, **k)

        return wrapper  # type: ignore[return-value]


class no_grad(_Mode):
    """Operations record no gradient path; outputs have ``requires_grad=False``."""

    _enabled = False


class enable_grad(_Mode):
    _enabled = True


class inference_mode(_Mode):
    """``no_grad`` plus inference tensors. Does not imply ``eval()`` (as in PyTorch)."""

    def __init__(self, mode: bool = True) -> None:
        self._enabled = not mode
        self._inference = mode


# ``grad``'s implementation, installed by ``graphc.engine`` (this module imports no layer
# above it): (outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
# materialize_grads) -> tuple
GRAD_IMPL: list[Any] = [None]


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: bool | None = None,
         is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple:
    """``torch.autograd.grad``: the gradients of ``sum(grad_output * output)`` with respect
    to ``inputs``, returned (nothing is accumulated into ``.grad``), eagerly or inside a
    compiled function. ``create_graph=True`` builds them as a differentiable graph (a
    gradient penalty's second backward); ``retain_graph`` defaults to ``create_graph``."""
    if is_grads_batched:
        raise NotImplementedError("autograd.grad: is_grads_batched=True (vmap over "
                                  "grad_outputs) is not supported")
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    if retain_graph is None:
        retain_graph = create_graph
    return GRAD_IMPL[0](outputs, inputs, grad_outputs, retain_graph, create_graph,
                        allow_unused, materialize_grads)

