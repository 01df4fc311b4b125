"""Eager ``backward()``: the autodiff pass on the tape's nodes, evaluated by the interpreter.

A tape of a structure seen before runs the program its first backward built
(``backward_plan``); tensor hooks and ``retain_grad`` take the evaluating path, where user
code runs between gradient nodes.

Accumulation follows PyTorch's ``AccumulateGrad``: a leaf whose ``.grad`` is None receives a
fresh contiguous buffer; otherwise the gradient is added in place, so a ``.grad`` tensor keeps
its identity (and its numpy buffer) across backward calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphc.passes.autodiff import vjp

from . import _context, _tensor, backward_plan
from ._tensor import (
    _EAGER,
    GRAD_HOOKS,
    RETAINED,
    Tensor,
    check_saved_versions,
    leaf_node,
    to_array,
)
from .autograd import BACKWARD_TWICE, GRAD_IMPL, NO_SAVED_VALUES, enable_grad, no_grad
from .interpreter import QUIET, quiet_block
from .ir import Node, toposort
from .ir import shapes as sh


def eager_backward(t: Tensor, gradient: Any = None, retain_graph: Any = None) -> None:
    root = t._node
    if not root.rg:
        raise RuntimeError(
            "element 0 of tensors does not require grad and does not have a grad_fn"
        )
    order = toposort([root])
    saved = [n for n in order if n.rg and n.op not in NO_SAVED_VALUES]
    for n in saved:
        if n.freed:
            raise RuntimeError(BACKWARD_TWICE)
    check_saved_versions(order)  # a value the backward needs was changed in place
    seed_val = _seed_array(root, gradient)
    leaves = [n for n in order if n.op == "input" and n.rg]
    hooked = (GRAD_HOOKS or RETAINED) and any(GRAD_HOOKS.get(n) or RETAINED.get(n)
                                              for n in order)
    with no_grad(), quiet_block() as quiet:
        values = None if hooked else _planned(order, root, leaves, seed_val)
        if values is None:
            seed = Tensor._from_array(seed_val)._node
            _USER_ERR[0] = quiet.saved
            grads = vjp(_EAGER, [root], [seed], leaves, _interior_hooks if hooked else None,
                        order)
            values = [None if g is None else g._value for g in grads]
        if not retain_graph:
            for n in saved:
                n.freed = True
        for leaf, g in zip(leaves, values):
            if g is None:
                continue
            ref = leaf.attrs.get("tensor")
            tensor = ref() if ref is not None else None
            if tensor is None:
                continue
            hooks = GRAD_HOOKS.get(tensor)
            if hooks:
                g = run_hooks(hooks, leaf_node(g))._value
            accumulate_grad(tensor, g)


def _seed_array(root: Node, gradient: Any) -> np.ndarray:
    """The cotangent an eager backward starts ``root`` from: ones for a one-element root,
    else ``gradient`` as an array of the root's shape and dtype (PyTorch's errors)."""
    if gradient is None:
        if root._value.size != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        return np.ones(root._value.shape, root.dtype.np)
    seed = to_array(gradient, root.dtype)
    if seed.shape != root._value.shape:
        raise RuntimeError(f"Mismatch in shape: grad_output has a shape of {seed.shape} and "
                           f"output has a shape of {root._value.shape}")
    return seed


def _planned(order: list[Node], root: Node, leaves: list[Node], seed: np.ndarray
             ) -> list[np.ndarray | None] | None:
    """The leaves' gradients through the tape's cached backward program
    (``backward_plan``; built on the first backward of this structure), or None where the
    tape has no program (the evaluating path runs)."""
    key = backward_plan.tape_key(order)
    plan = None if key is None else backward_plan.lookup(key, order)
    if plan is None:
        try:
            plan = backward_plan.build(order, root, leaves, key)
        except backward_plan.Unplannable:
            return None
    values = [n._value for n in order]
    values.append(seed)
    return plan.run(values)


def run_hooks(hooks: dict, g: Node, trace: Any = None) -> Node:
    """``g`` through the tensor hooks ``hooks`` (registration order): a hook's tensor
    result replaces the gradient, None keeps it; PyTorch's errors for another shape or
    a result that is not a tensor. ``trace``: the tracing context when the gradient is a
    traced node (a compiled step's backward)."""
    for hook in list(hooks.values()):
        name = getattr(hook, "__name__", repr(hook))
        if QUIET.on:  # inside an eager backward's quiet block: the user's warning settings
            with user_errstate():
                out = hook(Tensor(g, trace))
        else:
            out = hook(Tensor(g, trace))
        if out is None:
            continue
        if not isinstance(out, Tensor):
            raise TypeError(f"hook '{name}' returned {type(out).__name__}: a tensor hook "
                            f"returns a Tensor or None")
        if tuple(out.shape) != tuple(g.shape) and not sh.same_shape(out.shape, g.shape):
            raise RuntimeError(f"hook '{name}' has changed the size of value")
        if out.dtype is not g.dtype:
            raise RuntimeError(f"hook '{name}' has changed the type of value (was "
                               f"{g.dtype.name} got {out.dtype.name})")
        g = out.node
    return g


# numpy's error settings when the running eager backward began (``quiet_block``)
_USER_ERR: list[dict] = [{}]


class user_errstate:  # noqa: N801 - a context manager
    """The user's floating-point warning settings, back for a hook called from inside an
    eager backward's quiet block (``QUIET`` off meanwhile, so graphc ops in the hook warn
    no more and no less than outside)."""

    def __enter__(self) -> None:
        self._state = np.errstate(**_USER_ERR[0])
        self._state.__enter__()
        self._was, QUIET.on = QUIET.on, False

    def __exit__(self, *exc: Any) -> None:
        QUIET.on = self._was
        self._state.__exit__(*exc)


def _interior_hooks(n: Node, g: Node) -> Node:
    """``vjp``'s ``on_grad`` for an eager backward: an interior tensor's hooks, then its
    retained ``.grad`` (summed with an earlier one, out of place, as PyTorch does)."""
    hooks = GRAD_HOOKS.get(n)
    if hooks:
        g = run_hooks(hooks, g)
    ref = RETAINED.get(n)
    t = ref() if ref is not None else None
    if t is not None:
        gt = Tensor._from_array(np.array(g._value, copy=True))
        t._grad = gt if t._grad is None else t._grad + gt
    return g


def accumulate_grad(tensor: Tensor, g: np.ndarray) -> None:
    if tensor._grad is None:
        tensor._grad = Tensor._from_array(np.array(g, dtype=tensor.dtype.np, copy=True))
    else:
        dst = tensor._grad._node._value
        if not dst.flags.writeable:
            tensor._grad._node._value = dst = np.array(dst)
        np.add(dst, g, out=dst)


UNUSED = ("One of the differentiated Tensors appears to not have been used in the graph. "
          "Set allow_unused=True if this is the desired behavior.")


def _as_tensors(x: Any, what: str) -> list[Tensor]:
    seq = list(x) if isinstance(x, (list, tuple)) else [x]
    for i, t in enumerate(seq):
        if not isinstance(t, Tensor):
            raise TypeError(f"autograd.grad: {what}[{i}] must be a Tensor, got "
                            f"{type(t).__name__}")
    return seq


def autograd_grad(outputs: Any, inputs: Any, grad_outputs: Any, retain_graph: bool,
                  create_graph: bool, allow_unused: bool, materialize: bool) -> tuple:
    """``graphc.autograd.grad``: checks shared by both modes, then the eager tape's
    gradients here or the trace's (``TraceContext.autograd_grad``)."""
    outs = _as_tensors(outputs, "outputs")
    ins = _as_tensors(inputs, "inputs")
    if grad_outputs is None:
        gouts: list[Any] = [None] * len(outs)
    else:
        gouts = list(grad_outputs) if isinstance(grad_outputs, (list, tuple)) else [
            grad_outputs]
        if len(gouts) != len(outs):
            raise RuntimeError(f"grad requires one grad_output per output: got "
                               f"{len(gouts)} grad_outputs for {len(outs)} outputs")
    ctx = _context.current()
    if ctx is not None:
        return ctx.autograd_grad(outs, ins, gouts, retain_graph, create_graph, allow_unused,
                                 materialize)
    for i, o in enumerate(outs):
        if not o._node.rg:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               "have a grad_fn")
    for t in ins:
        if not t._node.rg:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    roots = [o._node for o in outs]
    order = toposort(roots)
    saved = [n for n in order if n.rg and n.op not in NO_SAVED_VALUES]
    if any(n.freed for n in saved):
        raise RuntimeError(BACKWARD_TWICE)
    check_saved_versions(order)
    seeds = []
    for r, g in zip(roots, gouts):
        value = _seed_array(r, g)  # PyTorch's checks of the grad_output
        # with create_graph a tensor grad_output stays on the tape (its gradient counts)
        seeds.append(g._node if create_graph and isinstance(g, Tensor) else leaf_node(value))
    # interior tensors' hooks run; retained ``.grad``s are not filled (``.grad`` is left
    # alone: that is what autograd.grad is for)
    hooked = GRAD_HOOKS and any(GRAD_HOOKS.get(n) for n in order)
    with (enable_grad() if create_graph else no_grad()), quiet_block() as quiet:
        _USER_ERR[0] = quiet.saved
        grads = vjp(_EAGER, roots, seeds, [t._node for t in ins],
                    _hooks_only if hooked else None, order)
    if not retain_graph:
        for n in saved:
            n.freed = True
    result: list[Tensor | None] = []
    for t, g in zip(ins, grads):
        if g is None:
            if materialize:
                result.append(Tensor._from_array(np.zeros(tuple(t.shape), t.dtype.np)))
                continue
            if not allow_unused:
                raise RuntimeError(UNUSED)
            result.append(None)
        elif create_graph:
            result.append(Tensor(g))
        else:
            result.append(Tensor._from_array(np.array(g._value, dtype=t.dtype.np, copy=True)))
    return tuple(result)


def _hooks_only(n: Node, g: Node) -> Node:
    hooks = GRAD_HOOKS.get(n)
    return run_hooks(hooks, g) if hooks else g


GRAD_IMPL[0] = autograd_grad
_tensor._EAGER_BACKWARD[0] = eager_backward
