"""``torch.nn.attention``: choosing the implementation of ``scaled_dot_product_attention``.

``with sdpa_kernel(SDPBackend.MATH): ...`` restricts attention inside the block to the
composite form (separate matmul, softmax and matmul ops), ``SDPBackend.FLASH_ATTENTION`` to
the fused kernels (``attention`` / ``attention_grad``: the scores are never stored). By
default both are allowed and the fused kernel runs wherever it applies (float32, float64 or
bf16 inputs; no mask, ``is_causal`` or a boolean or additive ``attn_mask`` that needs no
gradient; dropout below 1, drawn as ``dropout()`` draws it; equal batch dims and one static
head size for q, k and v), as PyTorch picks its flash kernel on CPU. The fused backward has
a derivative of its own in the IR (through its primitive form). A compiled step records the
choice and is guarded on the setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from ..attention_state import SDPBackend, reset_state, set_state, state

__all__ = ["SDPBackend", "sdpa_kernel"]


@contextlib.contextmanager
def sdpa_kernel(backends: SDPBackend | Iterable[SDPBackend],
                set_priority: bool = False) -> Iterator[None]:
    """Allow only ``backends`` for ``scaled_dot_product_attention`` inside the block.
    ``set_priority`` (PyTorch: try them in the given order) is accepted; graphc prefers the
    fused kernel whenever it is allowed and applies."""
    if isinstance(backends, SDPBackend):
        backends = [backends]
    allowed = []
    for x in backends:
        if not isinstance(x, SDPBackend):
            raise TypeError(f"sdpa_kernel: backends must be SDPBackend members, got {x!r}")
        allowed.append(x)
    token = set_state(frozenset(allowed))
    try:
        yield
    finally:
        reset_state(token)


def allowed() -> frozenset:
    """The backends allowed here (``graphc.attention_state.state``)."""
    return state()
