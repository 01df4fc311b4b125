"""The commonly used ``torch.*`` functions and ``Tensor`` methods the other op modules do not
cover: constants, dtype queries and promotion, the global settings (default dtype, threads,
the random generator's state), ``normal``, the ``tensor_split`` family, ``unravel_index``,
``combinations``, ``isin``, ``dist``, ``gcd``/``lcm``, ``frexp``/``ldexp``/``nextafter``,
``gradient``, ``trace``, the window functions, the in-place shape changes (``unsqueeze_`` &
co.) and a few small methods (``stride``, ``masked_scatter``, ``index_reduce``, ...).

Why a module of their own: like ``composite_ops`` none of them needs an IR primitive, a
derivative rule or a kernel. Each is written with graphc's front-end ops as PyTorch's ATen
writes it (``ldexp`` is ``self * 2 ** other``, ``index_reduce`` a ``scatter_reduce``, the
windows ATen's arithmetic step by step in the window's dtype), so it runs eagerly and inside
``gc.compile``, differentiates through the ops it uses, and a port from PyTorch is an import
change. What cannot be expressed in the IR is said where it is met: functions that return a
Python value computed from data (``allclose``, ``equal``), or read or set process state
(``get_rng_state``, ``seed``), raise ``NotImplementedError`` inside a compiled step, and so do
those whose output shape depends on a symbolic (batch) size.

The argument checks are PyTorch's, in its order, with its exception types and messages
(``graphc`` in place of ``torch`` where a message names a type).
"""

from __future__ import annotations

import builtins
import itertools
import math
import os
from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _context
from . import index_ops as I_
from . import random as _random
from . import shape_ops as S_
from . import special_ops as _special
from . import tensor_ops as T_
from ._tensor import LEAF_INPLACE, Tensor, builder, dtype_of, leaf_node, result_castable
from .autograd import enable_grad, is_grad_enabled, no_grad
from .composite_ops import _broadcast, _expand_to, _int_arg, _narrow, _result_type, _tensor
from .composite_ops import _torch_name as _tname
from .ir import Node
from .ir import dtypes as dt
from .ir import shapes as sh
from .ir.elementwise import SURFACE
from .reduce_ops import cumsum, vector_norm

_wrap = Tensor._wrap

# -- constants (``torch.pi`` & co.: plain Python numbers, as in PyTorch) -----------------------
pi = math.pi
e = math.e
inf = math.inf
nan = math.nan
newaxis = None


# -- helpers ----------------------------------------------------------------------------------
def _traced(*ts: Any) -> bool:
    return _context.current() is not None or builtins.any(
        isinstance(t, Tensor) and t._trace is not None for t in ts)


def _const(value: Any, shape: Sequence[Any], dtype: dt.DType) -> Tensor:
    return _wrap(builder().const(value, tuple(shape), dtype))


def _is_number(v: Any) -> bool:
    return isinstance(v, (bool, int, float, np.number, np.bool_)) and not isinstance(v, complex)


def _eager_only(what: str, why: str, *ts: Any) -> None:
    if _traced(*ts):
        raise NotImplementedError(f"{what} inside a compiled step: {why}")


def _python_bool(what: str, *ts: Any) -> None:
    _eager_only(f"graphc.{what}", "it returns a Python bool read from the data, which exists "
                "only when the step runs; keep the test in tensor ops (for example "
                "gc.isclose(a, b).all() or (a == b).all()) and branch outside the step", *ts)


def _zero_grad_from(value: Tensor, *sources: Any) -> Tensor:
    """``value`` made to depend on each source tensor that requires grad, with a zero
    gradient: a ``where`` that never selects the source. PyTorch's ``normal`` (in ``mean``
    and ``std``) and ``nextafter`` (in ``other``) have zero gradients but results that require
    grad when those arguments do, which a detached computation alone would not reproduce."""
    if not is_grad_enabled():
        return value
    for s in sources:
        if isinstance(s, Tensor) and s.requires_grad:
            never = _const(False, value.shape, dt.bool_)
            value = T_.where(never, _expand_to(s.to(value.dtype), value.shape), value)
    return value


# -- predicates, dtypes and promotion ---------------------------------------------------------
def is_tensor(obj: Any) -> bool:
    """``torch.is_tensor``: whether ``obj`` is a graphc ``Tensor``."""
    return isinstance(obj, Tensor)


def is_signed(input: Tensor) -> bool:  # noqa: A002
    """``torch.is_signed``: whether the dtype holds negative values (every graphc dtype but
    bool)."""
    return _tensor(input, "is_signed", "input", 1).is_signed()


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,  # noqa: A002
             equal_nan: bool = False) -> bool:
    """``torch.allclose``: ``isclose(...).all()`` as a Python bool. PyTorch requires one dtype
    (``Float did not match Double``) and broadcastable shapes. Eager only (a Python value)."""
    a = _tensor(input, "allclose", "input", 1)
    b = _tensor(other, "allclose", "other", 2)
    _python_bool("allclose", a, b)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{_tname(a.dtype)} did not match {_tname(b.dtype)}")
    _broadcast(a.shape, b.shape)
    return bool(a.isclose(b, rtol=rtol, atol=atol, equal_nan=equal_nan).all())


