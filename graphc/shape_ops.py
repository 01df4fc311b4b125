"""Shape and creation ops beyond the core set (tril/triu, flip, roll, repeat, split, einsum,
eye, linspace ...), written with the core ops of ``tensor_ops`` and attached to ``Tensor`` by
``install``.

Every op here is a composition of IR primitives (slices, pads, reshapes, expands, permutes,
gathers with ``iota`` indices, ``iota`` comparisons as masks, matmul), so gradients, the
native CPU and PTX code come from those primitives. Ops whose output shape depends on data
values (``repeat_interleave`` with a tensor of repeats, ``one_hot`` without ``num_classes``)
run eagerly and raise ``NotImplementedError`` while a step is being traced; ops that need a
concrete size along a symbolic (batch) dimension say so the same way.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _context, amp
from . import tensor_ops as T_
from ._tensor import Tensor, builder, device_of, dtype_of, mark_copied_view
from .ir import dtypes as dt
from .ir import shapes as sh

_wrap = Tensor._wrap
as_tensor = T_.as_tensor


def _traced() -> bool:
    return _context.current() is not None


def _concrete(d: Any, what: str) -> int:
    """``d`` as an int, or NotImplementedError naming the op when it is a symbolic size."""
    d = sh.dim(d)
    if not isinstance(d, int):
        raise NotImplementedError(
            f"{what} along a dimension of symbolic size {sh.fmt_dim(d)} (the batch dimension of "
            "a compiled step) is not supported: its result's shape would depend on the batch "
            "size; apply it to a dimension of fixed size")
    return d


def _iota(shape: Sequence[Any], axis: int) -> Tensor:
    return _wrap(builder().op("iota", (), shape=sh.shape(shape), dtype=dt.int64, axis=axis))


def _const(value: Any, shape: Sequence[Any], dtype: dt.DType) -> Tensor:
    return _wrap(builder().const(value, tuple(shape), dtype))


def _zero_where(mask: Tensor, x: Tensor) -> Tensor:
    """``x`` where ``mask``, else zero (of ``x``'s dtype)."""
    return _wrap(builder().where(mask.node, x.node, builder().const(0, (), x.dtype)))


def _dims(args: Sequence[Any]) -> list[Any]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return list(args[0])
    return list(args)


# -- masks: tril, triu ----------------------------------------------------------------------------
def _tri(x: Tensor, diagonal: int, lower: bool, what: str) -> Tensor:
    x = as_tensor(x)
    if x.ndim < 2:
        raise RuntimeError(f"{what}: input tensor must have at least 2 dimensions")
    rc = tuple(x.shape[-2:])
    off = _iota(rc, 1) - _iota(rc, 0)  # column - row
    mask = off <= int(diagonal) if lower else off >= int(diagonal)
    return _zero_where(mask, x)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """``torch.tril``: the elements on and below the ``diagonal``-th diagonal, zeros above."""
    return _tri(input, diagonal, True, "tril")


def triu(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """``torch.triu``: the elements on and above the ``diagonal``-th diagonal, zeros below."""
    return _tri(input, diagonal, False, "triu")


# -- flip and roll --------------------------------------------------------------------------------
def _take(x: Tensor, ax: int, index: Tensor) -> Tensor:
    """``x`` read along ``ax`` at ``index`` (a 1-D int64 tensor of the new length)."""
    shape = list(x.shape)
    shape[ax] = index.shape[0]
    view = [1] * x.ndim
    view[ax] = index.shape[0]
    return T_.gather(x, ax, index.reshape(view).expand(shape))


def flip(input: Tensor, *args: Any, dims: Any = None) -> Tensor:  # noqa: A002
    """``torch.flip``: the order of the elements reversed along each of ``dims``."""
    x = as_tensor(input)
    if dims is not None and args:
        raise TypeError("flip() got multiple values for argument 'dims'")
    dl = _dims(args) if dims is None else (list(dims) if isinstance(dims, (list, tuple))
                                           else [dims])
    axes = sh.norm_axes(tuple(dl), x.ndim, "flip") if x.ndim else ()
    for ax in axes:
        n = x.shape[ax]
        if sh.same(n, 1) or sh.same(n, 0):
            continue
        x = _take(x, ax, (n - 1) - _iota((n,), 0) if isinstance(n, int)
                  else _const(n - 1, (), dt.int64) - _iota((n,), 0))
    return x


def fliplr(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.fliplr``: columns (dim 1) in reverse order."""
    x = as_tensor(input)
    if x.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(x, 1)


def flipud(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.flipud``: rows (dim 0) in reverse order."""
    x = as_tensor(input)
    if x.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(x, 0)


def _roll1(x: Tensor, shift: int, ax: int) -> Tensor:
    n = x.shape[ax]
    if isinstance(n, int):
        if n == 0:
            return x
        s = shift % n
        if s == 0:
            return x
        ndim = x.ndim
        lo = [0] * ndim
        hi = list(x.shape)
        head = T_.slice_dims(x, lo[:ax] + [n - s] + lo[ax + 1:], hi)
        tail = T_.slice_dims(x, lo, hi[:ax] + [n - s] + hi[ax + 1:])
        return T_.cat([head, tail], ax)
    # a symbolic size: out[i] = x[(i - shift) mod n], one gather
    size = _const(n, (), dt.int64)
    idx = (_iota((n,), 0) - shift) % size
    return _take(x, ax, idx)


def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:  # noqa: A002
    """``torch.roll``: elements shifted along ``dims`` (wrapping around); without ``dims``
    the flattened tensor is rolled and the shape restored."""
    x = as_tensor(input)
    sl = list(shifts) if isinstance(shifts, (tuple, list)) else [shifts]
    if dims is None:
        if len(sl) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(sl)}, dims:0")
        return _roll1(x.reshape(-1), int(sl[0]), 0).reshape(x.shape)
    dl = list(dims) if isinstance(dims, (tuple, list)) else [dims]
    if len(sl) != len(dl):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(sl)}, "
                           f"dims:{len(dl)}")
    for s, d in zip(sl, dl):
        x = _roll1(x, int(s), sh.norm_axis(d, x.ndim, "roll"))
    return x


