"""Order statistics, searching, counting and binning with PyTorch's semantics: ``median``,
``nanmedian``, ``quantile``, ``nanquantile``, ``mode``, ``searchsorted``, ``bucketize``,
``histc``, ``histogram``, ``bincount``, ``unique``, ``unique_consecutive``; attached to
``Tensor`` by ``install`` where ``torch.Tensor`` has the method.

Why compositions: each is written with graphc's front-end ops — the stable ``sort``
primitive (NaN ordered last, as ATen orders it), ``gather``, ``scatter_add``, the ``cummax``
scan, comparisons and ``where`` masks — so IR, derivatives and both native lowerings (CPU and
PTX) come from those primitives, and a value is differentiable exactly where its primitives
are: a median or a mode is a ``gather`` of the input at the selected index (PyTorch's
``value_selecting_reduction_backward``), a quantile a ``lerp`` of two gathered sorted values.
The median of all elements shares its gradient evenly between the elements equal to it, as
PyTorch's ``evenly_distribute_backward`` does (through ``amax``, whose derivative splits
between ties).

The index a value comes from is PyTorch's: ATen's CPU ``median`` partitions with the index as
a tie breaker, which is the stable sort's order; ``mode`` returns the last occurrence of the
most frequent value (the smallest one on a tie of counts), which is what PyTorch's CPU kernel
returns for rows it sorts by insertion (up to 16 elements; for longer rows its choice among
equal values follows ``std::sort`` and is unspecified).

The argument checks are ATen's, in its order, with its exception types and messages. While
a step is traced (``gc.compile``) the batch size is symbolic: everything whose output shape
follows from the input shapes traces (a median along the batch, a quantile of a batch-long
vector). ``bincount``, ``unique`` and ``unique_consecutive`` have output lengths set by the
data, and ``histc`` / ``histogram`` without a range take their bin edges from the data: those
raise ``NotImplementedError`` before anything is traced. Checks on data values (``q`` in
[0, 1], a sorter's range) are made eagerly; a compiled step cannot raise on a value it has
not seen.
"""

from __future__ import annotations

import builtins
import math
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _context
from . import index_ops as I_
from . import shape_ops as S_
from . import tensor_ops as T_
from ._tensor import Tensor, builder
from .ir import dtypes as dt
from .ir import shapes as sh
from .reduce_ops import cummax

# PyTorch's ``torch.return_types`` of these functions: named tuples of the same name and fields
Median = namedtuple("median", ["values", "indices"])
NanMedian = namedtuple("nanmedian", ["values", "indices"])
Mode = namedtuple("mode", ["values", "indices"])
Histogram = namedtuple("histogram", ["hist", "bin_edges"])

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")
# ATen's dtype names in the messages that print a ``caffe2::TypeMeta`` (the histogram checks)
_CPP_NAME = {"float32": "float", "float64": "double", "int64": "long int", "int32": "int",
             "bool": "bool", "bfloat16": "c10::BFloat16"}


# -- helpers ----------------------------------------------------------------------------------
def _traced() -> bool:
    return _context.current() is not None


def _const(value: Any, shape: Sequence[Any], dtype: dt.DType) -> Tensor:
    return Tensor._wrap(builder().const(value, tuple(shape), dtype))


def _torch_name(d: dt.DType) -> str:
    """PyTorch's name of a dtype in ``not implemented for 'Long'`` messages."""
    return T_._TORCH_NAME.get(d.name, "BFloat16" if d is dt.bfloat16 else d.name)


def _tensor(x: Any, fn: str, arg: str, pos: int | None) -> Tensor:
    """``x`` when it is a tensor, else PyTorch's ``TypeError`` naming the argument."""
    if not isinstance(x, Tensor):
        where = f" (position {pos})" if pos is not None else ""
        raise TypeError(f"{fn}(): argument '{arg}'{where} must be Tensor, not "
                        f"{type(x).__name__}")
    return x


def _int_arg(v: Any, fn: str, arg: str, pos: int | None = None) -> int:
    """An int argument (a bool or a float is refused, as PyTorch's argument parser does)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        where = f" (position {pos})" if pos is not None else ""
        raise TypeError(f"{fn}(): argument '{arg}'{where} must be int, not {type(v).__name__}")
    return int(v)


def _is_number(v: Any) -> bool:
    return isinstance(v, (bool, int, float, np.number, np.bool_))


def _number(v: Any, fn: str, arg: str) -> float:
    """A ``Scalar`` argument as a float: a Python or numpy number, or a one-element tensor
    read eagerly (PyTorch accepts both)."""
    if isinstance(v, Tensor):
        if _traced() or v._trace is not None:
            raise NotImplementedError(f"{fn}(): '{arg}' as a tensor inside a compiled step: its "
                                      "value would be fixed when the step is traced; pass a "
                                      "Python number")
        return float(v.item())
    if not _is_number(v):
        raise TypeError(f"{fn}(): argument '{arg}' must be Number, not {type(v).__name__}")
    return float(v)


def _keep_shape(x: Tensor, ax: int) -> list[Any]:
    return [1 if i == ax else d for i, d in enumerate(x.shape)]


def _size(n: Any) -> Tensor:
    """A (possibly symbolic) size as an int64 0-d tensor, so index arithmetic on it traces."""
    return _const(n, (), dt.int64)


def _gather(x: Tensor, ax: int, index: Tensor) -> Tensor:
    """The ``gather`` primitive with ``index`` expanded to ``x``'s other dims."""
    shape = [index.shape[ax] if i == ax else d for i, d in enumerate(x.shape)]
    if not sh.same_shape(index.shape, shape):
        index = index.expand(*shape)
    return I_._gather(x, ax, index)


