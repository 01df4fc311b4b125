"""PyTorch's composite functions (``diff``, ``rot90``, ``cross``, ``trapezoid``, ``nansum``,
``tensordot``, ``cdist``, ``cov``, the ``*stack`` family, ...), written with graphc's
front-end ops and attached to ``Tensor`` by ``install``.

Why a module of their own: none of them needs an IR primitive, a derivative rule or a kernel.
Each is what PyTorch's ATen or ``torch/functional.py`` writes it as — slices, pads,
reshapes, permutes, gathers, ``where`` masks, scans, reductions and matmuls — so its IR, its
gradient and both native lowerings (CPU and PTX) are those of the primitives it uses, and a
fix to a primitive fixes every composite built on it. Keeping them apart from ``shape_ops``
and ``reduce_ops`` (which own the ops these compose) keeps those modules about their own ops
and lets this one import them without a cycle.

The argument checks are PyTorch's, in PyTorch's order, with its exception types and
messages, so a program written against ``torch.`` behaves the same on bad input. While a step
is traced (``gc.compile``) sizes along the batch dimension are symbolic: the functions work
on them where the result's shape follows from the symbol (``diff`` along the batch, ``cov``
with the batch as observations, ``vander`` of a batch-long vector); a choice PyTorch makes
from a concrete size raises ``NotImplementedError`` naming it, or becomes a run-time guard.
Checks on data values are made eagerly; a compiled step cannot raise on a value it has not
seen, so there ``take``'s indices are checked by the gather's native bounds check and
``cov``'s weights are used as given.
"""

from __future__ import annotations

import builtins
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _context, amp
from . import shape_ops as S_
from . import tensor_ops as T_
from ._tensor import Tensor, builder
from .ir import dtypes as dt
from .ir import shapes as sh
from .reduce_ops import cumprod, cumsum, vector_norm

_wrap = Tensor._wrap


# -- helpers ----------------------------------------------------------------------------------
def _traced() -> bool:
    return _context.current() is not None


def _const(value: Any, shape: Sequence[Any], dtype: dt.DType) -> Tensor:
    return _wrap(builder().const(value, tuple(shape), dtype))


def _torch_name(d: dt.DType) -> str:
    """PyTorch's name of a dtype in its messages (``Float``, ``Long`` ...)."""
    return T_._TORCH_NAME.get(d.name, "BFloat16" if d is dt.bfloat16 else d.name)


def _tensor(x: Any, fn: str, arg: str, pos: int | None) -> Tensor:
    """``x`` when it is a tensor, else PyTorch's ``TypeError`` for the argument (``pos`` None:
    a keyword-only one)."""
    if not isinstance(x, Tensor):
        where = f" (position {pos})" if pos is not None else ""
        raise TypeError(f"{fn}(): argument '{arg}'{where} must be Tensor, not "
                        f"{type(x).__name__}")
    return x


def _tensors(seq: Any, fn: str) -> list[Tensor]:
    """A tuple or list of tensors (``hstack``'s ``tensors``), with PyTorch's errors."""
    if not isinstance(seq, (tuple, list)):
        raise TypeError(f"{fn}(): argument 'tensors' (position 1) must be tuple of Tensors, "
                        f"not {type(seq).__name__}")
    for i, t in enumerate(seq):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{type(t).__name__}")
    return list(seq)


def _int_arg(v: Any, fn: str, arg: str, pos: int | None = None) -> int:
    """An int argument: a Python or numpy integer, not a bool or a float (PyTorch's argument
    parser refuses both with this ``TypeError``)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        where = f" (position {pos})" if pos is not None else ""
        raise TypeError(f"{fn}(): argument '{arg}'{where} must be int, not {type(v).__name__}")
    return int(v)


def _result_type(ts: Sequence[Tensor]) -> dt.DType:
    """``torch.result_type`` of tensors: dimensioned tensors decide the dtype unless a 0-d one
    is of a higher category (bool < integer < float), as ATen's ``combine_categories``."""
    dim_t: dt.DType | None = None
    zero_t: dt.DType | None = None
    for t in ts:
        if t.ndim:
            dim_t = t.dtype if dim_t is None else dt.promote(dim_t, t.dtype)
        else:
            zero_t = t.dtype if zero_t is None else dt.promote(zero_t, t.dtype)
    if dim_t is None or zero_t is None:
        return dim_t or zero_t or dt.float32
    if dim_t.is_float or (dim_t is not dt.bool_ and not zero_t.is_float):
        return dim_t
    return dt.promote(dim_t, zero_t)


def _narrow(x: Tensor, ax: int, start: Any, length: Any) -> Tensor:
    """``length`` elements of ``x`` along ``ax`` from ``start`` (in range; sizes may be
    symbolic)."""
    starts, stops = [0] * x.ndim, list(x.shape)
    starts[ax], stops[ax] = start, sh.dim(start + length)
    return T_.slice_dims(x, starts, stops)


def _ends(x: Tensor, ax: int) -> tuple[Tensor, Tensor]:
    """``(x[1:], x[:-1])`` along ``ax`` (both empty for an empty dim). A symbolic size is at
    least 1 (batch sizes are positive), so ``size - 1`` stays a plain expression."""
    size = x.shape[ax]
    if isinstance(size, int) and size == 0:
        return x, x
    m = sh.dim(size - 1)
    return _narrow(x, ax, 1, m), _narrow(x, ax, 0, m)


