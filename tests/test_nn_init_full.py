"""``graphc.nn.init`` against ``torch.nn.init``: the same values after the same seed (with
and without a ``Generator``), the same number of draws from the stream, the same errors and
warnings; and inside a compiled step, drawn anew on every call exactly as eager draws.

Which comparisons are bit for bit (see tests/test_random_fills.py): float32 ``uniform_``
always; ``normal_`` in float64, and in float32 below 16 values (from 16 on, PyTorch
transforms 16 at a time with vectorised sin/cos/log that differ from numpy's in the last
bits: there a tolerance of a few float32 ulps). float64 ``uniform_`` is exact too: ATen's
``u * (to - from) + from`` is a fused multiply-add, and so is graphc.random's (``fma``)."""

import inspect
import math
import re
import warnings

import numpy as np
import pytest

import graphc as gc
from graphc import nn

torch = pytest.importorskip("torch")

# PyTorch before 2.12 drew trunc_normal_ by the inverse CDF (uniform_, erfinv_, ...); graphc
# follows the rejection sampler the installed PyTorch uses from then on
OLD_TRUNC = "erfinv" in inspect.getsource(torch.nn.init._no_grad_trunc_normal_)
EXACT, NORMAL = "exact", "normal"


def _compare(a, b, how, name):
    assert a.dtype == b.dtype and a.shape == b.shape, name
    if how == EXACT:
        np.testing.assert_array_equal(a, b, err_msg=name)
    else:  # float32 Box-Muller of 16 and more values: last bits
        assert how == NORMAL
        scale = max(float(np.abs(b).max()), 1e-30)
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-7 * scale, err_msg=name)


def _same(name, call, shape, dtype="float32", generator=False, how=EXACT, seed=0):
    """``call(init_module, tensor, **generator)`` on zeros of ``shape``, for graphc and for
    PyTorch after the same seed: it returns its tensor, the values agree (``how``), and the
    global stream (and the generator's) has moved as far as PyTorch's."""
    outs, tails = [], []
    for m, init in ((gc, nn.init), (torch, torch.nn.init)):
        m.manual_seed(seed)
        g = m.Generator().manual_seed(seed + 1) if generator else None
        t = m.zeros(*shape, dtype=getattr(m, dtype))
        assert call(init, t, **({"generator": g} if generator else {})) is t, name
        outs.append((t.float() if dtype == "bfloat16" else t).numpy())  # numpy has no bf16
        tails.append(np.concatenate([m.rand(3).numpy()]
                                    + ([m.rand(2, generator=g).numpy()] if generator else [])))
    _compare(outs[0], outs[1], how, name)
    np.testing.assert_array_equal(tails[0], tails[1], err_msg=f"{name}: stream position")
    return outs


