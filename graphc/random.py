"""The global random generator, stream-compatible with PyTorch's CPU generator.

PyTorch's CPU generator is MT19937 seeded with ``init_genrand(seed)``, as is numpy's legacy
``RandomState(int)``. ``uniform_`` draws one 32-bit word per float32 element and keeps its low
24 bits (``(r & 0xFFFFFF) * 2**-24``), then scales to ``[lo, hi)`` in double precision. Doing the
same here makes ``gc.manual_seed(n)`` followed by building a model give PyTorch's parameters.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _context
from .ir.fma import fma
from .ir.libm import libm

_state: dict = {"rs": np.random.RandomState(0), "seed": 0, "calls": 0, "next_normal": None}


def _refuse_in_trace(what: str) -> None:
    """Reseeding while a compiled function is traced would happen once, at trace time: the
    later calls would draw on from the stream instead of restarting it, as eagerly."""
    if _context.current() is not None:
        raise NotImplementedError(
            f"{what} inside a compiled step: it would reseed once, when the step is traced, "
            "and later calls would not restart the stream; seed between calls")


def manual_seed(seed: int) -> None:
    """Seed parameter init, ``rand``/``randn`` and dropout (as ``torch.manual_seed``)."""
    _refuse_in_trace("graphc.manual_seed")
    seed = int(seed)
    _state["rs"] = np.random.RandomState(seed & 0xFFFFFFFF)
    _state["seed"] = seed
    _state["calls"] = 0
    _state["next_normal"] = None


def initial_seed() -> int:
    return int(_state["seed"])


# A compiled call's draws, recorded while it runs and replayed by the backward that
# recomputes it (``graphc.compiled_grad``: the same dropout masks, and the stream does not
# move twice). Per thread: ``record`` a list that the draws are appended to, ``replay`` an
# iterator that they are taken from instead of the stream.
TAPE = _context.thread_local(record=None, replay=None)


class ReplayMismatch(RuntimeError):
    """A replayed call asked for more draws than the recorded one made."""


def _replayed() -> Any:
    try:
        return next(TAPE.replay)
    except StopIteration:
        raise ReplayMismatch("a recomputed compiled call drew more random numbers than the "
                             "call it recomputes") from None


def next_seed() -> int:
    """A fresh 63-bit seed for counter-based RNG ops (dropout): advances the stream."""
    if TAPE.replay is not None:
        return _replayed()
    rs = _state["rs"]
    hi, lo = rs.randint(0, 2**32, size=2, dtype=np.uint32)
    v = int((int(hi) << 31) ^ int(lo)) & ((1 << 63) - 1)
    if TAPE.record is not None:
        TAPE.record.append(v)
    return v


def next_seeds(k: int) -> np.ndarray:
    """``k`` successive ``next_seed()`` values in one draw (the same words, in the same
    order: each seed takes two full-range 32-bit words from the stream)."""
    w = _state["rs"].randint(0, 2**32, size=(k, 2), dtype=np.uint32).astype(np.int64)
    return ((w[:, 0] << 31) ^ w[:, 1]) & ((1 << 63) - 1)


def _words(n: int, rs: Stream = None) -> np.ndarray:
    """``n`` 32-bit words of the stream ``rs``: None (the global generator), a
    ``Generator``, or a numpy ``RandomState``."""
    r = _state["rs"] if rs is None else rs._rs if isinstance(rs, Generator) else rs
    return r.randint(0, 2**32, size=n, dtype=np.uint32)


def _normal_cache(rs: Stream) -> dict:
    """Where the stream keeps ``normal_distribution<double>``'s second Box-Muller sample
    (as PyTorch's generators do): the global state, a ``Generator``'s own, or, for a bare
    ``RandomState``, nowhere that outlives the call."""
    if rs is None:
        return _state
    return rs._cache if isinstance(rs, Generator) else {"next_normal": None}


def integers(shape: tuple[int, ...], low: int, high: int,
             rs: Stream = None) -> np.ndarray:
    """``torch.randint``'s values (int64) with ATen's stream: ``low + word % (high - low)``,
    the word 32 bits from one draw, or 64 from two (the first the high half) when the range
    is 2**32 or more (``uniform_int_from_to_distribution``). ``rs``: a ``Generator``'s
    stream instead of the global one."""
    n = int(np.prod(shape, dtype=np.int64))
    span = high - low
    if span >= 1 << 32:
        w = _words(2 * n, rs).reshape(n, 2).astype(np.uint64)
        v = ((w[:, 0] << np.uint64(32)) | w[:, 1]) % np.uint64(span)
    else:
        v = _words(n, rs).astype(np.int64) % span
    return (v.astype(np.int64) + low).reshape(shape)


def permutation(n: int, rs: Stream = None) -> np.ndarray:
    """``torch.randperm(n)`` with ATen's stream (``randperm_cpu``): for ``i`` from 0 to
    ``n - 2``, swap ``r[i]`` with ``r[i + word % (n - i)]``, one 32-bit word each."""
    r = np.arange(n, dtype=np.int64)
    if n < 2:
        return r
    w = _words(n - 1, rs).astype(np.int64)
    for i in range(n - 1):  # sequential: each swap reads the previous ones' result
        z = i + int(w[i]) % (n - i)
        r[i], r[z] = r[z], r[i]
    return r


def _doubles(n: int, rs: Stream = None) -> np.ndarray:
    """``n`` draws of ``uniform_real_distribution<double>(0, 1)``: 53 bits of one 64-bit
    word, itself two 32-bit draws (the first the high half)."""
    w = _words(2 * n, rs).reshape(n, 2).astype(np.uint64)
    r64 = (w[:, 0] << np.uint64(32)) | w[:, 1]
    return (r64 & np.uint64((1 << 53) - 1)).astype(np.float64) * 2.0 ** -53


def uniform(shape: tuple[int, ...], lo: float, hi: float, dtype: np.dtype = np.float32,
            rs: Stream = None, fused: bool = True) -> np.ndarray:
    """``uniform_`` (``rand``) values with ATen's stream: one 64-bit word per float64, one
    32-bit word per float32. ``rs``: a ``Generator``'s stream instead of the global one.

    ``fused``: the float64 ``u * (to - from) + from`` rounded once, as in ATen's CPU kernels
    (``aten/src/ATen/native/cpu``, compiled with FMA contraction); ``False`` for the callers
    in ATen's generic sources, compiled without (``rrelu_with_noise``), which round twice."""
    n = int(np.prod(shape, dtype=np.int64))
    if np.dtype(dtype) == np.float64:
        u = _doubles(n, rs)
        v = fma(u, hi - lo, lo) if fused else u * (hi - lo) + lo
        return v.astype(dtype).reshape(shape)
    # float32: ATen keeps the bounds as floats (``uniform_real_distribution<float>``), so
    # ``to - from`` is a float subtraction; the rest is in double
    u = (_words(n, rs) & 0xFFFFFF).astype(np.float64) * 2.0 ** -24
    lo32 = np.float32(lo)
    span = np.float64(np.float32(hi) - lo32)
    return (u * span + np.float64(lo32)).astype(dtype).reshape(shape)


def _u24(n: int, rs: Stream = None) -> np.ndarray:
    return ((_words(n, rs) & 0xFFFFFF).astype(np.float64) * 2.0 ** -24).astype(np.float32)


def _fill16(d: np.ndarray, mean: float, std: float) -> None:
    """PyTorch's ``normal_fill_16`` on every row of ``d`` (rows of 16 uniforms, in place):
    Box-Muller over 8+8 uniforms, in the tensor's dtype. The rows are independent, as
    ATen's 16-element blocks are, so they are transformed together."""
    t = d.dtype.type
    u1 = t(1) - d[:, :8]
    u2 = d[:, 8:16].copy()
    if t is np.float64:  # the C library's functions, as ATen's (``ir.libm``)
        radius = np.sqrt(-2.0 * libm(np.log, u1))
        theta = (2.0 * np.pi) * u2
        d[:, :8] = fma(radius * libm(np.cos, theta), std, mean)  # ATen's fused ``* std + mean``
        d[:, 8:16] = fma(radius * libm(np.sin, theta), std, mean)
        return
    radius = np.sqrt(t(-2) * np.log(u1))
    theta = t(2.0 * np.pi) * u2
    d[:, :8] = radius * np.cos(theta) * t(std) + t(mean)
    d[:, 8:16] = radius * np.sin(theta) * t(std) + t(mean)


def normal(shape: tuple[int, ...], mean: float = 0.0, std: float = 1.0,
           dtype: np.dtype = np.float32, rs: Stream = None) -> np.ndarray:
    """Normal samples with PyTorch's CPU algorithm and stream (``normal_``/``randn``).

    Tensors of 16 or more elements: all uniforms are drawn first, then transformed 16 at a
    time (a partial last block redraws 16 fresh uniforms over the tail), as ATen's
    ``normal_fill``. Smaller tensors: one double-precision Box-Muller sample per element with
    the cached second sample, as ``at::normal_distribution<double>``.
    """
    n = int(np.prod(shape, dtype=np.int64))
    dt = np.dtype(dtype)
    if n >= 16:
        data = (_u24(n, rs).astype(dt) if dt == np.float32
                else uniform((n,), 0.0, 1.0, np.float64, rs))
        whole = n // 16 * 16
        _fill16(data[:whole].reshape(-1, 16), mean, std)
        if n % 16:
            tail = (_u24(16, rs).astype(dt) if dt == np.float32
                    else uniform((16,), 0.0, 1.0, np.float64, rs))
            seg = tail.reshape(1, 16)
            _fill16(seg, mean, std)
            data[n - 16:] = seg[0]
        return data.reshape(shape)
    return _normal_doubles(n, mean, std, rs).astype(dt).reshape(shape)


def _normal_doubles(n: int, mean: float, std: float, rs: Stream = None) -> np.ndarray:
    """``n`` draws of ``at::normal_distribution<double>``: Box-Muller on two double
    uniforms, the second sample cached in the generator for the next draw."""
    out = np.empty(n, np.float64)
    cache = _normal_cache(rs)
    for i in range(n):
        cached = cache["next_normal"]
        if cached is not None:
            cache["next_normal"] = None
            out[i] = cached
            continue
        u1, u2 = _doubles(2, rs).tolist()
        r = math.sqrt(-2.0 * math.log1p(-u2))  # the C library's, as ATen's (``libm``)
        theta = 2.0 * math.pi * u1
        cache["next_normal"] = r * math.sin(theta)
        out[i] = r * math.cos(theta)
    return fma(out, std, mean)  # ATen's ``x * std + mean`` is a fused multiply-add


# -- the other fills of ``Tensor`` (ATen's CPU kernels: one distribution draw per element,
# in element order, computed in double and cast to the tensor's dtype) --------------------
def exponential(shape: tuple[int, ...], lambd: float, dtype: np.dtype = np.float32,
                rs: Stream = None) -> np.ndarray:
    """``exponential_(lambd)``: ``-1 / lambd * log1p(-u)``, ``u`` a double uniform."""
    n = int(np.prod(shape, dtype=np.int64))
    return ((-1.0 / lambd) * libm(np.log1p, -_doubles(n, rs))).astype(dtype).reshape(shape)


def geometric(shape: tuple[int, ...], p: float, dtype: np.dtype = np.float32,
              rs: Stream = None) -> np.ndarray:
    """``geometric_(p)``: ``ceil(log(u) / log1p(-p))``, ``u`` a double uniform."""
    n = int(np.prod(shape, dtype=np.int64))
    with np.errstate(divide="ignore"):
        v = np.ceil(libm(np.log, _doubles(n, rs)) / math.log1p(-p))
    return v.astype(dtype).reshape(shape)


def cauchy(shape: tuple[int, ...], median: float, sigma: float, dtype: np.dtype = np.float32,
           rs: Stream = None) -> np.ndarray:
    """``cauchy_(median, sigma)``: ``median + sigma * tan(pi (u - 0.5))``."""
    n = int(np.prod(shape, dtype=np.int64))
    v = fma(sigma, libm(np.tan, np.pi * (_doubles(n, rs) - 0.5)), median)  # fused, as ATen
    return v.astype(dtype).reshape(shape)


def log_normal(shape: tuple[int, ...], mean: float, std: float, dtype: np.dtype = np.float32,
               rs: Stream = None) -> np.ndarray:
    """``log_normal_(mean, std)``: ``exp`` of ``normal_distribution<double>`` draws (the
    per-element Box-Muller, whatever the size; the global stream, which holds the cached
    second sample)."""
    n = int(np.prod(shape, dtype=np.int64))
    return libm(np.exp, _normal_doubles(n, mean, std, rs)).astype(dtype).reshape(shape)


def bernoulli(shape: tuple[int, ...], p: float, dtype: np.dtype = np.float32,
              rs: Stream = None) -> np.ndarray:
    """``bernoulli_(p)`` with a number ``p``: ``u < p``, ``u`` a double uniform (ATen's
    portable kernel; PyTorch's builds with MKL use MKL's own stream on Intel CPUs)."""
    n = int(np.prod(shape, dtype=np.int64))
    return (_doubles(n, rs) < p).astype(dtype).reshape(shape)


def checked(generator: object) -> Generator | None:
    """``generator`` (a ``Generator``, or None for the global stream), checked before
    anything is drawn or traced: the stream argument every random op takes."""
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"generator: expected a graphc.Generator, got "
                        f"{type(generator).__name__}")
    return generator  # type: ignore[return-value]


