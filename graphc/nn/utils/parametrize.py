"""``nn.utils.parametrize``: ``register_parametrization``, ``remove_parametrizations``,
``is_parametrized``, ``cached``, ``type_before_parametrizations``,
``transfer_parametrizations_and_params`` and ``ParametrizationList``.

PyTorch's mechanism, kept so that state_dicts and module structure match it key for key: the
parametrized tensor is moved into ``module.parametrizations[name]`` (a ``ParametrizationList``
holding ``original``, or ``original0``, ``original1``, ... when the first parametrization's
``right_inverse`` returns several tensors, and the parametrization modules as ``0``, ``1``,
...), and the module's class is replaced by a subclass ``Parametrized<Class>`` with a
property ``name`` that evaluates the parametrizations on every read (once per ``cached()``
block) and runs ``right_inverse`` on assignment.

Why it compiles without anything special: reading ``module.weight`` inside a traced step runs
the parametrization's ``forward`` as ordinary traced tensor ops on the ``original`` parameters,
so gradients reach them and an optimizer over ``model.parameters()`` updates them. Buffers a
parametrization writes in ``forward`` (``spectral_norm``'s power iteration) are written with
in-place ops under ``no_grad``, which a compiled step turns into state updates, as it does for
batch-norm running statistics. Registering, removing and assigning through ``right_inverse``
change parameters' storage or the module's class; they are done eagerly (``.data``
assignment raises inside a compiled function).
"""

from __future__ import annotations

import collections.abc
import copy
import copyreg
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...autograd import no_grad
from ...tensor import Tensor
from ..containers import ModuleDict
from ..layers import ModuleList
from ..module import Module, Parameter

__all__ = ["cached", "ParametrizationList", "register_parametrization", "is_parametrized",
           "remove_parametrizations", "type_before_parametrizations",
           "transfer_parametrizations_and_params"]

_cache_enabled = 0
_cache: dict[tuple[int, str], Tensor | None] = {}


@contextmanager
def cached() -> Iterator[None]:
    """Within the block each parametrized tensor is computed on its first read and reused
    (a weight read several times per forward, as in an RNN's loop, is computed once)."""
    global _cache, _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache = {}


def _register_parameter_or_buffer(module: Module, name: str, x: Tensor) -> None:
    if isinstance(x, Parameter):
        module.register_parameter(name, x)
    else:
        module.register_buffer(name, x)


def _maybe_set(dest: Tensor, src: Tensor) -> None:
    """``dest.set_(src)``: ``dest`` takes ``src``'s values (and shape), keeping its identity,
    so optimizers and other holders of ``dest`` see the new values."""
    dest.data = np.array(src.detach().numpy(), copy=True)


