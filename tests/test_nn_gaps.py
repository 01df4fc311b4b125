"""``torch.nn`` / ``nn.functional`` / ``nn.utils`` names graphc added to close gaps with PyTorch:
3-D and circular padding modules, ``LPPool3d``, the in-place activations, the
``*_with_indices`` pools, the deprecated upsampling spellings, ``nn.Buffer``, the parameter
vector and gradient-clipping utilities, ``skip_init``, batch-norm fusion and
``stateless.functional_call``. Each against PyTorch: values and gradients eagerly, and inside
compiled training steps (losses, parameters and buffers after a few SGD steps), with PyTorch's
reprs, state_dict keys, warnings and errors."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim
from graphc.nn.utils import stateless

TF = torch.nn.functional
_rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def _close(a: Any, b: Any, what: str = "", tol: float = 1e-5) -> None:
    a = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=what)


def _eager(gfn: Any, tfn: Any, arrays: list[np.ndarray]) -> None:
    """Output and the gradient of every input, graphc against PyTorch."""
    gx = [gc.tensor(a, requires_grad=True) for a in arrays]
    tx = [torch.tensor(a, requires_grad=True) for a in arrays]
    gy, ty = gfn(*gx), tfn(*tx)
    assert tuple(gy.shape) == tuple(ty.shape)
    w = _r(*ty.shape)
    (gy * gc.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    _close(gy, ty, "value")
    for i, (a, b) in enumerate(zip(gx, tx)):
        _close(a.grad, b.grad, f"gradient of argument {i}", 1e-4)


def _compiled(gfn: Any, tfn: Any, shape: tuple) -> None:
    """``fn(x * p)`` in a compiled step over two batch sizes: output and ``p``'s gradient."""
    p0 = _r(*shape[1:])
    param = nn.Parameter(gc.tensor(p0))

    @gc.compile
    def step(x: Any, w: Any) -> Any:
        param.grad = None
        y = gfn(x * param)
        (y * w).sum().backward()
        return y

    for batch in (2, 3):
        x = _r(batch, *shape[1:])
        tp = torch.tensor(p0, requires_grad=True)
        ty = tfn(torch.tensor(x) * tp)
        w = _r(*ty.shape)
        (ty * torch.tensor(w)).sum().backward()
        _close(step(gc.tensor(x), gc.tensor(w)), ty, "compiled value")
        _close(param.grad, tp.grad, "compiled gradient", 1e-4)


def _sgd_parity(tm: Any, gm: Any, loss: Any, batches: list, steps_check: Any = None) -> Any:
    """Train ``tm`` eagerly and ``gm`` in one compiled step with SGD (momentum) on the same
    batches; losses and every state_dict entry must match. Returns the compiled step."""
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.1, momentum=0.9)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        out = loss(gm, x, y, gc)
        out.backward()
        gopt.step()
        return out

    for x, y in batches:
        topt.zero_grad()
        tl = loss(tm, torch.from_numpy(x), torch.from_numpy(y), torch)
        tl.backward()
        topt.step()
        _close(step(x, y).item(), tl.item(), "loss")
    for k, v in tm.state_dict().items():
        _close(gm.state_dict()[k], v, k)
    assert step.compile_count == 1
    return step


# -- 1. padding modules --------------------------------------------------------------------
PADS = [
    ("ConstantPad3d", ((1, 2, 0, 1, 2, 0), 1.5), (2, 2, 3, 4, 5)),
    ("ConstantPad3d", (1, -2.0), (2, 3, 4, 5)),
    ("ZeroPad3d", ((0, 1, 2, 0, 1, 1),), (2, 2, 3, 4, 5)),
    ("ReflectionPad3d", ((1, 2, 1, 0, 2, 1),), (2, 2, 3, 4, 5)),
    ("ReflectionPad3d", (1,), (2, 3, 4, 5)),
    ("ReplicationPad3d", (2,), (2, 2, 3, 4, 5)),
    ("ReplicationPad3d", ((0, 3, 1, 0, 2, 1),), (2, 3, 4, 5)),
    ("CircularPad1d", ((2, 1),), (2, 3, 5)),
    ("CircularPad1d", (3,), (3, 5)),
    ("CircularPad2d", ((1, 1, 2, 0),), (2, 2, 3, 4)),
    ("CircularPad2d", ((-1, 2, 1, -1),), (2, 4, 5)),
    ("CircularPad3d", (1,), (2, 2, 3, 4, 5)),
    ("CircularPad3d", ((0, 2, 1, 0, 2, 1),), (2, 3, 4, 5)),
]


