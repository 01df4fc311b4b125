"""``nn.AdaptiveLogSoftmaxWithLoss`` (graphc/nn/adaptive.py) against PyTorch's, with equal
weights: constructor attributes and ``state_dict`` keys, ``forward`` outputs, loss and the
gradients of the input and every parameter (float32 and float64, batched and unbatched, over
several cutoffs / ``div_value`` / ``head_bias``), ``log_prob`` and ``predict``, compiled SGD
training steps, PyTorch's exception types and messages, and ``state_dict`` round trips.

graphc's forward is dense (every cluster on every row, masks instead of ``nonzero``), so
these tests also cover batches where a cluster has no rows, or every row."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn

TNN = torch.nn
_rng = np.random.default_rng(1234)

# (in_features, n_classes, cutoffs, div_value, head_bias)
CONFIGS: list[tuple[int, int, list[int], float, bool]] = [
    (8, 10, [3, 6], 2.0, False),
    (16, 20, [4], 4.0, True),
    (12, 30, [2, 5, 11, 20], 1.5, False),
    (10, 9, [1, 2, 8], 4.0, True),           # one-class clusters and a size-1 shortlist
    (6, 12, [5, 9], 8.0, False),             # tail hidden sizes 0: 6 // 8 and 6 // 64
]
IDS = [f"in{c[0]}-n{c[1]}-cut{'_'.join(map(str, c[2]))}-div{c[3]}-bias{int(c[4])}"
       for c in CONFIGS]
TOL = {np.float32: {"rtol": 2e-5, "atol": 2e-6}, np.float64: {"rtol": 1e-12, "atol": 1e-13}}


def _np(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return t if isinstance(t, np.ndarray) else np.asarray(t.numpy())


def _pair(cfg: tuple, dtype: Any = np.float32) -> tuple[Any, Any]:
    """PyTorch's module (its own random init) and graphc's, loaded with the same weights."""
    inf, n, cut, div, bias = cfg
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    gdt = gc.float64 if dtype == np.float64 else gc.float32
    tm = TNN.AdaptiveLogSoftmaxWithLoss(inf, n, cut, div_value=div, head_bias=bias, dtype=tdt)
    gm = nn.AdaptiveLogSoftmaxWithLoss(inf, n, cut, div_value=div, head_bias=bias, dtype=gdt)
    with torch.no_grad():  # weights of order 1, so every cluster's log-softmax matters
        for p in tm.parameters():
            p.copy_(torch.tensor(_rng.standard_normal(tuple(p.shape))))
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return tm, gm


def _targets(n_rows: int, n_classes: int, cutoffs: list[int]) -> np.ndarray:
    """Random targets that hit the shortlist, every cluster, and both ends of the range."""
    t = _rng.integers(0, n_classes, n_rows)
    edges = [0, n_classes - 1] + list(cutoffs) + [c - 1 for c in cutoffs]
    t[:min(len(edges), n_rows)] = edges[:n_rows]
    return _rng.permutation(t).astype(np.int64)


def _close(got: Any, want: Any, tol: dict, err_msg: str = "") -> None:
    """``assert_allclose`` with the absolute tolerance scaled by the largest expected value:
    gradients are sums whose terms cancel, so a small element carries the rounding error of
    the large ones (float32 sums of terms near 50 leave errors near 1e-6)."""
    g, w = _np(got), _np(want)
    scale = float(np.abs(w).max()) if w.size else 0.0
    np.testing.assert_allclose(g, w, rtol=tol["rtol"], atol=max(tol["atol"], tol["rtol"] * scale),
                               err_msg=err_msg)


def _assert_grads(tm: Any, gm: Any, tol: dict) -> None:
    tgrads = {k: p.grad for k, p in tm.named_parameters()}
    ggrads = {k: p.grad for k, p in gm.named_parameters()}
    assert set(tgrads) == set(ggrads)
    for k, tg in tgrads.items():
        _close(ggrads[k], tg, tol, k)


# -- constructor ------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_attributes_and_state_dict_keys_are_torchs(cfg: tuple) -> None:
    inf, n, cut, div, bias = cfg
    tm = TNN.AdaptiveLogSoftmaxWithLoss(inf, n, cut, div_value=div, head_bias=bias)
    gm = nn.AdaptiveLogSoftmaxWithLoss(inf, n, cut, div_value=div, head_bias=bias)
    for attr in ("in_features", "n_classes", "cutoffs", "div_value", "head_bias",
                 "shortlist_size", "n_clusters", "head_size"):
        assert getattr(gm, attr) == getattr(tm, attr), attr
    assert isinstance(gm.head, nn.Linear) and isinstance(gm.tail, nn.ModuleList)
    assert len(gm.tail) == len(tm.tail)
    for gs, ts in zip(gm.tail, tm.tail):
        assert isinstance(gs, nn.Sequential) and len(gs) == 2
        for gl, tl in zip(gs, ts):
            assert (gl.in_features, gl.out_features, gl.bias) == \
                (tl.in_features, tl.out_features, None)
    tsd, gsd = tm.state_dict(), gm.state_dict()
    assert list(gsd) == list(tsd)
    for k, v in tsd.items():
        assert tuple(np.shape(gsd[k])) == tuple(v.shape), k
    assert [k for k, _ in gm.named_parameters()] == [k for k, _ in tm.named_parameters()]
    assert "(head): Linear" in repr(gm) and "(tail): ModuleList" in repr(gm)


def test_cutoffs_tuple_and_defaults() -> None:
    gm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, (3, 6))
    assert gm.cutoffs == [3, 6, 10] and gm.div_value == 4.0 and gm.head_bias is False
    assert gm.head.bias is None and gm.head.weight.dtype is gc.float32
    g64 = nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3], dtype=gc.float64, device="cpu")
    assert all(p.dtype is gc.float64 for p in g64.parameters())


def test_reset_parameters_redraws_every_weight_in_its_bounds() -> None:
    gm = nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 10], div_value=2.0, head_bias=True)
    before = {k: np.array(v) for k, v in gm.state_dict().items()}
    for p in gm.parameters():
        p.data = gc.tensor(np.full(tuple(p.shape), 5.0, np.float32))
    gm.reset_parameters()
    after = gm.state_dict()
    for k, v in before.items():
        a = np.asarray(after[k])
        assert a.shape == v.shape and not np.array_equal(a, v), k
        fan_in = 16 if k.startswith("head") or k.endswith(".0.weight") else \
            {"tail.0.1.weight": 8, "tail.1.1.weight": 4}[k]
        assert np.abs(a).max() <= 1 / np.sqrt(fan_in) + 1e-7, k


# -- forward ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_forward_values_and_gradients_match_torch(cfg: tuple, dtype: Any) -> None:
    tm, gm = _pair(cfg, dtype)
    inf, n, cut = cfg[:3]
    x = _rng.standard_normal((13, inf)).astype(dtype)
    t = _targets(13, n, cut)
    tx = torch.tensor(x, requires_grad=True)
    gx = gc.tensor(x, requires_grad=True)
    tout = tm(tx, torch.tensor(t))
    gout = gm(gx, gc.tensor(t))
    assert type(gout).__name__ == "_ASMoutput" and gout._fields == ("output", "loss")
    assert tuple(gout.output.shape) == (13,) and tuple(gout.loss.shape) == ()
    assert gout.output.dtype is (gc.float64 if dtype == np.float64 else gc.float32)
    tol = TOL[dtype]
    np.testing.assert_allclose(_np(gout.output), _np(tout.output), **tol)
    np.testing.assert_allclose(_np(gout.loss), _np(tout.loss), **tol)
    # a weighting of the outputs plus the loss, so each row's gradient is checked on its own
    w = _rng.standard_normal(13).astype(dtype)
    ((tout.output * torch.tensor(w)).sum() + tout.loss).backward()
    ((gout.output * gc.tensor(w)).sum() + gout.loss).backward()
    _close(gx.grad, tx.grad, tol)
    _assert_grads(tm, gm, tol)


@pytest.mark.parametrize("cfg", CONFIGS[:3], ids=IDS[:3])
def test_loss_backward_gradients_match_torch(cfg: tuple) -> None:
    tm, gm = _pair(cfg)
    x = _rng.standard_normal((9, cfg[0])).astype(np.float32)
    t = _targets(9, cfg[1], cfg[2])
    tx, gx = torch.tensor(x, requires_grad=True), gc.tensor(x, requires_grad=True)
    tm(tx, torch.tensor(t)).loss.backward()
    gm(gx, gc.tensor(t)).loss.backward()
    _close(gx.grad, tx.grad, TOL[np.float32])
    _assert_grads(tm, gm, TOL[np.float32])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_unbatched_input_matches_torch(cfg: tuple, dtype: Any) -> None:
    tm, gm = _pair(cfg, dtype)
    tol = TOL[dtype]
    for target in sorted({0, cfg[2][0], cfg[1] - 1}):
        x = _rng.standard_normal(cfg[0]).astype(dtype)
        tx, gx = torch.tensor(x, requires_grad=True), gc.tensor(x, requires_grad=True)
        tout = tm(tx, torch.tensor(target))
        gout = gm(gx, gc.tensor(np.int64(target)))
        assert tuple(gout.output.shape) == () and tuple(gout.loss.shape) == ()
        np.testing.assert_allclose(_np(gout.output), _np(tout.output), **tol)
        np.testing.assert_allclose(_np(gout.loss), _np(tout.loss), **tol)
        tm.zero_grad()
        gm.zero_grad()
        tout.loss.backward()
        gout.loss.backward()
        _close(gx.grad, tx.grad, tol)
        for (k, tp), (_, gp) in zip(tm.named_parameters(), gm.named_parameters()):
            if tp.grad is None:  # PyTorch never ran this cluster: graphc's gradient is 0
                assert gp.grad is None or not np.any(_np(gp.grad)), k
            else:
                _close(gp.grad, tp.grad, tol, k)


@pytest.mark.parametrize("targets", [[0, 1, 2, 0], [5, 4, 4, 3], [9, 8, 7, 6], [2]],
                         ids=["shortlist_only", "first_cluster_only", "last_cluster_only",
                              "one_row"])
def test_batches_that_skip_clusters_match_torch(targets: list[int]) -> None:
    """Clusters with no rows (which PyTorch skips) add exact zeros to values and gradients."""
    tm, gm = _pair(CONFIGS[0], np.float64)
    t = np.array(targets, np.int64)
    x = _rng.standard_normal((len(t), 8))
    tx, gx = torch.tensor(x, requires_grad=True), gc.tensor(x, requires_grad=True)
    tout, gout = tm(tx, torch.tensor(t)), gm(gx, gc.tensor(t))
    np.testing.assert_allclose(_np(gout.output), _np(tout.output), **TOL[np.float64])
    tout.loss.backward()
    gout.loss.backward()
    np.testing.assert_allclose(_np(gx.grad), _np(tx.grad), **TOL[np.float64])
    for (k, tp), (_, gp) in zip(tm.named_parameters(), gm.named_parameters()):
        want = np.zeros(tuple(tp.shape)) if tp.grad is None else _np(tp.grad)
        got = np.zeros(tuple(tp.shape)) if gp.grad is None else _np(gp.grad)
        np.testing.assert_allclose(got, want, err_msg=k, **TOL[np.float64])


def test_int32_targets_and_an_empty_batch_as_torch() -> None:
    tm, gm = _pair(CONFIGS[0])
    x = _rng.standard_normal((4, 8)).astype(np.float32)
    t = np.array([0, 4, 7, 9], np.int32)
    tout, gout = tm(torch.tensor(x), torch.tensor(t)), gm(gc.tensor(x), gc.tensor(t))
    np.testing.assert_allclose(_np(gout.output), _np(tout.output), **TOL[np.float32])
    e = gm(gc.tensor(np.zeros((0, 8), np.float32)), gc.tensor(np.zeros(0, np.int64)))
    te = tm(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long))
    assert tuple(e.output.shape) == tuple(te.output.shape) == (0,)
    assert np.isnan(_np(e.loss)) and np.isnan(_np(te.loss))


# -- log_prob / predict ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_log_prob_and_predict_match_torch(cfg: tuple, dtype: Any) -> None:
    tm, gm = _pair(cfg, dtype)
    x = _rng.standard_normal((17, cfg[0])).astype(dtype) * 2
    tx, gx = torch.tensor(x, requires_grad=True), gc.tensor(x, requires_grad=True)
    tlp, glp = tm.log_prob(tx), gm.log_prob(gx)
    assert tuple(glp.shape) == (17, cfg[1])
    np.testing.assert_allclose(_np(glp), _np(tlp), **TOL[dtype])
    np.testing.assert_allclose(np.exp(_np(glp)).sum(1), 1.0, rtol=1e-5)
    w = _rng.standard_normal((17, cfg[1])).astype(dtype)
    (tlp * torch.tensor(w)).sum().backward()
    (glp * gc.tensor(w)).sum().backward()
    _close(gx.grad, tx.grad, TOL[dtype])
    _assert_grads(tm, gm, TOL[dtype])
    with torch.no_grad():
        tpred = tm.predict(torch.tensor(x))
    gpred = gm.predict(gc.tensor(x))
    assert gpred.dtype is gc.int64
    np.testing.assert_array_equal(_np(gpred), _np(tpred))


def test_predict_mixed_shortlist_and_tail_rows_as_torch() -> None:
    """Rows whose head argmax is a shortlist class and rows that need the tail (PyTorch's
    three branches: all shortlist, none, mixed) all give PyTorch's class."""
    tm, gm = _pair(CONFIGS[2], np.float64)
    with torch.no_grad():
        tm.head.weight[:2] *= 3.0  # shortlist classes win some rows, clusters others
    gm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = _rng.standard_normal((40, 12))
    with torch.no_grad():
        head_arg = tm.head(torch.tensor(x)).argmax(1).numpy()
        assert (head_arg < 2).any() and (head_arg >= 2).any()
        for rows in (head_arg < 2, head_arg >= 2, np.ones(40, bool)):
            want = tm.predict(torch.tensor(x[rows])).numpy()
            np.testing.assert_array_equal(_np(gm.predict(gc.tensor(x[rows]))), want)


