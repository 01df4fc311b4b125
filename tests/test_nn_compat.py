"""``nn.CrossMapLRN2d``, ``nn.DataParallel`` and ``nn.SyncBatchNorm`` (graphc/nn/compat.py)
against PyTorch with equal weights: values, input and parameter gradients, buffers and
state_dict keys, eagerly and in compiled steps (one compile over two batch sizes), PyTorch's
errors, ``convert_sync_batchnorm``, and the one place graphc refuses what PyTorch would do
(SyncBatchNorm training across several graphc.distributed processes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.compat as compat
from graphc import nn, optim

_rng = np.random.default_rng(0)


def _r(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return _rng.standard_normal(shape).astype(dtype)


def _np(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    if isinstance(t, (np.ndarray, float, int, tuple, list)):
        return np.asarray(t)
    return np.asarray(t.numpy())


def _close(a: Any, b: Any, what: str = "", rtol: float = 1e-5, atol: float = 1e-6) -> None:
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol, err_msg=what)


def _load(gm: nn.Module, tm: torch.nn.Module) -> None:
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


# -- CrossMapLRN2d ---------------------------------------------------------------------------
LRN_CASES = [
    # (size, alpha, beta, k, shape)
    (2, 1e-4, 0.75, 1, (2, 5, 3, 4)),
    (3, 0.5, 0.75, 1.0, (2, 6, 3, 2)),
    (4, 0.7, 0.6, 2.0, (3, 7, 2, 3)),
    (5, 1e-4, 0.75, 1, (2, 8, 4, 4)),
    (5, 2.0, 1.5, 0.5, (1, 9, 2, 2)),
    (6, 0.3, 0.5, 1.5, (2, 10, 3, 1)),
    (7, 1.0, 0.75, 1.0, (2, 3, 2, 2)),   # window wider than the channels
    (4, 0.9, 0.8, 1.0, (2, 1, 3, 3)),    # one channel
    (3, 0.4, 0.7, 1.0, (2, 3, 0, 2)),    # empty
    (3, 0.4, 0.7, 1.0, (0, 3, 2, 2)),    # empty batch
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", LRN_CASES, ids=lambda c: f"size{c[0]}-{'x'.join(map(str, c[4]))}")
def test_cross_map_lrn2d_eager_matches_torch(case: tuple, dtype: Any) -> None:
    """Values and input gradients equal PyTorch's (its hand-written backward, which is not
    the derivative of its forward: see graphc/nn/compat.py)."""
    size, alpha, beta, k, shape = case
    x = (_r(*shape, dtype=dtype) * 1.5)
    g = _r(*shape, dtype=dtype)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.CrossMapLRN2d(size, alpha, beta, k)(tx)
    ty.backward(torch.tensor(g))
    gx = gc.tensor(x, requires_grad=True)
    gy = nn.CrossMapLRN2d(size, alpha, beta, k)(gx)
    assert gy.shape == tuple(ty.shape) and gy.dtype.np == ty.detach().numpy().dtype
    (gy * gc.tensor(g)).sum().backward()
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == np.float64 else {"rtol": 2e-5,
                                                                      "atol": 2e-6}
    _close(gy, ty, "value", **tol)
    _close(gx.grad, tx.grad, "input grad", **tol)


def test_cross_map_lrn2d_gradient_is_torchs_not_the_true_one() -> None:
    """The forward keeps channel 0 in every later window; PyTorch's backward ignores that
    (gradcheck fails on it). graphc follows PyTorch, so the two differ from the numerical
    derivative in the same way."""
    x = _r(1, 6, 2, 2, dtype=np.float64)
    tx = torch.tensor(x, requires_grad=True)
    m = torch.nn.CrossMapLRN2d(3, 0.8, 0.75, 1.0)
    assert not torch.autograd.gradcheck(m, (tx,), raise_exception=False)
    gx = gc.tensor(x, requires_grad=True)
    nn.CrossMapLRN2d(3, 0.8, 0.75, 1.0)(gx).sum().backward()
    m(tx).sum().backward()
    _close(gx.grad, tx.grad, rtol=1e-12, atol=1e-12)
    eps = 1e-6
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        num[i] = (m(torch.tensor(x + d)).sum() - m(torch.tensor(x - d)).sum()).item() / (2 * eps)
    assert np.abs(num - _np(gx.grad)).max() > 1e-3


def test_cross_map_lrn2d_size_one() -> None:
    """Size 1: PyTorch's forward works but its backward raises (a narrow past the end);
    graphc gives the forward's true gradient there."""
    x = _r(2, 4, 3, 2, dtype=np.float64)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.CrossMapLRN2d(1, 0.6, 0.7, 1.2)(tx)
    with pytest.raises(RuntimeError, match="exceeds dimension size"):
        ty.sum().backward()
    gx = gc.tensor(x, requires_grad=True)
    gy = nn.CrossMapLRN2d(1, 0.6, 0.7, 1.2)(gx)
    _close(gy, ty, rtol=1e-12, atol=1e-12)
    gy.sum().backward()
    # the forward, written out: channel c's own square, plus channel 0's for c >= 1
    rx = torch.tensor(x, requires_grad=True)
    sq = rx * rx
    extra = torch.cat([torch.zeros_like(sq[:, :1]), sq[:, :1].expand(-1, 3, -1, -1)], 1)
    ref = rx * (1.2 + 0.6 * (sq + extra)) ** -0.7
    _close(ref, ty, rtol=1e-12, atol=1e-12)
    ref.sum().backward()
    _close(gx.grad, rx.grad, rtol=1e-12, atol=1e-12)


