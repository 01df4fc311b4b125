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
    "polygamma": "special_ops", "igamma": "special_ops", "igammac": "special_ops",
    "pi": "misc_ops", "e": "misc_ops", "inf": "misc_ops", "nan": "misc_ops",
    "newaxis": "misc_ops", "is_tensor": "misc_ops", "is_signed": "misc_ops",
    "allclose": "misc_ops", "equal": "misc_ops", "result_type": "misc_ops",
    "promote_types": "misc_ops", "can_cast": "misc_ops", "get_default_dtype": "misc_ops",
    "set_default_dtype": "misc_ops", "get_num_threads": "misc_ops",
    "set_num_threads": "misc_ops", "set_flush_denormal": "misc_ops",
    "get_rng_state": "misc_ops", "set_rng_state": "misc_ops",
    "seed": "misc_ops", "normal": "misc_ops", "tensor_split": "misc_ops",
    "hsplit": "misc_ops", "vsplit": "misc_ops", "dsplit": "misc_ops",
    "split_with_sizes": "misc_ops", "unravel_index": "misc_ops", "combinations": "misc_ops",
    "isin": "misc_ops", "dist": "misc_ops", "gcd": "misc_ops", "lcm": "misc_ops",
    "frexp": "misc_ops", "ldexp": "misc_ops", "nextafter": "misc_ops",
    "gradient": "misc_ops", "trace": "misc_ops", "rsub": "misc_ops",
    "bartlett_window": "misc_ops", "blackman_window": "misc_ops",
    "hamming_window": "misc_ops", "hann_window": "misc_ops", "kaiser_window": "misc_ops",
    "is_same_size": "misc_ops", "positive": "misc_ops", "sgn": "misc_ops",
    "masked_scatter": "misc_ops", "index_reduce": "misc_ops", "prelu": "misc_ops",
    "hardshrink": "misc_ops", "abs_": "misc_ops", "acos_": "misc_ops", "acosh_": "misc_ops",
    "addmv_": "misc_ops", "arccos_": "misc_ops", "arccosh_": "misc_ops",
    "arcsin_": "misc_ops", "arcsinh_": "misc_ops", "arctan_": "misc_ops",
    "arctanh_": "misc_ops", "asin_": "misc_ops", "asinh_": "misc_ops", "atan_": "misc_ops",
    "atanh_": "misc_ops", "ceil_": "misc_ops", "clamp_": "misc_ops",
    "clamp_max_": "misc_ops", "clamp_min_": "misc_ops", "clip_": "misc_ops",
    "cos_": "misc_ops", "cosh_": "misc_ops", "deg2rad_": "misc_ops", "erf_": "misc_ops",
    "erfc_": "misc_ops", "exp2_": "misc_ops", "exp_": "misc_ops", "expm1_": "misc_ops",
    "fill_": "misc_ops", "fix_": "misc_ops", "floor_": "misc_ops", "frac_": "misc_ops",
    "gcd_": "misc_ops", "i0_": "misc_ops", "index_put_": "misc_ops", "lcm_": "misc_ops",
    "ldexp_": "misc_ops", "log10_": "misc_ops", "log1p_": "misc_ops", "log2_": "misc_ops",
    "log_": "misc_ops", "logit_": "misc_ops", "nan_to_num_": "misc_ops", "neg_": "misc_ops",
    "negative_": "misc_ops", "rad2deg_": "misc_ops", "reciprocal_": "misc_ops",
    "relu_": "misc_ops", "round_": "misc_ops", "rsqrt_": "misc_ops", "sigmoid_": "misc_ops",
    "sin_": "misc_ops", "sinc_": "misc_ops", "sinh_": "misc_ops", "sqrt_": "misc_ops",
    "square_": "misc_ops", "tan_": "misc_ops", "tanh_": "misc_ops", "trunc_": "misc_ops",
    "xlogy_": "misc_ops", "zero_": "misc_ops",
    # torch.pdist & co. are nn.functional's (misc_ops cannot import graphc.nn: a cycle)
    "pdist": "nn.functional", "pairwise_distance": "nn.functional",
    "cosine_similarity": "nn.functional",
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

    @property
    def trace(self) -> Any:
        """``gc.trace`` is ``torch.trace`` (``misc_ops.trace``), although ``graphc/trace.py``
        is a submodule too: kept the function as ``tensor`` is, for the same reason."""
        ops = (sys.modules.get(f"{__name__}.misc_ops")
               or importlib.import_module(f"{__name__}.misc_ops"))
        return ops.trace

    @trace.setter
    def trace(self, value: Any) -> None:
        pass  # the import system recording the submodule ``graphc.trace``: ignored


sys.modules[__name__].__class__ = _Package
