"""Gradients through a compiled call (``graphc.compiled_grad``): a compiled model's result
carries an autograd graph as the eager one does, so ``loss.backward()`` outside the compiled
function reaches its parameters (values and gradients against eager graphc and PyTorch);
where that cannot be honoured (state updates, random draws, arguments that require grad, a
parameter changed before the backward) a clear error is raised before any ``.grad`` moves."""

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim


def _mlp(seed: int = 0) -> nn.Module:
    gc.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _torch_copy(m: nn.Module) -> "torch.nn.Module":
    t = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    t.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in m.state_dict().items()})
    return t


def _x(n: int = 5, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def test_backward_outside_reaches_parameters_like_eager_and_torch():
    m = _mlp()
    tm = _torch_copy(m)
    fwd = gc.compile(m)
    w = nn.Parameter(gc.tensor(np.array([1.0, -2.0, 0.5], np.float32)))
    tw = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    for step in range(3):
        x = _x(seed=step)
        out = fwd(gc.tensor(x))
        assert out.requires_grad and out.grad_fn is not None
        loss = (out * w).sum() + (w * w).sum()  # a compiled result mixed into eager code
        loss.backward()
        tl = (tm(torch.tensor(x)) * tw).sum() + (tw * tw).sum()
        tl.backward()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5, atol=1e-6)
        for p, tp in zip(m.parameters(), tm.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert fwd.compile_count == 1


def test_training_loop_with_compiled_forward_matches_torch():
    m = _mlp(3)
    tm = _torch_copy(m)
    fwd = gc.compile(m)
    opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    y = np.array([0, 2, 1, 1, 0])
    for step in range(4):
        x = _x(seed=10 + step)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(fwd(gc.tensor(x)), gc.tensor(y))
        loss.backward()
        opt.step()
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tl.item(), rtol=1e-5, atol=1e-6)
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_several_results_and_a_nonlinear_use_of_them():
    m = _mlp(5)
    tm = _torch_copy(m)

    @gc.compile
    def two(x):
        h = m(x)
        return h.sin(), {"sq": h * h}

    x = _x(seed=7)
    a, d = two(gc.tensor(x))
    ((a * d["sq"]).sum() + a.exp().mean()).backward()
    th = tm(torch.tensor(x))
    ta, tsq = th.sin(), th * th
    ((ta * tsq).sum() + ta.exp().mean()).backward()
    for p, tp in zip(m.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_finite_differences_through_a_compiled_result():
    gc.manual_seed(0)
    lin = nn.Linear(3, 2).double()
    fwd = gc.compile(lambda x: (lin(x) ** 3).tanh())
    x = np.random.default_rng(2).standard_normal((4, 3))
    fwd(gc.tensor(x)).sum().backward()
    g = lin.weight.grad.numpy().copy()
    w = lin.weight.numpy()
    eps = 1e-6
    for i in range(2):
        for j in range(3):
            w0 = w[i, j]
            with gc.no_grad():
                lin.weight.data[i, j] = w0 + eps
                up = fwd(gc.tensor(x)).sum().item()
                lin.weight.data[i, j] = w0 - eps
                dn = fwd(gc.tensor(x)).sum().item()
                lin.weight.data[i, j] = w0
            assert abs((up - dn) / (2 * eps) - g[i, j]) < 1e-6


def test_whole_step_results_stay_plain_values():
    m = _mlp()
    opt = optim.SGD(m.parameters(), lr=0.1)

    @gc.compile
    def step(x, y):
        opt.zero_grad()
        logits = m(x)
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        return loss, logits

    loss, logits = step(gc.tensor(_x()), gc.tensor(np.array([0, 1, 2, 0, 1])))
    assert not loss.requires_grad and not logits.requires_grad


def test_no_grad_results_are_plain_values():
    fwd = gc.compile(_mlp())
    with gc.no_grad():
        out = fwd(gc.tensor(_x()))
    assert not out.requires_grad


def _grads(m):
    return [None if p.grad is None else p.grad.numpy().copy() for p in m.parameters()]


def test_state_updating_function_raises_on_backward_and_changes_nothing():
    gc.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    fwd = gc.compile(m)
    out = fwd(gc.tensor(_x(8)))  # the running statistics move once, as eagerly
    with pytest.raises(NotImplementedError, match="updates state"):
        out.sum().backward()
    assert all(g is None for g in _grads(m))


def test_dropout_results_train_with_the_masks_of_the_call():
    """A compiled forward with dropout: its backward recomputes with the draws the call made
    (replayed, not drawn again), so values and gradients equal eager's under one seed, and
    the stream moves once per call, as eagerly."""
    gc.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 2))
    fwd = gc.compile(m)
    x = gc.tensor(_x(6))
    for seed in (3, 4):
        gc.manual_seed(seed)
        out = fwd(x)
        (out * out).sum().backward()
        after = gc.rand(1).item()
        got = _grads(m)
        m.zero_grad()
        gc.manual_seed(seed)
        ref = m(x)
        (ref * ref).sum().backward()
        np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-6,
                                   atol=1e-6)
        for a, b in zip(got, _grads(m)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert after == gc.rand(1).item()  # the same point of the stream
        m.zero_grad()


def test_parameter_changed_before_backward_raises():
    """Written in place between the call and its backward, by an eager op or by a compiled
    optimizer step: PyTorch's in-place error, before any ``.grad`` changes."""
    m = _mlp()
    opt = optim.SGD(m.parameters(), lr=0.1)
    fwd = gc.compile(m)

    @gc.compile
    def update():
        opt.step()

    for p in m.parameters():
        p.grad = gc.ones_like(p)
    out = fwd(gc.tensor(_x()))
    update()  # writes every parameter in place
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    assert all(np.all(g == 1) for g in _grads(m))
    out = fwd(gc.tensor(_x()))
    with gc.no_grad():
        m[2].bias.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    out = fwd(gc.tensor(_x()))  # an update of parameters it does not read: fine
    other = nn.Linear(2, 2)
    other.weight.grad, other.bias.grad = gc.ones_like(other.weight), gc.ones_like(other.bias)
    opt2 = optim.SGD(other.parameters(), lr=0.1)
    gc.compile(lambda: opt2.step())()
    out.sum().backward()
    from graphc._tensor import WATCHED

    del out
    import gc as pygc

    pygc.collect()
    assert not any(id(p) in WATCHED for p in m.parameters())  # released with the result


def test_gradient_reaches_an_argument_that_requires_grad():
    """A compiled block fed by eager layers (``h = emb(x); block(h)``): the gradient flows
    through the block's result into the argument's own graph, as in torch."""
    m = _mlp(4)
    tm = _torch_copy(m)
    pre = nn.Linear(4, 4)
    tpre = torch.nn.Linear(4, 4)
    tpre.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in pre.state_dict().items()})
    block = gc.compile(lambda h: m(h).tanh())
    for step in range(2):  # the slow path, then the variant's fast path
        x = _x(seed=20 + step)
        leaf = gc.tensor(x, requires_grad=True)
        out = block(pre(leaf) * 2.0)
        (out * out).sum().backward()
        tleaf = torch.tensor(x, requires_grad=True)
        tout = tm(tpre(tleaf) * 2.0).tanh()
        (tout * tout).sum().backward()
        np.testing.assert_allclose(leaf.grad.numpy(), tleaf.grad.numpy(), rtol=1e-5, atol=1e-6)
        for p, tp in [*zip(m.parameters(), tm.parameters()),
                      *zip(pre.parameters(), tpre.parameters())]:
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5)
    with gc.no_grad():  # the same function without grad: another variant, plain results
        assert not block(leaf).requires_grad
    plain = gc.tensor(_x())  # an argument without grad: a graph to the parameters only
    assert block(plain).requires_grad and plain.grad is None
    assert block.compile_count == 3


