"""Bad input at the call boundary: every rejected call raises a clear Python exception (or, in
an ahead-of-time library, returns an error code) and leaves parameters, gradients and optimizer
state exactly as they were; inputs that are merely unusual (strided, read-only, sharing memory
with the state) give the same result as a plain C-contiguous copy would."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _steps import compiled_train_step

import graphc as gc
from graphc import nn, optim

# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def _mlp(opt_name: str = "adam", embed: bool = False, **kw: Any) -> Any:
    """A small classifier and its compiled step (optionally starting with an Embedding)."""
    gc.manual_seed(0)
    if embed:
        model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 3))
    else:
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = {"adam": lambda p: optim.Adam(p, lr=0.01),
           "sgd": lambda p: optim.SGD(p, lr=0.1, momentum=0.9)}[opt_name](model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    step = compiled_train_step(model, opt, loss_fn, **kw)

    step.model, step.opt = model, opt  # type: ignore[attr-defined]
    return step


def _data(n: int = 6, embed: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 10, (n, 2)) if embed else rng.standard_normal((n, 4)).astype(np.float32)
    return x, rng.integers(0, 3, n)


def snapshot(step: Any) -> dict[str, Any]:
    """Copies of every parameter, gradient (or None) and optimizer state tensor."""
    snap: dict[str, Any] = {}
    for name, p in step.model.named_parameters():
        snap[name] = p.numpy().copy()
        snap[name + ".grad"] = None if p.grad is None else p.grad.numpy().copy()
    for i, p in enumerate(step.model.parameters()):
        for k, v in step.opt.state.get(p, {}).items():
            snap[f"state{i}.{k}"] = np.array(np.asarray(v), copy=True)
    return snap


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if a[k] is None or b[k] is None:
            assert a[k] is None and b[k] is None, k
        else:
            assert np.array_equal(a[k], b[k], equal_nan=True), k


def _rejects(step: Any, exc: Any, match: str, *args: Any) -> None:
    before = snapshot(step)
    with pytest.raises(exc, match=match):
        step(*args)
    assert_same(before, snapshot(step))


# ---------------------------------------------------------------------------------------
# Python entry point: count, rank, shape, dtype, batch, guards
# ---------------------------------------------------------------------------------------

@pytest.fixture
def trained() -> Any:
    step = _mlp()
    x, y = _data()
    step(x, y)  # grads and optimizer state exist: "unchanged" covers all of them
    return step


def test_wrong_argument_count(trained: Any) -> None:
    x, y = _data()
    # the compiled step has the function's own parameters: Python's own messages
    _rejects(trained, TypeError, r"missing 1 required positional argument: 'y'", x)
    _rejects(trained, TypeError, r"takes 2 positional arguments but 3 were given", x, y, y)


def test_wrong_rank_and_feature_size(trained: Any) -> None:
    x, y = _data()
    _rejects(trained, ValueError, r"4 features.*\(B, 4, 1\)", x[:, :, None], y)
    _rejects(trained, ValueError, r"4 features.*\(B, 7\)", np.ones((6, 7), np.float32), y)


def test_batch_sizes_disagree_and_empty_batch(trained: Any) -> None:
    x, y = _data()
    _rejects(trained, ValueError, r"argument 'y'.*B=6.*\[5\]", x, y[:5])
    _rejects(trained, ValueError, r"argument 'x'.*>= 1", x[:0], y[:0])


def test_wrong_dtypes(trained: Any) -> None:
    x, y = _data()
    _rejects(trained, TypeError, r"float64.*float32", x.astype(np.float64), y)
    _rejects(trained, TypeError, r"not supported", np.array(["a"] * 6), y)
    _rejects(trained, TypeError, r"not supported", object(), y)


def test_shape_guard_failure_raises_before_running() -> None:
    w = gc.tensor(np.ones((3,), np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)

    @gc.compile
    def step(x: Any) -> Any:
        opt.zero_grad()
        loss = (x.reshape(-1, 2, 3) * w).sum()  # needs B*6 % 6 == 0: fine; B*3 % 6: not
        loss.backward()
        opt.step()
        return loss

    step(np.ones((4, 3), np.float32))
    before = w.numpy().copy()
    with pytest.raises(ValueError, match="shape guard failed"):
        step(np.ones((5, 3), np.float32))
    assert np.array_equal(w.numpy(), before)


def test_still_usable_after_errors(trained: Any) -> None:
    x, y = _data()
    for bad in ((x,), (x[:, :1], y), (x, y + 7)):
        with pytest.raises((TypeError, ValueError, IndexError)):
            trained(*bad)
    ref = _mlp()
    ref(x, y)
    assert np.array_equal(trained(x, y).numpy(), ref(x, y).numpy())


# ---------------------------------------------------------------------------------------
# integer inputs used as indices: range-checked in native code
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("debug", [False, True])
def test_class_target_out_of_range(trained: Any, debug: bool) -> None:
    step = _mlp(debug=debug)
    x, y = _data()
    step(x, y)
    for bad, val, pos in ((3, 3, 2), (-1, -1, 2), (2**40, 2**40, 2)):
        yb = y.copy()
        yb[pos] = bad
        _rejects(step, IndexError, rf"argument 'y': value {val} at flat position {pos} "
                 r"is out of range \[0, 3\)", x, yb)


def test_embedding_index_out_of_range() -> None:
    step = _mlp(embed=True)
    x, y = _data(embed=True)
    step(x, y)
    xb = x.copy()
    xb[4, 1] = 10
    _rejects(step, IndexError, r"argument 'x': value 10 at flat position 9 \(index \(4, 1\)\) "
             r"is out of range \[0, 10\)", xb, y)
    xb[4, 1] = -3
    _rejects(step, IndexError, r"argument 'x': value -3", xb, y)


def test_gather_and_scatter_indices_out_of_range() -> None:
    w = gc.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)

    @gc.compile(dynamic=False)
    def step(idx: Any) -> Any:
        opt.zero_grad()
        g = gc.gather(w, 1, idx)  # gather forward, scatter_add backward
        loss = (g * g).sum()
        loss.backward()
        opt.step()
        return loss

    step(np.array([[0, 2, 1, 1], [1, 1, 0, 2]]))
    before = w.numpy().copy()
    with pytest.raises(IndexError, match=r"argument 'idx': value 3 at flat position 6 "
                       r"\(index \(1, 2\)\) is out of range \[0, 3\)"):
        step(np.array([[0, 2, 1, 1], [1, 1, 3, 2]]))
    assert np.array_equal(w.numpy(), before)


# ---------------------------------------------------------------------------------------
# memory layout, read-only arrays, aliasing
# ---------------------------------------------------------------------------------------

def test_non_contiguous_input_is_copied_every_call() -> None:
    a, b = _mlp(), _mlp()
    big = np.asfortranarray(np.random.default_rng(2).standard_normal((6, 4)).astype(np.float32))
    y = _data()[1]
    for _ in range(3):
        assert not big.flags.c_contiguous
        la = a(big, y)
        lb = b(np.ascontiguousarray(big), y)
        assert np.array_equal(la.numpy(), lb.numpy())
        big *= 1.5  # the same strided array, changed in place: never a stale copy
    assert_same(snapshot(a), snapshot(b))


def test_read_only_inputs_are_fine() -> None:
    a, b = _mlp(), _mlp()
    x, y = _data()
    xr, yr = x.copy(), y.copy()
    xr.flags.writeable = yr.flags.writeable = False
    assert np.array_equal(a(xr, yr).numpy(), b(x, y).numpy())
    assert_same(snapshot(a), snapshot(b))


def test_read_only_parameter_gets_a_private_writeable_copy() -> None:
    a, b = _mlp("sgd"), _mlp("sgd")
    x, y = _data()
    w = a.model[0].weight
    frozen = w.numpy().copy()
    w._node._value = frozen
    frozen.flags.writeable = False
    for _ in range(2):
        a(x, y)
        b(x, y)
    assert np.array_equal(frozen, b.model[0].weight.numpy()) is False
    assert not frozen.flags.writeable  # the user's read-only array was never written
    assert w.numpy().flags.writeable
    assert_same(snapshot(a), snapshot(b))


def test_input_aliasing_a_parameter_reads_the_old_values() -> None:
    """x is the very array of a parameter the step updates in place."""
    gc.manual_seed(0)
    model = nn.Linear(4, 4)
    opt = optim.SGD(model.parameters(), lr=0.5, momentum=0.9)

    @gc.compile
    def step(x: Any, t: Any) -> Any:
        opt.zero_grad()
        loss = ((model(x) - t) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    gc.manual_seed(0)
    ref_model = nn.Linear(4, 4)
    ref_opt = optim.SGD(ref_model.parameters(), lr=0.5, momentum=0.9)

    @gc.compile
    def ref(x: Any, t: Any) -> Any:
        ref_opt.zero_grad()
        loss = ((ref_model(x) - t) ** 2).mean()
        loss.backward()
        ref_opt.step()
        return loss

    t = np.ones((4, 4), np.float32)
    for _ in range(3):
        w = model.weight.numpy()
        la = step(w, t)  # the parameter's own buffer as the input
        lb = ref(ref_model.weight.numpy().copy(), t)
        assert np.array_equal(la.numpy(), lb.numpy())
        assert np.array_equal(model.weight.numpy(), ref_model.weight.numpy())
        # a view overlapping the parameter buffer (rows 1..3) is copied too
        la = step(model.weight.numpy()[1:], t[1:])
        lb = ref(ref_model.weight.numpy()[1:].copy(), t[1:])
        assert np.array_equal(la.numpy(), lb.numpy())
        assert np.array_equal(model.weight.numpy(), ref_model.weight.numpy())


def test_aliasing_check_cost_only_on_rebinding() -> None:
    step = _mlp()
    x, y = _data()
    step(x, y)
    exe = step._last.exe
    step(x, y)
    assert exe.rebound is False  # same arrays: no range comparison on this call


# ---------------------------------------------------------------------------------------
# check_finite
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", [None, "interp"])
def test_check_finite_rejects_nan_and_inf_without_updating(backend: Any) -> None:
    step = _mlp(check_finite=True, backend=backend)
    x, y = _data()
    step(x, y)
    for bad in (np.nan, np.inf, -np.inf):
        xb = x.copy()
        xb[3, 2] = bad
        _rejects(step, gc.NonFiniteError, r"the loss \(output 0\) contains NaN or Inf", xb, y)
    with pytest.raises(FloatingPointError):
        step(np.full_like(x, np.nan), y)
    with pytest.raises(ValueError):
        step(np.full_like(x, np.nan), y)
    step(x, y)  # still works


def test_check_finite_names_the_first_gradient() -> None:
    """A finite loss with a NaN gradient: d sqrt(w*x)/dw = x / (2 sqrt(w*x)) = 0/0 at x = 0."""
    v = gc.tensor(np.ones(3, np.float32), requires_grad=True)
    w = gc.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.SGD([v, w], lr=0.1, momentum=0.9)

    @gc.compile(check_finite=True)
    def step(x: Any) -> Any:
        opt.zero_grad()
        loss = (v * x).sum() + (w * x).sqrt().sum()
        loss.backward()
        opt.step()
        return loss

    step(np.ones((2, 3), np.float32))
    state = [np.asarray(opt.state[p]["momentum_buffer"]).copy() for p in (v, w)]
    before = [w.numpy().copy(), v.numpy().copy(), w.grad.numpy().copy(), v.grad.numpy().copy()]
    x = np.ones((2, 3), np.float32)
    x[1, 1] = 0
    with pytest.raises(gc.NonFiniteError, match=r"gradient 'opt\.g0\.p1\.grad'"):
        step(x)
    after = [w.numpy(), v.numpy(), w.grad.numpy(), v.grad.numpy()]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert all(np.array_equal(a, np.asarray(opt.state[p]["momentum_buffer"]))
               for a, p in zip(state, (v, w)))
    assert "check_finite" in step.ir("optimized")


def test_check_finite_off_is_default() -> None:
    step = _mlp()
    x, y = _data()
    x[0, 0] = np.nan
    assert np.isnan(step(x, y).item())


# ---------------------------------------------------------------------------------------
# AOT entry point
# ---------------------------------------------------------------------------------------

aot_only = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@pytest.fixture(scope="module")
def aot_lib(tmp_path_factory: Any) -> Any:
    from test_aot import CLib

    out = tmp_path_factory.mktemp("aot_bad")
    step = _mlp("adam")
    x, y = _data()
    paths = gc.aot.build(step, (x, y), str(out), "bad")
    return CLib(paths, "bad")


def _lib_snapshot(lib: Any, s: int) -> dict[str, Any]:
    return lib.snapshot(s)


@aot_only
def test_aot_bad_batch_null_and_index(aot_lib: Any) -> None:
    lib = aot_lib
    s = lib.create()
    try:
        x, y = _data()
        assert lib.step(s, x, y) == 0
        before = lib.snapshot(s)
        assert lib.step(s, x, y, batch=0) == 1  # GRAPHC_EBATCH
        assert lib.step(s, x, y, batch=-5) == 1
        yb = y.copy()
        yb[4] = 3
        assert lib.step(s, x, yb) == 2  # GRAPHC_EINDEX
        info = (ctypes.c_int64 * 4)()
        lib.f("last_error")(s, info)
        assert list(info)[2:] == [4, 3]  # flat position, bad value
        yb[4] = -1
        assert lib.step(s, x, yb) == 2
        null = lib.f("step")(ctypes.c_void_p(s), ctypes.c_void_p(None),
                             ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(6),
                             ctypes.c_void_p(None), ctypes.c_void_p(None))
        assert null == 4  # GRAPHC_EINVAL
        assert lib.f("step")(ctypes.c_void_p(None), ctypes.c_void_p(x.ctypes.data),
                             ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(6),
                             ctypes.c_void_p(None), ctypes.c_void_p(None)) == 4
        after = lib.snapshot(s)
        assert all(np.array_equal(before[k], after[k]) for k in before)
    finally:
        lib.f("destroy")(s)


@aot_only
def test_aot_input_aliasing_state_is_copied_and_output_aliasing_refused(aot_lib: Any) -> None:
    lib = aot_lib
    s, t = lib.create(), lib.create()
    try:
        lib.f("param_data").restype = ctypes.c_void_p
        lib.f("param_data").argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        _, y = _data()
        w = lib.f("param_data")(s, b"opt.state[model.0.weight].exp_avg")  # 8x4 floats
        assert lib.step(s, *_data()) == 0 and lib.step(t, *_data()) == 0
        # x = 6 rows of 4 floats starting at the state's exp_avg buffer
        x_alias = np.ctypeslib.as_array((ctypes.c_float * 24).from_address(w)).reshape(6, 4)
        x_copy = x_alias.copy()
        assert np.array_equal(lib.get(s, "opt.state[model.0.weight].exp_avg")[:6], x_copy)
        lib.f("step").argtypes = None
        out_s, out_t = np.zeros((), np.float32), np.zeros((), np.float32)
        assert lib.step(s, x_alias, y, out=out_s) == 0
        assert lib.step(t, x_copy, y, out=out_t) == 0
        assert out_s == out_t
        a, b = lib.snapshot(s), lib.snapshot(t)
        assert all(np.array_equal(a[k], b[k]) for k in a)
        # a result pointer inside a state tensor: refused, nothing changes
        before = lib.snapshot(s)
        bad_out = lib.f("param_data")(s, b"model.0.bias")
        rc = lib.f("step")(ctypes.c_void_p(s), ctypes.c_void_p(x_copy.ctypes.data),
                           ctypes.c_void_p(y.ctypes.data), ctypes.c_int64(6),
                           ctypes.c_void_p(None), ctypes.c_void_p(bad_out))
        assert rc == 4
        after = lib.snapshot(s)
        assert all(np.array_equal(before[k], after[k]) for k in before)
    finally:
        lib.f("destroy")(s)
        lib.f("destroy")(t)


def test_readme_documents_reliability() -> None:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "## Reliability" in text


# ---------------------------------------------------------------------------------------
# debug builds
# ---------------------------------------------------------------------------------------

def test_debug_build_turns_a_bad_access_into_an_exception(monkeypatch: Any) -> None:
    """With the index check sabotaged, an out-of-range target reads past a buffer: the debug
    build's bounds checks catch it and name the kernel's op and IR line."""
    from graphc.codegen import emitter

    monkeypatch.setenv("GRAPHC_CACHE", "0")  # never store the sabotaged code
    monkeypatch.setattr(emitter.KernelEmitter, "check_index", lambda self, *a, **k: None)
    step = _mlp(debug=True)
    x, y = _data()
    step(x, y)
    yb = y.copy()
    yb[2] = 10**9
    before = snapshot(step)
    with pytest.raises(gc.DebugBoundsError, match=r"debug bounds check: op \w+ \(node %\d+: "
                       r"%\d+ = .*\) accessed element \d+ of a buffer with 18 elements"):
        step(x, yb)
    assert_same(before, snapshot(step))
    assert isinstance(gc.DebugBoundsError("x"), IndexError)


def test_debug_from_environment_and_in_the_cache_key(monkeypatch: Any) -> None:
    monkeypatch.setenv("GRAPHC_DEBUG", "1")
    on = _mlp()
    monkeypatch.setenv("GRAPHC_DEBUG", "0")
    off = _mlp()
    x, y = _data()
    assert np.array_equal(on(x, y).numpy(), off(x, y).numpy())
    e_on, e_off = on._last.exe, off._last.exe
    assert e_on.debug and not e_off.debug
    assert e_on.cache_key != e_off.cache_key
    assert_same(snapshot(on), snapshot(off))


def test_index_error_names_a_tensor_argument() -> None:
    """An out-of-range index given as a ``gc.Tensor`` (not a numpy array) gets the same
    IndexError naming the argument, not a dtype complaint from the error path."""
    import graphc as gc
    from graphc import nn

    emb = nn.Embedding(5, 3)
    before = emb.weight.numpy().copy()

    @gc.compile
    def step(i):
        return emb(i).sum()

    step(gc.tensor([1, 2]))
    with pytest.raises(IndexError, match=r"argument 'i': value 7 at flat position 1"):
        step(gc.tensor([1, 7]))
    np.testing.assert_array_equal(emb.weight.numpy(), before)


def test_checked_gather_on_two_threads_reports_the_first_error() -> None:
    """A gather big enough to run its halves on both threads: an index out of range in the
    second half is reported with its position, and with bad indices in both halves the
    first half's (the one a one-thread run stops at) is."""
    rows, cols = 4096, 16
    x = np.random.default_rng(0).standard_normal((rows, 8)).astype(np.float32)

    @gc.compile(dynamic=False)
    def pick(a: Any, idx: Any) -> Any:
        return gc.gather(a, 1, idx)  # a kernel of its own, split by rows

    good = np.random.default_rng(1).integers(0, 8, (rows, cols))
    np.testing.assert_array_equal(np.asarray(pick(x, good)),
                                  x[np.arange(rows)[:, None], good])
    assert "= gather " in pick.ir("fused")
    late = good.copy()
    late[3000, 5] = 9
    with pytest.raises(IndexError, match=r"value 9 at flat position 48005 "):
        pick(x, late)
    both = late.copy()
    both[10, 2] = -1
    with pytest.raises(IndexError, match=r"value -1 at flat position 162 "):
        pick(x, both)
    np.testing.assert_array_equal(np.asarray(pick(x, good)),
                                  x[np.arange(rows)[:, None], good])


