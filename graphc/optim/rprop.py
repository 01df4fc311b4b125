"""``optim.Rprop``: PyTorch's ``Rprop.__init__``, ``step``, ``_init_group`` and
``_single_tensor_rprop``, written with the public API only.

Group reads, lazily created ``self.state[p]`` entries and in-place ops, as in PyTorch's
source, so the same lines run eagerly on numpy and trace into a compiled step (``traced.py``:
the group numbers, ``etas`` and ``step_sizes`` included, become run-time scalars, so a
scheduler never recompiles; the first step, which creates the state, is merged with the later
ones on a presence flag).

PyTorch's default path rewrites the sign tensor with boolean-mask assignments
(``sign[sign.gt(0)] = etaplus`` ...); a compiled step has no data-dependent indexing, so the
same three replacements are ``where``s here, in the same order, which is what PyTorch's
``capturable`` path writes and gives the same values: each mask is taken on the result of the
previous replacement, so ``etaplus > 1`` and ``0 < etaminus < 1`` (the constructor's check)
keep the later masks from catching replaced entries, exactly as with the assignments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import zeros, zeros_like
from ..autograd import no_grad
from ..ir import dtypes as dt
from ..tensor import Tensor
from ..tensor_ops import where
from .optimizer import Optimizer, check_hparams


class Rprop(Optimizer):
    """Resilient backpropagation with PyTorch's arguments, defaults, checks and state.

    Each element keeps its own step size: multiplied by ``etaplus`` while the gradient keeps
    its sign, by ``etaminus`` when it flips (and that step skipped), clamped to
    ``step_sizes``; the parameter moves by the step size against the gradient's sign.

    State per parameter, created on the first step that sees a gradient, in PyTorch's order:
    ``step`` (float32 0-d), ``prev`` (the previous, possibly zeroed, gradient) and
    ``step_size`` (filled with ``lr`` then; ``lr`` is not read again). ``foreach`` and
    ``capturable`` select kernels in PyTorch whose values equal the single-tensor path's, so
    they are accepted and stored; ``differentiable=True`` (autograd through the update) is
    not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 1e-2, etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        check_hparams("Rprop", differentiable, lr)
        etas, step_sizes = tuple(etas), tuple(step_sizes)  # type: ignore[assignment]
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = dict(lr=lr, etas=etas, step_sizes=step_sizes, foreach=foreach,
                        maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _init_group(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor],
                    prevs: list[Tensor], step_sizes: list[Tensor],
                    state_steps: list[Tensor]) -> None:
        """Collect the parameters that have a gradient and their state, creating the state
        for a parameter seen with a gradient for the first time."""
        for p in group["params"]:
            if p.grad is None:
                continue
            params.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:
                # state["step"] = torch.zeros((), dtype=_get_scalar_dtype())
                state["step"] = zeros((), dtype=dt.float32)
                # state["prev"] = torch.zeros_like(p)
                state["prev"] = zeros_like(p)
                # state["step_size"] = torch.full_like(grad, lr): 0 + lr is lr exactly, and
                # takes a run-time lr when traced
                state["step_size"] = zeros_like(p.grad).add_(group["lr"])
            prevs.append(state["prev"])
            step_sizes.append(state["step_size"])
            state_steps.append(state["step"])

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Rprop update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            params: list[Tensor] = []
            grads: list[Tensor] = []
            prevs: list[Tensor] = []
            step_sizes: list[Tensor] = []
            state_steps: list[Tensor] = []
            etaminus, etaplus = group["etas"]
            step_size_min, step_size_max = group["step_sizes"]
            self._init_group(group, params, grads, prevs, step_sizes, state_steps)
            _single_tensor_rprop(
                params, grads, prevs, step_sizes, state_steps, step_size_min=step_size_min,
                step_size_max=step_size_max, etaminus=etaminus, etaplus=etaplus,
                maximize=group["maximize"])
        return loss


def _single_tensor_rprop(params: list[Tensor], grads: list[Tensor], prevs: list[Tensor],
                         step_sizes: list[Tensor], state_steps: list[Tensor], *,
                         step_size_min: Any, step_size_max: Any, etaminus: Any, etaplus: Any,
                         maximize: bool) -> None:
    """PyTorch's single-tensor Rprop, statement for statement (scalars: Python floats
    eagerly, float64 run-time inputs when traced, cast to the parameter's dtype where they
    meet its tensors, as ATen casts a Python scalar)."""
    for i, param in enumerate(params):
        grad = grads[i]
        grad = grad if not maximize else -grad
        prev = prevs[i]
        step_size = step_sizes[i]
        step = state_steps[i]
        step += 1
        # sign = grad.mul(prev).sign()
        sign = grad.mul(prev).sign()
        # sign[sign.gt(0)] = etaplus; sign[sign.lt(0)] = etaminus; sign[sign.eq(0)] = 1
        sign = where(sign.gt(0), etaplus, sign)
        sign = where(sign.lt(0), etaminus, sign)
        sign = where(sign.eq(0), 1.0, sign)
        # step_size.mul_(sign).clamp_(step_size_min, step_size_max)
        step_size.mul_(sign).clamp_(step_size_min, step_size_max)
        # grad = grad.clone(); grad[sign.eq(etaminus)] = 0
        grad = where(sign.eq(etaminus), 0.0, grad)
        # param.addcmul_(grad.sign(), step_size, value=-1)
        param.addcmul_(grad.sign(), step_size, value=-1)
        # prev.copy_(grad)
        prev.copy_(grad)
