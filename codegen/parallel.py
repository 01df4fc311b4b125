"""A native two-thread pool: a persistent worker that spins, then sleeps on a futex.

Waking a Python thread costs 40–60 µs on these machines, a spinning native worker under a
microsecond, so large GEMMs can be split across both cores even inside a ~1 ms step. The pool
lives in its own small JIT module, started once per process; compiled steps find its dispatch
function through a global pointer (``graphc_parallel_run2``) that the runtime sets after loading
them. A step whose pointer is null (ahead-of-time builds, ``GRAPHC_NUM_THREADS=1``) runs both
halves itself, so correctness never depends on the pool.

``run2(task, ctx)``: the worker runs ``task(ctx, 1)`` while the caller runs ``task(ctx, 0)``;
it returns when both are done. The pool serves one caller at a time: ``run2`` takes it with a
compare-and-swap on ``busy``, and a caller that finds it taken (another Python thread running
another compiled step, with the GIL released) runs both parts itself. Part 1 is *claimed* with
a compare-and-swap: if the worker has not claimed it by the time the caller finishes part 0
(its core is busy with another process, or it is asleep), the caller runs part 1 itself — so a
contended second core costs a few nanoseconds, never a scheduler quantum. The worker spins ~50
µs after each task (steps issue several GEMMs back to back), then blocks in
``futex(FUTEX_WAIT)``; ``run2`` wakes it only when it sleeps.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from .llvm_util import I8P, I32, I64, VOID, declare

_SPIN_LIMIT = 200_000  # pause iterations before sleeping (~50 µs)
SYS_FUTEX = 202  # x86-64
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129

TASK = ir.FunctionType(VOID, [I8P, I64])


def _module(triple: str) -> ir.Module:
    mod = ir.Module(name="graphc_pool")
    mod.triple = triple
    # pool state: gen (futex word), done, sleeping, stop, started
    words = [ir.GlobalVariable(mod, I32, f"pool_{n}") for n in
             ("gen", "done", "sleeping", "stop", "started", "claim", "busy")]
    for w in words:
        w.initializer = ir.Constant(I32, 0)
        w.linkage = "internal"
    gen, done, sleeping, stop, started, claim, busy = words
    task_g = ir.GlobalVariable(mod, TASK.as_pointer(), "pool_task")
    task_g.initializer = ir.Constant(TASK.as_pointer(), None)
    task_g.linkage = "internal"
    ctx_g = ir.GlobalVariable(mod, I8P, "pool_ctx")
    ctx_g.initializer = ir.Constant(I8P, None)
    ctx_g.linkage = "internal"
    thread_g = ir.GlobalVariable(mod, I64, "pool_thread")
    thread_g.initializer = ir.Constant(I64, 0)
    thread_g.linkage = "internal"
    pause = declare(mod, "llvm.x86.sse2.pause", VOID, [])
    sched_yield = declare(mod, "sched_yield", I32, [])
    syscall = mod.globals.get("syscall") or ir.Function(
        mod, ir.FunctionType(I64, [I64], var_arg=True), "syscall")

    def futex(b: ir.IRBuilder, op: int, val: ir.Value) -> None:
        b.call(syscall, [ir.Constant(I64, SYS_FUTEX), gen, ir.Constant(I32, op), val,
                         ir.Constant(I8P, None)])

    # worker loop
    worker = ir.Function(mod, ir.FunctionType(I8P, [I8P]), "graphc_pool_worker")
    b = ir.IRBuilder(worker.append_basic_block("entry"))
    seen = b.alloca(I32)
    spins = b.alloca(I64)
    b.store(ir.Constant(I32, 0), seen)
    wait = worker.append_basic_block("wait")
    check_stop = worker.append_basic_block("check_stop")
    spin = worker.append_basic_block("spin")
    sleep = worker.append_basic_block("sleep")
    do_sleep = worker.append_basic_block("do_sleep")
    run = worker.append_basic_block("run")
    exit_ = worker.append_basic_block("exit")
    b.store(ir.Constant(I64, 0), spins)
    b.branch(wait)
    b.position_at_end(wait)
    g = b.load_atomic(gen, "acquire", 4)
    b.cbranch(b.icmp_unsigned("!=", g, b.load(seen)), check_stop, spin)
    b.position_at_end(check_stop)
    b.cbranch(b.icmp_unsigned("!=", b.load_atomic(stop, "acquire", 4), ir.Constant(I32, 0)),
              exit_, run)
    b.position_at_end(spin)
    n = b.add(b.load(spins), ir.Constant(I64, 1))
    b.store(n, spins)
    b.call(pause, [])
    b.cbranch(b.icmp_unsigned("<", n, ir.Constant(I64, _SPIN_LIMIT)), wait, sleep)
    b.position_at_end(sleep)
    b.store_atomic(ir.Constant(I32, 1), sleeping, "seq_cst", 4)
    g2 = b.load_atomic(gen, "seq_cst", 4)
    b.cbranch(b.icmp_unsigned("!=", g2, b.load(seen)), wait, do_sleep)
    b.position_at_end(do_sleep)
    futex(b, FUTEX_WAIT_PRIVATE, b.load(seen))
    b.store_atomic(ir.Constant(I32, 0), sleeping, "seq_cst", 4)
    b.store(ir.Constant(I64, 0), spins)
    b.branch(wait)
    b.position_at_end(run)
    g3 = b.load_atomic(gen, "acquire", 4)
    b.store(g3, seen)
    got = b.extract_value(b.cmpxchg(claim, g3, ir.Constant(I32, 0), "acq_rel", "acquire"), 1)
    claimed = worker.append_basic_block("claimed")
    b.store(ir.Constant(I64, 0), spins)
    b.cbranch(got, claimed, wait)
    b.position_at_end(claimed)
    t = b.load(task_g)
    b.call(t, [b.load(ctx_g), ir.Constant(I64, 1)])
    b.store_atomic(g3, done, "release", 4)
    b.branch(wait)
    b.position_at_end(exit_)
    b.ret(ir.Constant(I8P, None))

    # run2
    run2 = ir.Function(mod, ir.FunctionType(VOID, [TASK.as_pointer(), I8P]), "graphc_pool_run2")
    b = ir.IRBuilder(run2.append_basic_block("entry"))
    task, ctx = run2.args
    serial = run2.append_basic_block("serial")
    par = run2.append_basic_block("parallel")
    take = run2.append_basic_block("take")
    b.cbranch(b.icmp_unsigned("==", b.load_atomic(started, "acquire", 4), ir.Constant(I32, 0)),
              serial, take)
    b.position_at_end(take)
    # one caller at a time: concurrent steps (other threads) run their halves serially
    took = b.extract_value(b.cmpxchg(busy, ir.Constant(I32, 0), ir.Constant(I32, 1), "acquire",
                                     "monotonic"), 1)
    b.cbranch(took, par, serial)
    b.position_at_end(serial)
    b.call(task, [ctx, ir.Constant(I64, 0)])
    b.call(task, [ctx, ir.Constant(I64, 1)])
    b.ret_void()
    b.position_at_end(par)
    b.store(task, task_g)
    b.store(ctx, ctx_g)
    mine = b.add(b.load_atomic(gen, "acquire", 4), ir.Constant(I32, 1))
    mine = b.select(b.icmp_unsigned("==", mine, ir.Constant(I32, 0)), ir.Constant(I32, 1), mine)
    b.store_atomic(mine, claim, "release", 4)
    b.store_atomic(mine, gen, "seq_cst", 4)
    wake = run2.append_basic_block("wake")
    work = run2.append_basic_block("work")
    b.cbranch(b.icmp_unsigned("!=", b.load_atomic(sleeping, "seq_cst", 4), ir.Constant(I32, 0)),
              wake, work)
    b.position_at_end(wake)
    futex(b, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1))
    b.branch(work)
    b.position_at_end(work)
    b.call(task, [ctx, ir.Constant(I64, 0)])
    waits = b.alloca(I64)
    b.store(ir.Constant(I64, 0), waits)
    # if the worker has not picked part 1 up yet (descheduled, asleep), do it here
    mine_got = b.extract_value(b.cmpxchg(claim, mine, ir.Constant(I32, 0), "acq_rel",
                                         "acquire"), 1)
    self_run = run2.append_basic_block("self_run")
    wait2 = run2.append_basic_block("wait")
    fin = run2.append_basic_block("fin")
    b.cbranch(mine_got, self_run, wait2)
    b.position_at_end(self_run)
    b.call(task, [ctx, ir.Constant(I64, 1)])
    b.branch(fin)
    b.position_at_end(wait2)
    d = b.load_atomic(done, "acquire", 4)
    spin2 = run2.append_basic_block("spin")
    b.cbranch(b.icmp_unsigned("==", d, mine), fin, spin2)
    b.position_at_end(spin2)
    # spin briefly, then yield the CPU: if the worker is descheduled (a contended core),
    # spinning would only keep it off the CPU longer
    b.call(pause, [])
    tries = b.add(b.load(waits), ir.Constant(I64, 1))
    b.store(tries, waits)
    yield_blk = run2.append_basic_block("yield")
    b.cbranch(b.icmp_unsigned("<", tries, ir.Constant(I64, 4096)), wait2, yield_blk)
    b.position_at_end(yield_blk)
    b.call(sched_yield, [])
    b.branch(wait2)
    b.position_at_end(fin)
    b.store_atomic(ir.Constant(I32, 0), busy, "release", 4)
    b.ret_void()

    # start / stop
    pthread_create = declare(mod, "pthread_create", I32, [I64.as_pointer(), I8P,
                                                          worker.type, I8P])
    pthread_join = declare(mod, "pthread_join", I32, [I64, I8P.as_pointer()])
    start = ir.Function(mod, ir.FunctionType(I32, []), "graphc_pool_start")
    b = ir.IRBuilder(start.append_basic_block("entry"))
    rc = b.call(pthread_create, [thread_g, ir.Constant(I8P, None), worker,
                                 ir.Constant(I8P, None)])
    ok = b.icmp_signed("==", rc, ir.Constant(I32, 0))
    b.store_atomic(b.zext(ok, I32), started, "release", 4)
    b.ret(rc)
    stop_fn = ir.Function(mod, ir.FunctionType(VOID, []), "graphc_pool_stop")
    b = ir.IRBuilder(stop_fn.append_basic_block("entry"))
    b.store_atomic(ir.Constant(I32, 0), started, "release", 4)
    b.store_atomic(ir.Constant(I32, 1), stop, "release", 4)
    b.atomic_rmw("add", gen, ir.Constant(I32, 1), "seq_cst")
    futex(b, FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1))
    b.call(pthread_join, [b.load(thread_g), ir.Constant(I8P.as_pointer(), None)])
    b.ret_void()
    return mod


class _Pool:
    def __init__(self) -> None:
        from .cpu import host_target_machine, init_llvm

        init_llvm()
        tm = host_target_machine()
        mod = llvm.parse_assembly(str(_module(tm.triple)))
        mod.verify()
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        import ctypes

        self.run2 = self.engine.get_function_address("graphc_pool_run2")
        self._start = ctypes.CFUNCTYPE(ctypes.c_int32)(
            self.engine.get_function_address("graphc_pool_start"))
        self._stop = ctypes.CFUNCTYPE(None)(self.engine.get_function_address("graphc_pool_stop"))
        self.running = self._start() == 0
        if self.running:
            atexit.register(self.stop)

    def stop(self) -> None:
        if self.running:
            self.running = False
            self._stop()


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


__all__ = ["dispatch_address", "threads", "usable_cpus", "TASK", "Any"]
