"""Random fills of tensors (``Tensor.uniform_``, ``normal_``, ``bernoulli_``, ``exponential_``,
``geometric_``, ``log_normal_``, ``cauchy_``, ``random_``), ``gc.bernoulli`` and
``gc.multinomial``, with PyTorch's CPU algorithms and stream.

Eagerly each draws from the global generator (or a ``gc.Generator``) exactly what ATen's CPU
kernel draws, element by element, so after the same ``manual_seed`` the values are
PyTorch's bit for bit. Inside a compiled step a fill is an input the step draws anew on every
call (``graphc.random.Draw``, ``trace.random_input``), in the order eager execution draws:
drawn at trace time it would be a constant of the compiled code, repeating the first call's
numbers forever. The numbers the fill is given (bounds, rates) are part of the trace, as every
number in the step's code is.

A fill of a view that is not row-major (``x.t().normal_()``, ``x[:, ::2].uniform_()``) draws
its values in the order ATen's ``TensorIterator`` visits the view's memory, which is not the
view's logical order (``_iteration_order``), and ``normal_`` then takes one double
Box-Muller sample per element instead of the 16-at-a-time fill (``_normal_each``); the values
land in the view's logical positions. A compiled step draws in the order the eager tensor's
strides give at trace time (``_InOrder`` around the step's ``Draw`` function).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import _context
from . import random as _random
from ._tensor import Tensor, _check_no_overlap
from .ir import dtypes as dt

_rs = _random.checked  # the generator argument, checked (None: the global stream)
_TORCH_NAME = dt.TORCH_NAMES


def _traced(self: Tensor) -> bool:
    return _context.current() is not None or self._trace is not None


def _fill(self: Tensor, name: str, fn: Any, args: tuple, generator: Any = None,
          draw_dtype: Any = None,
          layout: tuple[tuple[int, ...] | None, bool] | None = None) -> Tensor:
    """Write ``fn(shape, *args, dtype=, [rs=])``'s values into ``self`` as an in-place op:
    drawn now, or, traced, an input the step draws on every call; in ATen's element order
    for ``self``'s memory (``layout``: ``_layout(self)``, when the caller needed it first)."""
    _rs(generator)  # a bad generator raises before anything is drawn
    order, _ = _layout(self) if layout is None else layout
    d = draw_dtype if draw_dtype is not None else self.dtype.np
    return self._assign(_draw(name, fn, args, tuple(self.shape), d, generator,
                              _traced(self), order=order))


# -- the order in which ATen's CPU kernels visit the elements of the tensor they fill ----------
def stride_sorted(shape: tuple[int, ...], strides: tuple[int, ...], dims: list[int]
                  ) -> list[int]:
    """``dims`` innermost first, as ``TensorIterator::reorder_dimensions`` sorts them (and
    ``infer_dense_strides`` with it): from the reversed dims, an insertion sort by
    ``should_swap(inner, outer)``: 1 when the inner dim's stride is larger (or equal, with a
    larger size), -1 when smaller, 0 ("ambiguous": keep scanning outwards without moving)
    when a stride is 0 or the strides and sizes tie."""

    def should_swap(d0: int, d1: int) -> int:
        s0, s1 = strides[d0], strides[d1]
        if s0 == 0 or s1 == 0:
            return 0
        if s0 != s1:
            return -1 if s0 < s1 else 1
        return 1 if shape[d0] > shape[d1] else 0

    perm = dims[::-1]
    for i in range(1, len(perm)):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return perm


def _iteration_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """The dims of a tensor of ``shape`` and element ``strides``, outermost loop first, in
    the order ATen's ``TensorIterator`` visits them when the tensor is its only operand
    (every fill: ``TensorIterator::borrowing_nullary_op``, ``cpu_serial_kernel``).

    ``reorder_dimensions`` (aten/src/ATen/TensorIterator.cpp) insertion-sorts the dims so
    that strides grow outwards (``stride_sorted``). ``fast_set_up`` (contiguous, channels-last
    or any non-overlapping dense layout: memory order from the data pointer) and
    ``coalesce_dimensions`` visit the elements in that same order. Size-1 dims do not change
    which element comes when, and their strides are whatever the op that made the view chose
    (PyTorch's and numpy's differ), so they are left out before sorting; the remaining dims
    of any view graphc makes have distinct non-zero strides, and the result is then simply
    "largest stride outermost" (checked against PyTorch's fills of ``as_strided`` views,
    overlapping ones with tied and zero strides included). PyTorch has no negative strides,
    so there is no order to match: such a tensor raises."""
    if any(st < 0 for st, n in zip(strides, shape) if n > 1):
        raise NotImplementedError(
            f"a random fill of a tensor with negative strides {tuple(strides)}: PyTorch has "
            "no such tensors, so there is no element order to reproduce; fill a copy "
            "(.contiguous()) and write it back")
    dims = [d for d, n in enumerate(shape) if n > 1]
    if len(dims) <= 1:
        return tuple(range(len(shape)))
    perm = stride_sorted(shape, strides, dims)
    ones = [d for d, n in enumerate(shape) if n <= 1]
    return tuple(ones + perm[::-1])  # size-1 (and 0-size) dims outermost: one pass each


