"""``nn.Module`` and ``nn.Parameter`` with PyTorch's registration, naming and state_dict rules."""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import _context
from .._tensor import _WeakIdMap, dtype_of, parse_to
from ..tensor import Tensor, to_array
from . import _attr_guards

# Bumped by every train()/eval() that changes a flag: compiled steps re-check their
# specialisation only when it moved, so the per-call cost is one integer compare.
_MODE_EPOCH = itertools.count(1)
mode_epoch = [0]


class Parameter(Tensor):
    """A leaf tensor that ``Module`` registers as a parameter (requires_grad by default)."""

    __slots__ = ()

    def __new__(cls, data: Any = None, requires_grad: bool = True) -> Parameter:
        arr = np.zeros(0, np.float32) if data is None else np.array(to_array(data), copy=True)
        t = Tensor._from_array.__func__(cls, arr, requires_grad)  # type: ignore[attr-defined]
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # state set in __new__
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


# tensors made by ``nn.Buffer(t, persistent=...)`` -> their ``persistent`` flag: assigning one
# to a module attribute registers it as a buffer (graphc's Tensor has slots, so the flag that
# PyTorch keeps on the tensor object lives here; see graphc/nn/parameter.py)
_BUFFER_MARKS = _WeakIdMap()


class _Uninitialized:
    """Base of ``UninitializedParameter``/``UninitializedBuffer`` (graphc/nn/parameter.py),
    here so that ``state_dict`` can pass them through without importing that module."""

    __slots__ = ()


def _array_to_tensor(v: Any) -> Any:
    return Tensor._from_array(to_array(v)) if isinstance(v, np.ndarray) else v


_HOOK_IDS = itertools.count()
# per trace: the modules whose hook tables it already guards (a trace context lives only as
# long as its compile, so the entry goes with it)
_HOOKS_GUARDED: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()
_HOOK_TABLES = ("_forward_pre_hooks", "_forward_hooks")


class RemovableHandle:
    """What ``register_forward_hook`` and ``register_forward_pre_hook`` return: ``remove()``
    takes the hook off (a compiled step that ran the module re-traces without it); also a
    context manager that removes the hook on exit."""

    def __init__(self, table: OrderedDict[int, Any], *extra: dict | set) -> None:
        self.id = next(_HOOK_IDS)
        self._tables = [weakref.ref(table)]
        self._extra = list(extra)

    def remove(self) -> None:
        for ref in self._tables:
            table = ref()
            if table is not None and self.id in table:
                del table[self.id]
                _context.bump()  # compiled steps guard on the hooks their modules had
        for e in self._extra:
            e.discard(self.id) if isinstance(e, set) else e.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    # a deep copy of a module that keeps a handle (lazy modules do) must get a handle on the
    # copy's hook table, not a weak reference to the original's (copy treats weakrefs as atoms)
    def __getstate__(self) -> tuple:
        return [r() for r in self._tables], self._extra, self.id

    def __setstate__(self, state: tuple) -> None:
        tables, self._extra, self.id = state
        self._tables = [weakref.ref(t) for t in tables if t is not None]


def _convert_tensor(t: Tensor, dtype: Any) -> None:
    """Change ``t`` (and its ``.grad``) to ``dtype`` in place, keeping the object (as
    ``Module.to`` does through ``param.data``), so optimizers holding it stay valid; a
    compiled step that read it re-traces (its dtype guard fails)."""
    for x in (t, t._grad):
        if x is None or x.dtype is dtype:
            continue
        node = x._node
        node._value = np.array(node._value, dtype=dtype.np, order="C")  # keeps 0-d
        node.dtype = dtype
        if "dtype" in node.attrs:
            node.attrs["dtype"] = dtype
    _context.bump()


