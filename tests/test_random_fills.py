"""The random fills of tensors (``exponential_``, ``geometric_``, ``log_normal_``,
``cauchy_``, ``random_``, ``bernoulli_``), ``gc.bernoulli`` and ``gc.multinomial``: PyTorch's
values bit for bit after the same seed, eagerly; inside a compiled step drawn on every call,
in eager's order; PyTorch's errors.

PyTorch builds with MKL draw ``bernoulli_`` with a number ``p`` (and, in some versions,
``exponential_``, which multinomial without replacement uses) from MKL's own stream on Intel
CPUs; there those comparisons check the distribution instead of the bits."""


import numpy as np
import pytest
from _torch import INTEL, torch

import graphc as gc

DTYPES = [("float32", gc.float32), ("float64", gc.float64)]


def _same(name, fg, ft, seed=0, exact=True):
    gc.manual_seed(seed)
    a = fg().numpy()
    torch.manual_seed(seed)
    b = ft().numpy()
    assert a.dtype == b.dtype, name
    assert a.shape == b.shape, name
    if exact:
        np.testing.assert_array_equal(a, b, err_msg=name)
    elif a.size:  # the same distribution: means within 5 standard errors (none for n == 0)
        se = max(float(np.std(b.astype(np.float64))), 1e-3) / np.sqrt(a.size)
        assert abs(float(np.mean(a)) - float(np.mean(b))) < 5 * se + 1e-9, name


@pytest.mark.parametrize("dtype", DTYPES, ids=[d[0] for d in DTYPES])
@pytest.mark.parametrize("n", [0, 1, 5, 16, 40])
def test_fills_are_pytorchs_stream(dtype, n):
    tname, d = dtype
    td = getattr(torch, tname)
    cases = {
        "geometric_": (lambda m, t: m.empty(n, dtype=t).geometric_(0.3)),
        "log_normal_": (lambda m, t: m.empty(n, dtype=t).log_normal_()),
        "log_normal_(0.5, 0.25)": (lambda m, t: m.empty(n, dtype=t).log_normal_(0.5, 0.25)),
        "cauchy_": (lambda m, t: m.empty(n, dtype=t).cauchy_(1.0, 2.0)),
        "random_()": (lambda m, t: m.empty(n, dtype=t).random_()),
        "random_(7)": (lambda m, t: m.empty(n, dtype=t).random_(7)),
        "random_(3, 9)": (lambda m, t: m.empty(n, dtype=t).random_(3, 9)),
        "random_(-5, to=2**20)": (lambda m, t: m.empty(n, dtype=t).random_(-5, to=2**20)),
        "bernoulli(p)": (lambda m, t: m.bernoulli(m.linspace(0, 1, n, dtype=t))),
    }
    for name, f in cases.items():
        _same(name, lambda f=f: f(gc, d), lambda f=f: f(torch, td))
    if tname == "float64":
        _same("random_(-5, to=2**40)", lambda: gc.empty(n, dtype=d).random_(-5, to=2**40),
              lambda: torch.empty(n, dtype=td).random_(-5, to=2**40))
    _same("exponential_", lambda: gc.empty(n, dtype=d).exponential_(2.5),
          lambda: torch.empty(n, dtype=td).exponential_(2.5), exact=not INTEL)
    _same("bernoulli_(0.3)", lambda: gc.empty(n, dtype=d).bernoulli_(0.3),
          lambda: torch.empty(n, dtype=td).bernoulli_(0.3), exact=not INTEL)


@pytest.mark.parametrize("name", ["int64", "int32", "bool"])
def test_integer_fills_are_pytorchs_stream(name):
    d, td = getattr(gc, name), getattr(torch, name)
    _same("random_()", lambda: gc.zeros(9, dtype=d).random_(),
          lambda: torch.zeros(9, dtype=td).random_())
    _same("random_(0, 2)", lambda: gc.zeros(3, 3, dtype=d).random_(0, 2),
          lambda: torch.zeros(3, 3, dtype=td).random_(0, 2))
    if name != "bool":
        _same("geometric_", lambda: gc.zeros(9, dtype=d).geometric_(0.2),
              lambda: torch.zeros(9, dtype=td).geometric_(0.2))
        _same("random_(-3, 4)", lambda: gc.zeros(9, dtype=d).random_(-3, 4),
              lambda: torch.zeros(9, dtype=td).random_(-3, 4))


