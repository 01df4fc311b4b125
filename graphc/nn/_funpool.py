"""Max unpooling and fractional max pooling (``F.max_unpool1d/2d/3d``,
``F.fractional_max_pool2d/3d``), as PyTorch's, composed of graphc's ``scatter_add``,
``gather``, ``sort`` and elementwise primitives, so they trace, compile and differentiate like
every other layer (graphc has no primitive of its own for either).

**Max unpooling** writes each input value at its index in a zeroed ``(N, C, prod(out))``
plane: a ``scatter_add`` along the flattened spatial dim, whose VJP (a ``gather`` of the
output gradient at the indices) is exactly ATen's backward. Two details keep it PyTorch's
where indices repeat (overlapping ``max_pool`` windows give the same index several times):

* ATen's CPU kernel *overwrites*, so one of the writers wins: the last in input order when it
  runs on one thread (its ``parallel_for`` splits the elements, not the planes, so with more
  threads, repeated indices carrying *different* values give whichever chunk ran last;
  ``max_pool``'s repeats carry equal values and are unaffected). graphc is deterministic and
  keeps the last writer: a stable ``sort`` of the indices marks, per plane, the last input
  position of each index value; only those add their value, the others add an exact zero.
* ATen's backward still hands every input ``grad_out[index]``, losers included. The zero
  the losers add is ``x - x.detach()`` (value 0, derivative 1), so their gradient is the
  ``gather`` too. (Non-finite losers add a plain 0 instead, since ``inf - inf`` is NaN: their
  gradient is 0 where PyTorch's is ``grad_out[index]``, the one place the two differ.)

Indices outside ``[0, prod(out))``: eagerly PyTorch's ``RuntimeError`` ("Found an invalid max
index"); inside a compiled step the check is data-dependent, so the ``scatter_add`` kernel's
own bounds check stops the step (an ``IndexError``), as for ``gc.scatter``/``index_put_``.

**Fractional max pooling** (Graham, 2014) takes the max over ``k``-wide windows whose start
positions are ATen's ``generate_intervals``: with ``alpha = (in - k) / (out - 1)`` in the
input's dtype, ``start_i = int((i + u) * alpha) - int(u * alpha)`` for ``i < out - 1`` and
``in - k`` for the last, ``u`` one random sample per (batch, channel, spatial dim). The
samples are data (``torch.rand`` draws them on each call), so the starts are computed in the
graph with the same float arithmetic and truncating casts as ATen, never in Python: the same
code path runs eagerly and compiled. Each window (``prod(k)`` elements) is gathered from the
flattened plane and the winner picked as ATen's loop picks it (the first maximum in row-major
window order, or the last NaN); the values are a ``gather`` at the winners' flat indices, so
the gradient is ATen's scatter-add of ``grad_out`` to them.

Without ``_random_samples`` the samples come from ``gc.rand`` with PyTorch's shape and dtype:
eagerly from graphc's stream (after the same seed, ``torch.rand``'s numbers), in a compiled
step as a per-call random input (``trace.random_input``), so each call draws anew.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .. import _context
from .. import tensor_ops as T
from .._core import rand
from ..autograd import is_grad_enabled
from ..index_ops import argsort
from ..ir import dtypes as dt
from ..tensor import Tensor, builder
from ._fconv import window_winner


def _ntuple(v: Any, n: int) -> tuple:
    """PyTorch's ``_single``/``_pair``/``_triple``: an iterable as given (a wrong length
    fails later, where PyTorch's does), anything else repeated ``n`` times."""
    if isinstance(v, Iterable):
        return tuple(v)
    return (v,) * n


def _prod(vals: Any) -> int:
    out = 1
    for v in vals:
        out *= int(v)
    return out


def _traced() -> bool:
    return _context.current() is not None


def _zeros(shape: tuple, dtype: dt.DType) -> Tensor:
    """A zero constant of ``shape`` (its batch dim may be symbolic inside a trace)."""
    return Tensor._wrap(builder().const(0, tuple(shape), dtype))


