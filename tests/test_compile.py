"""gc.compile: specialisation, symbolic batch sizes, bad input, IR stages."""

import warnings

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.ir.verify import verify


def mlp():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    gm = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, gm


def data(b, seed=0):
    rng = np.random.default_rng(seed + b)
    return (rng.standard_normal((b, 6)).astype(np.float32),
            rng.standard_normal((b, 3)).astype(np.float32))


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_one_compilation_for_every_batch_size(backend):
    tm, gm = mlp()
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.05, momentum=0.9)
    lf = nn.MSELoss()

    @gc.compile(backend=backend)
    def step(x, y):
        gopt.zero_grad()
        loss = lf(gm(x), y)
        loss.backward()
        gopt.step()
        return loss

    @gc.compile(backend=backend)
    def infer(x):
        with gc.no_grad():
            return gm(x)

    for b in (1, 2, 7, 32, 64, 257):
        x, y = data(b)
        topt.zero_grad()
        tl = torch.nn.functional.mse_loss(tm(torch.from_numpy(x)), torch.from_numpy(y))
        tl.backward()
        topt.step()
        gl = step(x, y)
        np.testing.assert_allclose(gl.item(), tl.item(), rtol=1e-5)
        out = infer(x)
        assert out.shape == (b, 3)
        np.testing.assert_allclose(out.numpy(), tm(torch.from_numpy(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(gm.state_dict()[k], v.numpy(), rtol=1e-5, atol=1e-6)
    assert step.compile_count == 1
    assert infer.compile_count == 1
    assert "f32[B,6]" in step.ir("optimized")


def test_native_equals_interpreter_over_batch_sizes():
    _, g1 = mlp()
    _, g2 = mlp()
    fns = []
    for m, backend in ((g1, "cpu"), (g2, "interp")):
        opt = optim.SGD(m.parameters(), lr=0.1, weight_decay=0.01, nesterov=True, momentum=0.5)

        def step(x, y, m=m, opt=opt):
            loss = nn.functional.mse_loss(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss, m(x)

        fns.append(gc.compile(step, backend=backend))
    for b in (3, 1, 17):
        x, y = data(b)
        (l1, o1), (l2, o2) = fns[0](x, y), fns[1](x, y)
        np.testing.assert_allclose(l1.numpy(), l2.numpy(), rtol=2e-6)
        np.testing.assert_allclose(o1.numpy(), o2.numpy(), rtol=2e-5, atol=1e-6)
    for (k, a), b in zip(g1.state_dict().items(), g2.state_dict().values()):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7, err_msg=k)


def _seed_setup():
    m = nn.Linear(1, 1)
    opt = optim.SGD(m.parameters(), lr=0.01)
    lf = nn.L1Loss()

    @gc.compile
    def step(x, y):
        loss = lf(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return m, step


def test_batch_mismatch_between_arguments_raises_and_changes_nothing():
    m, step = _seed_setup()
    x = np.ones((8, 1), np.float32)
    step(x, x)
    before = m.state_dict()
    with pytest.raises(ValueError, match=r"argument 'y'.*B=8"):
        step(x, np.ones((9, 1), np.float32))
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    assert step.compile_count == 1


@pytest.mark.parametrize("bad, exc, msg", [
    (np.ones((8, 2), np.float32), ValueError, r"Linear\(1, 1\).*\(B, 2\)|shape"),
    (np.ones((8,), np.float32), (ValueError, RuntimeError), "shape|features|dimension"),
    (np.ones((8, 1), np.int64), (TypeError, RuntimeError, ValueError), "dtype|float|int"),
])
def test_bad_input_raises_clear_error_and_changes_nothing(bad, exc, msg):
    m, step = _seed_setup()
    y = np.ones((8, 1), np.float32)
    step(y, y)
    before = m.state_dict()
    grad_before = m.weight.grad.numpy().copy()
    with pytest.raises(exc, match=msg):
        step(bad, y)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    np.testing.assert_array_equal(m.weight.grad.numpy(), grad_before)


def test_trace_error_names_op_shapes_and_user_line():
    m = nn.Linear(20, 5)

    @gc.compile
    def f(x):
        return (x @ m.weight).sum()  # (B,19) @ (5,20): inner dims differ

    with pytest.raises(ValueError) as ei:
        f(np.ones((4, 19), np.float32))
    text = str(ei.value)
    assert "matmul" in text and "19" in text and "test_compile.py" in text


def test_l1_target_shape_mismatch_warns_once_at_trace_time():
    m = nn.Linear(1, 1)
    lf = nn.L1Loss()

    @gc.compile
    def f(x, y):
        return lf(m(x), y)

    x = np.ones((5, 1), np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        f(x, np.ones(5, np.float32))
        f(x, np.ones(5, np.float32))
    msgs = [str(i.message) for i in w if "target size" in str(i.message)]
    assert len(msgs) == 1 and "test_compile.py" in msgs[0]


def test_stages_print_and_verify():
    m, step = _seed_setup()
    x = np.ones((4, 1), np.float32)
    step(x, x)
    v = step.variants[0]
    for stage in ("traced", "grad", "optimized"):
        verify(v.stages[stage])
        assert step.ir(stage).startswith("graph step(x: f32[B,1], y: f32[B,1])")
    assert "update m.weight <-" in step.ir("grad")
    assert "define" in step.ir("llvm")
    assert "ret" in step.ir("asm")
    with pytest.raises(ValueError, match="stage"):
        step.ir("nope")


def test_hyperparameter_change_takes_effect_without_recompiling():
    m, step = _seed_setup()
    opt = step.fn.__closure__  # noqa: F841 - the optimizer lives in the closure
    x = np.ones((4, 1), np.float32)
    w0 = m.weight.numpy().copy()
    step(x, x * 3)
    d1 = m.weight.numpy() - w0
    group = [c.cell_contents for c in step.fn.__closure__
             if isinstance(c.cell_contents, optim.SGD)][0].param_groups[0]
    group["lr"] = 0.1
    w1 = m.weight.numpy().copy()
    step(x, x * 3)
    np.testing.assert_allclose(m.weight.numpy() - w1, d1 * 10, rtol=1e-4)
    assert step.compile_count == 1


def test_eval_train_switch_only_recompiles_when_read():
    m = nn.Linear(2, 2)

    @gc.compile
    def f(x):
        return m(x).sum()

    x = np.ones((3, 2), np.float32)
    f(x)
    m.eval()
    f(x)
    m.train()
    f(x)
    assert f.compile_count == 1


def test_tensor_lr_updated_in_place_takes_effect():
    """Schedulers fill_ a tensor lr in place (same object): the wrapper must re-read it."""
    m = nn.Linear(2, 1)
    lr = gc.tensor(0.1)
    opt = optim.SGD(m.parameters(), lr=lr)

    @gc.compile
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss

    x, y = np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32)
    w0 = m.weight.numpy().copy()
    step(x, y)
    assert not np.allclose(m.weight.numpy(), w0)
    lr.fill_(0.0)
    w1 = m.weight.numpy().copy()
    step(x, y)
    np.testing.assert_array_equal(m.weight.numpy(), w1)
    assert step.compile_count == 1


def test_scalar_result_is_a_number_until_its_array_is_needed():
    """A one-element result holds the number; ``numpy()`` makes (and keeps) the 0-d array,
    and later reads see changes made through it. Each call returns an independent value."""
    import graphc as gc

    f = gc.compile(lambda x: (x * x).sum())
    a = f(np.array([1.0, 2.0], np.float32))
    b = f(np.array([3.0], np.float32))
    assert a.item() == 5.0 and float(b) == 9.0 and a.shape == () and a.dtype == gc.float32
    arr = a.numpy()
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float32 and arr.shape == ()
    assert a.numpy() is arr
    arr[()] = 7.0
    assert a.item() == 7.0 and float(a) == 7.0 and b.item() == 9.0
    g = gc.compile(lambda x: (x > 0).sum())  # an integer result keeps its dtype
    r = g(np.array([1.0, -1.0, 2.0], np.float32))
    assert r.item() == 2 and r.numpy().dtype == r.dtype.np
    assert (a + 1).item() == 8.0


def test_structural_option_changes_between_calls_switch_variants():
    """Options that change the step's structure (momentum on/off, nesterov) are guards: the
    wrapper re-tests them whenever the group holds a different value object, so flipping one
    between calls picks (or compiles) the matching variant, and flipping it back reuses the
    first. Compared with the same sequence run eagerly."""
    import graphc as gc

    def run(compiled: bool):
        gc.manual_seed(5)
        model = nn.Linear(3, 2)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        f = gc.compile(step) if compiled else step
        x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
        y = np.ones((4, 2), np.float32)
        g = opt.param_groups[0]
        for k in range(8):
            if k == 2:
                g["momentum"] = 0.0
            if k == 4:
                g["momentum"], g["nesterov"] = 0.5, True
            if k == 6:
                g["momentum"], g["nesterov"] = 0.9, False
            f(gc.tensor(x) if not compiled else x, gc.tensor(y) if not compiled else y)
        return model.weight.numpy().copy(), (f.compile_count if compiled else 0)

    w_eager, _ = run(False)
    w_comp, count = run(True)
    np.testing.assert_allclose(w_comp, w_eager, rtol=1e-5, atol=1e-6)
    assert count == 3  # momentum, no momentum, nesterov; the last flip reuses the first


def test_symbolic_leading_dim_reshaped_and_permuted_matches_eager() -> None:
    """Sequence-first attention: the symbolic first dim folded into (L, N*H, hd) and moved
    inward; shape expressions reused across loop nests once failed LLVM verification."""
    from graphc.nn import functional as F

    gc.manual_seed(0)
    lin = nn.Linear(8, 24)

    def body(x):
        L, N, _ = x.shape
        q, k, v = lin(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(L, N * 2, 4).transpose(0, 1) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        lin.weight.grad = None
        loss = (a.transpose(0, 1).reshape(L, N, 8) ** 2).sum()
        loss.backward()
        return loss

    step = gc.compile(body)
    for L in (5, 7):
        x = np.random.default_rng(L).standard_normal((L, 3, 8)).astype(np.float32)
        got = float(step(x))
        g = lin.weight.grad.numpy().copy()
        want = float(body(gc.tensor(x)))
        np.testing.assert_allclose(got, want, rtol=1e-5)
        np.testing.assert_allclose(g, lin.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