def test_cross_map_lrn2d_without_grad_and_under_no_grad() -> None:
    x = _r(2, 5, 2, 3)
    want = torch.nn.CrossMapLRN2d(3, 0.5)(torch.tensor(x))
    _close(nn.CrossMapLRN2d(3, 0.5)(gc.tensor(x)), want)
    with gc.no_grad():
        y = nn.CrossMapLRN2d(3, 0.5)(gc.tensor(x, requires_grad=True))
    assert not y.requires_grad
    _close(y, want)


@pytest.mark.parametrize("size", [2, 3, 5])
def test_cross_map_lrn2d_compiled_matches_eager_and_torch(size: int) -> None:
    """A compiled step (batch dim symbolic, one compile for two batch sizes): the output
    and the gradient of a scale parameter in front of the layer (so the input gradient)."""
    p0 = _rng.uniform(0.5, 1.5, (6, 3, 2)).astype(np.float32)
    gp = nn.Parameter(gc.tensor(p0))
    gm = nn.CrossMapLRN2d(size, 0.6, 0.8, 1.5)
    tm = torch.nn.CrossMapLRN2d(size, 0.6, 0.8, 1.5)

    def step(x: Any) -> Any:
        gp.grad = None
        y = gm(x * gp)
        (y * y + y).sum().backward()
        return y

    cstep = gc.compile(step)
    for n in (3, 5, 3):
        x = _r(n, 6, 3, 2) * 2
        tp = torch.tensor(p0, requires_grad=True)
        ty = tm(torch.tensor(x) * tp)
        (ty * ty + ty).sum().backward()
        got = cstep(gc.tensor(x))
        got_grad = _np(gp.grad).copy()
        _close(got, ty, "compiled value", rtol=1e-5, atol=1e-6)
        _close(got_grad, tp.grad, "compiled grad", rtol=1e-4, atol=1e-5)
        eager = step(gc.tensor(x))
        _close(got, eager, "compiled vs eager", rtol=1e-5, atol=1e-6)
        _close(got_grad, gp.grad, "compiled vs eager grad", rtol=1e-5, atol=1e-6)
    assert cstep.compile_count == 1