def _nan_count(x: Tensor, ax: int) -> Tensor:
    """The NaNs along ``ax`` (kept as a dim of size 1), int64."""
    return T_.sum(x.isnan().to(dt.int64), ax, True)


def _reduce_dim(x: Tensor, dim: Any, fn: str) -> int:
    """``dim`` wrapped for ``x`` (a 0-d tensor accepts 0 and -1), or PyTorch's errors."""
    return sh.norm_axis(_int_arg(dim, fn, "dim", 2), x.ndim, fn)


def _check_reduction_size(x: Tensor, ax: int, fn: str) -> None:
    if x.ndim and isinstance(x.shape[ax], int) and x.shape[ax] == 0:
        raise IndexError(f"{fn}(): Expected reduction dim {ax} to have non-zero size.")


def _evenly(flat: Tensor, v: Tensor) -> Tensor:
    """``v`` (an element of the 1-D ``flat``, or NaN) with PyTorch's
    ``evenly_distribute_backward``: the gradient is shared equally by the elements equal to
    ``v`` (the NaNs when ``v`` is NaN). The value is selected, never recomputed, so it is
    ``v`` to the bit: ``amax`` of the tied elements (``amin`` when they are ``-inf``), whose
    derivative splits between ties, and for NaN their mean."""
    xd = flat.detach()
    vd = v.detach()
    v_nan = vd.isnan()
    mask = (xd == vd) | (xd.isnan() & v_nan)
    finite = mask & xd.isnan().logical_not()
    inf = float("inf")
    hi = T_.amax(T_.where(finite, flat, -inf))
    lo = T_.amin(T_.where(finite, flat, inf))
    count = T_.sum(mask.to(flat.dtype))
    nan_mean = T_.sum(T_.where(mask, flat, 0.0)) / count
    return T_.where(v_nan, nan_mean, T_.where(vd == -inf, lo, hi))


def _no_bool(x: Tensor, kernel: str) -> None:
    if x.dtype is dt.bool_:
        raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")