def test_argument_requiring_grad_in_a_step_with_backward_is_refused():
    m = _mlp()

    @gc.compile
    def saliency(x):
        m(x).sum().backward()

    with pytest.raises(NotImplementedError, match="reaches argument 'x'"):
        saliency(gc.tensor(_x(), requires_grad=True))
    assert all(g is None for g in _grads(m))


# -- random programs: a compiled forward, the backward outside, against eager ----------------
def _forward_fn(prog: dict, params: dict):
    """``test_fuzz``'s random program without its in-step backward: the two last values."""
    from test_fuzz import program_pool

    def fn(x, idx):
        pool = program_pool(prog, x, idx, params["w"], params["m"])
        return pool[-1], {"prev": pool[-2]}

    return fn


def _fuzz_programs():
    from test_fuzz import programs

    return programs()


@pytest.mark.parametrize("x_grad", [False, True])
def test_random_programs_backward_outside_equals_eager(x_grad):
    from hypothesis import given
    from test_fuzz import _close, fuzz_settings

    @fuzz_settings(0.5)
    @given(_fuzz_programs())
    def check(prog):
        rng = np.random.default_rng(prog["seed"])
        f = prog["f"]
        params = {"w": nn.Parameter(rng.standard_normal(f).astype(np.float32)),
                  "m": nn.Parameter((rng.standard_normal((f, f)) / max(f, 1))
                                    .astype(np.float32))}
        fn = _forward_fn(prog, params)
        compiled = gc.compile(fn)
        for b in prog["batches"]:
            x = rng.standard_normal((b, f)).astype(np.float32)
            idx = gc.tensor(rng.integers(0, max(f, 1), (b, f)))
            c1 = gc.tensor(rng.standard_normal((b, f)).astype(np.float32))
            c2 = gc.tensor(rng.standard_normal((b, f)).astype(np.float32))
            runs = []
            for call in (compiled, fn):
                for p in params.values():
                    p.grad = None
                xt = gc.tensor(x, requires_grad=x_grad)
                a, d = call(xt, idx)
                loss = (a * c1).sum() + (d["prev"] * c2).sin().sum()
                if loss.requires_grad:
                    loss.backward()
                runs.append([loss.requires_grad, loss.numpy()] + [
                    None if t.grad is None else t.grad.numpy().copy()
                    for t in (xt, *params.values())])
            (rg1, v1, *g1), (rg2, v2, *g2) = runs
            assert rg1 == rg2
            np.testing.assert_allclose(v1, v2, rtol=2e-4, atol=1e-4)
            # an element's tolerance scales with the largest of its array, as test_fuzz's
            # own comparisons do: a gradient through ``sin`` of a column sum over 257 rows
            # (arguments near 50) moves a 2.6 element by 7e-4 between two float32 summation
            # orders while its array's largest is 457 (HYPOTHESIS_PROFILE=long, seed 47)
            for a, e in zip(g1, g2):
                assert (a is None) == (e is None)
                if a is not None:
                    _close(e, a, "gradient")

    check()


