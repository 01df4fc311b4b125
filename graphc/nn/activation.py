"""Activation modules derived from the op table (``nn.ReLU``, ``nn.SiLU``, ``nn.LeakyReLU`` ...).

Why generated: each is ``forward(x) = F.<op>(x, *params, inplace=self.inplace)`` with torch's
constructor (the op's parameters with torch's names and defaults, then ``inplace=False`` where
torch has it) and repr; writing them out by hand per op is the duplication the op table exists
to remove. An ``OpDef`` with ``module="SiLU"`` gets the class here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import tensor_ops as T
from ..ir.activations import missing_params
from ..ir.elementwise import SURFACE
from ..ir.opdef import OpDef
from ..tensor import Tensor
from . import functional as F
from .module import Module


def _fmt(v: Any) -> str:
    """A parameter as torch's ``extra_repr`` prints it (strings quoted: ``approximate='none'``)."""
    return repr(v) if isinstance(v, str) else str(v)


def _module_class(d: OpDef) -> type[Module]:
    op = d.name
    # the module takes the op's parameters, or the subset torch's module takes
    # (``nn.Softmax(dim)`` for ``F.softmax(input, dim, _stacklevel, dtype)``)
    names = list(d.extra.get("module_params", [k for k, _ in d.params]))
    md = dataclasses.replace(d, params=tuple((k, v) for k, v in d.params if k in names))

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        Module.__init__(self)
        inplace = False
        if d.inplace:
            if len(args) > len(names):
                args, inplace = args[:len(names)], bool(args[len(names)])
            inplace = bool(kwargs.pop("inplace", inplace))
        params = T.bind_params(md, args, kwargs, d.module)
        missing_params(d.module + ".__init__", params)
        for k, v in params.items():
            setattr(self, k, v)
        self.inplace = inplace

    def forward(self: Any, input: Any) -> Tensor:  # noqa: A002
        params = {k: getattr(self, k) for k in names}
        if d.inplace:
            return getattr(F, op)(input, inplace=self.inplace, **params)
        return getattr(F, op)(input, **params)

    def extra_repr(self: Any) -> str:
        if "extra_repr" in d.extra:  # torch's own format (``Softshrink(0.5)``)
            return d.extra["extra_repr"](self)
        parts = [f"{k}={_fmt(getattr(self, k))}" for k in names]
        if self.inplace and d.extra.get("repr_inplace", True):  # torch's Hardswish omits it
            parts.append("inplace=True")
        return ", ".join(parts)

    return type(d.module, (Module,), {
        "__init__": __init__, "forward": forward, "extra_repr": extra_repr,
        "__module__": __name__, "__qualname__": d.module,
        "__doc__": f"``torch.nn.{d.module}``: applies ``{op}`` elementwise.",
    })


MODULES: dict[str, type[Module]] = {d.module: _module_class(d) for d in SURFACE if d.module}
globals().update(MODULES)

__all__ = sorted(MODULES)
