"""Convolutions that run their consumer as an epilogue (``codegen.planning``'s
``_plan_conv_epilogues``): the elementwise kernel that alone reads a convolution's result
(bias, ReLU, an eval-mode BatchNorm, a residual) runs inside the convolution's kernel, image by
image from a staging buffer where the kernel runs images, in place after it elsewhere.

Every convolution path is covered (the implicit GEMM on position and on channel vectors,
stride-phase grids, Winograd from phase grids and from a tile-major copy, the batched
Winograd and im2col kernels, the stride-1 and strided input gradients; the direct loops
run only in debug builds, without epilogues):
results equal PyTorch's, and equal bit for bit the same step compiled without epilogues;
the staging buffers stay inside the arena; one thread and two give the same bits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _arena import assert_nothing_past_arena, guard_scratch
from _fuzz_settings import fuzz_settings
from _threads import assert_bit_identical, run_per_thread_count
from graphc.codegen import hostinfo, options
from hypothesis import given
from hypothesis import strategies as st
from test_conv_fuzz import geometries

import graphc as gc
import graphc.nn.functional as F
from graphc import nn, optim
from graphc.runtime import cpu as runtime_cpu

torch = pytest.importorskip("torch")
TF = torch.nn.functional

EPI = "convolution with epilogue"
# (cin, cout, h, w, kernel, stride, padding, dilation, groups, the kernel ir("fused") names)
CASES = [
    (3, 8, 10, 12, 3, 1, 1, 1, 1, "implicit GEMM per image from a zero-bordered grid"),
    (32, 64, 4, 4, 3, 1, 1, 1, 1, "positions x 4 channel vectors"),
    (8, 8, 9, 9, 3, 2, 1, 1, 1, "4 of 4 stride-phase grids"),
    (8, 32, 9, 9, 3, 2, 1, 1, 1, "from a zero-bordered grid, register tiles of 5 positions"),
    (16, 16, 32, 32, 3, 1, 1, 1, 1, "Winograd F(2x2, 3x3) per image from 2x2 phase grids"),
    (48, 48, 14, 14, 3, 1, 1, 1, 1, "Winograd F(2x2, 3x3) per image from a tile-major copy"),
    (64, 64, 6, 6, 3, 1, 1, 1, 1, "Winograd F(2x2, 3x3) channels-last"),
    (8, 8, 9, 9, 3, (1, 2), 1, 1, 1, "2 of 2 stride-phase grids"),
    (8, 12, 9, 9, 3, 1, 2, 2, 2, "implicit GEMM per image"),
    (128, 96, 4, 4, 1, 1, 0, 1, 1, "implicit GEMM per image"),
]


def _ids(c: tuple) -> str:
    return "x".join(map(str, c[:4])) + f"k{c[4]}s{c[5]}g{c[8]}".replace(" ", "")


def _params(case: tuple, seed: int = 0) -> dict[str, np.ndarray]:
    cin, cout, _, _, k, _, _, _, g, _ = case
    rng = np.random.default_rng(seed)
    return {"w": (rng.standard_normal((cout, cin // g, k, k)) * 0.2).astype(np.float32),
            "scale": rng.uniform(0.5, 1.5, cout).astype(np.float32),
            "shift": rng.standard_normal(cout).astype(np.float32)}


def _compiled(case: tuple, prm: dict[str, np.ndarray]) -> Any:
    """``relu(conv(x) * scale + shift + r)``: an eval BatchNorm's per-channel affine, a
    residual and a ReLU after the convolution, one compile for every batch size."""
    _, _, _, _, _, s, p, d, g, _ = case
    m = nn.Module()
    for k, v in prm.items():
        setattr(m, k, nn.Parameter(gc.from_numpy(v.copy())))

    @gc.compile
    def f(x: Any, r: Any) -> Any:
        y = F.conv2d(x, m.w, stride=s, padding=p, dilation=d, groups=g)
        return F.relu(y * m.scale.reshape(1, -1, 1, 1) + m.shift.reshape(1, -1, 1, 1) + r)

    return f


def _torch(case: tuple, prm: dict[str, np.ndarray], x: np.ndarray, r: np.ndarray) -> np.ndarray:
    _, _, _, _, _, s, p, d, g, _ = case
    y = TF.conv2d(torch.from_numpy(x), torch.from_numpy(prm["w"]), stride=s, padding=p,
                  dilation=d, groups=g)
    y = y * torch.from_numpy(prm["scale"]).reshape(1, -1, 1, 1) + torch.from_numpy(
        prm["shift"]).reshape(1, -1, 1, 1) + torch.from_numpy(r)
    return torch.relu(y).numpy()


def _inputs(case: tuple, batch: int, prm: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    cin, _, h, w, _, s, p, d, g, _ = case
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, cin, h, w)).astype(np.float32)
    shape = TF.conv2d(torch.from_numpy(x), torch.from_numpy(prm["w"]), stride=s, padding=p,
                      dilation=d, groups=g).shape
    return x, rng.standard_normal(tuple(shape)).astype(np.float32)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_epilogue_matches_torch_and_the_unfused_step(case, monkeypatch):
    guard_scratch(monkeypatch)
    prm = _params(case)
    f = _compiled(case, prm)
    for batch in (5, 1, 2):
        x, r = _inputs(case, batch, prm)
        got = np.array(f(x, r))
        np.testing.assert_allclose(got, _torch(case, prm, x, r), rtol=2e-4, atol=2e-4,
                                   err_msg=f"batch {batch}")
        assert_nothing_past_arena(f.variants[-1].exe)
    assert f.compile_count == 1
    text = f.ir("fused")
    assert EPI in text and case[-1] in text, text
    assert "relu" in text.split(EPI)[1]
    # the same step with the consumer a kernel of its own: the same bits
    monkeypatch.setattr(options, "CONV_EPILOGUE", False)
    plain = _compiled(case, prm)
    x, r = _inputs(case, 5, prm)
    np.testing.assert_array_equal(np.array(plain(x, r)), np.array(f(x, r)))
    assert EPI not in plain.ir("fused")


def test_batched_im2col_runs_its_epilogue_in_place(monkeypatch):
    """Many channels on a small map take the batched im2col products (with a small L2):
    the consumer then runs in place over the whole result after them."""
    small = hostinfo.Caches(32 << 10, 64 << 10, "test")
    monkeypatch.setattr(hostinfo, "host_caches", lambda: small)
    monkeypatch.setattr(runtime_cpu, "host_caches", lambda: small)
    guard_scratch(monkeypatch)
    case = (40, 24, 5, 7, 3, 2, 1, 1, 1, "batched im2col + gemm")
    prm = _params(case)
    f = _compiled(case, prm)
    for batch in (20, 3):
        x, r = _inputs(case, batch, prm)
        np.testing.assert_allclose(np.array(f(x, r)), _torch(case, prm, x, r), rtol=2e-4,
                                   atol=2e-4)
        assert_nothing_past_arena(f.variants[-1].exe)
    text = f.ir("fused")
    assert EPI in text and case[-1] in text, text


def test_static_batch_of_one():
    """A static batch of 1: the consumer's loop runs over channels, not images."""
    case = CASES[3]
    prm = _params(case)
    _, _, _, _, _, s, p, d, g, _ = case
    m = nn.Module()
    for k, v in prm.items():
        setattr(m, k, nn.Parameter(gc.from_numpy(v.copy())))

    @gc.compile(dynamic=False)
    def f(x: Any, r: Any) -> Any:
        y = F.conv2d(x, m.w, stride=s, padding=p, dilation=d, groups=g)
        return F.relu(y * m.scale.reshape(1, -1, 1, 1) + m.shift.reshape(1, -1, 1, 1) + r)

    x, r = _inputs(case, 1, prm)
    np.testing.assert_allclose(np.array(f(x, r)), _torch(case, prm, x, r), rtol=2e-4,
                               atol=2e-4)
    assert EPI in f.ir("fused")


