"""Attention, transformer-encoder and further normalisation modules (as torch.nn's).

Parameter and buffer names, shapes and default initialisation follow PyTorch, so a PyTorch
module's ``state_dict`` loads unchanged. Every forward is a composition of the functional
forms in ``graphc/nn/_fattn.py`` and ``graphc/nn/_fnorm.py``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import tensor_ops as T
from ..tensor import Tensor
from . import functional as F
from . import init
from ._fattn import bilinear, multi_head_attention_forward
from ._fnorm import group_norm, instance_norm, rms_norm
from .layers import Linear, ModuleList
from .layers2d import Dropout, LayerNorm, _np_dtype, _RunningStatsNorm
from .module import Module, Parameter


class MultiheadAttention(Module):
    """Multi-head attention with PyTorch's parameters: ``in_proj_weight`` (3E, E) (or
    ``q/k/v_proj_weight`` when ``kdim``/``vdim`` differ from ``embed_dim``), ``in_proj_bias``
    (3E), and ``out_proj`` (a Linear)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are "
                                      "not supported")
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        npd = _np_dtype(dtype)
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(np.empty((embed_dim, embed_dim), npd))
            self.k_proj_weight = Parameter(np.empty((embed_dim, self.kdim), npd))
            self.v_proj_weight = Parameter(np.empty((embed_dim, self.vdim), npd))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(np.empty((3 * embed_dim, embed_dim), npd))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(np.empty(3 * embed_dim, npd))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query: Any, key: Any, value: Any, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None,
                average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        q, k, v = T.as_tensor(query), T.as_tensor(key), T.as_tensor(value)
        batched = q.ndim == 3
        if q.ndim not in (2, 3):
            raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but "
                                 f"received {q.ndim}-D query tensor")
        if batched and self.batch_first:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))
        elif not batched:
            q, k, v = (t.unsqueeze(1) for t in (q, k, v))
            if key_padding_mask is not None:
                key_padding_mask = T.as_tensor(key_padding_mask).unsqueeze(0)
        out, w = multi_head_attention_forward(
            q, k, v, self.num_heads, self.in_proj_weight, self.in_proj_bias,
            self.out_proj.weight, self.out_proj.bias, self.dropout, self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            average_attn_weights=average_attn_weights, is_causal=is_causal,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight)
        if batched and self.batch_first:
            out = out.transpose(0, 1)
        elif not batched:
            out = out.squeeze(1)
            if w is not None:
                w = w.squeeze(0)
        return out, w

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


def _activation(name: Any) -> Callable[[Any], Tensor]:
    if name == "relu":
        return F.relu
    if name == "gelu":
        return F.gelu
    if isinstance(name, str):
        raise RuntimeError(f"activation should be relu/gelu, not {name}")
    return name


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and a
    LayerNorm (post-norm by default, pre-norm with ``norm_first``), as PyTorch's."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Any = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(self, src: Any, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Tensor:
        x = T.as_tensor(src)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Any, key_padding_mask: Any,
                  is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer`` (``layers.0``, ...) and an optional
    final ``norm``."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Module | None = None, enable_nested_tensor: bool = True,
                 mask_check: bool = True) -> None:
        super().__init__()
        self.layers = ModuleList([_clone(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src: Any, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool | None = None) -> Tensor:
        x = T.as_tensor(src)
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        if self.norm is not None:
            x = self.norm(x)
        return x


def _clone(module: Module) -> Module:
    """A deep copy whose parameters are fresh leaves (copied values, same requires_grad)."""
    new = copy.deepcopy(module)
    for m in new.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                setattr(m, name, Parameter(np.array(p.numpy()), requires_grad=p.requires_grad))
    return new


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        npd = _np_dtype(dtype)
        if affine:
            self.weight = Parameter(np.ones(num_channels, npd))
            self.bias = Parameter(np.zeros(num_channels, npd))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Tensor:
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class _InstanceNorm(_RunningStatsNorm):
    _rank = 3  # the unbatched rank

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def forward(self, x: Any) -> Tensor:
        x = T.as_tensor(x)
        if x.ndim not in (self._rank, self._rank + 1):
            raise ValueError(f"expected {self._rank}D or {self._rank + 1}D input (got "
                             f"{x.ndim}D input)")
        if self.affine and x.shape[x.ndim - self._rank] != self.num_features:
            raise ValueError(f"expected input's size at dim={x.ndim - self._rank} to match "
                             f"num_features ({self.num_features}), but got: "
                             f"{x.shape[x.ndim - self._rank]}.")
        unbatched = x.ndim == self._rank
        if unbatched:
            x = x.unsqueeze(0)
        y = instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                          self.training or not self.track_running_stats,
                          0.0 if self.momentum is None else self.momentum, self.eps)
        return y.squeeze(0) if unbatched else y

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    _rank = 2


class InstanceNorm2d(_InstanceNorm):
    _rank = 3


class RMSNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float | None = None,
                 elementwise_affine: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(int(d) for d in ns)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape, _np_dtype(dtype)))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: Any) -> Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class Bilinear(Module):
    """``y = x1^T W x2 + b``; weight (out, in1, in2) and bias ~ U(-1/sqrt(in1), 1/sqrt(in1))."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        npd = _np_dtype(dtype)
        self.weight = Parameter(np.empty((out_features, in1_features, in2_features), npd))
        if bias:
            self.bias = Parameter(np.empty(out_features, npd))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Any, input2: Any) -> Tensor:
        return bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Unflatten(Module):
    """Expand dim ``dim`` into ``unflattened_size`` (one entry may be -1)."""

    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Any) -> Tensor:
        x = T.as_tensor(x)
        d = self.dim + x.ndim if self.dim < 0 else self.dim
        shape = list(x.shape)
        return x.reshape(*shape[:d], *self.unflattened_size, *shape[d + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