def _layout(self: Tensor) -> tuple[tuple[int, ...] | None, bool]:
    """(the order ATen's kernels fill ``self``'s elements in, None for the logical
    (row-major) order; whether ``self`` is contiguous, which picks ``normal_``'s algorithm).

    Eager tensors (and tensors made outside a compiled step and filled inside it, whose
    eager value is a strided array the step knows while tracing) have numpy strides; a
    tensor made inside a step has none (the IR is row-major; an in-place op on a view made
    there raises in ``trace.assign``). An expanded tensor raises PyTorch's overlap error
    here, before anything is drawn from the stream, as ATen's ``TensorIterator`` does."""
    return layout_dependent(self, _array_layout)


def _array_layout(a: np.ndarray | None) -> tuple[tuple[int, ...] | None, bool]:
    if not isinstance(a, np.ndarray) or a.flags.c_contiguous:  # numpy's flag, as ATen's
        return None, True  # ``is_contiguous``, ignores the strides of size-1 dims
    _check_no_overlap(a)
    order = _iteration_order(a.shape, tuple(s // a.itemsize for s in a.strides))
    return (None if order == tuple(range(a.ndim)) else order), False


def layout_dependent(t: Tensor, derive: Callable[[np.ndarray | None], Any]) -> Any:
    """``derive`` of ``t``'s eager array (None for a tensor made inside a compiled step).

    Inside a compiled step the result is part of the trace (a fill's element order, a
    ``*_like`` result's strides), but the array is the one the tensor holds at each call:
    ``t.data``, a parameter or a ``.grad`` may be given another array with another layout
    between calls. So the step is guarded on ``derive`` of the array read anew at every
    call, and re-traced when it differs, instead of drawing in the first call's order."""
    reader = _eager_reader(t)
    value = derive(None if reader is None else reader())
    ctx = _context.current()
    if ctx is not None and reader is not None:
        # ``obj``: the same array has the same layout (the tensor API never reshapes an
        # array in place), so the call wrapper derives it only for a new array (an Adam
        # step's state fills guard two per parameter: ~0.5 us each, every call)
        ctx.guard(lambda: derive(reader()), value,
                  "the memory layout of a tensor the step fills in place",
                  obj=(reader, derive))
    return value


def _eager_reader(self: Tensor) -> Callable[[], np.ndarray | None] | None:
    """A function reading the eager array a fill of ``self`` writes when the code runs
    eagerly: ``self``'s own, or, for ``t.data`` and ``p.grad`` taken inside a compiled step
    (a traced stand-in whose in-place updates the step writes back), ``t``'s and
    ``p.grad``'s; None for a tensor made inside the step."""
    t: Any = self
    for _ in range(8):  # ``x.data.data``: an alias of an alias
        tr = t._trace
        if tr is None:
            return lambda t=t: getattr(t._node, "_value", None)
        alias = getattr(tr, "data_aliases", {}).get(id(t))
        if alias is not None:
            t = alias[1]
            continue
        grad = getattr(tr, "grad_alias", {}).get(id(t))
        if grad is None or grad[1]._grad is None:
            return None
        p = grad[1]
        return lambda: None if p._grad is None else getattr(p._grad._node, "_value", None)
    return None


class _InOrder:
    """``fn`` (``fn(shape, *args, dtype=, [rs=])``) with its values drawn in the element
    order ``order`` (dims, outermost loop first) and returned in logical positions.

    The draw functions produce a stream of values for a row-major array; the ones of a
    transposed or sliced view must come from that stream in ATen's loop order instead, so
    ``fn`` fills the array of the loop's shape and the result is transposed back. A class,
    not a closure, so a compiled step's ``Draw`` holds a plain object with a readable repr."""

    __slots__ = ("fn", "order")

    def __init__(self, fn: Any, order: tuple[int, ...]) -> None:
        self.fn, self.order = fn, tuple(order)

    def __call__(self, shape: tuple[int, ...], *args: Any, dtype: Any,
                 rs: Any = None) -> np.ndarray:
        loop = tuple(int(shape[d]) for d in self.order)
        kw = {} if rs is None else {"rs": rs}
        v = np.asarray(self.fn(loop, *args, dtype=dtype, **kw)).reshape(loop)
        return np.ascontiguousarray(np.transpose(v, np.argsort(self.order)))

    def __repr__(self) -> str:
        return f"_InOrder({getattr(self.fn, '__name__', self.fn)}, {self.order})"


def _normal_each(shape: tuple[int, ...], mean: float, std: float, dtype: Any = np.float32,
                 rs: Any = None) -> np.ndarray:
    """``normal_`` of a non-contiguous tensor: ATen's ``normal_kernel`` takes the 16-at-a-time
    ``normal_fill`` only for contiguous tensors of 16 or more elements; any other tensor gets
    one ``at::normal_distribution<double>`` draw per element (with the generator's cached
    second Box-Muller sample), cast to its dtype, whatever its size or dtype."""
    n = int(np.prod(shape, dtype=np.int64))
    return _random._normal_doubles(n, mean, std, rs).astype(dtype).reshape(shape)


def _float_only(self: Tensor, kernel: str) -> None:
    """PyTorch's error for a fill of a non-float tensor (``kernel``: the name its message
    gives; a continuous distribution's name for the ones that say so instead)."""
    if self.dtype.is_float:
        return
    name = _TORCH_NAME.get(self.dtype.name, self.dtype.name)
    if kernel in ("Exponential", "Cauchy"):
        raise RuntimeError(f"{kernel} distribution is a continuous probability distribution. "
                           f"dtype must be a floating point but you specified {name}")
    raise NotImplementedError(f"\"{kernel}\" not implemented for '{name}'")


def _num(v: Any) -> str:
    """A double as ATen's messages print it (C++ stream defaults: ``3``, ``2.5``, ``1e-07``)."""
    return f"{float(v):g}"


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Tensor:
    """``torch.Tensor.uniform_``: values in ``[a, b)``."""
    _float_only(self, "check_uniform_bounds")
    if not a <= b:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found "
                           f"from={_num(a)} > to={_num(b)}")
    return _fill(self, "uniform", _random.uniform, (float(a), float(b)), generator,
                 np.float64 if self.dtype is dt.float64 else np.float32)


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *,
            generator: Any = None) -> Tensor:
    """``torch.Tensor.normal_``: ATen's Box-Muller fill (16 at a time for a contiguous tensor
    of 16 elements or more, one double sample per element otherwise: ``_normal_each``)."""
    _float_only(self, "normal_kernel_cpu")
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_num(std)}")
    layout = _layout(self)
    return _fill(self, "normal", _random.normal if layout[1] else _normal_each,
                 (float(mean), float(std)), generator,
                 np.float64 if self.dtype is dt.float64 else np.float32, layout)


