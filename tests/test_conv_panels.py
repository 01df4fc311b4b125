"""The channel-vector convolution tiles: the weight packed in panels, the forward's flat grid.

Where a convolution's output channels fill a vector and its maps are small (``by_channels``
in ``codegen.conv``: ResNet's strided 3x3 layers, every layer of its last stages), each
register tile is a few output positions times a few vectors of channels. Its weight is
packed in panels of the tile's channels (``[channel tile][k][channels]``), so a tile reads
one contiguous stream; the forward's panels are the weight's rows transposed in registers
(``gemm.pack_b_transposed``) when those rows are contiguous, else copied element by element.
The forward copies each image into one zero-bordered grid (``FlatGrid``) instead of stride
phases, and the strided input gradient's phase GEMMs read panels too.

Each case checks the output and both gradients against PyTorch in float64 (8 lanes) and the
forward in float32 (16 lanes), with channel counts that leave the last panel partly filled,
groups, a stride, dilation, batch 1, and a weight seen through a transposed view.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphc as gc
import graphc.nn.functional as F
from graphc import nn

torch = pytest.importorskip("torch")

CASES = [
    # (in, out, kernel, stride, padding, dilation, groups, map size, batch)
    (32, 40, 3, 2, 1, 1, 1, 14, 3),  # 40 channels: the last panel partly used
    (64, 96, 3, 2, 1, 1, 2, 12, 2),  # two groups of 48
    (48, 64, 3, 1, 2, 2, 1, 7, 1),  # dilation, batch 1
    (24, 72, 5, 2, 2, 1, 1, 13, 2),
    (128, 64, 1, 2, 0, 1, 1, 14, 2),
]


def _convs(fn: Any) -> list[str]:
    return [ln.strip() for ln in fn.ir("fused").splitlines()
            if ln.strip().startswith(("conv:", "conv input grad:", "conv weight grad:"))]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("cin,cout,k,s,p,d,g,hw,n", CASES)
def test_channel_vector_convolutions_match_torch(cin: int, cout: int, k: int, s: int, p: int,
                                                 d: int, g: int, hw: int, n: int,
                                                 transposed: bool) -> None:
    rng = np.random.default_rng(cin * cout + k)
    w = rng.standard_normal((cout, cin // g, k, k)) / np.sqrt(cin * k * k / g)
    x = rng.standard_normal((n, cin, hw, hw))
    wp = nn.Parameter(gc.from_numpy(w.copy()))
    xp = nn.Parameter(gc.from_numpy(x.copy()))

    def weight(t: Any) -> Any:
        # a transposed view: the weight's rows are not contiguous, the panels are copied
        # element by element (values identical for a square kernel's transpose of itself)
        return t.transpose(2, 3) if transposed else t

    @gc.compile
    def step() -> Any:
        wp.grad = None
        xp.grad = None
        y = F.conv2d(xp, weight(wp), stride=s, padding=p, dilation=d, groups=g)
        (y * y).sum().backward()
        return y

    got = np.asarray(step())
    tw = torch.from_numpy(w.copy()).requires_grad_()
    tx = torch.from_numpy(x.copy()).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, weight(tw), stride=s, padding=p, dilation=d, groups=g)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(got, ty.detach().numpy(), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(xp.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(wp.grad.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-10)
    fwd = next(c for c in _convs(step) if c.startswith("conv:"))
    assert "channel vectors (the weight in panels of" in fwd, fwd
    assert "zero-bordered grid" in fwd, fwd

    # float32: 16 lanes, so other panel widths and partial panels
    w32, x32 = w.astype(np.float32), x.astype(np.float32)
    wq = gc.from_numpy(w32)

    @gc.compile
    def fwd32(a: Any) -> Any:
        with gc.no_grad():
            return F.conv2d(a, weight(wq), stride=s, padding=p, dilation=d, groups=g)

    got32 = np.asarray(fwd32(gc.from_numpy(x32)))
    want = torch.nn.functional.conv2d(torch.from_numpy(x), weight(torch.from_numpy(w)),
                                      stride=s, padding=p, dilation=d, groups=g).numpy()
    scale = np.abs(want).max()
    np.testing.assert_allclose(got32, want, rtol=0, atol=2e-6 * scale * np.sqrt(cin * k * k))

