"""Shape-generic kernels (``codegen/generic.py``): channel groups and loop groups that differ
only in their sizes share one kernel, which reads its sizes from the call. A step built with
them computes what the same step with a kernel per size computes (to float rounding: LLVM
may vectorise a sum of known length in another order), what eager and PyTorch compute, and
the same on one thread as on two; a unit that reads through a view keeps its sizes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _fuzz_settings import fuzz_settings
from _steps import compiled_train_step, train_step
from _threads import assert_bit_identical, run_per_thread_count
from graphc.codegen import options
from hypothesis import given
from hypothesis import strategies as st

import graphc as gc
from graphc import nn, optim


class Stages(nn.Module):
    """Three conv-BN-ReLU stages at other widths and map sizes (4 at 12x12, 8 at 6x6, 8 at
    3x3): the same batch norm code at three sets of sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(4)
        self.c2 = nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(8)
        self.c3 = nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
        self.b3 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: Any) -> Any:
        x = gc.relu(self.b1(self.c1(x)))
        x = gc.relu(self.b2(self.c2(x)))
        x = gc.relu(self.b3(self.c3(x)))
        return self.head(x.mean((2, 3)))


def _batches(steps: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    return [(rng.standard_normal((5 + i % 3, 3, 12, 12)).astype(np.float32),  # symbolic batch
             rng.integers(0, 3, 5 + i % 3)) for i in range(steps)]


def _kernels(step: Any, label: str) -> list[str]:
    """The distinct kernels of ``label`` the step's lowering compiled."""
    low = step.variants[0].exe.lowering
    return [k for k in low.kernel_level if k.startswith(f"k_{label}_")]


def _train(monkeypatch: pytest.MonkeyPatch, generic: bool, backend: str | None = None
           ) -> tuple[list[float], dict[str, np.ndarray], Any]:
    monkeypatch.setattr(options, "GENERIC_KERNELS", generic)
    gc.manual_seed(0)
    model = Stages()
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    step = compiled_train_step(model, opt, nn.CrossEntropyLoss(), backend=backend)
    losses = [float(step(gc.tensor(x), gc.tensor(y))) for x, y in _batches()]
    if backend is None:  # (the lowering is built lazily: while the option is set)
        assert step.compile_count == 1
        low = step.variants[0].exe.lowering
        step = (low.generic_calls, _kernels(step, "channels"), _kernels(step, "group"))
    return losses, {k: np.array(v) for k, v in model.state_dict().items()}, step


def test_stages_share_their_batch_norm_kernels_and_train_alike(monkeypatch) -> None:
    l1, s1, (calls, chan, grp) = _train(monkeypatch, True)
    l0, s0, (calls0, chan0, grp0) = _train(monkeypatch, False)
    li, si, _ = _train(monkeypatch, True, "interp")
    assert calls > 0 and calls0 == 0
    # the three stages' batch norms: one kernel per computation instead of one per stage
    assert len(chan0) >= 3 and len(chan) <= len(chan0) - 2, (chan, chan0)
    # the updates of every parameter shape: one kernel per update rule and member layout
    assert len(grp) < len(grp0), (grp, grp0)
    np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l1, li, rtol=1e-4)
    for k in s0:
        np.testing.assert_allclose(s1[k], s0[k], rtol=1e-5, atol=1e-6, err_msg=k)
        np.testing.assert_allclose(s1[k], si[k], rtol=1e-3, atol=1e-5, err_msg=k)