@pytest.mark.parametrize("stride", [1, 2])
def test_input_gradient_epilogue(stride):
    """``a.grad = conv_input_grad(t) * cos(a)``: the input gradient's only reader is an
    elementwise kernel, run as its epilogue (the strided one is a phase GEMM per image)."""
    rng = np.random.default_rng(stride)
    a0 = rng.standard_normal((3, 8, 9, 9)).astype(np.float32)
    w0 = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    size = 9 if stride == 1 else 5
    t0 = rng.standard_normal((3, 16, size, size)).astype(np.float32)
    hold = nn.Module()
    hold.a = nn.Parameter(gc.from_numpy(a0.copy()))
    hold.w = nn.Parameter(gc.from_numpy(w0.copy()))

    @gc.compile(dynamic=False)
    def g(t: Any) -> Any:
        hold.a.grad = None
        y = F.conv2d(gc.sin(hold.a), hold.w.detach(), stride=stride, padding=1)
        (y * t).sum().backward()
        return hold.a.grad

    got = np.array(g(t0))
    ta = torch.from_numpy(a0).requires_grad_()
    (TF.conv2d(torch.sin(ta), torch.from_numpy(w0), stride=stride, padding=1)
     * torch.from_numpy(t0)).sum().backward()
    np.testing.assert_allclose(got, ta.grad.numpy(), rtol=2e-4, atol=2e-4)
    text = g.ir("fused")
    assert EPI in text and "conv2d_input_grad" in text.split(EPI)[1].split("\n")[1], text


