"""Compile-time machinery: equal kernels emitted and compiled once (structural keys checked
against the emitted text), memory planning's size order without sympy in the loop, the
entry/kernel-bucket split, the compile workers (same objects as in-process, errors
reproduced, a dead worker replaced) and the compile log."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
import sympy
from graphc.codegen import lower as lower_mod
from graphc.codegen.llvm_objects import compile_object
from graphc.codegen.planning import _provably_ge, _SizeOrder

import graphc as gc
from graphc import nn, optim
from graphc.runtime import compile_worker


def _deep_mlp(depth: int, width: int = 24) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(8, width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    layers.append(nn.Linear(width, 3))
    return nn.Sequential(*layers)


def _compiled_step(depth: int) -> tuple[gc.CompiledFunction, nn.Module]:
    gc.manual_seed(0)
    model = _deep_mlp(depth)
    opt = optim.AdamW(model.parameters(), lr=1e-2)

    def step(x: object, y: object) -> object:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return gc.compile(step), model


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((5, 8)).astype(np.float32), rng.integers(0, 3, 5)


def test_equal_blocks_are_emitted_once_and_train_like_eager() -> None:
    x, y = _data()
    counts = {}
    for depth in (2, 6):
        step, model = _compiled_step(depth)
        losses = [float(step(x, y)) for _ in range(3)]
        low = step.variants[0].exe.lowering
        units = len(low.plan.units())
        # one distinct kernel per distinct computation, however deep the model
        counts[depth] = (units, low.kernels_distinct, low.kernels_by_key)
        gc.manual_seed(0)
        eager_model = _deep_mlp(depth)
        eager_opt = optim.AdamW(eager_model.parameters(), lr=1e-2)
        eager = []
        for _ in range(3):
            eager_opt.zero_grad()
            loss = nn.functional.cross_entropy(eager_model(gc.tensor(x)), gc.tensor(y))
            loss.backward()
            eager_opt.step()
            eager.append(float(loss))
        np.testing.assert_allclose(losses, eager, rtol=1e-5, atol=1e-6)
        # float32 sums in other orders (vector width, GEMM blocking): three Adam steps move a
        # parameter by a few 1e-6 more on some hosts (AVX-512 Sapphire Rapids)
        for p, q in zip(model.parameters(), eager_model.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5)
    assert counts[6][0] > counts[2][0] + 8  # more blocks, more kernels run ...
    assert counts[6][1] == counts[2][1]  # ... but no new distinct kernel
    assert counts[6][2] == counts[2][2]


def test_kernel_key_verification_catches_a_wrong_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every kernel given the same key, the check (on in the suite) must object."""
    assert lower_mod.VERIFY_KERNEL_KEYS
    monkeypatch.setattr(lower_mod.Lowering, "_kernel_key", lambda self, unit, label: "same")
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    step, _ = _compiled_step(1)
    with pytest.raises(AssertionError, match="kernel key"):
        step(*_data())


def test_canon_tells_every_constant_apart() -> None:
    a = np.zeros(10_000, np.float32)
    b = a.copy()
    b[5_000] = 1.0
    assert repr(a) == repr(b)  # what a repr-based key would have confused
    assert lower_mod._canon(a) != lower_mod._canon(b)
    assert lower_mod._canon({"x": (1, 2.5, None)}) == lower_mod._canon({"x": (1, 2.5, None)})
    assert lower_mod._canon((1,)) != lower_mod._canon([1])
    assert lower_mod._canon(1) != lower_mod._canon(1.0) != lower_mod._canon(True)
    assert lower_mod._canon(object()) is None  # no exact text: never shared
    assert lower_mod._canon({"n": object()}) is None


def test_size_order_agrees_with_sympy() -> None:
    B, T = sympy.symbols("B T", positive=True, integer=True)
    sizes = [0, 64, 4096, 64 * B, 128 * B, 64 * B + 64, 64 * B * T, 32 * B * T + 4096,
             64 * sympy.floor((4 * B + 15) / 16), 64 * sympy.ceiling(B / 8) + 64,
             sympy.Max(256, 32 * B), B ** 2 * 64, 2 * B ** 2 + B, 256 * T, 64 * B + 64 * T]
    order = _SizeOrder()
    for a in sizes:
        for b in sizes:
            assert order.ge(a, b) == _provably_ge(a, b), (a, b)
            assert order.ge(a, b) == _provably_ge(a, b)  # memoised answer


