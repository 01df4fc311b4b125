"""Convolution, pooling, normalisation, dropout and embedding modules (as torch.nn's).

Parameter shapes, buffer names and default initialisation follow PyTorch, so a PyTorch
model's ``state_dict`` loads unchanged and ``gc.manual_seed`` gives PyTorch's initial weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import tensor_ops as T
from ..autograd import no_grad
from ..ir import dtypes
from ..tensor import Tensor
from . import functional as F
from . import init
from ._fconv import pair, single
from .module import Module, Parameter


def _np_dtype(dtype: Any) -> Any:
    return np.float32 if dtype is None else dtypes.as_dtype(dtype).np


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _check_padding_mode(name: str, padding_mode: str, transposed: bool = False) -> None:
    if padding_mode not in _PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got "
                         f"padding_mode='{padding_mode}'")
    if transposed and padding_mode != "zeros":
        raise ValueError(f'Only "zeros" padding mode is supported for {name}')


def _mode_padded(x: Any, padding: Any, kernel: tuple, dilation: tuple, mode: str) -> Tensor:
    """``x`` padded with ``F.pad`` in ``mode`` (last dim first, as torch's
    ``_reversed_padding_repeated_twice``); the convolution then runs unpadded."""
    pads: list[int] = []
    for i in reversed(range(len(kernel))):
        if isinstance(padding, str):
            total = 0 if padding == "valid" else dilation[i] * (kernel[i] - 1)
            pads += [total // 2, total - total // 2]
        else:
            pads += [padding[i], padding[i]]
    return F.pad(x, pads, mode=mode)


class _MaxPoolNd(Module):
    """Max pooling's constructor, forward and repr, for the 1-D and 2-D functional forms."""

    _pool: Any = None

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1, return_indices: bool = False,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        # PyTorch stores the kernel size as the stride when none is given (and shows it)
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Any) -> Any:
        return type(self)._pool(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                self.ceil_mode, self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool2d(_MaxPoolNd):
    _pool = staticmethod(F.max_pool2d)


class AvgPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.stride = stride if stride is not None else kernel_size
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, x: Any) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


def _triple(v: Any) -> tuple:
    """PyTorch's ``_triple``: a sequence stays as given (``F.conv3d`` rejects a wrong
    length when the layer runs, as PyTorch's does), a number is repeated three times."""
    if isinstance(v, (list, tuple)):
        return tuple(v)
    return (v, v, v)


def _single_or_pair(v: Any, nd: int) -> tuple:
    if nd == 1:
        return (single(v),)
    return _triple(v) if nd == 3 else pair(v)


class _ConvBase(Module):
    """Shared construction of the 1-D/2-D/3-D (transposed) convolutions: PyTorch's
    parameter shapes and its default initialisation."""

    _nd = 2
    _transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None,
                 output_padding: Any = 0) -> None:
        super().__init__()
        name = type(self).__name__
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        _check_padding_mode(name, padding_mode, self._transposed)
        nd = self._nd
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _single_or_pair(kernel_size, nd)
        self.stride = _single_or_pair(stride, nd)
        if isinstance(padding, str):
            if self._transposed or padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _single_or_pair(padding, nd)
        self.dilation = _single_or_pair(dilation, nd)
        self.output_padding = _single_or_pair(output_padding, nd)
        self.groups, self.padding_mode = groups, padding_mode
        self.transposed = self._transposed
        npd = _np_dtype(dtype)
        wshape = ((in_channels, out_channels // groups) if self._transposed
                  else (out_channels, in_channels // groups)) + self.kernel_size
        self.weight = Parameter(np.empty(wshape, npd))
        if bias:
            self.bias = Parameter(np.empty((out_channels,), npd))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    _conv: Any = None  # the forward convolutions' functional form (F.conv1d/2d/3d)

    def forward(self, x: Any) -> Tensor:
        """The convolution; a non-zero ``padding_mode`` pads with ``F.pad`` first."""
        padding = self.padding
        if self.padding_mode != "zeros":
            x = _mode_padded(x, self.padding, self.kernel_size, self.dilation, self.padding_mode)
            padding = 0
        return type(self)._conv(x, self.weight, self.bias, self.stride, padding, self.dilation,
                                self.groups)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvBase):
    """1-D convolution over NCL input; weight (out, in/groups, k) and bias (out)."""

    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)

    _conv = staticmethod(F.conv1d)


class Conv2d(_ConvBase):
    """2-D convolution over NCHW input; weight (out, in/groups, kh, kw) and bias (out)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)

    _conv = staticmethod(F.conv2d)


class _ConvTransposeBase(_ConvBase):
    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype, output_padding)

    def _output_padding(self, x: Tensor, output_size: Any) -> tuple:
        if output_size is None:
            return self.output_padding
        nd = self._nd
        sizes = [int(s) for s in output_size][-nd:]
        if len(sizes) != nd:
            raise ValueError(f"output_size must have {nd} or {nd + 2} elements (got "
                             f"{len(list(output_size))})")
        ins = [int(d) for d in x.shape[x.ndim - nd:]]
        res = []
        for i in range(nd):
            lo = ((ins[i] - 1) * self.stride[i] - 2 * self.padding[i]
                  + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            if not lo <= sizes[i] < lo + self.stride[i]:
                raise ValueError(f"requested an output size of {sizes}, but valid sizes range "
                                 f"from {lo} to {lo + self.stride[i] - 1} (for an input of "
                                 f"{ins})")
            res.append(sizes[i] - lo)
        return tuple(res)


class ConvTranspose1d(_ConvTransposeBase):
    """Transposed 1-D convolution; weight (in, out/groups, k) as PyTorch's."""

    _nd = 1

    def forward(self, x: Any, output_size: Any = None) -> Tensor:
        x = T.as_tensor(x)
        return F.conv_transpose1d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)