# -- repeat, tile, repeat_interleave --------------------------------------------------------------
def repeat(input: Tensor, *sizes: Any) -> Tensor:  # noqa: A002
    """``torch.Tensor.repeat``: the tensor tiled ``sizes[i]`` times along dim ``i`` (leading
    sizes add dimensions)."""
    x = as_tensor(input)
    reps = [int(r) for r in _dims(sizes)]
    if len(reps) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    if any(r < 0 for r in reps):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {reps}")
    shape = [1] * (len(reps) - x.ndim) + list(x.shape)
    inter = [v for r, d in zip(reps, shape) for v in (1, d)]
    big = [v for r, d in zip(reps, shape) for v in (r, d)]
    out = [sh.dim(r * d) for r, d in zip(reps, shape)]
    return x.reshape(inter).expand(big).reshape(out)


def tile(input: Tensor, dims: Any) -> Tensor:  # noqa: A002
    """``torch.tile``: ``repeat`` with ``dims`` padded with leading ones to the input's rank."""
    x = as_tensor(input)
    reps = list(dims) if isinstance(dims, (tuple, list)) else [dims]
    reps = [1] * (x.ndim - len(reps)) + reps
    return repeat(x, reps)


def repeat_interleave(input: Any, repeats: Any = None, dim: Any = None, *,  # noqa: A002
                      output_size: Any = None) -> Tensor:
    """``torch.repeat_interleave``: each element repeated ``repeats`` times along ``dim``
    (the flattened input without ``dim``). An int repeats every element the same number of
    times (compiles); a tensor of per-element repeats gives a shape that depends on its
    values, so it runs eagerly only."""
    if repeats is None:  # repeat_interleave(repeats): arange(len) repeated
        r = as_tensor(input)
        if _traced():
            raise NotImplementedError(
                "repeat_interleave(repeats) inside a compiled step is not supported: the result's "
                "length is the sum of the repeats, a value known only when the step runs")
        vals = np.repeat(np.arange(r.shape[0], dtype=np.int64), r.numpy())
        return Tensor._from_array(vals)
    x = as_tensor(input)
    if dim is None:
        x, ax = x.reshape(-1), 0
    else:
        ax = sh.norm_axis(dim, x.ndim, "repeat_interleave")
    if (isinstance(repeats, Tensor) and repeats.numel() != 1) or \
            isinstance(repeats, (list, tuple, np.ndarray)):
        if _traced():
            raise NotImplementedError(
                "repeat_interleave with a tensor of repeats inside a compiled step is not "
                "supported: the result's shape depends on the repeats' values; pass an int")
        rv = np.asarray(repeats.numpy() if isinstance(repeats, Tensor) else repeats)
        if rv.ndim != 1 or rv.shape[0] != x.shape[ax]:
            raise RuntimeError("repeats must have the same size as input along dim")
        if (rv < 0).any():
            raise RuntimeError("repeats can not be negative")
        idx = np.repeat(np.arange(x.shape[ax], dtype=np.int64), rv)
        return _take(x, ax, Tensor._from_array(idx))
    r = int(repeats.item() if isinstance(repeats, Tensor) else repeats)
    if r < 0:
        raise RuntimeError("repeats can not be negative")
    shape = list(x.shape)
    inter = shape[:ax + 1] + [1] + shape[ax + 1:]
    big = shape[:ax + 1] + [r] + shape[ax + 1:]
    out = shape[:ax] + [sh.dim(shape[ax] * r)] + shape[ax + 1:]
    return x.reshape(inter).expand(big).reshape(out)


# -- split, chunk, unbind, unflatten --------------------------------------------------------------
def _narrow(x: Tensor, ax: int, start: Any, length: Any) -> Tensor:
    starts = [0] * x.ndim
    stops = list(x.shape)
    starts[ax] = start
    stops[ax] = sh.dim(start + length)
    return T_.slice_dims(x, starts, stops)


def split(tensor: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """``torch.split``: pieces of ``split_size_or_sections`` elements along ``dim`` (an int:
    equal pieces, the last one smaller; a list: those sizes, which must add up)."""
    x = as_tensor(tensor)
    ax = sh.norm_axis(dim, x.ndim, "split")
    n = x.shape[ax]
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = [int(s) for s in split_size_or_sections]
        if not sh.same(n, builtins.sum(sizes)):
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {sh.fmt_dim(n)} (input "
                f"tensor's size at dimension {ax}), but got split_sizes={sizes}")
    else:
        size = int(split_size_or_sections)
        if size < 0:
            raise RuntimeError("split expects split_size be non-negative, but got split_size="
                               f"{size}")
        if isinstance(n, int) or size == 0:
            nn = _concrete(n, "split")
        elif sh.same(n, size):
            return (x,)
        else:
            nn = _concrete(n, "split with an int size")
        if size == 0:
            if nn != 0:
                raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                                   f"dimension size of {nn}")
            return (x,)
        sizes = [builtins.min(size, nn - i) for i in range(0, nn, size)] or [0]
    out, off = [], 0
    for s in sizes:
        out.append(_narrow(x, ax, off, s))
        off += s
    return tuple(out)


