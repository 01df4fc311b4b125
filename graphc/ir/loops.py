"""The loop node: ``scan`` over a leading axis with carried state, and ``scan_out``.

Why a node with a sub-graph: a recurrence unrolled into the step grows the graph, the code and
the compile time with the sequence length, and every new length traces again. A ``scan``
keeps one copy of the loop body (a nested ``Graph`` held in its ``body`` attribute, like a
JAX ``scan`` equation holds its jaxpr), and its trip count is the leading dim of its ``xs``
operands: a symbol, so one compile serves every length.

Form (operands in this order)::

    %s = scan c0_1..c0_k, xs_1..xs_m, w_1..w_p {body=B, carries=k, xs=m, reverse=False}
    %h = scan_out %s {index=i}

- ``body``: a Graph with inputs ``(c_1..c_k, x_1..x_m, w_1..w_p)`` (all ``arg`` inputs, no
  state, no updates) and outputs ``(c'_1..c'_k, y_1..y_n)``; ``c'_i`` has ``c_i``'s type,
  ``x_j`` is one step of ``xs_j`` (its type without the leading axis), ``w`` are values the
  body reads at every step (weights, hoisted loop invariants);
- the trip count ``T`` is ``xs_1.shape[0]`` (every ``xs`` shares it; at least one is given);
- ``reverse`` walks ``t = T-1 .. 0``; the stacked outputs are still indexed by ``t``;
- the results are a tuple: the final carries ``(c_T,1..c_T,k)`` then the stacked outputs
  ``(Y_1..Y_n)``, ``Y_j[t] = y_j`` at step ``t`` (shape ``(T,) + y_j.shape``). A ``scan``
  node's own shape and dtype are placeholders (``()``, bool); its values are read through
  ``scan_out`` nodes, one per result used. Every consumer of a ``scan`` is a ``scan_out``.

Nodes stay immutable: the body graph is built once and never changed; passes that transform
a body build a new graph and a new node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import dtypes as dt
from . import shapes as sh

if TYPE_CHECKING:
    from .graph import Graph, Node

# the placeholder type of a scan node itself (its results are read through scan_out)
TUPLE_SHAPE: tuple = ()
TUPLE_DTYPE = dt.bool_


class ScanError(ValueError):
    """A scan whose operands or body do not agree (raised as the shape rule's OpError)."""


def _fmt(x: Any) -> str:
    return f"{x.dtype.short}{sh.fmt_shape(x.shape)}"


def operand_groups(n: Node) -> tuple[tuple[Node, ...], tuple[Node, ...], tuple[Node, ...]]:
    """``(carries, xs, consts)``: a scan node's operands split by role."""
    k, m = n.attrs["carries"], n.attrs["xs"]
    return n.inputs[:k], n.inputs[k:k + m], n.inputs[k + m:]


def trip_count(n: Node) -> Any:
    """The number of steps ``T`` of a scan (an int or a symbol)."""
    return n.inputs[n.attrs["carries"]].shape[0]


def result_types(n: Node) -> list[tuple[sh.Shape, dt.DType]]:
    """The types of a scan's results: the final carries, then the stacked outputs."""
    body, k = n.attrs["body"], n.attrs["carries"]
    t = trip_count(n)
    out = [(o.shape, o.dtype) for o in body.outputs[:k]]
    out += [((t,) + tuple(o.shape), o.dtype) for o in body.outputs[k:]]
    return out


def check_scan(xs: Sequence[Any], a: dict) -> None:
    """The scan's shape rule: operands against the body's inputs and outputs."""
    body, k, m = a.get("body"), a.get("carries"), a.get("xs")
    if body is None or not hasattr(body, "inputs") or not isinstance(k, int) \
            or not isinstance(m, int):
        raise ScanError("scan: needs body=<Graph>, carries=<int>, xs=<int>")
    if m < 1:
        raise ScanError("scan: needs at least one sequence operand (xs >= 1): its leading "
                        "dim is the trip count")
    if len(body.inputs) != len(xs):
        raise ScanError(f"scan: the body takes {len(body.inputs)} inputs, given {len(xs)}")
    if len(body.outputs) < k:
        raise ScanError(f"scan: the body returns {len(body.outputs)} values, fewer than its "
                        f"{k} carries")
    if body.updates:
        raise ScanError("scan: a body has no state updates")
    t = xs[k].shape[0] if xs[k].shape else None
    for i, (x, p) in enumerate(zip(xs, body.inputs)):
        if p.attrs.get("kind") != "arg":
            raise ScanError(f"scan: body input {p.attrs.get('name')!r} is not an arg input")
        if k <= i < k + m:
            if not x.shape or not sh.same(x.shape[0], t):
                raise ScanError(f"scan: sequence operands must share a leading dim, got "
                                f"{_fmt(x)} (trip count {sh.fmt_dim(t)})")
            want = tuple(x.shape[1:])
        else:
            want = tuple(x.shape)
        if not sh.same_shape(want, p.shape) or x.dtype is not p.dtype:
            role = "carry" if i < k else ("sequence" if i < k + m else "invariant")
            raise ScanError(f"scan: {role} operand {i} is {_fmt(x)} but the body's input "
                            f"{p.attrs.get('name')!r} is {_fmt(p)}")
    for i in range(k):
        o, p = body.outputs[i], body.inputs[i]
        if not sh.same_shape(o.shape, p.shape) or o.dtype is not p.dtype:
            raise ScanError(f"scan: carry {i} enters the body as {_fmt(p)} but leaves it as "
                            f"{_fmt(o)}")


def check_scan_out(xs: Sequence[Any], a: dict) -> tuple[sh.Shape, dt.DType]:
    """``scan_out``'s rule: its operand is a scan, ``index`` one of its results."""
    s = xs[0]
    if getattr(s, "op", None) != "scan":
        raise ScanError(f"scan_out: operand must be a scan node, got {getattr(s, 'op', s)}")
    types = result_types(s)
    i = a.get("index")
    if not isinstance(i, int) or not 0 <= i < len(types):
        raise ScanError(f"scan_out: index {i} out of range for a scan with {len(types)} "
                        "results")
    return types[i]


# ---------------------------------------------------------------------------------------------
# building and copying bodies

def clone_into(b: Any, g: Graph, inputs: Sequence[Node],
               env: dict[int, Node] | None = None) -> list[Node]:
    """Build ``g``'s computation with builder ``b`` on ``inputs`` (one per graph input):
    returns the nodes of its outputs. Types are ``g``'s own (no shape rule re-run), the
    grad-path flags are recomputed from ``inputs`` (``Builder.op_like``). ``env``, when
    given, receives the copy of every node (by the original's id)."""
    env = {} if env is None else env
    env.update({p.id: x for p, x in zip(g.inputs, inputs, strict=True)})
    for n in g.nodes():
        if n.id in env:
            continue
        if n.op == "input":
            raise ScanError(f"scan body reads input {n.attrs.get('name')!r} it does not "
                            "declare")
        env[n.id] = b.op_like(n, [env[x.id] for x in n.inputs])
    return [env[o.id] for o in g.outputs]


def reachable(roots: Sequence[Node], stop: set[int]) -> list[Node]:
    """Nodes reachable from ``roots`` without passing through the ids in ``stop`` (those
    are left out), inputs before their users."""
    order: list[Node] = []
    seen: set[int] = set(stop)
    for root in roots:
        if root.id in seen:
            continue
        stack: list[tuple[Node, int]] = [(root, 0)]
        while stack:
            node, i = stack.pop()
            if i < len(node.inputs):
                stack.append((node, i + 1))
                child = node.inputs[i]
                if child.id not in seen:
                    stack.append((child, 0))
            elif node.id not in seen:
                seen.add(node.id)
                order.append(node)
    return order


__all__ = ["TUPLE_SHAPE", "TUPLE_DTYPE", "ScanError", "operand_groups", "trip_count",
           "result_types", "check_scan", "check_scan_out", "clone_into", "reachable"]
