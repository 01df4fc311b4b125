"""bf16 convolutions on the matrix units (codegen/conv_bf16.py).

Under autocast a convolution's operands are bf16; where the host has AMX or AVX512-BF16 the
three conv ops run as im2col + the bf16 GEMM instead of being widened to float32. Each
geometry here runs the same autocast training step three ways: on the matrix-unit path
(each variant the host has, forced lower with ``GRAPHC_BF16_ISA``), on the float32 path
(``GRAPHC_BF16_ISA=generic`` declines the new path, so legalisation widens the convs), and
in PyTorch's autocast. Both graphc paths sum exact bf16 products in float32 and round once,
so they may differ only where the summation order moves a sum across a bf16 rounding
boundary: a bf16 ulp of the largest value. PyTorch (oneDNN) gets a looser bound, as its
bf16 rounding of the incoming gradient differs. Geometries cross the path's edges: batch 1
and odd batches (the two thread parts split unevenly), strides, dilation, no padding and
padding wider than the kernel's reach, 1x1 and 7x7 kernels, rectangular kernels and
images, images large enough that the input gradient's dcol and the weight gradient's image
chunks come in several pieces, and bf16 operands that are strided views.

Hosts without either feature skip the runs; the asm test still compiles the path for a
target that has them, so an AVX2-only CI machine proves the kernels lower.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from _torch import torch
from graphc.codegen import options
from graphc.codegen.gemm_bf16 import ISAS, bf16_isa

import graphc as gc
from graphc.nn import functional as F

TF = torch.nn.functional
HOST_ISA = bf16_isa()
PATH_ISAS = ("amx", "avx512bf16")

# (N, C, H, W, O, (KH, KW), stride, padding, dilation, bias)
GEOMETRIES = [
    (2, 3, 8, 8, 4, (3, 3), 1, 1, 1, True),
    (3, 16, 14, 14, 32, (3, 3), 2, 1, 1, True),       # odd batch, stride 2
    (1, 8, 9, 11, 5, (1, 1), 1, 0, 1, True),          # batch 1, 1x1, rectangular image
    (2, 4, 12, 12, 8, (3, 3), 1, 2, 2, False),        # dilation 2
    (5, 3, 20, 20, 8, (7, 7), 2, 3, 1, True),         # the ResNet stem's shape
    (4, 32, 7, 7, 64, (3, 3), 1, 1, 1, True),         # a last-stage map: several images/chunk
    (2, 6, 10, 13, 7, (3, 1), (2, 1), (0, 1), 1, True),  # rectangular kernel, mixed stride
    (3, 5, 6, 6, 4, (3, 3), 1, 3, 1, True),           # padding past the kernel's reach
    (2, 64, 32, 32, 64, (3, 3), 1, 1, 1, False),      # dcol in several chunks
]


def _ids(g):
    n, c, h, w, o, k, s, p, d, _ = g
    return f"n{n}c{c}_{h}x{w}_o{o}_k{k[0]}{k[1]}_s{s}_p{p}_d{d}".replace(" ", "")


def _skip_unless(isa: str) -> None:
    if ISAS.index(HOST_ISA) < ISAS.index(isa):
        pytest.skip(f"this host has no {isa} (best bf16 variant here: {HOST_ISA})")


def _data(geom, seed=0):
    n, c, h, w, o, k, *_ = geom
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((o, c, *k)) / np.sqrt(c * k[0] * k[1])).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    t = rng.standard_normal((n, o, 1, 1)).astype(np.float32)  # mixes the output channels
    return x, wt, b, t


def _graphc_step(geom, isa, monkeypatch):
    """y, dx, dw, db of one compiled autocast step on ``isa`` (``generic``: float32 convs),
    and the step's fused IR."""
    _, _, _, _, _, _, s, p, d, bias = geom
    x, w, b, t = _data(geom)
    monkeypatch.setenv("GRAPHC_BF16_ISA", isa)
    gx = gc.tensor(x, requires_grad=True)
    gw, gb = gc.tensor(w, requires_grad=True), gc.tensor(b, requires_grad=True)
    gt = gc.tensor(t)

    def f(scale):
        xx = gx * scale  # the input's gradient flows through the conv's
        with gc.autocast("cpu", dtype=gc.bfloat16):
            y = F.conv2d(xx, gw, gb if bias else None, stride=s, padding=p, dilation=d)
        loss = (y.float() * gt).square().mean()
        loss.backward()
        return y

    cf = gc.compile(f, debug=False)
    y = cf(gc.tensor(np.float32(1.0)))
    assert y.dtype is gc.bfloat16
    grads = [gx.grad.numpy(), gw.grad.numpy(), gb.grad.numpy() if bias else None]
    return [y.float().numpy()] + grads, cf.ir("fused")


