"""Run-time checks of compiled steps: ``check_finite`` and the debug build mode.

``gc.compile(fn, check_finite=True)`` adds, after optimization, one flag per checked tensor
(the loss and every gradient the step stores): ``sum(x * 0)``, which is 0 when every element
of ``x`` is finite and NaN as soon as one is NaN or ±Inf (the CPU lowering never uses the
no-NaN fast-math flags, so the product is not folded away). The flags are graph roots listed in
``graph.meta["finite_flags"]``; the lowering returns ``ERR_NONFINITE`` right after a flag's
kernel when it is not zero, and counts flag kernels as kernels that may fail, so no state
buffer has been written when it returns. The runtime turns the code into ``NonFiniteError``
naming the first tensor (in execution order) that was not finite.

Debug builds (``gc.compile(fn, debug=True)`` or ``GRAPHC_DEBUG=1``) bounds-check every load and
store in native code; an access outside its buffer returns ``ERR_BOUNDS`` and becomes
``DebugBoundsError`` naming the op and its printed IR line, instead of a crash or silent
corruption. They are slower and never write updates in place.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .ir import Builder, Graph, Node


class NonFiniteError(FloatingPointError, ValueError):
    """A checked tensor (loss or gradient) held NaN or Inf; the update was not applied.

    Both a ``FloatingPointError`` (what numpy raises for invalid float operations) and a
    ``ValueError`` (what the API promises for bad input), so either ``except`` catches it.
    """


class DebugBoundsError(IndexError):
    """Debug builds: native code tried to read or write outside a buffer."""


def debug_default() -> bool:
    """``GRAPHC_DEBUG=1`` (or any value but ``0``/empty) turns debug builds on by default."""
    return os.environ.get("GRAPHC_DEBUG", "") not in ("", "0")


def checked_tensors(g: Graph, sig: Any) -> list[tuple[Node, str, tuple[str, Any]]]:
    """(node, description, where) for the loss/outputs and gradients ``check_finite`` watches.

    ``where`` is ``("out", i)`` or ``("update", slot)``, which the interpreter backend uses.
    Gradients are the ``.grad`` updates; a step that clears its gradients before returning
    has none, and then the updated parameters are checked instead (a NaN gradient makes them
    NaN for every optimizer)."""
    out: list[tuple[Node, str, tuple[str, Any]]] = []
    n_out = len(g.outputs)
    for i, o in enumerate(g.outputs):
        if o.dtype.is_float:
            what = "the loss (output 0)" if n_out == 1 else f"output {i}"
            out.append((o, what, ("out", i)))
    grads = [(s, n) for s, n in g.updates if sig.sinks[s].kind == "grad"]
    if grads:
        out += [(n, f"gradient {s!r}", ("update", s)) for s, n in grads if n.dtype.is_float]
    else:
        out += [(n, f"updated parameter {s!r}", ("update", s)) for s, n in g.updates
                if sig.sinks[s].kind == "tensor" and n.dtype.is_float]
    return out


def add_finite_checks(g: Graph, sig: Any) -> Graph:
    """A copy of ``g`` with one NaN/Inf flag per checked tensor (see the module docstring)."""
    b = Builder(intern=False, track_loc=False)
    flags, names, where = [], [], []
    for node, what, loc in checked_tensors(g, sig):
        x = b.reshape(node, (1,)) if len(node.shape) == 0 else node
        zero = b.const(0.0, x.shape, x.dtype)
        prod = b.op("mul", (x, zero))  # not b.mul: its identities would fold x * 0
        flags.append(b.op("sum", (prod,), axes=tuple(range(len(x.shape)))))
        names.append(what)
        where.append(loc)
    meta = dict(g.meta)
    meta.update(finite_flags=flags, finite_names=names, finite_where=where)
    return Graph(g.name, list(g.inputs), list(g.outputs), list(g.updates), list(g.guards), meta)


def first_nonfinite(g: Graph, outs: list[np.ndarray], ups: dict[str, np.ndarray]) -> str | None:
    """The interpreter's version of the native check: the first checked tensor with NaN/Inf."""
    for (kind, ref), what in zip(g.meta.get("finite_where", ()), g.meta.get("finite_names", ())):
        v = outs[ref] if kind == "out" else ups[ref]
        if not np.all(np.isfinite(v)):
            return what
    return None


def nonfinite_message(what: str) -> str:
    return (f"check_finite: {what} contains NaN or Inf; the update was not applied "
            f"(parameters, gradients and optimizer state are unchanged)")


def printed_line(g: Graph, node_index: int) -> str:
    """The ``%k = ...`` line of the printed IR for the k-th computed node."""
    prefix = f"  %{node_index} = "
    for line in str(g).splitlines():
        if line.startswith(prefix):
            return line.strip()
    return f"%{node_index}"


__all__ = ["NonFiniteError", "DebugBoundsError", "add_finite_checks", "checked_tensors",
           "debug_default", "first_nonfinite", "printed_line"]
