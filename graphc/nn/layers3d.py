"""Volumetric (3-D) layers for volumes and video, as torch.nn's: convolutions, pooling and
normalisation over ``(N, C, D, H, W)`` (or unbatched ``(C, D, H, W)``) input.

Constructor arguments, defaults, parameter names, shapes and initialisation, ``extra_repr``
and constructor errors follow PyTorch, so a PyTorch model's ``state_dict`` loads unchanged and
``gc.manual_seed`` gives PyTorch's initial weights. The computation is the functional forms of
``_fconv3d`` (compositions of the 2-D ops) and the rank-generic normalisations.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import tensor_ops as T
from ..tensor import Tensor
from . import functional as F
from . import init
from .layers2d import (
    AdaptiveAvgPool1d,
    AdaptiveMaxPool2d,
    _BatchNorm,
    _check_padding_mode,
    _ConvTransposeBase,
    _MaxPoolNd,
    _mode_padded,
    _np_dtype,
)
from .module import Module, Parameter
from .transformer import _InstanceNorm


def _triple(v: Any) -> tuple:
    """PyTorch's ``_triple``: a sequence stays as given (``F.conv3d`` rejects a wrong
    length when the layer runs, as PyTorch's does), a number is repeated three times."""
    if isinstance(v, (list, tuple)):
        return tuple(v)
    return (v, v, v)


class _Conv3dBase(Module):
    """What ``Conv3d`` and ``ConvTranspose3d`` share: PyTorch's ``_ConvNd`` checks, the
    weight ``(out, in/groups, kD, kH, kW)`` (transposed: ``(in, out/groups, ...)``), the
    optional bias, kaiming-uniform initialisation and the repr."""

    _nd = 3
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any,
                 padding: Any, dilation: Any, output_padding: Any, groups: int, bias: bool,
                 padding_mode: str, dtype: Any) -> None:
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        self.kernel_size, self.stride = _triple(kernel_size), _triple(stride)
        if isinstance(padding, str) and not self._transposed:
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding: Any = padding
        else:
            self.padding = _triple(padding)
        _check_padding_mode(type(self).__name__, padding_mode, self._transposed)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.dilation, self.output_padding = _triple(dilation), _triple(output_padding)
        self.transposed, self.groups, self.padding_mode = self._transposed, groups, padding_mode
        npd = _np_dtype(dtype)
        wshape = ((in_channels, out_channels // groups) if self._transposed
                  else (out_channels, in_channels // groups)) + tuple(self.kernel_size)
        self.weight = Parameter(np.empty(wshape, npd))
        if bias:
            self.bias = Parameter(np.empty((out_channels,), npd))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's: ``kaiming_uniform_(a=sqrt(5))``, bias ``U(-1/sqrt(fan_in), ..)``."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv3d(_Conv3dBase):
    """3-D convolution over ``(N, C, D, H, W)``; weight ``(out, in/groups, kD, kH, kW)``,
    bias ``(out)``; ``padding_mode`` reflect/replicate/circular pads with ``F.pad`` first."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, 0,
                         groups, bias, padding_mode, dtype)

    def forward(self, x: Any) -> Tensor:
        if self.padding_mode != "zeros":
            x = _mode_padded(x, self.padding, self.kernel_size, self.dilation, self.padding_mode)
            return F.conv3d(x, self.weight, self.bias, self.stride, 0, self.dilation,
                            self.groups)
        return F.conv3d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class ConvTranspose3d(_Conv3dBase):
    """Transposed 3-D convolution; weight ``(in, out/groups, kD, kH, kW)`` as PyTorch's;
    ``forward(x, output_size)`` picks the output padding that gives ``output_size``."""

    _transposed = True
    _output_padding = _ConvTransposeBase._output_padding

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         output_padding, groups, bias, padding_mode, dtype)

    def forward(self, x: Any, output_size: Any = None) -> Tensor:
        x = T.as_tensor(x)
        return F.conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)


class MaxPool3d(_MaxPoolNd):
    """3-D max pooling; ``stride`` defaults to ``kernel_size`` (shown so in the repr, as
    PyTorch's)."""

    _pool = staticmethod(F.max_pool3d)

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__(kernel_size, kernel_size if stride is None else stride, padding,
                         dilation, return_indices, ceil_mode)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool3d(Module):
    """3-D average pooling (``count_include_pad``, ``ceil_mode``, ``divisor_override``);
    ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = kernel_size if stride is None else stride
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Any) -> Tensor:
        return F.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


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
