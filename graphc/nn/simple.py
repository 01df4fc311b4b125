"""Layers that are one functional call over a few settings: ``nn.PixelShuffle``,
``nn.PixelUnshuffle``, the padding modules (``ZeroPad2d``, ``ConstantPad1d/2d``,
``ReflectionPad1d/2d``, ``ReplicationPad1d/2d``), ``nn.PReLU`` and ``nn.CosineSimilarity``.

Why here and thin: each forward is the ``F`` function of the same name (``F.pad`` with the
module's mode), so tracing, gradients and both backends come from those; the modules only
hold torch's constructor arguments, parameters and ``extra_repr``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from . import functional as F
from .module import Module, Parameter


class PixelShuffle(Module):
    """``[*, C r^2, H, W] -> [*, C, H r, W r]`` (``F.pixel_shuffle``)."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = int(upscale_factor)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``[*, C, H r, W r] -> [*, C r^2, H, W]`` (``F.pixel_unshuffle``)."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = int(downscale_factor)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


def _padding(padding: Any, n: int, name: str) -> tuple[int, ...]:
    """An int (every side) or ``2 n`` ints (last dim's left, right, then the one before)."""
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        return (int(padding),) * (2 * n)
    vals = tuple(int(p) for p in padding)
    if len(vals) != 2 * n:
        raise ValueError(f"{name}: padding must be an int or a {2 * n}-tuple, got {padding!r}")
    return vals


class _PadNd(Module):
    mode = "constant"
    dims = 2
    _zero = False  # ZeroPad*d: PyTorch's repr shows the padding only

    def __init__(self, padding: Any, value: float | None = None) -> None:
        super().__init__()
        self.padding = _padding(padding, self.dims, type(self).__name__)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if self.mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        if self.mode == "constant" and not self._zero:
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


class ConstantPad1d(_PadNd):
    dims = 1

    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding, value)  # kept as given (its repr shows 3, not 3.0)


class ConstantPad2d(_PadNd):
    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding, value)


class ZeroPad1d(ConstantPad1d):
    _zero = True

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)


class ZeroPad2d(ConstantPad2d):
    _zero = True

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)


class ReflectionPad1d(_PadNd):
    mode, dims = "reflect", 1


class ReflectionPad2d(_PadNd):
    mode = "reflect"


class ReplicationPad1d(_PadNd):
    mode, dims = "replicate", 1


class ReplicationPad2d(_PadNd):
    mode = "replicate"


class PReLU(Module):
    """``max(0, x) + weight * min(0, x)`` with one learnt slope, or one per channel (dim 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        from .. import _core

        self.num_parameters = int(num_parameters)
        self.init = float(init)
        self.weight = Parameter(_core.full((self.num_parameters,), self.init,
                                           dtype=dtype or "float32", device=device))

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class CosineSimilarity(Module):
    """``F.cosine_similarity`` along ``dim``."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = int(dim), float(eps)

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


__all__ = ["PixelShuffle", "PixelUnshuffle", "ConstantPad1d", "ConstantPad2d", "ZeroPad1d",
           "ZeroPad2d", "ReflectionPad1d", "ReflectionPad2d", "ReplicationPad1d",
           "ReplicationPad2d", "PReLU", "CosineSimilarity"]
