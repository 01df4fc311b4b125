"""The seed workflow (Linear(1,1) + L1Loss + SGD, 200 epochs) against PyTorch, eager and
compiled, in both statement orders."""

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim

X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
Y = (0.7 * X + 0.3).astype(np.float32)
XTR, YTR, XTE, YTE = X[:40], Y[:40], X[40:], Y[40:]


def torch_run(order: str, epochs: int = 200) -> tuple[list[float], list[float], dict]:
    torch.manual_seed(42)
    m = torch.nn.Linear(1, 1)
    init = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
    lf = torch.nn.L1Loss()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    xtr, ytr, xte, yte = map(torch.from_numpy, (XTR, YTR, XTE, YTE))
    train, test = [], []
    for _ in range(epochs):
        m.train()
        if order == "zero_first":
            opt.zero_grad()
        loss = lf(m(xtr), ytr)
        if order == "seed":
            opt.zero_grad()
        loss.backward()
        opt.step()
        m.eval()
        with torch.inference_mode():
            test.append(lf(m(xte), yte).item())
        train.append(loss.item())
    return train, test, init


def graphc_run(order: str, compiled: bool, init: dict, epochs: int = 200):
    m = nn.Linear(1, 1)
    m.load_state_dict(init)
    lf = nn.L1Loss()
    opt = optim.SGD(m.parameters(), lr=0.01)

    def step(x, y):
        if order == "zero_first":
            opt.zero_grad()
        loss = lf(m(x), y)
        if order == "seed":
            opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    def test_fn(x, y):
        with gc.inference_mode():
            return lf(m(x), y)

    if compiled:
        step, test_fn = gc.compile(step), gc.compile(test_fn)
    train, test = [], []
    for _ in range(epochs):
        m.train()
        loss = step(XTR, YTR)
        m.eval()
        test.append(test_fn(XTE, YTE).item())
        train.append(loss.item())
    return train, test, m, step


@pytest.mark.parametrize("order", ["seed", "zero_first"])
@pytest.mark.parametrize("compiled", [False, True])
def test_seed_loop_matches_pytorch_every_epoch(order, compiled):
    t_train, t_test, init = torch_run(order)
    g_train, g_test, m, step = graphc_run(order, compiled, init)
    np.testing.assert_allclose(g_train, t_train, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g_test, t_test, rtol=1e-5, atol=1e-7)
    # the parameters really moved (a compiler that never applies the update fails here)
    assert abs(m.weight.item() - 0.7645) > 0.05
    if compiled:
        assert step.compile_count == 1


def test_default_init_matches_pytorch_under_same_seed():
    torch.manual_seed(42)
    tm = torch.nn.Linear(1, 1)
    gc.manual_seed(42)
    gm = nn.Linear(1, 1)
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(gm.state_dict()[k], v.numpy())
    torch.manual_seed(3)
    tm = torch.nn.Linear(13, 7)
    gc.manual_seed(3)
    gm = nn.Linear(13, 7)
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(gm.state_dict()[k], v.numpy())


def test_seed_example_runs():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / "seed_linreg.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "Epoch: 0 | Train Loss: 0.555178 | Test Loss: 0.573976" in out.stdout
    assert "Epoch: 190" in out.stdout
