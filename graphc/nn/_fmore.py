"""``torch.nn.functional`` names that are other spellings of functions graphc already has:
``lp_pool3d``, the in-place activations (``relu_``, ``elu_``, ``leaky_relu_``, ``hardtanh_``,
``threshold_``, ``selu_``, ``celu_``), the ``*_with_indices`` pools and the deprecated
``upsample_nearest`` / ``upsample_bilinear``.

Why each is a call of another ``F`` function rather than code of its own: PyTorch defines them
so (``lp_pool3d`` is ``avg_pool3d`` of ``x ** p`` in ``torch/nn/functional.py``; ``relu_`` is
``relu`` written into its input; ``max_pool2d_with_indices`` is what ``max_pool2d`` dispatches
to when ``return_indices=True``), and calling the existing function keeps one definition of the
values, the gradients and the compiled form. The in-place forms go through the op table's
``inplace=True`` path, the one ``Tensor.relu_`` uses, so eagerly they write the input's memory
and inside a compiled step they rebind it, with the same aliasing checks.

The functions come from the modules that define them, not from ``functional`` (which imports
this file); the in-place activations bind their parameters and call the op table's in-place
method exactly as ``functional``'s table-generated ``F.<op>(..., inplace=True)`` does.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from .. import tensor_ops as T
from ..ir.elementwise import SURFACE
from ..tensor import Tensor
from ._fconv import adaptive_max_pool2d, interpolate, max_pool1d, max_pool2d
from ._fconv3d import adaptive_max_pool3d, avg_pool3d, max_pool3d, triple
from ._fextra import _lp_finish, adaptive_max_pool1d

_TABLE = {d.name: d for d in SURFACE}


def lp_pool3d(input: Any, norm_type: float, kernel_size: Any, stride: Any = None,  # noqa: A002
              ceil_mode: bool = False) -> Tensor:
    """``F.lp_pool3d``: ``(sum over the window of x ** p) ** (1 / p)``, computed as PyTorch
    does (an ``avg_pool3d`` of ``x ** p`` times ``kd · kh · kw``); ``p = inf`` is the max pool
    of ``|x|``, ``-inf`` the min."""
    x = T.as_tensor(input)
    kd, kw, kh = triple(kernel_size, "kernel_size")
    if isinstance(norm_type, (int, float)):
        if norm_type == math.inf:
            return max_pool3d(x.abs(), kernel_size, stride, 0, 1, ceil_mode)
        if norm_type == -math.inf:
            return -max_pool3d(-x.abs(), kernel_size, stride, 0, 1, ceil_mode)
    out = avg_pool3d(x.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return _lp_finish(out, kd * kw * kh, norm_type)


# -- in-place activations: ``F.<op>(input, ..., inplace=True)`` ------------------------------
def _inplace(name: str, input: Any, *args: Any, **kwargs: Any) -> Tensor:  # noqa: A002
    """The op table's in-place method of ``name`` on ``input`` (returned, as PyTorch's)."""
    d = _TABLE[name]
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}_(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    return T._inplace_method(d)(input, **T.bind_params(d, args, kwargs, name))


def relu_(input: Tensor) -> Tensor:  # noqa: A002
    """``F.relu`` written into ``input``."""
    return _inplace("relu", input)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """``F.elu`` written into ``input``."""
    return _inplace("elu", input, alpha)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:  # noqa: A002
    """``F.leaky_relu`` written into ``input``."""
    return _inplace("leaky_relu", input, negative_slope)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:  # noqa: A002
    """``F.hardtanh`` written into ``input``."""
    return _inplace("hardtanh", input, min_val, max_val)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:  # noqa: A002
    """``F.threshold`` written into ``input``."""
    return _inplace("threshold", input, threshold, value)


def selu_(input: Tensor) -> Tensor:  # noqa: A002
    """``F.selu`` written into ``input``."""
    return _inplace("selu", input)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """``F.celu`` written into ``input``."""
    return _inplace("celu", input, alpha)


# -- pools that always return (values, indices) ---------------------------------------------
def max_pool1d_with_indices(input: Any, kernel_size: Any, stride: Any = None,  # noqa: A002
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                            return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``F.max_pool1d`` with ``return_indices=True`` (whatever ``return_indices`` says, as
    PyTorch's)."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input: Any, kernel_size: Any, stride: Any = None,  # noqa: A002
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                            return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``F.max_pool2d`` with ``return_indices=True``."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input: Any, kernel_size: Any, stride: Any = None,  # noqa: A002
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                            return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``F.max_pool3d`` with ``return_indices=True``."""
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def adaptive_max_pool1d_with_indices(input: Any, output_size: Any,  # noqa: A002
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``F.adaptive_max_pool1d`` with ``return_indices=True``."""
    return adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(input: Any, output_size: Any,  # noqa: A002
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``F.adaptive_max_pool2d`` with ``return_indices=True``."""
    return adaptive_max_pool2d(input, output_size, True)


def adaptive_max_pool3d_with_indices(input: Any, output_size: Any,  # noqa: A002
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    """``F.adaptive_max_pool3d`` with ``return_indices=True``."""
    return adaptive_max_pool3d(input, output_size, True)


# -- deprecated upsampling spellings ---------------------------------------------------------
def upsample_nearest(input: Any, size: Any = None, scale_factor: Any = None) -> Tensor:  # noqa: A002
    """Deprecated ``F.upsample_nearest``: warns as PyTorch does, then
    ``interpolate(mode='nearest')``."""
    warnings.warn("`nn.functional.upsample_nearest` is deprecated. Use "
                  "`nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Any, size: Any = None, scale_factor: Any = None) -> Tensor:  # noqa: A002
    """Deprecated ``F.upsample_bilinear``: warns as PyTorch does, then
    ``interpolate(mode='bilinear', align_corners=True)`` (its corners-aligned grid)."""
    warnings.warn("`nn.functional.upsample_bilinear` is deprecated. Use "
                  "`nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


__all__ = ["lp_pool3d", "relu_", "elu_", "leaky_relu_", "hardtanh_", "threshold_", "selu_",
           "celu_", "max_pool1d_with_indices", "max_pool2d_with_indices",
           "max_pool3d_with_indices", "adaptive_max_pool1d_with_indices",
           "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
           "upsample_nearest", "upsample_bilinear"]
