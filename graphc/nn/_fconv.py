"""Convolution and pooling in tensor operations (the bodies of ``F.conv2d`` and friends).

``conv2d`` is one IR primitive (with its two adjoints for the backward pass). Max pooling is
``pool_argmax`` (PyTorch's window index rule) followed by a ``gather`` of the winners, so its
backward is the argmax-based scatter that ``gather``'s VJP already is. Average pooling is a
depthwise ``conv2d`` with a ones kernel over the zero-padded input, divided by a divisor built
from ``iota`` (so ceil-mode and ``count_include_pad`` windows need no per-element branches).
"""

from __future__ import annotations

from typing import Any

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
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise RuntimeError(f"pad should be at most half of effective kernel size, but got "
                           f"pad={p}, kernel_size={k}")
    return k, s, p


def max_pool2d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False
               ) -> Any:
    """Max pooling; ``return_indices`` gives PyTorch's flat (H*W) indices."""
    x, unbatched = _batched(T.as_tensor(input), "max_pool2d")
    k, s, p = _pool_args(kernel_size, stride, padding)
    d = pair(dilation, "dilation")
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
    n, c, h, w = x.shape
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
