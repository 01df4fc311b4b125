"""The older, hook-based ``nn.utils.spectral_norm`` / ``remove_spectral_norm`` (PyTorch keeps
them beside ``nn.utils.parametrizations.spectral_norm``).

PyTorch's layout, kept so checkpoints load both ways: the parameter ``weight`` becomes
``weight_orig``, the power-iteration vectors are the buffers ``weight_u`` and ``weight_v``, and
a forward pre-hook (the ``SpectralNorm`` object) sets the plain attribute ``module.weight`` to
``weight_orig / sigma`` before every forward, running ``n_power_iterations`` steps first in
training mode. The steps write ``weight_u``/``weight_v`` in place under ``no_grad`` (PyTorch's
``normalize(..., out=u)``), so in a compiled step they are state updates, as batch norm's
running statistics are. As with ``weight_norm``, a traced ``module.weight`` is put back to its
eager value after the traced forward.
"""

from __future__ import annotations

from typing import Any

from ... import _core
from ...autograd import no_grad
from ...tensor import Tensor
from .. import functional as F
from ..module import Module, Parameter
from .weight_norm import _RecomputedAttr

__all__ = ["SpectralNorm", "spectral_norm", "remove_spectral_norm"]


class SpectralNorm(_RecomputedAttr):
    """The forward pre-hook of ``spectral_norm``."""

    _version: int = 1

    def __init__(self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:
        super().__init__()
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        weight_mat = weight
        if self.dim != 0:
            weight_mat = weight_mat.permute(
                self.dim, *[d for d in range(weight_mat.ndim) if d != self.dim])
        return weight_mat.reshape(weight_mat.shape[0], -1)

    def compute_weight(self, module: Module, do_power_iteration: bool = False) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v._assign(F.normalize(_core.mv(weight_mat.T, u), dim=0, eps=self.eps))
                    u._assign(F.normalize(_core.mv(weight_mat, v), dim=0, eps=self.eps))
                u, v = u.clone(), v.clone()
        sigma = _core.dot(u, _core.mv(weight_mat, v))
        return weight / sigma

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs: Any) -> None:
        self._set(module, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int,
              eps: float) -> SpectralNorm:
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError("Cannot register two spectral_norm hooks on the same "
                                   f"parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        from ..parameter import is_lazy

        if is_lazy(weight):
            raise ValueError("The module passed to `SpectralNorm` can't have uninitialized "
                             "parameters. Make sure to run the dummy forward before applying "
                             "spectral normalization")
        with no_grad():  # PyTorch's draws: u then v, standard normal, normalised
            h, w = fn.reshape_weight_to_matrix(weight).shape
            u = F.normalize(_core.empty(h, dtype=weight.dtype).normal_(0, 1), dim=0,
                            eps=fn.eps)
            v = F.normalize(_core.empty(w, dtype=weight.dtype).normal_(0, 1), dim=0,
                            eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        object.__setattr__(module, fn.name, weight.detach())
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        fn._register(module)
        return fn


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Replace ``module.<name>`` by ``<name>_orig / sigma`` (its largest singular value,
    estimated by power iteration on the buffers ``<name>_u``/``<name>_v``), recomputed
    before each forward; ``dim`` defaults to 0, 1 for transposed convolutions."""
    if dim is None:
        from ..layers2d import ConvTranspose1d, ConvTranspose2d
        from ..layers3d import ConvTranspose3d

        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d,
                                       ConvTranspose3d)) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Make ``module.<name>`` a plain parameter again (its current value, no power
    iteration)."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, SpectralNorm) and hook.name == name:
            hook.remove(module)
            hook._unregister(module, k)
            return module
    raise ValueError(f"spectral_norm of '{name}' not found in {module}")