@pytest.mark.parametrize("name,args,shape", PADS, ids=str)
def test_padding_modules_like_torch(name: str, args: tuple, shape: tuple) -> None:
    gm, tm = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(gm) == repr(tm)
    assert tuple(gm.padding) == tuple(tm.padding)
    _eager(gm, tm, [_r(*shape)])


@pytest.mark.parametrize("name,args,shape", [PADS[0], PADS[3], PADS[5], PADS[9], PADS[11]],
                         ids=str)
def test_padding_modules_compiled(name: str, args: tuple, shape: tuple) -> None:
    _compiled(getattr(nn, name)(*args), getattr(torch.nn, name)(*args), shape)


def test_padding_reprs_and_errors_like_torch() -> None:
    for name, args in [("ConstantPad1d", (2, 3)), ("ConstantPad2d", ((1, 2, 3, 4), 3.5)),
                       ("ZeroPad1d", (2,)), ("ZeroPad2d", (1,)), ("ReflectionPad2d", (1,))]:
        assert repr(getattr(nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))
    for name, bad in [("CircularPad1d", (4,)), ("CircularPad2d", (2, 3)),
                      ("CircularPad3d", (2, 3, 4))]:
        x = np.zeros(bad, np.float32)
        with pytest.raises(ValueError) as te:
            getattr(torch.nn, name)(1)(torch.from_numpy(x))
        with pytest.raises(ValueError) as ge:
            getattr(nn, name)(1)(x)
        assert str(ge.value) == str(te.value)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        nn.ReflectionPad3d(2)(np.zeros((1, 1, 2, 2, 2), np.float32))


# -- 2. LPPool3d -----------------------------------------------------------------------------
@pytest.mark.parametrize("args", [(2, 2), (3.0, (2, 1, 2), (1, 2, 1)), (2, 3, 2, True),
                                  (math.inf, 2), (1, (1, 2, 2))], ids=str)
def test_lp_pool3d_like_torch(args: tuple) -> None:
    gm, tm = nn.LPPool3d(*args), torch.nn.LPPool3d(*args)
    assert repr(gm) == repr(tm)
    x = np.abs(_r(2, 2, 4, 5, 5)) + 0.1
    _eager(gm, tm, [x])
    _eager(gm, tm, [x[0]])  # unbatched
    _eager(lambda t: F.lp_pool3d(t, *args), lambda t: TF.lp_pool3d(t, *args), [x])


def test_lp_pool3d_compiled() -> None:
    _compiled(nn.LPPool3d(2, (2, 2, 2), 1), torch.nn.LPPool3d(2, (2, 2, 2), 1), (2, 2, 3, 4, 4))


# -- 3. in-place functional activations ------------------------------------------------------
INPLACE = [("relu_", ()), ("elu_", (0.5,)), ("leaky_relu_", (0.2,)),
           ("hardtanh_", (-0.5, 0.5)), ("threshold_", (0.1, 2.0)), ("selu_", ()),
           ("celu_", (0.7,))]


@pytest.mark.parametrize("name,args", INPLACE, ids=str)
def test_inplace_activations_write_their_input_like_torch(name: str, args: tuple) -> None:
    a = _r(3, 4)
    gx, tx = gc.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    gy, ty = gx * 2.0, tx * 2.0
    assert getattr(F, name)(gy, *args) is gy
    assert getattr(TF, name)(ty, *args) is ty
    _close(gy.detach(), ty, "value")
    (gy * gy).sum().backward()
    (ty * ty).sum().backward()
    _close(gx.grad, tx.grad, "gradient", 1e-5)
    leaf = gc.tensor(a.copy())  # a leaf that needs no grad is written in place
    getattr(F, name)(leaf, *args)
    _close(leaf, getattr(TF, name)(torch.tensor(a), *args), "leaf")


