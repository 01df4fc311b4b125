"""``nn.utils.fuse_conv_bn_eval``/``fuse_conv_bn_weights`` and
``fuse_linear_bn_eval``/``fuse_linear_bn_weights``: fold an eval-mode batch norm into the
convolution or linear layer before it, PyTorch's formulas line for line.

These are model transformations done once, eagerly, before inference: they deep-copy a module
and make new ``Parameter`` objects, neither of which graphc does inside a compiled function
(a trace has no values to put in them). The fused module itself then runs eagerly or compiled
like any other layer.
"""

from __future__ import annotations

import copy
from typing import Any

from ... import _core
from ...tensor import Tensor
from ..module import Module, Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights"]


def fuse_conv_bn_eval(conv: Module, bn: Module, transpose: bool = False) -> Module:
    """A copy of ``conv`` whose weight and bias include ``bn``'s normalisation (both in eval
    mode; ``transpose`` for a transposed convolution, whose output channels are dim 1)."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused_conv = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused_conv.weight, fused_conv.bias = fuse_conv_bn_weights(
        fused_conv.weight, fused_conv.bias, bn.running_mean, bn.running_var, bn.eps,
        bn.weight, bn.bias, transpose)
    return fused_conv


def fuse_conv_bn_weights(conv_w: Tensor, conv_b: Tensor | None, bn_rm: Tensor, bn_rv: Tensor,
                         bn_eps: float, bn_w: Tensor | None, bn_b: Tensor | None,
                         transpose: bool = False) -> tuple[Parameter, Parameter]:
    """The fused ``(weight, bias)``: ``w * g / sqrt(var + eps)`` per output channel and
    ``(b - mean) * g / sqrt(var + eps) + beta``, in the convolution's dtypes."""
    w_dtype = conv_w.dtype
    b_dtype = conv_b.dtype if conv_b is not None else w_dtype
    if conv_b is None:
        conv_b = _core.zeros_like(bn_rm)
    if bn_w is None:
        bn_w = _core.ones_like(bn_rm)
    if bn_b is None:
        bn_b = _core.zeros_like(bn_rm)
    bn_var_rsqrt = (bn_rv + bn_eps).rsqrt()
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (len(conv_w.shape) - 2)
    fused_w = (conv_w * (bn_w * bn_var_rsqrt).reshape(shape)).to(dtype=w_dtype)
    fused_b = ((conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b).to(dtype=b_dtype)
    return (_param(fused_w, conv_w.requires_grad), _param(fused_b, conv_b.requires_grad))


def fuse_linear_bn_eval(linear: Module, bn: Module) -> Module:
    """A copy of ``linear`` whose weight and bias include ``bn``'s normalisation (``bn`` over
    the linear layer's outputs: the same number of features, or one)."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused_linear = copy.deepcopy(linear)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError(
            "To fuse, linear.out_features == bn.num_features or bn.num_features == 1, got "
            f"linear.out_features={linear.out_features} and bn.num_features={bn.num_features}")
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused_linear.weight, fused_linear.bias = fuse_linear_bn_weights(
        fused_linear.weight, fused_linear.bias, bn.running_mean, bn.running_var, bn.eps,
        bn.weight, bn.bias)
    return fused_linear


def fuse_linear_bn_weights(linear_w: Tensor, linear_b: Tensor | None, bn_rm: Tensor,
                           bn_rv: Tensor, bn_eps: float, bn_w: Tensor,
                           bn_b: Tensor) -> tuple[Parameter, Parameter]:
    """The fused ``(weight, bias)`` of a linear layer followed by a batch norm."""
    w_dtype = linear_w.dtype
    b_dtype = linear_b.dtype if linear_b is not None else w_dtype
    if linear_b is None:
        linear_b = _core.zeros_like(bn_rm)
    bn_scale = bn_w * (bn_rv + bn_eps).rsqrt()
    fused_w = linear_w * bn_scale.unsqueeze(-1).to(dtype=w_dtype)
    fused_b = ((linear_b - bn_rm) * bn_scale + bn_b).to(dtype=b_dtype)
    return _param(fused_w, linear_w.requires_grad), _param(fused_b, linear_b.requires_grad)


def _param(t: Any, requires_grad: bool) -> Parameter:
    """``nn.Parameter(t, requires_grad)``, refused inside a compiled function with why."""
    from ... import _context

    if _context.current() is not None:
        raise RuntimeError("fusing a batch norm into a layer makes new Parameters, which "
                           "cannot be done inside a compiled function: fuse the model once "
                           "before compiling (the fused model then compiles as usual)")
    return Parameter(t.detach(), requires_grad)