def _dtype_str(d: Any) -> str:
    return f"torch.{d.name}" if hasattr(d, "name") else str(d)


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor and its original value(s); ``module.weight`` is
    ``self()``. Built by ``register_parametrization``, not by users (as in PyTorch)."""

    def __init__(self, modules: Sequence[Module], original: Tensor,
                 unsafe: bool = False) -> None:
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        original_shape, original_dtype = tuple(original.shape), original.dtype
        with no_grad():
            new: Any = original
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:
                        pass
        if not isinstance(new, Tensor) and not isinstance(new, collections.abc.Sequence):
            raise ValueError("'right_inverse' must return a Tensor or a Sequence of tensors "
                             f"(list, tuple...). Got {type(new).__name__}")
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if original.dtype != new.dtype:
                raise ValueError(
                    "When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                    f"original.dtype: {_dtype_str(original.dtype)}\n"
                    f"right_inverse(original).dtype: {_dtype_str(new.dtype)}")
            if new is not original:
                with no_grad():
                    _maybe_set(original, new)
            _register_parameter_or_buffer(self, "original", original)
        else:
            for i, originali in enumerate(new):
                if not isinstance(originali, Tensor):
                    raise ValueError("'right_inverse' must return a Tensor or a Sequence of "
                                     "tensors (list, tuple...). Got element "
                                     f"{i} of the sequence with type "
                                     f"{type(originali).__name__}.")
                rg = original.requires_grad
                if isinstance(original, Parameter):
                    originali = Parameter(originali.detach(), rg)
                else:
                    originali = originali.detach()
                    if rg:
                        originali.requires_grad_(True)
                _register_parameter_or_buffer(self, f"original{i}", originali)
        if not self.unsafe:
            z = self()
            if not isinstance(z, Tensor):
                raise ValueError(f"A parametrization must return a tensor. Got "
                                 f"{type(z).__name__}.")
            if z.dtype != original_dtype:
                raise ValueError(
                    "Registering a parametrization may not change the dtype of the tensor, "
                    "unless `unsafe` flag is enabled.\n"
                    f"unparametrized dtype: {_dtype_str(original_dtype)}\n"
                    f"parametrized dtype: {_dtype_str(z.dtype)}")
            if tuple(z.shape) != original_shape:
                raise ValueError(
                    "Registering a parametrization may not change the shape of the tensor, "
                    "unless `unsafe` flag is enabled.\n"
                    f"unparametrized shape: {_size(original_shape)}\n"
                    f"parametrized shape: {_size(z.shape)}")

    def right_inverse(self, value: Tensor) -> None:
        """Store ``value`` as the parametrized tensor: the parametrizations' ``right_inverse``
        in reverse order, written into ``original`` (or ``original0``, ...)."""
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
                else:
                    raise RuntimeError(f"parametrization {type(module).__name__} does not "
                                       "implement right_inverse.")
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got "
                                     f"{type(value).__name__}")
                if value.dtype != self.original.dtype:
                    raise ValueError(f"The tensor returned by `right_inverse` has dtype "
                                     f"{_dtype_str(value.dtype)} while `original` has dtype "
                                     f"{_dtype_str(self.original.dtype)}")
                _maybe_set(self.original, value)
            else:
                if not isinstance(value, collections.abc.Sequence):
                    raise ValueError("'right_inverse' must return a sequence of tensors. "
                                     f"Got {type(value).__name__}.")
                if len(value) != self.ntensors:
                    raise ValueError("'right_inverse' must return a sequence of tensors of "
                                     f"length {self.ntensors}. Got a sequence of length "
                                     f"{len(value)}.")
                for i, tensor in enumerate(value):
                    original_i = getattr(self, f"original{i}")
                    if not isinstance(tensor, Tensor):
                        raise ValueError("'right_inverse' must return a sequence of tensors "
                                         "or reference-type opaques. Got element "
                                         f"{i} of type {type(tensor).__name__}.")
                    if original_i.dtype != tensor.dtype:
                        raise ValueError(f"Tensor {i} returned by `right_inverse` has dtype "
                                         f"{_dtype_str(tensor.dtype)} while `original{i}` has "
                                         f"dtype {_dtype_str(original_i.dtype)}")
                    _maybe_set(original_i, tensor)

    def forward(self) -> Tensor:
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for i in range(1, len(self)):
            x = self[i](x)
        return x


def _size(shape: Any) -> str:
    return f"torch.Size({list(shape)})"


def _inject_new_class(module: Module) -> None:
    """Give ``module`` its own subclass ``Parametrized<Class>`` (where the properties go).
    Pickling it is refused, as PyTorch refuses (state_dict is the way to save it); deepcopy
    copies its ``__dict__``."""
    cls = module.__class__

    def default_deepcopy(self: Any, memo: dict) -> Any:
        obj = memo.get(id(self), None)
        if obj is not None:
            return obj
        replica = self.__new__(self.__class__)
        memo[id(self)] = replica
        replica.__dict__ = copy.deepcopy(self.__dict__, memo)
        for slot in copyreg._slotnames(self.__class__):  # type: ignore[attr-defined]
            if hasattr(self, slot):
                setattr(replica, slot, copy.deepcopy(getattr(self, slot), memo))
        return replica

    def getstate(self: Any) -> Any:
        raise RuntimeError(
            "Serialization of parametrized modules is only supported through state_dict(). "
            "See:\nhttps://pytorch.org/tutorials/beginner/saving_loading_models.html"
            "#saving-loading-a-general-checkpoint-for-inference-and-or-resuming-training")

    dct: dict[str, Any] = {"__getstate__": getstate}
    if not hasattr(cls, "__deepcopy__"):
        dct["__deepcopy__"] = default_deepcopy
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), dct)


def _inject_property(module: Module, tensor_name: str) -> None:
    """The property ``tensor_name`` on the module's own class: read evaluates the
    parametrizations (cached inside ``cached()``), assignment runs ``right_inverse``."""
    if hasattr(module, tensor_name):
        raise AssertionError(f"Module already has an attribute named '{tensor_name}'")

    def get_parametrized(self: Module) -> Tensor:
        parametrization = self.parametrizations[tensor_name]
        if _cache_enabled:
            key = (id(self), tensor_name)
            tensor = _cache.get(key)
            if tensor is None:
                tensor = parametrization()
                _cache[key] = tensor
            return tensor
        return parametrization()

    def set_original(self: Module, value: Tensor) -> None:
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """Make ``module.<tensor_name>`` read as ``parametrization(original)``; a second
    registration on the same name chains after the first. ``unsafe`` skips the checks that
    the parametrization keeps the tensor's shape and dtype."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            y = getattr(module, tensor_name)
            x = parametrization(y)
            if not isinstance(x, Tensor):
                raise ValueError(f"A parametrization must return a tensor. Got "
                                 f"{type(x).__name__}.")
            if x.dtype != y.dtype:
                raise ValueError(
                    "Registering a parametrization may not change the dtype of the tensor, "
                    "unless the `unsafe` flag is enabled.\n"
                    f"module.{tensor_name}.dtype: {_dtype_str(y.dtype)}\n"
                    f"parametrization(module.{tensor_name}).dtype: {_dtype_str(x.dtype)}")
            if tuple(x.shape) != tuple(y.shape):
                raise ValueError(
                    "Registering a parametrization may not change the shape of the tensor, "
                    "unless the `unsafe` flag is enabled.\n"
                    f"module.{tensor_name}.shape: {_size(y.shape)}\n"
                    f"parametrization(module.{tensor_name}).shape: {_size(x.shape)}")
            if hasattr(parametrization, "right_inverse"):
                try:
                    z = parametrization.right_inverse(x)
                except NotImplementedError:
                    pass
                else:
                    if not isinstance(z, Tensor):
                        raise ValueError("parametrization.right_inverse must return a tensor. "
                                         f"Got: {type(z).__name__}")
                    if z.dtype != y.dtype:
                        raise ValueError(
                            "The tensor returned by parametrization.right_inverse must have "
                            f"the same dtype as module.{tensor_name}, unless the `unsafe` "
                            f"flag is enabled.\nmodule.{tensor_name}.dtype: "
                            f"{_dtype_str(y.dtype)}\nreturned dtype: {_dtype_str(z.dtype)}")
                    if tuple(z.shape) != tuple(y.shape):
                        raise ValueError(
                            "The tensor returned by parametrization.right_inverse must have "
                            f"the same shape as module.{tensor_name}, unless the `unsafe` "
                            f"flag is enabled.\nmodule.{tensor_name}.shape: {_size(y.shape)}"
                            f"\nreturned shape: {_size(z.shape)}")
        plist = module.parametrizations[tensor_name]
        plist.append(parametrization)
        plist.unsafe |= unsafe
    elif tensor_name in module._buffers or tensor_name in module._parameters:
        original = getattr(module, tensor_name)
        parametrizations = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = parametrizations
    else:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{tensor_name}'")
    return module


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has any parametrization (or one on ``tensor_name``)."""
    parametrizations = module.__dict__["_modules"].get("parametrizations")
    if parametrizations is None or not isinstance(parametrizations, ModuleDict):
        return False
    if tensor_name is None:
        return len(parametrizations) > 0
    return tensor_name in parametrizations


def remove_parametrizations(module: Module, tensor_name: str,
                            leave_parametrized: bool = True) -> Module:
    """Undo ``register_parametrization`` on ``tensor_name``: the tensor becomes a plain
    parameter (or buffer) again, holding its current parametrized value
    (``leave_parametrized``) or the ``original`` one. A single ``original`` keeps its
    identity (optimizers holding it stay valid), as in PyTorch."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    parametrizations = module.parametrizations[tensor_name]
    if parametrizations.is_tensor:
        original = parametrizations.original
        if leave_parametrized:
            with no_grad():
                t = getattr(module, tensor_name)
                _maybe_set(original, t)
    else:
        if not leave_parametrized:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                             "that is parametrized in terms of a sequence of tensors.")
        t = getattr(module, tensor_name)
        original = Parameter(t.detach()) if t.requires_grad else t.detach()
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _register_parameter_or_buffer(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


def type_before_parametrizations(module: Module) -> type:
    """The module's class before parametrizations were registered on it."""
    if is_parametrized(module):
        return module.__class__.__bases__[0]
    return type(module)


def transfer_parametrizations_and_params(from_module: Module, to_module: Module,
                                         tensor_name: str | None = None) -> Module:
    """Register ``from_module``'s parametrizations (of ``tensor_name``, or all) on
    ``to_module`` and give it the same original tensors."""
    if is_parametrized(from_module):
        names = list(from_module.parametrizations) if tensor_name is None else [tensor_name]
        for name in names:
            if not hasattr(to_module, name):
                setattr(to_module, name, Parameter(getattr(from_module, name).detach()))
            for param_func in from_module.parametrizations[name]:
                register_parametrization(to_module, name, param_func)
            src, dst = from_module.parametrizations[name], to_module.parametrizations[name]
            if "original" in src._parameters or "original" in src._buffers:
                dst.original = src.original
            else:
                i = 0
                while hasattr(src, f"original{i}"):
                    setattr(dst, f"original{i}", getattr(src, f"original{i}"))
                    i += 1
    return to_module
