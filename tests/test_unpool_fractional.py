"""``F.max_unpool1d/2d/3d``, ``F.fractional_max_pool2d/3d`` and their modules against PyTorch:
values, indices and gradients, eagerly and compiled (one compile over two batch sizes,
gradients to a parameter), batched and unbatched; ``max_pool`` -> ``max_unpool`` round trips;
fractional pooling with given samples (exact), and unsampled after seeding both frameworks
(graphc's ``gc.rand`` stream is PyTorch's); PyTorch's errors for bad arguments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
import graphc.nn.functional as F
from graphc import nn

TF = torch.nn.functional
_rng = np.random.default_rng(0)


def _r(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """PyTorch's CPU unpool kernel splits the *elements* across threads, so repeated indices
    carrying different values end up with whichever chunk ran last; on one thread it is the
    last writer, which graphc always keeps."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _pool_indices(nd: int, shape: tuple, k: Any, s: Any, p: Any) -> tuple[np.ndarray, ...]:
    """``max_pool{nd}d``'s values and indices (PyTorch's) for a random input of ``shape``."""
    v, i = getattr(TF, f"max_pool{nd}d")(torch.tensor(_r(*shape)), k, s, p, return_indices=True)
    return v.numpy(), i.numpy()


def _check_grad(gy: Any, ty: Any, gx: Any, tx: Any) -> None:
    w = _r(*ty.shape)
    (gy * gc.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


# -- max unpooling ----------------------------------------------------------------------------
UNPOOL = [  # nd, pooled input shape, kernel, stride, padding, output_size given?
    (1, (2, 3, 11), 3, 2, 1, "nd"),
    (1, (3, 10), 2, None, 0, None),
    (2, (2, 3, 7, 6), 3, 2, 1, "nd"),
    (2, (2, 3, 8, 8), 2, None, 0, None),
    (2, (3, 9, 7), (3, 2), (2, 1), (1, 0), "full"),
    (2, (2, 2, 6, 6), 3, 1, 1, None),  # stride 1: every index repeats
    (3, (2, 2, 5, 6, 5), 3, 2, 1, "full"),
    (3, (2, 4, 4, 6), 2, None, 0, None),
]


@pytest.mark.parametrize("nd,shape,k,s,p,given", UNPOOL, ids=str)
def test_max_unpool_round_trip(nd: int, shape: tuple, k: Any, s: Any, p: Any,
                               given: Any) -> None:
    """Unpooling ``max_pool``'s own output (repeated indices carry equal values): values
    exactly PyTorch's, the gradient w.r.t. the values PyTorch's (every repeat gets it)."""
    v, i = _pool_indices(nd, shape, k, s, p)
    out = {None: None, "nd": list(shape[-nd:]), "full": (2, 3) + shape[-nd:]}[given]
    gx, tx = gc.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    gy = getattr(F, f"max_unpool{nd}d")(gx, gc.tensor(i), k, s, p, output_size=out)
    ty = getattr(TF, f"max_unpool{nd}d")(tx, torch.tensor(i), k, s, p, output_size=out)
    assert tuple(gy.shape) == tuple(ty.shape)
    np.testing.assert_array_equal(gy.numpy(), ty.detach().numpy())
    _check_grad(gy, ty, gx, tx)


def test_max_unpool_repeated_indices_last_writer(one_thread: None) -> None:
    """Indices repeating with different values: the last writer in each plane wins, and
    every writer still gets ``grad_out[index]`` (PyTorch's backward is a gather)."""
    x, i = _r(2, 3, 12), _rng.integers(0, 4, (2, 3, 12))
    gx, tx = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    gy = F.max_unpool1d(gx, gc.tensor(i), 1, 1, 4)  # an output of 12 - 2 * 4 = 4
    ty = TF.max_unpool1d(tx, torch.tensor(i), 1, 1, 4)
    np.testing.assert_array_equal(gy.numpy(), ty.detach().numpy())
    _check_grad(gy, ty, gx, tx)


def test_max_unpool_non_finite_values() -> None:
    """inf and NaN values land where they are sent, as any other value."""
    x = np.array([[[np.inf, -np.inf, np.nan, 1.0]]], np.float32)
    i = np.array([[[3, 0, 5, 6]]])
    gy = F.max_unpool1d(gc.tensor(x), gc.tensor(i), 2)
    ty = TF.max_unpool1d(torch.tensor(x), torch.tensor(i), 2)
    np.testing.assert_array_equal(gy.numpy(), ty.numpy())


@pytest.mark.parametrize("nd,shape,k,s,p", [(1, (3, 9), 3, 2, 1), (2, (3, 7, 6), 3, 2, 1),
                                            (3, (2, 5, 4, 6), 2, None, 0)], ids=str)
def test_max_unpool_compiled(nd: int, shape: tuple, k: Any, s: Any, p: Any,
                             one_thread: None) -> None:
    """``max_unpool(x * param, indices)`` compiled once for batch sizes 2 and 5: output and
    parameter gradient as PyTorch's; an out-of-range index stops the step (the scatter's
    bounds check: a compiled step cannot raise PyTorch's data-dependent error)."""
    gfn, tfn = getattr(F, f"max_unpool{nd}d"), getattr(TF, f"max_unpool{nd}d")
    out = list(shape[1:])  # the size the pooling started from
    p0 = _r(*_pool_indices(nd, (1,) + shape, k, s, p)[0].shape[1:])
    param = nn.Parameter(gc.tensor(p0))

    @gc.compile
    def step(x: Any, i: Any, w: Any) -> Any:
        param.grad = None
        y = gfn(x * param, i, k, s, p, output_size=out)
        (y * w).sum().backward()
        return y

    for batch in (2, 5):
        _, i = _pool_indices(nd, (batch,) + shape, k, s, p)
        x = _r(batch, *p0.shape)
        tp = torch.tensor(p0, requires_grad=True)
        ty = tfn(torch.tensor(x) * tp, torch.tensor(i), k, s, p, output_size=out)
        w = _r(*ty.shape)
        (ty * torch.tensor(w)).sum().backward()
        y = step(gc.tensor(x), gc.tensor(i), gc.tensor(w))
        np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
        np.testing.assert_allclose(param.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert step.compile_count == 1
    bad = i.copy()
    bad.reshape(-1)[7] = int(np.prod(out))
    with pytest.raises(IndexError, match="out of range"):
        step(gc.tensor(x), gc.tensor(bad), gc.tensor(w))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_pool_unpool_modules(nd: int) -> None:
    """``nn.MaxPool{nd}d(return_indices=True)`` into ``nn.MaxUnpool{nd}d`` with the input's
    size as ``output_size`` (a ``Size`` with batch and channel dims, as PyTorch code passes)."""
    shape = (2, 3) + (7, 6, 5)[:nd]
    x = _r(*shape)
    pools = [getattr(m.nn, f"MaxPool{nd}d")(3, 2, 1, return_indices=True) for m in (gc, torch)]
    unpools = [getattr(m.nn, f"MaxUnpool{nd}d")(3, 2, 1) for m in (gc, torch)]
    assert repr(unpools[0]) == repr(unpools[1])
    for a in ("kernel_size", "stride", "padding"):
        assert getattr(unpools[0], a) == getattr(unpools[1], a)
    gx, tx = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    gv, gi = pools[0](gx)
    tv, ti = pools[1](tx)
    gy, ty = unpools[0](gv, gi, output_size=gx.shape), unpools[1](tv, ti, output_size=tx.size())
    np.testing.assert_array_equal(gy.numpy(), ty.detach().numpy())
    _check_grad(gy, ty, gx, tx)


def _both(fn: Any) -> list[tuple[str, str]]:
    """``fn(F, zeros, int64)`` in each framework: ``('OK', shape)`` or the exception's type
    and first line."""
    out = []
    for mod, fns in ((torch, TF), (gc, F)):
        try:
            res = fn(fns, mod.zeros, mod.int64)
            out.append(("OK", str(tuple(res.shape))))
        except Exception as e:  # noqa: BLE001 - the type is what is compared
            out.append((type(e).__name__, str(e).splitlines()[0]))
    return out


UNPOOL_CASES = [
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 4, 4, dtype=i64) + 100, 2),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 4, 4, dtype=i64) - 1, 2),
    lambda F, z, i64: F.max_unpool3d(z(1, 2, 2, 2, 2), z(1, 2, 2, 2, 2, dtype=i64) + 64, 2),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 4, 4, dtype=i64).int(), 2),
    lambda F, z, i64: F.max_unpool3d(z(1, 2, 2, 2, 2), z(1, 2, 2, 2, 2, dtype=i64).int(), 2),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 4, 4, dtype=i64), 2,
                                     output_size=(10, 7)),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 4, 4, dtype=i64), 2,
                                     output_size=(5, 5, 5)),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 4, 4, dtype=i64), 2, output_size=8),
    lambda F, z, i64: F.max_unpool1d(z(2, 3, 4), z(2, 3, 4, dtype=i64), 2, output_size=[6]),
    lambda F, z, i64: F.max_unpool3d(z(3, 2, 2, 2), z(3, 2, 2, 2, dtype=i64), 2,
                                     output_size=(4, 4, 6)),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 4, 4, dtype=i64), 2, padding=5),
    lambda F, z, i64: F.max_unpool3d(z(1, 2, 2, 2, 2), z(1, 2, 2, 2, 2, dtype=i64), 2,
                                     stride=(1, 0, 1)),
    lambda F, z, i64: F.max_unpool1d(z(2, 3, 4, 5), z(2, 3, 4, 5, dtype=i64), 2),
    lambda F, z, i64: F.max_unpool3d(z(3, 2, 2), z(3, 2, 2, dtype=i64), 2),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 3, 4, dtype=i64), 2),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 0, 4), z(2, 3, 0, 4, dtype=i64), 2),
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4, dtype=i64), z(2, 3, 4, 4, dtype=i64), 2),
    # accepted: kernel 0 (an empty output: no index is checked), an empty batch, unbatched
    lambda F, z, i64: F.max_unpool2d(z(2, 3, 4, 4), z(2, 3, 4, 4, dtype=i64) + 5, 0),
    lambda F, z, i64: F.max_unpool2d(z(0, 3, 4, 4), z(0, 3, 4, 4, dtype=i64), 2),
    lambda F, z, i64: F.max_unpool1d(z(3, 4), z(3, 4, dtype=i64), 2),
    lambda F, z, i64: F.max_unpool3d(z(3, 2, 2, 2), z(3, 2, 2, 2, dtype=i64), 2),
]


