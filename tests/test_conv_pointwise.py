"""1x1 stride-1 convolutions on the float GEMM, read in place (``codegen.conv_pointwise``).

Which convolutions take the path (``ir("fused")`` names it) and which keep the other
kernels; forward, input and weight gradients against PyTorch at batches 1, 2 and 5 with
one compile (an odd batch leaves the two threads unequal halves, batch 1 splits its one
product instead); a training step whose convolution runs its consumer (bias and ReLU) as an
epilogue; and bit-identical results on one thread and two.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from graphc.codegen import conv_pointwise

import graphc as gc
import graphc.nn.functional as F

torch = pytest.importorskip("torch")

PATH = "1x1 stride 1, one gemm per image read in place"


def _conv_lines(fn: object) -> list[str]:
    return [ln.strip() for ln in fn.ir("fused").splitlines() if ln.strip().startswith("conv")]


def _fns(cin: int, cout: int, hw: int, dtype: type) -> tuple[object, object, object, np.ndarray]:
    rng = np.random.default_rng(cin * 1000 + cout)
    w0 = rng.standard_normal((cout, cin, 1, 1)).astype(dtype)
    w = gc.nn.Parameter(gc.from_numpy(w0.copy()))
    x = np.zeros((2, cin, hw, hw), dtype)
    gy = np.zeros((2, cout, hw, hw), dtype)

    @gc.compile(example_args=(x,))
    def fwd(a: object) -> object:
        with gc.no_grad():
            return F.conv2d(a, w)

    @gc.compile(example_args=(gy,))
    def dgrad(g: object) -> object:
        with gc.no_grad():
            return F.conv_transpose2d(g, w)

    @gc.compile(example_args=(x, gy))
    def wgrad(a: object, g: object) -> object:
        w.grad = None
        (F.conv2d(a, w) * g).sum().backward()
        return w.grad

    return fwd, dgrad, wgrad, w0


@pytest.mark.parametrize("cin,cout,hw", [(64, 64, 9), (96, 96, 12), (128, 64, 32), (65, 70, 32)])
def test_plan_takes_pointwise_convolutions(cin: int, cout: int, hw: int) -> None:
    for fn in _fns(cin, cout, hw, np.float32)[:3]:
        lines = _conv_lines(fn)
        assert any(PATH in ln for ln in lines), lines


@pytest.mark.parametrize("case", [
    (32, 64, 16, 1, 0, "few channels"),
    (64, 64, 8, 1, 0, "a map of SMALL_MAP positions"),
    (64, 64, 16, 2, 0, "stride 2"),
    (64, 64, 16, 1, 1, "padding"),
])
def test_plan_leaves_other_convolutions(case: tuple) -> None:
    cin, cout, hw, stride, pad, why = case
    w = gc.nn.Parameter(gc.randn(cout, cin, 1, 1))
    x = np.zeros((2, cin, hw, hw), np.float32)

    @gc.compile(example_args=(x,))
    def fwd(a: object) -> object:
        with gc.no_grad():
            return F.conv2d(a, w, stride=stride, padding=pad)

    assert not any(PATH in ln for ln in _conv_lines(fwd)), why


def test_reducing_product_on_a_modest_map_keeps_the_tiles() -> None:
    """K > M on fewer than WIDE_MAP positions: the forward keeps the implicit GEMM (which
    ran as fast or faster there), its weight gradient still takes the GEMM."""
    fwd, _, wgrad, _ = _fns(256, 64, 14, np.float32)
    assert not any(PATH in ln for ln in _conv_lines(fwd))
    assert any(PATH in ln for ln in _conv_lines(wgrad))
    wide = 32  # 1024 positions: the forward takes it however it reduces
    assert wide * wide >= conv_pointwise.WIDE_MAP
    fwd, _, _, _ = _fns(128, 64, wide, np.float32)
    assert any(PATH in ln for ln in _conv_lines(fwd))


def test_spatially_permuted_input_keeps_the_tiles() -> None:
    """An input seen through a permute of H and W has no contiguous position rows: not
    this path, and the values still equal PyTorch's."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((64, 64, 1, 1)).astype(np.float32)
    w = gc.from_numpy(w0)
    x = rng.standard_normal((2, 64, 12, 10)).astype(np.float32)

    @gc.compile(example_args=(x,))
    def fwd(a: object) -> object:
        return F.conv2d(a.permute(0, 1, 3, 2), w)

    assert not any(PATH in ln for ln in _conv_lines(fwd))
    want = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 1, 3, 2),
                                      torch.from_numpy(w0)).numpy()
    np.testing.assert_allclose(np.asarray(fwd(x)), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cin,cout,hw", [(64, 64, 9), (128, 64, 32), (65, 70, 32)])
def test_values_match_torch_at_every_batch(cin: int, cout: int, hw: int, dtype: type) -> None:
    fwd, dgrad, wgrad, w0 = _fns(cin, cout, hw, dtype)
    tw = torch.from_numpy(w0)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    rng = np.random.default_rng(7)
    for batch in (5, 1, 2):
        x = rng.standard_normal((batch, cin, hw, hw)).astype(dtype)
        gy = rng.standard_normal((batch, cout, hw, hw)).astype(dtype)
        tx, tg = torch.from_numpy(x).requires_grad_(), torch.from_numpy(gy)
        ty = torch.nn.functional.conv2d(tx, tw.requires_grad_())
        tx.grad = tw.grad = None
        (ty * tg).sum().backward()
        for name, got, want in [("forward", fwd(x), ty.detach()),
                                ("input grad", dgrad(gy), tx.grad),
                                ("weight grad", wgrad(x, gy), tw.grad)]:
            want = want.numpy()
            scale = max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=rtol * scale,
                                       err_msg=f"{name}, batch {batch}")
    for fn in (fwd, dgrad, wgrad):
        assert fn.compile_count == 1