def equal(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    """``torch.equal``: same shape and the same values (compared after promotion, so NaN is
    never equal). Eager only (a Python value)."""
    a = _tensor(input, "equal", "input", 1)
    b = _tensor(other, "equal", "other", 2)
    _python_bool("equal", a, b)
    if tuple(a.shape) != tuple(b.shape):
        return False
    return bool((a == b).all())


def _number_dtype(v: Any) -> dt.DType:
    """The dtype PyTorch gives a Python number on its own (a wrapped number)."""
    v = v.item() if isinstance(v, (np.generic,)) else v
    if isinstance(v, bool):
        return dt.bool_
    if isinstance(v, int):
        return dt.int64
    return dt.float32


def result_type(tensor: Any, other: Any) -> dt.DType:
    """``torch.result_type``: the dtype an arithmetic op on the two operands gives. A
    dimensioned tensor decides unless a 0-d one (or a Python number) is of a higher category
    (bool < integer < float); a number of the tensor's category never widens it."""
    ok = [isinstance(v, Tensor) or _is_number(v) for v in (tensor, other)]
    if not builtins.all(ok):
        raise TypeError(
            f"result_type() received an invalid combination of arguments - got "
            f"({type(tensor).__name__}, {type(other).__name__}), but expected one of: "
            "(Tensor tensor, Tensor other), (Tensor tensor, Number other), "
            "(Number scalar, Tensor tensor), (Number scalar1, Number scalar2)")
    if isinstance(tensor, Tensor) and isinstance(other, Tensor):
        return _result_type([tensor, other])
    if isinstance(tensor, Tensor) or isinstance(other, Tensor):
        t, v = (tensor, other) if isinstance(tensor, Tensor) else (other, tensor)
        return dt.promote_scalar(t.dtype, v.item() if isinstance(v, np.generic) else v)
    return dt.promote(_number_dtype(tensor), _number_dtype(other))


def _dtype_arg(d: Any, fn: str, arg: str, pos: int) -> dt.DType:
    """A dtype argument (a graphc, torch or numpy dtype), or PyTorch's ``TypeError``."""
    if isinstance(d, dt.DType):
        return d
    if isinstance(d, (type, np.dtype)) or type(d).__name__ == "dtype":
        try:
            return dtype_of(d, fn)
        except TypeError:
            pass
    raise TypeError(f"{fn}(): argument '{arg}' (position {pos}) must be torch.dtype, not "
                    f"{type(d).__name__}")


def promote_types(type1: Any, type2: Any) -> dt.DType:
    """``torch.promote_types``: the smallest dtype both convert to (PyTorch's table: bf16 with
    an integer is bf16, with float32 float32)."""
    return dt.promote(_dtype_arg(type1, "promote_types", "type1", 1),
                      _dtype_arg(type2, "promote_types", "type2", 2))


def can_cast(from_: Any, to: Any) -> bool:
    """``torch.can_cast``: PyTorch's casting rule for in-place results (``canCast``): no float
    into an integer or bool, nothing but bool into bool; narrowing within a kind is allowed."""
    a = _dtype_arg(from_, "can_cast", "from_", 1)
    b = _dtype_arg(to, "can_cast", "to", 2)
    if a.is_float and not b.is_float:
        return False
    return not (b is dt.bool_ and a is not dt.bool_)


# -- global settings --------------------------------------------------------------------------
def get_default_dtype() -> dt.DType:
    """``torch.get_default_dtype``: float32, the dtype graphc's factories (``zeros``,
    ``rand``, ``arange`` with float bounds, ...) and Python floats in ``gc.tensor`` use."""
    return dt.float32


def set_default_dtype(d: Any) -> None:
    """``torch.set_default_dtype``: graphc's float default is float32 and is not one
    setting — each factory and the conversion of Python floats choose float32 themselves — so
    only float32 is accepted; float64 (or bfloat16) raises ``NotImplementedError`` rather
    than changing some factories and not others. Other dtypes raise PyTorch's ``TypeError``."""
    try:
        want = _dtype_arg(d, "set_default_dtype", "d", 1)
    except TypeError:
        raise TypeError("invalid dtype object: only floating-point types are supported as the "
                        "default type") from None
    if not want.is_float:
        raise TypeError("only floating-point types are supported as the default type")
    if want is not dt.float32:
        raise NotImplementedError(
            f"set_default_dtype({want!r}): graphc's factories and its conversion of Python "
            "floats always make float32 (there is no single default to change); pass "
            f"dtype={want!r} to the factories or convert with .to({want!r})")


def get_num_threads() -> int:
    """``torch.get_num_threads``: the threads a compiled step runs on (1 or 2; see
    ``set_num_threads``)."""
    from .runtime import pool

    return pool.threads()


def set_num_threads(n: int) -> None:
    """``torch.set_num_threads``: the threads compiled steps run on. graphc's runtime pool
    has at most two (the caller and one worker), so any ``n >= 2`` means two and ``1`` runs
    single-threaded; it sets ``GRAPHC_NUM_THREADS``, which each step reads when it is loaded,
    so it applies to steps compiled or loaded afterwards. Eager ops run on numpy, whose BLAS
    keeps its own thread setting."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise RuntimeError(f"set_num_threads expects an int, but got {type(n).__name__}")
    if n <= 0:
        raise RuntimeError("set_num_threads expects a positive integer")
    os.environ["GRAPHC_NUM_THREADS"] = "1" if n == 1 else "2"


def set_flush_denormal(mode: bool) -> bool:
    """``torch.set_flush_denormal``: flush denormal float32/float64 results to zero and read
    denormal inputs as zero (x86's flush-to-zero and denormals-are-zero bits), for the
    calling thread. That covers its eager ops (numpy runs them there) and every thread of the
    compiled steps it calls: the runtime pool's worker takes the caller's mode with each
    task, so the two halves of a split kernel agree. PyTorch's flag reaches only its calling
    thread, so its multi-threaded kernels flush the caller's share alone; so do the BLAS
    threads of numpy's large eager matmuls here, which a compiled step's flush in full (as
    one thread would). Returns True where the host has the mode (x86-64), else False and
    changes nothing.

    Why: arithmetic on denormals is 10-100x slower on x86 cores, and training whose values
    drift toward zero can slow down many times over (``graphc.runtime.fpmode``)."""
    if type(mode) is not bool:
        t = type(mode)
        name = t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"
        raise RuntimeError(f"flush_denormal expects a bool, but got {name}")
    if _context.current() is not None:
        raise NotImplementedError(
            "set_flush_denormal() inside a compiled step: the trace would run it once and the "
            "compiled step never again. Call it before the step (compiled steps run in the "
            "calling thread's mode at each call), or run this code eagerly")
    from .runtime import fpmode

    return fpmode.set_flush_denormal(mode)


# The global generator's state as an int64 tensor (PyTorch's is a uint8 tensor, a dtype
# graphc does not have): a tag, the seed's 64 bits, MT19937's 624 words and position, numpy's
# cached Gaussian (unused by graphc, kept so nothing is lost) and the cached second sample of
# ``normal_distribution<double>`` (``random._state["next_normal"]``).
_RNG_TAG = 0x67637267  # "gcrg"
_RNG_SIZE = 2 + 624 + 5


def _f64_bits(v: float) -> int:
    return int(np.array(v, np.float64).view(np.int64))


def get_rng_state() -> Tensor:
    """``torch.get_rng_state``: the global generator's state, an int64 tensor (graphc's own
    format) that ``set_rng_state`` restores, so the draws after it repeat exactly. Eager
    only: a compiled step draws when it runs, not when it is traced."""
    _eager_only("graphc.get_rng_state", "the generator's state at trace time is not its state "
                "when the step runs; read it between calls")
    st = _random._state
    _, keys, pos, has_gauss, gauss = st["rs"].get_state()
    nxt = st["next_normal"]
    seed = int(st["seed"]) & ((1 << 64) - 1)
    out = np.empty(_RNG_SIZE, np.int64)
    out[0] = _RNG_TAG
    out[1] = np.array(seed, np.uint64).view(np.int64)
    out[2:626] = np.asarray(keys, np.uint32).astype(np.int64)
    out[626:] = [pos, has_gauss, _f64_bits(gauss), nxt is not None,
                 _f64_bits(0.0 if nxt is None else nxt)]
    return Tensor._from_array(out)


def set_rng_state(new_state: Tensor) -> None:
    """``torch.set_rng_state``: restore a state from ``get_rng_state`` (seed, stream and
    cached normal sample), as PyTorch's errors say for anything else. Eager only."""
    if not isinstance(new_state, Tensor):
        raise TypeError(f"expected a graphc.LongTensor (from graphc.get_rng_state()), but got "
                        f"{type(new_state).__name__}")
    _eager_only("graphc.set_rng_state", "the step would set it once, at trace time; set it "
                "between calls", new_state)
    if new_state.dtype is not dt.int64:
        raise TypeError("RNG state must be a graphc.LongTensor (graphc.get_rng_state() returns "
                        "an int64 tensor)")
    v = new_state.numpy().reshape(-1)
    if v.size != _RNG_SIZE or v[0] != _RNG_TAG:
        raise RuntimeError(f"Expected a graphc RNG state of size {_RNG_SIZE} (from "
                           f"graphc.get_rng_state()) but found the input RNG state size to be "
                           f"{v.size}")
    st = _random._state
    gauss = float(np.array(v[628], np.int64).view(np.float64))
    st["rs"].set_state(("MT19937", v[2:626].astype(np.uint32), int(v[626]), int(v[627]), gauss))
    st["seed"] = int(np.array(v[1], np.int64).view(np.uint64))
    st["next_normal"] = float(np.array(v[630], np.int64).view(np.float64)) if v[629] else None


def seed() -> int:
    """``torch.seed``: seed the global generator from the operating system's entropy and
    return the seed (63 bits, as ``Generator.seed``). Eager only."""
    _eager_only("graphc.seed", "a compiled step draws from the generator when it runs; seed it "
                "between calls")
    new = int(np.random.SeedSequence().entropy) & ((1 << 63) - 1)
    _random.manual_seed(new)
    return new


# -- normal -----------------------------------------------------------------------------------
_NORMAL_OVERLOADS = (
    "(Tensor mean, Tensor std, *, Generator generator = None), "
    "(Tensor mean, float std = 1, *, Generator generator = None), "
    "(float mean, Tensor std, *, Generator generator = None), "
    "(float mean, float std, tuple of ints size, *, Generator generator = None, dtype = None, "
    "device = None, bool requires_grad = False)")


def _normal_fill(shape: Sequence[Any], d: dt.DType, std: float, generator: Any) -> Tensor:
    """``normal_(0, std)`` on a new tensor: graphc's fill (``Tensor.normal_``), PyTorch's
    algorithm and stream, drawn on every call inside a compiled step."""
    if not d.is_float:
        raise NotImplementedError(f"\"normal_kernel_cpu\" not implemented for '{_tname(d)}'")
    return S_.empty(tuple(shape), dtype=d).normal_(0.0, std, generator=generator)


def _check_std_tensor(std: Tensor) -> None:
    if not _traced(std) and std.numel() and bool((std < 0).any()):
        raise RuntimeError("normal expects all elements of std >= 0.0")


def normal(mean: Any, std: Any = 1.0, size: Any = None, *, generator: Any = None,
           out: Any = None, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """``torch.normal`` in its four overloads, computed as ATen does so the values equal
    PyTorch's after the same seed: a tensor ``mean`` and number ``std``: ``normal_(0, std)``
    plus ``mean`` (in ``mean``'s dtype); a number ``mean`` and tensor ``std``: ``normal_(0,
    1) * std + mean`` (in ``std``'s dtype); two tensors: the same on their broadcast shape, in
    ``mean``'s dtype; two numbers and ``size``: ``normal_(mean, std)`` of that size. As in
    PyTorch the result's gradient with respect to ``mean`` and ``std`` is zero. Inside a
    compiled step the draw is made on every call (as ``Tensor.normal_``)."""
    if out is not None:
        raise NotImplementedError("graphc.normal(out=...): assign the result instead")
    if layout is not None or pin_memory:
        raise NotImplementedError("graphc.normal: layout and pin_memory are not supported")
    mt, st = isinstance(mean, Tensor), isinstance(std, Tensor)
    if (not mt and not _is_number(mean)) or (not st and not _is_number(std)) or (
            size is not None and (mt or st)) or (size is None and not mt and not st) or (
            (mt or st) and (dtype is not None or requires_grad or device is not None)):
        got = ", ".join(type(v).__name__ for v in (mean, std, size) if v is not None)
        raise TypeError(f"normal() received an invalid combination of arguments - got ({got}), "
                        f"but expected one of: {_NORMAL_OVERLOADS}")
    if size is not None:
        if device is not None:
            S_._check_device(device, "normal")
        if float(std) < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {float(std):g}")
        d = dt.float32 if dtype is None else dtype_of(dtype, "normal")
        shape = tuple(size) if isinstance(size, (tuple, list)) else (size,)
        if not d.is_float:
            raise NotImplementedError(f"\"normal_kernel_cpu\" not implemented for '{_tname(d)}'")
        t = S_.empty(shape, dtype=d).normal_(float(mean), float(std), generator=generator)
        if requires_grad:
            if _traced():
                raise NotImplementedError("graphc.normal(..., requires_grad=True) inside a "
                                          "compiled step: create the leaf outside the step")
            return Tensor._from_array(np.array(t.numpy()), True)
        return t
    if mt and not st:
        std = float(std)
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
        m = mean.detach()
        value = _normal_fill(m.shape, m.dtype, std, generator) + m
        return _zero_grad_from(value.to(m.dtype), mean)
    if st and not mt:
        s = std.detach()
        _check_std_tensor(s)
        noise = _normal_fill(s.shape, s.dtype, 1.0, generator)
        value = ((noise * s).to(s.dtype) + float(mean)).to(s.dtype)
        return _zero_grad_from(value, std)
    m, s = mean.detach(), std.detach()
    _check_std_tensor(s)
    shape = _broadcast(m.shape, s.shape)
    if not m.dtype.is_float:
        raise NotImplementedError(f"\"normal_kernel_cpu\" not implemented for "
                                  f"'{_tname(m.dtype)}'")
    noise = _normal_fill(shape, m.dtype, 1.0, generator)
    value = ((noise * s).to(m.dtype) + m).to(m.dtype)  # ATen: output.mul_(std).add_(mean)
    return _zero_grad_from(value, mean, std)


# -- splitting --------------------------------------------------------------------------------
def _pieces(x: Tensor, ax: int, bounds: Sequence[tuple[int, int]]) -> tuple[Tensor, ...]:
    return tuple(_narrow(x, ax, a, b - a) for a, b in bounds)


def tensor_split(input: Tensor, indices_or_sections: Any, dim: int = 0  # noqa: A002
                 ) -> tuple[Tensor, ...]:
    """``torch.tensor_split``: views of ``input`` along ``dim``, either ``sections`` nearly
    equal pieces (the first ``size % sections`` one longer) or cut at ``indices`` (slice
    semantics: clamped, negative from the end, empty when out of order). A tensor argument
    (0-d: sections, 1-D: indices) is read eagerly; the size along ``dim`` must be fixed."""
    x = _tensor(input, "tensor_split", "input", 1)
    if x.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims")
    ax = sh.norm_axis(_int_arg(dim, "tensor_split", "dim", 3), x.ndim, "tensor_split")
    ios = indices_or_sections
    if isinstance(ios, Tensor):
        if ios.dtype is not dt.int64:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to have dtype "
                               f"of long, but got {_tname(ios.dtype)}")
        if ios.ndim > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a "
                               "zero-dimensional or one-dimensional tensor, but got a tensor "
                               f"with {ios.ndim} dims")
        _eager_only("tensor_split with a tensor of indices or sections", "its values decide the "
                    "pieces' shapes; pass Python ints", ios)
        ios = int(ios.item()) if ios.ndim == 0 else [int(v) for v in ios.tolist()]
    size = S_._concrete(x.shape[ax], "tensor_split")
    if isinstance(ios, (int, np.integer)) and not isinstance(ios, (bool, np.bool_)):
        n = int(ios)
        if n <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {n}")
        q, r = divmod(size, n)
        starts = [i * q + builtins.min(i, r) for i in range(n + 1)]
        return _pieces(x, ax, list(zip(starts[:-1], starts[1:])))
    if not isinstance(ios, (list, tuple)):
        raise TypeError(f"tensor_split() received an invalid combination of arguments - got "
                        f"(Tensor, {type(ios).__name__}), but expected one of: (Tensor input, "
                        "tuple of ints indices, int dim = 0), (Tensor input, Tensor "
                        "tensor_indices_or_sections, int dim = 0), (Tensor input, int sections, "
                        "int dim = 0)")

    def clamp(i: int) -> int:
        i = int(i) + size if int(i) < 0 else int(i)
        return builtins.max(0, builtins.min(i, size))

    cuts = [clamp(i) for i in ios]
    bounds, start = [], 0
    for c in cuts + [size]:
        bounds.append((start, builtins.max(start, c)))
        start = c
    return _pieces(x, ax, bounds)


