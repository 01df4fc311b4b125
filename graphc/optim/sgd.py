"""``optim.SGD``: PyTorch's ``_single_tensor_sgd`` rule, line for line."""

from __future__ import annotations

from typing import Any

from ..autograd import no_grad
from .optimizer import Optimizer


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
        """PyTorch's ``SGD.step`` and ``_single_tensor_sgd``, written with the public API
        only (``group[...]``, ``self.state[p]``, in-place tensor ops), so compiled it takes
        the path a user-written optimizer takes: numbers from the group are run-time scalars,
        ``momentum != 0`` and ``nesterov`` are guards, and the momentum buffer created on the
        first step is state (the first and later steps share one compiled step)."""
        loss = self._closure(closure)
        for group in self.param_groups:
            params, grads, bufs = [], [], []
            for p in group["params"]:
                if p.grad is not None:
                    params.append(p)
                    grads.append(p.grad)
                    if group["momentum"] != 0:
                        bufs.append(self.state[p].get("momentum_buffer"))
            _sgd(params, grads, bufs, weight_decay=group["weight_decay"],
                 momentum=group["momentum"], lr=group["lr"], dampening=group["dampening"],
                 nesterov=group["nesterov"], maximize=group["maximize"])
            if group["momentum"] != 0:
                for p, buf in zip(params, bufs):
                    self.state[p]["momentum_buffer"] = buf
        return loss


def _sgd(params: list[Any], grads: list[Any], bufs: list[Any], *, weight_decay: Any,
         momentum: Any, lr: Any, dampening: Any, nesterov: bool, maximize: bool) -> None:
    """``_single_tensor_sgd``, line for line."""
    for i, param in enumerate(params):
        grad = grads[i] if not maximize else -grads[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        if momentum != 0:
            buf = bufs[i]
            if buf is None:
                buf = grad.clone().detach()
                bufs[i] = buf
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            grad = grad.add(buf, alpha=momentum) if nesterov else buf
        param.add_(grad, alpha=-lr)
