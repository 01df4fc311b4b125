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


def _noisy(x):
    """A step drawing from the generator four ways between other work (dropout's seed too):
    the draws themselves, and a result computed from them."""
    r = (gc.rand(3), gc.randn(x.shape[0], 1))
    h = gc.nn.functional.dropout(x + r[0] * r[1], 0.5, training=True)
    r += (gc.rand_like(h), gc.randn_like(h, dtype=gc.float64))
    return (*r, h * r[2] + r[3].to(gc.float32))


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_compiled_rand_draws_new_values_each_call_as_eager_does(backend):
    """gc.rand/randn/rand_like/randn_like in a compiled step are filled on every call from
    the generator, in eager's order (dropout's seed in between): the compiled calls give the
    eager calls' values bit for bit, one compile for every batch size; drawn at trace time
    they would repeat the first call's numbers forever."""
    xs = [np.zeros((n, 3), np.float32) for n in (2, 2, 5)]
    gc.manual_seed(0)
    eager = [[t.numpy() for t in _noisy(gc.tensor(x))] for x in xs]
    gc.manual_seed(0)
    f = gc.compile(_noisy, backend=backend)
    got = [[t.numpy() for t in f(x)] for x in xs]
    for e, g in zip(eager, got):
        for a, b in zip(g[:4], e[:4]):  # the draws: bit for bit
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        # the arithmetic on them: the compiled code may contract a * b + c into one FMA
        np.testing.assert_allclose(g[4], e[4], rtol=1e-6, atol=1e-7)
    assert not np.array_equal(got[0][0], got[1][0])
    assert f.compile_count == 1


def test_compiled_rand_is_pytorchs_stream():
    torch.manual_seed(5)
    t1, t2 = torch.rand(4, 3).numpy(), torch.rand(4, 3).numpy()
    gc.manual_seed(5)
    f = gc.compile(lambda x: x + gc.rand(4, 3), dynamic=False)
    z = np.zeros((4, 3), np.float32)
    np.testing.assert_array_equal(f(z).numpy(), t1)
    np.testing.assert_array_equal(f(z).numpy(), t2)


def test_random_values_where_they_cannot_be_drawn_per_call():
    f = gc.compile(lambda x: x + gc.rand(3))
    with pytest.raises(NotImplementedError, match="gc.rand"):
        f.run(np.zeros((2, 4, 3), np.float32))
    with pytest.raises(NotImplementedError, match=r"requires_grad=True\) inside a compiled"):
        gc.compile(lambda x: x + gc.rand(3, requires_grad=True))(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="floating point"):
        gc.compile(lambda x: x + gc.rand(3, dtype=gc.int64))(np.zeros((2, 3), np.float32))


def test_aot_step_refuses_per_call_random_values(tmp_path):
    from graphc.aot import AOTError

    f = gc.compile(lambda x: x + gc.rand(3), dynamic=False)
    with pytest.raises(AOTError, match="gc.rand"):
        gc.aot.build(f, (np.zeros((2, 3), np.float32),), str(tmp_path), "noisy")


def test_init_inside_a_compiled_step_draws_on_every_call():
    """nn.init writes through the tensor's in-place fills, which a compiled step draws anew on
    every call: each call writes what eager execution writes after the same seed, and the
    stream ends where eager's does (tests/test_nn_init_full.py covers every initialiser)."""
    w = gc.zeros(4, 3)

    def step(x):
        nn.init.kaiming_uniform_(w)
        return x @ w.T

    cs = gc.compile(step)
    runs = []
    for f, x in ((cs, np.ones((2, 3), np.float32)), (step, gc.ones(2, 3))):
        gc.manual_seed(1)
        runs.append([(f(x).numpy(), w.numpy().copy()) for _ in range(2)] + [(gc.rand(5).numpy(),)])
    for got, want in zip(*runs):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(runs[0][0][1], runs[0][1][1]) and cs.compile_count == 1