def _broadcast(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    """The broadcast of two shapes, or PyTorch's ``RuntimeError`` naming the mismatch."""
    try:
        return list(sh.broadcast(tuple(a), tuple(b)))
    except ValueError:
        n = builtins.max(len(a), len(b))
        pa, pb = [1] * (n - len(a)) + list(a), [1] * (n - len(b)) + list(b)
        i = next(i for i in range(n - 1, -1, -1)
                 if not (sh.same(pa[i], pb[i]) or sh.same(pa[i], 1) or sh.same(pb[i], 1)))
        raise RuntimeError(f"The size of tensor a ({sh.fmt_dim(pa[i])}) must match the size of "
                           f"tensor b ({sh.fmt_dim(pb[i])}) at non-singleton dimension "
                           f"{i}") from None


def _expand_to(x: Tensor, shape: Sequence[Any]) -> Tensor:
    """``x`` expanded to ``shape`` (ATen's ``expand_size``), or its ``RuntimeError``."""
    lead = len(shape) - x.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must be greater "
                           f"or equal to the number of dimensions in the tensor ({x.ndim})")
    for i, d in enumerate(x.shape):
        if not (sh.same(d, 1) or sh.same(d, shape[lead + i])):
            raise RuntimeError(
                f"The expanded size of the tensor ({sh.fmt_dim(shape[lead + i])}) must match "
                f"the existing size ({sh.fmt_dim(d)}) at non-singleton dimension {lead + i}.  "
                f"Target sizes: {sh.fmt_shape(shape)}.  Tensor sizes: {sh.fmt_shape(x.shape)}")
    return x if sh.same_shape(x.shape, shape) else x.expand(*shape)


def _mm(a: Tensor, b: Tensor) -> Tensor:
    """The product of two matrices of one dtype: the ``matmul`` primitive for floats; integers
    as a broadcast product summed over k (the primitive is float-only), in their dtype; bools
    are refused as PyTorch's CPU ``addmm`` refuses them."""
    if a.dtype.is_float:
        return T_.matmul(a, b)
    if a.dtype is dt.bool_:
        raise NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Bool'")
    prod = a.unsqueeze(2) * b.unsqueeze(0)  # (n, k, m)
    return T_.sum(prod, 1).to(a.dtype)


def _scaled(inp: Tensor, prod: Tensor, beta: Any, alpha: Any) -> Tensor:
    """``beta * inp + alpha * prod`` as ATen's ``addmm`` family: ``beta == 0`` ignores
    ``inp`` (NaN and inf in it do not propagate), ones are not multiplied."""
    out = prod if alpha == 1 else prod * alpha
    if beta == 0:
        return out
    return (inp if beta == 1 else inp * beta) + out


# -- differences and rotations --------------------------------------------------------------
def diff(input: Tensor, n: int = 1, dim: int = -1, prepend: Tensor | None = None,  # noqa: A002
         append: Tensor | None = None) -> Tensor:
    """``torch.diff``: the ``n``-th forward difference along ``dim`` (``x[1:] - x[:-1]``,
    ``n`` times; for bools ``x[1:] != x[:-1]``), after ``prepend`` and ``append`` are
    concatenated along ``dim``. An ``n`` past the length gives an empty dim, as in PyTorch;
    along a symbolic (batch) dim that is a run-time guard instead (``n`` at most the size)."""
    x = _tensor(input, "diff", "input", 1)
    n = _int_arg(n, "diff", "n", 2)
    dim = _int_arg(dim, "diff", "dim", 3)
    extra = [_tensor(t, "diff", name, pos) if t is not None else None
             for t, name, pos in ((prepend, "prepend", 4), (append, "append", 5))]
    if x.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    ax = sh.norm_axis(dim, x.ndim, "diff")
    for t in extra:
        if t is None:
            continue
        if t.ndim != x.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
        for i in range(x.ndim):
            if i != ax and not sh.same(t.shape[i], x.shape[i]):
                raise RuntimeError(
                    "diff expects the shape of tensor to prepend or append to match that of "
                    f"input except along the differencing dimension; input.size({i}) = "
                    f"{sh.fmt_dim(x.shape[i])}, but got tensor.size({i}) = "
                    f"{sh.fmt_dim(t.shape[i])}")
    if extra[0] is not None or extra[1] is not None:
        x = T_.cat([t for t in (extra[0], x, extra[1]) if t is not None], ax)
    if n == 0:
        return x.clone()
    size = x.shape[ax]
    if isinstance(size, int):
        n = builtins.min(n, size)
    elif n > 1:
        sh.require_gt(sh.dim(size + 1), n,
                      f"diff: n ({n}) exceeds the size ({sh.fmt_dim(size)}) of dimension {ax}")
    for _ in range(n):
        hi, lo = _ends(x, ax)
        x = hi.logical_xor(lo) if x.dtype is dt.bool_ else hi - lo
    return x


def rot90(input: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:  # noqa: A002
    """``torch.rot90``: a rotation by ``k`` quarter turns (``k`` modulo 4, negative turns
    the other way) in the plane of ``dims``, from the first towards the second: a flip and a
    transpose, so it is a view-like composite with the gradient of both."""
    x = _tensor(input, "rot90", "input", 1)
    k = _int_arg(k, "rot90", "k", 2)
    dims = [int(d) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if x.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {x.ndim}")
    d0, d1 = dims
    if d0 == d1 or builtins.abs(d0 - d1) == x.ndim:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and "
                           f"dim1 = {d1}")
    a0, a1 = sh.norm_axis(d0, x.ndim, "rot90"), sh.norm_axis(d1, x.ndim, "rot90")
    k %= 4
    if k == 1:
        return S_.swapaxes(S_.flip(x, [a1]), a0, a1)
    if k == 2:
        return S_.flip(x, [a0, a1])
    if k == 3:
        return S_.swapaxes(S_.flip(x, [a0]), a0, a1)
    return x.clone()


def linalg_cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:  # noqa: A002
    """``torch.linalg.cross``: the cross product of 3-vectors along ``dim`` of the broadcast
    inputs (which must have the same number of dims and length 3 there), each component
    ``a1 * b2 - a2 * b1`` as ATen's kernel computes it."""
    a = _tensor(input, "linalg_cross", "input", 1)
    b = _tensor(other, "linalg_cross", "other", 2)
    if a.ndim != b.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    ax = sh.norm_axis(int(dim), a.ndim, "linalg.cross")
    if not (sh.same(a.shape[ax], 3) and sh.same(b.shape[ax], 3)):
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{sh.fmt_dim(a.shape[ax])} and {sh.fmt_dim(b.shape[ax])}")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected scalar type {_torch_name(a.dtype)} but found "
                           f"{_torch_name(b.dtype)}")
    if a.dtype is dt.bool_:
        raise NotImplementedError("\"cross\" not implemented for 'Bool'")
    shape = _broadcast(a.shape, b.shape)
    a, b = _expand_to(a, shape), _expand_to(b, shape)
    a0, a1, a2 = (_narrow(a, ax, i, 1) for i in range(3))
    b0, b1, b2 = (_narrow(b, ax, i, 1) for i in range(3))
    return T_.cat([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], ax)


