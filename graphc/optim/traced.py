"""Optimizer containers that trace: param groups, per-parameter state, and ``step()``.

A user optimizer written the way PyTorch's documentation writes one (read ``group["lr"]``,
keep tensors and step counts in ``self.state[p]`` created on the first ``step()``, update them
with in-place ops) must behave the same compiled as eagerly. Eagerly these classes are plain
dicts. Inside a traced step they make every read of Python state explicit:

- ``ParamGroup``: a number read from a group is a run-time scalar input (a scheduler or a
  manual change takes effect without recompiling); any other value (``nesterov``, ``foreach``,
  ``None``) becomes a guard that recompiles when it changes; ``group["params"]`` is guarded
  on membership (removing a parameter recompiles).
- ``ParamState``: reads of ``state[p][key]`` become state inputs (tensors: read and written in
  place at every call; numbers such as a step count: read, and written back as Python numbers),
  writes stay in the trace until the step ends, and the set of keys present is guarded.
- ``traced_step``: ``step()`` of every ``Optimizer`` subclass runs through it. When the step
  creates state (the first ``step()``), it runs a second time with that state present as
  inputs, and the two traces are merged by a presence flag, so one compiled step serves the
  first call and every later one, as the built-in optimizers' state does.

Changes to groups and state from Python bump ``graphc._context.state_epoch``, so compiled
steps re-check these guards only after something changed.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from .. import _context
from ..tensor import Tensor
from ..tensor_ops import as_tensor, where

_MISSING = object()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_))


def _bumping(name: str) -> Callable[..., Any]:
    """``list.<name>`` followed by a state-epoch bump (for the lists compiled steps guard)."""
    base = getattr(list, name)

    def method(self: list, *a: Any, **k: Any) -> Any:
        r = base(self, *a, **k)
        _context.bump()
        return r
    method.__name__ = name
    return method


_MUTATORS = ("remove", "pop", "clear", "sort", "reverse", "__delitem__", "__imul__")


class Params(list):
    """``group["params"]``: a list whose changes bump the state epoch (membership guards)."""

    for _name in _MUTATORS + ("append", "extend", "insert", "__setitem__", "__iadd__"):
        locals()[_name] = _bumping(_name)
    del _name


class ParamGroups(list):
    """``optimizer.param_groups``: dicts added to it become ``ParamGroup``s; changes bump the
    state epoch (a compiled step guards on which groups it iterated)."""

    def __init__(self, opt: Any, groups: Iterable[Any] = ()) -> None:
        self._opt = opt
        super().__init__(self._conv(g) for g in groups)

    def _conv(self, g: Any) -> Any:
        return g if isinstance(g, ParamGroup) else ParamGroup(g, owner=self._opt)

    def append(self, g: Any) -> None:
        list.append(self, self._conv(g))
        _context.bump()

    def insert(self, i: Any, g: Any) -> None:
        list.insert(self, i, self._conv(g))
        _context.bump()

    def extend(self, gs: Iterable[Any]) -> None:
        list.extend(self, [self._conv(g) for g in gs])
        _context.bump()

    def __iadd__(self, gs: Iterable[Any]) -> ParamGroups:  # type: ignore[override,misc]
        self.extend(gs)
        return self

    def __setitem__(self, i: Any, g: Any) -> None:
        list.__setitem__(self, i, [self._conv(x) for x in g] if isinstance(i, slice)
                         else self._conv(g))
        _context.bump()

    for _name in _MUTATORS:
        locals()[_name] = _bumping(_name)
    del _name


def _refuse_traced_write(group: dict, key: Any, value: Any) -> None:
    """A write into a parameter group while a compiled function is traced would happen once,
    at trace time (a warm-up ``g["lr"] = ...`` would not move on later calls): refused
    unless it stores what is already there."""
    old = dict.get(group, key, _NO_VALUE)
    if old is value or (_is_number(old) and _is_number(value) and old == value):
        return
    raise NotImplementedError(
        f"param_groups[...][{key!r}] = ... inside a compiled function runs once, when it is "
        "traced, so later calls would not see a new value: set hyperparameters outside the "
        "compiled function (each call reads the numbers in param_groups), or update a "
        "tensor hyperparameter in place (group['lr'].fill_(v))")


_NO_VALUE = object()


class ParamGroup(dict):
    """One entry of ``optimizer.param_groups`` (see the module docstring)."""

    __slots__ = ("_owner",)
    _bumps_hyper_epoch = True  # every write moves ``_context.hyper_epoch`` (runner fast path)

    def __init__(self, *a: Any, owner: Any = None, **k: Any) -> None:
        super().__init__(*a, **k)
        self._owner = owner
        if "params" in self:
            dict.__setitem__(self, "params", Params(dict.__getitem__(self, "params")))

    def __setitem__(self, key: Any, value: Any) -> None:
        if _context.current() is not None:
            _refuse_traced_write(self, key, value)
        if key == "params":
            value = Params(value)
            _context.bump()
        elif not _is_number(value) or not _is_number(dict.get(self, key)):
            _context.bump()  # a structural option (or a number turning into one) changed
        dict.__setitem__(self, key, value)
        _context.hyper_epoch[0] += 1

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        _context.bump()
        _context.hyper_epoch[0] += 1

    def update(self, *a: Any, **k: Any) -> None:
        for key, value in dict(*a, **k).items():
            self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        out = dict.pop(self, key, *default)
        _context.bump()
        _context.hyper_epoch[0] += 1
        return out

    def popitem(self) -> Any:
        out = dict.popitem(self)
        _context.bump()
        _context.hyper_epoch[0] += 1
        return out

    def clear(self) -> None:
        dict.clear(self)
        _context.bump()
        _context.hyper_epoch[0] += 1

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        ctx = _context.current()
        if ctx is None:
            return value
        return _traced_group_value(ctx, self, key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default


def _traced_group_value(ctx: Any, group: ParamGroup, key: Any, value: Any) -> Any:
    owner = group._owner
    label = owner._label(group, key) if owner is not None else f"group.{key}"
    if key == "params":
        snapshot = tuple(value)

        def check() -> None:
            if tuple(dict.__getitem__(group, "params")) != snapshot:
                raise _mismatch()
        ctx.sig.slow_guards.append(check)
        return value
    if _is_number(value) or isinstance(value, Tensor):
        return ctx.hyper(group, key, label)
    if isinstance(value, tuple) and value and all(_is_number(v) for v in value):
        n = len(value)
        ctx.guard(lambda: len(dict.__getitem__(group, key)), n, f"len({label})",
                  spec=(group, key, len), once=(id(group), key, "len"))
        return tuple(owner._hp(group, key, i) if owner is not None else value[i]
                     for i in range(n))
    # anything else decides the trace's structure: recompile when it changes
    ctx.guard(lambda: _freeze(dict.__getitem__(group, key)), _freeze(value), label,
              spec=(group, key, _freeze), once=(id(group), key))
    return value


def _freeze(v: Any) -> Any:
    try:
        hash(v)
        return (type(v), v)
    except TypeError:
        return (type(v), id(v))


def _mismatch() -> Exception:
    return _context.Mismatch()


class ParamState(dict):
    """``optimizer.state[p]``: a dict that traces (see the module docstring)."""

    __slots__ = ("_opt", "_param")

    def __init__(self, *a: Any, opt: Any = None, param: Any = None, **k: Any) -> None:
        super().__init__(*a, **k)
        self._opt, self._param = opt, param

    def _view(self) -> _StateView | None:
        ctx = _context.current()
        if ctx is None or self._opt is None:
            return None
        v = ctx.state_views.get(id(self))
        if v is None:
            v = ctx.state_views[id(self)] = _StateView(ctx, self)
        return v

    # -- writes -----------------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        v = self._view()
        if v is not None:
            v.set(key, value)
            return
        new = key not in self
        dict.__setitem__(self, key, value)
        if new or not _is_number(value):  # a step count moving on changes no guard
            _context.bump()

    def __delitem__(self, key: Any) -> None:
        v = self._view()
        if v is not None:
            v.delete(key)
            return
        dict.__delitem__(self, key)
        _context.bump()

    def clear(self) -> None:
        for k in list(self.keys()):
            del self[k]

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *a: Any, **k: Any) -> None:
        for key, value in dict(*a, **k).items():
            self[key] = value

    def pop(self, key: Any, *default: Any) -> Any:
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        value = self[key]
        del self[key]
        return value

    # -- reads ------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        v = self._view()
        return dict.__getitem__(self, key) if v is None else v.get(key)

    def get(self, key: Any, default: Any = None) -> Any:
        v = self._view()
        if v is None:
            return dict.get(self, key, default)
        return v.get(key) if v.has(key) else default

    def __contains__(self, key: Any) -> bool:
        v = self._view()
        return dict.__contains__(self, key) if v is None else v.has(key)

    def __len__(self) -> int:
        v = self._view()
        return dict.__len__(self) if v is None else len(v.keys())

    def __iter__(self) -> Iterator[Any]:
        v = self._view()
        return dict.__iter__(self) if v is None else iter(v.keys())

    def keys(self) -> Any:
        v = self._view()
        return dict.keys(self) if v is None else v.keys()

    def items(self) -> Any:
        v = self._view()
        return dict.items(self) if v is None else [(k, v.get(k)) for k in v.keys()]

    def values(self) -> Any:
        v = self._view()
        return dict.values(self) if v is None else [v.get(k) for k in v.keys()]

    def __bool__(self) -> bool:
        return len(self) > 0

    def __reduce__(self) -> Any:  # pickles (and copies) as a plain dict
        return (dict, (dict(self),))


class _StateView:
    """What one traced step sees of one ``ParamState`` (raw contents are never touched)."""

    def __init__(self, ctx: Any, st: ParamState) -> None:
        self.ctx, self.st = ctx, st
        self.raw_keys = list(dict.keys(st))
        self.values: dict[Any, Any] = {}  # key -> traced value (reads and writes)
        self.written: set[Any] = set()
        self.deleted: set[Any] = set()
        self.placeholders: dict[Any, Any] = {}  # created by the first run: (kind, example)
        self.created: set[Any] = set()
        self.initial: dict[Any, Any] = {}  # key -> node an entry had when first read
        opt, p = st._opt, st._param
        base = ctx._names.get(id(opt), "opt")
        self.label = f"{base}.state[{ctx.tensor_name(p)}]"
        _structure_guard(ctx, opt).register(self)

    def keys(self) -> list[Any]:
        ks = [k for k in self.raw_keys if k not in self.deleted]
        ks += [k for k in self.placeholders if k not in ks and k not in self.deleted]
        ks += [k for k in self.values if k not in ks and k not in self.deleted]
        return ks

    def has(self, key: Any) -> bool:
        return key in self.keys()

    def get(self, key: Any) -> Any:
        if key in self.deleted:
            raise KeyError(key)
        if key in self.values:
            return self.values[key]
        if key in self.placeholders:
            value = self._input(key, self.placeholders[key])
        else:
            raw = dict.get(self.st, key, _MISSING)
            if raw is _MISSING:
                raise KeyError(key)
            value = self._input(key, raw)
        self.values[key] = value
        if isinstance(value, Tensor):
            self.initial[key] = value._node
        return value

    def changed(self) -> list[Any]:
        """Keys written (``state[k] = v``) or updated in place (``state[k].mul_(...)``)."""
        out = list(self.written)
        out += [k for k, val in self.values.items() if k not in self.written
                and isinstance(val, Tensor) and val._node is not self.initial.get(k)]
        return out

    def _input(self, key: Any, example: Any) -> Any:
        """The traced value of an entry that exists when the step is called."""
        ctx, opt, p = self.ctx, self.st._opt, self.st._param
        label = f"{self.label}.{key}"
        if isinstance(example, Tensor):
            dtype, shape = _type_of(example, ctx)
            t, _ = ctx.opt_state(opt, p, key, label, 0.0, dtype, shape, flag=False)
            return Tensor(t.node, ctx)  # its own object: in-place updates rebind only it
        if _is_number(example):
            return ctx.opt_num(opt, p, key, label, int if isinstance(example, (int, np.integer))
                               else float)
        if key not in self.placeholders:  # an object the trace used as it was: guard it
            frozen = _freeze(example)

            def check() -> None:
                now = dict.get(opt.state, p)
                value = _MISSING if now is None else dict.get(now, key, _MISSING)
                if value is not _MISSING and _freeze(value) != frozen:
                    raise _mismatch()
            ctx.sig.slow_guards.append(check)
        return example

    def set(self, key: Any, value: Any) -> None:
        self.deleted.discard(key)
        self.values[key] = value
        self.written.add(key)

    def delete(self, key: Any) -> None:
        if not self.has(key):
            raise KeyError(key)
        raise NotImplementedError(
            f"deleting {self.label}[{key!r}] inside a compiled step is not supported")

    def reset(self) -> None:
        """Forget the first run (its creations become placeholders for the second)."""
        for k in self.written:
            if k not in self.raw_keys:
                self.placeholders[k] = self.values[k]
                self.created.add(k)
        self.values, self.written, self.initial = {}, set(), {}


class _StructureGuard:
    """One per optimizer and trace: at call time every traced ``state[p]`` must hold exactly
    the keys it held when traced, or (all of them together) those plus the keys the first
    step creates; which of the two is the ``present`` flag that selects the merged branch."""

    def __init__(self, ctx: Any, opt: Any) -> None:
        self.views: list[_StateView] = []
        self.cell = [False]
        self.flag: Tensor | None = None
        self.ctx, self.opt = ctx, opt
        ctx.sig.slow_guards.append(self.check)

    def register(self, view: _StateView) -> None:
        self.views.append(view)

    def check(self) -> None:
        votes = []
        for v in self.views:
            # entries are read by key at every call, so a replaced dict (load_state_dict)
            # with the same keys is the same structure
            now = dict.get(self.opt.state, v.st._param)
            keys = set() if now is None else set(dict.keys(now))
            raw = set(v.raw_keys)
            if keys == raw:
                if v.created:
                    votes.append(False)
            elif v.created and keys == raw | v.created:
                votes.append(True)
            else:
                raise _mismatch()
        if votes and any(votes) != all(votes):
            raise _mismatch()
        self.cell[0] = bool(votes) and all(votes)

    def present(self) -> Tensor:
        if self.flag is None:
            base = self.ctx._names.get(id(self.opt), "opt")
            self.flag = self.ctx.cell_input(f"{base}.state?", self)
        return self.flag

    def tensor_entry(self) -> tuple[Any, Any, Any] | None:
        """(optimizer, parameter, key) of one tensor entry the first step creates: all of them
        appear together, so its presence is the flag's value (ahead-of-time builds use it)."""
        for v in self.views:
            for k in sorted(v.created, key=str):
                if isinstance(v.placeholders.get(k), Tensor):
                    return self.opt, v.st._param, k
        return None


