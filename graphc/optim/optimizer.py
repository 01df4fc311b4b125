"""``Optimizer``: param groups, state, ``zero_grad`` and ``state_dict`` with PyTorch's rules.

An optimizer's ``step()`` is ordinary tensor code written as PyTorch writes it: it reads
``group["lr"]``, creates ``self.state[p]`` entries on its first call and updates them with
in-place ops. In eager mode it runs on numpy through the interpreter; inside a compiled step
the same code is traced into IR update nodes. The containers that make that work
(``ParamGroup``, ``ParamState``, ``OptimizerState``) and the wrapper every subclass's
``step`` gets (``traced_step``) live in ``traced.py``; they are the only path, for the
built-in optimizers and user-written ones alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import _context
from ..autograd import enable_grad
from ..tensor import Tensor
from .traced import OptimizerState, ParamGroup, ParamGroups, traced_step

_REQUIRED = object()


class Optimizer:
    """Base class: holds ``param_groups``, ``defaults`` and per-parameter ``state``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass's ``step`` traces its state and hyperparameters (``traced.py``)."""
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            cls.step = traced_step(cls.__dict__["step"])  # type: ignore[method-assign]

    def __setattr__(self, name: str, value: Any) -> None:
        # the containers compiled steps read are always the tracing ones, however assigned
        if name == "state" and not isinstance(value, OptimizerState):
            value = OptimizerState(self, dict(value).items())
        elif name == "param_groups" and not isinstance(value, ParamGroups):
            value = ParamGroups(self, value)
        object.__setattr__(self, name, value)
        if name in ("state", "param_groups"):
            _context.bump()

    def __init__(self, params: Any, defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.state: OptimizerState = OptimizerState(self)
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {type(params).__name__}")
        if isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError("optimizer parameters need to be organized in ordered collections")
        params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        group = dict(param_group)
        group["params"] = params
        for k, v in self.defaults.items():
            if v is _REQUIRED and k not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {k}")
            group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        if len({id(p) for p in params}) != len(params):
            import warnings

            warnings.warn("optimizer contains a parameter group with duplicate parameters",
                          stacklevel=2)
        self._check_group(group)
        self.param_groups.append(ParamGroup(group, owner=self))

    def _check_group(self, group: dict[str, Any]) -> None:
        """Validate hyperparameters (subclasses raise PyTorch's ValueErrors)."""

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(k for k in g if k != "params"):
                lines.append(f"    {k}: {g[k]}")
        return "\n".join(lines) + "\n)"

    # -- zero_grad ----------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """``set_to_none=True``: ``p.grad = None`` (step() then skips p); else zero in place."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                else:
                    g = p.grad
                    if g is not None:
                        g.zero_()

    # -- what traced.py asks of the optimizer --------------------------------------------
    def _label(self, group: dict[str, Any], key: str) -> str:
        gi = next(i for i, g in enumerate(self.param_groups) if g is group)
        ctx = _context.current()
        base = ctx._names.get(id(self), "opt") if ctx is not None else "opt"
        return f"{base}.g{gi}.{key}"

    def _hp(self, group: dict[str, Any], key: str, index: int | None = None) -> Any:
        """``group[key]`` (or ``group[key][index]``, for tuples such as Adam's ``betas``):
        a float eagerly, a run-time scalar input when traced, so that changing it between
        compiled calls takes effect without recompiling.

        Update rules never call this: ``ParamGroup.__getitem__`` (``traced.py``) does, to turn
        each number of a tuple-valued group entry into its own run-time input (an item view
        per element keeps the input's read protocol, ``source[key]``)."""
        ctx = _context.current()
        if ctx is None:
            v = group[key] if index is None else group[key][index]
            return float(v)
        if index is None:
            return ctx.hyper(group, key, self._label(group, key))
        # The trace reads ``source[key]`` at call time; an item view keeps that protocol for
        # one element of a tuple-valued hyperparameter (one view per group/key/index, so the
        # trace interns it as one input).
        views = self.__dict__.setdefault("_item_views", {})
        vk = (id(group), key, index)
        view = views.get(vk)
        if view is None or view.group is not group:
            view = views[vk] = _ItemView(group, key, index)
        return ctx.hyper(view, key, f"{self._label(group, key)}[{index}]")

    # -- step ---------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        raise NotImplementedError

    def _closure(self, closure: Callable[[], Any] | None) -> Any:
        if closure is None:
            return None
        with enable_grad():
            return closure()

    # -- state_dict ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: ``state`` keyed by parameter index, groups list indices."""
        index: dict[int, int] = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            ids = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state and self.state[p]:
                    state[index[id(p)]] = {
                        k: (np.array(v.numpy(), copy=True) if isinstance(v, Tensor) else v)
                        for k, v in self.state[p].items()
                    }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
        id_map = {}
        for mine, theirs in zip(self.param_groups, groups):
            for p, i in zip(mine["params"], theirs["params"]):
                id_map[i] = p
        _check_state_shapes(self, state_dict["state"], id_map)
        self.state = OptimizerState(self)
        for i, st in state_dict["state"].items():
            p = id_map[int(i)]
            for k, v in st.items():
                if k == "step":
                    arr = np.asarray(v, dtype=np.float32).reshape(())
                    self.state[p][k] = Tensor._from_array(np.array(arr, copy=True))
                elif hasattr(v, "__array__") or isinstance(v, np.ndarray):
                    arr = np.asarray(v)
                    dtype = p.dtype.np if arr.dtype.kind == "f" else arr.dtype
                    self.state[p][k] = Tensor._from_array(np.array(arr, dtype=dtype, copy=True))
                else:
                    self.state[p][k] = v
        for mine, theirs in zip(self.param_groups, groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = v


def _check_state_shapes(opt: Optimizer, state: dict[Any, Any], id_map: dict[int, Tensor]
                        ) -> None:
    """Refuse state that cannot belong to these parameters, before anything is replaced: an
    entry shaped for another model would otherwise be read past its end by a compiled step.
    An entry must have the shape of the entry it replaces, or (when there is none yet)
    either the parameter's shape or a shape of another rank (factored or scalar state)."""
    for i, st in state.items():
        try:
            p = id_map[int(i)]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"loaded state dict has state for parameter {i!r}, which no "
                             "parameter group lists") from None
        if not isinstance(st, dict):
            raise ValueError(f"state[{i}]: expected a dict of state entries, got "
                             f"{type(st).__name__}")
        mine = dict.get(opt.state, p) or {}
        for k, v in st.items():
            if not (hasattr(v, "__array__") or isinstance(v, np.ndarray)) or k == "step":
                continue
            shape = tuple(np.shape(v))
            cur = dict.get(mine, k)
            want = tuple(cur.shape) if isinstance(cur, Tensor) else None
            if want is None and len(shape) == p.ndim:
                want = tuple(p.shape)
            if want is not None and shape != want:
                raise ValueError(f"loaded state dict: state[{i}][{k!r}] has shape {shape}, "
                                 f"expected {want} (parameter {i} has shape {tuple(p.shape)})")


def check_lr(lr: Any) -> None:
    """PyTorch's learning-rate checks (a tensor lr must have one element)."""
    if hasattr(lr, "shape") and hasattr(lr, "numel"):
        n = lr.numel()
        if n != 1:
            raise ValueError("Tensor lr must be 1-element")
        lr = float(lr)
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")


def check_hparams(name: str, differentiable: bool, lr: Any, **values: Any) -> None:
    """The constructor checks PyTorch's optimizers share, in the order given (which is the
    order PyTorch checks them, so the first error is the same): ``differentiable=True`` is not
    supported; ``lr`` as ``check_lr``; ``betas`` each in [0, 1); any other keyword (named
    as PyTorch's message names it: ``epsilon``, ``weight_decay``...) at least 0."""
    if differentiable:
        raise NotImplementedError(f"{name}(differentiable=True) is not supported by graphc")
    check_lr(lr)
    for label, v in values.items():
        if label == "betas":
            for i in (0, 1):
                if not 0.0 <= v[i] < 1.0:
                    raise ValueError(f"Invalid beta parameter at index {i}: {v[i]}")
        elif not 0.0 <= v:
            raise ValueError(f"Invalid {label} value: {v}")


class _ItemView:
    """``view[key]`` -> ``group[key][index]``: one element of a tuple hyperparameter."""

    __slots__ = ("group", "key", "index")

    def __init__(self, group: dict[str, Any], key: str, index: int) -> None:
        self.group, self.key, self.index = group, key, index

    def __getitem__(self, key: str) -> Any:
        return dict.__getitem__(self.group, key)[self.index]

    @property
    def _bumps_hyper_epoch(self) -> bool:
        """Reads through to a ``ParamGroup``, whose writes move the hyper epoch."""
        return bool(getattr(self.group, "_bumps_hyper_epoch", False))


def params_of(groups: Iterable[dict[str, Any]]) -> list[Tensor]:
    return [p for g in groups for p in g["params"]]


_context.named_types["optimizer"] = Optimizer  # the tracer names what it finds in a step's scope
