"""Channel dropout (``dropout1d/2d/3d``), alpha dropout and ``gumbel_softmax``: the layers
whose noise PyTorch draws with ``bernoulli_``/``exponential_``.

Each draws its noise exactly as ATen's ``_dropout_impl`` and ``F.gumbel_softmax`` do (one
``bernoulli_(1 - p)`` per channel, or per element; one ``exponential_`` per element), through
``graphc.random_ops``: after the same seed the values are PyTorch's (on hosts where PyTorch
uses its portable kernels), and inside a compiled step the noise is drawn anew on every call.
The arithmetic on the noise follows ATen's order, in the input's dtype.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from .. import tensor_ops as T
from .._core import contiguous_format, zeros_like
from ..random_ops import _bernoulli, _traced
from ..tensor import Tensor

_ALPHA = 1.7580993408473766  # SELU's alpha * scale: the value alpha dropout pulls towards


def _check_p(p: float) -> float:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return float(p)


def _dropout_impl(x: Tensor, p: float, training: bool, inplace: bool, feature: bool,
                  alpha: bool) -> Tensor:
    """ATen's ``_dropout_impl``: a Bernoulli(1 - p) mask over the elements, or over
    ``(N, C, 1, ...)`` for feature (channel) dropout, scaled by ``1 / (1 - p)``; alpha
    dropout instead moves dropped values to SELU's negative saturation and rescales so the
    mean and variance are kept. ``inplace``: the result is written into ``x``."""
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        out = x * T.as_tensor(0.0).to(x.dtype)
    else:
        shape = tuple(x.shape[:2]) + (1,) * (x.ndim - 2) if feature else tuple(x.shape)
        noise = _bernoulli(shape, x.dtype, 1.0 - p, None, _traced(x))
        if alpha:
            a = 1.0 / math.sqrt((_ALPHA * _ALPHA * p + 1) * (1 - p))
            b = (noise + (-1.0)) * (_ALPHA * a) + (_ALPHA * a * p)
            out = x * (noise * a) + b
        else:
            out = x * (noise / (1.0 - p))
    if inplace:
        return x._assign(out)
    return out


def _features(name: str, input: Any, p: float, training: bool, inplace: bool,  # noqa: A002
              batched: int, alpha: bool = False) -> Tensor:
    """Channel dropout of a ``batched``-d input, or of an unbatched one (one dim less),
    treated as a batch of one, as ``F.dropout1d/2d/3d`` do."""
    p = _check_p(p)
    x = T.as_tensor(input)
    if x.ndim not in (batched - 1, batched):
        raise RuntimeError(f"{name}: Expected {batched - 1}D or {batched}D input, but received "
                           f"a {x.ndim}D input. Note that {name} exists to provide channel-wise "
                           f"dropout on inputs with {batched - 2} spatial dimension(s), a "
                           f"channel dimension, and an optional batch dimension (i.e. "
                           f"{batched - 1}D or {batched}D inputs).")
    if x.ndim == batched - 1:
        if inplace:
            raise NotImplementedError(f"{name}(inplace=True) of an unbatched input: write "
                                      f"x = {name}(x) instead")
        return _dropout_impl(x.unsqueeze(0), p, training, False, True, alpha).squeeze(0)
    return _dropout_impl(x, p, training, inplace, True, alpha)


def dropout1d(input: Any, p: float = 0.5, training: bool = True,  # noqa: A002
              inplace: bool = False) -> Tensor:
    """``F.dropout1d``: zero whole channels of ``(N, C, L)`` or ``(C, L)``."""
    return _features("dropout1d", input, p, training, inplace, 3)


def dropout2d(input: Any, p: float = 0.5, training: bool = True,  # noqa: A002
              inplace: bool = False) -> Tensor:
    """``F.dropout2d``: zero whole channels of ``(N, C, H, W)``; a 3-D input is taken as
    ``(N, C, L)`` with PyTorch's warning (its behaviour since 1.11)."""
    x = T.as_tensor(input)
    p = _check_p(p)
    if x.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), where C is the channel dim. This behavior will change "
                      "in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise "
                      "dropout behavior, please switch to using dropout1d instead.",
                      stacklevel=2)
        return _dropout_impl(x, p, training, inplace, True, False)
    if x.ndim != 4:
        warnings.warn(f"dropout2d: Received a {x.ndim}-D input to dropout2d, which is "
                      f"deprecated and will result in an error in a future release. To retain "
                      f"the behavior and silence this warning, please use dropout instead. "
                      f"Note that dropout2d exists to provide channel-wise dropout on inputs "
                      f"with 2 spatial dimensions, a channel dimension, and an optional batch "
                      f"dimension (i.e. 3D or 4D inputs).", stacklevel=2)
        if x.ndim < 2:
            raise NotImplementedError("dropout2d of a 0-d or 1-d input: use dropout")
    return _dropout_impl(x, p, training, inplace, True, False)


def dropout3d(input: Any, p: float = 0.5, training: bool = True,  # noqa: A002
              inplace: bool = False) -> Tensor:
    """``F.dropout3d``: zero whole channels of ``(N, C, D, H, W)`` or ``(C, D, H, W)``."""
    return _features("dropout3d", input, p, training, inplace, 5)


def alpha_dropout(input: Any, p: float = 0.5, training: bool = False,  # noqa: A002
                  inplace: bool = False) -> Tensor:
    """``F.alpha_dropout`` (for SELU networks): elementwise."""
    return _dropout_impl(T.as_tensor(input), _check_p(p), training, inplace, False, True)


def feature_alpha_dropout(input: Any, p: float = 0.5, training: bool = False,  # noqa: A002
                          inplace: bool = False) -> Tensor:
    """``F.feature_alpha_dropout``: alpha dropout of whole channels."""
    x = T.as_tensor(input)
    if x.ndim < 2:
        raise NotImplementedError("feature_alpha_dropout of a 0-d or 1-d input: PyTorch "
                                  "needs a channel dimension too")
    return _dropout_impl(x, _check_p(p), training, inplace, True, True)


def gumbel_softmax(logits: Any, tau: float = 1.0, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """``F.gumbel_softmax``: ``softmax((logits + g) / tau)`` with ``g = -log(E)``, ``E``
    exponential draws (one per element, ``exponential_``'s stream); ``hard``: the one-hot
    of the argmax in the forward pass, the soft sample's gradient in the backward
    (straight-through). ``eps`` is unused, as in PyTorch."""
    del eps
    x = T.as_tensor(logits)
    # PyTorch's legacy_contiguous_format: a row-major buffer, whatever x's layout, so the
    # draws come in logical order
    gumbels = -(zeros_like(x, memory_format=contiguous_format).exponential_().log())
    y_soft = ((x + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.max(dim, keepdim=True)[1]
    y_hard = zeros_like(x, memory_format=contiguous_format).scatter(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


__all__ = ["dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
           "gumbel_softmax"]
