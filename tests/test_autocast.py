"""``gc.autocast("cpu", dtype=gc.bfloat16)``: PyTorch's CPU autocast op lists (checked op by
op against torch.autocast), training parity eagerly and compiled, and the compiled step's
guard on the autocast state."""

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc.nn import functional as F

TF = torch.nn.functional


def _pair(*shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return gc.tensor(x), torch.tensor(x)


X, TX = _pair(4, 8)
W, TW = _pair(6, 8, seed=1)
B, TB = _pair(6, seed=2)
IMG, TIMG = _pair(2, 3, 8, 8, seed=3)
CW, TCW = _pair(4, 3, 3, 3, seed=4)
Y, TY = gc.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 2, 3])

# (name, graphc call, torch call): each op on float32 operands (and bf16 ones where the
# float32 list is the point) inside the region; the result dtypes must agree
CASES = [
    ("linear", lambda: F.linear(X, W, B), lambda: TF.linear(TX, TW, TB)),
    ("matmul", lambda: X @ W.T, lambda: TX @ TW.T),
    ("mm", lambda: gc.mm(X, W.T), lambda: torch.mm(TX, TW.T)),
    ("bmm", lambda: gc.bmm(X[None], W.T[None]), lambda: torch.bmm(TX[None], TW.T[None])),
    ("addmm", lambda: gc.addmm(B, X, W.T), lambda: torch.addmm(TB, TX, TW.T)),
    ("baddbmm", lambda: gc.baddbmm(B, X[None], W.T[None]),
     lambda: torch.baddbmm(TB, TX[None], TW.T[None])),
    ("mv", lambda: gc.mv(W, X[0]), lambda: torch.mv(TW, TX[0])),
    ("dot", lambda: gc.dot(X[0], X[1]), lambda: torch.dot(TX[0], TX[1])),
    ("addmv", lambda: gc.addmv(B, W, X[0]), lambda: torch.addmv(TB, TW, TX[0])),
    ("conv2d", lambda: F.conv2d(IMG, CW), lambda: TF.conv2d(TIMG, TCW)),
    ("conv1d", lambda: F.conv1d(IMG[:, :, 0], CW[:, :, 0]),
     lambda: TF.conv1d(TIMG[:, :, 0], TCW[:, :, 0])),
    ("sdpa", lambda: F.scaled_dot_product_attention(X[None], X[None], X[None]),
     lambda: TF.scaled_dot_product_attention(TX[None], TX[None], TX[None])),
    ("softmax", lambda: F.softmax(X, -1), lambda: TF.softmax(TX, -1)),
    ("softmax_bf16", lambda: F.softmax(X.bfloat16(), -1),
     lambda: TF.softmax(TX.bfloat16(), -1)),
    ("layer_norm_bf16_f32_weight", lambda: F.layer_norm(X.bfloat16(), (8,), X[0], X[1]),
     lambda: TF.layer_norm(TX.bfloat16(), (8,), TX[0], TX[1])),
    ("cross_entropy_bf16", lambda: F.cross_entropy(X.bfloat16(), Y),
     lambda: TF.cross_entropy(TX.bfloat16(), TY)),
    ("mse_bf16", lambda: F.mse_loss(X.bfloat16(), X.bfloat16()),
     lambda: TF.mse_loss(TX.bfloat16(), TX.bfloat16())),
    ("l1_bf16", lambda: F.l1_loss(X.bfloat16(), X), lambda: TF.l1_loss(TX.bfloat16(), TX)),
    ("nll_bf16", lambda: F.nll_loss(X.bfloat16(), Y), lambda: TF.nll_loss(TX.bfloat16(), TY)),
    ("bce_logits_bf16", lambda: F.binary_cross_entropy_with_logits(X.bfloat16(), X.sigmoid()),
     lambda: TF.binary_cross_entropy_with_logits(TX.bfloat16(), TX.sigmoid())),
    ("prod_bf16", lambda: X.bfloat16().prod(), lambda: TX.bfloat16().prod()),
    ("sum_bf16", lambda: X.bfloat16().sum(), lambda: TX.bfloat16().sum()),
    ("exp_f32", lambda: X.exp(), lambda: TX.exp()),
    ("add_mixed", lambda: X.bfloat16() + X, lambda: TX.bfloat16() + TX),
    ("float64_matmul", lambda: X.double() @ W.double().T, lambda: TX.double() @ TW.double().T),
    ("einsum", lambda: gc.einsum("ij,kj->ik", X, W), lambda: torch.einsum("ij,kj->ik", TX, TW)),
]