def exponential_(self: Tensor, lambd: float = 1.0, *, generator: Any = None) -> Tensor:
    """``torch.Tensor.exponential_``: ``-log1p(-u) / lambd`` from double uniforms."""
    _float_only(self, "Exponential")
    if not lambd > 0.0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return _fill(self, "exponential", _random.exponential, (float(lambd),), generator)


def geometric_(self: Tensor, p: float, *, generator: Any = None) -> Tensor:
    """``torch.Tensor.geometric_``: the number of Bernoulli(p) trials to the first success."""
    if self.dtype is dt.bool_:
        raise RuntimeError("\"geometric_cpu\" not implemented for 'Bool'")
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    return _fill(self, "geometric", _random.geometric, (float(p),), generator)


def log_normal_(self: Tensor, mean: float = 1.0, std: float = 2.0, *,
                generator: Any = None) -> Tensor:
    """``torch.Tensor.log_normal_``: ``exp`` of normal draws."""
    _float_only(self, "log_normal_cpu")
    if not std > 0.0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_num(std)}")
    return _fill(self, "log_normal", _random.log_normal, (float(mean), float(std)),
                 generator)


def cauchy_(self: Tensor, median: float = 0.0, sigma: float = 1.0, *,
            generator: Any = None) -> Tensor:
    """``torch.Tensor.cauchy_``: ``median + sigma tan(pi (u - 1/2))``."""
    _float_only(self, "Cauchy")
    if not sigma > 0.0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    return _fill(self, "cauchy", _random.cauchy, (float(median), float(sigma)), generator)


