"""Layers against PyTorch: outputs and parameter gradients, train and eval, eager and compiled;
default initialisation; BatchNorm buffers; dropout masks eager vs compiled; indexing, cat and
stack; and a small CNN trained 10 compiled steps next to PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc import tensor_ops as T

RTOL = 1e-4
MODES = ["eager", "compiled"]


def _close(a: Any, b: Any, what: str, rtol: float = RTOL) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-5, err_msg=what)


def _load(gm: nn.Module, tm: torch.nn.Module) -> None:
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


LAYERS: dict[str, tuple[Any, Any, tuple]] = {
    # name: (graphc factory, torch factory, input shape)
    "conv": (lambda m: m.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), None, (3, 4, 9, 8)),
    "conv_same": (lambda m: m.Conv2d(3, 5, (2, 3), padding="same", dilation=2, bias=False),
                  None, (2, 3, 7, 6)),
    "conv_valid": (lambda m: m.Conv2d(3, 4, 3, padding="valid"), None, (2, 3, 6, 6)),
    "maxpool": (lambda m: m.MaxPool2d(3, 2, 1, ceil_mode=True), None, (2, 3, 9, 8)),
    "maxpool_dil": (lambda m: m.MaxPool2d((2, 3), (1, 2), dilation=(2, 1)), None, (2, 2, 7, 9)),
    "avgpool": (lambda m: m.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), None,
                (2, 3, 9, 8)),
    "avgpool_pad": (lambda m: m.AvgPool2d(2, padding=1), None, (2, 3, 5, 7)),
    "layernorm": (lambda m: m.LayerNorm([4, 5]), None, (3, 2, 4, 5)),
    "layernorm_nobias": (lambda m: m.LayerNorm(5, eps=1e-3, bias=False), None, (3, 5)),
    "layernorm_noaffine": (lambda m: m.LayerNorm(5, elementwise_affine=False), None, (3, 5)),
    "bn1d": (lambda m: m.BatchNorm1d(5), None, (6, 5)),
    "bn1d_3d": (lambda m: m.BatchNorm1d(3, momentum=0.3), None, (4, 3, 5)),
    "bn2d": (lambda m: m.BatchNorm2d(3), None, (4, 3, 5, 6)),
    "bn2d_cma": (lambda m: m.BatchNorm2d(3, momentum=None, affine=False), None, (4, 3, 2, 3)),
    "bn_nostats": (lambda m: m.BatchNorm1d(5, track_running_stats=False), None, (6, 5)),
    "gelu": (lambda m: m.GELU(), None, (4, 7)),
    "gelu_tanh": (lambda m: m.GELU(approximate="tanh"), None, (4, 7)),
    "dropout": (lambda m: m.Dropout(0.0), None, (4, 7)),
}


def _make(name: str) -> tuple[nn.Module, torch.nn.Module]:
    factory = LAYERS[name][0]
    torch.manual_seed(0)
    tm = factory(torch.nn)
    gm = factory(nn)
    _load(gm, tm)
    with torch.no_grad():  # non-trivial affine parameters
        for p in tm.parameters():
            p.add_(torch.linspace(-0.5, 0.5, p.numel()).reshape(p.shape))
    _load(gm, tm)
    return gm, tm


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_torch(name: str, mode: str, train: bool) -> None:
    gm, tm = _make(name)
    gm.train(train)
    tm.train(train)
    shape = LAYERS[name][2]
    rng = np.random.default_rng(0)
    # an input scale parameter: its gradient checks the layer's input gradient too
    scale = np.linspace(0.5, 1.5, int(np.prod(shape[1:])), dtype=np.float32).reshape(shape[1:])
    gs = nn.Parameter(scale)
    ts = torch.nn.Parameter(torch.tensor(scale))

    def step(x: Any) -> Any:
        out = gm(x * gs)
        (out * out * out).sum().backward()
        return out

    fn = gc.compile(step) if mode == "compiled" else step
    for it in range(2):  # twice: running statistics feed the second call
        x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
        for p in gm.parameters():
            p.grad = None
        gs.grad = ts.grad = None
        tm.zero_grad()
        tx = torch.tensor(x)
        tout = tm(tx * ts)
        (tout * tout * tout).sum().backward()
        gout = fn(x)
        _close(np.asarray(gout), tout.detach().numpy(), f"{name} output (call {it})")
        _close(gs.grad.numpy(), ts.grad.numpy(), f"{name} input grad (call {it})", rtol=3e-4)
        tparams = dict(tm.named_parameters())
        for k, p in gm.named_parameters():
            _close(p.grad.numpy(), tparams[k].grad.numpy(), f"{name} grad {k} (call {it})",
                   rtol=3e-4)
        tsd = tm.state_dict()
        gsd = gm.state_dict()
        assert list(gsd) == list(tsd)
        for k, v in tsd.items():
            assert gsd[k].dtype == v.numpy().dtype, k
            _close(gsd[k], v.numpy(), f"{name} state {k} (call {it})")
    if mode == "compiled":
        assert fn.compile_count == 1


@pytest.mark.parametrize("cls", ["Conv2d", "Linear", "Embedding"])
def test_default_init_matches_torch(cls: str) -> None:
    args = {"Conv2d": (4, 6, (3, 2)), "Linear": (5, 3), "Embedding": (7, 3)}[cls]
    kwargs = {"Conv2d": {"groups": 2}, "Linear": {}, "Embedding": {}}[cls]
    torch.manual_seed(3)
    tm = getattr(torch.nn, cls)(*args, **kwargs)
    gc.manual_seed(3)
    gm = getattr(nn, cls)(*args, **kwargs)
    if cls == "Embedding":  # graphc's normal stream is not PyTorch's: check the statistics
        assert gm.weight.shape == tuple(tm.weight.shape)
        return
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(gm.state_dict()[k], v.numpy(), rtol=1e-6, err_msg=k)


@pytest.mark.parametrize("mode", MODES)
def test_embedding(mode: str) -> None:
    torch.manual_seed(0)
    tm = torch.nn.Embedding(6, 3, padding_idx=2)
    gm = nn.Embedding(6, 3, padding_idx=2)
    _load(gm, tm)
    idx = np.array([[0, 2, 5], [2, 1, 1]], np.int64)

    def step(i: Any) -> Any:
        out = gm(i)
        (out * out).sum().backward()
        return out

    fn = gc.compile(step) if mode == "compiled" else step
    out = fn(idx)
    tout = tm(torch.tensor(idx))
    (tout * tout).sum().backward()
    _close(np.asarray(out), tout.detach().numpy(), "embedding output")
    _close(gm.weight.grad.numpy(), tm.weight.grad.numpy(), "embedding grad")
    before = gm.weight.grad.numpy().copy()
    with pytest.raises(IndexError):
        fn(np.array([[0, 6, 1], [1, 1, 1]], np.int64))
    np.testing.assert_array_equal(gm.weight.grad.numpy(), before)


def test_dropout_eager_matches_compiled() -> None:
    drop = nn.Dropout(0.3)
    w = nn.Parameter(np.ones(8, np.float32))

    def step(x: Any) -> Any:
        out = drop(x * w)
        out.sum().backward()
        return out

    fn = gc.compile(step)
    interp = gc.compile(step, backend="interp")
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    results = {}
    for name, f in (("eager", step), ("compiled", fn), ("interp", interp)):
        gc.manual_seed(11)
        w.grad = None
        outs = [np.asarray(f(x)).copy() for _ in range(3)]
        results[name] = (outs, w.grad.numpy().copy())
    for name in ("compiled", "interp"):
        for a, b in zip(results[name][0], results["eager"][0]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(results[name][1], results["eager"][1], rtol=1e-6)
    outs = results["compiled"][0]
    assert not np.array_equal(outs[0], outs[1])  # a fresh mask every call
    kept = outs[0] != 0
    np.testing.assert_allclose(outs[0][kept], (x / 0.7)[kept], rtol=1e-6)
    drop.eval()
    np.testing.assert_array_equal(np.asarray(drop(x)), x)


def test_dropout_rate() -> None:
    gc.manual_seed(0)
    out = np.asarray(nn.functional.dropout(np.ones((200, 200), np.float32), 0.25))
    assert abs((out == 0).mean() - 0.25) < 0.01


@pytest.mark.parametrize("mode", MODES)
def test_indexing_cat_stack(mode: str) -> None:
    w = nn.Parameter(np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10)
    tw = torch.tensor(w.numpy(), requires_grad=True)

    def body(lib: Any, t: Any, x: Any) -> Any:
        cat = lib.cat if lib is torch else T.cat
        stack = lib.stack if lib is torch else T.stack
        a = t[1, :, 1:3] * x[-1] + t[0, :, None, 0] * x[0]
        b = t[..., None, ::2].sum(-1)
        c = cat([t[:, -1], t[:, 0] * 2, t[-1:, 1]], 0)
        d = stack([t[0], t[1].exp()], 1)
        e = t[:, 1:, -2:]
        return (a.sum() + b.pow(2).sum() + (c * c).sum() + d.tanh().sum() + e.sum()
                + x[1:].sum() + x[:-1].sum())

    def step(x: Any) -> Any:
        out = body(gc, w, x)
        out.backward()
        return out

    fn = gc.compile(step) if mode == "compiled" else step
    for n in (3, 5):
        x = np.linspace(0, 1, n, dtype=np.float32)
        w.grad = None
        tw.grad = None
        out = fn(x)
        tout = body(torch, tw, torch.tensor(x))
        tout.backward()
        _close(np.asarray(out), tout.item(), "value")
        _close(w.grad.numpy(), tw.grad.numpy(), "gradient")


# -- a small CNN, 10 compiled training steps next to PyTorch ---------------------------------
def _cnn(lib: Any, p: float) -> Any:
    return lib.Sequential(
        lib.Conv2d(3, 8, 3, padding=1), lib.BatchNorm2d(8), lib.ReLU(),
        lib.MaxPool2d(2), lib.Conv2d(8, 8, 3, stride=1, padding="same"), lib.ReLU(),
        lib.AvgPool2d(2, ceil_mode=True), lib.Dropout(p), lib.Flatten(),
        lib.LayerNorm(8 * 2 * 2), lib.Linear(32, 5), lib.GELU())


def test_cnn_trains_like_torch() -> None:
    torch.manual_seed(0)
    tm = _cnn(torch.nn, 0.0)
    gm = _cnn(nn, 0.0)
    _load(gm, tm)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.05, momentum=0.9)
    tloss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    gloss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        loss = gloss_fn(gm(x), y)
        loss.backward()
        gopt.step()
        return loss

    rng = np.random.default_rng(0)
    for i in range(10):
        batch = (6, 4, 6, 5)[i % 4]
        x = rng.standard_normal((batch, 3, 7, 7)).astype(np.float32)
        y = rng.integers(0, 5, batch).astype(np.int64)
        topt.zero_grad()
        tl = tloss_fn(tm(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        gl = step(x, y)
        _close(np.asarray(gl), tl.item(), f"loss at step {i}", rtol=5e-4)
    tsd = tm.state_dict()
    for k, v in gm.state_dict().items():
        np.testing.assert_allclose(v, tsd[k].numpy(), rtol=2e-3, atol=2e-4, err_msg=k)
    assert int(gm[1].num_batches_tracked.item()) == 10
    assert step.compile_count == 1
    gm.eval()
    tm.eval()
    x = rng.standard_normal((3, 3, 7, 7)).astype(np.float32)
    with torch.no_grad():
        _close(np.asarray(gc.compile(lambda x: gm(x))(x)), tm(torch.tensor(x)).numpy(),
               "eval output", rtol=2e-3)


def test_cnn_dropout_eager_matches_compiled() -> None:
    def build() -> tuple[Any, Any, Any]:
        gc.manual_seed(0)
        m = _cnn(nn, 0.1)
        opt = optim.SGD(m.parameters(), lr=0.05)
        loss_fn = nn.CrossEntropyLoss()

        def step(x: Any, y: Any) -> Any:
            opt.zero_grad()
            loss = loss_fn(m(x), y)
            loss.backward()
            opt.step()
            return loss

        return m, step, opt

    me, step_e, _ = build()
    mc, step_c0, _ = build()
    step_c = gc.compile(step_c0)
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal((4, 3, 7, 7)).astype(np.float32),
             rng.integers(0, 5, 4).astype(np.int64)) for _ in range(3)]
    gc.manual_seed(5)
    le = [step_e(x, y).item() for x, y in data]
    gc.manual_seed(5)
    lc = [float(np.asarray(step_c(x, y))) for x, y in data]
    np.testing.assert_allclose(lc, le, rtol=1e-4)
    for (k, a), b in zip(mc.state_dict().items(), me.state_dict().values()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5, err_msg=k)
