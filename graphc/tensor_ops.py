"""Tensor operations: each one lowers to IR ops through the current builder.

These functions are the shared body of ``Tensor`` methods, Python operators and
``graphc.nn.functional``; composite ops (mean, softmax, argmax, ...) are written here in terms
of IR primitives, so they get autodiff and native lowering for free.
"""

from __future__ import annotations

import builtins
import sys
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

from . import _context, amp
from ._tensor import (
    _EAGER,
    _FAST,
    Tensor,
    _is_one,
    builder,
    fast_accepts,
    fast_compute,
    leaf_node,
    repeated,
    result_castable,
    to_array,
)
from .autograd import is_grad_enabled
from .ir import Node
from .ir import dtypes as dt
from .ir import shapes as sh
from .ir.elementwise import SURFACE
from .ir.opdef import OpDef
from .ir.ops import OP_INFO

MinMax = namedtuple("MinMax", ["values", "indices"])


def _all_floats_bf16(ts: Sequence[Tensor]) -> bool:
    """Some operand is bf16 and every floating operand is (so the result would be bf16)."""
    return any(t.dtype is dt.bfloat16 for t in ts) and all(
        t.dtype is dt.bfloat16 or not t.dtype.is_float for t in ts)


def _round_floats(out: Any) -> Any:
    """float32 results (a tensor or a tuple of them) rounded to bf16, others unchanged."""
    if isinstance(out, Tensor):
        return out.to(dt.bfloat16) if out.dtype is dt.float32 else out
    if isinstance(out, tuple):
        return type(out)(*(_round_floats(o) for o in out)) if hasattr(out, "_fields") \
            else tuple(_round_floats(o) for o in out)
    return out


def in_float32(fn: Any = None, *, keep: tuple[str, ...] = ()) -> Any:
    """For ops PyTorch computes in one kernel (softmax, norms, attention): when the input (the
    first argument) is bf16, every bf16 tensor argument is computed in float32 and the
    floating results are rounded to bf16 once, instead of once per decomposed step; the result
    has the input's dtype even with float32 weights (PyTorch's mixed-type norms). ``keep``:
    arguments (by name) updated in place, such as running statistics, which are never copied.
    Other input dtypes pass through untouched."""
    import functools
    import inspect

    def deco(f: Any) -> Any:
        names = list(inspect.signature(f).parameters)

        @functools.wraps(f)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            first = args[0] if args else kwargs.get(names[0])
            if not (isinstance(first, Tensor) and first.dtype is dt.bfloat16):
                return f(*args, **kwargs)

            def up(name: str, a: Any) -> Any:
                if name in keep or not (isinstance(a, Tensor) and a.dtype is dt.bfloat16):
                    return a
                return a.float()

            args = tuple(up(names[i] if i < len(names) else "", a) for i, a in enumerate(args))
            return _round_floats(f(*args, **{k: up(k, v) for k, v in kwargs.items()}))

        return wrapped

    return deco if fn is None else deco(fn)