class Draw:
    """A random fill that a compiled step repeats on every call, for that call's sizes: the
    function the eager op calls (``fn(shape, *args, dtype=, [rs=])``), with the arguments
    the trace saw (numbers in the step's code are part of the trace, as everywhere), from the
    stream the eager op would use (``generator``: a ``Generator``, read at each call; None:
    the global one). It is the ``ref`` of a ``random`` input (``trace.random_input``); the
    runtime calls it with the call's shape, in the order eager execution would draw."""

    __slots__ = ("name", "fn", "args", "dtype", "generator")

    def __init__(self, name: str, fn: object, args: tuple, dtype: np.dtype,
                 generator: Generator | None = None) -> None:
        self.name, self.fn, self.args = name, fn, args
        self.dtype, self.generator = np.dtype(dtype), generator

    def __call__(self, shape: tuple[int, ...]) -> np.ndarray:
        if TAPE.replay is not None:
            return _replayed()
        kw = {} if self.generator is None else {"rs": self.generator}
        out = self.fn(tuple(shape), *self.args, dtype=self.dtype, **kw)  # type: ignore
        out = np.ascontiguousarray(out, dtype=self.dtype)
        if TAPE.record is not None:
            TAPE.record.append(out)
        return out

    def __repr__(self) -> str:
        return f"Draw({self.name}{self.args}, {self.dtype})"


