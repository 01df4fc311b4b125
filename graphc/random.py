"""The global random generator, stream-compatible with PyTorch's CPU generator.

PyTorch's CPU generator is MT19937 seeded with ``init_genrand(seed)``, as is numpy's legacy
``RandomState(int)``. ``uniform_`` draws one 32-bit word per float32 element and keeps its low
24 bits (``(r & 0xFFFFFF) * 2**-24``), then scales to ``[lo, hi)`` in double precision. Doing the
same here makes ``gc.manual_seed(n)`` followed by building a model give PyTorch's parameters.
"""

from __future__ import annotations

import numpy as np

_state = {"rs": np.random.RandomState(0), "seed": 0, "calls": 0}


def manual_seed(seed: int) -> None:
    """Seed parameter init, ``rand``/``randn`` and dropout (as ``torch.manual_seed``)."""
    seed = int(seed)
    _state["rs"] = np.random.RandomState(seed & 0xFFFFFFFF)
    _state["seed"] = seed
    _state["calls"] = 0


def initial_seed() -> int:
    return int(_state["seed"])


def next_seed() -> int:
    """A fresh 63-bit seed for counter-based RNG ops (dropout): advances the stream."""
    rs = _state["rs"]
    hi, lo = rs.randint(0, 2**32, size=2, dtype=np.uint32)
    return int((int(hi) << 31) ^ int(lo)) & ((1 << 63) - 1)


def _words(n: int) -> np.ndarray:
    return _state["rs"].randint(0, 2**32, size=n, dtype=np.uint32)


def uniform(shape: tuple[int, ...], lo: float, hi: float, dtype: np.dtype = np.float32
            ) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    if np.dtype(dtype) == np.float64:
        rs = _state["rs"]
        w = rs.randint(0, 2**32, size=(n, 2), dtype=np.uint32).astype(np.uint64)
        r64 = (w[:, 1] << np.uint64(32)) | w[:, 0] if n else np.zeros(0, np.uint64)
        u = (r64 & np.uint64((1 << 53) - 1)).astype(np.float64) * 2.0 ** -53
    else:
        u = (_words(n) & 0xFFFFFF).astype(np.float64) * 2.0 ** -24
    return (u * (hi - lo) + lo).astype(dtype).reshape(shape)


def normal(shape: tuple[int, ...], mean: float = 0.0, std: float = 1.0,
           dtype: np.dtype = np.float32) -> np.ndarray:
    """Box-Muller normals from the same stream (PyTorch's exact normal stream is not copied)."""
    n = int(np.prod(shape, dtype=np.int64))
    m = n + (n & 1)
    u = uniform((m,), 0.0, 1.0, np.float64)
    u1, u2 = 1.0 - u[: m // 2], u[m // 2:]
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.concatenate([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)])[:n]
    return (z * std + mean).astype(dtype).reshape(shape)
