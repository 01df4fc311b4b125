"""Reductions and scans beyond sum/mean/max (std/var variants, prod, any/all, cumsum/cumprod/
cummax/cummin, logcumsumexp, norms, count_nonzero, aminmax); attached to ``Tensor`` by
``install``.

The scans are the IR's ``cumsum``/``cumprod``/``cummax`` primitives (their derivatives are
PyTorch's: the reversed scan for ``cumsum``, the zero-aware ``cumprod_backward``, a
scatter to the running argmax for ``cummax``); the rest are compositions. ``prod`` is the
last element of a ``cumprod``, so its gradient is exact with zeros in the input.
``logcumsumexp`` is a scan primitive of its own, combining in log space as PyTorch does, so
no prefix far below the line's maximum underflows.
"""

from __future__ import annotations

import builtins
import math
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from . import amp
from . import tensor_ops as T_
from ._tensor import Tensor, builder
from .ir import dtypes as dt
from .ir import shapes as sh

_wrap = Tensor._wrap
as_tensor = T_.as_tensor

Cummax = namedtuple("cummax", ["values", "indices"])
Cummin = namedtuple("cummin", ["values", "indices"])
Aminmax = namedtuple("aminmax", ["min", "max"])


def _const(value: Any, shape: Sequence[Any], dtype: dt.DType) -> Tensor:
    return _wrap(builder().const(value, tuple(shape), dtype))


def _axes(x: Tensor, dim: Any, op: str) -> tuple[int, ...]:
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None
    axes = sh.norm_axes(dim, x.ndim, op)
    return () if x.ndim == 0 else axes  # a 0-d tensor: dim 0 / -1 names the tensor itself


def _drop(t: Tensor, axes: Sequence[int], keepdim: bool) -> Tensor:
    if keepdim:
        return t
    return t.reshape([d for i, d in enumerate(t.shape) if i not in axes])


def _float_only(x: Tensor, op: str) -> None:
    if not x.dtype.is_float:
        raise RuntimeError(f"{op}: expected a floating point input, got {x.dtype.name}")


# -- variance and standard deviation ----------------------------------------------------
def _correction(op: str, dim: Any, unbiased: Any, correction: Any) -> tuple[Any, Any]:
    """(dim, correction) from torch's overloads: ``var(x, unbiased)``, ``var(x, dim,
    unbiased)``, ``var(x, dim, correction=c)``."""
    if isinstance(dim, bool):  # var(x, True): the legacy unbiased overload
        if unbiased is not None:
            raise TypeError(f"{op}() got multiple values for argument 'unbiased'")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise RuntimeError(f"{op}: can't specify both unbiased and correction")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if isinstance(correction, float) and correction.is_integer():
        correction = int(correction)
    return dim, correction


def _var_mean(x: Any, dim: Any, correction: Any, keepdim: bool, op: str
              ) -> tuple[Tensor, Tensor]:
    x = as_tensor(x)
    _float_only(x, op)
    axes = _axes(x, dim, op)
    n = sh.numel([x.shape[a] for a in axes])
    mu = x.mean(axes, keepdim=True) if axes else x
    d = x - mu
    # PyTorch divides by max(n - correction, 0): no values (or too few) give 0/0 = NaN
    dof = sh.nonneg(sh.dim(n) - correction) if isinstance(correction, int) else \
        builtins.max(float(n) - correction, 0.0)
    ssq = (d * d).sum(axes, keepdim=True) if axes else d * d
    v = ssq / _const(dof, (), ssq.dtype)
    return _drop(v, axes, keepdim), _drop(mu, axes, keepdim)


def var(input: Any, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,  # noqa: A002
        correction: Any = None) -> Tensor:
    """``torch.var``: ``sum((x - mean)^2) / max(N - correction, 0)`` over ``dim``."""
    dim, c = _correction("var", dim, unbiased, correction)
    return _var_mean(input, dim, c, keepdim, "var")[0]


def std(input: Any, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,  # noqa: A002
        correction: Any = None) -> Tensor:
    """``torch.std``: the square root of ``var``."""
    dim, c = _correction("std", dim, unbiased, correction)
    return _var_mean(input, dim, c, keepdim, "std")[0].sqrt()


def var_mean(input: Any, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,  # noqa: A002
             correction: Any = None) -> tuple[Tensor, Tensor]:
    """``torch.var_mean``: (var, mean)."""
    dim, c = _correction("var_mean", dim, unbiased, correction)
    return _var_mean(input, dim, c, keepdim, "var_mean")


def std_mean(input: Any, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,  # noqa: A002
             correction: Any = None) -> tuple[Tensor, Tensor]:
    """``torch.std_mean``: (std, mean)."""
    dim, c = _correction("std_mean", dim, unbiased, correction)
    v, m = _var_mean(input, dim, c, keepdim, "std_mean")
    return v.sqrt(), m