SHAPES = [(4, 3), (6, 4, 3, 3), (5, 4, 3)]  # a Linear's, a Conv2d's and a Conv1d's weight
SHAPE_IDS = ["2d", "4d", "3d"]
UNIFORMS = {
    "uniform_": lambda i, t, **k: i.uniform_(t, -0.3, 0.7, **k),
    "uniform_ defaults": lambda i, t, **k: i.uniform_(t, **k),
    "xavier_uniform_": lambda i, t, **k: i.xavier_uniform_(t, **k),
    "xavier_uniform_ gain": lambda i, t, **k: i.xavier_uniform_(
        t, gain=nn.init.calculate_gain("tanh"), **k),
    "kaiming_uniform_ a=sqrt5": lambda i, t, **k: i.kaiming_uniform_(t, a=math.sqrt(5), **k),
    "kaiming_uniform_ defaults": lambda i, t, **k: i.kaiming_uniform_(t, **k),
    "kaiming_uniform_ fan_out relu": lambda i, t, **k: i.kaiming_uniform_(
        t, mode="fan_out", nonlinearity="relu", **k),
    "kaiming_uniform_ selu": lambda i, t, **k: i.kaiming_uniform_(t, nonlinearity="selu", **k),
    "kaiming_uniform_ leaky 0.2": lambda i, t, **k: i.kaiming_uniform_(t, a=0.2, **k),
}
NORMALS = {
    "normal_": lambda i, t, **k: i.normal_(t, 0.5, 2.0, **k),
    "normal_ defaults": lambda i, t, **k: i.normal_(t, **k),
    "xavier_normal_": lambda i, t, **k: i.xavier_normal_(t, gain=1.5, **k),
    "kaiming_normal_": lambda i, t, **k: i.kaiming_normal_(t, **k),
    "kaiming_normal_ fan_out relu": lambda i, t, **k: i.kaiming_normal_(
        t, mode="fan_out", nonlinearity="relu", **k),
    "kaiming_normal_ tanh": lambda i, t, **k: i.kaiming_normal_(t, 0, "fan_in", "tanh", **k),
    "trunc_normal_": lambda i, t, **k: i.trunc_normal_(t, **k),
    # [-1, 1] holds 68% of the mass: redraws every call
    "trunc_normal_ narrow": lambda i, t, **k: i.trunc_normal_(t, 0.0, 1.0, -1.0, 1.0, **k),
    "trunc_normal_ std=0.02": lambda i, t, **k: i.trunc_normal_(t, std=0.02, **k),
}
# under 30% of the mass in [a, b]: PyTorch's uniform rejection sampler (uniform draws)
TAILS = {
    "trunc_normal_ tail": lambda i, t, **k: i.trunc_normal_(t, 0.0, 1.0, 1.5, 4.0, **k),
    "trunc_normal_ window": lambda i, t, **k: i.trunc_normal_(t, 0.3, 2.0, 0.0, 0.5, **k),
}


def _skip_old_trunc(name):
    if "trunc" in name and OLD_TRUNC:
        pytest.skip("this PyTorch draws trunc_normal_ by the inverse CDF")