def _dtype_top(d: dt.DType) -> int:
    """The largest value ``random_`` draws for dtype ``d`` without bounds: ``2**digits``
    for floats (every integer up to it is exact), the type's maximum for integers."""
    if d.is_float:
        return 1 << int(np.finfo(d.np).nmant + 1)
    if d is dt.bool_:
        return 1
    return int(np.iinfo(d.np).max)


def _ints(shape: tuple, low: int, span: int, dtype: Any, rs: Any = None) -> np.ndarray:
    return _random.integers(shape, low, low + span, rs)


def random_(self: Tensor, *args: Any, generator: Any = None, **kw: Any) -> Tensor:
    """``torch.Tensor.random_([from=0, ]to=None)``: integers in ``[from, to)``; without
    ``to``, up to the dtype's largest exact integer (``2**24`` for float32), inclusive."""
    names = ("from", "to")
    if len(args) > 2:
        raise TypeError(f"random_() takes at most 2 positional arguments ({len(args)} given)")
    one = len(args) == 1 and "to" not in kw  # random_(to); random_(from, to=...)
    vals = dict(zip(("to",) if one else names, args))
    for k, v in kw.items():
        if k not in names or k in vals:
            raise TypeError(f"random_() got an unexpected keyword argument '{k}'")
        vals[k] = v
    low = int(vals.get("from", 0))
    to = vals.get("to")
    if to is None:
        top = _dtype_top(self.dtype)
        if low > top:
            raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than or "
                               f"equal to 'to_inc' casted to dtype, but got from={low} > "
                               f"to_inc={top}")
        span = top - low + 1
    else:
        if low >= int(to):
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                               f"from={low} >= to={int(to)}")
        span = int(to) - low
        if self.dtype.is_float and (low < -_dtype_top(self.dtype)
                                    or int(to) - 1 > _dtype_top(self.dtype)):
            raise NotImplementedError(
                f"random_: [from, to) = [{low}, {int(to)}) outside the integers "
                f"{self.dtype.name} holds exactly ([-{_dtype_top(self.dtype)}, "
                f"{_dtype_top(self.dtype)}]; PyTorch warns and draws otherwise)")
    return _fill(self, "integers", _ints, (low, span), generator)


def _p_dtype(p: Tensor) -> Any:
    if not p.dtype.is_float:
        raise RuntimeError(f"\"bernoulli_tensor_cpu_p_\" not implemented for "
                           f"'{_TORCH_NAME.get(p.dtype.name, p.dtype.name)}'")
    return np.float64 if p.dtype is dt.float64 else np.float32


def _draw(name: str, fn: Any, args: tuple, shape: tuple, d: Any, generator: Any,
          traced: bool, order: tuple[int, ...] | None = None) -> Tensor:
    """A new tensor of ``fn``'s values: drawn now, or (``traced``) on every call. ``order``:
    the dims, outermost first, in which the values are drawn (``_layout``; None: row-major),
    the same eagerly and in a compiled step."""
    if order is not None:
        fn = _InOrder(fn, order)
    if traced:
        draw = _random.Draw(name, fn, args, np.dtype(d), generator)
        return Tensor._wrap(_context.current().random_input(draw, shape, dt.from_numpy(
            np.dtype(d))))
    rs = _rs(generator)
    return Tensor._from_array(np.asarray(fn(shape, *args, dtype=np.dtype(d),
                                            **({} if rs is None else {"rs": rs}))))


def _bernoulli(shape: tuple, d: dt.DType, p: Any, generator: Any, traced: bool,
               like: Tensor | None = None) -> Tensor:
    """Values of ``bernoulli_(p)`` on a tensor of ``shape`` and dtype ``d``: ``u < p`` with
    ``u`` uniform in ``[0, 1)``, double for a number or a float64 ``p``, float otherwise
    (ATen's portable kernels; PyTorch builds with MKL draw a number ``p`` from MKL's own
    stream on Intel CPUs, so there only the distribution is PyTorch's). ``like``: the
    tensor filled in place, whose element order the draws follow (``_layout``, read after
    ``p`` is checked, as ATen checks it before building its iterator); ``p``'s strides only
    break ties between dims of equal stride in it, which graphc's views never have."""
    if isinstance(p, Tensor):
        ud = _p_dtype(p)
    else:
        p = float(p)
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
    order = None if like is None else _layout(like)[0]
    if not isinstance(p, Tensor):
        return _draw("bernoulli", _random.bernoulli, (p,), shape, d.np, generator, traced,
                     order=order)
    u = _draw("uniform", _random.uniform, (0.0, 1.0), shape, ud, generator,
              traced or _traced(p), order=order)
    return (u < p.detach()).to(d)


