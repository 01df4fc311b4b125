"""Volumetric (3-D) convolution and pooling, composed of the 2-D ops (``F.conv3d`` and friends).

graphc has no 3-D primitive: the depth is folded into the batch or the channels, so the IR,
the derivatives and both backends' kernels are those of the 2-D ops.

* ``conv3d``: for each depth tap ``kd`` the input planes that tap reads (a strided depth slice)
  are stacked into the batch, ``(N, m, C, H, W) -> (N*m, C, H, W)``, convolved by ``conv2d``
  with the weight's slice ``w[:, :, kd]``, and placed at the output depths they feed; the
  ``kD`` results are summed. Depth padding is never materialised: a tap only reads the planes
  that exist and its result is zero-padded (a view) to the output depth.
* ``conv_transpose3d``: the same decomposition over ``conv_transpose2d``; the tap's result for
  input plane ``d`` lands at output depth ``d*stride + kd*dilation - padding`` (zero rows
  interleaved for the stride, then padded into place).
* ``max_pool3d`` / ``avg_pool3d``: max and sum are separable, so a 2-D pool over ``(H, W)``
  (depth folded into the channels, ``(N, C*D, H, W)``) is followed by a 2-D pool with a
  ``(kD, 1)`` window over ``(D, Ho*Wo)``. PyTorch's window rules (padding, dilation,
  ceil mode, the divisor of ``count_include_pad``) are per dimension, and the two ``argmax``
  stages pick the first maximum in (d, h, w) order as PyTorch does, so the indices compose.
* adaptive average pools reduce one axis at a time (a reshape when the size divides,
  otherwise PyTorch's windows as a constant averaging matrix); adaptive max pools gather
  each whole window and keep the element ATen's loop keeps (``_fconv.adaptive_max``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import amp
from .. import tensor_ops as T
from ..ir import shapes as sh
from ..tensor import Tensor
from ._fconv import (
    _adaptive_matrix,
    _along,
    adaptive_max,
    avg_pool2d,
    conv2d,
    conv_transpose2d,
    max_pool2d,
)

Triple = tuple[int, int, int]


def triple(v: Any, what: str = "argument") -> Triple:
    """``3`` -> ``(3, 3, 3)``; a 1- or 3-element sequence as ATen's ``expand_param_if_needed``
    (any other length is PyTorch's RuntimeError)."""
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return (int(v[0]),) * 3
        if len(v) != 3:
            raise RuntimeError(f"expected {what} to be a single integer value or a list of 3 "
                               f"values to match the convolution dimensions, but got "
                               f"{what}={list(v)}")
        return int(v[0]), int(v[1]), int(v[2])
    return (int(v),) * 3


def _batched3d(x: Tensor, op: str) -> tuple[Tensor, bool]:
    if x.ndim == 4:
        return x.unsqueeze(0), True
    if x.ndim != 5:
        raise RuntimeError(f"Expected 4D (unbatched) or 5D (batched) input to {op}, but got "
                           f"input of size: {list(x.shape)}")
    return x, False


def _size(shape: Any) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _check_conv_args(st: Triple, dil: Triple, pads: Any, groups: int) -> None:
    if any(s <= 0 for s in st):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dil):
        raise RuntimeError("non-positive dilation is not supported")
    if any(p < 0 for p in pads):
        raise RuntimeError("negative padding is not supported")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")


def _check_weight(x: Tensor, w: Tensor, op: str) -> None:
    if w.ndim != 5:
        raise RuntimeError(f"{op}: expected a 5D weight, got weight of size {_size(w.shape)}")
    if w.dtype is not x.dtype:
        raise RuntimeError(f"{op}: input dtype {x.dtype.name} and weight dtype {w.dtype.name} "
                           "differ")


def _check_bias(bias: Any, w: Tensor, n: int) -> None:
    if bias is None:
        return
    b = T.as_tensor(bias)
    if b.ndim != 1 or int(b.shape[0]) != n:
        raise RuntimeError(f"Given weight of size {_size(w.shape)}, expected bias to be "
                           f"1-dimensional with {n} elements, but got bias of size "
                           f"{_size(b.shape)} instead")


