"""Eager ``backward()`` as a cached program: the autodiff pass runs once per tape shape.

A training loop builds the same tape every step: the same ops on the same shapes and
dtypes, wired the same way. Differentiating it node by node through the VJP rules each
time (building and evaluating every gradient node in Python) was half of an eager step.
Instead, the first backward of a tape differentiates it *symbolically* — the same
``passes.autodiff.vjp`` a compiled step uses, with a builder that builds nodes and
evaluates nothing — and flattens the gradient graph into a list of interpreter calls
over numbered value slots: the tape's values first (in topological order), then the
seed, then one slot per gradient node. Later backwards of a tape with the same
structure look that program up and run it on the new tape's values; no rule runs, no
node is built.

What makes two tapes "the same" is everything the rules look at: each node's op,
attributes, shape, dtype, ``requires grad`` flag and operand positions, a leaf's shape,
dtype and flag — and the values the rules read (``ir.elementwise._const_value`` reads a
broadcast constant operand, the exponent of ``x ** 2``): those reads are recorded when
the program is built and compared before it is reused. Tensor hooks and
``retain_grad()`` run user code between gradient nodes; those backwards take the
evaluating path (``engine.eager_backward``).

Values are those of the interpreter: every step is the op's reference through
``interpreter.run_node`` (its bfloat16 rule included), as the evaluating builder
computes them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphc.passes.autodiff import vjp

from ._tensor import broadcast_view
from .interpreter import IMPLS, run_node
from .ir import Builder, Node, toposort
from .ir import dtypes as dt
from .ir.elementwise import eager_const

_CACHE_SIZE = 256  # tape structures; a loop has a handful, one that varies shapes rebuilds


class _SymbolicEager(Builder):
    """Builds gradient nodes without evaluating them. ``eager`` tells the VJP rules that
    the tape's value-only leaves hold values (``_const_value``); each value they read is
    kept in ``const_reads`` so a cached program is reused only where it reads the same."""

    eager = True

    def __init__(self) -> None:
        super().__init__(intern=False, track_loc=False)
        self.const_reads: list[tuple[Node, float]] = []


class _Plan:
    """One tape's backward: ``steps`` (function, node, operand slots, needs the bf16
    rule; a constant is a step whose function is None and whose node is its value), the
    gradient slot of each leaf that requires grad (None: no path) and the constant reads
    it was built under."""

    __slots__ = ("steps", "grad_slots", "reads")

    def __init__(self, steps: list, grad_slots: list[int | None],
                 reads: list[tuple[int, float]]) -> None:
        self.steps = steps
        self.grad_slots = grad_slots
        self.reads = reads

    def run(self, values: list[Any]) -> list[np.ndarray | None]:
        """The leaves' gradients from ``values`` (the tape's values, then the seed)."""
        for fn, node, slots, general in self.steps:
            if fn is None:  # a constant: its value, computed when the plan was built
                values.append(node)
            elif general:
                values.append(run_node(node, [values[i] for i in slots]))
            elif len(slots) == 1:
                values.append(fn(node, values[slots[0]]))
            else:
                values.append(fn(node, *[values[i] for i in slots]))
        return [None if s is None else values[s] for s in self.grad_slots]


_PLANS: OrderedDict[Any, list[_Plan]] = OrderedDict()


def _attr_key(attrs: dict[str, Any]) -> Any:
    """A hashable key of a node's attributes that tells apart what ``==`` does not: a
    float by its repr (0.0 and -0.0, and nan, which is not equal to itself), a bool from
    an int; arrays (and anything else not hashable) make the tape uncacheable (None)."""
    out = []
    for k, v in attrs.items():
        t = type(v)
        if t is float or isinstance(v, np.floating):
            v = ("f", t.__name__, repr(float(v)))
        elif t is bool:
            v = ("b", v)
        elif t is tuple and not all(type(e) is int for e in v):
            v = ("t", repr(v)) if all(type(e) in (int, float, bool) for e in v) else v
        elif t is np.ndarray or t is list or t is dict:
            return None
        out.append((k, v))
    return tuple(out)


# attributes whose values are tuples of ints or a dtype (an eager node's shapes and axes
# are concrete): the attribute items themselves are a faithful key
_PLAIN_ATTRS = frozenset({"shape", "axes", "perm", "dtype"})


def tape_key(order: Sequence[Node]) -> Any:
    """The structure of a tape (``toposort`` of its root) that its backward program
    depends on, or None where it cannot be keyed. Operands are named by position, so
    the key follows which operands are the same node (``x * x`` is not ``x * y``)."""
    pos: dict[int, int] = {}
    parts: list[Any] = []
    add = parts.append
    for i, n in enumerate(order):
        pos[id(n)] = i
        ins = n.inputs
        if not ins:
            add((n.op, n.shape, n.dtype, n.rg))
            continue
        a = n.attrs
        if not a:
            ak: Any = ()
        elif a.keys() <= _PLAIN_ATTRS:
            ak = tuple(a.items())
        else:
            ak = _attr_key(a)
            if ak is None:
                return None
        if len(ins) == 2:
            at: Any = (pos[id(ins[0])], pos[id(ins[1])])
        elif len(ins) == 1:
            at = pos[id(ins[0])]
        else:
            at = tuple([pos[id(x)] for x in ins])
        add((n.op, n.shape, n.dtype, n.rg, ak, at))
    return tuple(parts)  # hashed once, by the cache (a tuple does not keep its hash)


def _same(a: float | None, b: float | None) -> bool:
    return a is b or (a is not None and b is not None and repr(a) == repr(b))


def lookup(key: Any, order: Sequence[Node]) -> _Plan | None:
    """The cached program for a tape of structure ``key`` whose constant operands read as
    they did when it was built (0.0 and -0.0 apart), or None."""
    try:
        plans = _PLANS.get(key)
    except TypeError:  # an attribute that cannot be hashed: no program is kept for it
        return None
    if plans is None:
        return None
    for p in plans:
        for i, v in p.reads:
            if not _same(eager_const(order[i]), v):
                break
        else:
            return p
    return None


class Unplannable(Exception):
    """A gradient graph the flat program cannot hold (the evaluating path runs instead)."""


def _expand(node: Node, x: np.ndarray) -> np.ndarray:
    """The interpreter's ``expand`` (``np.broadcast_to``, a read-only view) built directly
    (``_tensor.broadcast_view``: the gradient of a broadcast scalar or row), ~4 us less."""
    return broadcast_view(x, node.shape)


def _reshape(node: Node, x: np.ndarray) -> np.ndarray:
    return x.reshape(node.shape)


_FAST = {"expand": _expand, "reshape": _reshape}


def _broadcast_const(full: np.ndarray) -> np.ndarray:
    """A constant's value as the evaluating builder holds it: the builder here folds the
    broadcast of a 0-d constant (``b.scalar(2.0, x)`` times ``x``) into one constant of
    the full shape, which the interpreter fills; eagerly that operand is the number
    repeated by zero strides, and references read that as a scalar operand (``x ** 1.0``
    through PyTorch's scalar-exponent paths, ``_POW_SCALAR``). One element, zero strides,
    read-only: the same values, read the same way."""
    if full.size <= 1:
        return full
    one = np.array(full.reshape(-1)[0])
    view = np.ndarray(full.shape, full.dtype, buffer=one, strides=(0,) * full.ndim)
    view.flags.writeable = False
    return view


def build(order: Sequence[Node], root: Node, leaves: Sequence[Node], key: Any) -> _Plan:
    """Differentiate the tape symbolically and flatten the gradient graph into a plan
    (cached under ``key`` unless it is None)."""
    if any(n.op == "compiled_output" for n in order):
        raise Unplannable("a compiled call's result: its backward is a native call")
    b = _SymbolicEager()
    seed = Node("input", (), root.shape, root.dtype, {"name": "seed", "kind": "leaf"})
    grads = vjp(b, [root], [seed], leaves, None, order)
    fixed = [*order, seed]
    # toposort places nodes by identity (compiled results share one ``id``)
    nodes = toposort([g for g in grads if g is not None], fixed)
    slot = {id(n): i for i, n in enumerate(nodes)}
    steps = []
    for n in nodes[len(fixed):]:
        if n.op == "input":
            raise Unplannable(f"a gradient depends on a leaf outside the tape: {n}")
        if not all(type(d) is int for d in n.shape):
            raise Unplannable(f"a symbolic shape: {n}")
        stand_ins = tuple(Node("input", (), x.shape, x.dtype, {"kind": "operand"})
                          for x in n.inputs)
        bare = Node(n.op, stand_ins, n.shape, n.dtype, n.attrs)
        if not n.inputs and n.op == "const":
            steps.append((None, _broadcast_const(run_node(bare, [])), (), False))
            continue
        general = n.dtype is dt.bfloat16 or any(x.dtype is dt.bfloat16 for x in n.inputs)
        fn = _FAST.get(n.op) or IMPLS[n.op]
        steps.append((fn, bare, tuple(slot[id(x)] for x in n.inputs), general))
    if any(slot.get(id(n), len(order)) >= len(order) for n, _ in b.const_reads):
        raise Unplannable("a rule read a constant outside the tape")
    reads = [(slot[id(n)], v) for n, v in b.const_reads]
    plan = _Plan(steps, [None if g is None else slot[id(g)] for g in grads], reads)
    if key is not None:
        try:
            _PLANS.setdefault(key, []).append(plan)
        except TypeError:
            return plan
        while len(_PLANS) > _CACHE_SIZE:  # the oldest structure goes first
            _PLANS.popitem(last=False)
    return plan


def clear() -> None:
    """Forget every cached backward program (tests)."""
    _PLANS.clear()
