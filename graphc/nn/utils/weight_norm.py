"""The older, hook-based ``nn.utils.weight_norm`` / ``remove_weight_norm`` (PyTorch keeps them,
deprecated, beside ``nn.utils.parametrizations.weight_norm``).

PyTorch's layout, kept so checkpoints load both ways: the parameter ``weight`` is replaced by
``weight_g`` (magnitudes) and ``weight_v`` (directions), and a forward pre-hook (the
``WeightNorm`` object) recomputes the plain attribute ``module.weight`` before every forward.
The hook is Python run by ``Module.__call__``, so a compiled step records the recomputation
and differentiates through it to ``weight_g``/``weight_v``.

One graphc-specific detail: inside a trace the attribute the hook sets is a traced tensor,
which must not outlive the trace (reading it later would raise). A forward hook registered
with it puts the eager value back after the traced forward, so ``module.weight`` read between
compiled steps is the value of the last eager forward (PyTorch's attribute is likewise the
value of the last forward, not of the current parameters).
"""

from __future__ import annotations

import warnings
from typing import Any

from ... import _context
from ...autograd import no_grad
from ..module import Module, Parameter
from .parametrizations import _norm_except_dim, _weight_norm

__all__ = ["WeightNorm", "weight_norm", "remove_weight_norm"]


class _RecomputedAttr:
    """What the two hook-based reparametrizations share: the pre-hook sets
    ``module.<name>`` from ``compute_weight``, and a forward hook restores the eager value
    after a traced forward (see the module docstring)."""

    name: str

    def __init__(self) -> None:
        self._eager: list[Any] = []
        self._restore_handle: Any = None

    def compute_weight(self, module: Module, *args: Any) -> Any:
        raise NotImplementedError

    def _set(self, module: Module, value: Any) -> None:
        if _context.current() is not None:
            self._eager.append(module.__dict__.get(self.name))
        object.__setattr__(module, self.name, value)

    def _restore(self, module: Module, args: Any, output: Any) -> None:
        if self._eager:
            object.__setattr__(module, self.name, self._eager.pop())

    def _register(self, module: Module) -> None:
        module.register_forward_pre_hook(self)
        self._restore_handle = module.register_forward_hook(self._restore, always_call=True)

    def _unregister(self, module: Module, key: Any) -> None:
        del module._forward_pre_hooks[key]
        module.__dict__["_hooks_with_kwargs"].discard(key)
        if self._restore_handle is not None:
            self._restore_handle.remove()
        _context.bump()  # compiled steps guard the hooks of the modules they ran


class WeightNorm(_RecomputedAttr):
    """The forward pre-hook of ``weight_norm``: ``module.<name> = g * v / ||v||``."""

    def __init__(self, name: str, dim: int | None) -> None:
        super().__init__()
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module, *args: Any) -> Any:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return _weight_norm(v, g, self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> WeightNorm:
        warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                      "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning,
                      stacklevel=3)
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError("Cannot register two weight_norm hooks on the same "
                                   f"parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        from ..parameter import is_lazy

        if is_lazy(weight):
            raise ValueError("The module passed to `WeightNorm` can't have uninitialized "
                             "parameters. Make sure to run the dummy forward before applying "
                             "weight normalization")
        delattr(module, name)
        with no_grad():
            g = _norm_except_dim(weight, fn.dim)
        module.register_parameter(name + "_g", Parameter(g))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        object.__setattr__(module, name, fn.compute_weight(module))
        fn._register(module)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        delattr(module, self.name + "_g")
        delattr(module, self.name + "_v")
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs: Any) -> None:
        self._set(module, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Replace ``module.<name>`` by ``<name>_g * <name>_v / ||<name>_v||`` (norm over every
    dim but ``dim``; ``None``: the whole tensor), recomputed before each forward. Deprecated
    in PyTorch in favour of ``nn.utils.parametrizations.weight_norm`` (warns)."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Make ``module.<name>`` a plain parameter again (its current value)."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            hook._unregister(module, k)
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