def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    """``torch.chunk``: ``split`` into pieces of ``ceil(size / chunks)`` (maybe fewer)."""
    x = as_tensor(input)
    if chunks <= 0:
        raise RuntimeError("chunk expects `chunks` to be greater than 0, got: " + str(chunks))
    ax = sh.norm_axis(dim, x.ndim, "chunk")
    if chunks == 1:
        return (x,)
    n = _concrete(x.shape[ax], "chunk")
    if n == 0:  # as torch: ``chunks`` empty pieces
        return tuple(x for _ in range(chunks))
    return split(x, -(-n // chunks), ax)


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:  # noqa: A002
    """``torch.unbind``: the slices along ``dim``, that dimension removed."""
    x = as_tensor(input)
    ax = sh.norm_axis(dim, x.ndim, "unbind")
    n = _concrete(x.shape[ax], "unbind")
    return tuple(_narrow(x, ax, i, 1).squeeze(ax) for i in range(n))


def unflatten(input: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:  # noqa: A002
    """``torch.unflatten``: dimension ``dim`` reshaped to ``sizes`` (one may be -1)."""
    x = as_tensor(input)
    ax = sh.norm_axis(dim, x.ndim, "unflatten")
    sizes = list(sizes)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    if -1 not in sizes and not sh.same(sh.numel(sizes), x.shape[ax]):
        raise RuntimeError(f"unflatten: Provided sizes {sizes} don't multiply up to the size of "
                           f"dim {dim} ({sh.fmt_dim(x.shape[ax])}) in the input tensor")
    shp = list(x.shape)
    return x.reshape(shp[:ax] + sizes + shp[ax + 1:])


# -- movedim, swapaxes ----------------------------------------------------------------------------
def movedim(input: Tensor, source: Any, destination: Any) -> Tensor:  # noqa: A002
    """``torch.movedim``: dims ``source`` moved to positions ``destination``, the others in
    their order."""
    x = as_tensor(input)
    src = list(source) if isinstance(source, (tuple, list)) else [source]
    dst = list(destination) if isinstance(destination, (tuple, list)) else [destination]
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) "
                           f"should contain the same number of dims as destination ({dst} dims)")
    n = x.ndim
    src = [sh.norm_axis(s, n, "movedim") for s in src]
    dst = [sh.norm_axis(d, n, "movedim") for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError("movedim: repeated dim in `source` or `destination`")
    perm: list[int | None] = [None] * n
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(n) if i not in src)
    perm = [p if p is not None else next(rest) for p in perm]
    return T_.permute(x, perm)


def swapaxes(input: Tensor, axis0: int, axis1: int) -> Tensor:  # noqa: A002
    """``torch.swapaxes`` (``swapdims``, ``transpose``): two dims exchanged."""
    return T_.transpose(as_tensor(input), axis0, axis1)


# -- diagonals ------------------------------------------------------------------------------------
def _diag_len(n: Any, m: Any, offset: int) -> Any:
    if isinstance(n, int) and isinstance(m, int):
        return builtins.max(0, builtins.min(n, m - offset) if offset >= 0
                            else builtins.min(n + offset, m))
    if offset == 0 and sh.same(n, m):
        return n
    raise NotImplementedError(
        f"diagonal of a {sh.fmt_dim(n)} x {sh.fmt_dim(m)} block with offset {offset}: its length "
        "depends on the batch size; make the two dims fixed sizes")


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # noqa: A002
    """``torch.diagonal``: the ``offset``-th diagonal of the (``dim1``, ``dim2``) planes, as
    the last dimension (a gather along ``dim2`` of the rows that have one)."""
    x = as_tensor(input)
    d1, d2 = sh.norm_axis(dim1, x.ndim, "diagonal"), sh.norm_axis(dim2, x.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    offset = int(offset)
    x = movedim(x, [d1, d2], [-2, -1])
    n, m = x.shape[-2], x.shape[-1]
    length = _diag_len(n, m, offset)
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    lead = list(x.shape[:-2])
    if sh.same(length, 0):
        return _const(0, lead + [0], x.dtype)
    rows = _narrow(x, x.ndim - 2, r0, length)  # (..., L, m)
    idx = _iota((length, 1), 0) + c0
    idx = idx.reshape([1] * len(lead) + [length, 1]).expand(lead + [length, 1])
    return mark_copied_view(T_.gather(rows, x.ndim - 1, idx).reshape(lead + [length]),
                            "diagonal")


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: A002
    """``torch.diag_embed``: the last dimension of the input placed on the ``offset``-th
    diagonal of new (``dim1``, ``dim2``) planes, zeros elsewhere."""
    x = as_tensor(input)
    nd = x.ndim + 1
    d1, d2 = sh.norm_axis(dim1, nd, "diag_embed"), sh.norm_axis(dim2, nd, "diag_embed")
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    offset = int(offset)
    n = x.shape[-1] if x.ndim else 1
    if x.ndim == 0:
        x = x.reshape(1)
    lead = list(x.shape[:-1])
    sq = lead + [n, n]
    eye_mask = _iota((n, n), 0) == _iota((n, n), 1)
    out = _zero_where(eye_mask, x.unsqueeze(-1).expand(sq))  # out[..., i, i] = x[..., i]
    k = abs(offset)
    if k:
        pads = [(0, 0)] * len(lead)
        pads += [(0, k), (k, 0)] if offset > 0 else [(k, 0), (0, k)]
        out = T_.pad(out, pads)
    return movedim(out, [nd - 2, nd - 1], [d1, d2])


def diag(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """``torch.diag``: a 1-D input on the ``diagonal``-th diagonal of a square matrix, or the
    ``diagonal``-th diagonal of a 2-D input."""
    x = as_tensor(input)
    if x.ndim == 1:
        return diag_embed(x, diagonal)
    if x.ndim == 2:
        return globals()["diagonal"](x, diagonal, 0, 1)
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")


# -- einsum ---------------------------------------------------------------------------------------
def _parse_einsum(eq: str, ndims: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ndims):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           "equation" if len(terms) < len(ndims) else
                           "einsum(): fewer operands were provided than specified in the "
                           "equation")
    ell_n = 0
    parsed: list[list[str]] = []
    for t, nd in zip(terms, ndims):
        if t.count("...") > 1 or t.replace("...", "").count(".") or \
                not builtins.all(c.isalpha() for c in t.replace("...", "")):
            raise RuntimeError(f"einsum(): invalid subscript given in the equation: {t!r}")
        n_lab = len(t.replace("...", ""))
        if "..." in t:
            k = nd - n_lab
            if k < 0:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation "
                                   f"({n_lab}) is more than the number of dimensions ({nd})")
            ell_n = builtins.max(ell_n, k)
        elif n_lab != nd:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({n_lab}) "
                               f"does not match the number of dimensions ({nd}) for operand "
                               f"{len(parsed)} and no ellipsis was given")
        parsed.append([t, nd])  # type: ignore[list-item]
    ell = [f"#{i}" for i in range(ell_n)]
    labels: list[list[str]] = []
    for t, nd in parsed:
        pre, _, post = t.partition("...")
        if "..." in t:
            k = nd - len(pre) - len(post)
            labels.append(list(pre) + ell[ell_n - k:] + list(post))
        else:
            labels.append(list(t))
    if arrow:
        if rhs.count("...") > 1 or not builtins.all(c.isalpha() for c in rhs.replace("...", "")):
            raise RuntimeError(f"einsum(): invalid subscript given in the output: {rhs!r}")
        pre, dots, post = rhs.partition("...")
        out = list(pre) + (ell if dots else []) + list(post)
        for c in out:
            if out.count(c) > 1:
                raise RuntimeError(f"einsum(): output subscript {c} appears more than once")
            if not builtins.any(c in lab for lab in labels):
                raise RuntimeError(f"einsum(): output subscript {c} does not appear in the "
                                   "equation for any input operand")
    else:
        counts: dict[str, int] = {}
        for lab in labels:
            for c in lab:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, k in counts.items() if k == 1 and not c.startswith("#"))
    return labels, out


