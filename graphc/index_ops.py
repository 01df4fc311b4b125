"""Indexing beyond slices: tensor, list and bool indices, ``index_put_`` / item assignment,
``index_select``, scatter/gather variants, sort/topk; attached to ``Tensor`` by ``install``.

Everything is a composition of IR primitives, so gradients and both native lowerings follow:

- advanced indexing flattens the indexed dims into one and ``gather``\\ s along it with a
  linear index; each index tensor first goes through a ``gather`` from an ``iota`` of its dim,
  so an out-of-range index stops a compiled step with the native bounds check (eagerly it
  raises ``IndexError`` first, with PyTorch's message);
- item assignment and ``index_put_`` index a tensor of linear positions with the same key and
  ``scatter_add`` the values there (``where`` keeps the untouched elements and their gradient);
- ``scatter`` / ``scatter_reduce`` use ``scatter_add`` for sums, counts and means, and a
  one-hot comparison against an ``iota`` for ``amax`` / ``amin`` / ``prod``;
- sorting: the ``sort`` primitive gives the stable permutation (NaN as the largest value);
  values are a ``gather`` of it, so their gradient is a ``scatter_add`` back.

Ops whose output size depends on data (bool-tensor masks, ``nonzero``, ``masked_select``,
``argwhere``) run eagerly and raise ``NotImplementedError`` while tracing.
"""

from __future__ import annotations

import builtins
from collections import namedtuple
from typing import Any

import numpy as np

from . import _context
from . import tensor_ops as ops
from ._tensor import Tensor, builder, check_not_copied_view, mark_copied_view
from .autograd import is_grad_enabled
from .ir import dtypes as dt
from .ir import shapes as sh
from .tensor_ops import as_tensor, where

SortResult = namedtuple("SortResult", ["values", "indices"])
TopK = namedtuple("TopK", ["values", "indices"])
KthValue = namedtuple("KthValue", ["values", "indices"])

def _traced() -> bool:
    return _context.current() is not None


def _wrap(n: Any) -> Tensor:
    return Tensor._wrap(n)


def _iota(shape: Any, axis: int = 0) -> Tensor:
    return _wrap(builder().op("iota", (), shape=tuple(sh.dim(s) for s in shape),
                              dtype=dt.int64, axis=axis))


def _full(value: Any, shape: Any, dtype: dt.DType) -> Tensor:
    return _wrap(builder().const(value, tuple(sh.dim(s) for s in shape), dtype))


def _prod(ds: Any) -> Any:
    return sh.numel(list(ds))


def _gather(x: Tensor, ax: int, index: Tensor) -> Tensor:
    return _wrap(builder().op("gather", (x.node, index.node), axis=ax))


def _scatter_add(base: Tensor, ax: int, index: Tensor, src: Tensor) -> Tensor:
    return _wrap(builder().op("scatter_add", (base.node, index.node, src.node), axis=ax))


def _is_int_dtype(d: dt.DType) -> bool:
    return d is not dt.bool_ and not d.is_float


# -- index tensors ----------------------------------------------------------------------
def _index_tensor(k: Any) -> Tensor:
    """A list, array or integer tensor used as an index, as an int64 tensor."""
    if isinstance(k, Tensor):
        if not _is_int_dtype(k.dtype):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        return k.to(dt.int64)
    a = np.asarray(k)
    if a.size == 0 and a.dtype.kind not in "b":
        a = a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    return as_tensor(a.astype(np.int64))


def _checked(idx: Tensor, size: Any, dim: int, native: bool = True) -> Tensor:
    """``idx`` with negative entries wrapped (``i + size``) and every entry checked to lie in
    ``[-size, size)``: eagerly with PyTorch's ``IndexError``, compiled by the bounds check of
    a ``gather`` from ``iota(size)`` (which returns the wrapped index unchanged)."""
    if not _traced():
        v = idx.numpy()
        n = int(size)
        bad = (v < -n) | (v >= n)
        if bad.any():
            raise IndexError(f"index {int(v[bad].flat[0])} is out of bounds for dimension "
                             f"{dim} with size {n}")
    wrapped = where(idx < 0, idx + _full(size, (), dt.int64), idx)
    if not native:  # the caller gathers along this dim itself: that gather checks
        return wrapped
    flat = wrapped.reshape(-1)
    return _gather(_iota((size,)), 0, flat).reshape(list(idx.shape))


