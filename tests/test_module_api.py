"""The Module API PyTorch programs use (containers, traversal, apply, buffers, forward hooks,
dtype/device conversion) and the Tensor ``to``/``type``/``device`` forms, against PyTorch,
eagerly and in compiled steps (a change after compiling re-traces; nothing is baked in)."""

from collections import OrderedDict

import numpy as np
import pytest
from _parity import assert_close
from _torch import torch

import graphc as gc
from graphc import nn, optim

MODES = ["compiled", "interp"]


def _compile(fn, mode):
    if mode == "compiled":
        pytest.importorskip("graphc.codegen.cpu", reason="the native CPU backend is not built")
        return gc.compile(fn)
    return gc.compile(fn, backend="interp")


def _load(gm, tm):
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


def _data(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((5, 3)).astype(np.float32),
             rng.standard_normal((5, 2)).astype(np.float32)) for _ in range(n)]


# -- containers ------------------------------------------------------------------------------
class _Heads:
    """The same model in both frameworks: a ModuleDict of heads, a ParameterList of scales,
    a ParameterDict of biases."""

    @staticmethod
    def build(m):
        class Net(m.nn.Module):
            def __init__(self):
                super().__init__()
                self.trunk = m.nn.Linear(3, 4)
                self.heads = m.nn.ModuleDict({"b": m.nn.Linear(4, 2), "a": m.nn.Linear(4, 2)})
                self.scales = m.nn.ParameterList([m.nn.Parameter(m.ones(2)) for _ in range(2)])
                self.bias = m.nn.ParameterDict({"y": m.nn.Parameter(m.zeros(2)),
                                                "x": m.nn.Parameter(m.ones(2) * 0.1)})

            def forward(self, x):
                h = self.trunk(x).relu()
                out = self.heads["a"](h) * self.scales[0] + self.bias["x"]
                for s in self.scales:
                    out = out * s
                for k in self.bias:
                    out = out + self.bias[k]
                return out + self.heads["b"](h)
        return Net()