@pytest.mark.parametrize("name,g,t", CASES, ids=[c[0] for c in CASES])
def test_op_dtypes_match_torch_autocast(name, g, t):
    with gc.autocast("cpu", dtype=gc.bfloat16):
        got = g()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = t()
    assert got.dtype.name == str(want.dtype).split(".")[-1], name
    tol = 0.05 * (np.abs(want.detach().float().numpy()).max() + 1)
    np.testing.assert_allclose(got.detach().float().numpy(), want.detach().float().numpy(),
                               atol=tol)
    assert not gc.is_autocast_enabled()  # the region ended


def test_api_surface():
    assert gc.amp.autocast is gc.autocast
    with gc.autocast("cpu"):
        assert gc.is_autocast_enabled("cpu") and gc.get_autocast_dtype("cpu") is gc.bfloat16
        with gc.autocast("cpu", enabled=False):
            assert not gc.is_autocast_enabled()
        assert gc.is_autocast_enabled()
    with pytest.raises(NotImplementedError, match="cuda"):
        gc.autocast("cuda")
    with pytest.raises(RuntimeError, match="bfloat16"):
        gc.autocast("cpu", dtype=gc.float64)
    with pytest.raises(NotImplementedError, match="float16"):
        gc.autocast("cpu", dtype=torch.float16)

    @gc.autocast("cpu")
    def f(a, b):
        return a @ b

    assert f(X, W.T).dtype is gc.bfloat16 and not gc.is_autocast_enabled()


def _models(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        t = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 5))
        g = gc.nn.Sequential(gc.nn.Linear(20, 32), gc.nn.ReLU(), gc.nn.Linear(32, 32),
                             gc.nn.GELU(), gc.nn.LayerNorm(32), gc.nn.Linear(32, 5))
    else:
        t = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 4 * 4, 5))
        g = gc.nn.Sequential(gc.nn.Conv2d(1, 8, 3, padding=1), gc.nn.BatchNorm2d(8),
                             gc.nn.ReLU(), gc.nn.MaxPool2d(2), gc.nn.Flatten(),
                             gc.nn.Linear(8 * 4 * 4, 5))
    g.load_state_dict({k: gc.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return t, g


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_parity_eager_compiled_torch(kind):
    """Five SGD-momentum steps under autocast: losses agree with PyTorch within bf16 error,
    compiled and eager agree with each other more closely, parameters stay float32."""
    tm, gm = _models(kind)
    _, em = _models(kind)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    gopt = gc.optim.SGD(gm.parameters(), lr=0.05, momentum=0.9)
    eopt = gc.optim.SGD(em.parameters(), lr=0.05, momentum=0.9)

    def step(model, opt, x, y):
        opt.zero_grad()
        with gc.autocast("cpu", dtype=gc.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    cstep = gc.compile(lambda x, y: step(gm, gopt, x, y))
    rng = np.random.default_rng(5)
    shape = (16, 20) if kind == "mlp" else (16, 1, 8, 8)
    for _ in range(5):
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.integers(0, 5, 16)
        topt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            tl = TF.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        gl = cstep(gc.tensor(x), gc.tensor(y))
        el = step(em, eopt, gc.tensor(x), gc.tensor(y))
        assert gl.dtype is gc.float32
        assert abs(gl.item() - tl.item()) < 2e-2 * max(1.0, abs(tl.item()))
        assert abs(gl.item() - el.item()) < 1e-2 * max(1.0, abs(el.item()))
    assert cstep.compile_count == 1
    for (name, tp), gp in zip(tm.named_parameters(), gm.parameters()):
        assert gp.dtype is gc.float32 and gp.grad.dtype is gc.float32
        np.testing.assert_allclose(gp.detach().numpy(), tp.detach().numpy(), atol=3e-2,
                                   err_msg=name)
    if kind == "cnn":
        np.testing.assert_allclose(gm[1].running_mean.numpy(),
                                   tm[1].running_mean.numpy(), atol=3e-2)


def test_compiled_step_retraces_when_the_autocast_state_changes():
    lin = gc.nn.Linear(8, 6)
    f = gc.compile(lambda x: lin(x))
    assert f(X).dtype is gc.float32
    with gc.autocast("cpu"):
        assert f(X).dtype is gc.bfloat16
    assert f(X).dtype is gc.float32
    assert f.compile_count == 2
