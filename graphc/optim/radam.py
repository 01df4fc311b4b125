"""``optim.RAdam``: PyTorch's ``_single_tensor_radam`` rule, written as a user would.

Public-API code only (``group[...]``, lazily created ``self.state[p]``, in-place ops), so the
same lines run eagerly and trace into a compiled step. PyTorch's default (non-capturable)
path branches in Python on ``rho_t > 5`` with ``rho_t`` computed from ``step.item()``; a
value of optimizer state has no Python value while tracing, so the branch is a ``where``
here (as PyTorch's ``capturable`` path writes it), while each arm keeps the default path's
evaluation order so float32 results round as PyTorch's do. The Python-double scalars (bias
corrections, ``rho_t``, the rectification term) are float64 0-d tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import zeros, zeros_like
from ..autograd import no_grad
from ..ir import dtypes as dt
from ..tensor_ops import where
from .optimizer import Optimizer, check_hparams


class RAdam(Optimizer):
    """RAdam (rectified Adam) with PyTorch's arguments, defaults and state.

    ``decoupled_weight_decay=True`` gives RAdamW. State per parameter: ``step`` (float32
    0-d), ``exp_avg`` and ``exp_avg_sq``. ``foreach`` and ``capturable`` are stored as given
    (they select kernels in PyTorch); ``differentiable=True`` is not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        check_hparams("RAdam", differentiable, lr, epsilon=eps, betas=betas,
                      weight_decay=weight_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        decoupled_weight_decay=decoupled_weight_decay,
                        differentiable=differentiable)
        super().__init__(params, defaults)

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One RAdam update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
            maximize = group["maximize"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if len(state) == 0:
                    state["step"] = zeros((), dtype=dt.float32)
                    state["exp_avg"] = zeros_like(param)
                    state["exp_avg_sq"] = zeros_like(param)
                grad = param.grad if not maximize else -param.grad
                exp_avg, exp_avg_sq, step_t = (state["exp_avg"], state["exp_avg_sq"],
                                               state["step"])
                step_t += 1
                step = step_t.double()  # _get_value(step_t): a Python double in PyTorch
                if weight_decay != 0:
                    if group["decoupled_weight_decay"]:
                        param.mul_(1 - lr * weight_decay)
                    else:
                        grad = grad.add(param, alpha=weight_decay)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                bias_corrected_exp_avg = exp_avg / bias_correction1
                # the maximum length of the approximated SMA, and its length at this step
                rho_inf = 2 / (1 - beta2) - 1
                rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
                # the variance rectification term, used only where rho_t > 5: clamping there
                # changes nothing, and elsewhere keeps the unused arm from a sqrt of < 0
                rho_r = rho_t.clamp(min=5.0)
                rect = ((rho_r - 4) * (rho_r - 2) * rho_inf
                        / ((rho_inf - 4) * (rho_inf - 2) * rho_r)) ** 0.5
                adaptive_lr = (bias_correction2 ** 0.5) / exp_avg_sq.sqrt().add_(eps)
                # if rho_t > 5: param.add_(bcea * lr * adaptive_lr * rect, alpha=-1.0)
                # else:         param.add_(bcea * lr, alpha=-1.0)
                scaled = bias_corrected_exp_avg * lr
                update = where(rho_t > 5.0, scaled * adaptive_lr * rect, scaled)
                param.add_(update, alpha=-1.0)
        return loss
