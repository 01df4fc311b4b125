"""Spatial-transformer sampling in tensor operations: ``affine_grid`` and ``grid_sample``.

``affine_grid`` is a constant base grid (PyTorch's ``linspace`` of pixel centres or corners)
times the transposed thetas: one ``matmul``. ``grid_sample`` follows ATen's vectorised CPU
kernel (``aten/src/ATen/native/cpu/GridSamplerKernel.cpp``) step by step, written as index
arithmetic and one ``gather`` over the flattened image:

- a grid coordinate is unnormalised to a pixel position, then clipped (``border``) or
  reflected and clipped (``reflection``), each with ``where`` so that the derivative is
  ATen's: a position on or beyond a border gets none, a reflected one changes sign;
- the corner (or tap) positions are ``floor``/``rint`` of it, detached; a tap outside the
  image reads 0 (``zeros`` padding), through a ``where`` on a clamped, in-range index;
- the interpolation weights are functions of the fractional part, so the grid's gradient is
  the derivative of the weights (ATen's closed forms, by the chain rule), and the input's
  gradient is the ``scatter_add`` that ``gather``'s derivative already is.

Bilinear, nearest and bicubic modes are supported on 4-D inputs; 5-D (volumetric) inputs and
3-D affine grids raise ``NotImplementedError``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .. import amp
from .. import tensor_ops as T
from ..ir import dtypes as dt
from ..tensor import Tensor

_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to "
                  "align_corners=False since 1.3.0. Please specify align_corners=True if the "
                  "old behavior is desired. See the documentation of grid_sample for details.")


def _fmt(shape: Any) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


# -- affine_grid -------------------------------------------------------------------------------
def _linspace_from_neg_one(steps: int, align_corners: bool, npd: Any) -> np.ndarray:
    """ATen's ``linspace_from_neg_one``: ``linspace(-1, 1, steps)`` (its kernel: the first half
    counts up from -1, the second down from 1), scaled by ``(steps - 1) / steps`` to pixel
    centres without ``align_corners``; a single step is 0."""
    if steps <= 1:
        return np.zeros(1, npd)
    f = npd.type
    step = (f(1) - f(-1)) / f(steps - 1)
    i = np.arange(steps)
    up = f(-1) + step * i.astype(npd)
    down = f(1) - step * (steps - 1 - i).astype(npd)
    r = np.where(i < steps // 2, up, down).astype(npd)
    if not align_corners:
        r = (r * f(steps - 1) / f(steps)).astype(npd)
    return r


@amp.lower_precision
def affine_grid(theta: Any, size: Any, align_corners: bool | None = None) -> Tensor:
    """``torch.nn.functional.affine_grid`` for 2-D transforms: an (N, H, W, 2) grid of the
    (x, y) positions that ``theta`` (N, 2, 3) maps the output pixels of ``size`` (N, C, H, W)
    to. Under autocast it runs in bfloat16, as PyTorch's (whose ``bmm`` is autocast)."""
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, UserWarning, stacklevel=2)
        align_corners = False
    th = T.as_tensor(theta)
    if not th.dtype.is_float:
        raise ValueError(f"Expected theta to have floating point type, but got {th.dtype.name}")
    size = list(size)
    if len(size) == 4:
        if th.ndim != 3 or th.shape[-2] != 2 or th.shape[-1] != 3:
            raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                             f"{tuple(size)}. Got {tuple(th.shape)}.")
        spatial = size[-2:]
    elif len(size) == 5:
        if th.ndim != 3 or th.shape[-2] != 3 or th.shape[-1] != 4:
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size "
                             f"{tuple(size)}. Got {tuple(th.shape)}.")
        spatial = size[-3:]
    else:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {tuple(size)}.")
    static = [int(d) for d in size if isinstance(d, (int, np.integer))]
    if align_corners and min(int(d) for d in spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size "
                      "grids when align_corners=True. This is not an intended use case of "
                      "affine_grid. See the documentation of affine_grid for details.",
                      UserWarning, stacklevel=2)
    elif static and min(static) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {tuple(size)}")
    if len(size) == 5:
        raise NotImplementedError("affine_grid: 3-D affine grids (a 5-D size and Nx3x4 thetas) "
                                  "are not supported; 2-D ones (a 4-D size, Nx2x3 thetas) are")
    n, h, w = size[0], int(size[2]), int(size[3])
    nt = th.shape[0]
    if isinstance(n, (int, np.integer)) and isinstance(nt, int) and int(n) != nt:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{int(n)}, 3] but got: [{nt}, 3].")
    npd = np.float64 if th.dtype is dt.float64 else np.float32
    npd = np.dtype(npd)
    base = np.empty((h, w, 3), npd)
    base[..., 0] = _linspace_from_neg_one(w, align_corners, npd)
    base[..., 1] = _linspace_from_neg_one(h, align_corners, npd)[:, None]
    base[..., 2] = 1
    b = T.as_tensor(base.reshape(h * w, 3))
    if b.dtype is not th.dtype:
        b = b.to(th.dtype)
    # (H*W, 3) @ (N, 3, 2): the base grid broadcasts over the (possibly symbolic) batch
    return T.matmul(b, th.transpose(1, 2)).reshape(nt, h, w, 2)


