"""``gc.scan``: a loop over the leading axis of tensors, with carried state.

Eagerly it is a Python loop (each step runs as it is written). Under ``gc.compile`` it becomes
one ``scan`` node (``graphc/ir/loops.py``) whose body is the step traced once on placeholder
inputs, so the compiled code, and the time to compile it, do not grow with the number of
steps, and the trip count stays a symbol: one compile serves every length.

Tracing the body: ``step`` runs once on placeholder tensors standing for one step's carries
and slices. The nodes it builds that depend on a placeholder form the body; every value it
reads that does not (a weight, ``W.T``, a bias broadcast) is computed once outside the loop
and enters the body as an invariant operand, which hoists loop-invariant work for free.
Constants stay inside the body. When the scan is on a gradient path, the body also returns
the carries entering each step, so the reverse scan of the backward pass can start each step
from them (``graphc.passes.loops``, which also stores the step's other intermediates the
backward reads unless ``remat=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import _context
from . import tensor_ops as T

# the class itself, not graphc.tensor: linalg_ops (eigh, svd) runs its sweeps through
# scan and graphc.tensor installs linalg_ops' methods; every caller already holds
# tensors, so graphc.tensor has attached the methods by the time scan runs
from ._tensor import Tensor
from .autograd import is_grad_enabled
from .ir import Builder, Graph, Node
from .ir import shapes as sh

Carry = tuple[Tensor, ...]
Step = Callable[[Carry, Carry], tuple[Sequence[Tensor], Sequence[Tensor]]]


def scan(step: Step, init: Sequence[Tensor], xs: Sequence[Tensor], reverse: bool = False,
         remat: bool = False) -> tuple[Carry, Carry]:
    """Run ``step`` over the leading axis of every tensor in ``xs``.

    ``step(carry, x) -> (new_carry, ys)``: ``carry`` is a tuple shaped like ``init``, ``x``
    holds one slice ``xs[i][t]`` per sequence, ``new_carry`` must have ``carry``'s shapes and
    dtypes, ``ys`` is a tuple of tensors of fixed shapes. Returns ``(final_carry, stacked)``
    with ``stacked[j][t]`` the ``j``-th output of step ``t``. ``reverse`` runs ``t`` from the
    last step down to 0 (the outputs are still stacked by ``t``), as ``jax.lax.scan``.

    ``step`` must be a pure function of its arguments and of tensors it closes over (weights):
    compiled, it is traced once, not once per step.

    ``remat`` (compiled steps that differentiate the scan): ``False`` stores, at every step,
    the intermediates the backward step reads (an LSTM's gates); ``True`` stores only the
    carries entering each step and recomputes the step's forward inside the backward step,
    trading one more evaluation of the body per step for memory.
    """
    init = tuple(T.as_tensor(c) for c in init)
    xs = tuple(T.as_tensor(x) for x in xs)
    if not xs:
        raise ValueError("scan: needs at least one sequence (its leading dim counts the steps)")
    ctx = _context.current()
    if ctx is None:
        return _eager(step, init, xs, reverse)
    return _traced(ctx.builder, step, init, xs, reverse, remat)


def _eager(step: Step, init: Carry, xs: Carry, reverse: bool) -> tuple[Carry, Carry]:
    n = int(xs[0].shape[0])
    carry, outs = init, [None] * n
    for t in (range(n - 1, -1, -1) if reverse else range(n)):
        carry, ys = step(carry, tuple(x[t] for x in xs))
        carry, outs[t] = tuple(carry), tuple(ys)
    if n == 0:
        raise ValueError("scan: eagerly the sequences need at least one step")
    return carry, tuple(T.stack([o[j] for o in outs], 0) for j in range(len(outs[0])))


def _traced(bld: Builder, step: Step, init: Carry, xs: Carry, reverse: bool,
            remat: bool = False) -> tuple[Carry, Carry]:
    cn = [c.node for c in init]
    xn = [x.node for x in xs]
    steps = xn[0].shape[0] if xn[0].shape else None
    for x in xn:
        if not x.shape or not sh.same(x.shape[0], steps):
            raise ValueError("scan: sequences must share a leading dim, got "
                             + ", ".join(f"{y.dtype.short}{sh.fmt_shape(y.shape)}" for y in xn))
    grad = is_grad_enabled()
    ph_c = [bld.input(f"c{i}", "arg", c.shape, c.dtype) for i, c in enumerate(cn)]
    ph_x = [bld.input(f"x{j}", "arg", x.shape[1:], x.dtype) for j, x in enumerate(xn)]
    for p in ph_c:
        p.rg = grad and p.dtype.is_float
    for p, x in zip(ph_x, xn):
        p.rg = x.rg
    first = ph_c[0].id if ph_c else ph_x[0].id
    new, ys = step(tuple(Tensor._wrap(p) for p in ph_c), tuple(Tensor._wrap(p) for p in ph_x))
    new = tuple(T.as_tensor(c) for c in new)
    ys = tuple(T.as_tensor(y) for y in ys)
    if len(new) != len(cn):
        raise ValueError(f"scan: step returned {len(new)} carries, expected {len(cn)}")
    for i, (a, c) in enumerate(zip(new, cn)):
        if not sh.same_shape(a.shape, c.shape) or a.dtype is not c.dtype:
            raise ValueError(f"scan: carry {i} enters the step as {c.dtype.short}"
                             f"{sh.fmt_shape(c.shape)} and leaves it as {a.dtype.short}"
                             f"{sh.fmt_shape(a.shape)}")
    results = [t.node for t in new] + [t.node for t in ys]

    # the body: nodes that depend on a placeholder; the rest are invariant operands
    bb = Builder(intern=True)
    env: dict[int, Node] = {}
    ins = list(ph_c) + list(ph_x)
    body_in: list[Node] = []
    for p in ins:
        q = bb.input(p.attrs["name"], "arg", p.shape, p.dtype)
        q.rg = p.rg
        env[p.id] = q
        body_in.append(q)
    consts: list[Node] = []
    varies: dict[int, bool] = {p.id: True for p in ins}

    def variant(n: Node) -> bool:
        # nodes older than the placeholders cannot depend on them (ids only grow)
        if n.id < first:
            return False
        v = varies.get(n.id)
        if v is None:
            v = varies[n.id] = any(variant(x) for x in n.inputs)
        return v

    def invariant(n: Node) -> bool:
        # an invariant value enters the body as an operand, except constants and views: a
        # broadcast bias, a reshape or ``W.T`` is free inside the body, while as an operand it
        # would be materialised (at the batch size; a transposed weight copy per call) and the
        # body's ``x @ W.T`` would lose the layout the GEMM reads best (W in place, not packed
        # at every step). The reverse scan sums such a weight's gradient as one GEMM after the
        # loop either way (``passes.loops._weight_grads``)
        return not variant(n) and n.op not in ("const", "iota", "expand", "reshape", "permute")

    def build(n: Node) -> Node:
        hit = env.get(n.id)
        if hit is not None:
            return hit
        if invariant(n):
            q = bb.input(f"w{len(consts)}", "arg", n.shape, n.dtype)
            q.rg = n.rg
            consts.append(n)
            body_in.append(q)
            env[n.id] = q
            return q
        todo = [(n, False)]
        while todo:  # iterative: long bodies must not hit the recursion limit
            x, ready = todo.pop()
            if x.id in env:
                continue
            if invariant(x):
                env[x.id] = build(x)  # an invariant operand: not looked into
                continue
            if not ready:
                todo.append((x, True))
                todo.extend((y, False) for y in x.inputs if y.id not in env)
                continue
            env[x.id] = bb.op_like(x, [build(y) for y in x.inputs])
        return env[n.id]

    outs = [build(r) for r in results]
    if any(x.rg for x in cn + xn + consts) and grad:
        # stored for the reverse scan: the carries entering each step (passes/loops.py)
        outs += [env[p.id] for p in ph_c if p.dtype.is_float]
    body = Graph("scan_body", body_in, outs)
    s = bld.op("scan", cn + xn + consts, body=body, carries=len(cn), xs=len(xn),
               reverse=bool(reverse), **({"remat": True} if remat else {}))
    k = len(cn)
    finals = tuple(Tensor._wrap(bld.op("scan_out", (s,), index=i)) for i in range(k))
    stacked = tuple(Tensor._wrap(bld.op("scan_out", (s,), index=k + j))
                    for j in range(len(ys)))
    return finals, stacked


__all__ = ["scan"]
