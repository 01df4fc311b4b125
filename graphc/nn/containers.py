"""``nn.ModuleDict``, ``nn.ParameterList`` and ``nn.ParameterDict``, as in ``torch.nn``.

They register their entries the way attributes are registered (``_modules`` or
``_parameters`` under the entry's key, ``"0"``, ``"1"``... for lists), so ``state_dict()``
keys, ``named_parameters()`` and ``parameters()`` match PyTorch's, and every change bumps the
state epoch that compiled steps check their guards against. A container read inside a traced
step is guarded like a called module (``Module.__getattr__``): replacing, adding or removing
an entry after the step was compiled re-traces it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .. import _context
from ..tensor import Tensor
from .module import Module, Parameter

__all__ = ["ModuleDict", "ParameterList", "ParameterDict"]


def _pairs(values: Any, what: str, sort_plain: bool = False) -> Iterator[tuple[Any, Any]]:
    """Key/value pairs from a mapping or an iterable of pairs (PyTorch's ``update`` rules:
    ``ParameterDict`` sorts the keys of a mapping that is not an ``OrderedDict`` or one of
    its own kind, ``ModuleDict`` keeps every mapping's order)."""
    if isinstance(values, (Mapping, ModuleDict, ParameterDict)):
        items = list(values.items())
        if sort_plain and not isinstance(values, (OrderedDict, ParameterDict)):
            items = sorted(items)
        yield from items
        return
    if not isinstance(values, Iterable):
        raise TypeError(f"{what}.update should be called with an iterable of key/value pairs, "
                        f"but got {type(values).__name__}")
    for j, kv in enumerate(values):
        if not isinstance(kv, Iterable) or isinstance(kv, (str, bytes)):
            raise TypeError(f"{what} update sequence element #{j} should be Iterable; is "
                            f"{type(kv).__name__}")
        kv = tuple(kv)
        if len(kv) != 2:
            raise ValueError(f"{what} update sequence element #{j} has length {len(kv)}; 2 is "
                             "required")
        yield kv


def _as_parameter(value: Any) -> Any:
    """Tensors (and arrays) become Parameters, as ``ParameterList``/``ParameterDict`` do."""
    if isinstance(value, Parameter):
        return value
    if isinstance(value, Tensor):
        return Parameter(value)
    if isinstance(value, np.ndarray):
        return Parameter(value)
    raise TypeError(f"graphc's ParameterList/ParameterDict hold parameters (or tensors, made "
                    f"parameters); got {type(value).__name__}")


class ModuleDict(Module):
    """An ordered dict of child modules (``model.heads["a"]``); no ``forward``."""

    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]
        _context.bump()

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def clear(self) -> None:
        self._modules.clear()
        _context.bump()

    def pop(self, key: str) -> Module:
        v = self[key]
        del self[key]
        return v

    def keys(self) -> Any:
        return self._modules.keys()

    def items(self) -> Any:
        return self._modules.items()

    def values(self) -> Any:
        return self._modules.values()

    def update(self, modules: Any) -> None:
        for k, m in _pairs(modules, "ModuleDict"):
            self[k] = m


class ParameterList(Module):
    """A list of parameters registered as ``"0"``, ``"1"``, ... (state_dict keys as PyTorch's).
    Plain tensors appended are made parameters."""

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        object.__setattr__(self, "_size", 0)
        if values is not None:
            self.extend(values)

    def _index(self, idx: int) -> str:
        idx = int(idx)
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range")
        return str(idx % len(self))

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return ParameterList(self[i] for i in range(len(self))[idx])
        return self._parameters[self._index(idx)]

    def __setitem__(self, idx: int, param: Any) -> None:
        setattr(self, self._index(idx), _as_parameter(param))

    def __len__(self) -> int:
        return self.__dict__["_size"]

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self[i] for i in range(len(self)))

    def __iadd__(self, params: Iterable[Any]) -> ParameterList:
        return self.extend(params)

    def append(self, value: Any) -> ParameterList:
        n = len(self)
        object.__setattr__(self, "_size", n + 1)
        self.register_parameter(str(n), _as_parameter(value))
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        if not isinstance(values, Iterable) or isinstance(values, Tensor):
            raise TypeError("ParameterList.extend should be called with an iterable, but got "
                            f"{type(values).__name__}")
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        lines = []
        for k, p in self._parameters.items():
            size = "x".join(str(s) for s in p.shape)
            lines.append(f"  ({k}): Parameter containing: [{p.dtype!r} of size {size}]")
        return "\n" + "\n".join(lines) + "\n" if lines else ""


class ParameterDict(Module):
    """An ordered dict of parameters (``state_dict`` keys are the dict's keys). Plain tensors
    stored are made parameters."""

    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Parameter:
        return self._parameters[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict keys are strings, got {type(key).__name__}")
        value = _as_parameter(value)
        if key in self._parameters:
            setattr(self, key, value)
        else:
            self.register_parameter(key, value)

    def __delitem__(self, key: str) -> None:
        del self._parameters[key]
        _context.bump()

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def __reversed__(self) -> Iterator[str]:
        return reversed(list(self._parameters))

    def __contains__(self, key: object) -> bool:
        return key in self._parameters

    def __or__(self, other: ParameterDict) -> ParameterDict:
        out = self.copy()
        out.update(other)
        return out

    def __ior__(self, other: ParameterDict) -> ParameterDict:
        self.update(other)
        return self

    def copy(self) -> ParameterDict:
        return ParameterDict(OrderedDict(self._parameters))

    def get(self, key: str, default: Any = None) -> Any:
        return self._parameters.get(key, default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str) -> Parameter:
        v = self[key]
        del self[key]
        return v

    def popitem(self) -> tuple[str, Parameter]:
        k = next(reversed(self))
        return k, self.pop(k)

    def clear(self) -> None:
        self._parameters.clear()
        _context.bump()

    def fromkeys(self, keys: Iterable[str], default: Any = None) -> ParameterDict:
        return ParameterDict((k, default) for k in keys)

    def keys(self) -> Any:
        return self._parameters.keys()

    def items(self) -> Any:
        return self._parameters.items()

    def values(self) -> Any:
        return self._parameters.values()

    def update(self, parameters: Any) -> None:
        for k, v in _pairs(parameters, "ParameterDict", sort_plain=True):
            self[k] = v

    def extra_repr(self) -> str:
        lines = []
        for k, p in self._parameters.items():
            size = "x".join(str(s) for s in p.shape)
            lines.append(f"  ({k}): Parameter containing: [{p.dtype!r} of size {size}]")
        return "\n" + "\n".join(lines) + "\n" if lines else ""