def test_scatter_add_along_an_inner_axis_on_two_threads() -> None:
    """A scatter_add along dim 1, big enough to split its rows over both threads (max-pool's
    backward has this shape): values equal numpy's (each row's adds in the same order
    either way), and an index out of range in the second half of the rows, then in both
    halves, reports the position a one-thread run stops at."""
    rows, cols, width = 4096, 24, 16
    rng = np.random.default_rng(2)
    base = rng.standard_normal((rows, width)).astype(np.float32)
    src = rng.standard_normal((rows, cols)).astype(np.float32)

    @gc.compile(dynamic=False)
    def scatter(b: Any, i: Any, s: Any) -> Any:
        return gc.scatter_add(b, 1, i, s)

    good = rng.integers(0, width, (rows, cols))
    want = base.copy()
    for r in range(rows):
        np.add.at(want[r], good[r], src[r])
    np.testing.assert_allclose(np.asarray(scatter(base, good, src)), want, rtol=1e-6,
                               atol=1e-6)
    late = good.copy()
    late[4000, 7] = width
    with pytest.raises(IndexError, match=rf"value {width} at flat position {4000 * cols + 7} "):
        scatter(base, late, src)
    late[5, 1] = -3
    with pytest.raises(IndexError, match=rf"value -3 at flat position {5 * cols + 1} "):
        scatter(base, late, src)
