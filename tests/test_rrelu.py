"""``F.rrelu``, ``F.rrelu_`` and ``nn.RReLU`` against PyTorch.

Eval mode is leaky_relu with the mean slope (eager and compiled). Training mode draws one
double uniform per element ``<= 0`` in element order, as ATen's CPU kernel does, so after the
same seed the values, the gradients (``noise * grad``) and the stream position after the call
are PyTorch's, bit for bit; inside a compiled step it raises before drawing anything.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim

DTYPES = [(np.float32, torch.float32), (np.float64, torch.float64)]
IDS = ["float32", "float64"]


def _input(dtype: Any, shape: tuple[int, ...] = (5, 7), seed: int = 0) -> np.ndarray:
    """Normal values plus the edge cases of the ``x <= 0`` test: +0, -0, NaN, +-inf."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[:5] = [0.0, -0.0, np.nan, -np.inf, np.inf]
    return x


def _same(a: Any, b: Any, what: str) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, what
    np.testing.assert_array_equal(a, b, err_msg=what)


@pytest.mark.parametrize("dtype, tdtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("bounds", [(1 / 8, 1 / 3), (0.1, 0.7), (0.3, 0.3), (-0.5, 0.2)])
def test_eval_matches_torch(dtype: Any, tdtype: Any, bounds: tuple[float, float]) -> None:
    x = _input(dtype)
    w = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    tx = torch.tensor(x, requires_grad=True)
    gx = gc.tensor(x, requires_grad=True)
    ty = torch.nn.functional.rrelu(tx, *bounds)
    gy = F.rrelu(gx, *bounds)
    _same(gy.numpy(), ty.detach().numpy(), "eval values")
    (ty * torch.tensor(w)).sum().backward()
    (gy * gc.tensor(w)).sum().backward()
    _same(gx.grad.numpy(), tx.grad.numpy(), "eval gradient")


@pytest.mark.parametrize("dtype, tdtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("seed", [0, 7])
def test_training_matches_torch_after_the_same_seed(dtype: Any, tdtype: Any,
                                                    seed: int) -> None:
    """Values and gradients equal PyTorch's, and both streams are at the same place after
    the call (the next draws agree); a second call draws new slopes, as PyTorch's does."""
    x = _input(dtype)
    w = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    torch.manual_seed(seed)
    gc.manual_seed(seed)
    for call in range(2):
        tx = torch.tensor(x, requires_grad=True)
        gx = gc.tensor(x, requires_grad=True)
        ty = torch.nn.functional.rrelu(tx, 0.1, 0.4, training=True)
        gy = F.rrelu(gx, 0.1, 0.4, training=True)
        _same(gy.numpy(), ty.detach().numpy(), f"training values, call {call}")
        (ty * torch.tensor(w)).sum().backward()
        (gy * gc.tensor(w)).sum().backward()
        _same(gx.grad.numpy(), tx.grad.numpy(), f"training gradient, call {call}")
    _same(gc.rand(6).numpy(), torch.rand(6).numpy(), "the stream after the calls")


def test_training_draws_in_element_order_of_a_view() -> None:
    """A transposed (non-contiguous) input draws in its own row-major order, as ATen's
    kernel does on ``self.contiguous()``."""
    x = _input(np.float32, (6, 4), seed=3)
    torch.manual_seed(2)
    gc.manual_seed(2)
    ty = torch.nn.functional.rrelu(torch.tensor(x).t(), 0.2, 0.6, training=True)
    gy = F.rrelu(gc.tensor(x).t(), 0.2, 0.6, training=True)
    _same(gy.numpy(), ty.numpy(), "values of a transposed input")


@pytest.mark.parametrize("dtype, tdtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("training", [False, True])
def test_inplace_forms_match_torch(dtype: Any, tdtype: Any, training: bool) -> None:
    """``F.rrelu_``, ``F.rrelu(inplace=True)`` and ``nn.RReLU(inplace=True)`` write into a
    non-leaf input, return it, and give PyTorch's values and gradients."""
    x = _input(dtype)
    w = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    forms = [
        (lambda t: torch.nn.functional.rrelu_(t, 0.1, 0.3, training),
         lambda t: F.rrelu_(t, 0.1, 0.3, training)),
        (lambda t: torch.nn.functional.rrelu(t, 0.1, 0.3, training, True),
         lambda t: F.rrelu(t, 0.1, 0.3, training, True)),
        (torch.nn.RReLU(0.1, 0.3, inplace=True).train(training),
         nn.RReLU(0.1, 0.3, inplace=True).train(training)),
    ]
    torch.manual_seed(4)
    gc.manual_seed(4)
    for i, (tf, gf) in enumerate(forms):
        tx = torch.tensor(x, requires_grad=True)
        gx = gc.tensor(x, requires_grad=True)
        th, gh = tx * 1.0, gx * 1.0
        ty, gy = tf(th), gf(gh)
        assert gy is gh, f"form {i} returns its input"
        _same(gh.numpy(), th.detach().numpy(), f"form {i}: values written in place")
        (ty * torch.tensor(w)).sum().backward()
        (gy * gc.tensor(w)).sum().backward()
        _same(gx.grad.numpy(), tx.grad.numpy(), f"form {i}: gradient")


def test_module_follows_train_and_eval() -> None:
    m, tm = nn.RReLU(0.2, 0.5), torch.nn.RReLU(0.2, 0.5)
    x = _input(np.float32)
    torch.manual_seed(9)
    gc.manual_seed(9)
    _same(m(gc.tensor(x)).numpy(), tm(torch.tensor(x)).numpy(), "training (the default)")
    m.eval()
    tm.eval()
    _same(m(gc.tensor(x)).numpy(), tm(torch.tensor(x)).numpy(), "eval")
    assert repr(m) == repr(tm) == "RReLU(lower=0.2, upper=0.5)"
    assert repr(nn.RReLU(inplace=True)) == repr(torch.nn.RReLU(inplace=True))
    assert repr(nn.RReLU()) == repr(torch.nn.RReLU())


def test_bad_arguments_raise_like_torch() -> None:
    x = gc.tensor(np.ones(3, np.float32))
    for training in (False, True):
        with pytest.raises(RuntimeError, match="Lower bound should be less than or equal"):
            F.rrelu(x, 0.5, 0.1, training)
        with pytest.raises(RuntimeError, match="Lower bound should be less than or equal"):
            torch.nn.functional.rrelu(torch.ones(3), 0.5, 0.1, training)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.rrelu(gc.tensor(np.arange(3)), training=True)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch.nn.functional.rrelu(torch.arange(3), training=True)
    with pytest.raises(NotImplementedError, match="bfloat16"):
        F.rrelu(x.to(gc.bfloat16), training=True)


def _models(seed: int = 0) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.RReLU(0.1, 0.3),
                             torch.nn.Linear(8, 3))
    gm = nn.Sequential(nn.Linear(4, 8), nn.RReLU(0.1, 0.3), nn.Linear(8, 3))
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, gm


def test_compiled_eval_matches_torch() -> None:
    """In eval mode RReLU compiles (a fixed slope): a compiled SGD step gives PyTorch's
    losses and parameters, with one compile for two batch sizes."""
    tm, gm = _models()
    tm.eval()
    gm.eval()
    topt = torch.optim.SGD(tm.parameters(), lr=0.1)
    gopt = optim.SGD(gm.parameters(), lr=0.1)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        loss = ((gm(x) - y) ** 2).mean()
        loss.backward()
        gopt.step()
        return loss

    rng = np.random.default_rng(0)
    for batch in (16, 16, 5):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        y = rng.standard_normal((batch, 3)).astype(np.float32)
        topt.zero_grad()
        tl = ((tm(torch.tensor(x)) - torch.tensor(y)) ** 2).mean()
        tl.backward()
        topt.step()
        gl = step(x, y)
        np.testing.assert_allclose(np.asarray(gl), tl.item(), rtol=1e-5)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(np.asarray(gm.state_dict()[k]), v.numpy(), rtol=1e-5,
                                   atol=1e-7, err_msg=k)
    assert step.compile_count == 1


def test_compiled_training_raises_before_drawing() -> None:
    """Training-mode rrelu in a compiled step raises NotImplementedError, and the random
    stream has not moved (the next draw is the one PyTorch makes right after the seed)."""
    _, gm = _models()
    gm.train()

    @gc.compile
    def forward(x: Any) -> Any:
        return gm(x).sum()

    gc.manual_seed(11)
    with pytest.raises(NotImplementedError, match="compiled step"):
        forward(np.ones((2, 4), np.float32))
    torch.manual_seed(11)
    _same(gc.rand(5).numpy(), torch.rand(5).numpy(), "the stream after the refusal")

    @gc.compile
    def direct(x: Any) -> Any:
        return F.rrelu(x, training=True)

    with pytest.raises(NotImplementedError, match="compiled step"):
        direct(np.full((3,), -1.0, np.float32))


def test_registered_names() -> None:
    assert "rrelu" in F.__all__ and "rrelu_" in F.__all__ and "RReLU" in nn.__all__
