"""``torch.nn.init``: PyTorch's initialisers, with its names, signatures, formulas, warnings and
errors, drawing from PyTorch's random stream.

Every initialiser writes through the tensor's in-place methods (``uniform_``, ``normal_``,
``fill_``, ``copy_``, ...) under ``no_grad``, as PyTorch's do. Those methods draw eagerly what
ATen draws (``graphc.random``), and inside a compiled step they are inputs the step draws anew
on every call, in eager's order; so ``nn.init.kaiming_uniform_(model.weight)`` in a step
re-initialises the weight on each call with the values eager execution would give.
``trunc_normal_`` (how many redraws it makes depends on the values drawn: no loop a compiled
step could express) and ``sparse_``'s per-column permutations (one ``randperm`` and indexed
write per column would trace thousands of ops for a wide layer) are drawn on the host instead,
each as one fill that a compiled step repeats on every call (``random_ops._draw``), from the
same stream words eager execution uses.

A tensor that is a view (``trunc_normal_(w.t())``, a column slice, a permutation) gets its
values in the element order PyTorch's Tensor methods fill it in, ATen's ``TensorIterator``
order for its strides (``random_ops._layout``): ``uniform_``/``normal_`` and the initialisers
built on them do so themselves, and ``trunc_normal_``'s host-side draws take the same order
(and ``normal_``'s per-element algorithm for a non-contiguous tensor). ``orthogonal_`` draws
a fresh contiguous matrix, in logical order, and copies it in; ``sparse_``'s zeroed rows do
not depend on the layout.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import linalg as _linalg
from .. import random as _random
from ..autograd import no_grad
from ..random_ops import _draw, _float_only, _layout, _normal_each, _traced
from ..shape_ops import diag as _diag
from ..shape_ops import eye as _eye
from ..tensor import Tensor

__all__ = [
    "calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
    "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
    "kaiming_normal_", "orthogonal_", "sparse_",
    # deprecated aliases PyTorch still exports (old code calls them; they warn)
    "uniform", "normal", "constant", "eye", "dirac", "xavier_uniform", "xavier_normal",
    "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse",
]

_Gen = _random.Generator | None  # the ``generator=`` argument: a gc.Generator, or None


# PyTorch's ``_no_grad_*`` helpers: third-party code (timm's ``trunc_normal_``, for one)
# imports them from ``torch.nn.init`` directly, so they keep their names here.
def _no_grad_uniform_(tensor: Tensor, a: float, b: float,
                      generator: _Gen = None) -> Tensor:
    with no_grad():
        return tensor.uniform_(a, b, generator=generator)


def _no_grad_normal_(tensor: Tensor, mean: float, std: float,
                     generator: _Gen = None) -> Tensor:
    with no_grad():
        return tensor.normal_(mean, std, generator=generator)


def _draw_dtype(tensor: Tensor) -> np.dtype:
    """The dtype graphc's ``uniform_``/``normal_`` draw a tensor's values in (double for
    float64, float otherwise), so the host-side draws below use the same stream words."""
    return np.dtype(np.float64 if tensor.dtype.np == np.float64 else np.float32)


def _trunc_normal_values(shape: tuple, mean: float, std: float, a: float, b: float,
                         p: float, tdtype: np.dtype, each: tuple[bool, bool] = (False, False),
                         dtype: Any = np.float32, rs: Any = None) -> np.ndarray:
    """``_no_grad_trunc_normal_``'s values, drawn from the stream ``rs`` exactly as PyTorch's
    tensor ops draw them. How many draws it takes depends on the values drawn, so a compiled
    step cannot express the loop; done here on the host, it is one fill the step repeats on
    every call (the same words, in the same order, as eager). ``tdtype``: the tensor's dtype,
    in which PyTorch's comparisons and arithmetic happen.

    ``shape`` is the shape of ATen's loop over the tensor (``random_ops._InOrder`` puts the
    values back in logical positions; every step below is elementwise, so drawing in loop
    order and transposing back is what PyTorch's fills of the strided tensor give). ``each``:
    whether the first ``normal_`` (into the tensor) and the redraws (into ``empty_like`` of
    it) are non-contiguous fills, which take one double sample per element
    (``random_ops._normal_each``) instead of ATen's 16-at-a-time ``normal_fill``."""
    draw = np.dtype(dtype)

    def normal(per_element: bool) -> np.ndarray:
        if per_element:
            return _normal_each(shape, mean, std, draw, rs).astype(tdtype)
        return _random.normal(shape, mean, std, draw, rs).astype(tdtype)

    if p > 0.3:  # redraw out-of-bounds values from the normal distribution
        lo, hi = np.asarray(a, tdtype), np.asarray(b, tdtype)  # ``new_tensor(a).item()``
        result = normal(each[0])
        while True:
            mask = (result < lo) | (result > hi)
            if not mask.any():
                break
            fresh = normal(each[1])
            result = np.where(mask, fresh, result)
        return result.astype(draw)
    # rejection sampling from the uniform distribution on [a, b], accepting with the normal
    # density relative to its peak in [a, b]; the arithmetic in the tensor's dtype, as
    # PyTorch's in-place ops (scalars cast to it) do it
    t = tdtype.type
    mode = max(a, min(mean, b))
    log_peak = -0.5 * ((mode - mean) / std) ** 2

    def log_pdf(x: np.ndarray) -> np.ndarray:  # sub_(mean).div_(std).pow_(2).mul_(-0.5)...
        z = (x - t(mean)) / t(std)
        return (z * z) * t(-0.5) - t(log_peak)

    def log_u() -> np.ndarray:  # accept_buf.uniform_().log_()
        with np.errstate(divide="ignore"):
            return np.log(_random.uniform(shape, 0.0, 1.0, draw, rs).astype(tdtype))

    result = _random.uniform(shape, a, b, draw, rs).astype(tdtype)
    pending = log_u() > log_pdf(result)
    while pending.any():
        candidates = _random.uniform(shape, a, b, draw, rs).astype(tdtype)
        result = np.where(pending, candidates, result)
        pending = np.where(pending, log_u() > log_pdf(candidates), pending)
    return result.astype(draw)


