"""``optim.Adam`` and ``optim.AdamW``: PyTorch's ``Adam.step``, ``_init_group`` and
``_single_tensor_adam``, written with the public API only.

The update reads ``group[...]``, creates ``self.state[p]`` on the first step that sees a
gradient and updates it with in-place tensor ops, exactly as PyTorch's source (and a user's
optimizer) does, so the same lines run eagerly on numpy and trace into a compiled step:
``traced.py`` turns the group numbers into run-time scalars (``betas`` into two), Python
tests on them (``weight_decay != 0``, ``amsgrad``) into guards, and merges the first step
(which creates the state) with every later one on a presence flag.

PyTorch's single-tensor path is what the parity tests compare against, so each line below
names the PyTorch statement it reproduces and keeps ATen's evaluation order, so float32
values round as PyTorch's do. Scalars that PyTorch computes in Python doubles from
``step.item()`` (bias corrections, step size) are float64 0-d tensors here (optimizer state
has no Python value while tracing) and are cast to the parameter's dtype only where PyTorch
passes them to a kernel (``addcdiv_``'s ``value``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import zeros, zeros_like
from ..autograd import no_grad
from ..ir import dtypes as dt
from ..tensor import Tensor
from .optimizer import Optimizer, check_hparams


class Adam(Optimizer):
    """Adam (and, with ``decoupled_weight_decay=True``, AdamW) with PyTorch's arguments.

    State per parameter: ``step`` (float32 0-d), ``exp_avg``, ``exp_avg_sq`` and, with
    ``amsgrad``, ``max_exp_avg_sq``, all created lazily (zeros) on the first step that sees a
    gradient, as PyTorch does; parameters whose ``.grad`` is None are skipped entirely.
    ``foreach``, ``fused`` and ``capturable`` are accepted and stored (they select kernels in
    PyTorch, not different mathematics); ``differentiable=True`` is not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False) -> None:
        betas = tuple(betas)  # type: ignore[assignment]
        check_hparams(type(self).__name__, differentiable, lr, epsilon=eps, betas=betas,
                      weight_decay=weight_decay)
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    def _init_group(self, group: dict[str, Any], params_with_grad: list[Tensor],
                    grads: list[Tensor], exp_avgs: list[Tensor], exp_avg_sqs: list[Tensor],
                    max_exp_avg_sqs: list[Tensor], state_steps: list[Tensor]) -> None:
        """Collect the parameters that have a gradient and their state, creating the state
        (lazy initialisation) for a parameter seen with a gradient for the first time."""
        for p in group["params"]:
            if p.grad is None:
                continue
            params_with_grad.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:
                # state["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype())
                state["step"] = zeros((), dtype=dt.float32)
                state["exp_avg"] = zeros_like(p)
                state["exp_avg_sq"] = zeros_like(p)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = zeros_like(p)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            if group["amsgrad"]:
                max_exp_avg_sqs.append(state["max_exp_avg_sq"])
            state_steps.append(state["step"])

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            params_with_grad: list[Tensor] = []
            grads: list[Tensor] = []
            exp_avgs: list[Tensor] = []
            exp_avg_sqs: list[Tensor] = []
            max_exp_avg_sqs: list[Tensor] = []
            state_steps: list[Tensor] = []
            beta1, beta2 = group["betas"]
            self._init_group(group, params_with_grad, grads, exp_avgs, exp_avg_sqs,
                             max_exp_avg_sqs, state_steps)
            _single_tensor_adam(
                params_with_grad, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
                amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
                weight_decay=group["weight_decay"], eps=group["eps"],
                maximize=group["maximize"],
                decoupled_weight_decay=group["decoupled_weight_decay"])
        return loss


def _single_tensor_adam(params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor],
                        exp_avg_sqs: list[Tensor], max_exp_avg_sqs: list[Tensor],
                        state_steps: list[Tensor], *, amsgrad: bool, beta1: Any, beta2: Any,
                        lr: Any, weight_decay: Any, eps: Any, maximize: bool,
                        decoupled_weight_decay: bool) -> None:
    """PyTorch's non-capturable single-tensor Adam, statement for statement.

    The scalars are Python floats eagerly and float64 0-d run-time inputs when traced;
    ``weight_decay != 0`` is then a guard (recompiles when decay is switched on or off).
    """
    for i, param in enumerate(params):
        grad = grads[i] if not maximize else -grads[i]
        exp_avg = exp_avgs[i]
        exp_avg_sq = exp_avg_sqs[i]
        step_t = state_steps[i]
        # step_t += 1  (float32 0-d state)
        step_t += 1
        if weight_decay != 0:
            if decoupled_weight_decay:
                param.mul_(1 - lr * weight_decay)  # param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)  # grad.add(param, alpha=wd)
        # exp_avg.lerp_(grad, 1 - beta1): ATen's rounding branch for |1 - beta1| < 0.5 is
        # a guard when traced
        exp_avg.lerp_(grad, 1 - beta1)
        # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        # step = _get_value(step_t): the bias corrections are Python-double arithmetic
        step = step_t.double()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5
        if amsgrad:
            # torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
            max_exp_avg_sqs[i].maximum_(exp_avg_sq)
            # denom = (max_exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(eps)
            denom = (max_exp_avg_sqs[i].sqrt() / bias_correction2_sqrt).add_(eps)
        else:
            # denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        # param.addcdiv_(exp_avg, denom, value=-step_size): p + (value*exp_avg)/denom
        param.addcdiv_(exp_avg, denom, value=-step_size)


class AdamW(Adam):
    """AdamW: ``Adam`` with decoupled weight decay (``weight_decay=1e-2`` by default)."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