def _structure_guard(ctx: Any, opt: Any) -> _StructureGuard:
    guards = ctx.__dict__.setdefault("_state_guards", {})
    g = guards.get(id(opt))
    if g is None:
        g = guards[id(opt)] = _StructureGuard(ctx, opt)
    return g


class OptimizerState(defaultdict):
    """``optimizer.state``: ``ParamState`` per parameter, created on first access."""

    def __init__(self, opt: Any, items: Iterable[tuple[Any, Any]] = ()) -> None:
        super().__init__(None)
        self._opt = opt
        for p, st in items:
            self[p] = st

    def __missing__(self, p: Any) -> ParamState:
        st = ParamState(opt=self._opt, param=p)
        ctx = _context.current()
        if ctx is not None:
            # tracing changes nothing: the entry appears when a compiled call publishes
            # state into it (one pending object per parameter for the whole trace)
            pending = ctx.__dict__.setdefault("_pending_state", {})
            return pending.setdefault((id(self), id(p)), st)
        dict.__setitem__(self, p, st)
        return st

    def __setitem__(self, p: Any, st: Any) -> None:
        if not isinstance(st, ParamState) or st._opt is not self._opt:
            st = ParamState(dict(st), opt=self._opt, param=p)
        dict.__setitem__(self, p, st)
        _context.bump()

    def __delitem__(self, p: Any) -> None:
        dict.__delitem__(self, p)
        _context.bump()

    def __reduce__(self) -> Any:
        return (dict, ({k: dict(v) for k, v in self.items()},))


