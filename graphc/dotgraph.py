"""Graphviz (dot) rendering of an IR graph, for people reading a compiled step.

A training step's graph mixes three computations that users reason about separately: the
forward pass that produces the outputs, the backward pass that produces gradients, and the
optimizer update that writes parameters and optimizer state. The text form interleaves them in
one topological order; the picture puts each in its own coloured cluster and draws each kind of
input (argument, parameter, gradient, optimizer state, hyperparameter, ...) with its own shape,
so the structure of the step is visible at a glance.

Classification (a property of the graph alone, so it works for every stage):

- **forward**: the node contributes to a returned output;
- **grad**: otherwise, it contributes to a gradient update slot (``*.grad``) or depends on an
  incoming gradient input;
- **update**: otherwise (it only feeds parameter, buffer or optimizer-state update slots).

A step that returns nothing has no forward nodes by this rule; its loss computation shows as
part of the gradient cluster, which is what it is used for.

The output is deterministic: nodes are numbered in the graph's topological order exactly as the
text printer numbers them (``%0``, ``%1``, ...), so a dot file and a text dump of the same
stage can be read side by side, and two dumps of the same graph diff cleanly.
"""

from __future__ import annotations

import sympy

from .ir import Graph, Node
from .ir import shapes as sh
from .ir.text import _attr_str, type_str

# input kind -> (shape, fill colour); kinds not listed fall back to _DEFAULT_INPUT
INPUT_STYLE: dict[str, tuple[str, str]] = {
    "arg": ("invhouse", "#ffffff"),
    "param": ("box3d", "#fff2b3"),
    "buffer": ("folder", "#f2e6d9"),
    "grad": ("note", "#f9d0c4"),
    "state": ("cylinder", "#d5efd5"),
    "flag": ("octagon", "#eeeeee"),
    "hyper": ("diamond", "#e6daf2"),
}
_DEFAULT_INPUT = ("box", "#ffffff")

# cluster -> (label, border colour, node fill colour)
CLUSTER_STYLE: dict[str, tuple[str, str, str]] = {
    "forward": ("forward", "#4477aa", "#dbe8f5"),
    "grad": ("gradient", "#cc6633", "#fbe3d6"),
    "update": ("optimizer update", "#338833", "#dcf2dc"),
}

# update-slot kinds that make a node an optimizer update rather than a gradient
_UPDATE_KINDS = ("param", "buffer", "state")


