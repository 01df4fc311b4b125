"""``optim.Adagrad``: PyTorch's ``_single_tensor_adagrad`` rule, line for line."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..autograd import no_grad
from ..tensor import Tensor
from .adam import _check_lr
from .optimizer import Optimizer, nonzero


class Adagrad(Optimizer):
    """Adagrad with PyTorch's arguments (``lr_decay``, ``weight_decay``,
    ``initial_accumulator_value``, ``eps`` added after the square root, ``maximize``).

    Unlike the other optimizers, PyTorch creates Adagrad's state when the optimizer is built:
    ``step = tensor(0.)`` and ``sum = full_like(p, initial_accumulator_value)`` for every
    parameter, so ``state_dict()`` has entries before the first step. That is mirrored here.
    """

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0,
                 weight_decay: float = 0, initial_accumulator_value: float = 0,
                 eps: float = 1e-10, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        if differentiable:
            raise NotImplementedError("Adagrad(differentiable=True) is not supported by graphc")
        _check_lr(lr)
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(
                f"Invalid initial_accumulator_value value: {initial_accumulator_value}"
            )
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        defaults = dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = Tensor._from_array(np.zeros((), np.float32))
                state["sum"] = Tensor._from_array(
                    np.full(p.shape, group["initial_accumulator_value"], p.dtype.np))

    @no_grad()
    def step(self, closure: Any = None) -> Any:
        """One Adagrad update of every parameter that has a gradient."""
        loss = self._closure(closure)
        for group, params in self._active_groups():
            lr = self._hp(group, "lr")
            lr_decay = self._hp(group, "lr_decay")
            eps = self._hp(group, "eps")
            maximize = self._on(group, "maximize")
            use_wd = self._on(group, "weight_decay", nonzero)
            wd = self._hp(group, "weight_decay") if use_wd else 0.0
            init = float(group["initial_accumulator_value"])
            for p in params:
                step_t = self._state_update(p, "step", lambda s: s + 1, shape=(),
                                            dtype=dt.float32)
                step = step_t.to(dt.float64)  # step = _get_value(step_t): a Python double
                g = p.grad
                if maximize:
                    g = -g
                if use_wd:
                    g = g + p * wd  # grad.add(param, alpha=weight_decay)
                clr = lr / ((step - 1) * lr_decay + 1)
                # state_sum.addcmul_(grad, grad, value=1)
                s = self._state_update(p, "sum", lambda s, g=g: s + g * g, fill=init)
                std = s.sqrt() + eps
                # param.addcdiv_(grad, std, value=-clr): p + (value*g)/std
                p._assign(p + (g * (-clr)) / std)
        return loss