def _epilogue_conv_lines(fused: str) -> list[str]:
    """The ``conv...:`` description of each convolution planned with an epilogue (the first
    such line after each "convolution with epilogue" header of ``ir("fused")``)."""
    out, pending = [], False
    for ln in (x.strip() for x in fused.splitlines()):
        if ln.startswith("convolution with epilogue"):
            pending = True
        elif pending and ln.startswith("conv"):
            out.append(ln)
            pending = False
    return out


def _step_pair(batch: int) -> tuple:
    gc.manual_seed(0)
    gm = gc.nn.Sequential(gc.nn.Conv2d(64, 96, 1), gc.nn.ReLU(), gc.nn.Conv2d(96, 64, 1),
                          gc.nn.ReLU(), gc.nn.Conv2d(64, 64, 1, bias=False))
    tm = torch.nn.Sequential(torch.nn.Conv2d(64, 96, 1), torch.nn.ReLU(),
                             torch.nn.Conv2d(96, 64, 1), torch.nn.ReLU(),
                             torch.nn.Conv2d(64, 64, 1, bias=False)).double()
    tm.load_state_dict({k: torch.from_numpy(np.array(v, np.float64))
                        for k, v in gm.state_dict().items()})
    return gm, tm


def test_training_step_with_epilogues_matches_torch() -> None:
    """Bias and ReLU run as the convolutions' epilogues (staged image by image, and for
    one image staged by the split product), the input gradients' ReLU masks likewise; the
    step's loss and every gradient equal PyTorch's (float64), at batches 3 and 1."""
    gm, tm = _step_pair(3)
    opt = gc.optim.SGD(gm.parameters(), lr=0.0)
    x0 = np.zeros((3, 64, 9, 9), np.float32)

    @gc.compile(example_args=(x0,))
    def step(x: object) -> object:
        opt.zero_grad()
        loss = (gm(x) ** 2).mean()
        loss.backward()
        return loss

    # the 1x1 convolutions themselves carry the epilogues: a forward (bias + ReLU) and an
    # input gradient (the ReLU mask), each in a "convolution with epilogue" block
    with_epilogue = _epilogue_conv_lines(step.ir("fused"))
    assert any(ln.startswith("conv: " + PATH) for ln in with_epilogue), with_epilogue
    assert any(ln.startswith("conv input grad: " + PATH) for ln in with_epilogue), with_epilogue
    rng = np.random.default_rng(11)
    for batch in (3, 1):
        x = rng.standard_normal((batch, 64, 9, 9)).astype(np.float32)
        loss = float(step(x))
        tm.zero_grad()
        tl = (tm(torch.from_numpy(x).double()) ** 2).mean()
        tl.backward()
        assert loss == pytest.approx(float(tl), rel=1e-5)
        for (name, p), (_, tp) in zip(gm.named_parameters(), tm.named_parameters(),
                                      strict=True):
            g = tp.grad.numpy()
            np.testing.assert_allclose(np.asarray(p.grad), g, rtol=1e-4,
                                       atol=1e-5 * float(np.abs(g).max()),
                                       err_msg=f"{name}, batch {batch}")
    assert step.compile_count == 1


def test_threads_bit_identical(tmp_path: Path) -> None:
    """One thread and two give the same bits: forward, input and weight gradients (the
    weight gradient's two half-batch sums included), at an odd batch and at batch 1."""
    from _threads import assert_bit_identical, run_per_thread_count

    script = textwrap.dedent("""
        import numpy as np, graphc as gc
        import graphc.nn.functional as F
        gc.manual_seed(0)
        m = gc.nn.Sequential(gc.nn.Conv2d(64, 96, 1), gc.nn.ReLU(), gc.nn.Conv2d(96, 64, 1))
        opt = gc.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        rng = np.random.default_rng(5)
        out = {}
        @gc.compile(example_args=(np.zeros((5, 64, 12, 12), np.float32),))
        def step(x):
            opt.zero_grad()
            loss = (m(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        for batch in (5, 1):
            x = rng.standard_normal((batch, 64, 12, 12)).astype(np.float32)
            out[f"loss{batch}"] = np.asarray(step(x))
            for name, p in m.named_parameters():
                out[f"{name}{batch}"] = np.asarray(p).copy()
                out[f"{name}.grad{batch}"] = np.asarray(p.grad).copy()
        assert "one gemm per image" in step.ir("fused")
        np.savez(OUT, **out)
    """)
    assert_bit_identical(run_per_thread_count(tmp_path, script), min_arrays=10)