def test_container_names_and_state_dict_match_torch():
    torch.manual_seed(0)
    tm, gm = _Heads.build(torch), _Heads.build(gc)
    assert list(gm.state_dict()) == list(tm.state_dict())
    assert [n for n, _ in gm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert [n for n, _ in gm.named_modules()] == [n for n, _ in tm.named_modules()]
    _load(gm, tm)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    assert_close(gm(x).numpy(), tm(torch.from_numpy(x)).detach().numpy(), "forward")
    # a plain dict given to ParameterDict is sorted, an OrderedDict keeps its order (as torch)
    assert list(gm.bias) == list(tm.bias) == ["x", "y"]
    od = OrderedDict([("z", gc.ones(1)), ("a", gc.ones(1))])
    assert list(nn.ParameterDict(od)) == ["z", "a"]
    assert list(gm.heads) == list(tm.heads) == ["b", "a"]


def test_container_methods_like_torch():
    names = {}
    for m in (torch, gc):
        d = m.nn.ModuleDict([("x", m.nn.Linear(1, 1))])
        d["y"] = m.nn.ReLU()
        d.update({"z": m.nn.Tanh()})
        assert list(d.keys()) == ["x", "y", "z"] and len(d) == 3 and "y" in d
        assert type(d.pop("y")).__name__ == "ReLU"
        del d["x"]
        assert list(d) == ["z"]
        pl = m.nn.ParameterList()
        pl.append(m.zeros(2))  # a plain tensor becomes a Parameter that requires grad
        pl.extend([m.nn.Parameter(m.ones(3))])
        assert isinstance(pl[0], m.nn.Parameter) and pl[0].requires_grad
        assert len(pl) == 2 and tuple(pl[-1].shape) == (3,)
        pl[0] = m.ones(4)
        assert tuple(pl[0].shape) == (4,)
        names[m] = [n for n, _ in pl.named_parameters()]  # a replaced entry keeps its place
        with pytest.raises(IndexError):
            pl[2]
        pd = m.nn.ParameterDict()
        pd["w"] = m.ones(2)
        assert isinstance(pd["w"], m.nn.Parameter)
        assert pd.get("nope") is None and "w" in pd and len(pd) == 1
        assert list(pd.keys()) == ["w"] and pd.pop("w") is not None and len(pd) == 0
    assert names[gc] == names[torch]


@pytest.mark.parametrize("mode", MODES)
def test_containers_train_compiled_like_torch(mode):
    torch.manual_seed(0)
    tm, gm = _Heads.build(torch), _Heads.build(gc)
    _load(gm, tm)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        gopt.zero_grad()
        loss = ((gm(x) - y) ** 2).mean()
        loss.backward()
        gopt.step()
        return loss

    cstep = _compile(step, mode)
    for x, y in _data(8):
        topt.zero_grad()
        tl = ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
        tl.backward()
        topt.step()
        assert_close(cstep(x, y).item(), tl.item(), "loss")
    for k, v in tm.state_dict().items():
        assert_close(gm.state_dict()[k], v.detach().numpy(), k)
    assert cstep.compile_count == 1


class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 2)])
        self.heads = nn.ModuleDict({"out": nn.Identity()})
        self.scale = nn.ParameterList([nn.Parameter(np.ones(2, np.float32))])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.heads["out"](x) * self.scale[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("change", ["modulelist_append", "moduledict_replace",
                                    "parameterlist_replace"])
def test_container_change_after_compile_retraces(mode, change):
    """A container that forward only iterates or indexes (never calls) is still guarded:
    changing an entry after compiling re-traces, and the result is the eager one."""
    gc.manual_seed(0)
    model = _Stack()
    x = np.ones((4, 3), np.float32)

    def fwd(x):
        return model(x)

    cfwd = _compile(fwd, mode)
    assert_close(cfwd(x).numpy(), fwd(x).numpy(), "before")
    if change == "modulelist_append":
        model.layers.append(nn.Linear(2, 2))
    elif change == "moduledict_replace":
        model.heads["out"] = nn.Tanh()
    else:
        model.scale[0] = nn.Parameter(np.full(2, 3.0, np.float32))
    assert_close(cfwd(x).numpy(), fwd(x).numpy(), "after the change")
    assert cfwd.compile_count == 2


# -- traversal and apply ---------------------------------------------------------------------
def _tree(m):
    shared = m.nn.Linear(2, 2)
    return m.nn.Sequential(OrderedDict([
        ("a", shared), ("b", m.nn.Sequential(m.nn.ReLU(), shared)), ("c", m.nn.Tanh())]))


def test_traversal_like_torch():
    t, g = _tree(torch), _tree(gc)
    for kw in ({}, {"prefix": "root"}, {"remove_duplicate": False}):
        assert [n for n, _ in g.named_modules(**kw)] == [n for n, _ in t.named_modules(**kw)]
    assert [n for n, _ in g.named_children()] == [n for n, _ in t.named_children()]
    assert len(list(g.children())) == len(list(t.children()))
    assert [type(m).__name__ for m in g.modules()] == [type(m).__name__ for m in t.modules()]
    memo_t, memo_g = set(), set()
    assert len(list(g.named_modules(memo_g))) == len(list(t.named_modules(memo_t)))
    assert len(memo_g) == len(memo_t)
    assert list(g.named_modules(memo_g)) == []  # everything already in the memo
    assert type(g.get_submodule("b.1")).__name__ == "Linear"
    assert g.get_parameter("b.1.weight") is g.a.weight
    with pytest.raises(AttributeError):
        g.get_submodule("b.7")


def test_apply_order_and_init_like_torch():
    seen = {"t": [], "g": []}
    t, g = _tree(torch), _tree(gc)
    assert t.apply(lambda m: seen["t"].append(type(m).__name__)) is t
    assert g.apply(lambda m: seen["g"].append(type(m).__name__)) is g
    assert seen["g"] == seen["t"]

    def init(m):
        if isinstance(m, nn.Linear):
            nn.init.constant_(m.weight, 0.5)
            nn.init.zeros_(m.bias)

    g.apply(init)
    np.testing.assert_array_equal(g.a.weight.numpy(), np.full((2, 2), 0.5, np.float32))


# -- buffers ---------------------------------------------------------------------------------
def _buffered(m):
    class B(m.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = m.nn.Linear(2, 2)
            self.register_buffer("kept", m.ones(2))
            self.register_buffer("scratch", m.zeros(2), persistent=False)
            self.register_buffer("nothing", None)
    return B()


def test_non_persistent_buffers_like_torch():
    t, g = _buffered(torch), _buffered(gc)
    assert list(g.state_dict()) == list(t.state_dict())
    assert "scratch" not in g.state_dict()
    assert [n for n, _ in g.named_buffers()] == [n for n, _ in t.named_buffers()]
    # a torch state_dict (without the non-persistent buffer) loads strictly
    res = g.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    assert list(res.missing_keys) == [] and list(res.unexpected_keys) == []
    # re-registering as persistent puts it back in the state_dict, as torch does
    t.register_buffer("scratch", torch.zeros(2))
    g.register_buffer("scratch", gc.zeros(2))
    assert list(g.state_dict()) == list(t.state_dict())


def test_register_errors_like_torch():
    for m in (torch, gc):
        b = _buffered(m)
        for name, exc in (("a.b", KeyError), ("", KeyError), ("lin", KeyError),
                          ("training", KeyError)):
            with pytest.raises(exc):
                b.register_buffer(name, m.zeros(1))
        with pytest.raises(TypeError):
            b.register_buffer("x", 3.0)
        with pytest.raises(TypeError):
            b.register_parameter("p", m.zeros(1))


# -- forward hooks ---------------------------------------------------------------------------
def _hook_run(m, x):
    calls = []
    lin = m.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(6.0).reshape(2, 3) / 10) if m is torch else None
    if m is gc:
        lin.weight.data = np.arange(6.0, dtype=np.float32).reshape(2, 3) / 10
        lin.bias.data = np.zeros(2, np.float32)
    else:
        with torch.no_grad():
            lin.bias.zero_()
    h1 = lin.register_forward_pre_hook(lambda mod, a: (calls.append("pre1"), a[0] * 2)[1])
    lin.register_forward_pre_hook(lambda mod, a: calls.append("pre0"), prepend=True)
    lin.register_forward_pre_hook(
        lambda mod, a, kw: (calls.append("prekw"), None)[1], with_kwargs=True)
    h2 = lin.register_forward_hook(lambda mod, a, out: (calls.append("post"), out + 1)[1])
    lin.register_forward_hook(
        lambda mod, a, kw, out: (calls.append("postkw"), out * 3)[1], with_kwargs=True)
    xt = m.tensor(x) if m is gc else torch.from_numpy(x)
    out1 = np.array(lin(xt).detach().numpy())
    h1.remove()
    with h2:
        out2 = np.array(lin(xt).detach().numpy())
    out3 = np.array(lin(xt).detach().numpy())  # h2 removed on leaving the with block
    return calls, out1, out2, out3


def test_forward_hooks_eager_like_torch():
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    tc, *tout = _hook_run(torch, x)
    gc_calls, *gout = _hook_run(gc, x)
    assert gc_calls == tc
    for a, b in zip(gout, tout):
        assert_close(a, b, "hooked output")


def test_always_call_hook_runs_on_error_like_torch():
    for m in (torch, gc):
        seen = []
        lin = m.nn.Linear(3, 2)
        lin.register_forward_hook(lambda mod, a, out, seen=seen: seen.append(out),
                                  always_call=True)
        with pytest.raises((RuntimeError, ValueError)):  # torch's RuntimeError, graphc's ValueError
            lin(m.zeros(2, 4))
        assert seen == [None]


@pytest.mark.parametrize("mode", MODES)
def test_hooks_added_or_removed_after_compile_retrace(mode):
    def run(compiled):
        gc.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        opt = optim.SGD(model.parameters(), lr=0.1)

        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        fn = _compile(step, mode) if compiled else step
        losses, handles = [], []
        for i, (x, y) in enumerate(_data(8)):
            if i == 2:
                handles.append(model[0].register_forward_hook(lambda m, a, out: out * 2))
            if i == 4:
                handles.append(model[2].register_forward_pre_hook(lambda m, a: a[0] - 0.5))
            if i == 6:
                handles.pop(0).remove()
            losses.append(fn(x, y).item())
        return losses, model, fn

    el, em, _ = run(False)
    cl, cm, fn = run(True)
    assert_close(cl, el, "losses")
    for k, v in em.state_dict().items():
        assert_close(cm.state_dict()[k], v, k)
    # no hooks; the forward hook; both hooks; the pre-hook alone (each a new set of hooks)
    assert fn.compile_count == 4


def test_hook_registration_inside_a_step_raises():
    lin = nn.Linear(2, 2)

    def fwd(x):
        lin.register_forward_hook(lambda *a: None)
        return lin(x)

    with pytest.raises(RuntimeError, match="hook"):
        gc.compile(fwd, backend="interp")(np.ones((1, 2), np.float32))


def test_backward_hooks_raise_clearly():
    with pytest.raises(NotImplementedError, match="backward hooks"):
        nn.Linear(2, 2).register_full_backward_hook(lambda *a: None)


# -- dtype and device conversion -------------------------------------------------------------
def _bn_net(m):
    return m.nn.Sequential(m.nn.Linear(3, 4), m.nn.BatchNorm1d(4), m.nn.Linear(4, 2))


@pytest.mark.parametrize("how", ["to", "to_kw", "double", "type"])
def test_module_to_double_like_torch(how):
    torch.manual_seed(0)
    t, g = _bn_net(torch), _bn_net(gc)
    _load(g, t)
    g_params = list(g.parameters())
    g_params[0].grad = gc.ones(4, 3)
    t_conv = {"to": lambda m: m.to(torch.float64), "to_kw": lambda m: m.to(dtype=torch.float64),
              "double": lambda m: m.double(), "type": lambda m: m.type(torch.float64)}
    g_conv = {"to": lambda m: m.to(gc.float64), "to_kw": lambda m: m.to("cpu", gc.float64),
              "double": lambda m: m.double(), "type": lambda m: m.type(gc.float64)}
    assert t_conv[how](t) is t
    assert g_conv[how](g) is g
    assert list(g.parameters()) == g_params  # the same objects: optimizers stay valid
    assert g_params[0].grad.dtype is gc.float64
    for (k, tv), (k2, gv) in zip(t.state_dict().items(), g.state_dict().items()):
        assert k == k2 and gv.dtype == tv.detach().numpy().dtype, k  # int buffer: see "type"
    x = np.random.default_rng(0).standard_normal((5, 3))
    assert_close(g(x).numpy(), t(torch.from_numpy(x)).detach().numpy(), "float64 forward")
    g.float()
    assert all(p.dtype is gc.float32 for p in g.parameters())


@pytest.mark.parametrize("mode", MODES)
def test_compiled_step_after_double_retraces(mode):
    gc.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fn = _compile(step, mode)
    x, y = _data(1)[0]
    fn(x, y)
    model.double()
    ref = nn.Linear(3, 2).double()
    ref.load_state_dict(model.state_dict())
    ropt = optim.SGD(ref.parameters(), lr=0.1)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    loss = fn(x64, y64)
    assert loss.dtype is gc.float64 and fn.compile_count == 2
    ropt.zero_grad()
    rl = ((ref(x64) - y64) ** 2).mean()
    rl.backward()
    ropt.step()
    assert_close(loss.item(), rl.item(), "loss")
    assert_close(model.weight.numpy(), ref.weight.numpy(), "weight")


def test_module_device_and_unsupported_conversions():
    g = nn.Linear(2, 2)
    assert g.cpu() is g and g.to("cpu") is g and g.to(device="cpu") is g
    assert g.to(gc.device("cpu")) is g and g.to(torch.device("cpu")) is g
    with pytest.raises(NotImplementedError, match="float16"):
        g.half()
    with pytest.raises(NotImplementedError, match="float16"):
        g.to(torch.float16)
    assert g.bfloat16() is g and g.weight.dtype is gc.bfloat16
    assert g.float() is g and g.weight.dtype is gc.float32
    with pytest.raises(NotImplementedError, match="cuda"):
        g.to("cuda")
    with pytest.raises(NotImplementedError, match="cuda"):
        g.cuda()
    with pytest.raises(TypeError, match="floating point"):
        g.to(gc.int64)
    with pytest.raises(TypeError):
        torch.nn.Linear(2, 2).to(torch.int64)
    assert g.weight.dtype is gc.float32


def test_module_type_casts_integer_buffers_too_like_torch():
    t, g = torch.nn.BatchNorm1d(2), nn.BatchNorm1d(2)
    t.type(torch.float64)
    g.type(gc.float64)
    assert g.num_batches_tracked.dtype is gc.float64
    assert str(t.num_batches_tracked.dtype) == "torch.float64"


def test_conversion_inside_a_step_raises():
    lin = nn.Linear(2, 2)

    def fwd(x):
        lin.double()
        return lin(x)

    with pytest.raises(RuntimeError, match="compiled function"):
        gc.compile(fwd, backend="interp")(np.ones((1, 2), np.float32))


# -- Tensor.to / type / device ---------------------------------------------------------------
def test_tensor_to_forms_like_torch():
    a = np.arange(4, dtype=np.float32)
    t, g = torch.from_numpy(a.copy()), gc.tensor(a)
    other_t, other_g = torch.zeros(1, dtype=torch.int64), gc.zeros(1, dtype=gc.int64)
    cases = [
        ((torch.float64,), (gc.float64,), {}),
        (("cpu",), ("cpu",), {}),
        (("cpu", torch.int32), ("cpu", gc.int32), {}),
        ((), (), {"device": "cpu", "dtype": None}),
        ((other_t,), (other_g,), {}),
        ((torch.float32,), (gc.float32,), {"copy": True}),
    ]
    for targs, gargs, kw in cases:
        tkw = dict(kw)
        gkw = dict(kw)
        rt, rg = t.to(*targs, **tkw), g.to(*gargs, **gkw)
        assert (rt is t) == (rg is g), (targs, kw)
        assert rg.dtype.name == str(rt.dtype).split(".")[1]
        np.testing.assert_array_equal(rg.numpy(), rt.numpy())
    assert g.to(gc.float32) is g and g.to(torch.device("cpu")) is g
    assert g.to(dtype=torch.float64).dtype is gc.float64
    assert g.to(np.float64).dtype is gc.float64
    with pytest.raises(NotImplementedError, match="float16"):
        g.half()
    with pytest.raises(NotImplementedError, match="float16"):
        g.to(torch.float16)
    with pytest.raises(NotImplementedError, match="cuda"):
        g.to("cuda:0")
    with pytest.raises(TypeError):
        g.to(gc.float64, bogus=1)


def test_tensor_type_like_torch():
    t, g = torch.ones(2), gc.ones(2)
    assert g.type() == "graphc.FloatTensor" and t.type() == "torch.FloatTensor"
    assert g.double().type() == "graphc.DoubleTensor"
    assert g.long().type().split(".")[1] == t.long().type().split(".")[1]
    assert g.type(gc.float32) is g and t.type(torch.float32) is t
    assert g.type(gc.float64).dtype is gc.float64
    assert g.type("torch.DoubleTensor").dtype is gc.float64
    assert g.type("graphc.LongTensor").dtype is gc.int64
    with pytest.raises(NotImplementedError, match="float16"):
        g.type("torch.HalfTensor")


def test_device_objects():
    d = gc.device("cpu")
    assert d.type == "cpu" and d.index is None and str(d) == "cpu"
    assert repr(d) == repr(torch.device("cpu")) == "device(type='cpu')"
    assert d == "cpu" and d == gc.device("cpu") and d == torch.device("cpu")
    assert d != "cuda" and d != gc.device("cuda")
    assert hash(d) == hash(gc.device("cpu"))
    c = gc.device("cuda:1")
    assert (c.type, c.index) == ("cuda", 1) and c == gc.device("cuda", 1)
    assert c == torch.device("cuda:1") and str(c) == "cuda:1"
    assert repr(c) == repr(torch.device("cuda:1"))
    assert gc.device(torch.device("cpu")) == d
    with pytest.raises(RuntimeError):
        gc.device("tpu")
    g = gc.ones(2)
    assert g.device == "cpu" and g.device.type == "cpu" and not g.is_cuda
    assert nn.Linear(2, 2).weight.device == torch.ones(1).device


def test_device_inside_a_traced_step():
    lin = nn.Linear(2, 2)

    def fwd(x):
        x = gc.as_tensor(x)
        assert x.device == "cpu"
        return lin(x.to(x.device, x.dtype)).to(gc.float64)

    cf = gc.compile(fwd, backend="interp")
    x = np.ones((3, 2), np.float32)
    out = cf(x)
    assert out.dtype is gc.float64
    np.testing.assert_allclose(out.numpy(), fwd(x).numpy())


def test_deepcopy_gives_independent_leaves_as_torch() -> None:
    """A deep-copied module's parameters are new leaves: its gradients land on the copy, tied
    weights stay tied, ``.grad`` is copied, and a non-leaf refuses as in torch."""
    import copy

    a = nn.Linear(3, 2)
    a(gc.ones(1, 3)).sum().backward()
    b = copy.deepcopy(a)
    assert type(b.weight) is type(a.weight) and b.weight is not a.weight
    np.testing.assert_array_equal(b.weight.grad.numpy(), a.weight.grad.numpy())
    a.weight.grad = b.weight.grad = None
    b(gc.ones(1, 3)).sum().backward()
    assert a.weight.grad is None and b.weight.grad is not None
    tied = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    tied[1].weight = tied[0].weight
    c = copy.deepcopy(tied)
    assert c[1].weight is c[0].weight and c[0].weight is not tied[0].weight
    x = gc.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)


