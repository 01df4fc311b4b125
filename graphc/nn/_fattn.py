"""Attention in tensor operations: ``scaled_dot_product_attention`` and the multi-head
attention forward of ``nn.MultiheadAttention``.

``scaled_dot_product_attention`` is the fused ``attention`` op wherever that applies (see
``_fused_applies``; ``graphc.nn.attention.sdpa_kernel`` chooses), and otherwise, like the
multi-head forward around it, a composition of matmul, softmax-style reductions and
elementwise ops whose derivatives and backends come from those primitives. Masks follow PyTorch: for
``scaled_dot_product_attention`` a boolean ``attn_mask`` marks the positions that *take part*
in attention; for multi-head attention a boolean ``attn_mask`` or ``key_padding_mask`` marks
the positions that are *excluded*. Float masks are added to the scores.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _context, amp
from .. import tensor_ops as T
from ..attention_state import SDPBackend
from ..attention_state import state as _backends
from ..ir import dtypes as dt
from ..ir import shapes as sh
from ..tensor import Tensor, builder
from ._fnorm import dropout

_NEG_INF = float("-inf")


def _causal_mask(L: Any, S: Any) -> Tensor:
    """Boolean (L, S), True on and below the diagonal (``torch.ones(L, S).tril()``)."""
    b = builder()
    shape = (L, S)
    i = Tensor._wrap(b.op("iota", (), shape=shape, dtype=dt.int64, axis=0))
    j = Tensor._wrap(b.op("iota", (), shape=shape, dtype=dt.int64, axis=1))
    return j <= i


def _additive(mask: Tensor, like: Tensor, keep_when: bool) -> Tensor:
    """A float mask of ``like``'s dtype: boolean masks become 0 / -inf (0 where the mask equals
    ``keep_when``); float masks pass through."""
    if mask.dtype == dt.bool_:
        zero = T.as_tensor(0.0, like.dtype)
        ninf = T.as_tensor(_NEG_INF, like.dtype)
        return T.where(mask, zero, ninf) if keep_when else T.where(mask, ninf, zero)
    if not mask.dtype.is_float:
        raise TypeError(f"attention mask must be bool or floating point, got {mask.dtype.name}")
    return mask.to(like.dtype) if mask.dtype != like.dtype else mask


def _safe_softmax(s: Tensor) -> Tensor:
    """Softmax over the last dim that gives 0 (and no NaN gradient) on rows whose every entry
    is -inf, as PyTorch's attention does."""
    m = T.amax(s, -1, keepdim=True).detach()
    dead = m == _NEG_INF
    e = (s - T.where(dead, 0.0, m)).exp()
    den = e.sum(-1, keepdim=True)
    return T.where(dead, 0.0, e / T.where(dead, 1.0, den))


def _repeat_heads(x: Tensor, reps: int) -> Tensor:
    """``x.repeat_interleave(reps, dim=-3)``."""
    if reps == 1:
        return x
    shape = list(x.shape)
    h = shape[-3]
    y = x.unsqueeze(-3).expand(*shape[:-3], h, reps, *shape[-2:])
    return y.reshape(*shape[:-3], h * reps, *shape[-2:])