def _split_dir(input: Any, ios: Any, fn: str, need: int) -> tuple[Tensor, ...]:  # noqa: A002
    x = _tensor(input, fn, "input", 1)
    if x.ndim < need:
        raise RuntimeError(f"torch.{fn} requires a tensor with at least {need} dimension, but "
                           f"got a tensor with {x.ndim} dimensions!")
    dim = (1 if x.ndim > 1 else 0) if fn == "hsplit" else {"vsplit": 0, "dsplit": 2}[fn]
    if isinstance(ios, Tensor) or not isinstance(ios, (int, np.integer, list, tuple)):
        raise TypeError(f"{fn}() received an invalid combination of arguments - got (Tensor, "
                        f"{type(ios).__name__}), but expected one of: (Tensor input, int "
                        "sections), (Tensor input, tuple of ints indices)")
    if isinstance(ios, (int, np.integer)):
        size = S_._concrete(x.shape[dim], fn)
        if ios == 0 or size % int(ios) != 0:
            raise RuntimeError(f"torch.{fn} attempted to split along dimension {dim}, but the "
                               f"size of the dimension {size} is not divisible by the "
                               f"split_size {int(ios)}!")
    return tensor_split(x, ios, dim)


def hsplit(input: Tensor, indices_or_sections: Any) -> tuple[Tensor, ...]:  # noqa: A002
    """``torch.hsplit``: ``tensor_split`` along dim 1 (dim 0 of a 1-D tensor); equal sections
    must divide the size."""
    return _split_dir(input, indices_or_sections, "hsplit", 1)


def vsplit(input: Tensor, indices_or_sections: Any) -> tuple[Tensor, ...]:  # noqa: A002
    """``torch.vsplit``: ``tensor_split`` along dim 0 of an at least 2-D tensor."""
    return _split_dir(input, indices_or_sections, "vsplit", 2)


def dsplit(input: Tensor, indices_or_sections: Any) -> tuple[Tensor, ...]:  # noqa: A002
    """``torch.dsplit``: ``tensor_split`` along dim 2 of an at least 3-D tensor."""
    return _split_dir(input, indices_or_sections, "dsplit", 3)


def split_with_sizes(input: Tensor, split_sizes: Any, dim: int = 0  # noqa: A002
                     ) -> tuple[Tensor, ...]:
    """``torch.split_with_sizes``: views of the given non-negative lengths, which must add
    up to the size of ``dim`` (``split`` with a list)."""
    x = _tensor(input, "split_with_sizes", "input", 1)
    if not isinstance(split_sizes, (list, tuple)):
        raise TypeError("split_with_sizes(): argument 'split_sizes' (position 1) must be tuple "
                        f"of ints, not {type(split_sizes).__name__}")
    if x.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    sizes = [_int_arg(s, "split_with_sizes", "split_sizes", 1) for s in split_sizes]
    if builtins.any(s < 0 for s in sizes):
        raise RuntimeError("split_with_sizes expects split_sizes have only non-negative "
                           f"entries, but got split_sizes={sizes}")
    return S_.split(x, sizes, _int_arg(dim, "split_with_sizes", "dim", 2))


# -- indices ----------------------------------------------------------------------------------
def unravel_index(indices: Tensor, shape: Any) -> tuple[Tensor, ...]:
    """``torch.unravel_index``: flat indices as one int64 tensor of coordinates per dim of
    ``shape`` (``(indices // stride) % size``, PyTorch's formula: an index past the end wraps
    around, a negative one counts from the end)."""
    idx = _tensor(indices, "unravel_index", "indices", 1)
    if not idx.dtype.is_int:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {idx.dtype!r}")
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (int(shape),)
    if not isinstance(shape, (list, tuple)) or builtins.any(
            isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer))
            for s in shape):
        raise TypeError(f"expected 'shape' to be int or sequence of ints, but got {shape!r}")
    shape = tuple(int(s) for s in shape)
    if builtins.any(s < 0 for s in shape):
        raise ValueError(f"'shape' cannot have negative values, but got {shape}")
    if not shape:
        return ()
    if 0 in shape and not sh.same(sh.numel(idx.shape), 0):
        raise RuntimeError("ZeroDivisionError")
    i = idx.to(dt.int64)
    out = []
    for k, s in enumerate(shape):
        stride = int(np.prod(shape[k + 1:], dtype=np.int64))
        q = T_.div(i, stride, rounding_mode="floor") if stride != 1 else i
        out.append(q % s if s else q * 0)
    return tuple(out)


