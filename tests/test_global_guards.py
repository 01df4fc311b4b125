"""Module globals a compiled function's code reads (directly, in the forward of a module
that ran, or in a user helper those name) are guarded: reassigning one between calls
re-traces the step, so the compiled call keeps equal to eager execution (it used to keep
the first trace's value, silently); changing it back reuses the earlier variant. Globals of
graphc's own modules and of the libraries are not guarded, and an unchanged global costs
no re-trace."""

import types
import warnings

import numpy as np
import pytest
from _steps import train_step

import graphc as gc
from graphc import nn, optim
from graphc.nn import functional as F

SCALE = 2.0
SIZES = [3]
P_DROP = 0.0
OFFSET = gc.zeros(3)


def _helper(y):
    return y * SCALE + OFFSET


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gc.manual_seed(0)
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return F.dropout(_helper(self.lin(x)), P_DROP, self.training)[:, : SIZES[0]]


X = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)


def _check(m: nn.Module, f: gc.CompiledFunction) -> None:
    np.testing.assert_allclose(f(X).numpy(), m(gc.tensor(X)).detach().numpy(), rtol=1e-6,
                               atol=1e-6)


def test_reassigned_and_mutated_globals_retrace() -> None:
    global SCALE, OFFSET
    m = _Block().eval()
    f = gc.compile(m)
    _check(m, f)
    _check(m, f)
    assert f.compile_count == 1
    try:
        SCALE = 3.0  # read by a helper the forward calls
        _check(m, f)
        assert f.compile_count == 2
        SIZES[0] = 2  # a list changed in place
        _check(m, f)
        assert f(X).shape == (5, 2)
        OFFSET = gc.ones(3)  # a tensor global rebound
        _check(m, f)
        assert f.compile_count == 4
        SCALE = 2.0
        _check(m, f)
        assert f.compile_count == 5
        SCALE = 3.0  # back to values traced before: that variant again, no new trace
        _check(m, f)
        assert f.compile_count == 5
    finally:
        SCALE, SIZES[0], OFFSET = 2.0, 3, gc.zeros(3)


def test_training_step_follows_a_global_like_eager() -> None:
    global P_DROP

    def run(compiled: bool) -> list[float]:
        global P_DROP
        m = _Block()
        step = train_step(m, optim.SGD(m.parameters(), lr=0.1), F.mse_loss)
        fn = gc.compile(step) if compiled else step
        gc.manual_seed(3)
        zeros = np.zeros((5, 3), np.float32)
        out = []
        for i in range(4):
            P_DROP = 0.5 if i >= 2 else 0.0
            args = (X, zeros) if compiled else (gc.tensor(X), gc.tensor(zeros))
            out.append(float(fn(*args).item()))
        return out + [float(v) for v in m.lin.weight.detach().numpy().ravel()]

    try:
        np.testing.assert_allclose(run(True), run(False), rtol=1e-6, atol=1e-7)
    finally:
        P_DROP = 0.0


def test_matches_pytorch_after_a_global_changes() -> None:
    torch = pytest.importorskip("torch")
    global SCALE
    m = _Block().eval()
    t = torch.nn.Linear(4, 3)
    t.load_state_dict({k: torch.from_numpy(np.array(v, copy=True))
                       for k, v in m.lin.state_dict().items()})
    f = gc.compile(m)
    try:
        for s in (2.0, 0.25):
            SCALE = s
            np.testing.assert_allclose(f(X).numpy(),
                                       (t(torch.from_numpy(X)) * s).detach().numpy(),
                                       rtol=1e-6, atol=1e-6)
    finally:
        SCALE = 2.0


def test_a_global_changing_every_call_is_named_when_variants_are_dropped() -> None:
    global SCALE
    m = _Block().eval()
    f = gc.compile(m, max_variants=2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(4):
                SCALE = float(i)
                _check(m, f)
    finally:
        SCALE = 2.0
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("global 'SCALE' of test_global_guards" in s for s in msgs), msgs


def test_library_globals_are_not_guarded() -> None:
    m = _Block().eval()
    f = gc.compile(m)
    f(X)
    whats = [what for _, _, what in f.variants[0].sig.struct_guards]
    assert sorted(w for w in whats if w.startswith("global")) == sorted(
        f"global {n!r} of test_global_guards" for n in ("P_DROP", "SIZES", "SCALE", "OFFSET"))


CFG = types.SimpleNamespace(width=3, scale=1.0)


def test_attributes_of_a_global_config_object_are_guarded() -> None:
    """``cfg.width`` / ``args.scale`` of a config object or argparse namespace, read in the
    step: a changed attribute re-traces (the object itself is not replaced)."""
    gc.manual_seed(0)
    lin = nn.Linear(4, 3)

    @gc.compile
    def f(x):
        return lin(x)[:, : CFG.width] * CFG.scale

    def eager():
        return (lin(gc.tensor(X))[:, : CFG.width] * CFG.scale).detach().numpy()

    try:
        for width, scale in ((3, 1.0), (3, 0.5), (2, 0.5), (3, 1.0)):
            CFG.width, CFG.scale = width, scale
            np.testing.assert_allclose(f(X).numpy(), eager(), rtol=1e-6, atol=1e-6)
        assert f.compile_count == 3  # the last pair was traced first
    finally:
        CFG.width, CFG.scale = 3, 1.0


def test_a_rebound_closure_variable_retraces() -> None:
    """``t`` of an enclosing function, rebound there between calls (a schedule kept in a
    local of ``main()``)."""
    gc.manual_seed(0)
    lin = nn.Linear(4, 3)
    t = 1.0

    @gc.compile
    def f(x):
        return lin(x) / t

    for i in range(3):
        t = 1.0 + i
        np.testing.assert_allclose(f(X).numpy(), (lin(gc.tensor(X)) / t).detach().numpy(),
                                   rtol=1e-6, atol=1e-6)
    assert f.compile_count == 3
    t = 1.0
    f(X)
    assert f.compile_count == 3


BASE_SCALE = 1.0


class _Base(nn.Module):
    def scaled(self, y):
        return y * BASE_SCALE


class _Child(_Base):
    def __init__(self) -> None:
        super().__init__()
        gc.manual_seed(0)
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.scaled(self.lin(x))


def test_globals_of_inherited_user_methods_are_guarded() -> None:
    global BASE_SCALE
    m = _Child()
    f = gc.compile(m)
    try:
        for s in (1.0, 4.0):
            BASE_SCALE = s
            _check(m, f)
        assert f.compile_count == 2
    finally:
        BASE_SCALE = 1.0


def test_globals_of_a_compiled_partial_are_guarded() -> None:
    """``gc.compile(functools.partial(step, ...))``, what the errors suggest for options:
    the wrapped function's globals are guarded too."""
    import functools

    global SCALE
    gc.manual_seed(0)
    lin = nn.Linear(4, 3)

    def body(x, shift):
        return _helper(lin(x)) + shift

    f = gc.compile(functools.partial(body, shift=1.0))
    try:
        for s in (2.0, 5.0):
            SCALE = s
            np.testing.assert_allclose(
                f(X).numpy(), (_helper(lin(gc.tensor(X))) + 1.0).detach().numpy(),
                rtol=1e-6, atol=1e-6)
        assert f.compile_count == 2
    finally:
        SCALE = 2.0
