"""The JAX ResNet step that ``python -m benchmarks resnet18`` times next to graphc
(``benchmarks.jax_workloads.resnet_step``) trains the same network as PyTorch's: otherwise
its time would be of some other computation. Skipped where JAX, optax or PyTorch is missing.

Three steps from the same weights (a graphc ResNet's ``state_dict``, loaded into both) on the
same batch, in both activation layouts the step supports: every step's loss, and afterwards
every parameter and BatchNorm buffer. Float32 training of a ResNet amplifies rounding (see
``tests/test_resnet.py``), so the net is small (widths 8-16, basic or bottleneck blocks,
12x12 or 24x24 images, batch 6) and the run short. The tolerances are relative to each
tensor's largest element: measured differences are at most 1.3e-6; on the small stem,
leaving out the weight decay moved the third loss by 5.6e-5 (tolerance 1e-5) and a biased
running variance moved ``bn1``'s by 1.2e-4 (tolerance 1e-4; the ImageNet stem's last stage
normalises 6 values a channel, where the two variances differ by 20%)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import graphc as gc

pytest.importorskip("jax")
pytest.importorskip("optax")
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks import jax_workloads, resnet  # noqa: E402

NET = {"widths": (8, 16, 16, 16), "blocks": (1, 1, 1, 1)}


def _close(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> None:
    scale = max(float(np.abs(want).max()), 1e-6)
    err = float(np.abs(got.astype(np.float64) - want).max()) / scale
    assert err <= tol, f"{name}: relative error {err:.3g} > {tol}"


@pytest.mark.parametrize("stem,size,block", [("small", 12, "basic"), ("imagenet", 24, "basic"),
                                             ("imagenet", 24, "bottleneck")])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_jax_resnet_step_matches_torch(layout: str, stem: str, size: int, block: str) -> None:
    gc.manual_seed(0)
    chans = 1 if stem == "small" else 3
    net = dict(NET, in_channels=chans, stem=stem, block=block)
    gm = resnet.build(gc.nn, **net)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, chans, size, size)).astype(np.float32)
    y = rng.integers(0, resnet.NUM_CLASSES, 6).astype(np.int64)
    run = jax_workloads.resnet_step(gm.state_dict(), x, y, t_max=5, stem=stem, layout=layout)

    tm = resnet.torch_copy(torch, gm, **net)
    opt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5)
    lf = torch.nn.CrossEntropyLoss()
    for i in range(3):
        opt.zero_grad()
        loss = lf(tm(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        sched.step()
        _close(f"loss of step {i}", np.asarray(run()), loss.detach().numpy(), 1e-5)
    state = {**run.state["p"], **run.state["s"]}
    want = tm.state_dict()
    assert set(state) == set(want)
    for k, v in want.items():
        got = np.asarray(state[k])
        if k.endswith("num_batches_tracked"):
            assert int(got) == int(v) == 3, k
        else:
            _close(k, got, v.numpy().astype(np.float64), 1e-4)


def test_jax_resnet_step_rejects_bad_options() -> None:
    sd = resnet.build(gc.nn, **NET).state_dict()
    x = np.zeros((2, 1, 8, 8), np.float32)
    y = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="layout"):
        jax_workloads.resnet_step(sd, x, y, layout="NCWH")
    with pytest.raises(ValueError, match="stem"):
        jax_workloads.resnet_step(sd, x, y, stem="cifar")