def _torch_step(geom):
    _, _, _, _, _, _, s, p, d, bias = geom
    x, w, b, t = _data(geom)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = TF.conv2d(tx, tw, tb if bias else None, stride=s, padding=p, dilation=d)
    (y.float() * torch.tensor(t)).square().mean().backward()
    return [y.float().detach().numpy(), tx.grad.numpy(), tw.grad.numpy(),
            tb.grad.numpy() if bias else None]


def _close(got, want, ulps, what):
    # bf16 has 8 significant bits: one ulp of the largest value is max * 2^-7 at most
    tol = ulps * 2.0 ** -7 * (np.abs(want).max() + 1e-30)
    err = np.abs(got.astype(np.float64) - want).max()
    assert err <= tol, f"{what}: max error {err:.3g} above {tol:.3g}"


@pytest.mark.parametrize("isa", PATH_ISAS)
@pytest.mark.parametrize("geom", GEOMETRIES, ids=[_ids(g) for g in GEOMETRIES])
def test_matrix_unit_convs_match_float32_path_and_torch(geom, isa, monkeypatch):
    _skip_unless(isa)
    # the bf16 products for every geometry (by default, AVX512-BF16 hosts convolve 3x3
    # stride-1 ones as float32 Winograd: ``test_winograd_in_float32_where_it_is_faster``)
    monkeypatch.setattr(options, "BF16_WINOGRAD", False)
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    got, fused = _graphc_step(geom, isa, monkeypatch)
    assert fused.count(f"conv: im2col + bf16 gemm on {isa}") == 3, fused
    ref, ref_fused = _graphc_step(geom, "generic", monkeypatch)
    assert "im2col + bf16 gemm" not in ref_fused  # the float32 path really ran
    want = _torch_step(geom)
    for name, a, r, t in zip(("y", "dx", "dw", "db"), got, ref, want):
        if a is None:
            continue
        assert np.isfinite(a).all(), name
        _close(a, r, 1, f"{name} against the float32 path")
        _close(a, t, 3, f"{name} against torch.autocast")


@pytest.mark.parametrize("geom", [g for g in GEOMETRIES if g[5] == (3, 3) and g[6:9] == (1, 1, 1)
                                  and min(g[1], g[4]) >= 16],
                         ids=lambda g: _ids(g))
def test_winograd_in_float32_where_it_is_faster(geom, monkeypatch):
    """On an AVX512-BF16 host (no AMX), bf16 3x3 stride-1 convolutions the float32 kernels
    run as Winograd are computed in float32 between casts: as close to ``torch.autocast``
    as the bf16 products are, and the result is bf16 as autocast's."""
    _skip_unless("avx512bf16")
    got, fused = _graphc_step(geom, "avx512bf16", monkeypatch)
    assert "im2col + bf16 gemm" not in fused, fused
    for op in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad"):
        assert f"= {op} : f32" in fused, (op, fused)  # in float32, between casts
    assert "conv weight grad: Winograd F(2x2, 3x3)" in fused, fused
    want = _torch_step(geom)
    for name, a, t in zip(("y", "dx", "dw", "db"), got, want):
        if a is not None:
            assert np.isfinite(a).all(), name
            _close(a, t, 3, f"{name} against torch.autocast")


