"""``nn.CrossMapLRN2d``, ``nn.DataParallel`` and ``nn.SyncBatchNorm``: the ``torch.nn``
modules that exist for compatibility with older or multi-device code, with PyTorch's CPU
semantics.

Why a module of their own: none of them needs a new op. ``CrossMapLRN2d`` is a composition
of the front end's ops (so tracing, both backends and autodiff come from those);
``DataParallel`` on a machine without CUDA devices is, in PyTorch, a wrapper that calls its
module; ``SyncBatchNorm`` is batch normalisation whenever no statistics need synchronising.

``CrossMapLRN2d`` is not ``LocalResponseNorm``. PyTorch implements it as the hand-written
autograd function ``torch/nn/modules/_functions.py::CrossMapLRN2d`` (a port of Lua Torch's
``SpatialCrossMapLRN``), whose forward and backward disagree with ``LocalResponseNorm`` and
with each other; this module reproduces both exactly:

- forward: ``scale[c] = k + alpha / size * S[c]`` and ``out = x * scale ** -beta``, where
  ``S[c]`` is a running sum of ``x²`` over the channels ``c - p + 1 .. c + p - 1`` (``p =
  int((size - 1) / 2 + 1)``, clipped to the channels) *plus ``x[:, 0]²`` for every ``c >=
  p``*: the running sum adds the next channel and subtracts the oldest only when ``c > p``,
  so channel 0 is never subtracted;
- backward: PyTorch's hand-written one is not the derivative of that forward (its window,
  ``c - q .. c + size - 1 - q`` with ``q = int(size - (size - 1) / 2)``, is shifted and it
  ignores the channel-0 term; ``torch.autograd.gradcheck`` fails on it for most channel
  counts). It *is* the exact derivative of the same formula with ``S`` summed over the
  transposed window ``c - (size - 1 - q) .. c + q``, so the scale is written as
  ``s_bwd + (s_fwd - s_bwd).detach()``: the value is the forward's, the gradient PyTorch's
  (the same trick ``pdist``'s ``inf`` norm uses in ``_fextra.py``). A network trained with
  it therefore follows PyTorch's training run, not the true gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _context, autograd
from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..tensor import Tensor
from . import functional as F
from .layers2d import _BatchNorm
from .module import Module


# -- CrossMapLRN2d ---------------------------------------------------------------------------
def _channel_window_sum(sq: Tensor, before: int, after: int) -> Tensor:
    """``out[:, c] = sum(sq[:, c - before .. c + after])`` with zeros outside the channels.

    An average pool over ``(before + after + 1, 1)`` with the channels moved to the pooled
    height: no reshape, so any dim may be symbolic in a compiled step."""
    width = before + after + 1
    if width == 1:
        return sq
    t = T.pad(sq.transpose(1, 2), [(0, 0), (0, 0), (before, after), (0, 0)])
    return (F.avg_pool2d(t, (width, 1), 1) * float(width)).transpose(1, 2)


def _cross_map_lrn2d(x: Tensor, size: int, alpha: float, beta: float, k: float) -> Tensor:
    """PyTorch's ``CrossMapLRN2d`` forward with its hand-written backward (module doc)."""
    if x.ndim != 4:
        raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {x.ndim}D instead.")
    if not x.dtype.is_float:  # torch.pow(int, 2, out=...) then a float scale: the same error
        name = dt.TORCH_NAMES.get(x.dtype.name, x.dtype.name)
        raise RuntimeError(f"result type Float can't be cast to the desired output type {name}")
    size = int(size)
    if size < 0:
        raise ValueError(f"CrossMapLRN2d: size must be positive, got {size}")
    ratio = alpha / size  # size 0: ZeroDivisionError, as PyTorch's alpha / size
    channels = x.shape[1]
    if not isinstance(channels, int):
        raise NotImplementedError("CrossMapLRN2d: the channel dim (dim 1) must be static in "
                                  "a compiled step")
    if channels == 0:
        raise IndexError(f"select(): index 0 out of range for tensor of size "
                         f"[{', '.join(str(s) for s in x.shape)}] at dimension 1")
    if any(isinstance(d, int) and d == 0 for d in x.shape):
        return x * 1.0  # nothing to normalise (the pool below cannot take an empty dim)
    sq = x * x
    pre_pad = int((size - 1) / 2 + 1)
    window = _channel_window_sum(sq, pre_pad - 1, pre_pad - 1)
    if channels > pre_pad:  # channel 0 is never dropped from the running sum
        late = (np.arange(channels) >= pre_pad).astype(x.dtype.np).reshape(1, channels, 1, 1)
        window = window + sq[:, :1] * T.as_tensor(late)
    scale = window * ratio + k
    if size >= 2 and x.requires_grad and autograd.is_grad_enabled():
        # PyTorch's backward (size 1 has none: its narrow() raises, so the true gradient is
        # kept there)
        q = int(size - (size - 1) / 2)
        s_bwd = _channel_window_sum(sq, size - 1 - q, q) * ratio + k
        scale = s_bwd + (scale - s_bwd).detach()
    return x * scale ** -beta