@amp.lower_precision
@T.in_float32
def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v`` over the last two dims (``torch.nn.functional.
    scaled_dot_product_attention``). Rows with every key masked give zeros, as PyTorch's."""
    q, k, v = T.as_tensor(query), T.as_tensor(key), T.as_tensor(value)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise RuntimeError("scaled_dot_product_attention: query, key and value must be at "
                           "least 2-D")
    if not (q.dtype.is_float and k.dtype == q.dtype and v.dtype == q.dtype):
        raise RuntimeError("Expected query, key, and value to have the same floating dtype, "
                           f"but got query.dtype: {q.dtype.name}, key.dtype: {k.dtype.name} "
                           f"and value.dtype: {v.dtype.name} instead.")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if enable_gqa and q.ndim >= 3:
        hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
        if not (isinstance(hq, int) and isinstance(hk, int) and isinstance(hv, int)):
            raise NotImplementedError("scaled_dot_product_attention: enable_gqa needs static "
                                      "head counts")
        if hq % hk or hq % hv:
            raise RuntimeError("scaled_dot_product_attention: number of heads in key/value "
                               "must divide number of heads in query")
        k, v = _repeat_heads(k, hq // hk), _repeat_heads(v, hq // hv)
    e = q.shape[-1]
    if scale is None:
        if not isinstance(e, int):
            raise NotImplementedError("scaled_dot_product_attention: a symbolic embedding "
                                      "size needs an explicit scale")
        scale = 1.0 / math.sqrt(e)
    fused = _fused_applies(q, k, v, attn_mask, dropout_p)
    allowed = _backends()
    ctx = _context.current()
    if ctx is not None:  # a step traced under one sdpa_kernel setting is not reused under another
        ctx.guard(_backends, allowed, "scaled_dot_product_attention backends "
                  "(graphc.nn.attention.sdpa_kernel)", once="sdpa_backends")
    if fused is None and SDPBackend.FLASH_ATTENTION in allowed:
        operands = [q.node, k.node, v.node]
        if attn_mask is not None:  # additive, q's dtype, broadcast to [*b, L, S] (a view)
            m = _additive(T.as_tensor(attn_mask), q, keep_when=True)
            shape = tuple(q.shape[:-1]) + (k.shape[-2],)
            operands.append(builder().broadcast_to(m.node, shape))
        attrs = {}
        if dropout_p > 0.0:  # dropout()'s mask from a fresh seed, drawn where it would draw
            operands.append(T.seed_tensor().node)
            attrs["dropout"] = float(dropout_p)
        return Tensor._wrap(builder().op("attention", operands, scale=float(scale),
                                         causal=bool(is_causal), **attrs))
    if SDPBackend.MATH not in allowed:
        why = fused or "the fused kernel is not allowed (sdpa_kernel)"
        raise RuntimeError(f"scaled_dot_product_attention: no available kernel: {why}, and "
                           "the math implementation is not allowed (sdpa_kernel)")
    s = T.matmul(q, k.transpose(-2, -1)) * float(scale)
    if is_causal:
        s = s + _additive(_causal_mask(q.shape[-2], k.shape[-2]), s, keep_when=True)
    elif attn_mask is not None:
        s = s + _additive(T.as_tensor(attn_mask), s, keep_when=True)
    w = _safe_softmax(s) if (is_causal or attn_mask is not None) else T.softmax(s, -1)
    if dropout_p > 0.0:
        w = dropout(w, dropout_p, True)
    return T.matmul(w, v)


def _fused_applies(q: Tensor, k: Tensor, v: Tensor, attn_mask: Any, dropout_p: float
                   ) -> str | None:
    """None when the fused kernel computes this attention, else why not (for the error
    raised when only it is allowed)."""
    if q.dtype not in (dt.float32, dt.float64):
        return ("the fused kernel takes float32 or float64 (bf16 is computed in float32), got "
                f"{q.dtype.name}")
    if attn_mask is not None:
        m = T.as_tensor(attn_mask)
        if m.dtype.is_float and m.requires_grad:
            return "the fused kernel gives no gradient for a float attn_mask that requires grad"
        if m.dtype != dt.bool_ and not m.dtype.is_float:
            return f"attn_mask must be bool or floating point, got {m.dtype.name}"
        if not sh.can_expand(m.shape, tuple(q.shape[:-1]) + (k.shape[-2],)):
            return (f"attn_mask {tuple(m.shape)} does not broadcast to the scores "
                    f"{tuple(q.shape[:-1]) + (k.shape[-2],)}")
    if dropout_p >= 1.0:
        return "dropout_p=1 drops every weight (the composite computes the zeros)"
    if q.ndim != k.ndim or q.ndim != v.ndim:
        return "q, k and v differ in rank"
    same = all(sh.same(a, b) and sh.same(a, c)
               for a, b, c in zip(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    if not same:
        return "q, k and v have different batch dims (broadcasting)"
    if not (sh.same(q.shape[-1], v.shape[-1]) and isinstance(q.shape[-1], int)):
        return "the fused kernel needs one static head size for q, k and v"
    return None


def _merge_masks(attn_mask: Tensor | None, key_padding_mask: Tensor | None, like: Tensor,
                 n: Any, heads: int, L: Any, S: Any) -> Tensor | None:
    """One additive mask broadcastable to (N, H, L, S), or None."""
    out = None
    if attn_mask is not None:
        am = _additive(T.as_tensor(attn_mask), like, keep_when=False)
        if am.ndim == 3:
            am = am.reshape(n, heads, L, S)
        elif am.ndim != 2:
            raise RuntimeError(f"attn_mask's dimension {am.ndim} is not supported")
        out = am
    if key_padding_mask is not None:
        kp = _additive(T.as_tensor(key_padding_mask), like, keep_when=False)
        kp = kp.reshape(n, 1, 1, S)
        out = kp if out is None else out + kp
    return out


def _linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    out = T.matmul(x, w.T)
    return out + b if b is not None else out


def multi_head_attention_forward(
    query: Tensor, key: Tensor, value: Tensor, num_heads: int,
    in_proj_weight: Tensor | None, in_proj_bias: Tensor | None,
    out_proj_weight: Tensor, out_proj_bias: Tensor | None, dropout_p: float, training: bool,
    key_padding_mask: Any = None, need_weights: bool = True, attn_mask: Any = None,
    average_attn_weights: bool = True, is_causal: bool = False,
    q_proj_weight: Tensor | None = None, k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Sequence-first (L, N, E) multi-head attention, as ``torch.nn.functional.
    multi_head_attention_forward`` (without bias_k/bias_v and zero attention)."""
    q_in, k_in, v_in = T.as_tensor(query), T.as_tensor(key), T.as_tensor(value)
    L, n, e = q_in.shape
    S = k_in.shape[0]
    if e % num_heads:
        raise AssertionError(f"embed_dim {e} not divisible by num_heads {num_heads}")
    hd = e // num_heads
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    bq = bk = bv = None
    if in_proj_bias is not None:
        bq, bk, bv = (in_proj_bias[i * e:(i + 1) * e] for i in range(3))
    if in_proj_weight is not None:
        wq, wk, wv = (in_proj_weight[i * e:(i + 1) * e] for i in range(3))
    else:
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    q = _linear(q_in, wq, bq)
    k = _linear(k_in, wk, bk)
    v = _linear(v_in, wv, bv)

    def heads(t: Tensor, length: Any) -> Tensor:  # (len, N, E) -> (N, H, len, hd)
        return t.transpose(0, 1).reshape(n, length, num_heads, hd).transpose(1, 2)

    q, k, v = heads(q, L), heads(k, S), heads(v, S)
    mask = _merge_masks(attn_mask, key_padding_mask, q, n, num_heads, L, S)
    p = dropout_p if training else 0.0
    weights = None
    if need_weights:
        s = T.matmul(q * (1.0 / math.sqrt(hd)), k.transpose(-2, -1))
        if mask is not None:
            s = s + mask
        w = T.softmax(s, -1)
        weights = w.mean(1) if average_attn_weights else w
        if p > 0.0:
            w = dropout(w, p, True)
        o = T.matmul(w, v)
    else:
        o = scaled_dot_product_attention(q, k, v, mask, p)
    o = o.transpose(1, 2).reshape(n, L, e).transpose(0, 1)
    return _linear(o, out_proj_weight, out_proj_bias), weights


@amp.no_autocast
def bilinear(input1: Any, input2: Any, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y[..., o] = x1 @ weight[o] @ x2 + bias[o]`` (``torch.nn.functional.bilinear``)."""
    x1, x2, w = T.as_tensor(input1), T.as_tensor(input2), T.as_tensor(weight)
    if w.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be 3-D, got {w.ndim}-D")
    o, i1, i2 = w.shape
    if not (x1.ndim >= 1 and x2.ndim >= 1 and x1.shape[-1] == i1 and x2.shape[-1] == i2):
        raise RuntimeError(f"bilinear(): input sizes {tuple(x1.shape)} and {tuple(x2.shape)} "
                           f"do not match weight {tuple(w.shape)}")
    t = T.matmul(x1, w.permute(1, 0, 2).reshape(i1, o * i2))
    t = t.reshape(*x1.shape[:-1], o, i2)
    y = (t * x2.unsqueeze(-2)).sum(-1)
    return y + bias if bias is not None else y