def test_stages_train_like_pytorch(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    l1, s1, _ = _train(monkeypatch, True)
    gc.manual_seed(0)
    init = {k: np.array(v) for k, v in Stages().state_dict().items()}  # the same start

    class T(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            tn = torch.nn
            self.c1, self.b1 = tn.Conv2d(3, 4, 3, padding=1, bias=False), tn.BatchNorm2d(4)
            self.c2 = tn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False)
            self.b2 = tn.BatchNorm2d(8)
            self.c3 = tn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False)
            self.b3, self.head = tn.BatchNorm2d(8), tn.Linear(8, 3)

        def forward(self, x: Any) -> Any:
            x = torch.relu(self.b1(self.c1(x)))
            x = torch.relu(self.b2(self.c2(x)))
            x = torch.relu(self.b3(self.c3(x)))
            return self.head(x.mean((2, 3)))

    tm = T()
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    opt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    lt = []
    for x, y in _batches():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(tm(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        lt.append(float(loss))
    np.testing.assert_allclose(l1, lt, rtol=1e-4, atol=1e-5)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(s1[k], v.numpy(), rtol=1e-3, atol=1e-5, err_msg=k)


def test_batch_norm_counts_come_from_each_call(monkeypatch) -> None:
    """The element count a batch norm divides by (``B*H*W``, a symbolic constant) is one
    of the call's values: batches of 2, 9 and 5 rows, then 2 again, each as eager."""
    monkeypatch.setattr(options, "GENERIC_KERNELS", True)
    gc.manual_seed(0)
    model = Stages()
    gc.manual_seed(0)
    eager_model = Stages()
    step = gc.compile(lambda x: model(x))
    rng = np.random.default_rng(5)
    for n in (2, 9, 5, 2):
        x = rng.standard_normal((n, 3, 12, 12)).astype(np.float32)
        got = np.array(step(gc.tensor(x)))
        want = np.array(eager_model(gc.tensor(x)))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert step.compile_count == 1
    for a, b in zip(model.state_dict().values(), eager_model.state_dict().values()):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6)


class Wide(nn.Module):
    """Parameters from 3 to 90,000 elements: updates below and above the size at which a
    loop splits between the threads, some sharing one kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(300, 300)  # 90,000 and 300
        self.b = nn.Linear(300, 250)  # 75,000 and 250
        self.c = nn.Linear(250, 3)  # 750 and 3

    def forward(self, x: Any) -> Any:
        return self.c(gc.relu(self.b(gc.relu(self.a(x)))))


def train_wide(opt: str, compiled: bool) -> tuple[nn.Module, Any]:
    """``Wide`` trained 3 steps with ``optim.<opt>``: the model and the step."""
    gc.manual_seed(0)
    model = Wide()
    o = eval(f"optim.{opt}", {"optim": optim, "model": model})
    step = (compiled_train_step if compiled else train_step)(model, o, nn.MSELoss())
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((8, 300)).astype(np.float32)
        y = rng.standard_normal((8, 3)).astype(np.float32)
        step(gc.tensor(x), gc.tensor(y))
    return model, step


_WIDE = """
import numpy as np, sys
sys.path.insert(0, {tests!r})
from graphc.codegen import options
from test_generic_kernels import train_wide
model, step = train_wide({opt!r}, compiled=True)
low = step.variants[0].exe.lowering
assert (low.generic_calls >= 6) == options.GENERIC_KERNELS, low.generic_calls
np.savez(OUT, **{{k: np.array(v) for k, v in model.state_dict().items()}})
"""


@pytest.mark.parametrize("opt", ["SGD(model.parameters(), lr=0.01, momentum=0.9, "
                                 "weight_decay=1e-3, nesterov=True)",
                                 "AdamW(model.parameters(), lr=1e-3)"])
def test_updates_of_every_size_on_one_and_two_threads(tmp_path, opt) -> None:
    """The optimizer's updates as shape-generic kernels, the large ones split between the
    threads when they run: bit-identical on one thread and two, and to the kernels of fixed
    sizes (the same arithmetic, element by element), and as eager."""
    from pathlib import Path

    script = _WIDE.format(tests=str(Path(__file__).parent), opt=opt)
    runs = run_per_thread_count(tmp_path, script)
    fixed = run_per_thread_count(tmp_path, script, threads=(1,),
                                 env={"GRAPHC_GENERIC_KERNELS": "0"})
    assert_bit_identical(runs + fixed, min_arrays=6)
    model, _ = train_wide(opt, compiled=False)  # the same rule, eager
    # (Adam divides by the root of a small second moment: a weight whose gradients are
    # near 0 moves by a few 1e-6 more or less whatever the kernels)
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(runs[0][k], np.array(v), rtol=1e-4, atol=1e-5, err_msg=k)


def test_a_group_that_reads_through_a_view_keeps_its_sizes(monkeypatch) -> None:
    """A transpose read in a loop group: its index depends on the real sizes, so the kernel
    is not shape-generic (and computes the right values)."""
    monkeypatch.setattr(options, "GENERIC_KERNELS", True)

    @gc.compile
    def f(x, y):
        t = x.t() * 2.0 + y
        return t, (t - y).exp()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    y = rng.standard_normal((5, 6)).astype(np.float32)
    t, e = f(gc.tensor(x), gc.tensor(y))
    np.testing.assert_allclose(np.array(t), x.T * 2 + y, rtol=1e-6)
    np.testing.assert_allclose(np.array(e), np.exp(x.T * 2), rtol=1e-5)
    assert f.variants[0].exe.lowering.generic_calls == 0


def test_groups_reading_reductions_share_one_kernel(monkeypatch) -> None:
    """Loop groups reading sums (buffers of another kernel: their axes are not the kernel's
    business) at three sizes: one kernel, right values."""
    monkeypatch.setattr(options, "GENERIC_KERNELS", True)

    @gc.compile
    def f(x, a, y, b, z, c):
        out = []
        for t, w in ((x, a), (y, b), (z, c)):
            s = t.sum(1)
            u = s * w + 1.0
            out += [u, u * s]
        return tuple(out)

    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s).astype(np.float32)
            for s in ((4, 3), (4,), (7, 5), (7,), (9, 2), (9,))]
    got = f(*[gc.tensor(a) for a in args])
    for i in range(3):
        t, w = args[2 * i], args[2 * i + 1]
        u = t.sum(1) * w + 1
        np.testing.assert_allclose(np.array(got[2 * i]), u, rtol=1e-5)
        np.testing.assert_allclose(np.array(got[2 * i + 1]), u * t.sum(1), rtol=1e-5)
    low = f.variants[0].exe.lowering
    assert low.generic_calls == 3
    assert len([k for k in low.kernel_level if k.startswith("k_group_")]) == 1


def test_equal_updates_at_other_sizes_are_one_kernel(monkeypatch) -> None:
    """Momentum SGD over weights of four shapes and their biases: with generic kernels the
    weights' updates are one kernel, each call its own size."""
    monkeypatch.setattr(options, "GENERIC_KERNELS", True)
    gc.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5), nn.ReLU(),
                          nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 2))
    gc.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 5), nn.ReLU(),
                          nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 2))
    step = compiled_train_step(model, optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                               nn.MSELoss())
    ref = train_step(eager, optim.SGD(eager.parameters(), lr=0.1, momentum=0.5), nn.MSELoss())
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        y = rng.standard_normal((3, 2)).astype(np.float32)
        np.testing.assert_allclose(float(step(gc.tensor(x), gc.tensor(y))),
                                   float(ref(gc.tensor(x), gc.tensor(y))), rtol=1e-5)
    for a, b in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    low = step.variants[0].exe.lowering
    assert low.generic_calls >= 8
    # eight parameters of eight sizes, their updates eight loop groups (and the loss's
    # gradient a ninth): one kernel for the weights', one for the biases' (which also store
    # the gradient), one for the loss's
    assert len(_kernels(step, "group")) <= 3, _kernels(step, "group")
    # the plan says which kernels take their sizes from the call, and which sizes
    fused = step.ir("fused")
    assert "shape-generic kernel, sizes from the call: __k1 = 24" in fused  # a 6x4 weight
    assert fused.count("shape-generic kernel") == low.generic_calls