def _mask_message(what: str) -> str:
    return (f"{what} selects a data-dependent number of elements, so it cannot be traced "
            "into a compiled step (the output shape would depend on the data); keep the shape "
            "with gc.where(mask, x, 0), or use it outside the compiled function")


def _nonzero_arrays(mask: Any, what: str) -> list[np.ndarray]:
    """The coordinates of a mask's True entries (a Python/numpy mask always, a tensor mask
    only eagerly)."""
    if isinstance(mask, Tensor):
        if _traced():
            raise NotImplementedError(_mask_message(what))
        arr = mask.numpy()
    else:
        arr = np.asarray(mask)
    return [c.astype(np.int64) for c in np.nonzero(arr)]


def _is_mask(k: Any) -> bool:
    if isinstance(k, Tensor):
        return k.dtype is dt.bool_
    if isinstance(k, (list, tuple, np.ndarray)):
        a = np.asarray(k)
        return a.dtype.kind == "b" and a.size > 0
    return False


def _broadcast_shapes(shapes: list[tuple]) -> tuple:
    out: tuple = ()
    for s in shapes:
        out = sh.broadcast(out, s, "index")
    return out


# -- getitem ----------------------------------------------------------------------------
def _split_key(x: Tensor, key: tuple) -> tuple[tuple, list[tuple[int, Tensor]]]:
    """The basic part of ``key`` (advanced entries replaced by full slices) and, for each
    advanced entry, the dim it indexes in the basic result and its int64 index tensor.

    Masks become one index tensor per masked dim; Python bools add a dim of size 1 (``True``)
    or 0 (``False``) as in PyTorch."""
    expanded: list[Any] = []
    for k in key:
        if isinstance(k, (bool, np.bool_)):
            expanded.append(None)
            if not k:
                expanded.append(("empty",))
        elif _is_mask(k):
            m = k if isinstance(k, Tensor) else np.asarray(k)
            coords = _nonzero_arrays(m, "indexing with a boolean mask tensor")
            expanded.extend(("adv", as_tensor(c)) for c in coords)
        elif isinstance(k, (Tensor, list, tuple, np.ndarray)):
            if isinstance(k, Tensor) and k.ndim == 0 and _is_int_dtype(k.dtype) \
                    and not _traced():
                expanded.append(("adv", _index_tensor(k)))
            else:
                expanded.append(("adv", _index_tensor(k)))
        else:
            expanded.append(k)
    used = builtins.sum(1 for k in expanded if k is not None and k is not Ellipsis
                        and not (isinstance(k, tuple) and k[0] == "empty"))
    n_ell = builtins.sum(1 for k in expanded if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if n_ell:
        i = expanded.index(Ellipsis)
        expanded[i:i + 1] = [slice(None)] * (x.ndim - used)
    basic: list[Any] = []
    adv: list[tuple[int, Tensor]] = []
    out_dim = 0
    in_dim = 0
    empties: list[int] = []
    for k in expanded:
        if isinstance(k, tuple) and k[0] == "empty":
            empties.append(out_dim - 1)
            continue
        if k is None:
            basic.append(None)
            out_dim += 1
        elif isinstance(k, tuple) and k[0] == "adv":
            basic.append(slice(None))
            adv.append((out_dim, k[1]))
            out_dim += 1
            in_dim += 1
        elif isinstance(k, slice):
            basic.append(k)
            out_dim += 1
            in_dim += 1
        else:
            basic.append(k)
            in_dim += 1
    if empties:  # ``x[False]``: an index of no elements into the added dim of size 1
        adv.extend((d, as_tensor(np.zeros(0, np.int64))) for d in empties)
        adv.sort(key=lambda t: t[0])
    return tuple(basic), adv


def _advanced(y: Tensor, adv: list[tuple[int, Tensor]]) -> Tensor:
    """``y[..., i0, ..., i1, ...]`` for index tensors at dims ``adv`` (PyTorch's placement:
    the broadcast index dims replace adjacent indexed dims in place, else lead)."""
    dims = [d for d, _ in adv]
    B = _broadcast_shapes([tuple(t.shape) for _, t in adv])
    sizes = [y.shape[d] for d in dims]
    lin: Tensor | None = None
    stride: Any = 1
    single = len(adv) == 1  # then the gather below checks the (wrapped) index itself
    for d, t in reversed(adv):
        w = _checked(t, y.shape[d], d, native=not single)
        w = w.expand(*B) if B and tuple(w.shape) != tuple(B) else w
        term = w if sh.same(stride, 1) else w * _full(stride, (), dt.int64)
        lin = term if lin is None else lin + term
        stride = sh.dim(stride * y.shape[d])
    assert lin is not None
    rest = [d for d in range(y.ndim) if d not in dims]
    rest_shape = [y.shape[d] for d in rest]
    perm = dims + rest
    yp = y.permute(*perm) if perm != list(range(y.ndim)) else y
    yp = yp.reshape([_prod(sizes)] + rest_shape)
    nb = _prod(B)
    flat = lin.reshape([nb] + [1] * len(rest_shape))
    if rest_shape:
        flat = flat.expand(nb, *rest_shape)
    out = _gather(yp, 0, flat).reshape(list(B) + rest_shape)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:
        nB, p = len(B), dims[0]
        order = list(range(nB, nB + p)) + list(range(nB)) + list(range(nB + p, out.ndim))
        out = out.permute(*order)
    return out


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` with PyTorch's semantics: ints, slices, None, ``...``, lists and integer
    tensors (advanced indexing, broadcast together, negative indices wrap) and boolean masks
    (eagerly, or a Python/numpy mask when traced)."""
    if not isinstance(key, tuple):
        key = (key,)
    basic, adv = _split_key(x, key)
    y = ops.getitem(x, basic) if basic else x
    if not adv:
        return y
    return _advanced(y, adv)


# -- item assignment / index_put ----------------------------------------------------------
def _positions(x: Tensor) -> Tensor:
    return _iota((x.numel(),)).reshape(list(x.shape))


def _put(x: Tensor, pos: Tensor, values: Any, accumulate: bool) -> Tensor:
    """``x`` with ``values`` (broadcast to ``pos``'s shape) written (or added) at the linear
    positions ``pos``. Repeated positions: added when accumulating, else their mean (the
    result PyTorch leaves undefined), the same eagerly and compiled."""
    n = x.numel()
    v = as_tensor(values)
    v = v.to(x.dtype)
    v = v.expand(*pos.shape) if tuple(v.shape) != tuple(pos.shape) else v
    flat = x.reshape(-1)
    pf = pos.reshape(-1)
    vf = v.reshape(-1)
    m = pf.shape[0]
    work = dt.int64 if x.dtype is dt.bool_ else x.dtype
    vw = vf.to(work)
    s = _scatter_add(_full(0, (n,), work), 0, pf, vw)
    if accumulate:
        out = flat.to(work) + s
        out = out.to(dt.bool_) if x.dtype is dt.bool_ else out
        return out.reshape(list(x.shape))
    cnt = _scatter_add(_full(0, (n,), work), 0, pf, _full(1, (m,), work))
    hit = cnt > 0
    if x.dtype is dt.bool_:
        val = s > 0
    elif x.dtype.is_float:
        val = s / ops.binary("maximum", cnt, 1)
    else:
        val = ops.apply_op(_floor_div(), s, ops.binary("maximum", cnt, 1))
    return where(hit, val, flat).reshape(list(x.shape))


def _floor_div() -> Any:
    from .ir.elementwise import COMPOSITES, SURFACE

    return {d.name: d for d in SURFACE + COMPOSITES}["floor_divide"]


def index_put(x: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    """``torch.index_put``: ``x`` with ``x[indices] = values`` (or ``+=`` with
    ``accumulate``), out of place."""
    key = tuple(indices) if isinstance(indices, (tuple, list)) and not (
        isinstance(indices, list) and indices and not isinstance(indices[0], (Tensor, list,
                                                                             np.ndarray))) \
        else (indices,)
    key = tuple(slice(None) if k is None else k for k in key)
    pos = getitem(_positions(x), key)
    return _put(x, pos, values, accumulate)


def _inplace(self: Tensor, result: Tensor) -> Tensor:
    """Write ``result`` into ``self`` with autograd history (a plain tensor that receives a
    value requiring grad stops being a leaf, as in PyTorch)."""
    if self.is_leaf and self.requires_grad and is_grad_enabled():
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation.")
    check_not_copied_view(self)
    if self._trace is None and not _traced() and result.node.rg:
        self._node = result._node
        return self
    return self._inplace_or_rebind(result)


def setitem(self: Tensor, key: Any, value: Any) -> None:
    """``x[key] = value`` for every key ``x[key]`` accepts."""
    if not isinstance(key, tuple):
        key = (key,)
    pos = getitem(_positions(self), key)
    _inplace(self, _put(self, pos, value, False))


def index_put_(self: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    return _inplace(self, index_put(self, indices, values, accumulate))


# -- unfold (sliding windows) ----------------------------------------------------------------
def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """``Tensor.unfold``: every window of ``size`` elements along ``dimension``, ``step``
    apart, as a new last dim (``dimension`` becomes the window count).

    PyTorch returns a strided view; here it is a gather of the window positions (a constant
    index), so it traces, compiles and differentiates like any indexing (the gradient adds
    overlapping windows back). The window count must be known when traced: unfolding the
    symbolic batch dim raises ``NotImplementedError``."""
    x = as_tensor(self)
    for name, v in (("size", size), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"unfold(): argument '{name}' must be int, not "
                            f"{type(v).__name__}")
    size, step = int(size), int(step)
    if x.ndim == 0:
        ax, length = 0, 1
    else:
        ax = sh.norm_axis(dimension, x.ndim, "unfold")
        length = x.shape[ax]
    if not isinstance(length, int):
        raise NotImplementedError(
            f"unfold(): dimension {dimension} has the symbolic size {length} (the batch "
            "dimension of a compiled step); the window count must be a constant — unfold "
            "another dimension, or compile with dynamic=False")
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {ax} is {length} but size "
                           f"is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    n = (length - size) // step + 1
    pos = (np.arange(n, dtype=np.int64)[:, None] * step
           + np.arange(size, dtype=np.int64)[None, :])
    if x.ndim == 0:
        return x.reshape(1)[:size]
    win = getitem(x, (slice(None),) * ax + (as_tensor(pos),))  # [..., n, size, ...]
    return mark_copied_view(win.movedim(ax + 1, -1), "unfold")


# -- index_select / gather / take_along_dim ------------------------------------------------
def index_select(x: Tensor, dim: int, index: Any) -> Tensor:
    x = as_tensor(x)
    idx = _index_tensor(index)
    if idx.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if x.ndim == 0:
        return getitem(x.reshape(1), (idx.reshape(-1),)).reshape([])
    ax = sh.norm_axis(dim, x.ndim, "index_select")
    return getitem(x, (slice(None),) * ax + (idx.reshape(-1),))


def _check_range(idx: Tensor, size: Any, dim: int, op: str) -> None:
    """Eagerly: PyTorch's error for an index outside ``[0, size)`` (compiled, the gather or
    scatter kernel's own bounds check stops the step)."""
    if _traced():
        return
    v = idx.numpy()
    n = int(size)
    bad = (v < 0) | (v >= n)
    if bad.any():
        raise RuntimeError(f"{op}(): index {int(v[bad].flat[0])} is out of bounds for "
                           f"dimension {dim} with size {n}")


def _index_fits(x: Tensor, idx: Tensor, ax: int, op: str, what: str = "input") -> None:
    if idx.ndim != x.ndim and not (idx.ndim <= 1 and x.ndim <= 1):
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as "
                           f"{what} tensor")
    for d, (a, b) in enumerate(zip(idx.shape, x.shape)):
        if d != ax and isinstance(a, int) and isinstance(b, int) and a > b:
            raise RuntimeError(f"{op}(): Size does not match at dimension {d} expected index "
                               f"{tuple(idx.shape)} to be no larger than {what} "
                               f"{tuple(x.shape)} apart from dimension {ax}")


def _crop(x: Tensor, shape: Any, skip: int | None) -> Tensor:
    """``x`` cut down to ``shape`` in every dim but ``skip`` (a leading window)."""
    stops = [x.shape[d] if d == skip else shape[d] for d in range(x.ndim)]
    return ops.slice_dims(x, [0] * x.ndim, stops)


def gather(x: Tensor, dim: int, index: Any, *, sparse_grad: bool = False) -> Tensor:
    """``torch.gather``: ``index`` may be smaller than ``x`` in every dim but ``dim``."""
    x = as_tensor(x)
    idx = as_tensor(index)
    if idx.dtype is not dt.int64:
        raise RuntimeError("gather(): Expected dtype int64 for index")
    if x.ndim == 0:
        x = x.reshape(1)
    if idx.ndim == 0:
        return gather(x, dim, idx.reshape(1)).reshape([])
    ax = sh.norm_axis(dim, x.ndim, "gather")
    _index_fits(x, idx, ax, "gather")
    _check_range(idx, x.shape[ax], ax, "gather")
    return _gather(_crop(x, idx.shape, ax), ax, idx)


def take_along_dim(x: Tensor, indices: Any, dim: int | None = None) -> Tensor:
    x = as_tensor(x)
    idx = _index_tensor(indices)
    if dim is None:
        return gather(x.reshape(-1), 0, idx.reshape(-1))
    ax = sh.norm_axis(dim, x.ndim, "take_along_dim")
    if idx.ndim != x.ndim:
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same "
                           "number of dimensions")
    xs, ids = list(x.shape), list(idx.shape)
    xs[ax] = ids[ax] = 1
    b = list(_broadcast_shapes([tuple(xs), tuple(ids)]))
    bx, bi = list(b), list(b)
    bx[ax], bi[ax] = x.shape[ax], idx.shape[ax]
    return gather(x.expand(*bx), ax, idx.expand(*bi))


# -- scatter family -------------------------------------------------------------------------
def _scatter_args(x: Tensor, dim: int, index: Any, op: str) -> tuple[int, Tensor]:
    idx = as_tensor(index)
    if idx.dtype is not dt.int64:
        raise RuntimeError(f"{op}(): Expected dtype int64 for index")
    ax = sh.norm_axis(dim, builtins.max(x.ndim, 1), op)
    _index_fits(x, idx, ax, op, "self")
    _check_range(idx, x.shape[ax] if x.ndim else 1, ax, op)
    return ax, idx


def _src(src: Any, idx: Tensor, dtype: dt.DType) -> Tensor:
    """The source cut to the index's shape (PyTorch reads only that window of ``src``)."""
    if not isinstance(src, Tensor):
        return _full(src, idx.shape, dtype)
    if src.dtype is not dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    return _crop(src, idx.shape, None)


def _pad_to(t: Tensor, shape: Any) -> Tensor:
    """Zero-pad ``t`` at the end of each dim up to ``shape`` (bools pad with False)."""
    pads = [(0, sh.dim(b - a)) for a, b in zip(t.shape, shape)]
    if t.dtype is dt.bool_:
        return ops.pad(t.to(dt.int64), pads) > 0
    return ops.pad(t, pads)


def _onehot_reduce(x: Tensor, ax: int, idx: Tensor, src: Tensor, kind: str) -> Tensor:
    """Per target element of ``x``, the ``amax``/``amin``/``prod`` of the sources whose index
    points at it, over the index's window of ``x`` (an ``iota`` one-hot: O(n·m) per row);
    targets that nothing points at come back with the reduction's identity."""
    n = x.shape[ax]
    im = _movedim(idx, ax, -1) if idx.ndim else idx.reshape(1)
    sm = _movedim(src, ax, -1) if src.ndim else src.reshape(1)
    lead = list(im.shape[:-1])
    m = im.shape[-1]
    hit = im.unsqueeze(-2) == _iota(lead + [n, m], axis=len(lead))  # (..., n, m)
    sv = sm.unsqueeze(-2).expand(*(lead + [n, m]))
    if kind == "prod":
        r = _tree_prod(where(hit, sv, _full(1, (), src.dtype)))
    else:
        if src.dtype.is_float:
            fill = float("-inf") if kind == "amax" else float("inf")
        else:
            info = np.iinfo(src.dtype.np) if src.dtype is not dt.bool_ else None
            fill = (info.min if kind == "amax" else info.max) if info else (kind != "amax")
        vals = where(hit, sv, _full(fill, (), src.dtype))
        r = ops.amax(vals, -1) if kind == "amax" else ops.amin(vals, -1)
    return _movedim(r, -1, ax) if idx.ndim else r.reshape([])


def _tree_prod(t: Tensor) -> Tensor:
    """The product over the last dim by halving (exact values and gradients, zeros included)."""
    m = t.shape[-1]
    if not isinstance(m, int):
        raise NotImplementedError("scatter_reduce(reduce='prod') needs a static index size")
    while m > 1:
        half = (m + 1) // 2
        if m % 2:
            t = ops.cat([t, _full(1, list(t.shape[:-1]) + [1], t.dtype)], -1)
        t = t[..., :half] * t[..., half:]
        m = half
    return t.squeeze(-1) if m == 1 else t.sum(-1)


def _scatter_sum(x: Tensor, ax: int, idx: Tensor, src: Tensor) -> Tensor:
    """Per element of ``x``'s shape, the sum of the sources whose index points at it (zero
    elsewhere). The ``scatter_add`` runs on the index's window of ``x`` (its extent in every
    dim but ``ax``, so the gradient's ``gather`` sees matching shapes), then pads out."""
    window = [x.shape[d] if d == ax else idx.shape[d] for d in range(x.ndim)]
    r = _scatter_add(_full(0, window, src.dtype), ax, idx, src)
    return _pad_to(r, x.shape)


def _counts(x: Tensor, ax: int, idx: Tensor, dtype: dt.DType) -> Tensor:
    return _scatter_sum(x, ax, idx, _full(1, idx.shape, dtype))


def scatter_reduce(x: Tensor, dim: int, index: Any, src: Any, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """``torch.scatter_reduce`` (``sum``, ``prod``, ``mean``, ``amax``, ``amin``)."""
    x = as_tensor(x)
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    if x.ndim == 0:
        return scatter_reduce(x.reshape(1), 0, as_tensor(index).reshape(1),
                              as_tensor(src).reshape(1), reduce,
                              include_self=include_self).reshape([])
    ax, idx = _scatter_args(x, dim, index, "scatter_reduce")
    s = _src(src, idx, x.dtype)
    cnt = _counts(x, ax, idx, dt.int64)
    hit = cnt > 0
    if reduce in ("sum", "mean"):
        total = _scatter_sum(x, ax, idx, s)
        base = x if include_self else where(hit, _full(0, (), x.dtype), x)
        out = base + total if x.dtype is not dt.bool_ else (base.to(dt.int64) + total) > 0
        if reduce == "sum":
            return out
        c = cnt + (1 if include_self else 0)
        c = ops.binary("maximum", c, 1)
        if x.dtype.is_float:
            return out / c.to(x.dtype)
        return ops.apply_op(_floor_div(), out, c)
    r = _pad_to(_onehot_reduce(x, ax, idx, s, reduce), x.shape)
    if include_self:
        if reduce == "prod":
            r = where(hit, r * x, x)
        elif reduce == "amax":
            r = where(hit, ops.binary("maximum", r, x), x)
        else:
            r = where(hit, ops.binary("minimum", r, x), x)
        return r
    return where(hit, r, x)


def scatter(x: Tensor, dim: int, index: Any, src: Any = None, value: Any = None, *,
            reduce: str | None = None) -> Tensor:
    """``torch.scatter``: ``src`` (a tensor) or ``value`` (a number) written at ``index``
    along ``dim``; ``reduce`` ``'add'`` or ``'multiply'`` combines instead."""
    x = as_tensor(x)
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() missing 1 required positional argument: 'src' or 'value'")
    if reduce is not None:
        if reduce not in ("add", "multiply"):
            raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
        return scatter_reduce(x, dim, index, src, "sum" if reduce == "add" else "prod")
    if x.ndim == 0:
        return scatter(x.reshape(1), 0, as_tensor(index).reshape(1),
                       src.reshape(1) if isinstance(src, Tensor) else src).reshape([])
    ax, idx = _scatter_args(x, dim, index, "scatter")
    s = _src(src, idx, x.dtype)
    work = dt.int64 if x.dtype is dt.bool_ else x.dtype
    total = _scatter_sum(x, ax, idx, s.to(work))
    cnt = _counts(x, ax, idx, work)
    hit = cnt > 0
    if x.dtype is dt.bool_:
        val = total > 0
    elif x.dtype.is_float:
        val = total / ops.binary("maximum", cnt, 1)
    else:
        val = ops.apply_op(_floor_div(), total, ops.binary("maximum", cnt, 1))
    return where(hit, val, x)


def scatter_add(x: Tensor, dim: int, index: Any, src: Any) -> Tensor:
    x = as_tensor(x)
    if x.ndim == 0:
        return scatter_add(x.reshape(1), 0, as_tensor(index).reshape(1),
                           as_tensor(src).reshape(1)).reshape([])
    ax, idx = _scatter_args(x, dim, index, "scatter_add")
    s = _src(as_tensor(src), idx, x.dtype)
    if x.dtype is dt.bool_:
        return (x.to(dt.int64) + _scatter_sum(x, ax, idx, s.to(dt.int64))) > 0
    return x + _scatter_sum(x, ax, idx, s)


def _along(x: Tensor, ax: int, index: Tensor) -> Tensor:
    """A 1-d index along ``ax`` as a full-rank scatter index for ``source``-shaped updates."""
    shape = list(x.shape)
    shape[ax] = index.shape[0]
    view = [1] * x.ndim
    view[ax] = index.shape[0]
    return index.reshape(view).expand(*shape)


def _index_1d(x: Tensor, dim: int, index: Any, op: str) -> tuple[Tensor, int, Tensor]:
    x = as_tensor(x)
    idx = _index_tensor(index).reshape(-1)
    x1 = x.reshape(1) if x.ndim == 0 else x
    ax = sh.norm_axis(dim, x1.ndim, op)
    _check_range(idx, x1.shape[ax], ax, op)
    return x1, ax, idx


def index_add(x: Tensor, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Tensor:
    x0 = as_tensor(x)
    x1, ax, idx = _index_1d(x0, dim, index, "index_add")
    src = as_tensor(source).to(x0.dtype)
    src = src.reshape(1) if src.ndim == 0 else src
    if alpha != 1:
        src = src * alpha
    out = _scatter_add(x1, ax, _along(x1, ax, idx), src.expand(*_along(x1, ax, idx).shape))
    return out.reshape([]) if x0.ndim == 0 else out


def index_copy(x: Tensor, dim: int, index: Any, source: Any) -> Tensor:
    x0 = as_tensor(x)
    x1, ax, idx = _index_1d(x0, dim, index, "index_copy")
    src = as_tensor(source).to(x0.dtype)
    src = src.reshape(1) if src.ndim == 0 else src
    out = scatter(x1, ax, _along(x1, ax, idx), src)
    return out.reshape([]) if x0.ndim == 0 else out


def index_fill(x: Tensor, dim: int, index: Any, value: Any) -> Tensor:
    x0 = as_tensor(x)
    x1 = x0.reshape(1) if x0.ndim == 0 else x0
    ax = sh.norm_axis(dim, x1.ndim, "index_fill")
    idx = _checked(_index_tensor(index).reshape(-1), x1.shape[ax], ax)  # negatives wrap
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError("index_fill_ only supports a 0-dimensional value tensor, but "
                               f"got tensor with {value.ndim} dimension(s).")
    hit = _counts(x1, ax, _along(x1, ax, idx), dt.int64) > 0
    v = as_tensor(value).to(x0.dtype) if isinstance(value, Tensor) else value
    out = where(hit, v, x1)
    if x0.dtype is not out.dtype:
        out = out.to(x0.dtype)
    return out.reshape([]) if x0.ndim == 0 else out


# -- data-dependent shapes (eager only) ----------------------------------------------------
def nonzero(x: Tensor, *, as_tuple: bool = False) -> Any:
    x = as_tensor(x)
    if _traced():
        raise NotImplementedError(_mask_message("nonzero()"))
    arr = x.numpy()
    if as_tuple:
        if arr.ndim == 0:
            return (as_tensor(np.nonzero(np.atleast_1d(arr))[0].astype(np.int64)),)
        return tuple(as_tensor(c.astype(np.int64)) for c in np.nonzero(arr))
    return as_tensor(np.argwhere(arr).astype(np.int64).reshape(-1, arr.ndim))


def argwhere(x: Tensor) -> Tensor:
    if _traced():
        raise NotImplementedError(_mask_message("argwhere()"))
    return nonzero(x)


def masked_select(x: Tensor, mask: Any) -> Tensor:
    x = as_tensor(x)
    m = as_tensor(mask)
    if m.dtype is not dt.bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    if _traced():
        raise NotImplementedError(_mask_message("masked_select()"))
    shape = _broadcast_shapes([tuple(x.shape), tuple(m.shape)])
    xb = x.expand(*shape) if tuple(x.shape) != shape else x
    mb = np.broadcast_to(m.numpy(), shape)
    return getitem(xb, (Tensor._from_array(np.ascontiguousarray(mb)),)) if shape else \
        getitem(xb.reshape(1), (Tensor._from_array(mb.reshape(1)),))


# -- sorting ---------------------------------------------------------------------------------
def argsort(x: Tensor, dim: int = -1, descending: bool = False, *,
            stable: bool = False) -> Tensor:
    x = as_tensor(x)
    if x.ndim == 0:
        return _full(0, (), dt.int64) if _traced() else as_tensor(np.zeros((), np.int64))
    ax = sh.norm_axis(dim, x.ndim, "argsort")
    return _wrap(builder().op("sort", (x.node,), axis=ax, descending=bool(descending)))


def sort(x: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False) -> Any:
    """``torch.sort`` (stable whatever ``stable`` says): (values, indices), the values a
    ``gather`` of ``x`` so their gradient goes back to the sorted-from positions."""
    x = as_tensor(x)
    if x.ndim == 0:
        return SortResult(x * 1 if x.dtype is not dt.bool_ else x, argsort(x))
    idx = argsort(x, dim, descending)
    ax = sh.norm_axis(dim, x.ndim, "sort")
    return SortResult(_gather(x, ax, idx), idx)


def msort(x: Tensor) -> Tensor:
    return sort(x, 0).values


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:  # noqa: A002
    x = as_tensor(x)
    if x.ndim == 0:
        if k not in (0, 1):
            raise RuntimeError("selected index k out of range")
        return TopK(x * 1, argsort(x))
    ax = sh.norm_axis(dim, x.ndim, "topk")
    n = x.shape[ax]
    if isinstance(n, int) and not 0 <= k <= n:
        raise RuntimeError("selected index k out of range")
    idx = argsort(x, ax, descending=largest)
    idx = ops.slice_dims(idx, [0] * x.ndim, [k if d == ax else s for d, s in enumerate(idx.shape)])
    return TopK(_gather(x, ax, idx), idx)


def kthvalue(x: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> Any:
    x = as_tensor(x)
    x1 = x.reshape(1) if x.ndim == 0 else x
    ax = sh.norm_axis(dim, x1.ndim, "kthvalue")
    n = x1.shape[ax]
    if isinstance(n, int) and not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {ax}")
    idx = argsort(x1, ax)
    idx = ops.slice_dims(idx, [k - 1 if d == ax else 0 for d in range(x1.ndim)],
                         [k if d == ax else s for d, s in enumerate(idx.shape)])
    vals = _gather(x1, ax, idx)
    if x.ndim == 0:
        return KthValue(vals.reshape([]), idx.reshape([]))
    if not keepdim:
        vals, idx = vals.squeeze(ax), idx.squeeze(ax)
    return KthValue(vals, idx)


# -- movedim (used above; torch.movedim for one dim) ----------------------------------------
def _movedim(x: Tensor, src: int, dst: int) -> Tensor:
    n = x.ndim
    s, d = sh.norm_axis(src, n, "movedim"), sh.norm_axis(dst, n, "movedim")
    if s == d:
        return x
    order = [i for i in range(n) if i != s]
    order.insert(d, s)
    return x.permute(*order)


def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py)."""
    ops.ADVANCED_GETITEM[0] = lambda x, key: getitem(x, key)
    T.__getitem__ = getitem
    T.__setitem__ = setitem
    T.index_put = index_put
    T.index_put_ = index_put_
    T.index_select = index_select
    T.unfold = unfold
    T.gather = gather
    T.take_along_dim = take_along_dim
    T.scatter = scatter
    T.scatter_add = scatter_add
    T.scatter_reduce = scatter_reduce
    T.index_add = index_add
    T.index_copy = index_copy
    T.index_fill = index_fill
    for name in ("scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy",
                 "index_fill"):
        fn = globals()[name]
        setattr(T, name + "_", (lambda f: lambda self, *a, **k: _inplace(self, f(self, *a, **k)))
                (fn))
    T.nonzero = nonzero
    T.argwhere = argwhere
    T.masked_select = masked_select
    T.sort = sort
    T.argsort = argsort
    T.msort = msort
    T.topk = topk
    T.kthvalue = kthvalue


__all__ = ["getitem", "setitem", "index_put", "index_put_", "index_select", "unfold", "gather",
           "take_along_dim", "scatter", "scatter_add", "scatter_reduce", "index_add",
           "index_copy", "index_fill", "nonzero", "argwhere", "masked_select", "sort",
           "argsort", "msort", "topk", "kthvalue", "SortResult", "TopK", "KthValue"]