# -- median -----------------------------------------------------------------------------------
def _median_all(x: Tensor, ignore_nan: bool) -> Tensor:
    """The lower median of all elements (``median``: NaN if there is one; ``nanmedian``: of
    the non-NaN elements), as ATen's ``median_impl``: the sorted flat input at
    ``(n - 1) // 2`` (``nanmedian``: ``(n - nans - 1) / 2``, truncated toward zero)."""
    _no_bool(x, "median_cpu")
    flat = x.reshape(-1)
    n = flat.shape[0]
    if isinstance(n, int) and n == 0:  # ATen's NaN, converted to an integer dtype as x86 does
        nan = float("nan") if x.dtype.is_float else int(np.iinfo(x.dtype.np).min)
        return _const(nan, (), x.dtype)
    order = I_.argsort(flat, 0)
    if x.dtype.is_float:
        nans = T_.sum(flat.isnan().to(dt.int64))
        if ignore_nan:
            pos = T_.binary("maximum", _size(n) - nans - 1, 0) // 2
        else:
            pos = T_.where(nans > 0, _size(n) - 1, (_size(n) - 1) // 2)
    else:
        pos = (_size(n) - 1) // 2
    v = I_._gather(flat, 0, _gather(order, 0, pos.reshape(1))).reshape(())
    return _evenly(flat, v) if x.dtype.is_float else v


def _median_dim(x: Tensor, dim: Any, keepdim: bool, ignore_nan: bool, fn: str
                ) -> tuple[Tensor, Tensor]:
    """(values, indices) of the lower median along ``dim``, as ATen's
    ``median_with_indices_impl``: the stable order's element at ``(n - 1) // 2``; with a NaN
    (``median``) the first NaN; ignoring NaNs (``nanmedian``) at ``(n - nans - 1) / 2``
    truncated toward zero (an all-NaN row gives the NaN ``std::nth_element`` picks). The
    value is a ``gather`` of the input, so its gradient goes to that index."""
    _no_bool(x, "median_out")
    ax = _reduce_dim(x, dim, fn)
    if x.ndim == 0:
        return x.clone(), _const(0, (), dt.int64)
    _check_reduction_size(x, ax, fn)
    n = x.shape[ax]
    order = I_.argsort(x, ax)
    if x.dtype.is_float:
        nans = _nan_count(x, ax)
        if ignore_nan:
            pos = T_.binary("maximum", _size(n) - nans - 1, 0) // 2
        else:
            pos = T_.where(nans > 0, _size(n) - nans, (_size(n) - 1) // 2)
    else:
        pos = ((_size(n) - 1) // 2).reshape([1] * x.ndim)
    idx = _gather(order, ax, pos)
    if ignore_nan and x.dtype.is_float and isinstance(n, int) and n > 3:
        # an all-NaN row: PyTorch's index is where std::nth_element leaves the first of n
        # equivalent elements (a function of n alone); a symbolic n keeps the first NaN
        idx = T_.where(nans == n, _all_equivalent_nth(n), idx)
    vals = _gather(x, ax, idx)
    if not keepdim:
        vals, idx = vals.squeeze(ax), idx.squeeze(ax)
    return vals, idx


def _all_equivalent_nth(n: int) -> int:
    """The index ``std::nth_element(first, first, last, comp)`` (libstdc++'s introselect,
    which ATen's CPU ``nanmedian`` calls) leaves first among ``n`` indices that ``comp``
    finds all equivalent, as for a row of NaNs: each round swaps the middle to the front
    (the median of three of equivalent elements is the middle one), partitions by swapping
    from both ends until they meet, and keeps the part holding position 0; the last three
    are insertion-sorted, which moves nothing."""
    idx = list(range(n))
    first, last = 0, n
    while last - first > 3:
        mid = first + (last - first) // 2
        idx[first], idx[mid] = idx[mid], idx[first]
        lo, hi = first + 1, last
        while True:
            hi -= 1
            if not lo < hi:
                break
            idx[lo], idx[hi] = idx[hi], idx[lo]
            lo += 1
        if lo <= 0:
            first = lo
        else:
            last = lo
    return idx[0]


def median(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Any:  # noqa: A002
    """``torch.median``: the lower median of all elements (NaN if any is NaN; an empty input
    gives NaN), or ``(values, indices)`` along ``dim``. All-element medians share their
    gradient between the elements equal to them; along ``dim`` it goes to the index."""
    x = _tensor(input, "median", "input", 1)
    if dim is None:
        if keepdim:
            raise TypeError('median() missing 1 required positional arguments: "dim"')
        return _median_all(x, False)
    return Median(*_median_dim(x, dim, keepdim, False, "median"))


def nanmedian(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Any:  # noqa: A002
    """``torch.nanmedian``: ``median`` of the non-NaN elements (NaN where all are NaN)."""
    x = _tensor(input, "nanmedian", "input", 1)
    if dim is None:
        if keepdim:
            raise TypeError('nanmedian() missing 1 required positional arguments: "dim"')
        return _median_all(x, True)
    return NanMedian(*_median_dim(x, dim, keepdim, True, "nanmedian"))


# -- quantiles --------------------------------------------------------------------------------
def _q_tensor(q: Any, x: Tensor, fn: str) -> tuple[Tensor, bool]:
    """``q`` as a 1-D tensor of ``x``'s dtype and whether it was a scalar, with ATen's
    checks in its order (a float's range first; a tensor's values eagerly, after the
    dtype checks, which the caller makes)."""
    if isinstance(q, Tensor):
        return q, q.ndim == 0
    if isinstance(q, (list, tuple)) or not _is_number(q):
        raise TypeError(f"{fn}() received an invalid combination of arguments - got (Tensor, "
                        f"{type(q).__name__}), but expected one of: (Tensor input, Tensor q, "
                        "...) or (Tensor input, float q, ...)")
    qf = float(q)
    if not 0 <= qf <= 1:
        raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {qf:g}")
    return _const(qf, (), x.dtype if x.dtype.is_float else dt.float32), True


def _quantile(x: Tensor, q: Any, dim: Any, keepdim: bool, interpolation: str,
              ignore_nan: bool, fn: str) -> Tensor:
    """ATen's ``quantile_compute``: sort along the reduced dim (moved last, or all elements
    flattened), turn each ``q`` into a fractional rank ``q * (n - 1)`` (NaN rows: the last
    rank, so the result is NaN; ignoring NaNs: ``q * (non-NaN count - 1)``, at least 0),
    round it as ``interpolation`` says and ``lerp`` between the two neighbouring sorted values
    (the gradient flows through the gathers and the ``lerp``)."""
    qt, scalar_q = _q_tensor(q, x, fn)
    if not isinstance(interpolation, str) or interpolation not in _INTERPOLATIONS:
        raise RuntimeError("quantile() interpolation must be one of linear, lower, higher, "
                           f"midpoint or nearest, but got {interpolation}")
    if dim is not None:
        dim = _int_arg(dim, fn, "dim", 3)
    if sh.same(sh.numel(x.shape), 0):
        raise RuntimeError("quantile() input tensor must be non-empty")
    if qt.ndim > 1:
        raise RuntimeError("quantile() q must be a scalar or 1D tensor")
    if x.dtype not in (dt.float32, dt.float64):
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    if qt.dtype is not x.dtype:
        raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
    if dim is None:
        xs = x.reshape(-1)
        ax = None
    else:
        ax = sh.norm_axis(dim, x.ndim, fn)
        xs = x.reshape(1) if x.ndim == 0 else S_.movedim(x, ax, -1)
    if isinstance(q, Tensor) and not _traced() and q._trace is None:
        qv = q.numpy()
        if not ((qv >= 0) & (qv <= 1)).all():
            raise RuntimeError("quantile() q values must be in the range [0, 1]")
    order = I_.argsort(xs, -1)
    srt = _gather(xs, xs.ndim - 1, order)
    n = xs.shape[-1]
    q1 = qt.reshape(-1)  # (K,): the ranks below are (..., K)
    if ignore_nan:
        valid = T_.sum(srt.isnan().logical_not().to(dt.int64), -1, True)
        ranks = q1 * (valid - 1).to(x.dtype)
        ranks = T_.where(ranks < 0, 0.0, ranks)
    else:
        last = (_size(n) - 1).to(x.dtype)
        has_nan = _nan_count(srt, srt.ndim - 1) > 0
        ranks = T_.where(has_nan, last, q1 * last)
    if interpolation == "lower":
        ranks = ranks.floor()
    elif interpolation == "higher":
        ranks = ranks.ceil()
    elif interpolation == "nearest":
        ranks = ranks.round()
    below = ranks.to(dt.int64)
    out = _gather(srt, srt.ndim - 1, below)
    if interpolation in ("linear", "midpoint"):
        weights = 0.5 if interpolation == "midpoint" else ranks - below.to(x.dtype)
        above = _gather(srt, srt.ndim - 1, ranks.ceil().to(dt.int64))
        out = out.lerp(above, weights)
    out = out.squeeze(-1) if scalar_q else S_.movedim(out, -1, 0)
    if keepdim:
        lead = [] if scalar_q else [out.shape[0]]
        if ax is None:
            out = out.reshape(lead + [1] * x.ndim)
        elif x.ndim:
            out = out.unsqueeze(ax + len(lead))
    return out


def quantile(input: Tensor, q: Any, dim: int | None = None, keepdim: bool = False, *,  # noqa: A002
             interpolation: str = "linear") -> Tensor:
    """``torch.quantile``: the ``q``-th quantiles (a float, or a 1-D tensor of them: then a
    leading dim of quantiles) of all elements or along ``dim``; NaN where the data has a NaN.
    Float32 and float64 only; ``q`` is rounded to the input's dtype as in PyTorch."""
    x = _tensor(input, "quantile", "input", 1)
    return _quantile(x, q, dim, keepdim, interpolation, False, "quantile")


def nanquantile(input: Tensor, q: Any, dim: int | None = None,  # noqa: A002
                keepdim: bool = False, *, interpolation: str = "linear") -> Tensor:
    """``torch.nanquantile``: ``quantile`` of the non-NaN elements (NaN where all are)."""
    x = _tensor(input, "nanquantile", "input", 1)
    return _quantile(x, q, dim, keepdim, interpolation, True, "nanquantile")


# -- mode -------------------------------------------------------------------------------------
def mode(input: Tensor, dim: int = -1, keepdim: bool = False) -> Any:  # noqa: A002
    """``torch.mode``: (values, indices) of the most frequent value along ``dim``; on a tie of
    counts the smallest value, and its last occurrence as the index (see the module's note).
    Sorted runs: each element's position in its run of equal sorted values is its index minus
    the run's start (a ``cummax`` of the run starts), and the first position reaching the
    longest run ends the smallest mode's run. Each NaN is a value of its own, as NaN != NaN.
    The value is a ``gather`` of the input: its gradient goes to that index."""
    x = _tensor(input, "mode", "input", 1)
    ax = _reduce_dim(x, dim, "mode")
    if x.ndim == 0:
        return Mode(x.clone(), _const(0, (), dt.int64))
    _check_reduction_size(x, ax, "mode")
    n = x.shape[ax]
    order = I_.argsort(x, ax)
    srt = _gather(x.detach(), ax, order)
    iota = I_._iota(x.shape, ax)
    first = _const(True, _keep_shape(x, ax), dt.bool_)  # a run starts at the first element
    if isinstance(n, int) and n == 1:
        starts = first
    else:
        m = sh.dim(n - 1)
        hi = T_.slice_dims(srt, [1 if i == ax else 0 for i in range(x.ndim)], list(x.shape))
        lo = T_.slice_dims(srt, [0] * x.ndim,
                           [m if i == ax else d for i, d in enumerate(x.shape)])
        starts = T_.cat([first, hi != lo], ax)
    run_start = cummax(T_.where(starts, iota, 0), ax).values
    run_pos = iota - run_start
    best = T_.argmax(run_pos, ax, True)
    idx = _gather(order, ax, best)
    vals = _gather(x, ax, idx)
    if not keepdim:
        vals, idx = vals.squeeze(ax), idx.squeeze(ax)
    return Mode(vals, idx)


# -- searching --------------------------------------------------------------------------------
def _result_type(a: Tensor, b: Tensor) -> dt.DType:
    """``torch.result_type`` of two tensors (a 0-d one does not widen a dimensioned one of
    the same or a higher category)."""
    cat = T_._category
    if a.ndim == 0 and b.ndim > 0 and cat(a.dtype) <= cat(b.dtype):
        return b.dtype
    if b.ndim == 0 and a.ndim > 0 and cat(b.dtype) <= cat(a.dtype):
        return a.dtype
    return dt.promote(a.dtype, b.dtype)


def _shape_text(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(sh.fmt_dim(d) for d in shape) + "]"


def searchsorted(sorted_sequence: Tensor, input: Any, *, out_int32: bool = False,  # noqa: A002
                 right: bool = False, side: str | None = None,
                 sorter: Tensor | None = None) -> Tensor:
    """``torch.searchsorted``: for each value, the index where it would be inserted into the
    innermost dim of ``sorted_sequence`` to keep it sorted (``side="left"``: before equal
    elements, ``"right"``: after; a NaN value goes last), int64 or int32. ``sorter`` gives the
    sorting order of an unsorted sequence. ``input`` may be a Python number (a 1-D sequence).

    Each index is a count, as ATen's binary search computes it on a sorted line: the elements
    not ``>=`` the value (``>`` for the right side); a comparison of every value with every
    element of its line, which traces and compiles like any broadcast reduction."""
    seq = _tensor(sorted_sequence, "searchsorted", "sorted_sequence", 1)
    scalar = not isinstance(input, Tensor)
    if scalar and not _is_number(input):
        raise TypeError(f"searchsorted(): argument 'input' (position 2) must be Tensor, not "
                        f"{type(input).__name__}")
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                               f"got {side}")
        if right and side != "right":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, "
                               f"got side of {side} while right was True")
    if sorter is not None:
        sorter = _tensor(sorter, "searchsorted", "sorter", None)
        if not sh.same_shape(sorter.shape, seq.shape):
            raise RuntimeError("torch.searchsorted(): boundary and sorter must have the same "
                               f"size, but got boundary tensor {_shape_text(seq.shape)}and got "
                               f"sorter tensor {_shape_text(sorter.shape)}")
        if sorter.dtype is not dt.int64:
            raise RuntimeError("torch.searchsorted(): sorter must be a tensor of long dtype but "
                               f"got dtype {_torch_name(sorter.dtype)}")
        if not _traced() and sorter._trace is None and sorter.numel():
            sv = sorter.numpy()
            if sv.max() >= seq.shape[-1] or sv.min() < 0:
                raise RuntimeError("torch.searchsorted(): sorter index out of range")
    v_ndim = 0 if scalar else input.ndim
    if not (v_ndim > 0 or seq.ndim == 1):
        numel = 1 if scalar else sh.fmt_dim(sh.numel(input.shape))
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when "
                           "boundaries tensor dimension is 1, but we got boundaries tensor "
                           f"dim({seq.ndim}) and input value's dim({v_ndim}) numel({numel})")
    if seq.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive "
                           "dimension, but got 0 dimension")
    if seq.ndim != 1 and not (v_ndim == seq.ndim and sh.same_shape(seq.shape[:-1],
                                                                   input.shape[:-1])):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or "
                           "the first N-1 dimensions of boundaries tensor and input value "
                           "tensor must match, but we got boundaries tensor "
                           f"{_shape_text(seq.shape)} and input value tensor "
                           f"{_shape_text(() if scalar else input.shape)}")
    is_right = side == "right" if side is not None else bool(right)
    common = (dt.promote_scalar(seq.dtype, input.item() if isinstance(input, np.generic)
                                else input) if scalar else _result_type(seq, input))
    if common is dt.bool_:
        raise NotImplementedError("\"searchsorted_out_cpu\" not implemented for 'Bool'")
    if sorter is not None:
        seq = _gather(seq, seq.ndim - 1, sorter)
    seq = seq.to(common)
    if scalar:
        line, value = seq, input
    else:
        value = input.to(common).unsqueeze(-1)
        line = seq if seq.ndim == 1 else seq.unsqueeze(-2)
    placed = (line > value) if is_right else (line >= value)
    out = T_.sum(placed.logical_not().to(dt.int64), -1)
    return out.to(dt.int32) if out_int32 else out


def bucketize(input: Any, boundaries: Tensor, *, out_int32: bool = False,  # noqa: A002
              right: bool = False) -> Tensor:
    """``torch.bucketize``: the bucket of each value among the 1-D ``boundaries``
    (``searchsorted`` with the arguments swapped; ``right=True`` puts a value equal to a
    boundary in the bucket after it)."""
    b = _tensor(boundaries, "bucketize", "boundaries", 2)
    if b.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({b.ndim})")
    return searchsorted(b, input, out_int32=out_int32, right=right)


# -- histograms -------------------------------------------------------------------------------
def _linspace_edges(lo: float, hi: float, bins: int, d: dt.DType) -> np.ndarray:
    """ATen's CPU ``linspace`` in ``d``: the first half from ``lo`` upward, the rest from ``hi``
    downward, ``step = (hi - lo) / bins`` in ``d``; so the ends are ``lo`` and ``hi`` as
    ``d`` holds them. (ATen's vectorised loop may round an interior edge one unit in the last
    place differently, depending on the host's vector width.)"""
    f = d.np.type
    start, end = f(lo), f(hi)
    steps = bins + 1
    step = (end - start) / f(bins)
    i = np.arange(steps)
    half = steps // 2
    low = start + step * i.astype(d.np)
    high = end - step * (steps - i - 1).astype(d.np)
    return np.where(i < half, low, high).astype(d.np)


def _fmt_edge(v: float) -> str:
    """A double as ATen's ``operator<<`` prints it (six significant digits, ``inf``, ``nan``)."""
    return f"{v:g}"


def _bin_counts(x: Tensor, edges: Tensor, left: Any, right: Any, bins: int,
                weight: Tensor | None, linear: bool) -> Tensor:
    """ATen's ``histogramdd_cpu_contiguous`` for one dimension: elements outside
    ``[left, right]`` (and NaN) are skipped; the rest go to bin ``upper_bound(edges) - 1``
    (``linear``: ``trunc((x - left) * bins / (right - left))``, histc's formula), the last
    bin closed on the right; each adds its weight (or 1) with ``scatter_add``."""
    flat = x.reshape(-1)
    d = x.dtype
    if isinstance(left, Tensor):
        lo_t, hi_t = left, right
    else:
        lo_t, hi_t = _const(left, (), d), _const(right, (), d)
    inside = (flat >= lo_t) & (flat <= hi_t)
    if linear:
        span = _const(np.asarray(right, d.np) - np.asarray(left, d.np), (), d)
        raw = (flat - lo_t) * float(bins) / span
        pos = T_.where(inside, raw, 0.0).to(dt.int64)
    else:
        pos = T_.sum((edges <= flat.unsqueeze(-1)).to(dt.int64), -1) - 1
    pos = T_.where(inside, T_.clamp(pos, 0, bins - 1), 0)
    src = T_.where(inside, 1.0 if weight is None else weight.reshape(-1).to(d), 0.0).to(d)
    return I_._scatter_add(_const(0, (bins,), d), 0, pos, src)


def histc(input: Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Tensor:  # noqa: A002
    """``torch.histc``: counts of the elements in ``bins`` equal-width bins over
    ``[min, max]`` (elements outside, and NaN, are ignored), in the input's dtype. With
    ``min == max`` the bins span the data's range, which a compiled step cannot know when it
    is traced: there that case raises ``NotImplementedError`` (pass ``min`` and ``max``)."""
    x = _tensor(input, "histc", "input", 1)
    bins = _int_arg(bins, "histc", "bins", 2)
    lo, hi = _number(min, "histc", "min"), _number(max, "histc", "max")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    empty = sh.same(sh.numel(x.shape), 0)
    if lo == hi and not empty:
        if _traced():
            raise NotImplementedError(
                "histc(min == max) inside a compiled step: the bins would span the data's "
                "range (min and max of the values), which is not known when the step is "
                "traced; pass min and max")
        v = x.numpy()
        lo, hi = float(v.min()), float(v.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{_fmt_edge(lo)}, {_fmt_edge(hi)}] is not "
                           "finite")
    if not lo < hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if not x.dtype.is_float:
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for "
                                  f"'{_torch_name(x.dtype)}'")
    edges = _linspace_edges(lo, hi, bins, x.dtype)
    return _bin_counts(x, None, edges[0], edges[-1], bins, None, True)


