"""Channel groups (``codegen/channel_groups.py``): batch norm's reductions and elementwise
passes run channel by channel, in passes. A step planned with them must compute what the
separate kernels compute (the sums may round differently in the last bits), what the
interpreter and PyTorch compute, bit-identically for one and two threads; runs whose reads
are not at the reader's index or channel must not be grouped."""

from __future__ import annotations

import numpy as np
import pytest
from _groups import check_three_ways, programs, train_run, train_three_ways
from _steps import compiled_train_step
from _threads import assert_bit_identical, run_per_thread_count
from graphc.codegen import options
from graphc.codegen.views import closure_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphc as gc
from graphc import nn, optim


class Block(nn.Module):
    """A ResNet basic block (conv-BN-ReLU-conv-BN, identity added, ReLU) and a head."""

    def __init__(self, c: int, dtype=None) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1, bias=False, dtype=dtype)
        self.bn0 = nn.BatchNorm2d(c, dtype=dtype)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False, dtype=dtype)
        self.bn1 = nn.BatchNorm2d(c, dtype=dtype)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False, dtype=dtype)
        self.bn2 = nn.BatchNorm2d(c, dtype=dtype)
        self.head = nn.Linear(c, 4, dtype=dtype)

    def forward(self, x):
        x = gc.relu(self.bn0(self.stem(x)))
        y = gc.relu(self.bn1(self.conv1(x)))
        y = gc.relu(self.bn2(self.conv2(y)) + x)
        return self.head(y.mean((2, 3)))


def _train(groups: bool, monkeypatch, dtype=np.float32, backend: str | None = None,
           channels: int = 6, steps: int = 4):
    def make():
        model = Block(channels, dtype=gc.float64 if dtype == np.float64 else None)
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
        return model, compiled_train_step(model, opt, nn.CrossEntropyLoss(), backend=backend)

    rng = np.random.default_rng(1)
    batches = []
    for i in range(steps):
        x = rng.standard_normal((5 + i % 2, 3, 10, 9)).astype(dtype)  # a symbolic batch
        batches.append((x, rng.integers(0, 4, len(x))))
    return train_run(monkeypatch, groups, make, batches)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_step_matches_separate_kernels_and_interpreter(dtype, monkeypatch):
    step = train_three_ways(lambda groups, backend: _train(groups, monkeypatch, dtype,
                                                           backend=backend), dtype)
    text = step.ir("fused")
    # forward: sum(x), the mean, sum((x - mean)^2), the variance, normalise + ReLU
    assert "3 passes over" in text
    # backward: the masked gradient and both sums in one pass, then dx
    assert "2 passes over" in text
    assert text.count("channel group of") >= 6
    if dtype == np.float32:  # the HTML picture names them too
        assert "channel group of" in step.explain()


def test_step_matches_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(options, "CHANNEL_GROUPS", True)
    gc.manual_seed(0)
    model = Block(6)

    class TBlock(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            tn = torch.nn
            self.stem, self.bn0 = tn.Conv2d(3, 6, 3, padding=1, bias=False), tn.BatchNorm2d(6)
            self.conv1, self.bn1 = tn.Conv2d(6, 6, 3, padding=1, bias=False), tn.BatchNorm2d(6)
            self.conv2, self.bn2 = tn.Conv2d(6, 6, 3, padding=1, bias=False), tn.BatchNorm2d(6)
            self.head = tn.Linear(6, 4)

        def forward(self, x):
            x = torch.relu(self.bn0(self.stem(x)))
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)) + x)
            return self.head(y.mean((2, 3)))

    tm = TBlock()
    tm.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()})
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    step = compiled_train_step(model, opt, nn.CrossEntropyLoss())
    rng = np.random.default_rng(2)
    for _ in range(5):
        x = rng.standard_normal((8, 3, 12, 12)).astype(np.float32)
        y = rng.integers(0, 4, 8)
        loss = float(step(x, y))
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(torch.from_numpy(x)), torch.from_numpy(y))
        tl.backward()
        topt.step()
        assert abs(loss - tl.item()) < 1e-5 * max(1.0, abs(loss))
    assert "channel group of" in step.ir("fused")
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(np.array(model.state_dict()[k]), v.numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=k)


def test_statistics_of_an_offset_batch_stay_precise(monkeypatch):
    """Values near 1000 with unit spread: the variance is a small difference of large
    numbers unless the mean is subtracted first; the grouped passes keep the two-pass
    formula (and the blocked sums), so the statistics match float64."""
    monkeypatch.setattr(options, "CHANNEL_GROUPS", True)
    bn = nn.BatchNorm2d(3, momentum=1.0)
    f = gc.compile(lambda x: gc.relu(bn(x)))
    x = (1000 + np.random.default_rng(3).standard_normal((16, 3, 32, 32))).astype(np.float32)
    out = np.array(f(x))
    assert "channel group of" in f.ir("fused")
    x64 = x.astype(np.float64)
    mean = x64.mean((0, 2, 3))
    var = x64.var((0, 2, 3), ddof=1)
    np.testing.assert_allclose(np.array(bn.running_mean), mean, rtol=1e-6)
    np.testing.assert_allclose(np.array(bn.running_var), var, rtol=1e-4)
    ref = np.maximum((x64 - mean[:, None, None]) / np.sqrt(x64.var((0, 2, 3))[:, None, None]
                                                           + bn.eps), 0)
    np.testing.assert_allclose(out, ref, atol=2e-3)


