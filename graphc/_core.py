"""The eager namespace of ``graphc``: tensor factories, dtype aliases and the functional
forms of tensor methods (``gc.zeros``, ``gc.exp``, ``gc.cat``, ...).

It lives apart from ``graphc/__init__.py`` because it needs numpy and the tensor core (which
pulls in sympy through ``graphc.ir.shapes``): the package resolves these names on first use
(PEP 562), so ``graphc --help`` and other light entry points never pay for them.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from . import random as _random
from ._tensor import device, device_of
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .composite_ops import (  # PyTorch's composites: gc.diff, gc.cov, gc.cdist, ...
    addbmm,
    addr,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    block_diag,
    cartesian_prod,
    cdist,
    column_stack,
    corrcoef,
    cov,
    cross,
    cumulative_trapezoid,
    diagflat,
    diff,
    dstack,
    hstack,
    inner,
    nanmean,
    nansum,
    narrow_copy,
    renorm,
    rot90,
    row_stack,
    take,
    tensordot,
    trapezoid,
    trapz,
    vander,
    vdot,
    vstack,
)
from .index_ops import (  # indexing, scatter/gather and sorting: gc.sort, gc.topk, ...
    argsort,
    argwhere,
    index_add,
    index_copy,
    index_fill,
    index_put,
    index_select,
    kthvalue,
    masked_select,
    msort,
    nonzero,
    scatter,
    scatter_add,
    scatter_reduce,
    sort,
    take_along_dim,
    topk,
)
from .ir import dtypes as _dt
from .ir.dtypes import DType
from .linalg_ops import (  # gc.det, gc.logdet, gc.inverse (LU)
    det,
    inverse,
    logdet,
    pinverse,  # gc.pinverse (through the SVD)
)
from .linalg_ops import torch_qr as qr  # gc.qr: torch.qr's some= form
from .linalg_ops import torch_slogdet as slogdet  # gc.slogdet: return_types.slogdet
from .linalg_ops import torch_svd as svd  # gc.svd: torch.svd's (U, S, V), some=/compute_uv=
from .reduce_ops import (  # reductions and scans: gc.std, gc.prod, gc.cumsum, ...
    all,
    aminmax,
    any,
    count_nonzero,
    cummax,
    cummin,
    cumprod,
    cumsum,
    logcumsumexp,
    norm,
    prod,
    std,
    std_mean,
    var,
    var_mean,
)
from .shape_ops import (  # shape and creation ops: gc.tril, gc.einsum, gc.eye, ...
    _like,  # the layout of ``*_like`` results
    addmm,
    addmv,
    baddbmm,
    bmm,
    chunk,
    diag,
    diag_embed,
    diagonal,
    dot,
    einsum,
    empty,
    empty_like,
    eye,
    flip,
    fliplr,
    flipud,
    full_like,
    ger,
    kron,
    linspace,
    logspace,
    masked_fill,
    meshgrid,
    mm,
    moveaxis,
    movedim,
    mv,
    narrow,
    outer,
    repeat_interleave,
    roll,
    select,
    split,
    swapaxes,
    swapdims,
    t,
    tile,
    tril,
    tril_indices,
    triu,
    triu_indices,
    unbind,
    unflatten,
)
from .stat_ops import (  # order statistics, searching, binning: gc.median, gc.quantile, ...
    bincount,
    bucketize,
    histc,
    histogram,
    median,
    mode,
    nanmedian,
    nanquantile,
    quantile,
    searchsorted,
    unique,
    unique_consecutive,
)
from .tensor import Tensor, to_array
from .tensor_ops import as_tensor, where

float32 = _dt.float32
float64 = _dt.float64
bfloat16 = _dt.bfloat16
int64 = _dt.int64
int32 = _dt.int32
bool = _dt.bool_  # noqa: A001  (as torch.bool)
float = float32  # noqa: A001
double = float64
long = int64

manual_seed = _random.manual_seed


class memory_format:  # noqa: N801 - torch.memory_format
    """``torch.memory_format``: the layouts ``clone``/``contiguous`` accept. Tensors here are
    row-major, so ``contiguous_format`` and ``preserve_format`` are accepted and
    ``channels_last`` raises NotImplementedError where it is passed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"graphc.{self.name}"


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
initial_seed = _random.initial_seed