def histogram(input: Tensor, bins: Any = 100, *, range: Sequence[float] | None = None,  # noqa: A002
              weight: Tensor | None = None, density: bool = False) -> Any:
    """``torch.histogram``: ``(hist, bin_edges)`` of the elements over ``bins`` equal-width
    bins (an int; over ``range``, else the data's range, widened by 0.5 each side when it is
    one value, [0, 1] for no data) or over the given edges (a 1-D tensor); each element adds
    its ``weight`` (or 1); ``density`` divides by the total and the bin widths. Float dtypes
    only. Inside a compiled step the data's range is unknown: ``range`` (or edges) is needed
    there."""
    x = _tensor(input, "histogram", "input", 1)
    n = sh.numel(x.shape)
    w = None
    if weight is not None:
        w = _tensor(weight, "histogram", "weight", None)
    if isinstance(bins, Tensor):
        if range is not None:
            raise TypeError("histogram(): range can only be given with bins as an int")
        edges = bins
        if edges.dtype is not x.dtype:
            raise RuntimeError("torch.histogramdd: input tensor and bins tensors should have the "
                               f"same dtype, but got input with dtype {_CPP_NAME[x.dtype.name]} "
                               f"and bins for dimension 0 with dtype "
                               f"{_CPP_NAME[edges.dtype.name]}")
        if edges.ndim != 1:
            raise RuntimeError("torch.histogramdd: bins tensor should have one dimension, but got "
                               f"{edges.ndim} dimensions in the bins tensor for dimension 0")
        ne = edges.shape[0]
        if sh.same(ne, 0):
            raise RuntimeError("torch.histogramdd: bins tensor should have at least 1 element, "
                               "but got 0 elements in the bins tensor for dimension 0")
        if not isinstance(ne, int):
            raise NotImplementedError("histogram(): bin edges of a symbolic (batch) length "
                                      "inside a compiled step; the number of bins must be fixed")
        count = ne - 1
        _check_weight(x, w, n)
        if count <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {count} for "
                               "dimension 0")
        if not x.dtype.is_float:
            raise NotImplementedError(f"\"histogram_cpu\" not implemented for "
                                      f"'{_torch_name(x.dtype)}'")
        left, right = S_.select(edges, 0, 0), S_.select(edges, 0, -1)
        bin_edges = edges.clone()
    else:
        count = _int_arg(bins, "histogram", "bins", 2)
        if count <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {count} for "
                               "dimension 0")
        if range is not None:
            rng = list(range) if isinstance(range, (list, tuple)) else None
            if rng is None or not builtins.all(_is_number(r) for r in rng):
                raise TypeError("histogram(): argument 'range' must be tuple of floats, not "
                                f"{type(range).__name__}")
            if len(rng) != 2:
                raise RuntimeError("torch.histogramdd: for a 1-dimensional histogram range "
                                   f"should have 2 elements, but got {len(rng)}")
            lo, hi = float(rng[0]), float(rng[1])
        elif not sh.same(n, 0):
            if not x.dtype.is_float:
                raise NotImplementedError(f"\"histogramdd\" not implemented for "
                                          f"'{_torch_name(x.dtype)}'")
            if _traced():
                raise NotImplementedError(
                    "histogram() without range inside a compiled step: the bins would span the "
                    "data's range (min and max of the values), which is not known when the "
                    "step is traced; pass range=(min, max) or the bin edges")
            v = x.numpy()
            lo, hi = float(v.min()), float(v.max())
        else:
            lo, hi = 0.0, 1.0
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise RuntimeError(f"torch.histogramdd: dimension 0's range [{_fmt_edge(lo)}, "
                               f"{_fmt_edge(hi)}] is not finite")
        if lo > hi:
            raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min "
                               f"{_fmt_edge(lo)} max {_fmt_edge(hi)} for dimension 0")
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        _check_weight(x, w, n)
        if not x.dtype.is_float:
            raise NotImplementedError(f"\"histogram_cpu\" not implemented for "
                                      f"'{_torch_name(x.dtype)}'")
        e = _linspace_edges(lo, hi, count, x.dtype)
        bin_edges = edges = Tensor._from_array(e)
        left, right = e[0], e[-1]
    hist = _bin_counts(x, edges, left, right, count, w, False)
    if density:
        hist = hist / T_.sum(hist) / (S_.narrow(bin_edges, 0, 1, count)
                                      - S_.narrow(bin_edges, 0, 0, count))
    return Histogram(hist, bin_edges)