# -- grid_sample -------------------------------------------------------------------------------
def _unnormalize(c: Tensor, size: int, align_corners: bool) -> Tensor:
    """[-1, 1] to pixel positions: corner-pixel centres with ``align_corners``, the image's
    outer edges without (ATen's vectorised ``unnormalize``)."""
    if align_corners:
        return (c + 1.0) * ((size - 1) / 2)
    return (c + 1.0) * (size / 2) - 0.5


def _clip(c: Tensor, size: int) -> Tensor:
    """Clamp to [0, size - 1]; NaN goes to 0, and a position on a border (or beyond it) gets
    no gradient, as ATen's ``clip_coordinates_get_grad``."""
    hi = float(size - 1)
    return T.where(c > 0, T.where(c < hi, c, hi), 0.0)


def _reflect(c: Tensor, size: int, align_corners: bool) -> Tensor:
    """Reflect about the border (corner centres with ``align_corners``, outer edges without)
    until inside, as ATen's ``reflect_coordinates``: the fold count is a ``trunc`` (no
    gradient), the sign of the derivative flips once per reflection."""
    if align_corners:
        if size <= 1:
            return T.as_tensor(0.0, c.dtype).expand(*c.shape)
        low, twice_span = 0.0, float(2 * (size - 1))
    else:
        low, twice_span = -0.5, float(2 * size)
    t = c - low if low else c
    a = T.where(t < 0, -t, t)
    flips = T.unary("trunc", a / twice_span).detach()
    extra = a - flips * twice_span
    reflected = twice_span - extra
    r = T.where(extra > reflected, reflected, extra)
    return r + low if low else r


