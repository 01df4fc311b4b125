"""The op table: every primitive of the IR (``OpDef``), its kind and its shape/dtype rule.

``OP_INFO`` is the single list that every other rule table (interpreter, autodiff, CPU and PTX
lowering) derives from or is checked against by the tests. Elementwise primitives are complete
entries in ``elementwise.py`` (reference, derivative and lowering included); the op families
with real kernels (reductions, matmul, movement, indexing, convolution) are listed here and
their rules live with their kernels. Elementwise ops take inputs of identical shape: the
front end inserts explicit ``expand``/``reshape`` nodes for broadcasting, so that autodiff and
lowering never need to reason about implicit broadcasting. Reductions keep reduced dimensions
(size 1); the front end reshapes them away for ``keepdim=False``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy

from . import dtypes as dt
from . import loops
from . import shapes as sh
from .elementwise import COMPARE, ELEMENTWISE, LOGICAL
from .opdef import OpDef, OpInfo

_INFOS = [
    OpInfo("input", "leaf", 0, False),
    OpInfo("const", "leaf", 0, False),
    OpInfo("iota", "leaf", 0, False),
    OpInfo("rand", "leaf", 1, False),
    # the elementwise primitives: graphc/ir/elementwise.py, one full entry each
    *ELEMENTWISE,
    # reductions (keep dims)
    OpInfo("sum", "reduce", 1),
    OpInfo("max", "reduce", 1),
    # scans along one axis (inclusive; ``reverse`` scans from the end)
    OpInfo("cumsum", "scan", 1),
    OpInfo("cumprod", "scan", 1),
    OpInfo("cummax", "scan", 1),
    # log(cumsum(exp(x))) combined pairwise in log space (PyTorch's _log_add_exp_helper)
    OpInfo("logcumsumexp", "scan", 1, float_only=True),
    # linear algebra
    OpInfo("matmul", "matmul", 2),
    # movement
    OpInfo("reshape", "movement", 1),
    OpInfo("permute", "movement", 1),
    OpInfo("expand", "movement", 1),
    OpInfo("detach", "movement", 1, False),
    OpInfo("slice", "movement", 1),
    OpInfo("pad", "movement", 1),
    # the value of an affine normalisation (its first input) with its derivative in closed
    # form (passes/autodiff.py ``_affine_norm``); replaced by that input once differentiated
    OpInfo("affine_norm", "movement", -1),
    # indexing
    OpInfo("gather", "index", 2),
    OpInfo("scatter_add", "index", 3),
    OpInfo("sort", "index", 1, False),  # stable argsort along ``axis`` (int64 indices)
    # convolution and pooling (NCHW); the two gradient ops are the adjoints of conv2d
    OpInfo("conv2d", "nn", 2),
    OpInfo("conv2d_input_grad", "nn", 2),
    OpInfo("conv2d_weight_grad", "nn", 2),
    OpInfo("pool_argmax", "nn", 1, False),
    # scaled dot-product attention in one kernel (FlashAttention's row-wise form): (q, k, v)
    # -> softmax(q k^T * scale [+ causal mask]) v; its gradient op recomputes the scores and
    # (q, k, v, grad) returns dq, dk, dv stacked along the row axis ([..., L + 2S, E])
    # (an optional last operand: an additive float mask of shape [..., L, S])
    OpInfo("attention", "nn", -1),
    OpInfo("attention_grad", "nn", -1),
    # loops (graphc/ir/loops.py): a scan over a leading axis with carried state, its body a
    # nested graph; its results (a tuple) are read through scan_out
    OpInfo("scan", "loop", -1),
    OpInfo("scan_out", "loop", 1),
]

OP_INFO: dict[str, OpDef] = {i.name: i for i in _INFOS}

UNARY = tuple(i.name for i in _INFOS if i.kind == "elementwise" and i.arity == 1)
BINARY = tuple(i.name for i in _INFOS if i.kind == "elementwise" and i.arity == 2)
FLOAT_ONLY = tuple(i.name for i in _INFOS if i.float_only)


class OpError(ValueError):
    """An op was applied to operands of the wrong shape or dtype."""


Infer = Callable[[str, Sequence[Any], dict], tuple[sh.Shape, dt.DType]]
SHAPE_RULES: dict[str, Infer] = {}


def _rule(*names: str) -> Callable[[Infer], Infer]:
    def deco(fn: Infer) -> Infer:
        for n in names:
            SHAPE_RULES[n] = fn
        return fn

    return deco


def _fmt(x: Any) -> str:
    return f"{x.dtype.short}{sh.fmt_shape(x.shape)}"


@_rule("input", "const", "iota")
def _leaf(op, xs, a):
    return sh.shape(a["shape"]), a["dtype"]


@_rule("rand")
def _rand(op, xs, a):
    if xs[0].dtype is not dt.int64 or xs[0].shape != ():
        raise OpError(f"rand: seed must be an i64 scalar, got {_fmt(xs[0])}")
    return sh.shape(a["shape"]), dt.float32


@_rule(*[n for n in OP_INFO if OP_INFO[n].kind == "elementwise"])
def _elementwise(op, xs, a):
    s0 = xs[0].shape
    for x in xs[1:]:
        if not sh.same_shape(x.shape, s0):
            raise OpError(
                f"{op}: operands must have identical shapes (broadcast explicitly), got "
                + ", ".join(_fmt(x) for x in xs)
            )
    if op == "cast":
        return s0, a["dtype"]
    if op == "where":
        if xs[0].dtype is not dt.bool_:
            raise OpError(f"where: condition must be bool, got {_fmt(xs[0])}")
        if xs[1].dtype is not xs[2].dtype:
            raise OpError(f"where: branches must share a dtype, got {_fmt(xs[1])}, {_fmt(xs[2])}")
        return s0, xs[1].dtype
    if any(x.dtype is not xs[0].dtype for x in xs[1:]):
        raise OpError(f"{op}: operands must share a dtype, got "
                      + ", ".join(_fmt(x) for x in xs))
    if op in FLOAT_ONLY and not xs[0].dtype.is_float:
        raise OpError(f"{op}: expected a floating-point operand, got {_fmt(xs[0])}")
    if op in COMPARE or op in LOGICAL:
        if op in LOGICAL and xs[0].dtype is not dt.bool_:
            raise OpError(f"{op}: expected bool operands, got {_fmt(xs[0])}")
        return s0, dt.bool_
    return s0, xs[0].dtype


@_rule("sum", "max")
def _reduce(op, xs, a):
    axes = a["axes"]
    s = xs[0].shape
    for ax in axes:
        if not 0 <= ax < len(s):
            raise OpError(f"{op}: axis {ax} out of range for {_fmt(xs[0])}")
    return tuple(1 if i in axes else d for i, d in enumerate(s)), xs[0].dtype


@_rule("cumsum", "cumprod", "cummax", "logcumsumexp")
def _scan(op, xs, a):
    s = xs[0].shape
    if not 0 <= a["axis"] < len(s):
        raise OpError(f"{op}: axis {a['axis']} out of range for {_fmt(xs[0])}")
    if xs[0].dtype is dt.bool_:
        raise OpError(f"{op}: expected a numeric operand, got {_fmt(xs[0])}")
    if op == "cummax" and a.get("reverse"):
        raise OpError("cummax: only forward scans")
    if op == "logcumsumexp" and not xs[0].dtype.is_float:
        raise OpError(f"{op}: expected a float operand, got {_fmt(xs[0])}")
    return s, xs[0].dtype


@_rule("matmul")
def _matmul(op, xs, a):
    x, y = xs
    if len(x.shape) < 2 or len(y.shape) < 2:
        raise OpError(f"matmul: operands must be at least 2-D, got {_fmt(x)} @ {_fmt(y)}")
    if x.dtype is not y.dtype or not x.dtype.is_float:
        raise OpError(f"matmul: operands must share a float dtype, got {_fmt(x)} @ {_fmt(y)}")
    if not sh.same(x.shape[-1], y.shape[-2]):
        raise sh.mismatch(f"matmul: inner dimensions differ, {_fmt(x)} @ {_fmt(y)} "
                          f"({sh.fmt_dim(x.shape[-1])} != {sh.fmt_dim(y.shape[-2])})",
                          [(x.shape[-1], y.shape[-2])], OpError)
    if not sh.same_shape(x.shape[:-2], y.shape[:-2]):
        raise OpError(f"matmul: batch dimensions differ (expand explicitly), {_fmt(x)} @ {_fmt(y)}")
    return tuple(x.shape[:-1]) + (y.shape[-1],), x.dtype


@_rule("reshape")
def _reshape(op, xs, a):
    return sh.reshape(xs[0].shape, a["shape"], "reshape"), xs[0].dtype


@_rule("permute")
def _permute(op, xs, a):
    perm = a["perm"]
    if sorted(perm) != list(range(len(xs[0].shape))):
        raise OpError(f"permute: {perm} is not a permutation of the dims of {_fmt(xs[0])}")
    return tuple(xs[0].shape[p] for p in perm), xs[0].dtype


@_rule("detach")
def _detach(op, xs, a):
    return xs[0].shape, xs[0].dtype


@_rule("affine_norm")
def _affine_norm(op, xs, a):
    y, x, mean, invstd, count = xs[:5]
    extra = int(bool(a["weight"])) + int(bool(a["bias"]))
    if len(xs) != 5 + extra:
        raise OpError(f"affine_norm: expected {5 + extra} operands, got {len(xs)}")
    if not sh.same_shape(y.shape, x.shape) or y.dtype is not x.dtype:
        raise OpError(f"affine_norm: value {_fmt(y)} and input {_fmt(x)} differ")
    stat = tuple(1 if i in a["axes"] else d for i, d in enumerate(x.shape))
    for what, s in (("mean", mean), ("invstd", invstd)):
        if not sh.same_shape(s.shape, stat):
            raise OpError(f"affine_norm: {what} {_fmt(s)}, expected shape {sh.fmt_shape(stat)}")
    if count.shape != ():
        raise OpError(f"affine_norm: count must be 0-d, got {_fmt(count)}")
    return y.shape, y.dtype


@_rule("expand")
def _expand(op, xs, a):
    out = sh.shape(a["shape"])
    if len(out) != len(xs[0].shape) or not sh.can_expand(xs[0].shape, out):
        raise OpError(f"expand: cannot expand {_fmt(xs[0])} to {sh.fmt_shape(out)}")
    return out, xs[0].dtype


@_rule("gather")
def _gather(op, xs, a):
    x, idx = xs
    ax = a["axis"]
    if idx.dtype is not dt.int64:
        raise OpError(f"gather: index must be int64, got {_fmt(idx)}")
    if len(idx.shape) != len(x.shape):
        raise OpError(f"gather: index rank must equal input rank, got {_fmt(x)}, {_fmt(idx)}")
    for i, (d, e) in enumerate(zip(x.shape, idx.shape)):
        if i != ax and not sh.same(d, e):
            raise OpError(f"gather: dims other than {ax} must agree, got {_fmt(x)}, {_fmt(idx)}")
    return idx.shape, x.dtype


@_rule("sort")
def _sort(op, xs, a):
    s = xs[0].shape
    if not 0 <= a["axis"] < len(s):
        raise OpError(f"sort: axis {a['axis']} out of range for {_fmt(xs[0])}")
    return s, dt.int64


@_rule("scatter_add")
def _scatter_add(op, xs, a):
    base, idx, src = xs
    if idx.dtype is not dt.int64 or not sh.same_shape(idx.shape, src.shape):
        raise OpError(f"scatter_add: bad index/src {_fmt(idx)}, {_fmt(src)}")
    if base.dtype is not src.dtype:
        raise OpError(f"scatter_add: dtypes differ {_fmt(base)}, {_fmt(src)}")
    return base.shape, base.dtype


@_rule("slice")
def _slice(op, xs, a):
    """``starts``/``stops`` are resolved, in-range bounds; ``steps`` are positive."""
    s = xs[0].shape
    starts, stops, steps = a["starts"], a["stops"], a["steps"]
    if not len(starts) == len(stops) == len(steps) == len(s):
        raise OpError(f"slice: need one (start, stop, step) per dim of {_fmt(xs[0])}")
    if any(not isinstance(st, int) or st < 1 for st in steps):
        raise OpError(f"slice: steps must be positive ints, got {steps}")
    return tuple(sh.slice_len(b, e, st) for b, e, st in zip(starts, stops, steps)), xs[0].dtype


@_rule("pad")
def _pad(op, xs, a):
    """Zero padding: ``pads`` is one (before, after) pair of non-negative dims per dim."""
    s = xs[0].shape
    pads = a["pads"]
    if len(pads) != len(s) or any(isinstance(v, int) and v < 0 for p in pads for v in p):
        raise OpError(f"pad: need one non-negative (before, after) pair per dim of {_fmt(xs[0])},"
                      f" got {pads}")
    return tuple(sh.dim(d + lo + hi) for d, (lo, hi) in zip(s, pads)), xs[0].dtype


def _conv_check(op: str, x: Any, w: Any, a: dict) -> None:
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise OpError(f"{op}: expected 4-D operands, got {_fmt(x)}, {_fmt(w)}")
    # only the batch may be symbolic: channels, kernel and map sizes decide the kernel (the
    # implicit GEMM's packing, Winograd, register tiles) and every shape check here
    fixed = [x.shape[1:], w.shape[1:] if op == "conv2d_weight_grad" else w.shape]
    fixed += [sh.shape(a["input_shape"])[1:]] if "input_shape" in a else []
    fixed += [sh.shape(a["weight_shape"])] if "weight_shape" in a else []
    syms = frozenset(s for dims in fixed for d in dims if not isinstance(d, int)
                     for s in sympy.sympify(d).free_symbols)
    if syms:
        raise sh.ShapeError(
            f"{op}: a convolution's channels, kernel and map sizes must be fixed; only the "
            f"batch may be symbolic, got {_fmt(x)} and {_fmt(w)} (a weight passed as an "
            f"argument: leave its axes out of `dynamic`)", symbols=syms)
    if x.dtype is not w.dtype or not x.dtype.is_float:
        raise OpError(f"{op}: operands must share a float dtype, got {_fmt(x)}, {_fmt(w)}")
    for k in ("stride", "padding", "dilation"):
        if len(a[k]) != 2:
            raise OpError(f"{op}: {k} must be a pair, got {a[k]}")


def conv_out_hw(hw: Sequence[Any], kernel: Sequence[int], a: dict) -> tuple[Any, Any]:
    """Spatial output size of a convolution with the attrs of a conv op."""
    return tuple(sh.conv_out(hw[i], kernel[i], a["stride"][i], a["padding"][i],
                             a["dilation"][i]) for i in range(2))


@_rule("conv2d")
def _conv2d(op, xs, a):
    x, w = xs
    _conv_check(op, x, w, a)
    g = a["groups"]
    if not sh.same(x.shape[1], w.shape[1] * g) or w.shape[0] % g:
        raise OpError(f"conv2d: input {_fmt(x)} and weight {_fmt(w)} do not agree for "
                      f"groups={g}")
    oh, ow = conv_out_hw(x.shape[2:], w.shape[2:], a)
    if not (isinstance(oh, int) and isinstance(ow, int)) or oh < 1 or ow < 1:
        raise OpError(f"conv2d: output size ({oh}, {ow}) is not positive for {_fmt(x)}")
    return (x.shape[0], w.shape[0], oh, ow), x.dtype


@_rule("conv2d_input_grad")
def _conv2d_input_grad(op, xs, a):
    """(grad_out, weight) -> grad of conv2d's input, whose shape is the ``input_shape`` attr."""
    g, w = xs
    _conv_check(op, g, w, a)
    shape = sh.shape(a["input_shape"])
    if not sh.same(g.shape[0], shape[0]) or g.shape[1] != w.shape[0]:
        raise OpError(f"{op}: grad {_fmt(g)} does not match weight {_fmt(w)}")
    if tuple(conv_out_hw(shape[2:], w.shape[2:], a)) != tuple(g.shape[2:]):
        raise OpError(f"{op}: grad {_fmt(g)} is not the output of input {shape}")
    return shape, g.dtype