# -- step() -----------------------------------------------------------------------------------
def traced_step(step: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an optimizer's ``step`` (done for every subclass by ``Optimizer``)."""
    if getattr(step, "_graphc_traced", False):
        return step

    @functools.wraps(step)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_tensor_step", False):
            _step_counts_as_tensors(self)
        ctx = _context.current()
        if ctx is None or getattr(ctx, "_in_step", None) is not None:
            return step(self, *args, **kwargs)
        ctx._in_step = self
        try:
            return _run_traced(ctx, self, step, args, kwargs)
        finally:
            ctx._in_step = None

    wrapper._graphc_traced = True  # type: ignore[attr-defined]
    return wrapper


def _step_counts_as_tensors(opt: Any) -> None:
    """Built-in optimizers keep ``state[p]["step"]`` as a float32 0-d tensor (PyTorch's
    layout, which ``load_state_dict`` restores); a plain number put there by hand becomes one,
    instead of failing inside the update."""
    for st in dict.values(opt.state):
        v = dict.get(st, "step")
        if v is not None and not isinstance(v, Tensor) and _is_number(v):
            dict.__setitem__(st, "step", Tensor._from_array(np.asarray(float(v), np.float32)))
            _context.bump()


def _run_traced(ctx: Any, opt: Any, step: Callable[..., Any], args: tuple, kwargs: dict
                ) -> Any:
    closure = args[0] if args else kwargs.get("closure")
    _guard_groups(ctx, opt)
    snap = ctx.snapshot()
    result = step(opt, *args, **kwargs)
    views = [v for v in ctx.state_views.values() if v.st._opt is opt]
    if not any(k not in v.raw_keys for v in views for k in v.changed()):
        _commit(ctx, views, None, {})
        return result
    # The step created state: run it again with that state present, then merge
    if closure is not None:
        raise NotImplementedError(
            f"{type(opt).__name__}.step(closure) inside a compiled step on its first call "
            "(it creates optimizer state): the closure would run twice; call the closure "
            "yourself before step(), or run the first step eagerly")
    first_ext = ctx.take_changes(snap)
    first_vals: dict[int, dict[Any, Any]] = {}
    for v in views:
        first_vals[id(v)] = {k: v.values[k] for k in v.changed()}
        v.reset()
    result = step(opt, *args, **kwargs)
    later_ext = ctx.take_changes(snap)
    present = _structure_guard(ctx, opt).present()
    # while the flag is false, every entry the first step creates is absent, so its state
    # input holds the fill value the runtime (and an ahead-of-time build) feeds for it
    ctx.__dict__.setdefault("_absent_unless", {}).setdefault(id(present.node), set()).update(
        (id(opt), id(v.st._param), k) for v in views for k in v.created)
    ext, _ = snap
    for key in list(first_ext) + [k for k in later_ext if k not in first_ext]:
        a = first_ext.get(key, ext.get(key))
        b = later_ext.get(key, ext.get(key))
        t = ctx.ext_tensor[key]
        if a is None or b is None or a is b:
            node = b if b is not None else a
        else:
            node = _merge(ctx, present.node, _strip(b), _strip(a))
        ctx.assign(t, node)
    _commit(ctx, views, present, first_vals)
    return result


def _guard_groups(ctx: Any, opt: Any) -> None:
    """The step iterates ``opt.param_groups``: the same group objects, in the same order."""
    seen = ctx.__dict__.setdefault("_group_guards", set())
    if id(opt) in seen:
        return
    seen.add(id(opt))
    groups = tuple(map(id, opt.param_groups))

    def check() -> None:
        if tuple(map(id, opt.param_groups)) != groups:
            raise _mismatch()
    ctx.sig.slow_guards.append(check)


def _merge(ctx: Any, c: Any, b: Any, a: Any) -> Any:
    """``where(c, b, a)`` with the selection pushed down to where the two traces differ.

    The first-step trace and the later-step trace mostly compute the same thing from a few
    differing values (``p - lr*buf`` with ``buf`` fresh or carried; Adam's update from
    ``exp_avg``, ``exp_avg_sq`` and ``step``, each fresh or carried), so
    ``where(c, f(x, y), f(x', y'))`` becomes ``f(where(c, x, x'), where(c, y, y'))`` for an
    elementwise ``f`` (and, ``c`` being one flag, for a movement op): every update then
    reads the selected state values and the step does the arithmetic once, never more
    selections than the arithmetic it saves. At the leaves, ``where(c, entry, fill)`` for an
    entry the first step creates filled with the value the runtime feeds for an absent entry
    is the entry itself (``_absent_fill``), which is what a hand-written update that reads a
    zero-filled buffer on the first step computes.
    """
    memo = ctx.__dict__.setdefault("_merge_memo", {})
    key = (id(c), id(b), id(a))
    hit = memo.get(key)
    if hit is None:  # the two traces share subgraphs: merge each pair once
        hit = memo[key] = (b, a, _merge_nodes(ctx, c, b, a))  # b, a kept: ids stay unique
    return hit[2]


def _merge_nodes(ctx: Any, c: Any, b: Any, a: Any) -> Any:
    from ..ir.ops import OP_INFO

    if b is a:
        return b
    if _absent_fill(ctx, c, b, a):
        return b
    kinds = ("elementwise", "movement") if len(c.shape) == 0 else ("elementwise",)
    if (b.op == a.op and OP_INFO[b.op].kind in kinds and len(b.inputs) == len(a.inputs)
            and b.attrs == a.attrs and tuple(b.shape) == tuple(a.shape) and b.dtype is a.dtype):
        diff = [i for i, (x, y) in enumerate(zip(b.inputs, a.inputs)) if x is not y]
        if diff and all(tuple(b.inputs[i].shape) == tuple(a.inputs[i].shape)
                        and b.inputs[i].dtype is a.inputs[i].dtype for i in diff):
            inputs = list(b.inputs)
            for i in diff:
                inputs[i] = _merge(ctx, c, b.inputs[i], a.inputs[i])
            return ctx.builder.op(b.op, inputs, **b.attrs)
    return ctx.builder.where(c, b, a)


def _absent_fill(ctx: Any, c: Any, b: Any, a: Any) -> bool:
    """Whether ``where(c, b, a)`` is ``b``: ``b`` is the state input of an entry that is absent
    whenever ``c`` is false (one the first step creates), ``a`` the constant the runtime
    fills an absent entry's input with (same value, sign of zero, shape and dtype)."""
    created = ctx.__dict__.get("_absent_unless", {}).get(id(c))
    if not created or b.op != "input" or a.op != "const" or b.dtype is not a.dtype \
            or tuple(b.shape) != tuple(a.shape):
        return False
    src = ctx.sig.sources.get(b.attrs["name"])
    if src is None or src.kind != "ostate":
        return False
    opt, p, key = src.ref
    value = a.attrs["value"]
    return ((id(opt), id(p), key) in created and isinstance(value, (int, float))
            and float(value) == src.fill
            and math.copysign(1.0, float(value)) == math.copysign(1.0, src.fill))


def _strip(n: Any) -> Any:
    while n.op == "detach":
        n = n.inputs[0]
    return n


def _commit(ctx: Any, views: list[_StateView], present: Tensor | None,
            first_vals: dict[int, dict[Any, Any]]) -> None:
    """Make each written entry the trace's final value of that state."""
    for v in views:
        opt, p = v.st._opt, v.st._param
        first = first_vals.get(id(v), {})
        changed = v.changed()
        for key in changed + [k for k in first if k not in changed]:
            later = v.values.get(key, _MISSING)
            value = later
            if key in first and present is not None:
                a = first[key]
                b = later if later is not _MISSING else v.get(key)
                if isinstance(a, Tensor) and isinstance(b, Tensor) and \
                        tuple(a.shape) == tuple(b.shape) and a.dtype is b.dtype:
                    value = Tensor(_merge(ctx, present.node, b.node, a.node), ctx)
                else:
                    value = where(present, b, a)
            _store(ctx, v, opt, p, key, value)


def _type_of(t: Tensor, ctx: Any) -> tuple[Any, tuple]:
    """dtype and shape of a state tensor without making a live one an input of the trace."""
    if t._trace is ctx:
        return t._node.dtype, tuple(t._node.shape)
    return t._node.dtype, tuple(t._node._value.shape)


def _store(ctx: Any, v: _StateView, opt: Any, p: Any, key: Any, value: Any) -> None:
    label = f"{v.label}.{key}"
    example = v.placeholders.get(key, dict.get(v.st, key, value))
    if _is_number(value) or (isinstance(value, Tensor) and _is_number(example)
                             and value.ndim == 0 and not isinstance(example, Tensor)):
        pytype = int if isinstance(example, (int, np.integer)) else float
        ctx.opt_num(opt, p, key, label, pytype)
        ctx.onum[(id(opt), id(p), key)] = as_tensor(value).double().node
        return
    if isinstance(value, Tensor):
        if value._trace is not ctx:  # a live tensor stored as it is: becomes an input
            value = Tensor(ctx.read(value), ctx)
        dtype, shape = _type_of(value, ctx)
        ctx.opt_state(opt, p, key, label, 0.0, dtype, shape, flag=False)
        ctx.set_opt_state(opt, p, key, value)
        return
    if value is not dict.get(v.st, key, _MISSING):
        raise NotImplementedError(
            f"{label}: optimizer state entries written inside a compiled step must be "
            f"tensors or numbers, got {type(value).__name__}")


__all__ = ["ParamGroup", "ParamState", "OptimizerState", "Params", "traced_step"]