def _sum_labels(x: Tensor, lab: list[str], drop: set[str]) -> tuple[Tensor, list[str]]:
    axes = [i for i, c in enumerate(lab) if c in drop]
    if not axes:
        return x, lab
    out = T_.sum(x, axes)
    return (out if out.dtype is x.dtype else out.to(x.dtype)), [c for c in lab if c not in drop]


def _aligned(x: Tensor, lab: list[str], order: list[str], sizes: dict[str, Any]) -> Tensor:
    """``x`` permuted to ``order`` (labels it lacks become size-1 dims), then expanded."""
    perm = [lab.index(c) for c in order if c in lab]
    x = T_.permute(x, perm) if perm else x
    present = [c for c in order if c in lab]
    return x.reshape([x.shape[present.index(c)] if c in lab else 1 for c in order])


def _contract(a: Tensor, la: list[str], b: Tensor, lb: list[str], keep: set[str],
              sizes: dict[str, Any]) -> tuple[Tensor, list[str]]:
    a, la = _sum_labels(a, la, {c for c in la if c not in lb and c not in keep})
    b, lb = _sum_labels(b, lb, {c for c in lb if c not in la and c not in keep})
    batch = [c for c in la if c in lb and c in keep]
    contr = [c for c in la if c in lb and c not in keep]
    aonly = [c for c in la if c not in lb]
    bonly = [c for c in lb if c not in la]
    if a.dtype.is_float and b.dtype is a.dtype and contr:
        bs = [sizes[c] for c in batch]
        ta = _aligned(a, la, batch + aonly + contr, sizes).expand(
            bs + [sizes[c] for c in aonly + contr])
        tb = _aligned(b, lb, batch + contr + bonly, sizes).expand(
            bs + [sizes[c] for c in contr + bonly])
        ka = sh.numel([sizes[c] for c in aonly])
        kc = sh.numel([sizes[c] for c in contr])
        kb = sh.numel([sizes[c] for c in bonly])
        out = T_.matmul(ta.reshape(bs + [ka, kc]), tb.reshape(bs + [kc, kb]))
        lab = batch + aonly + bonly
        return out.reshape([sizes[c] for c in lab]), lab
    order = batch + aonly + bonly + contr
    prod = _aligned(a, la, order, sizes) * _aligned(b, lb, order, sizes)
    if len(order) and not builtins.all(sh.same(d, sizes[c]) for d, c in zip(prod.shape, order)):
        prod = prod.expand([sizes[c] for c in order])
    return _sum_labels(prod, order, set(contr))


