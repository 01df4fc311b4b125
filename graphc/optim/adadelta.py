"""``optim.Adadelta``: PyTorch's ``_single_tensor_adadelta`` rule, written as a user would.

The update is ordinary public-API code (``group[...]`` reads, lazily created ``self.state[p]``
entries, in-place tensor ops), so the same lines run eagerly on numpy and trace into a
compiled step (``traced.py`` turns the group numbers into run-time scalars and merges the
first step, which creates the state, with every later one). Each line names the PyTorch
statement it reproduces; ATen's evaluation order is kept so float32 values round the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import zeros, zeros_like
from ..autograd import no_grad
from ..ir import dtypes as dt
from .optimizer import Optimizer, check_hparams


class Adadelta(Optimizer):
    """Adadelta with PyTorch's arguments, defaults, checks and state.

    State per parameter (created on the first step that sees a gradient): ``step`` (float32
    0-d, as PyTorch keeps it so ``state_dict()`` matches), ``square_avg`` and ``acc_delta``.
    ``foreach`` and ``capturable`` only select kernels in PyTorch and are stored as given;
    ``differentiable=True`` (autograd through the update) is not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0, foreach: bool | None = None, *,
                 capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        check_hparams("Adadelta", differentiable, lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                        capturable=capturable, foreach=foreach, differentiable=differentiable)
        super().__init__(params, defaults)

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adadelta update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            lr, rho, eps = group["lr"], group["rho"], group["eps"]
            weight_decay, maximize = group["weight_decay"], group["maximize"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if len(state) == 0:
                    state["step"] = zeros((), dtype=dt.float32)
                    state["square_avg"] = zeros_like(param)
                    state["acc_delta"] = zeros_like(param)
                step, square_avg, acc_delta = (state["step"], state["square_avg"],
                                               state["acc_delta"])
                step += 1
                grad = param.grad if not maximize else -param.grad
                if weight_decay != 0:
                    grad = grad.add(param, alpha=weight_decay)
                square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
                std = square_avg.add(eps).sqrt_()
                delta = acc_delta.add(eps).sqrt_()
                delta.div_(std).mul_(grad)
                acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
                param.add_(delta, alpha=-lr)
        return loss