def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:  # noqa: A002
    """``torch.cross``: ``linalg.cross`` along ``dim``; without ``dim`` (deprecated in
    PyTorch, which warns) along the first dim of ``input`` of size 3. Inside a compiled step
    a symbolic (batch) dim before it could be of size 3 on some call, so that case raises
    ``NotImplementedError``: pass ``dim``."""
    x = _tensor(input, "cross", "input", 1)
    if dim is None:
        warnings.warn("Using graphc.cross without specifying the dim arg is deprecated. Please "
                      "either pass the dim explicitly or simply use graphc.linalg.cross. The "
                      "default value of dim will change to agree with that of linalg.cross in "
                      "a future release.", UserWarning, stacklevel=2)
        for i, s in enumerate(x.shape):
            if not isinstance(s, int):
                raise NotImplementedError(
                    f"cross without dim inside a compiled step: dim {i} has the symbolic size "
                    f"{sh.fmt_dim(s)} (the batch), which PyTorch would pick on a call where it "
                    "is 3; pass dim explicitly")
            if s == 3:
                dim = i
                break
        else:
            raise RuntimeError("no dimension of size 3 in input")
    return linalg_cross(x, other, dim=int(dim))


# -- integration ------------------------------------------------------------------------------
def _dx_number(dx: Any, fn: str) -> float:
    if isinstance(dx, Tensor):
        if dx.ndim != 0:
            raise TypeError(f"{fn}(): argument 'dx' must be Number, not a {dx.ndim}-d Tensor")
        if _traced():
            raise NotImplementedError(
                f"{fn}: dx as a tensor inside a compiled step is not supported (its value would "
                "be fixed at the first call); pass a Python number")
        dx = dx.item()
    if isinstance(dx, (bool, np.bool_, complex)) or not isinstance(dx, (int, float, np.number)):
        raise RuntimeError(f"{fn}: Currently, we only support dx as a real number.")
    return float(dx)


def _spacing(x: Tensor, y: Tensor, ax: int, fn: str) -> Tensor:
    """``x``'s differences along ``ax``, shaped to broadcast with ``y``'s (ATen's rules: a
    1-D ``x`` lies along ``ax``, a lower-rank one gets leading ones)."""
    if x.ndim == 1:
        if not sh.same(x.shape[0], y.shape[ax]):
            raise RuntimeError(f"{fn}: There must be one `x` value for each sample point")
        view = [1] * y.ndim
        view[ax] = x.shape[0]
        x = x.reshape(view)
    elif x.ndim < y.ndim:
        x = x.reshape([1] * (y.ndim - x.ndim) + list(x.shape))
    hi, lo = _ends(x, ax)
    return hi - lo


def _integrate(y: Any, x: Any, dx: Any, dim: Any, fn: str, cumulative: bool) -> Tensor:
    y = _tensor(y, fn, "y", 1)
    if x is not None and dx is not None:
        raise TypeError(f"{fn}() received an invalid combination of arguments: pass either "
                        "the sample points x or the spacing dx, not both")
    if x is not None:
        _tensor(x, fn, "x", 2)
    dim = _int_arg(dim, fn, "dim")
    if y.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions"
                         if x is not None or not cumulative else
                         "slice() cannot be applied to a 0-dim tensor.")
    ax = sh.norm_axis(dim, y.ndim, fn)
    if not cumulative and sh.same(y.shape[ax], 0):  # numpy's answer for no samples: 0
        return _const(0, [d for i, d in enumerate(y.shape) if i != ax], y.dtype)
    if x is None:
        step = _dx_number(1 if dx is None else dx, fn)
        if y.dtype is dt.bool_:
            raise RuntimeError(f"{fn}: received a bool input for `y`, but bool is not supported")
        if cumulative:
            hi, lo = _ends(y, ax)
            return cumsum(step / 2.0 * (hi + lo), ax)
        ends = S_.select(y, ax, 0) + S_.select(y, ax, -1)
        return (T_.sum(y, ax) - ends * 0.5) * step
    if y.dtype is dt.bool_ or x.dtype is dt.bool_:
        raise RuntimeError(f"{fn}: received a bool input for `x` or `y`, but bool is not "
                           "supported")
    d = _spacing(x, y, ax, fn)
    hi, lo = _ends(y, ax)
    terms = (hi + lo) * d
    return (cumsum(terms, ax) if cumulative else T_.sum(terms, ax)) / 2.0