def _pad_coords(c: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    """ATen's ``compute_coordinates``: nothing for zeros, clip for border, reflect and clip
    for reflection."""
    if padding_mode == "border":
        return _clip(c, size)
    if padding_mode == "reflection":
        return _clip(_reflect(c, size, align_corners), size)
    return c


def _read(flat: Tensor, taps: list[tuple[Tensor, Tensor]], h: int, w: int) -> list[Tensor]:
    """Values of ``flat`` (N, C, H*W) at each tap (integral float x, y of shape (N, L)); 0 where
    a tap lies outside the image. One ``gather`` for all taps; its index is clamped into the
    image, so the native bounds check never fires on a position that reads 0."""
    n, c = flat.shape[0], flat.shape[1]
    idx, ok = [], []
    for x, y in taps:
        inside = (x > -1) & (x < w) & (y > -1) & (y < h)
        xi = T.where(inside, x, 0.0).to(dt.int64)
        yi = T.where(inside, y, 0.0).to(dt.int64)
        idx.append(yi * w + xi)
        ok.append(inside)
    k = len(taps)
    length = taps[0][0].shape[1]
    index = T.cat(idx, 1) if k > 1 else idx[0]
    index = index.unsqueeze(1).expand(n, c, k * length)
    vals = T.gather(flat, 2, index).reshape(n, c, k, length)
    inside = (T.cat(ok, 1) if k > 1 else ok[0]).reshape(n, 1, k, length)
    vals = T.where(inside, vals, 0.0)
    return [vals[:, :, i] for i in range(k)]


_CUBIC_A = -0.75  # ATen's cubic convolution parameter (as in UpSampleBicubic2d)


def _cubic_coefficients(t: Tensor) -> list[Tensor]:
    """ATen's ``get_cubic_coefficients`` for taps at -1, 0, 1, 2 from a fraction ``t``."""
    a = _CUBIC_A
    x0, x3 = t + 1.0, 2.0 - t
    x1, x2 = t, 1.0 - t

    def far(x: Tensor) -> Tensor:  # 1 < |x| < 2
        return ((x * a - 5 * a) * x + 8 * a) * x - 4 * a

    def near(x: Tensor) -> Tensor:  # |x| <= 1
        return (x * (a + 2) - (a + 3)) * x * x + 1.0

    return [far(x0), near(x1), near(x2), far(x3)]


def _check_grid_sampler(x: Tensor, g: Tensor, mode: str) -> None:
    """ATen's ``check_grid_sampler_common`` and the 4-D / 5-D checks, in its order."""
    if x.dtype is not g.dtype:
        raise RuntimeError(f"expected scalar type {_torch_name(x.dtype)} but found "
                           f"{_torch_name(g.dtype)}")
    if x.ndim < 1 or g.ndim < 1 or x.shape[0] != g.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, "
                           f"but got input with sizes {_fmt(x.shape)} and grid with sizes "
                           f"{_fmt(g.shape)}")
    if g.shape[-1] != x.ndim - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {x.ndim - 2} in last "
                           f"dimension, but got grid with sizes {_fmt(g.shape)}")
    for i in range(2, x.ndim):
        if isinstance(x.shape[i], int) and x.shape[i] <= 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial "
                               f"dimensions, but input has sizes {_fmt(x.shape)} with "
                               f"dimension {i} being empty")
    if x.ndim == 4:
        if g.ndim != 4:
            raise RuntimeError(f"grid_sampler(): expected 4D input and grid with same number "
                               f"of dimensions, but got input with sizes {_fmt(x.shape)} and "
                               f"grid with sizes {_fmt(g.shape)}")
    else:
        if x.ndim != 5 or g.ndim != 5:
            raise RuntimeError(f"grid_sampler(): expected 5D input and grid with same number "
                               f"of dimensions, but got input with sizes {_fmt(x.shape)} and "
                               f"grid with sizes {_fmt(g.shape)}")
        if mode == "bicubic":
            raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
        raise NotImplementedError("grid_sample: 5-D (volumetric) inputs are not supported; "
                                  "4-D inputs (N, C, H, W) with (N, H_out, W_out, 2) grids are")
    if not x.dtype.is_float:
        raise NotImplementedError(f'"grid_sampler_2d_cpu_kernel_impl" not implemented for '
                                  f"'{_torch_name(x.dtype)}'")


def _torch_name(d: dt.DType) -> str:
    return {"float32": "Float", "float64": "Double", "bfloat16": "BFloat16",
            "float16": "Half", "int64": "Long", "int32": "Int", "bool": "Bool"}.get(
                d.name, d.name)


