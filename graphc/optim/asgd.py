"""``optim.ASGD``: PyTorch's ``ASGD.__init__``, ``step``, ``_init_group`` and
``_single_tensor_asgd``, written with the public API only; and ``optim.SparseAdam``, which
graphc cannot offer (it has no sparse gradients) and refuses with the reason.

ASGD's update reads ``group[...]``, creates ``self.state[p]`` on the first step that sees a
gradient and updates it in place, as PyTorch's source does, so the same lines run eagerly and
trace into a compiled step (``traced.py``: numbers become run-time scalars, the first step,
which creates the state, is merged with the later ones on a presence flag).

PyTorch's default (non-capturable) path reads its float32 0-d state with ``.item()``: the
learning rate ``eta`` and the averaging weight ``mu`` become Python doubles, and it branches
in Python on ``mu != 1`` (copy the parameter into the average, or move the average towards
it). A state value has no Python value while tracing, so here the doubles are float64 0-d
tensors (``.double()`` of a float32 value is exact, as ``.item()`` is), and the branch is a
``where`` on ``mu != 1`` choosing between the two results, each computed as PyTorch computes
it. ``eta`` and ``mu`` are recomputed in doubles from the step count and rounded to float32
when stored (PyTorch's ``torch.as_tensor(double)`` of the default dtype, then ``copy_``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import ones, zeros, zeros_like
from ..autograd import no_grad
from ..ir import dtypes as dt
from ..tensor import Tensor
from ..tensor_ops import as_tensor, where
from .optimizer import Optimizer, check_hparams


class ASGD(Optimizer):
    """Averaged SGD with PyTorch's arguments (``lr``, ``lambd`` decay, ``alpha`` power of the
    learning-rate schedule, ``t0`` the step averaging starts after, L2 ``weight_decay``,
    ``maximize``), defaults, checks and state.

    State per parameter, created on the first step that sees a gradient, in PyTorch's order:
    ``step``, ``eta`` (the current learning rate, starting at ``lr``) and ``mu`` (the
    averaging weight, starting at 1), all float32 0-d, and ``ax`` (the running average of
    the parameter). ``foreach=True`` and ``capturable=True`` select other formulas in
    PyTorch (``param - eta * (grad + lambd * param)``; ``eta`` and ``mu`` computed in
    float32 tensors), which round differently, so they raise NotImplementedError rather than
    silently computing the default path's values; ``differentiable=True`` is not supported.
    """

    _tensor_step = True  # state[p]["step"] is a float32 0-d tensor

    def __init__(self, params: Any, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75,
                 t0: float = 1e6, weight_decay: float = 0, foreach: bool | None = None,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        check_hparams("ASGD", differentiable, lr, weight_decay=weight_decay)
        for name, value in (("foreach", foreach), ("capturable", capturable)):
            if value:
                raise NotImplementedError(
                    f"ASGD({name}=True) is not supported by graphc: PyTorch's {name} path "
                    "computes the update with other formulas, which round differently; the "
                    f"default ({name}={'None' if name == 'foreach' else 'False'}) path is "
                    "PyTorch's single-tensor one")
        defaults = dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                        foreach=foreach, maximize=maximize, differentiable=differentiable,
                        capturable=capturable)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        """A group added later may not switch on what the constructor refuses."""
        for name in ("foreach", "capturable"):
            if group.get(name):
                raise NotImplementedError(f"ASGD({name}=True) is not supported by graphc")

    def _init_group(self, group: dict[str, Any], params_with_grad: list[Tensor],
                    grads: list[Tensor], mus: list[Tensor], axs: list[Tensor],
                    etas: list[Tensor], state_steps: list[Tensor]) -> None:
        """Collect the parameters that have a gradient and their state, creating the state
        for a parameter seen with a gradient for the first time."""
        for p in group["params"]:
            if p.grad is None:
                continue
            params_with_grad.append(p)
            grads.append(p.grad)
            state = self.state[p]
            if len(state) == 0:
                # state["step"] = torch.zeros((), dtype=_get_scalar_dtype())
                state["step"] = zeros((), dtype=dt.float32)
                # state["eta"] = torch.as_tensor(lr, dtype=_get_scalar_dtype()).clone()
                state["eta"] = as_tensor(group["lr"], dt.float32).clone()
                # state["mu"] = torch.ones((), dtype=_get_scalar_dtype())
                state["mu"] = ones((), dtype=dt.float32)
                # state["ax"] = torch.zeros_like(p)
                state["ax"] = zeros_like(p)
            mus.append(state["mu"])
            axs.append(state["ax"])
            etas.append(state["eta"])
            state_steps.append(state["step"])

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One ASGD update of every parameter whose ``.grad`` is not None."""
        loss = self._closure(closure)
        for group in self.param_groups:
            params_with_grad: list[Tensor] = []
            grads: list[Tensor] = []
            mus: list[Tensor] = []
            axs: list[Tensor] = []
            etas: list[Tensor] = []
            state_steps: list[Tensor] = []
            self._init_group(group, params_with_grad, grads, mus, axs, etas, state_steps)
            _single_tensor_asgd(
                params_with_grad, grads, axs, mus, etas, state_steps, lambd=group["lambd"],
                lr=group["lr"], t0=group["t0"], alpha=group["alpha"],
                weight_decay=group["weight_decay"], maximize=group["maximize"])
        return loss


