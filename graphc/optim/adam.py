"""``optim.Adam`` and ``optim.AdamW``: PyTorch's ``_single_tensor_adam`` rule, line for line.

PyTorch's CPU default is the single-tensor loop; its rounding order is what the parity tests
compare against, so each line below names the PyTorch statement it reproduces. Scalars that
PyTorch computes in Python doubles (bias corrections, step size) are computed here in float64
0-d tensors and only cast to the parameter's dtype where PyTorch passes them to a kernel.
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as dt
from ..autograd import no_grad
from .optimizer import Optimizer, nonzero


def lerp(start: Any, end: Any, weight: Any, small_weight: bool) -> Any:
    """``start.lerp(end, weight)`` with ATen's two rounding branches.

    ATen evaluates ``start + w*(end-start)`` when ``|w| < 0.5`` and ``end - (end-start)*(1-w)``
    otherwise; ``small_weight`` picks the branch (a structural guard when traced, so a
    compiled step recompiles if the weight crosses 0.5 rather than rounding differently).
    """
    diff = end - start
    if small_weight:
        return start + diff * weight
    return end - diff * (1 - weight)


class Adam(Optimizer):
    """Adam (and, with ``decoupled_weight_decay=True``, AdamW) with PyTorch's arguments.

    State per parameter: ``step`` (float32 0-d), ``exp_avg``, ``exp_avg_sq`` and, with
    ``amsgrad``, ``max_exp_avg_sq``, all created lazily (zeros) on the first step that sees a
    gradient, as PyTorch does; parameters whose ``.grad`` is None are skipped entirely.
    ``foreach``, ``fused`` and ``capturable`` are accepted and stored (they select kernels in
    PyTorch, not different mathematics); ``differentiable=True`` is not supported.
    """

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False) -> None:
        if differentiable:
            raise NotImplementedError(
                f"{type(self).__name__}(differentiable=True) is not supported by graphc"
            )
        _check_lr(lr)
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        betas = tuple(betas)  # type: ignore[assignment]
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if fused and foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, foreach=foreach, capturable=capturable,
                        differentiable=differentiable, fused=fused,
                        decoupled_weight_decay=decoupled_weight_decay)
        super().__init__(params, defaults)

    @no_grad()
    def step(self, closure: Any = None) -> Any:
        """One Adam update of every parameter that has a gradient."""
        loss = self._closure(closure)
        for group, params in self._active_groups():
            lr = self._hp(group, "lr")
            beta1 = self._hp(group, "betas", 0)
            beta2 = self._hp(group, "betas", 1)
            eps = self._hp(group, "eps")
            amsgrad = self._on(group, "amsgrad")
            maximize = self._on(group, "maximize")
            use_wd = self._on(group, "weight_decay", nonzero)
            decoupled = self._on(group, "decoupled_weight_decay") if use_wd else False
            wd = self._hp(group, "weight_decay") if use_wd else 0.0
            small_w1 = self._on(group, "betas", lambda b: abs(1 - b[0]) < 0.5)
            for p in params:
                g = p.grad
                if maximize:
                    g = -g
                # step_t += 1  (float32 0-d state)
                step_t = self._state_update(p, "step", lambda s: s + 1, shape=(),
                                            dtype=dt.float32)
                if use_wd:
                    if decoupled:
                        p._assign(p * (1 - lr * wd))  # param.mul_(1 - lr * weight_decay)
                    else:
                        g = g + p * wd  # grad.add(param, alpha=weight_decay)
                # exp_avg.lerp_(grad, 1 - beta1)
                m = self._state_update(
                    p, "exp_avg", lambda m, g=g, w=1 - beta1, s=small_w1: lerp(m, g, w, s))
                # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                v = self._state_update(
                    p, "exp_avg_sq", lambda v, g=g, b2=beta2: v * b2 + (g * (1 - b2)) * g)
                # step = step_t.item(): the bias corrections are Python-double arithmetic
                step = step_t.to(dt.float64)
                bias_correction1 = 1 - beta1 ** step
                bias_correction2 = 1 - beta2 ** step
                step_size = lr / bias_correction1
                bias_correction2_sqrt = bias_correction2 ** 0.5
                if amsgrad:
                    # torch.maximum(max_exp_avg_sqs[i], exp_avg_sq, out=max_exp_avg_sqs[i])
                    v = self._state_update(p, "max_exp_avg_sq",
                                           lambda mx, v=v: mx.maximum(v))
                denom = v.sqrt() / bias_correction2_sqrt + eps
                # param.addcdiv_(exp_avg, denom, value=-step_size): p + (value*m)/denom
                p._assign(p + (m * (-step_size)) / denom)
        return loss


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


def _check_lr(lr: Any) -> None:
    """PyTorch's learning-rate checks (a tensor lr must have one element)."""
    if hasattr(lr, "shape") and hasattr(lr, "numel"):
        n = lr.numel()
        if n != 1:
            raise ValueError("Tensor lr must be 1-element")
        lr = float(lr)
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
