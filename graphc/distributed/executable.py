"""A data-parallel step: two native functions around the gradient all-reduce.

``DistributedDataParallel``'s trace hook leaves one graph in which each reduced gradient is
both an update of a bucket slot (the local, pre-scaled gradient) and an input of the same
slot (the reduced gradient). ``split`` cuts that graph in two:

- **pre** (forward + backward): every node the bucket updates need; it writes the local
  gradients straight into the flat bucket buffers (the lowering's direct writes: no copy
  beyond the one DDP also makes into its buckets);
- **post** (optimizer update, ``.grad`` and whatever the step returns): every node that
  depends on a reduced gradient. Values post needs that do not depend on the reduction are
  either recomputed (chains of elementwise and movement ops over inputs: free once fused) or
  *cut*: pre writes them into a small persistent buffer that post reads (the loss, for
  instance), so the forward pass never runs twice. Updates that do not depend on the
  reduction (BatchNorm running statistics) move into pre when post does not read their slot.

Between the two, ``comm.allreduce_sum_`` sums the buckets in place with one non-blocking
MPI call each (mpi4py, buffer protocol, no copies) and waits for all. Both halves are
ordinary backend executables (the CPU JIT or the interpreter), so argument checks, guards,
error handling and "no state changes on error" hold as for any step: pre modifies no user
state, and post runs only after the reduction succeeded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from ..ir import Builder, Graph, Node, toposort
from ..ir import ops as gops
from ..ir import shapes as sh
from ..tensor import Tensor
from ..trace import Signature, Sink, Source
from . import comm

_LEAVES = ("input", "const", "iota")


@dataclasses.dataclass
class Cut:
    """A value computed by pre and read by post through a persistent buffer."""

    node: Node  # in the original graph
    input: Node  # post's input node
    tensor: Tensor  # holds the buffer


@dataclasses.dataclass
class Split:
    pre: Graph
    post: Graph
    cuts: list[Cut]
    pre_slots: list[str]  # update slots written by pre (bucket slots first)


def _restrict(g: Graph, name: str, inputs: list[Node], outputs: list[Node],
              updates: list[tuple[str, Node]]) -> Graph:
    """A graph over ``g``'s nodes with only the inputs its roots reach."""
    reach = {n.id for n in toposort(list(outputs) + [v for _, v in updates])}
    meta = dict(g.meta)
    if "finite_flags" in meta:
        # a flag is sum(x * 0) over a checked tensor x: it belongs to the half that computes
        # x (pre checks the local loss, post the reduced gradients)
        keep = [i for i, f in enumerate(meta["finite_flags"]) if _checked(f).id in reach]
        for k in ("finite_flags", "finite_names", "finite_where"):
            if k in meta:
                meta[k] = [meta[k][i] for i in keep]
    return Graph(name, [n for n in inputs if n.id in reach], list(outputs), list(updates),
                 list(g.guards), meta)


def _checked(flag: Node) -> Node:
    """The tensor a ``check_finite`` flag (``sum(x * 0)``, x maybe reshaped) checks."""
    x = flag.inputs[0].inputs[0]
    return x.inputs[0] if x.op == "reshape" and len(x.shape) == 1 and x.shape[0] == 1 else x


def split(g: Graph, bucket_slots: set[str]) -> Split:
    """Cut ``g`` at the bucket slots (see the module docstring)."""
    order = g.nodes()
    reduced = {n.id for n in g.inputs if n.attrs["name"] in bucket_slots}
    dep: dict[int, bool] = {}
    cheap: dict[int, bool] = {}
    for n in order:
        dep[n.id] = n.id in reduced or any(dep[x.id] for x in n.inputs)
        kind = gops.OP_INFO[n.op].kind
        cheap[n.id] = n.op in _LEAVES or (kind in ("elementwise", "movement")
                                          and all(cheap[x.id] for x in n.inputs))
    bucket_updates = [(s, v) for s, v in g.updates if s in bucket_slots]
    for s, v in bucket_updates:
        if dep[v.id]:
            raise RuntimeError(f"graphc.distributed: the local gradient {s!r} depends on a "
                               "reduced gradient (one backward() per step)")
    later = [(s, v) for s, v in g.updates if s not in bucket_slots and dep[v.id]]
    free = [(s, v) for s, v in g.updates if s not in bucket_slots and not dep[v.id]]

    def post_inputs(roots: list[Node]) -> set[str]:
        names: set[str] = set()
        stack, seen = list(roots), set()
        while stack:
            n = stack.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            if n.op == "input":
                names.add(n.attrs["name"])
            elif dep[n.id] or cheap[n.id]:
                stack.extend(n.inputs)
        return names

    read_by_post = post_inputs(list(g.outputs) + [v for _, v in later])
    moved = [(s, v) for s, v in free if s not in read_by_post]
    kept = [(s, v) for s, v in free if s in read_by_post]
    post_roots = list(g.outputs) + [v for _, v in later + kept]

    # find the cut values: non-leaf nodes post needs that pre has (or can) compute
    cut_nodes: list[Node] = []
    is_cut: set[int] = set()
    stack, seen = list(post_roots), set()
    while stack:
        n = stack.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        if dep[n.id]:
            stack.extend(n.inputs)
        elif not cheap[n.id]:
            is_cut.add(n.id)
    cut_nodes = [n for n in order if n.id in is_cut]
    b = Builder(intern=True, track_loc=False)
    cuts: list[Cut] = []
    new: dict[int, Node] = {}
    taken = {n.attrs["name"] for n in g.inputs} | {s for s, _ in g.updates}
    for k, n in enumerate(cut_nodes):
        name = f"ddp.cut{k}"
        while name in taken:
            name += "_"
        taken.add(name)
        inp = b.input(name, "buffer", n.shape, n.dtype)
        shape = tuple(d if isinstance(d, int) else 1 for d in n.shape)
        cuts.append(Cut(n, inp, Tensor._from_array(np.zeros(shape, n.dtype.np))))
        new[n.id] = inp
    for n in order:  # rebuild the dependent part over the cut inputs
        if n.id in new or not dep[n.id] or n.op == "input":
            continue
        ins = [new.get(x.id, x) for x in n.inputs]
        if all(a is x for a, x in zip(ins, n.inputs)):
            continue
        m = b.op(n.op, ins, **n.attrs)
        m.loc = n.loc
        new[n.id] = m
    sub = lambda v: new.get(v.id, v)  # noqa: E731
    pre_updates = bucket_updates + moved + [(c.input.attrs["name"], c.node) for c in cuts]
    pre = _restrict(g, f"{g.name}_grads", list(g.inputs), [], pre_updates)
    post = _restrict(g, f"{g.name}_update", list(g.inputs) + [c.input for c in cuts],
                     [sub(o) for o in g.outputs], [(s, sub(v)) for s, v in later + kept])
    return Split(pre, post, cuts, [s for s, _ in pre_updates])


