"""``graphc.nn.functional``: the functional forms of layers and losses (as torch's)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .. import amp
from .. import tensor_ops as T
from ..ir import shapes as sh
from ..ir import user_location
from ..ir.elementwise import SURFACE
from ..ir.opdef import OpDef
from ..tensor import Tensor


def _from_table(d: OpDef) -> Any:
    """``nn.functional.<op>(input, *params, inplace=False)`` for an op-table entry, with
    torch's parameter names and defaults; ``inplace=True`` writes the result into ``input``
    (its ``op_`` method) and returns it, as torch does."""
    name = d.name
    n_more = d.arity - 1

    def fn(input: Any, *args: Any, **kwargs: Any) -> Tensor:  # noqa: A002
        operands, rest = args[:n_more], args[n_more:]
        inplace = False
        if d.inplace:
            names = [k for k, _ in d.params]
            if len(rest) > len(names):  # inplace given positionally, after the parameters
                rest, inplace = rest[:len(names)], bool(rest[len(names)])
            inplace = bool(kwargs.pop("inplace", inplace))
        params = T.bind_params(d, rest, kwargs, name)
        if inplace:
            if not isinstance(input, Tensor):
                raise TypeError(f"{name}(): inplace=True needs a Tensor, got "
                                f"{type(input).__name__}")
            return T._inplace_method(d)(input, *operands, **params)
        return T.apply_op(d, input, *operands, **params)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``torch.nn.functional.{name}``: elementwise ``{name}``."
    return fn


_FROM_TABLE = [d.name for d in SURFACE if "F" in d.api]
for _d in SURFACE:
    if "F" in _d.api:
        globals()[_d.name] = _from_table(_d)


@amp.lower_precision
def linear(x: Any, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` (the transpose is a view the backend folds into the GEMM)."""
    out = T.matmul(T.as_tensor(x), weight.T)
    return out + bias if bias is not None else out


_warned: set[tuple[str, str]] = set()


def _check_target_size(name: str, input: Tensor, target: Tensor) -> None:
    if tuple(target.shape) != tuple(input.shape):
        loc = user_location() or "?"
        key = (name, loc)
        if key in _warned:
            return
        _warned.add(key)
        warnings.warn(
            f"Using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to "
            f"broadcasting. Please ensure they have the same size. (at {loc})",
            UserWarning, stacklevel=4,
        )


@amp.float32_op
def l1_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean") -> Tensor:
    input, target = T.as_tensor(input), T.as_tensor(target)
    _check_target_size("l1_loss", input, target)
    return _reduce((input - target).abs(), _reduction(size_average, reduce, reduction))


@amp.float32_op
def mse_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean") -> Tensor:
    input, target = T.as_tensor(input), T.as_tensor(target)
    _check_target_size("mse_loss", input, target)
    d = input - target
    return _reduce(d * d, _reduction(size_average, reduce, reduction))


# -- layers and losses implemented in their own modules (re-exported, as torch's F) ----------
from ..shape_ops import one_hot  # noqa: E402
from ._fattn import bilinear, scaled_dot_product_attention  # noqa: E402
from ._fconv import (  # noqa: E402
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    conv1d,
    conv2d,
    conv_transpose1d,
    conv_transpose2d,
    interpolate,
    max_pool1d,
    max_pool2d,
    upsample,
)
from ._fconv3d import (  # noqa: E402
    adaptive_avg_pool3d,
    adaptive_max_pool3d,
    avg_pool3d,
    conv3d,
    conv_transpose3d,
    max_pool3d,
)
from ._fdropout import (  # noqa: E402
    alpha_dropout,
    dropout1d,
    dropout2d,
    dropout3d,
    feature_alpha_dropout,
    gumbel_softmax,
)
from ._fembed import embedding_bag  # noqa: E402
from ._fextra import (  # noqa: E402
    adaptive_max_pool1d,
    channel_shuffle,
    local_response_norm,
    lp_pool1d,
    lp_pool2d,
    multi_margin_loss,
    multilabel_margin_loss,
    pdist,
    triplet_margin_with_distance_loss,
)
from ._ffold import fold, pixel_shuffle, pixel_unshuffle, unfold  # noqa: E402
from ._fgrid import affine_grid, grid_sample  # noqa: E402
from ._floss import (  # noqa: E402
    _reduce,
    _reduction,
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_embedding_loss,
    cosine_similarity,
    cross_entropy,
    ctc_loss,
    gaussian_nll_loss,
    hinge_embedding_loss,
    huber_loss,
    kl_div,
    log_sigmoid,
    margin_ranking_loss,
    multilabel_soft_margin_loss,
    nll_loss,
    pairwise_distance,
    poisson_nll_loss,
    smooth_l1_loss,
    soft_margin_loss,
    triplet_margin_loss,
)
from ._fmore import (  # noqa: E402
    adaptive_max_pool1d_with_indices,
    adaptive_max_pool2d_with_indices,
    adaptive_max_pool3d_with_indices,
    celu_,
    elu_,
    hardtanh_,
    leaky_relu_,
    lp_pool3d,
    max_pool1d_with_indices,
    max_pool2d_with_indices,
    max_pool3d_with_indices,
    relu_,
    selu_,
    threshold_,
    upsample_bilinear,
    upsample_nearest,
)
from ._fnorm import (  # noqa: E402
    batch_norm,
    dropout,
    embedding,
    group_norm,
    instance_norm,
    layer_norm,
    rms_norm,
)
from ._frrelu import rrelu, rrelu_  # noqa: E402
from ._funpool import (  # noqa: E402
    fractional_max_pool2d,
    fractional_max_pool3d,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
)