def einsum(equation: str, *operands: Any) -> Tensor:
    """``torch.einsum``: sums of products over the labels of ``equation`` (ellipsis,
    repeated labels as diagonals, implicit output); contractions of two operands become a
    matmul, left to right."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str):
        raise NotImplementedError("einsum in the sublist format (operand, [dims], ...) is not "
                                  "supported; write the equation as a string")
    ops = [as_tensor(o) for o in operands]
    if not ops:
        raise RuntimeError("einsum(): must provide at least one operand")
    labels, out = _parse_einsum(equation, [o.ndim for o in ops])
    dtype = ops[0].dtype
    for o in ops[1:]:
        if o.dtype is not dtype:
            raise RuntimeError(f"einsum(): expected scalar type {dtype.name} but found "
                               f"{o.dtype.name}")
    sizes: dict[str, Any] = {}
    for i, (o, lab) in enumerate(zip(ops, labels)):
        # repeated labels in one operand: its diagonal
        while True:
            dup = next((c for c in lab if lab.count(c) > 1), None)
            if dup is None:
                break
            p = lab.index(dup)
            q = lab.index(dup, p + 1)
            if not sh.same(o.shape[p], o.shape[q]):
                raise RuntimeError(f"einsum(): subscript {dup} is repeated for operand {i} but "
                                   f"the sizes don't match, {sh.fmt_dim(o.shape[p])} != "
                                   f"{sh.fmt_dim(o.shape[q])}")
            o = diagonal(o, 0, p, q)
            lab = [c for j, c in enumerate(lab) if j not in (p, q)] + [dup]
        ops[i], labels[i] = o, lab
        for c, d in zip(lab, o.shape):
            if c not in sizes or sh.same(sizes[c], 1):
                sizes[c] = d
            elif not sh.same(d, 1) and not sh.same(d, sizes[c]):
                raise RuntimeError(f"einsum(): operands do not broadcast with remapped shapes "
                                   f"(subscript {c}: {sh.fmt_dim(sizes[c])} and "
                                   f"{sh.fmt_dim(d)})")
    acc, lab = ops[0], labels[0]
    for i in range(1, len(ops)):
        keep = set(out).union(*labels[i + 1:]) if i + 1 < len(ops) else set(out)
        acc, lab = _contract(acc, lab, ops[i], labels[i], keep, sizes)
    acc, lab = _sum_labels(acc, lab, {c for c in lab if c not in out})
    if not out:
        return acc.reshape(())
    return _aligned(acc, lab, out, sizes).expand([sizes[c] for c in out])


# -- matrix products ------------------------------------------------------------------------------
def _check_dims(what: str, *pairs: tuple[Tensor, int, str]) -> None:
    for t, nd, name in pairs:
        if t.ndim != nd:
            raise RuntimeError(f"{what}: {name} must be a {nd}D tensor, got {t.ndim}D")


def _same_dtype(what: str, a: Tensor, b: Tensor) -> None:
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{what}: expected both operands to have the same dtype, but got "
                           f"{a.dtype.name} and {b.dtype.name}")


@amp.lower_precision
def bmm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002
    """``torch.bmm``: batched matrix product of two 3-D tensors (no broadcasting)."""
    a, b = as_tensor(input), as_tensor(mat2)
    _check_dims("bmm", (a, 3, "batch1"), (b, 3, "batch2"))
    if not sh.same(a.shape[0], b.shape[0]) or not sh.same(a.shape[2], b.shape[1]):
        raise RuntimeError(f"bmm: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                           "multiplied")
    _same_dtype("bmm", a, b)
    return T_.matmul(a, b)


def _add_scaled(inp: Any, prod: Tensor, beta: Any, alpha: Any) -> Tensor:
    out = prod if alpha == 1 else prod * alpha
    if beta == 0:  # as torch: the input is ignored (NaN and inf in it do not propagate)
        return out
    inp = as_tensor(inp)
    return (inp if beta == 1 else inp * beta) + out


@amp.lower_precision
def baddbmm(input: Any, batch1: Tensor, batch2: Tensor, *, beta: Any = 1,  # noqa: A002
            alpha: Any = 1) -> Tensor:
    """``torch.baddbmm``: ``beta * input + alpha * (batch1 @ batch2)``."""
    return _add_scaled(input, bmm(batch1, batch2), beta, alpha)


@amp.lower_precision
def mm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002
    """``torch.mm``: the product of two matrices."""
    a, b = as_tensor(input), as_tensor(mat2)
    _check_dims("mm", (a, 2, "self"), (b, 2, "mat2"))
    _same_dtype("mm", a, b)
    return T_.matmul(a, b)


@amp.lower_precision
def addmm(input: Any, mat1: Tensor, mat2: Tensor, *, beta: Any = 1,  # noqa: A002
          alpha: Any = 1) -> Tensor:
    """``torch.addmm``: ``beta * input + alpha * (mat1 @ mat2)``."""
    return _add_scaled(input, mm(mat1, mat2), beta, alpha)


@amp.no_autocast
def mv(input: Tensor, vec: Tensor) -> Tensor:  # noqa: A002
    """``torch.mv``: matrix times vector."""
    a, v = as_tensor(input), as_tensor(vec)
    _check_dims("mv", (a, 2, "self"), (v, 1, "vec"))
    _same_dtype("mv", a, v)
    return T_.matmul(a, v)


@amp.no_autocast
def addmv(input: Any, mat: Tensor, vec: Tensor, *, beta: Any = 1,  # noqa: A002
          alpha: Any = 1) -> Tensor:
    """``torch.addmv``: ``beta * input + alpha * (mat @ vec)``."""
    return _add_scaled(input, mv(mat, vec), beta, alpha)


def outer(input: Tensor, vec2: Tensor) -> Tensor:  # noqa: A002
    """``torch.outer`` (``ger``): ``input[i] * vec2[j]``."""
    a, b = as_tensor(input), as_tensor(vec2)
    _check_dims("outer", (a, 1, "self"), (b, 1, "vec2"))
    return a.unsqueeze(1) * b.unsqueeze(0)


@amp.no_autocast
def dot(input: Tensor, tensor: Tensor) -> Tensor:  # noqa: A002
    """``torch.dot``: the inner product of two 1-D tensors of one dtype."""
    a, b = as_tensor(input), as_tensor(tensor)
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if not sh.same(a.shape[0], b.shape[0]):
        raise RuntimeError("inconsistent tensor size, expected tensor [" + sh.fmt_dim(a.shape[0])
                           + "] and src [" + sh.fmt_dim(b.shape[0]) + "] to have the same "
                           "number of elements, but got different")
    _same_dtype("dot", a, b)
    if a.dtype.is_float:
        return T_.matmul(a, b)
    return T_.sum(a * b).to(a.dtype)


def kron(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.kron``: the Kronecker product (blocks ``input[i] * other``)."""
    a, b = as_tensor(input), as_tensor(other)
    nd = builtins.max(a.ndim, b.ndim)
    sa = [1] * (nd - a.ndim) + list(a.shape)
    sb = [1] * (nd - b.ndim) + list(b.shape)
    ia = [v for d in sa for v in (d, 1)]
    ib = [v for d in sb for v in (1, d)]
    prod = a.reshape(ia) * b.reshape(ib)
    return prod.reshape([sh.dim(x * y) for x, y in zip(sa, sb)])


