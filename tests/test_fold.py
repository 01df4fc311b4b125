"""``F.unfold`` / ``F.fold`` and the functional forms ``gc.lerp`` / ``gc.sign`` against
PyTorch: values and gradients, eagerly and compiled (one compile for two batch sizes), plus
PyTorch's errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _op_parity import check_compiled, check_eager
from _torch import torch

import graphc as gc
from graphc.nn import functional as F


def _f(lib: Any) -> Any:
    return torch.nn.functional if lib is torch else F


CASES: dict[str, tuple[tuple, Any]] = {
    "unfold_3x3": ((3, 7, 6), lambda L, x: _f(L).unfold(x, 3)),
    "unfold_dilated_padded_strided": (
        (2, 7, 6), lambda L, x: _f(L).unfold(x, (2, 3), dilation=(2, 1), padding=1,
                                             stride=(2, 1))),
    "unfold_1x1_stride2": ((4, 5, 5), lambda L, x: _f(L).unfold(x, 1, stride=2)),
    "unfold_then_fold": (
        (2, 6, 5), lambda L, x: _f(L).fold(_f(L).unfold(x, 3, padding=1), (6, 5), 3,
                                           padding=1)),
    "fold_overlapping": ((2 * 4, 12), lambda L, x: _f(L).fold(x, (4, 5), 2)),
    "fold_dilated_strided": (
        (3 * 6, 6), lambda L, x: _f(L).fold(x, (5, 5), (2, 3), dilation=(2, 1), padding=(0, 1),
                                            stride=(2, 2))),
    "lerp_scalar_small": ((5,), lambda L, x: L.lerp(x, x * 2 + 1, 0.3)),
    "lerp_scalar_large": ((5,), lambda L, x: L.lerp(x, x.flip(-1), 0.75)),
    "lerp_tensor_weight": ((5,), lambda L, x: L.lerp(x, x * x, L.sigmoid(x))),
    "sign": ((6,), lambda L, x: L.sign(x) * x),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch_eagerly(name: str) -> None:
    shape, f = CASES[name]
    check_eager(f, shape, 1e-5, 1e-5, 1e-5, 1e-5, dtypes=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch_compiled(name: str) -> None:
    shape, f = CASES[name]
    check_compiled(f, shape, 1e-5, 1e-5)


def test_unbatched_forms() -> None:
    x = np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)
    a = F.unfold(gc.tensor(x), 2).numpy()
    b = torch.nn.functional.unfold(torch.tensor(x), 2).numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(F.fold(gc.tensor(b), (5, 4), 2).numpy(),
                               torch.nn.functional.fold(torch.tensor(b), (5, 4), 2).numpy())


def test_errors_match_torch() -> None:
    x = gc.tensor(np.zeros((1, 2, 3, 3), np.float32))
    tx = torch.zeros((1, 2, 3, 3))
    cases = [
        (lambda L, v: _f(L).unfold(v, 4), RuntimeError, "components must be at least one"),
        (lambda L, v: _f(L).unfold(v, 0), RuntimeError, "kernel size should be greater than"),
        (lambda L, v: _f(L).unfold(v, 2, stride=0), RuntimeError, "stride should be greater"),
        (lambda L, v: _f(L).unfold(v, 2, padding=-1), RuntimeError, "padding should be non"),
        (lambda L, v: _f(L).fold(v.reshape(1, 9, 2), (3, 3), 2), RuntimeError,
         "divisible by the product of kernel_size"),
        (lambda L, v: _f(L).fold(L.zeros(1, 8, 3), (3, 3), 2), RuntimeError,
         "match the calculated number"),
    ]
    with pytest.raises(RuntimeError, match=r"Only unbatched \(3D\) or batched \(4D\)"):
        F.unfold(x[0, 0], 2)  # (PyTorch raises an IndexError from inside im2col here)
    for f, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            f(torch, tx)
        with pytest.raises(exc, match=msg):
            f(gc, x)