# -- compiled -----------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[2], CONFIGS[3]],
                         ids=[IDS[0], IDS[2], IDS[3]])
def test_compiled_sgd_steps_match_torch(cfg: tuple) -> None:
    """Three SGD steps (one compile over batch sizes 6, 9, 6) give PyTorch's losses, outputs
    and updated parameters."""
    tm, gm = _pair(cfg)
    inf, n, cut = cfg[:3]
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    gopt = gc.optim.SGD(gm.parameters(), lr=0.1, momentum=0.9)

    @gc.compile
    def step(x: Any, t: Any) -> Any:
        gopt.zero_grad()
        out = gm(x, t)
        out.loss.backward()
        gopt.step()
        return out.loss, out.output

    for rows in (6, 9, 6):
        x = _rng.standard_normal((rows, inf)).astype(np.float32)
        t = _targets(rows, n, cut)
        topt.zero_grad()
        tout = tm(torch.tensor(x), torch.tensor(t))
        tout.loss.backward()
        topt.step()
        gl, go = step(gc.tensor(x), gc.tensor(t))
        np.testing.assert_allclose(_np(gl), _np(tout.loss), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_np(go), _np(tout.output), rtol=1e-5, atol=1e-5)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(_np(gm.state_dict()[k]), _np(v), rtol=1e-4, atol=1e-5,
                                   err_msg=k)
    assert step.compile_count == 1


