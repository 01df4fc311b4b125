"""Volumetric (3-D) layers for volumes and video, as torch.nn's: convolutions, pooling and
normalisation over ``(N, C, D, H, W)`` (or unbatched ``(C, D, H, W)``) input.

Constructor arguments, defaults, parameter names, shapes and initialisation, ``extra_repr``
and constructor errors follow PyTorch, so a PyTorch model's ``state_dict`` loads unchanged and
``gc.manual_seed`` gives PyTorch's initial weights. The computation is the functional forms of
``_fconv3d`` (compositions of the 2-D ops) and the rank-generic normalisations.
"""

from __future__ import annotations

from typing import Any

from .. import tensor_ops as T
from ..tensor import Tensor
from . import functional as F
from .layers2d import (
    AdaptiveAvgPool1d,
    AdaptiveMaxPool2d,
    AvgPool2d,
    _BatchNorm,
    _ConvBase,
    _ConvTransposeBase,
    _MaxPoolNd,
)
from .transformer import _InstanceNorm


class Conv3d(_ConvBase):
    """3-D convolution over ``(N, C, D, H, W)``; weight ``(out, in/groups, kD, kH, kW)``,
    bias ``(out)``; ``padding_mode`` reflect/replicate/circular pads with ``F.pad`` first."""

    _nd = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)

    _conv = staticmethod(F.conv3d)


class ConvTranspose3d(_ConvTransposeBase):
    """Transposed 3-D convolution; weight ``(in, out/groups, kD, kH, kW)`` as PyTorch's;
    ``forward(x, output_size)`` picks the output padding that gives ``output_size``."""

    _nd = 3

    def forward(self, x: Any, output_size: Any = None) -> Tensor:
        x = T.as_tensor(x)
        return F.conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)


class MaxPool3d(_MaxPoolNd):
    """3-D max pooling; ``stride`` defaults to ``kernel_size`` (shown so in the repr, as
    PyTorch's)."""

    _pool = staticmethod(F.max_pool3d)


class AvgPool3d(AvgPool2d):
    """3-D average pooling (``count_include_pad``, ``ceil_mode``, ``divisor_override``);
    ``stride`` defaults to ``kernel_size``."""

    def forward(self, x: Any) -> Tensor:
        return F.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class AdaptiveAvgPool3d(AdaptiveAvgPool1d):
    """Adaptive average pooling to ``output_size`` (an int, or a triple with ``None`` for
    "keep this dim")."""

    def forward(self, x: Any) -> Tensor:
        return F.adaptive_avg_pool3d(x, self.output_size)


class AdaptiveMaxPool3d(AdaptiveMaxPool2d):
    """Adaptive max pooling to ``output_size``; indices when the output size divides the
    input size."""

    def forward(self, x: Any) -> Any:
        return F.adaptive_max_pool3d(x, self.output_size, self.return_indices)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over ``(N, C, D, H, W)`` with PyTorch's buffers."""

    _ranks = (5,)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)


class InstanceNorm3d(_InstanceNorm):
    """Instance normalisation over ``(N, C, D, H, W)`` or ``(C, D, H, W)``."""

    _rank = 4

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)


__all__ = ["Conv3d", "ConvTranspose3d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d",
           "AdaptiveMaxPool3d", "BatchNorm3d", "InstanceNorm3d"]