# -- max unpooling ----------------------------------------------------------------------------
def _unpool_output_size(x: Tensor, kernel: tuple, stride: tuple, padding: tuple,
                        output_size: Any) -> list[int]:
    """``torch.nn.functional._unpool_output_size``: the default ``(in - 1) * stride + kernel
    - 2 * padding``, or ``output_size`` (its last ``nd`` entries when it also names the batch
    and channel dims) when it is within a stride of the default; PyTorch's ValueErrors."""
    input_size = tuple(x.shape)
    nd = len(kernel)
    default = [(input_size[-nd + d] - 1) * stride[d] + kernel[d] - 2 * padding[d]
               for d in range(nd)]
    if output_size is None:
        ret = default
    else:
        if len(output_size) == nd + 2:
            output_size = output_size[2:]
        if len(output_size) != nd:
            raise ValueError(f"output_size should be a sequence containing {nd} or {nd + 2} "
                             f"elements, but it has a length of '{len(output_size)}'")
        for d in range(nd):
            min_size, max_size = default[d] - stride[d], default[d] + stride[d]
            if not min_size < output_size[d] < max_size:
                raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be between '
                                 f"{min_size} and {max_size})")
        ret = [int(v) for v in output_size]
    for d in range(nd):
        if ret[d] < 0:
            raise ValueError("max_unpooling: output_size must contain non-negative spatial "
                             f"dimensions, but got output_size[{d}]={ret[d]}")
    return ret


def _torch_name(d: dt.DType) -> str:
    return dt.TORCH_NAMES.get(d.name, d.name)


def _check_unpool(x: Tensor, idx: Tensor, nd: int, out: list[int], stride: tuple,
                  padding: tuple) -> None:
    """ATen's ``max_unpooling2d/3d`` shape checks, in its order and with its messages."""
    if idx.dtype is not dt.int64:
        raise RuntimeError("elements in indices should be type int64" +
                           (f" but got: {_torch_name(idx.dtype)}" if nd == 2 else ""))
    dims = f"{nd + 1}d or {nd + 2}d"
    if nd == 2:
        if len(out) != 2:
            raise RuntimeError("There should be exactly two elements (height, width) in "
                               f"output_size, but got {len(out)} elements.")
    if x.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Input to max_unpooling{nd}d should be a {dims} Tensor, but got a "
                           f"tensor with {x.ndim} dimensions.")
    if nd == 3:
        for what, v in (("output_size", out), ("stride", stride), ("padding", padding)):
            if len(v) != 3:
                sep = " in output_size, but got " if what == "output_size" else \
                    f" in {what}, but got: "
                raise RuntimeError(f"There should be exactly three elements (depth, height, "
                                   f"width){sep}{len(v)} elements.")
    if tuple(x.shape) != tuple(idx.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor "
                           f"({list(x.shape)}) but got indices tensor with shape: "
                           f"{list(idx.shape)}")
    for i in range(1, x.ndim):
        if x.shape[i] == 0:
            raise RuntimeError(f"max_unpooling{nd}d_forward_out_cpu(): Expected input to have "
                               f"non-zero size for non-batch dimensions, but got "
                               f"{list(x.shape)} with dimension {i} being empty.")
    if nd == 3 and not all(s > 0 for s in stride):
        raise RuntimeError(f"strides should be greater than zero, but got stride: "
                           f"{list(stride)}")
    if not x.dtype.is_float:
        raise NotImplementedError(f'"max_unpool{nd}d" not implemented for '
                                  f"'{_torch_name(x.dtype)}'")


def _last_writers(idx: Tensor) -> Tensor:
    """Per position of ``idx`` (``(N, C, L)``): True where no later position of its plane
    has the same index, i.e. the write ATen's in-order CPU loop leaves in the output. A
    stable sort groups equal indices in input order; the last of each group is marked and
    the marks are scattered back through the permutation (exact: each target is hit once)."""
    n, c, length = idx.shape
    if length == 1:
        return Tensor._wrap(builder().const(True, tuple(idx.shape), dt.bool_))
    perm = argsort(idx, 2)  # graphc's sort is stable
    srt = T.gather(idx, 2, perm)
    same_next = (T.slice_dims(srt, [0, 0, 0], [n, c, length - 1])
                 == T.slice_dims(srt, [0, 0, 1], [n, c, length])).to(dt.int64)
    last = 1 - T.pad(same_next, [(0, 0), (0, 0), (0, 1)])
    marks = Tensor._wrap(builder().op("scatter_add", (_zeros(idx.shape, dt.int64).node,
                                                      perm.node, last.node), axis=2))
    return marks > 0