def _no_grad_trunc_normal_(tensor: Tensor, mean: float, std: float, a: float, b: float,
                           generator: _Gen = None) -> Tensor:
    """PyTorch's algorithm: where at least 30% of the normal's mass lies in ``[a, b]``,
    normal draws with the ones outside redrawn (whole-tensor draws, as ``torch.where`` over
    ``empty_like(...).normal_`` does); otherwise rejection sampling from ``U(a, b)``."""

    def norm_cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    _random.checked(generator)
    with no_grad():
        p = norm_cdf((b - mean) / std) - norm_cdf((a - mean) / std)
        # the checks PyTorch's first ``normal_``/``uniform_`` make, before anything is drawn
        if p > 0.3:
            _float_only(tensor, "normal_kernel_cpu")
            if std < 0:
                raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
        else:
            _float_only(tensor, "check_uniform_bounds")
            if not a <= b:
                raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found "
                                   f"from={a:g} > to={b:g}")  # C++'s format, as PyTorch's
        # PyTorch's Tensor methods fill the tensor, and the ``empty_like`` buffers of its
        # redraws (which keep its memory order: ``preserve_format``), in ATen's element order
        # for its strides: the draws follow that order. The redraw buffer is contiguous
        # exactly when that order is row-major (a column slice's is dense and row-major).
        order, contiguous = _layout(tensor)
        each = (not contiguous, order is not None)
        args = (float(mean), float(std), float(a), float(b), float(p),
                np.dtype(tensor.dtype.np), each)
        values = _draw("trunc_normal", _trunc_normal_values, args, tuple(tensor.shape),
                       _draw_dtype(tensor), generator, _traced(tensor), order=order)
        return tensor.copy_(values)


def _no_grad_fill_(tensor: Tensor, val: float) -> Tensor:
    with no_grad():
        return tensor.fill_(val)


def _no_grad_zero_(tensor: Tensor) -> Tensor:
    with no_grad():
        return tensor.zero_()


_LINEAR_FNS = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
               "conv_transpose3d")


