"""Loop groups: same-shaped elementwise kernels (an optimizer's per-tensor update chain) run
as one loop. The merged loops must compute exactly what separate loops compute, keep a
value that only later members read out of memory, and never merge a kernel that writes a
state buffer in place with an earlier one that reads that state at another index."""

from __future__ import annotations

import numpy as np
import pytest
from _steps import compiled_train_step
from graphc.codegen import options, planning

import graphc as gc
from graphc import nn, optim

OPTIMIZERS = {
    "sgd_nesterov_wd": lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                           weight_decay=1e-2),
    "sgd_dampening": lambda p: optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3,
                                         weight_decay=1e-3, maximize=True),
    "adam_amsgrad": lambda p: optim.Adam(p, lr=1e-2, amsgrad=True, weight_decay=1e-2),
    "adamw": lambda p: optim.AdamW(p, lr=1e-2),
    "rmsprop": lambda p: optim.RMSprop(p, lr=1e-2, centered=True, momentum=0.5),
    "adagrad": lambda p: optim.Adagrad(p, lr=1e-1, lr_decay=1e-3),
}


def _run(make_opt, groups: bool, monkeypatch, backend: str | None = None):
    monkeypatch.setattr(options, "LOOP_GROUPS", groups)
    gc.manual_seed(3)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))
    opt = make_opt(model.parameters())
    step = compiled_train_step(model, opt, nn.CrossEntropyLoss(), backend=backend)
    rng = np.random.default_rng(0)
    losses = []
    for i in range(6):
        x = rng.standard_normal((7 + i % 3, 12)).astype(np.float32)  # symbolic batch
        y = rng.integers(0, 5, len(x)).astype(np.int64)
        losses.append(float(step(x, y)))
    state = [np.array(v) for st in opt.state.values() for v in st.values()
             if hasattr(v, "shape") and np.ndim(v) > 0]
    return losses, [p.numpy().copy() for p in model.parameters()], state, step


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_groups_match_separate_loops_and_interpreter(name, monkeypatch):
    l0, p0, s0, _ = _run(OPTIMIZERS[name], False, monkeypatch)
    l1, p1, s1, step = _run(OPTIMIZERS[name], True, monkeypatch)
    li, pi, si, _ = _run(OPTIMIZERS[name], True, monkeypatch, backend="interp")
    assert "loop group of" in step.ir("fused")
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    for a, b, c in zip(p1, p0, pi):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-6)
    assert len(s1) == len(s0) == len(si) > 0
    for a, b, c in zip(s1, s0, si):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        # against the interpreter (numpy's matrix products sum in another order): centered
        # RMSprop's grad_avg is a difference of similar gradients, so its small entries carry
        # the products' rounding at ~1e-4 of the state's scale; measured against that scale
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-4 * float(np.abs(c).max()))


def test_update_chain_is_one_loop_without_a_temporary(monkeypatch):
    """SGD with momentum and weight decay: ``g + wd*p`` (read twice by the momentum update)
    lives in registers; momentum buffer and parameter are written by the same loop."""
    x = np.ones((64, 784), np.float32)
    y = np.zeros(64, np.int64)
    arenas = {}
    for groups in (False, True):
        monkeypatch.setattr(options, "LOOP_GROUPS", groups)
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
        step = compiled_train_step(model, opt, nn.CrossEntropyLoss(), example_args=(x, y))
        step(x, y)
        text = step.ir("fused")
        plan = step.variants[0].exe.lowering.plan
        size = gc.shapes.sympy.sympify(plan.work_offset)
        arenas[groups] = int(size.subs({s: 64 for s in size.free_symbols}))
        if groups:
            assert "loop group of 3 (one loop over f32[256,784])" in text
            assert "registers only" in text
        else:
            assert "loop group of" not in text
    # the 256x784 temporary (784 KiB) is gone
    assert arenas[False] - arenas[True] >= 256 * 784 * 4


def test_in_place_update_not_merged_with_a_transposed_reader(monkeypatch):
    """The gradient of (W * W.T).sum() reads W transposed; W's in-place update has the same
    shape. Interleaving the two loops would let the gradient read already-updated entries."""
    monkeypatch.setattr(options, "LOOP_GROUPS", True)
    n = 9
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((n, n)).astype(np.float32)
    results = []
    for backend in (None, "interp"):
        w = nn.Parameter(gc.tensor(w0.copy()))
        step = _transposed_step(w, optim.SGD([w], lr=0.1, weight_decay=0.05), backend)
        for _ in range(3):
            step(np.full((n, n), 0.5, np.float32))
        results.append(w.numpy().copy())
        if backend is None:
            assert _no_transposed_member(step)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)


def _transposed_step(w, opt, backend):
    @gc.compile(backend=backend, dynamic=False)
    def step(x):
        opt.zero_grad()
        loss = (w * w.T * x).sum()
        loss.backward()
        opt.step()
        return loss

    return step


def _no_transposed_member(step) -> bool:
    plan = step.variants[0].exe.lowering.plan
    direct_ids = set(plan.direct)
    for grp in plan.groups:
        if any(m.id in direct_ids for m in grp):
            for m in grp:
                for x in planning.closure_of(m, {n.id for n in plan.materialized}):
                    if x.op == "permute":
                        return False
    return True


def test_profile_counts_every_kernel(monkeypatch):
    """GRAPHC_PROFILE=1 builds count time-stamp ticks and calls per kernel or loop group."""
    monkeypatch.setenv("GRAPHC_PROFILE", "1")
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = compiled_train_step(model, opt, nn.CrossEntropyLoss())
    x, y = np.ones((4, 6), np.float32), np.zeros(4, np.int64)
    for _ in range(5):
        step(x, y)
    rows = step.variants[-1].exe.profile()
    plan = step.variants[-1].exe.lowering.plan
    assert len(rows) == len(plan.units())
    assert all(calls == 5 and ticks > 0 for _, ticks, calls in rows)
    assert any("loop group" in name for name, _, _ in rows)
    text = step.profile()
    assert "matmul" in text and "(5 calls)" in text


def test_profile_needs_a_profiling_build(monkeypatch):
    monkeypatch.delenv("GRAPHC_PROFILE", raising=False)
    step = gc.compile(lambda x: (x * 2).sum())
    step(np.ones(3, np.float32))
    with pytest.raises(RuntimeError, match="GRAPHC_PROFILE=1"):
        step.profile()
