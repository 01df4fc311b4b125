"""``F.unfold`` (im2col) and ``F.fold`` (col2im), PyTorch's sliding-block pair.

Why compositions, not kernels: ``unfold`` is a gather of constant window positions of the
zero-padded input (``Tensor.unfold`` along the two spatial dims, dilation as a strided slice),
so it traces, compiles and differentiates like indexing; ``fold`` is its adjoint, a
``scatter_add`` of every block element into the padded image, cropped. Both keep the batch dim
symbolic in a compiled step (the windows run along the fixed spatial dims).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import tensor_ops as T
from ..shape_ops import full_like
from ..tensor import Tensor


def _pair(v: Any, name: str) -> tuple[int, int]:
    vals = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
    if len(vals) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, np.integer))
                             for x in vals):
        raise TypeError(f"{name} must be an int or a pair of ints, got {v!r}")
    return int(vals[0]), int(vals[1])


def _params(kernel_size: Any, dilation: Any, padding: Any, stride: Any
            ) -> tuple[tuple[int, int], ...]:
    k, d = _pair(kernel_size, "kernel_size"), _pair(dilation, "dilation")
    p, s = _pair(padding, "padding"), _pair(stride, "stride")
    if min(k) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: "
                           f"{k[0]} kernel_width: {k[1]}")
    if min(d) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: "
                           f"{d[0]} dilation_width: {d[1]}")
    if min(p) < 0:
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {p[0]} "
                           f"pad_width: {p[1]}")
    if min(s) <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: "
                           f"{s[0]} stride_width: {s[1]}")
    return k, d, p, s


def _blocks(size: tuple[Any, Any], k: tuple[int, int], d: tuple[int, int],
            p: tuple[int, int], s: tuple[int, int]) -> tuple[int, int]:
    out = []
    for ax in range(2):
        n = size[ax]
        if not isinstance(n, int):
            raise NotImplementedError(f"unfold/fold: spatial size {n} is symbolic; compile with "
                                      "dynamic axes that leave the spatial dims fixed")
        out.append((n + 2 * p[ax] - d[ax] * (k[ax] - 1) - 1) // s[ax] + 1)
    return out[0], out[1]


def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0,  # noqa: A002
           stride: Any = 1) -> Tensor:
    """``F.unfold``: ``(N, C, H, W)`` (or ``(C, H, W)``) -> ``(N, C*kh*kw, L)``, column
    ``c*kh*kw + i*kw + j`` holding input ``[c, oh*sh + i*dh - ph, ow*sw + j*dw - pw]`` of block
    ``l = oh*OW + ow`` (zero outside the image)."""
    x = T.as_tensor(input)
    if x.ndim not in (3, 4):
        raise RuntimeError(f"Input Error: Only unbatched (3D) or batched (4D) input Tensors are "
                           f"supported (got {x.ndim}D)")
    k, d, p, s = _params(kernel_size, dilation, padding, stride)
    batched = x.ndim == 4
    if not batched:
        x = x.unsqueeze(0)
    oh, ow = _blocks((x.shape[2], x.shape[3]), k, d, p, s)
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input with spatial size ({x.shape[2]}, {x.shape[3]}), "
                           f"kernel_size={k}, dilation={d}, padding={p}, calculated shape of "
                           f"the array of sliding blocks as ({oh}, {ow}), but its components "
                           "must be at least one.")
    if p != (0, 0):
        x = T.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])])
    ek = [d[ax] * (k[ax] - 1) + 1 for ax in range(2)]
    # windows along H, then W: [N, C, OH, OW, ekh, ekw]; dilation keeps every d-th tap
    w = x.unfold(2, ek[0], s[0]).unfold(3, ek[1], s[1])
    if d != (1, 1):
        w = w[..., ::d[0], ::d[1]]
    n, c = w.shape[0], w.shape[1]
    out = w.permute(0, 1, 4, 5, 2, 3).reshape(n, c * k[0] * k[1], oh * ow)
    return out if batched else out.squeeze(0)


def fold(input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1,  # noqa: A002
         padding: Any = 0, stride: Any = 1) -> Tensor:
    """``F.fold``: ``(N, C*kh*kw, L)`` (or ``(C*kh*kw, L)``) -> ``(N, C, H, W)``, every block
    element added into its place (overlaps sum), the adjoint of ``unfold``."""
    x = T.as_tensor(input)
    if x.ndim not in (2, 3):
        raise RuntimeError(f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are "
                           f"supported (got {x.ndim}D)")
    size = _pair(output_size, "output_size")
    k, d, p, s = _params(kernel_size, dilation, padding, stride)
    batched = x.ndim == 3
    if not batched:
        x = x.unsqueeze(0)
    cols, length = x.shape[1], x.shape[2]
    kk = k[0] * k[1]
    if not isinstance(cols, int) or cols % kk:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the "
                           f"product of kernel_size, but got input.size(1)={cols} and "
                           f"kernel_size={k}")
    oh, ow = _blocks(size, k, d, p, s)
    if length != oh * ow:
        raise RuntimeError(f"Given output_size={size}, kernel_size={k}, dilation={d}, "
                           f"padding={p}, stride={s}, expected size of input's dimension 2 to "
                           f"match the calculated number of sliding blocks {oh} * {ow} = "
                           f"{oh * ow}, but got input.size(2)={length}.")
    c = cols // kk
    hp, wp = size[0] + 2 * p[0], size[1] + 2 * p[1]
    # the flat padded position of block element (i, j) of block (bh, bw)
    i = np.arange(k[0])[:, None, None, None]
    j = np.arange(k[1])[None, :, None, None]
    bh = np.arange(oh)[None, None, :, None]
    bw = np.arange(ow)[None, None, None, :]
    pos = ((bh * s[0] + i * d[0]) * wp + bw * s[1] + j * d[1]).reshape(1, 1, kk * oh * ow)
    n = x.shape[0]
    src = x.reshape(n, c, kk * oh * ow)
    index = T.as_tensor(pos.astype(np.int64)).expand(n, c, kk * oh * ow)
    flat = full_like(src[..., :1], 0).expand(n, c, hp * wp)
    out = flat.scatter_add(2, index, src).reshape(n, c, hp, wp)
    out = out[:, :, p[0]:p[0] + size[0], p[1]:p[1] + size[1]]
    return out if batched else out.squeeze(0)


__all__ = ["fold", "unfold", "pixel_shuffle", "pixel_unshuffle"]


def _shuffle_input(input: Any, factor: int, what: str, kind: str) -> tuple[Tensor, int, list]:
    """``(x, r, [*lead, C, H, W])`` after the checks ATen's pixel (un)shuffle make."""
    x = T.as_tensor(input)
    r = int(factor)
    if x.ndim < 3:
        raise RuntimeError(f"{what} expects input to have at least 3 dimensions, but got input "
                           f"with {x.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"{what} expects a positive {kind}, but got {r}")
    return x, r, list(x.shape)


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:  # noqa: A002
    """``F.pixel_shuffle``: ``[*, C r^2, H, W] -> [*, C, H r, W r]``, a reshape and a permute
    (as ATen's own ``pixel_shuffle``)."""
    x, r, (*lead, c, h, w) = _shuffle_input(input, upscale_factor, "pixel_shuffle",
                                            "upscale_factor")
    if not isinstance(c, int) or c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c}"
                           f" is not divisible by {r * r}")
    n = len(lead)
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    perm = list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2]
    return y.permute(*perm).reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:  # noqa: A002
    """``F.pixel_unshuffle``: ``pixel_shuffle``'s inverse, ``[*, C, H r, W r] -> [*, C r^2, H,
    W]``."""
    x, r, (*lead, c, h, w) = _shuffle_input(input, downscale_factor, "pixel_unshuffle",
                                            "downscale_factor")
    for name, axis, v in (("height", -2, h), ("width", -1, w)):
        if not isinstance(v, int) or v % r:
            raise RuntimeError(f"pixel_unshuffle expects {name} to be divisible by "
                               f"downscale_factor, but input.size({axis})={v} is not divisible "
                               f"by {r}")
    n = len(lead)
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    perm = list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3]
    return y.permute(*perm).reshape(*lead, c * r * r, h // r, w // r)