def calculate_gain(nonlinearity: str, param: int | float | None = None) -> float:
    """The recommended gain for ``nonlinearity`` (PyTorch's table): 1 for linear maps,
    convolutions and sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope**2)) for
    leaky_relu (``param``: its negative slope, 0.01 by default), 3/4 for selu."""
    if nonlinearity in _LINEAR_FNS or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope: float = 0.01
        elif not isinstance(param, bool) and isinstance(param, int) or isinstance(param, float):
            negative_slope = param  # True/False are ints: refused above, as PyTorch does
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4  # PyTorch's empirical value (pytorch/pytorch#50664)
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0,
             generator: _Gen = None) -> Tensor:
    """Fill ``tensor`` from U(a, b)."""
    return _no_grad_uniform_(tensor, a, b, generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0,
            generator: _Gen = None) -> Tensor:
    """Fill ``tensor`` from N(mean, std**2)."""
    return _no_grad_normal_(tensor, mean, std, generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: _Gen = None) -> Tensor:
    """Fill ``tensor`` from N(mean, std**2) truncated to ``[a, b]`` (PyTorch's sampler, so the
    same values after the same seed; see ``_no_grad_trunc_normal_``)."""
    return _no_grad_trunc_normal_(tensor, mean, std, a, b, generator=generator)


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill ``tensor`` with ``val``."""
    return _no_grad_fill_(tensor, val)


def ones_(tensor: Tensor) -> Tensor:
    """Fill ``tensor`` with 1."""
    return _no_grad_fill_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill ``tensor`` with 0."""
    return _no_grad_zero_(tensor)


def eye_(tensor: Tensor) -> Tensor:
    """Fill the 2-d ``tensor`` with the identity matrix (ones on the main diagonal of a
    rectangular one), which keeps a ``Linear`` layer's inputs as far as it can."""
    if tensor.ndimension() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with no_grad():
        tensor.copy_(_eye(*tensor.shape, dtype=tensor.dtype))
    return tensor


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill the {3, 4, 5}-d ``tensor`` with the Dirac delta, so a convolution with it keeps
    as many input channels as it can (each group's, with ``groups``): zeros, with a 1 at the
    kernel's centre for output channel ``g * out_per_group + d`` and input channel ``d``."""
    dimensions = tensor.ndimension()
    if dimensions not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tensor.size()
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_chans_per_grp = sizes[0] // groups
    min_dim = min(out_chans_per_grp, sizes[1])
    with no_grad():
        tensor.zero_()
        if min_dim > 0 and groups > 0:
            # PyTorch's loop of single writes, as one indexed write (one op in a trace)
            out_idx = [g * out_chans_per_grp + d for g in range(groups) for d in range(min_dim)]
            in_idx = [d for _ in range(groups) for d in range(min_dim)]
            centre = tuple(s // 2 for s in sizes[2:])
            tensor[(out_idx, in_idx, *centre)] = 1
    return tensor


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight laid out as PyTorch's layers lay them out: dim 1 is the
    inputs, dim 0 the outputs, the rest a convolution's receptive field."""
    dimensions = tensor.dim()
    if dimensions < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 "
                         "dimensions")
    num_input_fmaps = tensor.size(1)
    num_output_fmaps = tensor.size(0)
    receptive_field_size = 1
    for s in tensor.shape[2:]:
        receptive_field_size *= s
    return num_input_fmaps * receptive_field_size, num_output_fmaps * receptive_field_size


def xavier_uniform_(tensor: Tensor, gain: float = 1.0,
                    generator: _Gen = None) -> Tensor:
    """Glorot uniform: U(-a, a) with a = gain * sqrt(3) * sqrt(2 / (fan_in + fan_out)),
    computed in PyTorch's order (the bound's last bit decides the values' last bits)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return _no_grad_uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0,
                   generator: _Gen = None) -> Tensor:
    """Glorot normal: N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return _no_grad_normal_(tensor, 0.0, std, generator)


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    valid_modes = ["fan_in", "fan_out"]
    if mode not in valid_modes:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid_modes}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu",
                     generator: _Gen = None) -> Tensor:
    """He uniform: U(-bound, bound) with bound = sqrt(3) * gain / sqrt(fan), ``a`` the
    leaky_relu slope (what ``Linear``/``Conv`` use with ``a=sqrt(5)``). A tensor with no
    elements is left alone with PyTorch's warning (its fan may be 0)."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    std = gain / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    with no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu",
                    generator: _Gen = None) -> Tensor:
    """He normal: N(0, std**2) with std = gain / sqrt(fan)."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    std = gain / math.sqrt(fan)
    with no_grad():
        return tensor.normal_(0, std, generator=generator)