def test_cross_map_lrn2d_in_a_compiled_training_step() -> None:
    """Conv -> CrossMapLRN2d -> Linear trained three SGD steps: PyTorch's losses and
    weights."""

    def build(m: Any) -> Any:
        return m.Sequential(m.Conv2d(2, 6, 3, padding=1), m.CrossMapLRN2d(5, 0.3, 0.75, 1.0),
                            m.ReLU(), m.Flatten(), m.Linear(6 * 4 * 4, 3))

    torch.manual_seed(0)
    tm = build(torch.nn)
    gm = build(nn)
    _load(gm, tm)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1)
    gopt = optim.SGD(gm.parameters(), lr=0.1)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        loss = nn.functional.cross_entropy(gm(x), y)
        loss.backward()
        gopt.step()
        return loss

    for n in (4, 4, 6):
        x = _r(n, 2, 4, 4)
        y = _rng.integers(0, 3, n).astype(np.int64)
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        _close(step(gc.tensor(x), gc.tensor(y)), tl.item(), "loss", rtol=1e-5)
    for k, v in tm.state_dict().items():
        _close(gm.state_dict()[k], v, k, rtol=1e-4, atol=1e-5)
    assert step.compile_count == 1


@pytest.mark.parametrize("shape", [(3, 2, 2), (1, 2, 3, 4, 5), (4,)])
def test_cross_map_lrn2d_needs_4d_input(shape: tuple) -> None:
    x = np.ones(shape, np.float32)
    with pytest.raises(ValueError) as want:
        torch.nn.CrossMapLRN2d(3)(torch.tensor(x))
    with pytest.raises(ValueError) as got:
        nn.CrossMapLRN2d(3)(gc.tensor(x))
    assert str(got.value) == str(want.value)
    assert str(got.value) == f"CrossMapLRN2d: Expected input to be 4D, got {len(shape)}D instead."
    step = gc.compile(lambda t: nn.CrossMapLRN2d(3)(t))
    with pytest.raises(ValueError, match="Expected input to be 4D"):
        step(gc.tensor(x))


def test_cross_map_lrn2d_other_errors_match_torch() -> None:
    """No channels, an integer input, size 0: PyTorch's exception types and messages."""
    cases = [(np.ones((2, 0, 2, 2), np.float32), 3), (np.ones((2, 3, 2, 2), np.int64), 3),
             (np.ones((2, 3, 2, 2), np.float32), 0)]
    for x, size in cases:
        with pytest.raises(Exception) as want:
            torch.nn.CrossMapLRN2d(size)(torch.tensor(x))
        with pytest.raises(Exception) as got:
            nn.CrossMapLRN2d(size)(gc.tensor(x))
        assert type(got.value) is type(want.value)
        assert str(got.value) == str(want.value)


def test_cross_map_lrn2d_repr_and_attributes() -> None:
    for args in [(3,), (4, 0.1, 0.5, 2), (5, 1e-3, 0.75, 1.5)]:
        gm, tm = nn.CrossMapLRN2d(*args), torch.nn.CrossMapLRN2d(*args)
        assert repr(gm) == repr(tm)
        assert (gm.size, gm.alpha, gm.beta, gm.k) == (tm.size, tm.alpha, tm.beta, tm.k)
        assert list(gm.state_dict()) == list(tm.state_dict()) == []


def test_cross_map_lrn2d_lowers_to_ptx() -> None:
    """The layer and its gradient need only primitives the PTX backend lowers."""
    gp = nn.Parameter(gc.tensor(np.ones((5, 2, 2), np.float32)))

    def step(x: Any) -> Any:
        gp.grad = None
        y = nn.CrossMapLRN2d(4, 0.5)(x * gp)
        loss = (y * y).sum()
        loss.backward()
        return loss

    fn = gc.compile(step, device="cuda", dynamic=False,
                    example_args=(np.ones((2, 5, 2, 2), np.float32),))
    assert ".visible .entry" in fn.ir("ptx")


# -- DataParallel ----------------------------------------------------------------------------
def _mlp(m: Any) -> Any:
    return m.Sequential(m.Linear(4, 8), m.Tanh(), m.Linear(8, 3))


