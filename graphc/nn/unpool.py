"""``nn.MaxUnpool1d/2d/3d`` and ``nn.FractionalMaxPool2d/3d``, as torch.nn's: the same
constructor arguments, defaults, stored attributes (tuples, as PyTorch's ``_single``/``_pair``/
``_triple`` make them), constructor errors and ``repr``, so code and ``state_dict``s port
unchanged. The computation is the functional forms in ``_funpool``.

They are not ``layers2d._MaxPoolNd`` subclasses: unpooling takes ``(input, indices,
output_size)`` and has no dilation or ceil mode, and fractional pooling's windows come from
random samples, not a stride, so neither shares that constructor or ``forward``.
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from ._funpool import (
    _ntuple,
    fractional_max_pool2d,
    fractional_max_pool3d,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
)
from .module import Module


class _MaxUnpoolNd(Module):
    """Shared constructor, forward and repr: ``stride`` defaults to ``kernel_size`` (stored
    so, as PyTorch's)."""

    _nd = 1
    _unpool: Any = None

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        nd = self._nd
        self.kernel_size = _ntuple(kernel_size, nd)
        self.stride = _ntuple(stride if stride is not None else kernel_size, nd)
        self.padding = _ntuple(padding, nd)

    def forward(self, input: Any, indices: Any, output_size: Any = None) -> Tensor:  # noqa: A002
        return type(self)._unpool(input, indices, self.kernel_size, self.stride, self.padding,
                                  output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """The partial inverse of ``MaxPool1d``: pooled values back at their indices, zeros
    elsewhere; ``forward(input, indices, output_size=None)``."""

    _nd = 1
    _unpool = staticmethod(max_unpool1d)


class MaxUnpool2d(_MaxUnpoolNd):
    """The partial inverse of ``MaxPool2d`` (pass ``output_size`` to undo a pool whose input
    size the default ``(in - 1) * stride + kernel - 2 * padding`` does not recover)."""

    _nd = 2
    _unpool = staticmethod(max_unpool2d)


class MaxUnpool3d(_MaxUnpoolNd):
    """The partial inverse of ``MaxPool3d``."""

    _nd = 3
    _unpool = staticmethod(max_unpool3d)


class _FractionalMaxPoolNd(Module):
    """Shared constructor and forward. ``_random_samples`` is a buffer (``None`` unless
    given): given, it fixes the windows (and is saved in the ``state_dict``, as PyTorch's);
    otherwise every forward draws new ones. No ``extra_repr``, as PyTorch's."""

    _nd = 2
    _pool: Any = None

    def __init__(self, kernel_size: Any, output_size: Any = None, output_ratio: Any = None,
                 return_indices: bool = False, _random_samples: Any = None) -> None:
        super().__init__()
        nd, name = self._nd, type(self).__name__
        if nd == 3 and ((isinstance(kernel_size, int) and kernel_size <= 0) or (
                isinstance(kernel_size, (tuple, list)) and not all(k > 0 for k in kernel_size))):
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        self.kernel_size = _ntuple(kernel_size, nd)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _ntuple(output_size, nd) if output_size is not None else None
        self.output_ratio = _ntuple(output_ratio, nd) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling "
                             "ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and \
                not all(0 < self.output_ratio[d] < 1 for d in range(nd)):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input: Any) -> Any:  # noqa: A002
        return type(self)._pool(input, self.kernel_size, self.output_size, self.output_ratio,
                                self.return_indices, _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """2-D fractional max pooling (Graham, 2014) to ``output_size`` or ``output_ratio`` of
    the input size, with ``kernel_size`` windows at pseudo-random strides."""

    _nd = 2
    _pool = staticmethod(fractional_max_pool2d)


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """3-D fractional max pooling over ``(N, C, T, H, W)`` or ``(C, T, H, W)``."""

    _nd = 3
    _pool = staticmethod(fractional_max_pool3d)


__all__ = ["MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "FractionalMaxPool2d",
           "FractionalMaxPool3d"]
