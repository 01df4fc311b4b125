"""Reverse-mode differentiation as an IR transform: one VJP rule per op.

``vjp`` takes the nodes to differentiate (with their cotangent seeds) and the nodes to
differentiate with respect to, and builds gradient nodes with the given builder. The same
function serves eager ``backward()`` (on the tape's nodes, then evaluated by the interpreter)
and compiled steps (on traced nodes, then lowered). Rules follow PyTorch's
``derivatives.yaml`` formulas so that results agree to rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from graphc.ir import Builder, Node, ops, toposort
from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh
from graphc.ir.elementwise import ELEMENTWISE

from .loops import scan_vjp

Rule = Callable[[Builder, Node, Node], Sequence[Node | None]]
VJP: dict[str, Rule] = {}


def _rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for n in names:
            VJP[n] = fn
        return fn

    return deco


@_rule("input", "const", "iota", "rand", "detach", "pool_argmax", "sort")
def _none(b, n, g):
    return [None] * len(n.inputs)


# every elementwise primitive: its rule from the op table
VJP.update({d.name: d.vjp for d in ELEMENTWISE})


@_rule("sum")
def _sum(b, n, g):
    return [b.expand(g, n.inputs[0].shape)]


@_rule("max")
def _max(b, n, g):
    # amax semantics: the gradient is shared evenly between tied maxima
    x = n.inputs[0]
    mask = b.cast(b.op("eq", (x, b.expand(n, x.shape))), x.dtype)
    count = b.op("sum", (mask,), axes=n.attrs["axes"])
    return [b.mul(mask, b.expand(b.div(g, count), x.shape))]


@_rule("cumsum")
def _cumsum(b, n, g):
    # each input feeds every later (earlier, reversed) output: the opposite scan of g
    a = n.attrs
    return [b.op("cumsum", (g,), axis=a["axis"], reverse=not a.get("reverse", False))]


@_rule("cumprod")
def _cumprod(b, n, g):
    """PyTorch's ``cumprod_backward``, exact with zeros: before the first zero of a line the
    gradient is ``revcumsum(g * out) / x`` (over the outputs before that zero); at the first
    zero it is ``prod(x before it) * sum_{j >= z} g_j prod(x after it, up to j)``; after it
    every output holds the zero, so the gradient is 0."""
    x = n.inputs[0]
    ax, rev = n.attrs["axis"], n.attrs.get("reverse", False)
    t = x.dtype
    zero, one = b.const(0.0, x.shape, t), b.const(1.0, x.shape, t)
    zeros_seen = b.op("cumsum", (b.cast(b.op("eq", (x, zero)), t),), axis=ax, reverse=rev)
    before = b.op("eq", (zeros_seen, zero))
    first = b.op("and", (b.op("eq", (x, zero)), b.op("eq", (zeros_seen, one))))
    after = b.op("and", (b.op("not", (before,)), b.op("not", (first,))))
    tail = b.op("cumsum", (b.where(before, b.mul(g, n), zero),), axis=ax, reverse=not rev)
    g_before = b.div(tail, b.where(before, x, one))
    lead = b.op("cumprod", (b.where(before, x, one),), axis=ax, reverse=rev)
    rest = b.op("cumprod", (b.where(after, x, one),), axis=ax, reverse=rev)
    s = b.op("sum", (b.where(before, zero, b.mul(g, rest)),), axes=(ax,))
    g_first = b.mul(lead, b.expand(s, x.shape))
    return [b.where(before, g_before, b.where(first, g_first, zero))]


def scan_argmax(b: Builder, x: Node, out: Node, ax: int) -> Node:
    """Index of the element ``cummax`` took at each position: the last position up to it
    holding a running maximum (a tie or a NaN takes over, as in PyTorch)."""
    hit = b.op("eq", (x, out))
    if x.dtype.is_float:
        hit = b.op("or", (hit, b.op("ne", (x, x))))
    iota = b.op("iota", (), shape=x.shape, dtype=dt.int64, axis=ax)
    cand = b.where(hit, iota, b.const(0, x.shape, dt.int64))
    return b.op("cummax", (cand,), axis=ax)


@_rule("logcumsumexp")
def _logcumsumexp(b, n, g):
    """PyTorch's ``logcumsumexp_backward``: the positive and negative parts of ``g`` summed
    over the later outputs in log space (a reversed logcumsumexp), so no ``exp(out)``
    overflows: ``exp(x + rlcse(log g+ - out)) - exp(x + rlcse(log g- - out))``."""
    x = n.inputs[0]
    a = n.attrs
    t = x.dtype
    zero = b.const(0.0, x.shape, t)
    ninf = b.const(float("-inf"), x.shape, t)
    log_abs = b.op("log", (b.op("abs", (g,)),))

    def part(mask: Node) -> Node:
        lg = b.where(mask, log_abs, ninf)
        r = b.op("logcumsumexp", (b.sub(lg, n),), axis=a["axis"],
                 reverse=not a.get("reverse", False))
        return b.op("exp", (b.add(r, x),))

    return [b.sub(part(b.op("gt", (g, zero))), part(b.op("lt", (g, zero))))]


@_rule("cummax")
def _cummax(b, n, g):
    x = n.inputs[0]
    ax = n.attrs["axis"]
    idx = scan_argmax(b, x, n, ax)
    return [b.op("scatter_add", (b.const(0.0, x.shape, x.dtype), idx, g), axis=ax)]


def _swap_last(b: Builder, x: Node) -> Node:
    r = x.ndim
    return b.permute(x, tuple(range(r - 2)) + (r - 1, r - 2))


@_rule("matmul")
def _matmul(b, n, g):
    x, y = n.inputs
    return [b.op("matmul", (g, _swap_last(b, y))), b.op("matmul", (_swap_last(b, x), g))]


@_rule("reshape")
def _reshape(b, n, g):
    return [b.reshape(g, n.inputs[0].shape)]


@_rule("permute")
def _permute(b, n, g):
    perm = n.attrs["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [b.permute(g, inv)]


@_rule("expand")
def _expand(b, n, g):
    return [b.sum_to(g, n.inputs[0].shape)]


@_rule("gather")
def _gather(b, n, g):
    x, idx = n.inputs
    return [b.op("scatter_add", (b.const(0.0, x.shape, x.dtype), idx, g), axis=n.attrs["axis"]),
            None]


@_rule("scatter_add")
def _scatter_add(b, n, g):
    _, idx, _ = n.inputs
    return [g, None, b.op("gather", (g, idx), axis=n.attrs["axis"])]


@_rule("slice")
def _slice(b, n, g):
    # the adjoint of taking a window is zero-padding back to the input's extent
    x = n.inputs[0]
    a = n.attrs
    if any(st != 1 for st in a["steps"]):
        # strided slice: scatter through a padded, interleaved layout
        return [_strided_slice_vjp(b, n, g)]
    pads = []
    for d, lo, hi in zip(x.shape, a["starts"], a["stops"]):
        pads.append((lo, sh.sub(d, hi)))
    return [b.op("pad", (g,), pads=tuple(pads))]


def _strided_slice_vjp(b: Builder, n: Node, g: Node) -> Node:
    """Place g[i] at start + i*step: pad each strided axis to (len, step), flatten, trim."""
    x = n.inputs[0]
    a = n.attrs
    out = g
    for ax, (lo, hi, st) in enumerate(zip(a["starts"], a["stops"], a["steps"])):
        if st == 1:
            continue
        m = out.shape[ax]
        shp = list(out.shape)
        # (.., m, ..) -> (.., m, 1, ..) -> pad to (.., m, st, ..) -> (.., m*st, ..)
        out = b.reshape(out, shp[:ax + 1] + [1] + shp[ax + 1:])
        pads = [(0, 0)] * len(out.shape)
        pads[ax + 1] = (0, st - 1)
        out = b.op("pad", (out,), pads=tuple(pads))
        out = b.reshape(out, shp[:ax] + [m * st] + shp[ax + 1:])
        # now element i sits at i*step; keep exactly hi - lo positions from lo
        shp = list(out.shape)
        keep = [(0, d, 1) for d in shp]
        keep[ax] = (0, hi - lo if (hi - lo) < m * st else m * st, 1)
        out = b.op("slice", (out,), starts=tuple(k[0] for k in keep),
                   stops=tuple(k[1] for k in keep), steps=(1,) * len(shp))
    pads = [(lo, sh.dim(d - lo - out.shape[i])) for i, (d, lo) in
            enumerate(zip(x.shape, a["starts"]))]
    return b.op("pad", (out,), pads=tuple(pads))


@_rule("pad")
def _pad(b, n, g):
    x = n.inputs[0]
    pads = n.attrs["pads"]
    return [b.op("slice", (g,), starts=tuple(lo for lo, _ in pads),
                 stops=tuple(lo + d for (lo, _), d in zip(pads, x.shape)),
                 steps=(1,) * len(pads))]


def _conv_attrs(n: Node) -> dict:
    return {k: n.attrs[k] for k in ("stride", "padding", "dilation", "groups")}


@_rule("conv2d")
def _conv2d(b, n, g):
    # dx is conv2d's adjoint in x (a transposed convolution), dw its adjoint in w
    x, w = n.inputs
    a = _conv_attrs(n)
    return [b.op("conv2d_input_grad", (g, w), input_shape=tuple(x.shape), **a),
            b.op("conv2d_weight_grad", (x, g), weight_shape=tuple(w.shape), **a)]


@_rule("attention")
def _attention(b, n, g):
    # one kernel recomputes the scores and returns [dq; dk; dv] along the row axis; an
    # additive mask's gradient is the scores' (dS), which that kernel does not form: built
    # from primitives when the mask needs one (the front end sends such masks to the
    # composite, so this serves graphs built on the op directly)
    q, k, v = n.inputs[:3]
    mask, seed = ops.attention_extras(n.op, n.inputs, n.attrs)
    L, S = q.shape[-2], k.shape[-2]
    both = b.op("attention_grad", (q, k, v, g, *n.inputs[3:]), **n.attrs)
    rank = len(both.shape)
    out: list[Node | None] = []
    for lo, hi in ((0, L), (L, sh.plus(L, S)), (sh.plus(L, S), both.shape[-2])):
        starts = (0,) * (rank - 2) + (lo, 0)
        stops = tuple(both.shape[:-2]) + (hi, both.shape[-1])
        out.append(b.op("slice", (both,), starts=starts, stops=stops, steps=(1,) * rank))
    if mask is not None:
        out.append(_attention_parts(b, q, k, v, g, n.attrs, mask, seed)[1] if mask.rg
                   else None)
    if seed is not None:
        out.append(None)
    return out


def _attention_parts(b: Builder, q: Node, k: Node, v: Node, go: Node, attrs: dict,
                     mask: Node | None, seed: Node | None) -> tuple[Node, Node, tuple]:
    """The (dropped) weights and the scores' gradient ``ds`` of attention in primitives, and
    the transposing permutation: what the rules here build on. Dropout is ``dropout()``'s:
    ``(w * keep) * (1 / (1 - p))`` with ``keep = rand < 1 - p`` over the weights."""
    scale, causal = float(attrs["scale"]), bool(attrs["causal"])
    rank = len(q.shape)
    L, S = q.shape[-2], k.shape[-2]
    t = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    s = b.mul(b.op("matmul", (q, b.permute(k, t))), b.const(scale, (), q.dtype))
    if mask is not None:
        s = b.add(s, mask)
    if causal:
        i = b.op("iota", (), shape=(L, S), dtype=dt.int64, axis=0)
        j = b.op("iota", (), shape=(L, S), dtype=dt.int64, axis=1)
        keep = b.broadcast_to(b.op("le", (j, i)), s.shape)
        s = b.where(keep, s, b.const(float("-inf"), s.shape, s.dtype))
    # softmax with rows whose every key is masked giving zeros (the composite's and the
    # kernels' rule)
    m = b.op("detach", (b.op("max", (s,), axes=(rank - 1,)),))
    dead = b.op("eq", (m, b.const(float("-inf"), m.shape, m.dtype)))
    zero, one = b.const(0.0, m.shape, m.dtype), b.const(1.0, m.shape, m.dtype)
    e = b.op("exp", (b.sub(s, b.where(dead, zero, m)),))
    den = b.where(dead, one, b.op("sum", (e,), axes=(rank - 1,)))
    p = b.where(b.broadcast_to(dead, s.shape), b.const(0.0, s.shape, s.dtype), b.div(e, den))
    dp = b.op("matmul", (go, b.permute(v, t)))
    pd = p
    if seed is not None:
        rate = float(attrs["dropout"])
        u = b.op("rand", (seed,), shape=tuple(s.shape))
        kf = b.cast(b.op("lt", (u, b.const(1.0 - rate, u.shape, u.dtype))), s.dtype)
        c = b.const(1.0 / (1.0 - rate), (), s.dtype)
        pd = b.mul(b.mul(p, kf), c)
        dp = b.mul(b.mul(dp, c), kf)
    ds = b.mul(p, b.sub(dp, b.op("sum", (b.mul(p, dp),), axes=(rank - 1,))))
    return pd, ds, t


def attention_grad_composite(b: Builder, q: Node, k: Node, v: Node, go: Node, attrs: dict,
                             mask: Node | None = None, seed: Node | None = None) -> Node:
    """``attention_grad`` written in primitives (matmul, softmax, matmul, stacked by padding):
    the rule below differentiates this to differentiate the fused backward again."""
    rank = len(q.shape)
    L, S = q.shape[-2], k.shape[-2]
    pd, ds, t = _attention_parts(b, q, k, v, go, attrs, mask, seed)
    dv = b.op("matmul", (b.permute(pd, t), go))
    sc = b.const(float(attrs["scale"]), (), q.dtype)
    dq = b.mul(b.op("matmul", (ds, k)), sc)
    dk = b.mul(b.op("matmul", (b.permute(ds, t), q)), sc)
    lead = ((0, 0),) * (rank - 2)
    dq = b.op("pad", (dq,), pads=lead + ((0, sh.scale(S, 2)), (0, 0)))
    dk = b.op("pad", (dk,), pads=lead + ((L, S), (0, 0)))
    dv = b.op("pad", (dv,), pads=lead + ((sh.plus(L, S), 0), (0, 0)))
    return b.add(b.add(dq, dk), dv)


@_rule("attention_grad")
def _attention_grad(b, n, g):
    # double backward: differentiate the primitive form of the fused backward (built with
    # grad recording on, so the inner pass sees how it depends on its inputs)
    from graphc.autograd import is_grad_enabled, set_grad_enabled

    mask, seed = ops.attention_extras(n.op, n.inputs, n.attrs)
    prev = is_grad_enabled()
    set_grad_enabled(True)
    try:
        c = attention_grad_composite(b, *n.inputs[:4], n.attrs, mask, seed)
    finally:
        set_grad_enabled(prev)
    return vjp(b, [c], [g], list(n.inputs))


@_rule("conv2d_input_grad")
def _conv2d_input_grad(b, n, g):
    # y = Ig(gy, w) is bilinear; <g, Ig(gy, w)> = <conv2d(g, w), gy> = <Wg(g, gy), w>
    gy, w = n.inputs
    a = _conv_attrs(n)
    return [b.op("conv2d", (g, w), **a),
            b.op("conv2d_weight_grad", (g, gy), weight_shape=tuple(w.shape), **a)]


@_rule("conv2d_weight_grad")
def _conv2d_weight_grad(b, n, g):
    # <g, Wg(x, gy)> = <conv2d(x, g), gy> = <Ig(gy, g), x>
    x, gy = n.inputs
    a = _conv_attrs(n)
    return [b.op("conv2d_input_grad", (gy, g), input_shape=tuple(x.shape), **a),
            b.op("conv2d", (x, g), **a)]


@_rule("affine_norm")
def _affine_norm(b, n, g):
    """``y = (x - mean) * invstd * w + b`` over ``axes``, differentiated as a whole, as
    PyTorch's batch-norm and layer-norm backward kernels do:

        dxhat = g * w,  s1 = sum(dxhat),  s2 = sum(dxhat * (x - mean))    (over ``axes``)
        dx = (dxhat - (x - mean) * s2 * invstd^2 / N - s1 / N) * invstd
        dw = sum(g * (x - mean) * invstd),  db = sum(g)                     (to w's, b's shape)

    Rule by rule, the same derivative costs a reduction over a materialised ``d(x - mean)``
    and a pass subtracting its mean, and stores ``(x - mean) * invstd`` for ``dw``; here it is
    two reductions over ``g`` and ``x`` and one elementwise pass. Where ``w`` is constant along
    ``axes`` (batch norm: one weight per channel) it is a factor of the sums: ``s1`` is
    then ``db`` and ``s2 * invstd`` is ``dw`` (``wshape``: the shape ``w`` broadcasts from)."""
    _, x, mean, invstd, count = n.inputs[:5]
    a = n.attrs
    axes, shape, stat = tuple(a["axes"]), x.shape, mean.shape
    params = iter(n.inputs[5:])
    w = next(params) if a["weight"] else None
    bias = next(params) if a["bias"] else None
    wshape = (1,) * (len(shape) - len(a["wshape"])) + tuple(a["wshape"])  # x's rank
    per_channel = all(sh.same(wshape[i], 1) for i in axes)
    xmu = b.sub(x, b.expand(mean, shape))
    n_ = b.expand(b.reshape(count, (1,) * len(shape)), stat)
    dxhat, scale = g, invstd
    if w is not None and per_channel:
        scale = b.mul(invstd, b.broadcast_to(b.reshape(w, wshape), stat))
    elif w is not None:
        dxhat = b.mul(g, b.broadcast_to(b.reshape(w, wshape), shape))
    s1 = b.op("sum", (dxhat,), axes=axes)
    s2 = b.op("sum", (b.mul(dxhat, xmu),), axes=axes)
    k = b.div(b.mul(b.mul(s2, invstd), invstd), n_)
    dx = b.mul(b.sub(b.sub(dxhat, b.mul(xmu, b.expand(k, shape))), b.expand(b.div(s1, n_), shape)),
               b.expand(scale, shape))
    out: list[Node | None] = [None, dx, None, None, None]
    if w is not None:
        xhat_g = (b.mul(s2, invstd) if per_channel
                  else b.mul(g, b.mul(xmu, b.expand(invstd, shape))))
        out.append(b.reshape(b.sum_to(xhat_g, wshape), w.shape))
    if bias is not None:
        out.append(b.reshape(b.sum_to(s1 if per_channel else g, wshape), bias.shape))
    return out


@_rule("scan", "scan_out")
def _loop(b, n, g):
    # a scan's results are a tuple: ``vjp`` gathers the cotangents of its scan_out nodes
    # and calls ``scan_vjp`` with all of them (passes/loops.py)
    raise AssertionError(f"{n.op} is differentiated by vjp() itself, not by its table rule")


def vjp(b: Builder, roots: Sequence[Node], seeds: Sequence[Node], wrt: Sequence[Node],
        on_grad: Callable[[Node, Node], Node] | None = None,
        order: Sequence[Node] | None = None) -> list[Node | None]:
    """Gradients of ``sum(seed * root)`` with respect to each node of ``wrt``.

    Only nodes on a path from ``wrt`` to ``roots`` are visited; a ``wrt`` node that no root
    depends on gets ``None`` (PyTorch leaves such a ``.grad`` untouched). ``on_grad(n, g)``,
    when given, sees each interior node's complete gradient before it flows to the node's
    inputs and returns the gradient to use (eager tensor hooks and ``retain_grad``).
    ``order``: ``toposort(roots)``, when the caller has it already (an eager backward).
    """
    wrt_ids = {w.id for w in wrt}
    if order is None:
        order = toposort(roots)
    # forward reachability from wrt
    live: set[int] = set()
    for n in order:
        if n.id in wrt_ids or (n.rg and any(x.id in live for x in n.inputs)):
            live.add(n.id)
    grads: dict[int, Node] = {}
    for r, s in zip(roots, seeds):
        if r.id in live:
            grads[r.id] = b.add(grads[r.id], s) if r.id in grads else s
    parts: dict[int, dict[int, Node]] = {}  # scan id -> {result index: cotangent}
    for n in reversed(order):
        g = grads.get(n.id)
        if g is None or not n.inputs or n.id in wrt_ids and n.op == "input":
            continue
        if on_grad is not None:
            g = grads[n.id] = on_grad(n, g)
        if n.op == "scan_out":  # one result of a tuple: kept for the scan's rule
            s, i = n.inputs[0], n.attrs["index"]
            if s.id in live and n.dtype.is_float:
                d = parts.setdefault(s.id, {})
                d[i] = b.add(d[i], g) if i in d else g
                grads[s.id] = g  # marks the scan as reached
            continue
        if n.op == "scan":
            contribs = scan_vjp(b, n, parts.get(n.id, {}), vjp)
        elif not n.dtype.is_float:
            continue
        else:
            contribs = VJP[n.op](b, n, g)
        for x, gx in zip(n.inputs, contribs):
            if gx is None or x.id not in live or not x.dtype.is_float:
                continue
            if gx.dtype is not x.dtype:
                gx = b.cast(gx, x.dtype)
            grads[x.id] = b.add(grads[x.id], gx) if x.id in grads else gx
    return [grads.get(w.id) for w in wrt]