def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:  # noqa: A002
    """``torch.combinations``: the length-``r`` combinations of a 1-D tensor's elements, one
    per row, in ``itertools.combinations`` order (with repeats when ``with_replacement``); a
    constant gather, so gradients add up where an element is reused. The length must be
    fixed (the number of rows depends on it)."""
    x = _tensor(input, "combinations", "input", 1)
    if x.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(x.shape)}")
    r = _int_arg(r, "combinations", "r", 2)
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return _const(0, (0,), x.dtype)
    n = S_._concrete(x.shape[0], "combinations")
    pick = (itertools.combinations_with_replacement if with_replacement
            else itertools.combinations)
    table = np.array(list(pick(range(n), r)), np.int64).reshape(-1, r)
    if table.shape[0] == 0:
        return _const(0, (0, r), x.dtype)
    return T_.gather(x, 0, T_.as_tensor(table.reshape(-1))).reshape(table.shape[0], r)


def isin(elements: Any, test_elements: Any, *, assume_unique: bool = False,
         invert: bool = False) -> Tensor:
    """``torch.isin``: whether each element of ``elements`` occurs in ``test_elements``
    (either may be a Python number), compared in their promoted dtype (NaN is never found).
    Every element is compared with every test element: memory is their product's size.
    ``assume_unique`` only allows PyTorch a faster algorithm and changes nothing here."""
    et, tt = isinstance(elements, Tensor), isinstance(test_elements, Tensor)
    if (not et and not tt) or (not et and not _is_number(elements)) or (
            not tt and not _is_number(test_elements)):
        raise TypeError(f"isin() received an invalid combination of arguments - got "
                        f"({type(elements).__name__}, {type(test_elements).__name__}), but "
                        "expected one of: (Tensor elements, Tensor test_elements), (Number "
                        "element, Tensor test_elements), (Tensor elements, Number test_element)")
    for t in (elements, test_elements):
        if isinstance(t, Tensor) and t.dtype is dt.bool_:
            raise RuntimeError("Unsupported input type encountered for isin(): Bool")
    if not tt:
        hit = T_.binary("eq", elements, test_elements)
    elif not et:
        hit = T_.binary("eq", elements, test_elements.reshape(-1)).any()
    else:
        d = _result_type([elements, test_elements])
        hit = (elements.to(d).unsqueeze(-1) == test_elements.to(d).reshape(-1)).any(-1)
    return hit.logical_not() if invert else hit


# -- distances and number theory --------------------------------------------------------------
def dist(input: Tensor, other: Tensor, p: Any = 2) -> Tensor:  # noqa: A002
    """``torch.dist``: the ``p``-norm of ``input - other`` (broadcast), with
    ``vector_norm``'s values and gradients (``p`` 0, inf and -inf included)."""
    a = _tensor(input, "dist", "input", 1)
    b = _tensor(other, "dist", "other", 2)
    if isinstance(p, Tensor):
        _eager_only("dist with a tensor p", "pass p as a Python number", p)
        p = p.item()
    _broadcast(a.shape, b.shape)
    d = _result_type([a, b])
    if not d.is_float:
        raise RuntimeError("norm(): input dtype should be either floating point or complex. "
                           f"Got {_tname(d)} instead.")
    return vector_norm(a.to(d) - b.to(d), float(p))


def _int_pair(fn: str, input: Any, other: Any) -> tuple[Tensor, Tensor]:  # noqa: A002
    a = _tensor(input, fn, "input", 1)
    b = _tensor(other, fn, "other", 2)
    d = _result_type([a, b])
    if not d.is_int:
        raise NotImplementedError(f"\"{fn}_cpu\" not implemented for '{_tname(d)}'")
    shape = _broadcast(a.shape, b.shape)
    return _expand_to(a.to(d), shape), _expand_to(b.to(d), shape)


# Euclid's algorithm needs at most k steps for numbers below the Fibonacci number F(k + 2)
# (Lamé): F(48) > 2**31 and F(94) > 2**63
_GCD_STEPS = {dt.int32: 46, dt.int64: 92}


def _gcd(a: Tensor, b: Tensor) -> Tensor:
    """ATen's ``calc_gcd`` (``a, b = |a|, |b|; while a: a, b = b % a, a``), unrolled to the
    steps the dtype can need; eagerly it stops once every lane is done."""
    a, b = a.abs(), b.abs()
    eager = not _traced(a, b)
    for _ in range(_GCD_STEPS[a.dtype]):
        live = a != 0
        if eager and not bool(live.any()):
            break
        safe = T_.where(live, a, 1)
        a, b = T_.where(live, b % safe, 0), T_.where(live, a, b)
    return b


def gcd(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.gcd``: the greatest common divisor of integer tensors (``gcd(0, 0) = 0``,
    never negative but for the most negative integer, as in PyTorch)."""
    return _gcd(*_int_pair("gcd", input, other))


def lcm(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.lcm``: ``|a / gcd(a, b) * b|`` of integer tensors (0 when the gcd is 0),
    overflowing as PyTorch's does."""
    a, b = _int_pair("lcm", input, other)
    g = _gcd(a, b)
    zero = g == 0
    q = T_.div(a, T_.where(zero, 1, g), rounding_mode="trunc")
    return T_.where(zero, 0, (q * b).abs())


FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])  # torch.return_types.frexp


def _pow2(e: Tensor, d: dt.DType) -> Tensor:
    """``2 ** e`` (``e`` integral, float64) in dtype ``d``: ``exp2`` is exact there."""
    return e.exp2().to(d)


def frexp(input: Tensor) -> Any:  # noqa: A002
    """``torch.frexp``: ``(mantissa, exponent)`` with ``input = mantissa * 2 ** exponent``,
    ``0.5 <= |mantissa| < 1`` and an int32 exponent (0, inf and NaN give themselves and 0).
    The exponent is found in float64 (``floor(log2|x|) + 1``, corrected by one where the
    logarithm rounded across a power of two); the mantissa is ``input`` scaled by two exact
    powers of two, so its gradient is ``2 ** -exponent`` as PyTorch's."""
    x = _tensor(input, "frexp", "input", 1)
    if not x.dtype.is_float:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    w = x.detach().to(dt.float64)  # exact, and float32 denormals are normal numbers here
    finite = w.isfinite() & (w != 0)
    ex = T_.where(finite, w.abs(), 1.0).log2().floor() + 1

    def scaled(v: Tensor, ex: Tensor, d: dt.DType) -> Tensor:
        half = (ex * 0.5).floor()  # two factors, so that neither over- nor underflows
        return v * _pow2(-half, d) * _pow2(half - ex, d)

    m = scaled(w, ex, dt.float64).abs()
    ex = T_.where(m >= 1, ex + 1, T_.where(m < 0.5, ex - 1, ex))
    ex = T_.where(finite, ex, 0.0)
    return FrexpResult(scaled(x, ex, x.dtype), ex.to(dt.int32))