def test_inplace_activations_compiled_like_torch() -> None:
    class Net:
        @staticmethod
        def build(m: Any) -> Any:
            class N(m.nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    self.a, self.b = m.nn.Linear(3, 5), m.nn.Linear(5, 4)
                    self.c = m.nn.Linear(4, 2)

                def forward(self, x: Any) -> Any:
                    f = m.nn.functional
                    h = self.a(x)
                    f.leaky_relu_(h, 0.1)
                    h = self.b(h)
                    f.celu_(h, 0.7)
                    return f.hardtanh_(self.c(h), -0.8, 0.8)
            return N()

    torch.manual_seed(0)
    tm, gm = Net.build(torch), Net.build(gc)
    batches = [(_r(4, 3), _r(4, 2)) for _ in range(3)]
    _sgd_parity(tm, gm, lambda m, x, y, lib: ((m(x) - y) ** 2).mean(), batches)


# -- 4. *_with_indices pools and the deprecated upsampling -----------------------------------
WITH_INDICES = [
    ("max_pool1d_with_indices", (3, 2, 1), (2, 3, 9)),
    ("max_pool2d_with_indices", (3, 2, 1), (2, 3, 7, 6)),
    ("max_pool3d_with_indices", (2, 1), (2, 2, 4, 4, 5)),
    ("adaptive_max_pool1d_with_indices", (4,), (2, 3, 10)),
    ("adaptive_max_pool2d_with_indices", ((3, 2),), (2, 3, 6, 4)),
    ("adaptive_max_pool3d_with_indices", (2,), (2, 2, 4, 4, 6)),
]


@pytest.mark.parametrize("name,args,shape", WITH_INDICES, ids=str)
def test_with_indices_pools_like_torch(name: str, args: tuple, shape: tuple) -> None:
    x = _r(*shape)
    gv, gi = getattr(F, name)(gc.tensor(x), *args)  # a pair even with return_indices=False
    tv, ti = getattr(TF, name)(torch.from_numpy(x), *args)
    _close(gv, tv, "values")
    np.testing.assert_array_equal(gi.numpy(), ti.numpy())
    _eager(lambda t: getattr(F, name)(t, *args)[0], lambda t: getattr(TF, name)(t, *args)[0],
           [x])


@pytest.mark.parametrize("name,kw", [("upsample_nearest", {"scale_factor": 2}),
                                     ("upsample_nearest", {"size": (5, 7)}),
                                     ("upsample_bilinear", {"scale_factor": 2}),
                                     ("upsample_bilinear", {"size": (5, 9)})], ids=str)
def test_deprecated_upsampling_warns_and_matches_torch(name: str, kw: dict) -> None:
    x = _r(2, 3, 4, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(F, name)(gc.tensor(x), **kw)
        getattr(TF, name)(torch.from_numpy(x), **kw)
    assert len(caught) == 2
    assert caught[0].category is caught[1].category is UserWarning
    assert str(caught[0].message) == str(caught[1].message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _eager(lambda t: getattr(F, name)(t, **kw), lambda t: getattr(TF, name)(t, **kw), [x])


# -- 5. nn.Buffer ----------------------------------------------------------------------------
def _buffered(m: Any) -> Any:
    class Net(m.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = m.nn.Linear(3, 2)
            self.scale = m.nn.Buffer(m.ones(2) * 0.5)
            self.seen = m.nn.Buffer(m.zeros(2), persistent=False)
            self.total = m.nn.Buffer(m.zeros(()))

        def forward(self, x: Any) -> Any:
            y = self.lin(x) * self.scale
            with m.no_grad():
                self.seen.add_(y.mean(0))
                self.total.add_(1.0)
            return y
    return Net()


def test_buffer_registers_like_torch() -> None:
    torch.manual_seed(0)
    tm, gm = _buffered(torch), _buffered(gc)
    assert list(gm.state_dict()) == list(tm.state_dict()) == [
        "scale", "total", "lin.weight", "lin.bias"]
    assert [n for n, _ in gm.named_buffers()] == [n for n, _ in tm.named_buffers()]
    b = nn.Buffer(gc.ones(3))
    assert isinstance(b, nn.Buffer) and type(b) is gc.Tensor
    assert not isinstance(gc.ones(3), nn.Buffer)
    src = gc.zeros(2)
    shared = nn.Buffer(src)  # detach() of the data: the same memory, as PyTorch's
    src.add_(1.0)
    _close(shared, np.ones(2, np.float32))
    g = gc.ones(2, requires_grad=True)
    assert nn.Buffer(g).requires_grad and torch.nn.Buffer(torch.ones(2, requires_grad=True)
                                                         ).requires_grad
    assert nn.Buffer().shape == tuple(torch.nn.Buffer().shape) == (0,)


def test_buffer_assignment_errors_like_torch() -> None:
    for m in (torch, gc):
        lin = m.nn.Linear(2, 2)
        with pytest.raises(TypeError, match="as parameter 'weight'"):
            lin.weight = m.nn.Buffer(m.zeros(2, 2))
        lin.note = 3
        with pytest.raises(KeyError, match="attribute 'note' already exists"):
            lin.note = m.nn.Buffer(m.zeros(1))
        seq = m.nn.Sequential(m.nn.ReLU())
        with pytest.raises(TypeError, match="as child module '0'"):
            setattr(seq, "0", m.nn.Buffer(m.zeros(1)))
        lin.extra = m.nn.Buffer(m.zeros(1), persistent=False)
        assert "extra" not in lin.state_dict()
        lin.extra = m.nn.Buffer(m.ones(1))  # re-assigning takes the new persistence
        assert "extra" in lin.state_dict()


def test_buffer_updated_in_compiled_step_like_torch() -> None:
    torch.manual_seed(0)
    tm, gm = _buffered(torch), _buffered(gc)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    batches = [(_r(4, 3), _r(4, 2)) for _ in range(3)]
    _sgd_parity(tm, gm, lambda m, x, y, lib: ((m(x) - y) ** 2).mean(), batches)
    _close(gm.seen, tm.seen, "non-persistent buffer")


# -- 6. nn.utils ------------------------------------------------------------------------------
def _mlp(m: Any) -> Any:
    return m.nn.Sequential(m.nn.Linear(3, 4), m.nn.Tanh(), m.nn.Linear(4, 2))


def test_parameter_vectors_like_torch() -> None:
    torch.manual_seed(0)
    tm, gm = _mlp(torch), _mlp(gc)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    gv = nn.utils.parameters_to_vector(gm.parameters())
    tv = torch.nn.utils.parameters_to_vector(tm.parameters())
    _close(gv, tv, "vector")
    ids = [id(p) for p in gm.parameters()]
    new = _r(tv.numel())
    nn.utils.vector_to_parameters(gc.tensor(new), gm.parameters())
    torch.nn.utils.vector_to_parameters(torch.from_numpy(new), tm.parameters())
    assert [id(p) for p in gm.parameters()] == ids  # the same Parameter objects, new values
    for k, v in tm.state_dict().items():
        _close(gm.state_dict()[k], v, k)
    with pytest.raises(TypeError) as te:
        torch.nn.utils.vector_to_parameters(new, tm.parameters())
    with pytest.raises(TypeError) as ge:
        nn.utils.vector_to_parameters(new, gm.parameters())
    assert str(ge.value) == str(te.value)


def test_parameter_vectors_compiled_like_torch() -> None:
    """A penalty on the flattened parameters and a write of a shrunk vector back, inside the
    compiled step."""
    def loss(m: Any, x: Any, y: Any, lib: Any) -> Any:
        u = lib.nn.utils
        vec = u.parameters_to_vector(m.parameters())
        return ((m(x) - y) ** 2).mean() + 0.01 * (vec * vec).sum()

    torch.manual_seed(1)
    tm, gm = _mlp(torch), _mlp(gc)
    batches = [(_r(5, 3), _r(5, 2)) for _ in range(3)]
    _sgd_parity(tm, gm, loss, batches)

    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})

    @gc.compile
    def shrink() -> None:
        vec = nn.utils.parameters_to_vector(gm.parameters())
        nn.utils.vector_to_parameters(vec * 0.5, gm.parameters())

    for _ in range(2):
        shrink()
        tvec = torch.nn.utils.parameters_to_vector(tm.parameters())
        torch.nn.utils.vector_to_parameters(tvec * 0.5, tm.parameters())
    for k, v in tm.state_dict().items():
        _close(gm.state_dict()[k], v, k)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3.0])
