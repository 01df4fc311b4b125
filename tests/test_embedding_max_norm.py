"""``max_norm`` of ``nn.Embedding`` / ``F.embedding`` / ``EmbeddingBag``: the rows a lookup
reads are renormed in place first (ATen's ``embedding_renorm_``), eagerly and in compiled
training steps, equal to PyTorch's weights, outputs and gradients over several steps."""

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim


def _pair(kind: str, max_norm: float, norm_type: float):
    gc.manual_seed(0)
    if kind == "embedding":
        g = nn.Embedding(12, 5, max_norm=max_norm, norm_type=norm_type, padding_idx=0)
        t = torch.nn.Embedding(12, 5, max_norm=max_norm, norm_type=norm_type, padding_idx=0)
    else:
        g = nn.EmbeddingBag(12, 5, max_norm=max_norm, norm_type=norm_type, mode="mean")
        t = torch.nn.EmbeddingBag(12, 5, max_norm=max_norm, norm_type=norm_type, mode="mean")
    w = np.random.default_rng(1).standard_normal((12, 5)).astype(np.float32) * 2.0
    g.weight.data = gc.tensor(w)
    t.weight.data = torch.tensor(w)
    return g, t


@pytest.mark.parametrize("kind", ["embedding", "bag"])
@pytest.mark.parametrize("norm_type", [2.0, 1.0])
@pytest.mark.parametrize("compiled", [False, True])
def test_max_norm_training_matches_torch(kind, norm_type, compiled):
    g, t = _pair(kind, 1.5, norm_type)
    head, thead = nn.Linear(5, 1), torch.nn.Linear(5, 1)
    thead.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in head.state_dict().items()})
    params = [*g.parameters(), *head.parameters()]
    opt = optim.SGD(params, lr=0.5)
    topt = torch.optim.SGD([*t.parameters(), *thead.parameters()], lr=0.5)

    def step(idx):
        opt.zero_grad()
        loss = head(g(idx)).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    run = gc.compile(step) if compiled else (lambda i: step(gc.tensor(i)))
    rng = np.random.default_rng(2)
    for _ in range(4):
        idx = rng.integers(0, 12, (3, 4))  # repeated rows in and across bags
        loss = run(idx)
        topt.zero_grad()
        tl = thead(t(torch.tensor(idx))).pow(2).mean()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g.weight.numpy(), t.weight.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_functional_embedding_renorms_the_weight_in_place():
    w = np.array([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]], np.float32)
    gw, tw = gc.tensor(w.copy()), torch.tensor(w.copy())
    out = nn.functional.embedding(gc.tensor(np.array([0, 1, 0])), gw, max_norm=1.0)
    tout = torch.nn.functional.embedding(torch.tensor([0, 1, 0]), tw, max_norm=1.0)
    np.testing.assert_array_equal(out.numpy(), tout.numpy())
    np.testing.assert_array_equal(gw.numpy(), tw.numpy())  # row 2 was not read: unchanged
    assert gw.numpy()[2, 0] == 6.0