def test_data_parallel_attributes_match_torch_without_cuda() -> None:
    for kwargs in [{}, {"device_ids": [0, 1], "output_device": 1, "dim": 1},
                   {"device_ids": ["cuda:0"]}]:
        td = torch.nn.DataParallel(_mlp(torch.nn), **kwargs)
        inner = _mlp(nn)
        gd = nn.DataParallel(inner, **kwargs)
        assert gd.module is inner
        assert gd.device_ids == td.device_ids == []
        for attr in ("dim", "output_device", "src_device_obj"):
            assert hasattr(gd, attr) == hasattr(td, attr), attr
        assert repr(gd).replace(" ", "") == repr(td).replace(" ", "")
        assert list(gd.state_dict()) == list(td.state_dict())
        assert all(k.startswith("module.") for k in gd.state_dict())
        assert [n for n, _ in gd.named_parameters()] == [n for n, _ in td.named_parameters()]


def test_data_parallel_forward_backward_match_module_and_torch() -> None:
    torch.manual_seed(0)
    td = torch.nn.DataParallel(_mlp(torch.nn))
    gd = nn.DataParallel(_mlp(nn))
    bare = _mlp(nn)
    gd.load_state_dict({k: v.numpy() for k, v in td.state_dict().items()})
    bare.load_state_dict({k: v.numpy() for k, v in td.module.state_dict().items()})
    x = _r(5, 4)
    ty = td(torch.tensor(x))
    gy = gd(gc.tensor(x))
    by = bare(gc.tensor(x))
    _close(gy, ty)
    _close(gy, by, rtol=0, atol=0)
    (ty * ty).sum().backward()
    (gy * gy).sum().backward()
    (by * by).sum().backward()
    tgrads = dict(td.named_parameters())
    bgrads = dict(bare.named_parameters())
    for k, p in gd.named_parameters():
        _close(p.grad, tgrads[k].grad, k, rtol=1e-5)
        _close(p.grad, bgrads[k.removeprefix("module.")].grad, k, rtol=0, atol=0)
    # positional and keyword arguments go through unchanged
    got = nn.DataParallel(_Affine())(gc.tensor(x), shift=gc.tensor(2.0), scale=3.0)
    _close(got, x * 3.0 + 2.0, rtol=1e-6)


class _Affine(nn.Module):
    def forward(self, x: Any, shift: Any, *, scale: float = 1.0) -> Any:
        return x * scale + shift


