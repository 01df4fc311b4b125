"""3x3 convolutions that batched Winograd runs, on the implicit GEMM at small batches.

Batched Winograd (``codegen.wino_gemm``) transforms the whole filter bank on every call:
16 planes of ``U``, 16 MB for 512 -> 512. On small maps with many channels (ResNet's last
stage, 7x7) a batch of one or two does not save that much work, so the kernel holds both
paths and picks the channel-vector implicit GEMM below ``conv.wino_min_batch`` images
(measured at batch 1, 512 -> 512 on 7x7, one Zen 4 thread: forward 50 -> 78 GFLOP/s, input
gradient 49 -> 86). One compiled step serves both sides of the threshold (the batch is
symbolic), with the epilogue the planner fused into the convolution.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from graphc.codegen import conv

import graphc as gc
from graphc import nn

torch = pytest.importorskip("torch")


def test_threshold_from_the_work_saved() -> None:
    # 512 -> 512 on 7x7: 185 multiply-adds saved per image and channel pair, so batch 3
    p = conv.Problem(1, 512, 512, 7, 7, 1, 1, 3, 3, 1, 1, 1, 1, 7, 7, 16)
    assert conv.wino_min_batch(p) == 3
    # 14x14 saves 980 an image: Winograd from batch 1
    p = conv.Problem(1, 256, 256, 14, 14, 1, 1, 3, 3, 1, 1, 1, 1, 14, 14, 16)
    assert conv.wino_min_batch(p) == 1


def test_both_paths_match_torch_in_one_compiled_step() -> None:
    gc.manual_seed(0)
    # 64 channels on 5x5 maps: 81 multiply-adds saved per image, Winograd from batch 7
    gm = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                       nn.Conv2d(64, 64, 3, padding=1)).double()
    tm = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
                             torch.nn.Conv2d(64, 64, 3, padding=1)).double()
    tm.load_state_dict({n: torch.from_numpy(np.array(v)) for n, v in gm.state_dict().items()})
    params = list(gm.parameters())

    @gc.compile
    def step(x: Any) -> Any:
        for p in params:
            p.grad = None
        y = gm(x)
        (y * y).sum().backward()
        return y

    # every batch's images are the first of one set, so the leading images' results show
    # which path ran: the implicit GEMM's and Winograd's sums round differently
    xs = np.random.default_rng(0).standard_normal((9, 64, 5, 5))
    first: dict[int, np.ndarray] = {}
    for batch in (2, 9, 1, 7, 6):
        x = xs[:batch].copy()
        got = np.asarray(step(gc.from_numpy(x)))
        first[batch] = got[:1].copy()
        for p in tm.parameters():
            p.grad = None
        ty = tm(torch.from_numpy(x))
        (ty * ty).sum().backward()
        np.testing.assert_allclose(got, ty.detach().numpy(), rtol=1e-10, atol=1e-10,
                                   err_msg=f"batch {batch}")
        for (name, p), tp in zip(gm.named_parameters(), tm.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-9,
                                       atol=1e-9, err_msg=f"{name}, batch {batch}")
    assert step.compile_count == 1
    # below 7 images the implicit GEMM (each image's values whatever the batch), from 7 on
    # Winograd: the same image's values differ in the last bits between the two sides
    for small, large in ((1, 2), (6, 2)):
        np.testing.assert_array_equal(first[small], first[large])
    np.testing.assert_array_equal(first[7], first[9])
    assert not np.array_equal(first[2], first[9])
    text = step.ir("fused")
    assert text.count("below 7 images: the implicit GEMM") == 3, text
