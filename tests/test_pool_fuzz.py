"""Random 2-D pools against PyTorch (hypothesis): ``max_pool2d`` (kernel, stride, padding,
dilation, ceil mode), ``avg_pool2d`` (``count_include_pad``, ``divisor_override``, ceil
mode), ``adaptive_max_pool2d`` and ``adaptive_avg_pool2d`` (output sizes that divide the
input and that do not), over inputs with many tied maxima (a ReLU's zeros, values rounded to
halves). Each draw checks the values and the input gradient eagerly, and the values and a
parameter's gradient compiled, against PyTorch; an argument PyTorch rejects must raise in
graphc too. Tied maxima are where max pools differ most easily: ATen's kernels send the
whole gradient to the first maximum, ``amax`` splits it (the bug this fuzzer found in the
gathered-window adaptive max pool).

Profiles as in ``test_fuzz.py``: ``ci`` (default) and ``long``
(``HYPOTHESIS_PROFILE=long pytest tests/test_pool_fuzz.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _fuzz_settings import fuzz_settings
from _torch import torch
from hypothesis import given
from hypothesis import strategies as st

import graphc as gc
import graphc.nn.functional as F
from graphc import nn

FUZZ = fuzz_settings(30, 500)
TF = torch.nn.functional
POOLS = {"max": (F.max_pool2d, TF.max_pool2d), "avg": (F.avg_pool2d, TF.avg_pool2d),
         "amax": (F.adaptive_max_pool2d, TF.adaptive_max_pool2d),
         "aavg": (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d)}


@st.composite
def pools(draw: Any) -> tuple[str, dict[str, Any], tuple[int, ...], int]:
    kind = draw(st.sampled_from(sorted(POOLS)))
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 12)), draw(st.integers(1, 24)),
             draw(st.integers(1, 24)))
    kw: dict[str, Any] = {}
    if kind in ("max", "avg"):
        k = draw(st.sampled_from([1, 2, 3, 5, (2, 3), (3, 1)]))
        kw["kernel_size"] = k
        kw["stride"] = draw(st.sampled_from([None, 1, 2, 3, (1, 2), (3, 2)]))
        kw["padding"] = draw(st.sampled_from([0, 0, 1, 2]))
        kw["ceil_mode"] = draw(st.booleans())
        if kind == "max":
            kw["dilation"] = draw(st.sampled_from([1, 1, 2]))
        else:
            kw["count_include_pad"] = draw(st.booleans())
            kw["divisor_override"] = draw(st.sampled_from([None, None, 1, 5]))
    else:
        kw["output_size"] = draw(st.sampled_from([1, 2, 3, 5, 7, (2, 5), (4, 1), (6, 3)]))
    return kind, kw, shape, draw(st.integers(0, 2**31 - 1))


@FUZZ
@given(pools())
def test_random_pools_match_torch(case: tuple) -> None:
    kind, kw, shape, seed = case
    gfn, tfn = POOLS[kind]
    rng = np.random.default_rng(seed)
    # a ReLU's output rounded to halves: whole windows of zeros, repeated maxima
    x = np.maximum(np.round(rng.standard_normal(shape) * 2) / 2, 0).astype(np.float32)
    if rng.random() < 0.5:
        x -= 0.25  # and windows whose maxima are negative
    tx = torch.tensor(x, requires_grad=True)
    try:
        ty = tfn(tx, **kw)
    except RuntimeError as err:
        try:
            gfn(gc.tensor(x), **kw)
        except (RuntimeError, ValueError):
            return
        raise AssertionError(f"PyTorch rejects {kind} {kw} on {shape}; graphc does not"
                             ) from err
    if torch.isinf(ty).any():  # a max-pool window over no element (the input is finite):
        # graphc refuses it (``_no_empty_windows``); PyTorch's backward would write past the
        # input there (heap corruption: an abort, once in a long run), so it is not run
        with pytest.raises(NotImplementedError, match="holds no element"):
            gfn(gc.tensor(x), **kw)
        return
    w = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.tensor(w)).sum().backward()
    gx = gc.tensor(x, requires_grad=True)
    gy = gfn(gx, **kw)
    assert tuple(gy.shape) == tuple(ty.shape)
    (gy * gc.tensor(w)).sum().backward()
    np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)

    p = nn.Parameter(gc.tensor(np.ones(shape[1:], np.float32)))

    @gc.compile
    def step(a: Any, wt: Any) -> Any:
        p.grad = None
        y = gfn(a * p, **kw)
        (y * wt).sum().backward()
        return y

    tp = torch.ones(shape[1:], requires_grad=True)
    (tfn(torch.tensor(x) * tp, **kw) * torch.tensor(w)).sum().backward()
    y = step(gc.tensor(x), gc.tensor(w))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_a_max_pool_window_over_no_element_raises_before_running() -> None:
    """Regression (a long-profile draw): kernel 2, dilation 2, padding 1 on a 1x1 map puts
    both taps outside it. PyTorch returns -inf with index 2 (outside a one-element input)
    and a backward that writes there; graphc raised an out-of-range ``IndexError`` from its
    gather, eagerly and compiled. It now names the empty window before anything runs. A
    dilated window that reaches the map still matches PyTorch, values and gradients."""
    kw = dict(kernel_size=2, padding=1, dilation=2)
    x = np.zeros((1, 1, 1, 1), np.float32)
    assert torch.isinf(TF.max_pool2d(torch.tensor(x), **kw)).all()
    with pytest.raises(NotImplementedError, match="output row 0 holds no element"):
        F.max_pool2d(gc.tensor(x), **kw)
    with pytest.raises(NotImplementedError, match="holds no element"):
        gc.compile(lambda a: F.max_pool2d(a, **kw))(x)
    with pytest.raises(NotImplementedError, match="output column 0 holds no element"):
        F.max_pool1d(gc.tensor(np.zeros((1, 2, 1), np.float32)), 2, padding=1, dilation=2)
    x = np.random.default_rng(0).standard_normal((2, 3, 3, 3)).astype(np.float32)
    kw = dict(kernel_size=2, padding=1, dilation=3)
    tx = torch.tensor(x, requires_grad=True)
    TF.max_pool2d(tx, **kw).sum().backward()
    gx = gc.tensor(x, requires_grad=True)
    y = F.max_pool2d(gx, **kw)
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy(), TF.max_pool2d(torch.tensor(x), **kw).numpy())
    np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())


@st.composite
def interpolations(draw: Any) -> tuple[dict[str, Any], tuple[int, ...], int]:
    mode = draw(st.sampled_from(["nearest", "nearest-exact", "bilinear", "bicubic", "area"]))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 11)),
             draw(st.integers(1, 11)))
    kw: dict[str, Any] = {"mode": mode}
    if draw(st.booleans()):
        kw["size"] = (draw(st.integers(1, 19)), draw(st.integers(1, 19)))
    else:
        kw["scale_factor"] = draw(st.sampled_from([0.7, 1.0, 1.3, 1.5, 2.0, 2.5, 3.0,
                                                   (1.3, 3.0), (0.5, 1.3)]))
        kw["recompute_scale_factor"] = draw(st.sampled_from([None, True]))
    if mode in ("bilinear", "bicubic"):
        kw["align_corners"] = draw(st.booleans())
    return kw, shape, draw(st.integers(0, 2**31 - 1))


@FUZZ
@given(interpolations())
def test_random_interpolations_match_torch(case: tuple) -> None:
    """``F.interpolate`` in every mode but antialiasing (a NotImplementedError), eagerly and
    compiled. It found bilinear resampling a dim whose size a ``scale_factor`` leaves
    unchanged (ATen copies it). Bicubic's gradient is compared where PyTorch's backward
    is the adjoint of its forward (see ``interpolate``'s docstring)."""
    kw, shape, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    try:
        ty = TF.interpolate(tx, **kw)
    except RuntimeError:  # an empty output: PyTorch refuses it, and so must graphc
        with pytest.raises(RuntimeError, match="output size"):
            F.interpolate(gc.tensor(x), **kw)
        return
    if min(ty.shape[2:]) == 0:
        return  # PyTorch's empty result (its backward refuses it); graphc raises
    w = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.tensor(w)).sum().backward()
    grads = not (kw["mode"] == "bicubic" and tuple(ty.shape) == shape
                 and "scale_factor" in kw and not kw["recompute_scale_factor"])
    gx = gc.tensor(x, requires_grad=True)
    gy = F.interpolate(gx, **kw)
    (gy * gc.tensor(w)).sum().backward()
    np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    if grads:
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    p = nn.Parameter(gc.tensor(np.ones(shape[1:], np.float32)))

    @gc.compile
    def step(a: Any, wt: Any) -> Any:
        p.grad = None
        y = F.interpolate(a * p, **kw)
        (y * wt).sum().backward()
        return y

    y = step(gc.tensor(x), gc.tensor(w))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    if grads:
        np.testing.assert_allclose(p.grad.numpy(), (tx.grad * tx).sum(0).detach().numpy(),
                                   rtol=1e-4, atol=1e-4)