def _q(s: str) -> str:
    """A dot double-quoted string (IR names contain dots, brackets and question marks)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def slot_kind(graph: Graph, slot: str) -> str:
    """The kind of state an update slot writes: the kind of the input of the same name, or
    ``grad`` for a gradient slot that has no incoming-gradient input (the usual case after
    ``zero_grad()``)."""
    for n in graph.inputs:
        if n.attrs["name"] == slot:
            return str(n.attrs["kind"])
    if slot.endswith(".grad") or ".grad_" in slot:
        return "grad"
    return "state"


def classify(graph: Graph) -> dict[int, str]:
    """``{node id: "forward" | "grad" | "update"}`` for every non-input node (see module doc)."""
    nodes = graph.nodes()
    reaches: dict[int, set[str]] = {n.id: set() for n in nodes}
    for o in graph.outputs:
        reaches[o.id].add("forward")
    for slot, n in graph.updates:
        kind = slot_kind(graph, slot)
        reaches[n.id].add("update" if kind in _UPDATE_KINDS else "grad")
    # propagate from consumers to producers (reverse topological order)
    for n in reversed(nodes):
        for x in n.inputs:
            reaches[x.id] |= reaches[n.id]
    from_grad: set[int] = set()
    for n in nodes:
        if (n.op == "input" and n.attrs.get("kind") == "grad") or any(
                x.id in from_grad for x in n.inputs):
            from_grad.add(n.id)
    out: dict[int, str] = {}
    for n in nodes:
        if n.op == "input":
            continue
        r = reaches[n.id]
        if "forward" in r:
            out[n.id] = "forward"
        elif "grad" in r or n.id in from_grad:
            out[n.id] = "grad"
        else:
            out[n.id] = "update"
    return out


def _op_label(n: Node, name: str) -> str:
    attrs = {k: v for k, v in n.attrs.items() if k not in ("shape", "dtype")}
    head = f"{name} {n.op}"
    if n.op == "const":
        val = attrs.pop("value")
        head += " " + (sh.fmt_dim(val) if isinstance(val, sympy.Basic) else repr(val))
    lines = [head]
    if attrs:
        lines.append(", ".join(_attr_str(k, v) for k, v in sorted(attrs.items())))
    lines.append(type_str(n))
    return "\n".join(lines)


def format_dot(graph: Graph, title: str | None = None) -> str:
    """The graph as a Graphviz ``digraph`` (deterministic text; see the module docstring).

    ``title`` labels the picture (the CLI passes ``"step (optimized)"``); by default the
    graph's name.
    """
    ids: dict[int, str] = {}
    names: dict[int, str] = {}
    lines: list[str] = [
        f"digraph {_q(graph.name)} {{",
        f"  graph [label={_q(title or graph.name)}, labelloc=t, fontname=Helvetica, "
        "rankdir=TB, newrank=true];",
        "  node [fontname=Helvetica, fontsize=10, style=filled];",
        "  edge [color=\"#555555\", arrowsize=0.6];",
    ]

    lines.append("  // inputs")
    for i, n in enumerate(graph.inputs):
        ids[n.id] = f"in{i}"
        kind = str(n.attrs["kind"])
        shape, fill = INPUT_STYLE.get(kind, _DEFAULT_INPUT)
        label = f"{n.attrs['name']}\n{kind} {type_str(n)}"
        lines.append(f"  {ids[n.id]} [label={_q(label)}, shape={shape}, fillcolor={_q(fill)}];")

    classes = classify(graph)
    body: list[Node] = []
    k = 0
    for n in graph.nodes():
        if n.op == "input":
            if n.id not in ids:  # an input reached but not listed: still draw it
                ids[n.id] = f"in{len(ids)}"
                lines.append(f"  {ids[n.id]} [label={_q(str(n.attrs.get('name')))}];")
            continue
        names[n.id] = f"%{k}"
        ids[n.id] = f"n{k}"
        k += 1
        body.append(n)

    for cluster, (label, border, fill) in CLUSTER_STYLE.items():
        members = [n for n in body if classes[n.id] == cluster]
        if not members:
            continue
        lines.append(f"  subgraph cluster_{cluster} {{")
        lines.append(f"    label={_q(label)}; color={_q(border)}; fontcolor={_q(border)}; "
                     "style=rounded;")
        for n in members:
            shape = "plain" if n.op == "const" else "box"
            lines.append(f"    {ids[n.id]} [label={_q(_op_label(n, names[n.id]))}, "
                         f"shape={shape}, fillcolor={_q(fill)}];")
        lines.append("  }")

    lines.append("  // results")
    for i in range(len(graph.outputs)):
        lines.append(f"  out{i} [label={_q(f'return {i}')}, shape=doublecircle, "
                     "fillcolor=\"#dbe8f5\"];")
    for i, (slot, _) in enumerate(graph.updates):
        kind = slot_kind(graph, slot)
        fill = CLUSTER_STYLE["update" if kind in _UPDATE_KINDS else "grad"][2]
        lines.append(f"  upd{i} [label={_q(f'update {slot}')}, shape=cds, "
                     f"fillcolor={_q(fill)}];")

    lines.append("  // edges")
    for n in body:
        for x in n.inputs:
            lines.append(f"  {ids[x.id]} -> {ids[n.id]};")
    for i, o in enumerate(graph.outputs):
        lines.append(f"  {ids[o.id]} -> out{i};")
    for i, (_, n) in enumerate(graph.updates):
        lines.append(f"  {ids[n.id]} -> upd{i} [style=dashed];")
    lines.append("}")
    return "\n".join(lines) + "\n"