def _check_weight(x: Tensor, w: Tensor | None, n: Any) -> None:
    if w is None:
        return
    if w.dtype is not x.dtype:
        raise RuntimeError("torch.histogramdd: if weight tensor is provided, input tensor and "
                           f"weight tensor should have the same dtype, but got "
                           f"input({_CPP_NAME[x.dtype.name]}), and "
                           f"weight({_CPP_NAME[w.dtype.name]})")
    wn = sh.numel(w.shape)
    if not sh.same(wn, n):
        raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the "
                           "same shape as the input tensor excluding its innermost dimension, "
                           f"but got input with shape [{sh.fmt_dim(n)}, 1] and weight with "
                           f"shape [{sh.fmt_dim(wn)}]")


# -- data-dependent output lengths (eager only) -----------------------------------------------
def _eager_only(fn: str, why: str) -> None:
    if _traced():
        raise NotImplementedError(
            f"{fn}() inside a compiled step: {why}, so the output's shape depends on the data "
            "and cannot be traced; call it outside the compiled function")


def bincount(input: Tensor, weights: Tensor | None = None,  # noqa: A002
             minlength: int = 0) -> Tensor:
    """``torch.bincount``: the count (or the sum of ``weights``) of each value of a 1-D
    tensor of non-negative integers, ``max(input) + 1`` long (at least ``minlength``); int64
    counts, float32 sums for float32 weights and float64 for any other weights, an ``int64``
    zeros(minlength) for an empty input. The length is a value of the data: eager only."""
    x = _tensor(input, "bincount", "input", 1)
    minlength = _int_arg(minlength, "bincount", "minlength", 3)
    if weights is not None:
        weights = _tensor(weights, "bincount", "weights", 2)
    _eager_only("bincount", "its length is max(input) + 1")
    if x.dtype.is_float or x.dtype is dt.bool_:
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for "
                                  f"'{_torch_name(x.dtype)}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if x.ndim == 1 and x.shape[0] == 0:
        return _const(0, (minlength,), dt.int64)
    v = x.numpy()
    if x.ndim != 1 or v.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != x.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    length = builtins.max(int(v.max()) + 1, minlength)
    idx = x.to(dt.int64)
    if weights is None:
        return I_._scatter_add(_const(0, (length,), dt.int64), 0, idx,
                               _const(1, idx.shape, dt.int64))
    wd = dt.float32 if weights.dtype is dt.float32 else dt.float64
    return I_._scatter_add(_const(0, (length,), wd), 0, idx, weights.to(wd))


