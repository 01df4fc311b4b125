"""Row groups (``codegen/channel_groups.py``, ``rows``): a LayerNorm's reductions over the last
dim and its elementwise passes run row by row, in passes over each row. A step planned with
them must compute what the separate kernels compute (the sums may round differently in the
last bits), what the interpreter and PyTorch compute, bit-identically for one and two
threads; runs whose reads are not at the reader's index or row must not be grouped."""

from __future__ import annotations

import numpy as np
import pytest
from _groups import check_three_ways, programs, train_run, train_three_ways
from _threads import assert_bit_identical, run_per_thread_count
from graphc.codegen import options
from graphc.codegen.views import closure_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim


def _block(nn_: object, d: int = 24, dtype: object = None) -> object:
    """A pre-norm transformer MLP block with a residual, then a LayerNorm without affine
    parameters and a classifier (``nn_``: graphc's or torch's ``nn``)."""
    kw = {} if dtype is None else {"dtype": dtype}

    class Block(nn_.Module):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn_.Linear(8, d, **kw)
            self.ln1 = nn_.LayerNorm(d, **kw)
            self.fc = nn_.Linear(d, 2 * d, **kw)
            self.act = nn_.GELU()
            self.proj = nn_.Linear(2 * d, d, **kw)
            self.ln2 = nn_.LayerNorm(d, elementwise_affine=False, **kw)
            self.head = nn_.Linear(d, 5, **kw)

        def forward(self, x):
            h = self.inp(x)
            h = h + self.proj(self.act(self.fc(self.ln1(h))))
            return self.head(self.ln2(h))

    return Block()


def _step(model, opt, F_=F):
    """The training step over ``[B, T, 8]`` inputs and ``[B, T]`` labels (``F_``: graphc's
    or torch's functional module)."""
    def step(x, y):
        opt.zero_grad()
        loss = F_.cross_entropy(model(x).reshape(-1, 5), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    return step


def _train(groups: bool, monkeypatch, dtype=np.float32, backend: str | None = None,
           steps: int = 4):
    def make():
        model = _block(nn, dtype=gc.float64 if dtype == np.float64 else None)
        opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        return model, gc.compile(_step(model, opt), backend=backend)

    rng = np.random.default_rng(1)
    batches = []
    for i in range(steps):
        x = (rng.standard_normal((3 + i % 2, 6, 8)) * 2 + 1).astype(dtype)  # a symbolic batch
        batches.append((x, rng.integers(0, 5, (len(x), 6))))
    return train_run(monkeypatch, groups, make, batches)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_step_matches_separate_kernels_and_interpreter(dtype, monkeypatch):
    step = train_three_ways(lambda groups, backend: _train(groups, monkeypatch, dtype,
                                                           backend=backend), dtype)
    text = step.ir("fused")
    # forward: the residual add, sum(h), h - mean, sum((h - mean)^2), 1/sqrt(var + eps),
    # the normalised and affine values: three passes over each row
    assert "row by row, 3 passes over" in text
    # backward: both sums over a row, then dx
    assert "row by row, 2 passes over" in text
    assert text.count("row group of") >= 4


def test_step_matches_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(options, "CHANNEL_GROUPS", True)
    gc.manual_seed(0)
    model = _block(nn)
    tm = _block(torch.nn)
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()})
    opt = optim.Adam(model.parameters(), lr=1e-2)
    step = gc.compile(_step(model, opt))
    tstep = _step(tm, torch.optim.Adam(tm.parameters(), lr=1e-2), torch.nn.functional)
    rng = np.random.default_rng(2)
    for _ in range(5):
        x = rng.standard_normal((4, 7, 8)).astype(np.float32)
        y = rng.integers(0, 5, (4, 7))
        loss = float(step(x, y))
        tl = tstep(torch.from_numpy(x), torch.from_numpy(y))
        assert abs(loss - tl.item()) < 1e-5 * max(1.0, abs(loss))
    assert "row group of" in step.ir("fused")
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(np.array(model.state_dict()[k]), v.numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=k)


@pytest.mark.parametrize("d", [64, 3000], ids=["one block", "cascade"])
def test_statistics_of_offset_rows_stay_precise(d, monkeypatch):
    """Rows near 1000 with unit spread: the variance is a small difference of large numbers
    unless the mean is subtracted first; the grouped passes keep the two-pass formula (and,
    for rows longer than a block, the blocked pairwise sums), so the result matches float64."""
    monkeypatch.setattr(options, "CHANNEL_GROUPS", True)
    ln = nn.LayerNorm(d)
    f = gc.compile(lambda x: ln(x) * 1.0)
    x = (1000 + np.random.default_rng(3).standard_normal((5, 3, d))).astype(np.float32)
    out = np.array(f(x))
    assert "row group of" in f.ir("fused")
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + ln.eps)
    np.testing.assert_allclose(out, ref, atol=2e-3)


