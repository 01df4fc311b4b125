"""Shape and creation ops (graphc/shape_ops.py) against PyTorch: values and gradients eagerly,
and compiled (one compile over two batch sizes, gradients to a parameter); ops whose result
shape depends on data values raise NotImplementedError while tracing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _op_parity import check_compiled, check_eager
from _op_parity import loss as _loss
from _op_parity import np_of as _np
from _op_parity import outs as _outs
from _torch import torch

import graphc as gc
import graphc.nn.functional as F

TF = torch.nn.functional
RTOL, ATOL = 1e-5, 1e-5


# each case: (id, shape of x without the batch dim, f(module, x)) where module is torch or gc
# and x is (batch, *shape); the same expression runs in both frameworks
CASES = [
    ("tril", (3, 4), lambda m, x: m.tril(x, 1)),
    ("triu", (3, 4), lambda m, x: x.triu(diagonal=-1)),
    ("flip_batch", (3, 4), lambda m, x: m.flip(x, [0, 2])),
    ("flip_last", (3, 4), lambda m, x: x.flip(-1)),
    ("fliplr", (3, 4), lambda m, x: m.fliplr(x)),
    ("flipud", (3, 4), lambda m, x: x.flipud()),
    ("roll_dim", (3, 4), lambda m, x: x.roll(1, 2)),
    ("roll_dims", (3, 4), lambda m, x: m.roll(x, (1, -2), (0, 1))),
    ("roll_flat", (3, 4), lambda m, x: m.roll(x, 5)),
    ("repeat", (3, 4), lambda m, x: x.repeat(2, 1, 2)),
    ("repeat_more", (3, 4), lambda m, x: x.repeat(1, 2, 1, 1)),
    ("tile", (3, 4), lambda m, x: m.tile(x, (2,))),
    ("repeat_interleave", (3, 4), lambda m, x: x.repeat_interleave(2, dim=1)),
    ("repeat_interleave_batch", (3, 4), lambda m, x: m.repeat_interleave(x, 3, dim=0)),
    ("split_int", (3, 4), lambda m, x: x.split(3, dim=2)),
    ("split_sizes", (3, 4), lambda m, x: m.split(x, [1, 2], dim=1)),
    ("chunk", (3, 4), lambda m, x: x.chunk(3, dim=-1)),
    ("unbind", (3, 4), lambda m, x: m.unbind(x, 1)),
    ("unflatten", (3, 4), lambda m, x: x.unflatten(2, (2, -1))),
    ("movedim", (3, 4), lambda m, x: m.movedim(x, 0, 2)),
    ("movedim_seq", (3, 4), lambda m, x: x.movedim((0, 1), (2, 0))),
    ("moveaxis", (3, 4), lambda m, x: m.moveaxis(x, -1, 0)),
    ("swapaxes", (3, 4), lambda m, x: x.swapaxes(0, 1)),
    ("swapdims", (3, 4), lambda m, x: m.swapdims(x, 2, 1)),
    ("diagonal", (3, 4), lambda m, x: x.diagonal(1, 1, 2)),
    ("diagonal_neg", (3, 4), lambda m, x: m.diagonal(x, -1, -1, -2)),
    ("diag_embed", (3, 4), lambda m, x: m.diag_embed(x, 1)),
    ("diag_embed_dims", (3, 4), lambda m, x: x.diag_embed(-1, 0, 2)),
    ("diag_2d", (3, 4), lambda m, x: m.diag(x.sum(0), 1)),
    ("diag_1d", (3, 4), lambda m, x: m.diag(x.sum((0, 1)), -1)),
    ("einsum_bmm", (3, 4), lambda m, x: m.einsum("bij,bkj->bik", x, x)),
    ("einsum_perm", (3, 4), lambda m, x: m.einsum("bij->jb", x)),
    ("einsum_implicit", (3, 4), lambda m, x: m.einsum("bij,bij", x, x)),
    ("einsum_ellipsis", (3, 4), lambda m, x: m.einsum("...j,kj->...k", x, x[0])),
    ("einsum_three", (3, 4), lambda m, x: m.einsum("bij,bik,bjk->b", x, x, m.bmm(x.mT, x))),
    ("einsum_diag", (3, 3), lambda m, x: m.einsum("bii->bi", x)),
    ("einsum_trace", (3, 3), lambda m, x: m.einsum("bii", x)),
    ("bmm", (3, 4), lambda m, x: m.bmm(x, x.transpose(1, 2))),
    ("baddbmm", (3, 4), lambda m, x: x[:, :, :3].baddbmm(x, x.transpose(1, 2), beta=0.5,
                                                          alpha=2.0)),
    ("addmm", (3, 4), lambda m, x: m.addmm(x[0, :, 0], x.sum(1), x[0].T, alpha=0.5)),
    ("mm", (3, 4), lambda m, x: m.mm(x.sum(1), x[0].T)),
    ("mv", (3, 4), lambda m, x: m.mv(x.sum(1), x[0, 0])),
    ("addmv", (3, 4), lambda m, x: x[:, 0, 0].addmv(x.sum(1), x[0, 0], beta=2.0)),
    ("outer", (3, 4), lambda m, x: m.outer(x[:, 0, 0], x[0, 0])),
    ("ger", (3, 4), lambda m, x: x[:, 0, 0].ger(x[0, 0])),
    ("dot", (3, 4), lambda m, x: m.dot(x[:, 0, 0], x[:, 1, 1])),
    ("kron", (3, 4), lambda m, x: m.kron(x, x[0, :2, :2])),
    ("masked_fill", (3, 4), lambda m, x: x.masked_fill(x > 0.5, -2.0)),
    ("masked_fill_tensor", (3, 4), lambda m, x: m.masked_fill(x, x[0] > 0, x[0, 0, 0])),
    ("t", (3, 4), lambda m, x: x.sum(0).t() + m.t(x[:, 0, :])[:, :1]),
    ("t_1d", (4,), lambda m, x: x[0].t() * 2),
    ("narrow", (3, 4), lambda m, x: x.narrow(2, 1, 2)),
    ("narrow_negative", (3, 4), lambda m, x: m.narrow(x, -1, -3, 2)),
    ("narrow_batch", (3, 4), lambda m, x: x.narrow(0, 1, 1)),
    ("new_full", (3, 4), lambda m, x: x * x.new_full((3, 4), 2.5) + x.new_ones(4)
     - x.new_zeros((1, 4)) + x.new_empty(3, 1).zero_()),
    ("new_tensor", (3, 4), lambda m, x: x + x.new_tensor([1.0, 2.0, 3.0, 4.0])),
    ("pixel_shuffle", (8, 2, 3), lambda m, x: m.nn.functional.pixel_shuffle(x, 2)),
    ("pixel_shuffle_5d", (2, 4, 2, 2), lambda m, x: m.nn.PixelShuffle(2)(x)),
    ("pixel_unshuffle", (2, 4, 6), lambda m, x: m.nn.functional.pixel_unshuffle(x, 2)),
    ("pixel_unshuffle_module", (1, 3, 6), lambda m, x: m.nn.PixelUnshuffle(3)(x)),
    ("cosine_similarity", (3, 4), lambda m, x: m.nn.functional.cosine_similarity(
        x, x.flip(-1) + 0.5, dim=-1)),
    ("cosine_similarity_broadcast", (3, 4), lambda m, x: m.nn.CosineSimilarity(1)(x, x[0])),
    ("prelu_channels", (3, 4), lambda m, x: m.nn.functional.prelu(x, x[0, :, 1])),
    ("prelu_single", (3, 4), lambda m, x: m.nn.functional.prelu(x, x[0, 0, :1])),
    ("reflection_pad2d", (3, 4, 5), lambda m, x: m.nn.ReflectionPad2d((1, 2, 2, 1))(x)),
    ("replication_pad1d", (3, 4), lambda m, x: m.nn.ReplicationPad1d((2, 1))(x)),
    ("reflection_pad1d", (3, 4), lambda m, x: m.nn.ReflectionPad1d(2)(x)),
    ("zero_pad2d", (3, 4), lambda m, x: m.nn.ZeroPad2d(1)(x)),
    ("constant_pad2d", (3, 4), lambda m, x: m.nn.ConstantPad2d((0, 1, 2, 0), 0.5)(x)),
    ("zero_pad1d", (3, 4), lambda m, x: m.nn.ZeroPad1d((1, 0))(x)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_matches_torch(case: Any) -> None:
    _, shape, f = case
    check_eager(f, shape, RTOL, ATOL, RTOL, ATOL)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compiled_matches_torch(case: Any) -> None:
    """One compile serving batch sizes 2 and 5: outputs and the parameter's gradient."""
    _, shape, f = case
    check_compiled(f, shape, RTOL, ATOL)


