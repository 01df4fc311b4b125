"""Calling a compiled step: dispatch among variants, their cap, re-entry, empty batches."""

from __future__ import annotations

import signal
import time
import warnings
from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim


def _step(width: int = 3) -> tuple[Any, Any]:
    model = nn.Linear(width, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step(x: Any) -> Any:
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss

    return model, step


def test_variants_are_capped_and_the_warning_names_the_changing_argument() -> None:
    @gc.compile(max_variants=3)
    def f(x: Any, y: Any) -> Any:
        return (x.sum(1) + y.sum(1)).sum()

    y = np.ones((2, 4), np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(1, 7):
            assert f(np.ones((2, n), np.float32), y).item() == 2 * n + 8
    assert len(f.variants) == 3 and f.compile_count == 6
    msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    assert len(msgs) == 1 and "'x'" in msgs[0] and "'y'" not in msgs[0]
    # the most recent ones are kept: no recompiling for them
    f(np.ones((2, 6), np.float32), y)
    assert f.compile_count == 6


def test_dispatch_does_not_scan_every_variant() -> None:
    @gc.compile(max_variants=1000)
    def f(x: Any) -> Any:
        return x.sum()

    for n in range(1, 121):
        f(np.ones((2, n), np.float32))
    calls = {"n": 0}
    for v in f.variants:
        orig = v.exe.matches

        def counting(args: Any, orig: Any = orig) -> bool:
            calls["n"] += 1
            return orig(args)
        v.exe.matches = counting
    f(np.ones((2, 7), np.float32))  # not the last variant: the slow path looks it up
    assert calls["n"] <= 2


def test_max_variants_is_validated(monkeypatch: Any) -> None:
    with pytest.raises(ValueError, match="max_variants"):
        gc.compile(lambda x: x, max_variants=0)
    monkeypatch.setenv("GRAPHC_MAX_VARIANTS", "many")
    with pytest.raises(ValueError, match="GRAPHC_MAX_VARIANTS"):
        gc.compile(lambda x: x)


def test_reentry_from_an_arguments_array_raises_instead_of_deadlocking() -> None:
    model, plain = _step()
    step = gc.compile(plain)
    step(np.ones((2, 3), np.float32))

    class Sneaky:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            step(np.ones((2, 3), np.float32))  # re-enters the running call
            return np.ones((2, 3), np.float32)

    before = model.weight.numpy().copy()
    with pytest.raises(RuntimeError, match="not re-entrant"):
        step(Sneaky())
    np.testing.assert_array_equal(before, model.weight.numpy())
    step(np.ones((2, 3), np.float32))  # the lock was released


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_reentry_from_a_signal_handler_raises_instead_of_deadlocking() -> None:
    _, plain = _step(256)
    step = gc.compile(plain)
    x = np.ones((512, 256), np.float32)
    step(x)
    seen: list[str] = []

    def handler(signum: int, frame: Any) -> None:
        try:
            step(x)
        except RuntimeError as e:
            seen.append(str(e))

    old = signal.signal(signal.SIGALRM, handler)
    try:
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            signal.setitimer(signal.ITIMER_REAL, 0.0003)
            for _ in range(20):
                step(x)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert seen and "not re-entrant" in seen[0]


def test_empty_batch_on_the_first_call_is_a_clear_error() -> None:
    _, plain = _step()
    step = gc.compile(plain)
    with pytest.raises(ValueError, match="must be >= 1"):
        step(np.ones((0, 3), np.float32))
