"""``nn.Buffer``, ``nn.UninitializedParameter``, ``nn.UninitializedBuffer`` and ``is_lazy``
(``torch.nn.parameter``'s other names; ``Parameter`` itself is in ``module.py``).

Why these shapes:

- ``nn.Buffer(t)`` returns a plain tensor, as PyTorch's does (``type(b)`` is ``Tensor``); only
  ``isinstance(b, nn.Buffer)`` and ``Module.__setattr__`` see the mark. PyTorch keeps the
  mark and ``persistent`` as attributes on the tensor object; graphc's ``Tensor`` has
  ``__slots__``, so they live in a weak identity map (``module._BUFFER_MARKS``).
- An uninitialized parameter or buffer is a real ``Parameter``/``Tensor`` object holding an
  empty array, so optimizers and modules can hold it before its shape is known; ``materialize``
  gives it its shape and changes its class in place (PyTorch's ``cls_to_become``), so every
  holder sees the materialized tensor. Until then reading its shape or using it in an op raises
  PyTorch's errors: ops reach a tensor's value through ``Tensor.node``, which raises here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _context
from ..ir import dtypes
from ..tensor import Tensor
from .module import _BUFFER_MARKS, Parameter, _Uninitialized

__all__ = ["Buffer", "Parameter", "UninitializedParameter", "UninitializedBuffer", "is_lazy"]


class _BufferMeta(type):
    """``isinstance(t, nn.Buffer)`` is True for tensors made by ``nn.Buffer`` (PyTorch's
    ``_BufferMeta`` tests the ``_is_buffer`` flag the same way)."""

    def __instancecheck__(cls, instance: Any) -> bool:
        if cls is Buffer:
            return isinstance(instance, Tensor) and _BUFFER_MARKS.get(instance) is not None
        return super().__instancecheck__(instance)


class Buffer(Tensor, metaclass=_BufferMeta):
    """``nn.Buffer(data=None, *, persistent=True)``: a tensor that, assigned to a module
    attribute (``self.mean = nn.Buffer(t)``), is registered as a buffer (``persistent=False``
    keeps it out of ``state_dict``). Like PyTorch's, it is ``data.detach()`` (sharing its
    memory) with ``data``'s ``requires_grad``, and its type is plain ``Tensor``."""

    __slots__ = ()

    def __new__(cls, data: Any = None, *, persistent: bool = True) -> Tensor:  # type: ignore[misc]
        if data is None:
            data = Tensor._from_array(np.empty(0, np.float32))
        elif not isinstance(data, Tensor):
            raise TypeError(f"nn.Buffer: data must be a Tensor, got {type(data).__name__}")
        t = data.detach()
        if data.requires_grad:
            t.requires_grad_(True)
        _BUFFER_MARKS[t] = bool(persistent)
        return t


_UNINIT_OP = ("Attempted to use an uninitialized parameter in {}. This error happens when you "
              "are using a `LazyModule` or explicitly manipulating "
              "`torch.nn.parameter.{}` objects. When using LazyModules Call `forward` with a "
              "dummy batch to initialize the parameters before calling torch functions")


class UninitializedTensorMixin(_Uninitialized):
    """What ``UninitializedParameter`` and ``UninitializedBuffer`` share: ``materialize`` and
    the errors PyTorch raises before it (``__slots__`` empty, so ``materialize`` can switch the
    object's class to ``Parameter``/``Tensor`` in place)."""

    __slots__ = ()
    cls_to_become: type = Tensor
    _plain_node = False  # ``node`` raises: the eager fast paths must not read ``_node``

    def materialize(self, shape: Any, device: Any = None, dtype: Any = None) -> None:
        """Give the tensor ``shape`` (uninitialized values, as ``torch.empty``) and the class
        it stands for; ``dtype`` defaults to the one it was created with. The object keeps its
        identity, so optimizers built over it update the materialized tensor."""
        node = self._node  # type: ignore[attr-defined]
        dt = node.dtype if dtype is None else dtypes.as_dtype(dtype)
        shape = tuple(int(s) for s in ((shape,) if isinstance(shape, int) else shape))
        node._value = np.empty(shape, dt.np)
        node.shape, node.dtype = shape, dt
        self.__class__ = self.cls_to_become  # type: ignore[assignment]
        _context.bump()  # compiled steps guard the shapes of the tensors they read

    @property
    def shape(self) -> tuple:
        raise RuntimeError(
            "Can't access the shape of an uninitialized parameter or buffer. This error "
            "usually happens in `load_state_dict` when trying to load an uninitialized "
            "parameter into an initialized one. Call `forward` to initialize the parameters "
            "before accessing their attributes.")

    @property
    def node(self) -> Any:
        raise ValueError(_UNINIT_OP.format("an operation", type(self).__name__))

    @property
    def dtype(self) -> dtypes.DType:
        return self._node.dtype  # type: ignore[attr-defined]

    @property
    def requires_grad(self) -> bool:
        return bool(self._node.rg)  # type: ignore[attr-defined]

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._node.rg = bool(value)  # type: ignore[attr-defined]
        _context.bump()

    def numpy(self) -> np.ndarray:
        raise ValueError(_UNINIT_OP.format("numpy()", type(self).__name__))

    def share_memory_(self) -> Any:
        raise RuntimeError(
            "Can't share memory on an uninitialized parameter or buffer. Call `forward` to "
            "initialize the parameters before calling `module.share_memory()`.")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    def __deepcopy__(self, memo: dict) -> Any:
        out = type(self)(self.requires_grad, dtype=self.dtype)  # type: ignore[call-arg]
        memo[id(self)] = out
        return out


def _empty_leaf(cls: type, requires_grad: bool, dtype: Any) -> Any:
    d = dtypes.float32 if dtype is None else dtypes.as_dtype(dtype)
    return Tensor._from_array.__func__(cls, np.empty(0, d.np), requires_grad)  # type: ignore


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A ``Parameter`` whose shape is not known yet (a lazy module's weight); becomes a
    ``Parameter`` on ``materialize``."""

    __slots__ = ()
    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device: Any = None,
                dtype: Any = None) -> UninitializedParameter:
        return _empty_leaf(cls, requires_grad, dtype)


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer whose shape is not known yet (a lazy norm's running statistics); becomes a
    ``Tensor`` on ``materialize``."""

    __slots__ = ()
    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device: Any = None, dtype: Any = None,
                persistent: bool = True) -> UninitializedBuffer:
        t = _empty_leaf(cls, requires_grad, dtype)
        _BUFFER_MARKS[t] = bool(persistent)  # a Buffer too: assigning it registers a buffer
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # state set in __new__
        pass


def is_lazy(param: Any) -> bool:
    """Whether ``param`` is an ``UninitializedParameter`` or ``UninitializedBuffer``."""
    return isinstance(param, UninitializedTensorMixin)
