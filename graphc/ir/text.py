"""A stable, readable text form of graphs (one node a line, jaxpr-like).

Names are assigned in topological order (``%0``, ``%1``, ...), inputs print by their names, so
the same graph always prints the same text: that is what golden tests and users diff.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sympy

from . import shapes as sh

if TYPE_CHECKING:  # types only: the printer and verifier never need the node classes at run time
    from .graph import Graph, Node

_KIND_ORDER = ("arg", "param", "buffer", "grad", "state", "flag", "hyper", "seed")


def type_str(n: Node) -> str:
    return f"{n.dtype.short}{sh.fmt_shape(n.shape)}"


def _attr_str(k: str, v: Any) -> str:
    if isinstance(v, tuple):
        v = "(" + ",".join(sh.fmt_dim(x) if isinstance(x, sympy.Basic) else str(x) for x in v) + ")"
    elif hasattr(v, "short"):
        v = v.short
    elif isinstance(v, sympy.Basic):
        v = sh.fmt_dim(v)
    return f"{k}={v}"


def _tuple_type(n: Node) -> str:
    from .loops import result_types

    return "(" + ", ".join(f"{d.short}{sh.fmt_shape(s)}" for s, d in result_types(n)) + ")"


def _node_lines(g: Graph, names: dict[int, str], bodies: dict[int, str],
                queue: list[Graph]) -> list[str]:
    """One line per node of ``g`` (inputs already named in ``names``); a scan's body is
    named ``@bodyK`` the first time it is seen and queued to print once, after the graph."""
    lines = []
    i = 0
    for n in g.nodes():
        if n.op == "input":
            continue
        name = f"%{i}"
        i += 1
        names[n.id] = name
        args = ", ".join(names[x.id] for x in n.inputs)
        attrs = {k: v for k, v in n.attrs.items() if k not in ("shape", "dtype")}
        if n.op == "const":
            val = attrs.pop("value")
            args = sh.fmt_dim(val) if isinstance(val, sympy.Basic) else repr(val)
        if n.op == "scan":
            body = attrs["body"]
            if id(body) not in bodies:
                bodies[id(body)] = f"@body{len(bodies)}"
                queue.append(body)
            attrs["body"] = bodies[id(body)]
        astr = " {" + ", ".join(_attr_str(k, v) for k, v in sorted(attrs.items())) + "}" \
            if attrs else ""
        sep = " " if args else ""
        ty = _tuple_type(n) if n.op == "scan" else type_str(n)
        lines.append(f"  {name} = {n.op}{sep}{args}{astr} : {ty}")
    return lines


def _format_bodies(queue: list[Graph], bodies: dict[int, str]) -> list[str]:
    """Each scan body once: ``@bodyK(inputs) { nodes; return (...) }``, nested ones after."""
    lines: list[str] = []
    done = 0
    while done < len(queue):
        body = queue[done]
        done += 1
        names = {n.id: n.attrs["name"] for n in body.inputs}
        lines.append(f"{bodies[id(body)]}(" + ", ".join(
            f"{n.attrs['name']}: {type_str(n)}" for n in body.inputs) + ") {")
        lines += _node_lines(body, names, bodies, queue)
        lines.append("  return (" + ", ".join(names[o.id] for o in body.outputs) + ")")
        lines.append("}")
    return lines


def format_graph(g: Graph) -> str:
    names: dict[int, str] = {}
    for n in g.inputs:
        names[n.id] = n.attrs["name"]
    lines = []
    groups = {k: [n for n in g.inputs if n.attrs["kind"] == k] for k in _KIND_ORDER}
    head = f"graph {g.name}(" + ", ".join(
        f"{n.attrs['name']}: {type_str(n)}" for n in groups["arg"]) + ")"
    lines.append(head)
    for k in _KIND_ORDER[1:]:
        if groups[k]:
            lines.append(f"  {k}(" + ", ".join(
                f"{n.attrs['name']}: {type_str(n)}" for n in groups[k]) + ")")
    lines.append("{")
    bodies: dict[int, str] = {}
    queue: list[Graph] = []
    lines += _node_lines(g, names, bodies, queue)
    if g.outputs:
        lines.append("  return (" + ", ".join(names[o.id] for o in g.outputs) + ")")
    for slot, n in g.updates:
        lines.append(f"  update {slot} <- {names[n.id]}")
    for n, what in zip(g.meta.get("finite_flags", ()), g.meta.get("finite_names", ())):
        lines.append(f"  check_finite {names[n.id]}  # {what}")
    lines.append("}")
    lines += _format_bodies(queue, bodies)
    if g.guards:
        lines.append("guards: " + "; ".join(g.guards))
    for k, v in g.meta.items():
        if isinstance(v, str) and "\n" not in v:
            lines.append(f"# {k}: {v}")
    return "\n".join(lines) + "\n"