def orthogonal_(tensor: Tensor, gain: float = 1,
                generator: _Gen = None) -> Tensor:
    """A (semi-)orthogonal matrix (trailing dimensions flattened), times ``gain``: the Q of
    the QR factorisation of a standard normal matrix, its columns' signs fixed by R's
    diagonal so that Q is uniformly distributed (Mezzadri, math-ph/0609050), as PyTorch
    does. Needs ``gc.linalg.qr``."""
    if tensor.ndimension() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.size(0)
    cols = tensor.numel() // rows
    with no_grad():
        flattened = tensor.new_empty((rows, cols)).normal_(0, 1, generator=generator)
        if rows < cols:  # PyTorch's ``t_()``: graphc's in-place form keeps the shape
            flattened = flattened.t()
        try:
            q, r = _linalg.qr(flattened)
        except NotImplementedError as e:
            raise NotImplementedError(
                f"nn.init.orthogonal_ needs gc.linalg.qr to orthogonalise its normal draws, "
                f"and it is not available here ({e})") from e
        ph = _diag(r, 0).sign()
        q = q * ph
        if rows < cols:
            q = q.t()
        if not _traced(tensor):
            # PyTorch writes through ``tensor.view_as(q)``, which raises (after the draws)
            # for a layout whose trailing dims cannot be flattened without a copy
            tensor.view(tuple(q.shape))
        tensor.copy_(q.reshape(tuple(tensor.shape)))
        tensor.mul_(gain)
    return tensor


def _sparse_zero_mask(shape: tuple, num_zeros: int, dtype: Any = np.bool_,
                      rs: Any = None) -> np.ndarray:
    """Where ``sparse_`` zeroes: for each column in turn, the first ``num_zeros`` rows of a
    ``randperm(rows)`` drawn from ``rs``. One host-side fill instead of a permutation and an
    indexed write per column (a wide layer would trace thousands of ops)."""
    rows, cols = shape
    mask = np.zeros(shape, np.bool_)
    for c in range(cols):
        mask[_random.permutation(rows, rs)[:num_zeros], c] = True
    return mask.astype(dtype)


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01,
            generator: _Gen = None) -> Tensor:
    """Martens' sparse init of a 2-d ``tensor``: N(0, std**2) values with ``ceil(sparsity *
    rows)`` of each column's set to zero. The zeroed rows come from ``randperm`` on the
    global stream even when ``generator`` is given, as in PyTorch (which passes it to the
    normal draws only), so the same seed gives the same matrix."""
    if tensor.ndimension() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    num_zeros = math.ceil(sparsity * rows)
    with no_grad():
        tensor.normal_(0, std, generator=generator)
        zero = _draw("sparse_zeros", _sparse_zero_mask, (int(num_zeros),), (rows, cols),
                     np.bool_, None, _traced(tensor))
        tensor.masked_fill_(zero, 0)
    return tensor


# -- deprecated aliases (``nn.init.uniform`` and co.: PyTorch warns and forwards) ------------
def _make_deprecate(meth: Callable[..., Tensor]) -> Callable[..., Tensor]:
    new_name = meth.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args: Any, **kwargs: Any) -> Tensor:
        warnings.warn(f"`nn.init.{old_name}` is now deprecated in favor of "
                      f"`nn.init.{new_name}`.", FutureWarning, stacklevel=2)
        return meth(*args, **kwargs)

    deprecated_init.__doc__ = f"Deprecated alias of ``{new_name}`` (warns, as PyTorch's does)."
    deprecated_init.__name__ = old_name
    deprecated_init.__qualname__ = old_name
    return deprecated_init


uniform = _make_deprecate(uniform_)
normal = _make_deprecate(normal_)
constant = _make_deprecate(constant_)
eye = _make_deprecate(eye_)
dirac = _make_deprecate(dirac_)
xavier_uniform = _make_deprecate(xavier_uniform_)
xavier_normal = _make_deprecate(xavier_normal_)
kaiming_uniform = _make_deprecate(kaiming_uniform_)
kaiming_normal = _make_deprecate(kaiming_normal_)
orthogonal = _make_deprecate(orthogonal_)
sparse = _make_deprecate(sparse_)
