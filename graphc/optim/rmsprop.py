"""``optim.RMSprop``: PyTorch's ``_single_tensor_rmsprop`` rule, line for line."""

from __future__ import annotations

from typing import Any

from .. import dtypes as dt
from ..autograd import no_grad
from .adam import _check_lr, lerp
from .optimizer import Optimizer, nonzero


class RMSprop(Optimizer):
    """RMSprop with PyTorch's arguments: ``alpha`` smoothing, ``eps`` added after the square
    root, L2 ``weight_decay``, ``momentum`` (the learning rate applied outside the buffer),
    ``centered`` (variance estimate minus the squared mean gradient) and ``maximize``.

    State per parameter, created on the first step with a gradient: ``step`` (float32 0-d),
    ``square_avg``, and ``momentum_buffer`` when ``momentum > 0``, ``grad_avg`` when centered.
    """

    def __init__(self, params: Any, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False,
                 capturable: bool = False, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        if differentiable:
            raise NotImplementedError("RMSprop(differentiable=True) is not supported by graphc")
        _check_lr(lr)
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                        weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                        maximize=maximize, differentiable=differentiable)
        super().__init__(params, defaults)

    @no_grad()
    def step(self, closure: Any = None) -> Any:
        """One RMSprop update of every parameter that has a gradient."""
        loss = self._closure(closure)
        for group, params in self._active_groups():
            lr = self._hp(group, "lr")
            alpha = self._hp(group, "alpha")
            eps = self._hp(group, "eps")
            maximize = self._on(group, "maximize")
            centered = self._on(group, "centered")
            use_wd = self._on(group, "weight_decay", nonzero)
            use_mom = self._on(group, "momentum", lambda v: v > 0)
            wd = self._hp(group, "weight_decay") if use_wd else 0.0
            mom = self._hp(group, "momentum") if use_mom else 0.0
            small_w = self._on(group, "alpha", lambda a: abs(1 - a) < 0.5) if centered else True
            for p in params:
                g = p.grad
                if maximize:
                    g = -g
                self._state_update(p, "step", lambda s: s + 1, shape=(), dtype=dt.float32)
                if use_wd:
                    g = g + p * wd  # grad.add(param, alpha=weight_decay)
                # square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                sq = self._state_update(
                    p, "square_avg", lambda s, g=g, a=alpha: s * a + (g * (1 - a)) * g)
                if centered:
                    # grad_avg.lerp_(grad, 1 - alpha)
                    ga = self._state_update(
                        p, "grad_avg", lambda a, g=g, w=1 - alpha, s=small_w: lerp(a, g, w, s))
                    # square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
                    avg = (sq + (ga * -1.0) * ga).sqrt()
                else:
                    avg = sq.sqrt()
                avg = avg + eps
                if use_mom:
                    # buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
                    buf = self._state_update(
                        p, "momentum_buffer", lambda b, g=g, avg=avg, mu=mom: b * mu + g / avg)
                    p._assign(p + buf * (-lr))
                else:
                    # param.addcdiv_(grad, avg, value=-lr)
                    p._assign(p + (g * (-lr)) / avg)
        return loss
