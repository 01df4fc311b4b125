"""The two-thread pool's code: its LLVM module, the task type and the task context that
kernels (GEMM, convolution) fill to split work between two threads.

This is the code-generation half; ``graphc.runtime.pool`` compiles the module, starts the
worker and hands compiled steps its dispatch address.

A native two-thread pool: a persistent worker that spins, then sleeps on a futex.

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

from collections.abc import Sequence
from typing import Any

from llvmlite import ir

from .llvm_util import I8P, I32, I64, VOID, declare, i64

_SPIN_LIMIT = 200_000  # pause iterations before sleeping (~50 µs)
SYS_FUTEX = 202  # x86-64
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129

# a task: ``void task(i8* ctx, i64 part)``; ``run2`` runs part 0 and part 1 concurrently
TASK = ir.FunctionType(VOID, [I8P, I64])

# Splitting work over the two threads pays only above a size (multiply-adds), below which the
# hand-off to the second thread costs more than it saves. The two kernel families were tuned
# separately and differ: each GEMM part packs its own half of the larger operand and all of the
# smaller one (below ~1 MFLOP that does not pay), while the convolution's parts share the one
# weight repack done before the split and each only build their own images' grids.
GEMM_PAR_MIN_MACS = 1 << 19
CONV_PAR_MIN_MACS = 1 << 18


def context_type(types: Sequence[ir.Type]) -> ir.LiteralStructType:
    """The stack struct through which a kernel hands a task its values (one field for none)."""
    return ir.LiteralStructType(list(types) or [I64])


def pack_context(b: ir.IRBuilder, slot: ir.Value, values: Sequence[ir.Value]) -> ir.Value:
    """In the kernel: store ``values`` into the context struct at ``slot`` (an alloca of
    ``context_type``); returns the ``i8*`` the task receives."""
    for i, v in enumerate(values):
        b.store(v, b.gep(slot, [ir.Constant(I32, 0), ir.Constant(I32, i)]))
    return b.bitcast(slot, I8P)


def unpack_context(b: ir.IRBuilder, ctx: ir.Value, ct: ir.LiteralStructType, count: int
                   ) -> list[ir.Value]:
    """In the task: load the first ``count`` fields of context struct type ``ct`` from its
    ``i8*`` argument ``ctx``."""
    p = b.bitcast(ctx, ct.as_pointer())
    return [b.load(b.gep(p, [ir.Constant(I32, 0), ir.Constant(I32, i)])) for i in range(count)]


class KernelTask:
    """A ``void(i8* ctx, i64 part)`` function for the thread pool (``parallel.run2``), with
    its own builder, and the kernel side that fills the ctx and dispatches it.

    ``values`` are what the body needs from the kernel: constants and globals are used as
    they are (the task is compiled with them folded in), anything else travels through a
    stack struct. The task's body is emitted with ``self.b``; ``self[v]`` maps a kernel
    value to the task's copy."""

    def __init__(self, k: Any, suffix: str, values: list[ir.Value]) -> None:
        self.k = k
        live: list[ir.Value] = []
        for v in values:
            if not isinstance(v, (ir.Constant, ir.GlobalValue)) and all(v is not x
                                                                         for x in live):
                live.append(v)
        self.live = live
        self.ct = context_type([v.type for v in live])
        mod = k.L.module
        name = f"{k.fn.name}.{suffix}"
        # the task unpacks the ctx and calls the body, whose pointer arguments are noalias
        # like the kernel's own (inlined, they become alias scopes): without that LLVM
        # cannot vectorise the grid copies (grid stores might overwrite the source)
        body = ir.Function(mod, ir.FunctionType(ir.VoidType(), [v.type for v in live] + [I64]),
                           name=f"{name}.body")
        body.linkage = "internal"
        body.attributes.add("alwaysinline")
        for a in body.args[:-1]:
            if isinstance(a.type, ir.PointerType):
                a.add_attribute("noalias")
        self.fn = ir.Function(mod, TASK, name=name)
        self.fn.linkage = "internal"
        w = ir.IRBuilder(self.fn.append_basic_block("entry"))
        w.call(body, unpack_context(w, self.fn.args[0], self.ct, len(live)) + [self.fn.args[1]])
        w.ret_void()
        entry = body.append_basic_block("entry")
        start = body.append_basic_block("start")
        self._allocas = ir.IRBuilder(entry)
        self._br = self._allocas.branch(start)
        self.b = b = ir.IRBuilder(start)
        self._map = list(zip(live, body.args))
        self.part = body.args[-1]
        self.first = b.icmp_signed("==", self.part, i64(0))

    def __getitem__(self, v: ir.Value) -> ir.Value:
        if isinstance(v, (ir.Constant, ir.GlobalValue)):
            return v
        return next(t for x, t in self._map if x is v)

    def alloca(self, t: ir.Type) -> ir.Value:
        self._allocas.position_before(self._br)
        return self._allocas.alloca(t)

    def split(self, total: ir.Value) -> tuple[ir.Value, ir.Value]:
        """This part's ``[lo, hi)`` of ``range(total)``: part 0 the first ``ceil(total/2)``."""
        b = self.b
        half = b.udiv(b.add(total, i64(1)), i64(2))
        return b.select(self.first, i64(0), half), b.select(self.first, half, total)

    def finish(self) -> None:
        self.b.ret_void()

    def dispatch(self, par: ir.Value) -> None:
        """In the kernel: run both parts on the pool when ``par`` holds and the pool is
        there (``graphc_parallel_run2`` is null in one-thread processes and ahead-of-time
        builds), else part 0 then part 1 on this thread: the same code computes each output
        element either way, so the results are bit-identical."""
        k = self.k
        b = k.b
        cp = pack_context(b, k.alloca(self.ct), self.live)
        disp = b.load(k.L.run2_global())
        go = b.and_(b.icmp_unsigned("!=", b.ptrtoint(disp, I64), i64(0)), par)
        with b.if_else(go) as (then, otherwise):
            with then:
                b.call(disp, [self.fn, cp])
            with otherwise:
                b.call(self.fn, [cp, i64(0)])
                b.call(self.fn, [cp, i64(1)])


def pool_module(triple: str) -> ir.Module:
    """The pool's own module: ``graphc_pool_start``, ``graphc_pool_run2``, ``graphc_pool_stop``
    and the worker thread's loop (compiled and started by ``graphc.runtime.pool``)."""
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


__all__ = ["pool_module", "TASK", "KernelTask", "context_type", "pack_context", "unpack_context",
           "GEMM_PAR_MIN_MACS", "CONV_PAR_MIN_MACS"]