def _pad_index(size: int, lo: int, hi: int, mode: str) -> np.ndarray:
    """Source positions of a ``size + lo + hi`` padded dim (``lo``/``hi`` may be negative)."""
    j = np.arange(-lo, size + hi)
    if mode == "reflect":
        if lo >= size or hi >= size:
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding "
                               f"input dimension, but got: padding ({lo}, {hi}) at dimension "
                               f"of size {size}")
        j = np.abs(j)
        return np.where(j > size - 1, 2 * (size - 1) - j, j)
    if mode == "replicate":
        return np.clip(j, 0, size - 1)
    if min(lo, hi) < 0 and lo <= size and hi <= size:
        # circular with a cropped side: PyTorch wraps around the kept range, not the dim
        c0, c1 = max(-lo, 0), size - max(-hi, 0)
        if c1 <= c0:
            raise RuntimeError(f"Negative padding results in an empty dimension: padding "
                               f"({lo}, {hi}) at dimension of size {size}")
        return c0 + np.arange(-max(lo, 0), c1 - c0 + max(hi, 0)) % (c1 - c0)
    if lo > size or hi > size:
        raise RuntimeError("Padding value causes wrapping around more than once.")
    return j % size


def pad(input: Any, pad: Any, mode: str = "constant", value: float | None = None) -> Tensor:
    """``F.pad``: pairs from the last dim backwards, as torch. ``constant`` pads with ``value``
    (negative pads crop); ``reflect``, ``replicate`` and ``circular`` are constant-index
    gathers along each padded dim, so their gradients sum into the source positions."""
    x = T.as_tensor(input)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: padding length must be even and at most 2*ndim, got {pad}")
    n = len(pad) // 2
    pairs = [(int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(n)]
    # negative pads crop; ATen refuses a crop past the dim (``narrow``) or, for the other
    # modes, a negative result, before it pads anything
    sizes = [x.shape[x.ndim - 1 - i] for i in range(n)]
    for d, (lo, hi) in zip(sizes, pairs):
        if not isinstance(d, int):  # a symbolic size: the compiled step checks it per call
            kept = d + min(lo, 0) + min(hi, 0) if mode == "constant" else d + lo + hi
            sh.require_gt(sh.dim(kept), -1, f"pad: padding ({lo}, {hi}) leaves a negative "
                          f"size of a dim of size {sh.fmt_dim(d)}")
    if all(isinstance(d, int) for d in sizes):
        if mode == "constant":
            if any(d + min(lo, 0) + min(hi, 0) < 0 for d, (lo, hi) in zip(sizes, pairs)):
                raise RuntimeError("narrow(): length must be non-negative.")
        elif any(d + lo + hi < 0 for d, (lo, hi) in zip(sizes, pairs)):
            if mode == "circular":
                raise RuntimeError("Negative padding value is resulting in an empty dimension")
            new = list(x.shape)
            for i, (lo, hi) in enumerate(pairs):
                new[x.ndim - 1 - i] = sizes[i] + lo + hi
            bad = next(v for v in new if isinstance(v, int) and v < 0)
            raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: "
                               f"[{', '.join(sh.fmt_dim(v) for v in new)}]")
    if mode != "constant":
        if mode not in ("reflect", "replicate", "circular"):
            raise NotImplementedError(f"pad: mode={mode!r} is not supported (constant, reflect, "
                                      "replicate and circular are)")
        if value is not None and value != 0:
            raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
        if n > 3 or x.ndim < n + 1 or x.ndim > n + 2:
            raise NotImplementedError(
                f"pad: mode={mode!r} pads the last 1, 2 or 3 dims of a 2D-5D input (as torch); "
                f"got {n} pad pairs for a {x.ndim}D input")
        from ._fconv import _take
        for i, (lo, hi) in enumerate(pairs):
            if lo == 0 and hi == 0:
                continue
            ax = x.ndim - 1 - i
            x = _take(x, ax, _pad_index(int(x.shape[ax]), lo, hi, mode))
        return x
    fill = 0.0 if value is None else value
    pads = [(0, 0)] * x.ndim
    for i, (lo, hi) in enumerate(pairs):
        ax = x.ndim - 1 - i
        if lo < 0 or hi < 0:
            x = T.slice_dims(x, [max(0, -lo) if a == ax else 0 for a in range(x.ndim)],
                             [x.shape[a] - max(0, -hi) if a == ax else x.shape[a]
                              for a in range(x.ndim)])
        pads[ax] = (max(lo, 0), max(hi, 0))
    out = T.pad(x, pads)
    if fill == 0 or out is x:
        return out
    border = None
    for ax, (lo, hi) in enumerate(pads):
        if lo == 0 and hi == 0:
            continue
        size = out.shape[ax]
        if not isinstance(size, int):
            raise NotImplementedError("pad: a nonzero value on a symbolic (batch) dim")
        m = np.ones(size, bool)
        m[lo:size - hi] = False
        shape = [1] * out.ndim
        shape[ax] = size
        mt = T.as_tensor(m.reshape(shape))
        border = mt if border is None else T.binary("or", border, mt)
    return T.where(border, T.as_tensor(fill, out.dtype) if out.dtype.is_float else fill, out)


