"""The padding modules beyond 1-D/2-D (``ConstantPad3d``, ``ZeroPad3d``, ``ReflectionPad3d``,
``ReplicationPad3d``), the circular ones (``CircularPad1d/2d/3d``) and ``nn.LPPool3d``.

Why thin: each forward is ``F.pad`` with the module's mode (``F.pad`` already gathers along
the last 1, 2 or 3 dims for ``reflect``, ``replicate`` and ``circular``) or ``F.lp_pool3d``, so
tracing and gradients come from those. The classes reuse ``simple._PadNd`` (PyTorch's
constructor arguments, ``padding`` tuple and ``extra_repr``); the circular ones add PyTorch's
input-rank check, which its other padding modules leave to ``F.pad``.
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from ..tensor_ops import as_tensor
from . import functional as F
from .extra import _LPPoolNd
from .simple import _PadNd


class ConstantPad3d(_PadNd):
    """Pads the last three dims with ``value`` (``padding``: an int or a 6-tuple, the last
    dim's left and right first)."""

    dims = 3

    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding, value)


class ZeroPad3d(ConstantPad3d):
    """``ConstantPad3d`` with zeros."""

    _zero = True

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)


class ReflectionPad3d(_PadNd):
    """Pads the last three dims with their reflection (of a 4-D or 5-D input)."""

    mode, dims = "reflect", 3


class ReplicationPad3d(_PadNd):
    """Pads the last three dims by repeating their edge values."""

    mode, dims = "replicate", 3


class _CircularPadNd(_PadNd):
    mode = "circular"

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        x = as_tensor(input)
        lo = self.dims + 1
        if x.ndim not in (lo, lo + 1):
            raise ValueError(f"expected {lo}D or {lo + 1}D input (got {x.ndim}D input)")
        return F.pad(x, self.padding, "circular")


class CircularPad1d(_CircularPadNd):
    """Pads the last dim with values from its other end (wrapping around)."""

    dims = 1


class CircularPad2d(_CircularPadNd):
    """Circular padding of the last two dims."""

    dims = 2


class CircularPad3d(_CircularPadNd):
    """Circular padding of the last three dims."""

    dims = 3


class LPPool3d(_LPPoolNd):
    """``F.lp_pool3d``: the ``norm_type``-norm of each 3-D window."""

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        return F.lp_pool3d(input, float(self.norm_type), self.kernel_size, self.stride,
                           self.ceil_mode)


__all__ = ["ConstantPad3d", "ZeroPad3d", "ReflectionPad3d", "ReplicationPad3d",
           "CircularPad1d", "CircularPad2d", "CircularPad3d", "LPPool3d"]