def test_compiled_step_with_input_gradient_and_log_prob() -> None:
    """A compiled step returning the input's gradient (summed over the batch, through a zero
    ``shift`` parameter added to the argument), ``log_prob`` and ``predict``."""
    tm, gm = _pair(CONFIGS[1])
    x = _rng.standard_normal((5, 16)).astype(np.float32)
    t = _targets(5, 20, [4])
    shift = nn.Parameter(gc.tensor(np.zeros(16, np.float32)))

    @gc.compile
    def step(x: Any, t: Any) -> Any:
        gm.zero_grad()
        shift.grad = None
        xs = x + shift
        loss = gm(xs, t).loss
        loss.backward()
        return shift.grad, gm.log_prob(xs), gm.predict(xs), gm.head.weight.grad

    tx = torch.tensor(x, requires_grad=True)
    tm(tx, torch.tensor(t)).loss.backward()
    gxg, glp, gpred, ghw = step(gc.tensor(x), gc.tensor(t))
    _close(gxg, tx.grad.sum(0), TOL[np.float32])
    _close(ghw, tm.head.weight.grad, TOL[np.float32])
    np.testing.assert_allclose(_np(glp), _np(tm.log_prob(tx)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(_np(gpred), _np(tm.predict(tx.detach())))


def test_compiled_unbatched_step_matches_torch() -> None:
    tm, gm = _pair(CONFIGS[0])
    topt = torch.optim.SGD(tm.parameters(), lr=0.2)
    gopt = gc.optim.SGD(gm.parameters(), lr=0.2)

    @gc.compile(dynamic=False)  # the 1-D input's only dim is the feature dim
    def step(x: Any, t: Any) -> Any:
        gopt.zero_grad()
        out = gm(x, t)
        out.loss.backward()
        gopt.step()
        return out.output

    for target in (1, 5, 9):
        x = _rng.standard_normal(8).astype(np.float32)
        topt.zero_grad()
        tout = tm(torch.tensor(x), torch.tensor(target))
        tout.loss.backward()
        topt.step()
        got = step(gc.tensor(x), gc.tensor(np.int64(target)))
        assert tuple(got.shape) == ()
        np.testing.assert_allclose(_np(got), _np(tout.output), rtol=1e-5, atol=1e-6)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(_np(gm.state_dict()[k]), _np(v), rtol=1e-5, atol=1e-6,
                                   err_msg=k)


@pytest.mark.parametrize("bad", [10, 12, -1], ids=["n_classes", "beyond", "negative"])
def test_compiled_out_of_range_target_stops_the_step(bad: int) -> None:
    """In a compiled step the native bounds check of the target gather raises ``IndexError``
    and no parameter is modified (eagerly PyTorch's ``RuntimeError``, tested below)."""
    _, gm = _pair(CONFIGS[0])
    opt = gc.optim.SGD(gm.parameters(), lr=0.5)

    @gc.compile
    def step(x: Any, t: Any) -> Any:
        opt.zero_grad()
        loss = gm(x, t).loss
        loss.backward()
        opt.step()
        return loss

    x = gc.tensor(_rng.standard_normal((4, 8)).astype(np.float32))
    step(x, gc.tensor(np.array([0, 4, 7, 9])))
    before = {k: np.array(v) for k, v in gm.state_dict().items()}
    with pytest.raises(IndexError, match="out of range"):
        step(x, gc.tensor(np.array([0, bad, 7, 1])))
    for k, v in before.items():
        np.testing.assert_array_equal(np.asarray(gm.state_dict()[k]), v, err_msg=k)


# -- errors: PyTorch's types and messages ------------------------------------------------------
BAD_CUTOFFS = [[], [3, 3], [0, 3], [3, 10], [5, 3], [-2, 4], [2.5], [3, 11]]


@pytest.mark.parametrize("cutoffs", BAD_CUTOFFS, ids=[str(c) for c in BAD_CUTOFFS])
def test_bad_cutoffs_raise_torchs_value_error(cutoffs: list) -> None:
    with pytest.raises(ValueError) as te:
        TNN.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs)
    with pytest.raises(ValueError, match=f"^{re.escape(str(te.value))}$"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs)


def _both(tm: Any, gm: Any, method: str, *arrays: Any) -> tuple[BaseException, BaseException]:
    """The exceptions PyTorch's and graphc's ``method`` raise on the same arrays."""
    errs = []
    for m, lib in ((tm, torch), (gm, gc)):
        with pytest.raises(Exception) as e:  # noqa: B017,PT011 - compared below
            getattr(m, method)(*[lib.tensor(a) for a in arrays])
        errs.append(e.value)
    return errs[0], errs[1]


SHAPE_ERRORS = [
    ("batch_mismatch", np.ones((3, 8), np.float32), np.array([1, 2])),
    ("3d_input_1d_target", np.ones((2, 3, 8), np.float32), np.array([1, 2])),
    ("2d_input_0d_target", np.ones((2, 8), np.float32), np.array(1)),
    ("2d_target", np.ones((2, 8), np.float32), np.array([[1], [2]])),
    ("0d_input_1d_target", np.array(1.0, np.float32), np.array([1])),
    ("target_range", np.ones((4, 8), np.float32), np.array([0, 10, -1, 2])),
    ("target_range_high", np.ones((4, 8), np.float32), np.array([0, 3, 12, 2])),
    ("unbatched_target_range", np.ones(8, np.float32), np.array(12)),
    ("float_target", np.ones((2, 8), np.float32), np.array([1.0, 2.0], np.float32)),
]


@pytest.mark.parametrize("x,t", [s[1:] for s in SHAPE_ERRORS], ids=[s[0] for s in SHAPE_ERRORS])
def test_forward_errors_are_torchs(x: np.ndarray, t: np.ndarray) -> None:
    tm, gm = _pair(CONFIGS[0])
    te, ge = _both(tm, gm, "forward", x, t)
    assert type(ge) is type(te) or isinstance(ge, type(te)), (ge, te)
    assert str(ge) == str(te)


def test_log_prob_and_predict_of_a_1d_input_raise_torchs_error() -> None:
    tm, gm = _pair(CONFIGS[0])
    for method in ("log_prob", "predict"):
        te, ge = _both(tm, gm, method, np.ones(8, np.float32))
        assert isinstance(ge, type(te)) and str(ge) == str(te)


# -- state_dict round trips ------------------------------------------------------------------
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_state_dict_round_trip_with_torch(cfg: tuple) -> None:
    inf, n, cut, div, bias = cfg
    gm = nn.AdaptiveLogSoftmaxWithLoss(inf, n, cut, div_value=div, head_bias=bias)
    tm = TNN.AdaptiveLogSoftmaxWithLoss(inf, n, cut, div_value=div, head_bias=bias)
    # graphc -> torch (strict): every key and shape fits
    tm.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in gm.state_dict().items()})
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(_np(v), np.asarray(gm.state_dict()[k]), err_msg=k)
    # torch -> graphc: fresh weights there, loaded back here
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(1.0)
    gm2 = nn.AdaptiveLogSoftmaxWithLoss(inf, n, cut, div_value=div, head_bias=bias)
    gm2.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(np.asarray(gm2.state_dict()[k]), _np(v), err_msg=k)
    x = _rng.standard_normal((3, inf)).astype(np.float32)
    np.testing.assert_allclose(_np(gm2.log_prob(gc.tensor(x))), _np(tm.log_prob(torch.tensor(x))),
                               **TOL[np.float32])


def test_state_dict_of_another_layout_is_refused() -> None:
    gm = nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6])
    other = TNN.AdaptiveLogSoftmaxWithLoss(8, 10, [3], head_bias=True)
    with pytest.raises((RuntimeError, KeyError, ValueError)):
        gm.load_state_dict({k: v.detach().numpy() for k, v in other.state_dict().items()})
