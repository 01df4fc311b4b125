"""State safety: a checkpoint killed mid-write leaves the previous file readable, and a
KeyboardInterrupt during a compiled step leaves parameters, gradients and optimizer state
either untouched or fully updated — never half-published."""

from __future__ import annotations

import _thread
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _steps import compiled_train_step

import graphc as gc
from graphc import nn, optim

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_checkpoint_survives_sigkill_mid_write(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.npz"
    good = {"version": 1, "w": np.arange(10, dtype=np.float32)}
    gc.save(good, path)
    writer = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {str(ROOT)!r})
        import graphc as gc
        big = {{"version": 2, "w": np.ones(40_000_000, np.float32)}}  # 160 MB
        print("ready", flush=True)
        while True:
            gc.save(big, {str(path)!r})
    """)
    rng = random.Random(0)
    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        loaded = gc.load(path)  # a complete old or new checkpoint, never a torn one
        assert loaded["version"] in (1, 2)
        want = good["w"] if loaded["version"] == 1 else np.ones(40_000_000, np.float32)
        assert np.array_equal(loaded["w"], want)
        for tmp in tmp_path.glob(".ckpt.npz.*"):  # what a killed writer leaves behind
            tmp.unlink()


def _make(seed: int = 0) -> Any:
    gc.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 3))
    opt = optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    step = compiled_train_step(model, opt, loss_fn)

    return model, opt, step


def _state(model: Any, opt: Any) -> list[Any]:
    out: list[Any] = []
    for p in model.parameters():
        out.append(p.numpy().copy())
        out.append(None if p.grad is None else p.grad.numpy().copy())
        st = opt.state.get(p, {})
        out.append({k: np.array(np.asarray(v), copy=True) for k, v in sorted(st.items())})
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    for u, v in zip(a, b):
        if isinstance(u, dict):
            if u.keys() != v.keys() or not all(np.array_equal(u[k], v[k]) for k in u):
                return False
        elif (u is None) != (v is None) or (u is not None and not np.array_equal(u, v)):
            return False
    return True


def test_keyboard_interrupt_leaves_state_whole(monkeypatch: Any) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5)
    n_calls = 4
    model, opt, step = _make()
    ref = [_state(model, opt)]
    for _ in range(n_calls):
        step(x, y)
        ref.append(_state(model, opt))

    # publishing is slowed down, so that interrupts often land in the middle of it
    from graphc.runtime.executable import Runtime

    orig = Runtime.publish

    def slow_publish(self: Any, slot: str, buf: Any) -> None:
        time.sleep(0.0005)
        orig(self, slot, buf)

    monkeypatch.setattr(Runtime, "publish", slow_publish)
    # interrupt_main raises only under Python's default SIGINT handler; another test in this
    # worker process may have left a different one (a library ignoring Ctrl-C), so install it
    old_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        hits = _interrupt_trials(x, y, ref, n_calls)
    finally:
        signal.signal(signal.SIGINT, old_handler)
    assert hits >= 20, f"{hits} of 30 trials interrupted (the SIGINT handler was {old_handler})"


def _interrupt_trials(x: Any, y: Any, ref: list[Any], n_calls: int) -> int:
    r = random.Random(1)
    hits = 0
    for trial in range(30):
        model, opt, step = _make()
        step._compile([x, y])  # compile outside the timed window
        delay = r.uniform(0.0, 0.012)
        timer = threading.Timer(delay, _thread.interrupt_main)
        try:
            timer.start()
            for _ in range(n_calls):
                step(x, y)
            time.sleep(0.05)  # let a late interrupt arrive here rather than later
        except KeyboardInterrupt:
            hits += 1
        finally:
            timer.join()
        now = _state(model, opt)
        assert any(_same(now, s) for s in ref), f"trial {trial}: a half-updated state"
    return hits


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_sigint_to_the_main_thread_during_steps() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5)
    model, opt, step = _make()
    ref = [_state(model, opt)]
    for _ in range(40):
        step(x, y)
        ref.append(_state(model, opt))
    main = threading.main_thread().ident
    assert main is not None
    for trial in range(10):
        model, opt, step = _make()
        step._compile([x, y])
        timer = threading.Timer(0.0005 * trial, signal.pthread_kill, (main, signal.SIGINT))
        try:
            timer.start()
            for _ in range(40):
                step(x, y)
            time.sleep(0.05)
        except KeyboardInterrupt:
            pass
        finally:
            timer.join()
        now = _state(model, opt)
        assert any(_same(now, s) for s in ref), f"trial {trial}"


def test_on_interrupt_completes_publishing_after_a_committed_step() -> None:
    """Directly: the native step committed (err[0] == 0), publishing was cut short."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5)
    model, opt, step = _make()
    ref_model, ref_opt, ref_step = _make()
    ref_step(x, y)
    step._compile([x, y])
    exe = step._last.exe
    calls = {"n": 0}
    orig = exe.publish

    def publish_once_then_interrupt(slot: str, buf: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        orig(slot, buf)

    exe.publish = publish_once_then_interrupt
    with pytest.raises(KeyboardInterrupt):
        step(x, y)
    assert _same(_state(model, opt), _state(ref_model, ref_opt))
