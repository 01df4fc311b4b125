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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _context
from . import random as _random
from ._tensor import Tensor
from .ir import dtypes as dt

_rs = _random.checked  # the generator argument, checked (None: the global stream)
_TORCH_NAME = dt.TORCH_NAMES


def _traced(self: Tensor) -> bool:
    return _context.current() is not None or self._trace is not None


def _fill(self: Tensor, name: str, fn: Any, args: tuple, generator: Any = None,
          draw_dtype: Any = None) -> Tensor:
    """Write ``fn(shape, *args, dtype=, [rs=])``'s values into ``self`` as an in-place op:
    drawn now, or, traced, an input the step draws on every call."""
    _rs(generator)  # a bad generator raises before anything is drawn
    d = draw_dtype if draw_dtype is not None else self.dtype.np
    return self._assign(_draw(name, fn, args, tuple(self.shape), d, generator,
                              _traced(self)))


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
    """``torch.Tensor.normal_``: ATen's Box-Muller fill (16 at a time from 16 elements on,
    one double sample per element below)."""
    _float_only(self, "normal_kernel_cpu")
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_num(std)}")
    return _fill(self, "normal", _random.normal, (float(mean), float(std)), generator,
                 np.float64 if self.dtype is dt.float64 else np.float32)


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
          traced: bool) -> Tensor:
    """A new tensor of ``fn``'s values: drawn now, or (``traced``) on every call."""
    if traced:
        draw = _random.Draw(name, fn, args, np.dtype(d), generator)
        return Tensor._wrap(_context.current().random_input(draw, shape, dt.from_numpy(
            np.dtype(d))))
    rs = _rs(generator)
    return Tensor._from_array(np.asarray(fn(shape, *args, dtype=np.dtype(d),
                                            **({} if rs is None else {"rs": rs}))))


def _bernoulli(shape: tuple, d: dt.DType, p: Any, generator: Any, traced: bool) -> Tensor:
    """Values of ``bernoulli_(p)`` on a tensor of ``shape`` and dtype ``d``: ``u < p`` with
    ``u`` uniform in ``[0, 1)``, double for a number or a float64 ``p``, float otherwise
    (ATen's portable kernels; PyTorch builds with MKL draw a number ``p`` from MKL's own
    stream on Intel CPUs, so there only the distribution is PyTorch's)."""
    if not isinstance(p, Tensor):
        p = float(p)
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p}")
        return _draw("bernoulli", _random.bernoulli, (p,), shape, d.np, generator, traced)
    ud = _p_dtype(p)
    u = _draw("uniform", _random.uniform, (0.0, 1.0), shape, ud, generator,
              traced or _traced(p))
    return (u < p.detach()).to(d)


def bernoulli_(self: Tensor, p: Any = 0.5, *, generator: Any = None) -> Tensor:
    """``torch.Tensor.bernoulli_(p)``: 1 with probability ``p`` (a number, or a tensor
    broadcast to ``self``), else 0 (see ``_bernoulli``)."""
    _rs(generator)
    return self._assign(_bernoulli(tuple(self.shape), self.dtype, p, generator,
                                   _traced(self)))


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