# -- eager details: dtypes, edge cases, errors -------------------------------------------------
def _same(a: Any, b: Any) -> None:
    assert tuple(a.shape) == tuple(b.shape)
    assert str(_np(a).dtype) == str(_np(b).dtype), (_np(a).dtype, _np(b).dtype)
    np.testing.assert_allclose(_np(a), _np(b), rtol=RTOL, atol=ATOL)


INT = np.arange(24, dtype=np.int64).reshape(2, 3, 4) - 7
BOOL = (INT % 3) == 0


@pytest.mark.parametrize("data", [INT, BOOL, INT.astype(np.int32)], ids=["i64", "bool", "i32"])
@pytest.mark.parametrize("f", [
    lambda m, x: m.tril(x), lambda m, x: m.triu(x, 2), lambda m, x: m.flip(x, (1, 2)),
    lambda m, x: m.roll(x, -3), lambda m, x: x.repeat(2, 1, 1), lambda m, x: x.tile((2, 2)),
    lambda m, x: x.repeat_interleave(2), lambda m, x: m.diagonal(x, 0, 1, 2),
    lambda m, x: m.diag_embed(x), lambda m, x: m.movedim(x, 0, -1),
    lambda m, x: m.kron(x, x[0]), lambda m, x: x.split([1, 2], 1)[1],
])
def test_non_float_dtypes(data: np.ndarray, f: Any) -> None:
    _same(f(gc, gc.tensor(data)), f(torch, torch.tensor(data)))