def test_bernoulli_forms():
    """A probability tensor broadcast over ``self`` (one draw per element of ``self``), the
    functional form with a number, a float64 ``p`` (double draws), the method forms, a
    ``Generator``."""
    _same("bernoulli_(tensor)", lambda: gc.zeros(3, 4).bernoulli_(gc.linspace(0, 1, 4)),
          lambda: torch.zeros(3, 4).bernoulli_(torch.linspace(0, 1, 4)))
    _same("bernoulli_(f64 tensor)",
          lambda: gc.zeros(5).bernoulli_(gc.full((5,), 0.5, dtype=gc.float64)),
          lambda: torch.zeros(5).bernoulli_(torch.full((5,), 0.5, dtype=torch.float64)))
    _same("x.bernoulli()", lambda: gc.full((2, 6), 0.4, dtype=gc.float64).bernoulli(),
          lambda: torch.full((2, 6), 0.4, dtype=torch.float64).bernoulli())
    _same("bernoulli(x, 0.4)", lambda: gc.bernoulli(gc.zeros(3, 4), 0.4),
          lambda: torch.bernoulli(torch.zeros(3, 4), 0.4), exact=not INTEL)
    _same("bernoulli(generator)",
          lambda: gc.bernoulli(gc.full((7,), 0.5), generator=gc.Generator().manual_seed(5)),
          lambda: torch.bernoulli(torch.full((7,), 0.5),
                                  generator=torch.Generator().manual_seed(5)))


def test_fills_with_a_generator_leave_the_global_stream_alone():
    for name, f in {"uniform_": lambda m, g: m.empty(7).uniform_(-1, 2, generator=g),
                    "exponential_": lambda m, g: m.empty(7).exponential_(generator=g),
                    "cauchy_": lambda m, g: m.empty(7).cauchy_(generator=g),
                    "random_": lambda m, g: m.empty(7).random_(0, 50, generator=g)}.items():
        _same(name, lambda f=f: f(gc, gc.Generator().manual_seed(3)),
              lambda f=f: f(torch, torch.Generator().manual_seed(3)),
              exact=not (INTEL and name == "exponential_"))
    # normal draws keep Box-Muller's second sample in their generator, as PyTorch's do
    # (16 and more float32 values: to the last bits of PyTorch's vectorised sin/cos/log)
    np.testing.assert_allclose(gc.cat(_normals(gc, gc.Generator().manual_seed(6))).numpy(),
                               torch.cat(_normals(torch, torch.Generator().manual_seed(6))
                                         ).numpy(), rtol=0, atol=5e-7)
    gc.manual_seed(2)
    gc.empty(5).cauchy_(generator=gc.Generator())
    after = gc.rand(3).numpy()
    gc.manual_seed(2)
    np.testing.assert_array_equal(after, gc.rand(3).numpy())


def _normals(m, g):
    return [m.randn(3, generator=g), m.randn(5, generator=g), m.randn(40, generator=g),
            m.empty(3).normal_(1.0, 2.0, generator=g), m.rand(4, generator=g),
            m.empty(3, dtype=m.float64).log_normal_(generator=g).float(),
            m.randn(3, dtype=m.float64, generator=g).float()]


def test_compiled_draws_from_a_generator_as_eager_does():
    g = gc.Generator()

    def f(x):
        return (x + gc.randn(x.shape[0], generator=g), gc.rand(2, generator=g),
                gc.empty_like(x).normal_(generator=g))

    cf = gc.compile(f)
    g.manual_seed(3)
    got = [[t.numpy() for t in cf(np.zeros(n, np.float32))] for n in (3, 3, 5)]
    g.manual_seed(3)
    eager = [[t.numpy() for t in f(gc.zeros(n))] for n in (3, 3, 5)]
    for a, b in zip(got, eager):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)
    assert cf.compile_count == 1


W = np.random.default_rng(0).random((3, 10)).astype(np.float32)


@pytest.mark.parametrize("num,replacement", [(1, False), (4, False), (10, False), (1, True),
                                             (25, True)])
def test_multinomial_is_pytorchs(num, replacement):
    """Without replacement (or one sample): the exponential-race sampler; with replacement:
    a binary search of one double uniform per sample in the row's normalised cumulative sum.
    2-d and 1-d weights, float32 and float64, weights that do not sum to one, zeros."""
    w = W.copy()
    if num <= 6 or replacement:  # ties among zero weights drawn last: their order is topk's
        w[1, 3:7] = 0
    exact = not (INTEL and (not replacement or num == 1))
    for arr in (w, w.astype(np.float64) * 3):
        _same("multinomial 2-d", lambda arr=arr: gc.multinomial(gc.tensor(arr), num, replacement),
              lambda arr=arr: torch.multinomial(torch.tensor(arr), num, replacement), exact=exact)
        _same("multinomial 1-d", lambda arr=arr: gc.tensor(arr[0]).multinomial(num, replacement),
              lambda arr=arr: torch.tensor(arr[0]).multinomial(num, replacement), exact=exact)