# -- one_hot, masked_fill -------------------------------------------------------------------------
def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``F.one_hot``: int64 class indices -> int64 rows of ``num_classes`` with a 1 at the
    index. ``num_classes=-1`` means ``max + 1``, a value known only eagerly."""
    x = as_tensor(tensor)
    if x.dtype is not dt.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    num_classes = int(num_classes)
    if not _traced():
        v = x.numpy()
        if num_classes == -1 and v.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        if v.size and v.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if num_classes == -1:
            num_classes = int(v.max()) + 1
        elif v.size and v.max() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    elif num_classes == -1:
        raise NotImplementedError(
            "one_hot(num_classes=-1) inside a compiled step is not supported: the number of "
            "classes would be read from the data; pass num_classes")
    if num_classes < 0:
        raise RuntimeError(f"num_classes must be -1 or non-negative, got {num_classes}")
    # rows of the identity read at the indices: a gather, so a compiled step checks the
    # values' bounds as PyTorch does (an out-of-range class raises instead of giving zeros)
    flat = x.reshape(-1, 1)
    n = flat.shape[0]
    eye_ = (_iota((num_classes, num_classes), 0) == _iota((num_classes, num_classes), 1))
    rows = T_.gather(eye_.to(dt.int64), 0, flat.expand(n, num_classes))
    return rows.reshape(list(x.shape) + [num_classes])


def masked_fill(input: Tensor, mask: Any, value: Any) -> Tensor:  # noqa: A002
    """``torch.masked_fill``: ``value`` where the boolean ``mask`` (broadcast) is set."""
    x = as_tensor(input)
    m = as_tensor(mask)
    if m.dtype is not dt.bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{m.dtype.name}")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got "
                               f"tensor with {value.ndim} dimension(s).")
        v = value.node if value.dtype is x.dtype else builder().cast(value.node, x.dtype)
    else:
        v = builder().const(value.item() if isinstance(value, np.generic) else value, (),
                            x.dtype)
    return _wrap(builder().where(m.node, v, x.node))


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    out = masked_fill(self, mask, value)
    if tuple(out.shape) != tuple(self.shape) and not sh.same_shape(out.shape, self.shape):
        raise RuntimeError(f"masked_fill_: mask of shape {tuple(as_tensor(mask).shape)} does not "
                           f"broadcast to the tensor's shape {tuple(self.shape)}")
    return self._assign(out)


# -- creation -------------------------------------------------------------------------------------
def _check_device(device: Any, what: str) -> None:
    if device is not None:
        device_of(device, what)


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        if _traced():
            raise NotImplementedError("requires_grad=True for a tensor created inside a compiled "
                                      "step is not supported; create it outside")
        return Tensor._from_array(np.array(t.numpy()), True)
    return t


def _dtype(dtype: Any, default: dt.DType, what: str) -> dt.DType:
    return default if dtype is None else dtype_of(dtype, what)


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:
    """``torch.eye``: ones on the diagonal of an ``n`` x ``m`` matrix."""
    _check_device(device, "eye")
    m = n if m is None else m
    if n < 0 or m < 0:
        raise RuntimeError(f"n and m must be non-negative, got {n} and {m}")
    d = _dtype(dtype, dt.float32, "eye")
    hit = _iota((n, m), 0) == _iota((n, m), 1)
    return _finish(hit.to(d), requires_grad)


def empty(*size: Any, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """``torch.empty``: graphc fills it with zeros (any contents are valid)."""
    _check_device(device, "empty")
    shape = tuple(_dims(size))
    d = _dtype(dtype, dt.float32, "empty")
    if _traced():
        return _finish(_const(0, shape, d), requires_grad)
    return Tensor._from_array(np.zeros(shape, d.np), requires_grad)


# -- ``*_like``: the layout of PyTorch's ``memory_format=torch.preserve_format`` ---------------
def _like_strides(input: Any, memory_format: Any, what: str) -> tuple[int, ...] | None:
    """The element strides PyTorch gives a ``*_like(input)`` result; None for row-major.

    Every ``*_like`` (``rand_like``, ``zeros_like``, ...) is ``empty_like`` and a fill, and
    ``empty_like``'s default ``preserve_format`` (aten/src/ATen/native/TensorFactories.cpp)
    gives an input that is non-overlapping and dense (a transpose, a permutation,
    channels-last) its own strides, and any other strided input (a step or column slice, an
    expanded tensor) dense strides in its dims' memory order (``infer_dense_strides``). The
    layout matters beyond ``stride()``: a later fill draws its values in memory order
    (``random_ops._layout``), so ``randn_like(x.t())`` puts PyTorch's draws where PyTorch
    puts them only with PyTorch's layout. ``contiguous_format`` is row-major; other formats
    raise. A tensor made inside a compiled step has no strides (the IR is row-major): only
    an input whose eager array is known while tracing (made outside the step) has a layout,
    which ``rand_like``/``randn_like``/``randint_like`` then draw in; the result itself is
    row-major IR there, so a later fill of it in the step (``empty_like(w).normal_()``)
    draws in logical order, where PyTorch's strided result draws in memory order.
    The strides of size-1 dims are numpy's where PyTorch's differ (as ``Tensor.stride()``
    reports them for views); they do not change which element is where."""
    name = None if memory_format is None else str(memory_format).rsplit(".", 1)[-1]
    if name == "contiguous_format":
        return None
    if name not in (None, "preserve_format"):
        raise NotImplementedError(
            f"{what}(memory_format={memory_format}): only preserve_format (the default) and "
            "contiguous_format are supported")
    if not isinstance(input, Tensor):
        return None
    from .random_ops import layout_dependent

    return layout_dependent(input, _preserved_strides)


def _preserved_strides(a: np.ndarray | None) -> tuple[int, ...] | None:
    """``preserve_format``'s strides for a result like the array ``a`` (``_like_strides``)."""
    if not isinstance(a, np.ndarray) or a.flags.c_contiguous:
        return None
    shape, strides = a.shape, tuple(st // a.itemsize for st in a.strides)
    if any(st < 0 for st, n in zip(strides, shape) if n > 1):
        return None  # numpy's reversed views (PyTorch has none): row-major, as a copy's
    if not _non_overlapping_and_dense(shape, strides):
        strides = _infer_dense_strides(shape, strides)
    big = [st for st, n in zip(strides, shape) if n > 1]
    return None if big == sorted(big, reverse=True) else strides


def _non_overlapping_and_dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """ATen's ``compute_non_overlapping_and_dense``: the dims of size 2 or more, by growing
    stride, step through memory with no gap and no overlap."""
    need = 1
    for d in sorted((d for d, n in enumerate(shape) if n >= 2), key=lambda d: strides[d]):
        if strides[d] != need:
            return False
        need *= shape[d]
    return True


def _infer_dense_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """ATen's ``infer_dense_strides`` (aten/src/ATen/TensorUtils.cpp): dense strides in the
    order of ``strides`` (``TensorIterator``'s insertion sort: a zero stride is "ambiguous",
    equal strides put the larger dim outside), size-1 dims taking the running stride."""
    from .random_ops import stride_sorted

    n = len(shape)
    perm = stride_sorted(shape, strides, list(range(n)))  # innermost first
    out = [0] * n
    cur = 1
    for d in perm:
        out[d] = cur
        if shape[d] > 1:
            cur *= shape[d]
    return tuple(out)


def _with_strides(values: np.ndarray, strides: tuple[int, ...]) -> np.ndarray:
    """A new array holding ``values`` in memory laid out with element ``strides`` (dense),
    so ``stride()``, ``is_contiguous()`` and later fills see PyTorch's layout."""
    n = int(np.prod(values.shape, dtype=np.int64))
    buf = np.empty(n, values.dtype)
    out = np.ndarray(values.shape, values.dtype, buffer=buf,
                     strides=tuple(st * values.itemsize for st in strides))
    out[...] = values
    return out


def _like(make: Any, input: Any, memory_format: Any, what: str,  # noqa: A002
          requires_grad: bool = False, drawn: bool = False, strided: Any = None) -> Tensor:
    """``make(shape, requires_grad)`` (a row-major factory: ``zeros``, ``rand``, ...) for
    ``input``'s shape, in the layout PyTorch's ``*_like`` gives it (``_like_strides``).

    ``drawn``: ``make`` draws random values, which ATen's fill of the strided result draws in
    its memory order; so ``make`` fills an array of the loop's shape (its dims in that
    order: its row-major order is the memory order) and the values are transposed back.
    Inside a compiled step the result is row-major IR, its values drawn in that same
    order when ``input``'s eager layout is known. ``strided``: the factory to use instead of
    ``make`` for a result that is not row-major (``randn_like``'s per-element normals)."""
    strides = _like_strides(input, memory_format, what)
    shape = tuple(input.shape)
    if strides is None:
        return make(shape, requires_grad)
    from .random_ops import _iteration_order

    if drawn:
        order = _iteration_order(shape, strides)
        inv = tuple(int(i) for i in np.argsort(order))
        t = (strided or make)(tuple(shape[d] for d in order), requires_grad)
        if _traced() or t._trace is not None:
            return t.permute(inv)
        values = np.transpose(t._node._value, inv)
    else:
        t = make(shape, requires_grad)
        if _traced() or t._trace is not None:
            return t
        values = t._node._value
    return Tensor._from_array(_with_strides(values, strides), requires_grad)


def empty_like(input: Tensor, *, dtype: Any = None, device: Any = None,  # noqa: A002
               requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    """``torch.empty_like``: a zero-filled tensor of ``input``'s shape, laid out as
    PyTorch's (``_like_strides``)."""
    return full_like(input, 0, dtype=dtype, device=device, requires_grad=requires_grad,
                     memory_format=memory_format)


def full_like(input: Tensor, fill_value: Any, *, dtype: Any = None,  # noqa: A002
              device: Any = None, requires_grad: bool = False,
              memory_format: Any = None) -> Tensor:
    """``torch.full_like``: ``fill_value`` in ``input``'s shape (and dtype, unless given),
    laid out as PyTorch's (``_like_strides``)."""
    _check_device(device, "full_like")
    x = as_tensor(input)
    d = _dtype(dtype, x.dtype, "full_like")
    strides = _like_strides(input, memory_format, "full_like")
    if _traced():
        return _finish(_const(fill_value, x.shape, d), requires_grad)
    arr = np.full(x.shape, fill_value, d.np)
    return Tensor._from_array(arr if strides is None else _with_strides(arr, strides),
                              requires_grad)


def _linspace(start: float, end: float, steps: int, d: dt.DType) -> Tensor:
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    if steps == 0:
        return _const(0, (0,), d)
    if steps == 1:
        return _const(start, (1,), d)
    # PyTorch's kernel: the first half counts up from start, the second down from end
    work = d if d.is_float else dt.float64
    step = (end - start) / (steps - 1)
    i = _iota((steps,), 0)
    up = i.to(work) * step + start
    down = end - (steps - 1 - i).to(work) * step
    return T_.where(i < steps // 2, up, down).to(work)


def linspace(start: Any, end: Any, steps: int, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """``torch.linspace``: ``steps`` evenly spaced values from ``start`` to ``end``."""
    _check_device(device, "linspace")
    d = _dtype(dtype, dt.float32, "linspace")
    start, end = float(start), float(end)
    out = _linspace(start, end, int(steps), d)
    if not d.is_float:
        # integer linspace: PyTorch computes start + i * step in integers when exact, else
        # truncates the double values
        out = out.to(d)
    return _finish(out.to(d), requires_grad)


def logspace(start: Any, end: Any, steps: int, base: float = 10.0, *, dtype: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:
    """``torch.logspace``: ``base ** linspace(start, end, steps)``."""
    _check_device(device, "logspace")
    d = _dtype(dtype, dt.float32, "logspace")
    exps = _linspace(float(start), float(end), int(steps), d if d.is_float else dt.float64)
    out = T_.binary("pow", _const(float(base), (), exps.dtype), exps)
    return _finish(out.to(d), requires_grad)


def meshgrid(*tensors: Any, indexing: str | None = None) -> tuple[Tensor, ...]:
    """``torch.meshgrid``: the 1-D inputs broadcast to a grid (``indexing="ij"``, the default,
    or ``"xy"``: the first two dims swapped)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    ts = [as_tensor(t) for t in tensors]
    indexing = "ij" if indexing is None else indexing
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: '
                           f"{indexing}")
    for t in ts:
        if t.ndim > 1:
            raise RuntimeError("torch.meshgrid: Expected 0D or 1D tensor in the tensor list but "
                               f"got: {t.ndim}D")
    ts = [t.reshape(-1) for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = [t.shape[0] for t in ts]
    n = len(ts)
    out = []
    for i, t in enumerate(ts):
        view = [1] * n
        view[i] = shape[i]
        out.append(t.reshape(view).expand(shape))
    if swap:
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def _tri_indices(row: int, col: int, offset: int, lower: bool, dtype: Any,
                 device: Any, what: str) -> Tensor:
    _check_device(device, what)
    d = _dtype(dtype, dt.int64, what)
    if d not in (dt.int64, dt.int32):
        raise RuntimeError(f'"{what}" not implemented for {d.name!r}')
    r, c = np.indices((row, col))
    keep = (c - r <= offset) if lower else (c - r >= offset)
    arr = np.stack([r[keep], c[keep]]).astype(d.np).reshape(2, -1)
    return Tensor._from_array(arr)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None,
                 device: Any = None) -> Tensor:
    """``torch.tril_indices``: (2, N) row and column indices of the lower triangle."""
    return _tri_indices(row, col, offset, True, dtype, device, "tril_indices")


def triu_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None,
                 device: Any = None) -> Tensor:
    """``torch.triu_indices``: (2, N) row and column indices of the upper triangle."""
    return _tri_indices(row, col, offset, False, dtype, device, "triu_indices")


# -- t, narrow, new_* ------------------------------------------------------------------------------
def t(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.t``: dims 0 and 1 of a 2-D tensor exchanged; 0-D and 1-D returned as they are."""
    x = T_.as_tensor(input)
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return swapaxes(x, 0, 1) if x.ndim == 2 else x


def narrow(input: Tensor, dim: int, start: Any, length: Any) -> Tensor:  # noqa: A002
    """``torch.narrow``: ``length`` elements of ``dim`` from ``start`` (negative: from the
    end), as a slice. Bounds are checked now on a concrete dim, by a guard on the symbolic
    batch dim of a compiled step."""
    x = T_.as_tensor(input)
    ax = sh.norm_axis(int(dim), x.ndim, "narrow")
    if isinstance(start, Tensor):
        raise NotImplementedError("narrow: a tensor start is not supported (pass an int)")
    start, length = int(start), int(length)
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    size = x.shape[ax]
    if isinstance(size, int):
        if not -size <= start <= size:
            raise IndexError(f"start out of range (expected to be in range of [{-size}, "
                             f"{size}], but got {start})")
        start = start + size if start < 0 else start
        if start + length > size:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                               f"({size}).")
    else:
        start = sh.dim(size + start) if start < 0 else start
        sh.require_gt(sh.dim(size + 1), sh.dim(start + length),
                      f"narrow: start + length ({start} + {length}) exceeds dimension "
                      f"{ax}'s size ({size})")
    return _narrow(x, ax, start, length)


def select(input: Tensor, dim: int, index: Any) -> Tensor:  # noqa: A002
    """``torch.select``: the slice ``index`` of ``dim``, that dim removed (``x[:, i]`` for
    ``dim=1``); eagerly a view of ``input``, as in PyTorch."""
    x = T_.as_tensor(input)
    if x.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    ax = sh.norm_axis(int(dim), x.ndim, "select")
    if isinstance(index, Tensor):
        raise NotImplementedError("select: a tensor index is not supported (pass an int)")
    i, size = int(index), x.shape[ax]
    if isinstance(size, int) and not -size <= i < size:
        raise IndexError(f"select(): index {i} out of range for tensor of size "
                         f"{list(x.shape)} at dimension {ax}")
    return x[(slice(None),) * ax + (i,)]


def _new(self: Tensor, fill: Any, size: tuple, dtype: Any, device: Any,
         requires_grad: bool, what: str) -> Tensor:
    """``Tensor.new_zeros`` and its kin: a new tensor of ``self``'s dtype unless ``dtype``
    says otherwise (``size`` as varargs or one sequence, as torch takes it)."""
    if device is not None:
        device_of(device, what)
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    d = self.dtype if dtype is None else dt.as_dtype(dtype)
    fill = 0 if fill is None else fill  # new_empty: any contents are valid, as for empty
    if _traced():
        return _finish(_const(fill, shape, d), requires_grad)
    return Tensor._from_array(np.full(tuple(_dims(shape)), fill, d.np), requires_grad)


def _new_method(fill: Any, what: str) -> Any:
    def method(self: Tensor, *size: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
        return _new(self, fill, size, dtype, device, requires_grad, what)

    method.__name__ = what
    return method


def _new_tensor(self: Tensor, data: Any, dtype: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:
    """``Tensor.new_tensor``: a copy of ``data`` (a tensor's values detached) with ``self``'s
    dtype unless ``dtype`` is given."""
    if device is not None:
        device_of(device, "new_tensor")
    d = self.dtype if dtype is None else dt.as_dtype(dtype)
    if isinstance(data, Tensor):
        out = data.detach().clone().to(d)
        if requires_grad:
            out.requires_grad_(True)
        return out
    arr = np.array(data, dtype=d.np)  # a copy, as torch's new_tensor
    if _traced():
        return _finish(as_tensor(arr), requires_grad)
    return Tensor._from_array(arr, requires_grad)


# -- Tensor methods -------------------------------------------------------------------------------
def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py)."""
    for name in ("tril", "triu", "fliplr", "flipud", "roll", "tile", "repeat_interleave",
                 "split", "chunk", "unbind", "unflatten", "movedim", "diagonal", "diag",
                 "diag_embed", "bmm", "baddbmm", "mm", "addmm", "mv", "addmv", "outer", "dot",
                 "kron", "masked_fill", "masked_fill_", "swapaxes", "t", "narrow", "select"):
        setattr(T, name, globals()[name])
    T.t_ = lambda self: self._assign(t(self))
    for name, fill in (("new_zeros", 0), ("new_ones", 1), ("new_empty", None)):
        setattr(T, name, _new_method(fill, name))
    T.new_full = lambda self, size, fill_value, *, dtype=None, device=None, \
        requires_grad=False: _new(self, fill_value, tuple(size), dtype, device, requires_grad,
                                  "new_full")
    T.new_tensor = _new_tensor
    T.element_size = lambda self: self.dtype.itemsize
    T.nelement = lambda self: self.numel()
    T.ndimension = lambda self: self.ndim
    T.flip = flip
    T.repeat = repeat
    T.moveaxis = movedim
    T.swapdims = swapaxes
    T.ger = outer
    T.where = lambda self, condition, other: T_.where(condition, self, other)
    for name in ("addmm", "baddbmm", "addmv"):  # ``x.addmm_(a, b)``: the result in ``x``
        setattr(T, name + "_", (lambda f: lambda self, a, b, *, beta=1, alpha=1: self._assign(
            f(self, a, b, beta=beta, alpha=alpha)))(globals()[name]))
    T.tril_ = lambda self, diagonal=0: self._assign(tril(self, diagonal))
    T.triu_ = lambda self, diagonal=0: self._assign(triu(self, diagonal))


moveaxis = movedim
swapdims = swapaxes
ger = outer

# ``gc.<name>`` for these (graphc/_core.py re-exports them)
FUNCTIONS = [
    "tril", "triu", "flip", "fliplr", "flipud", "roll", "tile", "repeat_interleave", "split",
    "chunk", "unbind", "unflatten", "movedim", "moveaxis", "swapaxes", "swapdims", "diagonal",
    "diag", "diag_embed", "einsum", "bmm", "baddbmm", "mm", "addmm", "mv", "addmv", "outer",
    "ger", "dot", "kron", "masked_fill", "eye", "full_like", "empty", "empty_like", "linspace",
    "logspace", "meshgrid", "tril_indices", "triu_indices", "t", "narrow", "select",
]

__all__ = [*FUNCTIONS, "one_hot", "install", "FUNCTIONS"]