def _unpool(x: Tensor, idx: Tensor, nd: int, out: list[int]) -> Tensor:
    """``x`` (``(N, C, *in)`` or unbatched) written at ``idx`` into ``(N, C, *out)`` zeros."""
    unbatched = x.ndim == nd + 1
    if unbatched:
        x, idx = x.unsqueeze(0), idx.unsqueeze(0)
    n, c = x.shape[0], int(x.shape[1])
    length, plane = _prod(x.shape[2:]), _prod(out)
    if plane == 0:  # nothing to write (and, as in ATen, no index is checked): an empty view
        y = T.slice_dims(x.reshape(n, c, length), [0, 0, 0], [n, c, 0]).reshape(n, c, *out)
        return y.squeeze(0) if unbatched else y
    if not _traced():
        v = idx.numpy()
        bad = v[(v < 0) | (v >= plane)]
        if bad.size:  # the invalid index ATen's loop reports on one thread (the last one)
            raise RuntimeError(f"Found an invalid max index: {int(bad[-1])} (output volumes "
                               f"are of size {'x'.join(str(o) for o in out)})")
    xf, idf = x.reshape(-1, c, length), idx.reshape(-1, c, length)
    keep = _last_writers(idf)
    if is_grad_enabled():
        # the overwritten duplicates add an exact 0 whose derivative is 1 (see the module doc)
        carrier = xf - xf.detach()
        src = T.where(keep, xf, T.where(carrier == 0, carrier, 0.0))
    else:
        src = T.where(keep, xf, 0.0)
    base = _zeros((xf.shape[0], c, plane), x.dtype)
    y = Tensor._wrap(builder().op("scatter_add", (base.node, idf.node, src.node), axis=2))
    y = y.reshape(-1, c, *out)
    return y.squeeze(0) if unbatched else y


def _max_unpool(nd: int, input: Any, indices: Any, kernel_size: Any, stride: Any,  # noqa: A002
                padding: Any, output_size: Any) -> Tensor:
    x, idx = T.as_tensor(input), T.as_tensor(indices)
    kernel = _ntuple(kernel_size, nd)
    st = _ntuple(stride, nd) if stride is not None else kernel
    pad = _ntuple(padding, nd)
    out = _unpool_output_size(x, kernel, st, pad, output_size)
    if nd == 1:  # PyTorch: max_unpool2d over a unit width
        x, idx, out, nd = x.unsqueeze(-1), idx.unsqueeze(-1), list(out) + [1], 2
        _check_unpool(x, idx, nd, out, st, pad)
        return _unpool(x, idx, nd, out).squeeze(-1)
    _check_unpool(x, idx, nd, out, st, pad)
    return _unpool(x, idx, nd, out)


def max_unpool1d(input: Any, indices: Any, kernel_size: Any, stride: Any = None,  # noqa: A002
                 padding: Any = 0, output_size: Any = None) -> Tensor:
    """``torch.nn.functional.max_unpool1d``: the partial inverse of ``max_pool1d`` (its
    values written at its indices, zeros elsewhere), via ``max_unpool2d`` as PyTorch's."""
    return _max_unpool(1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input: Any, indices: Any, kernel_size: Any, stride: Any = None,  # noqa: A002
                 padding: Any = 0, output_size: Any = None) -> Tensor:
    """``torch.nn.functional.max_unpool2d``: the partial inverse of ``max_pool2d``; indices
    are flat ``H*W`` positions of the output plane (``max_pool2d(return_indices=True)``'s)."""
    return _max_unpool(2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input: Any, indices: Any, kernel_size: Any, stride: Any = None,  # noqa: A002
                 padding: Any = 0, output_size: Any = None) -> Tensor:
    """``torch.nn.functional.max_unpool3d``: the partial inverse of ``max_pool3d``; indices
    are flat ``D*H*W`` positions of the output volume."""
    return _max_unpool(3, input, indices, kernel_size, stride, padding, output_size)


# -- fractional max pooling -------------------------------------------------------------------
def _dim_size(x: Tensor, d: int) -> Any:
    """``input.size(d)`` with PyTorch's IndexError for a dim the tensor lacks."""
    n = max(x.ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {d})")
    return x.shape[d]


