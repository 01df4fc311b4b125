"""Attribute assignments on modules while a compiled function is traced: those whose eager
effect a compiled call cannot repeat raise ``NotImplementedError`` before the module
changes (they used to run once at trace time, or to leave a traced tensor on the module);
the in-place buffer update they point to matches eager over several calls."""

import numpy as np
import pytest

import graphc as gc
from graphc import nn


class _Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x).sum()


class _Ema(nn.Module):
    def __init__(self, inplace: bool) -> None:
        super().__init__()
        gc.manual_seed(0)
        self.lin = nn.Linear(3, 2)
        self.register_buffer("avg", gc.zeros(2))
        self.inplace = inplace

    def forward(self, x):
        y = self.lin(x)
        new = self.avg * 0.9 + y.mean(0).detach() * 0.1
        if self.inplace:
            self.avg.copy_(new)
        else:
            self.avg = new
        return y.sum()


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)


def test_python_counter_assignment_raises_and_changes_nothing():
    m = _Counter()
    with pytest.raises(NotImplementedError, match=r"_Counter.calls = 1 inside a compiled"):
        gc.compile(m)(_x(0))
    assert m.calls == 0


def test_buffer_rebinding_raises_and_in_place_update_matches_eager():
    m = _Ema(inplace=False)
    with pytest.raises(NotImplementedError, match="rebinds the buffer 'avg'.*copy_"):
        gc.compile(m)(_x(0))
    np.testing.assert_array_equal(m.avg.numpy(), np.zeros(2, np.float32))
    compiled, eager = _Ema(inplace=True), _Ema(inplace=True)
    step = gc.compile(compiled)
    for k in range(4):
        np.testing.assert_allclose(step(_x(k)).item(), eager(gc.tensor(_x(k))).item(),
                                   rtol=1e-6)
        np.testing.assert_allclose(compiled.avg.numpy(), eager.avg.numpy(), rtol=1e-6)
    assert step.compile_count == 1


def test_storing_a_traced_tensor_on_the_module_raises():
    class Keep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            self.last = self.lin(x)
            return self.last.sum()

    m = Keep()
    with pytest.raises(NotImplementedError, match="Keep.last = <tensor>.*Return it"):
        gc.compile(m)(_x(0))
    assert "last" not in m.__dict__


def test_harmless_assignments_and_train_inside_a_step_still_work():
    class Flags(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.scale = 2.0
            self.drop = nn.Dropout(0.0)

        def forward(self, x):
            self.scale = 2.0  # the same value again
            self.train()  # the training flags: guarded, as every mode read
            return (self.drop(self.lin(x)) * self.scale).sum()

    m = Flags()
    step = gc.compile(m)
    m.eval()
    out = step(_x(1))
    assert m.training
    np.testing.assert_allclose(out.item(), Flags.forward(m, gc.tensor(_x(1))).item(), rtol=1e-6)


def test_a_module_built_inside_the_function_sets_its_own_attributes():
    lin = nn.Linear(2, 1)

    @gc.compile
    def loss(x, y):
        crit = nn.MSELoss(reduction="sum")  # __init__ assigns attributes while tracing
        crit.reduction = "mean"
        return crit(lin(x), y)

    x, y = np.ones((3, 2), np.float32), np.zeros((3, 1), np.float32)
    np.testing.assert_allclose(loss(x, y).item(),
                               nn.MSELoss()(lin(gc.tensor(x)), gc.tensor(y)).item(), rtol=1e-6)


def test_scheduler_step_inside_a_compiled_step_raises_before_anything_moves():
    from graphc import optim

    lin = nn.Linear(3, 1)
    opt = optim.SGD(lin.parameters(), lr=0.1)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    @gc.compile
    def step(x):
        opt.zero_grad()
        loss = lin(x).pow(2).mean()
        loss.backward()
        opt.step()
        sched.step()
        return loss

    w = lin.weight.numpy().copy()
    with pytest.raises(NotImplementedError, match=r"StepLR.step\(\) inside a compiled"):
        step(_x(0))
    assert opt.param_groups[0]["lr"] == 0.1 and sched.last_epoch == 0
    np.testing.assert_array_equal(lin.weight.numpy(), w)


def test_param_group_write_inside_a_compiled_step_raises():
    from graphc import optim

    lin = nn.Linear(3, 1)
    opt = optim.SGD(lin.parameters(), lr=0.1)

    @gc.compile
    def warm(x, k: float = 0.5):
        for g in opt.param_groups:
            g["lr"] = 0.1  # the value already there: allowed
        opt.zero_grad()
        lin(x).sum().backward()
        for g in opt.param_groups:
            g["lr"] = 0.1 * k
        opt.step()

    with pytest.raises(NotImplementedError, match=r"param_groups\[\.\.\.\]\['lr'\]"):
        warm(_x(0))
    assert opt.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("how", ["manual_seed", "seed", "generator", "generator_seed"])
def test_reseeding_inside_a_compiled_step_raises(how):
    """Reseeding would happen once, at trace time (later calls would not restart the stream
    as eagerly): refused, like reading or setting the generator's state."""

    def fn(x):
        if how == "manual_seed":
            gc.manual_seed(0)
        elif how == "seed":
            gc.seed()
        elif how == "generator":
            gc.Generator()
        else:
            GEN.manual_seed(1)
        return nn.functional.dropout(x, 0.5)

    with pytest.raises(NotImplementedError, match="inside a compiled step"):
        gc.compile(fn)(np.ones((2, 6), np.float32))


GEN = gc.Generator()