def tensor(data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data`` (as ``torch.tensor``)."""
    arr = np.array(to_array(data, _dt.as_dtype(dtype) if dtype is not None else None),
                   copy=True)
    if requires_grad and arr.dtype.kind != "f":
        raise RuntimeError("Only Tensors of floating point dtype can require gradients")
    return Tensor._from_array(arr, requires_grad)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``a`` (as ``torch.from_numpy``)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(a).__name__})")
    _dt.from_numpy(a.dtype)
    return Tensor._from_array(a if a.flags.c_contiguous else np.ascontiguousarray(a))


def _shape(size: tuple) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


def _dtype(dtype: Any, default: _dt.DType = _dt.float32) -> _dt.DType:
    return default if dtype is None else _dt.as_dtype(dtype)


def _factory(value: Any, size: tuple, dtype: Any, requires_grad: bool) -> Tensor:
    from . import _context

    d = _dtype(dtype)
    shape = _shape(size)
    if _context.current() is not None:
        from .tensor import builder

        return Tensor._wrap(builder().const(value, shape, d))
    return Tensor._from_array(np.full(shape, value, d.np), requires_grad)


def zeros(*size: Any, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    if device is not None:
        device_of(device, "zeros")
    return _factory(0, size, dtype, requires_grad)


def ones(*size: Any, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    if device is not None:
        device_of(device, "ones")
    return _factory(1, size, dtype, requires_grad)


def full(size: Any, fill_value: Any, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    if device is not None:
        device_of(device, "full")
    if dtype is None and isinstance(fill_value, (int, np.integer)) \
            and not isinstance(fill_value, (bool, np.bool_)):
        dtype = _dt.int64
    return _factory(fill_value, tuple(size) if not isinstance(size, int) else (size,), dtype,
                    requires_grad)


def zeros_like(t: Tensor, dtype: Any = None, device: Any = None, *,
               memory_format: Any = None) -> Tensor:
    """``torch.zeros_like``, laid out as PyTorch's (``shape_ops._like_strides``)."""
    if device is not None:
        device_of(device, "zeros_like")
    return _like(lambda s, rg: zeros(s, dtype=dtype or t.dtype), t, memory_format,
                 "zeros_like")


def ones_like(t: Tensor, dtype: Any = None, device: Any = None, *,
              memory_format: Any = None) -> Tensor:
    """``torch.ones_like``, laid out as PyTorch's (``shape_ops._like_strides``)."""
    if device is not None:
        device_of(device, "ones_like")
    return _like(lambda s, rg: ones(s, dtype=dtype or t.dtype), t, memory_format,
                 "ones_like")


def rand(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """``torch.rand``: uniform values in ``[0, 1)``, PyTorch's stream (``generator``: a
    ``gc.Generator``'s instead of the global one)."""
    if device is not None:
        device_of(device, "rand")
    d = _dtype(dtype)
    _stream(generator)
    traced = _traced_random(_random.Draw("uniform", _random.uniform, (0.0, 1.0), d.np,
                                         generator), _shape(size), d, requires_grad, "rand")
    if traced is not None:
        return traced
    return Tensor._from_array(_random.uniform(_shape(size), 0.0, 1.0, d.np, generator),
                              requires_grad)


def randn(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """``torch.randn``: standard normal values with PyTorch's CPU algorithm and stream
    (``generator``: a ``gc.Generator``'s instead of the global one)."""
    return _standard_normal(size, generator, dtype, device, requires_grad, _random.normal,
                            "randn")


def _standard_normal(size: Any, generator: Any, dtype: Any, device: Any, requires_grad: bool,
                     fn: Any, name: str) -> Tensor:
    """``fn(shape, 0, 1, dtype, rs)``'s values (``graphc.random.normal``, or the per-element
    draws of a non-contiguous ``normal_``), drawn now or, traced, on every call."""
    if device is not None:
        device_of(device, name)
    d = _dtype(dtype)
    _stream(generator)
    traced = _traced_random(_random.Draw("normal", fn, (0.0, 1.0), d.np, generator),
                            _shape(size), d, requires_grad, name)
    if traced is not None:
        return traced
    return Tensor._from_array(fn(_shape(size), 0.0, 1.0, d.np, generator), requires_grad)


def rand_like(input: Tensor, *, dtype: Any = None, device: Any = None,  # noqa: A002
              requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    """``torch.rand_like``: ``rand`` of ``input``'s shape, in its dtype unless told, laid
    out as PyTorch's and drawn in its memory order (``shape_ops._like``)."""
    return _like(lambda s, rg: rand(s, dtype=dtype or input.dtype, device=device,
                                    requires_grad=rg),
                 input, memory_format, "rand_like", requires_grad, drawn=True)


def randn_like(input: Tensor, *, dtype: Any = None, device: Any = None,  # noqa: A002
               requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    """``torch.randn_like``: ``randn`` of ``input``'s shape, in its dtype unless told, laid
    out as PyTorch's and drawn in its memory order (``shape_ops._like``). PyTorch's is
    ``empty_like(input).normal_()``: a result that is not contiguous gets one double
    Box-Muller sample per element (``random_ops._normal_each``), not ``randn``'s
    16-at-a-time fill."""
    d = dtype or input.dtype

    def each(s: tuple, rg: bool) -> Tensor:
        from .random_ops import _normal_each

        if not _dtype(d).is_float:  # whatever ``randn`` does with it
            return randn(s, dtype=d, device=device, requires_grad=rg)
        return _standard_normal(s, None, d, device, rg, _normal_each, "randn_like")

    return _like(lambda s, rg: randn(s, dtype=d, device=device, requires_grad=rg), input,
                 memory_format, "randn_like", requires_grad, drawn=True, strided=each)


_stream = _random.checked  # the generator argument, checked (None: the global stream)


def _int_result(values: np.ndarray, dtype: Any, requires_grad: bool, what: str) -> Tensor:
    d = _dtype(dtype, _dt.int64)
    if requires_grad and not d.is_float:
        raise RuntimeError("Only Tensors of floating point dtype can require gradients")
    return Tensor._from_array(values.astype(d.np), requires_grad)


def randint(*args: Any, size: Any = None, generator: Any = None, dtype: Any = None,
            device: Any = None, requires_grad: bool = False) -> Tensor:
    """``torch.randint(low=0, high, size)``: integers in ``[low, high)``, int64 unless
    ``dtype`` says otherwise, drawn from PyTorch's CPU stream (after the same
    ``manual_seed``, the same values as PyTorch)."""
    if device is not None:
        device_of(device, "randint")
    if size is None:
        if len(args) < 2:
            raise TypeError("randint() missing required argument 'size'")
        *args, size = args
    if len(args) == 1:
        low, high = 0, args[0]
    elif len(args) == 2:
        low, high = args
    else:
        raise TypeError(f"randint() takes (low=0, high, size), got {len(args) + 1} arguments")
    low, high = int(low), int(high)
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                           f"from={low} >= to={high}")
    shape = _shape(size if isinstance(size, (tuple, list)) else (size,))
    d = _dtype(dtype, _dt.int64)
    _stream(generator)  # checked before anything is drawn or traced
    traced = _traced_random(_random.Draw("integers", _integers, (low, high), d.np,
                                         generator), shape, d, requires_grad, "randint",
                            integers=True)
    if traced is not None:
        return traced
    values = _random.integers(shape, low, high, _stream(generator))
    return _int_result(values, dtype, requires_grad, "randint")


def randint_like(input: Tensor, *args: Any, dtype: Any = None,  # noqa: A002
                 device: Any = None, requires_grad: bool = False,
                 memory_format: Any = None) -> Tensor:
    """``torch.randint_like(input, low=0, high)``: ``randint`` of ``input``'s shape, in its
    dtype unless told, laid out as PyTorch's and drawn in its memory order
    (``shape_ops._like``)."""
    return _like(lambda s, rg: randint(*args, size=s, dtype=dtype or input.dtype,
                                       device=device, requires_grad=rg),
                 input, memory_format, "randint_like", requires_grad, drawn=True)


def randperm(n: int, *, generator: Any = None, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """``torch.randperm``: a random permutation of ``0 .. n-1`` (int64 unless told), with
    PyTorch's CPU algorithm and stream."""
    if device is not None:
        device_of(device, "randperm")
    if int(n) < 0:
        raise RuntimeError(f"n must be non-negative, got{int(n)}")
    d = _dtype(dtype, _dt.int64)
    _stream(generator)
    traced = _traced_random(_random.Draw("permutation", _permutation, (), d.np, generator),
                            (int(n),), d, requires_grad, "randperm", integers=True)
    if traced is not None:
        return traced
    return _int_result(_random.permutation(int(n), _stream(generator)), dtype, requires_grad,
                       "randperm")


def _integers(shape: tuple, low: int, high: int, dtype: Any, rs: Any = None) -> np.ndarray:
    return _random.integers(shape, low, high, rs)  # the dtype does not change the stream


def _permutation(shape: tuple, dtype: Any, rs: Any = None) -> np.ndarray:
    return _random.permutation(shape[0], rs)


def _traced_random(draw: _random.Draw, shape: tuple, d: _dt.DType, requires_grad: bool,
                   what: str, integers: bool = False) -> Tensor | None:
    """While a step is traced: a random fill as an input the step draws on every call
    (``trace.random_input``; ``draw`` is the eager function and its arguments). Drawn at
    trace time it would be a constant of the compiled code: every call would repeat the
    first call's numbers."""
    from . import _context

    ctx = _context.current()
    if ctx is None:
        return None
    if not integers and not d.is_float:
        raise TypeError(f"{what}: expected a floating point dtype, got {d.name}")
    if requires_grad:
        if not d.is_float:
            raise RuntimeError("Only Tensors of floating point dtype can require gradients")
        raise NotImplementedError(
            f"{what}(requires_grad=True) inside a compiled function: a new leaf each call has "
            "no gradient the step could return; create it outside and pass it in")
    from .ir import shapes as sh

    return Tensor._wrap(ctx.random_input(draw, sh.shape(shape), d))


def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None,
           device: Any = None, requires_grad: bool = False) -> Tensor:
    if device is not None:
        device_of(device, "arange")
    if end is None:
        start, end = 0, start
    is_int = builtins.all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    d = _dtype(dtype, _dt.int64 if is_int else _dt.float32)
    n = builtins.max(0, int(np.ceil((end - start) / step)))
    vals = start + step * np.arange(n, dtype=np.float64 if not is_int else np.int64)
    return Tensor._from_array(vals.astype(d.np), requires_grad)


def _op(name: str) -> Any:
    from . import tensor_ops

    return getattr(tensor_ops, name)


def matmul(a: Any, b: Any) -> Tensor:
    return _op("matmul")(a, b)


def exp(x: Any) -> Tensor:
    return as_tensor(x).exp()


def log(x: Any) -> Tensor:
    return as_tensor(x).log()


def tanh(x: Any) -> Tensor:
    return as_tensor(x).tanh()


def sigmoid(x: Any) -> Tensor:
    return as_tensor(x).sigmoid()


def relu(x: Any) -> Tensor:
    return as_tensor(x).relu()


def sqrt(x: Any) -> Tensor:
    return as_tensor(x).sqrt()


def abs(x: Any) -> Tensor:  # noqa: A001
    return as_tensor(x).abs()


def sum(x: Any, dim: Any = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    return as_tensor(x).sum(dim, keepdim)


def mean(x: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    return as_tensor(x).mean(dim, keepdim)


def maximum(a: Any, b: Any) -> Tensor:
    return _op("binary")("maximum", a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return _op("binary")("minimum", a, b)


def clamp(x: Any, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    return as_tensor(x).clamp(min, max)


def argmax(x: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    return as_tensor(x).argmax(dim, keepdim)


def argmin(x: Any, dim: Any = None, keepdim: bool = False) -> Tensor:
    return as_tensor(x).argmin(dim, keepdim)


def max(input: Any, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001, A002
    """``torch.max``: the maximum (0-d), (values, indices) along ``dim``, or ``maximum``
    with a tensor."""
    return _op("max")(input, dim, keepdim)


def min(input: Any, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001, A002
    """``torch.min``: as ``max``, for the minimum."""
    return _op("min")(input, dim, keepdim)


def amax(input: Any, dim: Any = (), keepdim: bool = False) -> Tensor:  # noqa: A002
    return _op("amax")(input, dim, keepdim)


def amin(input: Any, dim: Any = (), keepdim: bool = False) -> Tensor:  # noqa: A002
    return _op("amin")(input, dim, keepdim)


def lerp(input: Any, end: Any, weight: Any) -> Tensor:  # noqa: A002
    """``torch.lerp``: ``input + weight * (end - input)``, with ATen's two rounding
    branches (``Tensor.lerp``)."""
    return as_tensor(input).lerp(end, weight)


def softmax(x: Any, dim: int) -> Tensor:
    return as_tensor(x).softmax(dim)


def log_softmax(x: Any, dim: int) -> Tensor:
    return as_tensor(x).log_softmax(dim)


def gather(x: Any, dim: int, index: Any) -> Tensor:
    return as_tensor(x).gather(dim, index)


def cat(tensors: Any, dim: int = 0) -> Tensor:
    """``torch.cat``: concatenation along ``dim`` (zero-padded views summed, so it fuses)."""
    return _op("cat")(tensors, dim)


concat = cat


def stack(tensors: Any, dim: int = 0) -> Tensor:
    """``torch.stack``: a new dimension ``dim`` joining same-shaped tensors."""
    return _op("stack")(tensors, dim)


__all__ = [
    "enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled", "DType",
    "Tensor", "to_array", "as_tensor", "where", "float32", "float64", "bfloat16", "int64",
    "int32", "bool",
    "float", "double", "long", "manual_seed", "initial_seed", "tensor", "from_numpy", "zeros",
    "ones", "full", "zeros_like", "ones_like", "rand", "randn", "rand_like", "randn_like",
    "arange", "matmul", "exp", "log",
    "tanh", "sigmoid", "relu", "sqrt", "abs", "sum", "mean", "maximum", "minimum", "clamp",
    "argmax", "softmax", "log_softmax", "gather", "cat", "concat", "stack", "device",
    "addmm", "addmv", "baddbmm", "bmm", "chunk", "diag", "diag_embed", "diagonal", "dot",
    "einsum", "empty", "empty_like", "eye", "flip", "fliplr", "flipud", "full_like", "ger",
    "kron", "linspace", "logspace", "masked_fill", "meshgrid", "mm", "moveaxis", "movedim",
    "mv", "outer", "repeat_interleave", "roll", "split", "swapaxes", "swapdims", "tile",
    "tril", "tril_indices", "triu", "triu_indices", "unbind", "unflatten", "t", "narrow",
    "select",
    "argsort", "argwhere", "index_add", "index_copy", "index_fill", "index_put",
    "index_select", "kthvalue", "masked_select", "msort", "nonzero", "scatter",
    "scatter_add", "scatter_reduce", "sort", "take_along_dim", "topk",
    "all", "aminmax", "any", "count_nonzero", "cummax", "cummin", "cumprod", "cumsum",
    "logcumsumexp", "norm", "prod", "std", "std_mean", "var", "var_mean", "argmin", "max",
    "min", "amax", "amin", "lerp", "broadcast_shapes", "broadcast_tensors", "randint",
    "randint_like", "randperm", "memory_format", "contiguous_format", "preserve_format",
    "channels_last",
    "diff", "rot90", "cross", "trapezoid", "trapz", "cumulative_trapezoid", "nansum",
    "nanmean", "tensordot", "inner", "vdot", "addr", "addbmm", "renorm", "atleast_1d",
    "atleast_2d", "atleast_3d", "hstack", "vstack", "row_stack", "dstack", "column_stack",
    "take", "diagflat", "vander", "block_diag", "cartesian_prod", "cdist", "cov", "corrcoef",
    "narrow_copy",
    "det", "logdet", "inverse", "slogdet", "qr", "svd", "pinverse",
    "median", "nanmedian", "quantile", "nanquantile", "mode", "searchsorted", "bucketize",
    "histc", "histogram", "bincount", "unique", "unique_consecutive",
]


def _table_function(d: Any) -> Any:
    """``gc.<op>`` for an op-table entry with ``"gc"`` in its ``api`` (``torch.<op>``)."""
    n_more = d.arity - 1

    def fn(input: Any, *args: Any, **kwargs: Any) -> Tensor:  # noqa: A002
        operands, rest = args[:n_more], args[n_more:]
        params = _op("bind_params")(d, rest, kwargs, d.name)
        return _op("apply_op")(d, input, *operands, **params)

    fn.__name__ = fn.__qualname__ = d.name
    fn.__doc__ = f"``torch.{d.name}``: elementwise ``{d.name}``."
    return fn


def _install_table() -> list[str]:
    from .ir.elementwise import SURFACE

    names = []
    for d in SURFACE:
        if "gc" in d.api and d.name not in globals():
            globals()[d.name] = _table_function(d)
            names.append(d.name)
    return names


def _method_form(name: str, number_input: bool) -> Any:
    """``gc.<name>(input, *args, **kwargs)``: ``input.<name>(*args, **kwargs)``, as
    ``torch.<name>`` is the method's functional form. ``number_input``: a Python number is
    accepted as ``input`` (PyTorch's Scalar overloads), the left operand of the same op;
    otherwise ``input`` must be a tensor, as PyTorch says when it is not. ``out=`` is not
    supported (a tensor written in place whose shape the call may change)."""

    def fn(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
        if kwargs.pop("out", None) is not None:
            raise NotImplementedError(f"graphc.{name}(out=...): assign the result instead "
                                      f"(out = graphc.{name}(...)), or use out.copy_(...)")
        if isinstance(input, Tensor):
            return getattr(input, name)(*args, **kwargs)
        if number_input and isinstance(input, (builtins.bool, int, builtins.float)) \
                and args and isinstance(args[0], Tensor):
            return _number_left(name, input, args[0], *args[1:], **kwargs)
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"``torch.{name}``: ``input.{name}(...)`` "
                  f"(:meth:`graphc.Tensor.{name}`).")
    return fn


def _number_left(name: str, x: Any, other: Tensor, alpha: Any = 1, *,
                 rounding_mode: str | None = None) -> Tensor:
    """``torch.add(2, t)`` & co.: the number as the left operand, with PyTorch's promotion
    for a Python number (``binary``); ``alpha`` scales ``other`` (``add``, ``sub``) and
    ``rounding_mode`` rounds the quotient (``div``) as the tensor forms do."""
    binary = _op("binary")
    if name in ("add", "sub"):
        return binary(name, x, other if alpha == 1 else other * alpha)
    if alpha != 1:
        raise TypeError(f"{name}() got an unexpected argument alpha")
    if name == "div":
        return _op("div")(x, other, rounding_mode=rounding_mode)
    if rounding_mode is not None:
        raise TypeError(f"{name}() got an unexpected keyword argument 'rounding_mode'")
    return binary(name, x, other)


def broadcast_shapes(*shapes: Any) -> tuple:
    """``torch.broadcast_shapes``: the shape every one of ``shapes`` broadcasts to (an int
    is a 1-d shape), or PyTorch's error naming the mismatch."""
    out: tuple = ()
    for s in shapes:
        s = (s,) if isinstance(s, int) else tuple(s)
        try:
            out = tuple(_shapes().broadcast(out, s))
        except ValueError as e:
            raise RuntimeError(f"Shape mismatch: objects cannot be broadcast to a single "
                               f"shape: {e}") from None
    return out


def broadcast_tensors(*tensors: Any) -> tuple:
    """``torch.broadcast_tensors``: each tensor expanded to the common shape (views of the
    inputs, gradients summed back as for ``expand``)."""
    ts = [as_tensor(t) for t in tensors]
    shape = broadcast_shapes(*(t.shape for t in ts))
    return tuple(t.expand(*shape) for t in ts)


def _shapes() -> Any:
    from .ir import shapes

    return shapes


def _install_forms() -> list[str]:
    """``gc.<name>`` for the methods of ``aliases.METHOD_FORMS`` and the second names of
    ``aliases.ALIASES`` (the same function as the name they stand for) that this module does
    not define itself."""
    from .aliases import ALIASES, METHOD_FORMS

    names = []
    for name, number_input in METHOD_FORMS.items():
        if name not in globals():
            globals()[name] = _method_form(name, number_input)
            names.append(name)
    for alias, name in ALIASES.items():
        if alias not in globals():
            globals()[alias] = globals()[name]
            names.append(alias)
    return names


# ``gc.<op>`` for the op table's entries, the methods' functional forms and the aliases
# (graphc/__init__.py falls back to this module for them)
_FROM_TABLE = _install_table() + _install_forms()
