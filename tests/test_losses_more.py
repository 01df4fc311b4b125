"""More losses against PyTorch: binary_cross_entropy, kl_div, huber, cosine embedding,
margin ranking, triplet margin, Poisson and Gaussian NLL, soft margin, hinge embedding and
multilabel soft margin; values and gradients of every differentiable argument for every
reduction, eagerly and compiled (one compile over two batch sizes, gradients to a
parameter), and the loss modules."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn

TF = torch.nn.functional
f32 = np.float32
_rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(f32)


def _u(lo: float, hi: float, *shape: int) -> np.ndarray:
    return _rng.uniform(lo, hi, shape).astype(f32)


def _sign(*shape: int) -> np.ndarray:
    return np.where(_rng.random(shape) < 0.5, -1.0, 1.0).astype(f32)


N, C = 6, 5
X, Y = _r(N, C), _r(N, C)
P, Q = _u(0.02, 0.98, N, C), _u(0.0, 1.0, N, C)
Q[0, :2] = 0.0  # kl_div's xlogy at 0
S = _sign(N)

# (name, differentiable arrays, constant arrays, options)
CASES = [
    ("binary_cross_entropy", [P], [Q], {}),
    ("binary_cross_entropy", [P], [Q], {"weight": _u(0.5, 2, C)}),
    ("binary_cross_entropy", [P[0]], [Q[0]], {}),
    ("kl_div", [X], [Q], {}),
    ("kl_div", [X], [Y], {"log_target": True}),
    ("huber_loss", [X, Y], [], {}),
    ("huber_loss", [X, Y], [], {"delta": 0.4}),
    ("cosine_embedding_loss", [X, Y], [S], {}),
    ("cosine_embedding_loss", [X, Y], [S], {"margin": 0.3}),
    ("cosine_embedding_loss", [X[0], Y[0]], [np.array(-1, f32)], {"margin": -0.5}),
    ("margin_ranking_loss", [X[:, 0], Y[:, 0]], [S], {}),
    ("margin_ranking_loss", [X[:, 0], Y[:, 0]], [S], {"margin": 0.5}),
    ("triplet_margin_loss", [X, Y, _r(N, C)], [], {}),
    ("triplet_margin_loss", [X, Y, _r(N, C)], [], {"margin": 2.0, "p": 1, "swap": True}),
    ("triplet_margin_loss", [X, Y, _r(N, C)], [], {"p": 3, "eps": 1e-3, "swap": True}),
    ("triplet_margin_loss", [X[0], Y[0], _r(C)], [], {}),
    ("poisson_nll_loss", [X], [Q * 4], {}),
    ("poisson_nll_loss", [X], [Q * 4], {"full": True}),
    ("poisson_nll_loss", [P], [Q * 4], {"log_input": False, "full": True, "eps": 1e-4}),
    ("gaussian_nll_loss", [X, Y, P], [], {}),
    ("gaussian_nll_loss", [X, Y, P], [], {"full": True, "eps": 0.1}),
    ("gaussian_nll_loss", [X, Y, P[:, :1]], [], {}),
    ("gaussian_nll_loss", [X, Y, P[:, 0]], [], {}),
    ("soft_margin_loss", [X], [_sign(N, C)], {}),
    ("hinge_embedding_loss", [X], [_sign(N, C)], {}),
    ("hinge_embedding_loss", [X], [_sign(N, C)], {"margin": 0.3}),
    ("multilabel_soft_margin_loss", [X], [(Q > 0.5).astype(f32)], {}),
    ("multilabel_soft_margin_loss", [X], [Q], {"weight": _u(0.5, 2, C)}),
]


def _ids(v: Any) -> str:
    return v if isinstance(v, str) else ("-".join(v) if isinstance(v, dict) else "")


def _tkw(kw: dict) -> dict:
    return {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


def _gkw(kw: dict) -> dict:
    return {k: gc.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


@pytest.mark.parametrize("red", ["mean", "sum", "none"])
@pytest.mark.parametrize("name,diff,const,kw", CASES, ids=_ids)
def test_eager(name: str, diff: list, const: list, kw: dict, red: str) -> None:
    gx = [gc.tensor(a, requires_grad=True) for a in diff]
    tx = [torch.tensor(a, requires_grad=True) for a in diff]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ty = getattr(TF, name)(*tx, *[torch.tensor(c) for c in const], reduction=red,
                               **_tkw(kw))
    gy = getattr(F, name)(*gx, *[gc.tensor(c) for c in const], reduction=red, **_gkw(kw))
    assert tuple(gy.shape) == tuple(ty.shape)
    w = _r(*ty.shape)
    (gy * gc.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    for i, (a, b) in enumerate(zip(gx, tx)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=f"gradient of argument {i}")


def test_kl_div_batchmean() -> None:
    gx, tx = gc.tensor(X, requires_grad=True), torch.tensor(X, requires_grad=True)
    gl = F.kl_div(gx, gc.tensor(Q), reduction="batchmean")
    tl = TF.kl_div(tx, torch.tensor(Q), reduction="batchmean")
    gl.backward()
    tl.backward()
    np.testing.assert_allclose(gl.numpy(), tl.item(), rtol=1e-5)
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-5)


def test_binary_cross_entropy_clamps_log() -> None:
    x = np.array([0.0, 1.0, 0.5, 1.0], f32)
    y = np.array([1.0, 0.0, 0.5, 1.0], f32)
    got = F.binary_cross_entropy(gc.tensor(x), gc.tensor(y), reduction="none")
    want = TF.binary_cross_entropy(torch.tensor(x), torch.tensor(y), reduction="none")
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="target size"):
        F.binary_cross_entropy(gc.tensor(P), gc.tensor(Q[:, :1]))


def test_errors() -> None:
    with pytest.raises(NotImplementedError, match="ctc_loss"):
        F.ctc_loss(gc.tensor(X), gc.tensor(S), [6], [1])
    with pytest.raises(NotImplementedError, match="ctc_loss"):
        nn.CTCLoss()
    with pytest.raises(ValueError, match="negative"):
        F.gaussian_nll_loss(gc.tensor(X), gc.tensor(Y), gc.tensor(-P))
    with pytest.raises(ValueError, match="incorrect size"):
        F.gaussian_nll_loss(gc.tensor(X), gc.tensor(Y), gc.tensor(P[:3]))
    with pytest.raises(ValueError, match="margin"):
        F.triplet_margin_loss(gc.tensor(X), gc.tensor(Y), gc.tensor(Y), margin=0.0)
    with pytest.raises(ValueError, match="not a valid value"):
        F.huber_loss(gc.tensor(X), gc.tensor(Y), reduction="avg")


MODULES = [
    ("BCELoss", {"weight": _u(0.5, 2, C)}, [P], [Q]),
    ("KLDivLoss", {"reduction": "batchmean"}, [X], [Q]),
    ("KLDivLoss", {"log_target": True, "reduction": "sum"}, [X], [Y]),
    ("HuberLoss", {"delta": 0.5}, [X], [Y]),
    ("CosineEmbeddingLoss", {"margin": 0.1}, [X, Y], [S]),
    ("MarginRankingLoss", {"margin": 0.2, "reduction": "sum"}, [X[:, 0], Y[:, 0]], [S]),
    ("TripletMarginLoss", {"margin": 0.5, "p": 1.0, "swap": True}, [X, Y, _r(N, C)], []),
    ("PoissonNLLLoss", {"full": True}, [X], [Q * 3]),
    ("GaussianNLLLoss", {"full": True}, [X, Y, P], []),
    ("SoftMarginLoss", {}, [X], [_sign(N, C)]),
    ("HingeEmbeddingLoss", {"margin": 2.0}, [X], [_sign(N, C)]),
    ("MultiLabelSoftMarginLoss", {"weight": _u(0.5, 2, C)}, [X], [Q]),
]


@pytest.mark.parametrize("name,kw,diff,const", MODULES, ids=_ids)
def test_modules(name: str, kw: dict, diff: list, const: list) -> None:
    tm = getattr(torch.nn, name)(**_tkw(kw))
    gm = getattr(nn, name)(**_gkw(kw))
    assert set(gm.state_dict()) == set(tm.state_dict())
    gx = [gc.tensor(a, requires_grad=True) for a in diff]
    tx = [torch.tensor(a, requires_grad=True) for a in diff]
    tl = tm(*tx, *[torch.tensor(c) for c in const])
    gl = gm(*gx, *[gc.tensor(c) for c in const])
    tl.backward()
    gl.backward()
    np.testing.assert_allclose(gl.numpy(), tl.item(), rtol=1e-5)
    for a, b in zip(gx, tx):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)


# -- compiled: the first differentiable argument is x * p with p a parameter ----------------
COMPILED = [
    ("binary_cross_entropy", lambda n: [_u(0.1, 0.9, n, C)], lambda n: [_u(0, 1, n, C)],
     {"weight": _u(0.5, 2, C)}),
    ("kl_div", lambda n: [_r(n, C)], lambda n: [_u(0, 1, n, C)], {"reduction": "batchmean"}),
    ("huber_loss", lambda n: [_r(n, C)], lambda n: [_r(n, C)], {"delta": 0.5}),
    ("cosine_embedding_loss", lambda n: [_r(n, C)], lambda n: [_r(n, C), _sign(n)],
     {"margin": 0.1}),
    ("margin_ranking_loss", lambda n: [_r(n, C)], lambda n: [_r(n, C), _sign(n, C)], {}),
    ("triplet_margin_loss", lambda n: [_r(n, C)], lambda n: [_r(n, C), _r(n, C)],
     {"swap": True}),
    ("poisson_nll_loss", lambda n: [_r(n, C)], lambda n: [_u(0, 4, n, C)], {"full": True}),
    ("gaussian_nll_loss", lambda n: [_r(n, C)], lambda n: [_r(n, C), _u(0.1, 2, n, C)],
     {"full": True}),
    ("soft_margin_loss", lambda n: [_r(n, C)], lambda n: [_sign(n, C)], {}),
    ("hinge_embedding_loss", lambda n: [_r(n, C)], lambda n: [_sign(n, C)], {}),
    ("multilabel_soft_margin_loss", lambda n: [_r(n, C)], lambda n: [_u(0, 1, n, C)], {}),
]


@pytest.mark.parametrize("backend", [None, "interp"])
@pytest.mark.parametrize("name,mk_x,mk_rest,kw", COMPILED, ids=_ids)
def test_compiled(name: str, mk_x: Any, mk_rest: Any, kw: dict, backend: Any) -> None:
    p0 = _u(0.5, 1.0, C)
    param = nn.Parameter(gc.tensor(p0))
    gfn, tfn = getattr(F, name), getattr(TF, name)
    gkw = _gkw(kw)

    @gc.compile(**({} if backend is None else {"backend": backend}))
    def step(x: Any, *rest: Any) -> Any:
        param.grad = None
        loss = gfn(x * param, *rest, **gkw)
        loss.backward()
        return loss

    for n in (3, 7):
        (x,), rest = mk_x(n), mk_rest(n)
        tp = torch.tensor(p0, requires_grad=True)
        tl = tfn(torch.tensor(x) * tp, *[torch.tensor(r) for r in rest], **_tkw(kw))
        tl.backward()
        gl = step(gc.tensor(x), *[gc.tensor(r) for r in rest])
        np.testing.assert_allclose(gl.numpy(), tl.item(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(param.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert step.compile_count == 1