_TORCH_DEFAULT_SEED = 67280421310721  # what ``torch.Generator().initial_seed()`` returns


class Generator:
    """A seed source of its own, as ``torch.Generator`` is for ``DataLoader(generator=...)``.

    graphc's parameter init and dropout read the global stream (``gc.manual_seed``); a
    ``Generator`` drives what a user hands one to (the ``DataLoader``'s shuffling) without
    touching that stream, so ``DataLoader(ds, shuffle=True, generator=gc.Generator()
    .manual_seed(0))`` ports from PyTorch by changing the import. Each ``next_seed()`` advances
    it: successive epochs differ, and ``manual_seed`` again replays them.
    """

    def __init__(self, device: str = "cpu") -> None:
        if str(device) != "cpu":
            raise ValueError(f"Generator: device must be 'cpu' (it only produces seeds), "
                             f"got {device!r}")
        self.device = "cpu"
        _refuse_in_trace("creating a graphc.Generator")
        self._reset(_TORCH_DEFAULT_SEED)

    def manual_seed(self, seed: int) -> Generator:
        """Reset the stream to ``seed`` and return the generator (as PyTorch's does)."""
        _refuse_in_trace("Generator.manual_seed")
        return self._reset(seed)

    def _reset(self, seed: int) -> Generator:
        self._seed = int(seed)
        self._rs = np.random.RandomState(self._seed & 0xFFFFFFFF)
        self._cache: dict = {"next_normal": None}  # normal_distribution's second sample
        return self

    def initial_seed(self) -> int:
        return self._seed

    def seed(self) -> int:
        """Reseed from the operating system's entropy; returns the new seed."""
        new = int(np.random.SeedSequence().entropy) & ((1 << 63) - 1)
        self.manual_seed(new)
        return new

    def next_seed(self) -> int:
        """A 63-bit seed drawn from this generator's stream (advances it)."""
        hi, lo = self._rs.randint(0, 2**32, size=2, dtype=np.uint32)
        return int((int(hi) << 31) ^ int(lo)) & ((1 << 63) - 1)

    def __repr__(self) -> str:
        return f"gc.Generator(initial_seed={self._seed})"


# where draws come from (annotations only): the global generator (None), a ``Generator``,
# or a bare numpy stream
Stream = np.random.RandomState | Generator | None
