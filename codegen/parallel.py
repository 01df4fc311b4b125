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
it returns when both are done. The worker runs its part in the caller's floating-point mode:
``run2`` stores the caller's MXCSR with the task and the worker loads it before the part
(``graphc.set_flush_denormal``), so flushing denormals to zero applies to both halves of a
split kernel and a result never depends on which thread computed it.

The pool serves one caller at a time: ``run2`` takes it with a compare-and-swap on ``busy``,
and a caller that finds it taken (another Python thread running another compiled step, with the
GIL released) runs both parts itself. Part 1 is *claimed* with a compare-and-swap: if the
worker has not claimed it by the time the caller finishes part 0 (its core is busy with another
process, or it is asleep), the caller runs part 1 itself. The worker spins ``SPIN_NS`` (100 µs,
timed by the clock) after each task (steps issue kernels back to back), then blocks in
``futex(FUTEX_WAIT)``; ``run2`` wakes it only when it sleeps.

The late-worker hold. A part the worker has claimed must be waited for, and a worker whose
core is taken away while it runs one (another process on that core, the hypervisor stealing
a VM's second vCPU) finishes it a scheduler quantum later: measured on a 2-vCPU Zen 4 VM with
a busy loop pinned to the second CPU, such stalls averaged 3.9 ms, one every ~20 ms, and the
GPT step ran 5.0-6.8 ms on two threads against 4.2-4.5 ms on one (its split kernels take
5-150 µs, so one stall undoes hundreds of dispatches' gain). So ``run2`` keeps a balance in
nanoseconds: each dispatch whose part 1 the worker ran adds ``own - wait`` (what it gained
over running both halves on the caller; the halves are equal work), banked up to
``CREDIT_NS``. A balance below zero starts a *hold*: for ``HOLD_FACTOR`` times the debt, every
dispatch runs both halves on the caller, and a debt run up again within one hold's length of
the last hold's end doubles the hold (up to ``HOLD_MAX_NS``); a held dispatch whose first half
takes longer than ``HOLD_BIG_NS`` ends the hold at once, since a stall costs such a task less
than losing its second thread (a step of large GEMMs keeps both threads). Held or not, every
part runs the same code on the same data, so results stay bit-identical. The clock is
``CLOCK_MONOTONIC`` (a vDSO call), read three times a dispatch. Measured on that VM (GPT step
alone in its process, alternating runs): with the busy loop 5.55-5.97 ms without the hold,
4.51-5.12 ms with it, 4.45-4.52 ms on one thread; without the busy loop 2.53 against 2.50
ms. ``graphc_pool_stats`` reads the counters (``STATS``; ``graphc.runtime.pool.stats``);
``GRAPHC_POOL_HOLD=0`` (``options.POOL_HOLD``) counts but never holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from llvmlite import ir

from .llvm_util import I8P, I32, I64, VOID, declare, i64

# how long the worker spins after a task before it sleeps, and how many pauses apart it reads
# the clock meanwhile (a fixed count of 200,000 pauses was meant as ~50 us and took 5 ms on
# Zen 4, spinning a core away after every step)
SPIN_NS = 100_000
SPIN_CHECK = 256
# the late-worker hold (module docstring): the credit a run of good dispatches may bank, how
# many times its debt a hold lasts, the longest hold; a wait counts as late (in the
# counters only) past the caller's own half and this many ns
CREDIT_NS = 5_000_000
HOLD_FACTOR = 8
HOLD_MAX_NS = 250_000_000
HOLD_BIG_NS = 1_000_000
LATE_MIN_NS = 200_000
# ``graphc_pool_stats``' fields, in order
STATS = ("parallel", "late", "held", "late_ns", "holds")
CLOCK_MONOTONIC = 1
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

    def split_even(self, total: ir.Value) -> tuple[ir.Value, ir.Value]:
        """This part's half of the even part of ``total`` (``split`` of ``total & ~1``): the
        images each part takes whole; the last of an odd batch is shared by both parts, in
        the same loop (``conv_epilogue.part_images``, ``TileBlocks.for_part_blocks``)."""
        return self.split(self.b.and_(total, i64(-2)))

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


def is_odd(b: ir.IRBuilder, total: ir.Value) -> ir.Value:
    """``total`` (an i64 count of images) is odd: ``KernelTask.split_even`` leaves its last
    image to both parts."""
    return b.icmp_unsigned("!=", b.and_(total, i64(-2)), total)


@contextmanager
def odd_last(b: ir.IRBuilder, total: ir.Value) -> Iterator[ir.Value]:
    """Code run only when ``total`` is odd, given ``total - 1``: the last image of an odd
    batch, which the convolution kernels split between the parts by tiles or rows after
    ``KernelTask.split_even``'s whole images (so a batch of one uses both threads). The
    kernels use it around their task (zeroing that image before, its epilogue after); the
    tasks themselves take that image in their one image loop (``part_images``), not in a
    second copy of their body."""
    with b.if_then(is_odd(b, total)):
        yield b.sub(total, i64(1))


def _clock_function(mod: ir.Module) -> ir.Function:
    """``i64 now()``: CLOCK_MONOTONIC in nanoseconds (``clock_gettime``, a vDSO call of
    ~20 ns on Linux: a few per dispatch, against tasks of microseconds and more)."""
    ts = ir.LiteralStructType([I64, I64])
    clock_gettime = declare(mod, "clock_gettime", I32, [I32, ts.as_pointer()])
    fn = ir.Function(mod, ir.FunctionType(I64, []), "graphc_pool_now")
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    t = b.alloca(ts)
    b.call(clock_gettime, [ir.Constant(I32, CLOCK_MONOTONIC), t])
    sec = b.load(b.gep(t, [ir.Constant(I32, 0), ir.Constant(I32, 0)]))
    nsec = b.load(b.gep(t, [ir.Constant(I32, 0), ir.Constant(I32, 1)]))
    b.ret(b.add(b.mul(sec, i64(1_000_000_000)), nsec))
    return fn


def pool_module(triple: str, hold: bool = True) -> ir.Module:
    """The pool's own module: ``graphc_pool_start``, ``graphc_pool_run2``, ``graphc_pool_stop``,
    ``graphc_pool_stats`` and the worker thread's loop (compiled and started by
    ``graphc.runtime.pool``). ``hold``: the late-worker hold (``options.POOL_HOLD``); without
    it late dispatches are still counted."""
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
    # the caller's MXCSR (rounding, flush-to-zero, denormals-are-zero), for the worker's part
    csr_g = ir.GlobalVariable(mod, I32, "pool_csr")
    csr_g.initializer = ir.Constant(I32, 0x1F80)  # the x86-64 default, never read unset
    csr_g.linkage = "internal"
    stmxcsr = declare(mod, "llvm.x86.sse.stmxcsr", VOID, [I8P])
    ldmxcsr = declare(mod, "llvm.x86.sse.ldmxcsr", VOID, [I8P])
    pause = declare(mod, "llvm.x86.sse2.pause", VOID, [])
    sched_yield = declare(mod, "sched_yield", I32, [])
    syscall = mod.globals.get("syscall") or ir.Function(
        mod, ir.FunctionType(I64, [I64], var_arg=True), "syscall")

    def futex(b: ir.IRBuilder, op: int, val: ir.Value) -> None:
        b.call(syscall, [ir.Constant(I64, SYS_FUTEX), gen, ir.Constant(I32, op), val,
                         ir.Constant(I8P, None)])

    now = _clock_function(mod)
    # worker loop
    worker = ir.Function(mod, ir.FunctionType(I8P, [I8P]), "graphc_pool_worker")
    b = ir.IRBuilder(worker.append_basic_block("entry"))
    seen = b.alloca(I32)
    spins = b.alloca(I64)
    spin_start = b.alloca(I64)
    own_csr = b.alloca(I32)
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
    # spin for SPIN_NS of time (a pause lasts 10-140 cycles, by CPU), reading the clock
    # when the spin starts and every SPIN_CHECK pauses
    b.position_at_end(spin)
    n = b.add(b.load(spins), ir.Constant(I64, 1))
    b.store(n, spins)
    with b.if_then(b.icmp_unsigned("==", n, ir.Constant(I64, 1))):
        b.store(b.call(now, []), spin_start)
    b.call(pause, [])
    clock = worker.append_basic_block("clock")
    b.cbranch(b.icmp_unsigned("==", b.and_(n, i64(SPIN_CHECK - 1)), i64(0)), clock, wait)
    b.position_at_end(clock)
    spent = b.sub(b.call(now, []), b.load(spin_start))
    b.cbranch(b.icmp_signed("<", spent, i64(SPIN_NS)), wait, sleep)
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
    # the caller's MXCSR, written before the claim was published; loaded only when it
    # differs from the worker's own (reading MXCSR is cheap, writing it is microcoded)
    b.call(stmxcsr, [b.bitcast(own_csr, I8P)])
    with b.if_then(b.icmp_unsigned("!=", b.load(csr_g), b.load(own_csr))):
        b.call(ldmxcsr, [b.bitcast(csr_g, I8P)])
    t = b.load(task_g)
    b.call(t, [b.load(ctx_g), ir.Constant(I64, 1)])
    b.store_atomic(g3, done, "release", 4)
    b.branch(wait)
    b.position_at_end(exit_)
    b.ret(ir.Constant(I8P, None))

    # the late-worker hold (see the module docstring): i64 nanosecond clocks and counters
    hv = {n: ir.GlobalVariable(mod, I64, f"pool_{n}") for n in
          ("hold_until", "hold", "balance") + STATS}
    for name, v in hv.items():
        v.initializer = ir.Constant(I64, CREDIT_NS if name == "balance" else 0)
        v.linkage = "internal"
    def bump(b: ir.IRBuilder, name: str) -> None:
        b.store(b.add(b.load(hv[name]), i64(1)), hv[name])

    # run2
    run2 = ir.Function(mod, ir.FunctionType(VOID, [TASK.as_pointer(), I8P]), "graphc_pool_run2")
    b = ir.IRBuilder(run2.append_basic_block("entry"))
    task, ctx = run2.args
    serial = run2.append_basic_block("serial")
    check = run2.append_basic_block("check")
    held = run2.append_basic_block("held")
    par = run2.append_basic_block("parallel")
    take = run2.append_basic_block("take")
    b.cbranch(b.icmp_unsigned("==", b.load_atomic(started, "acquire", 4), ir.Constant(I32, 0)),
              serial, take)
    b.position_at_end(take)
    # one caller at a time: concurrent steps (other threads) run their halves serially
    took = b.extract_value(b.cmpxchg(busy, ir.Constant(I32, 0), ir.Constant(I32, 1), "acquire",
                                     "monotonic"), 1)
    b.cbranch(took, check, serial)
    b.position_at_end(serial)
    b.call(task, [ctx, ir.Constant(I64, 0)])
    b.call(task, [ctx, ir.Constant(I64, 1)])
    b.ret_void()
    # the hold's fields are only touched by the caller that holds ``busy``
    b.position_at_end(check)
    t0 = b.call(now, [])
    b.cbranch(b.icmp_signed("<", t0, b.load(hv["hold_until"])) if hold else
              ir.Constant(ir.IntType(1), 0), held, par)
    # held: both halves here; a half longer than HOLD_BIG_NS ends the hold (a stall of the
    # worker costs such a task less than running it on one thread)
    b.position_at_end(held)
    bump(b, "held")
    b.call(task, [ctx, ir.Constant(I64, 0)])
    big = b.icmp_signed(">", b.sub(b.call(now, []), t0), i64(HOLD_BIG_NS))
    with b.if_then(big):
        b.store(i64(0), hv["hold_until"])
        b.store(i64(0), hv["hold"])
    b.store_atomic(ir.Constant(I32, 0), busy, "release", 4)
    b.call(task, [ctx, ir.Constant(I64, 1)])
    b.ret_void()
    b.position_at_end(par)
    bump(b, "parallel")
    b.store(task, task_g)
    b.store(ctx, ctx_g)
    b.call(stmxcsr, [b.bitcast(csr_g, I8P)])
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
    t1 = b.call(now, [])
    waits = b.alloca(I64)
    b.store(ir.Constant(I64, 0), waits)
    # if the worker has not picked part 1 up yet (descheduled, asleep), do it here
    mine_got = b.extract_value(b.cmpxchg(claim, mine, ir.Constant(I32, 0), "acq_rel",
                                         "acquire"), 1)
    self_run = run2.append_basic_block("self_run")
    wait2 = run2.append_basic_block("wait")
    waited = run2.append_basic_block("waited")
    start_hold = run2.append_basic_block("start_hold")
    fin = run2.append_basic_block("fin")
    b.cbranch(mine_got, self_run, wait2)
    b.position_at_end(self_run)
    b.call(task, [ctx, ir.Constant(I64, 1)])
    b.branch(fin)
    b.position_at_end(wait2)
    d = b.load_atomic(done, "acquire", 4)
    spin2 = run2.append_basic_block("spin")
    b.cbranch(b.icmp_unsigned("==", d, mine), waited, spin2)
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
    # the credit balance (module docstring): this dispatch gained ``own - wait`` against
    # running both halves here (the halves are equal work)
    b.position_at_end(waited)
    t2 = b.call(now, [])
    wait_ns = b.sub(t2, t1)
    own = b.sub(t1, t0)
    bound = b.select(b.icmp_signed(">", own, i64(LATE_MIN_NS)), own, i64(LATE_MIN_NS))
    count_late = run2.append_basic_block("count_late")
    credit = run2.append_basic_block("credit")
    b.cbranch(b.icmp_signed(">", wait_ns, bound), count_late, credit)
    b.position_at_end(count_late)
    bump(b, "late")
    b.store(b.add(b.load(hv["late_ns"]), b.sub(wait_ns, own)), hv["late_ns"])
    b.branch(credit)
    b.position_at_end(credit)
    bal = b.add(b.load(hv["balance"]), b.sub(own, wait_ns))
    bal = b.select(b.icmp_signed(">", bal, i64(CREDIT_NS)), i64(CREDIT_NS), bal)
    b.store(bal, hv["balance"])
    b.cbranch(b.and_(ir.Constant(ir.IntType(1), int(hold)), b.icmp_signed("<", bal, i64(0))),
              start_hold, fin)
    # in debt: hold for HOLD_FACTOR times the debt; a debt run up within one hold's length of
    # the last hold's end (the worker is still not getting its core) doubles that hold
    b.position_at_end(start_hold)
    bump(b, "holds")
    last_end, last_len = b.load(hv["hold_until"]), b.load(hv["hold"])
    recent = b.and_(b.icmp_signed(">", last_len, i64(0)),
                    b.icmp_signed("<", b.sub(t2, last_end), last_len))
    length = b.mul(b.sub(i64(0), bal), i64(HOLD_FACTOR))
    doubled = b.mul(last_len, i64(2))
    length = b.select(b.and_(recent, b.icmp_signed(">", doubled, length)), doubled, length)
    length = b.select(b.icmp_signed(">", length, i64(HOLD_MAX_NS)), i64(HOLD_MAX_NS), length)
    b.store(length, hv["hold"])
    b.store(b.add(t2, length), hv["hold_until"])
    b.store(i64(0), hv["balance"])
    b.branch(fin)
    b.position_at_end(fin)
    b.store_atomic(ir.Constant(I32, 0), busy, "release", 4)
    b.ret_void()
    # the counters (``STATS``), for tests and reports
    stats = ir.Function(mod, ir.FunctionType(VOID, [I64.as_pointer()]), "graphc_pool_stats")
    b = ir.IRBuilder(stats.append_basic_block("entry"))
    for i, name in enumerate(STATS):
        b.store(b.load(hv[name]), b.gep(stats.args[0], [i64(i)]))
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


__all__ = ["pool_module", "TASK", "CREDIT_NS", "HOLD_FACTOR", "HOLD_MAX_NS", "HOLD_BIG_NS",
           "STATS",
           "KernelTask", "context_type", "pack_context", "unpack_context",
           "GEMM_PAR_MIN_MACS", "CONV_PAR_MIN_MACS", "is_odd", "odd_last"]
