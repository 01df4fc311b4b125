"""Call-boundary safety for the CPU backend (mixed into ``CPUExecutable``).

* **Aliasing.** The kernels' buffer arguments are ``noalias`` and state updates may be written
  in place while later kernels still read the inputs, so an argument that shares memory with a
  parameter, gradient or optimizer state (``step(model.weight.numpy(), y)``) would read values
  the step is overwriting. After any slot was rebound (the identity cache missed), the few
  argument ranges are compared with the state ranges (pointer arithmetic, no numpy call); an
  overlapping argument is replaced by a private copy for this call.
* **Copies are per call.** An argument bound through a copy (not C-contiguous, or aliasing) is
  recorded with an empty identity-cache entry, so the next call copies it again: the caller
  may have changed the original in place since.
* **Signals.** The native step cannot be interrupted; the Python publishing after it (new
  ``.grad`` tensors and optimizer state, cleared gradients) can. ``on_interrupt`` finishes that
  publishing when the native step committed (``err[0] == 0``), so a ``KeyboardInterrupt``
  leaves parameters, gradients and optimizer state either untouched or fully updated.
* **Error codes** from ``check_finite`` flags and debug bounds checks become exceptions.

Part of ``graphc.runtime``: these checks happen around each call, not when code is generated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphc.codegen.abi import TABLE_FIXED
from graphc.ir import shapes as sh


def _range(a: np.ndarray) -> tuple[int, int]:
    """Address range [lo, hi) of the bytes an array spans (any strides)."""
    lo = hi = a.__array_interface__["data"][0]
    if a.size == 0:
        return lo, lo
    for n, st in zip(a.shape, a.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + a.itemsize


class GuardMixin:
    """Binding bookkeeping, aliasing resolution, interrupt-safe publishing, error reports."""

    table: Any
    _cache: list[Any]
    _keep: dict[int, np.ndarray]

    def _init_guard(self) -> None:
        self.rebound = True  # some slot changed since the last aliasing check
        self._bound: dict[int, np.ndarray] = {}  # slot -> array whose pointer is in the table
        g, sig = self.graph, self.sig  # type: ignore[attr-defined]
        self._arg_slots = [TABLE_FIXED + i for i, n in enumerate(g.inputs)
                           if sig.sources[n.attrs["name"]].kind == "arg"]
        upd = TABLE_FIXED + len(g.inputs) + len(g.outputs)
        self._state_slots = [TABLE_FIXED + i for i, n in enumerate(g.inputs)
                             if sig.sources[n.attrs["name"]].kind in ("tensor", "grad", "ostate")]
        self._state_slots += [upd + j for j in range(len(g.updates))]
        self._upd_base = upd

    def resolve_aliasing(self) -> None:
        """Copy arguments that overlap a state buffer (see the module docstring).

        Every bound array is C-contiguous (``bind_input`` copies the others, sink buffers are
        made so), so its bytes are its table pointer plus its size: a training loop that
        hands a new batch every call pays a few integer comparisons, not an address range
        computed from each buffer's array interface. (No array is remembered here: the call
        wrapper reuses a ``.grad`` buffer in place when nothing else holds it, which it
        tells by reference counts.)"""
        self.rebound = False
        table, bound = self.table, self._bound
        state = []
        for s in self._state_slots:
            a = bound.get(s)
            if a is not None and a.nbytes:
                lo = table[s]
                state.append((lo, lo + a.nbytes))
        for slot in self._arg_slots:
            a = bound.get(slot)
            if a is None or a.size == 0:
                continue
            lo = table[slot]
            hi = lo + a.nbytes
            if any(lo < h and l_ < hi for l_, h in state):
                copy = np.array(a, order="C")
                self._keep[slot] = self._bound[slot] = copy
                self.table[slot] = copy.__array_interface__["data"][0]
                self._cache[slot] = None  # copy again next call
                self.rebound = True

    def on_interrupt(self) -> None:
        """An exception (a signal, or an error report) stopped the wrapper after the native
        call may have run: complete the idempotent publishing if it committed."""
        if int(self.err[0]) != 0:  # type: ignore[attr-defined]
            return  # the native step did not run, or it failed and changed nothing
        for _ in range(100):  # further interrupts restart the (idempotent) publishing
            try:
                self._publish_all()
                return
            except KeyboardInterrupt:
                continue

    def _publish_all(self) -> None:
        g, sig = self.graph, self.sig  # type: ignore[attr-defined]
        for j, (slot_name, _) in enumerate(g.updates):
            if sig.sinks[slot_name].kind in ("grad", "ostate", "onum"):
                self.publish(slot_name, self._cache[self._upd_base + j])  # type: ignore
        for p in sig.grads_to_clear:
            p._grad = None
        self.commit_views()  # type: ignore[attr-defined]

    def _raise_nonfinite(self) -> None:
        from graphc.checks import NonFiniteError, nonfinite_message

        names = self.graph.meta.get("finite_names", ())  # type: ignore[attr-defined]
        k = int(self.err[1])  # type: ignore[attr-defined]
        what = names[k] if 0 <= k < len(names) else f"checked tensor {k}"
        raise NonFiniteError(nonfinite_message(what))

    def _raise_bounds(self) -> None:
        from graphc.checks import DebugBoundsError, printed_line

        _, node_idx, lin, extent = (int(v) for v in self.err)  # type: ignore[attr-defined]
        line = printed_line(self.graph, node_idx)  # type: ignore[attr-defined]
        op = line.split(" = ", 1)[1].split(" ", 1)[0] if " = " in line else "?"
        raise DebugBoundsError(
            f"debug bounds check: op {op} (node %{node_idx}: {line}) accessed element {lin} "
            f"of a buffer with {extent} elements; no parameter was modified")


__all__ = ["GuardMixin", "sh"]