def _int_list(v: Any, nd: int, fname: str, what: str, pos: int) -> tuple[int, ...]:
    """An ``int[nd]`` argument as PyTorch's argument parser reads it: an int is repeated, a
    sequence is taken as is (its length checked by the caller, as ATen does), anything with a
    non-integer is PyTorch's TypeError."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * nd
    if isinstance(v, (list, tuple)):
        for e in v:
            if not isinstance(e, (int, np.integer)) or isinstance(e, bool):
                raise TypeError(f"{fname}(): argument '{what}' failed to unpack the object at "
                                f'pos {pos} with error "type must be tuple of ints,but got '
                                f'{type(e).__name__}"')
        return tuple(int(e) for e in v)
    raise TypeError(f"{fname}(): argument '{what}' (position {pos}) must be tuple of ints, not "
                    f"{type(v).__name__}")


def _check_samples(s: Tensor, x: Tensor, nd: int, batch: Any, channels: int) -> None:
    """ATen's checks of ``_random_samples``, in its order."""
    fname = f"fractional_max_pool{nd}d"
    if s.requires_grad and is_grad_enabled():
        raise RuntimeError(f"The function '{fname}' is not differentiable with respect to "
                           "argument 'random_samples'. This input cannot have requires_grad "
                           "True.")
    if s.dtype is not x.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if s.ndim != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {s.ndim}")
    rows = s.shape[0]
    if isinstance(rows, int) and isinstance(batch, int) and rows < batch:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if s.shape[1] != channels:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if s.shape[2] != nd:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {nd}; got {s.shape[2]}.")


def _starts(u: Tensor, n_in: int, n_out: int, k: int) -> Tensor:
    """ATen's ``generate_intervals`` for every (batch, channel) sample ``u`` (``(N, C, 1)``,
    the input's dtype): ``(N, C, n_out)`` int64 window starts. ``alpha`` is rounded to the
    dtype as ATen's ``scalar_t`` division rounds it, and the products are truncated as its
    ``static_cast`` truncates. Starts are clamped to ``[0, n_in - k]``: samples in ``[0, 1)``
    never leave that range; others would make ATen read outside the plane."""
    npd = np.dtype(u.dtype.np).type
    alpha = float(npd(n_in - k) / npd(n_out - 1)) if n_out > 1 else 0.0
    i = T.as_tensor(np.arange(n_out).astype(npd).reshape(1, 1, n_out))
    inner = ((i + u) * alpha).to(dt.int64) - (u * alpha).to(dt.int64)
    not_last = T.as_tensor((np.arange(n_out) < n_out - 1).reshape(1, 1, n_out))
    return T.clamp(T.where(not_last, inner, n_in - k), 0, n_in - k)