@pytest.mark.parametrize("seed", [0, 9])
def test_randint_randperm_and_fills_are_pytorchs_stream(seed):
    """``randint`` (32- and 64-bit ranges, ``low`` given or not, a dtype), ``randperm``,
    ``randint_like`` and the in-place ``uniform_``/``normal_`` fills give PyTorch's values
    bit for bit after the same seed, interleaved as a data pipeline interleaves them; a
    ``Generator`` of each keeps its own stream."""
    def draws(m):
        m.manual_seed(seed)
        out = [m.randint(10, (6,)), m.randint(-5, 2**40, (3, 2)), m.randperm(1),
               m.randperm(257), m.randint(3, 9, size=(4,), dtype=m.float32),
               m.randint_like(m.zeros(2, 3, dtype=m.int32), 7),
               m.empty(5, 3).uniform_(-0.1, 0.1), m.empty(40, dtype=m.float64).normal_(1, 2),
               m.empty(7).normal_(), m.empty(30).uniform_(-1 / 3, 0.7), m.rand(3)]
        g = m.Generator().manual_seed(seed + 1)
        out += [m.randint(100, (5,), generator=g), m.randperm(9, generator=g), m.randint(4, (2,))]
        return out
    for a, b in zip(draws(gc), draws(torch)):
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_random_draw_errors():
    for m in (gc, torch):
        with pytest.raises(RuntimeError, match="expects 'from' to be less than 'to'"):
            m.randint(5, 5, (2,))
        with pytest.raises(RuntimeError, match="floating point .*dtype can require gradients"):
            m.randint(5, (2,), requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            m.ones(2, requires_grad=True).uniform_()
        with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
            m.ones(2, dtype=m.int64).normal_()
    with pytest.raises(RuntimeError, match="floating point .*dtype can require gradients"):
        gc.compile(lambda x: x + gc.randint(3, x.shape, requires_grad=True))(np.ones(3))
    with pytest.raises(TypeError, match="generator: expected a graphc.Generator"):
        gc.compile(lambda x: x + gc.randint(3, x.shape, generator=7))(np.ones(3))


def _pipeline(x):
    """A step that draws the ways a data pipeline and a training step do: a permutation, a
    random crop offset, in-place fills of new tensors and of a buffer, between arithmetic."""
    perm = gc.randperm(x.shape[1])
    off = gc.randint(0, 3, (1,))
    noise = gc.empty_like(x).uniform_(-0.5, 0.5) + gc.zeros_like(x).normal_(0.0, 0.1)
    y = x * 2 + noise
    y.mul_(gc.empty_like(y).bernoulli_(0.8))
    z = gc.randint_like(x, 5, 9, dtype=gc.int64)
    return perm, off, noise, z, y


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_compiled_randint_randperm_and_fills_draw_each_call_as_eager_does(backend):
    """randint, randint_like, randperm and Tensor fills inside a compiled step are drawn on
    every call, for the call's batch size, in eager's order: the compiled calls give eager's
    (and so PyTorch's) values bit for bit, with one compile; drawn at trace time they would
    repeat the first call's numbers."""
    xs = [np.arange(n * 4, dtype=np.float32).reshape(n, 4) for n in (3, 3, 6)]
    gc.manual_seed(4)
    eager = [[np.asarray(t.numpy()) for t in _pipeline(gc.tensor(x))] for x in xs]
    gc.manual_seed(4)
    f = gc.compile(_pipeline, backend=backend)
    got = [[np.asarray(t.numpy()) for t in f(x)] for x in xs]
    for e, g in zip(eager, got):
        for a, b in zip(g[:4], e[:4]):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(g[4], e[4], rtol=1e-6, atol=1e-6)
    assert not np.array_equal(got[0][2], got[1][2])
    assert f.compile_count == 1
    torch.manual_seed(4)
    t = torch.from_numpy(xs[0])
    np.testing.assert_array_equal(got[0][0], torch.randperm(4).numpy())
    np.testing.assert_array_equal(got[0][1], torch.randint(0, 3, (1,)).numpy())
    np.testing.assert_array_equal(got[0][2], (torch.empty_like(t).uniform_(-0.5, 0.5)
                                              + torch.zeros_like(t).normal_(0.0, 0.1)).numpy())


def test_compiled_draws_from_a_generator_read_at_each_call():
    """A ``Generator`` passed to a random op in a compiled step is read when the step runs:
    reseeding it between calls replays the values, as it does eagerly."""
    g = gc.Generator()

    def f(x):
        return x + gc.randint(0, 100, x.shape, generator=g)

    cf = gc.compile(f)
    x = np.zeros(6, np.float32)
    g.manual_seed(1)
    a = cf(x).numpy()
    g.manual_seed(1)
    np.testing.assert_array_equal(cf(x).numpy(), a)
    g.manual_seed(1)
    np.testing.assert_array_equal(f(gc.tensor(x)).numpy(), a)
    tg = torch.Generator().manual_seed(1)
    np.testing.assert_array_equal(a, torch.randint(0, 100, (6,), generator=tg).numpy())