def test_streamed_modules_cover_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHC_CACHE", "0")  # compiled here, not loaded
    step, _ = _compiled_step(2)
    step(*_data())
    exe = step.variants[0].exe
    assert exe.lowering.module is None  # released once compiled (Lowering.release_ir)
    # the compile's lowering, again with what it streamed (lowering is deterministic: the
    # test below checks that two lowerings stream the same modules)
    streams: list[str] = []
    low = lower_mod.Lowering(exe.graph, wide=exe.wide, gemm_library=True,
                             on_kernels=lambda text, level: streams.append(text))
    assert streams == low.chunks
    # what the compile streamed: every kernel defined in exactly one module
    streamed = [line.split('@"')[1].split('"')[0] for c in low.chunks
                for line in c.splitlines() if line.startswith("define ")]
    # kernels, and their own helper functions (``<kernel>.par``, ``<kernel>.task``: an
    # elementwise kernel split over the two threads) defined beside them
    kernels = [k for k in streamed if "." not in k]
    assert sorted(kernels) == sorted(low._text)
    # (or content-named helpers of tile-level kernels, ``b_<digest>.*``: see the test below)
    assert all(k.split(".")[0] in low._text or k in low._shared_names for k in streamed)
    assert len(set(streamed)) == len(streamed)
    entry = low.entry_text()
    assert all(f'declare i32 @"{k}"' in entry for k in low._text)
    assert not any(line.startswith("define ") and '@"k_' in line for line in entry.splitlines())
    # a module's text depends only on the step: lowered again, the same modules (so the
    # objects compiled for them are found by content in the caches)
    again: list[str] = []
    lower_mod.Lowering(low.graph, wide=low.wide, gemm_library=True,
                       on_kernels=lambda text, level: again.append(text))
    assert again == low.chunks and len(again) >= 1
    # the step's IR stages lower it again; the plan stays with the released lowering
    assert 'define i32 @"graphc_step"' in step.ir("llvm_unoptimized")
    assert "kernels of" in step.ir("fused") and exe.lowering.module is None


def _conv_net() -> tuple[nn.Module, Any]:
    gc.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1, bias=False))
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(x: object) -> object:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    return model, step


def test_equal_helpers_of_tile_kernels_are_compiled_once(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Convolutions of one width share their task bodies (``Lowering._share_helpers``): the
    first streamed module that uses a body defines it, later ones declare it, the step's
    objects link together, and the step trains as it does eagerly."""
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    x = np.random.default_rng(0).standard_normal((4, 16, 16, 16)).astype(np.float32)
    model, step = _conv_net()
    compiled = gc.compile(step)
    losses = [float(compiled(x)) for _ in range(3)]
    weights = [p.numpy().copy() for p in model.parameters()]
    eager_model, eager_step = _conv_net()
    eager = [float(eager_step(gc.from_numpy(x))) for _ in range(3)]
    np.testing.assert_allclose(losses, eager, rtol=2e-5, atol=1e-6)
    for w, e in zip(weights, eager_model.parameters()):
        np.testing.assert_allclose(w, e.numpy(), rtol=2e-5, atol=1e-6)

    exe = compiled.variants[0].exe
    low = lower_mod.Lowering(exe.graph, wide=exe.wide, gemm_library=True,
                             on_kernels=lambda text, level: None)
    defined: dict[str, int] = {}
    declared_later = []
    for i, chunk in enumerate(low.chunks):
        for line in chunk.splitlines():
            if line.startswith(("define ", "declare ")) and '@"b_' in line:
                name = line.split('@"')[1].split('"')[0]
                assert name in low._shared_names
                if line.startswith("define "):
                    assert name not in defined, f"{name} defined twice"
                    assert not line.startswith("define internal")  # linked from elsewhere
                    defined[name] = i
                else:
                    declared_later.append((name, i))
    assert declared_later, "no module used a helper an earlier module defined"
    assert all(n in defined and defined[n] < i for n, i in declared_later)
    # the whole module (``step.ir``, AOT builds) keeps one internal copy of each
    whole = low.module_text()
    for name in defined:
        assert whole.count(f'define internal void @"{name}"') + whole.count(
            f'define internal i32 @"{name}"') == 1, name


_SHARED_SCRIPT = textwrap.dedent("""
    import numpy as np
    import graphc as gc
    from graphc import nn, optim

    def net(first):
        gc.manual_seed(0)
        layers = [nn.Conv2d(first, 16, 3, padding=1), nn.ReLU()]
        layers += [nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1)]
        return nn.Sequential(*layers)

    def trainer(model):
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        @gc.compile
        def step(x):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            return loss
        return step

    rng = np.random.default_rng(0)
    x16 = rng.standard_normal((4, 16, 16, 16)).astype(np.float32)
    x3 = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    a = net(16)
    train_a = trainer(a)
    forward_a = gc.compile(lambda x: a(x).sum())
    train_b = trainer(net(3))
    out = []
    for _ in range(2):
        out += [float(train_a(x16)), float(forward_a(x16)), float(train_b(x3))]
    hits = [f.variants[0].exe.cache_hit for f in (train_a, forward_a, train_b)]
    print(repr(out), hits)
