"""Gradient utilities (``graphc.nn.utils``), mirroring ``torch.nn.utils``.

They are written in tensor operations on ``p.grad``, so the same call clips eagerly and inside
a compiled step: traced, ``p.grad`` is the gradient's current node and ``mul_``/``clamp_`` on it
update the gradient the step commits. The clip factor is applied unconditionally (clamped to 1)
instead of branching on ``norm > max_norm``, as PyTorch does, which is what lets it compile: the
norm is a run-time value, not a Python number, inside a trace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ... import _context
from ...autograd import no_grad
from ...tensor import Tensor
from . import parametrizations, parametrize, rnn, stateless
from .clip_grad import clip_grads_with_norm_
from .convert_parameters import parameters_to_vector, vector_to_parameters
from .fusion import (
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
)
from .init import skip_init
from .spectral_norm import remove_spectral_norm, spectral_norm
from .weight_norm import remove_weight_norm, weight_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "rnn"]
__all__ += ["clip_grad_norm", "clip_grads_with_norm_", "parameters_to_vector",
            "vector_to_parameters", "fuse_conv_bn_eval", "fuse_conv_bn_weights",
            "fuse_linear_bn_eval", "fuse_linear_bn_weights", "skip_init", "weight_norm",
            "remove_weight_norm", "spectral_norm", "remove_spectral_norm", "parametrize",
            "parametrizations", "stateless"]


def _as_list(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _vector_norm(x: Tensor, p: float) -> Tensor:
    """``torch.linalg.vector_norm(x, p)`` over all elements (a 0-d tensor of x's dtype)."""
    if p == math.inf:
        return x.abs().amax()
    if p == -math.inf:
        return x.abs().amin()
    if p == 0:
        return (x != 0).sum().to(x.dtype)
    if p == 1:
        return x.abs().sum()
    if p == 2:
        return (x * x).sum().sqrt()
    return (x.abs() ** p).sum() ** (1.0 / p)


def _norm_of_norms(norms: list[Tensor], p: float) -> Tensor:
    """The norm of the vector of per-tensor norms (PyTorch stacks them and takes the norm)."""
    if p == math.inf or p == -math.inf:
        out = norms[0]
        for n in norms[1:]:
            out = out.maximum(n) if p > 0 else out.minimum(n)
        return out
    if p == 0:
        out = (norms[0] != 0).to(norms[0].dtype)
        for n in norms[1:]:
            out = out + (n != 0).to(n.dtype)
        return out
    terms = [n if p == 1 else (n * n if p == 2 else n ** p) for n in norms]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    if p == 1:
        return total
    return total.sqrt() if p == 2 else total ** (1.0 / p)


@no_grad()
def get_total_norm(tensors: Tensor | Iterable[Tensor], norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """The ``norm_type``-norm of all ``tensors`` together, as a 0-d tensor.

    ``error_if_nonfinite`` needs the norm's value, which only exists eagerly; inside a
    compiled step it raises NotImplementedError rather than silently not checking.
    """
    ts = _as_list(tensors)
    p = float(norm_type)
    if not ts:
        return Tensor._from_array(np.zeros((), np.float32))
    total = _norm_of_norms([_vector_norm(t, p) for t in ts], p)
    if error_if_nonfinite:
        if _context.current() is not None:
            raise NotImplementedError(
                "clip_grad_norm_(error_if_nonfinite=True) cannot check the norm inside a "
                "compiled function (the value exists only when the step runs); use "
                "error_if_nonfinite=False there"
            )
        if not np.isfinite(total.item()):
            raise RuntimeError(
                f"The total norm of order {p} for gradients from `parameters` is non-finite, "
                "so it cannot be clipped. To disable this error and scale the gradients by the "
                "non-finite norm anyway, set `error_if_nonfinite=False`"
            )
    return total


@no_grad()
def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach: bool | None = None) -> Tensor:
    """Scale every ``p.grad`` in place so that their joint norm is at most ``max_norm``.

    Returns the total norm before clipping. Parameters whose ``.grad`` is None are ignored.
    The scale is ``min(max_norm / (total_norm + 1e-6), 1)``, multiplied in even when it is 1
    (PyTorch's branch-free form). ``foreach`` is accepted for compatibility.
    """
    params = _as_list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    if not grads:
        return total
    clip_coef = float(max_norm) / (total + 1e-6)
    clamped = clip_coef.clamp(max=1.0)
    for g in grads:
        g.mul_(clamped)
    return total


def clip_grad_norm(parameters: Tensor | Iterable[Tensor], max_norm: float,
                   norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach: bool | None = None) -> Tensor:
    """Deprecated alias of ``clip_grad_norm_`` (warns as PyTorch does)."""
    import warnings

    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
                  "`torch.nn.utils.clip_grad_norm_`.", FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


@no_grad()
def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float,
                     foreach: bool | None = None) -> None:
    """Clamp every ``p.grad`` in place to ``[-clip_value, clip_value]``."""
    v = float(clip_value)
    for p in _as_list(parameters):
        g = p.grad
        if g is not None:
            g.clamp_(-v, v)