@_rule("conv2d_weight_grad")
def _conv2d_weight_grad(op, xs, a):
    """(input, grad_out) -> grad of conv2d's weight, whose shape is the ``weight_shape`` attr."""
    x, g = xs
    _conv_check(op, x, g, a)
    shape = sh.shape(a["weight_shape"])
    if not sh.same(g.shape[0], x.shape[0]) or g.shape[1] != shape[0]:
        raise OpError(f"{op}: grad {_fmt(g)} does not match input {_fmt(x)}")
    if tuple(conv_out_hw(x.shape[2:], shape[2:], a)) != tuple(g.shape[2:]):
        raise OpError(f"{op}: grad {_fmt(g)} is not the output of input {_fmt(x)}")
    return shape, x.dtype


@_rule("pool_argmax")
def _pool_argmax(op, xs, a):
    """Flat index (into H*W) of each max-pool window's maximum, as PyTorch's indices."""
    x = xs[0]
    if len(x.shape) != 4 or not x.dtype.is_float:
        raise OpError(f"pool_argmax: expected a 4-D float input, got {_fmt(x)}")
    k = a["kernel"]
    hw = tuple(sh.conv_out(x.shape[2 + i], k[i], a["stride"][i], a["padding"][i],
                           a["dilation"][i], a["ceil_mode"]) for i in range(2))
    return (x.shape[0], x.shape[1]) + hw, dt.int64


