"""``nn.Module`` and ``nn.Parameter`` with PyTorch's registration, naming and state_dict rules."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import _context
from ..tensor import Tensor, to_array

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


def _array_to_tensor(v: Any) -> Any:
    return Tensor._from_array(to_array(v)) if isinstance(v, np.ndarray) else v


class Module:
    """Base class of layers and models (``forward`` is called by ``__call__``)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_training", True)

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
        if name in params or name in bufs or name in mods or isinstance(
                value, (Parameter, Module)):
            _context.bump()  # compiled steps guard on which tensors and children they used
        if isinstance(value, (Parameter, Module)):
            for store in (params, bufs, mods):
                store.pop(name, None)
            d.pop(name, None)
            (params if isinstance(value, Parameter) else mods)[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter "
                                f"'{name}' (graphc.nn.Parameter or None expected)")
            params[name] = None
        elif name in bufs:
            bufs[name] = value
        elif name in mods:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (graphc.nn.Module or None expected)")
            mods[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                _context.bump()
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._parameters[name] = param
        _context.bump()

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        self._buffers[name] = tensor
        _context.bump()
        if not persistent:
            self.__dict__.setdefault("_non_persistent", set()).add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        self._modules[name] = module
        _context.bump()

    # -- traversal ---------------------------------------------------------------------
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()

        def walk(m: Module, pre: str) -> Iterator[tuple[str, Module]]:
            if id(m) in seen:
                return
            seen.add(id(m))
            yield pre, m
            for n, c in m._modules.items():
                if c is not None:
                    yield from walk(c, f"{pre}.{n}" if pre else n)

        yield from walk(self, prefix)

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
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
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
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
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
        for mp, m in self.named_modules(prefix.rstrip(".")):
            skip = m.__dict__.get("_non_persistent", set())
            for n, p in m._parameters.items():
                if p is not None:
                    out[f"{mp}.{n}" if mp else n] = np.array(p.numpy(), copy=True)
            for n, b in m._buffers.items():
                if b is not None and n not in skip:
                    out[f"{mp}.{n}" if mp else n] = np.array(b.numpy(), copy=True)
        return out

    def load_state_dict(self, state_dict: Any, strict: bool = True) -> Any:
        """Copy values in place (tensors keep their identity, compiled steps stay valid)."""
        own: dict[str, Tensor] = {}
        for mp, m in self.named_modules():
            skip = m.__dict__.get("_non_persistent", set())
            for n, p in m._parameters.items():
                if p is not None:
                    own[f"{mp}.{n}" if mp else n] = p
            for n, b in m._buffers.items():
                if b is not None and n not in skip:
                    own[f"{mp}.{n}" if mp else n] = b
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
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
        """Run ``forward``, with numpy arrays among the arguments converted to tensors first
        (as ``gc.tensor`` would, sharing memory where dtype and layout allow): a ``forward``
        written for PyTorch calls tensor methods on its inputs (``idx.size()``, ``x.view``),
        which on a numpy array are other things or absent."""
        ctx = _context.current()
        if ctx is not None:
            ctx.note_module(self)
        for a in args:
            if isinstance(a, np.ndarray):
                args = tuple(_array_to_tensor(v) for v in args)
                break
        if kwargs:
            kwargs = {k: _array_to_tensor(v) for k, v in kwargs.items()}
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for n, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({n}): {body}")
        return lines[0] + ("\n" + "\n".join(lines[1:]) + "\n)" if len(lines) > 1 else ")")


_context.named_types["module"] = Module  # the tracer names what it finds in a step's scope
