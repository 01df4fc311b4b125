"""Both threads at any batch: the last image of an odd batch split between them.

The batched Winograd kernels that give each thread half of the batch (``wino_gemm``'s and
``wino_wgrad``'s per-half mode, where the transformed weight fits L2) left the second
thread idle at batch 1 and a third of the work to one thread at batch 3. An odd batch's
last image is now split by its tile rows (``TileBlocks.for_part_blocks``): at batch 1, one
Zen 4 core -> two, 64 -> 64 channels on 56x56: forward 186 -> 279 GFLOP/s, weight gradient
170 -> 340. The implicit GEMMs (the forward's on channel and on position vectors, the strided input
gradient's phase GEMMs, the channel-vector weight gradient) split that image by register
tiles instead, the per-image Winograd kernel (fewer channels) by its blocks of tiles, and
Winograd's shared mode (the transformed weight past L2: both threads on
each block) splits a block of one image by its tile rows (256 -> 256 channels on 14x14 at
batch 1: one core 153, two 240 GFLOP/s).
Each net ends its convolutions with a ReLU, so every forward and input gradient carries an
epilogue; where the odd image went straight to the output, the kernel runs it there after
the split. The split does not depend on the thread count (one thread runs both parts), so
results are bit-identical on one and two threads; values against PyTorch in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _threads import assert_bit_identical, run_per_thread_count

import graphc as gc
from graphc import nn

torch = pytest.importorskip("torch")

BATCHES = (1, 3, 2)
# (name, channels, the second convolution's stride, map size)
NETS = (("wino", 64, 1, 20), ("strided", 64, 2, 20), ("narrow", 8, 2, 20),
        ("shared", 128, 1, 12), ("flat", 48, 1, 14))

_SCRIPT = """
import numpy as np
import graphc as gc
from graphc import nn


def net(c, stride):
    gc.manual_seed(0)
    return nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(c, c, 3, stride=stride, padding=1), nn.ReLU()).double()


out = {}
texts = []
for name, c, stride, size in NETS:
    m = net(c, stride)
    params = list(m.parameters())

    @gc.compile
    def step(x):
        for p in params:
            p.grad = None
        y = m(x)
        (y * y).sum().backward()
        return y

    rng = np.random.default_rng(0)
    for batch in BATCHES:
        x = gc.from_numpy(rng.standard_normal((batch, c, size, size)))
        out[f"{name}y{batch}"] = np.asarray(step(x))
        for i, p in enumerate(params):
            out[f"{name}g{batch}_{i}"] = p.grad.numpy().copy()
    texts.append(step.ir("fused"))
# every convolution but the weight gradients has an epilogue (a ReLU, or its mask): the
# odd image's goes over the output after the split (``conv._odd_epilogue``)
assert all(t.count("convolution with epilogue") >= 3 for t in texts), texts
# Winograd per half batch: forward, input and weight gradients
assert texts[0].count("half of the batch") >= 3, texts[0]
# the strided input gradients' phase GEMMs on channel and on position vectors
def igrads(text):
    return [ln for ln in text.splitlines() if "conv input grad: 4 stride-1 phase GEMMs" in ln]