@pytest.mark.parametrize("generator", [False, True], ids=["global", "generator"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("name", list(UNIFORMS) + list(TAILS))
def test_uniform_draws_are_pytorchs(name, shape, generator):
    _skip_old_trunc(name)
    call = {**UNIFORMS, **TAILS}[name]
    _same(name, call, shape, "float32", generator)
    _same(name, call, shape, "float64", generator)


@pytest.mark.parametrize("generator", [False, True], ids=["global", "generator"])
@pytest.mark.parametrize("shape", SHAPES + [(3, 2, 2)], ids=SHAPE_IDS + ["3d small"])
@pytest.mark.parametrize("name", list(NORMALS))
def test_normal_draws_are_pytorchs(name, shape, generator):
    _skip_old_trunc(name)
    small = math.prod(shape) < 16
    _same(name, NORMALS[name], shape, "float32", generator, EXACT if small else NORMAL)
    _same(name, NORMALS[name], shape, "float64", generator)


def test_trunc_normal_redraws_and_stays_in_bounds():
    """The redraws happen (a narrow window rejects many first draws) and every value ends
    in [a, b]; bfloat16 compares its bounds in bfloat16, as PyTorch's ``new_tensor(a)``."""
    if OLD_TRUNC:
        pytest.skip("this PyTorch draws trunc_normal_ by the inverse CDF")
    a, _ = _same("trunc 3 sigma", lambda i, t: i.trunc_normal_(t, 1.0, 3.0, 0.5, 2.5), (9, 5),
                 "float64")
    assert a.min() >= 0.5 and a.max() <= 2.5
    _same("bf16", lambda i, t: i.trunc_normal_(t, 0, 1, -1.01, 1.01), (13,), "bfloat16")
    _same("bf16 tail", lambda i, t: i.trunc_normal_(t, 0, 1, 1.5, 4), (13,), "bfloat16")


@pytest.mark.parametrize("shape", [(4, 3), (3, 7), (12, 10)])
@pytest.mark.parametrize("generator", [False, True], ids=["global", "generator"])
def test_sparse_is_pytorchs(shape, generator):
    """The zeroed rows of each column come from ``randperm`` on the global stream, with or
    without a generator (which only the normal draws use), as PyTorch's do."""
    for sparsity in (0.1, 0.5, 1.0):
        def call(i, t, sparsity=sparsity, **k):
            return i.sparse_(t, sparsity, std=0.5, **k)
        a, b = _same(f"sparse_ {sparsity}", call, shape, "float64", generator)
        assert ((a == 0).sum(axis=0) == math.ceil(sparsity * shape[0])).all()
        a, b = _same(f"sparse_ {sparsity}", call, shape, "float32", generator,
                     EXACT if math.prod(shape) < 16 else NORMAL)
        np.testing.assert_array_equal(a == 0, b == 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_deterministic_fills_are_pytorchs(dtype):
    for shape in SHAPES + [(2, 5), (5, 2)]:
        _same("constant_", lambda i, t: i.constant_(t, 0.3), shape, dtype)
        _same("ones_", lambda i, t: i.ones_(t), shape, dtype)
        _same("uniform_ then zeros_", lambda i, t: i.zeros_(i.uniform_(t)), shape, dtype)
    for shape in [(3, 3), (2, 5), (5, 2), (1, 4)]:
        _same("eye_", lambda i, t: i.eye_(t), shape, dtype)
    for shape, groups in [((4, 3, 5), 1), ((6, 4, 3, 3), 2), ((6, 2, 3, 3), 3),
                          ((3, 5, 4, 4), 1), ((4, 2, 3, 3, 3), 2), ((8, 1, 2, 2), 4)]:
        _same(f"dirac_ {shape} {groups}", lambda i, t, g=groups: i.dirac_(t, g), shape, dtype)


def test_fills_overwrite_what_was_there():
    w = nn.Parameter(gc.full((4, 3), 7.0))
    assert nn.init.zeros_(w) is w and not w.numpy().any()
    w2 = gc.full((3, 3, 3), 5.0)
    nn.init.dirac_(w2)
    assert w2.numpy().sum() == 3
    nn.init.eye_(w)
    np.testing.assert_array_equal(w.numpy(), np.eye(4, 3, dtype=np.float32))
    assert w.requires_grad and w.is_leaf and w.grad is None


def test_calculate_gain_is_pytorchs():
    names = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
             "conv_transpose3d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]
    for name in names:
        for param in (None, 0, 0.2, 3):
            got = nn.init.calculate_gain(name, param)
            want = torch.nn.init.calculate_gain(name, param)
            assert got == want and type(got) is type(want), (name, param)
    for bad in (True, "0.1", [0.1]):
        with pytest.raises(ValueError, match=re.escape(f"negative_slope {bad} not a valid number")):
            nn.init.calculate_gain("leaky_relu", bad)
        with pytest.raises(ValueError, match="not a valid number"):
            torch.nn.init.calculate_gain("leaky_relu", bad)


@pytest.mark.parametrize("shape", [(4, 3), (6, 4, 3, 3), (5, 4, 3), (2, 3, 2, 2, 2), (3, 0)])
def test_fans_are_pytorchs(shape):
    g, t = gc.zeros(*shape), torch.zeros(*shape)
    assert nn.init._calculate_fan_in_and_fan_out(g) == \
        torch.nn.init._calculate_fan_in_and_fan_out(t)
    for mode in ("fan_in", "fan_out", "FAN_OUT"):
        assert nn.init._calculate_correct_fan(g, mode) == \
            torch.nn.init._calculate_correct_fan(t, mode)


def _errors(call):
    """``call(init_module, m)``'s exception for graphc and for PyTorch."""
    out = []
    for m, init in ((gc, nn.init), (torch, torch.nn.init)):
        with pytest.raises(Exception) as e:  # noqa: PT011 (the type is compared below)
            call(init, m)
        out.append(e.value)
    return out


@pytest.mark.parametrize("case", [
    "fan 1-d", "fan 0-d", "xavier 1-d", "bad nonlinearity", "bad mode", "dirac 2-d",
    "dirac groups", "eye 3-d", "eye 1-d", "sparse 3-d", "orthogonal 1-d", "uniform a > b",
    "normal std < 0", "trunc int", "trunc tail a > b", "kaiming 1-d"])
def test_errors_are_pytorchs(case):
    call = {
        "fan 1-d": lambda i, m: i._calculate_fan_in_and_fan_out(m.zeros(5)),
        "fan 0-d": lambda i, m: i._calculate_fan_in_and_fan_out(m.zeros(())),
        "xavier 1-d": lambda i, m: i.xavier_uniform_(m.zeros(5)),
        "kaiming 1-d": lambda i, m: i.kaiming_normal_(m.zeros(5)),
        "bad nonlinearity": lambda i, m: i.kaiming_uniform_(m.zeros(3, 4), nonlinearity="gelu"),
        "bad mode": lambda i, m: i.kaiming_uniform_(m.zeros(3, 4), mode="fan_avg"),
        "dirac 2-d": lambda i, m: i.dirac_(m.zeros(3, 4)),
        "dirac groups": lambda i, m: i.dirac_(m.zeros(5, 4, 3), groups=2),
        "eye 3-d": lambda i, m: i.eye_(m.zeros(2, 3, 4)),
        "eye 1-d": lambda i, m: i.eye_(m.zeros(4)),
        "sparse 3-d": lambda i, m: i.sparse_(m.zeros(2, 3, 4), 0.5),
        "orthogonal 1-d": lambda i, m: i.orthogonal_(m.zeros(4)),
        "uniform a > b": lambda i, m: i.uniform_(m.zeros(4), 1.0, 0.0),
        "normal std < 0": lambda i, m: i.normal_(m.zeros(4), 0.0, -1.0),
        "trunc int": lambda i, m: i.trunc_normal_(m.zeros(4, dtype=m.int64)),
        "trunc tail a > b": lambda i, m: i.trunc_normal_(m.zeros(4), 0, 1, 3.0, 2.0),
    }[case]
    if case.startswith("trunc") and OLD_TRUNC:
        pytest.skip("this PyTorch draws trunc_normal_ by the inverse CDF")
    gc.manual_seed(4)
    got, want = _errors(call)
    assert type(got) is type(want), (got, want)
    if case in ("uniform a > b", "normal std < 0"):
        # Tensor.uniform_/normal_'s own messages print 3.0 where C++ prints 3
        assert re.sub(r"(=|std )(-?\d+)\.0\b", r"\1\2", str(got)) == str(want)
    else:
        assert str(got) == str(want)
    after = gc.rand(3).numpy()  # nothing was drawn before the error
    gc.manual_seed(4)
    np.testing.assert_array_equal(after, gc.rand(3).numpy())


def test_a_torch_generator_is_refused_before_drawing():
    for f in (nn.init.uniform_, nn.init.normal_, nn.init.trunc_normal_,
              nn.init.kaiming_uniform_, nn.init.xavier_normal_):
        with pytest.raises(TypeError, match="expected a graphc.Generator"):
            f(gc.zeros(3, 4), generator=torch.Generator())
    with pytest.raises(TypeError, match="expected a graphc.Generator"):
        nn.init.sparse_(gc.zeros(3, 4), 0.5, generator=torch.Generator())


def test_warnings_are_pytorchs():
    for f in (nn.init.kaiming_uniform_, nn.init.kaiming_normal_):
        gc.manual_seed(1)
        w = gc.zeros(0, 3)
        with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
            assert f(w) is w
        with pytest.warns(UserWarning, match="zero-element"):  # before any fan is computed
            f(gc.zeros(0))
        after = gc.rand(2).numpy()
        gc.manual_seed(1)
        np.testing.assert_array_equal(after, gc.rand(2).numpy())
    with pytest.warns(UserWarning, match=r"mean is more than 2 std from \[a, b\] in "
                      r"nn.init.trunc_normal_. The distribution of values may be incorrect."):
        nn.init.trunc_normal_(gc.zeros(3), mean=10.0, std=1.0, a=-2.0, b=2.0)


def test_deprecated_aliases_warn_and_forward():
    assert nn.init.__all__ == torch.nn.init.__all__
    cases = {"uniform": (0.0, 1.0), "normal": (0.0, 1.0), "constant": (0.5,), "eye": (),
             "xavier_uniform": (), "xavier_normal": (), "kaiming_uniform": (),
             "kaiming_normal": (), "sparse": (0.5,)}
    for old, args in cases.items():
        gc.manual_seed(2)
        with pytest.warns(FutureWarning, match=f"`nn.init.{old}` is now deprecated in favor "
                          f"of `nn.init.{old}_`"):
            a = getattr(nn.init, old)(gc.zeros(3, 4), *args).numpy()
        gc.manual_seed(2)
        np.testing.assert_array_equal(a, getattr(nn.init, old + "_")(gc.zeros(3, 4), *args)
                                      .numpy())
    with pytest.warns(FutureWarning, match="nn.init.dirac"):
        nn.init.dirac(gc.zeros(2, 2, 3))
    assert nn.init.uniform.__name__ == "uniform"


# -- orthogonal_ (needs gc.linalg.qr) ---------------------------------------------------------
def _qr_missing():
    try:
        gc.linalg.qr(gc.eye(2))
    except NotImplementedError:
        return True
    return False


ORTHO_SHAPES = [(3, 5), (5, 3), (4, 4), (4, 2, 3, 3)]


def _ortho_same(shape, generator):
    a, _ = _same("orthogonal_", lambda i, t, **k: i.orthogonal_(t, gain=2.0, **k), shape,
                 "float64", generator, how=NORMAL)  # two LAPACK-style QRs: last bits
    flat = a.reshape(shape[0], -1) / 2.0
    small = min(flat.shape)
    gram = flat @ flat.T if flat.shape[0] == small else flat.T @ flat
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-12)


@pytest.mark.parametrize("generator", [False, True], ids=["global", "generator"])
def test_orthogonal_follows_pytorch_given_a_qr(monkeypatch, generator):
    """orthogonal_'s own steps (normal draws, transposes, R's signs, reshape, gain) against
    PyTorch's, with numpy's QR standing in for ``gc.linalg.qr`` (eager only)."""
    monkeypatch.setattr(gc.linalg, "qr", lambda a: tuple(
        gc.tensor(x) for x in np.linalg.qr(a.numpy())))
    for shape in ORTHO_SHAPES:
        _ortho_same(shape, generator)
    assert nn.init.orthogonal_(gc.zeros(0, 3)).shape == (0, 3)  # nothing to fill


def test_orthogonal_without_qr_says_what_is_missing(monkeypatch):
    def no_qr(a):
        raise NotImplementedError("linalg.qr is not supported")
    monkeypatch.setattr(gc.linalg, "qr", no_qr)
    w = gc.ones(3, 4)
    with pytest.raises(NotImplementedError, match=r"orthogonal_ needs gc.linalg.qr .*"
                       r"\(linalg.qr is not supported\)"):
        nn.init.orthogonal_(w)
    np.testing.assert_array_equal(w.numpy(), np.ones((3, 4), np.float32))


@pytest.mark.skipif(_qr_missing(), reason="gc.linalg.qr raises NotImplementedError")
def test_orthogonal_with_graphcs_qr():
    for shape in ORTHO_SHAPES:
        _ortho_same(shape, False)
        _ortho_same(shape, True)
    w = gc.zeros(3, 5)

    def step(x):
        nn.init.orthogonal_(w)
        return w * x

    cs = gc.compile(step, dynamic=False)
    gc.manual_seed(5)
    got = [cs(np.ones((3, 5), np.float32)).numpy() for _ in range(3)]
    gc.manual_seed(5)
    want = [step(gc.ones(3, 5)).numpy() for _ in range(3)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert not np.array_equal(got[0], got[1]) and cs.compile_count == 1


# -- inside a compiled step -------------------------------------------------------------------
STEP_INITS = {**UNIFORMS, **NORMALS, **TAILS,
              "sparse_": lambda i, t, **k: i.sparse_(t, 0.4, **k) if t.ndim == 2 else t,
              "constant_": lambda i, t, **k: i.constant_(t, -0.5),
              "ones_": lambda i, t, **k: i.ones_(t), "zeros_": lambda i, t, **k: i.zeros_(t),
              "eye_": lambda i, t, **k: i.eye_(t) if t.ndim == 2 else t,
              "dirac_": lambda i, t, **k: i.dirac_(t, 2) if t.ndim > 2 else t}
RANDOM = set(UNIFORMS) | set(NORMALS) | set(TAILS) | {"sparse_"}


@pytest.mark.parametrize("shape", [(6, 5), (4, 2, 3, 3)], ids=["2d", "4d"])
@pytest.mark.parametrize("name", list(STEP_INITS))
def test_initialisers_in_a_compiled_step_draw_as_eager_does(name, shape):
    """A step that re-initialises a tensor: each call writes what eager execution of the same
    function writes after the same seed (new values every call for the random ones, from the
    generator when one is given), leaves the stream where eager leaves it; one compile."""
    _skip_old_trunc(name)
    init = STEP_INITS[name]
    for g in (None, gc.Generator()):
        w = gc.zeros(*shape)

        def step(x, w=w, g=g):
            init(nn.init, w, **({} if g is None else {"generator": g}))
            return w * x

        cs = gc.compile(step, dynamic=False)  # x's first dim is w's, not a batch
        runs = []
        for f, arg in ((cs, np.full(shape, 2.0, np.float32)), (step, gc.full(shape, 2.0))):
            gc.manual_seed(3)
            if g is not None:
                g.manual_seed(4)
            runs.append([(f(arg).numpy(), w.numpy().copy()) for _ in range(3)]
                        + [(gc.rand(2).numpy(),)])
        for got, want in zip(*runs):
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b, err_msg=name)
        assert cs.compile_count == 1
        if name in RANDOM and (name != "sparse_" or len(shape) == 2):
            assert not np.array_equal(runs[0][0][1], runs[0][1][1]), "a new draw each call"


def test_training_step_reinitialising_parameters():
    """The brief's example: a step that re-initialises a conv's weight as ``Conv2d`` does
    (``kaiming_uniform_(a=sqrt(5))``), the head's with ``trunc_normal_`` from a generator and
    its bias with ``zeros_``, then trains on them: call after call the parameters are what the
    same function writes eagerly after the same seeds, and the loss agrees."""
    x = np.random.RandomState(0).randn(5, 2, 4, 4).astype(np.float32)
    y = np.array([0, 1, 2, 0, 1])
    runs = []
    for compiled in (True, False):
        gc.manual_seed(0)
        m = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 3))
        g = gc.Generator().manual_seed(7)

        def step(x, y, m=m, g=g):
            nn.init.kaiming_uniform_(m[0].weight, a=math.sqrt(5))
            nn.init.trunc_normal_(m[3].weight, std=0.02, generator=g)
            nn.init.zeros_(m[3].bias)
            for p in m.parameters():
                p.grad = None
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            return loss

        f = gc.compile(step) if compiled else step
        args = (x, y) if compiled else (gc.tensor(x), gc.tensor(y))
        gc.manual_seed(11)
        runs.append([(float(f(*args)), m[0].weight.numpy().copy(), m[3].weight.numpy().copy(),
                      m[3].bias.numpy().copy(), m[0].weight.grad.numpy().copy())
                     for _ in range(3)])
        if compiled:
            assert f.compile_count == 1
    for got, want in zip(*runs):
        assert got[0] == pytest.approx(want[0], rel=1e-6)
        for a, b in zip(got[1:4], want[1:4]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(got[4], want[4], rtol=1e-5, atol=1e-7)
    assert not np.array_equal(runs[0][0][1], runs[0][1][1])


def test_modules_initialise_like_pytorch():
    """The layers' ``reset_parameters`` call these initialisers: same parameters after the
    same seed (Linear and Conv2d use kaiming_uniform_(a=sqrt 5) and a uniform bias;
    MultiheadAttention xavier_uniform_ and constant_)."""
    def build(m):
        m.manual_seed(5)
        return [m.nn.Linear(7, 3), m.nn.Conv2d(3, 4, 3, groups=1), m.nn.Conv1d(2, 6, 5),
                m.nn.MultiheadAttention(8, 2)]
    for a, b in zip(build(gc), build(torch)):
        for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
            assert ka == kb
            np.testing.assert_array_equal(np.asarray(va), vb.numpy(), err_msg=ka)


def test_no_warning_on_the_plain_path():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.init.kaiming_uniform_(gc.zeros(3, 4))
        nn.init.trunc_normal_(gc.zeros(3, 4))
        nn.init.sparse_(gc.zeros(3, 4), 0.5)