@amp.float32_op
@T.in_float32
def grid_sample(input: Any, grid: Any, mode: str = "bilinear", padding_mode: str = "zeros",  # noqa: A002
                align_corners: bool | None = None) -> Tensor:
    """``torch.nn.functional.grid_sample`` on 4-D inputs: ``out[n, c, i, j]`` samples
    ``input[n, c]`` at the position ``grid[n, i, j]`` ((x, y) in [-1, 1]) with bilinear,
    nearest (ties to even, as ATen's ``round``) or bicubic interpolation, and ``zeros``,
    ``border`` or ``reflection`` padding. Gradients reach the input and the grid as ATen's
    (none to the grid in nearest mode: it gets zeros)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, UserWarning, stacklevel=3)
        align_corners = False
    x, g = T.as_tensor(input), T.as_tensor(grid)
    _check_grid_sampler(x, g, mode)
    n, c, h, w = x.shape
    h, w = int(h), int(w)
    ho, wo = g.shape[1], g.shape[2]
    length = ho * wo
    gx = g[..., 0].reshape(n, length)
    gy = g[..., 1].reshape(n, length)
    flat = x.reshape(n, c, h * w)
    if mode == "bicubic":
        out = _bicubic(flat, gx, gy, h, w, padding_mode, align_corners)
    else:
        ix = _pad_coords(_unnormalize(gx, w, align_corners), w, padding_mode, align_corners)
        iy = _pad_coords(_unnormalize(gy, h, align_corners), h, padding_mode, align_corners)
        if mode == "nearest":
            out = _nearest(flat, ix, iy, h, w)
        else:
            out = _bilinear(flat, ix, iy, h, w)
    return out.reshape(n, c, ho, wo)


def _bilinear(flat: Tensor, ix: Tensor, iy: Tensor, h: int, w: int) -> Tensor:
    """Four corners weighted by the opposite areas, summed in ATen's order."""
    x0 = T.unary("floor", ix).detach()
    y0 = T.unary("floor", iy).detach()
    we = ix - x0  # distance to the west side
    e = 1.0 - we
    no = iy - y0  # distance to the north side
    s = 1.0 - no
    nw, ne, sw, se = (t.unsqueeze(1) for t in (s * e, s * we, no * e, no * we))
    x1, y1 = x0 + 1.0, y0 + 1.0
    v_nw, v_ne, v_sw, v_se = _read(flat, [(x0, y0), (x1, y0), (x0, y1), (x1, y1)], h, w)
    return v_nw * nw + v_ne * ne + v_sw * sw + v_se * se


def _nearest(flat: Tensor, ix: Tensor, iy: Tensor, h: int, w: int) -> Tensor:
    """The pixel at the rounded position (half to even). The grid gets a zero gradient, as
    ATen gives it: the rounded positions enter through ``rint``, whose derivative is 0."""
    xr = T.unary("rint", ix)
    yr = T.unary("rint", iy)
    (v,) = _read(flat, [(xr.detach(), yr.detach())], h, w)
    inside = (xr > -1) & (xr < w) & (yr > -1) & (yr < h)
    link = T.where(inside, xr + yr, 0.0).unsqueeze(1) * 0.0  # finite: 0, gradient 0
    return v + link


def _bicubic(flat: Tensor, gx: Tensor, gy: Tensor, h: int, w: int, padding_mode: str,
             align_corners: bool) -> Tensor:
    """Sixteen taps around the unnormalised position, each tap's position padded on its own
    (ATen's ``get_value_bounded``), cubic-convolution weighted along x, then along y."""
    x = _unnormalize(gx, w, align_corners)
    y = _unnormalize(gy, h, align_corners)
    x0 = T.unary("floor", x).detach()
    y0 = T.unary("floor", y).detach()
    cx = _cubic_coefficients(x - x0)
    cy = _cubic_coefficients(y - y0)
    xs = [_pad_coords(x0 + float(j - 1), w, padding_mode, align_corners) for j in range(4)]
    ys = [_pad_coords(y0 + float(i - 1), h, padding_mode, align_corners) for i in range(4)]
    vals = _read(flat, [(xs[j], ys[i]) for i in range(4) for j in range(4)], h, w)
    cx = [t.unsqueeze(1) for t in cx]
    cy = [t.unsqueeze(1) for t in cy]
    rows = [cx[0] * vals[4 * i] + cx[1] * vals[4 * i + 1] + cx[2] * vals[4 * i + 2]
            + cx[3] * vals[4 * i + 3] for i in range(4)]
    return cy[0] * rows[0] + cy[1] * rows[1] + cy[2] * rows[2] + cy[3] * rows[3]