def test_reads_at_another_index_are_not_grouped(monkeypatch):
    """A pass that reads a member mirrored (``flip``) or transposed cannot run channel by
    channel at the same index; such kernels stay separate, and the values are right."""
    monkeypatch.setattr(options, "CHANNEL_GROUPS", True)

    def f(x):
        c = x - x.mean((0, 2, 3), keepdim=True)
        z = c * c.flip(3)
        return z.sum((0, 2, 3), keepdim=True) * 2 + c.transpose(2, 3).sum((0, 2, 3),
                                                                           keepdim=True)

    x = np.random.default_rng(4).standard_normal((4, 3, 6, 6)).astype(np.float32)
    cf = gc.compile(f)
    got = np.array(cf(x))
    want = np.array(gc.compile(f, backend="interp")(x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    plan = cf.variants[0].exe.lowering.plan
    mat = {n.id for n in plan.materialized}
    grouped = {m.id for gi, grp in enumerate(plan.groups) if gi in plan.passes for m in grp}
    assert grouped  # sum(x) and x - mean: one group
    # the sums reading c mirrored (a gather) or transposed are not members
    other = [n for n in plan.materialized if n.op == "sum"
             and any(x.op in ("gather", "permute") for x in closure_of(n, mat))]
    assert len(other) == 2 and not any(n.id in grouped for n in other)


_THREADS = r'''
import numpy as np, graphc as gc
from graphc import nn, optim
gc.manual_seed(0)
m = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1, bias=False), nn.BatchNorm2d(5), nn.ReLU(),
                  nn.Conv2d(5, 7, 3, padding=1), nn.BatchNorm2d(7), nn.ReLU(),
                  nn.Flatten(), nn.Linear(7 * 16 * 16, 3))
opt = optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
lf = nn.CrossEntropyLoss()
@gc.compile
def step(x, y):
    opt.zero_grad(); loss = lf(m(x), y); loss.backward(); opt.step(); return loss
rng = np.random.default_rng(0)
out = {}
for b in (64, 3):
    x = rng.standard_normal((b, 3, 16, 16)).astype(np.float32)
    y = rng.integers(0, 3, b)
    for i in range(2):
        out[f"b{b}.{i}"] = np.asarray(step(x, y))
assert "channel group of" in step.ir("fused")
for k, v in m.state_dict().items():
    out[k] = np.asarray(v)
np.savez(OUT, **out)
'''


def test_two_threads_bit_identical_to_one(tmp_path):
    """Each channel is computed whole by one thread (the two take halves of the channels,
    5 and 7 of them here: uneven), so one and two threads agree bit for bit."""
    runs = run_per_thread_count(tmp_path, _THREADS, drop=("GRAPHC_CHANNEL_GROUPS",))
    assert_bit_identical(runs, min_arrays=5)


# -- random programs (``_group_programs``): values [N, C, H, W] and per channel [1, C, 1, 1],
# sums over (0, 2, 3), flips along W

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(1, 4), st.sampled_from([(4, 4), (5, 1), (1, 5), (1, 1), (3, 2)]))
def test_random_programs_match_separate_kernels_and_interpreter(program, batch, hw):
    """Maps of size 1 along a trailing dim included: a pass's flat index over the trailing
    dims once sat in a last dim of size 1, where an ``expand`` passed it on to the
    per-channel value it broadcast (``channel_groups.run_dim``)."""
    x = np.random.default_rng(batch).standard_normal((batch, 3, *hw)).astype(np.float32)
    check_three_ways(program, x, (0, 2, 3), 3)


@pytest.mark.parametrize("hw", [(3, 1), (1, 3), (1, 1)], ids=str)
def test_batch_norm_over_maps_one_wide_matches_torch(hw):
    """Conv + BatchNorm2d + ReLU trained on ``N x C x 3 x 1`` maps (and ``1 x 3``, ``1 x 1``)
    for three steps: losses, parameters and running statistics equal PyTorch's. The channel
    group read the batch mean ``j`` channels past the right one for ``W = 1``."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    cw = (rng.standard_normal((4, 2, 3, 3)) * 0.3).astype(np.float32)
    tm = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1, bias=False),
                             torch.nn.BatchNorm2d(4, momentum=0.5), torch.nn.ReLU())
    gm = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4, momentum=0.5),
                       nn.ReLU())
    tm[0].weight.data = torch.tensor(cw)
    gm[0].weight.data = gc.tensor(cw)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    gopt = optim.SGD(gm.parameters(), lr=0.1, momentum=0.9)

    @gc.compile
    def step(x, t):
        gopt.zero_grad()
        loss = ((gm(x) - t) ** 2).mean()
        loss.backward()
        gopt.step()
        return loss

    for _ in range(3):
        x = (rng.standard_normal((4, 2, *hw)) * 2 + 1).astype(np.float32)
        t = rng.standard_normal((4, 4, *hw)).astype(np.float32)
        topt.zero_grad()
        tl = ((tm(torch.tensor(x)) - torch.tensor(t)) ** 2).mean()
        tl.backward()
        topt.step()
        np.testing.assert_allclose(float(step(x, t)), tl.item(), rtol=1e-5)
        for k, v in tm.state_dict().items():
            np.testing.assert_allclose(np.asarray(gm.state_dict()[k], np.float64),
                                       v.numpy().astype(np.float64), rtol=1e-4, atol=1e-6,
                                       err_msg=k)