@pytest.mark.parametrize("isa", PATH_ISAS)
def test_strided_bf16_operands(isa, monkeypatch):
    """bf16 operands that are views (a transposed image, a weight permuted out of another
    layout, a sliced gradient) are read through their strides, forward and backward."""
    _skip_unless(isa)
    monkeypatch.setenv("GRAPHC_BF16_ISA", isa)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6, 11, 9)).astype(np.float32)  # used as [3, 6, 9, 11]
    w = (rng.standard_normal((6, 3, 3, 8)) * 0.2).astype(np.float32)  # [C, KH, KW, O]
    gw = gc.tensor(w, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)

    def g(x):
        xb = x.bfloat16().transpose(2, 3)
        wb = gw.bfloat16().permute(3, 0, 1, 2)  # [O, C, KH, KW], not contiguous
        y = F.conv2d(xb, wb, padding=1, stride=(1, 2))
        return (y[:, ::2].float() ** 2).sum()

    cf = gc.compile(lambda x: g(x).backward() or gw.grad * 1, debug=False)
    got = cf(gc.tensor(x)).numpy()
    assert cf.ir("fused").count(f"im2col + bf16 gemm on {isa}") >= 2
    xb = torch.tensor(x).bfloat16().transpose(2, 3)
    y = TF.conv2d(xb, tw.bfloat16().permute(3, 0, 1, 2), padding=1, stride=(1, 2))
    (y[:, ::2].float() ** 2).sum().backward()
    _close(got, tw.grad.numpy(), 3, "dw")


def test_float32_path_where_the_path_does_not_apply(monkeypatch):
    """Groups, debug builds and the portable GEMM keep the float32 kernels (with casts)."""
    x = gc.tensor(np.random.default_rng(0).standard_normal((2, 4, 8, 8)).astype(np.float32))
    w = gc.tensor(np.ones((6, 2, 3, 3), np.float32) * 0.1)

    def f(x):
        with gc.autocast("cpu"):
            one = F.conv2d(x, w[:, :, :1, :1].repeat(1, 2, 1, 1))
            return F.conv2d(x, w, groups=2, padding=1) + one

    fused = gc.compile(f, debug=False)
    fused(x)
    n_native = 1 if ISAS.index(HOST_ISA) >= ISAS.index("avx512bf16") else 0
    assert fused.ir("fused").count("im2col + bf16 gemm") == n_native
    dbg = gc.compile(f, debug=True)
    np.testing.assert_allclose(dbg(x).float().numpy(), fused(x).float().numpy(),
                               rtol=2 ** -7, atol=2 ** -7)
    assert "im2col + bf16 gemm" not in dbg.ir("fused")
    monkeypatch.setenv("GRAPHC_BF16_ISA", "generic")
    gen = gc.compile(f, debug=False)
    gen(x)
    assert "im2col + bf16 gemm" not in gen.ir("fused")


FULL = "+avx2,+fma,+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512bf16,+amx-tile,+amx-bf16"


@pytest.mark.parametrize("features,ins", [(FULL, "tdpbf16ps"),
                                          (FULL.split(",+amx")[0], "vdpbf16ps")])
def test_path_lowers_for_a_target_with_the_features(features, ins, monkeypatch):
    """Whatever the host, an autocast conv step lowered for a target with AMX (or only
    AVX512-BF16) takes the path and its assembly holds the matrix instructions."""
    import llvmlite.binding as llvm
    from graphc.codegen.cpu import compile_module, init_llvm
    from graphc.codegen.lower import Lowering
    from graphc.codegen.matmul import bf16_target

    monkeypatch.delenv("GRAPHC_BF16_ISA", raising=False)
    w = gc.tensor(np.ones((8, 4, 3, 3), np.float32) * 0.1, requires_grad=True)

    def f(x):
        with gc.autocast("cpu"):
            y = F.conv2d(x, w, padding=1)
        y.float().sum().backward()
        return w.grad * 1

    cf = gc.compile(f, debug=False)
    cf(gc.tensor(np.ones((2, 4, 6, 6), np.float32)))
    init_llvm()
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu="x86-64", features=features, opt=3)
    with bf16_target(features):
        low = Lowering(cf.variants[-1].graph, name="conv_bf16_step", triple=tm.triple,
                       data_layout=str(tm.target_data), wide=True)
        asm = tm.emit_assembly(compile_module(low, tm))
    assert ins in asm
    assert "zmm" in asm