class Module:
    """Base class of layers and models (``forward`` is called by ``__call__``)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_training", True)
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_hooks_with_kwargs", set())
        object.__setattr__(self, "_hooks_always_called", set())
        ctx = _context.current()
        if ctx is not None:  # built inside a compiled function: its own attributes are free
            object.__setattr__(self, "_born_in_trace", weakref.ref(ctx))

    @property
    def training(self) -> bool:
        """Train/eval flag. Reading it while tracing makes the compiled step specialise on
        it (a module that never reads it does not force a recompile on ``eval()``)."""
        ctx = _context.current()
        if ctx is not None:
            ctx.note_mode(self)
        return self.__dict__["_training"]

    @training.setter
    def training(self, mode: bool) -> None:
        if self.__dict__.get("_training") != mode:
            mode_epoch[0] = next(_MODE_EPOCH)
        self.__dict__["_training"] = bool(mode)

    # -- registration ------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError("cannot assign before Module.__init__() call")
        params, bufs, mods = d["_parameters"], d["_buffers"], d["_modules"]
        value = _as_module(value)
        if _context.current() is not None:
            _check_traced_setattr(self, name, value, bufs, params, mods)
        if name in params or name in bufs or name in mods or isinstance(
                value, (Parameter, Module)):
            _context.bump()  # compiled steps guard on which tensors and children they used
        if isinstance(value, (Parameter, Module)):
            own = params if isinstance(value, Parameter) else mods
            for store in (params, bufs, mods):
                if store is not own:  # a replaced entry keeps its place, as in PyTorch
                    store.pop(name, None)
            d.pop(name, None)
            d.get("_non_persistent", set()).discard(name)
            own[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                f"'{name}' (graphc.nn.Parameter or None expected)")
            params[name] = None
        elif (_BUFFER_MARKS and name not in mods and isinstance(value, Tensor)
              and _BUFFER_MARKS.get(value) is not None):
            # ``self.x = nn.Buffer(t, persistent=...)`` registers a buffer (PyTorch 2.x)
            self.register_buffer(name, value, persistent=_BUFFER_MARKS.get(value))
        elif name in bufs:
            bufs[name] = value
        elif name in mods:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (graphc.nn.Module or None expected)")
            mods[name] = None
        else:
            if d.get(name, _MISSING) is not value:
                _context.bump()  # compiled steps guard the plain attributes they read
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                value = d[store][name]
                if store == "_modules" and value is not None:
                    ctx = _context.current()
                    if ctx is not None:
                        # a child read in a traced step (``self.layers``, ``self.heads``) is
                        # guarded like a called one: a ModuleList/ModuleDict that is only
                        # indexed or iterated must not have its entries replaced unseen
                        ctx.note_module(value)
                        _guard_hooks(ctx, value)
                return value
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self.__dict__.get("_non_persistent", set()).discard(name)
                _context.bump()
                return
        object.__delattr__(self, name)
        _context.bump()

    def _check_new_name(self, name: Any, kind: str, store: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain "."')
        if name in self.__dict__ or (hasattr(type(self), name)) or any(
                name in self.__dict__[st] for st in ("_parameters", "_buffers", "_modules")
                if st != store):
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add ``param`` (a ``Parameter`` or None) under ``name``, as PyTorch checks it."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_new_name(name, "parameter", "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (graphc.nn.Parameter or None required)")
        self._parameters[name] = param
        _context.bump()

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a buffer (a tensor that is state but not a parameter). ``persistent=False``
        keeps it out of ``state_dict()`` (and ``load_state_dict``), as PyTorch does; it is
        still in ``buffers()`` and converted by ``to()``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_new_name(name, "buffer", "_buffers")
        if isinstance(tensor, np.ndarray):
            tensor = Tensor._from_array(to_array(tensor))
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (graphc Tensor or None required)")
        self._buffers[name] = tensor
        _context.bump()
        skip = self.__dict__.setdefault("_non_persistent", set())
        if persistent:
            skip.discard(name)
        else:
            skip.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        module = _as_module(module)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f'module name can\'t contain "." or be empty, got: {name!r}')
        self._modules[name] = module
        _context.bump()

    register_module = add_module

    # -- hooks -------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` runs before ``forward``; a non-None result replaces the
        positional arguments (a non-tuple is wrapped in one). With ``with_kwargs``:
        ``hook(module, args, kwargs)`` returning None or ``(args, kwargs)``.

        Hooks are Python run by ``__call__``, so a traced step records what they compute;
        adding or removing one after a step was compiled makes that step re-trace."""
        table = self.__dict__["_forward_pre_hooks"]
        handle = RemovableHandle(table, self.__dict__["_hooks_with_kwargs"])
        self._add_hook(table, handle.id, hook, prepend)
        if with_kwargs:
            self.__dict__["_hooks_with_kwargs"].add(handle.id)
        return handle

    def register_forward_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                              with_kwargs: bool = False, always_call: bool = False
                              ) -> RemovableHandle:
        """``hook(module, args, output)`` runs after ``forward``; a non-None result replaces
        the output. With ``with_kwargs``: ``hook(module, args, kwargs, output)``. With
        ``always_call`` it also runs when ``forward`` raised (the error is re-raised).
        See ``register_forward_pre_hook`` for compiled steps."""
        table = self.__dict__["_forward_hooks"]
        handle = RemovableHandle(table, self.__dict__["_hooks_with_kwargs"],
                                 self.__dict__["_hooks_always_called"])
        self._add_hook(table, handle.id, hook, prepend)
        if with_kwargs:
            self.__dict__["_hooks_with_kwargs"].add(handle.id)
        if always_call:
            self.__dict__["_hooks_always_called"].add(handle.id)
        return handle

    def register_full_backward_hook(self, hook: Any, *a: Any, **k: Any) -> Any:
        raise NotImplementedError(
            "module backward hooks are not supported by graphc (gradients are computed by one "
            "autodiff pass over the whole step); read p.grad after backward() instead")

    register_backward_hook = register_full_backward_hook
    register_full_backward_pre_hook = register_full_backward_hook

    def _register_load_state_dict_pre_hook(self, hook: Callable[..., Any],
                                           with_module: bool = False) -> RemovableHandle:
        """``hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs)`` (``hook(module, ...)`` with ``with_module``) runs before
        ``load_state_dict`` reads this module's entries, on a copy of the dict it may edit, as
        PyTorch's: old checkpoints' keys are renamed this way (``weight_norm``'s
        ``weight_g``/``weight_v``), and lazy modules take their shapes from it."""
        table = self.__dict__.setdefault("_load_state_dict_pre_hooks", OrderedDict())
        handle = RemovableHandle(table)
        table[handle.id] = (hook, with_module)
        return handle

    def register_load_state_dict_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """``hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)`` before ``load_state_dict`` reads this module."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    @staticmethod
    def _add_hook(table: OrderedDict[int, Any], hid: int, hook: Any, prepend: bool) -> None:
        if _context.current() is not None:
            raise RuntimeError("registering a hook inside a compiled function is not "
                               "supported: register it before the call")
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}")
        table[hid] = hook
        if prepend:
            table.move_to_end(hid, last=False)
        _context.bump()  # compiled steps guard on the hooks their modules had

    # -- traversal ---------------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """``(name, module)`` for this module and every descendant, depth first (a module
        reachable twice is listed once unless ``remove_duplicate=False``)."""
        seen: set[int] = set() if memo is None else {id(m) for m in memo}

        def walk(m: Module, pre: str) -> Iterator[tuple[str, Module]]:
            if remove_duplicate:
                if id(m) in seen:
                    return
                seen.add(id(m))
                if memo is not None:
                    memo.add(m)
            yield pre, m
            for n, c in m._modules.items():
                if c is not None:
                    yield from walk(c, f"{pre}.{n}" if pre else n)

        yield from walk(self, prefix)

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every child (recursively), then on this module; returns self
        (``model.apply(init_weights)``)."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def get_submodule(self, target: str) -> Module:
        """The module at dotted path ``target`` (``""``: this module)."""
        mod: Module = self
        if target == "":
            return mod
        for item in target.split("."):
            sub = mod.__dict__["_modules"].get(item)
            if not isinstance(sub, Module):
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = sub
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        p = mod.__dict__["_parameters"].get(name)
        if p is None:
            raise AttributeError(f"{type(mod).__name__} has no parameter `{name}`")
        return p

    def get_buffer(self, target: str) -> Tensor:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        b = mod.__dict__["_buffers"].get(name)
        if b is None:
            raise AttributeError(f"{type(mod).__name__} has no buffer `{name}`")
        return b

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def children(self) -> Iterator[Module]:
        for m in self._modules.values():
            if m is not None:
                yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for n, m in self._modules.items():
            if m is not None:
                yield n, m

    def named_parameters(self, prefix: str = "", recurse: bool = True
                         ) -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for n, p in m._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mp}.{n}" if mp else n), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True
                      ) -> Iterator[tuple[str, Tensor]]:
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for n, b in m._buffers.items():
                if b is not None:
                    yield (f"{mp}.{n}" if mp else n), b

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- modes -------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set ``training`` here and (through each child's own ``train``) below, as PyTorch
        does; a real change bumps the epoch compiled steps compare against."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        d = self.__dict__
        if d["_training"] is not mode:
            d["_training"] = mode
            mode_epoch[0] = next(_MODE_EPOCH)
        for m in d["_modules"].values():
            if m is not None:
                m.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    # -- dtypes and devices ------------------------------------------------------------
    def _convert(self, dtype: Any, floating_only: bool) -> Module:
        if _context.current() is not None:
            raise RuntimeError("converting a module's dtype inside a compiled function is not "
                               "supported: convert it before the call")
        for t in itertools.chain(self.parameters(), self.buffers()):
            if t.dtype.is_float or not floating_only:
                _convert_tensor(t, dtype)
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(tensor)``: floating
        parameters and buffers (and their ``.grad``) change dtype in place, keeping their
        identity, as PyTorch's ``Module.to``; the CPU is the only device (another raises
        ``NotImplementedError``); returns self."""
        _device, dtype, _copy = parse_to(args, kwargs, "Module.to")
        if dtype is None:
            return self
        if not dtype.is_float:
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but "
                            f"got desired dtype={dtype!r}")
        return self._convert(dtype, floating_only=True)

    def float(self) -> Module:
        return self._convert(dtype_of("float32", "Module.float"), floating_only=True)

    def double(self) -> Module:
        return self._convert(dtype_of("float64", "Module.double"), floating_only=True)

    def half(self) -> Module:
        dtype_of("float16", "Module.half()")  # raises NotImplementedError naming float16
        return self

    def bfloat16(self) -> Module:
        return self._convert(dtype_of("bfloat16", "Module.bfloat16"), floating_only=True)

    def type(self, dst_type: Any) -> Module:  # noqa: A003
        """Every parameter and buffer (integer ones too) cast to ``dst_type``."""
        return self._convert(dtype_of(dst_type, "Module.type"), floating_only=False)

    def cpu(self) -> Module:
        return self

    def cuda(self, device: Any = None) -> Module:
        parse_to(("cuda" if device is None else device,), {}, "Module.cuda")
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    # -- state -------------------------------------------------------------------------
    def state_dict(self, prefix: str = "") -> OrderedDict[str, np.ndarray]:
        """Parameters and persistent buffers as numpy arrays, with PyTorch's key names."""
        out: OrderedDict[str, np.ndarray] = OrderedDict()
        for mp, m in self.named_modules(prefix=prefix.rstrip(".")):
            skip = m.__dict__.get("_non_persistent", set())
            for n, p in m._parameters.items():
                if p is not None:  # a lazy module's uninitialized ones as they are (PyTorch)
                    out[f"{mp}.{n}" if mp else n] = p if isinstance(
                        p, _Uninitialized) else np.array(p.numpy(), copy=True)
            for n, b in m._buffers.items():
                if b is not None and n not in skip:
                    out[f"{mp}.{n}" if mp else n] = b if isinstance(
                        b, _Uninitialized) else np.array(b.numpy(), copy=True)
        return out

    def load_state_dict(self, state_dict: Any, strict: bool = True) -> Any:
        """Copy values in place (tensors keep their identity, compiled steps stay valid)."""
        hook_missing: list[str] = []
        hook_unexpected: list[str] = []
        errors: list[str] = []
        copied = False
        for mp, m in self.named_modules():  # pre-hooks, parents first, on a copy (PyTorch)
            hooks = m.__dict__.get("_load_state_dict_pre_hooks")
            if hooks:
                if not copied:
                    state_dict, copied = OrderedDict(state_dict), True
                for hook, with_module in list(hooks.values()):
                    args = (state_dict, f"{mp}." if mp else "", {}, strict, hook_missing,
                            hook_unexpected, errors)
                    hook(m, *args) if with_module else hook(*args)
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:"
                               "\n\t" + "\n\t".join(errors))
        own: dict[str, Tensor] = {}
        for mp, m in self.named_modules():
            skip = m.__dict__.get("_non_persistent", set())
            for n, p in m._parameters.items():
                if p is not None:
                    own[f"{mp}.{n}" if mp else n] = p
            for n, b in m._buffers.items():
                if b is not None and n not in skip:
                    own[f"{mp}.{n}" if mp else n] = b
        missing = hook_missing + [k for k in own if k not in state_dict]
        unexpected = hook_unexpected + [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}: "
                f"missing keys {missing}, unexpected keys {unexpected}"
            )
        for k, t in own.items():
            if k not in state_dict:
                continue
            arr = np.asarray(state_dict[k])
            if tuple(arr.shape) != tuple(t.shape):
                raise RuntimeError(
                    f"size mismatch for {k}: copying a param with shape {tuple(arr.shape)}, "
                    f"the shape in current model is {tuple(t.shape)}"
                )
            np.copyto(t._node._value, arr.astype(t.dtype.np, copy=False))
        from collections import namedtuple

        return namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])(
            missing, unexpected)

    # -- calling -----------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``forward`` (with the forward pre-hooks before it and the forward hooks
        after), with numpy arrays among the arguments converted to tensors first (as
        ``gc.tensor`` would, sharing memory where dtype and layout allow): a ``forward``
        written for PyTorch calls tensor methods on its inputs (``idx.size()``, ``x.view``),
        which on a numpy array are other things or absent."""
        ctx = _context.current()
        d = self.__dict__
        if ctx is not None:
            ctx.note_module(self)
            _guard_hooks(ctx, self)
        for a in args:
            if isinstance(a, np.ndarray):
                args = tuple(_array_to_tensor(v) for v in args)
                break
        if kwargs:
            kwargs = {k: _array_to_tensor(v) for k, v in kwargs.items()}
        pre, post = d.get("_forward_pre_hooks"), d.get("_forward_hooks")
        if not pre and not post:
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(pre or {}, post or {}, args, kwargs)

    def _call_with_hooks(self, pre: Any, post: Any, args: tuple, kwargs: dict) -> Any:
        with_kwargs = self.__dict__["_hooks_with_kwargs"]
        for hid, hook in list(pre.items()):
            if hid in with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError("forward pre-hook must return None or a tuple of "
                                           f"(new_args, new_kwargs), but got {res}.")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        called: set[int] = set()
        try:
            out = self.forward(*args, **kwargs)
            for hid, hook in list(post.items()):
                called.add(hid)
                res = (hook(self, args, kwargs, out) if hid in with_kwargs
                       else hook(self, args, out))
                if res is not None:
                    out = res
        except Exception:
            always = self.__dict__["_hooks_always_called"]
            for hid, hook in list(post.items()):
                if hid in always and hid not in called:
                    try:
                        (hook(self, args, kwargs, None) if hid in with_kwargs
                         else hook(self, args, None))
                    except Exception:  # noqa: BLE001, S110 - the forward error is the one raised
                        pass
            raise
        return out

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        """PyTorch's layout: a one-line ``extra_repr`` stays on the first line when there
        are no children; otherwise it and each ``(name): child`` take a line of their own."""
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({n}): " + repr(m).replace("\n", "\n  ")
                       for n, m in self._modules.items()]
        lines = extra_lines + child_lines
        body = ""
        if lines:
            body = (extra_lines[0] if len(extra_lines) == 1 and not child_lines
                    else "\n  " + "\n  ".join(lines) + "\n")
        return f"{type(self).__name__}({body})"


class OptimizedModule(Module):
    """What a module holds where a compiled module is assigned to it (``self.enc =
    gc.compile(enc)``, ``nn.Sequential(gc.compile(block), ...)``), as torch.compile's
    ``OptimizedModule``: a module whose one child ``_orig_mod`` is the compiled module, so
    ``parameters()``, ``state_dict()`` (keys ``enc._orig_mod.weight``, as PyTorch's),
    ``train()``/``eval()`` and ``to()`` reach it, and whose forward is the compiled call.
    Without it the parent would not see the child's parameters at all: an optimizer built
    from ``parent.parameters()`` would silently leave them untrained. Other attributes are
    the compiled function's (``compile_count``, ``ir``), then the module's."""

    def __init__(self, compiled: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_compiled", compiled)
        self._modules["_orig_mod"] = compiled.fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["_compiled"](*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            compiled = self.__dict__.get("_compiled")
            if compiled is None or name.startswith("__"):
                raise
            return getattr(compiled, name)


def _as_module(value: Any) -> Any:
    """A compiled module (``gc.compile(module)``) as the ``OptimizedModule`` holding it;
    anything else as it is."""
    if getattr(type(value), "_is_compiled_function", False) and isinstance(
            value.__dict__.get("fn"), Module):
        return OptimizedModule(value)
    return value


_SAME_VALUE_TYPES = (bool, int, float, str, bytes, type(None), tuple, frozenset)
_MISSING = object()


def _check_traced_setattr(m: Module, name: str, value: Any, bufs: dict, params: dict,
                          mods: dict) -> None:
    """An attribute assignment while a compiled function is traced runs once, at trace
    time, and a tensor computed in the trace would not exist after the call: refuse the
    assignments whose eager effect a compiled call cannot repeat (before the module
    changes), with what to write instead. Allowed: the ``training`` flag (guarded like
    every mode read), parameters and children (guarded by identity), and a value equal to
    the one already there (re-setting a constant, a cache of the same object)."""
    if name == "training" or name in params or name in mods or isinstance(
            value, (Parameter, Module)):
        return
    born = m.__dict__.get("_born_in_trace")
    if born is not None and born() is _context.current():
        return  # a module the function itself builds (``nn.MSELoss()(out, y)``)
    what = f"{type(m).__name__}.{name}"
    if name in bufs:
        if value is bufs[name]:
            return
        raise NotImplementedError(
            f"{what} = ... inside a compiled function rebinds the buffer {name!r}: a compiled "
            f"call cannot repeat that (and an old reference to the buffer would see other "
            f"values than eagerly). Update it in place, which is traced as an update: "
            f"self.{name}.copy_(new_value), or mul_/add_/lerp_")
    if isinstance(value, Tensor) and (value._trace is not None or value._node.rg):
        raise NotImplementedError(
            f"{what} = <tensor> inside a compiled function stores a tensor computed in the "
            "call on the module: it would not exist after the call. Return it from the "
            "compiled function instead (or keep it in a registered buffer updated in place "
            "with copy_)")
    old = m.__dict__.get(name, _MISSING)
    if old is value:
        return
    if type(old) is type(value) and isinstance(value, _SAME_VALUE_TYPES):
        try:
            if bool(old == value):
                return
        except Exception:  # noqa: BLE001 - not comparable: treated as a change
            pass
    shown = repr(value) if isinstance(value, _SAME_VALUE_TYPES) else type(value).__name__
    raise NotImplementedError(
        f"{what} = {shown[:60]} inside a compiled function: Python side effects run once, "
        "when the function is traced, so later calls would not repeat it. Keep a counter "
        "in a buffer updated in place (register_buffer, then .add_(1)), or change the "
        "attribute outside the compiled function")


def _guard_hooks(ctx: Any, m: Module) -> None:
    """Guard (once per trace) that ``m``'s forward hooks stay the ones the trace ran: adding
    or removing a hook bumps the state epoch, and this check then re-traces the step."""
    seen = _hooks_guarded_for(ctx)
    if id(m) in seen:
        return
    seen.add(id(m))
    d = m.__dict__
    tables = [d.get(name) for name in _HOOK_TABLES]
    snap = [tuple(t.items()) if t is not None else () for t in tables]

    def check() -> None:
        for t, old in zip(tables, snap):
            now = tuple(t.items()) if t is not None else ()
            if len(now) != len(old) or any(
                    k != k0 or v is not v0 for (k, v), (k0, v0) in zip(now, old)):
                raise _context.Mismatch
    ctx.sig.slow_guards.append(check)


def _hooks_guarded_for(ctx: Any) -> set[int]:
    seen = _HOOKS_GUARDED.get(ctx)
    if seen is None:
        seen = _HOOKS_GUARDED[ctx] = set()
    return seen


_context.named_types["module"] = Module  # the tracer names what it finds in a step's scope
_attr_guards.install(Module)  # plain attributes a traced step reads are guarded
