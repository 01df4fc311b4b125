"""The PTX code generator: an optimized Graph -> NVPTX LLVM module -> PTX text and launches.

Same plan as the CPU (``planning.plan``: which nodes get buffers in the scratch arena and which
are recomputed inline), different execution: each materialized node becomes one or two
``.entry`` kernels (see ``ptx_kernels``), launched in plan order on one stream; then one
*commit* copy kernel per state update copies the new value over the device-resident state,
and does nothing if a kernel has set the error flag, so a step that failed (a class index out
of range) leaves every parameter as it was, as on the CPU. Updates the plan computes straight
into their state buffer (``Plan.direct``: every kernel that can fail runs before them) need
no commit; their kernels return at once when the error flag is set.

A ``scan`` (``ScanLaunch``) is a host loop over its body's launches, built from the body's
own plan with the same kernel emitters (names prefixed by the scan), so a recurrent layer or
``step.run`` keeps one program for every length; the copies between steps (carries, the
step's slice of each stacked result) are the commit kernels, which do nothing once a kernel
has flagged an error.

Nothing here needs a GPU: the module is built with llvmlite and emitted by LLVM's NVPTX
target, so ``ir("ptx")`` works anywhere. Because LLVM aborts the whole process on an
intrinsic NVPTX cannot lower, ``validate`` checks every op before any IR is built and
``check_declarations`` checks every external the module calls before LLVM sees it.

The architecture is ``sm_80`` unless ``GRAPHC_CUDA_ARCH`` (or ``DEFAULT_ARCH``) says otherwise;
``sm_80`` PTX also runs on Hopper and later (the driver JIT-compiles it).

Running the program (device buffers, launches, copies back) is ``graphc.runtime.ptx`` and
``graphc.runtime.ptx_runtime``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
import sympy
from llvmlite import ir

from graphc.ir import Graph, Node
from graphc.ir import loops as L
from graphc.ir import shapes as sh

from .legalize import legalize_bf16
from .llvm_objects import emit_assembly
from .llvm_util import I64, VOID, i64, mem_type
from .planning import Plan, plan
from .ptx_kernels import (
    BLOCK,
    TILE_M,
    TILE_N,
    PTXKernel,
    is_small_reduction,
    kernels_for,
    strided_for,
    supported_ops,
)

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_80"
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120")
MAX_GRID = 4096  # grid-stride loops cover the rest; ~30 blocks of 256 per SM on big GPUs
# externals NVPTX lowers without libm (anything else could abort LLVM: checked up front)
_ALLOWED_PREFIXES = ("llvm.nvvm.", "llvm.fabs.", "llvm.sqrt.", "llvm.rint.", "llvm.fma.",
                     "llvm.fmuladd.", "llvm.maximum.", "llvm.minimum.", "llvm.minnum.",
                     "llvm.maxnum.", "llvm.copysign.", "llvm.floor.", "llvm.ceil.", "llvm.trunc.")

_init_lock = threading.Lock()
_initialized = False


def init_nvptx() -> None:
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _initialized = True


def default_arch() -> str:
    return os.environ.get("GRAPHC_CUDA_ARCH", DEFAULT_ARCH)


def target_machine(arch: str) -> Any:
    if arch not in ARCHS:
        raise ValueError(f"cuda arch: expected one of {', '.join(ARCHS)}, got {arch!r}")
    init_nvptx()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, features="", opt=3)


def validate(g: Graph) -> None:
    """Raise NotImplementedError naming the first op the PTX backend cannot lower (a scan's
    body is checked like the step)."""
    ok = supported_ops()
    for n in g.nodes():
        if n.op == "scan":
            validate(n.attrs["body"])
        if n.op not in ok:
            where = f" (at {n.loc})" if n.loc else ""
            raise NotImplementedError(f"PTX backend: no lowering for op {n.op!r}{where}")


def check_declarations(mod: ir.Module) -> None:
    """Every function the module calls but does not define must be NVPTX-lowerable."""
    for fn in mod.functions:
        if fn.is_declaration and not fn.name.startswith(_ALLOWED_PREFIXES):
            raise NotImplementedError(
                f"PTX backend: the kernels would call {fn.name!r}, which NVPTX cannot lower "
                "(this is a bug in the PTX rules; the CPU backend handles this graph)")


def _ceil_div(x: Any, d: int) -> Any:
    return (x + d - 1) // d if isinstance(x, int) else sympy.floor((x + d - 1) / d)


@dataclass(frozen=True)
class Launch:
    """One kernel launch of the step: what it computes and how many blocks it needs."""

    kernel: str
    node: Node
    args: tuple[Node, ...]  # buffer parameters, output first; then symbols, then err
    kind: str  # flat: a thread per element | blocks: a block per element
    work: Any  # elements (flat) or work items for blocks (sympy over the batch symbols)

    def grid(self, env: dict) -> int:
        w = int(sh.evaluate(self.work, env)) if not isinstance(self.work, int) else self.work
        if w <= 0:
            return 0
        return min(MAX_GRID, _ceil_div(w, BLOCK) if self.kind == "flat" else w)


@dataclass
class ScanLaunch:
    """A scan: the host runs its body's launches once per step (the trip count read at run
    time, so one program serves every length), moving the sequence and result pointers by
    the step and alternating the two copies of each carry, as the CPU loop does
    (``codegen.loop``). ``steps``: the body's launches and nested scans, in order; ``copy``:
    the copy kernel for each dtype the loop moves (``commit_T``, a no-op once a kernel has
    flagged an error, so a failing step writes no result)."""

    node: Node
    plan: Plan
    steps: list[Any]
    layout: dict[str, Any]
    copy: dict[str, str]
    results: list[Node]  # the scan's scan_out nodes (buffers of the enclosing plan)
    aliases: dict[int, int]  # operand -> the buffer it reshapes (``Plan.aliases``)
    read: list[bool]  # per carry: the body reads its first value (``loop.carries_read``)
    inplace: set[int]  # carries overwritten in place (``loop.inplace_carries``)


@dataclass(frozen=True)
class Commit:
    """Copy an update's value over its state buffer (skipped on device if err is set)."""

    kernel: str
    slot: int  # index into graph.updates
    node: Node
    numel: Any


