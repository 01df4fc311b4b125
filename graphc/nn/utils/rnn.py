"""Padding and packing of variable-length sequences (``graphc.nn.utils.rnn``), as
``torch.nn.utils.rnn``.

``pad_sequence`` is a concatenation with constant blocks, so it runs eagerly and compiled.
Packing (``PackedSequence``, ``pack_padded_sequence``, ``pad_packed_sequence``) depends on the
*values* of the lengths: which rows exist at each time step. Eagerly those values are known and
packing is a gather by a constant index (differentiable, so gradients reach the padded input);
inside a compiled step they would be run-time data deciding shapes, so packing raises
NotImplementedError there (pad the batch and run the recurrent layer on the padded tensor, or
mask the loss, instead).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ... import _context
from ... import tensor_ops as T
from ...ir import dtypes as dt
from ...tensor import Tensor

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence",
           "pad_packed_sequence", "pad_sequence", "unpad_sequence", "pack_sequence",
           "unpack_sequence"]


def _eager_only(what: str) -> None:
    if _context.current() is not None:
        raise NotImplementedError(
            f"{what}: packed sequences are not supported in compiled steps (gc.compile): the "
            "packing depends on the values of the sequence lengths, which a compiled step only "
            "knows when it runs. Run the recurrent layer on the padded batch (and mask the "
            "loss) inside the step, or use packed sequences eagerly")


def _int_array(v: Any) -> np.ndarray:
    return np.asarray(v.numpy() if isinstance(v, Tensor) else v).astype(np.int64).reshape(-1)


def _index(a: Sequence[int] | np.ndarray) -> Tensor:
    return T.as_tensor(np.asarray(a, np.int64))


class _PackedFields(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


class PackedSequence(_PackedFields):
    """``(data, batch_sizes, sorted_indices, unsorted_indices)``: the valid rows of a padded,
    length-sorted batch, time step after time step (``data``: ``[sum(lengths), *]``;
    ``batch_sizes[t]``: how many sequences are longer than ``t``). Build it with
    ``pack_padded_sequence`` or ``pack_sequence``."""

    __slots__ = ()

    def __new__(cls, data: Any, batch_sizes: Any = None, sorted_indices: Any = None,
                unsorted_indices: Any = None) -> PackedSequence:
        if batch_sizes is None:
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        return super().__new__(cls, T.as_tensor(data), T.as_tensor(batch_sizes),
                               sorted_indices, unsorted_indices)

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        """The same packing with ``data`` converted (``Tensor.to``'s arguments)."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def float(self) -> PackedSequence:  # noqa: A003
        return self.to(dtype=dt.float32)

    def double(self) -> PackedSequence:
        return self.to(dtype=dt.float64)

    @property
    def is_cuda(self) -> bool:
        return False


def invert_permutation(permutation: Any) -> Tensor | None:
    """The inverse permutation (``out[permutation[i]] = i``), or None for None."""
    if permutation is None:
        return None
    p = _int_array(permutation)
    out = np.empty_like(p)
    out[p] = np.arange(p.size, dtype=np.int64)
    return _index(out)


def _packed_positions(batch_sizes: np.ndarray, batch: int) -> np.ndarray:
    """Row ``i`` of the packed data is row ``pos[i]`` of the time-major padded batch flattened
    to ``[T*B, *]`` (``t*B + b`` for every ``b < batch_sizes[t]``)."""
    return np.concatenate([t * batch + np.arange(n, dtype=np.int64)
                           for t, n in enumerate(batch_sizes)])


def padded_from_packed(data: Tensor, batch_sizes: Any, total_length: int | None = None,
                       padding_value: float = 0.0) -> Tensor:
    """The time-major padded ``[T, B, *]`` batch of packed ``data`` (B = ``batch_sizes[0]``),
    by one gather from ``data`` with a padding row appended (so gradients reach ``data``)."""
    bs = _int_array(batch_sizes)
    steps, batch = (bs.size if total_length is None else total_length), int(bs[0])
    rest = tuple(data.shape[1:])
    idx = np.full(steps * batch, data.shape[0], np.int64)
    idx[_packed_positions(bs, batch)] = np.arange(data.shape[0], dtype=np.int64)
    pad_row = T.as_tensor(np.full((1, *rest), padding_value, data.dtype.np))
    flat = T.cat([data, pad_row], 0).index_select(0, _index(idx))
    return flat.reshape(steps, batch, *rest)


def packed_from_padded(padded: Tensor, batch_sizes: Any) -> Tensor:
    """The packed rows of a time-major padded ``[T, B, *]`` batch (the inverse of
    ``padded_from_packed`` on the valid rows)."""
    bs = _int_array(batch_sizes)
    steps, batch = padded.shape[0], padded.shape[1]
    flat = padded.reshape(steps * batch, *padded.shape[2:])
    return flat.index_select(0, _index(_packed_positions(bs, batch)))


def step_mask(batch_sizes: Any) -> Tensor:
    """``[T, B, 1]`` bool: whether row ``b`` exists at step ``t`` (``b < batch_sizes[t]``)."""
    bs = _int_array(batch_sizes)
    m = np.arange(int(bs[0]))[None, :] < bs[:, None]
    return T.as_tensor(m[:, :, None])


def pack_padded_sequence(input: Any, lengths: Any, batch_first: bool = False,  # noqa: A002
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch (``[T, B, *]``, or ``[B, T, *]`` with ``batch_first``) whose row
    ``b`` has ``lengths[b]`` valid steps. With ``enforce_sorted`` the lengths must already be in
    decreasing order; otherwise the batch is sorted here and the permutation kept, so RNN
    outputs and ``pad_packed_sequence`` come back in the caller's order."""
    _eager_only("pack_padded_sequence")
    x = T.as_tensor(input)
    lens = _int_array(lengths)
    sorted_indices = None
    if not enforce_sorted:
        order = np.argsort(-lens, kind="stable")
        lens = lens[order]
        sorted_indices = _index(order)
        x = x.index_select(0 if batch_first else 1, sorted_indices)
    if batch_first:
        x = x.transpose(0, 1)
    steps, batch = x.shape[0], x.shape[1]
    if lens.size != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{lens.size} (batch_size={batch})")
    if (lens <= 0).any():
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if (np.diff(lens) > 0).any():
        raise RuntimeError(
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
            "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
            "to sidestep this requirement if you do not need ONNX exportability.")
    if lens[0] > steps:
        raise RuntimeError(f"pack_padded_sequence: a length ({int(lens[0])}) is larger than "
                           f"the padded sequence length {steps}")
    batch_sizes = (lens[None, :] > np.arange(int(lens[0]))[:, None]).sum(1).astype(np.int64)
    data = packed_from_padded(x, batch_sizes)
    return PackedSequence(data, _index(batch_sizes), sorted_indices, None)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """The padded batch of a ``PackedSequence`` and its lengths (int64), in the order the
    sequences had before packing."""
    _eager_only("pad_packed_sequence")
    bs = _int_array(sequence.batch_sizes)
    steps = bs.size
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {steps}")
        steps = total_length
    out = padded_from_packed(sequence.data, bs, steps, padding_value)
    lengths = (bs[None, :] > np.arange(int(bs[0]))[:, None]).sum(1).astype(np.int64)
    if batch_first:
        out = out.transpose(0, 1)
    if sequence.unsorted_indices is not None:
        un = _int_array(sequence.unsorted_indices)
        out = out.index_select(0 if batch_first else 1, _index(un))
        lengths = lengths[un]
    return out, _index(lengths)


def pad_sequence(sequences: Any, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack sequences of different lengths (``[L_i, *]``) into ``[L_max, B, *]`` (or
    ``[B, L_max, *]``), filling with ``padding_value`` after (``"right"``) or before
    (``"left"``) each one. A concatenation with constant blocks, so it also compiles (the
    lengths are the sequences' shapes, fixed in a trace)."""
    if not isinstance(sequences, Iterable):
        raise RuntimeError("pad_sequence: Expected iterable for input sequences, but got arg "
                           f"of type: {type(sequences)}")
    seqs = [T.as_tensor(s) for s in sequences]
    if not seqs:
        raise RuntimeError("received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    rest = tuple(seqs[0].shape[1:])
    for s in seqs:
        if s.ndim == 0 or tuple(s.shape[1:]) != rest:
            raise RuntimeError(
                f"pad_sequence: every sequence must have the trailing shape {list(rest)} of "
                f"the first one, got a sequence of shape {list(s.shape)}")
    longest = max(int(s.shape[0]) for s in seqs)
    padded = []
    for s in seqs:
        n = longest - int(s.shape[0])
        if n:
            block = T.as_tensor(np.full((n, *rest), padding_value, s.dtype.np))
            s = T.cat([s, block] if padding_side == "right" else [block, s], 0)
        padded.append(s)
    return T.stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Any, lengths: Any,
                   batch_first: bool = False) -> list[Tensor]:
    """The list of unpadded sequences of a padded batch (inverse of ``pad_sequence``)."""
    x = T.as_tensor(padded_sequences)
    if not batch_first:
        x = x.transpose(0, 1)
    return [x[b, :int(n)] for b, n in enumerate(_int_array(lengths))]


def pack_sequence(sequences: Sequence[Any], enforce_sorted: bool = True) -> PackedSequence:
    """``pack_padded_sequence(pad_sequence(sequences), lengths)``."""
    lengths = [int(T.as_tensor(s).shape[0]) for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of sequences of a ``PackedSequence`` (inverse of ``pack_sequence``)."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
