"""``optim.SGD``: PyTorch's ``_single_tensor_sgd`` rule, line for line."""

from __future__ import annotations

from typing import Any

from ..autograd import no_grad
from .optimizer import Optimizer, nonzero


class SGD(Optimizer):
    """SGD with momentum, dampening, Nesterov, L2 weight decay and maximize.

    The first momentum step copies the gradient into the buffer (no dampening factor);
    later steps do ``buf = momentum*buf + (1-dampening)*g``; the learning rate is applied
    outside the buffer, so changing it rescales the whole velocity (PyTorch's convention).
    """

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        if differentiable:
            raise NotImplementedError("SGD(differentiable=True) is not supported by graphc")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                        foreach=foreach, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)

    def _check_group(self, g: dict[str, Any]) -> None:
        if float(g["lr"]) < 0.0:
            raise ValueError(f"Invalid learning rate: {g['lr']}")
        if g["momentum"] < 0.0:
            raise ValueError(f"Invalid momentum value: {g['momentum']}")
        if g["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {g['weight_decay']}")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    @no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = self._closure(closure)
        for group, params in self._active_groups():
            lr = self._hp(group, "lr")
            maximize = self._on(group, "maximize")
            use_wd = self._on(group, "weight_decay", nonzero)
            use_mom = self._on(group, "momentum", nonzero)
            nesterov = self._on(group, "nesterov") if use_mom else False
            wd = self._hp(group, "weight_decay") if use_wd else 0.0
            mu = self._hp(group, "momentum") if use_mom else 0.0
            damp = self._hp(group, "dampening") if use_mom else 0.0
            for p in params:
                g = p.grad
                if maximize:
                    g = -g
                if use_wd:
                    g = g + p * wd
                if use_mom:
                    buf = self._state_update(
                        p, "momentum_buffer",
                        update=lambda b, g=g, mu=mu, damp=damp: b * mu + g * (1 - damp),
                        first=lambda g=g: g.clone(),
                    )
                    g = g + buf * mu if nesterov else buf
                p._assign(p + g * (-lr))
        return loss