def _launch_work(n: Node, kind: str) -> tuple[str, Any]:
    if kind == "flat":
        return "flat", sh.numel(n.shape)
    if kind == "src":
        return "flat", sh.numel(n.inputs[2].shape)
    if kind == "rows":  # a thread per row (every axis but the last): the attention kernels
        return "flat", sh.numel(n.shape[:-1])
    if kind == "reduce":
        return ("flat" if is_small_reduction(n) else "blocks"), sh.numel(n.shape)
    if kind == "gemm":
        m, nn = n.shape[-2], n.shape[-1]
        return "blocks", sh.dim(_ceil_div(m, TILE_M) * _ceil_div(nn, TILE_N)
                                * sh.numel(n.shape[:-2]))
    return "blocks", sh.numel(n.shape)


class PTXProgram:
    """The kernels of one graph for one architecture, their launches and the PTX text."""

    def __init__(self, g: Graph, arch: str | None = None, name: str = "graphc") -> None:
        g = legalize_bf16(g)
        self.graph = g
        self.arch = arch or default_arch()
        self.tm = target_machine(self.arch)
        validate(g)
        self.plan: Plan = plan(g, wide=False)
        self.mat_ids = {n.id for n in self.plan.materialized}
        self.symbols = g.symbols()
        self.wide = False
        self.module = ir.Module(name=name)
        self.module.triple = TRIPLE
        self.module.data_layout = str(self.tm.target_data)
        self.launches: list[Launch] = []
        self.commits: list[Commit] = []
        self.kernel_names: list[str] = []
        self._build()
        check_declarations(self.module)
        # every launch uses BLOCK threads: telling ptxas (.maxntid) lets it budget registers
        self.llvm_unoptimized = "\n".join(
            line + f' "nvvm.maxntid"="{BLOCK}"' if line.startswith("define ptx_kernel") else line
            for line in str(self.module).splitlines())
        mod = llvm.parse_assembly(self.llvm_unoptimized)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(self.tm, pto)
        pb.getModulePassManager().run(mod, pb)
        self.llvm_module = mod
        self.ptx = emit_assembly(mod, self.tm)

    # graph-level index of a node (kernel names and error reports use the printed numbering)
    @property
    def node_index(self) -> dict[int, int]:
        return self.plan.node_index

    def _build(self) -> None:
        self._copies: dict[str, str] = {}
        self.launches = self._launches(self.plan, "")
        for j, (_, v) in enumerate(self.graph.updates):
            self.commits.append(Commit(self._copy_for(v.dtype), j, v, sh.numel(v.shape)))

    def _copy_for(self, dtype: Any) -> str:
        t = mem_type(dtype)
        if str(t) not in self._copies:
            self._copies[str(t)] = self._copy_kernel(t)
        return self._copies[str(t)]

    def _launches(self, p: Plan, prefix: str) -> list[Any]:
        """The launches of plan ``p`` (the step's, or a scan body's: its kernels are named
        with ``prefix`` and see the body's plan)."""
        import copy as _copy

        from .loop import carries_read, inplace_carries, scan_layout

        out: list[Any] = []
        view = self
        if p is not self.plan:
            view = _copy.copy(self)  # the same module and symbols, the body's plan
            view.plan, view.mat_ids = p, {n.id for n in p.materialized}
        for n in p.materialized:
            if n.op == "scan_out":
                continue  # written by its scan's loop
            if n.op == "scan":
                bp = p.bodies[n.id]
                inner = self._launches(bp, f"{prefix}s{p.node_index[n.id]}_")
                body = n.attrs["body"]
                kinds = {x.dtype.name: x.dtype for x in body.inputs[:n.attrs["carries"]]}
                kinds.update({o.dtype.name: o.dtype for o in body.outputs})
                copies = {name: self._copy_for(d) for name, d in kinds.items()}
                results = [r for r in p.materialized if r.op == "scan_out" and r.inputs[0] is n]
                aliases = {x.id: p.aliases[x.id] for x in n.inputs if x.id in p.aliases}
                out.append(ScanLaunch(n, bp, inner, scan_layout(n, bp), copies, results,
                                      aliases, carries_read(n), inplace_carries(n, bp)))
                continue
            for suffix, emit, kind in kernels_for(n):
                name = f"{prefix}k{p.node_index[n.id]}_{n.op}{suffix}"
                k = PTXKernel(view, n, name)
                emit(k)
                k.finish()
                how, work = _launch_work(n, kind)
                out.append(Launch(name, n, (n, *k.buffers), how, work))
                self.kernel_names.append(name)
        return out

    def _copy_kernel(self, t: ir.Type) -> str:
        """``commit_T(dst, src, n, err)``: dst[i] = src[i] unless err[0] != 0."""
        name = f"commit_{t}".replace(" ", "")
        p1 = t.as_pointer(1)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [p1, p1, I64, I64.as_pointer(1)]),
                         name=name)
        fn.calling_convention = "ptx_kernel"
        fn.args[0].add_attribute("noalias")
        fn.args[1].add_attribute("noalias")
        k = _CopyEmitter(self.module, fn)
        b = k.b
        ok = b.icmp_signed("==", b.load(fn.args[3]), i64(0))
        with b.if_then(ok):
            with k.grid_stride(fn.args[2]) as i:
                v = b.load(b.gep(fn.args[1], [i], inbounds=True))
                b.store(v, b.gep(fn.args[0], [i], inbounds=True))
        b.ret_void()
        self.kernel_names.append(name)
        return name

    def describe(self) -> str:
        """The launch sequence, for ``ir("kernels")`` and debugging."""
        lines = [f"// {len(self.launches)} launches + {len(self.commits)} commits, "
                 f"{BLOCK} threads per block, target {self.arch}"]

        def show(launches: list[Any], p: Plan, indent: str) -> None:
            for la in launches:
                if isinstance(la, ScanLaunch):
                    lines.append(f"{indent}scan %{p.node_index[la.node.id]}: for each of "
                                 f"{L.trip_count(la.node)} steps:")
                    show(la.steps, la.plan, indent + "  ")
                    continue
                unit = "elements" if la.kind == "flat" else "blocks"
                lines.append(f"{indent}{la.kernel}: {la.work} {unit} <- " + ", ".join(
                    f"%{p.node_index.get(a.id, 'in:' + str(a.name))}" for a in la.args[1:]))

        show(self.launches, self.plan, "")
        for c in self.commits:
            lines.append(f"{c.kernel}: update {self.graph.updates[c.slot][0]} <- "
                         f"%{self.node_index.get(c.node.id, c.node.name)} ({c.numel} elements)")
        return "\n".join(lines) + "\n"


class _CopyEmitter:
    """The thread-geometry part of ``PTXKernel`` for the node-less commit kernels."""

    def __init__(self, mod: ir.Module, fn: ir.Function) -> None:
        self.L = type("L", (), {"module": mod})
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))

    def sreg(self, name: str) -> ir.Value:
        from .llvm_util import I32, declare

        fn = declare(self.L.module, f"llvm.nvvm.read.ptx.sreg.{name}", I32, [])
        return self.b.zext(self.b.call(fn, []), I64)

    def grid_stride(self, total: ir.Value) -> Any:
        b = self.b
        start = b.add(b.mul(self.sreg("ctaid.x"), self.sreg("ntid.x")), self.sreg("tid.x"))
        return strided_for(b, start, total, b.mul(self.sreg("nctaid.x"), self.sreg("ntid.x")),
                           "gs")


__all__ = ["PTXProgram", "Launch", "ScanLaunch", "Commit", "validate", "DEFAULT_ARCH"]