def trapezoid(y: Tensor, x: Tensor | None = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """``torch.trapezoid``: the trapezoidal rule along ``dim``, with sample points ``x`` (a
    tensor) or a constant spacing ``dx`` (1 by default); no samples integrate to 0. Integer
    ``y`` gives float32, as in PyTorch."""
    return _integrate(y, x, dx, dim, "trapezoid", False)


def trapz(y: Tensor, x: Tensor | None = None, *, dx: Any = None, dim: int = -1) -> Tensor:
    """``torch.trapz``: PyTorch's older name of ``trapezoid``."""
    return _integrate(y, x, dx, dim, "trapezoid", False)


def cumulative_trapezoid(y: Tensor, x: Tensor | None = None, *, dx: Any = None,
                         dim: int = -1) -> Tensor:
    """``torch.cumulative_trapezoid``: the running trapezoidal integral along ``dim`` (one
    element fewer than ``y``), a ``cumsum`` of the trapezoids."""
    return _integrate(y, x, dx, dim, "cumulative_trapezoid", True)


# -- reductions that skip NaN -----------------------------------------------------------------
def _reduce_input(x: Tensor, dim: Any, fn: str) -> Any:
    """``dim`` validated for ``x`` (a 0-d tensor accepts 0 and -1 and reduces nothing)."""
    if x.ndim == 0 and dim is not None and not (isinstance(dim, (list, tuple)) and not dim):
        sh.norm_axes(dim, 0, fn)
        return None
    return dim


def nansum(input: Tensor, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
           dtype: Any = None) -> Tensor:
    """``torch.nansum``: ``sum`` with NaN counted as zero (and given a zero gradient);
    integers and bools sum in int64 unless ``dtype`` says otherwise."""
    x = _tensor(input, "nansum", "input", 1)
    if x.dtype.is_float:
        x = T_.where(x.isnan(), 0, x)
    return T_.sum(x, _reduce_input(x, dim, "nansum"), keepdim, dtype)


def nanmean(input: Tensor, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
            dtype: Any = None) -> Tensor:
    """``torch.nanmean``: ``nansum`` divided by the count of non-NaN elements (all NaN:
    ``0 / 0``, NaN); floating inputs only, as in PyTorch."""
    x = _tensor(input, "nanmean", "input", 1)
    if not x.dtype.is_float:
        raise RuntimeError("nanmean(): expected input to have floating point or complex dtype "
                           f"but got {_torch_name(x.dtype)}")
    d = _reduce_input(x, dim, "nanmean")
    count = T_.sum(x.isnan().logical_not(), d, keepdim)
    return nansum(x, d, keepdim, dtype=dtype) / count


# -- products ---------------------------------------------------------------------------------
def _dims_lists(dims: Any, a: Tensor, b: Tensor) -> tuple[list[int], list[int]]:
    """``tensordot``'s ``dims`` (an int, a pair of lists, or a tensor of either) as the two
    lists of contracted dims, with ``torch.functional.tensordot``'s checks."""
    if isinstance(dims, Tensor):
        if dims._trace is not None:
            raise NotImplementedError("tensordot: dims as a tensor computed inside a compiled "
                                      "step is not supported; pass an int or lists")
        if dims.numel() > 1:
            pair = dims.tolist()
            return [int(d) for d in pair[0]], [int(d) for d in pair[1]]
        dims = int(dims.item())
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
    if isinstance(dims, (int, np.integer)):
        dims = int(dims)
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > builtins.min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        return list(range(-dims, 0)), list(range(dims))
    if not isinstance(dims, (tuple, list)):
        raise RuntimeError("tensordot expects dims to be int or tuple[list[int], list[int]] or "
                           f"list[list[int]] containing two lists, but got dims={dims}")
    dims_a, dims_b = dims
    for lst, name, pos in ((dims_a, "dims_self", 3), (dims_b, "dims_other", 4)):
        if not isinstance(lst, (tuple, list)):
            raise TypeError(f"tensordot(): argument '{name}' (position {pos}) must be tuple of "
                            f"ints, not {type(lst).__name__}")
    return [int(d) for d in dims_a], [int(d) for d in dims_b]


def tensordot(a: Tensor, b: Tensor, dims: Any = 2, out: Any = None) -> Tensor:
    """``torch.tensordot``: the sum of products over the paired dims ``dims`` (an int ``d``:
    the last ``d`` of ``a`` with the first ``d`` of ``b``); the result has ``a``'s free dims
    then ``b``'s. As ATen: a contracted dim of size 1 facing a longer one is summed first,
    then one matrix product (integers: a broadcast product summed)."""
    if out is not None:
        raise NotImplementedError("graphc.tensordot(out=...): assign the result instead")
    a = _tensor(a, "tensordot", "a", 1)
    b = _tensor(b, "tensordot", "b", 2)
    dims_a, dims_b = _dims_lists(dims, a, b)
    if len(dims_a) != len(dims_b):
        raise RuntimeError("both dimension lists should have same length")
    if a.dtype is not b.dtype:
        raise RuntimeError("both inputs should have same dtype")
    ta, tb = a, b
    for da, db in zip(dims_a, dims_b):
        xa = sh.norm_axis(da, a.ndim, "tensordot")
        xb = sh.norm_axis(db, b.ndim, "tensordot")
        s1, s2 = a.shape[xa], b.shape[xb]
        if sh.same(s2, 1):
            ta = T_.sum(ta, xa, keepdim=True, dtype=ta.dtype)
        elif sh.same(s1, 1):
            tb = T_.sum(tb, xb, keepdim=True, dtype=tb.dtype)
        elif not sh.same(s1, s2):
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{sh.fmt_dim(s1)} in dim {da} and second has size "
                               f"{sh.fmt_dim(s2)} in dim {db}")
    ca = [sh.norm_axis(d, a.ndim, "tensordot") for d in dims_a]
    cb = [sh.norm_axis(d, b.ndim, "tensordot") for d in dims_b]
    for c in (ca, cb):
        for d in c:
            if c.count(d) > 1:
                raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    fa = [i for i in range(a.ndim) if i not in ca]
    fb = [i for i in range(b.ndim) if i not in cb]
    csize = sh.numel([ta.shape[i] for i in ca])
    rsizes = [ta.shape[i] for i in fa] + [tb.shape[i] for i in fb]
    ma = T_.permute(ta, fa + ca).reshape(sh.numel([ta.shape[i] for i in fa]), csize)
    mb = T_.permute(tb, cb + fb).reshape(csize, sh.numel([tb.shape[i] for i in fb]))
    return _mm(ma, mb).reshape(rsizes)


