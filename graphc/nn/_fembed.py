"""Bags of embeddings: ``F.embedding_bag`` and ``nn.EmbeddingBag`` (as torch's).

The rows are one bounds-checked ``gather`` of the weight. A 2-D input is a batch of bags of one
length: a reshape and a reduction over it. A 1-D input with ``offsets`` has bags whose extents
are *data*, so the bag of each position is computed the way ATen's ``make_offset2bag`` does,
with graph ops that run inside a compiled step too:

    bag = cumsum(scatter_add(zeros(M + 1), offsets, ones))[:M] - 1

and the bags are reduced by a ``scatter_add`` into ``(bags, dim)`` (``sum``; ``mean`` divides
by a ``scatter_add`` of the counts). ``max`` picks, per bag and feature, the first position
holding the largest value (ATen's tie rule, so the whole gradient goes to one row) through a
one-hot ``argmax`` over ``(bags, M, dim)`` -- O(bags * M * dim) memory -- and gathers it, so
its gradient is a scatter into exactly those rows. Entries equal to ``padding_idx`` are left out
of every bag (not summed, counted or maxed). Offsets' values are checked eagerly with
PyTorch's errors; inside a compiled step an offset past the input or a first offset other
than 0 stops the step at the native bounds check of the ``scatter_add``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .. import _context
from .. import tensor_ops as T
from ..index_ops import scatter_add
from ..ir import dtypes as dt
from ..ir import shapes as sh
from ..reduce_ops import cumsum
from ..tensor import Tensor, builder
from . import init
from .module import Module, Parameter

_TORCH_TYPE = {"float32": "FloatTensor", "float64": "DoubleTensor", "bfloat16": "BFloat16Tensor",
               "int64": "LongTensor", "int32": "IntTensor", "bool": "BoolTensor"}


def _type_name(d: dt.DType) -> str:
    return "torch." + _TORCH_TYPE.get(d.name, d.name)


def _traced() -> bool:
    return _context.current() is not None


def _full(value: Any, shape: Any, dtype: dt.DType) -> Tensor:
    return Tensor._wrap(builder().const(value, tuple(sh.dim(s) for s in shape), dtype))


def _iota(shape: Any, axis: int) -> Tensor:
    return Tensor._wrap(builder().op("iota", (), shape=tuple(sh.dim(s) for s in shape),
                                     dtype=dt.int64, axis=axis))


def _check_index_dtype(t: Tensor, what: str) -> None:
    if t.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"Expected tensor for argument #1 '{what}' to have one of the "
                           f"following scalar types: Long, Int; but got {_type_name(t.dtype)} "
                           f"instead (while checking arguments for embedding_bag)")


def _check_values(flat: Tensor, off: Tensor | None, num: int, fast_path: bool) -> None:
    """Eagerly, ATen's checks on the values: offsets start at 0, end within the input and
    never decrease (ATen fails on decreasing ones or reads garbage); indices lie in
    ``[0, num)``, with the message of the kernel PyTorch would pick."""
    if _traced():
        return
    m = int(flat.shape[0])
    if off is not None:
        ov = off.numpy()
        if ov.size:
            if ov[0] != 0:
                raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the "
                                   f"mini-batch has to start from position 0. However, got "
                                   f"{int(ov[0])}")
            if ov[-1] > m:
                raise RuntimeError(f"offsets[-1] can not be greater than input's length {m} "
                                   f"but got offsets[-1] of {int(ov[-1])}")
            if np.any(np.diff(ov) < 0):
                raise RuntimeError(f"embedding_bag: offsets must be non-decreasing, got "
                                   f"{ov.tolist()}")
    iv = flat.numpy()
    bad = np.flatnonzero((iv < 0) | (iv >= num))
    if bad.size:
        pos, val = int(bad[0]), int(iv[bad[0]])
        if fast_path:
            raise RuntimeError(f"Index {pos} of input takes value {val} which is not in the "
                               f"valid range [0, {num})")
        raise RuntimeError(f"embedding_bag: Expected idx >= 0 && idx < num_embeddings but "
                           f"found idx to be {val}")


def _bag_of(off: Tensor, m: Any) -> Tensor:
    """Per input position, its bag (ATen's ``make_offset2bag``): the number of offsets at or
    before it, minus one. Positions past the last offset of ``include_last_offset`` land in
    the bag after the last (the caller drops it)."""
    n = off.shape[0]
    starts = scatter_add(_full(0, (sh.plus(m, 1),), dt.int64), 0, off, _full(1, (n,), dt.int64))
    return T.slice_dims(cumsum(starts, 0), [0], [m]) - 1


def _first_max(rows: Tensor, member: Tensor) -> tuple[Tensor, Tensor]:
    """``member`` (bags, M) says which rows (M, D) each bag holds. Returns, per bag and
    feature, the position of the first largest member value (bags, D), and whether the bag
    has a member (bags, 1)."""
    scores = T.where(member.unsqueeze(-1), rows.detach().unsqueeze(0), float("-inf"))
    pos = T.argmax(scores, 1)
    return pos, T.amax(member.to(dt.int64), 1, keepdim=True) > 0


def embedding_bag(input: Any, weight: Any, offsets: Any = None, max_norm: float | None = None,  # noqa: A002
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean",
                  sparse: bool = False, per_sample_weights: Any = None,
                  include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """``torch.nn.functional.embedding_bag``: per bag, the sum, mean or max of the weight rows
    its indices name. Bags are the rows of a 2-D input, or the runs of a 1-D input starting at
    each of ``offsets`` (``include_last_offset``: the last offset ends the last bag). An empty
    bag gives zeros. ``per_sample_weights`` scale each row (``sum`` only). ``max_norm``
    renorms the rows read in place first, as ATen; ``scale_grad_by_freq`` and
    ``sparse=True`` raise ``NotImplementedError``."""
    idx, w = T.as_tensor(input), T.as_tensor(weight)
    if w.dtype is dt.int64 and idx.dtype.is_float:
        warnings.warn("Argument order of nn.functional.embedding_bag was changed. Usage "
                      "`embedding_bag(weight, input, ...)` is deprecated, and should now be "
                      "`embedding_bag(input, weight, ...)`.", stacklevel=2)
        idx, w = w, idx
    psw = None if per_sample_weights is None else T.as_tensor(per_sample_weights)
    if psw is not None and not sh.same_shape(idx.shape, psw.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({sh.fmt_shape(psw.shape)}) is "
                         f"not None, then it must have the same shape as the input "
                         f"({sh.fmt_shape(idx.shape)})")
    if w.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {w.ndim}")
    off = None
    if idx.ndim == 2:
        if offsets is not None:
            raise ValueError(f"if input is 2D, then offsets has to be None, as input is treated "
                             f"is a mini-batch of fixed length sequences. However, found "
                             f"offsets of type {type(offsets)}")
        if idx.shape[1] == 0:
            raise RuntimeError("step must be nonzero")
        include_last_offset = False
    elif idx.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        off = T.as_tensor(offsets)
        if off.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{idx.ndim}")
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError("max mode does not support sparse weights")
    if psw is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' (got "
                                  f"mode='{mode}'). Please open a feature request on GitHub.")
    if scale_grad_by_freq:
        raise NotImplementedError("embedding_bag: scale_grad_by_freq is not supported")
    if sparse:
        raise NotImplementedError("embedding_bag: sparse=True (sparse gradients) is not "
                                  "supported")
    _check_index_dtype(idx, "indices")
    if off is not None:  # ATen promotes offsets to the indices' type first: its message
        _check_index_dtype(off, "indices")  # names 'indices' for bad offsets too
    if not w.dtype.is_float:
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have one of the "
                           f"following scalar types: Half, BFloat16, Float, Double; but got "
                           f"{_type_name(w.dtype)} instead (while checking arguments for "
                           f"embedding_bag)")
    if psw is not None and psw.dtype is not w.dtype:
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have the same type as "
                           f"tensor for argument #1 'per_sample_weights'; but type "
                           f"{_type_name(w.dtype)} does not equal {_type_name(psw.dtype)} "
                           f"(while checking arguments for embedding_bag)")
    if include_last_offset and off is not None and off.shape[0] == 0:
        raise RuntimeError("include_last_offset: number of offset should be at least 1")
    num, dim = int(w.shape[0]), int(w.shape[1])
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise RuntimeError(f"padding_idx must be within the number of embeddings, {-num} "
                               f"through {num - 1}, but got {padding_idx}")
        padding_idx = int(padding_idx) + num if padding_idx < 0 else int(padding_idx)
    flat = idx.reshape(-1).to(dt.int64)
    _check_values(flat, off, num, fast_path=mode != "max" and padding_idx is None)
    if max_norm is not None:  # the rows the bags read, renormed in place first (as ATen)
        from ._fnorm import embedding_renorm_

        embedding_renorm_(w, flat, float(max_norm), float(norm_type))
    m = flat.shape[0]
    rows = T.gather(w, 0, flat.unsqueeze(1).expand(m, dim))  # (M, D)
    keep = None if padding_idx is None else flat != padding_idx
    vals = rows if psw is None else rows * psw.reshape(-1).unsqueeze(1)
    if keep is not None:
        vals = T.where(keep.unsqueeze(1), vals, 0.0)
    if off is None:
        return _fixed_bags(rows, vals, keep, idx.shape[0], idx.shape[1], dim, mode)
    return _offset_bags(rows, vals, keep, off.to(dt.int64), m, dim, mode,
                        bool(include_last_offset))


def _fixed_bags(rows: Tensor, vals: Tensor, keep: Tensor | None, b: Any, length: int,
                dim: int, mode: str) -> Tensor:
    """Bags of one length (a 2-D input): a reshape to (B, L, D) and a reduction over L."""
    if mode == "max":
        r3 = rows.reshape(b, length, dim)
        if keep is None:
            scores = r3.detach()
        else:
            member = keep.reshape(b, length)
            scores = T.where(member.unsqueeze(-1), r3.detach(), float("-inf"))
        pos = T.argmax(scores, 1, keepdim=True)  # (B, 1, D): the first largest
        out = T.gather(r3, 1, pos).squeeze(1)
        if keep is None:
            return out
        return T.where(T.amax(member.to(dt.int64), 1, keepdim=True) > 0, out, 0.0)
    total = vals.reshape(b, length, dim).sum(1)
    if mode == "sum":
        return total
    if keep is None:
        return total / float(length)
    count = keep.reshape(b, length).to(vals.dtype).sum(1, keepdim=True)
    return total / T.binary("maximum", count, 1.0)


def _offset_bags(rows: Tensor, vals: Tensor, keep: Tensor | None, off: Tensor, m: Any,
                 dim: int, mode: str, include_last_offset: bool) -> Tensor:
    """Bags given by offsets (a 1-D input): each position's bag from ``_bag_of``, then a
    ``scatter_add`` into one row per bag (plus one for positions past an
    ``include_last_offset`` end, dropped at the end)."""
    n_off = off.shape[0]
    n_bags = n_off - 1 if include_last_offset else n_off
    bag = _bag_of(off, m)  # (M,) in [0, n_off)
    if mode == "max" and not (isinstance(m, int) and m == 0):
        member = bag.unsqueeze(0) == _iota((n_off, m), 0)  # (bags, M)
        if keep is not None:
            member = member & keep.unsqueeze(0)
        pos, nonempty = _first_max(rows, member)
        out = T.where(nonempty, T.gather(rows, 0, pos), 0.0)
    else:  # max of an empty input: every bag is empty, zeros like the sum's
        out = scatter_add(_full(0, (n_off, dim), vals.dtype), 0,
                          bag.unsqueeze(1).expand(m, dim), vals)
        if mode == "mean":
            ones = (_full(1, (m,), vals.dtype) if keep is None else keep.to(vals.dtype))
            count = scatter_add(_full(0, (n_off,), vals.dtype), 0, bag, ones)
            out = out / T.binary("maximum", count, 1.0).unsqueeze(1)
    if include_last_offset:
        out = T.slice_dims(out, [0, 0], [n_bags, dim])
    return out


class EmbeddingBag(Module):
    """A lookup table whose forward reduces bags of rows (``F.embedding_bag``): one call per
    batch of variable-length bags instead of an ``Embedding`` and a padded reduction. The
    weight (num_embeddings, embedding_dim) starts N(0, 1) with the ``padding_idx`` row zeroed,
    as PyTorch's."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: Any = None, include_last_offset: bool = False,
                 padding_idx: int | None = None, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        if padding_idx is not None:
            if padding_idx > 0:
                if padding_idx >= num_embeddings:
                    raise AssertionError("padding_idx must be within num_embeddings")
            elif padding_idx < 0:
                if padding_idx < -num_embeddings:
                    raise AssertionError("padding_idx must be within num_embeddings")
                padding_idx = num_embeddings + padding_idx
        self.padding_idx = padding_idx
        npd = np.float32 if dtype is None else dt.as_dtype(dtype).np
        if _weight is None:
            self.weight = Parameter(np.empty((num_embeddings, embedding_dim), npd))
            self.reset_parameters()
        else:
            arr = np.asarray(_weight.numpy() if isinstance(_weight, Tensor) else _weight)
            if list(arr.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and "
                                     "embedding_dim")
            self.weight = Parameter(arr if dtype is None else arr.astype(npd))
        self.mode = mode
        self.sparse = sparse
        self.include_last_offset = include_last_offset

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            self.weight._node._value[self.padding_idx] = 0

    def forward(self, input: Any, offsets: Any = None, per_sample_weights: Any = None  # noqa: A002
                ) -> Tensor:
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                             self.scale_grad_by_freq, self.mode, self.sparse,
                             per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings!r}, {self.embedding_dim!r}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm!r}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type!r}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq!r}"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx!r}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, mode: str = "mean",
                        sparse: bool = False, include_last_offset: bool = False,
                        padding_idx: int | None = None) -> EmbeddingBag:
        """An EmbeddingBag holding a copy of ``embeddings`` (rows, cols); frozen by default."""
        e = T.as_tensor(embeddings)
        if e.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = (int(d) for d in e.shape)
        bag = cls(num_embeddings=rows, embedding_dim=cols, _weight=e, max_norm=max_norm,
                  norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, mode=mode,
                  sparse=sparse, include_last_offset=include_last_offset,
                  padding_idx=padding_idx)
        bag.weight.requires_grad = not freeze
        return bag
