"""Eager ``backward()``: the autodiff pass on the tape's nodes, evaluated by the interpreter.

Accumulation follows PyTorch's ``AccumulateGrad``: a leaf whose ``.grad`` is None receives a
fresh contiguous buffer; otherwise the gradient is added in place, so a ``.grad`` tensor keeps
its identity (and its numpy buffer) across backward calls.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from graphc.passes.autodiff import vjp

from . import _tensor
from ._tensor import _EAGER, Tensor, check_saved_versions, to_array
from .autograd import BACKWARD_TWICE, NO_SAVED_VALUES, no_grad
from .ir import toposort

# interior nodes an earlier backward() without retain_graph went through (their saved
# values are "freed", as in PyTorch); weak, so the tape is still collected normally
_FREED: weakref.WeakSet = weakref.WeakSet()


def eager_backward(t: Tensor, gradient: Any = None, retain_graph: Any = None) -> None:
    root = t._node
    if not root.rg:
        raise RuntimeError(
            "element 0 of tensors does not require grad and does not have a grad_fn"
        )
    order = toposort([root])
    saved = [n for n in order if n.rg and n.op not in NO_SAVED_VALUES]
    if any(n in _FREED for n in saved):
        raise RuntimeError(BACKWARD_TWICE)
    check_saved_versions(order)  # a value the backward needs was changed in place
    if gradient is None:
        if root._value.size != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        seed_val = np.ones(root._value.shape, root.dtype.np)
    else:
        seed_val = to_array(gradient, root.dtype)
        if seed_val.shape != root._value.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output has a shape of {seed_val.shape} and output has "
                f"a shape of {root._value.shape}"
            )
    leaves = [n for n in order if n.op == "input" and n.rg]
    with no_grad():
        seed = Tensor._from_array(seed_val)._node
        grads = vjp(_EAGER, [root], [seed], leaves)
    if not retain_graph:
        _FREED.update(saved)
    for leaf, g in zip(leaves, grads):
        if g is None:
            continue
        ref = leaf.attrs.get("tensor")
        tensor = ref() if ref is not None else None
        if tensor is None:
            continue
        accumulate_grad(tensor, g._value)


def accumulate_grad(tensor: Tensor, g: np.ndarray) -> None:
    if tensor._grad is None:
        tensor._grad = Tensor._from_array(np.array(g, dtype=tensor.dtype.np, copy=True))
    else:
        dst = tensor._grad._node._value
        if not dst.flags.writeable:
            tensor._grad._node._value = dst = np.array(dst)
        np.add(dst, g, out=dst)


_tensor._EAGER_BACKWARD[0] = eager_backward
