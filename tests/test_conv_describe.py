"""``ir("fused")`` names the kernel every convolution runs as (``codegen.matmul.describe``,
``codegen.conv.describe``): the path, in the order the conv kernel tries them, with its
layout and register tile, and a debug build's bounds-checked direct loops."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

import graphc as gc
from graphc import nn, optim


def _conv_kernels(text: str) -> list[tuple[str, list[str]]]:
    """(op, description lines) of every convolution kernel in a fused-IR dump."""
    out: list[tuple[str, list[str]]] = []
    for block in re.split(r"\n(?=k\d+: )", text):
        m = re.match(r"k\d+: %\d+ = (conv2d\w*) ", block)
        if m:
            out.append((m.group(1), [ln.strip() for ln in block.splitlines()[1:]
                                     if ln.strip().startswith("conv")]))
    return out


def _step_ir(cin: int, mid: int, size: int, k: int, stride: Any, padding: int,
             groups: int = 1, debug: bool = False) -> dict[str, list[str]]:
    """Two convolutions (3x3 ``cin -> mid``, then the one under test), trained: every
    direction of the second one runs. Returns op -> the descriptions of its kernels."""
    gc.manual_seed(0)
    c1 = nn.Conv2d(cin, mid, 3, padding=1, bias=False)
    c2 = nn.Conv2d(mid, mid, k, stride=stride, padding=padding, groups=groups, bias=False)
    opt = optim.SGD(list(c1.parameters()) + list(c2.parameters()), lr=0.0)
    x = np.random.default_rng(0).standard_normal((3, cin, size, size)).astype(np.float32)

    @gc.compile(example_args=(x,), debug=debug)
    def step(a):
        opt.zero_grad()
        y = c2(c1(a))
        (y * y).sum().backward()
        return y

    step(x)
    kernels = _conv_kernels(step.ir("fused"))
    assert kernels and all(len(d) == 1 for _, d in kernels), kernels
    out: dict[str, list[str]] = {}
    for op, d in kernels:
        out.setdefault(op, []).append(d[0])
    return out


def test_every_convolution_is_described() -> None:
    # 3x3 stride 2: the phase-grid implicit GEMM, the phase input gradient
    d = _step_ir(8, 32, 32, 3, 2, 1)
    assert any("implicit GEMM per image from 4 of 4 stride-phase grids" in s
               for s in d["conv2d"])
    assert len(d["conv2d_input_grad"]) == 1
    assert "4 stride-1 phase GEMMs per image" in d["conv2d_input_grad"][0]
    # 3x3 stride 2 on channel vectors: one zero-bordered grid (no phases), the weight in
    # panels of the tile's channels, as is the phase input gradient's
    d = _step_ir(8, 64, 16, 3, 2, 1)
    assert any("implicit GEMM per image from a zero-bordered grid, register tiles of "
               "6 positions x 4 channel vectors (the weight in panels of 64 channels)" in s
               for s in d["conv2d"]), d
    assert "channel vectors (the weight in panels of" in d["conv2d_input_grad"][0]
    # 1x1 stride 2 on position vectors: one phase grid read, three phases of the input
    # gradient are zeros
    d = _step_ir(8, 8, 16, 1, 2, 0)
    assert any("1 of 4 stride-phase grids" in s for s in d["conv2d"])
    assert "(3 that no tap reaches: zeros)" in d["conv2d_input_grad"][0]
    # 16 channels, 3x3 stride 1: per-image Winograd forward and input gradient
    d = _step_ir(8, 16, 32, 3, 1, 1)
    assert any(s.startswith("conv: Winograd F(2x2, 3x3) per image") for s in d["conv2d"])
    assert d["conv2d_input_grad"][0].startswith("conv input grad: Winograd F(2x2, 3x3)")
    assert any(s.startswith("conv weight grad: Winograd") for s in d["conv2d_weight_grad"])
    # unequal strides: 2x1 phase grids, and the input gradient's two phase GEMMs
    d = _step_ir(4, 8, 12, 3, (2, 1), 1)
    assert any("implicit GEMM per image from 2 of 2 stride-phase grids" in s
               for s in d["conv2d"]), d
    assert "2 stride-1 phase GEMMs per image" in d["conv2d_input_grad"][0]


def test_debug_build_says_direct_loops() -> None:
    d = _step_ir(8, 16, 16, 3, 1, 1, debug=True)
    assert all(s == "conv: direct loops (debug build: bounds-checked)"
               for ds in d.values() for s in ds)