def ldexp(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.ldexp``: ``input * 2 ** other`` as ATen computes it (``mul(self, pow(2.0,
    other))``), so integer inputs give float32 and the gradient reaches both operands. For
    ``input`` it is ``2 ** other`` everywhere; PyTorch's derivative evaluates that power in
    integers for an integer ``other`` and gives 0 where ``other`` is negative, which graphc
    does not copy."""
    x = _tensor(input, "ldexp", "input", 1)
    y = _tensor(other, "ldexp", "other", 2)
    return x * T_.binary("pow", 2.0, y)


_DIGITS = {dt.float32: 24, dt.float64: 53, dt.bfloat16: 8}


def nextafter(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """``torch.nextafter``: the next representable value after ``input`` towards ``other``
    (``other`` itself when they are equal, NaN when either is), in their promoted float dtype.
    Computed in-graph from ``frexp``'s exponent: one unit in the last place, half of it
    below an exact power of two, the smallest denormal at and below the normal range. As in
    PyTorch the gradient is 1 for ``input`` (0 where it is not finite) and 0 for ``other``."""
    a = _tensor(input, "nextafter", "input", 1)
    b = _tensor(other, "nextafter", "other", 2)
    d = _result_type([a, b])
    if not d.is_float:
        raise NotImplementedError(f"\"nextafter_cpu\" not implemented for '{_tname(d)}'")
    shape = _broadcast(a.shape, b.shape)
    x = _expand_to(a.detach().to(d), shape)
    y = _expand_to(b.detach().to(d), shape)
    w = dt.float32 if d is dt.bfloat16 else d  # bf16's neighbours are exact in float32
    fin = np.finfo(d.np)
    tiny = float(fin.smallest_subnormal)
    mant, ex = frexp(x)
    ulp = _pow2((ex.to(dt.float64) - _DIGITS[d]), w)
    up = T_.binary("maximum", ulp, tiny)
    down = T_.binary("maximum", T_.where(mant.abs() == 0.5, ulp * 0.5, ulp), tiny)
    xw, yw = x.to(w), y.to(w)
    rising = yw > xw
    away = T_.where(xw > 0, rising, yw < xw)
    step = T_.where(away, up, down)
    res = xw + T_.where(rising, step, -step)
    res = T_.where(res == 0, xw * 0.0, res)  # stepping to zero keeps the sign it came from
    least = _const(tiny, (), w)  # a typed constant: a Python float would become float32
    res = T_.where(xw == 0, T_.where(rising, least, -least), res)
    res = T_.where(xw.isinf(), xw.sign() * float(fin.max), res)
    res = T_.where(xw == yw, yw, res)
    res = T_.where(xw.isnan() | yw.isnan(), xw + yw, res).to(d)
    if is_grad_enabled() and a.requires_grad:
        ae = _expand_to(a.to(d), shape)
        keep = T_.where(ae.isfinite(), ae, 0.0)
        res = res - (keep.detach() - keep)  # zero (signs of zeros kept), gradient 1
    return _zero_grad_from(res, b)


# -- calculus ---------------------------------------------------------------------------------
def _dims_of(dim: Any, ndim: int) -> list[int]:
    dims = [dim] if isinstance(dim, (int, np.integer)) else list(dim)
    out = []
    for d in dims:
        d = int(d)
        if not -ndim <= d < ndim or ndim == 0:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, "
                             f"{ndim - 1}], but got {d})")
        d %= ndim
        if d in out:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        out.append(d)
    return out


def _at(x: Tensor, ax: int, start: Any, length: Any) -> Tensor:
    return _narrow(x, ax, sh.dim(start), sh.dim(length))


def _gradient_uniform(x: Tensor, ax: int, h: Any, edge_order: int) -> Tensor:
    """ATen's ``gradient_helper_float``: central differences ``(x[i+1] - x[i-1]) / h / 2``
    inside, one-sided differences of first or second order at the ends. Written on the
    whole length (the neighbours as ``x`` shifted by one, the ends chosen by position), so a
    symbolic batch dim keeps its size; the arithmetic, and so the rounding, is ATen's."""
    n = x.shape[ax]
    first, second = _at(x, ax, 0, 1), _at(x, ax, 1, 1)
    last, last2 = _at(x, ax, n - 1, 1), _at(x, ax, n - 2, 1)
    nxt = T_.cat([_at(x, ax, 1, n - 1), last], ax)
    prv = T_.cat([first, _at(x, ax, 0, n - 1)], ax)
    q = (nxt - prv) / h  # at the ends: (x[1] - x[0]) / h and (x[-1] - x[-2]) / h
    view = [1] * x.ndim
    view[ax] = n
    pos = _wrap(builder().op("iota", (), shape=sh.shape(view), dtype=dt.int64, axis=ax))
    at_first, at_last = pos == 0, pos == _const(sh.dim(n - 1), (), dt.int64)
    if edge_order == 1:
        return T_.where(at_first | at_last, q, q / 2)
    third, last3 = _at(x, ax, 2, 1), _at(x, ax, n - 3, 1)
    pre = (first * -1.5 + second * 2.0 - third * 0.5) / h
    post = (last3 * 0.5 + last2 * -2.0 + last * 1.5) / h
    return T_.where(at_first, pre, T_.where(at_last, post, q / 2))


def _gradient_coords(x: Tensor, ax: int, coords: Tensor, edge_order: int) -> Tensor:
    """ATen's ``gradient_helper``: second-order differences on the sample points
    ``coords`` (unevenly spaced), first or second order at the ends."""
    if coords.ndim != 1:
        raise RuntimeError("torch.gradient expected each element of spacing to have one "
                           f"dimension, but got an element with {coords.ndim} dimensions!")
    n = S_._concrete(x.shape[ax], "gradient with sample coordinates")
    k = S_._concrete(coords.shape[0], "gradient with sample coordinates")
    dx = _at(coords, 0, 1, k - 1) - _at(coords, 0, 0, k - 1)
    dx1, dx2 = _at(dx, 0, 0, k - 2), _at(dx, 0, 1, k - 2)
    view = [1] * x.ndim
    view[ax] = -1
    a = (-dx2 / (dx1 * (dx1 + dx2))).reshape(view)
    b = ((dx2 - dx1) / (dx1 * dx2)).reshape(view)
    c = (dx1 / (dx2 * (dx1 + dx2))).reshape(view)
    center = a * _at(x, ax, 0, n - 2) + b * _at(x, ax, 1, n - 2) + c * _at(x, ax, 2, n - 2)
    def step(i: Any) -> Tensor:
        return _at(dx, 0, i, 1).reshape(())

    h0, hl = step(0), step(k - 2)
    first, second, third = (_at(x, ax, i, 1) for i in range(3))
    last, last2, last3 = (_at(x, ax, n - i, 1) for i in (1, 2, 3))
    if edge_order == 1:
        pre, post = (second - first) / h0, (last - last2) / hl
    else:
        h1, hl2 = step(1), step(k - 3)
        pre = (-(2.0 * h0 + h1) / (h0 * (h0 + h1)) * first + (h0 + h1) / (h0 * h1) * second
               + (-h0) / (h1 * (h0 + h1)) * third)
        post = (hl / (hl2 * (hl + hl2)) * last3 - (hl + hl2) / (hl * hl2) * last2
                + (2 * hl + hl2) / (hl * (hl + hl2)) * last)
    return T_.cat([pre, center, post], ax)


def gradient(input: Tensor, *, spacing: Any = 1, dim: Any = None,  # noqa: A002
             edge_order: int = 1) -> tuple[Tensor, ...]:
    """``torch.gradient``: the derivative estimated along each of ``dim`` (all dims by
    default), one tensor per dim: central differences inside, one-sided differences of order
    ``edge_order`` (1 or 2) at the ends, as ATen's formulas. ``spacing``: one number (the
    same step along every dim), a list of numbers (one step per dim) or a list of 1-D tensors
    (the sample coordinates along each dim)."""
    x = _tensor(input, "gradient", "input", 1)
    if isinstance(spacing, Tensor):
        if spacing.ndim != 0:
            raise TypeError("gradient() received an invalid combination of arguments - got "
                            "(Tensor, spacing=Tensor): pass a number, a list of numbers or a "
                            "list of 1-D tensors")
        _eager_only("gradient with a 0-d tensor spacing", "pass it as a Python number", spacing)
        spacing = spacing.item()
    listed = isinstance(spacing, (list, tuple))
    given = dim is not None
    dims = _dims_of(dim, x.ndim) if given else list(range(x.ndim))
    if listed:
        if not given and len(spacing) != x.ndim:
            raise RuntimeError("torch.gradient expected spacing to be unspecified, a scalar, or "
                               f"a list of length equal to 'self.dim() = {x.ndim}', since dim "
                               f"argument was not given, but got a list of length {len(spacing)}")
        if given and len(spacing) != len(dims):
            raise RuntimeError("torch.gradient expected spacing to be unspecified, a scalar or "
                               "it's spacing and dim arguments to have the same length, but got "
                               f"a spacing argument of length {len(spacing)} and a dim argument "
                               f"of length {len(dims)}.")
        steps = list(spacing)
    elif _is_number(spacing):
        steps = [spacing] * len(dims)
    else:
        raise TypeError(f"gradient(): argument 'spacing' must be a number, a list of numbers or "
                        f"a list of tensors, not {type(spacing).__name__}")
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    for ax in dims:
        n = x.shape[ax]
        msg = "torch.gradient expected each dimension size to be at least edge_order+1"
        if isinstance(n, int):
            if n < edge_order + 1:
                raise RuntimeError(msg)
        else:
            sh.require_gt(n, edge_order, msg)
    if x.dtype is dt.bool_:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    tensors = [isinstance(s, Tensor) for s in steps]
    if builtins.any(tensors) and not builtins.all(tensors):
        raise TypeError("gradient(): spacing must be all numbers or all tensors")
    out = []
    for ax, h in zip(dims, steps):
        out.append(_gradient_coords(x, ax, h, edge_order) if isinstance(h, Tensor)
                   else _gradient_uniform(x, ax, h, edge_order))
    return tuple(out)


def trace(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.trace``: the sum of a matrix's main diagonal (integers sum in int64, as
    ``sum``)."""
    x = _tensor(input, "trace", "input", 1)
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    if x.dtype is dt.bool_:
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    return T_.sum(S_.diagonal(x), dtype=x.dtype if x.dtype.is_float else None)


def rsub(input: Tensor, other: Any, alpha: Any = 1) -> Tensor:  # noqa: A002
    """``torch.rsub``: ``other - alpha * input`` (``other`` a tensor or a number), with
    PyTorch's checks for bools and a float ``alpha`` on integers."""
    x = _tensor(input, "rsub", "input", 1)
    if not (isinstance(other, Tensor) or _is_number(other)):
        raise TypeError(f"rsub(): argument 'other' (position 2) must be Tensor or Number, not "
                        f"{type(other).__name__}")
    o_dtype = other.dtype if isinstance(other, Tensor) else _number_dtype(other)
    if x.dtype is dt.bool_ and o_dtype is dt.bool_:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if isinstance(alpha, float) and not (x.dtype.is_float or o_dtype.is_float):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating "
                           "point number.")
    return other - (x if alpha == 1 else x * alpha)


