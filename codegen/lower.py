"""The entry function: one optimized Graph lowered to one LLVM module (shared by the JIT and
AOT paths).

The plan (``codegen.planning``) says which nodes get buffers and where they live; each
materialized node (or loop group) becomes a kernel, an internal function emitted by a
``KernelEmitter`` (``codegen.emitter``) with the elementwise rules (``codegen.elementwise``) or
a family kernel from the registry (``codegen.kernels``, filled by ``codegen.families``). Its
buffer arguments are ``noalias``, so LLVM vectorises without run-time alias checks. The entry
function ``<name>(i8** table) -> i32`` reads the pointer table, checks that the scratch arena
is large enough for the run-time shapes, runs the kernels in order and only then commits
outputs and state updates (``memcpy``), so an error found by a kernel (an out-of-range class
index) returns a non-zero code with no state modified.

Table layout (``codegen.abi``): ``[syms, scratch, scratch_info, err, inputs..., outputs...,
updates...]``.
"""

from __future__ import annotations

from llvmlite import ir

from graphc.ir import Graph, Node

from .abi import ERR_NONFINITE, ERR_OK, ERR_SCRATCH, PROFILE_SYMBOL, RUN2_SYMBOL, TABLE_FIXED
from .elementwise import ELEMENT_RULES
from .emitter import KernelEmitter, emit_elementwise, emit_group
from .families import KERNELS, kernel_for
from .llvm_util import I8P, I32, I64, VOID, SymEmitter, declare, i64, mem_type
from .parallel import TASK
from .planning import Plan, nbytes, plan
from .views import VIEW_OPS

# merge same-shaped elementwise kernels into single loops (``planning._plan_groups``); tests
# and benchmarks switch it off to compare against one loop per kernel
LOOP_GROUPS = True


def _emit_finite_exit(b: ir.IRBuilder, flag: Node, buf: ir.Value, err: ir.Value, check: int,
                      node_index: int) -> None:
    """check_finite: return ERR_NONFINITE when a flag (sum of x*0, NaN iff some x is NaN or
    Inf) is not zero. Emitted right after the flag's kernel, so before any in-place write
    that follows it (``_plan_direct_writes`` counts flag kernels as kernels that may fail)."""
    v = b.load(b.bitcast(buf, mem_type(flag.dtype).as_pointer()))
    bad = b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
    with b.if_then(bad, likely=False):
        for j, x in enumerate((ERR_NONFINITE, check, node_index, 0)):
            b.store(i64(x), b.gep(err, [i64(j)], inbounds=True))
        b.ret(ir.Constant(I32, ERR_NONFINITE))