# -- fuzzers: one computation at several sizes in one step ---------------------------------

_UNARY = {"exp": lambda v: gc.exp(v * 0.25), "tanh": gc.tanh, "relu": gc.relu,
          "sigmoid": gc.sigmoid, "neg": lambda v: -v, "sq": lambda v: v * v}
_BINARY = {"add": lambda u, v: u + v, "sub": lambda u, v: u - v, "mul": lambda u, v: u * v,
           "max": gc.maximum, "min": gc.minimum,
           "pick": lambda u, v: gc.where(u > v, u, v * 0.5)}


@st.composite
def _expressions(draw: Any) -> list[tuple[str, int, int]]:
    """A short program over the values ``[a, b, s]`` (``s`` a scalar): each step applies a
    unary or binary op to earlier values and appends the result."""
    prog = []
    for i in range(draw(st.integers(2, 5))):
        n = 3 + i
        if draw(st.booleans()):
            prog.append((draw(st.sampled_from(sorted(_UNARY))), draw(st.integers(0, n - 1)), 0))
        else:
            prog.append((draw(st.sampled_from(sorted(_BINARY))), draw(st.integers(0, n - 1)),
                         draw(st.integers(0, n - 1))))
    return prog


def _run_expression(prog: list, a: Any, b: Any, s: Any) -> tuple[Any, Any]:
    vals = [a, b, s]
    for op, i, j in prog:
        if op in _UNARY:
            vals.append(_UNARY[op](vals[i]))
        else:
            u, v = vals[i], vals[j]
            if u.ndim == 0 and v.ndim:  # the scalar broadcast, as PyTorch does
                u = u.expand(v.shape)
            elif v.ndim == 0 and u.ndim:
                v = v.expand(u.shape)
            vals.append(_BINARY[op](u, v))
    y = vals[-1] if vals[-1].ndim else vals[-1].expand(a.shape)
    return y, y * b + a  # two results of one loop: a loop group


