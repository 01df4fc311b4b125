"""The trace contract: a compiled step equals the same code run eagerly, or raises first.

Each test builds two identical worlds (model, optimizer, data), runs one eagerly and one
compiled through the same sequence of calls and Python-side changes between calls, and
compares every parameter, gradient and optimizer state. The changes are the ones a compiled
step used to ignore silently: freezing layers, editing ``.data`` inside the step, calling under
``no_grad``, holding on to an old ``.grad``, shared storage, backward twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim


def world(seed: int = 0, opt_cls: Any = optim.SGD, **opt_kw: Any) -> tuple[Any, Any]:
    gc.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = opt_cls(model.parameters(), **(opt_kw or {"lr": 0.1}))
    return model, opt


def batch(k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(k)
    return (rng.standard_normal((5, 4)).astype(np.float32),
            rng.standard_normal((5, 3)).astype(np.float32))


def step_fn(model: Any, opt: Any, backwards: tuple[dict[str, Any], ...] = ({},),
            after: Any = None) -> Any:
    """The standard step; ``backwards``: the keyword arguments of each ``backward()`` call,
    ``after``: called with the model after ``opt.step()`` (in the step)."""
    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        for kw in backwards:
            loss.backward(**kw)
        opt.step()
        if after is not None:
            after(model)
        return loss

    return step


def assert_same(m1: Any, m2: Any, o1: Any = None, o2: Any = None) -> None:
    for (n, a), (_, b) in zip(m1.named_parameters(), m2.named_parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
        assert (a.grad is None) == (b.grad is None), n
        if a.grad is not None:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{n}.grad")
    if o1 is not None:
        for p1, p2 in zip(m1.parameters(), m2.parameters()):
            s1, s2 = o1.state.get(p1, {}), o2.state.get(p2, {})
            assert set(s1) == set(s2)
            for k in s1:
                np.testing.assert_allclose(np.asarray(s1[k]), np.asarray(s2[k]), rtol=1e-5,
                                           atol=1e-6, err_msg=k)


def twins(**kw: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    me, oe = world(**kw)
    mc, oc = world(**kw)
    return me, oe, step_fn(me, oe), mc, oc, gc.compile(step_fn(mc, oc))


def test_freezing_and_unfreezing_between_calls() -> None:
    me, oe, se, mc, oc, sc = twins()
    for k in range(6):
        if k == 2:  # freeze the first layer (fine-tuning)
            for m in (me, mc):
                m[0].weight.requires_grad_(False)
                m[0].bias.requires_grad_(False)
        if k == 4:  # unfreeze it again
            for m in (me, mc):
                m[0].weight.requires_grad_(True)
                m[0].bias.requires_grad_(True)
        x, y = batch(k)
        np.testing.assert_allclose(se(x, y).item(), sc(x, y).item(), rtol=1e-5)
        assert_same(me, mc)
    assert sc.compile_count == 2  # frozen and unfrozen: one variant each


def test_removing_a_parameter_from_its_group() -> None:
    me, oe, se, mc, oc, sc = twins()
    for k in range(4):
        if k == 2:
            for m, o in ((me, oe), (mc, oc)):
                group = o.param_groups[0]
                group["params"] = [p for p in group["params"] if p is not m[2].bias]
        x, y = batch(k)
        np.testing.assert_allclose(se(x, y).item(), sc(x, y).item(), rtol=1e-5)
        assert_same(me, mc)


def test_in_place_data_edit_inside_the_step() -> None:
    def rescale(model: Any) -> None:
        model[0].weight.data.mul_(0.5)  # e.g. a weight constraint or max-norm rescale

    me, oe = world()
    mc, oc = world()
    se, sc = step_fn(me, oe, after=rescale), gc.compile(step_fn(mc, oc, after=rescale))
    for k in range(3):
        x, y = batch(k)
        np.testing.assert_allclose(se(x, y).item(), sc(x, y).item(), rtol=1e-5)
        assert_same(me, mc)


def test_compiled_step_under_no_grad_raises_like_eager() -> None:
    me, oe, se, mc, oc, sc = twins()
    x, y = batch(0)
    sc(x, y)
    se(x, y)
    before = [p.numpy().copy() for p in mc.parameters()]
    for mode in (gc.no_grad, gc.inference_mode):
        with mode():
            with pytest.raises(RuntimeError, match="does not require grad"):
                se(x, y)
            with pytest.raises(RuntimeError, match="does not require grad"):
                sc(x, y)
    for b, p in zip(before, mc.parameters()):
        np.testing.assert_array_equal(b, p.numpy())
    np.testing.assert_allclose(se(x, y).item(), sc(x, y).item(), rtol=1e-5)
    assert_same(me, mc)


def test_zero_grad_gives_a_fresh_gradient_tensor() -> None:
    me, oe, se, mc, oc, sc = twins()
    x, y = batch(0)
    sc(x, y)
    w = mc[0].weight
    saved = w.grad
    saved_values = saved.numpy().copy()
    sc(*batch(1))
    assert w.grad is not saved
    np.testing.assert_array_equal(saved.numpy(), saved_values)  # the old tensor is untouched


def test_parameters_sharing_storage_raise_before_changing_anything() -> None:
    """Eager applies the two updates one after the other, each seeing the other's write; a
    fused step cannot, so it refuses (the contract's other outcome) and changes nothing."""
    me, oe, se, mc, oc, sc = twins()
    x, y = batch(0)
    sc(x, y)
    mc[2].bias.data = mc[0].bias.data[:3]  # a view into another parameter's storage
    before = [p.numpy().copy() for p in mc.parameters()]
    with pytest.raises(ValueError, match="share storage"):
        sc(x, y)
    for b, p in zip(before, mc.parameters()):
        np.testing.assert_array_equal(b, p.numpy())
    mc[2].bias.data = mc[2].bias.data.clone()  # its own storage again: runs
    sc(x, y)


def test_backward_twice_without_retain_graph_raises() -> None:
    twice = ({}, {})
    me, oe = world()
    mc, oc = world()
    x, y = batch(0)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        step_fn(me, oe, twice)(x, y)
    before = [p.numpy().copy() for p in mc.parameters()]
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        gc.compile(step_fn(mc, oc, twice))(x, y)
    for b, p in zip(before, mc.parameters()):
        np.testing.assert_array_equal(b, p.numpy())


def test_backward_twice_with_retain_graph_accumulates() -> None:
    retained = ({"retain_graph": True}, {})
    me, oe = world()
    mc, oc = world()
    se, sc = step_fn(me, oe, retained), gc.compile(step_fn(mc, oc, retained))
    for k in range(2):
        np.testing.assert_allclose(se(*batch(k)).item(), sc(*batch(k)).item(), rtol=1e-5)
        assert_same(me, mc)


def test_data_replaced_with_another_shape_recompiles_or_raises() -> None:
    """A smaller or larger ``.data`` never reaches native code with the old sizes."""
    model = nn.Linear(4, 3)
    opt = optim.SGD(model.parameters(), lr=0.1)
    sc = gc.compile(step_fn(nn.Sequential(model), opt))
    x = np.ones((2, 4), np.float32)
    sc(x, np.ones((2, 3), np.float32))
    model.weight.data = np.zeros((2, 2), np.float32)
    with pytest.raises(Exception) as e:  # the model cannot take (2,4) @ (2,2).T any more
        sc(x, np.ones((2, 3), np.float32))
    assert "dimension" in str(e.value) or "shape" in str(e.value)
    model.weight.data = np.zeros((3, 4), np.float32)
    sc(x, np.ones((2, 3), np.float32))  # back to a shape that fits: runs


def test_changed_grad_dtype_or_shape_is_caught_before_native_code() -> None:
    model = nn.Linear(4, 3)
    opt = optim.SGD(model.parameters(), lr=0.1)

    @gc.compile
    def accumulate(x: Any) -> Any:  # reads the incoming .grad (no zero_grad)
        model(x).sum().backward()
        opt.step()

    x = np.ones((2, 4), np.float32)
    accumulate(x)
    accumulate(x)
    model.weight.grad.data = np.zeros((2, 2), np.float32)
    with pytest.raises((ValueError, RuntimeError), match="grad"):
        accumulate(x)


# -- a user-written optimizer, exactly as PyTorch's documentation writes one ------------------
class UserAdadelta(optim.Optimizer):
    """Adadelta in PyTorch's single-tensor style: public API only."""

    def __init__(self, params: Any, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    @gc.no_grad()
    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            lr, rho, eps, wd = group["lr"], group["rho"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["square_avg"] = gc.zeros_like(p)
                    state["acc_delta"] = gc.zeros_like(p)
                square_avg, acc_delta = state["square_avg"], state["acc_delta"]
                state["step"] += 1
                if wd != 0:
                    grad = grad.add(p, alpha=wd)
                square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
                std = square_avg.add(eps).sqrt_()
                delta = acc_delta.add(eps).sqrt_()
                delta.div_(std).mul_(grad)
                acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
                p.add_(delta, alpha=-lr)
        return None


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_user_optimizer_matches_eager_and_torch_with_a_schedule(wd: float) -> None:
    torch = pytest.importorskip("torch")
    from graphc.optim import lr_scheduler

    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    sd = {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}
    worlds = []
    for _ in range(2):
        m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
        m.load_state_dict(sd)
        o = UserAdadelta(m.parameters(), lr=0.5, weight_decay=wd)
        worlds.append((m, o, lr_scheduler.StepLR(o, step_size=7, gamma=0.5)))
    topt = torch.optim.Adadelta(tm.parameters(), lr=0.5, weight_decay=wd)
    tsched = torch.optim.lr_scheduler.StepLR(topt, step_size=7, gamma=0.5)
    (me, oe, she), (mc, oc, shc) = worlds
    se, sc = step_fn(me, oe), gc.compile(step_fn(mc, oc))
    for k in range(50):
        x, y = batch(k)
        topt.zero_grad()
        tl = ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
        tl.backward()
        topt.step()
        tsched.step()
        le, lc = se(x, y).item(), sc(x, y).item()
        she.step()
        shc.step()
        np.testing.assert_allclose(le, tl.item(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(lc, tl.item(), rtol=1e-5, atol=1e-7)
    assert sc.compile_count == 1
    assert_same(me, mc, oe, oc)
    for p, tp in zip(mc.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-4, atol=1e-6)
        st, ts = oc.state[p], topt.state[tp]
        assert st["step"] == int(ts["step"]) == 50
        np.testing.assert_allclose(st["square_avg"].numpy(), ts["square_avg"].numpy(),
                                   rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(st["acc_delta"].numpy(), ts["acc_delta"].numpy(),
                                   rtol=1e-4, atol=1e-7)


def test_user_optimizer_lr_change_takes_effect_without_recompiling() -> None:
    me, oe = world(opt_cls=UserAdadelta, lr=1.0)
    mc, oc = world(opt_cls=UserAdadelta, lr=1.0)
    se, sc = step_fn(me, oe), gc.compile(step_fn(mc, oc))
    for k in range(6):
        if k == 3:
            oe.param_groups[0]["lr"] = oc.param_groups[0]["lr"] = 0.1
        np.testing.assert_allclose(se(*batch(k)).item(), sc(*batch(k)).item(), rtol=1e-5)
    assert_same(me, mc, oe, oc)
    assert sc.compile_count == 1


def test_non_numeric_hyperparameter_raises_before_changing_anything() -> None:
    mc, oc = world(opt_cls=UserAdadelta, lr=1.0)
    sc = gc.compile(step_fn(mc, oc))
    sc(*batch(0))
    oc.param_groups[0]["lr"] = None
    before = [p.numpy().copy() for p in mc.parameters()]
    with pytest.raises(TypeError):
        sc(*batch(1))
    for b, p in zip(before, mc.parameters()):
        np.testing.assert_array_equal(b, p.numpy())


def test_replacing_a_parameter_or_layer_object_retraces() -> None:
    me, oe, se, mc, oc, sc = twins()
    for k in range(5):
        if k == 2:  # a new Parameter object for a layer's weight (not in the optimizer)
            for m in (me, mc):
                m[2].weight = nn.Parameter(np.full((3, 8), 0.1, np.float32))
        if k == 3:  # a new layer altogether
            for m in (me, mc):
                gc.manual_seed(5)
                m.add_module("2", nn.Linear(8, 3))
        np.testing.assert_allclose(se(*batch(k)).item(), sc(*batch(k)).item(), rtol=1e-5)
        assert_same(me, mc)


@pytest.mark.parametrize("opt_cls", [optim.Adam, UserAdadelta])
def test_state_of_the_wrong_shape_or_dtype_raises_before_native_code(opt_cls: Any) -> None:
    mc, oc = world(opt_cls=opt_cls, lr=0.01)
    sc = gc.compile(step_fn(mc, oc))
    sc(*batch(0))
    sc(*batch(1))
    p = mc[0].weight
    key = "exp_avg" if opt_cls is optim.Adam else "square_avg"
    good = oc.state[p][key]
    before = [q.numpy().copy() for q in mc.parameters()]
    oc.state[p][key] = gc.zeros(2, 2)  # e.g. from a smaller model
    with pytest.raises(ValueError, match="shape"):
        sc(*batch(2))
    oc.state[p][key] = gc.zeros(8, 4, dtype=gc.float64)
    with pytest.raises(TypeError, match="dtype"):
        sc(*batch(2))
    for b, q in zip(before, mc.parameters()):
        np.testing.assert_array_equal(b, q.numpy())
    oc.state[p][key] = good
    sc(*batch(2))


def test_load_state_dict_of_a_smaller_model_is_refused() -> None:
    small, so = world(opt_cls=optim.Adam, lr=0.01)
    step_fn(small, so)(*batch(0))
    sd = so.state_dict()
    gc.manual_seed(0)
    big = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
    bo = optim.Adam(big.parameters(), lr=0.01)
    with pytest.raises(ValueError, match="shape"):
        bo.load_state_dict(sd)
    assert len(bo.state) == 0


def test_grad_of_another_dtype_is_refused_at_assignment() -> None:
    w = nn.Parameter(np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="different type"):
        w.grad = gc.zeros(2, 2, dtype=gc.float64)
    w.grad = gc.zeros(2, 2)
    assert w.grad.dtype is gc.float32


@pytest.mark.parametrize("compiled", [False, True])
def test_an_int_step_count_in_adam_state_is_taken_as_a_tensor(compiled: bool) -> None:
    model, opt = world(opt_cls=optim.Adam, lr=0.01)
    step = step_fn(model, opt)
    step = gc.compile(step) if compiled else step
    step(*batch(0))
    for p in model.parameters():
        opt.state[p]["step"] = 3  # as some checkpoints hold it
    step(*batch(1))
    for p in model.parameters():
        s = opt.state[p]["step"]
        assert isinstance(s, gc.Tensor) and s.dtype is gc.float32 and s.item() == 4.0


class ModeSGD(optim.Optimizer):
    """A user optimizer keeping a Python object (not a tensor, not a number) in its state and
    branching on it: the compiled step must follow a change of it between calls."""

    def __init__(self, params: Any, lr: float = 0.1) -> None:
        super().__init__(params, dict(lr=lr))

    @gc.no_grad()
    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                scale = 2.0 if state.get("mode") == "double" else 1.0
                p.add_(p.grad, alpha=-group["lr"] * scale)
        return None


def test_a_python_object_in_optimizer_state_is_guarded() -> None:
    me, oe = world(opt_cls=ModeSGD, lr=0.1)
    mc, oc = world(opt_cls=ModeSGD, lr=0.1)
    se, sc = step_fn(me, oe), gc.compile(step_fn(mc, oc))
    for m, o in ((me, oe), (mc, oc)):
        for p in m.parameters():
            o.state[p]["mode"] = "plain"
    for k in range(4):
        if k == 2:
            for m, o in ((me, oe), (mc, oc)):
                for p in m.parameters():
                    o.state[p]["mode"] = "double"
        np.testing.assert_allclose(se(*batch(k)).item(), sc(*batch(k)).item(), rtol=1e-5)
        assert_same(me, mc)
    assert sc.compile_count == 2


def test_param_groups_added_with_plus_equals_are_tracing_groups() -> None:
    model, opt = world()
    extra = nn.Linear(2, 2)
    opt.param_groups += [{"params": list(extra.parameters()), "lr": 0.5}]
    assert type(opt.param_groups[-1]).__name__ == "ParamGroup"


def test_option_guards_retest_only_values_that_changed(monkeypatch: Any) -> None:
    """A scheduler writes ``lr`` every step, which makes the call wrapper refresh the
    hyperparameters each call. The option guards (AdamW's ``betas`` and ``weight_decay``
    tests, evaluated in the interpreter) ran again each time, ~50 us a call of the GPT
    step; now a guard re-tests only a value that is not the object which passed it. A new
    value is still tested: the step follows eager through a ``weight_decay`` change."""
    import graphc.interpreter as interp
    from graphc.optim import lr_scheduler

    calls = [0]
    real = interp.run_graph

    def counting(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(interp, "run_graph", counting)
    worlds = []
    for _ in range(2):
        m, o = world(opt_cls=optim.AdamW, lr=0.05, weight_decay=0.01, betas=(0.9, 0.99))
        worlds.append((m, o, lr_scheduler.StepLR(o, step_size=1, gamma=0.9)))
    (me, oe, she), (mc, oc, shc) = worlds
    se, sc = step_fn(me, oe), gc.compile(step_fn(mc, oc))
    for k in range(8):
        if k == 2:
            traced = calls[0]
            assert traced > 0  # the guards' expressions were evaluated while tracing
        if k == 5:  # a new value: tested, and eager's result either way
            for o in (oe, oc):
                o.param_groups[0]["weight_decay"] = 0.0
        np.testing.assert_allclose(se(*batch(k)).item(), sc(*batch(k)).item(), rtol=1e-5)
        she.step()
        shc.step()
        if k == 4:
            assert calls[0] == traced  # lr moved every step; the options did not
    assert calls[0] > traced
    assert_same(me, mc, oe, oc)


def test_what_an_option_guard_remembers() -> None:
    """Only values nothing can change in place skip a guard's test when seen again."""
    from graphc.runtime.runner import _remembered

    vol = object()
    for v in (0.9, 3, True, "x", None, (0.9, 0.999), ()):
        assert _remembered(v, vol) is v
    for v in ([0.9], {"a": 1}, (gc.tensor(0.9), 0.999), gc.tensor(1.0), np.float32(1.0)):
        assert _remembered(v, vol) is vol


def test_layout_guards_derive_only_for_a_new_array(monkeypatch: Any) -> None:
    """Adam's state fills (``zeros_like``, preserving the parameter's layout) guard the
    step on each parameter's memory layout. The call wrapper derives it again only when a
    parameter holds another array than the one that passed, not at every call, and the
    step follows eager through the new array. (``.data`` stores C order, so the layout
    stays; a tensor whose layout does change between calls is re-traced:
    ``test_random_views.py::test_a_compiled_fill_follows_the_tensors_layout_at_each_call``.)"""
    from graphc import shape_ops

    calls = [0]
    real = shape_ops._preserved_strides

    def counting(a: Any) -> Any:
        calls[0] += 1
        return real(a)

    monkeypatch.setattr(shape_ops, "_preserved_strides", counting)
    me, oe = world(opt_cls=optim.Adam, lr=0.01)
    mc, oc = world(opt_cls=optim.Adam, lr=0.01)
    se, sc = step_fn(me, oe), gc.compile(step_fn(mc, oc))
    for k in range(6):
        if k == 2:
            traced = calls[0]
        if k == 4:  # a new array for the first weight, in both worlds
            for m in (me, mc):
                w = m[0].weight
                w.data = gc.tensor(np.asfortranarray(w.numpy()))
        np.testing.assert_allclose(se(*batch(k)).item(), sc(*batch(k)).item(), rtol=1e-5)
        if k == 3:
            assert calls[0] == traced  # the same arrays: no layout derived
        if k == 4:
            assert calls[0] > traced  # the new array's layout derived
    assert_same(me, mc, oe, oc)
