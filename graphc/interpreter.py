"""The numpy reference interpreter: eager execution and the oracle for every backend.

It is deliberately boring: one numpy expression per op, computed in the node's dtype, no
fusion and no cleverness. Native backends are tested against it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy

from .ir import Graph, Node
from .ir import dtypes as dt
from .ir import shapes as sh
from .ir.elementwise import ELEMENTWISE
from .ir.ops import attention_extras

Impl = Callable[..., np.ndarray]
IMPLS: dict[str, Impl] = {}

MASK64 = (1 << 64) - 1


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The counter-based hash behind ``rand``; the native lowering uses the same constants."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x


def rand_values(seed: int, n: int) -> np.ndarray:
    """Uniform float32 in [0, 1): element i is a pure function of (seed, i)."""
    with np.errstate(over="ignore"):
        ctr = np.arange(n, dtype=np.uint64) + np.uint64(seed & MASK64) * np.uint64(0x100000001B3)
    bits = splitmix64(ctr) >> np.uint64(40)
    return (bits.astype(np.float32) * np.float32(2.0 ** -24)).astype(np.float32)


def _impl(*names: str) -> Callable[[Impl], Impl]:
    def deco(fn: Impl) -> Impl:
        for n in names:
            IMPLS[n] = fn
        return fn

    return deco


def _np(n: Node) -> np.dtype:
    return n.dtype.np


# ``QUIET.on``: True while the caller holds ``np.errstate(all="ignore")`` around many ops
# (``quiet_block``); the elementwise rules then call their references directly
class _Quiet(threading.local):
    """Per thread: numpy's error state is per thread (a context variable), so a backward on
    one thread must not silence the ops another thread runs meanwhile."""

    on = False


QUIET = _Quiet()


class quiet_block:  # noqa: N801 - used as a context manager, like np.errstate
    """Floating-point warnings off for a block of interpreter work (an eager ``backward()``
    evaluates every VJP node): one ``np.errstate`` for the block instead of one per op
    (~1.4 us each, a tenth of a small backward). Code that runs user callbacks inside the
    block (tensor hooks) leaves it with ``user_errstate``."""

    __slots__ = ("_state", "_was", "saved")

    def __enter__(self) -> quiet_block:
        self.saved = np.geterr()
        self._state = np.errstate(all="ignore")
        self._state.__enter__()
        self._was = QUIET.on
        QUIET.on = True
        return self

    def __exit__(self, *exc: Any) -> None:
        QUIET.on = self._was
        self._state.__exit__(*exc)


def _quiet_errstate() -> tuple[Any, Any] | None:
    """numpy's error state with every floating-point error ignored, made once, and the
    context variable ``np.errstate`` sets: entering ``np.errstate`` builds that state anew
    each time (~1 us of a ~5 us eager op). None where this numpy keeps them elsewhere."""
    try:
        from numpy._core._ufunc_config import _extobj_contextvar
        from numpy._core.umath import _make_extobj

        return _extobj_contextvar, _make_extobj(all="ignore")
    except (ImportError, AttributeError, TypeError):
        return None


_IGNORE = _quiet_errstate()


def quietly(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` with numpy's floating-point warnings off for the call (``np.errstate(all=
    "ignore")`` as a decorator, without rebuilding the state on every call)."""
    if _IGNORE is None:
        return np.errstate(all="ignore")(f)
    var, state = _IGNORE
    set_, reset = var.set, var.reset

    def inner(*args: Any) -> Any:
        token = set_(state)
        try:
            return f(*args)
        finally:
            reset(token)

    return inner


def _elementwise(f: Callable[..., np.ndarray]) -> Impl:
    """An op-table reference as an interpreter rule: run in the operands' dtype without
    floating-point warnings (NaN and inf are values here), return in the node's dtype."""

    # errstate as a decorator, built once: entering a fresh ``with np.errstate`` costs
    # ~3 us, a tenth of an eager op's time; the decorated call ~1.4 us
    quiet = quietly(f)

    def run(node: Node, *xs: np.ndarray) -> np.ndarray:
        out = f(*xs) if QUIET.on else quiet(*xs)
        want = node.dtype.np
        return out if type(out) is np.ndarray and out.dtype == want else np.asarray(
            out, dtype=want)

    run.quiet = quiet  # the eager fast path calls it without a node (graphc/_tensor.py)
    run.raw = f  # ... and this inside a ``quiet_block``
    return run


# every elementwise primitive: its reference from the op table
IMPLS.update({d.name: _elementwise(d.ref) for d in ELEMENTWISE})


