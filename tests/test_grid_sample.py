"""``F.grid_sample`` and ``F.affine_grid`` against PyTorch: every mode x padding_mode x
align_corners, with grid points inside and outside [-1, 1]; outputs, the input's and the
grid's gradients (through parameters) and an SGD update, eagerly and compiled (one compile
over two batch sizes); float64; PyTorch's errors for bad arguments; the step lowers to PTX
that ptxas assembles."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn, optim
from graphc.nn import functional as F

tF = torch.nn.functional
MODES = ["eager", "compiled"]
INTERP = ["bilinear", "nearest", "bicubic"]
PADDING = ["zeros", "border", "reflection"]


def _close(a: Any, b: Any, what: str, rtol: float = 2e-4) -> None:
    """Relative closeness with an absolute floor scaled to the largest entry (a grid
    gradient summed over the batch can cancel to rounding noise of its float32 terms)."""
    b = np.asarray(b)
    atol = max(1e-5, 10 * rtol * 1e-2 * float(np.abs(b).max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(a), b, rtol=rtol, atol=atol, err_msg=what)


def _grid(rng: np.random.Generator, shape: tuple, dtype: Any = np.float32) -> np.ndarray:
    """Positions in [-1.6, 1.6]: about a third of them outside the image."""
    return (rng.random(shape) * 3.2 - 1.6).astype(dtype)


C, H, W, HO, WO = 3, 5, 6, 4, 3


@pytest.mark.parametrize("align", [True, False], ids=["align", "noalign"])
@pytest.mark.parametrize("padding", PADDING)
@pytest.mark.parametrize("interp", INTERP)
@pytest.mark.parametrize("mode", MODES)
def test_grid_sample_trains_like_torch(mode: str, interp: str, padding: str,
                                       align: bool) -> None:
    """A training step: the image scaled by a parameter is sampled at the grid shifted by a
    parameter; the two gradients are the input's and the grid's, then SGD updates both."""
    rng = np.random.default_rng(0)
    scale0 = np.linspace(0.5, 1.5, C * H * W, dtype=np.float32).reshape(C, H, W)
    delta0 = (rng.standard_normal((HO, WO, 2)) * 0.05).astype(np.float32)
    gs, gd = nn.Parameter(scale0), nn.Parameter(delta0)
    ts, td = (torch.nn.Parameter(torch.tensor(a)) for a in (scale0, delta0))
    gopt = optim.SGD([gs, gd], lr=0.01)
    topt = torch.optim.SGD([ts, td], lr=0.01)
    kw = {"mode": interp, "padding_mode": padding, "align_corners": align}

    def step(x: Any, g: Any) -> Any:
        gopt.zero_grad()
        out = F.grid_sample(x * gs, g + gd, **kw)
        (out * out * out).sum().backward()
        gopt.step()
        return out

    fn = gc.compile(step) if mode == "compiled" else step
    for b in (2, 3):
        x = rng.standard_normal((b, C, H, W)).astype(np.float32)
        g = _grid(rng, (b, HO, WO, 2))
        topt.zero_grad()
        tout = tF.grid_sample(torch.tensor(x) * ts, torch.tensor(g) + td, **kw)
        (tout * tout * tout).sum().backward()
        tgrads = [ts.grad.numpy().copy(), td.grad.numpy().copy()]
        topt.step()
        out = fn(x, g)
        what = f"{interp}/{padding}/align={align} batch {b}"
        _close(out, tout.detach().numpy(), f"{what} output")
        _close(gs.grad.numpy(), tgrads[0], f"{what} input grad", rtol=5e-4)
        _close(gd.grad.numpy(), tgrads[1], f"{what} grid grad", rtol=5e-4)
        _close(gs.numpy(), ts.detach().numpy(), f"{what} updated scale")
        _close(gd.numpy(), td.detach().numpy(), f"{what} updated delta")
    if mode == "compiled":
        assert fn.compile_count == 1


def test_grid_sample_float64_and_odd_sizes() -> None:
    """float64, unit-size and wider-than-a-vector images, every combination, eagerly."""
    rng = np.random.default_rng(1)
    for (h, w), interp, padding, align in itertools.product(
            [(5, 6), (1, 5), (4, 1), (3, 19)], INTERP, PADDING, [True, False]):
        x = rng.standard_normal((2, 2, h, w))
        g = _grid(rng, (2, 3, 4, 2), np.float64)
        kw = {"mode": interp, "padding_mode": padding, "align_corners": align}
        tx = torch.tensor(x, requires_grad=True)
        tg = torch.tensor(g, requires_grad=True)
        tout = tF.grid_sample(tx, tg, **kw)
        (tout * tout.sin()).sum().backward()
        gx, gg = nn.Parameter(x), nn.Parameter(g)
        out = F.grid_sample(gx, gg, **kw)
        (out * out.sin()).sum().backward()
        what = f"{(h, w)} {interp}/{padding}/align={align}"
        assert out.dtype == gc.float64
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=what)
        np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-11,
                                   err_msg=what + " input grad")
        np.testing.assert_allclose(gg.grad.numpy(), tg.grad.numpy(), rtol=1e-9, atol=1e-10,
                                   err_msg=what + " grid grad")


def test_grid_sample_borders_and_ties() -> None:
    """Grid points exactly on pixel centres, borders, half-way points (nearest rounds half to
    even) and far outside; the gradients there follow ATen (none across a clipped border)."""
    x = np.arange(2 * 1 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4) ** 1.5
    pts = np.array([-1.0, 1.0, 0.0, -1.5, 1.5, 0.5, -0.5, 1.0 / 3, 7.0, -9.0, 0.25, 0.75])
    gx, gy = np.meshgrid(pts, pts[::-1])
    g = np.stack([gx, gy], -1)[None].repeat(2, 0).astype(np.float32)
    for interp, padding, align in itertools.product(INTERP, PADDING, [True, False]):
        kw = {"mode": interp, "padding_mode": padding, "align_corners": align}
        tx = torch.tensor(x, requires_grad=True)
        tg = torch.tensor(g, requires_grad=True)
        tout = tF.grid_sample(tx, tg, **kw)
        tout.sum().backward()
        px, pg = nn.Parameter(x), nn.Parameter(g)
        out = F.grid_sample(px, pg, **kw)
        out.sum().backward()
        what = f"{interp}/{padding}/align={align}"
        _close(out.numpy(), tout.detach().numpy(), what)
        _close(px.grad.numpy(), tx.grad.numpy(), what + " input grad")
        _close(pg.grad.numpy(), tg.grad.numpy(), what + " grid grad")


# -- affine_grid -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_affine_grid_values(dtype: Any) -> None:
    rng = np.random.default_rng(2)
    for size, align in itertools.product([(2, 3, 4, 5), (2, 1, 9, 17), (2, 3, 1, 5),
                                          (2, 1, 1, 1), (2, 2, 7, 1)], [True, False]):
        theta = rng.standard_normal((2, 2, 3)).astype(dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unit sizes with align_corners warn in both
            want = tF.affine_grid(torch.tensor(theta), size, align_corners=align).numpy()
            got = F.affine_grid(theta, size, align_corners=align).numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{size} {align}")


@pytest.mark.parametrize("interp,padding,align", [("bilinear", "zeros", False),
                                                  ("bicubic", "reflection", True),
                                                  ("nearest", "border", False)])
@pytest.mark.parametrize("mode", MODES)
def test_spatial_transformer_trains_like_torch(mode: str, interp: str, padding: str,
                                               align: bool) -> None:
    """affine_grid feeding grid_sample, the affine matrix a parameter plus a per-sample
    offset (so the batch size stays symbolic); theta's gradient through both."""
    rng = np.random.default_rng(3)
    th0 = np.array([[0.9, 0.2, 0.1], [-0.1, 1.1, 0.05]], np.float32)
    gth, tth = nn.Parameter(th0), torch.nn.Parameter(torch.tensor(th0))
    gopt, topt = optim.SGD([gth], lr=0.01), torch.optim.SGD([tth], lr=0.01)
    kw = {"mode": interp, "padding_mode": padding, "align_corners": align}

    def step(x: Any, t: Any) -> Any:
        gopt.zero_grad()
        grid = F.affine_grid(t + gth, x.shape, align_corners=align)
        out = F.grid_sample(x, grid, **kw)
        (out * out * out).sum().backward()
        gopt.step()
        return out

    fn = gc.compile(step) if mode == "compiled" else step
    for b in (2, 4):
        x = rng.standard_normal((b, C, H, W)).astype(np.float32)
        t = (rng.standard_normal((b, 2, 3)) * 0.3).astype(np.float32)
        topt.zero_grad()
        grid = tF.affine_grid(torch.tensor(t) + tth, (b, C, H, W), align_corners=align)
        tout = tF.grid_sample(torch.tensor(x), grid, **kw)
        (tout * tout * tout).sum().backward()
        tgrad = tth.grad.numpy().copy()
        topt.step()
        out = fn(x, t)
        _close(out, tout.detach().numpy(), f"{interp} output")
        _close(gth.grad.numpy(), tgrad, f"{interp} theta grad", rtol=1e-3)
        _close(gth.numpy(), tth.detach().numpy(), f"{interp} updated theta", rtol=1e-3)
    if mode == "compiled":
        assert fn.compile_count == 1


