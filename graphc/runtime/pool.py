"""The running two-thread pool: compiled once per process from ``codegen.parallel``'s module,
its worker started, and its dispatch function's address handed to each loaded step.

Separate from ``codegen.parallel`` because starting threads and holding a JIT engine is what
a *running* step needs, not what generating one needs (ahead-of-time builds never start it).
How many threads to use (``threads``) is decided here too: it depends on the process (its CPU
affinity, ``GRAPHC_NUM_THREADS``), not on the code.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
from typing import Any

import llvmlite.binding as llvm

from graphc.codegen.cpu import host_target_machine, init_llvm
from graphc.codegen.llvm_objects import emit_object

from . import cache


def _pool_object(tm: Any) -> bytes:
    """The pool's object code for this host, from the compile cache when an earlier process
    compiled it (as every step's objects are): generating and compiling the module cost
    ~20 ms of the first call of every process, a step found in the disk cache included."""
    from graphc.codegen import options
    from graphc.codegen.llvm_objects import host_cpu

    cpu, feats = host_cpu()
    hold = options.POOL_HOLD
    k = cache.key("thread-pool", f"{tm.triple}|{cpu}|{feats}|hold={hold}")
    obj = cache.load(k)
    if obj is None:
        from graphc.codegen.parallel import pool_module

        mod = llvm.parse_assembly(str(pool_module(tm.triple, hold)))
        mod.verify()
        obj = emit_object(mod, tm)
        cache.store(k, obj)
    return obj


class _Pool:
    def __init__(self) -> None:
        init_llvm()
        tm = host_target_machine()
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(_pool_object(tm)))
        self.engine.finalize_object()
        self.run2 = self.engine.get_function_address("graphc_pool_run2")
        self._start = ctypes.CFUNCTYPE(ctypes.c_int32)(
            self.engine.get_function_address("graphc_pool_start"))
        self._stop = ctypes.CFUNCTYPE(None)(self.engine.get_function_address("graphc_pool_stop"))
        self._stats = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_int64))(
            self.engine.get_function_address("graphc_pool_stats"))
        self.running = self._start() == 0
        if self.running:
            atexit.register(self.stop)

    def stop(self) -> None:
        if self.running:
            self.running = False
            self._stop()


    def stats(self) -> dict[str, int]:
        from graphc.codegen.parallel import STATS

        out = (ctypes.c_int64 * len(STATS))()
        self._stats(out)
        return dict(zip(STATS, out, strict=True))


_pool: _Pool | None = None
_lock = threading.Lock()


def threads() -> int:
    """Threads compiled steps use: ``GRAPHC_NUM_THREADS`` (1 or 2), default 2 when the process
    may run on at least two CPUs and the machine is x86-64 Linux.

    The CPUs counted are the process's affinity mask, not the machine's: under ``taskset`` or
    a container's cpuset a second spinning worker would share the caller's only core and
    halve the step's speed (measured pinned to one CPU: the mlp_small forward took 323 us
    instead of 146 us)."""
    env = os.environ.get("GRAPHC_NUM_THREADS")
    if env is not None:
        return 2 if env.strip() not in ("", "0", "1") else 1
    import platform

    ok = platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")
    return 2 if ok and usable_cpus() >= 2 else 1


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def dispatch_address() -> int:
    """Address of ``run2`` (starting the pool on first use), or 0 to run single-threaded."""
    global _pool
    if threads() < 2:
        return 0
    with _lock:
        if _pool is None:
            _pool = _Pool()
    return _pool.run2 if _pool.running else 0


def stats() -> dict[str, int] | None:
    """The pool's dispatch counters since the process started it (None when it has not):
    ``parallel`` dispatches offered to the worker (it runs part 1 unless the caller, done with
    part 0 first, takes it back), ``late`` ones among them (the worker's half finished more
    than the caller's own half, and 0.2 ms, after the caller's: its core was taken),
    ``late_ns`` the time waited past the caller's own half in those, ``held`` dispatches run
    on the caller alone during a hold and ``holds`` the holds started (the late-worker hold,
    ``codegen.parallel``)."""
    with _lock:
        return None if _pool is None or not _pool.running else _pool.stats()


__all__ = ["dispatch_address", "threads", "usable_cpus", "stats"]