# -- windows (``torch.*_window``) -------------------------------------------------------------
def _window_args(name: str, window_length: Any, dtype: Any, device: Any) -> dt.DType:
    if isinstance(window_length, (bool, np.bool_)) or not isinstance(
            window_length, (int, np.integer)):
        raise TypeError(f"{name}(): argument 'window_length' (position 1) must be int, not "
                        f"{type(window_length).__name__}")
    if device is not None:
        S_._check_device(device, name)
    d = dt.float32 if dtype is None else dtype_of(dtype, name)
    if window_length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got "
                           f"window_length={int(window_length)}")
    if not d.is_float:
        raise RuntimeError(f"{name} expects floating point dtypes, got: {d!r}")
    return d


def _window(name: str, window_length: int, periodic: bool, dtype: Any, device: Any,
            requires_grad: bool,
            body: Callable[[np.ndarray, int, Callable, Callable], np.ndarray]
            ) -> Tensor:
    """A window of ``window_length`` samples (``periodic``: one more, the last dropped), as
    ATen computes it: ``body`` does ATen's arithmetic on ``arange(n)`` in the op-math type
    (float32 for float32 and bfloat16, float64 for float64), rounding each step's result to
    the window's dtype with ``rnd`` as ATen's in-place ops do. A constant of the step inside
    ``gc.compile``. ``c`` makes a number an operand as ATen's scalar is: in the op-math type,
    after rounding to the window's dtype for bfloat16."""
    d = _window_args(name, window_length, dtype, device)
    n = int(window_length)
    if n <= 1:
        arr = np.ones(n, d.np)
    else:
        n += bool(periodic)
        work = np.float64 if d is dt.float64 else np.float32

        def rnd(a: np.ndarray) -> np.ndarray:
            return a.astype(d.np).astype(work) if d is dt.bfloat16 else a.astype(work)

        def c(v: float) -> Any:
            return rnd(np.array(v, work))[()]

        arr = body(np.arange(n, dtype=work), n, rnd, c)
        arr = arr[:n - 1] if periodic else arr
        arr = np.ascontiguousarray(arr.astype(d.np))
    if requires_grad:
        if _traced():
            raise NotImplementedError(f"graphc.{name}(requires_grad=True) inside a compiled "
                                      "step: create the leaf outside the step")
        return Tensor._from_array(arr, True)
    return T_.as_tensor(arr)


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54,
                   beta: float = 0.46, *, dtype: Any = None, layout: Any = None,
                   device: Any = None, pin_memory: bool = False,
                   requires_grad: bool = False) -> Tensor:
    """``torch.hamming_window``: ``alpha - beta cos(2 pi k / (N - 1))``."""
    def body(k: np.ndarray, n: int, rnd: Callable, c: Callable) -> np.ndarray:
        w = rnd(np.cos(rnd(k * c(math.pi * 2.0 / (n - 1)))))
        return rnd(rnd(w * c(-beta)) + c(alpha))

    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   body)


def hann_window(window_length: int, periodic: bool = True, *, dtype: Any = None,
                layout: Any = None, device: Any = None, pin_memory: bool = False,
                requires_grad: bool = False) -> Tensor:
    """``torch.hann_window``: the Hamming window with ``alpha = beta = 0.5``."""
    _window_args("hann_window", window_length, dtype, device)
    return hamming_window(window_length, periodic, 0.5, 0.5, dtype=dtype, device=device,
                          requires_grad=requires_grad)


def bartlett_window(window_length: int, periodic: bool = True, *, dtype: Any = None,
                    layout: Any = None, device: Any = None, pin_memory: bool = False,
                    requires_grad: bool = False) -> Tensor:
    """``torch.bartlett_window``: the triangle ``2k / (N - 1)``, mirrored as ``2 - ...``
    past the middle."""
    def body(k: np.ndarray, n: int, rnd: Callable, c: Callable) -> np.ndarray:
        w = rnd(k * c(2.0 / (n - 1)))
        half = ((n - 1) >> 1) + 1
        w[half:] = rnd(rnd(w[half:] * c(-1)) + c(2))
        return w

    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   body)


def blackman_window(window_length: int, periodic: bool = True, *, dtype: Any = None,
                    layout: Any = None, device: Any = None, pin_memory: bool = False,
                    requires_grad: bool = False) -> Tensor:
    """``torch.blackman_window``: ``0.42 - 0.5 cos(2 pi k / (N - 1)) + 0.08 cos(4 pi k /
    (N - 1))``."""
    def body(k: np.ndarray, n: int, rnd: Callable, c: Callable) -> np.ndarray:
        w = rnd(k * c(math.pi / (n - 1)))
        a = rnd(rnd(np.cos(rnd(w * c(4)))) * c(0.08))
        b = rnd(rnd(np.cos(rnd(w * c(2)))) * c(0.5))
        return rnd(rnd(a - b) + c(0.42))

    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   body)


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *,
                  dtype: Any = None, layout: Any = None, device: Any = None,
                  pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """``torch.kaiser_window``: ``I0(beta sqrt(1 - ((k - a) / a) ** 2)) / I0(beta)`` with
    ``a = (N - 1) / 2`` (the Bessel function in float64, rounded once)."""
    def body(k: np.ndarray, n: int, rnd: Callable, c: Callable) -> np.ndarray:
        t = k.dtype.type
        a, b = t((n - 1) / 2.0), t(beta)
        arg = b * np.sqrt(np.abs(t(1) - ((k - a) / a) ** t(2)))
        return np.i0(arg.astype(np.float64)) / np.i0(float(b))

    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad,
                   body)