@_impl("sum")
def _sum(node, x):
    # np.sum's own reduction, without its dispatch wrapper (~3.5 us of an eager sum)
    return np.add.reduce(x, axis=node.attrs["axes"], keepdims=True, dtype=_np(node))


@_impl("max")
def _max(node, x):
    if any(x.shape[a] == 0 for a in node.attrs["axes"]):
        raise IndexError("max(): cannot reduce over a zero-size dimension")
    return np.max(x, axis=node.attrs["axes"], keepdims=True)


def _scan(f: Any) -> Impl:
    def run(node: Node, x: np.ndarray) -> np.ndarray:
        ax = node.attrs["axis"]
        if node.attrs.get("reverse"):
            return np.ascontiguousarray(np.flip(f(np.flip(x, ax), ax), ax)).astype(_np(node))
        return f(x, ax).astype(_np(node))

    return run


IMPLS["cumsum"] = _scan(lambda x, ax: np.cumsum(x, axis=ax, dtype=x.dtype))
IMPLS["cumprod"] = _scan(lambda x, ax: np.cumprod(x, axis=ax, dtype=x.dtype))
IMPLS["cummax"] = _scan(lambda x, ax: np.maximum.accumulate(x, axis=ax))
IMPLS["logcumsumexp"] = _scan(lambda x, ax: np.logaddexp.accumulate(x, axis=ax, dtype=x.dtype))


@_impl("matmul")
def _matmul(node, a, b):
    return np.matmul(a, b).astype(_np(node), copy=False)  # a fresh array: no copy needed


@_impl("reshape")
def _reshape(node, x, env=None):
    return np.reshape(x, _concrete(node.shape, env))


@_impl("permute")
def _permute(node, x):
    return np.transpose(x, node.attrs["perm"])  # a view, as torch's permute


@_impl("detach")
def _detach(node, x):
    return x


@_impl("affine_norm")
def _affine_norm(node, y, *operands):
    return y


@_impl("expand")
def _expand(node, x, env=None):
    return np.broadcast_to(x, _concrete(node.shape, env))


@_impl("gather")
def _gather(node, x, idx):
    ax = node.attrs["axis"]
    n = x.shape[ax]
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise IndexError(
            f"index {int(idx[pos])} is out of bounds for dimension {ax} with size {n} "
            f"(at position {pos})"
        )
    return np.take_along_axis(x, idx, axis=ax)


@_impl("sort")
def _sort(node, x):
    """Stable argsort along ``axis``, NaN the largest value (last ascending, first
    descending), as PyTorch."""
    ax = node.attrs["axis"]
    if x.dtype == np.bool_:
        x = x.astype(np.int64)
    if not node.attrs.get("descending", False):
        return np.argsort(x, axis=ax, kind="stable").astype(np.int64)
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        return np.lexsort((np.where(nan, 0, -x), ~nan), axis=ax).astype(np.int64)
    return np.argsort(-1 - x, axis=ax, kind="stable").astype(np.int64)


@_impl("scatter_add")
def _scatter_add(node, base, idx, src):
    ax = node.attrs["axis"]
    out = np.array(base, copy=True)
    grids = list(np.indices(idx.shape, sparse=True))
    grids[ax] = idx
    np.add.at(out, tuple(grids), src)
    return out


@_impl("slice")
def _slice(node, x, env=None):
    a = node.attrs
    key = tuple(slice(sh.evaluate(b, env or {}), sh.evaluate(e, env or {}), st)
                for b, e, st in zip(a["starts"], a["stops"], a["steps"]))
    return x[key]  # a view, as torch's slices are (in-place ops on it write the base)


@_impl("pad")
def _pad(node, x, env=None):
    return np.pad(x, [(sh.evaluate(lo, env or {}), sh.evaluate(hi, env or {}))
                      for lo, hi in node.attrs["pads"]])


def _windows(x: np.ndarray, kernel: Sequence[int], a: dict) -> np.ndarray:
    """View (N, C, OH, OW, KH, KW) of the (already padded) input under conv attrs."""
    n, c, h, w = x.shape
    (sh_, sw), (dh, dw) = a["stride"], a["dilation"]
    kh, kw = kernel
    oh = (h - dh * (kh - 1) - 1) // sh_ + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    s = x.strides
    return np.lib.stride_tricks.as_strided(
        x, (n, c, oh, ow, kh, kw), (s[0], s[1], s[2] * sh_, s[3] * sw, s[2] * dh, s[3] * dw),
        writeable=False)


def _pad_hw(x: np.ndarray, padding: Sequence[int], value: float = 0.0) -> np.ndarray:
    ph, pw = padding
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


