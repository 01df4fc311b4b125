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
        astr = " {" + ", ".join(_attr_str(k, v) for k, v in sorted(attrs.items())) + "}" \
            if attrs else ""
        sep = " " if args else ""
        lines.append(f"  {name} = {n.op}{sep}{args}{astr} : {type_str(n)}")
    if g.outputs:
        lines.append("  return (" + ", ".join(names[o.id] for o in g.outputs) + ")")
    for slot, n in g.updates:
        lines.append(f"  update {slot} <- {names[n.id]}")
    for n, what in zip(g.meta.get("finite_flags", ()), g.meta.get("finite_names", ())):
        lines.append(f"  check_finite {names[n.id]}  # {what}")
    lines.append("}")
    if g.guards:
        lines.append("guards: " + "; ".join(g.guards))
    for k, v in g.meta.items():
        if isinstance(v, str) and "\n" not in v:
            lines.append(f"# {k}: {v}")
    return "\n".join(lines) + "\n"
