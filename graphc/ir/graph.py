"""The IR: typed SSA nodes, an interning builder, and graphs with state.

A ``Node`` is one op applied to earlier nodes, with a shape (ints or sympy expressions) and a
dtype. Nodes are never mutated after creation (the one exception is ``_value``, the eager
interpreter's cache, which is not part of the IR). A ``Builder`` creates nodes through the shape
rules of ``ops.py`` and, when interning, returns the existing node for an identical
(op, inputs, attrs) triple, so common subexpressions are shared for free.

A ``Graph`` is a pure function ``(args, state, hyper) -> (outputs, new state)``: state inputs
are ``input`` nodes of kind ``param``/``grad``/``state``/``flag``, and ``updates`` name the state
slots the step writes. "In place" is a property of the lowered code, not of the IR.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy

from ..autograd import is_grad_enabled
from . import dtypes as dt
from . import ops
from . import shapes as sh

_ids = itertools.count()

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # graphc/
_OWN_DIRS = (
    _PKG_DIR,
    os.path.join(os.path.dirname(_PKG_DIR), "passes"),
    os.path.join(os.path.dirname(_PKG_DIR), "codegen"),
)


_USER_FILE: dict[str, str | None] = {}  # code file name -> its absolute path, None if ours


def _user_file(name: str) -> str | None:
    hit = _USER_FILE.get(name, False)
    if hit is False:
        fn = os.path.abspath(name)
        hit = None if fn.startswith(_OWN_DIRS) or "importlib" in fn else fn
        if len(_USER_FILE) < 4096:
            _USER_FILE[name] = hit
    return hit  # type: ignore[return-value]


def user_location() -> str | None:
    """File and line of the innermost stack frame outside graphc (the user's call site).

    Asked for every traced node, so each file's verdict is remembered (``abspath`` per frame
    was a quarter of tracing a 12-layer GPT step)."""
    f = sys._getframe(1)
    while f is not None:
        fn = _user_file(f.f_code.co_filename)
        if fn is not None:
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return None


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


class Node:
    """One SSA value. Compare by identity; intern through a Builder for structural sharing."""

    __slots__ = ("op", "inputs", "shape", "dtype", "attrs", "id", "loc", "rg", "_value",
                 "freed", "__weakref__")

    def __init__(self, op: str, inputs: tuple[Node, ...], shape: sh.Shape, dtype: dt.DType,
                 attrs: dict[str, Any], loc: str | None = None) -> None:
        self.op = op
        self.inputs = inputs
        self.shape = shape
        self.dtype = dtype
        self.attrs = attrs
        self.id = next(_ids)
        self.loc = loc
        self.rg = False  # on a differentiable path from a leaf that requires grad
        self._value = None
        # an eager backward without retain_graph went through it: its saved values are
        # "freed", as in PyTorch (a second backward through it raises)
        self.freed = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def name(self) -> str | None:
        return self.attrs.get("name")

    def __repr__(self) -> str:
        return f"<Node {self.op}#{self.id} {self.dtype.short}{sh.fmt_shape(self.shape)}>"


def _scalar_const_key(value: Any) -> Any:
    # 0.0 and -0.0 (and 1 and 1.0 and True) must intern to different constants
    if isinstance(value, float):
        return ("f", repr(value))
    return (type(value).__name__, value if not isinstance(value, sympy.Basic) else str(value))


class Builder:
    """Creates nodes with shape inference, build-time identities, and optional interning.

    Interning is what makes CSE free in traced graphs. The eager tape uses a non-interning
    builder so the cache never holds on to user tensors.
    """

    def __init__(self, intern: bool = True, track_loc: bool = True) -> None:
        self.intern = intern
        self.track_loc = track_loc
        self._table: dict[Any, Node] = {}

    # -- core --------------------------------------------------------------------------------
    def op(self, op: str, inputs: Sequence[Node] = (), **attrs: Any) -> Node:
        return self._make(op, inputs, attrs, None)

    def op_like(self, n: Node, inputs: Sequence[Node]) -> Node:
        """``n``'s op and attributes over ``inputs`` of the same shapes and dtypes as ``n``'s
        own: the node's type is ``n``'s, so its shape rule is not run again (a pass that
        rebuilds every node, ``simplify``, spent half its time re-inferring them). The
        verifier (``GRAPHC_VERIFY_IR``, on in the tests) still checks every result."""
        return self._make(n.op, inputs, dict(n.attrs), (n.shape, n.dtype))

    def _make(self, op: str, inputs: Sequence[Node], attrs: dict[str, Any],
              known: tuple[Any, Any] | None) -> Node:
        inputs = tuple(inputs)
        rg = (op not in ("detach", "input") and is_grad_enabled()
              and any(x.rg for x in inputs) and ops.OP_INFO[op].differentiable)
        key = None
        if self.intern and op not in ("input", "rand"):
            fa = tuple(sorted(attrs.items()))  # keys are unique: only they are compared
            try:
                hash(fa)
            except TypeError:  # a list or dict attribute: its frozen form is the key
                fa = tuple(sorted((k, _freeze(v)) for k, v in attrs.items()))
            if op == "const":
                fa = fa + (("__v", _scalar_const_key(attrs["value"])),)
            key = (op, tuple(x.id for x in inputs), fa, rg)
            hit = self._table.get(key)
            if hit is not None:
                return hit
        try:
            shape, dtype = ops.infer(op, inputs, attrs) if known is None else known
        except (ops.OpError, sh.ShapeError) as e:
            loc = user_location()
            err = type(e)(f"{e}" + (f" (at {loc})" if loc else ""))
            err.__dict__.update(e.__dict__)  # a ShapeError's ``symbols``
            raise err from None
        node = Node(op, inputs, shape, dtype, attrs, user_location() if self.track_loc else None)
        node.rg = rg
        if key is not None:
            self._table[key] = node
        return node

    # -- leaves ------------------------------------------------------------------------------
    def input(self, name: str, kind: str, shape: Sequence[Any], dtype: dt.DType, **extra: Any
              ) -> Node:
        return self.op("input", (), name=name, kind=kind, shape=sh.shape(shape), dtype=dtype,
                       **extra)

    def const(self, value: Any, shape: Sequence[Any] = (), dtype: dt.DType = dt.float32) -> Node:
        if isinstance(value, sympy.Basic) and value.is_number:
            value = int(value) if value.is_Integer else float(value)
        if isinstance(value, (bool, int, float)) and not isinstance(value, sympy.Basic):
            if dtype.is_float:
                value = float(value)
            elif dtype is dt.bool_:
                value = bool(value)
            else:
                value = int(value)
        return self.op("const", (), value=value, shape=sh.shape(shape), dtype=dtype)

    def full_like(self, x: Node, value: Any, dtype: dt.DType | None = None) -> Node:
        return self.const(value, x.shape, dtype or x.dtype)

    # -- movement with identities ----------------------------------------------------------
    def reshape(self, x: Node, shape: Sequence[Any]) -> Node:
        shape = sh.reshape(x.shape, shape)
        if sh.same_shape(shape, x.shape):
            return x
        if x.op == "reshape":
            x = x.inputs[0]
            if sh.same_shape(shape, x.shape):
                return x
        if x.op == "const":
            return self.const(x.attrs["value"], shape, x.dtype)
        return self.op("reshape", (x,), shape=shape)

    def permute(self, x: Node, perm: Sequence[int]) -> Node:
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(len(perm))):
            return x
        if x.op == "permute":
            inner = x.attrs["perm"]
            return self.permute(x.inputs[0], tuple(inner[p] for p in perm))
        return self.op("permute", (x,), perm=perm)

    def expand(self, x: Node, shape: Sequence[Any]) -> Node:
        shape = sh.shape(shape)
        if sh.same_shape(shape, x.shape):
            return x
        if x.op == "const":
            return self.const(x.attrs["value"], shape, x.dtype)
        if x.op == "expand":
            x = x.inputs[0]
        return self.op("expand", (x,), shape=shape)

    def broadcast_to(self, x: Node, shape: Sequence[Any]) -> Node:
        """Right-aligned broadcasting: reshape to the target rank, then expand."""
        shape = sh.shape(shape)
        if not sh.can_expand(x.shape, shape):
            raise ops.OpError(
                f"broadcast: cannot broadcast {x.dtype.short}{sh.fmt_shape(x.shape)} to "
                f"{sh.fmt_shape(shape)}"
            )
        if len(x.shape) < len(shape):
            x = self.reshape(x, (1,) * (len(shape) - len(x.shape)) + tuple(x.shape))
        return self.expand(x, shape)

    def sum_to(self, g: Node, shape: Sequence[Any]) -> Node:
        """Reverse of ``broadcast_to``: sum ``g`` down to ``shape`` (the VJP of broadcasting)."""
        shape = sh.shape(shape)
        if sh.same_shape(g.shape, shape):
            return g
        lead = len(g.shape) - len(shape)
        padded = (1,) * lead + tuple(shape)
        axes = tuple(i for i, (a, b) in enumerate(zip(g.shape, padded))
                     if i < lead or (b == 1 and not sh.same(a, 1)))
        if axes:
            g = self.op("sum", (g,), axes=axes)
        return self.reshape(g, shape)

    def cast(self, x: Node, dtype: dt.DType) -> Node:
        if x.dtype is dtype:
            return x
        if x.op == "const":
            return self.const(x.attrs["value"], x.shape, dtype)
        return self.op("cast", (x,), dtype=dtype)

    # -- arithmetic helpers used by autodiff and the optimizers ----------------------------
    def binary(self, op: str, a: Node, b: Node) -> Node:
        if not sh.same_shape(a.shape, b.shape):
            s = sh.broadcast(a.shape, b.shape, op)
            a, b = self.broadcast_to(a, s), self.broadcast_to(b, s)
        return self.op(op, (a, b))

    def add(self, a: Node, b: Node) -> Node:
        return self.binary("add", a, b)

    def sub(self, a: Node, b: Node) -> Node:
        return self.binary("sub", a, b)

    def mul(self, a: Node, b: Node) -> Node:
        return self.binary("mul", a, b)

    def div(self, a: Node, b: Node) -> Node:
        return self.binary("div", a, b)

    def neg(self, a: Node) -> Node:
        return self.op("neg", (a,))

    def where(self, c: Node, a: Node, b: Node) -> Node:
        s = sh.broadcast(sh.broadcast(c.shape, a.shape), b.shape)
        return self.op("where", (self.broadcast_to(c, s), self.broadcast_to(a, s),
                                 self.broadcast_to(b, s)))

    def scalar(self, value: Any, like: Node) -> Node:
        return self.const(value, (), like.dtype)


@dataclass(eq=False)
class Graph:
    """A pure step function: ordered nodes from inputs to outputs and state updates.

    Compared and hashed by identity, like nodes: a graph can be a node attribute (a scan's
    ``body``), so the interning builder must be able to hash it, and two bodies are the same
    body only if they are the same object."""

    name: str
    inputs: list[Node]
    outputs: list[Node]
    updates: list[tuple[str, Node]] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def roots(self) -> list[Node]:
        # check_finite flags come first, so each is computed right after the tensor it checks
        # (before the state updates that read it); see graphc/checks.py
        return (list(self.meta.get("finite_flags", ())) + list(self.outputs)
                + [n for _, n in self.updates])

    def nodes(self) -> list[Node]:
        """All nodes reachable from the outputs and updates, in a deterministic topo order.

        Remembered for the roots and inputs it was computed from (nodes never change their
        inputs, so the order is a function of those): the passes, the planner and the
        printer each ask for it, ~15 times per compile."""
        roots = self.roots
        key = (tuple(n.id for n in roots), tuple(n.id for n in self.inputs))
        memo = self.__dict__.get("_topo")
        if memo is None or memo[0] != key:
            memo = (key, toposort(roots, self.inputs))
            self.__dict__["_topo"] = memo
        return list(memo[1])

    def inputs_of(self, kind: str) -> list[Node]:
        return [n for n in self.inputs if n.attrs["kind"] == kind]

    def symbols(self) -> list[sympy.Symbol]:
        syms = sh.free_symbols(n.shape for n in self.inputs)
        return sorted(syms, key=lambda s: s.name)

    def __str__(self) -> str:
        from .text import format_graph

        return format_graph(self)


def toposort(roots: Iterable[Node], leaves_first: Sequence[Node] = ()) -> list[Node]:
    """Every node ``roots`` reach, operands before users (depth first), ``leaves_first``
    first. Nodes are told apart by identity: an eager compiled result is a value-only
    leaf of a shared ``id`` (``graphc._tensor._OutNode``), and two of them in one eager
    tape are two operands."""
    order: list[Node] = []
    seen: set[int] = set()
    for leaf in leaves_first:
        if id(leaf) not in seen:
            seen.add(id(leaf))
            order.append(leaf)
    for root in roots:
        if id(root) in seen:
            continue
        stack: list[tuple[Node, int]] = [(root, 0)]
        while stack:
            node, i = stack.pop()
            if i < len(node.inputs):
                stack.append((node, i + 1))
                child = node.inputs[i]
                if id(child) not in seen:
                    stack.append((child, 0))
            elif id(node) not in seen:
                seen.add(id(node))
                order.append(node)
    return order

