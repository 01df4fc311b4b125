"""Activation modules derived from the op table (``nn.ReLU``, ``nn.SiLU``, ``nn.Hardswish`` ...).

Why generated: each is ``forward(x) = F.<op>(x, inplace=self.inplace)`` with torch's
constructor (``inplace=False``) and repr; writing them out by hand per op is the duplication
the op table exists to remove. An ``OpDef`` with ``module="SiLU"`` gets the class here.
"""

from __future__ import annotations

from typing import Any

from ..ir.elementwise import ELEMENTWISE
from ..ir.opdef import OpDef
from ..tensor import Tensor
from . import functional as F
from .module import Module


def _module_class(d: OpDef) -> type[Module]:
    op = d.name

    def __init__(self: Any, inplace: bool = False) -> None:
        Module.__init__(self)
        self.inplace = bool(inplace)

    def forward(self: Any, input: Any) -> Tensor:  # noqa: A002
        return getattr(F, op)(input, inplace=self.inplace)

    def extra_repr(self: Any) -> str:
        return "inplace=True" if self.inplace else ""

    return type(d.module, (Module,), {
        "__init__": __init__, "forward": forward, "extra_repr": extra_repr,
        "__module__": __name__, "__qualname__": d.module,
        "__doc__": f"``torch.nn.{d.module}``: applies ``{op}`` elementwise.",
    })


MODULES: dict[str, type[Module]] = {d.module: _module_class(d) for d in ELEMENTWISE if d.module}
globals().update(MODULES)

__all__ = sorted(MODULES)