def inner(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.inner``: sums of products over the last dims (a 0-d operand multiplies)."""
    a = _tensor(input, "inner", "input", 1)
    b = _tensor(other, "inner", "other", 2)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if not sh.same(a.shape[-1], b.shape[-1]):
        raise RuntimeError("inner() the last dimension must match on both input tensors but got "
                           f"shapes {sh.fmt_shape(a.shape).replace(',', ', ')} and "
                           f"{sh.fmt_shape(b.shape).replace(',', ', ')}")
    return tensordot(a, b, ([-1], [-1]))


@amp.no_autocast
def vdot(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.vdot``: the dot product of two 1-D tensors (conjugating the first, which for
    real dtypes is ``dot``)."""
    a = _tensor(input, "vdot", "input", 1)
    b = _tensor(other, "vdot", "other", 2)
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                           f"{_torch_name(a.dtype)} and {_torch_name(b.dtype)}")
    if not sh.same(a.shape[0], b.shape[0]):
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{sh.fmt_dim(a.shape[0])}]"
                           f" and src [{sh.fmt_dim(b.shape[0])}] to have the same number of "
                           f"elements, but got {sh.fmt_dim(a.shape[0])} and "
                           f"{sh.fmt_dim(b.shape[0])} elements respectively")
    if a.dtype is dt.bool_:
        raise NotImplementedError("\"dot\" not implemented for 'Bool'")
    return S_.dot(a, b)


def _check_scalars(d: dt.DType, all_int: bool, beta: Any, alpha: Any) -> None:
    for v, name in ((beta, "beta"), (alpha, "alpha")):
        if d is not dt.bool_ and isinstance(v, (bool, np.bool_)):
            raise RuntimeError(f"Boolean {name} only supported for Boolean results.")
        if all_int and not isinstance(v, (bool, int, np.integer, np.bool_)):
            raise RuntimeError(f"For integral input tensors, argument {name} must not be a "
                               "floating point number.")


def addr(input: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1,  # noqa: A002
         alpha: Any = 1) -> Tensor:
    """``torch.addr``: ``beta * input + alpha * outer(vec1, vec2)`` (``input`` broadcast to
    the outer product's shape; ``beta == 0`` ignores it; bools: ``(beta and input) or (alpha
    and outer)``), in the dtype of the three promoted."""
    s = _tensor(input, "addr", "input", 1)
    v1 = _tensor(vec1, "addr", "vec1", 2)
    v2 = _tensor(vec2, "addr", "vec2", 3)
    for v, name in ((v1, "vec1"), (v2, "vec2")):
        if v.ndim != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.ndim}-D")
    d = _result_type([s, v1, v2])
    _check_scalars(d, builtins.all(not t.dtype.is_float for t in (s, v1, v2)), beta, alpha)
    shape = [v1.shape[0], v2.shape[0]]
    base = _expand_to(s, shape).to(d)
    if d is dt.bool_:
        outer = v1.to(d).unsqueeze(1) & v2.to(d).unsqueeze(0)
        out = outer if alpha else _const(False, shape, d)
        return out | base if beta else out
    a1 = v1.to(d) if alpha == 1 else v1.to(d) * alpha  # ATen: alpha * vec1[i] * vec2[j]
    return _scaled(base, a1.unsqueeze(1) * v2.to(d).unsqueeze(0), beta, 1)


@amp.lower_precision
def addbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1,  # noqa: A002
           alpha: Any = 1) -> Tensor:
    """``torch.addbmm``: ``beta * input + alpha * sum_b(batch1[b] @ batch2[b])``, the sum
    over the batch as one matrix product of the batches laid side by side."""
    s = _tensor(input, "addbmm", "input", 1)
    b1 = _tensor(batch1, "addbmm", "batch1", 2)
    b2 = _tensor(batch2, "addbmm", "batch2", 3)
    sh.norm_axis(1, b1.ndim, "addbmm")  # ATen reads batch1.size(1) and batch2.size(2) first
    sh.norm_axis(2, b2.ndim, "addbmm")
    for t, name in ((b1, "batch1"), (b2, "batch2")):
        if t.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if not sh.same(b1.shape[0], b2.shape[0]):
        raise RuntimeError(f"batch1 and batch2 must have same number of batches, got "
                           f"{sh.fmt_dim(b1.shape[0])} and {sh.fmt_dim(b2.shape[0])}")
    if not sh.same(b1.shape[2], b2.shape[1]):
        raise RuntimeError(f"Incompatible matrix sizes for bmm ({sh.fmt_dim(b1.shape[1])}x"
                           f"{sh.fmt_dim(b1.shape[2])} and {sh.fmt_dim(b2.shape[1])}x"
                           f"{sh.fmt_dim(b2.shape[2])})")
    for p, q in ((s, b1), (b1, b2)):
        if p.dtype is not q.dtype:
            raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                               f"{_torch_name(p.dtype)} and {_torch_name(q.dtype)}")
    shape = [b1.shape[1], b2.shape[2]]
    base = _expand_to(s, shape)
    nb, n, k = b1.shape
    m = b2.shape[2]
    wide = T_.permute(b1, [1, 0, 2]).reshape(n, sh.dim(nb * k))  # (n, B*k)
    tall = b2.reshape(sh.dim(nb * k), m)  # (B*k, m)
    return _scaled(base, _mm(wide, tall), beta, alpha)


def renorm(input: Tensor, p: Any, dim: int, maxnorm: Any) -> Tensor:  # noqa: A002
    """``torch.renorm``: each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled
    by ``maxnorm / (norm + 1e-7)``; the gradient flows through the norm, as PyTorch's."""
    x = _tensor(input, "renorm", "input", 1)
    if isinstance(p, complex):
        raise RuntimeError("renorm: p must be real-valued")
    if not float(p) > 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if isinstance(maxnorm, complex):
        raise RuntimeError("renorm: maxnorm must be real-valued")
    maxnorm = float(maxnorm)
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm:g}")
    if x.ndim <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {x.ndim} dimensions")
    ax = sh.norm_axis(int(dim), x.ndim, "renorm")
    others = [i for i in range(x.ndim) if i != ax]
    # bf16 accumulates its norm in float32, as ATen's acc type
    acc = dt.float32 if x.dtype is dt.bfloat16 else None
    norm = vector_norm(x, float(p), others, True, dtype=acc)
    factor = T_.where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0)
    return x * factor.to(x.dtype)


