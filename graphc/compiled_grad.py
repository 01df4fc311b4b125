"""Gradients through a compiled call: results that carry an autograd graph, as eager ones do.

Why: ``gc.compile`` turns a whole training step into one native function, but many programs
compile only the model (``fwd = gc.compile(model)``) and call ``loss.backward()`` outside, or
mix a compiled result into eager arithmetic. Eagerly, such a result carries ``grad_fn`` and
its backward reaches the parameters it was computed from; a compiled call returning plain
values would drop those gradients without a word (``loss = fwd(x) + reg(w)`` would train
``w`` alone). So a trace notes which results would carry a graph (``note_live_outputs``),
and a call returns those results as tensors whose backward reaches the same parameters.

How the backward is computed: by recomputation, as activation checkpointing does. A second
compiled function (``_backward_function``) traces the same Python function again on the
saved arguments and differentiates the noted results with respect to the parameters they
read (the cotangents are its extra arguments), returning the gradients instead of writing
``.grad``; the eager backward then accumulates them like any other leaf's gradient (hooks,
``AccumulateGrad``). Recomputing is exact only when running the function again computes the
same values and changes nothing, so a function that updates state (BatchNorm's running
statistics in training mode, an optimizer, ``.grad``) returns results whose backward raises
a clear error instead, before any ``.grad`` changes. Random draws (dropout) are recorded
while the call runs and replayed by the recomputation (``graphc.random.TAPE``): the same
masks, and the stream moves once, as eagerly.
A parameter or buffer the recomputation reads, written in place between the call and its
backward (an eager in-place op, or a compiled step: ``_tensor.WATCHED`` makes such a step
note the write), raises PyTorch's in-place modification error instead of a gradient taken
at the new values; writes through ``.data`` are not noted, as in PyTorch.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from graphc.passes.autodiff import VJP

from ._tensor import WATCHED
from .ir import Node, toposort

OP = "compiled_output"  # eager-only tape op: one result of a compiled call


def note_live_outputs(ctx: Any, g: Any, flat: list[Node]) -> None:
    """Record on ``ctx.sig`` the results of a trace (grad mode on) that would carry an
    autograd graph eagerly: they require grad and no ``backward()`` inside the function ran
    through their graph (a training step's loss and logits, whose graph the step's own
    backward consumed, stay plain values: eagerly, a second backward through them raises)."""
    sig = ctx.sig
    consumed = {n.id for n in toposort(ctx.backward_roots) if n.rg and n.op != "input"}
    live = []
    for i, node in enumerate(flat):
        if not node.rg:
            continue
        if any(a.id in consumed for a in toposort([node])):
            continue
        live.append(i)
    if not live:
        return
    reach = {n.id for n in toposort([flat[i] for i in live])}
    sig.live_outputs = live
    sig.grad_leaves = [t for k, t in ctx.ext_tensor.items()
                       if ctx.ext_input[k].rg and ctx.ext_input[k].id in reach]
    sig.grad_args = [i for i, n in enumerate(ctx.inputs[:len(sig.arg_names)])
                     if n.rg and n.id in reach]
    # the other tensors the recomputation reads (buffers, frozen parameters): a write into
    # one between the call and its backward is an in-place error too
    sig.other_reads = [t for k, t in ctx.ext_tensor.items()
                       if not ctx.ext_input[k].rg and ctx.ext_input[k].id in reach]
    kinds = {n.attrs.get("kind") for n in g.inputs}
    if g.updates or sig.sinks or sig.grads_to_clear:
        what = sorted({s.kind for s in sig.sinks.values()}) or ["grad"]
        sig.impure = ("it updates state when it runs (" + ", ".join(what) + "), so running "
                      "it again to differentiate it would update that state twice")
    sig.draws = bool(kinds & {"seed", "random"})


def _tensors_of(obj: Any, out: list) -> list:
    """The tensors of a result tree, in ``trace._flatten``'s order."""
    from .tensor import Tensor

    if isinstance(obj, Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _tensors_of(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors_of(o, out)
    return out


class CallRecord:
    """What the backward of one compiled call needs: the arguments as they were (copied:
    the caller may reuse their memory), the tensors its gradients go to (parameters, then
    arguments), and the live results' shapes and dtypes (for the cotangents)."""

    __slots__ = ("fn", "sig", "args", "leaves", "shapes", "dtypes", "draws", "__weakref__")

    def __init__(self, fn: Any, sig: Any, args: tuple, outs: list, draws: list) -> None:
        from .tensor import Tensor

        self.fn, self.sig = fn, sig
        # the call checked and converted them already: copies of their values (none where
        # the backward will refuse anyway)
        self.args = () if sig.impure else tuple(
            np.array(a._node._value if isinstance(a, Tensor) else a, copy=True) for a in args)
        self.leaves = list(sig.grad_leaves)  # then the arguments ``sig.grad_args``
        self.draws = draws  # the call's random draws, in order (replayed by ``backward``)
        if not sig.impure:  # compiled steps note their writes of these (see above)
            read = [*self.leaves, *sig.other_reads]
            for p in read:
                WATCHED[id(p)] = WATCHED.get(id(p), 0) + 1
            # the finalizer holds the tensors, so their ids stay theirs until it runs
            weakref.finalize(self, _unwatch, read)
        live = [outs[i] for i in sig.live_outputs]
        self.shapes = [tuple(o.shape) for o in live]
        self.dtypes = [o._node._value.dtype for o in live]

    def backward(self, index: int, g: np.ndarray) -> list[np.ndarray | None]:
        """The leaves' gradients for cotangent ``g`` of live result ``index``."""
        if self.sig.impure:
            raise NotImplementedError(
                f"backward through a result of compiled function {self.fn.name!r}: "
                f"{self.sig.impure}. Call backward() (and the optimizer's step) inside the "
                "compiled function, or run it eagerly")
        gouts = [np.zeros(s, d) for s, d in zip(self.shapes, self.dtypes)]
        gouts[index] = np.ascontiguousarray(g, dtype=self.dtypes[index])
        from .autograd import enable_grad
        from .random import TAPE

        bwd = _backward_function(self.fn, self.sig, len(self.args), [
            bool(self.sig.arg_grad and self.sig.arg_grad[i]) for i in range(len(self.args))])
        replay = iter(self.draws)
        prev, TAPE.replay = TAPE.replay, replay
        try:
            with enable_grad():
                grads = bwd(*self.args, *gouts)
        finally:
            TAPE.replay = prev
        if next(replay, None) is not None:
            raise RuntimeError(f"backward through a result of compiled function "
                               f"{self.fn.name!r}: its recomputation drew fewer random numbers "
                               "than the call did")
        return [None if t is None else np.array(t._node._value, copy=True) for t in grads]


def _unwatch(leaves: list) -> None:
    for p in leaves:
        k = WATCHED.get(id(p), 0) - 1
        if k > 0:
            WATCHED[id(p)] = k
        else:
            WATCHED.pop(id(p), None)


def _backward_function(fn: Any, sig: Any, nargs: int, arg_grad: list[bool]) -> Any:
    """The compiled backward of ``fn`` for one traced variant's live results (cached on the
    signature): ``bwd(*args, *cotangents)`` -> the gradient of each leaf (None where no live
    result depends on it)."""
    cached = getattr(sig, "_backward", None)
    if cached is not None:
        return cached
    live, target = list(sig.live_outputs), fn.fn
    leaves: list[Any] = [*sig.grad_leaves, *sig.grad_args]

    def backward(*flat: Any) -> list:
        from . import _context

        result = target(*flat[:nargs])
        outs = _tensors_of(result, [])
        return _context.current().vjp_values([outs[i] for i in live], list(flat[nargs:]),
                                             leaves)

    backward.__name__ = backward.__qualname__ = f"{fn.name}_backward"
    bwd = fn.derived(backward, arg_grad=(*arg_grad, *[False] * len(live)), dynamic=False)
    sig._backward = bwd
    return bwd


def call_recorded(call: Any, args: tuple) -> tuple[Any, list]:
    """``call(args)`` with its random draws recorded (``graphc.random.TAPE``)."""
    from .random import TAPE

    draws: list = []
    prev, TAPE.record = TAPE.record, draws
    try:
        return call(args), draws
    finally:
        TAPE.record = prev


def wrap_results(fn: Any, sig: Any, args: tuple, result: Any, draws: list) -> Any:
    """Give the live results of a compiled call (``sig.live_outputs``) the autograd node
    that routes their gradient to the leaves (see the module docstring)."""
    outs = _tensors_of(result, [])
    rec = CallRecord(fn, sig, args, outs, draws)
    # the gradients' destinations, then the other tensors read (for the in-place checks)
    inputs = tuple([p._node for p in rec.leaves] + [args[i]._node for i in sig.grad_args]
                   + [t._node for t in sig.other_reads])
    for j, i in enumerate(sig.live_outputs):
        t = outs[i]
        old = t._node
        n = Node(OP, inputs, old.shape, old.dtype, {"call": rec, "index": j})
        n.rg = True
        n._value = old._value
        t._node = n
    return result


def _vjp(b: Any, n: Node, g: Node) -> list:
    if not getattr(b, "eager", False):
        raise NotImplementedError(
            "a result of a compiled function was differentiated inside another trace: "
            "compile the whole computation as one function instead")
    from ._tensor import leaf_node

    grads = n.attrs["call"].backward(n.attrs["index"], g._value)
    out = [None if a is None else leaf_node(a) for a in grads]
    return out + [None] * (len(n.inputs) - len(out))


VJP[OP] = _vjp
