"""``step.run(xs, ys)``: K training steps in one native call (graphc/multistep.py,
graphc/passes/steps.py), checked against the same step called K times: losses, parameters,
gradients, optimizer state and step counts bit for bit; schedulers stepped between the steps;
dropout seeds drawn in order; one compile for every K; errors before anything changes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim
from graphc.ir.verify import verify

RNG = np.random.default_rng(0)


def _mlp_setup(opt_name: str = "sgd", dropout: float = 0.0, bn: bool = False,
               freeze: bool = False, accumulate: bool = False) -> tuple[Any, Any, Any]:
    gc.manual_seed(7)
    layers: list[Any] = [nn.Linear(12, 16)]
    if bn:
        layers.append(nn.BatchNorm1d(16))
    layers.append(nn.ReLU())
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(16, 5))
    model = nn.Sequential(*layers)
    if freeze:
        model[0].weight.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    if opt_name == "sgd":
        opt = optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
    elif opt_name == "adam":
        opt = optim.Adam(params, lr=1e-2)
    elif opt_name == "adamw":
        opt = optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    else:
        raise AssertionError(opt_name)
    loss_fn = nn.CrossEntropyLoss()

    def step(x: Any, y: Any) -> Any:
        if not accumulate:
            opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, opt, step


def _regression_step(model: Any, opt: Any) -> Any:
    """zero_grad, mean squared error, backward, step: the least-squares training step."""

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return step


def _data(k: int, batch: int = 8) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(k)
    return (r.standard_normal((k, batch, 12)).astype(np.float32),
            r.integers(0, 5, (k, batch)).astype(np.int64))


def _state(model: Any, opt: Any) -> dict[str, np.ndarray]:
    out = {f"p:{n}": p.numpy().copy() for n, p in model.named_parameters()}
    out.update({f"b:{n}": np.asarray(b.numpy()).copy() for n, b in model.named_buffers()})
    for n, p in model.named_parameters():
        if p.grad is not None:
            out[f"g:{n}"] = p.grad.numpy().copy()
        for key, v in opt.state.get(p, {}).items() if p in opt.state else ():
            out[f"s:{n}:{key}"] = np.asarray(v.numpy() if hasattr(v, "numpy") else v).copy()
    return out


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("opt_name", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_run_equals_k_calls(opt_name: str, backend: str) -> None:
    xs, ys = _data(6)
    m1, o1, s1 = _mlp_setup(opt_name)
    c1 = gc.compile(s1, backend=backend)
    ref = np.array([float(c1(xs[t], ys[t])) for t in range(6)], np.float32)
    m2, o2, s2 = _mlp_setup(opt_name)
    c2 = gc.compile(s2, backend=backend)
    losses = c2.run(xs, ys)
    np.testing.assert_array_equal(np.asarray(losses.numpy()), ref)
    _same(_state(m1, o1), _state(m2, o2))
    if opt_name != "sgd":  # the step counts are Python numbers again, K of them added
        assert all(st["step"] == 6 for st in o2.state.values())
    # and a second run continues from where the first left off
    xs2, ys2 = _data(3)
    ref2 = [float(c1(xs2[t], ys2[t])) for t in range(3)]
    np.testing.assert_array_equal(c2.run(xs2, ys2).numpy(), np.array(ref2, np.float32))
    _same(_state(m1, o1), _state(m2, o2))


def test_run_matches_eager_closely() -> None:
    xs, ys = _data(5)
    m1, o1, s1 = _mlp_setup("adam")
    ref = [float(s1(gc.tensor(xs[t]), gc.tensor(ys[t]))) for t in range(5)]
    m2, o2, s2 = _mlp_setup("adam")
    losses = gc.compile(s2).run(xs, ys)
    np.testing.assert_allclose(losses.numpy(), ref, rtol=1e-5, atol=1e-6)
    a, b = _state(m1, o1), _state(m2, o2)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-6, err_msg=key)


def test_one_compile_serves_every_k() -> None:
    m, o, s = _mlp_setup("sgd")
    c = gc.compile(s)
    for k in (1, 3, 7, 2):
        xs, ys = _data(k)
        assert c.run(xs, ys).shape == (k,)
    assert c.compile_count == 1
    # a new batch size is still the same compile (the batch axis stays symbolic)
    xs, ys = _data(4, batch=3)
    c.run(xs, ys)
    assert c.compile_count == 1


def test_steps_graph_is_verified_and_printed() -> None:
    m, o, s = _mlp_setup("sgd")
    c = gc.compile(s)
    c.run(*_data(2))
    text = c.ir(steps=True)
    assert "scan" in text and "K" in text and "@body0" in text
    v = next(v for vs in c._steps.values() for v in vs)
    verify(v.graph)
    assert "scan loop of K steps" in c.ir("fused", steps=True)


def test_schedulers_step_between_the_steps() -> None:
    xs, ys = _data(9)

    def make() -> tuple[Any, Any, Any, list[Any]]:
        m, o, s = _mlp_setup("sgd")
        scheds = [optim.lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=30),
                  optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)]
        return m, o, s, scheds

    m1, o1, s1, sc1 = make()
    c1 = gc.compile(s1)
    ref = []
    for t in range(9):
        ref.append(float(c1(xs[t], ys[t])))
        for sc in sc1:
            sc.step()
    m2, o2, s2, sc2 = make()
    c2 = gc.compile(s2)
    got = list(c2.run(xs[:4], ys[:4], scheduler=sc2).numpy())
    got += list(c2.run(xs[4:], ys[4:], scheduler=sc2).numpy())
    np.testing.assert_array_equal(np.array(got, np.float32), np.array(ref, np.float32))
    _same(_state(m1, o1), _state(m2, o2))
    for a, b in zip(sc1, sc2):
        assert a.last_epoch == b.last_epoch and a.get_last_lr() == b.get_last_lr()
    assert o1.param_groups[0]["momentum"] == o2.param_groups[0]["momentum"]  # OneCycle cycles it
    assert c2.compile_count == 1


def test_dropout_draws_one_seed_per_step_in_order() -> None:
    xs, ys = _data(5)
    m1, o1, s1 = _mlp_setup("sgd", dropout=0.3)
    c1 = gc.compile(s1)
    gc.manual_seed(11)
    ref = [float(c1(xs[t], ys[t])) for t in range(5)]
    after = gc.rand(3).numpy()
    m2, o2, s2 = _mlp_setup("sgd", dropout=0.3)
    c2 = gc.compile(s2)
    gc.manual_seed(11)
    np.testing.assert_array_equal(c2.run(xs, ys).numpy(), np.array(ref, np.float32))
    np.testing.assert_array_equal(gc.rand(3).numpy(), after)  # the stream moved as much
    _same(_state(m1, o1), _state(m2, o2))


def test_batchnorm_buffers_and_frozen_layers_are_carried() -> None:
    xs, ys = _data(4)
    m1, o1, s1 = _mlp_setup("sgd", bn=True, freeze=True)
    c1 = gc.compile(s1)
    ref = [float(c1(xs[t], ys[t])) for t in range(4)]
    m2, o2, s2 = _mlp_setup("sgd", bn=True, freeze=True)
    w0 = m2[0].weight.numpy().copy()
    np.testing.assert_array_equal(gc.compile(s2).run(xs, ys).numpy(),
                                  np.array(ref, np.float32))
    _same(_state(m1, o1), _state(m2, o2))
    np.testing.assert_array_equal(m2[0].weight.numpy(), w0)
    assert int(m2[1].num_batches_tracked.numpy()) == 4


def test_gradient_accumulation_when_grads_exist() -> None:
    xs, ys = _data(4)
    m1, o1, s1 = _mlp_setup("sgd", accumulate=True)
    m2, o2, s2 = _mlp_setup("sgd", accumulate=True)
    c1, c2 = gc.compile(s1), gc.compile(s2)
    # the first call creates the gradients; from then on every step accumulates into them
    c1(xs[0], ys[0])
    c2(xs[0], ys[0])
    ref = [float(c1(xs[t], ys[t])) for t in range(1, 4)]
    np.testing.assert_array_equal(c2.run(xs[1:], ys[1:]).numpy(), np.array(ref, np.float32))
    _same(_state(m1, o1), _state(m2, o2))


def test_a_step_whose_structure_changes_after_one_step_is_refused() -> None:
    xs, ys = _data(3)
    m, o, s = _mlp_setup("sgd", accumulate=True)  # .grad absent now, present after a step
    c = gc.compile(s)
    before = _state(m, o)
    with pytest.raises(ValueError, match=r"\.grad, which is absent now and present after"):
        c.run(xs, ys)
    _same(before, _state(m, o))


def test_bad_arguments_raise_before_anything_changes() -> None:
    m, o, s = _mlp_setup("sgd")
    c = gc.compile(s)
    xs, ys = _data(3)
    before = _state(m, o)
    with pytest.raises(ValueError, match=r"argument 'y': expected 3 stacked batches"):
        c.run(xs, ys[:2])
    with pytest.raises(ValueError, match="at least one step"):
        c.run(xs[:0], ys[:0])
    with pytest.raises(ValueError, match="0-d"):
        c.run(np.float32(1.0), ys)
    with pytest.raises(TypeError, match="stacked batches of at least one argument"):
        c.run()
    sched = optim.lr_scheduler.ReduceLROnPlateau(o)
    with pytest.raises(NotImplementedError, match="ReduceLROnPlateau"):
        c.run(xs, ys, scheduler=sched)
    with pytest.raises(TypeError, match="scheduler: expected an lr scheduler"):
        c.run(xs, ys, scheduler=3)
    _same(before, _state(m, o))
    cf = gc.compile(_mlp_setup("sgd")[2], check_finite=True)
    with pytest.raises(NotImplementedError, match="check_finite"):
        cf.run(xs, ys)


def test_a_failing_step_changes_nothing() -> None:
    m, o, s = _mlp_setup("sgd")
    sched = optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
    c = gc.compile(s)
    xs, ys = _data(5)
    c.run(xs[:2], ys[:2], scheduler=sched)
    before, epoch, lr = _state(m, o), sched.last_epoch, o.param_groups[0]["lr"]
    rng = gc.random._state["rs"].get_state()[1].copy()
    bad = ys.copy()
    bad[3, 2] = 9  # an out-of-range class at the fourth step
    with pytest.raises(IndexError):
        c.run(xs, bad, scheduler=sched)
    _same(before, _state(m, o))
    assert sched.last_epoch == epoch and o.param_groups[0]["lr"] == lr
    np.testing.assert_array_equal(gc.random._state["rs"].get_state()[1], rng)
    # and the step still runs
    c.run(xs, ys, scheduler=sched)
    assert sched.last_epoch == epoch + 5


def test_a_schedule_that_changes_the_step_structure_is_refused() -> None:
    gc.manual_seed(0)
    lin = nn.Linear(3, 1)
    opt = optim.SGD(lin.parameters(), lr=0.1, momentum=0.5)
    step = _regression_step(lin, opt)

    # momentum is set to 0 after two steps: SGD's momentum branch is a structural decision
    sched = optim.lr_scheduler.LambdaLR(opt, lambda e: 1.0)
    orig_step = sched.step

    def step_and_zero_momentum() -> None:
        orig_step()
        if sched.last_epoch == 2:
            opt.param_groups[0]["momentum"] = 0.0

    sched.step = step_and_zero_momentum
    c = gc.compile(step)
    xs = RNG.standard_normal((4, 5, 3)).astype(np.float32)
    ys = RNG.standard_normal((4, 5, 1)).astype(np.float32)
    w = lin.weight.numpy().copy()
    with pytest.raises(ValueError, match="after 2 scheduler steps"):
        c.run(xs, ys, scheduler=sched)
    np.testing.assert_array_equal(lin.weight.numpy(), w)
    assert opt.param_groups[0]["momentum"] == 0.5 and sched.last_epoch == 0


def test_seed_step_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    X = np.arange(0, 1, 0.02, dtype=np.float32)[:40, None]
    Y = (0.7 * X + 0.3).astype(np.float32)
    k = 200
    gc.manual_seed(42)
    model = nn.Linear(1, 1)
    opt = optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.L1Loss()

    @gc.compile
    def train_step(x: Any, y: Any) -> Any:
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    tm = torch.nn.Linear(1, 1)
    with torch.no_grad():
        tm.weight.copy_(torch.from_numpy(model.weight.numpy()))
        tm.bias.copy_(torch.from_numpy(model.bias.numpy()))
    to = torch.optim.SGD(tm.parameters(), lr=0.01)
    ref = []
    for _ in range(k):
        loss = torch.nn.functional.l1_loss(tm(torch.from_numpy(X)), torch.from_numpy(Y))
        to.zero_grad()
        loss.backward()
        to.step()
        ref.append(loss.item())
    losses = train_step.run(np.broadcast_to(X, (k,) + X.shape),
                            np.broadcast_to(Y, (k,) + Y.shape))
    np.testing.assert_allclose(losses.numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.weight.numpy(), tm.weight.detach().numpy(), rtol=1e-5)


def test_train_and_eval_modes_get_their_own_loops() -> None:
    xs, ys = _data(3)
    m1, o1, s1 = _mlp_setup("sgd", dropout=0.5)
    m2, o2, s2 = _mlp_setup("sgd", dropout=0.5)
    c1, c2 = gc.compile(s1), gc.compile(s2)
    gc.manual_seed(3)
    ref = [float(c1(xs[t], ys[t])) for t in range(3)]
    m1.eval()
    ref += [float(c1(xs[t], ys[t])) for t in range(3)]
    gc.manual_seed(3)
    got = list(c2.run(xs, ys).numpy())
    m2.eval()  # dropout off: the train-mode loop must not be reused
    got += list(c2.run(xs, ys).numpy())
    np.testing.assert_array_equal(np.array(got, np.float32), np.array(ref, np.float32))
    _same(_state(m1, o1), _state(m2, o2))
    assert c2.compile_count == 2


def test_fixed_shape_arguments_are_never_taken_for_state() -> None:
    """dynamic=False: a (1, 1) batch has a parameter's shape; the fresh .grad carries must
    still start from a buffer of the step, not from the stacked batches."""

    def make() -> tuple[Any, Any]:
        gc.manual_seed(0)
        lin = nn.Linear(1, 1)
        opt = optim.SGD(lin.parameters(), lr=0.1)
        return lin, gc.compile(_regression_step(lin, opt), dynamic=False)

    xs = RNG.standard_normal((5, 1, 1)).astype(np.float32)
    ys = RNG.standard_normal((5, 1, 1)).astype(np.float32)
    (lin1, c1), (lin2, c2) = make(), make()
    ref = [float(c1(xs[t], ys[t])) for t in range(5)]
    np.testing.assert_array_equal(c2.run(xs, ys).numpy(), np.array(ref, np.float32))
    np.testing.assert_array_equal(lin1.weight.numpy(), lin2.weight.numpy())


class _MyMomentum(optim.Optimizer):
    """A user-written optimizer whose state (a buffer and a Python step count) its first
    step creates: the loop carries both, and the state's presence from the second step on."""

    def __init__(self, params: Any, lr: float = 0.1, beta: float = 0.9) -> None:
        super().__init__(params, dict(lr=lr, beta=beta))

    @gc.no_grad()
    def step(self) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "buf" not in st:
                    st["buf"] = p.grad.clone()
                    st["n"] = 1
                else:
                    st["buf"].mul_(g["beta"]).add_(p.grad)
                    st["n"] += 1
                p.add_(st["buf"], alpha=-g["lr"])