# -- errors ------------------------------------------------------------------------------------
_X = np.zeros((2, 3, 4, 5), np.float32)
_G = np.zeros((2, 3, 3, 2), np.float32)
_TH = np.zeros((2, 2, 3), np.float32)

BAD: dict[str, Any] = {
    "mode": lambda f, c: f.grid_sample(c(_X), c(_G), mode="area", align_corners=False),
    "padding": lambda f, c: f.grid_sample(c(_X), c(_G), padding_mode="circular",
                                          align_corners=False),
    "batch": lambda f, c: f.grid_sample(c(_X), c(_G[:1]), align_corners=False),
    "grid_last": lambda f, c: f.grid_sample(c(_X), c(np.zeros((2, 3, 3, 3), np.float32)),
                                            align_corners=False),
    "ranks": lambda f, c: f.grid_sample(c(_X), c(_G[:, 0]), align_corners=False),
    "3d_input": lambda f, c: f.grid_sample(c(_X[0]), c(_G[0]), align_corners=False),
    "dtypes": lambda f, c: f.grid_sample(c(_X), c(_G.astype(np.float64)), align_corners=False),
    "empty": lambda f, c: f.grid_sample(c(_X[:, :, :0]), c(_G), align_corners=False),
    "int": lambda f, c: f.grid_sample(c(_X.astype(np.int64)), c(_G.astype(np.int64)),
                                      align_corners=False),
    "bicubic_5d": lambda f, c: f.grid_sample(c(_X[:, :, None]),
                                             c(np.zeros((2, 1, 3, 3, 3), np.float32)),
                                             mode="bicubic", align_corners=False),
    "theta_int": lambda f, c: f.affine_grid(c(_TH.astype(np.int64)), (2, 3, 4, 5),
                                            align_corners=False),
    "theta_shape": lambda f, c: f.affine_grid(c(_TH[0]), (2, 3, 4, 5), align_corners=False),
    "theta_3d_shape": lambda f, c: f.affine_grid(c(_TH), (2, 3, 4, 5, 6), align_corners=False),
    "size_rank": lambda f, c: f.affine_grid(c(_TH), (2, 3, 4), align_corners=False),
    "size_zero": lambda f, c: f.affine_grid(c(_TH), (2, 3, 0, 5), align_corners=False),
    "size_batch": lambda f, c: f.affine_grid(c(_TH), (3, 3, 4, 5), align_corners=False),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_errors_match_torch(case: str) -> None:
    call = BAD[case]
    with pytest.raises(Exception) as want:
        call(tF, torch.tensor)
    with pytest.raises(want.type) as got:
        call(F, gc.tensor)
    if want.type is not NotImplementedError:  # ours names what is missing instead
        assert str(got.value).split(",")[0] == str(want.value).split(",")[0]


def test_unsupported_volumetric() -> None:
    """5-D inputs and 3-D affine grids are out of scope: NotImplementedError naming them."""
    with pytest.raises(NotImplementedError, match="grid_sample.*5-D"):
        F.grid_sample(_X[:, :, None], np.zeros((2, 1, 3, 3, 3), np.float32),
                      align_corners=False)
    with pytest.raises(NotImplementedError, match="affine_grid.*3-D"):
        F.affine_grid(np.zeros((2, 3, 4), np.float32), (2, 3, 4, 5, 6), align_corners=False)


def test_align_corners_default_warns() -> None:
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        out = F.grid_sample(_X, _G)
    np.testing.assert_allclose(out.numpy(), tF.grid_sample(
        torch.tensor(_X), torch.tensor(_G), align_corners=False).numpy())
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.affine_grid(_TH, (2, 3, 4, 5))
    with pytest.warns(UserWarning, match="unit-size grids"):
        F.affine_grid(_TH, (2, 3, 1, 5), align_corners=True)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")
@pytest.mark.parametrize("interp", INTERP)
def test_step_lowers_to_ptx(interp: str, tmp_path: Path) -> None:
    """affine_grid + grid_sample forward and backward are primitives the PTX backend
    lowers: the cuda step's PTX assembles (no GPU needed)."""
    th = nn.Parameter(np.eye(2, 3, dtype=np.float32))
    scale = nn.Parameter(np.ones((C, H, W), np.float32))
    opt = optim.SGD([th, scale], lr=0.1)

    def step(x: Any, t: Any) -> Any:
        opt.zero_grad()
        grid = F.affine_grid(t + th, x.shape, align_corners=False)
        out = F.grid_sample(x * scale, grid, mode=interp, padding_mode="reflection",
                            align_corners=True)
        (out * out).sum().backward()
        opt.step()
        return out

    args = (np.ones((2, C, H, W), np.float32), np.zeros((2, 2, 3), np.float32))
    text = gc.compile(step, device="cuda", example_args=args).ir("ptx")
    src = tmp_path / "k.ptx"
    src.write_text(text)
    res = subprocess.run([shutil.which("ptxas") or "ptxas", "--gpu-name", "sm_80", "-O3",
                          str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
