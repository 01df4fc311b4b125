"""Basic layers: Linear, activations, containers."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .. import tensor_ops as T
from ..ir import dtypes
from ..tensor import Tensor
from . import functional as F
from . import init
from .module import Module, Parameter


class Identity(Module):
    def forward(self, x: Any) -> Any:
        return x


class Linear(Module):
    """``y = x W^T + b``; W ~ U(-1/sqrt(in), 1/sqrt(in)) then b, drawn as PyTorch draws them."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()  # ``device``: PyTorch's signature (the CPU is graphc's one device)
        self.in_features = in_features
        self.out_features = out_features
        npd = np.float32 if dtype is None else dtypes.as_dtype(dtype).np
        self.weight = Parameter(np.empty((out_features, in_features), npd))
        if bias:
            self.bias = Parameter(np.empty((out_features,), npd))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Any) -> Tensor:
        x = T.as_tensor(x)
        if x.ndim == 0 or not _same_dim(x.shape[-1], self.in_features):
            raise ValueError(
                f"Linear({self.in_features}, {self.out_features}): input must have "
                f"{self.in_features} features in its last dimension, got shape "
                f"{tuple(x.shape)}"
            )
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _same_dim(a: Any, b: int) -> bool:
    from ..ir import shapes

    return shapes.same(a, b)


class Tanh(Module):
    def forward(self, x: Any) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Any) -> Tensor:
        return F.sigmoid(x)


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Any) -> Tensor:
        return T.as_tensor(x).flatten(self.start_dim, self.end_dim)


class Sequential(Module):
    def __init__(self, *mods: Any) -> None:
        super().__init__()
        if len(mods) == 1 and isinstance(mods[0], OrderedDict):
            for k, m in mods[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(mods):
                self.add_module(str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i: int) -> Module:
        if isinstance(i, slice):
            return Sequential(*list(self._modules.values())[i])
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, m: Module) -> Sequential:
        self.add_module(str(len(self)), m)
        return self


class ModuleList(Module):
    def __init__(self, mods: Iterable[Module] | None = None) -> None:
        super().__init__()
        for m in mods or ():
            self.append(m)

    def append(self, m: Module) -> ModuleList:
        self.add_module(str(len(self._modules)), m)
        return self

    def extend(self, mods: Iterable[Module]) -> ModuleList:
        for m in mods:
            self.append(m)
        return self

    def __getitem__(self, i: int) -> Any:
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())