def test_data_parallel_compiled_training_step() -> None:
    """The same compiled SGD step on a DataParallel and on the bare module (equal start
    weights) ends with equal weights, and with PyTorch's DataParallel's."""
    torch.manual_seed(1)
    td = torch.nn.DataParallel(_mlp(torch.nn))
    gd = nn.DataParallel(_mlp(nn))
    bare = _mlp(nn)
    gd.load_state_dict({k: v.numpy() for k, v in td.state_dict().items()})
    bare.load_state_dict({k: v.numpy() for k, v in td.module.state_dict().items()})
    topt = torch.optim.SGD(td.parameters(), lr=0.2, momentum=0.9)

    def make(model: nn.Module) -> Any:
        opt = optim.SGD(model.parameters(), lr=0.2, momentum=0.9)

        @gc.compile
        def step(x: Any, y: Any) -> Any:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    dstep, bstep = make(gd), make(bare)
    for n in (6, 6, 9):
        x, y = _r(n, 4), _r(n, 3)
        topt.zero_grad()
        tl = torch.nn.functional.mse_loss(td(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        dl = dstep(gc.tensor(x), gc.tensor(y))
        bl = bstep(gc.tensor(x), gc.tensor(y))
        _close(dl, bl, rtol=0, atol=0)
        _close(dl, tl.item(), rtol=1e-5)
    bsd = bare.state_dict()
    for k, v in gd.state_dict().items():
        _close(v, bsd[k.removeprefix("module.")], k, rtol=0, atol=0)
        _close(v, td.state_dict()[k], k, rtol=1e-4, atol=1e-6)
    assert dstep.compile_count == 1


# -- SyncBatchNorm ---------------------------------------------------------------------------
SBN_CASES = {
    # name: (kwargs, input shape)
    "2d_input": ({}, (6, 4)),
    "3d_input": ({"momentum": 0.3}, (4, 3, 5)),
    "4d_input": ({"eps": 1e-3}, (4, 3, 3, 2)),
    "5d_input": ({}, (2, 3, 2, 2, 3)),
    "cma": ({"momentum": None, "affine": False}, (4, 3, 2, 3)),
    "no_stats": ({"track_running_stats": False}, (5, 4, 2)),
    "no_bias": ({"bias": False}, (4, 3, 3)),
}


def _sbn_pair(kwargs: dict, c: int) -> tuple[nn.SyncBatchNorm, torch.nn.SyncBatchNorm]:
    tm = torch.nn.SyncBatchNorm(c, **kwargs)
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(torch.linspace(-0.5, 0.5, p.numel()))
    gm = nn.SyncBatchNorm(c, **kwargs)
    _load(gm, tm)
    return gm, tm


@pytest.mark.parametrize("name", sorted(SBN_CASES))
def test_sync_batchnorm_without_distributed_matches_torch(name: str) -> None:
    """Three training steps (outputs, input and parameter gradients, running statistics,
    num_batches_tracked), then eval, against torch.nn.SyncBatchNorm (torch.distributed not
    initialised: its batch-norm fallback)."""
    kwargs, shape = SBN_CASES[name]
    gm, tm = _sbn_pair(kwargs, shape[1])
    assert list(gm.state_dict()) == list(tm.state_dict())
    assert repr(gm) == repr(tm)
    assert gm.process_group is None
    for it in range(4):
        train = it < 3
        gm.train(train)
        tm.train(train)
        x = _r(*shape) * 2 + 0.5
        g = _r(*shape)
        tx = torch.tensor(x, requires_grad=True)
        gx = gc.tensor(x, requires_grad=True)
        tm.zero_grad()
        for p in gm.parameters():
            p.grad = None
        ty, gy = tm(tx), gm(gx)
        ty.backward(torch.tensor(g))
        (gy * gc.tensor(g)).sum().backward()
        _close(gy, ty, f"output {it}", rtol=1e-5, atol=1e-5)
        _close(gx.grad, tx.grad, f"input grad {it}", rtol=1e-4, atol=1e-5)
        tp = dict(tm.named_parameters())
        for k, p in gm.named_parameters():
            _close(p.grad, tp[k].grad, f"{k} grad {it}", rtol=1e-4, atol=1e-5)
        tsd, gsd = tm.state_dict(), gm.state_dict()
        assert list(gsd) == list(tsd)
        for k, v in tsd.items():
            assert gsd[k].dtype == v.numpy().dtype, k
            _close(gsd[k], v, f"{k} after call {it}", rtol=1e-5, atol=1e-6)
    if gm.track_running_stats:
        assert int(gm.num_batches_tracked.item()) == 3


def test_sync_batchnorm_with_one_process_group_is_batchnorm() -> None:
    """graphc.distributed initialised without a launcher (one process, as
    DistributedDataParallel does by itself): nothing to synchronise, so BatchNorm (PyTorch
    also falls back at world size 1, on devices where it syncs at all)."""
    import graphc.distributed as dist

    was = dist.is_initialized()
    dist.init()
    try:
        assert dist.world_size() == 1
        gm, tm = _sbn_pair({}, 3)
        x = _r(4, 3, 2)
        _close(gm(gc.tensor(x)), tm(torch.tensor(x)), rtol=1e-5, atol=1e-5)
        _close(gm.running_var, tm.running_var)
    finally:
        if not was:
            dist.finalize()


def test_sync_batchnorm_compiled_training_step_matches_eager() -> None:
    """Conv -> SyncBatchNorm -> Linear, three compiled SGD steps (batch symbolic) against the
    same steps eagerly and in PyTorch: losses, weights and running statistics."""

    def build(m: Any) -> Any:
        return m.Sequential(m.Conv2d(2, 4, 3, padding=1), m.SyncBatchNorm(4, momentum=None),
                            m.ReLU(), m.Flatten(), m.Linear(4 * 3 * 3, 3))

    torch.manual_seed(0)
    tm = build(torch.nn)
    gm, em = build(nn), build(nn)
    _load(gm, tm)
    _load(em, tm)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1)
    gopt = optim.SGD(gm.parameters(), lr=0.1)
    eopt = optim.SGD(em.parameters(), lr=0.1)

    def train(model: nn.Module, opt: Any, x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    cstep = gc.compile(lambda x, y: train(gm, gopt, x, y))
    for n in (4, 6, 4):
        x = _r(n, 2, 3, 3)
        y = _rng.integers(0, 3, n).astype(np.int64)
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
        tl.backward()
        topt.step()
        cl = cstep(gc.tensor(x), gc.tensor(y))
        el = train(em, eopt, gc.tensor(x), gc.tensor(y))
        _close(cl, el, "compiled vs eager loss", rtol=1e-5)
        _close(cl, tl.item(), "loss vs torch", rtol=1e-5)
    esd = em.state_dict()
    for k, v in tm.state_dict().items():
        _close(gm.state_dict()[k], esd[k], k, rtol=1e-5, atol=1e-6)
        _close(gm.state_dict()[k], v, k, rtol=1e-4, atol=1e-5)
    assert int(gm[1].num_batches_tracked.item()) == 3
    assert cstep.compile_count == 1
    gm.eval()
    tm.eval()
    x = _r(3, 2, 3, 3)
    _close(gc.compile(lambda t: gm(t))(gc.tensor(x)), tm(torch.tensor(x)), "eval",
           rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(5,), ()])
def test_sync_batchnorm_needs_at_least_2d_input(shape: tuple) -> None:
    x = np.ones(shape, np.float32)
    with pytest.raises(ValueError) as want:
        torch.nn.SyncBatchNorm(5)(torch.tensor(x))
    with pytest.raises(ValueError) as got:
        nn.SyncBatchNorm(5)(gc.tensor(x))
    assert str(got.value) == str(want.value) == f"expected at least 2D input (got {len(shape)}D " \
                                                "input)"


def test_sync_batchnorm_needs_channels() -> None:
    x = np.ones((3, 0, 2), np.float32)
    with pytest.raises(ValueError) as want:
        torch.nn.SyncBatchNorm(0)(torch.tensor(x))
    with pytest.raises(ValueError) as got:
        nn.SyncBatchNorm(0)(gc.tensor(x))
    assert str(got.value) == str(want.value)


def test_sync_batchnorm_across_processes_is_refused(monkeypatch: Any) -> None:
    """Training with several graphc.distributed processes would need an all-reduce inside
    the forward and backward passes, which graphc does not have: NotImplementedError, eagerly
    and in a compiled step, with no buffer touched; eval mode (no synchronisation in PyTorch
    either) still works."""
    monkeypatch.setattr(compat, "_distributed_world_size", lambda: 2)
    m = nn.SyncBatchNorm(3)
    x = gc.tensor(_r(4, 3))
    with pytest.raises(NotImplementedError, match="SyncBatchNorm.*2 processes"):
        m(x)
    with pytest.raises(NotImplementedError, match="SyncBatchNorm"):
        gc.compile(lambda t: m(t))(x)
    assert int(m.num_batches_tracked.item()) == 0
    _close(m.running_mean, np.zeros(3, np.float32), rtol=0, atol=0)
    m.eval()
    _close(m(x), x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-6)


def test_a_step_compiled_before_distributed_starts_is_retraced(monkeypatch: Any) -> None:
    """Regression: the world size was read only while tracing, so a step compiled with one
    process ran plain batch norm after graphc.distributed grew to several, where eager
    raises. The step is guarded on it: the next call re-traces and raises, buffers intact."""
    m = nn.SyncBatchNorm(3)
    x = gc.tensor(_r(4, 3))
    step = gc.compile(lambda t: m(t))
    step(x)
    before = m.running_mean.numpy().copy()
    monkeypatch.setattr(compat, "_distributed_world_size", lambda: 2)
    with pytest.raises(NotImplementedError, match="SyncBatchNorm"):
        step(x)
    np.testing.assert_array_equal(m.running_mean.numpy(), before)


# -- convert_sync_batchnorm ------------------------------------------------------------------
def _net(m: Any) -> Any:
    return m.Sequential(
        m.Conv2d(2, 3, 3), m.BatchNorm2d(3), m.ReLU(), m.Flatten(),
        m.Sequential(m.Linear(12, 5), m.BatchNorm1d(5, momentum=0.3, affine=False)),
        m.BatchNorm1d(5, eps=1e-3, bias=False), m.Linear(5, 2))


def test_convert_sync_batchnorm_matches_torch() -> None:
    torch.manual_seed(0)
    tm = _net(torch.nn)
    gm = _net(nn)
    tm.train()
    x0 = _r(6, 2, 4, 4)
    tm(torch.tensor(x0))  # non-trivial running statistics
    tm[1].eval()  # the training flag is copied
    _load(gm, tm)
    gm[1].eval()
    before = {k: v.copy() for k, v in gm.state_dict().items()}
    kept = [gm[1].weight, gm[1].running_mean, gm[4][1].running_var, gm[5].num_batches_tracked]

    group = object()
    tc = torch.nn.SyncBatchNorm.convert_sync_batchnorm(tm)
    gcv = nn.SyncBatchNorm.convert_sync_batchnorm(gm, group)
    assert gcv is gm  # the root was no batch norm: converted in place
    tmods, gmods = dict(tc.named_modules()), dict(gcv.named_modules())
    assert list(tmods) == list(gmods)
    for name, t in tmods.items():
        assert type(gmods[name]).__name__ == type(t).__name__, name
        assert gmods[name].training == t.training, name
        if isinstance(gmods[name], nn.SyncBatchNorm):
            assert gmods[name].process_group is group
            assert repr(gmods[name]) == repr(t)
    # the same tensors (PyTorch assigns them), so values are preserved
    assert [gm[1].weight, gm[1].running_mean, gm[4][1].running_var,
            gm[5].num_batches_tracked] == kept
    assert all(a is b for a, b in zip(kept, [gm[1].weight, gm[1].running_mean,
                                             gm[4][1].running_var, gm[5].num_batches_tracked]))
    after = gcv.state_dict()
    assert list(after) == list(before) == list(tc.state_dict())
    for k, v in before.items():
        _close(after[k], v, k, rtol=0, atol=0)
    x = _r(4, 2, 4, 4)
    _close(gcv(gc.tensor(x)), tc(torch.tensor(x)), "converted output", rtol=1e-4, atol=1e-5)
    for k, v in tc.state_dict().items():
        _close(gcv.state_dict()[k], v, k, rtol=1e-5, atol=1e-6)


def test_convert_sync_batchnorm_of_a_batchnorm_returns_a_new_module() -> None:
    bn = nn.BatchNorm1d(4, momentum=None)
    bn.running_mean.fill_(0.5)
    out = nn.SyncBatchNorm.convert_sync_batchnorm(bn)
    assert type(out) is nn.SyncBatchNorm and out is not bn
    assert out.momentum is None and out.running_mean is bn.running_mean
    again = nn.SyncBatchNorm.convert_sync_batchnorm(out)  # PyTorch converts these too
    assert type(again) is nn.SyncBatchNorm and again is not out
    plain = nn.Linear(2, 2)
    assert nn.SyncBatchNorm.convert_sync_batchnorm(plain) is plain
    tbn = torch.nn.BatchNorm1d(4, momentum=None)
    assert repr(out) == repr(torch.nn.SyncBatchNorm.convert_sync_batchnorm(tbn))


def test_exports() -> None:
    for name in ("CrossMapLRN2d", "DataParallel", "SyncBatchNorm"):
        assert name in nn.__all__
        assert getattr(nn, name) is getattr(compat, name)
    assert issubclass(nn.SyncBatchNorm, nn.BatchNorm1d.__mro__[1])  # a _BatchNorm