class DistributedExecutable:
    """Runs pre, reduces the buckets between the processes, runs post."""

    def __init__(self, graph: Graph, sig: Signature,
                 make: Callable[[Graph, Signature], Any]) -> None:
        self.graph = graph
        self.sig = sig
        self.buckets = list(sig.collectives)
        slots = {s for bk in self.buckets for s in bk.slots}
        self.parts = split(graph, slots)
        cut_sinks = {c.input.attrs["name"]: Sink("tensor", c.tensor) for c in self.parts.cuts}
        pre_sinks = {s: sig.sinks[s] for s in self.parts.pre_slots if s in sig.sinks}
        pre_sinks.update(cut_sinks)
        sig_pre = dataclasses.replace(sig, sinks=pre_sinks, grads_to_clear=[],
                                      output_tree=("tuple", []), collectives=[])
        sources = dict(sig.sources)
        sources.update({c.input.attrs["name"]: Source("tensor", c.tensor)
                        for c in self.parts.cuts})
        post_sinks = {s: k for s, k in sig.sinks.items() if s not in pre_sinks}
        sig_post = dataclasses.replace(sig, sources=sources, sinks=post_sinks, collectives=[])
        self.pre = make(self.parts.pre, sig_pre)
        self.post = make(self.parts.post, sig_post)
        self.arrays = [bk.array for bk in self.buckets]
        # cut buffers whose shape depends on the batch: resized before each call
        self._sym_cuts = [c for c in self.parts.cuts if not all(isinstance(d, int)
                                                                 for d in c.node.shape)]
        self._sym_at: dict[sympy.Symbol, tuple[int, int]] = {}
        for i, (_, shape) in enumerate(sig.arg_types):
            for ax, d in enumerate(shape):
                if isinstance(d, sympy.Symbol):
                    self._sym_at.setdefault(d, (i, ax))
        for c in self.parts.cuts:
            if c in self._sym_cuts:
                c.tensor._node._value = np.zeros(
                    sh.evaluate_shape(c.node.shape, sig.example_env), c.node.dtype.np)

    def matches(self, args: list[np.ndarray]) -> bool:
        return self.pre.matches(args)

    def _resize_cuts(self, args: tuple) -> None:
        try:
            env = {s: int(args[i].shape[ax]) for s, (i, ax) in self._sym_at.items()}
        except (AttributeError, IndexError, TypeError):
            return  # pre's argument checks report it
        for c in self._sym_cuts:
            shape = sh.evaluate_shape(c.node.shape, env)
            if c.tensor._node._value.shape != shape:
                c.tensor._node._value = np.zeros(shape, c.node.dtype.np)

    def call(self, args: tuple) -> Any:
        from ..runtime.executable import Mismatch

        if self._sym_cuts:
            self._resize_cuts(args)
        failed: BaseException | None = None
        try:
            self.pre.call(args)
        except Mismatch:
            raise  # another variant is selected (or compiled) and joins the reduction
        except Exception as e:  # noqa: BLE001 - agreed with the other processes below
            failed = e
        comm.allreduce_with_status_(self.arrays, failed)
        return self.post.call(args)

    def stages(self) -> dict[str, Any]:
        """``split``: the two graphs; native stages show both functions one after the other."""
        out: dict[str, Any] = {"split": lambda: f"{self.parts.pre}\n{self.parts.post}"}
        sp, sq = self.pre.stages(), self.post.stages()
        for k in sp:
            if k in sq:
                out[k] = (lambda k=k: f"{_text(sp[k])}\n{_text(sq[k])}")
        return out

    def memory_report(self) -> str:
        reports = [e.memory_report() for e in (self.pre, self.post)
                   if hasattr(e, "memory_report")]
        mb = sum(a.nbytes for a in self.arrays) / 2**20
        return "\n".join(reports + [f"# gradient buckets: {len(self.arrays)}, {mb:.2f} MiB"])


def _text(s: Any) -> str:
    return s() if callable(s) else str(s)