""")


def test_shared_helpers_link_across_steps_and_from_the_disk_cache(tmp_path: Any) -> None:
    """Three steps in one process whose kernels share helpers, each step with its own
    definitions; then a second process that loads every object from the disk cache. Both
    compute the same values (and the first process's match eager's: the test above)."""
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", _SHARED_SCRIPT], env=env, check=True,
                           capture_output=True, text=True).stdout.strip().splitlines()[-1]
            for _ in range(2)]
    assert runs[0].endswith("[False, False, False]"), runs[0]
    assert runs[1].endswith("[True, True, True]"), runs[1]
    assert runs[0].split("]")[0] == runs[1].split("]")[0]


_TINY = textwrap.dedent("""
    define i32 @f(i32 %x) {
      %y = mul i32 %x, 3
      ret i32 %y
    }
    define float @g(float* noalias %p, i64 %n) {
    entry:
      br label %loop
    loop:
      %i = phi i64 [0, %entry], [%j, %loop]
      %s = phi float [0.0, %entry], [%t, %loop]
      %q = getelementptr inbounds float, float* %p, i64 %i
      %v = load float, float* %q
      %t = fadd float %s, %v
      %j = add i64 %i, 1
      %c = icmp slt i64 %j, %n
      br i1 %c, label %loop, label %done
    done:
      ret float %t
    }
