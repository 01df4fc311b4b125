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

import hashlib
import os
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy
from llvmlite import ir

from graphc.ir import Graph, Node
from graphc.ir import shapes as sh

from . import options
from .abi import ERR_NONFINITE, ERR_OK, ERR_SCRATCH, PROFILE_SYMBOL, RUN2_SYMBOL, TABLE_FIXED, align
from .channel_groups import emit_channel_group, full_shape, row_split_dim
from .conv_epilogue import EPILOGUE_FN, Epilogue, finish_epilogue
from .elementwise import ELEMENT_RULES
from .emitter import ELEM_PAR_MIN, KernelEmitter, emit_elementwise, emit_group, operands
from .families import KERNELS, kernel_for
from .generic import MAX_SYMBOLS, generic_form
from .irtext import function_text, global_text, rename
from .legalize import legalize_bf16
from .llvm_util import I8P, I32, I64, VOID, SymEmitter, declare, i64, mem_type
from .loop import emit_scan
from .matmul import bf16_native as matmul_bf16_native
from .parallel import TASK
from .planning import Plan, nbytes, plan, stage_bytes
from .views import VIEW_OPS

# emit every kernel even when an equal one was emitted before, and check that the kernel key
# (``Lowering._kernel_key``) was right to call them equal (the test suite turns this on)
VERIFY_KERNEL_KEYS = os.environ.get("GRAPHC_VERIFY_KERNEL_KEYS", "") not in ("", "0")
# kernel code (characters of assembly) per streamed module (``Lowering.on_kernels``): about
# a twentieth of a 2-layer GPT step's kernels, so the compile workers start early and share
# the work evenly
CHUNK_CHARS = 25_000
# families whose kernels are never shared by key (none: a kernel's helpers are part of the
# text it is compared by, ``Lowering._dedup``)
_UNSHARED_FAMILIES: frozenset[str] = frozenset()


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


_RETURNS = re.compile(r"^\s*ret i32 (\S+)", re.M)
_GLOBAL_REF = re.compile(r'@"([^"]+)"')


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _canon(v: Any) -> str | None:
    """An exact text for an attribute value, or None for a value with no such text (the
    kernel is then never shared by key). ``repr`` is not enough: numpy abbreviates large
    arrays, and two constants must not look alike."""
    t = type(v)
    if t in _PLAIN:  # the common cases first: asked for every node of every kernel's cone
        return f"{t.__name__}:{v!r}"
    if (t is tuple or t is list) and all(type(x) in _PLAIN for x in v):
        return f"{t.__name__}{v!r}"  # the repr of plain scalars tells their types apart
    if v is None or isinstance(v, (bool, int, float, str)):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, (tuple, list)):
        items = [_canon(x) for x in v]
        return None if None in items else f"{type(v).__name__}({','.join(items)})"  # type: ignore[arg-type]
    if isinstance(v, dict):
        items = [(_canon(k), _canon(x)) for k, x in v.items()]
        if any(a is None or b is None for a, b in items):
            return None
        return "dict(" + ",".join(sorted(f"{a}={b}" for a, b in items)) + ")"  # type: ignore[str-format]
    if isinstance(v, np.ndarray):
        digest = hashlib.blake2b(np.ascontiguousarray(v).tobytes(), digest_size=16).hexdigest()
        return f"ndarray({v.dtype.str},{v.shape},{digest})"
    if isinstance(v, np.generic):
        return f"np:{v.dtype.str}:{v.item()!r}"
    if isinstance(v, sympy.Basic):
        return "sympy:" + sympy.srepr(v)
    if type(v).__name__ == "DType" and hasattr(v, "name"):
        return f"dtype:{v.name}"
    return None


def _declaration(fn: ir.Function) -> str:
    """``declare`` text of a function defined in another module."""
    args = ", ".join(str(a.type) for a in fn.args)
    return f'declare {fn.ftype.return_type} @"{fn.name}"({args})'