def test_multinomial_never_draws_a_zero_weight():
    w = np.zeros((4, 6), np.float32)
    w[:, 2] = 1
    w[:, 5] = 3
    got = gc.multinomial(gc.tensor(w), 200, True).numpy()
    assert set(np.unique(got)) <= {2, 5}
    assert sorted(gc.multinomial(gc.tensor(w), 2).numpy()[0]) == [2, 5]


def test_errors_are_pytorchs():
    for m in (gc, torch):
        for call, err, msg in [
            (lambda m=m: m.empty(3).exponential_(0.0), RuntimeError, "lambda > 0.0"),
            (lambda m=m: m.empty(3).geometric_(1.5), RuntimeError, r"p to be in \(0, 1\)"),
            (lambda m=m: m.empty(3).log_normal_(0.0, -1.0), RuntimeError, "std > 0.0"),
            (lambda m=m: m.empty(3).cauchy_(0.0, 0.0), RuntimeError, "sigma > 0.0"),
            (lambda m=m: m.empty(3).bernoulli_(1.5), RuntimeError, r"p to be in \[0, 1\]"),
            (lambda m=m: m.empty(3).random_(5, 5), RuntimeError, "from' to be less than 'to'"),
            (lambda m=m: m.zeros(3, dtype=m.int64).exponential_(), RuntimeError,
             "continuous probability distribution. dtype must be a floating point"),
            (lambda m=m: m.zeros(3, dtype=m.int64).log_normal_(), NotImplementedError,
             "not implemented for 'Long'"),
            (lambda m=m: m.bernoulli(m.zeros(3, dtype=m.int64)), RuntimeError,
             "\"bernoulli_tensor_cpu_p_\" not implemented for 'Long'"),
            (lambda m=m: m.multinomial(m.ones(3, dtype=m.int64), 1), RuntimeError,
             "only supports floating-point dtypes"),
            (lambda m=m: m.multinomial(m.ones(2, 3, 4), 1), RuntimeError, "1 or 2 dim"),
            (lambda m=m: m.multinomial(m.ones(3), 4), RuntimeError,
             "cannot sample n_sample > prob_dist"),
            (lambda m=m: m.multinomial(m.zeros(3), 2, True), RuntimeError,
             "sum of probabilities <= 0"),
            (lambda m=m: m.multinomial(m.tensor([1.0, -1.0]), 1), RuntimeError,
             "probability tensor contains"),
            (lambda m=m: m.ones(2, requires_grad=True).exponential_(), RuntimeError,
             "leaf Variable that requires grad"),
        ]:
            with pytest.raises(err, match=msg):
                call()
    with pytest.raises(TypeError, match="generator: expected a graphc.Generator"):
        gc.empty(3).cauchy_(generator=3)
    with pytest.raises(NotImplementedError, match="outside the integers float32 holds"):
        gc.empty(3).random_(0, 2**30)


@pytest.mark.parametrize("call", [
    lambda m: m.empty(3).uniform_(3, 1), lambda m: m.empty(3).uniform_(2.5, 1.0),
    lambda m: m.empty(3).uniform_(1e-7, 1e-8), lambda m: m.empty(3).normal_(0, -1.5),
    lambda m: m.empty(3).log_normal_(0, -2)])
def test_bound_messages_print_numbers_as_aten_does(call):
    """ATen prints a double with the C++ stream's defaults (``from=3``, not ``from=3.0``)."""
    msgs = []
    for m in (gc, torch):
        with pytest.raises(RuntimeError) as e:
            call(m)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