def test_user_written_optimizer_state_is_carried() -> None:
    def make() -> tuple[Any, Any, Any]:
        gc.manual_seed(0)
        lin = nn.Linear(3, 1)
        opt = _MyMomentum(lin.parameters())
        return lin, opt, _regression_step(lin, opt)

    xs = RNG.standard_normal((4, 8, 3)).astype(np.float32)
    ys = RNG.standard_normal((4, 8, 1)).astype(np.float32)
    l1, o1, s1 = make()
    c1 = gc.compile(s1)
    ref = [float(c1(xs[t], ys[t])) for t in range(4)]
    l2, o2, s2 = make()
    np.testing.assert_array_equal(gc.compile(s2).run(xs, ys).numpy(), np.array(ref, np.float32))
    _same(_state(l1, o1), _state(l2, o2))
    assert [o2.state[p]["n"] for p in l2.parameters()] == [4, 4]


# -- random sequences of runs, single calls and state changes between them ----------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_OPS = st.lists(st.one_of(
    st.tuples(st.just("run"), st.integers(1, 4)),
    st.tuples(st.just("call"), st.just(0)),
    st.tuples(st.just("lr"), st.sampled_from([0.01, 0.05, 0.2])),
    st.tuples(st.just("edit"), st.sampled_from([0.5, -1.0])),
    st.tuples(st.just("clear_state"), st.just(0)),
    st.tuples(st.just("mode"), st.sampled_from([True, False])),
), min_size=1, max_size=7)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, opt_name=st.sampled_from(["sgd", "adam"]))
def test_random_mutations_between_runs_match_single_calls(ops: list, opt_name: str) -> None:
    """Between many-steps calls the user changes the learning rate, edits a parameter in
    place, drops the optimizer state or switches train/eval; ``run`` over K batches must
    leave exactly what K single calls leave, every time."""
    xs, ys = _data(4)
    m1, o1, s1 = _mlp_setup(opt_name, dropout=0.25)
    m2, o2, s2 = _mlp_setup(opt_name, dropout=0.25)
    c1, c2 = gc.compile(s1), gc.compile(s2)
    for op, arg in ops:
        if op in ("run", "call"):
            k = arg if op == "run" else 1
            state = gc.random._state["rs"].get_state()
            ref = [float(c1(xs[t], ys[t])) for t in range(k)]
            gc.random._state["rs"].set_state(state)
            got = (c2.run(xs[:k], ys[:k]).numpy() if op == "run"
                   else np.array([float(c2(xs[0], ys[0]))]))
            np.testing.assert_array_equal(got, np.array(ref, np.float32))
        elif op == "lr":
            o1.param_groups[0]["lr"] = o2.param_groups[0]["lr"] = arg
        elif op == "edit":
            for m in (m1, m2):
                m[0].weight.data.mul_(arg)
        elif op == "clear_state":
            for o in (o1, o2):
                o.state.clear()
        else:
            for m in (m1, m2):
                m.train(arg)
        _same(_state(m1, o1), _state(m2, o2))