def test_a_compiled_model_inside_a_compiled_step_is_inlined():
    """``model = gc.compile(model)`` and a compiled training step calling it (a common
    torch.compile habit): the inner function is traced into the outer step, not run once at
    trace time; equal to eager over several steps, one compile."""
    m, ref = _mlp(6), _mlp(6)
    cm = gc.compile(m)
    inner_kw = gc.compile(lambda x, scale=1.0: m(x) * scale)  # the generic call path
    opt, ropt = optim.SGD(m.parameters(), lr=0.1), optim.SGD(ref.parameters(), lr=0.1)
    y = np.array([0, 2, 1, 1, 0])

    @gc.compile
    def step(x, t):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(cm(x) + inner_kw(x, scale=0.5), t)
        loss.backward()
        opt.step()
        return loss

    for k in range(3):
        x = _x(seed=30 + k)
        loss = step(x, y)
        ropt.zero_grad()
        xt = gc.tensor(x)
        rl = nn.functional.cross_entropy(ref(xt) + ref(xt) * 0.5, gc.tensor(y))
        rl.backward()
        ropt.step()
        np.testing.assert_allclose(loss.item(), rl.item(), rtol=1e-5)
    for p, r in zip(m.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.numpy(), r.numpy(), rtol=1e-5, atol=1e-6)
    assert step.compile_count == 1 and cm.compile_count == 0


