"""Plain module attributes a compiled function reads (``self.scale``, ``Dropout.p``, a flag
that picks a branch, a list of sizes, an activation function held as an attribute) are
guarded: changing one between calls re-traces the step, so the compiled call keeps equal to
eager execution (it used to keep the value of the first trace, silently). An unchanged
attribute costs no re-trace, and changing it back reuses the first compiled variant."""

import numpy as np
import pytest
from _steps import train_step

import graphc as gc
from graphc import nn, optim
from graphc.nn import functional as F


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gc.manual_seed(0)
        self.lin = nn.Linear(4, 3)
        self.scale = 2.0
        self.use_relu = True
        self.sizes = [3]
        self.act = F.relu

    def forward(self, x):
        y = self.lin(x) * self.scale
        y = self.act(y) if self.use_relu else y
        extra = getattr(self, "offset", None)
        if extra is not None:
            y = y + extra
        return y[:, : self.sizes[0]]


X = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)


def _check(m: nn.Module, f: gc.CompiledFunction) -> None:
    np.testing.assert_allclose(f(X).numpy(), m(gc.tensor(X)).detach().numpy(), rtol=1e-6,
                               atol=1e-6)


def test_number_flag_list_function_and_missing_attributes_retrace() -> None:
    m = _Scaled()
    f = gc.compile(m)
    _check(m, f)
    _check(m, f)
    assert f.compile_count == 1  # nothing changed: no re-trace
    m.scale = 3.0
    _check(m, f)
    assert f.compile_count == 2
    m.scale = 3  # the same number as an int: a different value for the trace
    _check(m, f)
    assert f.compile_count == 3
    m.use_relu = False
    _check(m, f)
    m.use_relu = True
    m.act = F.gelu  # rebound function
    _check(m, f)
    m.sizes[0] = 2  # changed in place, no assignment
    _check(m, f)
    assert f(X).shape == (5, 2)
    m.offset = 1.5  # an attribute the trace found missing
    _check(m, f)
    del m.offset
    _check(m, f)
    n = f.compile_count
    m.scale = 3  # back to a value traced before: the earlier variant, no new trace
    _check(m, f)
    assert f.compile_count == n


def test_nan_attribute_does_not_retrace_every_call() -> None:
    m = _Scaled()
    m.scale = float("nan")
    f = gc.compile(m)
    for _ in range(3):
        f(X)
    m.scale = float("nan")  # another NaN object: the same value
    f(X)
    assert f.compile_count == 1


def test_modules_built_inside_the_step_are_not_guarded() -> None:
    gc.manual_seed(0)
    lin = nn.Linear(4, 1)

    @gc.compile
    def f(x):
        return nn.MSELoss(reduction="sum")(lin(x), gc.zeros_like(x[:, :1]))

    for _ in range(3):
        f(X)
    assert f.compile_count == 1


def test_dropout_rate_changed_between_training_steps_matches_eager() -> None:
    def build():
        gc.manual_seed(1)
        model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
        opt = optim.SGD(model.parameters(), lr=0.1)
        return model, opt

    y = np.ones((5, 1), np.float32)

    def run(compiled: bool) -> list[float]:
        model, opt = build()
        step = train_step(model, opt, F.mse_loss)
        fn = gc.compile(step) if compiled else step
        gc.manual_seed(7)
        out = []
        for i in range(4):
            if i == 2:
                model[1].p = 0.0
            args = (X, y) if compiled else (gc.tensor(X), gc.tensor(y))
            out.append(float(fn(*args).item()))
        if compiled:
            assert fn.compile_count == 2
        return out + [float(v) for v in model[2].weight.detach().numpy().ravel()]

    np.testing.assert_allclose(run(True), run(False), rtol=1e-6, atol=1e-7)


def test_matches_pytorch_after_an_attribute_change() -> None:
    torch = pytest.importorskip("torch")

    class T(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            self.scale = 2.0

        def forward(self, x):
            return torch.relu(self.lin(x) * self.scale)

    t, m = T(), _Scaled()
    m.lin.load_state_dict({k: v.detach().numpy() for k, v in t.lin.state_dict().items()})
    f = gc.compile(m)
    for s in (2.0, 0.5):
        t.scale = m.scale = s
        np.testing.assert_allclose(f(X).numpy(), t(torch.from_numpy(X)).detach().numpy(),
                                   rtol=1e-6, atol=1e-6)


def test_attribute_reads_outside_traces_are_plain() -> None:
    """The guarding ``__getattribute__`` is installed only while something traces."""
    assert "__getattribute__" not in nn.Module.__dict__
    m = _Scaled()
    f = gc.compile(m)
    f(X)
    assert "__getattribute__" not in nn.Module.__dict__