__all__ = [
    "fold", "unfold", "pixel_shuffle", "pixel_unshuffle", "cosine_similarity",
    *_FROM_TABLE, "linear", "l1_loss", "mse_loss",
    "conv2d", "max_pool2d", "avg_pool2d", "conv1d", "conv_transpose1d", "conv_transpose2d",
    "avg_pool1d", "max_pool1d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_max_pool2d", "interpolate", "upsample",
    "batch_norm", "layer_norm", "dropout", "embedding", "dropout1d", "dropout2d", "dropout3d",
    "alpha_dropout", "feature_alpha_dropout", "gumbel_softmax",
    "cross_entropy", "nll_loss", "binary_cross_entropy_with_logits", "smooth_l1_loss",
    "binary_cross_entropy", "kl_div", "huber_loss", "cosine_embedding_loss",
    "margin_ranking_loss", "triplet_margin_loss", "poisson_nll_loss", "gaussian_nll_loss",
    "soft_margin_loss", "hinge_embedding_loss", "multilabel_soft_margin_loss", "ctc_loss",
    "pairwise_distance",
    "log_sigmoid", "pad",
    "scaled_dot_product_attention", "bilinear", "group_norm", "instance_norm", "rms_norm",
    "one_hot",
    "rrelu", "rrelu_",
    "channel_shuffle", "local_response_norm", "pdist", "multi_margin_loss",
    "multilabel_margin_loss", "triplet_margin_with_distance_loss", "adaptive_max_pool1d",
    "lp_pool1d", "lp_pool2d",
    "affine_grid", "grid_sample", "embedding_bag",
    "conv3d", "conv_transpose3d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool3d",
    "adaptive_max_pool3d",
    "max_unpool1d", "max_unpool2d", "max_unpool3d", "fractional_max_pool2d",
    "fractional_max_pool3d",
]


# ``F.prelu`` is ``torch.prelu``: one rule (a 1-D input has one channel, as ATen's)
from ..misc_ops import prelu  # noqa: E402, F401 - re-exported (in __all__)

__all__.append("prelu")
__all__ += ["lp_pool3d", "relu_", "elu_", "leaky_relu_", "hardtanh_", "threshold_", "selu_",
            "celu_", "max_pool1d_with_indices", "max_pool2d_with_indices",
            "max_pool3d_with_indices", "adaptive_max_pool1d_with_indices",
            "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices",
            "upsample_nearest", "upsample_bilinear"]