def test_bilinear_copies_a_dim_a_scale_factor_leaves_unchanged() -> None:
    """2 rows at ``scale_factor=1.3`` stay 2 rows and are read as they are (ATen's
    same-size copy), while the columns are resampled; graphc resampled the rows at 1/1.3
    too."""
    x = np.arange(10, dtype=np.float32).reshape(1, 1, 2, 5)
    for sf in ((1.3, 1.0), (1.3, 2.0)):
        want = TF.interpolate(torch.tensor(x), scale_factor=sf, mode="bilinear").numpy()
        got = F.interpolate(gc.tensor(x), scale_factor=sf, mode="bilinear").numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bicubic_same_size_gradient_is_the_adjoint() -> None:
    """Where PyTorch's bicubic backward copies the gradient although its forward resampled
    (sizes unchanged by a ``scale_factor`` of 1.3), graphc's gradient is the forward's
    adjoint: central differences of the float64 forward agree."""
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((1, 1, 2, 6))
    w = rng.standard_normal((1, 1, 2, 6))
    kw = dict(mode="bicubic", scale_factor=(1.3, 1.0))
    gx = gc.tensor(x0, requires_grad=True)
    (F.interpolate(gx, **kw) * gc.tensor(w)).sum().backward()
    fd = np.zeros_like(x0)
    for i in np.ndindex(x0.shape):
        d = np.zeros_like(x0)
        d[i] = 1e-6
        fd[i] = ((F.interpolate(gc.tensor(x0 + d), **kw).numpy() * w).sum()
                 - (F.interpolate(gc.tensor(x0 - d), **kw).numpy() * w).sum()) / 2e-6
    np.testing.assert_allclose(gx.grad.numpy(), fd, atol=1e-7)