@pytest.mark.parametrize("f", [
    lambda m, x: m.flip(x, ()), lambda m, x: m.roll(x, 2), lambda m, x: x.repeat(3),
    lambda m, x: x.repeat(2, 3), lambda m, x: m.tile(x, (2,)),
    lambda m, x: m.diag_embed(x.reshape(1)),
])
def test_zero_dim(f: Any) -> None:
    _same(f(gc, gc.tensor(2.5)), f(torch, torch.tensor(2.5)))


@pytest.mark.parametrize("f", [
    lambda m, x: m.tril(x), lambda m, x: m.flip(x, (0,)), lambda m, x: m.roll(x, 1, 1),
    lambda m, x: x.repeat(2, 1), lambda m, x: m.diagonal(x), lambda m, x: x.split(2, 1),
    lambda m, x: m.einsum("ij->j", x), lambda m, x: m.diag_embed(x),
])
def test_empty(f: Any) -> None:
    x = np.zeros((0, 3), np.float32)
    for a, b in zip(_outs(f(gc, gc.tensor(x))), _outs(f(torch, torch.tensor(x)))):
        _same(a, b)


def test_split_chunk_counts() -> None:
    for n, k in [(5, 2), (6, 4), (7, 3), (3, 5), (1, 1)]:
        x = np.arange(n, dtype=np.float32)
        assert [tuple(t.shape) for t in gc.tensor(x).chunk(k)] == \
            [tuple(t.shape) for t in torch.tensor(x).chunk(k)]
        assert [tuple(t.shape) for t in gc.split(gc.tensor(x), k)] == \
            [tuple(t.shape) for t in torch.split(torch.tensor(x), k)]
    with pytest.raises(RuntimeError, match="sum exactly"):
        gc.split(gc.zeros(5), [2, 2])


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("i,j->ij", [(3,), (4,)]), ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]), ("ij->", [(2, 3)]), ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]), ("ba", [(2, 3)]), ("iij->ji", [(3, 3, 2)]),
    ("i,i->", [(4,), (4,)]), ("ij,ij->ij", [(2, 3), (2, 3)]), ("i...->...", [(2, 3, 4)]),
    ("Ab,bA", [(2, 3), (3, 2)]), ("ij, jk", [(2, 3), (3, 2)]), ("ij,kl->ijkl", [(1, 2), (3, 1)]),
])
def test_einsum_equations(eq: str, shapes: list) -> None:
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    gs = [gc.tensor(x, requires_grad=True) for x in xs]
    ty, gy = torch.einsum(eq, *ts), gc.einsum(eq, *gs)
    _same(gy, ty)
    _loss(ty).backward()
    _loss(gy).backward()
    for a, b in zip(gs, ts):
        np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=1e-4, atol=1e-5)


