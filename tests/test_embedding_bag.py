"""``F.embedding_bag`` and ``nn.EmbeddingBag`` against PyTorch: sum / mean / max over bags from
offsets (with and without ``include_last_offset``, empty bags, an empty input) and from a 2-D
input, ``per_sample_weights``, ``padding_idx``; outputs and the gradients of the weight and
the per-sample weights eagerly (float32 and float64), and a compiled SGD step of the module
(offsets are data; bag counts and input lengths symbolic); the module's init, repr and
``from_pretrained``; PyTorch's errors; the step lowers to PTX that ptxas assembles."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.nn import functional as F

tF = torch.nn.functional
NUM, DIM = 10, 3


def _close(a: Any, b: Any, what: str, rtol: float = 1e-5) -> None:
    b = np.asarray(b)
    atol = max(1e-6, rtol * float(np.abs(b).max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(a), b, rtol=rtol, atol=atol, err_msg=what)


# name -> (input, offsets, include_last_offset)
FORMS: dict[str, tuple[np.ndarray, np.ndarray | None, bool]] = {
    "offsets": (np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 2, 2, 5]), False),
    "offsets_last_empty": (np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 3, 8]), False),
    "include_last": (np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 2, 2, 5, 8]), True),
    "include_last_one_bag": (np.array([7, 7, 1]), np.array([0, 3]), True),
    "input_2d": (np.array([[1, 2, 4], [5, 4, 3], [2, 9, 2], [2, 2, 2]]), None, False),
    "empty_input": (np.array([], np.int64), np.array([0, 0]), False),
    "int32": (np.array([3, 1, 3, 0], np.int32), np.array([0, 1], np.int32), False),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_functional_matches_torch(form: str, mode: str, dtype: Any) -> None:
    inp, off, last = FORMS[form]
    rng = np.random.default_rng(0)
    w = rng.standard_normal((NUM, DIM)).astype(dtype)
    w[5] = w[4]  # equal rows: max's ties go to the first position, as ATen's
    for padding_idx, use_psw in itertools.product([None, 2, -6],
                                                  [False, True] if mode == "sum" else [False]):
        psw = rng.standard_normal(inp.shape).astype(dtype) if use_psw else None
        kw = {"mode": mode, "include_last_offset": last, "padding_idx": padding_idx}
        tw = torch.tensor(w, requires_grad=True)
        tp = torch.tensor(psw, requires_grad=True) if use_psw else None
        tout = tF.embedding_bag(torch.tensor(inp), tw,
                                None if off is None else torch.tensor(off),
                                per_sample_weights=tp, **kw)
        (tout * tout.sin()).sum().backward()
        gw = nn.Parameter(w)
        gp = nn.Parameter(psw) if use_psw else None
        out = F.embedding_bag(inp, gw, off, per_sample_weights=gp, **kw)
        (out * out.sin()).sum().backward()
        what = f"{form}/{mode} padding_idx={padding_idx} psw={use_psw}"
        rtol = 1e-5 if dtype == np.float32 else 1e-12
        assert out.dtype == gw.dtype and tuple(out.shape) == tuple(tout.shape), what
        _close(out.numpy(), tout.detach().numpy(), what, rtol)
        _close(gw.grad.numpy(), tw.grad.numpy(), what + " weight grad", rtol)
        if use_psw:
            _close(gp.grad.numpy(), tp.grad.numpy(), what + " per_sample_weights grad", rtol)


# -- the module, compiled ----------------------------------------------------------------------
# name -> (module kwargs, calls: [(input, offsets)], per_sample_weights)
STEPS: dict[str, tuple[dict[str, Any], list[tuple[np.ndarray, np.ndarray | None]], bool]] = {
    "sum_offsets_psw": ({"mode": "sum"}, [
        (np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 2, 2, 5])),
        (np.array([1, 2, 4, 5, 4, 3, 2, 9, 7, 7, 1]), np.array([0, 3, 8, 9, 9]))], True),
    "mean_offsets_padding": ({"mode": "mean", "padding_idx": 2}, [
        (np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 2, 2, 5])),
        (np.array([2, 2, 4, 5, 4, 3, 2, 9, 7, 7, 1]), np.array([0, 2, 8, 9, 9]))], False),
    "max_offsets_padding": ({"mode": "max", "padding_idx": 4}, [
        (np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 2, 2, 5])),
        (np.array([4, 4, 4, 5, 4, 3, 2, 9, 7, 7, 1]), np.array([0, 3, 8, 9, 9]))], False),
    "sum_include_last": ({"mode": "sum", "include_last_offset": True}, [
        (np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 2, 2, 5, 8])),
        (np.array([1, 2, 4, 5, 4, 3, 2, 9, 7, 7, 1]), np.array([0, 3, 8, 11]))], False),
    "max_include_last": ({"mode": "max", "include_last_offset": True}, [
        (np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 2, 2, 5, 8])),
        (np.array([1, 2, 4, 5, 4, 3, 2, 9, 7, 7, 1]), np.array([0, 3, 8, 11]))], False),
    "mean_2d": ({"mode": "mean"}, [
        (np.array([[1, 2, 4], [5, 4, 3], [2, 9, 2]]), None),
        (np.array([[1, 2, 4], [5, 4, 3], [2, 9, 2], [0, 0, 7], [6, 8, 8]]), None)], False),
    "max_2d_padding": ({"mode": "max", "padding_idx": 2}, [
        (np.array([[1, 2, 4], [5, 4, 3], [2, 2, 2]]), None),
        (np.array([[1, 2, 4], [5, 4, 3], [2, 9, 2], [0, 0, 7], [6, 8, 8]]), None)], False),
    "sum_2d_psw_padding": ({"mode": "sum", "padding_idx": 0}, [
        (np.array([[1, 0, 4], [5, 4, 3], [2, 9, 2]]), None),
        (np.array([[1, 2, 4], [5, 4, 3], [2, 9, 2], [0, 0, 7], [6, 8, 8]]), None)], True),
}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(STEPS))
def test_module_trains_like_torch(name: str, mode: str) -> None:
    kwargs, calls, use_psw = STEPS[name]
    torch.manual_seed(0)
    tm = torch.nn.EmbeddingBag(NUM, DIM, **kwargs)
    gm = nn.EmbeddingBag(NUM, DIM, **kwargs)
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    gopt = optim.SGD(gm.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)

    has_off = calls[0][1] is not None

    def loss_step(out: Any) -> Any:
        (out * out.sin()).sum().backward()
        gopt.step()
        return out

    # one positional signature per case (a compiled step takes arrays, not None)
    if has_off and use_psw:
        def step(inp: Any, off: Any, psw: Any) -> Any:
            gopt.zero_grad()
            return loss_step(gm(inp, off, psw))
    elif has_off:
        def step(inp: Any, off: Any) -> Any:  # type: ignore[misc]
            gopt.zero_grad()
            return loss_step(gm(inp, off))
    elif use_psw:
        def step(inp: Any, psw: Any) -> Any:  # type: ignore[misc]
            gopt.zero_grad()
            return loss_step(gm(inp, per_sample_weights=psw))
    else:
        def step(inp: Any) -> Any:  # type: ignore[misc]
            gopt.zero_grad()
            return loss_step(gm(inp))

    fn = gc.compile(step) if mode == "compiled" else step
    rng = np.random.default_rng(1)
    for it, (inp, off) in enumerate(calls):
        psw = rng.standard_normal(inp.shape).astype(np.float32) if use_psw else None
        topt.zero_grad()
        tout = tm(torch.tensor(inp), None if off is None else torch.tensor(off),
                  None if psw is None else torch.tensor(psw))
        (tout * tout.sin()).sum().backward()
        tgrad = tm.weight.grad.numpy().copy()
        topt.step()
        out = fn(*[a for a in (inp, off, psw) if a is not None])
        what = f"{name} (call {it})"
        _close(np.asarray(out), tout.detach().numpy(), what + " output")
        _close(gm.weight.grad.numpy(), tgrad, what + " weight grad")
        _close(gm.weight.numpy(), tm.weight.detach().numpy(), what + " updated weight")
    if mode == "compiled":
        assert fn.compile_count == 1


def test_compiled_bad_offsets_stop_the_step() -> None:
    """Inside a compiled step offsets are data: one past the input, or a first offset that is
    not 0, stops the step at the native bounds check before any update is made."""
    w = nn.Parameter(np.ones((NUM, DIM), np.float32))
    opt = optim.SGD([w], lr=0.1)

    @gc.compile
    def step(inp: Any, off: Any) -> Any:
        opt.zero_grad()
        out = F.embedding_bag(inp, w, off, mode="sum")
        out.sum().backward()
        opt.step()
        return out

    np.testing.assert_array_equal(np.asarray(step(np.array([1, 2, 3]), np.array([0, 1]))),
                                  [[1, 1, 1], [2, 2, 2]])
    before = w.numpy().copy()
    for off in ([0, 4], [1, 2]):
        with pytest.raises(IndexError):
            step(np.array([1, 2, 3]), np.array(off))
    np.testing.assert_array_equal(w.numpy(), before)


# -- module details ----------------------------------------------------------------------------
def test_module_init_repr_and_pretrained() -> None:
    gc.manual_seed(3)
    m = nn.EmbeddingBag(50, 40, padding_idx=-3, mode="max")
    t = torch.nn.EmbeddingBag(50, 40, padding_idx=-3, mode="max")
    assert m.padding_idx == t.padding_idx == 47
    assert tuple(m.weight.shape) == (50, 40) and m.weight.dtype == gc.float32
    np.testing.assert_array_equal(m.weight.numpy()[47], 0)
    w = np.delete(m.weight.numpy(), 47, 0)
    assert abs(w.mean()) < 0.1 and abs(w.std() - 1) < 0.1  # N(0, 1), as PyTorch's
    assert repr(m) == repr(t)
    for kw in ({}, {"max_norm": 1.0, "norm_type": 1.0, "scale_grad_by_freq": True}):
        assert repr(nn.EmbeddingBag(5, 2, **kw)) == repr(torch.nn.EmbeddingBag(5, 2, **kw))
    assert list(m.state_dict()) == list(t.state_dict())
    emb = np.arange(12, dtype=np.float32).reshape(4, 3)
    p = nn.EmbeddingBag.from_pretrained(emb, mode="sum")
    tp = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(emb), mode="sum")
    assert not p.weight.requires_grad and not tp.weight.requires_grad
    idx = np.array([[0, 3], [1, 1]])
    np.testing.assert_array_equal(p(idx).numpy(), tp(torch.tensor(idx)).numpy())
    assert nn.EmbeddingBag.from_pretrained(emb, freeze=False).weight.requires_grad
    d = nn.EmbeddingBag(4, 3, dtype=gc.float64)
    assert d.weight.dtype == gc.float64
    with pytest.raises(AssertionError):
        nn.EmbeddingBag(4, 3, padding_idx=4)
    with pytest.raises(AssertionError):
        nn.EmbeddingBag(4, 3, _weight=np.zeros((3, 3), np.float32))


def test_argument_order_swap_warns() -> None:
    w = np.random.default_rng(4).standard_normal((NUM, DIM)).astype(np.float32)
    inp, off = np.array([1, 2, 3]), np.array([0, 2])
    with pytest.warns(UserWarning, match="Argument order"):
        out = F.embedding_bag(w, inp, off)
    np.testing.assert_allclose(out.numpy(), tF.embedding_bag(
        torch.tensor(inp), torch.tensor(w), torch.tensor(off)).numpy(), rtol=1e-6)


_I, _O, _W = np.array([1, 2, 3, 4]), np.array([0, 2]), np.zeros((NUM, DIM), np.float32)

BAD: dict[str, Any] = {
    "mode": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O), mode="foo"),
    "no_offsets": lambda f, c: f.embedding_bag(c(_I), c(_W)),
    "offsets_with_2d": lambda f, c: f.embedding_bag(c(_I.reshape(2, 2)), c(_W), c(_O)),
    "offsets_2d": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O.reshape(1, 2))),
    "input_3d": lambda f, c: f.embedding_bag(c(_I.reshape(1, 2, 2)), c(_W), c(_O)),
    "weight_1d": lambda f, c: f.embedding_bag(c(_I), c(_W[0]), c(_O)),
    "first_offset": lambda f, c: f.embedding_bag(c(_I), c(_W), c(np.array([1, 2]))),
    "last_offset": lambda f, c: f.embedding_bag(c(_I), c(_W), c(np.array([0, 5]))),
    "float_indices": lambda f, c: f.embedding_bag(c(_I.astype(np.float32)), c(_W), c(_O)),
    "float_offsets": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O.astype(np.float32))),
    "int_weight": lambda f, c: f.embedding_bag(c(_I), c(_W.astype(np.int32)), c(_O)),
    "psw_mean": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O), mode="mean",
                                             per_sample_weights=c(np.ones(4, np.float32))),
    "psw_shape": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O), mode="sum",
                                              per_sample_weights=c(np.ones(3, np.float32))),
    "psw_dtype": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O), mode="sum",
                                              per_sample_weights=c(np.ones(4))),
    "max_scale_grad": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O), mode="max",
                                                   scale_grad_by_freq=True),
    "max_sparse": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O), mode="max",
                                               sparse=True),
    "index_range": lambda f, c: f.embedding_bag(c(np.array([1, 20])), c(_W), c(_O)),
    "index_negative_max": lambda f, c: f.embedding_bag(c(np.array([1, -1])), c(_W), c(_O),
                                                       mode="max"),
    "index_range_padding": lambda f, c: f.embedding_bag(c(np.array([1, 20])), c(_W), c(_O),
                                                        padding_idx=1),
    "include_last_no_offsets": lambda f, c: f.embedding_bag(
        c(_I), c(_W), c(np.array([], np.int64)), include_last_offset=True),
    "padding_range": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O), padding_idx=10),
    "padding_range_neg": lambda f, c: f.embedding_bag(c(_I), c(_W), c(_O), padding_idx=-11),
    "2d_empty_bags": lambda f, c: f.embedding_bag(c(np.zeros((2, 0), np.int64)), c(_W)),
    "decreasing_offsets": lambda f, c: f.embedding_bag(c(_I), c(_W), c(np.array([0, 3, 2])),
                                                       mode="sum"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_errors_match_torch(case: str) -> None:
    call = BAD[case]
    with pytest.raises(Exception) as want:
        call(tF, torch.tensor)
    with pytest.raises(want.type) as got:
        call(F, gc.tensor)
    # ATen's message for decreasing offsets is an internal assert's; the 2-D one names the
    # offsets' Python type
    if case not in ("decreasing_offsets", "offsets_with_2d"):

        def norm(e: BaseException) -> str:  # first line, shapes printed without torch.Size
            line = str(e).split("\n")[0].replace("torch.Size(", "")
            return line.replace("(", "").replace(")", "")

        assert norm(got.value) == norm(want.value)


@pytest.mark.parametrize("kw", [{"scale_grad_by_freq": True}, {"sparse": True}],
                         ids=["scale_grad", "sparse"])
def test_unsupported_options_raise(kw: dict[str, Any]) -> None:
    name = next(iter(kw))
    with pytest.raises(NotImplementedError, match=name):
        F.embedding_bag(_I, _W, _O, mode="sum", **kw)
    with pytest.raises(NotImplementedError, match=name):
        nn.EmbeddingBag(NUM, DIM, mode="mean", **kw)(_I, _O)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")
@pytest.mark.parametrize("mode", ["mean", "max"])
def test_step_lowers_to_ptx(mode: str, tmp_path: Path) -> None:
    """The bag index (scatter_add + cumsum), the reductions and their gradients are
    primitives the PTX backend lowers: the cuda step's PTX assembles (no GPU needed)."""
    m = nn.EmbeddingBag(NUM, DIM, mode=mode, padding_idx=1)
    opt = optim.SGD(m.parameters(), lr=0.1)

    def step(inp: Any, off: Any) -> Any:
        opt.zero_grad()
        out = m(inp, off)
        (out * out).sum().backward()
        opt.step()
        return out

    args = (np.array([1, 2, 3, 4, 5]), np.array([0, 2]))
    text = gc.compile(step, device="cuda", example_args=args).ir("ptx")
    src = tmp_path / "k.ptx"
    src.write_text(text)
    res = subprocess.run([shutil.which("ptxas") or "ptxas", "--gpu-name", "sm_80", "-O3",
                          str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