# -- shaping ----------------------------------------------------------------------------------
def _atleast(tensors: tuple, n: int, fn: str) -> Any:
    one = tensors[0] if len(tensors) == 1 else tensors
    if isinstance(one, Tensor):
        return _raise_rank(one, n)
    if not isinstance(one, (tuple, list)):
        raise TypeError(f"{fn}() received an invalid combination of arguments - got "
                        f"({type(one).__name__}), but expected one of: (Tensor input) or "
                        "(tuple of Tensors tensors)")
    return tuple(_raise_rank(t, n) for t in _tensors(one, fn))


def _raise_rank(x: Tensor, n: int) -> Tensor:
    if x.ndim >= n:
        return x
    if x.ndim == 0:
        return x.reshape([1] * n)
    if n == 2 or x.ndim == 2:  # (k,) -> (1, k); (a, b) -> (a, b, 1)
        return x.unsqueeze(0) if n == 2 else x.unsqueeze(-1)
    return x.reshape(1, x.shape[0], 1)


def atleast_1d(*tensors: Any) -> Any:
    """``torch.atleast_1d``: a 0-d tensor as shape (1,); one tensor gives a tensor, several
    (or a sequence) a tuple."""
    return _atleast(tensors, 1, "atleast_1d")


def atleast_2d(*tensors: Any) -> Any:
    """``torch.atleast_2d``: 0-d as (1, 1), 1-D ``(k,)`` as ``(1, k)``."""
    return _atleast(tensors, 2, "atleast_2d")


def atleast_3d(*tensors: Any) -> Any:
    """``torch.atleast_3d``: 0-d as (1, 1, 1), ``(k,)`` as ``(1, k, 1)``, ``(a, b)`` as
    ``(a, b, 1)``."""
    return _atleast(tensors, 3, "atleast_3d")


def _nonempty(tensors: Any, fn: str) -> list[Tensor]:
    ts = _tensors(tensors, fn)
    if not ts:
        raise RuntimeError(f"{fn} expects a non-empty TensorList")
    return ts


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.hstack``: ``cat`` along dim 1 (dim 0 for 1-D inputs) of ``atleast_1d``."""
    ts = [_raise_rank(t, 1) for t in _nonempty(tensors, "hstack")]
    return T_.cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.vstack``: ``cat`` along dim 0 of ``atleast_2d`` (1-D inputs become rows)."""
    return T_.cat([_raise_rank(t, 2) for t in _nonempty(tensors, "vstack")], 0)


def row_stack(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.row_stack``: PyTorch's other name of ``vstack``."""
    return T_.cat([_raise_rank(t, 2) for t in _nonempty(tensors, "row_stack")], 0)


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.dstack``: ``cat`` along dim 2 of ``atleast_3d``."""
    return T_.cat([_raise_rank(t, 3) for t in _nonempty(tensors, "dstack")], 2)


def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.column_stack``: 0-d and 1-D inputs as columns ``(k, 1)``, then ``hstack``."""
    ts = _nonempty(tensors, "column_stack")
    return hstack([t.reshape(sh.numel(t.shape), 1) if t.ndim <= 1 else t for t in ts])


# -- indexing and construction ----------------------------------------------------------------
def take(input: Tensor, index: Tensor) -> Tensor:  # noqa: A002
    """``torch.take``: ``input`` read as 1-D at ``index`` (negative counts from the end), in
    ``index``'s shape; a gather, so its gradient adds up repeated indices. Out-of-range
    indices raise ``IndexError`` eagerly, and stop a compiled step by the gather's bounds
    check."""
    x = _tensor(input, "take", "input", 1)
    idx = _tensor(index, "take", "index", 2)
    if idx.dtype is not dt.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got "
                           f"{_torch_name(idx.dtype)}")
    flat = x.reshape(-1)
    n = flat.shape[0]
    if sh.same(n, 0) and not sh.same(sh.numel(idx.shape), 0):
        raise IndexError("take(): tried to take from an empty tensor")
    if not _traced():
        v = idx.numpy()
        bad = (v < -n) | (v >= n)
        if bad.any():
            raise IndexError(f"out of range: tried to access index {int(v[bad].flat[0])} on a "
                             f"tensor of {n} elements.")
    pos = T_.where(idx < 0, idx + _const(n, (), dt.int64), idx)
    return T_.gather(flat, 0, pos.reshape(-1)).reshape(list(idx.shape))


def diagflat(input: Tensor, offset: int = 0) -> Tensor:  # noqa: A002
    """``torch.diagflat``: the flattened input on the ``offset``-th diagonal of a square
    matrix."""
    x = _tensor(input, "diagflat", "input", 1)
    return S_.diag_embed(x.reshape(-1), _int_arg(offset, "diagflat", "offset", 2))