def _single_tensor_asgd(params: list[Tensor], grads: list[Tensor], axs: list[Tensor],
                        mus: list[Tensor], etas: list[Tensor], state_steps: list[Tensor], *,
                        lambd: Any, lr: Any, t0: Any, alpha: Any, weight_decay: Any,
                        maximize: bool) -> None:
    """PyTorch's non-capturable single-tensor ASGD, statement for statement (scalars: Python
    floats eagerly, float64 run-time inputs when traced; ``weight_decay != 0`` is then a
    guard)."""
    for i, param in enumerate(params):
        grad = grads[i]
        grad = grad if not maximize else -grad
        mu = mus[i]
        ax = axs[i]
        eta = etas[i]
        step_t = state_steps[i]
        # update step
        step_t += 1
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)  # grad.add(param, alpha=weight_decay)
        eta_value = eta.double()  # eta_value = _get_value(eta): a Python double
        param.mul_(1 - lambd * eta_value)  # decay term
        param.add_(grad, alpha=-eta_value)  # update parameter
        # averaging: if mu.item() != 1: ax.add_(param.sub(ax).mul_(mu)) else: ax.copy_(param)
        ax.copy_(where(mu != 1, ax.add(param.sub(ax).mul_(mu)), param))
        # step = _get_value(step_t): a Python double
        step = step_t.double()
        # eta.copy_(torch.as_tensor(lr / ((1 + lambd * lr * step) ** alpha)))
        eta.copy_((lr / ((1 + lambd * lr * step) ** alpha)).float())
        # mu.copy_(torch.as_tensor(1 / max(1, step - t0)))
        mu.copy_((1 / (step - t0).clamp(min=1.0)).float())


class SparseAdam(Optimizer):
    """``torch.optim.SparseAdam`` exists for sparse gradients (``nn.Embedding(sparse=True)``):
    it updates only the rows a gradient touches. graphc's gradients are always dense, so
    there is nothing for it to do that ``Adam`` does not; constructing it raises
    NotImplementedError naming the replacement instead of running a different algorithm
    under its name (lazy per-row moments differ from Adam's on every untouched row)."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, maximize: bool = False) -> None:
        raise NotImplementedError(
            "optim.SparseAdam is not supported by graphc: it updates parameters from sparse "
            "gradients (nn.Embedding(sparse=True)), and graphc has no sparse gradients (every "
            "gradient is dense). Use optim.Adam (or optim.AdamW), which updates every row on "
            "every step")