def test_einsum_int_and_list_form() -> None:
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    _same(gc.einsum("ij,kj->ik", [gc.tensor(a), gc.tensor(a)]),
          torch.einsum("ij,kj->ik", [torch.tensor(a), torch.tensor(a)]))
    with pytest.raises(RuntimeError):
        gc.einsum("ij,jk", gc.zeros(2, 3), gc.zeros(4, 2))


def test_diag_and_diagonal_offsets() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for k in range(-4, 6):
        _same(gc.diag(gc.tensor(x), k), torch.diag(torch.tensor(x), k))
        _same(gc.tensor(x).diagonal(k), torch.tensor(x).diagonal(k))
        _same(gc.diag(gc.tensor(x[0]), k), torch.diag(torch.tensor(x[0]), k))


def test_one_hot() -> None:
    idx = np.array([[0, 3], [2, 1]], np.int64)
    _same(F.one_hot(gc.tensor(idx)), TF.one_hot(torch.tensor(idx)))
    _same(F.one_hot(gc.tensor(idx), 6), TF.one_hot(torch.tensor(idx), 6))
    _same(F.one_hot(gc.tensor(idx[0, 0]), 2), TF.one_hot(torch.tensor(idx[0, 0]), 2))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(gc.tensor(idx), 3)
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(gc.tensor([1.0]), 3)

    @gc.compile
    def f(t: Any) -> Any:
        return F.one_hot(t, 5).float() * 2

    for n in (2, 4):
        t = np.arange(n, dtype=np.int64) % 5
        _same(f(gc.tensor(t)), TF.one_hot(torch.tensor(t), 5).float() * 2)

    with pytest.raises(IndexError, match="out of range"):  # checked as PyTorch checks
        f(np.array([0, 5], np.int64))

    @gc.compile
    def g(t: Any) -> Any:
        return F.one_hot(t)

    with pytest.raises(NotImplementedError, match="num_classes"):
        g(gc.tensor(idx))


def test_flip_dims_keyword_and_where_method() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _same(gc.flip(gc.tensor(x), dims=(0, 1)), torch.flip(torch.tensor(x), dims=(0, 1)))
    _same(gc.tensor(x).flip(dims=[1]), torch.tensor(x).flip(dims=[1]))
    _same(gc.tensor(x).where(gc.tensor(x) > 2, 0.5),
          torch.tensor(x).where(torch.tensor(x) > 2, 0.5))


@pytest.mark.parametrize("name, shapes", [("addmm_", [(2, 4), (2, 3), (3, 4)]),
                                          ("baddbmm_", [(2, 2, 4), (2, 2, 3), (2, 3, 4)]),
                                          ("addmv_", [(2,), (2, 3), (3,)])])
def test_inplace_products(name: str, shapes: list) -> None:
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    g = gc.tensor(xs[0])
    t = torch.tensor(xs[0])
    getattr(g, name)(gc.tensor(xs[1]), gc.tensor(xs[2]), beta=0.5, alpha=2.0)
    getattr(t, name)(torch.tensor(xs[1]), torch.tensor(xs[2]), beta=0.5, alpha=2.0)
    _same(g, t)


def test_tril_indices_and_arange_inside_compiled_step() -> None:
    @gc.compile
    def f(x: Any) -> Any:
        return x * 2 + gc.tril_indices(2, 2)[1].float() + gc.arange(3)

    for n in (2, 3):
        x = np.ones((n, 3), np.float32)
        want = torch.tensor(x) * 2 + torch.tril_indices(2, 2)[1].float() + torch.arange(3)
        _same(f(gc.tensor(x)), want)
    assert f.compile_count == 1


