"""Convolutions whose operands arrive through channels-last views.

ConvNeXt's block runs its depthwise convolution, then permutes the result to channels-last for
LayerNorm and the MLP (``dwconv(x).permute(0, 2, 3, 1)``), so the convolution's output
gradient comes back as a permuted view of a channels-last buffer. The weight gradient's
position-vector tiles read ``dY`` rows as vectors; the planner gives such an operand a
contiguous buffer of its own (``Kernel.unit_stride``). Before, the kernel fell back to the
element-by-element loops: 100 ms against 6 ms a call for ``8 x 96 x 56 x 56`` at 7x7, and a
ConvNeXt stage went from 1.09x PyTorch eager's speed to 1.89x (Zen 4, one thread). Whole
ConvNeXt training steps are checked against PyTorch in ``tests/test_nets.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn

torch = pytest.importorskip("torch")
F = gc.nn.functional


def _kernels(fn: Any) -> list[str]:
    """The kernel lines of ``ir("fused")`` (``k0: %0 = permute : ...``)."""
    return [ln for ln in fn.ir("fused").splitlines() if ln.split(":")[0][1:].isdigit()
            and ln.startswith("k")]


def _wgrad_fn(w: Any, groups: int, x: np.ndarray, gy: np.ndarray) -> Any:
    @gc.compile(example_args=(x, gy))
    def wgrad(a: Any, g: Any) -> Any:
        w.grad = None
        (F.conv2d(a, w, padding=3, groups=groups).permute(0, 2, 3, 1) * g).sum().backward()
        return w.grad

    return wgrad


def _torch_wgrad(w0: np.ndarray, groups: int, x: np.ndarray, gy: np.ndarray) -> np.ndarray:
    tw = torch.from_numpy(w0.copy()).requires_grad_()
    y = torch.nn.functional.conv2d(torch.from_numpy(x), tw, padding=3, groups=groups)
    (y.permute(0, 2, 3, 1) * torch.from_numpy(gy)).sum().backward()
    return tw.grad.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_weight_grad_reads_a_contiguous_copy(dtype: type) -> None:
    """The permuted ``dY`` of a depthwise weight gradient becomes a buffer of its own, which
    the weight gradient reads; values equal PyTorch's at two batch sizes, one compile."""
    rng = np.random.default_rng(0)
    c = 24
    w0 = rng.standard_normal((c, 1, 7, 7)).astype(dtype)
    w = nn.Parameter(gc.from_numpy(w0.copy()))
    x = rng.standard_normal((3, c, 13, 11)).astype(dtype)
    gy = rng.standard_normal((3, 13, 11, c)).astype(dtype)
    fn = _wgrad_fn(w, c, x, gy)
    ks = _kernels(fn)
    assert len(ks) == 2, ks
    assert "= permute :" in ks[0] and "= conv2d_weight_grad :" in ks[1], ks
    reads = [ln.strip() for ln in fn.ir("fused").splitlines() if ln.strip().startswith("reads")]
    assert reads[1].startswith("reads: %0"), reads  # the weight gradient reads the copy
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for n in (3, 1):
        got = np.asarray(fn(x[:n], gy[:n]))
        ref = _torch_wgrad(w0, c, x[:n], gy[:n])
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
    assert fn.compile_count == 1


def test_channel_vector_weight_grad_reads_the_view_in_place() -> None:
    """A weight gradient on channel vectors (enough output channels a group) transposes
    ``dY`` itself: the permuted view is read in place, no copy is planned."""
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((32, 8, 7, 7)).astype(np.float32)
    w = nn.Parameter(gc.from_numpy(w0.copy()))
    x = rng.standard_normal((2, 8, 12, 12)).astype(np.float32)
    gy = rng.standard_normal((2, 12, 12, 32)).astype(np.float32)
    fn = _wgrad_fn(w, 1, x, gy)
    ks = _kernels(fn)
    assert len(ks) == 1 and "= conv2d_weight_grad :" in ks[0], ks
    ref = _torch_wgrad(w0, 1, x, gy)
    np.testing.assert_allclose(np.asarray(fn(x, gy)), ref, rtol=1e-4,
                               atol=1e-4 * np.abs(ref).max())