def test_eval_resnet_block_matches_torch():
    """An eval-mode BasicBlock: each BatchNorm (running statistics) with its ReLU, and the
    second with the residual, run in their convolution's kernel."""
    gc.manual_seed(0)
    torch.manual_seed(0)

    def block(lib: Any) -> Any:
        return lib.Sequential(lib.Conv2d(16, 16, 3, padding=1, bias=False),
                              lib.BatchNorm2d(16), lib.ReLU(),
                              lib.Conv2d(16, 16, 3, padding=1, bias=False),
                              lib.BatchNorm2d(16))

    gm, tm = block(nn), block(torch.nn)
    rng = np.random.default_rng(0)
    for (name, v) in list(tm.state_dict().items()):
        if v.dtype == torch.float32:
            val = rng.standard_normal(tuple(v.shape)).astype(np.float32) * 0.3
            if "running_var" in name:
                val = np.abs(val) + 0.5
            v.copy_(torch.from_numpy(val))
    gm.load_state_dict({k: gc.from_numpy(v.numpy().copy()) for k, v in tm.state_dict().items()})
    gm.eval()
    tm.eval()

    @gc.compile
    def f(x: Any) -> Any:
        with gc.no_grad():
            return F.relu(gm(x) + x)

    for batch in (4, 1):
        x = rng.standard_normal((batch, 16, 12, 12)).astype(np.float32)
        with torch.no_grad():
            want = torch.relu(tm(torch.from_numpy(x)) + torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(np.array(f(x)), want, rtol=1e-4, atol=1e-4)
    assert f.ir("fused").count(EPI) == 2


def test_training_with_conv_bias_relu_matches_torch():
    """A conv + bias + ReLU net trained for three SGD steps: the ReLU's output (written by
    the epilogue) feeds the backward, and the ReLU mask runs in an input gradient's
    epilogue; losses and weights follow PyTorch's."""
    gc.manual_seed(0)
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                             torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                             torch.nn.Flatten(), torch.nn.Linear(8 * 5 * 5, 4))
    gm = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                       nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU(),
                       nn.Flatten(), nn.Linear(8 * 5 * 5, 4))
    gm.load_state_dict({k: gc.from_numpy(v.detach().numpy().copy())
                        for k, v in tm.state_dict().items()})
    gopt = optim.SGD(gm.parameters(), lr=0.1, momentum=0.9)
    topt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)

    @gc.compile
    def step(x: Any, y: Any) -> Any:
        gopt.zero_grad()
        loss = F.cross_entropy(gm(x), y)
        loss.backward()
        gopt.step()
        return loss

    rng = np.random.default_rng(0)
    for i in range(3):
        x = rng.standard_normal((6, 3, 10, 10)).astype(np.float32)
        y = rng.integers(0, 4, 6)
        topt.zero_grad()
        tl = TF.cross_entropy(tm(torch.from_numpy(x)), torch.from_numpy(y))
        tl.backward()
        topt.step()
        np.testing.assert_allclose(float(step(x, y)), tl.item(), rtol=1e-5, err_msg=f"step {i}")
    for (k, v), (_, tv) in zip(gm.state_dict().items(), tm.state_dict().items()):
        np.testing.assert_allclose(np.asarray(v), tv.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    # the two forward convolutions, and the second one's input gradient (its one reader is
    # the first ReLU's mask)
    text = step.ir("fused")
    assert text.count(EPI) == 3, text
    assert "conv2d_input_grad" in "".join(part.split("\n")[1] for part in text.split(EPI)[1:])


def test_when_no_epilogue_is_planned():
    """No epilogue where it would change a value or could not be computed per element: the
    convolution's result also returned, read by two kernels, or read at another index."""
    rng = np.random.default_rng(0)
    w = nn.Parameter(gc.from_numpy((rng.standard_normal((8, 4, 3, 3)) * 0.2).astype(np.float32)))
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    xt, wt = torch.from_numpy(x), torch.from_numpy(w.numpy())

    @gc.compile
    def returned(x: Any) -> Any:
        y = F.conv2d(x, w, padding=1)
        return y, F.relu(y)

    @gc.compile
    def two_readers(x: Any) -> Any:
        y = F.conv2d(x, w, padding=1)
        return F.relu(y).sum((2, 3)) + y.amax((2, 3))

    @gc.compile
    def transposed(x: Any) -> Any:
        y = F.conv2d(x, w, padding=1)
        return F.relu(y.transpose(2, 3)) + 1.0

    want = TF.conv2d(xt, wt, padding=1)
    a, b = returned(x)
    np.testing.assert_allclose(np.array(a), want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(b), torch.relu(want).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(two_readers(x)),
                               (torch.relu(want).sum((2, 3)) + want.amax((2, 3))).numpy(),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(transposed(x)),
                               (torch.relu(want.transpose(2, 3)) + 1).numpy(), rtol=1e-5,
                               atol=1e-5)
    for f in (returned, two_readers, transposed):
        assert EPI not in f.ir("fused"), f.ir("fused")


SCRIPT = """
import numpy as np, graphc as gc, graphc.nn.functional as F
from graphc import nn
rng = np.random.default_rng(0)
out = {}
for cin, h in ((16, 32), (48, 14), (3, 10)):
    w = nn.Parameter(gc.from_numpy((rng.standard_normal((cin, cin, 3, 3)) * 0.2
                                    ).astype(np.float32)))
    b = nn.Parameter(gc.from_numpy(rng.standard_normal(cin).astype(np.float32)))

    @gc.compile
    def f(x):
        return F.relu(F.conv2d(x, w, b, padding=1))

    x = rng.standard_normal((6, cin, h, h)).astype(np.float32)
    out[f"c{cin}"] = np.array(f(x))
    assert "convolution with epilogue" in f.ir("fused")
np.savez(OUT, **out)
"""


def test_one_thread_and_two_give_the_same_bits(tmp_path):
    assert_bit_identical(run_per_thread_count(tmp_path, SCRIPT), min_arrays=3)


# ---------------------------------------------------------------------------------------
# fuzzing: random geometries (every path) and random elementwise consumers
# ---------------------------------------------------------------------------------------
_UNARY = ["relu", "sigmoid", "tanh", "abs", "neg", "square", "leaky", "clamp"]
_BINARY = ["add", "sub", "mul", "max"]
_OPERANDS = ["channel", "residual", "per_map", "per_column", "scalar"]


@st.composite
def consumers(draw: Any) -> list[tuple[str, str]]:
    """1-4 steps applied to the convolution's result: a unary op, or a binary op with a
    per-channel vector, a residual of the result's shape, a [1, C, H, W] or [1, 1, 1, W]
    tensor, or a constant (either side); sometimes the result flattened per image first
    (then only unary ops and constants)."""
    if draw(st.integers(0, 4)) == 0:
        return [("flatten", "")] + [("unary", draw(st.sampled_from(_UNARY)))
                                    for _ in range(draw(st.integers(1, 2)))]
    steps = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            steps.append(("unary", draw(st.sampled_from(_UNARY))))
        else:
            side = draw(st.sampled_from(["left", "right"]))
            steps.append((f"{draw(st.sampled_from(_BINARY))}:{side}",
                          draw(st.sampled_from(_OPERANDS))))
    return steps


def _apply(steps: list[tuple[str, str]], y: Any, ops: dict[str, Any], lib: Any) -> Any:
    for kind, arg in steps:
        if kind == "flatten":
            y = y.flatten(1)
            continue
        if kind == "unary":
            y = {"relu": lambda v: lib.relu(v), "sigmoid": lambda v: lib.sigmoid(v),
                 "tanh": lambda v: lib.tanh(v), "abs": lambda v: v.abs(),
                 "neg": lambda v: -v, "square": lambda v: v * v,
                 "leaky": lambda v: lib.where(v > 0, v, v * 0.1),
                 "clamp": lambda v: v.clamp(-0.5, 2.0)}[arg](y)
            continue
        op, side = kind.split(":")
        z = ops[arg]
        a, b = (y, z) if side == "left" else (z, y)
        y = {"add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q,
             "max": lambda p, q: lib.maximum(p, q)}[op](a, b)
    return y


@fuzz_settings(10, 200)
@given(geometries(width=[1, 2, 3, 4, 8, 16, 24, 64], size=20, batch=6), consumers())
def test_random_consumers_match_the_unfused_step(geom: dict[str, Any], steps: list) -> None:
    """Any elementwise consumer of any convolution: the fused step equals, bit for bit, the
    one with the consumer a kernel of its own, and the eager result within rounding."""
    c, o, (h, w), ker = geom["c"], geom["o"], geom["hw"], geom["kernel"]
    attrs, dtype = geom["attrs"], geom["dtype"]
    rng = np.random.default_rng(len(steps))
    m = nn.Module()
    m.w = nn.Parameter(gc.from_numpy(
        (rng.standard_normal((o, c // attrs["groups"]) + ker) * 0.3).astype(dtype)))
    x0 = rng.standard_normal((geom["batches"][0], c, h, w)).astype(dtype)
    oh, ow = torch.nn.functional.conv2d(torch.from_numpy(x0), torch.from_numpy(
        np.asarray(m.w)), **attrs).shape[2:]
    m.ch = nn.Parameter(gc.from_numpy(rng.standard_normal((1, o, 1, 1)).astype(dtype)))
    m.pm = nn.Parameter(gc.from_numpy(rng.standard_normal((1, o, oh, ow)).astype(dtype)))
    m.pc = nn.Parameter(gc.from_numpy(rng.standard_normal((1, 1, 1, ow)).astype(dtype)))

    def fn(x: Any, r: Any) -> Any:
        y = F.conv2d(x, m.w, **attrs)
        ops = {"channel": m.ch, "residual": r, "per_map": m.pm, "per_column": m.pc,
               "scalar": 0.75}
        return _apply(steps, y, ops, gc)

    fused = gc.compile(fn)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(options, "CONV_EPILOGUE", False)
        plain = gc.compile(fn)
        for batch in geom["batches"]:
            x = rng.standard_normal((batch, c, h, w)).astype(dtype)
            r = rng.standard_normal((batch, o, oh, ow)).astype(dtype)
            want = np.array(plain(x, r))
            got = np.array(fused(x, r))
            np.testing.assert_array_equal(got, want, err_msg=str(steps))
            eager = fn(gc.from_numpy(x), gc.from_numpy(r)).numpy()
            tol = 1e-4 if dtype == np.float32 else 1e-10
            np.testing.assert_allclose(got, eager, rtol=tol, atol=tol, err_msg=str(steps))
        plain_text = plain.ir("fused")  # (printing lowers again: inside the patch)
    assert EPI not in plain_text
    # an epilogue wherever the consumer survived simplification (neg(neg(y)) is y)
    assert EPI in fused.ir("fused") or plain_text.startswith("kernels of fn: 1 kernels")


def test_conv1d_and_a_reshaped_consumer():
    """A ``Conv1d`` is a conv2d of ``[B, C, 1, L]`` read back as ``[B, C, L]``: a reshape that
    keeps the batch first is still a read at the consumer's own index (so is a flatten of
    each image), and the consumer runs as the epilogue; a reshape that mixes images does
    not."""
    gc.manual_seed(0)
    torch.manual_seed(0)
    tm = torch.nn.Conv1d(16, 32, 5, padding=2)
    gm = nn.Conv1d(16, 32, 5, padding=2)
    gm.load_state_dict({k: gc.from_numpy(v.detach().numpy().copy())
                        for k, v in tm.state_dict().items()})
    conv = nn.Conv2d(4, 6, 3, padding=1)
    tconv = torch.nn.Conv2d(4, 6, 3, padding=1)
    conv.load_state_dict({k: gc.from_numpy(v.detach().numpy().copy())
                          for k, v in tconv.state_dict().items()})

    @gc.compile
    def f(x: Any) -> Any:
        with gc.no_grad():
            return F.relu(gm(x))

    @gc.compile
    def flat(x: Any) -> Any:
        with gc.no_grad():
            return F.sigmoid(conv(x).flatten(1))

    @gc.compile
    def mixed(x: Any) -> Any:
        with gc.no_grad():
            return F.sigmoid(conv(x).reshape(-1, 5 * 5))

    rng = np.random.default_rng(0)
    for batch in (3, 1):
        x = rng.standard_normal((batch, 16, 50)).astype(np.float32)
        with torch.no_grad():
            want = torch.relu(tm(torch.from_numpy(x))).numpy()
        np.testing.assert_allclose(np.array(f(x)), want, rtol=1e-5, atol=1e-5)
        x2 = rng.standard_normal((batch, 4, 5, 5)).astype(np.float32)
        with torch.no_grad():
            y = tconv(torch.from_numpy(x2))
        np.testing.assert_allclose(np.array(flat(x2)), torch.sigmoid(y.flatten(1)).numpy(),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.array(mixed(x2)),
                                   torch.sigmoid(y.reshape(-1, 25)).numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert EPI in f.ir("fused") and EPI in flat.ir("fused")
    assert EPI not in mixed.ir("fused")
