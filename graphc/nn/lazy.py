"""Lazy modules: ``nn.LazyLinear``, ``nn.LazyConv1d/2d/3d``, ``nn.LazyConvTranspose1d/2d/3d``,
``nn.LazyBatchNorm1d/2d/3d`` and ``nn.LazyInstanceNorm1d/2d/3d`` (and ``LazyModuleMixin``).

PyTorch's design, kept: the module is built with its input size 0 and its parameters as
``UninitializedParameter`` objects; a forward pre-hook reads the first input's shape,
materializes them in place (so an optimizer built over them sees the real tensors), runs the
layer's ``reset_parameters`` (the same random draws as PyTorch's, so ``gc.manual_seed`` gives
PyTorch's weights) and turns the module into its eager class (``LazyLinear`` -> ``Linear``,
``cls_to_become``). A ``load_state_dict`` pre-hook materializes them from the checkpoint's
shapes instead.

Why the first call must be eager: materializing draws the initial values and changes the
module's class and hooks, which are Python-side facts a compiled step is specialised on; the
values a trace could draw would be the step's inputs, not the module's state. So the hook
raises inside ``gc.compile`` with what to do (one eager forward on an example batch).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .. import _context
from ..autograd import no_grad
from ..tensor import Tensor
from . import init
from .layers import Linear
from .layers2d import (
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    ConvTranspose1d,
    ConvTranspose2d,
    _BatchNorm,
)
from .layers3d import BatchNorm3d, Conv3d, ConvTranspose3d, InstanceNorm3d
from .parameter import UninitializedBuffer, UninitializedParameter, is_lazy
from .transformer import InstanceNorm1d, InstanceNorm2d, _InstanceNorm


class LazyModuleMixin:
    """Mixed in before a layer class: registers the hooks that materialize the parameters
    from the first input (``initialize_parameters``, written by each lazy layer) or from a
    loaded ``state_dict``."""

    cls_to_become: type | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self._load_hook = self._register_load_state_dict_pre_hook(  # type: ignore[attr-defined]
            self._lazy_load_hook)
        self._initialize_hook = self.register_forward_pre_hook(  # type: ignore[attr-defined]
            self._infer_parameters, with_kwargs=True)

    def _lazy_load_hook(self, state_dict: Any, prefix: str, *_: Any) -> None:
        """Give each uninitialized parameter or buffer the shape of its entry in the
        ``state_dict`` being loaded (``load_state_dict`` then copies the values in)."""
        for name, t in itertools.chain(self._parameters.items(),  # type: ignore[attr-defined]
                                       self._buffers.items()):  # type: ignore[attr-defined]
            key = prefix + name
            if key in state_dict and t is not None and is_lazy(t):
                value = state_dict[key]
                if not is_lazy(value):
                    t.materialize(tuple(getattr(value, "shape", np.shape(value))))

    def initialize_parameters(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"initialize_parameters is not implemented for {type(self).__name__}")

    def has_uninitialized_params(self) -> bool:
        """Whether any parameter or buffer of this module is still uninitialized."""
        return any(is_lazy(t) for t in itertools.chain(
            self._parameters.values(), self._buffers.values()))  # type: ignore[attr-defined]

    def _infer_parameters(self, module: Any, args: tuple, kwargs: dict | None = None) -> None:
        if _context.current() is not None:
            raise RuntimeError(
                f"{type(module).__name__}: a lazy module materializes its parameters from the "
                "shape of its first input, which cannot happen inside a compiled function "
                "(the initial values and the module's class are state the compiled step is "
                "built on). Call the model once eagerly on an example batch before the first "
                "compiled call")
        with no_grad():
            module.initialize_parameters(*args, **(kwargs or {}))
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {type(self).__name__} has not been fully initialized")
        module._initialize_hook.remove()
        module._load_hook.remove()
        delattr(module, "_initialize_hook")
        delattr(module, "_load_hook")
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become


def _dim(x: Any, i: int) -> int:
    return int(x.shape[i])


class LazyLinear(LazyModuleMixin, Linear):
    """``nn.Linear`` whose ``in_features`` is the last dim of the first input."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(0, 0, False, device, dtype)
        self.weight = UninitializedParameter(dtype=dtype)
        self.out_features = out_features
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input: Any) -> None:  # noqa: A002
        if not self.has_uninitialized_params():
            # materialized by load_state_dict: graphc's Linear checks in_features in forward
            # (PyTorch's does not, and leaves it 0)
            self.in_features = self.in_features or int(self.weight.shape[1])
            return
        self.in_features = _dim(input, -1)
        self.weight.materialize((self.out_features, self.in_features))
        if self.bias is not None:
            self.bias.materialize((self.out_features,))
        self.reset_parameters()