# -- scans ------------------------------------------------------------------------------
def _scan_input(x: Any, dtype: Any, op: str) -> Tensor:
    x = as_tensor(x)
    if dtype is not None:
        return x.to(dt.as_dtype(dtype))
    if not x.dtype.is_float:
        return x.to(dt.int64)  # integers and bools accumulate in int64, as in PyTorch
    return x


def _scan(op: str, x: Tensor, dim: int, reverse: bool = False) -> Tensor:
    if x.ndim == 0:
        sh.norm_axis(dim, 0, op)
        return _scan(op, x.reshape(1), 0, reverse).reshape(())
    ax = sh.norm_axis(dim, x.ndim, op)
    if sh.same(x.shape[ax], 0):
        return x
    attrs: dict[str, Any] = {"axis": ax}
    if reverse:
        attrs["reverse"] = True
    return _wrap(builder().op(op, (x.node,), **attrs))


def cumsum(input: Any, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """``torch.cumsum``: inclusive running sums along ``dim`` (integers and bools in int64)."""
    return _scan("cumsum", _scan_input(input, dtype, "cumsum"), dim)


def cumprod(input: Any, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """``torch.cumprod``: running products; the gradient is exact where the input has zeros."""
    return _scan("cumprod", _scan_input(input, dtype, "cumprod"), dim)


def _cummax(x: Tensor, dim: int, op: str) -> tuple[Tensor, Tensor]:
    x = as_tensor(x)
    was_bool = x.dtype is dt.bool_
    if was_bool:
        x = x.to(dt.int64)
    if x.ndim == 0:
        sh.norm_axis(dim, 0, op)
        v, i = _cummax(x.reshape(1), 0, op)
        return v.reshape(()), i.reshape(())
    ax = sh.norm_axis(dim, x.ndim, op)
    if sh.same(x.shape[ax], 0):
        return x, _const(0, x.shape, dt.int64)
    vals = _scan("cummax", x, ax)
    # the last position up to each one holding a running maximum (ties and NaN take over)
    hit = x.detach() == vals.detach()
    if x.dtype.is_float:
        hit = hit | (x.detach() != x.detach())
    iota = _wrap(builder().op("iota", (), shape=tuple(x.shape), dtype=dt.int64, axis=ax))
    idx = _scan("cummax", T_.where(hit, iota, 0), ax)
    return (vals.to(dt.bool_) if was_bool else vals), idx


def cummax(input: Any, dim: int) -> Any:  # noqa: A002
    """``torch.cummax``: (values, indices) of the running maximum along ``dim``; a later equal
    value (or NaN) takes the index; the gradient goes to the element at the index."""
    return Cummax(*_cummax(input, dim, "cummax"))


def cummin(input: Any, dim: int) -> Any:  # noqa: A002
    """``torch.cummin``: the running minimum, as ``cummax`` of the order-reversed input."""
    x = as_tensor(input)
    v, i = _cummax(T_._flip(x), dim, "cummin")
    return Cummin(T_._flip(v), i)


def logcumsumexp(input: Any, dim: int) -> Tensor:  # noqa: A002
    """``torch.logcumsumexp``: ``log(cumsum(exp(x)))`` along ``dim``, each step
    ``log(exp(acc) + exp(x))`` in log space (the ``logcumsumexp`` scan primitive)."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        x = x.to(dt.float32)
    return _scan("logcumsumexp", x, dim)


# -- products, logical reductions, counts -----------------------------------------------
@amp.float32_op
def prod(input: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """``torch.prod``: all elements, or along one ``dim``; integers and bools give int64.
    The first element of a reversed running product, so the gradient is PyTorch's (exact
    with zeros)."""
    x = _scan_input(input, dtype, "prod")
    if dim is None:
        if keepdim:
            raise TypeError("prod(): keepdim needs a dim")
        flat = x.reshape(-1)
        if sh.same(flat.shape[0], 0):
            return _const(1, (), x.dtype)
        return _scan("cumprod", flat, 0, reverse=True)[0]
    if isinstance(dim, (list, tuple)):
        raise TypeError("prod(): dim must be an int (one dimension), as in torch.prod")
    if x.ndim == 0:
        sh.norm_axis(dim, 0, "prod")
        return x
    ax = sh.norm_axis(dim, x.ndim, "prod")
    if sh.same(x.shape[ax], 0):
        shape = [1 if i == ax else d for i, d in enumerate(x.shape)]
        return _drop(_const(1, shape, x.dtype), (ax,), keepdim)
    scanned = _scan("cumprod", x, ax, reverse=True)
    starts = [0] * x.ndim
    stops = list(x.shape)
    stops[ax] = 1
    first = T_.slice_dims(scanned, starts, stops)
    return _drop(first, (ax,), keepdim)


def _count(mask: Tensor, dim: Any, keepdim: bool, op: str) -> Tensor:
    """The count of true elements over ``dim``, as int64."""
    axes = _axes(mask, dim, op)
    m = mask.to(dt.int64)
    if not axes:
        return m
    return _drop(_wrap(builder().op("sum", (m.node,), axes=axes)), axes, keepdim)


def any(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A001, A002
    """``torch.any``: True where some element over ``dim`` is nonzero (NaN counts)."""
    x = as_tensor(input)
    c = _count(x != 0, dim, keepdim, "any")
    return c > 0


def all(input: Any, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A001, A002
    """``torch.all``: True where every element over ``dim`` is nonzero (empty: True)."""
    x = as_tensor(input)
    c = _count(x == 0, dim, keepdim, "all")
    return c == 0


def count_nonzero(input: Any, dim: Any = None) -> Tensor:  # noqa: A002
    """``torch.count_nonzero``: int64 count of nonzero elements over ``dim``."""
    x = as_tensor(input)
    return _count(x != 0, dim, False, "count_nonzero")


# -- min / max --------------------------------------------------------------------------
def aminmax(input: Any, *, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A002
    """``torch.aminmax``: (min, max) over all elements or one ``dim``."""
    x = as_tensor(input)
    if dim is not None and not isinstance(dim, int):
        raise TypeError("aminmax(): dim must be an int")
    return Aminmax(T_.amin(x, dim, keepdim), T_.amax(x, dim, keepdim))


# -- norms ------------------------------------------------------------------------------
def _root(s: Tensor, p: float) -> Tensor:
    """``s ** (1/p)`` with a zero gradient where ``s == 0`` (PyTorch masks the norm's
    gradient at a zero norm: the 2-norm's subgradient 0)."""
    zero = s == 0
    safe = T_.where(zero, 1.0, s)
    r = safe.sqrt() if p == 2 else safe ** (1.0 / p)
    return T_.where(zero, 0.0, r)


def vector_norm(x: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                dtype: Any = None) -> Tensor:
    """``torch.linalg.vector_norm``: ord 2, 1, inf, -inf, 0 or any other real p over ``dim``
    (all elements by default); gradients as PyTorch's ``norm_backward``."""
    x = as_tensor(x)
    if dtype is not None:
        x = x.to(dt.as_dtype(dtype))
    if not x.dtype.is_float:
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as "
                           f"input. Got {T_._TORCH_NAME.get(x.dtype.name, x.dtype.name)}")
    if isinstance(ord, str) or isinstance(ord, bool):
        raise NotImplementedError(f"vector_norm: ord={ord!r} is not supported (a number)")
    p = float(ord)
    axes = _axes(x, dim, "linalg.vector_norm")
    a = x.abs()

    def total(t: Tensor) -> Tensor:
        return _wrap(builder().op("sum", (t.node,), axes=axes)) if axes else t

    if p == math.inf:
        out = T_.amax(a, axes, keepdim=True) if axes else a
    elif p == -math.inf:
        out = T_.amin(a, axes, keepdim=True) if axes else a
    elif p == 0:
        # a count: zero gradient, but connected to x as in PyTorch (a where's other branch)
        cnt = total((x != 0).to(x.dtype))
        out = T_.where(_const(True, cnt.shape, dt.bool_), cnt, total(x))
    elif p == 1:
        out = total(a)
    elif p == 2:
        out = _root(total(x * x), 2)
    else:
        if p > 0:  # zero entries: 0 ** p with a zero gradient (PyTorch's, for any p > 0)
            zero = a == 0
            a = T_.where(zero, 0.0, T_.where(zero, 1.0, a) ** p)
        else:
            a = a ** p
        out = _root(total(a), p)
    return _drop(out, axes, keepdim)


def norm(input: Any, p: Any = "fro", dim: Any = None, keepdim: bool = False,  # noqa: A002
         dtype: Any = None) -> Tensor:
    """``torch.norm``: the vector norm of order ``p`` over ``dim``; ``"fro"`` is the 2-norm.
    ``"nuc"`` (a matrix norm: singular values) is not supported."""
    if p == "fro":
        p = 2
    elif isinstance(p, str):
        raise NotImplementedError(f"norm: p={p!r} is not supported (it needs singular "
                                  "values); use a number or 'fro'")
    if p is None:
        p = 2
    return vector_norm(input, p, dim, keepdim, dtype=dtype)


def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py)."""
    T.var = var
    T.std = std
    T.prod = prod
    T.any = any
    T.all = all
    T.count_nonzero = count_nonzero
    T.norm = norm
    T.cumsum = cumsum
    T.cumprod = cumprod
    T.cummax = cummax
    T.cummin = cummin
    T.logcumsumexp = logcumsumexp
    T.aminmax = aminmax

    def cumsum_(self: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
        return self._assign(cumsum(self, dim, dtype=dtype).to(self.dtype))

    def cumprod_(self: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
        return self._assign(cumprod(self, dim, dtype=dtype).to(self.dtype))

    T.cumsum_ = cumsum_
    T.cumprod_ = cumprod_


__all__ = ["var", "std", "var_mean", "std_mean", "prod", "any", "all", "count_nonzero",
           "aminmax", "vector_norm", "norm", "cumsum", "cumprod", "cummax", "cummin",
           "logcumsumexp"]