def test_compiled_method_binds_each_instance():
    """``@gc.compile`` on ``forward`` in a class body (as ``@torch.compile`` allows): each
    instance has its own compiled function reading its own parameters, and its results
    train through an eager backward."""

    class Net(nn.Module):
        def __init__(self, seed):
            super().__init__()
            gc.manual_seed(seed)
            self.lin = nn.Linear(4, 3)

        @gc.compile
        def forward(self, x):
            return self.lin(x).tanh()

    a, b = Net(0), Net(1)
    x = _x()
    for net in (a, b):
        want = net.lin(gc.tensor(x)).tanh()
        got = net(gc.tensor(x))
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        got.sum().backward()
        g = net.lin.weight.grad.numpy().copy()
        net.lin.weight.grad = None
        want.sum().backward()
        np.testing.assert_allclose(g, net.lin.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert a.forward is a.forward and a.forward is not b.forward
    assert a.forward.compile_count == 1 and b.forward.compile_count == 1
    assert isinstance(Net.forward, gc.CompiledFunction)


def test_compiled_submodule_is_registered_and_trains():
    """``self.enc = gc.compile(enc)`` inside a parent, or ``nn.Sequential(gc.compile(a), b)``:
    the parent holds it as an ``OptimizedModule`` (PyTorch's name and ``_orig_mod.`` keys), so
    ``parameters()``, ``state_dict()`` and ``eval()`` reach it (before, its parameters were
    missing from the parent and an optimizer built from it left them untrained)."""
    gc.manual_seed(0)
    enc = nn.Linear(4, 6)
    net = nn.Sequential(gc.compile(enc), nn.Tanh(), nn.Linear(6, 3))
    ref = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    ref.load_state_dict({k.replace("_orig_mod.", ""): v for k, v in net.state_dict().items()})
    assert list(net.state_dict()) == ["0._orig_mod.weight", "0._orig_mod.bias", "2.weight",
                                      "2.bias"]
    assert type(net[0]).__name__ == "OptimizedModule" and net[0]._orig_mod is enc
    opt, ropt = optim.SGD(net.parameters(), lr=0.2), optim.SGD(ref.parameters(), lr=0.2)
    for k in range(3):
        x = gc.tensor(_x(seed=40 + k))
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
        ropt.zero_grad()
        ref(x).pow(2).mean().backward()
        ropt.step()
    np.testing.assert_allclose(enc.weight.numpy(), ref[0].weight.numpy(), rtol=1e-5, atol=1e-6)
    assert net[0].compile_count == 1
    net.eval()
    assert not enc.training

    class Parent(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = gc.compile(nn.Linear(4, 2))

        def forward(self, x):
            return self.enc(x)

    p = Parent()
    assert [n for n, _ in p.named_parameters()] == ["enc._orig_mod.weight",
                                                    "enc._orig_mod.bias"]
    p2 = Parent()
    p2.load_state_dict(p.state_dict())
    np.testing.assert_array_equal(p2(_x()).detach().numpy(), p(_x()).detach().numpy())


def test_buffer_changed_before_backward_raises():
    """A buffer the recomputation reads (BatchNorm's running statistics in eval mode),
    written between the call and its backward by an eager training forward or a compiled
    one: PyTorch's in-place error, not a gradient taken at the new statistics."""
    gc.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))
    fwd = gc.compile(m)
    train = gc.compile(lambda x: m(x).sum())
    x = gc.tensor(_x(8))
    for update in ("eager", "compiled"):
        m.eval()
        out = fwd(x)
        m.train()
        with gc.no_grad():
            m(x) if update == "eager" else train(x)  # moves the running statistics
        m.eval()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()
        assert all(g is None for g in _grads(m))
    out = fwd(x)  # nothing written in between: the backward runs
    out.sum().backward()
    assert m[0].weight.grad is not None