def test_masked_fill_inplace_and_where_scalars() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    m = np.array([True, False, True])
    gx, tx = gc.tensor(x), torch.tensor(x)
    gx.masked_fill_(gc.tensor(m), 7.0)
    tx.masked_fill_(torch.tensor(m), 7.0)
    _same(gx, tx)
    i = np.arange(4, dtype=np.int64)
    _same(gc.tensor(i).masked_fill(gc.tensor(i > 1), 9), torch.tensor(i).masked_fill(
        torch.tensor(i > 1), 9))
    with pytest.raises(RuntimeError, match="boolean"):
        gc.tensor(x).masked_fill(gc.tensor(x), 1.0)
    c = np.array([True, False])
    for a, b in [(1.0, 0.0), (1, 0), (1, 0.5), (True, False)]:
        _same(gc.where(gc.tensor(c), a, b), torch.where(torch.tensor(c), a, b))


def test_repeat_interleave_tensor_repeats() -> None:
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    r = np.array([1, 0, 2], np.int64)
    _same(gc.repeat_interleave(gc.tensor(x), gc.tensor(r), dim=0),
          torch.repeat_interleave(torch.tensor(x), torch.tensor(r), dim=0))
    _same(gc.repeat_interleave(gc.tensor(r)), torch.repeat_interleave(torch.tensor(r)))
    _same(gc.tensor(x).repeat_interleave(gc.tensor(2)),
          torch.tensor(x).repeat_interleave(torch.tensor(2)))

    @gc.compile
    def f(t: Any, reps: Any) -> Any:
        return t.repeat_interleave(reps, dim=0)

    with pytest.raises(NotImplementedError, match="repeats"):
        f(gc.tensor(x), gc.tensor(r))


def test_symbolic_sizes_that_cannot_split() -> None:
    @gc.compile
    def f(t: Any) -> Any:
        return t.chunk(2, 0)[0]

    with pytest.raises(NotImplementedError, match="symbolic size"):
        f(gc.zeros(4, 3))


# -- creation --------------------------------------------------------------------------------------
@pytest.mark.parametrize("f", [
    lambda m: m.eye(3), lambda m: m.eye(2, 4, dtype=m.int64), lambda m: m.eye(0),
    lambda m: m.linspace(-1, 2, 7), lambda m: m.linspace(0, 1, 1), lambda m: m.linspace(0, 1, 0),
    lambda m: m.linspace(3, -3.5, 10, dtype=m.float64), lambda m: m.linspace(0, 10, 5,
                                                                               dtype=m.int64),
    lambda m: m.logspace(-2, 2, 9), lambda m: m.logspace(0, 3, 4, base=2),
    lambda m: m.tril_indices(3, 4), lambda m: m.tril_indices(4, 3, -1),
    lambda m: m.triu_indices(3, 3, 1), lambda m: m.triu_indices(2, 5, -1),
    lambda m: m.full_like(m.zeros(2, 3), 4.5), lambda m: m.full_like(m.zeros(2, dtype=m.int64), 3),
    lambda m: m.empty(2, 3).shape and m.zeros(2, 3, device="cpu"),
    lambda m: m.empty_like(m.ones(2, 3)).zero_(),  # its memory may hold NaN, so not * 0
    lambda m: m.arange(5, device="cpu"),
    lambda m: m.ones(2, device="cpu"), lambda m: m.full((2,), 1.5, device="cpu"),
    lambda m: m.zeros_like(m.ones(2), device="cpu"), lambda m: m.ones_like(m.ones(2),
                                                                           device="cpu"),
    lambda m: m.rand(2, device="cpu") * 0, lambda m: m.randn(2, device="cpu") * 0,
])
def test_creation_matches_torch(f: Any) -> None:
    _same(f(gc), f(torch))


def test_meshgrid() -> None:
    a, b, c = np.arange(3.0, dtype=np.float32), np.arange(2.0, dtype=np.float32), \
        np.arange(4.0, dtype=np.float32)
    for ind in ("ij", "xy"):
        got = gc.meshgrid(gc.tensor(a), gc.tensor(b), gc.tensor(c), indexing=ind)
        want = torch.meshgrid(torch.tensor(a), torch.tensor(b), torch.tensor(c), indexing=ind)
        for x, y in zip(got, want):
            _same(x, y)
    got = gc.meshgrid([gc.tensor(a), gc.tensor(b)], indexing="xy")
    want = torch.meshgrid([torch.tensor(a), torch.tensor(b)], indexing="xy")
    for x, y in zip(got, want):
        _same(x, y)