def _groups(arr: np.ndarray, dim: int | None, sort: bool) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray, np.ndarray]:
    """The runs of equal elements (``dim`` None) or slices along ``dim`` of ``arr``, in a
    stable sort's order (``sort``) or as they come: (the order, the first position of each
    run in it, each entry's run number, the runs' lengths). NaN equals nothing, so each NaN
    is a run of its own, as in PyTorch's kernels; -0.0 equals 0.0."""
    if dim is None:
        keys = arr.reshape(-1, 1)
    else:
        rest = int(np.prod([s for i, s in enumerate(arr.shape) if i != dim]))
        keys = np.moveaxis(arr, dim, 0).reshape(arr.shape[dim], rest)
    k = keys.shape[0]
    if sort:
        order = (np.argsort(keys[:, 0], kind="stable") if keys.shape[1] == 1
                 else np.lexsort(keys.T[::-1]) if keys.shape[1] else np.arange(k))
    else:
        order = np.arange(k)
    srt = keys[order]
    new = np.ones(k, bool)
    if k > 1:
        new[1:] = (srt[1:] != srt[:-1]).any(axis=1)
    firsts = np.nonzero(new)[0]
    group = np.cumsum(new) - 1
    inverse = np.empty(k, np.int64)
    inverse[order] = group
    counts = np.diff(np.append(firsts, k)).astype(np.int64)
    return order, firsts, inverse, counts


