"""``optim.Adamax``: PyTorch's ``_single_tensor_adamax`` rule, written as a user would.

Public-API code only (``group[...]``, lazily created ``self.state[p]``, in-place ops), so the
same lines run eagerly and trace into a compiled step. The bias correction PyTorch computes
in Python doubles from ``step.item()`` is computed here in float64 0-d tensors (``.item()``
of optimizer state has no value while tracing); it rounds the same, and is cast to float32
only where PyTorch hands it to a kernel (``addcdiv_``'s ``value``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import zeros, zeros_like
from ..autograd import no_grad
from ..ir import dtypes as dt
from .optimizer import Optimizer, check_hparams


class Adamax(Optimizer):
    """Adamax (Adam with the infinity norm) with PyTorch's arguments, defaults and state.

    State per parameter: ``step`` (float32 0-d), ``exp_avg`` and ``exp_inf``, created on the
    first step that sees a gradient. ``foreach`` and ``capturable`` are stored as given (they
    select kernels in PyTorch); ``differentiable=True`` is not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        check_hparams("Adamax", differentiable, lr, epsilon=eps, betas=betas,
                      weight_decay=weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach,
                        maximize=maximize, differentiable=differentiable, capturable=capturable)
        super().__init__(params, defaults)

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adamax update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            eps, lr = group["eps"], group["lr"]
            weight_decay, maximize = group["weight_decay"], group["maximize"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if len(state) == 0:
                    state["step"] = zeros((), dtype=dt.float32)
                    state["exp_avg"] = zeros_like(param)
                    state["exp_inf"] = zeros_like(param)
                step_t, exp_avg, exp_inf = state["step"], state["exp_avg"], state["exp_inf"]
                grad = param.grad if not maximize else -param.grad
                step_t += 1
                if weight_decay != 0:
                    grad = grad.add(param, alpha=weight_decay)
                exp_avg.lerp_(grad, 1 - beta1)
                # torch.maximum(exp_inf.mul_(beta2), grad.abs().add_(eps), out=exp_inf)
                exp_inf.mul_(beta2).maximum_(grad.abs().add_(eps))
                # bias_correction = 1 - beta1 ** _get_value(step_t): Python doubles
                bias_correction = 1 - beta1 ** step_t.double()
                clr = lr / bias_correction
                param.addcdiv_(exp_avg, exp_inf, value=-clr)
        return loss