class ConvTranspose2d(_ConvTransposeBase):
    """Transposed 2-D convolution; weight (in, out/groups, kh, kw) as PyTorch's."""

    def forward(self, x: Any, output_size: Any = None) -> Tensor:
        x = T.as_tensor(x)
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self._output_padding(x, output_size), self.groups,
                                  self.dilation)


class MaxPool1d(_MaxPoolNd):
    _pool = staticmethod(F.max_pool1d)


class AvgPool1d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True) -> None:
        super().__init__()
        # PyTorch keeps these as 1-tuples (``_single``), the stride defaulting to the kernel
        self.kernel_size = _single_or_pair(kernel_size, 1)
        self.stride = _single_or_pair(stride if stride is not None else kernel_size, 1)
        self.padding = _single_or_pair(padding, 1)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Any) -> Tensor:
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Any) -> Tensor:
        return F.adaptive_avg_pool1d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    def forward(self, x: Any) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)


class AdaptiveMaxPool2d(Module):
    def __init__(self, output_size: Any, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x: Any) -> Any:
        return F.adaptive_max_pool2d(x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class Upsample(Module):
    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.size, self.mode, self.align_corners = size, mode, align_corners
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) \
            else (tuple(float(f) for f in scale_factor) if scale_factor else None)
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x: Any) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = (f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None
                else f"size={self.size!r}")
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode (identity in eval mode)."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    _fn = staticmethod(F.dropout)  # (input, p, training, inplace): each variant's own

    def forward(self, x: Any) -> Tensor:
        return self._fn(x, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of ``(N, C, L)`` / ``(C, L)`` with probability ``p``."""

    _fn = staticmethod(F.dropout1d)


class Dropout2d(Dropout):
    """Zeroes whole channels of ``(N, C, H, W)`` with probability ``p``."""

    _fn = staticmethod(F.dropout2d)


class Dropout3d(Dropout):
    """Zeroes whole channels of ``(N, C, D, H, W)`` / ``(C, D, H, W)`` with probability
    ``p``."""

    _fn = staticmethod(F.dropout3d)


class AlphaDropout(Dropout):
    """Alpha dropout for SELU networks (keeps the mean and variance)."""

    _fn = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(Dropout):
    """Alpha dropout of whole channels."""

    _fn = staticmethod(F.feature_alpha_dropout)


class LayerNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(int(d) for d in ns)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        npd = _np_dtype(dtype)
        if elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape, npd))
            if bias:
                self.bias = Parameter(np.zeros(self.normalized_shape, npd))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class _RunningStatsNorm(Module):
    """The parameters and buffers batch and instance normalisation share, with PyTorch's
    names: ``weight``/``bias`` when ``affine``, ``running_mean``, ``running_var`` and the int64
    ``num_batches_tracked`` when ``track_running_stats`` (None otherwise)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        npd = _np_dtype(dtype)
        if affine:  # PyTorch 2.x's keyword-only ``bias=False`` keeps the weight only
            self.weight = Parameter(np.ones(num_features, npd))
            if bias:
                self.bias = Parameter(np.zeros(num_features, npd))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", Tensor._from_array(np.zeros(num_features, npd)))
            self.register_buffer("running_var", Tensor._from_array(np.ones(num_features, npd)))
            self.register_buffer("num_batches_tracked",
                                 Tensor._from_array(np.zeros((), np.int64)))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()


class _BatchNorm(_RunningStatsNorm):
    """Batch normalisation with PyTorch's buffers: ``running_mean``, ``running_var`` and the
    int64 ``num_batches_tracked``. In a compiled training step their updates are state
    updates of the step (``_assign`` on a buffer)."""

    _ranks: Sequence[int] = ()

    def forward(self, x: Any) -> Tensor:
        x = T.as_tensor(x)
        if x.ndim not in self._ranks:
            raise ValueError(f"expected {' or '.join(f'{r}D' for r in self._ranks)} input "
                             f"(got {x.ndim}D input)")
        if not (self.training or self.track_running_stats):
            use_batch = True
        else:
            use_batch = self.training or self.running_mean is None
        momentum = 0.0 if self.momentum is None else self.momentum
        update = self.training and self.track_running_stats
        if update:
            with no_grad():
                self.num_batches_tracked._assign(self.num_batches_tracked + 1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / self.num_batches_tracked.to(x.dtype)
        keep = update or not use_batch
        return F.batch_norm(x, self.running_mean if keep else None,
                            self.running_var if keep else None, self.weight, self.bias,
                            use_batch, momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)


class Embedding(Module):
    """A lookup table (num_embeddings, embedding_dim), initialised N(0, 1) as PyTorch's."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: Any = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Any = None, _freeze: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            if padding_idx < 0:
                padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        npd = _np_dtype(dtype)
        if _weight is None:
            self.weight = Parameter(np.empty((num_embeddings, embedding_dim), npd),
                                    requires_grad=not _freeze)
            init.normal_(self.weight)
            if padding_idx is not None:
                self.weight._node._value[padding_idx] = 0
        else:
            self.weight = Parameter(np.asarray(_weight, npd), requires_grad=not _freeze)

    def forward(self, idx: Any) -> Tensor:
        return F.embedding(idx, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"