def _unique(x: Tensor, sort: bool, return_inverse: bool, return_counts: bool, dim: Any,
            fn: str) -> Any:
    _eager_only(fn, "the number of distinct values is known only from the data")
    arr = x.numpy()
    if dim is not None:
        dim = _int_arg(dim, fn, "dim")
        if x.ndim == 0:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        dim = sh.norm_axis(dim, x.ndim, fn)
        if arr.shape[dim] and arr.size == 0:
            raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so "
                               "unique cannot be applied")
    order, firsts, inverse, counts = _groups(arr, dim, sort)
    if dim is None:
        out = arr.reshape(-1)[order][firsts]
        inverse = inverse.reshape(arr.shape)
    else:
        out = np.take(arr, order[firsts], axis=dim)
    result = [Tensor._from_array(np.ascontiguousarray(out))]
    if return_inverse:
        result.append(Tensor._from_array(inverse))
    if return_counts:
        result.append(Tensor._from_array(counts))
    return result[0] if len(result) == 1 else tuple(result)


def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim: int | None = None) -> Any:
    """``torch.unique``: the distinct elements (or slices along ``dim``) in ascending order
    (PyTorch's CPU kernels sort whatever ``sorted`` says), optionally each element's position
    among them (``return_inverse``) and their counts; a tensor, or a tuple when asked for
    more. How many there are is known only from the data: eager only."""
    x = _tensor(input, "unique", "input", 1)
    return _unique(x, True, return_inverse, return_counts, dim, "unique")


def unique_consecutive(input: Tensor, return_inverse: bool = False,  # noqa: A002
                       return_counts: bool = False, dim: int | None = None) -> Any:
    """``torch.unique_consecutive``: ``unique`` of each run of equal consecutive elements
    (or slices along ``dim``), in order. Eager only, as ``unique``."""
    x = _tensor(input, "unique_consecutive", "input", 1)
    return _unique(x, False, return_inverse, return_counts, dim, "unique_consecutive")


# -- Tensor methods ---------------------------------------------------------------------------
# the ones ``torch.Tensor`` has (``searchsorted`` and ``bucketize`` are functions only)
METHODS = [
    "median", "nanmedian", "quantile", "nanquantile", "mode", "histc", "histogram",
    "bincount", "unique", "unique_consecutive",
]


def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py)."""
    for name in METHODS:
        setattr(T, name, globals()[name])


# ``gc.<name>`` for these (graphc/_core.py re-exports them)
FUNCTIONS = [*METHODS, "searchsorted", "bucketize"]

__all__ = [*FUNCTIONS, "install", "FUNCTIONS", "METHODS", "Median", "NanMedian", "Mode",
           "Histogram"]
