"""gc.manual_seed reproduces PyTorch's CPU generator stream (uniform exactly, normal to the
last bits of its vectorised transcendental functions) and so PyTorch's initial parameters."""

import numpy as np
import pytest

import graphc as gc
from graphc import nn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [("float32", np.float32), ("float64", np.float64)])
def test_rand_is_bit_exact(dtype):
    tname, npd = dtype
    torch.manual_seed(7)
    t = torch.rand(37, dtype=getattr(torch, tname)).numpy()
    gc.manual_seed(7)
    g = gc.rand(37, dtype=npd).numpy()
    np.testing.assert_array_equal(g, t)


@pytest.mark.parametrize("n", [1, 3, 15, 16, 17, 100, 257])
def test_randn_follows_pytorch(n):
    torch.manual_seed(3)
    t1, t2 = torch.randn(n).numpy(), torch.randn(n).numpy()
    gc.manual_seed(3)
    g1, g2 = gc.randn(n).numpy(), gc.randn(n).numpy()
    np.testing.assert_allclose(g1, t1, rtol=0, atol=5e-7)
    np.testing.assert_allclose(g2, t2, rtol=0, atol=5e-7)


def test_model_init_matches_pytorch_under_the_same_seed():
    torch.manual_seed(11)
    tm = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Linear(5, 4),
                             torch.nn.Embedding(20, 6), torch.nn.LayerNorm(6))
    gc.manual_seed(11)
    gm = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Linear(5, 4), nn.Embedding(20, 6),
                       nn.LayerNorm(6))
    gsd = gm.state_dict()
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(gsd[k], v.numpy(), rtol=0, atol=5e-7, err_msg=k)
