"""graphc: compile a whole PyTorch-style training step into one native function.

    import graphc as gc
    from graphc import nn, optim

    @gc.compile
    def train_step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

The package resolves its attributes on first use (PEP 562): ``import graphc`` itself loads
nothing but this file, so that the ``graphc`` command's ``--help`` (whose entry point
``graphc.cli:main`` imports this package first) answers at once instead of waiting a second
for numpy, sympy and the compiler. ``gc.zeros``, ``gc.compile``, ``gc.nn`` ... import what they
need the first time they are read, and every graphc submodule can be imported first.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

# Where each public name lives. ``_core`` holds the eager namespace (factories, dtype aliases,
# functional forms); tests/test_first_hour_api.py keeps this table equal to ``_core.__all__``.
_CORE_NAMES = frozenset({
    "enable_grad", "inference_mode", "is_grad_enabled", "no_grad", "set_grad_enabled", "DType",
    "Tensor", "to_array", "as_tensor", "where", "float32", "float64", "bfloat16", "int64",
    "int32", "bool",
    "float", "double", "long", "manual_seed", "initial_seed", "tensor", "from_numpy", "zeros",
    "ones", "full", "zeros_like", "ones_like", "rand", "randn", "rand_like", "randn_like",
    "arange", "matmul", "exp", "log",
    "tanh", "sigmoid", "relu", "sqrt", "abs", "sum", "mean", "maximum", "minimum", "clamp",
    "argmax", "softmax", "log_softmax", "gather", "cat", "concat", "stack", "device",
    "addmm", "addmv", "baddbmm", "bmm", "chunk", "diag", "diag_embed", "diagonal", "dot",
    "einsum", "empty", "empty_like", "eye", "flip", "fliplr", "flipud", "full_like", "ger",
    "kron", "linspace", "logspace", "masked_fill", "meshgrid", "mm", "moveaxis", "movedim",
    "mv", "outer", "repeat_interleave", "roll", "split", "swapaxes", "swapdims", "tile",
    "tril", "tril_indices", "triu", "triu_indices", "unbind", "unflatten", "t", "narrow",
    "select",
    "argsort", "argwhere", "index_add", "index_copy", "index_fill", "index_put",
    "index_select", "kthvalue", "masked_select", "msort", "nonzero", "scatter",
    "scatter_add", "scatter_reduce", "sort", "take_along_dim", "topk",
    "all", "aminmax", "any", "count_nonzero", "cummax", "cummin", "cumprod", "cumsum",
    "logcumsumexp", "norm", "prod", "std", "std_mean", "var", "var_mean", "argmin", "max",
    "min", "amax", "amin", "lerp", "broadcast_shapes", "broadcast_tensors", "randint",
    "randint_like", "randperm", "memory_format", "contiguous_format", "preserve_format",
    "channels_last",
    "diff", "rot90", "cross", "trapezoid", "trapz", "cumulative_trapezoid", "nansum",
    "nanmean", "tensordot", "inner", "vdot", "addr", "addbmm", "renorm", "atleast_1d",
    "atleast_2d", "atleast_3d", "hstack", "vstack", "row_stack", "dstack", "column_stack",
    "take", "diagflat", "vander", "block_diag", "cartesian_prod", "cdist", "cov", "corrcoef",
    "narrow_copy",
    "det", "logdet", "inverse", "slogdet", "qr", "svd", "pinverse",
    "median", "nanmedian", "quantile", "nanquantile", "mode", "searchsorted", "bucketize",
    "histc", "histogram", "bincount", "unique", "unique_consecutive",
})
_ELSEWHERE = {
    "compile": "api", "CompiledFunction": "api",
    "DebugBoundsError": "checks", "NonFiniteError": "checks",
    "load": "serialization", "save": "serialization",
    "Generator": "random", "bernoulli": "random_ops", "multinomial": "random_ops",
    "autocast": "amp", "is_autocast_enabled": "amp", "get_autocast_dtype": "amp",
}

# Submodules that moved into a layer package: ``gc.dtypes`` & co. keep resolving to them.
_MOVED = {
    "dtypes": "ir.dtypes", "shapes": "ir.shapes", "ops": "ir.ops", "text": "ir.text",
    "verify": "ir.verify", "aot_c": "aot.csource", "executable": "runtime.executable",
}

__all__ = [
    "Tensor", "DType", "tensor", "from_numpy", "zeros", "ones", "full", "zeros_like",
    "ones_like", "rand", "randn", "arange", "manual_seed", "initial_seed", "no_grad",
    "enable_grad", "inference_mode", "is_grad_enabled", "set_grad_enabled", "compile",
    "CompiledFunction", "float32", "float64", "bfloat16", "int64", "int32", "bool", "nn",
    "optim", "where",
    "as_tensor", "matmul", "save", "load", "aot", "NonFiniteError", "DebugBoundsError",
    "Generator", "autocast", "amp", "special",
]


def __getattr__(name: str) -> Any:
    """Resolve a public name (or a submodule, as ``gc.ir`` worked when the package imported
    everything eagerly) on first use, and keep it in the module so the next read is a plain
    dictionary lookup."""
    if name in _CORE_NAMES:
        value = getattr(importlib.import_module(f"{__name__}._core"), name)
    elif name in _ELSEWHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_ELSEWHERE[name]}"), name)
    elif name in _MOVED:
        value = importlib.import_module(f"{__name__}.{_MOVED[name]}")
    elif name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise  # the submodule exists but something it imports does not
            core = importlib.import_module(f"{__name__}._core")
            if name not in core._FROM_TABLE:  # ``gc.<op>`` of an op-table entry
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
            value = getattr(core, name)
        else:
            return value  # the import system has already set it on the package
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | _CORE_NAMES | set(_ELSEWHERE) | set(_MOVED) | set(__all__))


class _Package(types.ModuleType):
    """``gc.tensor`` is the factory function, although ``graphc/tensor.py`` is a submodule too.

    Importing a submodule sets the package attribute of that name (importlib's
    ``setattr(parent, child, module)``), which would replace the function whenever
    ``graphc.tensor`` happens to be imported after the name was read. A data descriptor on the
    module's class takes precedence over the module's dictionary, so ``gc.tensor`` stays the
    function (as it was when this file defined it after importing the submodule)."""

    @property
    def tensor(self) -> Any:
        core = sys.modules.get(f"{__name__}._core") or importlib.import_module(f"{__name__}._core")
        return core.tensor

    @tensor.setter
    def tensor(self, value: Any) -> None:
        pass  # the import system recording the submodule ``graphc.tensor``: ignored, see above


sys.modules[__name__].__class__ = _Package
