"""``nn.utils.parameters_to_vector`` and ``nn.utils.vector_to_parameters``.

Both are tensor ops, so they work eagerly and inside a compiled step: the vector is a ``cat``
of the flattened parameters (differentiable, as PyTorch's), and writing a vector back copies
each slice into its parameter under ``no_grad``, which eagerly fills the parameter's memory and
in a compiled step becomes an update of that parameter (as an optimizer's write does). PyTorch
rebinds ``param.data`` to a view of the vector instead; the values, shapes and identities of the
parameters come out the same, only that memory sharing with ``vec`` is not reproduced.
"""

from __future__ import annotations

from collections.abc import Iterable

from ... import tensor_ops as T
from ..._core import cat
from ...autograd import no_grad
from ...tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _typename(obj: object) -> str:
    """``torch.typename`` of a non-tensor (its error messages name types this way)."""
    cls = type(obj)
    module = cls.__module__ or ""
    return cls.__qualname__ if module in ("", "builtins") else f"{module}.{cls.__qualname__}"


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All ``parameters`` flattened and concatenated into one vector, in order."""
    return cat([T.as_tensor(p).reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of ``vec`` into ``parameters`` (each reshaped to its
    parameter's shape)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {_typename(vec)}")
    pointer = 0
    for param in parameters:
        n = int(param.numel())
        with no_grad():
            param.copy_(vec[pointer:pointer + n].reshape(param.shape))
        pointer += n