class _LazyConvXdMixin(LazyModuleMixin):
    """``in_channels`` from dim 1 of a batched input (dim 0 of an unbatched one)."""

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()  # type: ignore[misc]

    def _get_in_channels(self, input: Any) -> int:  # noqa: A002
        nd = self._nd + 1  # type: ignore[attr-defined]
        if input.ndim not in (nd, nd + 1):
            raise RuntimeError(f"Expected {nd}D (unbatched) or {nd + 1}D (batched) input to "
                               f"{type(self).__name__}, but got input of size: "
                               f"{list(input.shape)}")
        return _dim(input, 1 if input.ndim == nd + 1 else 0)

    def initialize_parameters(self, input: Any, *args: Any, **kwargs: Any) -> None:  # noqa: A002
        if not self.has_uninitialized_params():  # materialized by load_state_dict
            w = self.weight.shape  # type: ignore[attr-defined]
            in_ch = w[0] if self.transposed else w[1] * self.groups  # type: ignore
            self.in_channels = self.in_channels or int(in_ch)
            return
        self.in_channels = self._get_in_channels(input)
        g = self.groups  # type: ignore[attr-defined]
        if self.in_channels % g != 0:
            raise ValueError("in_channels must be divisible by groups")
        k = self.kernel_size  # type: ignore[attr-defined]
        out = self.out_channels  # type: ignore[attr-defined]
        if self.transposed:  # type: ignore[attr-defined]
            self.weight.materialize((self.in_channels, out // g, *k))  # type: ignore
        else:
            self.weight.materialize((out, self.in_channels // g, *k))  # type: ignore
        if self.bias is not None:  # type: ignore[attr-defined]
            self.bias.materialize((out,))  # type: ignore[attr-defined]
        self.reset_parameters()


def _lazy_params(m: Any, out_channels: int, bias: bool, dtype: Any) -> None:
    """The uninitialized weight (and bias) of a lazy convolution, as PyTorch sets them after
    building the layer with no channels."""
    m.weight = UninitializedParameter(dtype=dtype)
    m.out_channels = out_channels
    if bias:
        m.bias = UninitializedParameter(dtype=dtype)


class _LazyConv(_LazyConvXdMixin):
    """PyTorch's ``LazyConv1d/2d/3d`` constructor: the layer built with no channels, then
    an uninitialized weight (and bias)."""

    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups,  # type: ignore
                         False, padding_mode, device, dtype)
        _lazy_params(self, out_channels, bias, dtype)


class _LazyConvTranspose(_LazyConvXdMixin):
    """PyTorch's ``LazyConvTranspose1d/2d/3d`` constructor (``output_padding`` before
    ``groups``, ``dilation`` after ``bias``, as theirs)."""

    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(0, 0, kernel_size, stride, padding, output_padding,  # type: ignore
                         groups, False, dilation, padding_mode, device, dtype)
        _lazy_params(self, out_channels, bias, dtype)


class LazyConv1d(_LazyConv, Conv1d):
    """``nn.Conv1d`` whose ``in_channels`` is read from the first input."""

    cls_to_become = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    """``nn.Conv2d`` whose ``in_channels`` is read from the first input."""

    cls_to_become = Conv2d


class LazyConv3d(_LazyConv, Conv3d):
    """``nn.Conv3d`` whose ``in_channels`` is read from the first input."""

    cls_to_become = Conv3d


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    """``nn.ConvTranspose1d`` whose ``in_channels`` is read from the first input."""

    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    """``nn.ConvTranspose2d`` whose ``in_channels`` is read from the first input."""

    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    """``nn.ConvTranspose3d`` whose ``in_channels`` is read from the first input."""

    cls_to_become = ConvTranspose3d


class _LazyNormBase(LazyModuleMixin):
    """The lazy batch and instance norms: ``num_features`` is dim 1 of the first input (as
    PyTorch reads it, for unbatched instance-norm input too); the affine parameters and the
    running statistics start uninitialized, ``num_batches_tracked`` at 0."""

    def __init__(self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__(0, eps, momentum, False, False, device, dtype, bias=False)
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = UninitializedParameter(dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(dtype=dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(dtype=dtype)
            self.running_var = UninitializedBuffer(dtype=dtype)
            self.num_batches_tracked = Tensor._from_array(np.zeros((), np.int64))

    def reset_parameters(self) -> None:
        """PyTorch's ``_NormBase.reset_parameters`` (running statistics reset, weight 1,
        bias 0), once the shapes are known."""
        if self.has_uninitialized_params() or self.num_features == 0:
            return
        self.reset_running_stats()  # type: ignore[attr-defined]
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def initialize_parameters(self, input: Any) -> None:  # noqa: A002
        if not self.has_uninitialized_params():  # materialized by load_state_dict
            if not self.num_features:
                known = self.weight if self.affine else self.running_mean
                self.num_features = 0 if known is None else int(known.shape[0])
            return
        self.num_features = _dim(input, 1)
        n = (self.num_features,)
        if self.affine:
            self.weight.materialize(n)
            if self.bias is not None:
                self.bias.materialize(n)
        if self.track_running_stats:
            self.running_mean.materialize(n)
            self.running_var.materialize(n)
        self.reset_parameters()


class LazyBatchNorm1d(_LazyNormBase, _BatchNorm):
    """``nn.BatchNorm1d`` whose ``num_features`` is read from the first input."""

    cls_to_become = BatchNorm1d
    _ranks = BatchNorm1d._ranks


class LazyBatchNorm2d(_LazyNormBase, _BatchNorm):
    """``nn.BatchNorm2d`` whose ``num_features`` is read from the first input."""

    cls_to_become = BatchNorm2d
    _ranks = BatchNorm2d._ranks


class LazyBatchNorm3d(_LazyNormBase, _BatchNorm):
    """``nn.BatchNorm3d`` whose ``num_features`` is read from the first input."""

    cls_to_become = BatchNorm3d
    _ranks = BatchNorm3d._ranks


class _LazyInstanceNorm(_LazyNormBase, _InstanceNorm):
    """PyTorch's lazy instance norms take ``_LazyNormBase``'s defaults (``affine`` and
    ``track_running_stats`` True, unlike ``InstanceNorm*d``'s), so these do too."""


class LazyInstanceNorm1d(_LazyInstanceNorm):
    """``nn.InstanceNorm1d`` whose ``num_features`` is read from the first input."""

    cls_to_become = InstanceNorm1d
    _rank = InstanceNorm1d._rank


class LazyInstanceNorm2d(_LazyInstanceNorm):
    """``nn.InstanceNorm2d`` whose ``num_features`` is read from the first input."""

    cls_to_become = InstanceNorm2d
    _rank = InstanceNorm2d._rank


class LazyInstanceNorm3d(_LazyInstanceNorm):
    """``nn.InstanceNorm3d`` whose ``num_features`` is read from the first input."""

    cls_to_become = InstanceNorm3d
    _rank = InstanceNorm3d._rank


__all__ = ["LazyModuleMixin", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d",
           "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
           "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d",
           "LazyInstanceNorm2d", "LazyInstanceNorm3d"]
