"""Convolution and pooling in tensor operations (the bodies of ``F.conv2d`` and friends).

``conv2d`` is one IR primitive (with its two adjoints for the backward pass). Max pooling is
``pool_argmax`` (PyTorch's window index rule) followed by a ``gather`` of the winners, so its
backward is the argmax-based scatter that ``gather``'s VJP already is. Average pooling is a
depthwise ``conv2d`` with a ones kernel over the zero-padded input, divided by a divisor built
from ``iota`` (so ceil-mode and ``count_include_pad`` windows need no per-element branches).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import amp
from .. import tensor_ops as T
from ..ir import shapes as sh
from ..tensor import Tensor, builder


def pair(v: Any, what: str = "argument") -> tuple[int, int]:
    """``3`` -> ``(3, 3)``; ``(2, 3)`` stays (PyTorch's ``_pair``)."""
    if isinstance(v, (tuple, list)):
        if len(v) == 1:
            return int(v[0]), int(v[0])
        if len(v) != 2:
            raise ValueError(f"{what}: expected an int or a pair, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _batched(x: Tensor, op: str) -> tuple[Tensor, bool]:
    if x.ndim == 3:
        return x.unsqueeze(0), True
    if x.ndim != 4:
        raise RuntimeError(f"{op}: expected 3D (unbatched) or 4D (batched) input, got shape "
                           f"{tuple(x.shape)}")
    return x, False


@amp.lower_precision
def conv2d(input: Any, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """``torch.nn.functional.conv2d`` (padding may be an int, a pair, 'valid' or 'same')."""
    x, unbatched = _batched(T.as_tensor(input), "conv2d")
    w = T.as_tensor(weight)
    if w.dtype is not x.dtype:
        raise RuntimeError(f"conv2d: input dtype {x.dtype.name} and weight dtype "
                           f"{w.dtype.name} differ")
    st, dil = pair(stride, "stride"), pair(dilation, "dilation")
    kh, kw = int(w.shape[2]), int(w.shape[3])
    if isinstance(padding, str):
        if padding == "valid":
            pad = (0, 0)
        elif padding == "same":
            if st != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            pads = []
            for d, k in zip(dil, (kh, kw)):
                total = d * (k - 1)
                pads.append((total // 2, total - total // 2))
            if any(lo != hi for lo, hi in pads):  # even kernels: PyTorch pads the extra at the end
                x = T.pad(x, [(0, 0), (0, 0)] + pads)
                pad = (0, 0)
            else:
                pad = (pads[0][0], pads[1][0])
        else:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             "{'valid', 'same'}")
    else:
        pad = pair(padding, "padding")
    if not sh.same(x.shape[1], w.shape[1] * groups):
        raise RuntimeError(
            f"conv2d: expected input {tuple(x.shape)} to have {w.shape[1] * groups} channels "
            f"(weight {tuple(w.shape)}, groups={groups}), but got {x.shape[1]} channels")
    out = Tensor._wrap(builder().op("conv2d", (x.node, w.node), stride=st, padding=pad,
                                    dilation=dil, groups=int(groups)))
    if bias is not None:
        out = out + T.as_tensor(bias).reshape(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


def _pool_args(kernel_size: Any, stride: Any, padding: Any) -> tuple[tuple, tuple, tuple]:
    k = pair(kernel_size, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) \
        else pair(stride, "stride")
    p = pair(padding, "padding")
    return k, s, p


def _c_half(v: int) -> int:
    """``v / 2`` in C++ (truncated toward zero), as ATen's checks divide."""
    return -(-v // 2) if v < 0 else v // 2


def pool_checks(x: Tensor, k: tuple, s: tuple, p: tuple, d: tuple, ceil_mode: bool) -> None:
    """The argument errors ATen's 2-D max and average pools raise, in its order and words
    (``pooling_output_shape`` per dim, then ``pool2d_shape_check``), raised before the pool
    is built: a zero stride, a zero dilation or an empty output would otherwise divide by
    zero here or give an empty or wrong result. ``x`` is batched (N, C, H, W)."""
    for i in range(2):
        if s[i] == 0:
            raise RuntimeError("stride should not be zero")
        if p[i] < 0:
            raise RuntimeError(f"pad must be non-negative, but got pad: {p[i]}")
        if p[i] > _c_half((k[i] - 1) * d[i] + 1):
            raise RuntimeError(f"pad should be at most half of effective kernel size, but "
                               f"got pad={p[i]}, kernel_size={k[i]} and dilation={d[i]}")
    if min(k) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {k[0]} "
                           f"kW: {k[1]}")
    if min(s) <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: {s[0]} "
                           f"dW: {s[1]}")
    if min(d) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: "
                           f"{d[0]} dilationW: {d[1]}")
    if _c_half(k[1]) < p[1] or _c_half(k[0]) < p[0]:
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but "
                           f"got padW = {p[1]}, padH = {p[0]}, kW = {k[1]}, kH = {k[0]}")
    ins = list(x.shape[2:])
    if not all(isinstance(v, int) for v in ins):
        return
    outs = [sh.conv_out(ins[i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2)]
    if min(outs) < 1:
        c = sh.fmt_dim(x.shape[1])
        raise RuntimeError(f"Given input size: ({c}x{ins[0]}x{ins[1]}). Calculated output "
                           f"size: ({c}x{outs[0]}x{outs[1]}). Output size is too small")


def _no_empty_windows(x: Tensor, k: tuple[int, int], s: tuple[int, int],
                      p: tuple[int, int], d: tuple[int, int], ceil_mode: bool) -> None:
    """Raise where a max-pool window holds no element of the input. That takes a dilation:
    its taps can step over a map smaller than the padding plus the dilation (kernel 2,
    dilation 2, padding 1 on a 1x1 map: taps at -1 and 1). PyTorch returns -inf there with
    the index of a position outside the window, and its backward adds the window's
    gradient at that index: to an unrelated element, or past the end of the input. graphc
    does not reproduce that, and says so before anything runs (else its index check
    would stop the step with an out-of-range index)."""
    if d == (1, 1):
        return
    for axis, name in ((0, "row"), (1, "column")):
        size = x.shape[2 + axis]
        if not isinstance(size, int):
            continue  # a symbolic map: the gather's index check stops the step instead
        out = sh.conv_out(size, k[axis], s[axis], p[axis], d[axis], ceil_mode)
        # a window whose first tap lies in the map is not empty: only those starting in the
        # padding before it (o*s < p) or past it (o*s >= p + size) need their taps checked,
        # a few, where checking every window was a Python loop over the map per eager call
        before = min(out, -(-p[axis] // s[axis]))
        after = max(before, min(out, -(-(p[axis] + size) // s[axis])))
        for o in (*range(before), *range(after, out)):
            first = o * s[axis] - p[axis]
            if not any(0 <= first + u * d[axis] < size for u in range(k[axis])):
                raise NotImplementedError(
                    f"max_pool2d: the window of output {name} {o} holds no element of the "
                    f"input (size {size}, kernel_size={k[axis]}, stride={s[axis]}, "
                    f"padding={p[axis]}, dilation={d[axis]}); PyTorch returns -inf there "
                    "with an index outside the window, which graphc does not reproduce")


def max_pool2d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False
               ) -> Any:
    """Max pooling; ``return_indices`` gives PyTorch's flat (H*W) indices."""
    x, unbatched = _batched(T.as_tensor(input), "max_pool2d")
    k, s, p = _pool_args(kernel_size, stride, padding)
    d = pair(dilation, "dilation")
    pool_checks(x, k, s, p, d, ceil_mode)
    _no_empty_windows(x, k, s, p, d, ceil_mode)
    b = builder()
    idx = Tensor._wrap(b.op("pool_argmax", (x.node,), kernel=k, stride=s, padding=p,
                            dilation=d, ceil_mode=bool(ceil_mode)))
    n, c, h, w = x.shape
    oh, ow = idx.shape[2:]
    flat = x.reshape(n, c, h * w)
    vals = T.gather(flat, 2, idx.reshape(n, c, oh * ow)).reshape(n, c, oh, ow)
    if unbatched:
        vals, idx = vals.squeeze(0), idx.squeeze(0)
    return (vals, idx) if return_indices else vals


def _window_counts(size: int, out: int, k: int, s: int, p: int, include_pad: bool,
                   like: Tensor, axis: int) -> Tensor:
    """Per output position along one axis: the number of window elements PyTorch divides by."""
    shape = [1, 1, 1, 1]
    shape[axis] = out
    i = Tensor._wrap(builder().op("iota", (), shape=tuple(shape), dtype=like.dtype, axis=axis))
    start = i * s - p
    end = T.binary("minimum", start + k, float(size + p))
    if include_pad:
        return end - start
    return T.binary("minimum", end, float(size)) - T.binary("maximum", start, 0.0)


def avg_pool2d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """Average pooling as a depthwise ones-kernel ``conv2d`` divided by the window counts."""
    x, unbatched = _batched(T.as_tensor(input), "avg_pool2d")
    k, s, p = _pool_args(kernel_size, stride, padding)
    pool_checks(x, k, s, p, (1, 1), ceil_mode)
    n, c, h, w = x.shape
    if p == (0, 0) and (h, w) == k:
        # one window over the whole map (global average pooling, ``AdaptiveAvgPool2d(1)``):
        # a sum over the two spatial dims. As a depthwise strided convolution its input
        # gradient had one phase per window position (64 GEMMs written out for an 8x8 map:
        # the largest kernel of a ResNet-18 step and 0.3 CPU-s of its compile)
        total = x.sum((2, 3), keepdim=True)
        out = total / float(divisor_override if divisor_override is not None else h * w)
        return out.squeeze(0) if unbatched else out
    if (p == (0, 0) and s == k and all(isinstance(d, int) for d in (c, h, w))
            and h % k[0] == 0 and w % k[1] == 0 and x.dtype.name in ("float32", "float64")):
        # windows that tile the map (``AvgPool2d(2)`` on even sizes, ``AdaptiveAvgPool2d``
        # dividing its input): sums over two dims of a reshape, whose input gradient is a
        # broadcast. As a depthwise convolution the input gradient was one GEMM per window
        # position (256 for 16x16 windows): measured on a Zen 4 core, forward and backward
        # on [8, 64, 112, 112], AdaptiveAvgPool2d(7) 15.9 -> 4.5 ms, AvgPool2d(2) 13.0 ->
        # 9.1 ms (PyTorch 8.8 and 27.2 ms). Not for bf16: each sum would round to bf16,
        # where PyTorch rounds the average once
        total = x.reshape(n, c, h // k[0], k[0], w // k[1], k[1]).sum(5).sum(3)
        out = total / float(divisor_override if divisor_override is not None else k[0] * k[1])
        return out.squeeze(0) if unbatched else out
    outs = [sh.conv_out(sz, k[i], s[i], p[i], 1, ceil_mode) for i, sz in enumerate((h, w))]
    right = [max(0, (outs[i] - 1) * s[i] + k[i] - sz - p[i]) for i, sz in enumerate((h, w))]
    xp = T.pad(x, [(0, 0), (0, 0), (p[0], right[0]), (p[1], right[1])])
    ones = Tensor._wrap(builder().const(1.0, (int(c), 1, k[0], k[1]), x.dtype))
    total = conv2d(xp, ones, None, s, 0, 1, int(c))
    if divisor_override is not None:
        out = total / float(divisor_override)
    else:
        dh = _window_counts(h, outs[0], k[0], s[0], p[0], count_include_pad, x, 2)
        dw = _window_counts(w, outs[1], k[1], s[1], p[1], count_include_pad, x, 3)
        out = total / (dh * dw)
    return out.squeeze(0) if unbatched else out


# -- one-dimensional forms, transposed convolution, adaptive pooling, interpolation ----------
def single(v: Any, what: str = "argument") -> int:
    """``3`` -> ``3``; ``(3,)`` -> ``3`` (PyTorch's ``_single``)."""
    if isinstance(v, (tuple, list)):
        if len(v) != 1:
            raise ValueError(f"{what}: expected an int or a 1-tuple, got {v!r}")
        return int(v[0])
    return int(v)


def _batched1d(x: Tensor, op: str) -> tuple[Tensor, bool]:
    if x.ndim == 2:
        return x.unsqueeze(0), True
    if x.ndim != 3:
        raise RuntimeError(f"{op}: expected 2D (unbatched) or 3D (batched) input, got shape "
                           f"{tuple(x.shape)}")
    return x, False


@amp.lower_precision
def conv1d(input: Any, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """``torch.nn.functional.conv1d``: ``conv2d`` over a unit height."""
    x, unbatched = _batched1d(T.as_tensor(input), "conv1d")
    w = T.as_tensor(weight)
    if w.ndim != 3:
        raise RuntimeError(f"conv1d: expected a 3D weight, got shape {tuple(w.shape)}")
    pad = padding if isinstance(padding, str) else (0, single(padding, "padding"))
    out = conv2d(x.unsqueeze(2), w.unsqueeze(2), bias, (1, single(stride, "stride")), pad,
                 (1, single(dilation, "dilation")), groups).squeeze(2)
    return out.squeeze(0) if unbatched else out


@amp.lower_precision
def conv_transpose2d(input: Any, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1) -> Tensor:
    """``torch.nn.functional.conv_transpose2d``: the input gradient of ``conv2d`` with the
    weight (PyTorch's layout ``(in, out/groups, kH, kW)`` is conv2d's ``(out, in/groups, ..)``
    seen from the other side). Every ``output_padding`` PyTorch allows, including
    ``stride <= output_padding < dilation``."""
    x, unbatched = _batched(T.as_tensor(input), "conv_transpose2d")
    w = T.as_tensor(weight)
    if w.dtype is not x.dtype:
        raise RuntimeError(f"conv_transpose2d: input dtype {x.dtype.name} and weight dtype "
                           f"{w.dtype.name} differ")
    if w.ndim != 4:
        raise RuntimeError(f"conv_transpose2d: expected a 4D weight, got shape {tuple(w.shape)}")
    st, pad = pair(stride, "stride"), pair(padding, "padding")
    opad, dil = pair(output_padding, "output_padding"), pair(dilation, "dilation")
    groups = int(groups)
    for o, s, d in zip(opad, st, dil):
        if o >= s and o >= d:
            raise RuntimeError("output padding must be smaller than either stride or dilation, "
                               f"but got output_padding={opad}, stride={st}, dilation={dil}")
    if not sh.same(x.shape[1], w.shape[0]):
        raise RuntimeError(f"conv_transpose2d: expected input {tuple(x.shape)} to have "
                           f"{w.shape[0]} channels (weight {tuple(w.shape)}), but got "
                           f"{x.shape[1]} channels")
    if int(w.shape[0]) % groups:
        raise RuntimeError(f"conv_transpose2d: {w.shape[0]} input channels are not divisible "
                           f"by groups={groups}")
    k = (int(w.shape[2]), int(w.shape[3]))
    hw = [(int(x.shape[2 + i]) - 1) * st[i] - 2 * pad[i] + dil[i] * (k[i] - 1) + opad[i] + 1
          for i in range(2)]
    if min(hw) < 0:
        raise RuntimeError(f"Given input size per channel: ({int(x.shape[2])} x "
                           f"{int(x.shape[3])}). Calculated output size per channel: "
                           f"({hw[0]} x {hw[1]}). Output size is too small")
    if min(hw) == 0:
        raise NotImplementedError(f"conv_transpose2d: an empty output (size {tuple(hw)}, which "
                                  f"PyTorch returns as an empty tensor) is not supported")
    shape = (x.shape[0], int(w.shape[1]) * groups, hw[0], hw[1])
    # ``output_padding >= stride`` (which a larger dilation allows): a convolution of the
    # result has ``output_padding // stride`` more rows (columns) than ``x``; they get zero
    # gradients, so ``x`` padded with that many zero rows at the end is its gradient
    extra = [o // s for o, s in zip(opad, st)]
    if any(extra):
        x = T.pad(x, [(0, 0), (0, 0), (0, extra[0]), (0, extra[1])])
    out = Tensor._wrap(builder().op("conv2d_input_grad", (x.node, w.node), input_shape=shape,
                                    stride=st, padding=pad, dilation=dil, groups=groups))
    if bias is not None:
        out = out + T.as_tensor(bias).reshape(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


@amp.lower_precision
def conv_transpose1d(input: Any, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1) -> Tensor:
    """``torch.nn.functional.conv_transpose1d``: ``conv_transpose2d`` over a unit height."""
    x, unbatched = _batched1d(T.as_tensor(input), "conv_transpose1d")
    w = T.as_tensor(weight)
    if w.ndim != 3:
        raise RuntimeError(f"conv_transpose1d: expected a 3D weight, got shape "
                           f"{tuple(w.shape)}")
    out = conv_transpose2d(x.unsqueeze(2), w.unsqueeze(2), bias,
                           (1, single(stride, "stride")), (0, single(padding, "padding")),
                           (0, single(output_padding, "output_padding")), groups,
                           (1, single(dilation, "dilation"))).squeeze(2)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """``torch.nn.functional.avg_pool1d``: ``avg_pool2d`` over a unit height."""
    x, unbatched = _batched1d(T.as_tensor(input), "avg_pool1d")
    k = single(kernel_size, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) \
        else single(stride, "stride")
    out = avg_pool2d(x.unsqueeze(2), (1, k), (1, s), (0, single(padding, "padding")),
                     ceil_mode, count_include_pad).squeeze(2)
    return out.squeeze(0) if unbatched else out


def max_pool1d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False
               ) -> Any:
    """``torch.nn.functional.max_pool1d``: ``max_pool2d`` over a unit height."""
    x, unbatched = _batched1d(T.as_tensor(input), "max_pool1d")
    k = single(kernel_size, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and not stride) \
        else single(stride, "stride")
    vals, idx = max_pool2d(x.unsqueeze(2), (1, k), (1, s), (0, single(padding, "padding")),
                           (1, single(dilation, "dilation")), ceil_mode, True)
    vals, idx = vals.squeeze(2), idx.squeeze(2)
    if unbatched:
        vals, idx = vals.squeeze(0), idx.squeeze(0)
    return (vals, idx) if return_indices else vals


def _const(arr: np.ndarray) -> Tensor:
    return T.as_tensor(np.ascontiguousarray(arr))


def _along(x: Tensor, axis: int, m: np.ndarray) -> Tensor:
    """``x`` with dim ``axis`` mapped through the (out, in) matrix ``m``."""
    nd = x.ndim
    perm = [a for a in range(nd) if a != axis] + [axis]
    inv = [0] * nd
    for i, p in enumerate(perm):
        inv[p] = i
    y = T.matmul(x.permute(*perm), _const(m.T.astype(x.dtype.np)))
    return y.permute(*inv)


def _take(x: Tensor, axis: int, idx: np.ndarray) -> Tensor:
    """``x`` indexed along ``axis`` by the constant int array ``idx`` (a ``gather``)."""
    shape = [1] * x.ndim
    shape[axis] = len(idx)
    full = list(x.shape)
    full[axis] = len(idx)
    i = _const(np.asarray(idx, np.int64).reshape(shape))
    return T.gather(x, axis, T.expand(i, *full))


def _adaptive_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Rows average PyTorch's windows ``[floor(i·in/out), ceil((i+1)·in/out))``."""
    m = np.zeros((n_out, n_in), np.float64)
    for i in range(n_out):
        a, b = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
        m[i, a:b] = 1.0 / (b - a)
    return m


def _out_sizes(x: Tensor, output_size: Any, nd: int) -> list[int]:
    sizes = list(output_size) if isinstance(output_size, (list, tuple)) \
        else [output_size] * nd
    if len(sizes) != nd:
        raise ValueError(f"output_size must have {nd} elements, got {output_size!r}")
    return [int(x.shape[x.ndim - nd + i]) if s is None else int(s) for i, s in enumerate(sizes)]


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Tensor:
    """``torch.nn.functional.adaptive_avg_pool2d``: an ``avg_pool2d`` when the output divides
    the input, otherwise a constant averaging matrix along each spatial dim."""
    x = T.as_tensor(input)
    if x.ndim not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d: expected 3D or 4D input, got shape "
                           f"{tuple(x.shape)}")
    outs = _out_sizes(x, output_size, 2)
    ins = [int(x.shape[x.ndim - 2]), int(x.shape[x.ndim - 1])]
    if all(o > 0 and i % o == 0 for i, o in zip(ins, outs)):
        k = tuple(i // o for i, o in zip(ins, outs))
        return avg_pool2d(x, k, k)
    for ax, (i, o) in enumerate(zip(ins, outs)):
        x = _along(x, x.ndim - 2 + ax, _adaptive_matrix(i, o))
    return x


def adaptive_avg_pool1d(input: Any, output_size: Any) -> Tensor:
    """``torch.nn.functional.adaptive_avg_pool1d``."""
    x = T.as_tensor(input)
    if x.ndim not in (2, 3):
        raise RuntimeError(f"adaptive_avg_pool1d: expected 2D or 3D input, got shape "
                           f"{tuple(x.shape)}")
    return adaptive_avg_pool2d(x.unsqueeze(-2), (1, single(output_size, "output_size"))
                               ).squeeze(-2)


def window_winner(g: Tensor) -> Tensor:
    """Per window (the last dim of ``g``, in ATen's scan order): the position ATen's max-pool
    loops keep (``val > maxVal || isnan(val)`` from ``-inf``): the last NaN if any, else
    the first maximum (an all ``-inf`` window keeps its first element). One integer
    ``amax`` of a key that ranks NaNs above maxima, later NaNs and earlier maxima first.
    Gathering the value from there sends the whole gradient to that one element, as ATen's
    index-based backward does (``amax`` splits it among tied maxima)."""
    k = int(g.shape[-1])
    j = T.as_tensor(np.arange(k, dtype=np.int64).reshape((1,) * (g.ndim - 1) + (k,)))
    hit = g == T.amax(g, -1, keepdim=True)
    key = T.where(g != g, j + k, T.where(hit, (k - 1) - j, -1))
    best = T.amax(key, -1, keepdim=True)
    return T.where(best >= k, best - k, (k - 1) - best)


def adaptive_max(x: Tensor, outs: list[int], return_indices: bool) -> Any:
    """Adaptive max pooling over the last ``len(outs)`` dims of ``x`` (static sizes), as
    ATen's ``adaptive_max_pool{1,2,3}d`` kernels compute it: each output's window
    ``[floor(i·in/out), ceil((i+1)·in/out))`` per dim, scanned in row-major order, keeps
    the last NaN or else the first maximum (``window_winner``); the index is the flat
    position in the pooled plane (``h * W + w`` in 2-D). Every window is gathered from the
    flattened plane through a constant table (windows shorter than the longest repeat
    their last position, after the real ones, so the winner is unchanged), and the value
    is gathered once more from the winner's position: the gradient reaches that one
    element."""
    nd = len(outs)
    ins = [int(v) for v in x.shape[x.ndim - nd:]]
    lead = list(x.shape[:x.ndim - nd])
    per_dim = []
    for n_in, n_out in zip(ins, outs):
        starts = [(i * n_in) // n_out for i in range(n_out)]
        ends = [-(-((i + 1) * n_in) // n_out) for i in range(n_out)]
        width = max([e - b for b, e in zip(starts, ends)], default=1)
        per_dim.append(np.array([[min(b + j, e - 1) for j in range(width)]
                                 for b, e in zip(starts, ends)], np.int64).reshape(n_out,
                                                                                  width))
    strides = [int(np.prod(ins[d + 1:], dtype=np.int64)) for d in range(nd)]
    # table[o_1..o_nd, j_1..j_nd] = sum_d per_dim[d][o_d, j_d] * stride_d, then flattened
    # to (outputs, window) with the window dims in row-major order
    table = np.zeros([*outs, *[t.shape[1] for t in per_dim]], np.int64)
    for d, t in enumerate(per_dim):
        shape = [1] * (2 * nd)
        shape[d], shape[nd + d] = t.shape
        table = table + (t * strides[d]).reshape(shape)
    n_out_all = int(np.prod(outs, dtype=np.int64))
    table = table.reshape(n_out_all, int(np.prod([t.shape[1] for t in per_dim])))
    plane = int(np.prod(ins, dtype=np.int64))
    flat = x.reshape(*lead, plane)
    g = _take(flat, len(lead), table.reshape(-1)).reshape(*lead, n_out_all, table.shape[1])
    win = window_winner(g)
    pos = T.gather(T.as_tensor(table).expand(*lead, n_out_all, table.shape[1]), len(lead) + 1,
                   win).squeeze(-1)
    vals = T.gather(flat, len(lead), pos).reshape(*lead, *outs)
    return (vals, pos.reshape(*lead, *outs)) if return_indices else vals


def adaptive_max_pool2d(input: Any, output_size: Any, return_indices: bool = False) -> Any:
    """``torch.nn.functional.adaptive_max_pool2d``: a ``max_pool2d`` when the output divides
    the input, otherwise ``adaptive_max`` (the windows gathered, the winner ATen's loop
    keeps, the gradient to it alone; indices included)."""
    x = T.as_tensor(input)
    if x.ndim not in (3, 4):
        raise RuntimeError(f"adaptive_max_pool2d: expected 3D or 4D input, got shape "
                           f"{tuple(x.shape)}")
    outs = _out_sizes(x, output_size, 2)
    ins = [int(x.shape[x.ndim - 2]), int(x.shape[x.ndim - 1])]
    if all(o > 0 and i % o == 0 for i, o in zip(ins, outs)):
        k = tuple(i // o for i, o in zip(ins, outs))
        return max_pool2d(x, k, k, return_indices=return_indices)
    return adaptive_max(x, outs, return_indices)


def _src_index(n_in: int, n_out: int, scale: float | None, align_corners: bool,
               cubic: bool = False) -> np.ndarray:
    """PyTorch's ``area_pixel_compute_source_index`` for every output position (float32);
    ``cubic`` keeps the negative positions near the start (the cubic kernel reads its
    clamped neighbours there)."""
    f = np.float32
    dst = np.arange(n_out, dtype=f)
    if align_corners:
        s = f(n_in - 1) / f(n_out - 1) if n_out > 1 else f(0)
        return s * dst
    s = f(1.0 / scale) if scale is not None and scale > 0 else f(n_in) / f(n_out)
    src = s * (dst + f(0.5)) - f(0.5)
    return src if cubic else np.maximum(src, f(0))


_CUBIC_A = np.float32(-0.75)  # PyTorch's (and OpenCV's) cubic convolution parameter


def _cubic_matrix(n_in: int, n_out: int, scale: float | None,
                  align_corners: bool) -> np.ndarray:
    """The (out, in) matrix of PyTorch's bicubic upsampling along one axis: four taps at
    ``floor(src) - 1 .. floor(src) + 2``, clamped into the input (border replication),
    weighted by ``get_cubic_upsample_coefficients`` in float32."""
    f, a = np.float32, _CUBIC_A
    src = _src_index(n_in, n_out, scale, align_corners, cubic=True)
    i0 = np.floor(src).astype(np.int64)
    t = (src - i0.astype(f)).astype(f)

    def conv1(x: np.ndarray) -> np.ndarray:  # |x| <= 1
        return ((a + f(2)) * x - (a + f(3))) * x * x + f(1)

    def conv2(x: np.ndarray) -> np.ndarray:  # 1 < |x| < 2
        return ((a * x - f(5) * a) * x + f(8) * a) * x - f(4) * a

    w = [conv2(t + f(1)), conv1(t), conv1(f(1) - t), conv2(f(1) - t + f(1))]
    m = np.zeros((n_out, n_in), np.float64)
    rows = np.arange(n_out)
    for k in range(4):
        np.add.at(m, (rows, np.clip(i0 - 1 + k, 0, n_in - 1)), w[k].astype(np.float64))
    return m


def _linear_matrix(n_in: int, n_out: int, scale: float | None,
                   align_corners: bool) -> np.ndarray:
    """The (out, in) matrix of PyTorch's linear interpolation along one axis. A dim whose
    size does not change is copied, whatever ``scale_factor`` says (ATen's
    ``compute_source_index_and_lambda``: 2 rows at ``scale_factor=1.3`` stay 2 rows, read
    as they are, not resampled at 1/1.3)."""
    if n_out == n_in:
        return np.eye(n_in)
    src = _src_index(n_in, n_out, scale, align_corners)
    i0 = np.floor(src).astype(np.int64)
    i0 = np.minimum(i0, n_in - 1)
    i1 = np.where(i0 < n_in - 1, i0 + 1, i0)
    l1 = src - i0.astype(np.float32)
    l0 = np.float32(1) - l1
    m = np.zeros((n_out, n_in), np.float64)
    np.add.at(m, (np.arange(n_out), i0), l0)
    np.add.at(m, (np.arange(n_out), i1), l1)
    return m


def _nearest_index(n_in: int, n_out: int, scale: float | None, exact: bool) -> np.ndarray:
    f = np.float32
    s = f(1.0 / scale) if scale is not None and scale > 0 else f(n_in) / f(n_out)
    dst = np.arange(n_out, dtype=f)
    if exact:
        idx = np.floor((dst + f(0.5)) * s)
    else:
        if n_out == n_in:
            return np.arange(n_out)
        if n_out == 2 * n_in:
            return np.arange(n_out) >> 1
        idx = np.floor(dst * s)
    return np.minimum(idx.astype(np.int64), n_in - 1)


_INTERP_RANK = {"nearest": None, "nearest-exact": None, "linear": 1, "bilinear": 2,
                "bicubic": 2, "trilinear": 3, "area": None}


@amp.no_autocast
def interpolate(input: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """``torch.nn.functional.interpolate``: constant gathers (nearest, nearest-exact) or
    constant matrices (linear, bilinear, trilinear; bicubic's four clamped taps; area's
    adaptive averages), one spatial dim after the other.

    One deliberate difference: bicubic with a ``scale_factor`` that leaves every size as it
    is (2 rows at 1.3) resamples in PyTorch's forward but copies the gradient in its
    backward (``upsample_bicubic2d_backward``'s same-size shortcut; its ``gradcheck``
    fails). graphc's gradient is the forward's adjoint (finite differences agree to 4e-10),
    so there, and only there, the input gradients differ."""
    x = T.as_tensor(input)
    if mode not in _INTERP_RANK:
        raise ValueError(f"interpolate: unknown mode {mode!r}")
    if antialias:
        if mode not in ("bilinear", "bicubic"):
            raise ValueError("Anti-alias option is restricted to bilinear and bicubic modes "
                             "and requires a 4-D tensor as input")
        raise NotImplementedError(f"interpolate: mode={mode!r} with antialias=True is not "
                                  "supported")
    nd = x.ndim - 2
    if nd < 1:
        raise ValueError(f"interpolate: expected an input with a batch and a channel dim and "
                         f"at least one spatial dim, got shape {tuple(x.shape)}")
    want = _INTERP_RANK[mode]
    if want is not None and nd != want:
        raise NotImplementedError(f"interpolate: mode={mode!r} expects {want + 2}D input, got "
                                  f"{x.ndim}D")
    if mode.startswith("nearest") or mode == "area":
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    ins = [int(d) for d in x.shape[2:]]
    if (size is None) == (scale_factor is None):
        raise ValueError("either size or scale_factor should be defined, not both"
                         if size is not None else "either size or scale_factor should be "
                         "defined")
    scales: list[float | None]
    if size is not None:
        outs = list(size) if isinstance(size, (list, tuple)) else [size] * nd
        if len(outs) != nd:
            raise ValueError(f"Input and output must have the same number of spatial "
                             f"dimensions, but got input with spatial dimensions of {ins} and "
                             f"output size of {list(outs)}.")
        outs = [int(o) for o in outs]
        scales = [None] * nd
    else:
        sf = list(scale_factor) if isinstance(scale_factor, (list, tuple)) \
            else [scale_factor] * nd
        if len(sf) != nd:
            raise ValueError(f"Input and scale_factor must have the same number of spatial "
                             f"dimensions, but got input with spatial dimensions of {ins} and "
                             f"scale_factor of shape {list(sf)}.")
        outs = [int(math.floor(float(i) * float(s))) for i, s in zip(ins, sf)]
        scales = [None if recompute_scale_factor else float(s) for s in sf]
    if any(o <= 0 for o in outs):
        raise RuntimeError(f"interpolate: output size {outs} must be positive")
    for ax in range(nd):
        axis = 2 + ax
        if mode.startswith("nearest"):
            idx = _nearest_index(ins[ax], outs[ax], scales[ax], mode == "nearest-exact")
            if not np.array_equal(idx, np.arange(ins[ax])):
                x = _take(x, axis, idx)
        elif mode == "area":  # adaptive average pooling to the output size
            if outs[ax] != ins[ax]:
                x = _along(x, axis, _adaptive_matrix(ins[ax], outs[ax]))
        elif mode == "bicubic":
            x = _along(x, axis, _cubic_matrix(ins[ax], outs[ax],
                                              None if align_corners else scales[ax],
                                              bool(align_corners)))
        elif outs[ax] != ins[ax]:  # (linear modes copy a dim of unchanged size)
            m = _linear_matrix(ins[ax], outs[ax], None if align_corners else scales[ax],
                               bool(align_corners))
            x = _along(x, axis, m)
    return x


def upsample(input: Any, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    """``torch.nn.functional.upsample`` (the older name of ``interpolate``)."""
    return interpolate(input, size, scale_factor, mode, align_corners)