""")


@pytest.mark.skipif(not compile_worker.enabled(), reason="no compile workers here")
def test_workers_build_the_same_objects_and_report_errors(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    for w in compile_worker._pool():
        w.ensure_ready()  # started workers take every job
    jobs = [(_TINY, "O3"), (_TINY.replace("@f", "@h"), "fast"), (_TINY, "fast")]
    here = [compile_object(t, None, None, lv) for t, lv in jobs]
    assert compile_worker.compile_all(jobs, None, None) == here
    bad = [(_TINY, "O3"), ("define i32 @f() {\n  ret i64 0\n}", "O3")]
    with pytest.raises(RuntimeError, match="LLVM IR parsing error"):
        compile_worker.compile_all(bad, None, None)
    # a worker that dies is replaced; its work is done here meanwhile
    for w in compile_worker._pool():
        w.proc.kill()
        w.proc.wait()
    assert compile_worker.compile_all(jobs, None, None) == here
    alive = compile_worker._pool()
    for w in alive:
        w.ensure_ready()
    assert alive and all(not w.dead for w in alive)
    assert compile_worker.compile_all(jobs, None, None) == here


@pytest.mark.skipif(not compile_worker.enabled(), reason="no compile workers here")
def test_a_worker_starts_without_site_and_finds_llvmlite() -> None:
    """Workers run ``python -S`` (no site: ~25 ms less start-up, measured on the seed's cold
    compile as 0.21 -> 0.18 s) and import llvmlite from the directory the parent found it
    in; a worker started that way compiles what this process compiles."""
    w = compile_worker.Worker()
    try:
        assert w.proc.args[1] == "-S" and w.proc.args[-1] == compile_worker._LLVMLITE_ROOT
        w.ensure_ready()
        status, obj, _ = w.compile(_TINY, None, None, "O3")
        assert status == "ok" and obj == compile_object(_TINY, None, None, "O3")
    finally:
        w.close()


@pytest.mark.skipif(not compile_worker.enabled(), reason="no compile workers here")
def test_a_free_worker_takes_the_next_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """One queue for all workers: while one is busy with a long module, the other compiles
    everything else (with a queue per worker, filled by text length at submit time, half
    of the modules waited for the busy one)."""
    import threading
    import time

    ws = compile_worker._pool()
    for w in ws:
        w.ensure_ready()
    if len(ws) < 2:
        pytest.skip("needs two compile workers")
    slow, done = ws[0], {}
    gate = threading.Event()
    real = compile_worker.Worker.compile

    def compile(self: Any, text: str, *a: Any) -> Any:
        if self is slow:
            gate.wait(10)  # busy until the other worker has taken the rest
        done[self] = done.get(self, 0) + 1
        out = real(self, text, *a)
        if self is not slow and done[self] == 5:
            gate.set()
        return out

    monkeypatch.setattr(compile_worker.Worker, "compile", compile)
    jobs = [(_TINY.replace("@f", f"@f{i}"), "O3") for i in range(6)]
    t0 = time.perf_counter()
    got = compile_worker.compile_all(jobs, None, None)
    assert got == [compile_object(t, None, None, lv) for t, lv in jobs]
    assert done.get(slow, 0) <= 1 and sum(done.values()) == 6
    assert time.perf_counter() - t0 < 10  # the gate opened: nothing waited for its timeout


@pytest.mark.skipif(not compile_worker.enabled(), reason="no compile workers here")
def test_workers_are_retired_past_their_memory_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    for w in compile_worker._pool():
        w.ensure_ready()
    monkeypatch.setenv("GRAPHC_COMPILE_WORKER_MAX_MB", "1")  # every worker is over it
    before = compile_worker.retired
    jobs = [(_TINY, "O3"), (_TINY.replace("@f", "@h"), "O3")]
    first = compile_worker.compile_all(jobs, None, None)
    assert compile_worker.retired >= before + 1
    assert compile_worker.compile_all(jobs, None, None) == first  # fresh workers


@pytest.mark.skipif(not compile_worker.enabled(), reason="no compile workers here")
def test_a_process_that_compiled_exits_with_no_unclosed_pipes() -> None:
    """A program that compiled with workers exits without ``ResourceWarning``s: the workers'
    pipes are closed with them (both ends; the replies' end was left open before, two
    warnings at every exit under ``python -X dev``)."""
    code = textwrap.dedent("""
        import numpy as np
        import graphc as gc
        from graphc import nn
        from graphc.runtime import compile_worker
        m = nn.Linear(3, 2)
        f = gc.compile(lambda x: m(x).sum())
        print(float(f(np.ones((4, 3), np.float32))))
        assert compile_worker._workers, "compiled without workers"
    """)
    env = {**os.environ, "GRAPHC_CACHE": "0"}
    out = subprocess.run([sys.executable, "-X", "dev", "-W", "always::ResourceWarning", "-c",
                          code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ResourceWarning" not in out.stderr, out.stderr


def test_workers_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHC_COMPILE_WORKERS", "0")
    assert not compile_worker.enabled()
    assert compile_worker._pool() == []
    assert compile_worker.compile_all([(_TINY, "O3")], None, None) == [
        compile_object(_TINY, None, None, "O3")]


def test_compile_log(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
                     ) -> None:
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    x, y = _data()
    model = _deep_mlp(1)
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step(a: object, b: object) -> object:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(a), b)
        loss.backward()
        opt.step()
        return loss

    quiet = gc.compile(step)
    quiet(x, y)
    assert "graphc: compiled" not in capsys.readouterr().err
    log = quiet.compile_log
    for phase in ("trace", "passes", "plan", "emit LLVM IR", "llvm optimise", "llvm emit",
                  "link"):
        assert phase in log.phases and log.phases[phase] >= 0.0
    assert log.total >= log.phases["trace"] and "kernels" in log.counts
    loud = gc.compile(step, options={"verbose": True})
    loud(x, y)
    err = capsys.readouterr().err
    assert "graphc: compiled step in" in err and "llvm optimise" in err and "link" in err
    monkeypatch.setenv("GRAPHC_COMPILE_LOG", "1")
    gc.compile(step)(x, y)
    assert "graphc: compiled step in" in capsys.readouterr().err


def test_compile_and_drop_keeps_memory_bounded() -> None:
    """Issue: compiling and dropping distinct steps grew the process by ~0.45 MB each (LLVM
    keeps memory for every run of its pass pipeline); the pipelines now run in workers."""
    code = textwrap.dedent("""
        import gc as pygc, os, resource
        os.environ["GRAPHC_CACHE"] = "0"
        import numpy as np
        import graphc as gc
        from graphc import nn, optim
        from graphc.runtime import compile_worker
        for w in compile_worker._pool():
            w.ensure_ready()
        def rss():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS"):
                    return int(line.split()[1])
        def once(i):
            m = nn.Sequential(nn.Linear(8, 16 + i), nn.ReLU(), nn.Linear(16 + i, 4))
            opt = optim.SGD(m.parameters(), lr=0.1)
            def step(a, b):
                opt.zero_grad()
                l = nn.functional.cross_entropy(m(a), b)
                l.backward()
                opt.step()
                return l
            gc.compile(step)(np.ones((4, 8), np.float32), np.zeros(4, np.int64))
        for i in range(8):
            once(i)
        pygc.collect()
        r0 = rss()
        for i in range(8, 48):
            once(i)
        pygc.collect()
        print((rss() - r0) / 40)
    """)
    if not os.path.exists("/proc/self/status") or not compile_worker.enabled():
        pytest.skip("needs /proc and compile workers")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "GRAPHC_COMPILE_WORKERS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    per_step_kib = float(out.stdout.split()[-1])
    assert per_step_kib < 120, per_step_kib  # was ~480 KiB before the workers


def test_ir_verified_in_tests_and_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphc.passes import pipeline

    calls = []
    monkeypatch.setattr(pipeline, "verify", lambda g: calls.append(g))
    step, _ = _compiled_step(1)
    from graphc.trace import trace

    g, _sig = trace(step.fn, list(_data()), "step", True)
    monkeypatch.setenv("GRAPHC_VERIFY_IR", "1")  # the suite's setting (conftest)
    pipeline.run_pipeline(g)
    assert len(calls) == 1 + len(pipeline.PASSES)
    monkeypatch.setenv("GRAPHC_VERIFY_IR", "0")  # a user's compile: rules ran at build time
    pipeline.run_pipeline(g)
    assert len(calls) == 1 + len(pipeline.PASSES)
    pipeline.run_pipeline(g, check=True)
    assert len(calls) == 2 * (1 + len(pipeline.PASSES))


def test_topological_order_is_remembered_per_roots() -> None:
    step, _ = _compiled_step(1)
    step(*_data())
    g = step.variants[0].graph
    first = g.nodes()
    first.append(None)  # callers may change their copy
    assert g.nodes() == first[:-1]
    g.outputs = g.outputs[:1]  # other roots: computed again
    assert len(g.nodes()) <= len(first) - 1


def test_a_failed_lowering_leaves_no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers' threads of a step whose lowering raises are stopped, not left waiting."""
    import threading

    from graphc.runtime import cpu as cpu_runtime

    def failing(self: object, **stream: object) -> None:
        on_kernels = stream.get("on_kernels")
        if on_kernels is not None:
            on_kernels(_TINY, "O3")  # something was handed out before the failure
        raise RuntimeError("lowering failed on purpose")

    monkeypatch.setattr(cpu_runtime.CPUExecutable, "_lower", failing)
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    step, _ = _compiled_step(1)
    with pytest.raises(RuntimeError, match="on purpose"):
        step(*_data())
    assert not [t for t in threading.enumerate() if t.name == "graphc-compile-worker"]