def vander(x: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:  # noqa: N803
    """``torch.vander``: columns ``x ** (N - 1) ... x ** 0`` (or increasing), built as
    ATen builds them, a ``cumprod`` of ``x`` repeated, so the gradient is ``cumprod``'s;
    integers and bools give int64."""
    v = _tensor(x, "vander", "x", 1)
    if v.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    length = v.shape[0]
    if N is None:
        n: Any = length
    else:
        n = _int_arg(N, "vander", "N")
        if n < 0:
            raise RuntimeError("N must be non-negative.")
    d = dt.promote(v.dtype, dt.int64)
    if sh.same(n, 0):
        out = _const(0, (length, 0), d)
    else:
        cols = [_const(1, (length, 1), d)]
        if not sh.same(n, 1):
            cols.append(cumprod(v.to(d).unsqueeze(1).expand(length, sh.dim(n - 1)), 1))
        out = T_.cat(cols, 1)
    return out if increasing else S_.flip(out, [1])


def block_diag(*tensors: Tensor) -> Tensor:
    """``torch.block_diag``: the inputs (0-d as 1 x 1, 1-D as one row) as the blocks of a
    block-diagonal matrix, zeros elsewhere: each block zero-padded to the whole, summed."""
    ts = _tensors(list(tensors), "block_diag")
    if not ts:
        return _const(0, (1, 0), dt.float32)
    d = _result_type(ts)
    blocks = []
    for i, t in enumerate(ts):
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. "
                               f"Input {i} has {t.ndim} dimensions")
        blocks.append(t.reshape(1, -1) if t.ndim == 1 else t.reshape(1, 1) if t.ndim == 0
                      else t)
    rows: Any = 0
    cols: Any = 0
    for b in blocks:
        rows, cols = sh.dim(rows + b.shape[0]), sh.dim(cols + b.shape[1])
    out: Tensor | None = None
    r0: Any = 0
    c0: Any = 0
    for b in blocks:
        r, c = b.shape
        part = T_.pad(b.to(d), [(r0, sh.dim(rows - r0 - r)), (c0, sh.dim(cols - c0 - c))])
        out = part if out is None else (out | part if d is dt.bool_ else out + part)
        r0, c0 = sh.dim(r0 + r), sh.dim(c0 + c)
    assert out is not None
    return out.clone() if len(blocks) == 1 else out  # a new tensor, never a view of the input


def cartesian_prod(*tensors: Tensor) -> Tensor:
    """``torch.cartesian_prod``: every combination of the 1-D inputs' elements, one per row
    (``meshgrid`` flattened and stacked); one input is returned as it is."""
    ts = _tensors(list(tensors), "cartesian_prod")
    for t in ts:
        if t.ndim != 1:
            raise RuntimeError(f"Expect a 1D vector, but got shape "
                               f"{sh.fmt_shape(t.shape).replace(',', ', ')}")
    if len(ts) == 1:
        return ts[0]
    if not ts:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    if builtins.any(t.dtype is not ts[0].dtype for t in ts):
        raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    grids = S_.meshgrid(*ts, indexing="ij")
    return T_.stack([g.reshape(-1) for g in grids], 1)


# -- distances and statistics -----------------------------------------------------------------
_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                "donot_use_mm_for_euclid_dist")


def _euclidean(a: Tensor, b: Tensor) -> Tensor:
    """ATen's ``_euclidean_dist``: ``sqrt(|a|^2 - 2 a.b + |b|^2)`` by one matrix product (the
    square clamped at 0), with a zero gradient at a zero distance, as its backward."""
    an = (a * a).sum(-1, keepdim=True)
    bn = (b * b).sum(-1, keepdim=True)
    a_ = T_.cat([a * -2, an, _const(1, an.shape, an.dtype)], -1)
    b_ = T_.cat([b, _const(1, bn.shape, bn.dtype), bn], -1)
    sq = T_.clamp(T_.matmul(a_, b_.mT), 0)
    zero = sq == 0
    return T_.where(zero, 0.0, T_.where(zero, 1.0, sq).sqrt())


@amp.float32_op
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0,
          compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """``torch.cdist``: the ``p``-norm distance of every row of ``x1`` to every row of
    ``x2`` (batch dims broadcast). ``p == 2`` takes PyTorch's matrix-product form where
    PyTorch does (``use_mm_for_euclid_dist``, or more than 25 rows on a side, known only for
    fixed sizes: a compiled step with rows along the batch computes the direct form); other
    ``p`` (0: the count of differing coordinates, inf: the largest difference) are the
    vector norm of the differences, gradients as PyTorch's (0 at a zero distance)."""
    a = _tensor(x1, "cdist", "x1", 1)
    b = _tensor(x2, "cdist", "x2", 2)
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    for t, name in ((a, "X1"), (b, "X2")):
        if t.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {t.ndim}D")
    if not sh.same(a.shape[-1], b.shape[-1]):
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{sh.fmt_dim(a.shape[-1])} X2: {sh.fmt_dim(b.shape[-1])}")
    for t, name in ((a, "X1"), (b, "X2")):
        if not t.dtype.is_float:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: "
                               f"{_torch_name(t.dtype)}")
    p = float(p)
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected scalar type {_torch_name(a.dtype)} but found "
                           f"{_torch_name(b.dtype)}")
    batch = _broadcast(a.shape[:-2], b.shape[:-2])
    r1, m = a.shape[-2:]
    r2 = b.shape[-2]
    a = _expand_to(a, batch + [r1, m])
    b = _expand_to(b, batch + [r2, m])
    if sh.same(m, 0):
        return _const(0, batch + [r1, r2], a.dtype)
    big = builtins.any(isinstance(r, int) and r > 25 for r in (r1, r2))
    if p == 2 and (compute_mode == "use_mm_for_euclid_dist"
                   or (compute_mode == _CDIST_MODES[0] and big)):
        return _euclidean(a, b)
    return vector_norm(a.unsqueeze(-2) - b.unsqueeze(-3), p, -1)


def _weights(w: Any, name: str, nobs: Any, is_int: bool) -> Tensor:
    w = _tensor(w, "cov", name, None)
    kind = "integral" if is_int else "floating point"
    if w.ndim > 1:
        raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but got "
                           f"{name} with {w.ndim} dimensions")
    if (w.dtype is dt.bool_ or w.dtype.is_float) if is_int else not w.dtype.is_float:
        raise RuntimeError(f"cov(): expected {name} to have {kind} dtype but got {name} with "
                           f"{_torch_name(w.dtype)} dtype")
    if not sh.same(sh.numel(w.shape), nobs):
        raise RuntimeError(f"cov(): expected {name} to have the same numel as there are "
                           f"observations in the input but got {sh.fmt_dim(sh.numel(w.shape))} "
                           f"!= {sh.fmt_dim(nobs)}")
    if not _traced() and not sh.same(nobs, 0) and (w.numpy() < 0).any():
        raise RuntimeError(f"cov(): {name} cannot be negative")
    return w