def test_creation_inside_compiled_step() -> None:
    @gc.compile
    def f(x: Any) -> Any:
        e = gc.eye(3)
        s = gc.linspace(0, 1, 3)
        return x @ e + s + gc.full_like(x, 2.0) + gc.tril(gc.ones(3, 3))[0]

    for n in (1, 4):
        x = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
        tx = torch.tensor(x)
        want = tx @ torch.eye(3) + torch.linspace(0, 1, 3) + 2.0 + torch.tril(torch.ones(3, 3))[0]
        _same(f(gc.tensor(x)), want)


def test_device_other_than_cpu_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="CPU"):
        gc.eye(2, device="cuda")
    with pytest.raises(NotImplementedError, match="CPU"):
        gc.zeros(2, device="cuda")


def test_prelu_module_matches_torch() -> None:
    """nn.PReLU's weight (one slope, and one per channel): values and both gradients."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    for n in (1, 3):
        tm, gm = torch.nn.PReLU(n, init=0.1), gc.nn.PReLU(n, init=0.1)
        assert repr(tm) == repr(gm)
        tx, gx = torch.tensor(x, requires_grad=True), gc.tensor(x, requires_grad=True)
        ty, gy = tm(tx), gm(gx)
        (ty * ty).sum().backward()
        (gy * gy).sum().backward()
        np.testing.assert_allclose(_np(gy), _np(ty), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(_np(gx.grad), _np(tx.grad), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(_np(gm.weight.grad), _np(tm.weight.grad), rtol=1e-4,
                                   atol=1e-4)
    with pytest.raises(RuntimeError, match="parameter numbers = 3 and channel size = 4"):
        gc.nn.PReLU(3)(gc.tensor(np.ones((2, 4), np.float32)))


def test_t_narrow_and_new_errors_and_sizes() -> None:
    x = gc.tensor(np.ones((2, 3, 4), np.float32))
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions, but "
                       "self is 3D"):
        x.t()
    with pytest.raises(IndexError, match="start out of range"):
        x.narrow(1, 4, 0)
    with pytest.raises(RuntimeError, match="start \\(2\\) \\+ length \\(2\\) exceeds"):
        x.narrow(1, 2, 2)
    with pytest.raises(RuntimeError, match="length must be non-negative"):
        x.narrow(1, 0, -1)
    assert x.new_zeros(2, dtype=gc.int64).dtype == gc.int64
    assert x.new_tensor([1, 2]).dtype == gc.float32  # self's dtype, not the data's
    assert (x.element_size(), x.nelement(), x.ndimension()) == (4, 24, 3)
    t = torch.ones(2, 3, 4)
    assert (t.element_size(), t.nelement(), t.ndimension()) == (4, 24, 3)


def test_narrow_guard_on_the_batch_dim() -> None:
    """On the symbolic batch dim, narrow's bound is a run-time guard: a batch too small for
    it raises before the step changes anything."""
    f = gc.compile(lambda x: x.narrow(0, 1, 2) * 2)
    np.testing.assert_allclose(_np(f(np.ones((3, 2), np.float32))), np.full((2, 2), 2.0))
    with pytest.raises(Exception, match="narrow"):
        f(np.ones((2, 2), np.float32))
    assert f.compile_count == 1


@pytest.mark.parametrize("f", [
    lambda m, x: m.nn.functional.pixel_shuffle(x, 2),  # 3 channels: not a multiple of 4
    lambda m, x: m.nn.functional.pixel_shuffle(x[0, 0], 2),  # 2-D
    lambda m, x: m.nn.functional.pixel_unshuffle(x, 2),  # height 5
    lambda m, x: m.nn.functional.pixel_unshuffle(x, 0),
])
def test_pixel_shuffle_errors_as_torch(f: Any) -> None:
    x = np.ones((2, 3, 5, 4), np.float32)
    with pytest.raises(RuntimeError) as want:
        f(torch, torch.tensor(x))
    with pytest.raises(RuntimeError) as got:
        f(gc, gc.tensor(x))
    assert type(got.value) is type(want.value)