def _place(y: Tensor, axis: int, before: int, total: int) -> Tensor:
    """``y`` zero-padded along ``axis`` so it starts at ``before`` in a dim of ``total``."""
    pads = [(0, 0)] * y.ndim
    pads[axis] = (before, total - before - int(y.shape[axis]))
    return T.pad(y, pads)


def _slice(x: Tensor, axis: int, start: int, stop: int, step: int = 1) -> Tensor:
    starts = [0] * x.ndim
    stops = list(x.shape)
    steps = [1] * x.ndim
    starts[axis], stops[axis], steps[axis] = start, stop, step
    return T.slice_dims(x, starts, stops, steps)


def _unreached(y: Tensor, depth: int) -> Tensor:
    """Zeros shaped as ``y`` (one tap's ``(N, C, H, W)`` result) repeated over ``depth``
    planes, for an output no input plane reaches: a ``where`` that never picks ``y``, so the
    input and weight still get their (zero) gradients, as in PyTorch."""
    never = T.as_tensor(np.zeros((1, 1, 1, 1), bool))
    z = T.where(never, y, T.as_tensor(0.0, y.dtype))
    return T.expand(z.unsqueeze(1), -1, depth, -1, -1, -1)


@amp.lower_precision
def conv3d(input: Any, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,  # noqa: A002
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """``torch.nn.functional.conv3d`` (padding an int, a triple, 'valid' or 'same'): ``kD``
    ``conv2d`` ops over the depth planes each tap reads, stacked into the batch, so the
    convolution kernels, their gradients and both backends are the 2-D ones."""
    x, unbatched = _batched3d(T.as_tensor(input), "conv3d")
    w = T.as_tensor(weight)
    _check_weight(x, w, "conv3d")
    st, dil, groups = triple(stride, "stride"), triple(dilation, "dilation"), int(groups)
    k = (int(w.shape[2]), int(w.shape[3]), int(w.shape[4]))
    pads: list[tuple[int, int]]
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * 3
        elif padding == "same":
            if st != (1, 1, 1):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            # PyTorch puts the odd element of an even total on the far side
            pads = [(d * (kk - 1) // 2, d * (kk - 1) - d * (kk - 1) // 2)
                    for d, kk in zip(dil, k)]
        else:
            raise RuntimeError(f"Invalid padding string: {padding!r}")
    else:
        pads = [(p, p) for p in triple(padding, "padding")]
    _check_conv_args(st, dil, [p for pr in pads for p in pr], groups)
    cin, cout = int(x.shape[1]), int(w.shape[0])
    if cout % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} "
                           f"at dimension 0, but got weight of size {_size(w.shape)} instead")
    if cin != int(w.shape[1]) * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {_size(w.shape)}, expected "
                           f"input{_size(x.shape)} to have {int(w.shape[1]) * groups} channels, "
                           f"but got {cin} channels instead")
    _check_bias(bias, w, cout)
    ins = [int(d) for d in x.shape[2:]]
    padded = [i + lo + hi for i, (lo, hi) in zip(ins, pads)]
    eff = [d * (kk - 1) + 1 for d, kk in zip(dil, k)]
    if any(e > p for e, p in zip(eff, padded)):
        raise RuntimeError(f"Calculated padded input size per channel: "
                           f"({' x '.join(map(str, padded))}). Kernel size: "
                           f"({' x '.join(map(str, eff))}). Kernel size can't be greater than "
                           "actual input size")
    outs = [(p - e) // s + 1 for p, e, s in zip(padded, eff, st)]
    d_in, d_out = ins[0], outs[0]
    xt = x.permute(0, 2, 1, 3, 4)  # (N, D, C, H, W): depth planes next to the batch
    (ph_lo, ph_hi), (pw_lo, pw_hi) = pads[1], pads[2]
    if ph_lo != ph_hi or pw_lo != pw_hi:  # 'same' with an even kernel: pad H, W here
        xt = T.pad(xt, [(0, 0), (0, 0), (0, 0), (ph_lo, ph_hi), (pw_lo, pw_hi)])
        hw_pad = (0, 0)
    else:
        hw_pad = (ph_lo, pw_lo)
    c, h, wd = cin, int(xt.shape[3]), int(xt.shape[4])
    out: Tensor | None = None
    for kd in range(k[0]):
        # output depth o reads input plane o*s + kd*dil - p_lo: keep the o where it exists
        off = kd * dil[0] - pads[0][0]
        o_lo = max(0, -(off // st[0]))
        o_hi = min(d_out - 1, (d_in - 1 - off) // st[0])
        if o_lo > o_hi:
            continue
        m = o_hi - o_lo + 1
        planes = _slice(xt, 1, o_lo * st[0] + off, o_hi * st[0] + off + 1, st[0])
        y = conv2d(planes.reshape(-1, c, h, wd), w[:, :, kd], None, st[1:], hw_pad, dil[1:],
                   groups)
        y = _place(y.reshape(-1, m, cout, int(y.shape[2]), int(y.shape[3])), 1, o_lo, d_out)
        out = y if out is None else out + y
    if out is None:  # every tap reads only padding (a dilated kernel over a thin input)
        out = _unreached(conv2d(_slice(xt, 1, 0, 1).reshape(-1, c, h, wd), w[:, :, 0], None,
                                st[1:], hw_pad, dil[1:], groups), d_out)
    out = out.permute(0, 2, 1, 3, 4)
    if bias is not None:
        out = out + T.as_tensor(bias).reshape(1, -1, 1, 1, 1)
    return out.squeeze(0) if unbatched else out


@amp.lower_precision
def conv_transpose3d(input: Any, weight: Tensor, bias: Tensor | None = None,  # noqa: A002
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
    """``torch.nn.functional.conv_transpose3d`` (weight ``(in, out/groups, kD, kH, kW)``):
    for each depth tap, ``conv_transpose2d`` of the input planes whose results land inside
    the output, spread to every ``stride``-th output depth and shifted to
    ``d*stride + kd*dilation - padding``; the taps' results summed."""
    x, unbatched = _batched3d(T.as_tensor(input), "conv_transpose3d")
    w = T.as_tensor(weight)
    _check_weight(x, w, "conv_transpose3d")
    st, pad = triple(stride, "stride"), triple(padding, "padding")
    opad, dil = triple(output_padding, "output_padding"), triple(dilation, "dilation")
    groups = int(groups)
    _check_conv_args(st, dil, pad, groups)
    if any(o < 0 for o in opad):
        raise RuntimeError("negative output_padding is not supported")
    if any(o >= s and o >= d for o, s, d in zip(opad, st, dil)):
        raise RuntimeError("output padding must be smaller than either stride or dilation, "
                           f"but got output_padding={opad}, stride={st}, dilation={dil}")
    cin = int(w.shape[0])
    if cin % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} "
                           f"at dimension 0, but got weight of size [{_size(w.shape)}] instead")
    if int(x.shape[1]) != cin:
        raise RuntimeError(f"Given transposed=1, weight of size {_size(w.shape)}, expected "
                           f"input{_size(x.shape)} to have {cin} channels, but got "
                           f"{x.shape[1]} channels instead")
    k = (int(w.shape[2]), int(w.shape[3]), int(w.shape[4]))
    ins = [int(d) for d in x.shape[2:]]
    outs = [(i - 1) * s - 2 * p + d * (kk - 1) + o + 1
            for i, s, p, d, kk, o in zip(ins, st, pad, dil, k, opad)]
    if min(outs) <= 0:
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, ins))}). "
                           f"Calculated output size per channel: "
                           f"({' x '.join(map(str, outs))}). Output size is too small")
    cout = int(w.shape[1]) * groups
    _check_bias(bias, w, cout)
    d_in, d_out, s = ins[0], outs[0], st[0]
    xt = x.permute(0, 2, 1, 3, 4)  # (N, D, C, H, W)
    h, wd = ins[1], ins[2]
    out: Tensor | None = None
    for kd in range(k[0]):
        # input plane d feeds output depth d*s + off: keep the planes landing inside
        off = kd * dil[0] - pad[0]
        d_lo = max(0, -(off // s))
        d_hi = min(d_in - 1, (d_out - 1 - off) // s)
        if d_lo > d_hi:
            continue
        m = d_hi - d_lo + 1
        planes = _slice(xt, 1, d_lo, d_hi + 1).reshape(-1, cin, h, wd)
        y = conv_transpose2d(planes, w[:, :, kd], None, st[1:], pad[1:], opad[1:], groups,
                             dil[1:])
        ho, wo = int(y.shape[2]), int(y.shape[3])
        y = y.reshape(-1, m, cout, ho, wo)
        if s > 1 and m > 1:  # interleave s - 1 zero planes: plane j lands at depth j*s
            y = T.pad(y.unsqueeze(2), [(0, 0), (0, 0), (0, s - 1), (0, 0), (0, 0), (0, 0)])
            y = _slice(y.reshape(-1, m * s, cout, ho, wo), 1, 0, (m - 1) * s + 1)
        out_y = _place(y, 1, d_lo * s + off, d_out)
        out = out_y if out is None else out + out_y
    if out is None:  # no input plane reaches the output: only the bias remains
        out = _unreached(conv_transpose2d(_slice(xt, 1, 0, 1).reshape(-1, cin, h, wd),
                                           w[:, :, 0], None, st[1:], pad[1:], opad[1:],
                                           groups, dil[1:]), d_out)
    out = out.permute(0, 2, 1, 3, 4)
    if bias is not None:
        out = out + T.as_tensor(bias).reshape(1, -1, 1, 1, 1)
    return out.squeeze(0) if unbatched else out


# -- pooling ----------------------------------------------------------------------------------
def _pool_triple(v: Any, op: str, what: str, must: str) -> Triple:
    """A pooling argument as PyTorch's ``max_pool3d``/``avg_pool3d`` parse it (one int or
    a 1- or 3-element sequence), with their RuntimeError for anything else."""
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return (int(v[0]),) * 3
        if len(v) == 3:
            return int(v[0]), int(v[1]), int(v[2])
        raise RuntimeError(f"{op}: {what} must {must} a single int, or a tuple of three ints")
    return (int(v),) * 3


def _pool3d_args(op: str, x: Tensor, kernel_size: Any, stride: Any, padding: Any,
                 dilation: Any, ceil_mode: bool) -> tuple[Triple, Triple, Triple, Triple,
                                                          list[int]]:
    """Kernel, stride, padding, dilation and output sizes, checked as PyTorch checks them."""
    either = "either be" if op == "max_pool3d" else "be"
    k = _pool_triple(kernel_size, op, "kernel_size", either)
    if stride is None or (isinstance(stride, (list, tuple)) and not stride):
        s = k
    else:
        s = _pool_triple(stride, op, "stride", "either be omitted," if op == "max_pool3d"
                         else "be omitted,")
    p = _pool_triple(padding, op, "padding", either)
    d = _pool_triple(dilation, op, "dilation", either)
    if any(v == 0 for v in s):
        raise RuntimeError("stride should not be zero")
    if any(v < 0 for v in s):
        raise RuntimeError(f"stride should be greater than zero, but got dT: {s[0]} dH: {s[1]} "
                           f"dW: {s[2]}")
    if any(v <= 0 for v in k):
        raise RuntimeError(f"kernel size should be greater than zero, but got kT: {k[0]} kH: "
                           f"{k[1]} kW: {k[2]}")
    if any(v <= 0 for v in d):
        raise RuntimeError(f"dilation should be greater than zero, but got dilationT: {d[0]} "
                           f"dilationH: {d[1]} dilationW: {d[2]}")
    if any(v < 0 for v in p):
        raise RuntimeError(f"pad must be non-negative, but got pad: {min(p)}")
    ins = [int(v) for v in x.shape[2:]]
    if op == "avg_pool3d" and any(i < kk for i, kk in zip(ins, k)):
        # ATen's ``pool3d_shape_check(check_input_size=true)``: the average pool refuses an
        # input smaller than its window in any dim, padding or not
        raise RuntimeError(f"input image (T: {ins[0]} H: {ins[1]} W: {ins[2]}) smaller than "
                           f"kernel size (kT: {k[0]} kH: {k[1]} kW: {k[2]})")
    if any(pp > kk // 2 for pp, kk in zip(p, k)):
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but "
                           f"got kT: {k[0]} kW: {k[2]} kH: {k[1]} padT: {p[0]} padW: {p[2]} "
                           f"padH: {p[1]}")
    outs = [int(sh.conv_out(i, kk, ss, pp, dd, bool(ceil_mode)))
            for i, kk, ss, pp, dd in zip(ins, k, s, p, d)]
    if min(outs) < 1:
        raise RuntimeError(f"Given input size: ({x.shape[1]}x{'x'.join(map(str, ins))}). "
                           f"Calculated output size: ({x.shape[1]}x"
                           f"{'x'.join(map(str, outs))}). Output size is too small")
    return k, s, p, d, outs


def _pool_input(x: Tensor) -> tuple[Tensor, bool]:
    if x.ndim == 4:
        return x.unsqueeze(0), True
    if x.ndim != 5:
        raise RuntimeError("non-empty 4D or 5D (batch mode) tensor expected for input")
    return x, False


def max_pool3d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,  # noqa: A002
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False
               ) -> Any:
    """``torch.nn.functional.max_pool3d``: ``max_pool2d`` over (H, W) with the depth folded
    into the channels, then over (D, Ho*Wo) with a ``(kD, 1)`` window. ``return_indices``
    gives PyTorch's flat ``D*H*W`` indices, composed from the two stages' argmaxes."""
    x, unbatched = _pool_input(T.as_tensor(input))
    k, s, p, d, outs = _pool3d_args("max_pool3d", x, kernel_size, stride, padding, dilation,
                                    ceil_mode)
    c, dd, h, w = (int(v) for v in x.shape[1:])
    v1, i1 = max_pool2d(x.reshape(-1, c * dd, h, w), k[1:], s[1:], p[1:], d[1:],
                        bool(ceil_mode), True)
    hw = outs[1] * outs[2]
    v2, i2 = max_pool2d(v1.reshape(-1, c, dd, hw), (k[0], 1), (s[0], 1), (p[0], 0),
                        (d[0], 1), bool(ceil_mode), True)
    vals = v2.reshape(-1, c, *outs)
    if not return_indices:
        return vals.squeeze(0) if unbatched else vals
    depth = i2 // hw  # the stage-2 index is depth * (Ho*Wo) + its own column
    plane = T.gather(i1.reshape(-1, c, dd, hw), 2, depth)
    idx = (depth * (h * w) + plane).reshape(-1, c, *outs)
    if unbatched:
        vals, idx = vals.squeeze(0), idx.squeeze(0)
    return vals, idx


def avg_pool3d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """``torch.nn.functional.avg_pool3d``: ``avg_pool2d`` over (H, W) with the depth folded
    into the channels, then over (D, Ho*Wo) with a ``(kD, 1)`` window. PyTorch's divisor
    is the product of the per-dim window counts, so the two stages' divisors compose; with
    ``divisor_override`` the first stage sums and the second divides."""
    x, unbatched = _pool_input(T.as_tensor(input))
    if divisor_override is not None and int(divisor_override) == 0:
        raise RuntimeError("divisor must be not zero")
    k, s, p, _, outs = _pool3d_args("avg_pool3d", x, kernel_size, stride, padding, 1,
                                    ceil_mode)
    c, dd, h, w = (int(v) for v in x.shape[1:])
    first = None if divisor_override is None else 1
    y = avg_pool2d(x.reshape(-1, c * dd, h, w), k[1:], s[1:], p[1:], bool(ceil_mode),
                   bool(count_include_pad), first)
    y = avg_pool2d(y.reshape(-1, c, dd, outs[1] * outs[2]), (k[0], 1), (s[0], 1), (p[0], 0),
                   bool(ceil_mode), bool(count_include_pad), divisor_override)
    y = y.reshape(-1, c, *outs)
    return y.squeeze(0) if unbatched else y


def _adaptive_sizes(x: Tensor, output_size: Any, message: str) -> list[int]:
    if isinstance(output_size, (list, tuple)):
        sizes = list(output_size)
        if len(sizes) == 1:
            sizes = sizes * 3
        if len(sizes) != 3:
            raise RuntimeError(message)
    else:
        sizes = [output_size] * 3
    outs = [int(x.shape[x.ndim - 3 + i]) if v is None else int(v) for i, v in enumerate(sizes)]
    if min(outs) <= 0:
        raise NotImplementedError(f"adaptive 3-D pooling to an output size of {outs}: empty "
                                  "results are not supported")
    return outs


def _adaptive_input(x: Tensor, op: str, sep: str) -> tuple[Tensor, bool]:
    if x.ndim == 4:
        return x.unsqueeze(0), True
    if x.ndim != 5:
        raise RuntimeError(f"{op}(): Expected 4D or 5D tensor, but got{sep} {list(x.shape)}")
    return x, False


def _split(x: Tensor, axis: int, n_out: int) -> Tensor:
    """``x`` with dim ``axis`` split into ``(n_out, size // n_out)`` windows."""
    shape = [-1 if a == 0 else int(v) for a, v in enumerate(x.shape)]
    shape[axis:axis + 1] = [n_out, int(x.shape[axis]) // n_out]
    return x.reshape(*shape)


def adaptive_avg_pool3d(input: Any, output_size: Any) -> Tensor:  # noqa: A002
    """``torch.nn.functional.adaptive_avg_pool3d``, one spatial dim at a time: a mean over
    equal windows when the output size divides the input size, otherwise PyTorch's windows
    ``[floor(i*in/out), ceil((i+1)*in/out))`` as a constant averaging matrix."""
    x, unbatched = _adaptive_input(T.as_tensor(input), "adaptive_avg_pool3d", "")
    outs = _adaptive_sizes(x, output_size, "adaptive_avg_pool3d: output_size must be 3")
    for axis, n_out in zip((2, 3, 4), outs):
        n_in = int(x.shape[axis])
        if n_in == n_out:
            continue
        if n_in % n_out == 0:
            x = _split(x, axis, n_out).mean(axis + 1)
        else:
            x = _along(x, axis, _adaptive_matrix(n_in, n_out))
    return x.squeeze(0) if unbatched else x


def adaptive_max_pool3d(input: Any, output_size: Any,  # noqa: A002
                        return_indices: bool = False) -> Any:
    """``torch.nn.functional.adaptive_max_pool3d``: ``max_pool3d`` when the output size
    divides the input size, otherwise ``adaptive_max`` (each window gathered whole, the
    winner ATen's loop keeps, the gradient to it alone); indices either way."""
    x, unbatched = _adaptive_input(T.as_tensor(input), "adaptive_max_pool3d", ":")
    outs = _adaptive_sizes(x, output_size,
                           "adaptive_max_pool3d(): internal error: output_size.size() must be 3")
    ins = [int(v) for v in x.shape[2:]]
    if all(i % o == 0 for i, o in zip(ins, outs)):
        kernel = tuple(i // o for i, o in zip(ins, outs))
        res = max_pool3d(x, kernel, kernel, return_indices=return_indices)
    else:
        res = adaptive_max(x, outs, return_indices)
    if unbatched:
        return tuple(r.squeeze(0) for r in res) if return_indices else res.squeeze(0)
    return res


__all__ = ["conv3d", "conv_transpose3d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool3d",
           "adaptive_max_pool3d", "triple"]