def bernoulli_(self: Tensor, p: Any = 0.5, *, generator: Any = None) -> Tensor:
    """``torch.Tensor.bernoulli_(p)``: 1 with probability ``p`` (a number, or a tensor
    broadcast to ``self``), else 0 (see ``_bernoulli``)."""
    _rs(generator)
    return self._assign(_bernoulli(tuple(self.shape), self.dtype, p, generator,
                                   _traced(self), like=self))


def bernoulli(input: Tensor, p: Any = None, *, generator: Any = None) -> Tensor:  # noqa: A002
    """``torch.bernoulli(input)``: 1 where a uniform draw falls below ``input``'s
    probability; ``torch.bernoulli(input, p)``: probability ``p`` everywhere, shaped like
    ``input``. The result has ``input``'s dtype."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    _rs(generator)
    return _bernoulli(tuple(input.shape), input.dtype, input if p is None else p, generator,
                      _traced(input))


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,  # noqa: A002
                generator: Any = None) -> Tensor:
    """``torch.multinomial``: ``num_samples`` category indices per row of the (1-d or 2-d)
    weights ``input``, with ATen's CPU algorithms: without replacement (or one sample)
    ``argmax``/``topk`` of ``input / q`` with ``q`` exponential draws (the Gumbel trick);
    with replacement a binary search of a double uniform in the normalised cumulative sum,
    one uniform per sample. Eager only: the result's values choose indices, so a compiled
    step would need a sort per call (raises there)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if _traced(input):
        raise NotImplementedError(
            "multinomial inside a compiled step: sample outside the step and pass the "
            "indices in (or use gc.rand and a comparison)")
    if not input.dtype.is_float:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, "
                           f"got: {_TORCH_NAME.get(input.dtype.name, input.dtype.name)}")
    if input.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    n = int(num_samples)
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    w = np.asarray(input.detach().numpy())
    rows = w.reshape(-1, w.shape[-1])
    k = rows.shape[1]
    if not replacement and n > k:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    rs = _rs(generator)
    if not replacement or n == 1:
        if not (np.all(rows < np.inf) and np.all(rows >= 0)):
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element "
                               "< 0")
        if np.any(rows.sum(axis=1) == 0):
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        q = _random.exponential(rows.shape, 1.0, rows.dtype, rs)
        with np.errstate(divide="ignore"):
            s = rows / q
        if n == 1:
            out = np.argmax(s, axis=1)[:, None]
        else:
            out = np.argsort(-s, axis=1, kind="stable")[:, :n]
    else:
        out = np.empty((rows.shape[0], n), np.int64)
        for i, row in enumerate(rows):
            if np.any(row < 0):
                raise RuntimeError("invalid multinomial distribution (encountering "
                                   "probability entry < 0)")
            if not np.all(np.isfinite(row)):
                raise RuntimeError("invalid multinomial distribution (encountering "
                                   "probability entry = infinity or NaN)")
            cum = np.cumsum(row)  # sequential, in the input's dtype, as ATen's loop
            if not cum[-1] > 0:
                raise RuntimeError("invalid multinomial distribution (sum of probabilities "
                                   "<= 0)")
            cum = cum / cum[-1]
            cum[-1] = 1
            u = _random.uniform((n,), 0.0, 1.0, np.float64, rs)
            out[i] = np.searchsorted(cum.astype(np.float64), u, side="left")
    return Tensor._from_array(out.reshape(w.shape[:-1] + (n,)).astype(np.int64))


METHODS = {"uniform_": uniform_, "normal_": normal_, "exponential_": exponential_,
           "geometric_": geometric_, "log_normal_": log_normal_, "cauchy_": cauchy_,
           "random_": random_, "bernoulli_": bernoulli_, "multinomial": multinomial,
           "bernoulli": lambda self, p=None, *, generator=None: bernoulli(
               self, p, generator=generator)}

__all__ = ["bernoulli", "multinomial"]
