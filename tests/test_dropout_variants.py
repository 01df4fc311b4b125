"""Channel dropout (``dropout1d/2d/3d`` and their modules), alpha dropout, ``gumbel_softmax``
and ``inplace=True`` dropout: PyTorch's values and gradients after the same seed (their noise
is ``bernoulli_``/``exponential_``, drawn from PyTorch's stream on hosts where PyTorch uses
its portable kernels; on Intel CPUs PyTorch's MKL build draws ``bernoulli_(p)`` from MKL's
stream, and there the masks are compared by their statistics), and compiled steps that draw
new noise on every call, as eager does."""

import warnings

import numpy as np
import pytest
from _torch import INTEL, torch

import graphc as gc
from graphc import nn
from graphc.nn import functional as F

TF = torch.nn.functional

X = np.random.default_rng(0).standard_normal((4, 6, 5, 5)).astype(np.float32)

CASES = {
    "dropout1d": (lambda m, f, x: f.dropout1d(x[0], 0.3), None),
    "dropout1d unbatched": (lambda m, f, x: f.dropout1d(x[0, 0], 0.3), None),
    "dropout2d": (lambda m, f, x: f.dropout2d(x, 0.3), None),
    "dropout3d": (lambda m, f, x: f.dropout3d(x.unsqueeze(0), 0.6), None),
    "dropout3d unbatched": (lambda m, f, x: f.dropout3d(x, 0.6), None),
    "alpha_dropout": (lambda m, f, x: f.alpha_dropout(x, 0.2, True), None),
    "feature_alpha_dropout": (lambda m, f, x: f.feature_alpha_dropout(x, 0.2, True), None),
    "Dropout2d": (lambda m, f, x: m.nn.Dropout2d(0.5)(x), None),
    "AlphaDropout": (lambda m, f, x: m.nn.AlphaDropout(0.5)(x), None),
    "gumbel_softmax hard": (lambda m, f, x: f.gumbel_softmax(x[0, 0], 0.5, True), None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_values_and_gradients_are_pytorchs(name):
    fn = CASES[name][0]
    xg = gc.tensor(X, requires_grad=True)
    xt = torch.tensor(X, requires_grad=True)
    gc.manual_seed(3)
    a = fn(gc, F, xg)
    torch.manual_seed(3)
    b = fn(torch, TF, xt)
    assert tuple(a.shape) == tuple(b.shape)
    w = np.random.default_rng(1).standard_normal(tuple(a.shape)).astype(np.float32)
    (a * gc.tensor(w)).sum().backward()
    (b * torch.tensor(w)).sum().backward()
    if INTEL and "gumbel" not in name:
        kept = lambda v: np.mean(v != 0)  # noqa: E731
        assert abs(kept(a.detach().numpy()) - kept(b.detach().numpy())) < 0.25
        return
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(xg.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_gumbel_softmax_is_pytorchs():
    gc.manual_seed(2)
    a = F.gumbel_softmax(gc.tensor(X[0]), tau=0.7, dim=0).numpy()
    torch.manual_seed(2)
    b = TF.gumbel_softmax(torch.tensor(X[0]), tau=0.7, dim=0).numpy()
    if INTEL:
        np.testing.assert_allclose(a.sum(0), 1.0, rtol=1e-5)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_channel_masks_zero_whole_channels_and_eval_is_identity():
    gc.manual_seed(0)
    y = F.dropout2d(gc.tensor(X), 0.5).numpy()
    per_channel = (y == 0).reshape(4 * 6, -1)
    assert np.all(per_channel.all(1) | ~per_channel.any(1))
    m = nn.Dropout2d(0.5).eval()
    np.testing.assert_array_equal(m(gc.tensor(X)).numpy(), X)
    np.testing.assert_array_equal(F.dropout3d(gc.tensor(X), 1.0).numpy(), 0 * X)


@pytest.mark.parametrize("fn,exact", [
    (lambda f, x: f.dropout(x, 0.4, True, True), False),  # its own mask stream (rand_like)
    (lambda f, x: f.dropout2d(x, 0.4, True, True), True),
    (lambda f, x: f.alpha_dropout(x, 0.4, True, True), True),
])
def test_inplace_dropout_writes_its_input(fn, exact):
    """``inplace=True`` changes the tensor passed in, as in PyTorch (the result is that
    tensor); it used to return a new tensor and leave the input alone."""
    x = gc.tensor(X.copy())
    gc.manual_seed(5)
    out = fn(F, x)
    assert out is x
    assert not np.array_equal(x.numpy(), X)
    xt = torch.tensor(X.copy())
    torch.manual_seed(5)
    fn(TF, xt)
    if exact and not INTEL:
        np.testing.assert_allclose(x.numpy(), xt.numpy(), rtol=1e-6, atol=1e-7)
    y = gc.tensor(X.copy())
    assert nn.Dropout(0.5, inplace=True)(y) is y
    assert not np.array_equal(y.numpy(), X)


def _step(x):
    h = F.dropout2d(x, 0.3) + F.alpha_dropout(x, 0.1, True)
    return h, F.gumbel_softmax(x.sum((2, 3)), hard=True)


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_compiled_noise_is_drawn_each_call_as_eager_does(backend):
    xs = [X[:n] for n in (2, 2, 4)]
    gc.manual_seed(7)
    eager = [[t.numpy() for t in _step(gc.tensor(x))] for x in xs]
    gc.manual_seed(7)
    f = gc.compile(_step, backend=backend)
    got = [[t.numpy() for t in f(x)] for x in xs]
    for e, g in zip(eager, got):
        for a, b in zip(g, e):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(got[0][0], got[1][0])
    assert f.compile_count == 1


def test_errors_are_pytorchs():
    for f in (F, TF):
        with pytest.raises(ValueError, match="between 0 and 1"):
            f.dropout2d(gc.tensor(X) if f is F else torch.tensor(X), 1.5)
        with pytest.raises(RuntimeError, match="Expected 2D or 3D input"):
            f.dropout1d(gc.tensor(X) if f is F else torch.tensor(X), 0.5)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        F.dropout2d(gc.tensor(X[0]), 0.5)
    assert any("dropout2d: Received a 3D input" in str(m.message) for m in w)
