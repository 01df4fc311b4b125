"""``clip_grads_with_norm_``, PyTorch 2.6's split of ``clip_grad_norm_``: scale the gradients
by a total norm computed elsewhere, typically ``get_total_norm``.

``clip_grads_with_norm_`` is ``clip_grad_norm_``'s second half (see ``nn.utils``): tensor ops
on ``p.grad`` with the clip factor applied unconditionally, clamped to 1, so it compiles (the
norm is a run-time value inside a trace) and matches PyTorch's branch-free formula.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...autograd import no_grad
from ...tensor import Tensor

__all__ = ["clip_grads_with_norm_"]


@no_grad()
def clip_grads_with_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                          total_norm: Any, foreach: bool | None = None) -> None:
    """Scale every ``p.grad`` in place by ``min(max_norm / (total_norm + 1e-6), 1)``.

    ``total_norm`` is a tensor (``get_total_norm``'s result, or any norm the caller
    computed, e.g. across ranks); parameters without ``.grad`` are skipped. ``foreach`` is
    accepted for compatibility."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    max_norm = float(max_norm)
    if not grads:
        return
    clip_coef = max_norm / (total_norm + 1e-6)
    clamped = clip_coef.clamp(max=1.0) if isinstance(clip_coef, Tensor) else min(clip_coef, 1.0)
    for g in grads:
        g.mul_(clamped)