@pytest.mark.parametrize("d", [2, 4])
def test_rows_shorter_than_the_minimum_stay_separate_kernels(d, monkeypatch):
    """Rows of two features are all loop overhead as a row group (measured 1.4x slower
    than separate kernels), so only rows of ``ROW_MIN`` or more are grouped; the values are
    the same either way."""
    from graphc.codegen.channel_groups import ROW_MIN

    monkeypatch.setattr(options, "CHANNEL_GROUPS", True)
    ln = nn.LayerNorm(d)
    f = gc.compile(lambda x: ln(x) * 1.0)
    x = np.random.default_rng(5).standard_normal((6, d)).astype(np.float32)
    got = np.array(f(x))
    assert ("row group of" in f.ir("fused")) == (d >= ROW_MIN)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + ln.eps)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_reads_at_another_index_are_not_grouped(monkeypatch):
    """A pass that reads a member mirrored along the row (``flip``) or transposed cannot run
    row by row at the same index; such kernels stay separate, and the values are right."""
    monkeypatch.setattr(options, "CHANNEL_GROUPS", True)

    def f(x):
        c = x - x.mean(-1, keepdim=True)
        z = c * c.flip(-1)
        return z.sum(-1, keepdim=True) * 2 + c.transpose(1, 2).sum(-1).unsqueeze(-1)[:, :4]

    x = np.random.default_rng(4).standard_normal((3, 4, 4)).astype(np.float32)
    cf = gc.compile(f)
    got = np.array(cf(x))
    want = np.array(gc.compile(f, backend="interp")(x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    plan = cf.variants[0].exe.lowering.plan
    mat = {n.id for n in plan.materialized}
    group = {gi: {m.id for m in grp} for gi, grp in enumerate(plan.groups)
             if gi in plan.row_groups}
    c = next(n for n in plan.materialized if n.op == "sub")
    assert c.id in plan.group_of and plan.group_of[c.id] in group  # with sum(x)
    # the sums reading c mirrored (a gather) or transposed are not in c's group (another
    # group may take them: a finished buffer reads right at any index)
    other = [n for n in plan.materialized if n.op == "sum"
             and any(x.op in ("gather", "permute") for x in closure_of(n, mat))]
    assert len(other) == 2
    assert not any(n.id in group[plan.group_of[c.id]] for n in other)


_THREADS = r'''
import numpy as np, graphc as gc
from graphc import nn, optim
import graphc.nn.functional as F
gc.manual_seed(0)
m = nn.Sequential(nn.Linear(16, 48), nn.LayerNorm(48), nn.GELU(), nn.Linear(48, 40),
                  nn.LayerNorm(40), nn.Linear(40, 3))
opt = optim.AdamW(m.parameters(), lr=0.01)
@gc.compile
def step(x, y):
    opt.zero_grad(); loss = F.cross_entropy(m(x).reshape(-1, 3), y.reshape(-1))
    loss.backward(); opt.step(); return loss
rng = np.random.default_rng(0)
out = {}
# 40 x 33 rows (the threads take 20 of the first dim each); 1 x 1320 rows; 3 x 1 rows
# (uneven halves)
for shape in ((40, 33), (1, 1320), (3, 1)):
    x = rng.standard_normal((*shape, 16)).astype(np.float32)
    y = rng.integers(0, 3, shape)
    for i in range(2):
        out[f"{shape}.{i}"] = np.asarray(step(x, y))
assert "row group of" in step.ir("fused")
for k, v in m.state_dict().items():
    out[k] = np.asarray(v)
np.savez(OUT, **out)
'''


def test_two_threads_bit_identical_to_one(tmp_path):
    """Each row is computed whole by one thread (the two take halves of the rows), so one
    and two threads agree bit for bit."""
    runs = run_per_thread_count(tmp_path, _THREADS, drop=("GRAPHC_CHANNEL_GROUPS",))
    assert_bit_identical(runs, min_arrays=8)


# -- random programs (``_group_programs``): values [N, T, C] and per row [N, T, 1], sums over
# the last dim, flips along it

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(1, 4), st.sampled_from([(3, 5), (1, 7), (4, 1), (2, 70)]))
def test_random_programs_match_separate_kernels_and_interpreter(program, batch, tc):
    x = np.random.default_rng(batch).standard_normal((batch, *tc)).astype(np.float32)
    check_three_ways(program, x, (-1,), -1)