def test_split_clip_grad_norm_like_torch(norm_type: float) -> None:
    torch.manual_seed(0)
    tm, gm = _mlp(torch), _mlp(gc)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x, y = _r(6, 3), _r(6, 2)
    ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).sum().backward()
    ((gm(x) - y) ** 2).sum().backward()
    tg = [p.grad for p in tm.parameters()]
    gg = [p.grad for p in gm.parameters()]
    tn = torch.nn.utils.get_total_norm(tg, norm_type, foreach=None)
    gn = nn.utils.get_total_norm(gg, norm_type, foreach=None)
    _close(gn, tn, "total norm", 1e-4)
    torch.nn.utils.clip_grads_with_norm_(tm.parameters(), 0.5, tn)
    nn.utils.clip_grads_with_norm_(gm.parameters(), 0.5, gn)
    for a, b in zip(gm.parameters(), tm.parameters()):
        _close(a.grad, b.grad, "clipped", 1e-5)
    assert nn.utils.clip_grads_with_norm_([nn.Parameter(gc.ones(2))], 1.0, gn) is None


def test_clip_grads_with_norm_compiled_like_torch() -> None:
    def loss(m: Any, x: Any, y: Any, lib: Any) -> Any:
        out = ((m(x) - y) ** 2).sum()
        return out

    torch.manual_seed(2)
    tm, gm = _mlp(torch), _mlp(gc)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.05)
    gopt = optim.SGD(gm.parameters(), lr=0.05)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        out = loss(gm, x, y, gc)
        out.backward()
        total = nn.utils.get_total_norm([p.grad for p in gm.parameters()])
        nn.utils.clip_grads_with_norm_(gm.parameters(), 0.3, total)
        gopt.step()
        return total

    for _ in range(3):
        x, y = _r(5, 3), _r(5, 2)
        topt.zero_grad()
        loss(tm, torch.from_numpy(x), torch.from_numpy(y), torch).backward()
        tn = torch.nn.utils.get_total_norm([p.grad for p in tm.parameters()])
        torch.nn.utils.clip_grads_with_norm_(tm.parameters(), 0.3, tn)
        topt.step()
        _close(step(x, y), tn, "norm", 1e-4)
    for k, v in tm.state_dict().items():
        _close(gm.state_dict()[k], v, k)
    assert step.compile_count == 1