# -- small methods ----------------------------------------------------------------------------
def is_same_size(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    """``torch.is_same_size``: whether the two shapes are equal."""
    a = _tensor(input, "is_same_size", "input", 1)
    b = _tensor(other, "is_same_size", "other", 2)
    return sh.same_shape(a.shape, b.shape) and a.ndim == b.ndim


def sum_to_size(self: Tensor, *size: Any) -> Tensor:
    """``Tensor.sum_to_size``: summed over the dims ``size`` broadcasts to (the reverse of
    ``expand``); ``self`` when it has that size already."""
    if not size:
        raise TypeError('sum_to_size() missing 1 required positional arguments: "size"')
    want = list(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else list(size)
    lead = self.ndim - len(want)
    ok = lead >= 0 and builtins.all(sh.same(w, 1) or sh.same(w, self.shape[lead + i])
                                    for i, w in enumerate(want))
    if not ok:
        def text(s: Sequence[Any]) -> str:
            return "[" + ", ".join(sh.fmt_dim(d) for d in s) + "]"

        raise RuntimeError(f"size {{{text(want)}}} is not expandable to size "
                           f"{{{text(self.shape)}}}.")
    axes = list(range(lead)) + [lead + i for i, w in enumerate(want)
                                if sh.same(w, 1) and not sh.same(self.shape[lead + i], 1)]
    if not axes:
        return self
    return T_.sum(self, axes, keepdim=True).reshape(want)


def positive(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.positive``: ``input`` itself (refused for bools, as PyTorch's unary ``+``)."""
    x = _tensor(input, "positive", "input", 1)
    if x.dtype is dt.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return x


def sgn(input: Tensor) -> Tensor:  # noqa: A002
    """``torch.sgn``: ``sign`` (they differ only for complex numbers, which graphc has
    not)."""
    return _tensor(input, "sgn", "input", 1).sign()


def _contiguous_strides(shape: Sequence[Any]) -> tuple:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc = acc * s if isinstance(s, int) and s > 1 else (acc if isinstance(s, int) else
                                                           sh.dim(acc * s))
    return tuple(reversed(out))


def stride(self: Tensor, dim: int | None = None) -> Any:
    """``Tensor.stride``: elements to step in memory per index of each dim. An eager tensor
    answers from its array (a transposed, sliced or expanded view has PyTorch's strides for
    it; a row-major array PyTorch's contiguous ones); a traced tensor is row-major (the IR has
    no strides), its sizes maybe symbolic."""
    if _traced(self):
        strides = _contiguous_strides(self.shape)
    else:
        a = self.numpy()
        strides = (_contiguous_strides(a.shape) if a.flags.c_contiguous
                   else tuple(s // a.itemsize for s in a.strides))
    if dim is None:
        return strides
    if self.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    return strides[sh.norm_axis(int(dim), self.ndim, "stride")]


def data_ptr(self: Tensor) -> int:
    """``Tensor.data_ptr``: the address of the first element of the tensor's numpy array
    (views point into their base's memory). A traced tensor has no memory (it raises)."""
    _eager_only("Tensor.data_ptr()", "a traced tensor has no memory until the step runs", self)
    return int(self.numpy().ctypes.data)


def _no_dtype(method: str, dtype: str) -> Callable[[Tensor], Tensor]:
    def convert(self: Tensor, memory_format: Any = None) -> Tensor:
        raise NotImplementedError(
            f"Tensor.{method}(): graphc has no {dtype} dtype (it computes in float32, float64, "
            "bfloat16, int64, int32 and bool); use .int() or .long() for integers")

    convert.__name__ = convert.__qualname__ = method
    return convert


def fill_diagonal_(self: Tensor, fill_value: Any, wrap: bool = False) -> Tensor:
    """``Tensor.fill_diagonal_``: ``fill_value`` written on the main diagonal (all indices
    equal; every dim the same length beyond 2-D). A tall matrix with ``wrap`` restarts the
    diagonal every ``columns + 1`` rows, as PyTorch's flat stride does. The positions are a
    constant mask, so the sizes must be fixed."""
    if self.ndim < 2:
        raise RuntimeError("dimensions must larger than 1")
    shape = [S_._concrete(s, "fill_diagonal_") for s in self.shape]
    if self.ndim > 2 and len(set(shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    total = int(np.prod(shape, dtype=np.int64))
    mask = np.zeros(total, np.bool_)
    if self.ndim == 2:
        rows, cols = shape
        step = cols + 1
        count = -(-total // step) if wrap and rows > cols else builtins.min(rows, cols)
        mask[np.arange(count, dtype=np.int64) * step] = True
    else:
        step = int(sum(np.prod(shape[i + 1:], dtype=np.int64) for i in range(len(shape))))
        mask[np.arange(shape[0], dtype=np.int64) * step] = True
    hit = T_.as_tensor(mask.reshape(shape))
    return self._assign(T_.where(hit, fill_value, self))


def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """``torch.masked_scatter``: ``input`` with the positions where ``mask`` (broadcast with
    it) is true taken from ``source``'s elements in order: a running count of the mask picks
    each one (a gather, so ``source``'s gradient is the output's at the positions it went
    to). Eagerly a ``source`` with too few elements raises PyTorch's error; compiled, the
    gather's bounds check stops the step."""
    x = _tensor(input, "masked_scatter", "input", 1)
    m = _tensor(mask, "masked_scatter", "mask", 2)
    src = _tensor(source, "masked_scatter", "source", 3)
    if m.dtype is not dt.bool_:
        raise RuntimeError("masked_scatter_ only supports boolean masks, but got mask with "
                           f"dtype {_tname(m.dtype)}")
    if src.dtype is not x.dtype:
        raise RuntimeError("masked_scatter: expected self and source to have same dtypes but "
                           f"got {_tname(x.dtype)} and {_tname(src.dtype)}")
    shape = _broadcast(x.shape, m.shape)
    xb, mb = _expand_to(x, shape), _expand_to(m, shape)
    flat = src.reshape(-1)
    k = flat.shape[0]
    if not _traced(x, m, src) and int(T_.sum(mb)) > int(k):
        raise RuntimeError("Number of elements of source < number of ones in mask")
    if sh.same(k, 0):
        return xb * 1 if xb.dtype is not dt.bool_ else xb & True
    pos = cumsum(mb.reshape(-1).to(dt.int64), 0) - 1
    pick = T_.gather(flat, 0, T_.where(pos < 0, 0, pos)).reshape(shape)
    return T_.where(mb, pick, xb)


_INDEX_REDUCE = ("prod", "mean", "amax", "amin")


def index_reduce(input: Tensor, dim: int, index: Tensor, source: Tensor,  # noqa: A002
                 reduce: str, *, include_self: bool = True) -> Tensor:
    """``torch.index_reduce``: the slices of ``source`` reduced into ``input`` at the
    positions ``index`` names along ``dim`` (``prod``, ``mean`` — integer means rounded
    down —, ``amax``, ``amin``; ``include_self``: the input's own value takes part): a
    ``scatter_reduce`` with the index spread over the slices, so gradients are its."""
    x = _tensor(input, "index_reduce", "input", 1)
    idx = _tensor(index, "index_reduce", "index", 3)
    src = _tensor(source, "index_reduce", "source", 4)
    if reduce not in _INDEX_REDUCE:
        raise RuntimeError("index_reduce(): Expected reduce to be one of prod, mean, amax or "
                           f"amin but got {reduce}.")
    if idx.dtype not in (dt.int64, dt.int32):
        raise RuntimeError("index_reduce_(): Expected dtype int32/int64 for index but got: "
                           f"{_tname(idx.dtype)}")
    if idx.ndim > 1:
        raise IndexError(f"index_reduce_(): Index is supposed to be a vector, but got dim: "
                         f"{idx.ndim} with type: {_tname(idx.dtype)} and size: "
                         f"{list(idx.shape)}")
    if src.dtype is not x.dtype:
        raise RuntimeError(f"index_reduce_(): self ({_tname(x.dtype)}) and source "
                           f"({_tname(src.dtype)}) must have the same scalar type")
    x1 = x.reshape(1) if x.ndim == 0 else x
    s1 = src.reshape(1) if src.ndim == 0 else src
    ax = sh.norm_axis(_int_arg(dim, "index_reduce", "dim", 2), x1.ndim, "index_reduce")
    i1 = idx.reshape(-1).to(dt.int64)
    if s1.ndim != x1.ndim or builtins.any(
            not sh.same(a, b) for d, (a, b) in enumerate(zip(s1.shape, x1.shape)) if d != ax):
        raise RuntimeError("index_reduce_(): self and source must have same size except at "
                           "dim")
    if not sh.same(i1.shape[0], s1.shape[ax]):
        raise RuntimeError(f"index_reduce_(): Number of indices ({sh.fmt_dim(i1.shape[0])}) "
                           f"should be equal to source.size(dim): ({sh.fmt_dim(s1.shape[ax])}), "
                           f"for dim: {ax}")
    if not _traced(x, idx) and i1.numel():
        v = i1.numpy()
        if v.min() < 0 or v.max() >= int(x1.shape[ax]):
            raise IndexError("index out of range in self")
    view = [1] * x1.ndim
    view[ax] = -1
    full = i1.reshape(view).expand(*s1.shape)
    out = I_.scatter_reduce(x1, ax, full, s1, reduce, include_self=include_self)
    return out.reshape([]) if x.ndim == 0 else out


def prelu(input: Tensor, weight: Tensor) -> Tensor:  # noqa: A002
    """``torch.prelu`` (``Tensor.prelu``): ``x`` where positive, ``weight * x`` elsewhere;
    ``weight`` one slope or one per channel (dim 1; a 1-D input has one channel), as
    ATen's ``prelu`` (and ``nn.functional.prelu``, which is this function)."""
    x = _tensor(input, "prelu", "input", 1)
    w = _tensor(weight, "prelu", "weight", 2)
    if not x.dtype.is_float:
        raise NotImplementedError(f"\"prelu_cpu\" not implemented for '{_tname(x.dtype)}'")
    if w.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                           f"ndim = {w.ndim}")
    n = S_._concrete(sh.numel(w.shape), "prelu's weight")
    if n != 1:
        if x.ndim == 0:
            raise RuntimeError("Not allow zero-dim input tensor.")
        c = x.shape[1] if x.ndim >= 2 else 1
        if not sh.same(c, n):
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {n} and channel size = {sh.fmt_dim(c)}.")
        if x.ndim >= 2:
            w = w.reshape(1, n, *([1] * (x.ndim - 2)))
    elif w.ndim == 1 and x.ndim == 0:
        w = w.reshape(())
    return T_.where(x > 0, x, w.to(x.dtype) * x)


_HARDSHRINK = next(d for d in SURFACE if d.name == "hardshrink")


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """``torch.hardshrink`` (``Tensor.hardshrink``): 0 on ``[-lambd, lambd]``, ``x``
    elsewhere: the op table's ``hardshrink`` (``F.hardshrink``'s), float inputs only."""
    x = _tensor(input, "hardshrink", "input", 1)
    if not x.dtype.is_float:
        raise NotImplementedError(f"\"hardshrink_cpu\" not implemented for '{_tname(x.dtype)}'")
    return T_.apply_op(_HARDSHRINK, x, lambd=lambd)


# -- in-place shape changes (``unsqueeze_`` & co.) --------------------------------------------
def _restride(self: Tensor, view: Callable[[Tensor], Tensor], what: str) -> Tensor:
    """Give ``self`` the shape of ``view(self)``, in place, sharing its memory: PyTorch's
    in-place view ops change a tensor's sizes and strides, not its values, so its older views
    keep theirs. Eagerly: a leaf (a tensor without autograd history) gets the viewed array
    (refused under grad mode when it requires grad, as PyTorch refuses); a tensor with history
    gets the view's node, so gradients flow through the reshape. Traced: a tensor of the step
    is rebound to the view (an in-place write to it afterwards raises, as on any view); a
    tensor from outside the step (parameter, buffer, argument) would change shape for the
    caller, which the compiled step cannot do, so it raises."""
    ctx = _context.current()
    if ctx is not None:
        n = self._node
        if self._trace is not ctx or (n.op == "input" and n.attrs.get("kind") == "arg"):
            raise NotImplementedError(
                f"{what} inside a compiled step on a tensor from outside it (a parameter, "
                "buffer or argument): eagerly it changes that tensor's shape for the caller, "
                "which the compiled step does not; use the out-of-place form (x = x.unsqueeze(0)"
                " & co.)")
        self._node = view(self).node
        return self
    n = self.node
    if n.op != "input":  # a result with autograd history: the history continues in the view
        with enable_grad() if n.rg else no_grad():
            self._node = view(self)._node
        return self
    if is_grad_enabled() and n.rg:
        raise RuntimeError(LEAF_INPLACE)
    with no_grad():
        arr = view(self).numpy()
    if type(n) is Node:  # the leaf's own node: updated where it is, as ``.data =`` does
        n._value = arr
        n.shape = tuple(arr.shape)
        n.attrs["shape"] = n.shape
    else:  # a compiled step's result, whose node class shares its fields: a new leaf
        self._node = leaf_node(arr)
    _context.bump()  # compiled steps that read this tensor re-check its shape
    return self


def squeeze_(self: Tensor, dim: Any = None) -> Tensor:
    """``Tensor.squeeze_``: ``squeeze`` in place (see ``_restride``)."""
    return _restride(self, lambda t: t.squeeze(dim), "squeeze_")


def unsqueeze_(self: Tensor, dim: int) -> Tensor:
    """``Tensor.unsqueeze_``: ``unsqueeze`` in place (see ``_restride``)."""
    return _restride(self, lambda t: t.unsqueeze(dim), "unsqueeze_")


def transpose_(self: Tensor, dim0: int, dim1: int) -> Tensor:
    """``Tensor.transpose_`` (``swapaxes_``, ``swapdims_``): two dims exchanged in place."""
    return _restride(self, lambda t: t.transpose(dim0, dim1), "transpose_")


def t_(self: Tensor) -> Tensor:
    """``Tensor.t_``: ``t`` in place, for any 2-D shape (written through ``_assign`` it
    worked only for square matrices)."""
    if self.ndim > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is "
                           f"{self.ndim}D")
    return _restride(self, S_.t, "t_")


# -- functional forms of in-place methods (``torch.relu_(x)`` is ``x.relu_()``) ---------------
# PyTorch's in-place functions whose Tensor method graphc has (tests check that it does)
INPLACE_FORMS = [
    "abs_", "acos_", "acosh_", "addmv_", "arccos_", "arccosh_", "arcsin_", "arcsinh_",
    "arctan_", "arctanh_", "asin_", "asinh_", "atan_", "atanh_", "ceil_", "clamp_",
    "clamp_max_", "clamp_min_", "clip_", "cos_", "cosh_", "deg2rad_", "erf_", "erfc_", "exp2_",
    "exp_", "expm1_", "fill_", "fix_", "floor_", "frac_", "gcd_", "i0_", "index_put_", "lcm_",
    "ldexp_", "log10_", "log1p_", "log2_", "log_", "logit_", "nan_to_num_", "neg_",
    "negative_", "rad2deg_", "reciprocal_", "relu_", "round_", "rsqrt_", "sigmoid_", "sin_",
    "sinc_", "sinh_", "sqrt_", "square_", "tan_", "tanh_", "trunc_", "xlogy_", "zero_",
]


def _inplace_form(name: str) -> Callable[..., Tensor]:
    def fn(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:  # noqa: A002
        return getattr(_tensor(input, name, "input", 1), name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``torch.{name}``: ``input.{name}(...)`` (:meth:`graphc.Tensor.{name}`)."
    return fn


for _name in INPLACE_FORMS:
    globals()[_name] = _inplace_form(_name)
del _name


# -- Tensor methods ---------------------------------------------------------------------------
# functions that are also methods (``x.dist(y)`` is ``dist(x, y)``), as in ``torch.Tensor``
METHODS = [
    "allclose", "equal", "dist", "trace", "tensor_split", "hsplit", "vsplit", "dsplit",
    "split_with_sizes", "is_same_size", "positive", "sgn", "masked_scatter", "index_reduce",
    "gcd", "lcm", "frexp", "ldexp", "nextafter", "prelu", "hardshrink",
]


def install(T: type[Tensor]) -> None:
    """Attach this module's methods to the Tensor class (called once by graphc/tensor.py,
    after ``shape_ops``, whose square-only ``t_`` the general one here replaces)."""
    for name in METHODS:
        setattr(T, name, globals()[name])
    for name in ("sum_to_size", "stride", "data_ptr", "fill_diagonal_", "squeeze_",
                 "unsqueeze_", "transpose_", "t_"):
        setattr(T, name, globals()[name])
    T.swapaxes_ = T.swapdims_ = transpose_
    T.nbytes = property(lambda self: sh.numel(self.shape) * self.dtype.itemsize)
    T.itemsize = property(lambda self: self.dtype.itemsize)
    T.is_cpu = property(lambda self: True)
    T.short = _no_dtype("short", "int16")
    T.byte = _no_dtype("byte", "uint8")
    T.char = _no_dtype("char", "int8")

    def inplace(fn: Callable[..., Tensor], name: str) -> Callable[..., Tensor]:
        def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
            if args and isinstance(args[0], Tensor) and name in ("gcd_", "lcm_"):
                # PyTorch checks the cast into ``self`` before the kernel's dtype check
                d = _result_type([self, args[0]])
                if d.is_float and not self.dtype.is_float:
                    raise RuntimeError(f"result type {_tname(d)} can't be cast to the desired "
                                       f"output type {_tname(self.dtype)}")
            return self._assign(result_castable(fn(self, *args, **kwargs), self, name))

        method.__name__ = method.__qualname__ = name
        method.__doc__ = f"``torch.Tensor.{name}``: ``{name[:-1]}`` written into this tensor."
        return method

    for name, fn in (("gcd_", gcd), ("lcm_", lcm), ("ldexp_", ldexp),
                     ("index_reduce_", index_reduce), ("rsqrt_", lambda self: self.rsqrt())):
        setattr(T, name, inplace(fn, name))

    def masked_scatter_(self: Tensor, mask: Tensor, source: Tensor) -> Tensor:
        """``torch.Tensor.masked_scatter_``: the mask must expand to this tensor's shape."""
        _expand_to(_tensor(mask, "masked_scatter_", "mask", 1), self.shape)
        return self._assign(masked_scatter(self, mask, source))

    T.masked_scatter_ = masked_scatter_

    # torch.Tensor's names for graphc.special's polygamma and incomplete gamma functions
    T.polygamma = lambda self, n: _special.polygamma(n, self)
    T.igamma = lambda self, other: _special.gammainc(self, other)
    T.igammac = lambda self, other: _special.gammaincc(self, other)
    for name, fn in (("polygamma_", lambda self, n: _special.polygamma(n, self)),
                     ("igamma_", _special.gammainc), ("igammac_", _special.gammaincc)):
        setattr(T, name, inplace(fn, name))


# ``gc.<name>`` for these (graphc/__init__.py's ``_ELSEWHERE`` table names this module)
FUNCTIONS = [
    "pi", "e", "inf", "nan", "newaxis", "is_tensor", "is_signed", "allclose", "equal",
    "result_type", "promote_types", "can_cast", "get_default_dtype", "set_default_dtype",
    "get_num_threads", "set_num_threads", "set_flush_denormal", "get_rng_state",
    "set_rng_state", "seed", "normal",
    "tensor_split", "hsplit", "vsplit", "dsplit", "split_with_sizes", "unravel_index",
    "combinations", "isin", "dist", "gcd", "lcm", "frexp", "ldexp", "nextafter", "gradient",
    "trace", "rsub", "bartlett_window", "blackman_window", "hamming_window", "hann_window",
    "kaiser_window", "is_same_size", "positive", "sgn", "masked_scatter", "index_reduce",
    "prelu", "hardshrink", *INPLACE_FORMS,
]

__all__ = [*FUNCTIONS, "FrexpResult", "install", "FUNCTIONS", "METHODS", "INPLACE_FORMS"]