@_impl("conv2d")
def _conv2d(node, x, w):
    a = node.attrs
    g = a["groups"]
    win = _windows(_pad_hw(x, a["padding"]), w.shape[2:], a)  # N C OH OW KH KW
    n, c, oh, ow = win.shape[:4]
    o = w.shape[0]
    win = win.reshape(n, g, c // g, oh, ow, *w.shape[2:])
    wg = w.reshape(g, o // g, *w.shape[1:])
    out = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True)
    return out.reshape(n, o, oh, ow).astype(_np(node))


@_impl("conv2d_input_grad")
def _conv2d_input_grad(node, gy, w):
    a = node.attrs
    n, c, h, wd = a["input_shape"]
    g = a["groups"]
    (sh_, sw), (dh, dw), (ph, pw) = a["stride"], a["dilation"], a["padding"]
    o, cg, kh, kw = w.shape
    oh, ow = gy.shape[2:]
    out = np.zeros((gy.shape[0], c, h + 2 * ph, wd + 2 * pw), np.float64)
    gyg = gy.reshape(gy.shape[0], g, o // g, oh, ow).astype(np.float64)
    wg = w.reshape(g, o // g, cg, kh, kw).astype(np.float64)
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("ngohw,goc->ngchw", gyg, wg[..., i, j])
            out[:, :, i * dh:i * dh + sh_ * (oh - 1) + 1:sh_,
                j * dw:j * dw + sw * (ow - 1) + 1:sw] += contrib.reshape(gy.shape[0], c, oh, ow)
    return out[:, :, ph:ph + h, pw:pw + wd].astype(_np(node))


@_impl("conv2d_weight_grad")
def _conv2d_weight_grad(node, x, gy):
    a = node.attrs
    g = a["groups"]
    o, cg, kh, kw = a["weight_shape"]
    win = _windows(_pad_hw(x, a["padding"]), (kh, kw), a)
    n, c, oh, ow = win.shape[:4]
    win = win.reshape(n, g, cg, oh, ow, kh, kw).astype(np.float64)
    gyg = gy.reshape(n, g, o // g, oh, ow).astype(np.float64)
    out = np.einsum("ngchwij,ngohw->gocij", win, gyg, optimize=True)
    return out.reshape(o, cg, kh, kw).astype(_np(node))


def _attention_weights(node: Node, q: np.ndarray, k: np.ndarray,
                       mask: np.ndarray | None = None) -> np.ndarray:
    """softmax(q k^T * scale + mask) in q's dtype (the mask additive, or causal), as the
    composite attention computes it (``graphc.nn._fattn``): rows whose every key is masked
    give zeros."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(node.attrs["scale"])
    if mask is not None:
        s = s + mask
    if node.attrs["causal"]:
        L, S = s.shape[-2:]
        s = np.where(np.tril(np.ones((L, S), bool)), s, q.dtype.type(-np.inf))
    m = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.full(s.shape[:-1] + (1,), -np.inf)
    dead = m == -np.inf
    e = np.exp(s - np.where(dead, 0, m))
    den = e.sum(axis=-1, keepdims=True)
    return np.where(dead, 0, e / np.where(dead, 1, den)).astype(q.dtype, copy=False)


def _attention_inputs(node: Node, xs: tuple) -> tuple:
    """(q, k, v[, g], mask or None, keep factors or None) of an attention node's operands
    (``ops.attention_extras`` says which optional ones there are): the keep factors are
    ``dropout()``'s, ``(rand < 1 - p)`` as 0/1 in q's dtype, with the ``rand`` op's values
    over the ``[*b, L, S]`` weights."""
    base = 3 if node.op == "attention" else 4
    mask_n, seed_n = attention_extras(node.op, node.inputs, node.attrs)
    rest = list(xs[base:])
    mask = rest.pop(0) if mask_n is not None else None
    keep = None
    if seed_n is not None:
        q, k = xs[0], xs[1]
        shape = q.shape[:-1] + (k.shape[-2],)
        u = rand_values(int(rest.pop(0)), int(np.prod(shape, dtype=np.int64))).reshape(shape)
        keep = (u < np.float32(1.0 - float(node.attrs["dropout"]))).astype(q.dtype)
    return (*xs[:base], mask, keep)


def _dropped(node: Node, w: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    """``dropout()``'s ``(w * keep) * (1 / (1 - p))`` (``w`` itself without dropout)."""
    if keep is None:
        return w
    return (w * keep) * w.dtype.type(1.0 / (1.0 - float(node.attrs["dropout"])))


@_impl("attention")
def _attention(node, *xs):
    q, k, v, mask, keep = _attention_inputs(node, xs)
    w = _dropped(node, _attention_weights(node, q, k, mask), keep)
    return np.matmul(w, v).astype(_np(node), copy=False)


@_impl("attention_grad")
def _attention_grad(node, *xs):
    """[dq; dk; dv]: softmax's derivative p * (dp - sum(p * dp)), dp the gradient of the
    weights (through the dropout's keep factors and scale when there is dropout)."""
    q, k, v, g, mask, keep = _attention_inputs(node, xs)
    p = _attention_weights(node, q, k, mask)
    scale = q.dtype.type(node.attrs["scale"])
    dv = np.matmul(np.swapaxes(_dropped(node, p, keep), -1, -2), g)
    dp = np.matmul(g, np.swapaxes(v, -1, -2))
    if keep is not None:  # the VJP of (w * keep) * c: (dp * c) * keep
        dp = (dp * q.dtype.type(1.0 / (1.0 - float(node.attrs["dropout"])))) * keep
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))
    dq = np.matmul(ds, k) * scale
    dk = np.matmul(np.swapaxes(ds, -1, -2), q) * scale
    return np.concatenate([dq, dk, dv], axis=-2).astype(_np(node), copy=False)


@_impl("pool_argmax")
def _pool_argmax(node, x):
    """PyTorch's max_pool2d index rule: first maximum in window order, NaN wins."""
    a = node.attrs
    n, c = x.shape[:2]
    oh, ow = node.shape[2:]
    h, w = x.shape[2:]
    (kh, kw), (sh_, sw), (ph, pw), (dh, dw) = a["kernel"], a["stride"], a["padding"], \
        a["dilation"]
    out = np.zeros((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            best = np.full((n, c), -np.inf, x.dtype)
            hs, ws = i * sh_ - ph, j * sw - pw
            while hs < 0:
                hs += dh
            while ws < 0:
                ws += dw
            arg = np.full((n, c), hs * w + ws, np.int64)
            for u in range(kh):
                for v in range(kw):
                    y, z = i * sh_ - ph + u * dh, j * sw - pw + v * dw
                    if not (0 <= y < h and 0 <= z < w):
                        continue
                    val = x[:, :, y, z]
                    take = (val > best) | np.isnan(val)
                    best = np.where(take, val, best)
                    arg = np.where(take, y * w + z, arg)
            out[:, :, i, j] = arg
    return out


def _concrete(shape: Sequence[Any], env: Mapping[sympy.Symbol, int] | None) -> tuple[int, ...]:
    return sh.evaluate_shape(shape, env or {})


def _value(v: Any, env: Mapping[sympy.Symbol, int] | None) -> Any:
    if isinstance(v, sympy.Basic):
        return float(v.subs(env or {})) if not v.is_Integer else int(v)
    return v


@_impl("const")
def _const(node, env=None):
    return np.full(_concrete(node.shape, env), _value(node.attrs["value"], env), dtype=_np(node))


@_impl("iota")
def _iota(node, env=None):
    shape = _concrete(node.shape, env)
    ax = node.attrs["axis"]
    r = np.arange(shape[ax], dtype=_np(node))
    r = r.reshape([-1 if i == ax else 1 for i in range(len(shape))])
    return np.broadcast_to(r, shape)


@_impl("rand")
def _rand(node, seed, env=None):
    shape = _concrete(node.shape, env)
    return rand_values(int(seed), int(np.prod(shape, dtype=np.int64))).reshape(shape)


_NEEDS_ENV = {"const", "iota", "reshape", "expand", "rand", "slice", "pad"}


class _InFloat32:
    """A node seen with float32 in place of bfloat16, for the rule below."""

    __slots__ = ("_node", "dtype")

    def __init__(self, node: Node) -> None:
        self._node = node
        self.dtype = dt.float32 if node.dtype is dt.bfloat16 else node.dtype

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


# the numpy dtypes of every graphc dtype but bfloat16: a set lookup, ~30 ns, where reading
# ``dtype.name`` costs ~2.3 us (numpy builds the string each time), once per operand of every
# eager op (16% of an eager training loop's time)
_PLAIN = frozenset(d.np for d in dt.ALL if d is not dt.bfloat16)


def _is_bf16(a: np.ndarray) -> bool:
    return a.dtype not in _PLAIN and a.dtype.name == "bfloat16"


def _has_bf16(node: Node, args: Sequence[np.ndarray]) -> bool:
    if node.dtype is dt.bfloat16:
        return True
    for a in args:  # a loop, not any() over a generator: once per eager op
        if _is_bf16(a):
            return True
    return False


def run_node(node: Node, args: Sequence[np.ndarray], env: Mapping[sympy.Symbol, int] | None = None
             ) -> np.ndarray:
    """Evaluate one node on concrete operand values.

    bfloat16 follows PyTorch's CPU kernels: every op reads its bf16 operands as float32,
    computes in float32 (a sum or a matrix product accumulates in float32) and rounds its
    result to bfloat16 once, to nearest even. numpy's bf16 ufuncs would accumulate sums in
    bf16; this one rule makes every op's reference exact in that sense instead."""
    fn = IMPLS[node.op]
    if _has_bf16(node, args):
        f32 = _InFloat32(node)
        args = [a.astype(np.float32) if _is_bf16(a) else a for a in args]
        out = fn(f32, *args, env=env) if node.op in _NEEDS_ENV else fn(f32, *args)
        return np.asarray(out).astype(node.dtype.np) if node.dtype is dt.bfloat16 else out
    if node.op in _NEEDS_ENV:
        return fn(node, *args, env=env)
    return fn(node, *args)


def evaluate(nodes: Sequence[Node], values: dict[int, np.ndarray],
             env: Mapping[sympy.Symbol, int] | None = None) -> dict[int, np.ndarray]:
    """Evaluate ``nodes`` (topologically ordered) given values for their leaves, by node id."""
    for n in nodes:
        if n.id in values:
            continue
        if n.op == "input":
            raise KeyError(f"no value for input {n.attrs.get('name')!r}")
        values[n.id] = run_node(n, [values[x.id] for x in n.inputs], env)
    return values


def bind_inputs(g: Graph, feeds: Mapping[str, np.ndarray]) -> dict[sympy.Symbol, int]:
    """Check ``feeds`` against the graph's input types and bind its shape symbols."""
    env: dict[sympy.Symbol, int] = {}
    for n in g.inputs:
        name = n.attrs["name"]
        if name not in feeds:
            raise KeyError(f"missing input {name!r}")
        a = feeds[name]
        if dt.from_numpy(a.dtype) is not n.dtype:
            raise TypeError(f"{name}: expected dtype {n.dtype.name}, got {a.dtype}")
        sh.bind(n.shape, a.shape, env, name)
    return env


def run_graph(g: Graph, feeds: Mapping[str, np.ndarray]
              ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """Run a whole graph: returns (outputs, {slot: new value}). Inputs are not modified."""
    env = bind_inputs(g, feeds)
    values = {n.id: np.asarray(feeds[n.attrs["name"]]) for n in g.inputs}
    evaluate(g.nodes(), values, env)
    outs = [np.array(values[o.id]) for o in g.outputs]
    ups = {slot: np.array(values[n.id]) for slot, n in g.updates}
    return outs, ups


# -- loops (graphc/ir/loops.py) -----------------------------------------------------------------
class ScanResults(tuple):
    """A scan's value: the tuple of its results. ``dtype`` is the scan node's placeholder
    dtype, so code that looks at every operand's dtype treats it like any value."""

    dtype = np.dtype(np.bool_)


@_impl("scan")
def _scan_loop(node, *args, env=None):
    """Run the body once per step, as written: the carries threaded through, each step's
    outputs stacked in time order (``reverse`` walks from the last step). The value is the
    tuple of results that ``scan_out`` picks from."""
    from .ir.loops import result_types

    body, k, m = node.attrs["body"], node.attrs["carries"], node.attrs["xs"]
    carries, xs, consts = list(args[:k]), args[k:k + m], list(args[k + m:])
    steps = int(xs[0].shape[0])
    names = [p.attrs["name"] for p in body.inputs]
    ys: list[list[np.ndarray]] = [[] for _ in body.outputs[k:]]
    order = range(steps - 1, -1, -1) if node.attrs.get("reverse") else range(steps)
    for t in order:
        feeds = dict(zip(names, carries + [x[t] for x in xs] + consts))
        outs, _ = run_graph(body, feeds)
        carries = outs[:k]
        for acc, y in zip(ys, outs[k:]):
            acc.append(y)
    if node.attrs.get("reverse"):
        ys = [acc[::-1] for acc in ys]
    types = result_types(node)[k:]
    stacked = [np.stack(acc) if acc else np.zeros(_concrete(s, env), d.np)
               for acc, (s, d) in zip(ys, types)]
    return ScanResults(tuple(np.asarray(c) for c in carries) + tuple(stacked))


@_impl("scan_out")
def _scan_out(node, s):
    return s[node.attrs["index"]]


_NEEDS_ENV.add("scan")