def test_deprecated_clip_grad_norm_warns_like_torch() -> None:
    for m in (torch, gc):
        p = m.nn.Parameter(m.ones(3))
        p.grad = m.ones(3) * 2.0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            n = m.nn.utils.clip_grad_norm(p, 1.0)
        assert caught[0].category is FutureWarning
        assert "`torch.nn.utils.clip_grad_norm` is now deprecated" in str(caught[0].message)
        _close(n if m is gc else n.detach().numpy(), np.float32(np.sqrt(12.0)), "norm")
        _close(p.grad if m is gc else p.grad.numpy(), np.full(3, 1 / np.sqrt(3), np.float32),
               "clipped", 1e-5)


def test_skip_init_like_torch() -> None:
    for m in (torch, gc):
        m.manual_seed(3)
        lin = m.nn.utils.skip_init(m.nn.Linear, 5, 4, bias=False)
        assert tuple(lin.weight.shape) == (4, 5) and lin.bias is None
        after = m.rand(4)  # the skipped initialisation drew nothing
        m.manual_seed(3)
        _close(after if m is gc else after.numpy(), (m.rand(4) if m is gc else
                                                     m.rand(4).numpy()), "stream")
        conv = m.nn.utils.skip_init(m.nn.Conv2d, 2, 3, 3, device="cpu")
        assert tuple(conv.weight.shape) == (3, 2, 3, 3)
        with pytest.raises(RuntimeError, match="Expected a Module"):
            m.nn.utils.skip_init(int)

    class NoDevice(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()

    with pytest.raises(RuntimeError, match="Module must support a 'device' arg"):
        nn.utils.skip_init(NoDevice, 2)


def _trained_bn(m: Any, bn: Any, x: np.ndarray) -> None:
    """Give ``bn`` non-trivial running statistics and affine parameters."""
    with m.no_grad():
        bn.weight.copy_(m.tensor(np.linspace(0.5, 1.5, bn.num_features, dtype=np.float32)))
        bn.bias.copy_(m.tensor(np.linspace(-0.2, 0.3, bn.num_features, dtype=np.float32)))
    bn.train()
    bn(m.tensor(x))
    bn.eval()


@pytest.mark.parametrize("conv,transpose", [("Conv2d", False), ("ConvTranspose2d", True),
                                            ("Conv1d", False)], ids=str)
def test_fuse_conv_bn_eval_like_torch(conv: str, transpose: bool) -> None:
    nd = 1 if conv.endswith("1d") else 2
    torch.manual_seed(0)
    tc = getattr(torch.nn, conv)(3, 4, 3)
    gc_ = getattr(nn, conv)(3, 4, 3)
    gc_.load_state_dict({k: v.detach().numpy() for k, v in tc.state_dict().items()})
    bn_cls = "BatchNorm1d" if nd == 1 else "BatchNorm2d"
    tb, gb = getattr(torch.nn, bn_cls)(4), getattr(nn, bn_cls)(4)
    x = _r(5, 3, *([6] * nd))
    hx = tc(torch.from_numpy(x)).detach().numpy()
    _trained_bn(torch, tb, hx)
    _trained_bn(gc, gb, hx)
    tc.eval()
    gc_.eval()
    tf = torch.nn.utils.fuse_conv_bn_eval(tc, tb, transpose)
    gf = nn.utils.fuse_conv_bn_eval(gc_, gb, transpose)
    assert type(gf) is type(gc_) and gf is not gc_ and isinstance(gf.weight, nn.Parameter)
    _close(gf.weight, tf.weight, "weight", 1e-5)
    _close(gf.bias, tf.bias, "bias", 1e-5)
    _close(gf(x), tb(tc(torch.from_numpy(x))), "fused output", 1e-4)
    infer = gc.compile(lambda v: gf(v))
    _close(infer(x), tf(torch.from_numpy(x)), "compiled fused output", 1e-4)
    gc_.train()
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        nn.utils.fuse_conv_bn_eval(gc_, gb)


def test_fuse_linear_bn_like_torch() -> None:
    torch.manual_seed(0)
    tl, gl = torch.nn.Linear(3, 4), nn.Linear(3, 4)
    gl.load_state_dict({k: v.detach().numpy() for k, v in tl.state_dict().items()})
    tb, gb = torch.nn.BatchNorm1d(4), nn.BatchNorm1d(4)
    hx = tl(torch.from_numpy(_r(6, 3))).detach().numpy()
    _trained_bn(torch, tb, hx)
    _trained_bn(gc, gb, hx)
    tl.eval()
    gl.eval()
    tf, gf = torch.nn.utils.fuse_linear_bn_eval(tl, tb), nn.utils.fuse_linear_bn_eval(gl, gb)
    _close(gf.weight, tf.weight, "weight")
    _close(gf.bias, tf.bias, "bias")
    gw, gbias = nn.utils.fuse_linear_bn_weights(gl.weight, None, gb.running_mean,
                                                gb.running_var, gb.eps, gb.weight, gb.bias)
    tw, tbias = torch.nn.utils.fuse_linear_bn_weights(tl.weight, None, tb.running_mean,
                                                      tb.running_var, tb.eps, tb.weight,
                                                      tb.bias)
    _close(gw, tw, "weight (no bias)")
    _close(gbias, tbias, "bias (no bias)")
    with pytest.raises(AssertionError) as te:
        torch.nn.utils.fuse_linear_bn_eval(tl, torch.nn.BatchNorm1d(3).eval())
    with pytest.raises(AssertionError) as ge:
        nn.utils.fuse_linear_bn_eval(gl, nn.BatchNorm1d(3).eval())
    assert str(ge.value) == str(te.value)


# -- 7. stateless.functional_call ------------------------------------------------------------
def test_functional_call_eager_like_torch() -> None:
    torch.manual_seed(0)
    tm, gm = _mlp(torch), _mlp(gc)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    w0 = _r(4, 3)
    gw, tw = gc.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    x = _r(5, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gy = stateless.functional_call(gm, {"0.weight": gw}, gc.tensor(x))
        ty = torch.nn.utils.stateless.functional_call(tm, {"0.weight": tw}, torch.tensor(x))
    assert [c.category for c in caught] == [FutureWarning, FutureWarning]
    assert str(caught[0].message) == str(caught[1].message)
    _close(gy, ty, "output")
    gy.sum().backward()
    ty.sum().backward()
    _close(gw.grad, tw.grad, "replacement's gradient")
    _close(gm[2].weight.grad, tm[2].weight.grad, "untouched parameter's gradient")
    assert gm[0].weight.grad is None and isinstance(gm[0].weight, nn.Parameter)  # restored
    # kwargs, a single non-tuple argument, buffers
    bn_t, bn_g = torch.nn.BatchNorm1d(3).eval(), nn.BatchNorm1d(3).eval()
    rm = _r(3)
    _close(stateless._functional_call(bn_g, {"running_mean": gc.tensor(rm)}, gc.tensor(x)),
           torch.func.functional_call(bn_t, {"running_mean": torch.tensor(rm)},
                                      torch.tensor(x)), "buffer replaced")
    _close(bn_g.running_mean, np.zeros(3, np.float32), "buffer restored")


def test_functional_call_restores_on_error_and_checks_keys_like_torch() -> None:
    class Boom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x: Any) -> Any:
            raise ValueError("boom")

    m = Boom()
    w = m.lin.weight
    with pytest.raises(ValueError, match="boom"):
        stateless._functional_call(m, {"lin.weight": gc.zeros(2, 2)}, (gc.ones(1, 2),))
    assert m.lin.weight is w
    torch.manual_seed(0)
    tm, gm = _mlp(torch), _mlp(gc)
    for extra in ({"0.weight": gc.zeros(4, 3), "nope": gc.zeros(1)}, {}):
        tx = {k: torch.zeros(tuple(v.shape)) for k, v in extra.items()}
        with pytest.raises(RuntimeError) as te:
            torch.func.functional_call(tm, tx, torch.zeros(1, 3), strict=True)
        with pytest.raises(RuntimeError) as ge:
            stateless._functional_call(gm, extra, gc.zeros(1, 3), strict=True)
        assert str(ge.value) == str(te.value)


def test_functional_call_tied_weights_like_torch() -> None:
    def tied(m: Any) -> Any:
        seq = m.nn.Sequential(m.nn.Linear(3, 3, bias=False), m.nn.Linear(3, 3, bias=False))
        seq[1].weight = seq[0].weight
        return seq

    torch.manual_seed(0)
    tm, gm = tied(torch), tied(gc)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x, w = _r(2, 3), _r(3, 3)
    for tie in (True, False):
        _close(stateless._functional_call(gm, {"0.weight": gc.tensor(w)}, gc.tensor(x),
                                          tie_weights=tie),
               torch.func.functional_call(tm, {"0.weight": torch.tensor(w)}, torch.tensor(x),
                                          tie_weights=tie), f"tie_weights={tie}")
    two = {"0.weight": gc.tensor(w), "1.weight": gc.tensor(w + 1)}
    with pytest.raises(ValueError, match="which are tied"):
        stateless._functional_call(gm, two, gc.tensor(x))


def test_functional_call_in_compiled_step_like_torch() -> None:
    """A MAML-like step: the loss of the model called with shifted parameters, gradients to
    the real ones; batch-norm statistics update through the call."""
    def net(m: Any) -> Any:
        return m.nn.Sequential(m.nn.Linear(3, 4), m.nn.BatchNorm1d(4), m.nn.Tanh(),
                               m.nn.Linear(4, 2))

    def loss(m: Any, x: Any, y: Any, lib: Any) -> Any:
        fast = {n: p * 0.9 + 0.01 for n, p in m.named_parameters()}
        call = (torch.func.functional_call if lib is torch else stateless._functional_call)
        return ((call(m, fast, (x,)) - y) ** 2).mean()

    torch.manual_seed(0)
    batches = [(_r(6, 3), _r(6, 2)) for _ in range(3)]
    _sgd_parity(net(torch), net(gc), loss, batches)


def test_functional_call_on_the_root_module_compiles_once() -> None:
    """Replacing the root module's own parameter inside a step must not become what the
    step's guards expect: a later change of the module's state (which re-runs the guards)
    still finds the compiled step valid."""
    lin = nn.Linear(3, 2)
    opt = optim.SGD(lin.parameters(), lr=0.1)
    tlin = torch.nn.Linear(3, 2)
    lin.load_state_dict({k: v.detach().numpy() for k, v in tlin.state_dict().items()})
    topt = torch.optim.SGD(tlin.parameters(), lr=0.1)

    @gc.compile
    def step(x: Any) -> Any:
        opt.zero_grad()
        out = stateless._functional_call(lin, {"weight": lin.weight * 2.0}, (x,)).sum()
        out.backward()
        opt.step()
        return out

    x = _r(4, 3)
    for i in range(4):
        if i == 2:
            lin.weight = lin.weight  # the same object: the step's guards re-run
        topt.zero_grad()
        tl = torch.func.functional_call(tlin, {"weight": tlin.weight * 2.0},
                                        (torch.tensor(x),)).sum()
        tl.backward()
        topt.step()
        _close(step(x), tl, "loss", 1e-5)
    assert step.compile_count == 1