def as_tensor(x: Any, dtype: dt.DType | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x if dtype is None or x.dtype is dtype else _apply_cast(x, dtype)
    return Tensor._from_array(to_array(x, dtype))


def _apply(op: str, *xs: Tensor, **attrs: Any) -> Tensor:
    return Tensor._wrap(builder().op(op, [x.node for x in xs], **attrs))


def _wrap(n: Node) -> Tensor:
    return Tensor._wrap(n)


def _apply_cast(x: Tensor, dtype: dt.DType) -> Tensor:
    return _wrap(builder().cast(x.node, dtype))


def _is_scalar(x: Any) -> bool:
    """A Python or numpy number, or a symbolic size (``x.shape[0]`` of a traced batch, an
    integer expression the step evaluates when it runs, as PyTorch's SymInt)."""
    return isinstance(x, (bool, int, float, np.number, np.bool_)) or (
        isinstance(x, sympy.Expr) and x.is_integer is not False and bool(x.free_symbols))


def _scalar_kind(v: Any) -> Any:
    """The value ``dt.promote_scalar`` classifies: an integer for a symbolic size (one
    that is not an integer, ``n ** 0.5``, raises TypeError: the compile then fixes the
    sizes, as for ``int(n)``)."""
    if not isinstance(v, sympy.Basic):
        return v
    if v.is_integer is not True:
        raise TypeError(f"the symbolic size expression {v} is not an integer")
    return 1


def _category(d: dt.DType) -> int:
    return 0 if d is dt.bool_ else (2 if d.is_float else 1)


def _operands(a: Any, b: Any, op: str) -> tuple[Node, Node]:
    bld = builder()
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        an, bn = a.node, b.node
        # a 0-d tensor does not widen a dimensioned tensor of the same or a higher category
        # (bool < integer < float: PyTorch's rule), so ``bool_tensor + tensor(1)`` is int64
        if an.ndim == 0 and bn.ndim > 0 and _category(an.dtype) <= _category(bn.dtype):
            t = bn.dtype
        elif bn.ndim == 0 and an.ndim > 0 and _category(bn.dtype) <= _category(an.dtype):
            t = an.dtype
        else:
            t = dt.promote(an.dtype, bn.dtype)
        return bld.cast(an, t), bld.cast(bn, t)
    if isinstance(a, Tensor) and _is_scalar(b):
        t = dt.promote_scalar(a.dtype, _scalar_kind(_py(b)))
        an = a.node
        return bld.cast(an, t), _scalar(bld, _py(b), an.shape, t)
    if isinstance(b, Tensor) and _is_scalar(a):
        t = dt.promote_scalar(b.dtype, _scalar_kind(_py(a)))
        bn = b.node
        return _scalar(bld, _py(a), bn.shape, t), bld.cast(bn, t)
    if isinstance(a, Tensor):
        return _operands(a, as_tensor(b), op)
    if isinstance(b, Tensor):
        return _operands(as_tensor(a), b, op)
    raise TypeError(f"{op}: unsupported operand types {type(a).__name__}, {type(b).__name__}")


def _scalar(bld: Any, v: Any, shape: Any, t: dt.DType) -> Node:
    """A Python number as an operand of a tensor of ``shape``: a 0-d constant (the binary op
    broadcasts it). Eagerly the broadcast itself is built here as the value it evaluates to
    — the constant's 0-d array repeated by zero strides, read-only, as the constant, reshape
    and expand nodes give it — in one value-only leaf instead of three evaluated nodes (a
    third of an eager scalar op's time)."""
    if bld is not _EAGER or type(v) not in (bool, int, float) or not sh.is_concrete(shape):
        return bld.const(v, (), t)
    v = float(v) if t.is_float else (bool(v) if t is dt.bool_ else int(v))  # Builder.const's
    # np.array, not np.full's Python wrapper; the same conversion (bf16 keeps np.full's)
    arr = np.full((), v, dtype=t.np) if t is dt.bfloat16 else np.array(v, dtype=t.np)
    return leaf_node(repeated(arr, shape))


def _py(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def binary(op: str, a: Any, b: Any) -> Tensor:
    if _context.current() is None:
        out = (_eager_unrecorded(op, a, b, False) if isinstance(a, Tensor) else
               _eager_unrecorded(op, b, a, True) if isinstance(b, Tensor) else None)
        if out is not None:
            return Tensor(leaf_node(out))
        rec = _RECORDED.get(op)
        if rec is not None and is_grad_enabled():
            t = _eager_recorded(rec, op, a, b)
            if t is not None:
                return t
    x, y = _operands(a, b, op)
    bld = builder()
    if (op == "div" or OP_INFO[op].float_only) and not x.dtype.is_float:
        if OP_INFO[op].int_inputs == "reject":
            raise NotImplementedError(
                f'"{op}" not implemented for {_TORCH_NAME[x.dtype.name]!r}')
        x, y = bld.cast(x, dt.float32), bld.cast(y, dt.float32)  # as PyTorch: -> float32
    return _wrap(bld.binary(op, x, y))


# differentiable elementwise ops of a float result: ``_FAST``'s entries that
# ``_eager_recorded`` builds directly
_RECORDED = {name: f for name, f in _FAST.items()
             if OP_INFO[name].differentiable and not f[1] and not f[3]}
_RECORD_DTYPES = frozenset({dt.float32, dt.float64})
_BROADCAST: dict[tuple, tuple | None] = {}  # (shape, shape) -> their broadcast, or None


def _broadcast_shape(a: tuple, b: tuple) -> tuple | None:
    key = (a, b)
    try:
        return _BROADCAST[key]
    except KeyError:
        pass
    try:
        s = np.broadcast_shapes(a, b)
    except ValueError:
        s = None  # the general path raises the shape rule's error
    if len(_BROADCAST) < 4096:
        _BROADCAST[key] = s
    return s


def _eager_fmadd(x: Any, k: float, z: Tensor) -> np.ndarray | None:
    """``x * k + z`` rounded once (``fmadd``'s reference) for eager tensors ``x`` and ``z``
    of one float32/float64 dtype that no graph records, or None for the general path."""
    if (not isinstance(x, Tensor) or x._trace is not None or not x._plain_node
            or not z._plain_node):
        return None
    xn, zn = x._node, z._node
    d = zn.dtype
    if xn.dtype is not d or d not in _RECORD_DTYPES or (
            is_grad_enabled() and (xn.rg or zn.rg)):
        return None
    return fast_compute(_FAST["fmadd"], d, (xn._value, np.array(k, dtype=d.np), zn._value))


def _broadcast(n: Node, shape: tuple) -> Node:
    """``EagerBuilder.broadcast_to(n, shape)``; a 0-d operand on a gradient path (``b * x``
    with a scalar parameter ``b``) gets its reshape and expand nodes here directly, with
    the values that method gives them (the one element repeated by zero strides)."""
    if n.shape or not n.rg or n.op in ("reshape", "expand", "const") or not shape:
        return _EAGER.broadcast_to(n, shape)
    full = (1,) * len(shape)
    v = n._value.reshape(full)
    r = Node("reshape", (n,), full, n.dtype, {"shape": full})
    r.rg, r._value = True, v
    e = Node("expand", (r,), shape, n.dtype, {"shape": shape})
    e.rg = True
    e._value = repeated(v, shape) if v.flags.c_contiguous else np.broadcast_to(v, shape)
    return e


def _eager_recorded(fast: tuple, op: str, a: Any, b: Any) -> Tensor | None:
    """An eager differentiable binary op that autograd records (an operand requires grad,
    grad mode on), built as ``_operands`` and ``Builder.binary`` build it — the same
    nodes (a Python number as a zero-stride leaf, the broadcast of an operand as its
    reshape and expand nodes), the same reference on the same operand values — without
    their general machinery: the dtype rules reduce to "both float32 or both float64"
    (or a Python number with one), the shape rule to a memoised broadcast. Anything else
    (other dtypes, traced tensors, numpy scalars) returns None for the general path."""
    if isinstance(a, Tensor):
        if a._trace is not None or not a._plain_node:
            return None
        an = a._node
        d = an.dtype
        if isinstance(b, Tensor):
            bn = b._node
            if b._trace is not None or bn.dtype is not d or not b._plain_node:
                return None
        else:
            bn = None
            other = b
    elif isinstance(b, Tensor):
        if b._trace is not None or not b._plain_node:
            return None
        bn = b._node
        d = bn.dtype
        an = None
        other = a
    else:
        return None
    if d not in _RECORD_DTYPES:
        return None
    if an is None or bn is None:  # a Python number with a tensor: a leaf of its shape
        to = type(other)
        if to is not float and to is not int:
            return None
        tn = an if bn is None else bn
        if not tn.rg:
            return None
        leaf = leaf_node(repeated(np.array(float(other), dtype=d.np), tn.shape))
        an, bn = (tn, leaf) if bn is None else (leaf, tn)
        shape = tn.shape
    else:
        if not (an.rg or bn.rg):
            return None
        shape = an.shape
        if bn.shape != shape:
            shape = _broadcast_shape(shape, bn.shape)
            if shape is None:
                return None
            an, bn = _broadcast(an, shape), _broadcast(bn, shape)
    value = fast_compute(fast, d, (an._value, bn._value))
    if value is None:
        return None
    node = Node(op, (an, bn), shape, d, {})
    node.rg = True
    node._value = value
    return Tensor(node)


def muladd(x: Any, y: Any, z: Any) -> Tensor:
    """``x * y + z`` rounded once (the IR's ``fmadd``), broadcast and typed as ``x * y +
    z`` is: the dimensioned tensors share one float dtype, a 0-d float tensor (a traced
    learning rate) takes it as a Python number would (PyTorch's 0-d rule, ATen's scalar
    ``alpha`` in the kernel's type); anything else (mixed dtypes, integers, two numbers)
    is ``z + x * y``."""
    d = None
    ok = isinstance(z, Tensor) and (isinstance(x, Tensor) or isinstance(y, Tensor))
    tensors = [v for v in (x, y, z) if isinstance(v, Tensor)]
    for v in (x, y, z):
        if not isinstance(v, Tensor) and type(v) not in (int, float):
            ok = False
    if ok:
        dims = [t.dtype for t in tensors if t.ndim > 0] or [t.dtype for t in tensors]
        d = dims[0]
        ok = d.is_float and all(t is d for t in dims) and all(
            t.dtype.is_float for t in tensors)
    if not ok:
        return z + x * y
    bld = builder()
    shape: Any = ()
    for t in tensors:
        shape = sh.broadcast(shape, t.node.shape, "fmadd")
    ops = []
    for v in (x, y, z):
        n = bld.cast(v.node, d) if isinstance(v, Tensor) else _scalar(bld, v, shape, d)
        ops.append(bld.broadcast_to(n, shape))
    return _wrap(bld.op("fmadd", tuple(ops)))


def _eager_unrecorded(op: str, t: Tensor, other: Any, reverse: bool) -> np.ndarray | None:
    """An eager binary op that no autograd graph records (``x * y`` of plain tensors, an
    optimizer's ``lr * p.grad`` under ``no_grad``), computed straight from the values: the
    result ``_operands`` and ``Builder.binary`` would give (same dtype rule, the op table's
    reference, numpy broadcasting) without their cast, constant and broadcast nodes. ``t``
    is the tensor operand, ``other`` the other one (the left one when ``reverse``).
    Anything else (an operand on a gradient path, dtypes that promote, a traced or bf16
    operand, a tensor of another class, int / int) returns None for the general path."""
    tn = t._node
    grad = is_grad_enabled()
    if (grad and tn.rg) or t._trace is not None or not t._plain_node:
        return None
    fast = _FAST.get(op)
    d = tn.dtype
    if fast is None or (op == "div" and not d.is_float):  # int / int is float32
        return None
    to = type(other)
    if isinstance(other, Tensor):
        on = other._node
        if (other._trace is not None or on.dtype is not d or (grad and on.rg)
                or not other._plain_node):
            return None
        ov = on._value
    elif to is float:
        if not d.is_float:
            return None
        ov = np.array(other, dtype=d.np)
    elif to is int and d is not dt.bool_:
        ov = np.array(other, dtype=d.np)
    else:
        return None
    tv = tn._value
    if tv is None or ov is None or not fast_accepts(fast, d):
        return None
    return fast_compute(fast, d, (ov, tv) if reverse else (tv, ov))


_TORCH_NAME = dt.TORCH_NAMES


def unary(op: str, x: Any) -> Tensor:
    x = as_tensor(x)
    n = x.node
    d = OP_INFO[op]
    if d.float_only and not n.dtype.is_float:
        if d.int_inputs == "reject":
            raise RuntimeError(f'"{op}" not implemented for {_TORCH_NAME[n.dtype.name]!r}')
        n = builder().cast(n, dt.float32)  # as PyTorch: integers -> float32
    return _wrap(builder().op(op, (n,)))


def where(cond: Any, a: Any = None, b: Any = None) -> Any:
    """``torch.where``: ``a`` where ``cond`` holds, else ``b``; with the condition alone,
    ``cond.nonzero(as_tuple=True)`` (eager only: its size depends on the data)."""
    if a is None and b is None:
        return as_tensor(cond).nonzero(as_tuple=True)
    if a is None or b is None:
        raise TypeError("where() takes a condition alone or a condition and two values "
                        "(input, other)")
    if _context.current() is None:
        v = _eager_where(cond, a, b)
        if v is not None:
            return Tensor(leaf_node(v))
    c = as_tensor(cond)
    if c.dtype is not dt.bool_:
        c = c.to(dt.bool_)
    x, y = _operands(a if isinstance(b, Tensor) else as_tensor(a), b, "where")
    return _wrap(builder().where(c.node, x, y))


def _eager_where(cond: Any, a: Any, b: Any) -> np.ndarray | None:
    """An eager ``where`` that no autograd graph records (a loss's masks, ``clamp``'s
    selections on targets): ``np.where`` on the values, as the ``where`` node's reference
    computes it after ``_operands`` types and broadcasts them — for a bool condition and
    operands of one dtype (or a Python number that keeps a tensor's dtype); anything else
    returns None for the general path."""
    if not (isinstance(cond, Tensor) and cond._trace is None and cond._plain_node):
        return None
    cn = cond._node
    if cn.dtype is not dt.bool_:
        return None
    grad = is_grad_enabled()
    d = None
    for v in (a, b):
        if isinstance(v, Tensor):
            n = v._node
            if v._trace is not None or not v._plain_node or (grad and n.rg) or (
                    d is not None and n.dtype is not d):
                return None
            d = n.dtype
    if d is None or d is dt.bfloat16:
        return None
    vals = []
    for v in (a, b):
        if isinstance(v, Tensor):
            vals.append(v._node._value)
        elif (type(v) is float and d.is_float) or (type(v) is int and d is not dt.bool_):
            vals.append(np.array(v, dtype=d.np))
        else:
            return None
    return np.where(cn._value, vals[0], vals[1])


# -- reductions -------------------------------------------------------------------------
def _reduce_axes(x: Tensor, dim: Any) -> tuple[int, ...]:
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None
    return sh.norm_axes(dim, x.ndim, "reduce")


def _drop(n: Node, axes: Sequence[int], keepdim: bool) -> Node:
    if keepdim:
        return n
    return builder().reshape(n, [d for i, d in enumerate(n.shape) if i not in axes])


def sum(x: Tensor, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:  # noqa: A001
    if (dim is None and dtype is None and not keepdim and type(x) is Tensor
            and x._trace is None and _context.current() is None):
        t = _eager_sum_all(x._node)
        if t is not None:
            return t
    x = as_tensor(x)
    n = x.node
    if dtype is not None:
        n = builder().cast(n, dt.as_dtype(dtype))
    elif not n.dtype.is_float:
        n = builder().cast(n, dt.int64)
    axes = _reduce_axes(x, dim)
    if not axes:
        return _wrap(n)
    return _wrap(_drop(builder().op("sum", (n,), axes=axes), axes, keepdim))


def _eager_sum_all(n: Node) -> Tensor | None:
    """An eager ``x.sum()`` of a float32/float64 tensor, built as the general path builds
    it — the ``sum`` node over every axis (kept) and the reshape to 0-d, or one value-only
    leaf where nothing records it — with the interpreter's reduction, without the axis
    normalisation, shape rules and node machinery (a third of the op's time each)."""
    d = n.dtype
    if d not in _RECORD_DTYPES or not n.shape:
        return None
    axes = tuple(range(len(n.shape)))
    kept = np.add.reduce(n._value, axis=axes, keepdims=True, dtype=d.np)
    if not (n.rg and is_grad_enabled()):
        return Tensor(leaf_node(kept.reshape(())))
    node = Node("sum", (n,), (1,) * len(axes), d, {"axes": axes})
    node.rg = True
    node._value = kept
    return Tensor(_EAGER.reshape(node, ()))


def mean(x: Tensor, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    x = as_tensor(x)
    n = x.node
    if dtype is not None:
        n = builder().cast(n, dt.as_dtype(dtype))
    if not n.dtype.is_float:
        raise RuntimeError(
            f"mean(): could not infer output dtype. Input dtype must be either a floating point "
            f"or complex dtype. Got: {x.dtype.name}"
        )
    axes = _reduce_axes(x, dim)
    bld = builder()
    count = sh.numel([n.shape[a] for a in axes])
    s = bld.op("sum", (n,), axes=axes) if axes else n
    s = bld.div(s, bld.const(count, (), n.dtype))
    return _wrap(_drop(s, axes, keepdim))


def amax(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    x = as_tensor(x)
    axes = _reduce_axes(x, dim)
    if not axes:
        return x
    return _wrap(_drop(builder().op("max", (x.node,), axes=axes), axes, keepdim))


def _flip(x: Tensor) -> Tensor:
    """An order-reversing map that never overflows: ``-x`` for floats, ``-1 - x`` for
    integers (``-x`` wraps at the type's minimum), ``not x`` for bools."""
    if x.dtype.is_float:
        return -x
    if x.dtype is dt.bool_:
        return where(x, False, True)
    return -1 - x


def amin(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return _flip(amax(_flip(as_tensor(x)), dim, keepdim))


def argmax(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum (NaN counts as the maximum, as in PyTorch)."""
    x = as_tensor(x)
    bld = builder()
    if dim is None:
        flat = x.reshape(-1)
        return argmax(flat, 0, False) if not keepdim else \
            argmax(flat, 0, False).reshape([1] * x.ndim)
    ax = sh.norm_axis(dim, x.ndim, "argmax")
    n = x.node
    m = bld.op("max", (n,), axes=(ax,))
    hit = bld.op("eq", (n, bld.expand(m, n.shape)))
    if n.dtype.is_float:
        hit = bld.op("or", (hit, bld.op("ne", (n, n))))
    size = n.shape[ax]
    iota = bld.op("iota", (), shape=n.shape, dtype=dt.int64, axis=ax)
    cand = bld.where(hit, iota, bld.const(size, n.shape, dt.int64))
    first = bld.neg(bld.op("max", (bld.neg(cand),), axes=(ax,)))
    return _wrap(_drop(first, (ax,), keepdim))


def argmin(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return argmax(_flip(as_tensor(x)), dim, keepdim)


def max(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001
    """``max(x)`` -> 0-d tensor; ``max(x, dim)`` -> (values, indices), gradient to the index."""
    x = as_tensor(x)
    if isinstance(dim, Tensor):
        return binary("maximum", x, dim)
    if dim is None:
        return amax(x)
    idx = argmax(x, dim, keepdim=True)
    ax = sh.norm_axis(dim, x.ndim, "max")
    vals = _wrap(builder().op("gather", (x.node, idx.node), axis=ax))
    if not keepdim:
        vals, idx = vals.squeeze(ax), idx.squeeze(ax)
    return MinMax(vals, idx)


def min(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001
    x = as_tensor(x)
    if isinstance(dim, Tensor):
        return binary("minimum", x, dim)
    if dim is None:
        return amin(x)
    idx = argmin(x, dim, keepdim=True)
    ax = sh.norm_axis(dim, x.ndim, "min")
    vals = _wrap(builder().op("gather", (x.node, idx.node), axis=ax))
    if not keepdim:
        vals, idx = vals.squeeze(ax), idx.squeeze(ax)
    return MinMax(vals, idx)


def logsumexp(x: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    x = as_tensor(x)
    if any(x.shape[a] == 0 for a in _reduce_axes(x, dim)):  # log(0): -inf, as PyTorch
        out = x.exp().sum(dim, keepdim=True).log()  # (amax has no empty reduction)
    else:
        m = amax(x, dim, keepdim=True).detach()
        m = where(m.abs() == float("inf"), 0.0, m)
        out = (x - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dim) if isinstance(dim, int) else \
        _wrap(_drop(out.node, _reduce_axes(x, dim), False))


@in_float32
def softmax(x: Tensor, dim: int) -> Tensor:
    x = as_tensor(x)
    m = amax(x, dim, keepdim=True).detach()
    e = (x - m).exp()
    return e / e.sum(dim, keepdim=True)


@in_float32
def log_softmax(x: Tensor, dim: int) -> Tensor:
    x = as_tensor(x)
    m = amax(x, dim, keepdim=True).detach()
    s = x - m
    return s - s.exp().sum(dim, keepdim=True).log()


def var(x: Tensor, dim: Any = None, correction: int = 1, keepdim: bool = False) -> Tensor:
    x = as_tensor(x)
    axes = _reduce_axes(x, dim)
    n = sh.numel([x.shape[a] for a in axes])
    mu = x.mean(axes, keepdim=True)
    d = x - mu
    # PyTorch divides by max(n - correction, 0): no values (or too few) give 0/0 = NaN
    dof = sh.nonneg(sh.dim(n) - correction)
    ssq = (d * d).sum(axes, keepdim=keepdim)
    return ssq / _wrap(builder().const(dof, (), ssq.dtype))


# -- movement ---------------------------------------------------------------------------
def _shape_args(args: Sequence[Any]) -> list[Any]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return list(args[0])
    return list(args)


def reshape(x: Tensor, *shape: Any) -> Tensor:
    return _wrap(builder().reshape(x.node, _shape_args(shape)))


VIEW_INCOMPATIBLE = (
    "view size is not compatible with input tensor's size and stride (at least one dimension "
    "spans across two contiguous subspaces). Use .reshape(...) instead.")


def view(x: Tensor, *shape: Any) -> Tensor:
    """``reshape`` that never copies. Eagerly a layout the new shape cannot view (a
    transpose or a column slice, flattened) raises torch's error where ``reshape`` would
    silently copy, so an in-place op on a ``view`` always writes its base, as in PyTorch. A
    traced tensor has no strides (the IR is functional), so there it is ``reshape``."""
    out = reshape(x, *shape)
    if x._trace is None and _context.current() is None:
        a, r = x._node._value, out._node._value
        if a is not None and r is not None and a.size > 1 and not np.may_share_memory(a, r):
            raise RuntimeError(VIEW_INCOMPATIBLE)
    return out


def permute(x: Tensor, *dims: Any) -> Tensor:
    d = [sh.norm_axis(int(a), x.ndim, "permute") for a in _shape_args(dims)]
    if sorted(d) != list(range(x.ndim)):
        raise RuntimeError(f"permute(): dims {d} are not a permutation of {x.ndim} dims")
    return _wrap(builder().permute(x.node, d))


def transpose(x: Tensor, d0: int, d1: int) -> Tensor:
    n = x.ndim
    if n == 0:
        return x
    d0, d1 = sh.norm_axis(d0, n, "transpose"), sh.norm_axis(d1, n, "transpose")
    perm = list(range(n))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _wrap(builder().permute(x.node, perm))


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if x.ndim == 0:
        return x.reshape(1)
    s = sh.norm_axis(start_dim, x.ndim, "flatten")
    e = sh.norm_axis(end_dim, x.ndim, "flatten")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shp = list(x.shape)
    return x.reshape(shp[:s] + [sh.numel(shp[s:e + 1])] + shp[e + 1:])


def unsqueeze(x: Tensor, d: int) -> Tensor:
    d = sh.norm_axis(d, x.ndim + 1, "unsqueeze")
    shp = list(x.shape)
    return x.reshape(shp[:d] + [1] + shp[d:])


def squeeze(x: Tensor, d: Any = None) -> Tensor:
    shp = list(x.shape)
    if d is None:
        return x.reshape([s for s in shp if s != 1])
    axes = sh.norm_axes(d, x.ndim, "squeeze")
    return x.reshape([s for i, s in enumerate(shp) if not (i in axes and s == 1)])


def expand(x: Tensor, *sizes: Any) -> Tensor:
    sizes = _shape_args(sizes)
    lead = len(sizes) - x.ndim
    full = [x.shape[i - lead] if (s == -1 and i >= lead) else s for i, s in enumerate(sizes)]
    return _wrap(builder().broadcast_to(x.node, full))


@amp.lower_precision
def matmul(a: Any, b: Any) -> Tensor:
    a, b = as_tensor(a), as_tensor(b)
    if a.dtype is not b.dtype:
        from .ir import user_location

        loc = user_location()
        raise TypeError(
            f"matmul: expected both operands to have the same dtype, got {a.dtype.name} "
            f"{list(a.shape)} @ {b.dtype.name} {list(b.shape)}" + (f" (at {loc})" if loc else "")
        )
    an, bn = a.node, b.node
    if len(an.shape) == 2 and len(bn.shape) == 2:  # the common case, without the batch rules
        return _wrap(builder().op("matmul", (an, bn)))
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D")
    if a.ndim == 1 and b.ndim == 1:
        return (a.unsqueeze(0) @ b.unsqueeze(1)).reshape(())
    if a.ndim == 1:
        return (a.unsqueeze(0) @ b).squeeze(-2)
    if b.ndim == 1:
        return (a @ b.unsqueeze(1)).squeeze(-1)
    bld = builder()
    if b.ndim == 2 and a.ndim > 2:
        lead = list(a.shape[:-1])
        flat = bld.reshape(a.node, [-1, a.shape[-1]])
        out = bld.op("matmul", (flat, b.node))
        return _wrap(bld.reshape(out, lead + [b.shape[-1]]))
    batch = sh.broadcast(a.shape[:-2], b.shape[:-2], "matmul")
    an = bld.broadcast_to(a.node, tuple(batch) + tuple(a.shape[-2:]))
    bn = bld.broadcast_to(b.node, tuple(batch) + tuple(b.shape[-2:]))
    return _wrap(bld.op("matmul", (an, bn)))


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """PyTorch's values (``min(max(x, lo), hi)``: inverted bounds give ``hi``, NaN stays NaN)
    and PyTorch's gradient: 1 where ``lo <= x <= hi`` (bounds included), else 0 (a
    ``maximum``/``minimum`` tie would split it in halves). Bounds that are tensors needing a
    gradient keep the ``maximum``/``minimum`` form, which differentiates them too."""
    out = as_tensor(x)
    if min is not None:
        out = binary("maximum", out, min)
    if max is not None:
        out = binary("minimum", out, max)
    x = as_tensor(x)
    bounds = [b for b in (min, max) if b is not None]
    if not out.requires_grad or any(isinstance(b, Tensor) and b.requires_grad for b in bounds):
        return out
    inside = None
    if min is not None:
        inside = x >= min
    if max is not None:
        le = x <= max
        inside = le if inside is None else where(inside, le, False)
    return where(inside, x, out.detach())


def slice_dims(x: Tensor, starts: Sequence[Any], stops: Sequence[Any],
               steps: Sequence[int] | None = None) -> Tensor:
    """The ``slice`` view with resolved bounds (identity slices are dropped)."""
    n = x.node
    steps = tuple(steps) if steps is not None else (1,) * n.ndim
    if all(sh.same(b, 0) and sh.same(e, d) and st == 1
           for b, e, st, d in zip(starts, stops, steps, n.shape)):
        return x
    return _wrap(builder().op("slice", (n,), starts=tuple(sh.dim(b) for b in starts),
                              stops=tuple(sh.dim(e) for e in stops), steps=steps))


def pad(x: Tensor, pads: Sequence[tuple[Any, Any]]) -> Tensor:
    """Zero padding, one (before, after) pair per dim (the ``pad`` view)."""
    if all(sh.same(lo, 0) and sh.same(hi, 0) for lo, hi in pads):
        return x
    return _wrap(builder().op("pad", (x.node,), pads=tuple((sh.dim(lo), sh.dim(hi))
                                                            for lo, hi in pads)))


def _key_text(k: Any) -> str:
    if k is Ellipsis:
        return "..."
    if isinstance(k, slice):
        text = f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}"
        return text + ("" if k.step is None else f":{k.step}")
    return repr(k)


def _advanced_index_message(x: Tensor, key: tuple, pos: int, k: Any) -> str:
    """Why ``x[key]`` is refused and what to write instead, with code that exists in graphc.

    Advanced indexing (lists, arrays and tensors of indices, boolean masks) is not an op here:
    indices read from data give gathers, and masks give shapes that depend on the data, which
    a compiled step cannot have. Each suggestion is built from ``key`` so it can be pasted."""
    shape = tuple(k.shape) if isinstance(k, Tensor) else np.shape(k)
    shown = repr(k) if len(repr(k)) <= 40 else f"a {type(k).__name__} of shape {shape}"
    what = (f"indexing a Tensor with {shown} ({type(k).__name__}) is not supported: graphc "
            "indexes with ints, slices, None and ... only")
    if not isinstance(k, (Tensor, list, tuple, np.ndarray)):
        return what
    if isinstance(k, Tensor):  # its values are known only eagerly, not while tracing
        values = k.numpy() if _context.current() is None else None
        is_mask = k.dtype is dt.bool_
    else:
        values = np.asarray(k)
        is_mask = values.dtype.kind == "b"
    if is_mask:
        return (f"{what}; a boolean mask selects a data-dependent number of elements; keep the "
                "shape with gc.where(mask, x, 0) (and sum or mean with the mask as weights)")
    # the dimension k indexes in the result: slices and None before it keep or add one,
    # ints drop theirs, an ellipsis stands for the dims the rest of the key does not use
    used = builtins.sum(1 for kk in key if kk is not None and kk is not Ellipsis)
    dim = 0
    for kk in key[:pos]:
        if kk is Ellipsis:
            dim += x.ndim - used
        elif kk is None or isinstance(kk, slice):
            dim += 1
    before = "".join(_key_text(kk) + ", " for kk in key[:pos])
    after = "".join(", " + _key_text(kk) for kk in key[pos + 1:])
    if values is not None and values.dtype.kind in "iu" and values.ndim == 1 \
            and 0 < values.size <= 8:
        parts = [f"x[{before}{i}:{'' if i == -1 else i + 1}{after}]" for i in values.tolist()]
        alt = parts[0] if len(parts) == 1 else f"gc.cat([{', '.join(parts)}], dim={dim})"
        if any(isinstance(kk, (int, np.integer)) for kk in key[:pos]):
            return f"{what}; for these indices write {alt} (a slice keeps the dimension)"
        return (f"{what}; for these indices write {alt} (a slice keeps the dimension), or "
                f"x.gather({dim}, index) with a non-negative int64 index expanded to the "
                "result's shape")
    return (f"{what}; for indices held in a tensor use x.gather({dim}, index) with a "
            "non-negative int64 index expanded to the result's shape (differentiable, compiled "
            "with bounds checks), or gc.cat of slices for a few fixed indices")


# the advanced-indexing front end (``index_ops``) installs itself here: tensor, list and
# mask indices go to it, basic keys stay in ``getitem``
ADVANCED_GETITEM: list[Any] = [None]


def getitem(x: Tensor, key: Any) -> Tensor:
    """Indexing: ints, slices with positive steps, None and Ellipsis (views) here; lists,
    integer tensors and masks through the advanced-indexing front end."""
    if not isinstance(key, tuple):
        key = (key,)
    for pos, k in enumerate(key):
        if isinstance(k, (Tensor, list, np.ndarray, bool, np.bool_)) or (
                not isinstance(k, (int, np.integer, slice)) and k is not None
                and k is not Ellipsis):
            if ADVANCED_GETITEM[0] is not None and isinstance(
                    k, (Tensor, list, tuple, np.ndarray, bool, np.bool_)):
                return ADVANCED_GETITEM[0](x, key)
            raise NotImplementedError(_advanced_index_message(x, key, pos, k))
    n_ell = builtins.sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if n_ell:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (x.ndim - used) + key[i + 1:]
    else:
        key = key + (slice(None),) * (x.ndim - used)
    shape = list(x.shape)
    starts, stops, steps = [], [], []
    out_shape: list[Any] = []  # after the slice: ints dropped, None inserted
    d = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        size = shape[d]
        if isinstance(k, slice):
            st = 1 if k.step is None else int(k.step)
            if st <= 0:
                raise ValueError("step must be greater than zero")
            b, e = sh.resolve_slice(size, k.start, k.stop, st)
            starts.append(b)
            stops.append(e)
            steps.append(st)
            out_shape.append(sh.slice_len(b, e, st))
        else:
            i = int(k)
            if isinstance(size, int) and not -size <= i < size:
                raise IndexError(
                    f"index {i} is out of bounds for dimension {d} with size {size}")
            b = sh.dim(size + i) if i < 0 else i
            starts.append(b)
            stops.append(sh.dim(b + 1))
            steps.append(1)
        d += 1
    out = slice_dims(x, starts, stops, steps)
    return out.reshape(out_shape) if tuple(out_shape) != tuple(out.shape) else out


def cat(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Concatenation as a sum of zero-padded views: exact, and it fuses into consumers."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    ts = [t for t in ts if not (t.ndim == 1 and sh.same(t.shape[0], 0))] or ts[:1]
    if len(ts) == 1:
        return ts[0]
    t0 = ts[0]
    ax = sh.norm_axis(dim, t0.ndim, "cat")
    dtype = t0.dtype
    for t in ts[1:]:
        dtype = dt.promote(dtype, t.dtype)
        differ = [(a, b) for i, (a, b) in enumerate(zip(t.shape, t0.shape))
                  if i != ax and not sh.same(a, b)]
        if t.ndim != t0.ndim or differ:
            raise sh.mismatch(
                f"torch.cat(): sizes of tensors must match except in dimension {ax}, got "
                f"{tuple(t0.shape)} and {tuple(t.shape)}",
                differ if t.ndim == t0.ndim else [], RuntimeError)
    total = _sum_dims([t.shape[ax] for t in ts])
    out = None
    off: Any = 0
    for t in ts:
        pads = [(0, 0)] * t0.ndim
        pads[ax] = (off, sh.dim(total - off - t.shape[ax]))
        p = pad(t.to(dtype), pads)
        out = p if out is None else (out | p if dtype is dt.bool_ else out + p)
        off = sh.dim(off + t.shape[ax])
    return out


def stack(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise RuntimeError("stack expects a non-empty TensorList")
    ax = sh.norm_axis(dim, ts[0].ndim + 1, "stack")
    return cat([t.unsqueeze(ax) for t in ts], ax)


def _sum_dims(ds: Sequence[Any]) -> Any:
    total: Any = 0
    for d in ds:
        total = sh.dim(total + d)
    return total


def seed_tensor() -> Tensor:
    """An i64 scalar seed for counter-based random ops.

    Eagerly it is drawn now from the global generator; while tracing it is a run-time input
    drawn on every call of the compiled step (in the same order as eager execution draws).
    """
    ctx = _context.current()
    if ctx is not None:
        return _wrap(ctx.seed_input())
    from . import random as grandom

    return Tensor._from_array(np.array(grandom.next_seed(), np.int64))


def rand_like(x: Tensor) -> Tensor:
    """Uniform [0, 1) float32 values of ``x``'s shape from a fresh seed (the ``rand`` op)."""
    return _wrap(builder().op("rand", (seed_tensor().node,), shape=tuple(x.shape)))


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    ax = sh.norm_axis(dim, x.ndim, "gather")
    return _wrap(builder().op("gather", (x.node, as_tensor(index).node), axis=ax))


# -- attach to Tensor -------------------------------------------------------------------
def bind_params(d: OpDef, args: tuple, kwargs: dict, where: str) -> dict[str, Any]:
    """An op's parameters from positional and keyword arguments, torch's order and defaults;
    unknown or repeated names raise ``TypeError`` as a Python signature would."""
    names = [k for k, _ in d.params]
    if len(args) > len(names):
        raise TypeError(f"{where}() takes {len(names)} parameter(s) after the input "
                        f"({', '.join(names) or 'none'}), got {len(args)}")
    out = dict(d.params)
    out.update(zip(names, args))
    for k, v in kwargs.items():
        if k not in out:
            raise TypeError(f"{where}() got an unexpected keyword argument {k!r}")
        if k in names[:len(args)]:
            raise TypeError(f"{where}() got multiple values for argument {k!r}")
        out[k] = v
    return out


def apply_op(d: OpDef, *xs: Any, **params: Any) -> Tensor:
    """Apply an op-table entry: a primitive through its IR op, a composite through its
    decomposition (with this module as the op namespace)."""
    if d.kind == "composite":
        ts = [as_tensor(x) for x in xs]
        if d.float_only:
            ts = [_float_operand(d, t) for t in ts]
        if _all_floats_bf16(ts):
            # PyTorch runs these as one kernel that computes bf16 in float32 and rounds the
            # result once; decomposed op by op in bf16, each step would round
            wide = [t.float() if t.dtype is dt.bfloat16 else t for t in ts]
            return _round_floats(d.decompose(sys.modules[__name__], *wide, **params))
        return d.decompose(sys.modules[__name__], *ts, **params)
    if d.arity == 1:
        return unary(d.name, xs[0])
    return binary(d.name, *xs)


def div(a: Any, b: Any, *, rounding_mode: str | None = None) -> Tensor:
    """``torch.div`` / ``Tensor.div``: true division, or rounded toward zero (``"trunc"``)
    or minus infinity (``"floor"``) in the operands' promoted dtype (integers stay
    integers), with a zero gradient; either operand may be a Python number."""
    if rounding_mode is None:
        return binary("div", a, b)
    if rounding_mode not in ("trunc", "floor"):
        raise ValueError("div expected rounding_mode to be one of None, 'trunc', or "
                         f"'floor' but found '{rounding_mode}'")
    from .ir.elementwise import COMPOSITES

    name = "floor_divide" if rounding_mode == "floor" else "div_trunc"
    return apply_op(next(d for d in SURFACE + COMPOSITES if d.name == name), a, b)


def _float_operand(d: OpDef, t: Tensor) -> Tensor:
    if t.dtype.is_float:
        return t
    if d.int_inputs == "reject":
        raise RuntimeError(f'"{d.name}" not implemented for {_TORCH_NAME[t.dtype.name]!r}')
    return t.to(dt.float32)


def _method(d: OpDef) -> Any:
    op = d.name
    n_more = d.arity - 1

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        operands, rest = args[:n_more], args[n_more:]
        return apply_op(d, self, *operands, **bind_params(d, rest, kwargs, op))

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"``torch.Tensor.{op}``: ``{op}`` elementwise."
    return method


def _inplace_method(d: OpDef) -> Any:
    op = d.name
    n_more = d.arity - 1

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        operands, rest = args[:n_more], args[n_more:]
        out = apply_op(d, self, *operands, **bind_params(d, rest, kwargs, op + "_"))
        return self._assign(result_castable(out, self, op + "_()"))

    method.__name__ = method.__qualname__ = op + "_"
    method.__doc__ = f"``torch.Tensor.{op}_``: ``{op}`` written into this tensor."
    return method


def _install() -> None:
    T = Tensor

    def rb(op: str) -> Any:
        return lambda self, other: binary(op, other, self)

    def fb(op: str) -> Any:
        return lambda self, other: binary(op, self, other)

    def fast_inplace(op: str, slow: Any) -> Any:
        """``a op= b`` on an eager tensor that no autograd graph records (an optimizer's
        ``p -= lr * g`` under ``no_grad``): the value ``_eager_unrecorded`` computes
        for ``a op b``, written into ``a`` directly; anything else takes ``slow``."""
        def method(self: Tensor, other: Any) -> Tensor:
            if self._trace is None and _context.current() is None:
                v = _eager_unrecorded(op, self, other, False)
                if v is not None and v.shape == self._node.shape:
                    return self._write_eager(v)
            return slow(self, other)

        method.__name__ = slow.__name__
        return method

    for dunder, op in (("__iadd__", "add"), ("__isub__", "sub"), ("__imul__", "mul"),
                       ("__itruediv__", "div"), ("mul_", "mul")):
        setattr(T, dunder, fast_inplace(op, getattr(T, dunder)))

    def fast_inplace_alpha(op: str, slow: Any) -> Any:
        """``a.add_(b, alpha=k)`` / ``a.sub_(b, alpha=k)`` that no graph records (the
        optimizers' updates): the value ``Tensor.add`` gives (``b * k + a`` rounded once,
        ``_eager_fmadd``), written into ``a`` directly."""
        def method(self: Tensor, other: Any, alpha: Any = 1) -> Tensor:
            if self._trace is None and _context.current() is None:
                if _is_one(alpha):
                    v = _eager_unrecorded(op, self, other, False)
                elif type(alpha) in (int, float):
                    v = _eager_fmadd(other, alpha if op == "add" else -alpha, self)
                else:
                    v = None
                if v is not None and v.shape == self._node.shape:
                    return self._write_eager(v)
            return slow(self, other, alpha)

        method.__name__ = slow.__name__
        return method

    T.add_ = fast_inplace_alpha("add", T.add_)
    T.sub_ = fast_inplace_alpha("sub", T.sub_)

    # ATen's kernels that compute ``a * b + c`` in one expression round it once (they are
    # compiled with FMA contraction): ``add``/``sub`` with ``alpha``, ``addcmul``, ``lerp``
    def add(self: Tensor, other: Any, alpha: Any = 1) -> Tensor:
        """``torch.Tensor.add``: ``self + alpha * other``, one rounding (ATen's kernel)."""
        if _is_one(alpha):
            return binary("add", self, other)
        return muladd(other, alpha, self)

    def sub(self: Tensor, other: Any, alpha: Any = 1) -> Tensor:
        """``torch.Tensor.sub``: ``self - alpha * other``, one rounding (ATen's kernel)."""
        if _is_one(alpha):
            return binary("sub", self, other)
        return muladd(other, -alpha, self)

    def _in_float32(*ts: Any) -> list[Any] | None:
        """The operands in float32 where every tensor operand is bfloat16: ATen's bf16
        kernels compute the whole expression in float32 and round its result once (None:
        not all bfloat16)."""
        if any(isinstance(t, Tensor) and t.dtype is not dt.bfloat16 for t in ts):
            return None  # mixed dtypes promote as the general path types them
        if not isinstance(ts[0], Tensor):
            return None
        return [t.float() if isinstance(t, Tensor) else t for t in ts]

    def addcmul(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        """``torch.Tensor.addcmul``: ``self + (value * tensor1) * tensor2``, the last
        multiply-add rounded once (ATen's kernel)."""
        up = _in_float32(self, tensor1, tensor2)
        if up is not None:
            return addcmul(up[0], up[1], up[2], value=value).to(dt.bfloat16)
        t1 = tensor1 if _is_one(value) else tensor1 * value
        return muladd(t1, tensor2, self)

    def lerp(self: Tensor, end: Any, weight: Any) -> Tensor:
        """``torch.Tensor.lerp``, ATen's two branches, each one fused multiply-add:
        ``self + w * (end - self)`` for ``|w| < 0.5``, else ``end - (end - self) * (1 -
        w)``; a scalar ``w`` and ``1 - w`` are computed in the kernel's float type (float32
        for float32 and bfloat16 tensors), a tensor weight picks per element."""
        up = _in_float32(self, end, weight)
        if up is not None:
            return lerp(up[0], up[1], up[2]).to(dt.bfloat16)
        diff = end - self
        if isinstance(weight, Tensor) and weight.ndim > 0:
            return self._where(weight.abs() < 0.5, muladd(weight, diff, self),
                               muladd(-diff, 1 - weight, end))
        if isinstance(weight, Tensor):  # 0-d: a traced weight is a guard on the branch
            if weight.dtype is not self.dtype and weight.dtype.is_float:
                # a step's run-time scalar (float64) in the kernel's type, as a number is
                weight = weight.to(self.dtype)
            small = bool(weight.abs() < 0.5)
            return muladd(weight, diff, self) if small else muladd(-diff, 1 - weight, end)
        w = float(weight)
        if isinstance(self, Tensor) and self.dtype is not dt.float64:
            w32 = np.float32(w)
            small, omw = bool(abs(w32) < 0.5), float(np.float32(1) - w32)
        else:
            small, omw = abs(w) < 0.5, 1.0 - w
        return muladd(weight, diff, self) if small else muladd(-diff, omw, end)

    T.add, T.sub, T.addcmul, T.lerp = add, sub, addcmul, lerp
    T.__add__ = fb("add")
    T.__radd__ = rb("add")
    T.__sub__ = fb("sub")
    T.__rsub__ = rb("sub")
    T.__mul__ = fb("mul")
    T.__rmul__ = rb("mul")
    T.__truediv__ = fb("div")
    T.__rtruediv__ = rb("div")
    T.__pow__ = fb("pow")
    T.__rpow__ = rb("pow")
    T.__lt__ = fb("lt")
    T.__le__ = fb("le")
    T.__gt__ = fb("gt")
    T.__ge__ = fb("ge")
    T.__eq__ = fb("eq")  # type: ignore[assignment]
    T.__ne__ = fb("ne")  # type: ignore[assignment]
    from .ir.elementwise import COMPOSITES

    table = {d.name: d for d in SURFACE + COMPOSITES}

    def tb(name: str) -> Any:  # an op-table entry as an operator
        return lambda self, other: apply_op(table[name], self, other)

    def rtb(name: str) -> Any:
        return lambda self, other: apply_op(table[name], other, self)

    # ``&`` ``|`` ``^`` ``~`` ``<<`` ``>>``: bitwise on integers, logical on bools (PyTorch)
    for dunder, name in (("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor"),
                         ("lshift", "bitwise_left_shift"), ("rshift", "bitwise_right_shift"),
                         ("mod", "remainder"), ("floordiv", "floor_divide")):
        setattr(T, f"__{dunder}__", tb(name))
        setattr(T, f"__r{dunder}__", rtb(name))
    T.__invert__ = lambda self: apply_op(table["bitwise_not"], self)
    T.__neg__ = lambda self: unary("neg", self)
    T.__pos__ = lambda self: self
    T.__abs__ = lambda self: unary("abs", self)
    T.__matmul__ = lambda self, o: matmul(self, o)
    T.__rmatmul__ = lambda self, o: matmul(o, self)
    T.__getitem__ = getitem
    T._where = staticmethod(where)
    for d in SURFACE:  # methods the op table asks for: ``x.exp()`` and ``x.exp_()``
        if "Tensor" in d.api:
            setattr(T, d.name, _method(d))
            setattr(T, d.name + "_", _inplace_method(d))
    T.rsqrt = lambda self: 1.0 / unary("sqrt", self)
    T.mul = fb("mul")

    def div_(self: Tensor, other: Any, *, rounding_mode: str | None = None) -> Tensor:
        out = div(self, other, rounding_mode=rounding_mode)
        if out.dtype.is_float and not self.dtype.is_float:
            raise RuntimeError(f"result type {out.dtype.name} can't be cast to the desired "
                               f"output type {self.dtype.name}")
        return self._assign(out)

    T.div, T.div_ = div, div_
    # comparisons as methods (``x.eq(y)``; in place, the result in ``x``'s dtype)
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(T, name, fb(name))
        setattr(T, name + "_", (lambda op: lambda self, other: self._assign(
            binary(op, self, other)))(name))
    T.pow = fb("pow")
    T.maximum = fb("maximum")
    T.minimum = fb("minimum")
    T.sum = sum
    T.mean = mean
    T.max = max
    T.min = min
    T.amax = amax
    T.amin = amin
    T.argmax = argmax
    T.argmin = argmin
    T.logsumexp = logsumexp
    T.softmax = softmax
    T.log_softmax = log_softmax
    T.var = lambda self, dim=None, unbiased=True, keepdim=False: var(
        self, dim, 1 if unbiased else 0, keepdim)
    T.reshape = reshape
    T.view = view
    T.permute = permute
    T.transpose = transpose
    T.flatten = flatten
    T.unsqueeze = unsqueeze
    T.squeeze = squeeze
    T.expand = expand
    T.expand_as = lambda self, o: expand(self, *o.shape)
    T.view_as = lambda self, o: view(self, *o.shape)
    T.reshape_as = lambda self, o: reshape(self, *o.shape)
    T.matmul = matmul
    T.clamp = clamp
    T.clip = clamp
    T.gather = gather
    T.T = property(lambda self: permute(self, *reversed(range(self.ndim))))
    T.mT = property(lambda self: transpose(self, -2, -1))
    T.ravel = lambda self: reshape(self, -1)
    T.broadcast_to = lambda self, size: expand(self, *_shape_args((size,)))
    T.is_floating_point = lambda self: self.dtype.is_float
    T.is_complex = lambda self: False  # no complex dtypes
    T.is_signed = lambda self: self.dtype is not dt.bool_
    T.is_nonzero = _is_nonzero
    from .random_ops import METHODS as RANDOM_METHODS

    for name, fn in RANDOM_METHODS.items():  # uniform_, bernoulli_, multinomial, ...
        setattr(T, name, fn)
    T.float_power_ = _float_power_inplace(T.float_power_)
    from .aliases import ALIASES

    for alias, name in ALIASES.items():  # ``x.arccos()`` is ``x.acos()``, in place too
        setattr(T, alias, getattr(T, name))
        if hasattr(T, name + "_"):
            setattr(T, alias + "_", getattr(T, name + "_"))


def _float_power_inplace(table_form: Any) -> Any:
    """``Tensor.float_power_``: its result is float64, which PyTorch writes only into a
    float64 tensor (a float32 one raises rather than rounding the result back)."""
    def float_power_(self: Tensor, exponent: Any) -> Tensor:
        if self.dtype is not dt.float64:
            raise RuntimeError(f"the base given to float_power_ has dtype "
                               f"{_TORCH_NAME.get(self.dtype.name, self.dtype.name)} but the "
                               f"operation's result requires dtype Double")
        return table_form(self, exponent)

    return float_power_


def _is_nonzero(self: Tensor) -> bool:
    """``torch.Tensor.is_nonzero``: the truth of a one-element tensor (PyTorch's errors for
    none or several elements; traced, the value is data, as for ``bool(x)``)."""
    n = self.numel()
    if isinstance(n, int) and n != 1:
        what = "no values" if n == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {what} is ambiguous")
    return bool(self)


_install()

__all__ = ["as_tensor", "binary", "unary", "where", "_context", "cat", "stack", "pad",
           "getitem", "slice_dims"]