assert any("channel vectors" in ln for ln in igrads(texts[1])), texts[1]
assert any("position vectors" in ln for ln in igrads(texts[2])), texts[2]
# the forward implicit GEMMs on channel and on position vectors
assert "conv: implicit GEMM per image from a zero-bordered grid" in texts[1], texts[1]
assert "conv: implicit GEMM per image from 4 of 4 stride-phase grids" in texts[2], texts[2]
# Winograd sharing each block between the threads (U past L2): a single image's tile rows
assert texts[3].count("split over the threads") >= 3, texts[3]
# Winograd per image (fewer channels): from phase grids, and from a tile-major copy
assert "Winograd F(2x2, 3x3) per image from 2x2 phase grids" in texts[2], texts[2]
assert "Winograd F(2x2, 3x3) per image from a tile-major copy" in texts[4], texts[4]
np.savez(OUT, **out)
"""


def test_odd_batches_use_both_threads_and_match_torch(tmp_path: Any) -> None:
    runs = run_per_thread_count(tmp_path, f"BATCHES = {BATCHES!r}\nNETS = {NETS!r}\n" + _SCRIPT)
    assert_bit_identical(runs, min_arrays=5 * len(BATCHES) * len(NETS))
    got = runs[1]
    for name, c, stride, size in NETS:
        gc.manual_seed(0)
        gm = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                           nn.Conv2d(c, c, 3, stride=stride, padding=1), nn.ReLU()).double()
        tm = torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.Conv2d(c, c, 3, stride=stride, padding=1),
                                 torch.nn.ReLU()).double()
        tm.load_state_dict({n: torch.from_numpy(np.array(v))
                            for n, v in gm.state_dict().items()})
        rng = np.random.default_rng(0)
        for batch in BATCHES:
            x = torch.from_numpy(rng.standard_normal((batch, c, size, size)))
            for p in tm.parameters():
                p.grad = None
            ty = tm(x)
            (ty * ty).sum().backward()
            np.testing.assert_allclose(got[f"{name}y{batch}"], ty.detach().numpy(),
                                       rtol=1e-10, atol=1e-10, err_msg=f"{name} {batch}")
            for i, tp in enumerate(tm.parameters()):
                np.testing.assert_allclose(got[f"{name}g{batch}_{i}"], tp.grad.numpy(),
                                           rtol=1e-9, atol=1e-8,
                                           err_msg=f"{name}, batch {batch}, parameter {i}")


def _training_step(c: int, stride: int) -> Any:
    gc.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(c, c, 3, stride=stride, padding=1), nn.ReLU()).double()
    params = list(m.parameters())

    @gc.compile
    def step(x: Any) -> Any:
        for p in params:
            p.grad = None
        y = m(x)
        (y * y).sum().backward()
        return y

    return step


def test_each_convolution_body_is_emitted_once(monkeypatch: Any) -> None:
    """The odd batch's last image takes the same code as the whole images
    (``conv_epilogue.part_images``, ``TileBlocks.for_part_blocks``), and the strided input
    gradient's phases whose positions have one shape share one loop
    (``conv._phase_runs``): every convolution task body emits its register-tile GEMM once,
    where the code for that image was a second copy of the body (a third of ResNet-18's
    convolution code and LLVM time) and each phase a copy of its own. Phases of different
    shapes (an odd input size) are still written out, one GEMM each. Counted while the
    kernels are emitted, per LLVM function, over the NETS paths (fresh sizes, no cache)."""
    from collections import Counter

    from graphc.codegen import conv, wino_gemm, wino_wgrad

    monkeypatch.setenv("GRAPHC_CACHE", "0")
    emitted: Counter[str] = Counter()
    net = [""]

    def counting(module: Any, name: str) -> None:
        orig = getattr(module, name)

        def spy(b: Any, *args: Any, **kwargs: Any) -> Any:
            emitted[f"{name} in {net[0]}: {b.function.name}"] += 1
            return orig(b, *args, **kwargs)

        monkeypatch.setattr(module, name, spy)

    counting(conv, "_chunked_sum")  # every implicit GEMM's and phase GEMM's K loop
    counting(conv, "_spill_add")  # the channel-vector weight gradient's tile blocks
    counting(wino_gemm, "_products")  # Winograd's 16 GEMMs a block
    counting(wino_wgrad, "_products")
    texts = []
    # sizes no other test compiles; the stride-2 nets once more at an odd size, whose four
    # phases have three shapes
    cases = [(name, c + 8, stride, size - 6) for name, c, stride, size in NETS]
    cases += [(f"{name}-odd", c + 8, stride, size - 7) for name, c, stride, size in NETS
              if stride == 2]
    for name, c, stride, size in cases:
        net[0] = name
        step = _training_step(c, stride)
        step(gc.from_numpy(np.ones((3, c, size, size))))
        texts.append(step.ir("fused"))
    assert emitted, "no convolution kernel was emitted"
    odd = {k: v for k, v in emitted.items() if "-odd:" in k and k.endswith("igrad.body")}
    once = {k: v for k, v in emitted.items() if k not in odd}
    assert len(odd) == 2 and all(v == 4 for v in odd.values()), (odd, texts)
    assert once and all(v == 1 for v in once.values()), (once, texts)
    # the paths the counts cover: Winograd a half batch each and shared, the channel-vector
    # weight gradient, the implicit GEMMs on channel and position vectors, both strided
    # input gradients (on channel and on position vectors)
    assert any("half of the batch" in t for t in texts), texts
    assert any("split over the threads" in t for t in texts), texts
    bodies = {k.split(": ")[1].partition(".")[2] for k in once}
    assert bodies >= {"igemm.body", "wchan.body", "igrad.body"}, once
    assert sum(k.endswith("igrad.body") for k in once) == 2, once