THREADS_SCRIPT = r'''
import numpy as np, graphc as gc
from graphc import nn, optim
gc.manual_seed(0)
m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                  nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                  nn.Conv2d(32, 32, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                  nn.Linear(32, 10))
opt = optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

@gc.compile
def step(x, y):
    opt.zero_grad()
    with gc.autocast("cpu"):
        loss = nn.functional.cross_entropy(m(x), y)
    loss.backward(); opt.step(); return loss

rng = np.random.default_rng(0)
out = {}
for b in (9, 1, 16):
    x = rng.standard_normal((b, 3, 12, 12)).astype(np.float32)
    y = rng.integers(0, 10, b)
    for i in range(2):
        out[f"b{b}.loss{i}"] = np.asarray(step(x, y))
assert "im2col + bf16 gemm" in step.ir("fused")
for k, v in m.state_dict().items():
    out[k] = np.asarray(v)
np.savez(OUT, **out)
'''


def test_two_threads_bit_identical_to_one(tmp_path):
    """The two thread parts run the same code on their images; the weight gradient adds
    the parts' float32 accumulators in a fixed order: one and two threads agree bit for bit
    (batches that split unevenly, and batch 1, whose second part is empty)."""
    if ISAS.index(HOST_ISA) < ISAS.index("avx512bf16"):
        pytest.skip(f"this host has no matrix-unit bf16 (best: {HOST_ISA})")
    res = []
    for threads in (1, 2):
        out = tmp_path / f"t{threads}.npz"
        env = {**os.environ, "GRAPHC_NUM_THREADS": str(threads), "GRAPHC_CACHE": "0"}
        env.pop("GRAPHC_DEBUG", None)
        r = subprocess.run([sys.executable, "-c", f"OUT = {str(out)!r}\n" + THREADS_SCRIPT],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        with np.load(out) as z:
            res.append({k: z[k] for k in z.files})
    a, b = res
    assert a.keys() == b.keys() and len(a) > 10
    for k in a:
        assert np.array_equal(a[k], b[k]), k


CACHED_SCRIPT = r'''
import numpy as np, graphc as gc
w = gc.tensor(np.full((8, 4, 3, 3), 0.1, np.float32), requires_grad=True)

@gc.compile
def step(x):
    with gc.autocast("cpu"):
        y = gc.nn.functional.conv2d(x, w, padding=1)
    y.float().sum().backward()
    return w.grad * 1

print(float(step(np.ones((2, 4, 6, 6), np.float32)).sum()), step.compile_log.counts['disk cache'])
'''


def test_amx_conv_step_from_the_disk_cache(tmp_path):
    """Regression: a step whose only AMX work is convolutions, loaded from the disk cache by
    a fresh process (no GEMM compiled there, so nothing had asked the kernel for tile data)
    died of SIGILL. The loader now asks for tile permission for bf16 convs too."""
    if HOST_ISA != "amx":
        pytest.skip(f"this host has no AMX (best bf16 variant here: {HOST_ISA})")
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("GRAPHC_CACHE", None)
    env.pop("GRAPHC_BF16_ISA", None)
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", CACHED_SCRIPT], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
        outs.append(r.stdout.split())
    assert outs[0][0] == outs[1][0]
    assert [o[1] for o in outs] == ["miss", "hit"]
