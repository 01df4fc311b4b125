"""Convolutions with unequal strides along rows and columns, and strided ``conv1d``.

A ``conv1d`` is a ``conv2d`` over one row, so its stride is ``(1, s)``: Whisper's second
convolution (``Conv1d(80, d, 3, stride=2, padding=1)``), wav2vec's feature extractor
(strides 5 and 2), CRNN's ``(2, 1)`` strides. The implicit-GEMM kernels split the padded
source into ``s_h x s_w`` phase grids; until they did so for unequal strides, these
convolutions ran the element-by-element loops (Zen 4, one thread, forward and both
gradients: ``Conv2d(32, 32, 3, stride=(1, 2))`` on 8 x 32 x 32 took 34.3 ms against
PyTorch's 3.5, now 2.5; ``Conv1d(80, 256, 3, stride=2)`` on 4 x 80 x 2000 59.7 against
20.2, now 16.6).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn

torch = pytest.importorskip("torch")

CASES = [
    # (in, out, kernel, stride, padding, dilation, groups, input spatial size)
    (8, 16, (3, 3), (1, 2), (1, 1), (1, 1), 1, (9, 13)),
    (8, 16, (3, 3), (2, 1), (1, 0), (1, 1), 1, (11, 10)),
    (6, 12, (3, 5), (2, 3), (2, 1), (1, 1), 1, (13, 17)),
    (8, 8, (3, 3), (1, 2), (2, 2), (2, 2), 1, (10, 14)),
    (8, 16, (3, 3), (3, 2), (1, 1), (1, 1), 2, (12, 12)),
    (24, 24, (3, 3), (2, 1), (1, 1), (1, 1), 24, (10, 9)),
    (16, 32, (1, 1), (1, 2), (0, 0), (1, 1), 1, (6, 20)),
]


def _ir_convs(fn: Any) -> list[str]:
    """The kernel descriptions of ``ir("fused")``: one line per convolution."""
    return [ln.strip() for ln in fn.ir("fused").splitlines()
            if ln.strip().startswith(("conv:", "conv input grad:", "conv weight grad:"))]


def _check(gm: Any, tm: Any, x: np.ndarray) -> Any:
    """Forward, input and weight gradients of ``gm`` compiled against ``tm``, float64."""
    xp = nn.Parameter(gc.from_numpy(x.copy()))
    params = list(gm.parameters())

    @gc.compile
    def step() -> Any:
        for p in params:
            p.grad = None
        xp.grad = None
        y = gm(xp)
        (y * y).sum().backward()
        return y

    got = np.asarray(step())
    tx = torch.from_numpy(x.copy()).requires_grad_()
    ty = tm(tx)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(got, ty.detach().numpy(), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(xp.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-10)
    for (name, p), tp in zip(gm.named_parameters(), tm.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-10, atol=1e-10,
                                   err_msg=name)
    return step


@pytest.mark.parametrize("cin,cout,k,s,p,d,g,hw", CASES)
def test_unequal_strides_match_torch(cin: int, cout: int, k: tuple, s: tuple, p: tuple,
                                     d: tuple, g: int, hw: tuple) -> None:
    gc.manual_seed(0)
    gm = nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g).double()
    tm = torch.nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g).double()
    tm.load_state_dict({n: torch.from_numpy(np.array(v)) for n, v in gm.state_dict().items()})
    x = np.random.default_rng(cin + cout).standard_normal((3, cin, *hw))
    fn = _check(gm, tm, x)
    convs = _ir_convs(fn)
    assert len(convs) == 3, convs
    assert not any("direct loops" in c for c in convs), convs
    fwd = next(c for c in convs if c.startswith("conv:"))
    assert f"of {s[0] * s[1]} stride-phase grids" in fwd or "gemm" in fwd, fwd


@pytest.mark.parametrize("cin,cout,k,s,p,length", [(80, 64, 3, 2, 1, 101), (1, 32, 10, 5, 0, 203),
                                                   (32, 32, 3, 2, 0, 64)])
def test_strided_conv1d_matches_torch(cin: int, cout: int, k: int, s: int, p: int,
                                      length: int) -> None:
    gc.manual_seed(1)
    gm = nn.Conv1d(cin, cout, k, stride=s, padding=p).double()
    tm = torch.nn.Conv1d(cin, cout, k, stride=s, padding=p).double()
    tm.load_state_dict({n: torch.from_numpy(np.array(v)) for n, v in gm.state_dict().items()})
    x = np.random.default_rng(k).standard_normal((2, cin, length))
    fn = _check(gm, tm, x)
    assert not any("direct loops" in c for c in _ir_convs(fn)), _ir_convs(fn)
