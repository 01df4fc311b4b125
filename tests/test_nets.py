"""The ``convnext`` and ``vit`` benchmark networks (``benchmarks/nets.py``) trained compiled
against PyTorch in float64, at small sizes: loss, every parameter and gradient, and AdamW's
state, over three steps at two batch sizes with one compile.

Each exercises a layout path the ResNets do not: ConvNeXt's depthwise weight gradient behind a
channels-last permute (``Kernel.unit_stride``) and its channels-first LayerNorm through
permutes; the ViT's qkv ``unbind`` after a head permute (a ``stack`` of slices backward, a bias
gradient read through the permute) and its 16x16 stride-16 patch convolution.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim

torch = pytest.importorskip("torch")

# benchmarks/ is a folder of the repository, not an installed package
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import nets  # noqa: E402

SMALL = {
    "convnext": (nets.convnext, {"dims": (8, 16), "depths": (1, 2), "num_classes": 5,
                                 "layer_scale": 0.5}, 32),
    "vit": (nets.vit, {"dim": 24, "depth": 2, "heads": 3, "patch": 8, "image": 32,
                       "num_classes": 5}, 32),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_net_matches_torch(name: str) -> None:
    build, kw, size = SMALL[name]
    gc.manual_seed(0)
    gm = build(nn, gc, **kw).double()
    tm = nets.torch_copy(torch, gm, build, **kw).double()
    go = optim.AdamW(gm.parameters(), lr=1e-2, weight_decay=0.05)
    to = torch.optim.AdamW(tm.parameters(), lr=1e-2, weight_decay=0.05)
    gl, tl = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        go.zero_grad()
        loss = gl(gm(x), y)
        loss.backward()
        go.step()
        return loss

    rng = np.random.default_rng(1)
    tparams = dict(tm.named_parameters())
    for i, batch in enumerate((3, 3, 2)):
        x = rng.standard_normal((batch, 3, size, size))
        y = rng.integers(0, kw["num_classes"], batch)
        got = float(step(x, y).item())
        to.zero_grad()
        ref = tl(tm(torch.from_numpy(x)), torch.from_numpy(y))
        ref.backward()
        to.step()
        np.testing.assert_allclose(got, float(ref.item()), rtol=1e-11, err_msg=f"step {i}")
        for pname, p in gm.named_parameters():
            tp = tparams[pname]
            for what, a, b in (("grad", p.grad.numpy(), tp.grad.numpy()),
                               ("value", p.detach().numpy(), tp.detach().numpy()),
                               ("exp_avg_sq", np.asarray(go.state[p]["exp_avg_sq"]),
                                to.state[tp]["exp_avg_sq"].numpy())):
                np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-11,
                                           err_msg=f"step {i}: {pname} {what}")
    assert step.compile_count == 1