@pytest.mark.skipif(not compile_worker.enabled(), reason="no compile workers here")
def test_a_garbled_worker_reply_retires_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from graphc.codegen import llvm_objects

    ws = compile_worker._pool()
    for w in ws:
        w.ensure_ready()
    real = llvm_objects._read
    calls = {"n": 0}

    def garbled(f: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            real(f)  # consume the real reply, then report it garbled
            raise pickle.UnpicklingError("garbled")
        return real(f)

    monkeypatch.setattr(llvm_objects, "_read", garbled)
    jobs = [(_TINY, "O3"), (_TINY.replace("@f", "@h"), "O3")]
    here = [compile_object(t, None, None, lv) for t, lv in jobs]
    assert compile_worker.compile_all(jobs, None, None) == here
    monkeypatch.setattr(llvm_objects, "_read", real)
    # the worker whose reply was garbled is stopped at once, its pipes closed
    gone = [w for w in ws if w.dead]
    assert len(gone) == 1
    assert gone[0].proc.poll() is not None
    assert gone[0].proc.stdin.closed and gone[0].proc.stdout.closed
    assert compile_worker.compile_all(jobs, None, None) == here


def test_gemm_tiles_compile_at_the_tile_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """Float GEMM tiles go to LLVM at the ``tile`` level (hand-written vector code: no O3
    pipeline), kernels at O3; ``GRAPHC_TILE_LEVEL=O3`` restores O3 for tiles (and keys their
    objects apart), and a wrong value is refused naming the variable."""
    from graphc.runtime import cpu as cpu_rt

    levels: list[str] = []
    orig = compile_worker.Batch.submit

    def spy(self: Any, text: str, level: str) -> int:
        levels.append(level)
        return orig(self, text, level)

    monkeypatch.setattr(compile_worker.Batch, "submit", spy)
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    # an earlier test in this process may hold the tile in memory: it would not be compiled
    monkeypatch.setattr(cpu_rt, "_LIBRARIES", type(cpu_rt._LIBRARIES)())
    assert cpu_rt._level_of("gemm-tile|float|16|6|4") == "tile"
    assert cpu_rt._level_of("kernels|define ...") == "O3"
    monkeypatch.setenv("GRAPHC_TILE_LEVEL", "O3")
    assert cpu_rt._level_of("gemm-tile|float|16|6|4") == "O3"
    monkeypatch.setenv("GRAPHC_TILE_LEVEL", "O2")
    with pytest.raises(ValueError, match="GRAPHC_TILE_LEVEL"):
        cpu_rt._level_of("gemm-tile|float|16|6|4")
    monkeypatch.delenv("GRAPHC_TILE_LEVEL")
    gc.manual_seed(0)
    m = nn.Linear(40, 24)
    opt = optim.SGD(m.parameters(), lr=0.1)

    @gc.compile
    def step(x: Any) -> Any:
        opt.zero_grad()
        loss = (m(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    step(np.ones((32, 40), np.float32))
    assert {"tile", "O3", "fast"} <= set(levels)  # the tile, the kernels, the entry


_STRIDED_COPY = """
define void @f(float* noalias %a, float* noalias %b, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %j = mul i64 %i, 3
  %p = getelementptr inbounds float, float* %a, i64 %j
  %v = load float, float* %p
  %k = add i64 %j, 7
  %q = getelementptr inbounds float, float* %b, i64 %k
  store float %v, float* %q
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %done
done:
  ret void
}
"""


def test_tile_emission_drops_lsr_and_puts_the_option_back() -> None:
    """``emit_object`` generates a ``tile`` module without loop strength reduction (a loop
    whose addresses LSR would rewrite comes out differently), and LLVM's process-wide option
    is back afterwards: the same module at O3 gives the same bytes before and after, equal
    to the bytes with LSR explicitly on."""
    import llvmlite.binding as llvm
    from graphc.codegen import llvm_objects as lo

    if not lo._LSR_OPTION:  # (the next test covers that LLVM: no option, tiles as O3)
        pytest.skip(f"LLVM {llvm.llvm_version_info} not checked for -disable-lsr")
    tm = lo.target_machine(None, None)

    def emit(level: str) -> bytes:
        return lo.emit_object(lo.parse(_STRIDED_COPY, tm), tm, level)

    before = emit("O3")
    tile = emit("tile")
    after = emit("O3")
    assert tile != before
    assert after == before
    llvm.set_option("", "-disable-lsr=true")
    try:
        assert tm.emit_object(lo.parse(_STRIDED_COPY, tm)) == tile
    finally:
        llvm.set_option("", "-disable-lsr=false")
    assert emit("O3") == before


def test_an_unchecked_llvm_is_not_asked_for_the_lsr_option(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """LLVM's option parser exits the process on an option it does not know, so where the
    LLVM version has not been checked for ``-disable-lsr`` no option is set: a tile module
    is generated with LLVM's defaults, as an O3 one is."""
    from graphc.codegen import llvm_objects as lo

    tm = lo.target_machine(None, None)
    monkeypatch.setattr(lo, "_LSR_OPTION", False)
    assert lo.emit_object(lo.parse(_STRIDED_COPY, tm), tm, "tile") == \
        lo.emit_object(lo.parse(_STRIDED_COPY, tm), tm, "O3")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tile_level_gemm_equals_o3_bit_for_bit(monkeypatch: pytest.MonkeyPatch,
                                               dtype: type) -> None:
    """The ``tile`` level runs only SROA, instcombine and simplifycfg on the GEMM tiles; the
    products are spelled out (``llvm.fmuladd``, fixed K blocks and order), so LLVM's full O3
    pipeline must give the same bits. Covered: both GEMM orders (``x @ W.T`` with few rows
    is computed transposed), packed and in-place A, B packed by rows, by columns (the
    transposed pack, with a partial group of columns) and with other strides, narrow N
    (its own tile), edges in M, N and K and a K split into blocks."""
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    rng = np.random.default_rng(0)
    cases = [((64, 784), (256, 784), "nt"), ((37, 300), (300, 53), "nn"),
             ((300, 37), (300, 90), "tn"), ((64, 256), (10, 256), "nt"),
             ((130, 1500), (1500, 70), "nn"), ((9, 20), (20, 33), "nn")]

    def run(a: np.ndarray, b: np.ndarray, layout: str) -> np.ndarray:
        def f(x: Any, y: Any) -> Any:
            if layout == "nt":
                return x @ y.T
            if layout == "tn":
                return x.T @ y
            return x @ y
        return np.asarray(gc.compile(f, dynamic=False)(a, b))

    results = {}
    for level in ("tile", "O3"):
        monkeypatch.setenv("GRAPHC_TILE_LEVEL", level)
        results[level] = [run(rng.standard_normal(sa).astype(dtype),
                              rng.standard_normal(sb).astype(dtype), lay)
                          for sa, sb, lay in cases]
        rng = np.random.default_rng(0)
    for (sa, sb, lay), t, o in zip(cases, results["tile"], results["O3"]):
        a = rng.standard_normal(sa).astype(dtype)
        b = rng.standard_normal(sb).astype(dtype)
        ref = a @ b.T if lay == "nt" else a.T @ b if lay == "tn" else a @ b
        np.testing.assert_allclose(t, ref, rtol=1e-4 if dtype == np.float32 else 1e-10,
                                   atol=1e-3 if dtype == np.float32 else 1e-10)
        np.testing.assert_array_equal(t, o, err_msg=f"{sa} {sb} {lay}")


# (in channels, out channels, size, kernel, stride, padding, dilation, groups): every path
# of ``codegen.conv`` (Winograd, the stride-1 implicit GEMM, phase grids at stride 2 and
# their input gradient per output phase, 1x1 at stride 2, dilation, groups) at widths that
# leave partial vectors, odd phase rows and a stride-2 row whose last vector needs a mask
_CONV_CASES = [(16, 16, 20, 3, 1, 1, 1, 1), (3, 5, 37, 3, 1, 1, 1, 1), (8, 12, 33, 3, 2, 1, 1, 1),
               (6, 10, 64, 1, 2, 0, 1, 1), (4, 6, 31, 5, 2, 2, 1, 1), (4, 4, 19, 3, 1, 2, 2, 1),
               (8, 8, 17, 3, 2, 1, 1, 2), (2, 3, 70, 7, 2, 3, 1, 1),
               # small images, many channels: vectors over channels (``conv.by_channels``)
               # in the forward, the input gradient and the weight gradient; whole and
               # partial vectors, groups, stride 2
               (8, 32, 8, 3, 1, 1, 1, 1), (6, 20, 9, 3, 2, 1, 1, 1), (4, 12, 7, 3, 2, 1, 1, 1),
               (16, 32, 6, 3, 1, 1, 1, 2), (8, 24, 8, 1, 2, 0, 1, 1), (4, 32, 8, 3, 1, 1, 1, 1),
               (32, 4, 8, 3, 1, 1, 1, 1), (16, 8, 16, 3, 2, 1, 1, 1), (20, 6, 13, 3, 2, 1, 1, 1),
               (16, 8, 12, 1, 2, 0, 1, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_kernels_at_the_tile_level_equal_o3_bit_for_bit(
        monkeypatch: pytest.MonkeyPatch, dtype: type) -> None:
    """The convolutions' implicit-GEMM and Winograd kernels are compiled at the ``tile``
    level (their products are written out as ``llvm.fmuladd`` in a fixed order, their grid
    copies and zero fills as vector moves and ``memset``): LLVM's O3 pipeline must give the
    same bits for the forward, input and weight gradients, and both must match float64
    sums (``torch``-free reference: ``numpy`` through the interpreter backend)."""
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    levels: list[tuple[str, bool]] = []
    orig = compile_worker.Batch.submit

    def spy(self: Any, text: str, level: str) -> int:
        levels.append((level, "@\"k_conv2d" in text))
        return orig(self, text, level)

    monkeypatch.setattr(compile_worker.Batch, "submit", spy)

    def run(case: tuple, backend: str) -> list[np.ndarray]:
        ci, co, size, k, s, pad, dil, grp = case
        rng = np.random.default_rng(sum(case))
        x = rng.standard_normal((3, ci, size, size)).astype(dtype)
        w = rng.standard_normal((co, ci // grp, k, k)).astype(dtype)

        a, b = nn.Parameter(gc.tensor(x)), nn.Parameter(gc.tensor(w))

        def f() -> Any:
            y = nn.functional.conv2d(a, b, stride=s, padding=pad, dilation=dil, groups=grp)
            (y * y).sum().backward()
            return y, a.grad, b.grad

        return [np.asarray(v) for v in gc.compile(f, backend=backend)()]

    for case in _CONV_CASES:
        results = {}
        for level in ("tile", "O3"):
            monkeypatch.setenv("GRAPHC_TILE_LEVEL", level)
            results[level] = run(case, "cpu")
        monkeypatch.delenv("GRAPHC_TILE_LEVEL")
        ref = run(case, "interp")
        tol = 2e-4 if dtype == np.float32 else 1e-10
        for name, t, o, r in zip(("y", "dx", "dw"), results["tile"], results["O3"], ref):
            np.testing.assert_array_equal(t, o, err_msg=f"{case} {name}")
            scale = max(1.0, float(np.abs(r).max()))
            np.testing.assert_allclose(t, r, rtol=tol, atol=tol * scale,
                                       err_msg=f"{case} {name}")
    # the default sent convolution modules to the tile level, and GRAPHC_TILE_LEVEL=O3 to O3
    assert ("tile", True) in levels and ("O3", True) in levels


def test_a_step_from_the_disk_cache_imports_no_lowering(tmp_path: Any) -> None:
    """A process whose step is in the disk cache links the cached objects and never lowers:
    it must not import the code generator (25-35 ms of its first call) nor rebuild the thread
    pool (cached like a step), and must still give the same loss."""
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import graphc as gc
        from graphc import nn, optim
        gc.manual_seed(0)
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        @gc.compile
        def step(a, b):
            opt.zero_grad()
            l = nn.functional.cross_entropy(m(a), b)
            l.backward()
            opt.step()
            return l
        loss = float(step(np.ones((4, 8), np.float32), np.zeros(4, np.int64)))
        lowered = [n for n in ("graphc.codegen.lower", "graphc.codegen.conv",
                               "graphc.codegen.gemm", "graphc.codegen.parallel")
                   if n in sys.modules]
        print(loss, step.compile_log.counts["disk cache"], ",".join(lowered) or "-")
    """)
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path), "GRAPHC_NUM_THREADS": "2"}
    env.pop("GRAPHC_CACHE", None)
    outs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        outs.append(out.stdout.split())
    (loss0, miss, _), (loss1, hit, imported) = outs
    assert (miss, hit) == ("miss", "hit")
    assert loss0 == loss1
    assert imported == "-", imported


def test_gc_is_paused_during_a_compile_and_restored_after() -> None:
    """The cyclic collector is off while a step compiles (``gcpause``: full collections
    walked the growing heap of IR objects again and again), back on after it, also when
    the compile raised, and left off for a program that turned it off itself."""
    import gc as pygc

    from graphc.runtime import gcpause

    seen: list[bool] = []
    m = nn.Linear(3, 2)

    def f(x: Any) -> Any:
        seen.append(pygc.isenabled())
        return m(x).sum()

    assert pygc.isenabled()
    gc.compile(f)(np.ones((2, 3), np.float32))
    assert seen == [False] and pygc.isenabled()

    def bad(x: Any) -> Any:
        raise ValueError("traced on purpose")

    with pytest.raises(ValueError, match="on purpose"):
        gc.compile(bad)(np.ones(2, np.float32))
    assert pygc.isenabled()
    with gcpause.paused():
        with gcpause.paused():
            assert not pygc.isenabled()
        assert not pygc.isenabled()  # the outer pause still holds
    assert pygc.isenabled()
    pygc.disable()
    try:
        with gcpause.paused():
            pass
        assert not pygc.isenabled()
    finally:
        pygc.enable()


@pytest.mark.parametrize("release", [True, False])
def test_a_compiled_step_keeps_no_ir_objects(monkeypatch: pytest.MonkeyPatch,
                                             release: bool) -> None:
    """A compiled step drops its llvmlite IR once the objects are built
    (``Lowering.release_ir``): kept, the IR was most of the process's tracked objects
    (ResNet-18: 660k of 760k, each full collection of the user's program 0.55 s instead of
    0.04 s). The step keeps the graphs, the plan and the native code: a few thousand
    objects for this 6-block MLP, against ~25k when the IR is kept (the control case)."""
    import gc as pygc

    monkeypatch.setenv("GRAPHC_CACHE", "0")
    if not release:
        monkeypatch.setattr(lower_mod.Lowering, "release_ir", lambda self: None)
    first, _ = _compiled_step(6)
    first(*_data())
    pygc.collect()
    before = len(pygc.get_objects())
    step, _ = _compiled_step(6)
    step(*_data())
    pygc.collect()
    kept = len(pygc.get_objects()) - before
    if release:
        assert kept < 12_000, kept
        assert step.variants[0].exe.lowering.module is None
    else:
        assert kept > 12_000, kept  # the bound above tells the two apart