class CrossMapLRN2d(Module):
    """Lua Torch's cross-channel local response normalisation over a 4-D ``(N, C, H, W)``
    input, as ``torch.nn.CrossMapLRN2d`` (see the module doc for how its window and
    gradient differ from ``LocalResponseNorm``'s)."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75,
                 k: float = 1) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        return _cross_map_lrn2d(T.as_tensor(input), self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


# -- DataParallel ----------------------------------------------------------------------------
class DataParallel(Module):
    """``torch.nn.DataParallel`` as PyTorch builds it when no CUDA device is available:
    ``device_ids`` becomes ``[]`` (the arguments are accepted and ignored, with no error, as
    PyTorch does) and ``forward`` calls the module. graphc's eager tensors live on the CPU
    and a compiled step runs on one device, so that is the only case there is; the wrapper
    keeps code written for multi-GPU PyTorch running, with ``module.``-prefixed state_dict
    keys. For data parallelism across processes use ``graphc.distributed.DistributedDataParallel``.
    """

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None,
                 dim: int = 0) -> None:
        super().__init__()
        # PyTorch's CPU path sets only these two (no ``dim``/``output_device`` attributes)
        self.module = module
        self.device_ids: list[Any] = []

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)


# -- SyncBatchNorm ---------------------------------------------------------------------------
class _AtLeast2D:
    """The ranks SyncBatchNorm accepts (``_BatchNorm.forward`` checks ``ndim in _ranks``)."""

    def __contains__(self, ndim: object) -> bool:
        return isinstance(ndim, int) and ndim >= 2


def _distributed_world_size() -> int:
    """graphc.distributed's world size, 1 when it is not initialised. Imported here because
    graphc.distributed imports graphc.nn."""
    from ..distributed import comm

    return comm.world_size() if comm.is_initialized() else 1


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.SyncBatchNorm``: batch normalisation over any ``(N, C, *)`` input whose
    statistics PyTorch synchronises across the processes of a job while training.

    Without synchronisation (``graphc.distributed`` not initialised or one process, or not
    training) it is exactly ``BatchNorm``: the same parameters, buffers (``num_batches_tracked``
    included) and state_dict keys, eagerly and in compiled steps; that is PyTorch's fallback
    too. Synchronising would take an all-reduce of the per-channel sum, sum of squares and
    count in the forward pass (and of two gradient sums in the backward pass); graphc's only
    all-reduce inside a compiled step is the gradient reduction of ``DistributedDataParallel``
    between backward and the optimizer update, so with several processes a training forward
    raises ``NotImplementedError`` instead of silently normalising per process.
    """

    _ranks = _AtLeast2D()  # type: ignore[assignment]

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_group: Any = None, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)
        self.process_group = process_group

    def forward(self, input: Any) -> Tensor:  # noqa: A002
        x = T.as_tensor(input)
        if x.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {x.ndim}D input)")
        if isinstance(x.shape[1], int) and x.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        if self.training:  # PyTorch syncs only in training mode
            world = _distributed_world_size()
            if world > 1:
                raise NotImplementedError(
                    f"SyncBatchNorm: synchronising batch statistics across the {world} "
                    "processes of graphc.distributed is not supported: graphc all-reduces "
                    "only gradients, between the backward pass and the optimizer update of a "
                    "compiled step, while SyncBatchNorm needs an all-reduce inside the "
                    "forward and backward passes. Use BatchNorm*d (per-process statistics) "
                    "instead, or evaluate with .eval()")
            ctx = _context.current()
            if ctx is not None:  # a step traced as batch norm must not run once it syncs
                ctx.guard(lambda: _distributed_world_size() > 1, False,
                          "SyncBatchNorm: graphc.distributed's world size", once="syncbn-world")
        return super().forward(x)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: Any = None) -> Module:
        """Replace every ``BatchNorm*d`` in ``module``'s tree by a ``SyncBatchNorm`` that
        shares its parameters and buffers (the same tensor objects, as PyTorch's assignment
        does, so an optimizer built before the conversion still updates them) and its
        training flag; returns the new root if ``module`` itself was one."""
        out = module
        if isinstance(module, _BatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_group,
                      bias=module.bias is not None)
            if module.affine:
                with autograd.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out


__all__ = ["CrossMapLRN2d", "DataParallel", "SyncBatchNorm"]