@pytest.mark.parametrize("np_dtype", [np.float64, np.float32, np.int32, np.int64])
def test_tensor_and_parameter_from_a_tensor_keep_its_dtype_like_torch(np_dtype):
    """``nn.Parameter(t)`` and ``gc.tensor(t)`` keep ``t``'s dtype, as PyTorch's do (a
    float64 tensor used to come back float32, silently changing a float64 model's
    precision)."""
    a = np.arange(6, dtype=np_dtype).reshape(2, 3)
    t, tt = gc.tensor(a), torch.tensor(a)
    assert str(gc.tensor(t).dtype).split(".")[-1] == str(tt.clone().dtype).split(".")[-1]
    if np.dtype(np_dtype).kind == "f":
        p, pt = nn.Parameter(t), torch.nn.Parameter(tt)
        assert str(p.dtype).split(".")[-1] == str(pt.dtype).split(".")[-1]
        np.testing.assert_array_equal(p.numpy(), a)


def test_pool_and_norm_modules_look_like_pytorchs():
    """Attributes and reprs as PyTorch's (a pool without a stride stores its kernel size as
    the stride; AvgPool1d keeps 1-tuples; max pools show dilation and ceil_mode) and the
    norms' keyword-only ``bias=False`` (PyTorch 2.x): a weight and no bias, in state dicts
    and in the computation."""
    gnn = nn
    for make in (lambda m: m.MaxPool1d(2), lambda m: m.AvgPool1d(3, padding=1),
                 lambda m: m.MaxPool2d(3, 2, 1, ceil_mode=True), lambda m: m.AvgPool2d(3),
                 lambda m: m.BatchNorm1d(3, bias=False), lambda m: m.BatchNorm2d(3),
                 lambda m: m.InstanceNorm2d(3), lambda m: m.InstanceNorm1d(3, affine=True,
                                                                           bias=False)):
        a, b = make(gnn), make(torch.nn)
        assert repr(a) == repr(b)
        for k in ("kernel_size", "stride", "padding"):
            if hasattr(b, k):
                assert getattr(a, k) == getattr(b, k), k
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    g, t = gnn.BatchNorm2d(3, bias=False), torch.nn.BatchNorm2d(3, bias=False)
    assert list(g.state_dict()) == list(t.state_dict())
    np.testing.assert_allclose(g(gc.tensor(x)).numpy(), t(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_conv_modules_look_like_pytorchs():
    """Conv1d/2d/3d and ConvTranspose3d share one construction (``_ConvBase``): PyTorch's
    attributes and repr (padding shown only when not zero, padding_mode when not zeros; the
    2-D one always showed ``padding=(0, 0)`` and never the padding mode)."""
    for make in (lambda m: m.Conv2d(1, 2, 3), lambda m: m.Conv2d(1, 2, 3, padding=1,
                                                                  padding_mode="reflect"),
                 lambda m: m.Conv2d(4, 8, (3, 5), stride=2, groups=2, bias=False, dilation=2),
                 lambda m: m.Conv2d(3, 3, 1, padding="same"), lambda m: m.Conv1d(2, 2, 3),
                 lambda m: m.Conv3d(1, 2, 3, padding_mode="circular", padding=1),
                 lambda m: m.ConvTranspose3d(2, 3, 3, stride=2)):
        a, b = make(nn), make(torch.nn)
        assert repr(a) == repr(b)
        for k in ("kernel_size", "stride", "padding", "dilation", "output_padding", "groups",
                  "transposed", "padding_mode"):
            assert getattr(a, k) == getattr(b, k), k
