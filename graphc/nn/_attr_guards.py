"""Guards on the plain attributes of modules that a traced function reads.

A compiled step runs the Python of ``forward`` once, at trace time: ``y * self.scale``,
``F.dropout(x, self.p)``, ``if self.use_bias:`` read the attribute then, and its value is
baked into the compiled code. Assigning ``model.scale = 3.0`` afterwards changed what eager
code computes but not what the compiled step computed, without a word. Dynamo guards every
value it reads; graphc traces by running Python, so while any thread traces, module
attribute reads go through ``traced_getattribute``, which notes each instance attribute a
trace reads (and each one it found missing: ``getattr(self, "cache", None)``) with the value
it saw. The step re-traces when one differs at a call:

- numbers, strings, ``None`` and tuples or frozensets of them (``padding``, ``p``, ``eps``,
  ``reduction``) are compared by value and type (``1`` is not ``True``; NaN equals NaN),
  checked only after a module attribute was assigned (``Module.__setattr__`` moves
  ``_context.state_epoch``, as the other Python-side guards do), so an unchanged model costs
  nothing per call;
- lists, dicts and sets of those can change in place without an assignment: compared by
  value at every call;
- anything else (a function, a config object, a tensor that is not a buffer) by identity,
  after an assignment; changes inside such an object are not seen (documented).

Modules the traced function builds itself (``nn.MSELoss()(out, y)``) and tensors the trace
computed (a pre-hook's ``module.weight``) are not guarded: they do not outlive the trace.
"""

from __future__ import annotations

import weakref
from typing import Any

from .. import _context
from .._snapshot import Unfrozen, entry_reader, frozen, has_mutable
from .._tensor import Tensor

_object_getattribute = object.__getattribute__
_local = _context._local

# the bookkeeping every module keeps in its ``__dict__`` (guarded elsewhere, or never read
# by user code): parameters, buffers and children are guarded by identity by the tracer,
# the training flag by the mode epoch, hooks by ``module._guard_hooks``
_INTERNAL = frozenset({
    "_parameters", "_buffers", "_modules", "_training", "_forward_pre_hooks",
    "_forward_hooks", "_hooks_with_kwargs", "_hooks_always_called", "_non_persistent",
    "_born_in_trace", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
    "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_flat_weights_names",
    "_all_weights", "_compiled",
})
_MISSING = object()


def _state(ctx: Any) -> dict:
    """Per trace: the (module, attribute) pairs noted so far, and the list of epoch-checked
    entries behind the trace's one slow guard."""
    st = _PER_TRACE.get(ctx)
    if st is None:
        entries: list[tuple[Any, str, bool, Any]] = []
        st = _PER_TRACE[ctx] = {"seen": set(), "entries": entries}

        def check() -> None:
            for ref, name, by_value, expected in entries:
                m = ref()
                if m is None:
                    continue
                now = m.__dict__.get(name, _MISSING)
                if by_value:
                    try:
                        same = now is not _MISSING and frozen(now) == expected
                    except Unfrozen:
                        same = False
                else:
                    same = now is expected
                if not same:
                    raise _context.Mismatch
        ctx.sig.slow_guards.append(check)
    return st


_PER_TRACE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def note(ctx: Any, m: Any, name: str, value: Any) -> None:
    """Guard attribute ``name`` of module ``m`` at ``value`` (``_MISSING``: absent) for the
    step ``ctx`` traces."""
    if ctx.sig is None:
        return
    st = _state(ctx)
    key = (id(m), name)
    if key in st["seen"]:
        return
    st["seen"].add(key)
    d = _object_getattribute(m, "__dict__")
    born = d.get("_born_in_trace")
    if born is not None and born() is ctx:
        return
    if isinstance(value, Tensor) and value._trace is not None:
        return  # computed by this trace (old-style weight_norm's ``module.weight``)
    ref = weakref.ref(m)
    if value is _MISSING:
        st["entries"].append((ref, name, False, _MISSING))
        return
    try:
        snap = frozen(value)
    except Unfrozen:
        st["entries"].append((ref, name, False, value))  # identity (keeps the object alive)
        return
    if not has_mutable(value):
        st["entries"].append((ref, name, True, snap))
        return
    # changes in place move no epoch: compared at every call
    ctx.guard(entry_reader(d, name), snap,
              f"{type(m).__name__}.{name} (a {type(value).__name__} the step read)")


def traced_getattribute(self: Any, name: str) -> Any:
    """``Module.__getattribute__`` while some thread traces (see the module docstring)."""
    try:
        v = _object_getattribute(self, name)
    except AttributeError:
        ctx = _local.ctx
        if ctx is not None and name[:2] != "__" and name not in _INTERNAL:
            d = _object_getattribute(self, "__dict__")
            if not any(name in d.get(s, ()) for s in ("_parameters", "_buffers", "_modules")):
                note(ctx, self, name, _MISSING)
        raise
    if name[:2] != "__" and name not in _INTERNAL:
        ctx = _local.ctx
        if ctx is not None and _object_getattribute(self, "__dict__").get(name, _MISSING) is v:
            note(ctx, self, name, v)
    return v


def install(module_class: type) -> None:
    """Route ``module_class``'s attribute reads through ``traced_getattribute`` while any
    thread traces; eager code pays nothing otherwise."""
    def switch(tracing: bool) -> None:
        if tracing:
            module_class.__getattribute__ = traced_getattribute  # type: ignore[method-assign]
        elif "__getattribute__" in module_class.__dict__:
            del module_class.__getattribute__
    _context.TRACING_HOOKS.append(switch)
    if _context.TRACING[0]:
        switch(True)
