"""Many steps as one loop: a whole step graph becomes the body of a ``scan``.

Why a graph transform: a training step is already a pure graph (``inputs -> outputs,
updates``), and the loop node (``graphc/ir/loops.py``) runs a pure graph once per element of
stacked sequences while threading carried values. So K training steps are one ``scan`` whose
carries are the state the step updates (parameters, buffers, ``.grad``, optimizer state,
step counts), whose sequences are what changes from one step to the next (the batch, the
hyperparameters a schedule moves, the dropout seed), and whose invariants are the state it
only reads (frozen parameters). The K-step graph is compiled once for every K (the trip count
is the symbol ``K``), and its native code is one loop calling the step's kernels: no call
overhead, argument checks or state publication between steps.

The result keeps the step's input names and update slots, so the front end
(``graphc/multistep.py``) feeds and commits it through the same signature machinery as the
step itself; the updates are the carries after the last step, committed only when every
step has run (a failing step changes nothing).
"""

from __future__ import annotations

from collections.abc import Collection

from graphc.ir import Builder, Graph, Node
from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh

STEPS = sh.symbol("K")  # the trip count of a many-steps graph


def _fmt(n: Node) -> str:
    return f"{n.dtype.short}{sh.fmt_shape(n.shape)}"


def steps_scan(g: Graph, per_step: Collection[str], become_true: Collection[str] = ()
               ) -> Graph:
    """The graph of ``K`` successive runs of the step ``g``.

    ``per_step``: names of ``g``'s inputs that take one value per step; in the result they are
    ``arg`` inputs of the same name with a leading ``K`` axis (``K`` = ``STEPS``). Every other
    input keeps its name, kind and type. An input that an update of the same slot name writes
    is carried from step to step; an update slot no input reads (a ``.grad`` the step creates
    afresh) is carried from a first value it never reads; the remaining inputs are read unchanged by
    every step. ``become_true``: bool inputs (the presence flags of optimizer state the step
    writes) that are carried and true from the second step on.

    Outputs: each of ``g``'s outputs stacked over the steps (leading ``K`` axis). Updates: the
    same slots, with the values after the last step.
    """
    names = {n.attrs["name"]: n for n in g.inputs}
    missing = [s for s in list(per_step) + list(become_true) if s not in names]
    if missing:
        raise ValueError(f"steps_scan: the step has no input named {missing[0]!r}")
    for s in become_true:
        n = names[s]
        if n.dtype is not dt.bool_ or n.shape != ():
            raise ValueError(f"steps_scan: {s!r} is {_fmt(n)}, not a bool scalar flag")
    if not g.outputs and not g.updates:
        raise ValueError("steps_scan: the step computes nothing")
    if g.meta.get("finite_flags"):
        raise ValueError("steps_scan: a step with finite checks cannot be looped")

    outer = Builder(intern=True)
    bb = Builder(intern=True)
    top: dict[str, Node] = {}  # name -> the K-step graph's input
    for n in g.inputs:
        name, kind = n.attrs["name"], n.attrs["kind"]
        if name in per_step:
            top[name] = outer.input(name, "arg", (STEPS,) + tuple(n.shape), n.dtype)
        else:
            top[name] = outer.input(name, kind, n.shape, n.dtype)
        top[name].rg = n.rg

    env: dict[int, Node] = {}
    carries: list[tuple[Node, Node]] = []  # (initial value, body placeholder)
    carry_out: list[Node] = []  # the step's node for each carry's next value
    slots: list[str | None] = []  # the update slot each carry commits (None: none)
    for slot, node in g.updates:
        src = names.get(slot)
        if src is not None:
            init = top[slot]
            ph = bb.input(slot, "arg", src.shape, src.dtype)
            env[src.id] = ph
        else:
            if sh.free_symbols([node.shape]):
                raise NotImplementedError(
                    f"steps_scan: update {slot!r} ({_fmt(node)}) is created by the step with a "
                    "size that depends on the batch; only fixed-size new state can be carried")
            # the body never reads this carry's first value: any buffer of its type will do,
            # and one the step already has costs nothing (the loop skips copying a carry in
            # that the body never reads: codegen.loop)
            init = next((top[n.attrs["name"]] for n in g.inputs
                         if n.attrs["name"] not in per_step and n.dtype is node.dtype
                         and sh.same_shape(n.shape, node.shape)), None)
            if init is None:
                init = outer.const(0, node.shape, node.dtype)
            ph = bb.input(f"{slot}@0", "arg", node.shape, node.dtype)
        carries.append((init, ph))
        carry_out.append(node)
        slots.append(slot)
    flag_consts: list[Node] = []
    for s in become_true:
        src = names[s]
        if src.id in env:
            continue
        ph = bb.input(s, "arg", (), dt.bool_)
        env[src.id] = ph
        carries.append((top[s], ph))
        carry_out.append(src)  # replaced below by a constant true
        flag_consts.append(src)
        slots.append(None)
    seqs: list[tuple[Node, Node]] = []
    for n in g.inputs:
        name = n.attrs["name"]
        if name in per_step and n.id not in env:
            ph = bb.input(name, "arg", n.shape, n.dtype)
            env[n.id] = ph
            seqs.append((top[name], ph))
    if not seqs:
        raise ValueError("steps_scan: the step has no per-step input (nothing gives the "
                         "number of steps)")
    consts: list[tuple[Node, Node]] = []
    for n in g.inputs:
        if n.id not in env:
            name = n.attrs["name"]
            ph = bb.input(name, "arg", n.shape, n.dtype)
            ph.rg = n.rg
            env[n.id] = ph
            consts.append((top[name], ph))
    for _, ph in carries + seqs:
        ph.rg = False  # the step differentiates inside; nothing differentiates the loop

    true = bb.const(True, (), dt.bool_)
    for n in g.nodes():  # leaves first: every operand is copied before its consumers
        if n.id in env:
            continue
        if n.op == "input":
            raise AssertionError(f"steps_scan: input {n.attrs['name']!r} not bound")
        env[n.id] = bb.op_like(n, [env[x.id] for x in n.inputs])
    flags = {f.id for f in flag_consts}
    body_out = [true if n.id in flags else env[n.id] for n in carry_out]
    body_out += [env[n.id] for n in g.outputs]
    body_in = [ph for _, ph in carries] + [ph for _, ph in seqs] + [ph for _, ph in consts]
    body = Graph(f"{g.name}_step", body_in, body_out)
    operands = [c for c, _ in carries] + [s for s, _ in seqs] + [c for c, _ in consts]
    s = outer.op("scan", operands, body=body, carries=len(carries), xs=len(seqs),
                 reverse=False)
    k = len(carries)
    outputs = [outer.op("scan_out", (s,), index=k + j) for j in range(len(g.outputs))]
    updates = [(slot, outer.op("scan_out", (s,), index=i))
               for i, slot in enumerate(slots) if slot is not None]
    inputs = [top[n.attrs["name"]] for n in g.inputs]
    meta = dict(g.meta)
    meta["steps"] = str(STEPS)
    return Graph(f"{g.name}_steps", inputs, outputs, updates,
                 [f"{STEPS} >= 1"] + list(g.guards), meta)


__all__ = ["STEPS", "steps_scan"]
