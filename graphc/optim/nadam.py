"""``optim.NAdam``: PyTorch's ``_single_tensor_nadam`` rule, written as a user would.

Public-API code only (``group[...]``, lazily created ``self.state[p]``, in-place ops), so the
same lines run eagerly and trace into a compiled step. PyTorch computes the momentum cache
``mu``/``mu_next``, the bias correction and the two step sizes in Python doubles from
``step.item()`` and ``mu_product.item()``; here they are float64 0-d tensors (state has no
value while tracing), which round the same, and they meet float32 only where PyTorch passes
them to a kernel (``mul_``, ``div``, ``addcdiv_``'s ``value``: cast to float32 first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import ones, zeros, zeros_like
from ..autograd import no_grad
from ..ir import dtypes as dt
from .optimizer import Optimizer, check_hparams


class NAdam(Optimizer):
    """NAdam (Adam with Nesterov momentum) with PyTorch's arguments, defaults and state.

    ``decoupled_weight_decay=True`` gives NAdamW (``param *= 1 - lr*weight_decay`` before the
    moments). State per parameter: ``step`` and ``mu_product`` (float32 0-d, as PyTorch keeps
    them), ``exp_avg`` and ``exp_avg_sq``. ``foreach`` and ``capturable`` are stored as given
    (they select kernels in PyTorch); ``differentiable=True`` is not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        check_hparams("NAdam", differentiable, lr, epsilon=eps, betas=betas,
                      weight_decay=weight_decay, momentum_decay=momentum_decay)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize,
                        foreach=foreach, capturable=capturable, differentiable=differentiable)
        super().__init__(params, defaults)

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One NAdam update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps = group["lr"], group["eps"]
            weight_decay, momentum_decay = group["weight_decay"], group["momentum_decay"]
            maximize = group["maximize"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if len(state) == 0:
                    state["step"] = zeros((), dtype=dt.float32)
                    state["mu_product"] = ones((), dtype=dt.float32)
                    state["exp_avg"] = zeros_like(param)
                    state["exp_avg_sq"] = zeros_like(param)
                grad = param.grad if not maximize else -param.grad
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                mu_product, step_t = state["mu_product"], state["step"]
                step_t += 1
                step = step_t.double()  # _get_value(step_t): a Python double in PyTorch
                bias_correction2 = 1 - beta2 ** step
                if weight_decay != 0:
                    if group["decoupled_weight_decay"]:
                        param.mul_(1 - lr * weight_decay)
                    else:
                        grad = grad.add(param, alpha=weight_decay)
                # the momentum cache mu^t and mu^(t+1)
                mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
                mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
                # mu_product *= mu: a float32 tensor times a Python double, which ATen casts
                # to float32 before multiplying (a float64 product would round twice)
                mu_product.mul_(mu.float())
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = exp_avg_sq.div(bias_correction2).sqrt()
                mu_product_d = mu_product.double()  # _get_value(mu_product)
                mu_product_next = mu_product_d * mu_next
                denom.add_(eps)
                param.addcdiv_(grad, denom, value=(-lr * (1.0 - mu) / (1.0 - mu_product_d)))
                param.addcdiv_(exp_avg, denom, value=(-lr * mu_next) / (1.0 - mu_product_next))
        return loss
