"""``optim.Adagrad``: PyTorch's ``Adagrad.__init__``, ``step``, ``_init_group`` and
``_single_tensor_adagrad``, written with the public API only.

Group reads, ``self.state[p]`` entries and in-place ops, as in PyTorch's source, so the same
lines run eagerly and trace into a compiled step. PyTorch creates Adagrad's state when the
optimizer is built, so a compiled step normally finds it present and traces once; a
parameter added later (``add_param_group``) gets its state on its first step, which
``traced.py`` merges with the later steps on a presence flag. Each line names the PyTorch
statement it reproduces, in ATen's evaluation order, so float32 values round alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import full, zeros
from ..autograd import no_grad
from ..ir import dtypes as dt
from ..tensor import Tensor
from .optimizer import Optimizer, check_hparams


class Adagrad(Optimizer):
    """Adagrad with PyTorch's arguments (``lr_decay``, ``weight_decay``,
    ``initial_accumulator_value``, ``eps`` added after the square root, ``maximize``).

    Unlike the other optimizers, PyTorch creates Adagrad's state when the optimizer is built:
    ``step = tensor(0.)`` and ``sum = full_like(p, initial_accumulator_value)`` for every
    parameter, so ``state_dict()`` has entries before the first step. That is mirrored here,
    as is PyTorch's choice of the constructor's (not a group's) initial value.
    ``foreach`` and ``fused`` are stored as given; ``differentiable=True`` is not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0,
                 weight_decay: float = 0, initial_accumulator_value: float = 0,
                 eps: float = 1e-10, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        check_hparams("Adagrad", differentiable, lr)
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
                # state["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype())
                state["step"] = zeros((), dtype=dt.float32)
                # state["sum"] = torch.full_like(p, initial_accumulator_value)
                state["sum"] = full(p.shape, float(initial_accumulator_value), dtype=p.dtype)

    def _init_group(self, group: dict[str, Any], params_with_grad: list[Tensor],
                    grads: list[Tensor], state_sums: list[Tensor],
                    state_steps: list[Tensor]) -> None:
        """Collect the parameters that have a gradient and their state; a parameter without
        state (added by ``add_param_group``, or after ``load_state_dict`` of an empty state)
        gets it now, from ``defaults["initial_accumulator_value"]`` as in PyTorch."""
        for p in group["params"]:
            if p.grad is None:
                continue
            params_with_grad.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:
                state["step"] = zeros((), dtype=dt.float32)
                init_value = float(self.defaults["initial_accumulator_value"])
                state["sum"] = full(p.shape, init_value, dtype=p.dtype)
            state_sums.append(state["sum"])
            state_steps.append(state["step"])

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adagrad update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            params_with_grad: list[Tensor] = []
            grads: list[Tensor] = []
            state_sums: list[Tensor] = []
            state_steps: list[Tensor] = []
            self._init_group(group, params_with_grad, grads, state_sums, state_steps)
            _single_tensor_adagrad(
                params_with_grad, grads, state_sums, state_steps, lr=group["lr"],
                weight_decay=group["weight_decay"], lr_decay=group["lr_decay"],
                eps=group["eps"], maximize=group["maximize"])
        return loss


def _single_tensor_adagrad(params: list[Tensor], grads: list[Tensor],
                           state_sums: list[Tensor], state_steps: list[Tensor], *, lr: Any,
                           weight_decay: Any, lr_decay: Any, eps: Any, maximize: bool) -> None:
    """PyTorch's dense single-tensor Adagrad, statement for statement (scalars: Python
    floats eagerly, float64 run-time inputs when traced)."""
    for param, grad, state_sum, step_t in zip(params, grads, state_sums, state_steps,
                                              strict=True):
        # update step
        step_t += 1
        step = step_t.double()  # step = _get_value(step_t): a Python double
        grad = grad if not maximize else -grad
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)  # grad.add(param, alpha=weight_decay)
        clr = lr / (1 + (step - 1) * lr_decay)
        # state_sum.addcmul_(grad, grad, value=1)
        state_sum.addcmul_(grad, grad, value=1)
        # std = state_sum.sqrt().add_(eps)
        std = state_sum.sqrt().add_(eps)
        # param.addcdiv_(grad, std, value=-clr): p + (value*grad)/std
        param.addcdiv_(grad, std, value=-clr)