def cov(input: Tensor, *, correction: int = 1, fweights: Tensor | None = None,  # noqa: A002
        aweights: Tensor | None = None) -> Tensor:
    """``torch.cov``: the covariance of the rows of ``input`` (variables) over its columns
    (observations), weighted by integer frequencies ``fweights`` and float ``aweights``,
    divided by the degrees of freedom (``correction`` subtracted; at most 0 divides by 0), as
    ATen's formula, squeezed. The weights' values are checked eagerly (negative, zero sum);
    a compiled step cannot stop on a value, so there they are not."""
    x = _tensor(input, "cov", "input", 1)
    correction = _int_arg(correction, "cov", "correction")
    if x.ndim > 2:
        raise RuntimeError("cov(): expected input to have two or fewer dimensions but got an "
                           f"input with {x.ndim} dimensions")
    if x.dtype is dt.bool_:
        raise RuntimeError("cov(): bool dtype is not supported for input")
    inp = x.reshape(1, -1) if x.ndim < 2 else x
    nobs = inp.shape[1]
    w = fw = _weights(fweights, "fweights", nobs, True) if fweights is not None else None
    aw = _weights(aweights, "aweights", nobs, False) if aweights is not None else None
    if aw is not None:
        w = aw if w is None else w * aw
    if w is None:
        avg = T_.sum(inp, 1) / _const(nobs, (), dt.int64)
        nf: Any = sh.nonneg(sh.dim(nobs - correction))
    else:
        w_sum = T_.sum(w)
        if not _traced() and not (w_sum != 0).item():
            raise RuntimeError("cov(): weights sum to zero, can't be normalized")
        avg = T_.sum(inp * w, 1) / w_sum
        if correction == 0:
            nf = w_sum
        elif aw is None:
            nf = w_sum - correction
        elif fw is None and sh.same(nobs, 1) and correction == 1:
            nf = 0
        else:
            nf = w_sum - correction * T_.sum(w * aw) / w_sum
        if isinstance(nf, Tensor):
            nf = T_.where(nf <= 0, 0, nf)  # ATen zeroes a non-positive factor (and warns)
    if sh.same(nobs, 1) and (fw is None) != (aw is None):
        # ATen's corner case: one observation with one kind of weight is its own average
        centered = _const(0, inp.shape, inp.dtype if inp.dtype.is_float else dt.float32)
    else:
        centered = inp - avg.unsqueeze(1)
    other = centered if w is None else centered * w
    if other.dtype is not centered.dtype:  # only in ATen's corner case above
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{centered.dtype.np} != {other.dtype.np}".replace("float64", "double")
                           .replace("float32", "float"))
    c = T_.matmul(centered, other.t())
    if not isinstance(nf, Tensor):
        nf = _const(nf, (), c.dtype)
    return T_.squeeze(c / nf)


def corrcoef(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.corrcoef``: Pearson's correlation coefficients of the rows, ``cov`` divided
    by the standard deviations on both sides and clipped to [-1, 1] as NumPy does."""
    x = _tensor(input, "corrcoef", "input", 1)
    if x.ndim > 2:
        raise RuntimeError("corrcoef(): expected input to have two or fewer dimensions but got "
                           f"an input with {x.ndim} dimensions")
    c = cov(x)
    if c.ndim == 0:  # one variable: nan for a zero, nan or inf variance, else 1
        return c / c
    sd = S_.diagonal(c).sqrt()
    c = c / sd.reshape(-1, 1)
    c = c / sd.reshape(1, -1)
    return T_.clamp(c, -1, 1)


def narrow_copy(input: Tensor, dim: int, start: Any, length: int) -> Tensor:  # noqa: A002
    """``torch.narrow_copy``: ``narrow`` as a new tensor (not a view of ``input``)."""
    x = _tensor(input, "narrow_copy", "input", 1)
    if x.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    dim = _int_arg(dim, "narrow_copy", "dim", 2)
    if dim >= x.ndim:  # ATen's narrow_copy asserts instead of wrapping
        raise RuntimeError(f"narrow_copy(): dim {dim} out of range for a tensor with {x.ndim} "
                           "dimensions")
    if isinstance(start, Tensor) and start.ndim == 0 and not _traced():
        start = int(start.item())  # PyTorch reads a 0-d tensor as an int; traced, narrow refuses
    return S_.narrow(x, dim, start, length).clone()


# -- Tensor methods ---------------------------------------------------------------------------
# the ones ``torch.Tensor`` has (the others are functions only, as in PyTorch)
METHODS = [
    "diff", "rot90", "cross", "nansum", "nanmean", "inner", "vdot", "addr", "addbmm",
    "renorm", "take", "diagflat", "cov", "corrcoef", "narrow_copy",
]


def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py)."""
    for name in METHODS:
        setattr(T, name, globals()[name])

    def addr_(self: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1,
              alpha: Any = 1) -> Tensor:
        return self._assign(addr(self, vec1, vec2, beta=beta, alpha=alpha))

    def addbmm_(self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1,
                alpha: Any = 1) -> Tensor:
        return self._assign(addbmm(self, batch1, batch2, beta=beta, alpha=alpha))

    def renorm_(self: Tensor, p: Any, dim: int, maxnorm: Any) -> Tensor:
        return self._assign(renorm(self, p, dim, maxnorm))

    T.addr_ = addr_
    T.addbmm_ = addbmm_
    T.renorm_ = renorm_


# ``gc.<name>`` for these (graphc/_core.py re-exports them)
FUNCTIONS = [
    "diff", "rot90", "cross", "trapezoid", "trapz", "cumulative_trapezoid", "nansum",
    "nanmean", "tensordot", "inner", "vdot", "addr", "addbmm", "renorm", "atleast_1d",
    "atleast_2d", "atleast_3d", "hstack", "vstack", "row_stack", "dstack", "column_stack",
    "take", "diagflat", "vander", "block_diag", "cartesian_prod", "cdist", "cov", "corrcoef",
    "narrow_copy",
]

__all__ = [*FUNCTIONS, "linalg_cross", "install", "FUNCTIONS", "METHODS"]
