"""``nn.utils.parametrize``, ``nn.utils.parametrizations`` (weight_norm, spectral_norm,
orthogonal), the older hook-based ``weight_norm``/``spectral_norm`` and the lazy modules,
against PyTorch: module structure, reprs and state_dict keys (loading both ways), values and
gradients eagerly, training inside compiled steps (losses, parameters and the power-iteration
buffers after SGD steps), the same random draws under one seed, and PyTorch's errors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.nn.utils import parametrizations as GP
from graphc.nn.utils import parametrize as GZ

TP, TZ = torch.nn.utils.parametrizations, torch.nn.utils.parametrize
_rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def _close(a: Any, b: Any, what: str = "", tol: float = 1e-5) -> None:
    a = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol, err_msg=what)


def _load(gm: Any, tm: Any) -> None:
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


def _same_state(gm: Any, tm: Any, tol: float = 1e-5) -> None:
    gs, ts = gm.state_dict(), tm.state_dict()
    assert list(gs) == list(ts)
    for k, v in ts.items():
        _close(gs[k], v, k, tol)


def _train(tm: Any, gm: Any, shape: tuple, out: int, steps: int = 3,
           tol: float = 1e-5) -> Any:
    """SGD with momentum on a squared error, PyTorch eagerly and graphc in one compiled
    step; losses and the whole state (parameters and buffers) must agree."""
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.05, momentum=0.9)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        loss = ((gm(x) - y) ** 2).mean()
        loss.backward()
        gopt.step()
        return loss

    for _ in range(steps):
        x, y = _r(*shape), _r(shape[0], out)
        topt.zero_grad()
        tout = tm(torch.from_numpy(x))  # one forward per step: spectral norm iterates in it
        y = y.reshape(tuple(tout.shape))
        tl = ((tout - torch.from_numpy(y)) ** 2).mean()
        tl.backward()
        topt.step()
        _close(step(x, y).item(), tl.item(), "loss", tol)
    _same_state(gm, tm, tol)
    assert step.compile_count == 1
    return step


# -- parametrize ------------------------------------------------------------------------------
def _symmetric(m: Any) -> Any:
    class Symmetric(m.nn.Module):
        def forward(self, X: Any) -> Any:  # noqa: N803
            return X.triu() + X.triu(1).transpose(-1, -2)

        def right_inverse(self, A: Any) -> Any:  # noqa: N803
            return A.triu()
    return Symmetric()


def _scale(m: Any) -> Any:
    class Scale(m.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = m.nn.Parameter(m.ones(()) * 1.5)

        def forward(self, X: Any) -> Any:  # noqa: N803
            return X * self.s
    return Scale()


def _sym_net(m: Any, chained: bool = False) -> Any:
    net = m.nn.Sequential(m.nn.Linear(4, 4), m.nn.Tanh(), m.nn.Linear(4, 2))
    m.nn.utils.parametrize.register_parametrization(net[0], "weight", _symmetric(m))
    if chained:
        m.nn.utils.parametrize.register_parametrization(net[0], "weight", _scale(m))
    return net


@pytest.mark.parametrize("chained", [False, True])
def test_register_parametrization_like_torch(chained: bool) -> None:
    torch.manual_seed(0)
    tm, gm = _sym_net(torch, chained), _sym_net(gc, chained)
    assert repr(gm) == repr(tm)
    assert type(gm[0]).__name__ == type(tm[0]).__name__ == "ParametrizedLinear"
    assert list(gm.state_dict()) == list(tm.state_dict())
    assert [n for n, _ in gm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    _load(gm, tm)
    _close(gm[0].weight, tm[0].weight, "parametrized weight")
    w = gm[0].weight.numpy()
    np.testing.assert_array_equal(w, w.T)  # symmetric (a scalar scale keeps it so)
    assert GZ.is_parametrized(gm[0]) and GZ.is_parametrized(gm[0], "weight")
    assert not GZ.is_parametrized(gm[0], "bias") and not GZ.is_parametrized(gm[2])
    assert GZ.type_before_parametrizations(gm[0]) is nn.Linear
    _train(tm, gm, (5, 4), 2)


def test_parametrized_assignment_cache_and_removal_like_torch() -> None:
    torch.manual_seed(0)
    tm, gm = _sym_net(torch), _sym_net(gc)
    _load(gm, tm)
    a = _r(4, 4)
    tm[0].weight = torch.from_numpy(a)  # right_inverse into `original`
    gm[0].weight = gc.tensor(a)
    _same_state(gm, tm)
    original = gm[0].parametrizations.weight.original
    with GZ.cached():
        first = gm[0].weight
        assert gm[0].weight is first  # computed once inside cached()
    assert gm[0].weight is not first
    calls = []
    gm[0].parametrizations.weight[0].register_forward_hook(lambda *a: calls.append(1))
    with GZ.cached():
        gm[0].weight, gm[0].weight
    assert len(calls) == 1
    TZ.remove_parametrizations(tm[0], "weight", leave_parametrized=True)
    GZ.remove_parametrizations(gm[0], "weight", leave_parametrized=True)
    assert type(gm[0]) is nn.Linear and repr(gm) == repr(tm)
    assert gm[0].weight is original  # the original Parameter, with the parametrized value
    _same_state(gm, tm)
    torch.manual_seed(1)
    tm, gm = _sym_net(torch), _sym_net(gc)
    _load(gm, tm)
    TZ.remove_parametrizations(tm[0], "weight", leave_parametrized=False)
    GZ.remove_parametrizations(gm[0], "weight", leave_parametrized=False)
    _same_state(gm, tm)


def test_parametrize_errors_like_torch() -> None:
    class Shrink:
        @staticmethod
        def build(m: Any) -> Any:
            class S(m.nn.Module):
                def forward(self, X: Any) -> Any:  # noqa: N803
                    return X[:1]
            return S()

    for m, Z in ((torch, TZ), (gc, GZ)):
        lin = m.nn.Linear(3, 2)
        with pytest.raises(ValueError, match="may not change the shape of the tensor"):
            Z.register_parametrization(lin, "weight", Shrink.build(m))
        with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a "):
            Z.register_parametrization(lin, "nope", _symmetric(m))
        with pytest.raises(ValueError, match="does not have a parametrization on bias"):
            Z.remove_parametrizations(lin, "bias")
    wn = GP.weight_norm(nn.Linear(3, 2))
    with pytest.raises(ValueError, match="Cannot leave unparametrized"):
        GZ.remove_parametrizations(wn, "weight", leave_parametrized=False)


# -- parametrizations -------------------------------------------------------------------------
@pytest.mark.parametrize("layer,kw", [("Linear", {}), ("Linear", {"dim": None}),
                                      ("Conv2d", {}), ("Conv2d", {"dim": 1})], ids=str)
def test_weight_norm_like_torch(layer: str, kw: dict) -> None:
    args = (3, 4) if layer == "Linear" else (2, 3, 2)
    shape, out = ((5, 3), 4) if layer == "Linear" else ((2, 2, 4, 4), 27)
    torch.manual_seed(0)
    tm = TP.weight_norm(getattr(torch.nn, layer)(*args), **kw)
    gm = GP.weight_norm(getattr(nn, layer)(*args), **kw)
    assert repr(gm) == repr(tm) and list(gm.state_dict()) == list(tm.state_dict())
    assert (tuple(gm.parametrizations.weight.original0.shape)
            == tuple(tm.parametrizations.weight.original0.shape))
    _load(gm, tm)
    _close(gm.weight, tm.weight, "weight")
    x = _r(*shape)
    gx, tx = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    gm(gx).square().sum().backward()
    tm(tx).square().sum().backward()
    for (n, gp), tp in zip(gm.named_parameters(), tm.parameters()):
        _close(gp.grad, tp.grad, n, 1e-4)
    _close(gx.grad, tx.grad, "input gradient", 1e-4)
    if layer == "Linear":
        _train(tm, gm, shape, out)


@pytest.mark.parametrize("layer,args,shape,out", [
    ("Linear", (3, 4), (5, 3), 4),
    ("Conv2d", (2, 3, 2), (2, 2, 4, 4), 27),
    ("ConvTranspose2d", (2, 3, 2), (2, 2, 3, 3), 48),  # dim=1 by default
], ids=str)
def test_spectral_norm_like_torch(layer: str, args: tuple, shape: tuple, out: int) -> None:
    torch.manual_seed(0)
    gc.manual_seed(0)
    tl, gl = getattr(torch.nn, layer)(*args), getattr(nn, layer)(*args)
    _load(gl, tl)
    torch.manual_seed(5)
    gc.manual_seed(5)
    tm, gm = TP.spectral_norm(tl), GP.spectral_norm(gl)
    assert repr(gm) == repr(tm)
    _same_state(gm, tm)  # the same normal draws and 15 + 1 power iterations
    x = _r(*shape)
    _close(gm(x), tm(torch.from_numpy(x)), "training forward")
    _same_state(gm, tm)  # one more power iteration on _u/_v
    gm.eval()
    tm.eval()
    _close(gm(x), tm(torch.from_numpy(x)), "eval forward")
    _same_state(gm, tm)  # eval: no iteration
    gm.train()
    tm.train()
    _train(tm, gm, shape, out, tol=1e-4)


def test_spectral_norm_errors_like_torch() -> None:
    for m, P in ((torch, TP), (gc, GP)):
        with pytest.raises(ValueError, match="Expected n_power_iterations to be positive"):
            P.spectral_norm(m.nn.Linear(2, 2), n_power_iterations=0)
        with pytest.raises(IndexError, match="Dimension out of range"):
            P.spectral_norm(m.nn.Linear(2, 2), dim=2)
        with pytest.raises(ValueError, match="has no parameter or buffer with name 'nope'"):
            P.spectral_norm(m.nn.Linear(2, 2), name="nope")


@pytest.mark.parametrize("shape,kw", [((5, 3), {}), ((3, 5), {}),
                                      ((4, 4), {"orthogonal_map": "cayley"}),
                                      ((5, 3), {"orthogonal_map": "cayley"}),
                                      ((5, 3), {"use_trivialization": False}),
                                      ((3, 4), {"orthogonal_map": "householder",
                                                "use_trivialization": False})], ids=str)
def test_orthogonal_like_torch(shape: tuple, kw: dict) -> None:
    out_f, in_f = shape
    torch.manual_seed(0)
    tm = TP.orthogonal(torch.nn.Linear(in_f, out_f), **kw)
    gm = GP.orthogonal(nn.Linear(in_f, out_f), **kw)
    assert repr(gm) == repr(tm)
    assert list(gm.state_dict()) == list(tm.state_dict())
    w = gm.weight.numpy().astype(np.float64)
    small = w if out_f >= in_f else w.T
    np.testing.assert_allclose(small.T @ small, np.eye(min(shape)), atol=1e-5)
    _load(gm, tm)
    _close(gm.weight, tm.weight, "weight")
    _train(tm, gm, (6, in_f), out_f)


def test_orthogonal_without_matrix_exp_raises() -> None:
    """graphc has no matrix exponential (the default map for square matrices): reading the
    weight says so and names the maps that work."""
    m = GP.orthogonal(nn.Linear(3, 3))
    with pytest.raises(NotImplementedError, match="orthogonal_map='cayley' or 'householder'"):
        _ = m.weight
    for m_, P in ((torch, TP), (gc, GP)):
        with pytest.raises(ValueError, match='orthogonal_map has to be one of'):
            P.orthogonal(m_.nn.Linear(3, 4), orthogonal_map="qr")
        with pytest.raises(ValueError, match="Expected a matrix or batch of matrices"):
            P.orthogonal(m_.nn.Linear(3, 4), name="bias")


# -- the older hook-based weight_norm / spectral_norm ----------------------------------------
def test_old_weight_norm_like_torch() -> None:
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tm = torch.nn.utils.weight_norm(torch.nn.Linear(3, 4))
        gm = nn.utils.weight_norm(nn.Linear(3, 4))
    assert [c.category for c in caught] == [FutureWarning, FutureWarning]
    assert str(caught[0].message) == str(caught[1].message)
    assert repr(gm) == repr(tm) and list(gm.state_dict()) == list(tm.state_dict())
    _load(gm, tm)
    _close(gm(_r(2, 3) * 0), tm(torch.zeros(2, 3)), "forward")
    _train(tm, gm, (5, 3), 4)
    # module.weight after compiled steps: the eager value of the last eager forward (a traced
    # tensor must not be left behind), not a tensor of the finished trace
    assert gm.weight.numpy().shape == (4, 3)
    x = _r(2, 3)
    _close(gm(x), tm(torch.from_numpy(x)), "eager forward after compiled steps")
    _close(gm.weight, tm.weight, "module.weight recomputed by the hook")
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nn.utils.weight_norm(gm)
    torch.nn.utils.remove_weight_norm(tm)
    nn.utils.remove_weight_norm(gm)
    _close(gm.weight, tm.weight, "weight after removal")
    assert list(gm.state_dict()) == list(tm.state_dict()) == ["bias", "weight"]
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found in"):
        nn.utils.remove_weight_norm(gm)
    x = _r(2, 3)
    _close(gc.compile(lambda v: gm(v))(x), tm(torch.from_numpy(x)), "compiled after removal")


def test_old_weight_norm_checkpoint_loads_into_parametrization_like_torch() -> None:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = torch.nn.utils.weight_norm(torch.nn.Linear(3, 4))
    sd = {k: v.detach().numpy() for k, v in old.state_dict().items()}
    tm, gm = TP.weight_norm(torch.nn.Linear(3, 4)), GP.weight_norm(nn.Linear(3, 4))
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    result = gm.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    _same_state(gm, tm)
    x = _r(2, 3)
    _close(gm(x), old(torch.from_numpy(x)), "forward")


def test_old_spectral_norm_like_torch() -> None:
    torch.manual_seed(0)
    gc.manual_seed(0)
    tl, gl = torch.nn.Conv2d(2, 3, 2), nn.Conv2d(2, 3, 2)
    _load(gl, tl)
    torch.manual_seed(4)
    gc.manual_seed(4)
    tm, gm = torch.nn.utils.spectral_norm(tl), nn.utils.spectral_norm(gl)
    assert repr(gm) == repr(tm)
    _same_state(gm, tm)  # weight_orig, weight_u, weight_v: the same draws
    x = _r(2, 2, 4, 4)
    _close(gm(x), tm(torch.from_numpy(x)), "forward")
    _same_state(gm, tm)
    _train(tm, gm, (2, 2, 4, 4), 27, tol=1e-4)
    tm.eval()
    gm.eval()
    _close(gm(x), tm(torch.from_numpy(x)), "eval forward", 1e-4)
    torch.nn.utils.remove_spectral_norm(tm)
    nn.utils.remove_spectral_norm(gm)
    assert list(gm.state_dict()) == list(tm.state_dict()) == ["bias", "weight"]
    _same_state(gm, tm, 1e-4)
    with pytest.raises(ValueError, match="spectral_norm of 'weight' not found in"):
        nn.utils.remove_spectral_norm(gm)


# -- lazy modules -----------------------------------------------------------------------------
LAZY = [
    ("LazyLinear", (4,), (3, 5)),
    ("LazyLinear", (4, False), (2, 3, 5)),
    ("LazyConv1d", (4, 3), (2, 3, 7)),
    ("LazyConv2d", (4, 3, 2, 1), (2, 3, 6, 6)),
    ("LazyConv2d", (4, 3), (3, 6, 6)),  # unbatched: channels from dim 0
    ("LazyConv3d", (2, 2), (1, 2, 4, 4, 4)),
    ("LazyConvTranspose1d", (4, 3, 2), (2, 3, 5)),
    ("LazyConvTranspose2d", (4, 3), (2, 3, 4, 4)),
    ("LazyConvTranspose3d", (2, 2), (1, 2, 3, 3, 3)),
    ("LazyBatchNorm1d", (), (4, 3)),
    ("LazyBatchNorm2d", (1e-3, 0.2), (4, 3, 2, 2)),
    ("LazyBatchNorm3d", (), (2, 3, 2, 2, 2)),
    ("LazyInstanceNorm1d", (), (2, 3, 5)),
    ("LazyInstanceNorm2d", (1e-5, 0.1, False, False), (2, 3, 4, 4)),
    ("LazyInstanceNorm3d", (), (2, 3, 2, 3, 3)),
]


@pytest.mark.parametrize("name,args,shape", LAZY, ids=str)
def test_lazy_modules_like_torch(name: str, args: tuple, shape: tuple) -> None:
    torch.manual_seed(0)
    gc.manual_seed(0)
    tm, gm = getattr(torch.nn, name)(*args), getattr(nn, name)(*args)
    assert repr(gm) == repr(tm)
    assert list(gm.state_dict()) == list(tm.state_dict())
    assert [type(v).__name__ for v in gm.state_dict().values()] == [
        type(v).__name__ if type(v).__name__.startswith("Uninit") else "ndarray"
        for v in tm.state_dict().values()]
    x = _r(*shape)
    _close(gm(x), tm(torch.from_numpy(x)), "first forward", 1e-4)
    assert type(gm).__name__ == type(tm).__name__ == name[4:]
    assert repr(gm) == repr(tm)
    _same_state(gm, tm, 1e-5)  # the same initial draws and (for batch norm) statistics


def test_lazy_model_trains_compiled_with_an_optimizer_built_before_init() -> None:
    def net(m: Any) -> Any:
        return m.nn.Sequential(m.nn.LazyConv2d(4, 3), m.nn.LazyBatchNorm2d(), m.nn.ReLU(),
                               m.nn.Flatten(), m.nn.LazyLinear(2))

    torch.manual_seed(0)
    gc.manual_seed(0)
    tm, gm = net(torch), net(gc)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.05, momentum=0.9)
    params = list(gm.parameters())

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        loss = ((gm(x) - y) ** 2).mean()
        loss.backward()
        gopt.step()
        return loss

    x0 = _r(3, 2, 5, 5)
    with pytest.raises(RuntimeError, match="Call the model once eagerly"):
        step(x0, _r(3, 2))
    assert type(gm[0]) is nn.LazyConv2d  # nothing was materialized by the failed trace
    gm(x0)  # one eager forward materializes every layer (and updates the BN statistics)
    tm(torch.from_numpy(x0))
    assert all(a is b for a, b in zip(gm.parameters(), params))  # materialized in place
    _same_state(gm, tm)
    for _ in range(3):
        x, y = _r(3, 2, 5, 5), _r(3, 2)
        topt.zero_grad()
        tl = ((tm(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2).mean()
        tl.backward()
        topt.step()
        _close(step(x, y).item(), tl.item(), "loss")
    _same_state(gm, tm)
    assert step.compile_count == 1


def test_lazy_load_state_dict_materializes_like_torch() -> None:
    torch.manual_seed(0)
    src = torch.nn.Linear(3, 4)
    sd = src.state_dict()
    tm, gm = torch.nn.LazyLinear(4), nn.LazyLinear(4)
    tm.load_state_dict(sd)
    gm.load_state_dict({k: v.numpy() for k, v in sd.items()})
    assert type(gm) is nn.LazyLinear and gm.in_features == tm.in_features == 0
    _same_state(gm, tm)
    x = _r(2, 3)
    _close(gm(x), tm(torch.from_numpy(x)), "forward")
    # both become Linear; graphc's checks in_features in forward, so it also takes it from
    # the loaded weight (PyTorch's keeps 0)
    assert type(gm) is nn.Linear and type(tm) is torch.nn.Linear and gm.in_features == 3
    for name, args, shape in [("LazyConv2d", (4, 3), (2, 3, 5, 5)),
                              ("LazyBatchNorm1d", (), (4, 3))]:
        src = getattr(torch.nn, name[4:])(3, *args)
        gm = getattr(nn, name)(*args)
        gm.load_state_dict({k: v.numpy() for k, v in src.state_dict().items()})
        x = _r(*shape)
        _close(gm(x), src(torch.from_numpy(x)), name)


def test_uninitialized_parameters_raise_like_torch() -> None:
    for m in (torch, gc):
        p = m.nn.LazyLinear(2).weight
        assert repr(p) == "<UninitializedParameter>"
        assert isinstance(p, m.nn.UninitializedParameter) and isinstance(p, m.nn.Parameter)
        assert p.requires_grad
        with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized"):
            _ = p.shape
        with pytest.raises(ValueError, match="Attempted to use an uninitialized parameter"):
            p + 1
        b = m.nn.UninitializedBuffer()
        assert repr(b) == "<UninitializedBuffer>" and not b.requires_grad
        p.materialize((2, 3))
        assert type(p) is m.nn.Parameter and tuple(p.shape) == (2, 3)
    with pytest.raises(ValueError, match="can't have uninitialized parameters"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nn.utils.weight_norm(nn.LazyLinear(2))


def test_deepcopy_of_a_lazy_module_is_independent_like_torch() -> None:
    """The copy has its own hooks: materializing it leaves the original lazy (the hook
    handles it keeps are re-pointed at the copy's hook tables)."""
    import copy

    for m in (torch, gc):
        a = m.nn.LazyLinear(2)
        b = copy.deepcopy(a)
        b(m.ones(1, 5))
        assert type(b).__name__ == "Linear" and type(a).__name__ == "LazyLinear"
        a(m.ones(1, 3))
        assert tuple(a.weight.shape) == (2, 3) and tuple(b.weight.shape) == (2, 5)