# ---------------------------------------------------------------------------------------
# the entry function
# ---------------------------------------------------------------------------------------
class Lowering:
    """Builds the LLVM module for one graph (see the module docstring)."""

    def __init__(self, g: Graph, name: str = "graphc_step", triple: str = "",
                 data_layout: str = "", wide: bool = True, debug: bool = False,
                 loop_groups: bool | None = None, profile: bool = False,
                 gemm_library: bool = False) -> None:
        self.graph = g
        self.profile = profile  # count time-stamp ticks per kernel (``PROFILE_SYMBOL``)
        self.unit_names: list[str] = []
        self.wide = wide
        self.debug = debug  # bounds-check every load and store (graphc.debug)
        self.plan = plan(g, wide, debug,
                         loop_groups=LOOP_GROUPS if loop_groups is None else loop_groups)
        self.mat_ids = {n.id for n in self.plan.materialized}
        self.symbols = g.symbols()
        self.module = ir.Module(name=name)
        if triple:
            self.module.triple = triple
        if data_layout:
            self.module.data_layout = data_layout
        self.name = name
        self.n_inputs = len(g.inputs)
        self.n_outputs = len(g.outputs)
        self.n_updates = len(g.updates)
        # gemm_library: GEMM routines only declared here, their tiles recorded for
        # ``gemm.build_library`` (the JIT compiles and caches them separately)
        self.gemm_requests: set | None = set() if gemm_library else None
        if gemm_library:
            self.module.gemm_requests = self.gemm_requests  # type: ignore[attr-defined]
        self._build()

    def run2_global(self) -> ir.GlobalVariable:
        """``graphc_parallel_run2``: the thread pool's dispatch function, set by the JIT
        runtime after loading (null — single-threaded — in ahead-of-time builds)."""
        g = self.module.globals.get(RUN2_SYMBOL)
        if g is None:
            fty = ir.FunctionType(VOID, [TASK.as_pointer(), I8P]).as_pointer()
            g = ir.GlobalVariable(self.module, fty, RUN2_SYMBOL)
            g.initializer = ir.Constant(fty, None)
        return g

    def table_size(self) -> int:
        return TABLE_FIXED + self.n_inputs + self.n_outputs + self.n_updates

    def _build(self) -> None:
        g, p, mod = self.graph, self.plan, self.module
        fn = ir.Function(mod, ir.FunctionType(I32, [I8P.as_pointer()]), name=self.name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        tbl = fn.args[0]

        def slot(i: int) -> ir.Value:
            return b.load(b.gep(tbl, [i64(i)], inbounds=True))

        syms_ptr = b.bitcast(slot(0), I64.as_pointer())
        scratch = slot(1)
        info = b.bitcast(slot(2), I64.as_pointer())
        err = b.bitcast(slot(3), I64.as_pointer())
        symvals = {s: b.load(b.gep(syms_ptr, [i64(i)], inbounds=True), name=s.name)
                   for i, s in enumerate(self.symbols)}
        sym = SymEmitter(b, symvals)
        # scratch capacity check
        need = sym(p.scratch_bytes)
        cap = b.load(info)
        small = b.icmp_signed("<", cap, need)
        with b.if_then(small, likely=False):
            b.store(need, b.gep(info, [i64(1)], inbounds=True))
            b.ret(ir.Constant(I32, ERR_SCRATCH))
        b.store(i64(ERR_OK), err)
        bufs: dict[int, ir.Value] = {}
        for i, n in enumerate(g.inputs):
            bufs[n.id] = slot(TABLE_FIXED + i)
        upd_base = TABLE_FIXED + self.n_inputs + self.n_outputs
        for n in p.materialized:
            if n.id in p.virtual:
                continue
            if n.id in p.direct:
                bufs[n.id] = slot(upd_base + p.direct[n.id])
            else:
                bufs[n.id] = b.gep(scratch, [sym(p.offsets[n.id])], inbounds=True)
        work = b.gep(scratch, [sym(p.work_offset)], inbounds=True)
        finite = {n.id: i for i, n in enumerate(g.meta.get("finite_flags", ()))}
        units = p.units()
        prof = None
        if self.profile:
            clock = declare(mod, "llvm.readcyclecounter", I64, [])
            arr = ir.ArrayType(I64, 2 * len(units))
            prof = ir.GlobalVariable(mod, arr, PROFILE_SYMBOL)
            prof.initializer = ir.Constant(arr, None)
        # kernels
        for u, unit in enumerate(units):
            n = unit[0]
            if len(unit) > 1:
                k = KernelEmitter(self, n, f"g{p.node_index[n.id]}_group", group=unit)
                emit_group(k)
            else:
                k = KernelEmitter(self, n, f"k{p.node_index[n.id]}_{n.op}")
                kern = kernel_for(n)
                kern.emit(k) if kern is not None else emit_elementwise(k)
            k.finish()
            self.unit_names.append(
                f"%{p.node_index[n.id]} {n.op}" if len(unit) == 1 else
                f"%{p.node_index[n.id]}..%{p.node_index[unit[-1].id]} loop group")
            args = [bufs[m.id] for m in k.stored] + [bufs[x.id] for x in k.buffers] + [
                work, syms_ptr, err]
            t0 = b.call(clock, []) if prof is not None else None
            rc = b.call(k.fn, args)
            if prof is not None:
                dt_ = b.sub(b.call(clock, []), t0)
                for j, add in ((2 * u, dt_), (2 * u + 1, i64(1))):
                    cell = b.gep(prof, [ir.Constant(I32, 0), ir.Constant(I32, j)],
                                 inbounds=True)
                    b.store(b.add(b.load(cell), add), cell)
            bad = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
            with b.if_then(bad, likely=False):
                b.ret(rc)
            if n.id in finite:
                _emit_finite_exit(b, n, bufs[n.id], err, finite[n.id], p.node_index[n.id])
        # commit: outputs then updates
        memcpy = declare(mod, "memcpy", I8P, [I8P, I8P, I64])
        base = TABLE_FIXED + self.n_inputs
        for j, o in enumerate(g.outputs):
            b.call(memcpy, [slot(base + j), bufs[o.id], sym(nbytes(o))])
        base += self.n_outputs
        for j, (_, v) in enumerate(g.updates):
            if p.direct.get(v.id) != j:
                b.call(memcpy, [slot(base + j), bufs[v.id], sym(nbytes(v))])
        b.ret(ir.Constant(I32, ERR_OK))


__all__ = ["Lowering", "LOOP_GROUPS", "plan", "Plan", "KernelEmitter", "ELEMENT_RULES", "KERNELS",
           "VIEW_OPS"]
