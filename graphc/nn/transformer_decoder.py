"""Transformer decoder layers and the full encoder-decoder ``Transformer`` (as torch.nn's).

Parameter names, shapes and initialisation follow PyTorch (``self_attn``, ``multihead_attn``,
``linear1``/``linear2``, ``norm1``..``norm3``; ``Transformer`` re-draws every matrix with
``xavier_uniform_``), so a PyTorch model's ``state_dict`` loads unchanged. Every forward is a
composition of ``MultiheadAttention``, ``Linear``, ``LayerNorm`` and ``Dropout`` from
``graphc/nn/transformer.py`` and ``graphc/nn/layers2d.py``: their IR, derivatives and both
native lowerings are those of the primitives those modules use.

Masks follow ``nn.MultiheadAttention``: a boolean ``tgt_mask``/``memory_mask`` or key padding
mask marks the positions that are *excluded*, a float mask is added to the scores. The
``*_is_causal`` flags are hints, as in PyTorch: the mask they describe must still be given
(PyTorch's error otherwise), and graphc always applies the mask itself, which is what a
correct hint means.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..tensor import Tensor
from . import functional as F
from . import init
from .layers import Linear, ModuleList
from .layers2d import Dropout, LayerNorm
from .module import Module
from .transformer import (
    MultiheadAttention,
    TransformerEncoder,
    TransformerEncoderLayer,
    _activation,
    _clone,
)


def _generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
    """``(sz, sz)`` with ``-inf`` above the diagonal and ``0`` on and below it (PyTorch's
    ``torch.triu(torch.full((sz, sz), -inf), diagonal=1)``), float32 unless ``dtype`` says
    otherwise. A constant, so inside a compiled step it is folded into the graph."""
    d = dt.float32 if dtype is None else dt.as_dtype(dtype)
    if not d.is_float:
        raise RuntimeError(f"generate_square_subsequent_mask: -inf is not representable in "
                           f"{d.name}")
    n = int(sz)
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}, {n}]")
    upper = np.triu(np.ones((n, n), bool), 1)
    # built in float32 (bf16 has no numpy dtype of its own) and cast once
    mask = T.as_tensor(np.where(upper, np.float32("-inf"), np.float32(0.0)))
    return mask if d is dt.float32 else mask.to(d)


class TransformerDecoderLayer(Module):
    """Self-attention over the target, attention over the encoder's ``memory`` and a
    feed-forward block, each with a residual connection and a LayerNorm (post-norm by default,
    pre-norm with ``norm_first``), as PyTorch's."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable[[Any], Tensor] = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, bias=bias, dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                 batch_first=batch_first, bias=bias,
                                                 dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation)

    def forward(self, tgt: Any, memory: Any, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Tensor:
        x, mem = T.as_tensor(tgt), T.as_tensor(memory)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask,
                                   tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), mem, memory_mask, memory_key_padding_mask,
                                    memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask,
                                              tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, mem, memory_mask, memory_key_padding_mask,
                                               memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Any, key_padding_mask: Any,
                  is_causal: bool = False) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x: Tensor, mem: Tensor, attn_mask: Any, key_padding_mask: Any,
                   is_causal: bool = False) -> Tensor:
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer`` (``layers.0``, ...) and an optional
    final ``norm``, as PyTorch's."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = ModuleList([_clone(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Any, memory: Any, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        # PyTorch detects a causal ``tgt_mask`` when the hint is None. Detection can only turn
        # the hint on where a mask is given, and graphc's attention applies the given mask
        # whatever the hint says, so None passes on as False (as in TransformerEncoder)
        x, mem = T.as_tensor(tgt), T.as_tensor(memory)
        for layer in self.layers:
            x = layer(x, mem, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal),
                      memory_is_causal=memory_is_causal)
        if self.norm is not None:
            x = self.norm(x)
        return x


class Transformer(Module):
    """The encoder-decoder of "Attention Is All You Need": a ``TransformerEncoder`` and a
    ``TransformerDecoder``, each with a final LayerNorm (or the ``custom_encoder`` /
    ``custom_decoder`` given), every parameter matrix re-drawn with ``xavier_uniform_``, as
    PyTorch's."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable[[Any], Tensor] = F.relu,
                 custom_encoder: Any = None, custom_decoder: Any = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            encoder_layer = TransformerEncoderLayer(
                d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                batch_first, norm_first, bias, dtype=dtype)
            encoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
            self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            decoder_layer = TransformerDecoderLayer(
                d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                batch_first, norm_first, bias, dtype=dtype)
            decoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
            self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, decoder_norm)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src: Any, tgt: Any, src_mask: Any = None, tgt_mask: Any = None,
                memory_mask: Any = None, src_key_padding_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        s, t = T.as_tensor(src), T.as_tensor(tgt)
        is_batched = s.ndim == 3
        if is_batched and t.ndim == 3:
            ax = 0 if self.batch_first else 1
            a, b = s.shape[ax], t.shape[ax]
            # symbolic batch dims: equal sizes share a symbol, so a mismatch shows either way
            if a != b:
                raise RuntimeError("the batch number of src and tgt must be equal")
        if s.shape[-1] != self.d_model or t.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(s, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(t, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None,
                                        dtype: Any = None) -> Tensor:
        """A square causal mask: ``-inf`` where a position would see a later one, else 0."""
        return _generate_square_subsequent_mask(sz, device=device, dtype=dtype)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