_SHAPES = st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=4).map(tuple)
                   | st.sampled_from([(300, 130), (2, 128, 129), (64,), (1, 7)]),
                   min_size=2, max_size=4)


@fuzz_settings(ci_examples=6, long_examples=80)
@given(prog=_expressions(), shapes=_SHAPES, seed=st.integers(0, 2**16))
def test_fuzz_one_expression_at_several_sizes(prog, shapes, seed) -> None:
    """A random elementwise program applied to pairs of several shapes in one compiled
    function (one kernel for all of them where their sizes are all it differs in, large ones
    split between the threads), against eager."""
    rng = np.random.default_rng(seed)
    args = []
    for shape in shapes:
        args += [rng.standard_normal(shape).astype(np.float32),
                 rng.standard_normal(shape).astype(np.float32)]
    scalar = np.float32(rng.standard_normal())

    def f(s, *xs):
        out = []
        for i in range(0, len(xs), 2):
            out += _run_expression(prog, xs[i], xs[i + 1], s)
        return tuple(out)

    step = gc.compile(f)
    got = step(gc.tensor(scalar), *[gc.tensor(x) for x in args])
    want = f(gc.tensor(scalar), *[gc.tensor(x) for x in args])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=2e-5, atol=1e-5)
    again = step(gc.tensor(scalar), *[gc.tensor(x) for x in args])  # the table, refilled
    for g, w in zip(again, want, strict=True):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=2e-5, atol=1e-5)
    # a result that reads ``a`` or ``b`` is a loop group with ``y * b + a``: generic
    full = [True, True, False]
    for op, i, j in prog:
        full.append(full[i] or (op in _BINARY and full[j]))
    if full[-1]:
        assert step.variants[0].exe.lowering.generic_calls >= 1


class _ScaledNorm(nn.Module):
    """A per-channel scale (a parameter, so the backward needs the batch norm's input
    gradient), a training batch norm, an optional ReLU."""

    def __init__(self, c: int, relu: bool) -> None:
        super().__init__()
        self.w = nn.Parameter(gc.tensor(np.linspace(0.5, 1.5, c, dtype=np.float32)
                                        .reshape(1, c, 1, 1)))
        self.bn = nn.BatchNorm2d(c)
        self.relu = relu

    def forward(self, x: Any) -> Any:
        y = self.bn(x * self.w)
        return gc.relu(y) if self.relu else y


@fuzz_settings(ci_examples=4, long_examples=40)
@given(shapes=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 12), st.integers(1, 9),
                                 st.integers(1, 9)).filter(lambda s: s[0] * s[2] * s[3] > 1),
                       min_size=2, max_size=4),
       relu=st.booleans(), seed=st.integers(0, 2**16))
def test_fuzz_batch_norms_at_several_sizes(shapes, relu, seed) -> None:
    """Batch norms in training (statistics, running averages) over several ``[N, C, H, W]``
    in one compiled step, forward and backward (channel groups sharing their kernels where
    only the sizes differ), against eager: outputs, gradients, running statistics."""
    rng = np.random.default_rng(seed)
    xs = [gc.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    mods = nn.ModuleList([_ScaledNorm(s[1], relu) for s in shapes])
    ref = nn.ModuleList([_ScaledNorm(s[1], relu) for s in shapes])

    def f(ms, *ts):
        outs = [m(t) for m, t in zip(ms, ts)]
        total = outs[0].sum() * 0
        for i, y in enumerate(outs):
            total = total + (y * y * (i + 1)).sum()
        total.backward()
        return (total, *outs)

    got = gc.compile(lambda *ts: f(mods, *ts))(*xs)
    want = f(ref, *xs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-4, atol=1e-4)
    for (k, p), q in zip(mods.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-3,
                                   err_msg=k)
    for (k, v), w in zip(mods.state_dict().items(), ref.state_dict().values()):
        np.testing.assert_allclose(np.array(v), np.array(w), rtol=1e-5, atol=1e-6, err_msg=k)