def _fills(x):
    """Every fill inside a step, on new tensors of the batch's shape and on a float64 one."""
    e = gc.empty_like(x)
    y = (e.clone().exponential_(3.0) + e.clone().geometric_(0.5) + e.clone().cauchy_() * 0
         + e.clone().random_(0, 5) + gc.bernoulli(x.sigmoid()) + e.clone().bernoulli_(0.25))
    z = gc.zeros(x.shape, dtype=gc.float64).log_normal_(0.0, 0.5)
    return y, z, x * e.clone().bernoulli_(gc.full((x.shape[1],), 0.5))


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_compiled_fills_draw_each_call_as_eager_does(backend):
    xs = [np.linspace(-1, 1, n * 3, dtype=np.float32).reshape(n, 3) for n in (4, 4, 9)]
    gc.manual_seed(8)
    eager = [[t.numpy() for t in _fills(gc.tensor(x))] for x in xs]
    gc.manual_seed(8)
    f = gc.compile(_fills, backend=backend)
    got = [[t.numpy() for t in f(x)] for x in xs]
    for e, g in zip(eager, got):
        for a, b in zip(g, e):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got[0][0], got[1][0])
    assert f.compile_count == 1


def test_multinomial_in_a_compiled_step_raises_before_drawing():
    gc.manual_seed(1)
    with pytest.raises(NotImplementedError, match="multinomial inside a compiled step"):
        gc.compile(lambda x: gc.multinomial(x.softmax(-1), 1))(np.ones((2, 3), np.float32))
    after = gc.rand(4).numpy()
    gc.manual_seed(1)
    np.testing.assert_array_equal(after, gc.rand(4).numpy())


@pytest.mark.parametrize("n", [5, 17, 40, 4000])
def test_float64_draws_with_any_scale_are_pytorchs(n):
    """Regression: ATen's ``x * std + mean`` (normal_, randn's scaling, log_normal_), its
    ``u * (to - from) + from`` (uniform_) and cauchy's ``median + sigma * t`` are fused
    multiply-adds, and its logs, sines and cosines are the C library's; scales that are not
    powers of two showed graphc's two roundings (1 ulp in ~1/3 of the draws), and on AVX-512
    hosts numpy's own SIMD log/sin/cos (1 ulp in ~1/60 of the normals)."""
    cases = {
        "normal_(0.2, 1.1)": lambda m: m.empty(n, dtype=m.float64).normal_(0.2, 1.1),
        "normal_()": lambda m: m.empty(n, dtype=m.float64).normal_(),
        "uniform_(0.1, 1.7)": lambda m: m.empty(n, dtype=m.float64).uniform_(0.1, 1.7),
        "cauchy_(0.1, 1.3)": lambda m: m.empty(n, dtype=m.float64).cauchy_(0.1, 1.3),
        "log_normal_(0.2, 1.1)": lambda m: m.empty(n, dtype=m.float64).log_normal_(0.2, 1.1),
        "exponential_(1.7)": lambda m: m.empty(n, dtype=m.float64).exponential_(1.7),
    }
    for name, f in cases.items():
        _same(name, lambda f=f: f(gc), lambda f=f: f(torch), seed=3,
              exact=not (INTEL and name.startswith("exponential")))


def test_fma_is_one_rounding():
    """``graphc.random.fma`` against exact rational arithmetic, on random operands and on
    cancellations near ties, huge, tiny and non-finite values."""
    import math
    from fractions import Fraction

    from graphc.random import fma

    rng = np.random.default_rng(7)
    a, b, c = [], [], []
    for _ in range(4000):
        x = float(rng.standard_normal()) * 2.0 ** int(rng.integers(-60, 60))
        y = float(rng.standard_normal()) * 2.0 ** int(rng.integers(-60, 60))
        a.append(x)
        b.append(y)
        c.append(-x * y * (1 + float(rng.standard_normal()) * 2.0 ** int(rng.integers(-60, -1))))
    a += [1e300, 1e-300, 1 + 2.0 ** -52, 2.0 ** -540, 3.0, 0.0, 1.5, 1e308]
    b += [1e10, 1e-20, 1 - 2.0 ** -53, 2.0 ** -540, 1 / 3, 5.0, 2.0, 10.0]
    c += [-1e308, 1e-310, -1.0, 0.0, -1.0, -0.0, 0.25, -1e308]
    got = fma(np.array(a), np.array(b), np.array(c))
    for i, (x, y, z) in enumerate(zip(a, b, c)):
        try:
            want = float(Fraction(x) * Fraction(y) + Fraction(z))
        except OverflowError:
            want = math.copysign(math.inf, x * y)
        assert got[i] == want, (x, y, z, got[i], want)
    special = fma(np.array([np.inf, np.nan, 2.0]), np.array([1.0, 1.0, np.inf]),
                  np.array([2.0, 0.0, -np.inf]))
    assert special[0] == np.inf and np.isnan(special[1]) and np.isnan(special[2])
