"""``nn.Softmax2d``, ``nn.ChannelShuffle``, ``nn.LocalResponseNorm``, ``nn.Fold``,
``nn.Unfold``, ``nn.AdaptiveMaxPool1d``, ``nn.LPPool1d``, ``nn.LPPool2d``,
``nn.PairwiseDistance`` and the losses ``nn.MultiMarginLoss``, ``nn.MultiLabelMarginLoss``,
``nn.TripletMarginWithDistanceLoss``.

Why thin: each forward is one ``F`` call (``graphc/nn/_fextra.py``, ``_ffold.py``, the op
table's ``softmax``), so tracing, gradients and both backends come from those; the modules
hold PyTorch's constructor arguments (attribute names included: ``PairwiseDistance.norm``),
its constructor errors and its ``extra_repr``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..tensor import Tensor
from ..tensor_ops import as_tensor
from . import functional as F
from .loss import _Loss, _WeightedLoss
from .module import Module


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of a ``(C, H, W)`` or ``(N, C, H, W)`` input."""

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        x = as_tensor(input)
        if x.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {x.ndim}D instead")
        return F.softmax(x, -3)


class ChannelShuffle(Module):
    """``F.channel_shuffle`` with ``groups`` (checked when called, as PyTorch)."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


class LocalResponseNorm(Module):
    """``F.local_response_norm`` over ``size`` neighbouring channels."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75,
                 k: float = 1.0) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class Fold(Module):
    """``F.fold`` (col2im): sliding blocks summed back into an ``output_size`` image."""

    def __init__(self, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
                 stride: Any = 1) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding,
                      self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, padding={self.padding}, stride={self.stride}")


class Unfold(Module):
    """``F.unfold`` (im2col): every sliding block of the input as a column."""

    def __init__(self, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
                 stride: Any = 1) -> None:
        super().__init__()
        self.kernel_size, self.dilation = kernel_size, dilation
        self.padding, self.stride = padding, stride

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class AdaptiveMaxPool1d(Module):
    """``F.adaptive_max_pool1d`` to ``output_size`` (with the indices if asked)."""

    def __init__(self, output_size: Any, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input: Any) -> Any:  # noqa: A002
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _LPPoolNd(Module):
    def __init__(self, norm_type: float, kernel_size: Any, stride: Any = None,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """``F.lp_pool1d``: the ``norm_type``-norm of each window."""

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        return F.lp_pool1d(input, float(self.norm_type), self.kernel_size, self.stride,
                           self.ceil_mode)


class LPPool2d(_LPPoolNd):
    """``F.lp_pool2d``: the ``norm_type``-norm of each 2-D window."""

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        return F.lp_pool2d(input, float(self.norm_type), self.kernel_size, self.stride,
                           self.ceil_mode)


class PairwiseDistance(Module):
    """``F.pairwise_distance`` with ``p`` (kept as ``norm``, PyTorch's attribute name)."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Any, x2: Any) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class MultiMarginLoss(_WeightedLoss):
    """``F.multi_margin_loss``; ``weight`` (one per class) is a buffer, as in PyTorch."""

    def __init__(self, p: int = 1, margin: float = 1.0, weight: Any = None,
                 size_average: Any = None, reduce: Any = None,
                 reduction: str = "mean") -> None:
        super().__init__(weight, size_average, reduce, reduction)
        if p != 1 and p != 2:
            raise ValueError("only p == 1 and p == 2 supported")
        if weight is not None and as_tensor(weight).ndim != 1:
            raise ValueError(f"MultiMarginLoss: expected weight to be None or 1D tensor, got "
                             f"{as_tensor(weight).ndim}D instead")
        self.p, self.margin = p, margin

    def forward(self, input: Any, target: Any) -> Tensor:  # noqa: A002
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin,
                                   weight=self.weight, reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """``F.multilabel_margin_loss``."""

    def forward(self, input: Any, target: Any) -> Tensor:  # noqa: A002
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """``F.triplet_margin_with_distance_loss``; the default distance is a
    ``PairwiseDistance()`` child module, as PyTorch's (so it shows in the repr)."""

    def __init__(self, *, distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
                 margin: float = 1.0, swap: bool = False, reduction: str = "mean") -> None:
        super().__init__(None, None, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater "
                             f"than 0, got {margin} instead")
        self.distance_function = distance_function if distance_function is not None \
            else PairwiseDistance()
        self.margin, self.swap = margin, swap

    def forward(self, anchor: Any, positive: Any, negative: Any) -> Tensor:
        return F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction)


__all__ = ["Softmax2d", "ChannelShuffle", "LocalResponseNorm", "Fold", "Unfold",
           "AdaptiveMaxPool1d", "LPPool1d", "LPPool2d", "PairwiseDistance", "MultiMarginLoss",
           "MultiLabelMarginLoss", "TripletMarginWithDistanceLoss"]