def _helpers_used(text: str, helpers: dict[str, str],
                  elsewhere: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The helpers (internal functions and constants) ``text`` names, directly or through
    other helpers; ``helpers`` maps a name to its text. A helper in ``elsewhere`` (defined
    by another module) is listed, but not what it names in turn."""
    seen: list[str] = []
    todo = [text]
    while todo:
        t = todo.pop()
        for name in _GLOBAL_REF.findall(t):
            if name in helpers and name not in seen:
                seen.append(name)
                if name not in elsewhere:
                    todo.append(helpers[name])
    return seen


class _Texts(dict):
    """name -> printed text of the module's helper globals, printed on first use only."""

    def __init__(self, objs: dict[str, Any], memo: dict[str, str]) -> None:
        super().__init__()
        self.objs, self.memo = objs, memo

    def __contains__(self, name: object) -> bool:
        return name in self.objs

    def __getitem__(self, name: str) -> str:
        t = self.memo.get(name)
        if t is None:
            t = self.memo[name] = global_text(self.objs[name])
        return t


# ---------------------------------------------------------------------------------------
# the entry function
# ---------------------------------------------------------------------------------------
class Lowering:
    """Builds the LLVM module for one graph (see the module docstring)."""

    # prefix of the kernels' working names (a scan body's kernels: ``codegen.loop``), which
    # must not repeat within the module before ``_dedup`` renames them
    name_prefix = ""
    # a scan body's products whose B operand its loop packs once (``codegen.loop``): their
    # kernels take the packed panels in the operand's place (``codegen.matmul``)
    prepacked: frozenset[int] = frozenset()

    def __init__(self, g: Graph, name: str = "graphc_step", triple: str = "",
                 data_layout: str = "", wide: bool = True, debug: bool = False,
                 loop_groups: bool | None = None, profile: bool = False,
                 gemm_library: bool = False,
                 on_kernels: Callable[[str, str], None] | None = None,
                 on_gemm: Callable[[tuple], None] | None = None,
                 direct_outputs: bool = False) -> None:
        """``on_kernels``: called with a module of kernels (``_kernel_module``) and its LLVM
        optimisation level each time about ``CHUNK_CHARS`` of new kernel code has been
        emitted, and with the rest at the end, so those modules can compile while the step
        is still being lowered; they are kept in ``chunks``. ``on_gemm``: called with each
        GEMM tile request (``gemm_library`` steps) when the first kernel needing it is
        emitted. ``direct_outputs``: kernels write results straight into the output buffers
        of the pointer table (``planning._plan_direct_outputs``; the JIT's buffers, which
        are 64-byte aligned like the arena's and no one else's until the step returns)."""
        self.on_kernels = on_kernels
        self.on_gemm = on_gemm
        self.chunks: list[str] = []
        self._pending: list[str] = []  # kernels kept since the last chunk
        self._pending_chars = 0
        g = legalize_bf16(g, native=lambda n: matmul_bf16_native(n, debug))
        self.graph = g
        self.profile = profile  # count time-stamp ticks per kernel (``PROFILE_SYMBOL``)
        self.unit_names: list[str] = []
        self.wide = wide
        self.debug = debug  # bounds-check every load and store (graphc.debug)
        t0 = time.perf_counter()
        self.plan = plan(g, wide, debug,
                         loop_groups=options.LOOP_GROUPS if loop_groups is None
                         else loop_groups, direct_outputs=direct_outputs)
        # seconds per part (the runtime's compile log reports them)
        self.timings: dict[str, float] = {"plan": time.perf_counter() - t0}
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
        # kernel text (its name replaced) -> the function emitted for it: structurally equal
        # kernels (the N blocks of a transformer, the updates of equal-shaped parameters)
        # are compiled once and called with other pointers
        self._kernel_by_text: dict[str, ir.Function] = {}
        self._text: dict[str, str] = {}  # function name -> its printed text, printed once
        self._kernel_by_key: dict[str, ir.Function] = {}  # ``_kernel_key`` -> function
        self._never_fails: set[str] = set()  # kernels whose every ``ret`` returns 0
        self._helper_text: dict[str, str] = {}  # helper global name -> printed text
        # content-named helpers of tile-level kernels (``_share_helpers``) that a streamed
        # module has defined already: later modules of the step declare them
        self._shared_defined: set[str] = set()
        self._shared_names: set[str] = set()  # every content-named helper function
        self.kernel_level: dict[str, str] = {}  # kernel name -> its module's LLVM level
        # kernel name -> the kernels it calls (an epilogue's wrapper), declared in its module
        self._callees: dict[str, list[str]] = {}
        # convolution kernels with an epilogue: name -> whether it runs the staged form;
        # (consumer id, staged) -> the consumer's function (``_epilogue_fn``)
        self._epi_staged: dict[str, bool] = {}
        self._epi_made: dict[tuple[int, bool], ir.Function] = {}
        self.kernels_emitted = 0
        # a call of a shape-generic kernel (``codegen.generic``): its first member's id ->
        # the line ``ir("fused")`` shows for it
        self.generic_notes: dict[int, str] = {}
        self._released_counts: tuple[int, int] | None = None  # ``release_ir``
        if gemm_library:
            self.module.gemm_requests = self.gemm_requests  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        self._build()
        self.timings["emit LLVM IR"] = time.perf_counter() - t0

    def _split_work(self, n: Node, kern: Any, members: int = 1) -> tuple | None:
        """The work shape when the kernel computing ``n`` (or the loop group it starts) is
        split over the two threads by its outermost loop (``KernelEmitter(split=...)``), else
        None: elementwise kernels and loop groups, max-pool indices (by images), scatters
        along an inner axis (by their outer rows: max-pool's backward), and
        reductions that keep a dim while reducing the last (their loop over the kept dims is
        the outermost loop, each result computed whole by one thread: BatchNorm's
        per-channel sums). Not in debug
        builds (their bounds checks stop the step), not for work known to be smaller than
        ``ELEM_PAR_MIN`` elements, counting each element ``members`` times for a loop group
        (each member streams its own arrays). An AdamW update over a 256x64 weight (a group
        of four members, 16K elements) ran on one thread by the element count alone, and
        took 2x longer in a two-thread GPT step than in a one-thread one: its operands were
        last written by both cores (the weight gradient's GEMM, the forward's reads of the
        weight). Split, it takes the one-thread time (68-72K -> 25-35K ticks a call; the
        GPT step 2.48-2.95 -> 2.43-2.67 ms in alternating runs, Zen 4)."""
        if getattr(self, "debug", False) or all(s == 1 for s in n.shape):
            return None
        work = tuple(n.shape)
        if kern is not None and kern.name == "pool":
            # max-pool indices: both kernels' outermost loop runs over the images
            if isinstance(n.shape[0], int) and n.shape[0] == 1:
                return None
            work = tuple(n.inputs[0].shape)
        elif kern is not None and kern.name == "scatter_add":
            # scatter along an axis other than the outermost loop's: each thread's rows
            # receive only their own sources (the copy of the base and the adds split alike)
            src = n.inputs[2]
            d0 = next(i for i, s in enumerate(n.shape) if s != 1)
            if (n.attrs["axis"] == d0 or len(src.shape) != len(n.shape)
                    or not sh.same(src.shape[d0], n.shape[d0])
                    or any(src.shape[i] != 1 for i in range(d0))):
                return None
        elif kern is not None:
            if n.op not in ("sum", "max") or kern.name != "reduce":
                return None
            x = n.inputs[0]
            axes = set(n.attrs["axes"])
            if len(x.shape) != len(n.shape) or (len(x.shape) - 1) not in axes:
                return None
            work = tuple(x.shape)
        size = sh.numel(work)
        return None if isinstance(size, int) and size * members < ELEM_PAR_MIN else work

    def _unit_split(self, unit: list[Node], passes: Any) -> tuple | None:
        """The work a channel or row group (``passes``) or a loop group splits between the
        threads by its outermost loop, or None when it is known to be too small to split
        (``ELEM_PAR_MIN`` elements; a loop group's members each count, ``_split_work``)."""
        if passes is None:
            return self._split_work(unit[0], None, len(unit))
        full = full_shape(unit)
        size = sh.numel(full)
        return None if isinstance(size, int) and size < ELEM_PAR_MIN else full

    def run2_global(self) -> ir.GlobalVariable:
        """``graphc_parallel_run2``: the thread pool's dispatch function, set by the JIT
        runtime after loading (null — single-threaded — in ahead-of-time builds)."""
        g = self.module.globals.get(RUN2_SYMBOL)
        if g is None:
            fty = ir.FunctionType(VOID, [TASK.as_pointer(), I8P]).as_pointer()
            g = ir.GlobalVariable(self.module, fty, RUN2_SYMBOL)
            g.initializer = ir.Constant(fty, None)
        return g

    def _kernel_key(self, unit: list[Node], label: str) -> str | None:
        """What decides a kernel's code, without emitting it: its members and the cone of
        inline expressions they compute from (op, dtype, shape, attributes, which inputs,
        shared nodes numbered), down to the buffers they read (dtype and shape: a pointer
        argument each) and the symbols' order. Equal keys mean equal code, so the kernel is
        emitted once and its function called again: the 12 blocks of a transformer cost
        one block's emission. A kernel whose code names its node (an index check reports
        the node that failed) is never shared by key (``_build``). None: no sharing (debug
        builds, whose bounds checks name each node; families with per-kernel helper
        functions; an attribute with no exact text). ``VERIFY_KERNEL_KEYS`` checks the
        claim."""
        if self.debug:
            return None
        if len(unit) == 1:
            kern = kernel_for(unit[0])
            if kern is not None and kern.name in _UNSHARED_FAMILIES:
                return None
        p, mat = self.plan, self.mat_ids
        members = {m.id: i for i, m in enumerate(unit)}
        local: dict[int, int] = {}
        parts = [label, ",".join(s.name for s in self.symbols)]
        todo = list(reversed(unit))
        while todo:
            n = todo.pop()
            if n.id in local:
                continue
            local[n.id] = len(local)
            shape = _canon(tuple(n.shape))
            if n.id not in members and (n.op == "input" or n.id in mat):
                parts.append(f"buf {n.dtype.name} {shape}")
                continue
            attrs = _canon(n.attrs)
            if attrs is None or shape is None:
                return None
            ins = []
            for x in n.inputs:
                if x.id not in local:
                    todo.append(x)
                ins.append(str(x.id))  # renumbered below, once every node has its number
            member = members.get(n.id)
            stored = "" if member is None else f" m{member}{'v' if n.id in p.virtual else ''}"
            parts.append(f"{n.op} {n.dtype.name} {shape} {attrs} [{' '.join(ins)}]{stored}")
        # node ids -> local numbers (the ids differ between equal kernels)
        ren = {str(i): str(j) for i, j in local.items()}
        text = "\n".join(re.sub(r"\[([0-9 ]*)\]",
                                lambda mo: "[" + " ".join(ren[t] for t in mo.group(1).split())
                                + "]", line) for line in parts)
        return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()

    def _dedup(self, fn: ir.Function, label: str, level: str = "O3") -> ir.Function:
        """``fn``, or the earlier kernel whose text equals it up to the name (then ``fn`` is
        removed from the module, with its helpers).

        Kernels take every buffer as an argument and read sizes from the symbol table, so
        equal text means equal code. A kernel's own helpers (globals named ``<kernel>.*``: a
        convolution's task, body and offset table) are part of its text, every mention of
        the kernel's name replaced by a placeholder. A kept kernel and its helpers are
        renamed after that text (``k_<label>_<digest>``), so the same kernel gets the same
        name, and the same object code, in every step (``on_kernels``). ``level``: the
        optimisation level of the module it will be compiled in (``KernelEmitter.level``)."""
        self.kernels_emitted += 1
        m = self.module
        prefix = fn.name + "."
        helpers = [v for name, v in m.globals.items() if name.startswith(prefix)]
        own = re.compile('"' + re.escape(fn.name) + '(?=[".])')
        kcanon = own.sub('"<kernel>', function_text(fn))
        hcanon = [own.sub('"<kernel>', global_text(h)) for h in helpers]
        canon = "\n".join([kcanon, *hcanon])
        prev = self._kernel_by_text.get(canon)
        for v in [fn, *helpers]:
            del m.globals[v.name]
        if prev is not None:
            return prev
        digest = hashlib.blake2b(canon.encode(), digest_size=8).hexdigest()
        new = f"k_{label}_{digest}"
        for v, text in [*zip(helpers, hcanon), (fn, kcanon)]:
            rename(v, new + v.name[len(fn.name):] if v is not fn else new)  # printed before
            m.globals[v.name] = v
            # the text under the new name (llvmlite keeps each instruction's printed text,
            # so printing the renamed function again would show the old names)
            self._helper_text[v.name] = text.replace('"<kernel>', f'"{new}')
        self._kernel_by_text[canon] = fn
        self._text[fn.name] = self._helper_text.pop(fn.name)
        if level == "tile" and helpers:
            self._share_helpers(fn, helpers)
        self._pending.append(fn.name)
        self._pending_chars += len(canon)
        self.kernel_level[fn.name] = level
        if all(r == "0" for r in _RETURNS.findall(kcanon)):
            # returns only ERR_OK: the entry function need not test what it returns
            self._never_fails.add(fn.name)
        return fn

    def _share_helpers(self, fn: ir.Function, helpers: list[Any]) -> None:
        """Name a tile-level kernel's helpers (task bodies, grid builders, offset tables)
        after their text, so equal helpers of different kernels are one global.

        Why: kernels of different shapes often share a body. ResNet-18's 3x3 forward and
        input-gradient convolutions of one width run the same batched Winograd GEMM body
        (1300-1500 lines of IR), and the implicit GEMMs of several shapes the same tile
        loop; a kernel's module held a copy of each, compiled once per kernel. Named
        ``b_<digest><suffix>`` (the digest of the helper's text with the helpers it names
        replaced by their own names, so equal names mean equal code, callees included), the
        first streamed module that uses one defines it with external linkage and later
        modules of the step declare it (``_kernel_module``); the step's objects are linked
        together (``CPUExecutable``), so the calls resolve to that definition.

        Only for the ``tile`` level: its pipeline has no inliner and no interprocedural
        pass, so a helper compiles to the same code whether its module holds its callers
        or not. O3 kernels keep their helpers internal, where LLVM may inline them or
        specialise them to the constants they are called with."""
        if any(h.linkage != "internal" for h in helpers):
            return  # (every helper the emitters make is internal)
        texts = {h.name: self._helper_text[h.name] for h in helpers}
        own = fn.name
        named: dict[str, str] = {}

        def deps(name: str) -> list[str]:
            return [r for r in dict.fromkeys(_GLOBAL_REF.findall(texts[name]))
                    if r in texts and r != name]

        def content_name(name: str, path: tuple[str, ...]) -> str | None:
            if name in named:
                return named[name]
            if name in path:
                return None  # helpers calling each other round: left as they are
            canon = texts[name]
            for d in deps(name):
                dn = content_name(d, (*path, name))
                if dn is None:
                    return None
                canon = canon.replace(f'@"{d}"', f'@"{dn}"')
            canon = canon.replace(f'@"{name}"', '@"<self>"')
            digest = hashlib.blake2b(canon.encode(), digest_size=8).hexdigest()
            named[name] = f"b_{digest}{name[len(own):]}"
            return named[name]

        for name in texts:
            if content_name(name, ()) is None:
                return

        def renamed(text: str) -> str:
            return _GLOBAL_REF.sub(lambda mo: f'@"{named.get(mo.group(1), mo.group(1))}"',
                                   text)

        m = self.module
        for h in helpers:
            old = h.name
            text = renamed(self._helper_text.pop(old))
            rename(h, named[old])
            del m.globals[old]
            # an equal helper of an earlier kernel: that global stands for both
            m.globals.setdefault(h.name, h)
            self._helper_text[h.name] = text
            if isinstance(h, ir.Function):
                self._shared_names.add(h.name)
        self._text[own] = renamed(self._text[own])

    @property
    def generic_calls(self) -> int:
        """Calls of shape-generic kernels (``codegen.generic``)."""
        return len(self.generic_notes)

    @property
    def kernels_distinct(self) -> int:
        """Kernels emitted with code of their own (equal ones merged, ``_dedup``)."""
        rc = self._released_counts
        return len(self._kernel_by_text) if rc is None else rc[0]

    @property
    def kernels_by_key(self) -> int:
        """Kernels reusable by key (``_kernel_key``): emitted once, called again."""
        rc = self._released_counts
        return len(self._kernel_by_key) if rc is None else rc[1]

    def release_ir(self) -> None:
        """Drop the LLVM IR objects once the step's modules are compiled, keeping the plan,
        the kernel names and the counts (``plan``, ``unit_names``, ``kernels_distinct``).

        Why: llvmlite's IR is millions of small objects in reference cycles (an
        instruction's block, a loop's phi), and every full collection of the garbage
        collector walks them for as long as the step lives. Measured on ResNet-18
        (Zen 5): 660k of the process's 760k tracked objects, a full collection 0.55 s with
        them and 0.04 s without, in every later collection of the user's program. The
        blocks' instruction lists are cleared first, so reference counting frees most of
        it now instead of one long collection later. A stage that prints the IR lowers the
        graph again (``CPUExecutable.ir_lowering``)."""
        if self.module is None:
            return
        self._released_counts = (self.kernels_distinct, self.kernels_by_key)
        for v in list(self.module.globals.values()):
            if isinstance(v, ir.Function):
                for blk in v.blocks:
                    blk.instructions.clear()
                v.blocks.clear()
        self.module.globals.clear()
        self.module = None  # type: ignore[assignment]
        self._kernel_by_text, self._kernel_by_key = {}, {}
        self._text, self._helper_text = {}, {}
        self.chunks, self._pending = [], []

    def module_text(self) -> str:
        """The module as LLVM assembly (``str(self.module)``, kernels printed only once)."""
        m = self.module
        lines = self._header()
        lines += [self._text.get(v.name) or self._helper_text.get(v.name) or global_text(v)
                  for v in m.globals.values()]
        lines += m._get_metadata_lines()
        return "\n".join(lines)

    def _header(self) -> list[str]:
        m = self.module
        return [f'; ModuleID = "{m.name}"', f'target triple = "{m.triple}"',
                f'target datalayout = "{m.data_layout}"', ''] + [
                    t.get_declaration() for t in m.get_identified_types().values()]

    def _parts(self) -> dict[str, Any]:
        """The module's globals sorted for ``_flush_kernels`` and ``entry_text``."""
        m = self.module
        parts: dict[str, Any] = {"decls": [], "defs": [], "externs": [], "helpers": {},
                                 "entry": ""}
        for v in m.globals.values():
            if isinstance(v, ir.Function):
                if v.is_declaration:
                    parts["decls"].append(function_text(v))
                elif v.name == self.name:
                    parts["entry"] = v
                elif v.name not in self._text:
                    parts["helpers"][v.name] = v
            elif v.linkage in ("internal", "private"):
                parts["helpers"][v.name] = v  # internal constants: a copy wherever used
            else:  # defined in the entry module, declared in the others
                parts["defs"].append(str(v))
                parts["externs"].append(f'@"{v.name}" = external global {v.value_type}')
        # printed once each (a finished kernel's helpers never change)
        parts["helpers"] = _Texts(parts["helpers"], self._helper_text)
        parts["head"] = self._header()
        parts["meta"] = m._get_metadata_lines()  # branch weights, shared by reference
        return parts

    def _kernel_module(self, parts: dict[str, Any], names: list[str]) -> str:
        """Assembly of a module defining the kernels ``names`` (external symbols, linked by
        the JIT), with what they use: declarations, global variables as externals, copies
        of the internal helper functions they call."""
        texts = [self._text[k].replace("define internal ", "define ", 1) for k in names]
        helpers = parts["helpers"]
        used = _helpers_used("\n".join(texts), helpers, self._shared_defined)
        callees = dict.fromkeys(c for k in names for c in self._callees.get(k, ())
                                if c not in names)
        kdecls = [_declaration(self.module.globals[c]) for c in callees]
        # content-named helper functions (``_share_helpers``): defined, with external
        # linkage, by the first module that uses them, declared by the later ones
        defs = []
        for h in used:
            if h in self._shared_names:
                if h in self._shared_defined:
                    kdecls.append(_declaration(self.module.globals[h]))
                    continue
                self._shared_defined.add(h)
                defs.append(helpers[h].replace("define internal ", "define ", 1))
            else:
                defs.append(helpers[h])
        return "\n".join(parts["head"] + parts["externs"] + parts["decls"] + kdecls
                         + defs + texts + parts["meta"])

    def entry_text(self, parts: dict[str, Any] | None = None) -> str:
        """Assembly of the entry function's module: the kernels are declarations there."""
        parts = parts or self._parts()
        m = self.module
        entry = function_text(parts["entry"])
        kdecls = [_declaration(m.globals[k]) for k in self._text]
        helpers = parts["helpers"]
        return "\n".join(parts["head"] + parts["defs"] + parts["decls"]
                         + kdecls + [helpers[h] for h in _helpers_used(entry, helpers)]
                         + [entry] + parts["meta"])

    def _flush_kernels(self) -> None:
        """Hand the kernels kept since the last call to ``on_kernels``: one module per
        optimisation level among them (``kernel_level``), O3's first."""
        if self._pending:
            parts = self._parts()
            by_level: dict[str, list[str]] = {}
            for name in self._pending:
                by_level.setdefault(self.kernel_level[name], []).append(name)
            self._pending, self._pending_chars = [], 0
            for level in sorted(by_level, key=lambda lv: lv != "O3"):
                text = self._kernel_module(parts, by_level[level])
                self.chunks.append(text)
                self.on_kernels(text, level)  # type: ignore[misc]

    def table_size(self) -> int:
        return TABLE_FIXED + self.n_inputs + self.n_outputs + self.n_updates

    def kernel_for_unit(self, unit: list[Node]) -> tuple[ir.Function, list[Node], list[Node]]:
        """The kernel computing ``unit`` (a loop group or one node of ``self.plan``), emitted
        or reused by key, with the nodes it writes and the buffers it reads (its pointer
        arguments, in order). ``codegen.loop`` calls it for a scan body's units, which are
        never shape-generic (``codegen.generic``)."""
        kfn, stored, buffers, values = self.kernel_call(unit)
        assert values is None, "a scan body's kernel is never shape-generic"
        return kfn, stored, buffers

    def kernel_call(self, unit: list[Node]
                    ) -> tuple[ir.Function, list[Node], list[Node], list[Any] | None]:
        """``kernel_for_unit``'s kernel, nodes and buffers, and for a shape-generic kernel
        (``codegen.generic``) the values its call puts in the symbol table after the step's
        symbols (ints, or size expressions of the step's symbols); else None."""
        p = self.plan
        n = unit[0]
        gi = p.group_of.get(n.id)
        passes = p.passes.get(gi) if gi is not None else None
        epilogue = gi is not None and gi in p.epilogues
        rows = gi is not None and gi in p.row_groups
        label = (n.op if len(unit) == 1 else f"{n.op}_epilogue" if epilogue
                 else "group" if passes is None else "rows" if rows else "channels")
        if n.id in self.prepacked:  # its B comes packed (``codegen.loop``)
            label = f"{n.op}_prepacked"
        gen = generic_form(self, unit, label)
        if gen is None:
            return (*self._unit_kernel(unit, label, gi, passes, epilogue, rows), None)
        self.generic_notes[n.id] = "shape-generic kernel, sizes from the call: " + ", ".join(
            f"{s.name} = {sh.fmt_dim(v)}" for s, v in zip(gen.symbols, gen.values))
        # whether its work is too small to split between the threads is decided from its
        # own sizes, as for a kernel of fixed sizes (a generic kernel that may split checks
        # the size when it runs); the two are different kernels
        single = self._unit_split(unit, passes) is None
        step_symbols = self.symbols
        self.symbols = [*step_symbols, *gen.symbols]  # the kernel's own symbols after them
        try:
            return (*self._unit_kernel(gen.unit, label, gi, passes, epilogue, rows, single),
                    gen.values)
        finally:
            self.symbols = step_symbols

    def _unit_kernel(self, unit: list[Node], label: str, gi: int | None, passes: Any,
                     epilogue: bool, rows: bool, single: bool = False
                     ) -> tuple[ir.Function, list[Node], list[Node]]:
        """The kernel of ``unit`` (for a shape-generic unit, its copies with symbolic sizes:
        ``codegen.generic``), the nodes it writes and the buffers it reads. ``single``: it
        runs on one thread whatever its sizes."""
        p = self.plan
        n = unit[0]
        # a convolution with an epilogue: its code does not depend on the consumer (called
        # through a pointer), so equal convolutions share it whatever follows them
        key = self._kernel_key(unit[:1] if epilogue else unit,
                               f"{label} single" if single else label)
        kfn = self._kernel_by_key.get(key) if key is not None else None
        if kfn is None or VERIFY_KERNEL_KEYS:
            kern = kernel_for(n) if len(unit) == 1 or epilogue else None
            if epilogue:
                k = KernelEmitter(self, n, f"{self.name_prefix}k{p.node_index[n.id]}_{n.op}",
                                  extra_args=2, outputs=[n])
                k.epilogue = self._epilogue_of(k)
                kern.emit(k)  # type: ignore[union-attr]
                finish_epilogue(k)
            elif passes is not None:  # split over the channels, or over the rows along
                full = full_shape(unit)  # ``row_split_dim`` (``codegen.channel_groups``)
                k = KernelEmitter(self, n, f"{self.name_prefix}g{p.node_index[n.id]}_{label}",
                                  group=unit,
                                  split=None if single else self._unit_split(unit, passes))
                k.split_extent = full[row_split_dim(full)] if rows else full[1]
                emit_channel_group(k, passes, rows)
            elif len(unit) > 1:
                k = KernelEmitter(self, n, f"{self.name_prefix}g{p.node_index[n.id]}_group",
                                  group=unit,
                                  split=None if single else self._unit_split(unit, None),
                                  split_weight=len(unit))
                emit_group(k)
            else:
                k = KernelEmitter(self, n, f"{self.name_prefix}k{p.node_index[n.id]}_{n.op}",
                                  split=self._split_work(n, kern))
                kern.emit(k) if kern is not None else emit_elementwise(k)
            k.finish()
            emitted = self._dedup(k.fn, label, k.level)
            if epilogue:
                self._epi_staged[emitted.name] = k.epilogue.staged
            if kfn is not None and emitted is not kfn:
                raise AssertionError(f"kernel key of %{p.node_index[n.id]} ({label}) "
                                     "matched a kernel with other code")
            kfn, stored, buffers = emitted, k.stored, k.buffers
            if key is not None and not k.names_node:
                self._kernel_by_key[key] = kfn
        else:
            stored, buffers = operands(self, unit, len(unit) > 1)
        if epilogue:  # the result goes to the consumer's buffer; the conv's operands only
            stored, buffers = unit[1:], operands(self, unit[:1], False)[1]
        return kfn, stored, buffers

    def _epilogue_of(self, k: KernelEmitter) -> Epilogue:
        """What convolution kernel ``k`` (``extra_args=2``) needs to run an epilogue: the
        consumer's function and its context are its last two arguments, and each thread's
        staging buffer for one image of the result lies after its workspace."""
        c = k.node
        ws = align(kernel_for(c).workspace(c, self.wide))  # type: ignore[union-attr]
        b = k.b
        stages = (b.gep(k.work, [k.sym(ws)]),
                  b.gep(k.work, [k.sym(sh.plus(ws, align(stage_bytes(c))))]))
        return Epilogue(k.extra[0], k.extra[1], stages)

    def _epilogue_fn(self, unit: list[Node], staged: bool) -> ir.Function:
        """The consumer of ``unit`` = ``[conv, consumer]`` as ``i32 (ctx, stage, lo, hi)``,
        the function a convolution kernel calls through its pointer (``codegen.conv``):
        ``ctx`` holds the consumer's arguments (``_epilogue_args``).

        The consumer's loop is a kernel of its own, compiled like every elementwise loop
        (written in vectors at the ``tile`` level where ``codegen.vector_runs`` takes it,
        else at O3, where LLVM vectorises it; its context function goes in the same
        module), so the convolution calls it instead of inlining it, and through a pointer so that
        its code does not depend on the consumer (equal convolutions share one kernel
        whatever follows them: ResNet-18's input gradients with and without the residual
        gradient added). Two forms, as the convolution kernel asks: *staged*, for the
        kernels that run image by image (the implicit GEMMs, Winograd, the strided input
        gradient), runs over images ``[lo, hi)`` reading one image of the convolution's
        result from ``stage``, a per-thread staging buffer still in the cache; *in place*,
        for the others (the batched Winograd and im2col kernels, the direct loops), reads
        the whole result from the consumer's own buffer, where the convolution wrote it,
        split over the threads as the kernel of its own was. In place per image was slower
        than two kernels on rows shorter than a vector: the masked load of a row waited for
        the masked store of the row before (their vectors overlap), 8->16 channels at 14x14
        +36 % on Zen 4."""
        c, e = unit
        key = (e.id, staged)
        if key in self._epi_made:
            return self._epi_made[key]
        p = self.plan
        how = {"staged": c} if staged else {"inplace": c}
        form = next(iter(how))
        name = f"{self.name_prefix}e{p.node_index[e.id]}_{form}"
        ek = KernelEmitter(self, e, name, split=tuple(e.shape), **how)
        emit_elementwise(ek)
        if staged:  # the range's body itself: the convolution's threads call it
            ek.b.ret(ir.Constant(I32, ERR_OK))
        else:  # a whole kernel, split over the threads like any elementwise one
            ek.finish()
        inner = self._dedup(ek.fn, "epilogue", ek.level)
        w = ir.Function(self.module, EPILOGUE_FN, name=f"{name}_ctx")
        w.linkage = "internal"
        w.attributes.add("noinline")
        b = ir.IRBuilder(w.append_basic_block("entry"))
        ctx, stage, lo, hi = w.args
        cells = b.bitcast(ctx, I8P.as_pointer())
        vals = [b.load(b.gep(cells, [i64(i)], inbounds=True))
                for i in range(len(ek.stored) + len(ek.buffers) + 3)]
        slot = 1 + next(i for i, x in enumerate(ek.buffers) if x is c)
        if staged:
            vals[slot] = stage
        vals[-2:] = [b.bitcast(v, I64.as_pointer()) for v in vals[-2:]]
        if staged:
            d0 = next((i for i, s in enumerate(e.shape) if s != 1), 0)
            if d0 != 0:  # a static batch of one: the loop's range is that dim, all of it
                lo, hi = i64(0), i64(int(e.shape[d0]))
            vals += [lo, hi]
        b.ret(b.call(inner, vals))
        fn = self._dedup(w, "epilogue_ctx", ek.level)  # in its consumer's module
        self._callees[fn.name] = [inner.name]
        self._epi_made[key] = fn
        return fn

    def _epilogue_args(self, b: ir.IRBuilder, unit: list[Node], kfn: ir.Function,
                       bufs: dict[int, ir.Value], work: ir.Value, syms: ir.Value,
                       err: ir.Value) -> list[ir.Value]:
        """In the entry function, the last two arguments of convolution kernel ``kfn``
        with epilogue ``unit``: the consumer's function (the form the kernel asked for)
        and its context, the consumer's kernel arguments in a stack array."""
        c, e = unit
        fn = self._epilogue_fn(unit, self._epi_staged[kfn.name])
        _, ebufs = operands(self, [e], False)
        out = bufs[e.id]
        vals = [out] + [out if x is c else bufs[x.id] for x in ebufs]
        vals += [work, b.bitcast(syms, I8P), b.bitcast(err, I8P)]
        arr = b.alloca(ir.ArrayType(I8P, len(vals)))
        for i, v in enumerate(vals):
            b.store(v, b.gep(arr, [i64(0), i64(i)], inbounds=True))
        return [b.bitcast(fn, I8P), b.bitcast(arr, I8P)]

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
        anchor = b.block.instructions[-1]
        call_syms: list[ir.Value] = []  # the symbol table of shape-generic kernels' calls

        def generic_syms(values: list[Any]) -> ir.Value:
            """The step's symbol table followed by one call's values for a shape-generic
            kernel's own symbols (``codegen.generic``): one stack table, made in the entry
            block (after the symbols' loads) the first time, filled before each such call."""
            if not call_syms:
                cur = b.block
                b.position_after(anchor)
                nsym = len(self.symbols)
                arr = b.alloca(ir.ArrayType(I64, nsym + MAX_SYMBOLS), name="call_syms")
                call_syms.append(b.gep(arr, [i64(0), i64(0)], inbounds=True))
                for i, s in enumerate(self.symbols):
                    b.store(symvals[s], b.gep(call_syms[0], [i64(i)], inbounds=True))
                b.position_at_end(cur)
            for j, v in enumerate(values):
                b.store(sym(v), b.gep(call_syms[0], [i64(len(self.symbols) + j)],
                                      inbounds=True))
            return call_syms[0]

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
            elif n.id in p.out_direct:
                bufs[n.id] = slot(TABLE_FIXED + self.n_inputs + p.out_direct[n.id])
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
        gemm_seen: set = set()
        # kernels
        for u, unit in enumerate(units):
            n = unit[0]
            t0 = b.call(clock, []) if prof is not None else None
            if n.op == "scan":  # a loop calling its body's kernels (codegen.loop)
                emit_scan(self, b, unit, bufs, work, syms_ptr, err, sym)
                self.unit_names.append(f"%{p.node_index[n.id]} scan")
            else:
                kfn, stored, buffers, values = self.kernel_call(unit)
                gi = p.group_of.get(n.id)
                self.unit_names.append(
                    f"%{p.node_index[n.id]} {n.op}" if len(unit) == 1 else
                    f"%{p.node_index[n.id]} {n.op} + epilogue %{p.node_index[unit[-1].id]}"
                    if gi in p.epilogues else
                    f"%{p.node_index[n.id]}..%{p.node_index[unit[-1].id]} loop group")
                args = [bufs[m.id] for m in stored] + [bufs[x.id] for x in buffers] + [
                    work, syms_ptr if values is None else generic_syms(values), err]
                if len(unit) > 1 and gi in p.epilogues:
                    args += self._epilogue_args(b, unit, kfn, bufs, work, syms_ptr, err)
                rc = b.call(kfn, args)
                if kfn.name not in self._never_fails:
                    bad = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
                    with b.if_then(bad, likely=False):
                        b.ret(rc)
            if prof is not None:
                dt_ = b.sub(b.call(clock, []), t0)
                for j, add in ((2 * u, dt_), (2 * u + 1, i64(1))):
                    cell = b.gep(prof, [ir.Constant(I32, 0), ir.Constant(I32, j)],
                                 inbounds=True)
                    b.store(b.add(b.load(cell), add), cell)
            if self.on_kernels is not None and self._pending_chars >= CHUNK_CHARS:
                self._flush_kernels()
            if self.on_gemm is not None and self.gemm_requests and len(
                    self.gemm_requests) > len(gemm_seen):
                for r in sorted(self.gemm_requests - gemm_seen, key=repr):
                    gemm_seen.add(r)
                    self.on_gemm(r)
            if n.id in finite:
                _emit_finite_exit(b, n, bufs[n.id], err, finite[n.id], p.node_index[n.id])
        if self.on_kernels is not None:
            self._flush_kernels()
        # commit: outputs then updates
        memcpy = declare(mod, "memcpy", I8P, [I8P, I8P, I64])
        base = TABLE_FIXED + self.n_inputs
        for j, o in enumerate(g.outputs):
            if p.out_direct.get(o.id) != j:
                b.call(memcpy, [slot(base + j), bufs[o.id], sym(nbytes(o))])
        base += self.n_outputs
        for j, (_, v) in enumerate(g.updates):
            if p.direct.get(v.id) != j:
                b.call(memcpy, [slot(base + j), bufs[v.id], sym(nbytes(v))])
        b.ret(ir.Constant(I32, ERR_OK))


__all__ = ["Lowering", "plan", "Plan", "KernelEmitter", "ELEMENT_RULES", "KERNELS",
           "VIEW_OPS"]
