"""Threads and compiled steps: one step called from several threads serialises (a lock per
compiled function), different steps run at the same time without interfering (including the
two-core GEMM pool, which serves one step at a time), and native code runs without the GIL."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
from _steps import compiled_train_step

import graphc as gc
from graphc import nn, optim


def _mlp_step(dims: list[int], seed: int = 0, lr: float = 0.01) -> Any:
    gc.manual_seed(seed)
    layers: list[Any] = []
    for k, (i, o) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(i, o))
        if k < len(dims) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step = compiled_train_step(model, opt, loss_fn)

    step.model = model  # type: ignore[attr-defined]
    return step


def _data(n: int, f: int, c: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, f)).astype(np.float32), rng.integers(0, c, n)


def _params(step: Any) -> list[np.ndarray]:
    return [p.numpy().copy() for p in step.model.parameters()]


def _run_threads(fns: list[Any]) -> None:
    errors: list[BaseException] = []

    def wrap(fn: Any) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_one_step_from_many_threads_serialises() -> None:
    dims = [16, 32, 4]
    step, ref = _mlp_step(dims), _mlp_step(dims)
    x, y = _data(8, 16, 4)
    step(x, y)
    ref(x, y)
    n_threads, n_calls = 4, 25

    def worker() -> None:
        for _ in range(n_calls):
            loss = step(x, y)
            assert np.isfinite(loss.item())

    _run_threads([worker] * n_threads)
    for _ in range(n_threads * n_calls):  # every call saw a whole step: same as in sequence
        ref(x, y)
    for a, b in zip(_params(step), _params(ref)):
        assert np.array_equal(a, b)


def test_two_steps_run_concurrently_without_interference() -> None:
    """Big enough GEMMs to use the two-core pool in both steps at the same time."""
    dims = [512, 512, 10]
    a, b = _mlp_step(dims, seed=1), _mlp_step(dims, seed=2)
    ra, rb = _mlp_step(dims, seed=1), _mlp_step(dims, seed=2)
    xa, ya = _data(256, 512, 10, seed=3)
    xb, yb = _data(200, 512, 10, seed=4)
    n = 8
    _run_threads([lambda: [a(xa, ya) for _ in range(n)], lambda: [b(xb, yb) for _ in range(n)]])
    for _ in range(n):
        ra(xa, ya)
        rb(xb, yb)
    for p, q in zip(_params(a) + _params(b), _params(ra) + _params(rb)):
        assert np.array_equal(p, q)


def test_native_code_releases_the_gil() -> None:
    """While a long native step runs in a thread, the main thread keeps running Python."""
    dims = [1024, 1024, 1024, 10]
    step = _mlp_step(dims)
    x, y = _data(1024, 1024, 10)
    step(x, y)
    exe = step._last.exe
    native = exe.fn
    spans: list[tuple[float, float]] = []

    def timed(addr: int) -> int:  # the native call alone, timed from its own thread
        t0 = time.perf_counter()
        rc = native(addr)
        spans.append((t0, time.perf_counter()))
        return rc

    exe._runner.__globals__["FN"] = timed
    try:
        ticks: list[float] = []
        t = threading.Thread(target=lambda: [step(x, y) for _ in range(3)])
        t.start()
        while t.is_alive():
            ticks.append(time.perf_counter())
        t.join()
    finally:
        exe._runner.__globals__["FN"] = native
    assert len(spans) == 3
    longest = max(spans, key=lambda s: s[1] - s[0])
    assert longest[1] - longest[0] > 0.01, "the native step is too short to tell"
    inside = [v for v in ticks if longest[0] < v < longest[1]]
    # with the GIL held the main thread could not take a single tick during the call
    assert len(inside) > 100, (len(inside), longest)