def _fractional(nd: int, input: Any, kernel_size: Any, output_size: Any,  # noqa: A002
                output_ratio: Any, return_indices: bool, samples: Any) -> Any:
    fname = f"fractional_max_pool{nd}d"
    x = T.as_tensor(input)
    # -- torch/nn/functional.py: the output size and the samples ---------------------------
    if output_size is None and output_ratio is None:
        raise ValueError(f"{fname} requires specifying either an output_size or an "
                         "output_ratio")
    if output_size is None:
        if nd == 2 and len(output_ratio) > 2:
            raise ValueError("fractional_max_pool2d requires output_ratio to either be a single "
                             "Int or tuple of Ints.")
        ratio = _ntuple(output_ratio, nd)
        output_size = [int(_dim_size(x, d - nd) * ratio[d]) for d in range(nd)]
    if samples is None:
        n_batch = 1 if x.ndim == nd + 1 else _dim_size(x, 0)
        samples = rand(n_batch, _dim_size(x, -nd - 1), nd, dtype=x.dtype)
    s = T.as_tensor(samples)
    # -- ATen: argument and shape checks ---------------------------------------------------
    k = _int_list(kernel_size, nd, fname, "kernel_size", 2)
    o = _int_list(output_size, nd, fname, "output_size", 3)
    ints = "Ints" if nd == 2 else "three Ints"
    if len(k) != nd:
        raise RuntimeError(f"{fname}: kernel_size must either be a single Int or tuple of "
                           f"{ints}")
    if len(o) != nd:
        raise RuntimeError(f"{fname}: output_size must either be a single Int or tuple of "
                           f"{ints}")
    where = "fractional_max_pool2d()" if nd == 2 else "fractional_max_pool3d_out()"
    if x.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{where}: Expected {nd + 1}D or {nd + 2}D tensor, but got: "
                           f"{list(x.shape)}")
    for i in range(1, x.ndim):
        if x.shape[i] == 0:
            raise RuntimeError(f"{where}: Expected input to have non-zero size for non-batch "
                               f"dimensions, but got{list(x.shape)} with dimension {i} being "
                               "empty.")
    unbatched = x.ndim == nd + 1
    xb = x.unsqueeze(0) if unbatched else x
    c, ins = int(xb.shape[1]), [int(v) for v in xb.shape[2:]]
    names = ("height", "width") if nd == 2 else ("time", "height", "width")
    for name, kk, oo, ii in zip(names, k, o, ins):
        if (oo + kk - 1 > ii) if nd == 2 else (oo + kk - 1 >= ii):
            raise RuntimeError(f"{where}: pool {name} {kk} too large relative to input {name} "
                               f"{ii}")
    if min(o) < 0:
        lead = [c] if unbatched else [xb.shape[0], c]
        neg = next(v for v in o if v < 0)
        raise RuntimeError(f"Trying to create tensor with negative dimension {neg}: "
                           f"{lead + list(o)}")
    batch = 1 if unbatched else xb.shape[0]
    _check_samples(s, x, nd, batch, c)
    if min(k) <= 0:  # ATen's loop runs no iteration: -inf values, indices that can leave
        raise RuntimeError(f"{fname}: kernel_size must be greater than zero, but got "
                           f"{list(k)} (graphc refuses the empty window PyTorch fills with "
                           "-inf)")
    # -- the pooling --------------------------------------------------------------------
    n = xb.shape[0]
    if isinstance(s.shape[0], int) and isinstance(batch, int) and s.shape[0] != batch:
        s = T.slice_dims(s, [0, 0, 0], [batch, c, nd])
    plane = _prod(ins)
    xf = xb.reshape(n, c, plane)
    if min(o) == 0:  # an empty result: an empty view of the input (its gradient is zeros)
        vals = T.slice_dims(xf, [0, 0, 0], [n, c, 0]).reshape(n, c, *o)
        idx = _zeros((n, c, *o), dt.int64)
    else:
        strides = [_prod(ins[d + 1:]) for d in range(nd)]
        pos: Tensor | None = None
        for d in range(nd):
            col = (1 - d) if nd == 2 else d  # ATen: 2-D samples are (w, h), 3-D (t, h, w)
            u = T.slice_dims(s, [0, 0, col], [s.shape[0], c, col + 1])
            start = _starts(u, ins[d], o[d], k[d]) * strides[d]
            shape = [-1, c] + [1] * nd
            shape[2 + d] = o[d]
            term = start.reshape(*shape)
            pos = term if pos is None else pos + term
        assert pos is not None
        # each window's flat offsets in row-major order (ATen's loop order)
        grids = np.meshgrid(*[np.arange(kk) for kk in k], indexing="ij")
        offs = sum(g.reshape(-1) * st for g, st in zip(grids, strides))
        kk_all, o_all = _prod(k), _prod(o)
        cand = pos.reshape(-1, c, o_all, 1) + T.as_tensor(
            np.asarray(offs, np.int64).reshape(1, 1, 1, kk_all))
        g = T.gather(xf.detach(), 2, cand.reshape(-1, c, o_all * kk_all))
        win = window_winner(g.reshape(-1, c, o_all, kk_all))
        flat = T.gather(cand, 3, win).reshape(-1, c, o_all)
        vals = T.gather(xf, 2, flat).reshape(-1, c, *o)
        idx = flat.reshape(-1, c, *o)
    if unbatched:
        vals, idx = vals.squeeze(0), idx.squeeze(0)
    return (vals, idx) if return_indices else vals


def fractional_max_pool2d(input: Any, kernel_size: Any, output_size: Any = None,  # noqa: A002
                          output_ratio: Any = None, return_indices: bool = False,
                          _random_samples: Any = None) -> Any:
    """``torch.nn.functional.fractional_max_pool2d`` over ``(N, C, H, W)`` or ``(C, H, W)``:
    ``kernel_size`` windows at pseudo-random strides reaching ``output_size`` (or
    ``output_ratio`` of the input size); ``_random_samples`` ``(N, C, 2)`` in ``[0, 1)`` (W's
    sample first, as ATen) fixes the windows, otherwise they are drawn per call."""
    return _fractional(2, input, kernel_size, output_size, output_ratio, return_indices,
                       _random_samples)


def fractional_max_pool3d(input: Any, kernel_size: Any, output_size: Any = None,  # noqa: A002
                          output_ratio: Any = None, return_indices: bool = False,
                          _random_samples: Any = None) -> Any:
    """``torch.nn.functional.fractional_max_pool3d`` over ``(N, C, T, H, W)`` or unbatched;
    ``_random_samples`` is ``(N, C, 3)`` (T, H, W), drawn per call when not given."""
    return _fractional(3, input, kernel_size, output_size, output_ratio, return_indices,
                       _random_samples)


__all__ = ["max_unpool1d", "max_unpool2d", "max_unpool3d", "fractional_max_pool2d",
           "fractional_max_pool3d"]