def _attention_check(op: str, q: Any, k: Any, v: Any) -> None:
    """q [*b, L, E], k and v [*b, S, E]: equal batch dims, one float dtype."""
    if len(q.shape) < 2 or len(k.shape) != len(q.shape) or len(v.shape) != len(q.shape):
        raise OpError(f"{op}: expected q, k, v of one rank >= 2, got {_fmt(q)}, {_fmt(k)}, "
                      f"{_fmt(v)}")
    if not (q.dtype.is_float and k.dtype == q.dtype and v.dtype == q.dtype):
        raise OpError(f"{op}: expected q, k, v of one float dtype, got {_fmt(q)}, {_fmt(k)}, "
                      f"{_fmt(v)}")
    batch_ok = all(sh.same(a, b) and sh.same(a, c)
                   for a, b, c in zip(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    if not (batch_ok and sh.same(q.shape[-1], k.shape[-1]) and sh.same(k.shape[-1], v.shape[-1])
            and sh.same(k.shape[-2], v.shape[-2])):
        raise OpError(f"{op}: q {_fmt(q)}, k {_fmt(k)} and v {_fmt(v)} do not agree "
                      "(same batch dims and head size, k and v of one length)")
    if not isinstance(q.shape[-1], int):
        raise OpError(f"{op}: the head size of q {_fmt(q)} must be static (the kernels "
                      "unroll over it)")


def _attention_mask(op: str, q: Any, k: Any, mask: Any) -> None:
    """The optional additive mask: q's dtype, shape [*b, L, S] (the front end expands)."""
    want = tuple(q.shape[:-1]) + (k.shape[-2],)
    if mask.dtype != q.dtype or not sh.same_shape(mask.shape, want):
        raise OpError(f"{op}: mask {_fmt(mask)} must be an additive mask of q's dtype and "
                      f"shape {sh.fmt_shape(want)}")


def attention_extras(op: str, xs: Sequence[Any], a: dict) -> tuple[Any, Any]:
    """The optional operands of ``attention`` / ``attention_grad`` after q, k, v (and the
    gradient): ``(mask, seed)``, each None when absent. The mask is an additive float
    ``[*b, L, S]``; the seed (an int64 scalar, the ``rand`` op's) is there exactly when the
    ``dropout`` attribute is positive: the weights are dropped as ``dropout()`` drops them,
    ``(w * (rand < 1 - p)) * (1 / (1 - p))`` with ``rand`` over the ``[*b, L, S]`` weights."""
    base = 3 if op == "attention" else 4
    extra = list(xs[base:])
    mask = extra.pop(0) if extra and extra[0].dtype.is_float else None
    seed = extra.pop(0) if extra and extra[0].dtype is dt.int64 else None
    p = float(a.get("dropout", 0.0))
    if extra or (seed is None) != (p == 0.0) or not 0.0 <= p < 1.0:
        what = "q, k, v" + (", grad" if base == 4 else "")
        raise OpError(f"{op}: expected {what}, an optional float mask and, when dropout > 0 "
                      f"(dropout in [0, 1)), an int64 seed; got {len(xs)} operands, "
                      f"dropout={p}")
    if seed is not None and seed.shape != ():
        raise OpError(f"{op}: the dropout seed must be an int64 scalar, got {_fmt(seed)}")
    return mask, seed


@_rule("attention")
def _attention(op, xs, a):
    """(q, k, v[, mask][, seed]) -> dropout(softmax(q k^T * scale + mask, causal: keys
    j <= i only)) v, [*b, L, E]."""
    if len(xs) < 3:
        raise OpError(f"{op}: expected q, k, v, got {len(xs)} operands")
    q, k, v = xs[:3]
    _attention_check(op, q, k, v)
    mask, _ = attention_extras(op, xs, a)
    if mask is not None:
        _attention_mask(op, q, k, mask)
    return tuple(q.shape), q.dtype


@_rule("attention_grad")
def _attention_grad(op, xs, a):
    """(q, k, v, grad_out[, mask][, seed]) -> [dq; dk; dv] stacked on the row axis,
    [*b, L + 2S, E]."""
    if len(xs) < 4:
        raise OpError(f"{op}: expected q, k, v and grad, got {len(xs)} operands")
    q, k, v, go = xs[:4]
    _attention_check(op, q, k, v)
    mask, _ = attention_extras(op, xs, a)
    if mask is not None:
        _attention_mask(op, q, k, mask)
    if not (sh.same_shape(go.shape, q.shape) and go.dtype == q.dtype):
        raise OpError(f"{op}: grad {_fmt(go)} must match q {_fmt(q)}")
    rows = sh.plus(q.shape[-2], sh.scale(k.shape[-2], 2))
    return tuple(q.shape[:-2]) + (rows, q.shape[-1]), q.dtype


@_rule("scan")
def _scan_loop(op, xs, a):
    try:
        loops.check_scan(xs, a)
    except loops.ScanError as e:
        raise OpError(str(e)) from None
    return loops.TUPLE_SHAPE, loops.TUPLE_DTYPE


@_rule("scan_out")
def _scan_out(op, xs, a):
    try:
        return loops.check_scan_out(xs, a)
    except loops.ScanError as e:
        raise OpError(str(e)) from None


def infer(op: str, inputs: Sequence[Any], attrs: dict) -> tuple[sh.Shape, dt.DType]:
    """Shape and dtype of ``op`` applied to ``inputs`` (anything with .shape and .dtype)."""
    info = OP_INFO.get(op)
    if info is None:
        raise OpError(f"unknown op {op!r}")
    if info.arity >= 0 and len(inputs) != info.arity:
        raise OpError(f"{op}: expected {info.arity} operands, got {len(inputs)}")
    return SHAPE_RULES[op](op, inputs, attrs)
