"""Indexing, item assignment, scatter/gather variants and sorting against PyTorch: values and
gradients eagerly and compiled (one compile over two batch sizes, gradients to a parameter),
bounds errors eagerly and natively, and clear errors for data-dependent shapes when traced."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn


def _perm_index(L: Any, x: Any) -> Any:  # a duplicate-free index along dim 2 (size 5)
    return L.tensor([[[1, 0, 4]]]).expand(x.shape[0], 4, 3)


def _dup_index(L: Any, x: Any) -> Any:  # repeats, and a window smaller than x in dim 1
    return L.tensor([[[0, 0, 4]]]).expand(x.shape[0], 2, 3)


def _dup_src(x: Any) -> Any:  # the source for ``_dup_index`` (PyTorch's backward needs it
    return x[:, :2, :3] * 2  # no larger than the index)


def _data_index(L: Any, x: Any) -> Any:  # read from the data: differs per batch row
    return (x.detach()[:, :2, :3].abs() * 10).to(L.int64) % 5


def _set_cols(x: Any, L: Any) -> Any:
    y = x * 1
    y[:, L.tensor([0, 2])] = x[:, 1:3] * 2
    return y


def _set_scalar(x: Any, L: Any) -> Any:
    y = x * 1
    y[:, 1, [0, -1]] = 0.5
    return y


def _set_mask(x: Any, L: Any) -> Any:
    y = x * 1
    y[:, np.array([True, False, False, True])] = x[:, :1] * 3
    return y


def _index_put(x: Any, L: Any, acc: bool) -> Any:
    y = x.permute(1, 0, 2)
    i = [0, 0, 3] if acc else [0, 2, 3]  # repeated positions only when accumulating
    return y.index_put((L.tensor(i),), x[:, 0, :] * 3, accumulate=acc)


def _index_put_(x: Any, L: Any) -> Any:
    y = x.permute(1, 2, 0) * 1
    y.index_put_((L.tensor([1, 3]), L.tensor([[0], [4]])), x[:, 0, 0] * 2, accumulate=True)
    return y


# shape of a batch row, fn(x, lib) -> output; lib is torch or gc
CASES: dict[str, Any] = {
    "list": lambda x, L: x[:, [0, 2, -1]],
    "tensors_broadcast": lambda x, L: x[:, L.tensor([[0], [3]]), L.tensor([1, -2, 4])],
    "tensors_apart": lambda x, L: x[L.tensor([1, 0]), :, L.tensor([1, 2])],
    "ellipsis_none": lambda x, L: x[..., None, L.tensor([4, 0])],
    "int_and_tensor": lambda x, L: x[:, 1, L.tensor([0, 0, 3])],
    "batch_dim_negative": lambda x, L: x[L.tensor([-1, 0]), 2:],
    "const_mask": lambda x, L: x[:, np.array([True, False, True, True])],
    "setitem_tensor": _set_cols,
    "setitem_scalar": _set_scalar,
    "setitem_mask": _set_mask,
    "index_put": lambda x, L: _index_put(x, L, False),
    "index_put_accumulate": lambda x, L: _index_put(x, L, True),
    "index_put_": _index_put_,
    "index_select": lambda x, L: x.index_select(2, L.tensor([4, 0, 0])),
    "unfold_overlapping": lambda x, L: x.unfold(2, 3, 1),
    "unfold_strided_negative_dim": lambda x, L: x.unfold(-1, 2, 2),
    "unfold_whole_dim": lambda x, L: x.unfold(1, 4, 3),
    "unfold_empty_windows": lambda x, L: x.unfold(2, 0, 2),
    "gather_smaller": lambda x, L: x.gather(2, _data_index(L, x)),
    "take_along_dim": lambda x, L: x.take_along_dim(x.detach().argsort(2), 2),
    "take_along_dim_flat": lambda x, L: (x[:, 0] * 1).take_along_dim(L.tensor([3, 0]), None),
    "scatter_src": lambda x, L: x.scatter(2, _perm_index(L, x), x[..., :3] * 2),
    "scatter_value": lambda x, L: x.scatter(2, _perm_index(L, x), 2.5),
    "scatter_add": lambda x, L: x.scatter_add(2, _dup_index(L, x), _dup_src(x)),
    "index_add": lambda x, L: x.index_add(1, L.tensor([3, 3, 0]), x[:, :3] * 2, alpha=2),
    "index_copy": lambda x, L: x.index_copy(1, L.tensor([3, 1]), x[:, :2] * 2),
    "index_fill": lambda x, L: x.index_fill(2, L.tensor([1, -1]), -7.0),
    "sort": lambda x, L: x.sort(2).values,
    "sort_descending": lambda x, L: x.sort(1, descending=True)[0],
    "sort_indices": lambda x, L: x.sort(dim=2, stable=True).indices.to(L.float32),
    "argsort_descending": lambda x, L: x.argsort(1, descending=True).to(L.float32),
    "msort": lambda x, L: x.permute(2, 1, 0).msort(),
    "msort_batch": lambda x, L: x.msort(),
    "topk": lambda x, L: x.topk(2, dim=1).values,
    "topk_smallest": lambda x, L: x.topk(3, 2, largest=False)[0],
    "kthvalue": lambda x, L: x.kthvalue(2, 2).values,
    "kthvalue_keepdim": lambda x, L: x.kthvalue(3, 1, True)[0],
}
for _red in ("sum", "prod", "mean", "amax", "amin"):
    for _inc in (True, False):
        CASES[f"scatter_reduce_{_red}_{'self' if _inc else 'noself'}"] = (
            lambda r, i: lambda x, L: x.scatter_reduce(2, _dup_index(L, x), _dup_src(x), r,
                                                        include_self=i))(_red, _inc)

SHAPE = (4, 5)


def _torch_run(fn: Any, x: np.ndarray, p0: np.ndarray) -> tuple[np.ndarray, Any]:
    tp = torch.tensor(p0, requires_grad=True)
    y = fn(torch.tensor(x) * tp, torch)
    if y.requires_grad:
        (y * y).sum().backward()
    return y.detach().numpy(), None if tp.grad is None else tp.grad.numpy()


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch(name: str, mode: str) -> None:
    fn = CASES[name]
    rng = np.random.default_rng(7)
    p0 = rng.standard_normal(SHAPE).astype(np.float32)
    param = nn.Parameter(gc.tensor(p0))

    def step(x: Any) -> Any:
        param.grad = None
        y = fn(x * param, gc)
        if y.requires_grad:
            (y * y).sum().backward()
        return y

    run = gc.compile(step) if mode == "compiled" else step
    for batch in (3, 6):
        x = rng.standard_normal((batch,) + SHAPE).astype(np.float32)
        ty, tg = _torch_run(fn, x, p0)
        y = run(gc.tensor(x))
        np.testing.assert_allclose(y.numpy(), ty, rtol=1e-5, atol=1e-6, err_msg=name)
        if tg is None:
            assert param.grad is None or not param.grad.numpy().any()
        else:
            np.testing.assert_allclose(param.grad.numpy(), tg, rtol=1e-5, atol=1e-5,
                                       err_msg=name)


def test_setitem_value_gradient_and_leaf_becomes_non_leaf() -> None:
    v0 = np.array([1.0, 2.0], np.float32)
    tv = torch.tensor(v0, requires_grad=True)
    gv = gc.tensor(v0, requires_grad=True)
    tx, gx = torch.zeros(3, 4), gc.zeros(3, 4)
    tx[[0, 2], 1] = tv * 3
    gx[[0, 2], 1] = gv * 3
    np.testing.assert_array_equal(gx.detach().numpy(), tx.detach().numpy())
    assert not gx.is_leaf and gx.requires_grad
    (tx * tx).sum().backward()
    (gx * gx).sum().backward()
    np.testing.assert_allclose(gv.grad.numpy(), tv.grad.numpy())


def test_setitem_on_leaf_requiring_grad_raises() -> None:
    x = gc.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x[[0]] = 2.0
    with gc.no_grad():
        x[[0, 1]] = 2.0
    np.testing.assert_array_equal(x.numpy(), [2.0, 2.0, 1.0])


def test_plain_setitem_writes_in_place() -> None:
    a = np.zeros((2, 3), np.float32)
    t = gc.from_numpy(a)
    t[:, [0, 2]] = gc.tensor([[1.0, 2.0]])
    np.testing.assert_array_equal(a, [[1, 0, 2], [1, 0, 2]])
    t[gc.tensor([[True, False, False], [False, False, True]])] = -1.0
    np.testing.assert_array_equal(a, [[-1, 0, 2], [1, 0, -1]])


@pytest.mark.parametrize("key", [
    lambda L: [0, 5], lambda L: L.tensor([-6]), lambda L: (L.tensor([0]), L.tensor([2, 9])),
    lambda L: (slice(None), [3]),
])
def test_out_of_range_raises_index_error_eagerly(key: Any) -> None:
    t, g = torch.zeros(5, 3), gc.zeros(5, 3)
    with pytest.raises(IndexError):
        t[key(torch)]
    with pytest.raises(IndexError, match="out of bounds"):
        g[key(gc)]
    with pytest.raises(IndexError):
        g[key(gc)] = 1.0


def test_compiled_out_of_range_is_caught_natively() -> None:
    @gc.compile
    def step(x: Any, i: Any) -> Any:
        return x[:, i] + x[i, i]

    x = np.ones((4, 4), np.float32)
    np.testing.assert_array_equal(step(x, np.array([1, -1])).numpy(), np.full((4, 2), 2.0))
    for bad in ([1, 4], [-5, 0]):
        with pytest.raises(IndexError, match="out of range"):
            step(x, np.array(bad))

    @gc.compile
    def scat(x: Any, i: Any) -> Any:
        return x.scatter_add(1, i, x)

    with pytest.raises(IndexError, match="out of range"):
        scat(np.ones((2, 3), np.float32), np.array([[0, 1, 3], [0, 0, 0]]))


def test_bool_mask_eager_and_traced_error() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    t, g = torch.tensor(a), gc.tensor(a)
    np.testing.assert_array_equal(g[g > 0].numpy(), t[t > 0].numpy())
    np.testing.assert_array_equal(g[1:, g[0] > -4].numpy(), t[1:, t[0] > -4].numpy())
    np.testing.assert_array_equal(g.masked_select(g > 2).numpy(), t.masked_select(t > 2).numpy())
    np.testing.assert_array_equal(g.nonzero().numpy(), t.nonzero().numpy())
    np.testing.assert_array_equal(g.argwhere().numpy(), t.argwhere().numpy())
    for gg, tt in zip(g.nonzero(as_tuple=True), t.nonzero(as_tuple=True)):
        np.testing.assert_array_equal(gg.numpy(), tt.numpy())
    for body in (lambda x: x[x > 0], lambda x: x.nonzero(), lambda x: x.masked_select(x > 0),
                 lambda x: x.argwhere()):
        with pytest.raises(NotImplementedError, match="data-dependent"):
            gc.compile(body)(g)


def test_sort_ties_nan_and_stability() -> None:
    a = np.array([[3.0, np.nan, 1.0, 3.0, -np.inf, 1.0, np.nan]], np.float32)
    t, g = torch.tensor(a), gc.tensor(a)
    for desc in (False, True):
        tv, ti = t.sort(dim=1, descending=desc, stable=True)
        gv, gi = g.sort(1, descending=desc)
        np.testing.assert_array_equal(gi.numpy(), ti.numpy())
        np.testing.assert_array_equal(gv.numpy(), tv.numpy())
        ci = gc.compile(lambda x, d=desc: x.argsort(1, descending=d))(g)
        np.testing.assert_array_equal(ci.numpy(), ti.numpy())
    ints = np.array([[2, -9223372036854775808, 2, 7]])
    ti = torch.tensor(ints).sort(dim=1, descending=True, stable=True).indices
    np.testing.assert_array_equal(gc.tensor(ints).sort(1, descending=True).indices.numpy(),
                                  ti.numpy())
    assert gc.tensor(3.0).sort().values.item() == 3.0
    r = gc.tensor([[4.0, 1.0]]).topk(1)
    assert r.values.item() == 4.0 and r.indices.item() == 0
    assert gc.tensor([5.0, 1.0, 3.0]).kthvalue(2).indices.item() == 2


def test_sort_along_the_batch_dim_compiles() -> None:
    step = gc.compile(lambda x: x.sort(0, descending=True).indices)
    for n in (3, 40):
        a = np.random.default_rng(n).integers(0, 4, (n, 2)).astype(np.float32)
        want = torch.tensor(a).sort(dim=0, descending=True, stable=True).indices.numpy()
        np.testing.assert_array_equal(step(a).numpy(), want)


def test_index_dtype_and_shape_errors() -> None:
    g = gc.zeros(3, 4)
    with pytest.raises(IndexError, match="tensors used as indices"):
        g[gc.tensor([0.0])]
    with pytest.raises(RuntimeError, match="gather"):
        g.gather(1, gc.tensor([[0]] * 4))
    with pytest.raises(RuntimeError):
        g.gather(1, gc.tensor([[4]]))
    with pytest.raises(IndexError, match="ellipsis"):
        g[..., [0], ...]
    with pytest.raises(RuntimeError, match="k out of range"):
        g.topk(5)


def test_empty_and_zero_d() -> None:
    t, g = torch.arange(6.0).reshape(2, 3), gc.arange(6.0).reshape(2, 3)
    assert tuple(g[[]].shape) == tuple(t[[]].shape)
    assert tuple(g[:, gc.tensor([], dtype=gc.int64)].shape) == (2, 0)
    assert tuple(g[False].shape) == tuple(t[False].shape)
    assert tuple(g[True].shape) == tuple(t[True].shape)
    assert g[gc.tensor(1), 2].item() == t[torch.tensor(1), 2].item()
    np.testing.assert_array_equal(g[[[1]], [[0, 2]]].numpy(), t[[[1]], [[0, 2]]].numpy())
    s = gc.tensor(2.0)
    assert s.index_select(0, gc.tensor([0])).item() == 2.0
    assert s.gather(0, gc.tensor(0)).item() == 2.0


def test_functional_names() -> None:
    a = np.array([[3.0, 1.0, 2.0]], np.float32)
    t, g = torch.tensor(a), gc.tensor(a)
    i = [[2, 0]]
    np.testing.assert_array_equal(gc.take_along_dim(g, gc.tensor(i), 1).numpy(),
                                  torch.take_along_dim(t, torch.tensor(i), 1).numpy())
    np.testing.assert_array_equal(gc.sort(g).values.numpy(), torch.sort(t).values.numpy())
    np.testing.assert_array_equal(gc.argsort(g).numpy(), torch.argsort(t).numpy())
    np.testing.assert_array_equal(gc.topk(g, 2).indices.numpy(), torch.topk(t, 2).indices.numpy())
    np.testing.assert_array_equal(gc.index_select(g, 1, gc.tensor([2])).numpy(),
                                  torch.index_select(t, 1, torch.tensor([2])).numpy())
    np.testing.assert_array_equal(gc.nonzero(g).numpy(), torch.nonzero(t).numpy())
    np.testing.assert_array_equal(
        gc.scatter_reduce(g, 1, gc.tensor([[0, 0]]), g, "amax").numpy(),
        torch.scatter_reduce(t, 1, torch.tensor([[0, 0]]), t, "amax").numpy())


@pytest.mark.parametrize("names", [
    ("tensors_broadcast", "setitem_tensor", "index_put_accumulate", "gather_smaller"),
    ("scatter_src", "scatter_reduce_amax_self", "scatter_reduce_prod_noself", "index_fill"),
    ("sort", "topk", "take_along_dim", "kthvalue"),
])
def test_lowers_to_ptx_that_ptxas_assembles(names: tuple, tmp_path: Any) -> None:
    """The compositions only use primitives with PTX kernels: a step with several of them
    lowers to PTX, and ptxas (where installed) assembles it."""
    import shutil
    import subprocess

    param = nn.Parameter(gc.tensor(np.ones(SHAPE, np.float32)))

    def step(x: Any) -> Any:
        total = None
        for name in names:
            y = CASES[name](x * param, gc)
            total = y.sum() if total is None else total + y.sum()
        total.backward()
        return total

    example = (gc.tensor(np.ones((3,) + SHAPE, np.float32)),)
    text = gc.compile(step, device="cuda", example_args=example).ir("ptx")
    assert ".entry" in text
    exe = shutil.which("ptxas")
    if exe is None:
        pytest.skip("ptxas not installed")
    src = tmp_path / "k.ptx"
    src.write_text(text)
    res = subprocess.run([exe, "--gpu-name", "sm_80", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_integers(reduce: str, include_self: bool) -> None:
    a = np.array([[5, -3, 7, 0], [2, 2, -9, 4]])
    t, g = torch.tensor(a), gc.tensor(a)
    tr = t.scatter_reduce(1, torch.tensor([[0, 0, 3]]), t[:1, :3], reduce,
                          include_self=include_self)
    gr = g.scatter_reduce(1, gc.tensor([[0, 0, 3]]), g[:1, :3], reduce,
                          include_self=include_self)
    assert gr.dtype == gc.int64
    np.testing.assert_array_equal(gr.numpy(), tr.numpy())


def test_integer_and_bool_assignment() -> None:
    a = np.array([[5, -3, 7, 0], [2, 2, -9, 4]])
    t, g = torch.tensor(a), gc.tensor(a)
    t[:, [0, 3]] = 11
    g[:, [0, 3]] = 11
    t[t > 4] += 1
    g[g > 4] += 1
    np.testing.assert_array_equal(g.numpy(), t.numpy())
    tb, gb = torch.tensor([True, False, True]), gc.tensor([True, False, True])
    tb[[1, 2]] = torch.tensor([True, False])
    gb[[1, 2]] = gc.tensor([True, False])
    np.testing.assert_array_equal(gb.numpy(), tb.numpy())


def test_in_place_variants() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = [[0, 2], [1, 1]]
    for name, args in [("scatter_", (1, i, 9.0)), ("scatter_add_", (1, i, a[:2, :2])),
                       ("scatter_reduce_", (1, i, a[:2, :2], "amax")),
                       ("index_add_", (0, [2, 0], a[:2])), ("index_copy_", (0, [2, 0], a[:2])),
                       ("index_fill_", (1, [3], -1.0))]:
        t, g = torch.tensor(a), gc.tensor(a)
        conv = [torch.tensor(v) if isinstance(v, (list, np.ndarray)) else v for v in args]
        gconv = [gc.tensor(v) if isinstance(v, (list, np.ndarray)) else v for v in args]
        getattr(t, name)(*conv)
        assert getattr(g, name)(*gconv) is g
        np.testing.assert_array_equal(g.numpy(), t.numpy(), err_msg=name)


def test_buffer_assignment_inside_a_compiled_step() -> None:
    buf = gc.zeros(5)

    @gc.compile
    def step(x: Any, i: Any) -> Any:
        buf[i] = x
        buf.index_put_((i,), x, accumulate=True)
        return buf.sum()

    assert step(np.array([1.0, 2.0], np.float32), np.array([0, 3])).item() == 6.0
    np.testing.assert_array_equal(buf.numpy(), [2, 0, 0, 4, 0])
    assert step(np.array([1.0, 2.0, 3.0], np.float32), np.array([1, 2, 4])).item() == 18.0
    np.testing.assert_array_equal(buf.numpy(), [2, 2, 4, 4, 6])


def test_unfold_errors_and_0d() -> None:
    x = gc.tensor(np.arange(5.0, dtype=np.float32))
    t = torch.arange(5.0)
    for args in [(0, 6, 1), (0, 2, 0), (0, 2, -1)]:
        with pytest.raises(RuntimeError) as want:
            t.unfold(*args)
        with pytest.raises(RuntimeError) as got:
            x.unfold(*args)
        assert str(got.value) == str(want.value)
    with pytest.raises(IndexError):
        x.unfold(1, 2, 1)
    with pytest.raises(TypeError, match="size"):
        x.unfold(0, 2.0, 1)
    np.testing.assert_array_equal(gc.tensor(3.0).unfold(0, 1, 1).numpy(),
                                  torch.tensor(3.0).unfold(0, 1, 1).numpy())
    with pytest.raises(RuntimeError, match="maximum size"):
        gc.tensor(3.0).unfold(0, 2, 1)


def test_unfold_of_the_batch_dim_when_compiled_says_why() -> None:
    step = gc.compile(lambda x: x.unfold(0, 2, 1))
    with pytest.raises(NotImplementedError, match="symbolic"):
        step(np.zeros((4, 3), np.float32))
    fixed = gc.compile(lambda x: x.unfold(0, 2, 1), dynamic=False)
    np.testing.assert_array_equal(fixed(np.arange(12.0, dtype=np.float32).reshape(4, 3)).numpy(),
                                  torch.arange(12.0).reshape(4, 3).unfold(0, 2, 1).numpy())