@pytest.mark.parametrize("case", range(len(UNPOOL_CASES)))
def test_max_unpool_errors_like_torch(case: int) -> None:
    want, have = _both(UNPOOL_CASES[case])
    assert have[0] == want[0], (have, want)
    assert want[1] in have[1], (have, want)


# -- fractional max pooling -------------------------------------------------------------------
FRACTIONAL = [  # nd, input shape, kernel, output_size, output_ratio
    (2, (2, 3, 9, 8), 2, (4, 5), None),
    (2, (2, 3, 13, 11), 3, 6, None),
    (2, (3, 10, 9), (3, 2), None, (0.5, 0.7)),
    (2, (2, 2, 7, 7), 2, (6, 1), None),
    (3, (2, 2, 7, 6, 9), 2, (3, 4, 5), None),
    (3, (2, 5, 6, 7), 3, None, 0.5),
]


def _fractional(nd: int) -> tuple[Any, Any]:
    return getattr(F, f"fractional_max_pool{nd}d"), getattr(TF, f"fractional_max_pool{nd}d")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nd,shape,k,size,ratio", FRACTIONAL, ids=str)
def test_fractional_given_samples(nd: int, shape: tuple, k: Any, size: Any, ratio: Any,
                                  dtype: Any) -> None:
    """With ``_random_samples`` the windows are fixed: values and indices exactly PyTorch's
    (the window starts use ATen's float arithmetic in the input's dtype), gradients too.
    Rounded inputs make ties, which must resolve to the first maximum as in ATen."""
    gfn, tfn = _fractional(nd)
    x = np.round(_r(*shape) * 2).astype(dtype)
    s = _rng.random((shape[0] if len(shape) == nd + 2 else 1, shape[-nd - 1], nd)).astype(dtype)
    gx, tx = gc.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    gv, gi = gfn(gx, k, size, ratio, True, _random_samples=gc.tensor(s))
    tv, ti = tfn(tx, k, size, ratio, True, _random_samples=torch.tensor(s))
    np.testing.assert_array_equal(gv.numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(gi.numpy(), ti.numpy())
    _check_grad(gv, tv, gx, tx)
    # return_indices=False gives the values alone, as PyTorch's boolean dispatch does
    alone = gfn(gc.tensor(x), k, size, ratio, _random_samples=gc.tensor(s))
    assert isinstance(alone, gc.Tensor)
    np.testing.assert_array_equal(alone.numpy(), tv.detach().numpy())


@pytest.mark.parametrize("n_in,k,n_out,u", [(6, 2, 3, 0.4999999701976776),
                                             (6, 2, 4, 0.2499999850988388),
                                             (7, 2, 3, 0.19999998807907104)])
def test_fractional_starts_round_in_the_input_dtype(n_in: int, k: int, n_out: int,
                                                     u: float) -> None:
    """Samples just below ``m / alpha - i``: ``(i + u) * alpha`` rounds up to the integer in
    float32 but not in float64, so the window starts are ATen's only if graphc does the
    arithmetic in the input's dtype. An increasing input puts every window's maximum at its
    far corner, so the indices show the starts. Eagerly and compiled (native float code)."""
    x = np.arange(n_in * n_in, dtype=np.float32).reshape(1, 1, n_in, n_in)
    samples = np.full((1, 1, 2), u, np.float32)

    def pool(x: Any, s: Any) -> Any:
        return F.fractional_max_pool2d(x, k, n_out, return_indices=True, _random_samples=s)[1]

    _, ti = TF.fractional_max_pool2d(torch.tensor(x), k, n_out, return_indices=True,
                                     _random_samples=torch.tensor(samples))
    np.testing.assert_array_equal(pool(gc.tensor(x), gc.tensor(samples)).numpy(), ti.numpy())
    compiled = gc.compile(pool)(gc.tensor(x), gc.tensor(samples))
    np.testing.assert_array_equal(compiled.numpy(), ti.numpy())


def test_fractional_more_samples_than_batch() -> None:
    """PyTorch reads the first ``N`` rows of a larger ``_random_samples`` (and one row for an
    unbatched input)."""
    x, s = _r(2, 3, 9, 9), _rng.random((4, 3, 2)).astype(np.float32)
    for xs in (x, x[0]):
        gv, gi = F.fractional_max_pool2d(gc.tensor(xs), 3, 4, return_indices=True,
                                         _random_samples=gc.tensor(s))
        tv, ti = TF.fractional_max_pool2d(torch.tensor(xs), 3, 4, return_indices=True,
                                          _random_samples=torch.tensor(s))
        np.testing.assert_array_equal(gv.numpy(), tv.numpy())
        np.testing.assert_array_equal(gi.numpy(), ti.numpy())


def test_fractional_nan_and_all_minus_inf_windows() -> None:
    """ATen keeps ``val > max || isnan(val)``: the last NaN of a window, and a window of
    ``-inf`` only keeps its first element."""
    n = np.nan
    cases = [(np.array([[[[n, 1, n, 3.0], [5.0, n, 7.0, 8.0]]]], np.float32), (2, 4), (1, 1)),
             (np.full((1, 1, 3, 3), -np.inf, np.float32), 2, (2, 2)),
             (np.array([[[[1.0, n, 2.0], [n, 0.0, 5.0], [3.0, 3.0, n]]]], np.float32), 2,
              (2, 2))]
    for x, k, size in cases:
        gv, gi = F.fractional_max_pool2d(gc.tensor(x), k, size, return_indices=True,
                                         _random_samples=gc.tensor(np.full((1, 1, 2), 0.3,
                                                                           np.float32)))
        tv, ti = TF.fractional_max_pool2d(torch.tensor(x), k, size, return_indices=True,
                                          _random_samples=torch.full((1, 1, 2), 0.3))
        np.testing.assert_array_equal(gv.numpy(), tv.numpy())
        np.testing.assert_array_equal(gi.numpy(), ti.numpy())


@pytest.mark.parametrize("nd,shape,k,size", [(2, (3, 9, 8), 2, (4, 5)),
                                             (3, (2, 7, 6, 9), 2, (3, 4, 5))], ids=str)
def test_fractional_compiled_given_samples(nd: int, shape: tuple, k: int, size: tuple) -> None:
    """Compiled once for batch sizes 2 and 5, the samples an argument of the step: the
    window starts are computed in the graph from them, so each call's samples are used."""
    gfn, tfn = _fractional(nd)
    p0 = _r(*shape)
    param = nn.Parameter(gc.tensor(p0))

    @gc.compile
    def step(x: Any, s: Any, w: Any) -> Any:
        param.grad = None
        v, i = gfn(x * param, k, size, return_indices=True, _random_samples=s)
        (v * w).sum().backward()
        return v, i

    for batch in (2, 5):
        x, s = _r(batch, *shape), _rng.random((batch, shape[0], nd)).astype(np.float32)
        tp = torch.tensor(p0, requires_grad=True)
        tv, ti = tfn(torch.tensor(x) * tp, k, size, return_indices=True,
                     _random_samples=torch.tensor(s))
        w = _r(*tv.shape)
        (tv * torch.tensor(w)).sum().backward()
        v, i = step(gc.tensor(x), gc.tensor(s), gc.tensor(w))
        np.testing.assert_array_equal(v.numpy(), tv.detach().numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        np.testing.assert_allclose(param.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert step.compile_count == 1


def test_fractional_unsampled_seeded_eager_and_compiled() -> None:
    """Without ``_random_samples`` the samples are ``rand(N, C, 2)`` in the input's dtype from
    graphc's stream, which after the same seed is PyTorch's: eagerly and in a compiled step
    (where they are a per-call random input: successive calls draw new windows, in the
    order eager calls would)."""
    shape = (3, 11, 10)

    @gc.compile
    def step(x: Any) -> Any:
        return F.fractional_max_pool2d(x, 2, output_ratio=(0.5, 0.5), return_indices=True)

    gc.manual_seed(11)
    torch.manual_seed(11)
    seen = []
    for batch in (2, 5, 2):
        x = _r(batch, *shape)
        tv, ti = TF.fractional_max_pool2d(torch.tensor(x), 2, output_ratio=(0.5, 0.5),
                                          return_indices=True)
        v, i = step(gc.tensor(x))
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
        seen.append(i.numpy())
    assert step.compile_count == 1
    assert not np.array_equal(seen[0], seen[2])  # new samples on every call
    gc.manual_seed(3)
    torch.manual_seed(3)
    x = _r(2, 2, 7, 8, 9)
    gm = nn.FractionalMaxPool3d(2, output_size=(3, 4, 5), return_indices=True)
    tm = torch.nn.FractionalMaxPool3d(2, output_size=(3, 4, 5), return_indices=True)
    seen = []
    for _ in range(2):  # eagerly, the module draws anew on each forward
        (gv, gi), (tv, ti) = gm(gc.tensor(x)), tm(torch.tensor(x))
        np.testing.assert_array_equal(gv.numpy(), tv.numpy())
        np.testing.assert_array_equal(gi.numpy(), ti.numpy())
        seen.append(gi.numpy())
    assert not np.array_equal(seen[0], seen[1])


def test_fractional_modules() -> None:
    """Constructor attributes, repr and the ``_random_samples`` buffer as PyTorch's."""
    s = _rng.random((1, 3, 2)).astype(np.float32)
    gm = nn.FractionalMaxPool2d(3, output_ratio=0.5, _random_samples=gc.tensor(s))
    tm = torch.nn.FractionalMaxPool2d(3, output_ratio=0.5, _random_samples=torch.tensor(s))
    assert repr(gm) == repr(tm) == "FractionalMaxPool2d()"
    for a in ("kernel_size", "output_size", "output_ratio", "return_indices"):
        assert getattr(gm, a) == getattr(tm, a)
    assert list(gm.state_dict()) == list(tm.state_dict()) == ["_random_samples"]
    x = _r(3, 12, 10)
    np.testing.assert_array_equal(gm(gc.tensor(x)).numpy(), tm(torch.tensor(x)).numpy())
    g3 = nn.FractionalMaxPool3d((2, 3, 2), output_size=4)
    assert g3.kernel_size == (2, 3, 2) and g3.output_size == (4, 4, 4)
    assert g3._random_samples is None and list(g3.state_dict()) == []


MODULE_CASES = [
    lambda nn: nn.FractionalMaxPool2d(2),
    lambda nn: nn.FractionalMaxPool3d(2),
    lambda nn: nn.FractionalMaxPool2d(2, 3, 0.5),
    lambda nn: nn.FractionalMaxPool2d(2, output_ratio=1.5),
    lambda nn: nn.FractionalMaxPool2d(2, output_ratio=(0.5, 1)),
    lambda nn: nn.FractionalMaxPool3d(2, output_ratio=(0.5, 0.5, 1.0)),
    lambda nn: nn.FractionalMaxPool3d(0, output_ratio=0.5),
    lambda nn: nn.FractionalMaxPool3d((2, 0, 2), output_size=3),
]


@pytest.mark.parametrize("case", range(len(MODULE_CASES)))
def test_fractional_module_errors_like_torch(case: int) -> None:
    with pytest.raises(ValueError) as want:
        MODULE_CASES[case](torch.nn)
    with pytest.raises(ValueError) as have:
        MODULE_CASES[case](nn)
    assert str(want.value) == str(have.value)


def _s(z: Any, *shape: int, double: bool = False) -> Any:
    """Samples of ``shape`` in [0, 1) (``z``: the framework's ``zeros``)."""
    t = z(*shape) + 0.25
    return t.double() if double else t


FRACTIONAL_CASES = [
    # output size / ratio (torch/nn/functional.py)
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2),
    lambda F, z, i64: F.fractional_max_pool3d(z(2, 3, 7, 6, 5), 2),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, output_ratio=0.5),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, output_ratio=(0.5, 0.5, 0.5)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, output_ratio=(0.5,)),
    # kernel and output sizes (ATen)
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, (8, 7), _random_samples=_s(
        z, 2, 3, 2)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, (9, 7)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, (8, 8)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 9, 4),
    lambda F, z, i64: F.fractional_max_pool3d(z(2, 3, 7, 6, 5), 2, (3, 5, 3)),
    lambda F, z, i64: F.fractional_max_pool3d(z(1, 1, 5, 6, 6), 2, (4, 2, 2)),
    lambda F, z, i64: F.fractional_max_pool3d(z(1, 1, 6, 6, 6), 2, (4, 4, 4), _random_samples=_s(
        z, 1, 1, 3)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), (2, 2, 2), 4),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), (2,), 4),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, (4, 4, 4)),
    lambda F, z, i64: F.fractional_max_pool3d(z(2, 3, 7, 6, 5), (2, 2), 3),
    lambda F, z, i64: F.fractional_max_pool3d(z(2, 3, 7, 6, 5), 2, (3, 3)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2.5, 4),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), (2, 2.0), 4),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, (4, -1)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, (0, 4)),
    # input rank and empty dims
    lambda F, z, i64: F.fractional_max_pool2d(z(8), 2, 4),
    lambda F, z, i64: F.fractional_max_pool2d(z(9, 8), 2, 4),
    lambda F, z, i64: F.fractional_max_pool3d(z(7, 6, 5), 2, 3),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 0, 8), 2, 4),
    lambda F, z, i64: F.fractional_max_pool3d(z(2, 3, 0, 6, 5), 2, 3),
    lambda F, z, i64: F.fractional_max_pool2d(z(0, 3, 9, 8), 2, 4),
    # _random_samples (the dtype is checked before the rank)
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, 4, _random_samples=_s(
        z, 2, 3, double=True)),
    lambda F, z, i64: F.fractional_max_pool3d(z(2, 3, 7, 6, 5), 2, 3, _random_samples=_s(
        z, 2, 3, double=True)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, 4, _random_samples=_s(
        z, 1, 3, 2)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, 4, _random_samples=_s(
        z, 2, 2, 2)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8), 2, 4, _random_samples=_s(
        z, 2, 3, 3)),
    lambda F, z, i64: F.fractional_max_pool3d(z(2, 3, 7, 6, 5), 2, 3, _random_samples=_s(
        z, 2, 3, 2)),
    lambda F, z, i64: F.fractional_max_pool2d(z(2, 3, 9, 8, dtype=i64), 2, 4, _random_samples=_s(
        z, 2, 3, 2)),
]


@pytest.mark.parametrize("case", range(len(FRACTIONAL_CASES)))
def test_fractional_errors_like_torch(case: int) -> None:
    want, have = _both(FRACTIONAL_CASES[case])
    assert have[0] == want[0], (have, want)
    assert want[1] in have[1], (have, want)


def test_fractional_empty_window_refused() -> None:
    """A kernel size of 0 or less: PyTorch's loop runs no iteration and returns ``-inf``
    with indices that may point past the plane; graphc refuses it."""
    x, s = gc.zeros(1, 1, 5, 5), gc.zeros(1, 1, 2) + 0.5
    with pytest.raises(RuntimeError, match="kernel_size must be greater than zero"):
        F.fractional_max_pool2d(x, 0, 2, _random_samples=s)


def test_fractional_samples_need_no_grad() -> None:
    s = gc.tensor(np.full((1, 1, 2), 0.5, np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="not differentiable with respect to argument "
                                           "'random_samples'"):
        F.fractional_max_pool2d(gc.zeros(1, 1, 5, 5), 2, 2, _random_samples=s)
