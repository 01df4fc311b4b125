"""``optim.RMSprop``: PyTorch's ``RMSprop.step``, ``_init_group`` and
``_single_tensor_rmsprop``, written with the public API only.

Group reads, lazily created ``self.state[p]`` entries and in-place ops, as in PyTorch's
source, so the same lines run eagerly and trace into a compiled step (``traced.py``: numbers
become run-time scalars, ``momentum > 0``/``centered`` guards, and the first step, which
creates the state, is merged with the later ones on a presence flag). Each line names the
PyTorch statement it reproduces, in ATen's evaluation order, so float32 values round alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import zeros, zeros_like
from ..autograd import no_grad
from ..ir import dtypes as dt
from ..tensor import Tensor
from .optimizer import Optimizer, check_hparams


class RMSprop(Optimizer):
    """RMSprop with PyTorch's arguments: ``alpha`` smoothing, ``eps`` added after the square
    root, L2 ``weight_decay``, ``momentum`` (the learning rate applied outside the buffer),
    ``centered`` (variance estimate minus the squared mean gradient) and ``maximize``.

    State per parameter, created on the first step with a gradient: ``step`` (float32 0-d),
    ``square_avg``, and ``momentum_buffer`` when ``momentum > 0``, ``grad_avg`` when centered.
    ``foreach`` and ``capturable`` are stored as given (they select kernels in PyTorch);
    ``differentiable=True`` is not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False,
                 capturable: bool = False, foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        check_hparams("RMSprop", differentiable, lr)
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

    def _init_group(self, group: dict[str, Any], params_with_grad: list[Tensor],
                    grads: list[Tensor], square_avgs: list[Tensor],
                    momentum_buffer_list: list[Tensor], grad_avgs: list[Tensor],
                    state_steps: list[Tensor]) -> None:
        """Collect the parameters that have a gradient and their state, creating the state
        for a parameter seen with a gradient for the first time."""
        for p in group["params"]:
            if p.grad is None:
                continue
            params_with_grad.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:
                state["step"] = zeros((), dtype=dt.float32)
                state["square_avg"] = zeros_like(p)
                if group["momentum"] > 0:
                    state["momentum_buffer"] = zeros_like(p)
                if group["centered"]:
                    state["grad_avg"] = zeros_like(p)
            square_avgs.append(state["square_avg"])
            state_steps.append(state["step"])
            if group["momentum"] > 0:
                momentum_buffer_list.append(state["momentum_buffer"])
            if group["centered"]:
                grad_avgs.append(state["grad_avg"])

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One RMSprop update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            params_with_grad: list[Tensor] = []
            grads: list[Tensor] = []
            square_avgs: list[Tensor] = []
            grad_avgs: list[Tensor] = []
            momentum_buffer_list: list[Tensor] = []
            state_steps: list[Tensor] = []
            self._init_group(group, params_with_grad, grads, square_avgs, momentum_buffer_list,
                             grad_avgs, state_steps)
            _single_tensor_rmsprop(
                params_with_grad, grads, square_avgs, grad_avgs, momentum_buffer_list,
                state_steps, lr=group["lr"], alpha=group["alpha"], eps=group["eps"],
                weight_decay=group["weight_decay"], momentum=group["momentum"],
                centered=group["centered"], maximize=group["maximize"])
        return loss


def _single_tensor_rmsprop(params: list[Tensor], grads: list[Tensor],
                           square_avgs: list[Tensor], grad_avgs: list[Tensor],
                           momentum_buffer_list: list[Tensor], state_steps: list[Tensor], *,
                           lr: Any, alpha: Any, eps: Any, weight_decay: Any, momentum: Any,
                           centered: bool, maximize: bool) -> None:
    """PyTorch's single-tensor RMSprop, statement for statement (scalars: Python floats
    eagerly, float64 run-time inputs when traced; ``momentum > 0`` is then a guard)."""
    for i, param in enumerate(params):
        step = state_steps[i]
        grad = grads[i]
        grad = grad if not maximize else -grad
        square_avg = square_avgs[i]
        step += 1
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)  # grad.add(param, alpha=weight_decay)
        # square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        if centered:
            grad_avg = grad_avgs[i]
            # grad_avg.lerp_(grad, 1 - alpha)
            grad_avg.lerp_(grad, 1 - alpha)
            # square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
        else:
            avg = square_avg.sqrt()
        avg = avg.add_(eps)
        if momentum > 0:
            buf = momentum_buffer_list[i]
            # buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
            buf.mul_(momentum).addcdiv_(grad, avg)
            param.add_(buf, alpha=-lr)
        else:
            # param.addcdiv_(grad, avg, value=-lr)
            param.addcdiv_(grad, avg, value=-lr)
