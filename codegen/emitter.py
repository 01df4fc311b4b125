"""The kernel emitter: one LLVM function computing one materialized node (or a loop group).

``KernelEmitter`` owns what every CPU kernel needs: the function and its ``noalias`` buffer
arguments, the symbol values, loop nests, index arithmetic (strides, views, padding), loads
and stores (bounds-checked in debug builds), index checks that stop the step with an error
code, and ``value(n, idx)``, which fuses an expression node inline through the elementwise
rules. Family kernels (``codegen.reduce``, ``codegen.matmul``, ``codegen.conv`` ...) and the
PTX backend's ``PTXKernel`` build on it; the entry function (``codegen.lower``) creates one
per kernel. It sits between the elementwise rules, which it calls, and the kernel families,
which call it.

``lower`` (the first argument) is the module being built: ``codegen.lower.Lowering`` or the
PTX program; the emitter reads its ``module``, ``symbols``, ``plan``, ``mat_ids``, ``debug``
and ``wide``.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import shapes as sh

from . import pad_segments
from .abi import ERR_BOUNDS, ERR_INDEX, ERR_OK
from .affine import Forms, split_factor
from .elementwise import ELEMENT_RULES
from .llvm_util import (
    I8,
    I8P,
    I32,
    I64,
    SymEmitter,
    bf16_to_f32,
    f32_to_bf16,
    fconst,
    for_range,
    i64,
    mem_type,
    reg_type,
    round_bf16,
)
from .parallel import TASK, context_type, pack_context, unpack_context
from .vector_runs import emit_runs, flat_index
from .views import VIEW_OPS, closure_of, contiguous_strides, strided_view

# elements of an elementwise kernel's loop nest from which its two halves run on the two
# threads (a pass over 32K floats takes ~10 us; handing half to the spinning worker, <1 us)
ELEM_PAR_MIN = 1 << 15


class _EntryBuilder:
    """An IRBuilder stand-in that always inserts at the end of the entry block."""

    def __init__(self, b: ir.IRBuilder, term: ir.Instruction) -> None:
        self._b = b
        self._term = term

    def __getattr__(self, name: str) -> Any:
        self._b.position_before(self._term)
        return getattr(self._b, name)


class _EntrySym(SymEmitter):
    """Shape expressions emitted in the entry block; ``floordiv`` of values computed in a
    loop (a kernel's own index arithmetic) stays at the kernel's current position."""

    def __init__(self, hoist: Any, syms: dict, k: Any, entry: ir.Block) -> None:
        super().__init__(hoist, syms)
        self._k = k
        self._entry = entry

    def floordiv(self, a: ir.Value, b: ir.Value) -> ir.Value:
        if all(getattr(v, "parent", self._entry) is self._entry
               or isinstance(getattr(v, "parent", None), ir.Function) for v in (a, b)):
            return super().floordiv(a, b)
        hoist, self.b = self.b, self._k.b
        try:
            return super().floordiv(a, b)
        finally:
            self.b = hoist


def _collect(lower: Any, buffers: list[Node], n: Node, top: bool = False,
             skip: set[int] | frozenset = frozenset()) -> None:
    """Append to ``buffers`` the buffers ``n``'s value is computed from (materialized or
    input nodes reached through inline expressions), in a fixed order."""
    mat = lower.mat_ids
    seen: set[int] = set()
    stack = list(n.inputs) if top else [n]
    while stack:
        x = stack.pop()
        if x.id in seen or x.id in skip:
            continue
        seen.add(x.id)
        if x.op == "input" or x.id in mat:
            if all(x is not y for y in buffers):
                buffers.append(x)
            continue
        stack.extend(x.inputs)


def operands(lower: Any, members: list[Node], group: bool) -> tuple[list[Node], list[Node]]:
    """(stored, buffers): the nodes a kernel computing ``members`` writes (its first
    arguments) and the buffers it reads (the next ones), as ``KernelEmitter`` orders them;
    the entry function passes those pointers whether it emitted the kernel or reuses an
    equal one (``Lowering._kernel_key``)."""
    virtual = getattr(getattr(lower, "plan", None), "virtual", set())
    stored = [m for m in members if m.id not in virtual]
    buffers: list[Node] = []
    skip = {m.id for m in members} if group else set()
    for m in members:
        _collect(lower, buffers, m, True, skip)
    return stored, buffers


class KernelEmitter:
    """Emits one kernel function: loops over a node's index space, values computed inline."""

    debug = False  # bounds checks (set per instance; subclasses with their own __init__: off)
    split_range: tuple[ir.Value, ir.Value] | None = None  # see ``split`` below
    # the extent ``split_range`` divides when it is not the first non-1 dim of the first
    # member's shape (a channel group splits its channels: ``codegen.channel_groups``)
    split_extent: Any = None
    names_node = False  # its code stores a node index (error reports): not shareable
    # the LLVM optimisation level of the module it is compiled in (``llvm_objects.LEVELS``):
    # O3 for loops LLVM vectorises; a family whose kernel is vector code written out by
    # hand sets ``tile`` (``codegen.conv``)
    level = "O3"
    # affine forms of the index values built so far (``codegen.affine``; None: not tracked,
    # as in the PTX kernels, which do not run ``__init__``), and the factor the innermost
    # loop was split by
    forms: Forms | None = None
    factor: int | None = None
    # inside one segment of a loop that zero pads cut (``loops(pads=True)``): its axis, and
    # for each pad cut there whether the segment lies inside it (else in its zeros)
    pad_axis: int | None = None
    pad_sides: dict[int, bool] | None = None

    # a convolution's epilogue (``codegen.conv_epilogue.Epilogue``): the consumer the kernel
    # runs per image over its result (``codegen.planning._plan_conv_epilogues``)
    epilogue: Any = None
    staged_id: int | None = None  # see ``staged`` below (the PTX kernels do not run __init__)
    # how many of ELEM_PAR_MIN's element passes one element of the split loop is worth:
    # a loop group's members each stream their own arrays (``Lowering._split_work``)
    split_weight = 1

    def __init__(self, lower: Any, node: Node, name: str,
                 group: list[Node] | None = None, split: tuple | None = None,
                 inplace: Node | None = None, staged: Node | None = None,
                 extra_args: int = 0, outputs: list[Node] | None = None,
                 split_weight: int = 1) -> None:
        """``inplace`` and ``staged``, for a convolution's epilogue (``codegen.conv``): a
        node ``node`` reads at its own index, the convolution's result. ``inplace``: its
        values are already in ``node``'s own buffer, read from there (its argument is not
        used). ``staged``: its argument holds one image of it, read at image 0 whatever the
        image (batch stride 0). ``extra_args``: that many more ``i8*`` arguments after the
        error record (``self.extra``): a convolution's epilogue function and its context.
        ``outputs``: the nodes it writes, when not the members that have buffers (a
        convolution whose result goes to its epilogue's buffer)."""
        self.L = lower
        self.node = node
        self.forms = Forms()
        # a loop group computes several nodes per index (``Plan.groups``): members read
        # earlier members' values from ``cache`` (registers), never from their buffers
        self.members = group or [node]
        self.cache: dict[int, ir.Value] = {}
        self.stored, self.buffers = operands(lower, self.members, group is not None)
        if outputs is not None:
            self.stored = list(outputs)
        self.staged_id = None if staged is None else staged.id
        mod = lower.module
        arg_types = [I8P for _ in self.stored] + [I8P for _ in self.buffers] + [
            I8P, I64.as_pointer(), I64.as_pointer()] + [I8P] * extra_args
        # ``split`` (the shape of the work: the loop nest, or a reduction's input): the loops
        # go into a body function that also takes the range of the outermost loop over the
        # result (``split_range``); ``finish`` makes the kernel a wrapper that runs the two
        # halves of that range on the thread pool (``_emit_split``)
        self._name = name
        self._split_work = split
        self.split_weight = split_weight
        self.split_range: tuple[ir.Value, ir.Value] | None = None
        split_args = [I64, I64] if split is not None else []
        self.fn = ir.Function(mod, ir.FunctionType(I32, arg_types + split_args),
                              name=f"{name}.par" if split is not None else name)
        self.fn.linkage = "internal"
        # a kernel stays a function of its own: inlined into the entry function, every
        # kernel of the step would make one huge function whose O3 optimisation and code
        # emission grow faster than linearly (GPT, 2 layers: 13.5 s with inlining, 5.0 s
        # without); a call costs nanoseconds next to any kernel's loop
        self.fn.attributes.add("noinline")
        args = list(self.fn.args)
        if split is not None:
            self.split_range = (args[-2], args[-1])
            args = args[:-2]
        self.extra = args[len(args) - extra_args:]
        args = args[:len(args) - extra_args]
        self._args = args
        for a in args[:-2]:
            a.add_attribute("noalias")
        self.work = args[-3]
        entry = self.fn.append_basic_block("entry")
        start = self.fn.append_basic_block("start")
        self._allocas = ir.IRBuilder(entry)
        self._entry_br = self._allocas.branch(start)
        self.b = ir.IRBuilder(start)
        self.err_block: ir.Block | None = None
        syms_ptr = args[-2]
        self.err_ptr = args[-1]
        # shape expressions go to the entry block, so a value cached while emitting one loop
        # nest still dominates its uses in the next one
        hoist = _EntryBuilder(ir.IRBuilder(entry), self._entry_br)
        symvals = {s: hoist.load(hoist.gep(syms_ptr, [i64(i)], inbounds=True), name=s.name)
                   for i, s in enumerate(lower.symbols)}
        self.sym = _EntrySym(hoist, symvals, self, entry)
        # debug builds: buffer extents, emitted here so that they dominate every check
        self.debug = getattr(lower, "debug", False)  # the PTX backend reuses this class
        self.extent = {n.id: self.sym(sh.numel(n.shape)) for n in [node] + self.buffers} \
            if self.debug else {}
        self.ptr: dict[int, ir.Value] = {}
        self.outs = {m.id: self.b.bitcast(a, mem_type(m.dtype).as_pointer())
                     for m, a in zip(self.stored, args)}
        self.out = self.outs.get(node.id)
        for n, a in zip(self.buffers, args[len(self.stored):-3]):
            self.ptr[n.id] = self.b.bitcast(a, mem_type(n.dtype).as_pointer())
        if inplace is not None:
            self.ptr[inplace.id] = self.out

    def _is_buffer(self, n: Node) -> bool:
        return n.op == "input" or n.id in self.L.mat_ids

    def _collect(self, n: Node, top: bool = False, skip: set[int] | frozenset = frozenset()
                 ) -> None:
        _collect(self.L, self.buffers, n, top, skip)

    # -- index helpers -------------------------------------------------------------------
    def linear(self, idx: list[ir.Value], strides: list[Any]) -> ir.Value:
        b = self.b
        terms = []
        for i, s in zip(idx, strides):
            if (isinstance(s, int) and s == 0) or (isinstance(i, ir.Constant)
                                                   and i.constant == 0):
                continue
            terms.append(i if (isinstance(s, int) and s == 1)
                         else b.mul(i, self.sym(s), flags=("nsw",)))
        if not terms:
            return i64(0)
        out = terms[0]
        for t in terms[1:]:
            out = b.add(out, t, flags=("nsw",))
        fs = self.forms
        if fs is not None:
            parts = []
            for i, s in zip(idx, strides):
                if isinstance(s, int) and s == 0:
                    continue
                f = fs.get(i)
                if f is None or not isinstance(s, int):
                    return out
                parts.append((f, s))
            fs.record(out, fs.linear(parts))
        return out

    def alloca(self, t: ir.Type) -> ir.Value:
        """A stack slot in the entry block (allocas inside loops would grow the stack)."""
        self._allocas.position_before(self._entry_br)
        return self._allocas.alloca(t)

    def load_buffer(self, n: Node, idx: list[ir.Value], strides: list[Any] | None = None
                    ) -> ir.Value:
        strides = contiguous_strides(n.shape) if strides is None else strides
        if n.id == self.staged_id:  # one image of it (``staged``)
            strides = [0, *list(strides)[1:]]
        if self.lanes:
            ptr, moves, before = self._run_address(self.ptr[n.id], idx, strides, f"%{n.id}")
            if moves:
                vt = ir.VectorType(ptr.type.pointee, self.lanes)
                return self.b.load(self.b.bitcast(ptr, vt.as_pointer()), align=4)
            if before is None:
                return self.splat(self.b.load(ptr))
            with self.b.goto_block(before):  # a per-channel value: loaded and broadcast once
                return self.splat(self.b.load(ptr))
        lin = self.linear(idx, strides)
        if self.debug:
            self.check_bounds(lin, n)
        ptr = self.b.gep(self.ptr[n.id], [lin], inbounds=True)
        v = self.b.load(ptr)
        if n.dtype is dt.bool_:
            v = self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        elif n.dtype is dt.bfloat16:
            v = bf16_to_f32(self.b, v)
        return v

    def store_out(self, idx: list[ir.Value], v: ir.Value) -> None:
        if self.lanes:  # a vector run: ``lanes`` consecutive elements from ``idx``
            v = self.splat(v)
            ptr, moves, _ = self._run_address(self.out, idx,
                                              contiguous_strides(self.node.shape),
                                              f"%{self.node.id}")
            if not moves:
                raise AssertionError(f"a vector run's store of %{self.node.id} does not move "
                                     "with the run")
            self.b.store(v, self.b.bitcast(ptr, v.type.as_pointer()), align=4)
            return
        ptr = self.out_ptr(idx)
        self.b.store(self.to_memory(self.node.dtype, v), ptr)

    # -- vector runs ---------------------------------------------------------------------
    # While ``lanes`` is set, values are computed for ``lanes`` consecutive indices of the
    # innermost loop variable ``lane_var`` at once: a read that depends on it loads a
    # vector, one that does not a scalar broadcast to every lane, and elementwise rules run
    # on vectors (``elementwise._l_table``, ``emit.VectorEmit``). Only a caller that has
    # checked every read and rule of its values sets it (``channel_groups``).
    lanes = 0
    lane_var: Any = None
    # (the block before a vector run's loop, the index values defined before it): where a
    # read that does not depend on ``lane_var`` is loaded and broadcast
    hoist: tuple[ir.Block, tuple] | None = None
    # the values that are the same all along a vector run (``codegen.vector_runs``): each
    # computed once, as scalars in the block before the run's loop, and broadcast (the
    # tile level has no LICM to move them out); ``run_values``: those made for this run
    invariant: frozenset[int] = frozenset()
    # (node id, computed here) -> its vector; member id -> its scalar (set per run)
    run_values: dict[tuple[int, bool], ir.Value] | None = None
    run_scalars: dict[int, ir.Value] | None = None
    run_first: ir.Value | None = None  # the index of the run's first element

    def _before_run(self, n: Node, idx: list[ir.Value], own: bool) -> ir.Value:
        """Node ``n``'s value (``own``: computed, as for a member, else read) all along the
        vector run, computed once before its loop and broadcast to every lane. The scalars
        of the members made so far stand in for ``cache`` while it is computed: anything an
        invariant value reads is invariant too. ``codegen.vector_runs`` resets both tables
        for each run.

        It is emitted at the end of the block before the run's loop (``hoist``), its branch
        into the loop moved after it: the value may take blocks of its own (an index
        check, an integer power's loop), and the loop's entry is then the last of them."""
        assert self.hoist is not None and self.run_values is not None
        assert self.run_scalars is not None
        got = self.run_values.get((n.id, own))
        if got is not None:
            return got
        block, outer = self.hoist
        b = self.b
        here = b.block
        term = block.terminator  # the branch into the run's loop
        assert isinstance(term, ir.Branch) and block.instructions[-1] is term
        block.instructions.pop()
        block.terminator = None
        lanes, var, cache = self.lanes, self.lane_var, self.cache
        # at the run's first element (the lanes' values are equal): an index check among
        # them reports the position a scalar loop's first iteration would
        at = [self.run_first if self.uses(i, var) else i for i in idx]
        self.lanes, self.lane_var, self.hoist = 0, None, None
        self.cache = dict(self.run_scalars)
        try:
            b.position_at_end(block)
            v = self.compute(n, at) if own else self.value(n, at)
            self.lanes = lanes
            out = self.splat(v)
        finally:
            self.lanes, self.lane_var, self.cache = lanes, var, cache
        end = b.block
        end.instructions.append(term)
        end.terminator, term.parent = term, end
        if end is not block:  # the loop is entered from the value's last block now
            for phi in term.operands[0].instructions:
                if isinstance(phi, ir.PhiInstr):
                    phi.incomings = [(x, end if bb is block else bb)
                                     for x, bb in phi.incomings]
        self.hoist = (end, outer)
        b.position_at_end(here)
        if own:
            self.run_scalars[n.id] = v
        self.run_values[(n.id, own)] = out
        return out

    def _run_address(self, base: ir.Value, idx: list[ir.Value], strides: list[Any],
                     what: str) -> tuple[ir.Value, bool, ir.Block | None]:
        """A vector run's address of ``idx`` in ``base`` (with ``strides``), whether it
        moves with ``lane_var``, and the block before the run's loop where its start was
        computed (None: in the loop). One that moves must be ``lane_var`` itself at stride 1 in
        one dim, no other index computed from it (the caller's plan makes every such access
        contiguous: checked here, raising rather than reading the wrong memory); it is the
        run's start plus ``lane_var``. One that does not is the same element at every index
        of the run (a per-channel value). The start is computed before the run's loop
        (``hoist``) when every other index is defined there: the tile level has no LICM or
        strength reduction to move it."""
        live = [d for d, s in enumerate(strides) if not (isinstance(s, int) and s == 0)]
        moving = [d for d in live if self.uses(idx[d], self.lane_var)]
        if moving and (len(moving) != 1 or idx[moving[0]] is not self.lane_var
                       or not sh.same(strides[moving[0]], 1)):
            raise AssertionError(f"a vector run's access of {what} is not contiguous")
        start = list(idx)
        for d in moving:
            start[d] = ir.Constant(I64, 0)
        block, outer = self.hoist if self.hoist is not None else (None, ())
        if block is not None and not all(isinstance(start[d], ir.Constant)
                                         or any(start[d] is o for o in outer) for d in live):
            block = None
        if block is None:
            first = self.b.gep(base, [self.linear(start, strides)], inbounds=True)
        else:
            with self.b.goto_block(block):
                first = self.b.gep(base, [self.linear(start, strides)], inbounds=True)
        if not moving:
            return first, False, block
        return self.b.gep(first, [self.lane_var], inbounds=True), True, block

    def splat(self, v: ir.Value) -> ir.Value:
        """``v`` in every lane (a vector run's scalar: a constant, a per-channel value);
        a vector, or any value outside a vector run, as it is."""
        if not self.lanes or isinstance(v.type, ir.VectorType):
            return v
        vt = ir.VectorType(v.type, self.lanes)
        if isinstance(v, ir.Constant):
            return ir.Constant(vt, [v.constant] * self.lanes)
        x = self.b.insert_element(ir.Constant(vt, None), v, ir.Constant(I32, 0))
        return self.b.shuffle_vector(x, ir.Constant(vt, None),
                                     ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes))

    @staticmethod
    def uses(v: Any, var: Any) -> bool:
        """Whether the LLVM value ``v`` is computed from ``var`` (an index: the operands of
        the instructions that built it, followed back)."""
        seen: set[int] = set()
        todo = [v]
        while todo:
            x = todo.pop()
            if x is var:
                return True
            if isinstance(x, ir.Instruction) and id(x) not in seen:
                seen.add(id(x))
                todo.extend(x.operands)
        return False

    def to_memory(self, d: dt.DType, v: ir.Value) -> ir.Value:
        """A register value of dtype ``d`` as stored (bool as a byte, bf16 as its bits)."""
        if d is dt.bool_:
            return self.b.zext(v, I8)
        if d is dt.bfloat16:
            return f32_to_bf16(self.b, v)
        return v

    def out_ptr(self, idx: list[ir.Value]) -> ir.Value:
        lin = self.linear(idx, contiguous_strides(self.node.shape))
        if self.debug:
            self.check_bounds(lin, self.node)
        return self.b.gep(self.out, [lin], inbounds=True)

    def check_bounds(self, lin: ir.Value, buf: Node) -> None:
        """Debug builds: stop with ERR_BOUNDS (node, element, extent) unless ``lin`` is an
        element of ``buf``'s buffer."""
        b = self.b
        size = self.extent[buf.id]
        bad = b.icmp_unsigned(">=", lin, size)
        ok = self.fn.append_basic_block("bounds.ok")
        fail = self.fn.append_basic_block("bounds.bad")
        b.cbranch(bad, fail, ok)
        b.position_at_end(fail)
        self.names_node = True
        for j, v in enumerate((i64(ERR_BOUNDS), i64(self.L.plan.node_index[self.node.id]),
                               lin, size)):
            b.store(v, b.gep(self.err_ptr, [i64(j)], inbounds=True))
        b.ret(ir.Constant(I32, ERR_BOUNDS))
        b.position_at_end(ok)

    # -- values --------------------------------------------------------------------------
    def value(self, n: Node, idx: list[ir.Value]) -> ir.Value:
        """The value of node ``n`` at multi-index ``idx`` (fusing expressions inline)."""
        if n.id in self.cache:  # an earlier loop-group member, read at its own index
            return self.cache[n.id]
        if self.lanes and n.id in self.invariant:
            return self._before_run(n, idx, False)
        if self._is_buffer(n):
            return self.load_buffer(n, idx)
        return self.compute(n, idx)

    def compute(self, n: Node, idx: list[ir.Value]) -> ir.Value:
        """Like ``value`` but never loads ``n`` itself (used for the node being computed)."""
        if self.lanes and n.id in self.invariant:
            return self._before_run(n, idx, True)
        if n.op == "pad":
            return self._padded(n, idx)
        if n.op in VIEW_OPS:
            sv = strided_view(n, lambda m: m is not n and self._is_buffer(m))
            if sv is not None:
                base, strides = sv
                return self.load_buffer(base, idx, strides)
            if self.lanes and n.op == "reshape":
                # a vector run over every dim (``codegen.vector_runs``): the run's index is
                # the flat offset, the same in the source's shape
                return self.value(n.inputs[0], flat_index(n.inputs[0].shape, self.lane_var))
            return self.value(n.inputs[0], self.map_index(n, idx))
        rule = ELEMENT_RULES.get(n.op)
        if rule is None:
            raise NotImplementedError(f"no CPU lowering for op {n.op!r} used as an expression")
        if n.dtype is dt.bfloat16:  # computed in float32, rounded once (codegen.legalize)
            return round_bf16(self.b, rule(self, n, idx))
        return rule(self, n, idx)

    def _padded(self, n: Node, idx: list[ir.Value]) -> ir.Value:
        """Zero padding without branches: clamp the index into the source, load, select.

        The clamped load is always in bounds, so the loop stays straight-line code that
        LLVM can vectorise; positions in the padding select zero.
        """
        b = self.b
        src = n.inputs[0].shape
        side = None if self.pad_sides is None else self.pad_sides.get(n.id)
        t = reg_type(n.dtype)
        zero = fconst(t, 0.0) if n.dtype.is_float else ir.Constant(t, 0)
        if side is False:  # this segment of the loop lies in its zeros (``loops(pads=)``)
            return zero
        inside: ir.Value | None = None
        sub = []
        for i, (d, (lo, _)) in zip(idx, zip(src, n.attrs["pads"])):
            if isinstance(lo, int) and lo == 0 and sh.same(d, n.shape[len(sub)]):
                sub.append(i)
                continue
            if side and len(sub) == self.pad_axis:  # ... or wholly inside it
                sub.append(self._inside_index(i, lo, d))
                continue
            blocked = self._padded_blocks(i, lo, d)
            if blocked is not None:  # whole blocks of the split innermost loop
                ok, j = blocked
                inside = ok if inside is None else b.and_(inside, ok)
                sub.append(j)
                continue
            j = b.sub(i, self.sym(lo)) if not (isinstance(lo, int) and lo == 0) else i
            ok = b.and_(b.icmp_signed(">=", j, i64(0)), b.icmp_signed("<", j, self.sym(d)))
            inside = ok if inside is None else b.and_(inside, ok)
            top = b.sub(self.sym(d), i64(1))
            j = b.select(b.icmp_signed("<", j, i64(0)), i64(0), j)
            sub.append(b.select(b.icmp_signed(">", j, top), top, j))
        v = self.value(n.inputs[0], sub)
        if inside is None:
            return v
        return b.select(inside, v, zero)

    def _inside_index(self, i: ir.Value, lo: int, d: int) -> ir.Value:
        """The source index ``i - lo`` of a pad's axis in a segment of the loop wholly
        inside the pad (``loops(pads=)``), with its form: a fresh variable in ``[0, d)``, or
        in blocks of the split loop's factor when the edges fall on whole blocks, so the
        views below the pad still see an affine index."""
        b, fs, f = self.b, self.forms, self.factor
        form = fs.get(i)
        if f is not None and form is not None and form[1] == 0 and len(form[0]) == 2 \
                and lo % f == 0 and d % f == 0:
            (v0, c0), (v1, c1) = sorted(form[0].items(), key=lambda kv: -kv[1])
            if c0 == f and c1 == 1 and fs.variable(v1)[1] == f:
                j0 = b.sub(fs.variable(v0)[0], i64(lo // f), flags=("nsw",))
                fs.var(j0, d // f)
                return fs.emit(b, ({id(j0): f, v1: 1}, 0))
        j = b.sub(i, i64(lo), flags=("nsw",))
        fs.var(j, d)
        return j

    def _padded_blocks(self, i: Any, lo: Any, d: Any) -> tuple[ir.Value, ir.Value] | None:
        """``(inside, source index)`` of a padded axis whose index is ``f * c0 + c1`` (the
        innermost loop split by ``f``, ``codegen.affine``) with the padding and the source a
        whole number of blocks: inside depends on ``c0`` alone, and the clamped source index
        stays affine (``f * clamp(c0 - lo / f) + c1``) for the views below the pad."""
        fs, f = self.forms, self.factor
        if fs is None or f is None or not (isinstance(lo, int) and isinstance(d, int)):
            return None
        form = fs.get(i)
        if form is None or form[1] != 0 or lo % f or d % f or len(form[0]) != 2:
            return None
        (v0, c0), (v1, c1) = sorted(form[0].items(), key=lambda kv: -kv[1])
        if c0 != f or c1 != 1 or fs.variable(v1)[1] != f:
            return None
        b = self.b
        x0 = fs.variable(v0)[0]
        j0 = b.sub(x0, i64(lo // f)) if lo else x0
        nb = d // f
        ok = b.and_(b.icmp_signed(">=", j0, i64(0)), b.icmp_signed("<", j0, i64(nb)))
        j0 = b.select(b.icmp_signed("<", j0, i64(0)), i64(0), j0)
        j0 = b.select(b.icmp_signed(">", j0, i64(nb - 1)), i64(nb - 1), j0)
        fs.var(j0, nb)
        return ok, fs.emit(b, ({id(j0): f, v1: 1}, 0))

    def map_index(self, n: Node, idx: list[ir.Value]) -> list[ir.Value]:
        """Index into ``n.inputs[0]`` for index ``idx`` of view node ``n``."""
        src = n.inputs[0].shape
        if n.op in ("detach", "affine_norm"):
            return idx
        if n.op == "slice":
            out = []
            for i, b0, st in zip(idx, n.attrs["starts"], n.attrs["steps"]):
                j = i if st == 1 else self.b.mul(i, i64(st), flags=("nsw",))
                out.append(j if (isinstance(b0, int) and b0 == 0)
                           else self.b.add(j, self.sym(b0), flags=("nsw",)))
            return out
        if n.op == "permute":
            out: list[Any] = [None] * len(idx)
            for i, p in enumerate(n.attrs["perm"]):
                out[p] = idx[i]
            return out
        if n.op == "expand":
            return [i64(0) if (s == 1 and not sh.same(d, 1)) else i
                    for s, d, i in zip(src, n.shape, idx)]
        # reshape. Size-1 dims read index 0, and the other dims it keeps at either end map
        # through as they are (``stack``'s unsqueeze keeps all of them; nn.MultiheadAttention's
        # ``[T, B, E] -> [T*B, E]`` keeps E); only the dims between are linearised in the
        # output shape and delinearised in the input shape. Linearised whole, a reshaped
        # view with a symbolic batch divided every element's index by it and stayed scalar
        # (``stack`` of three [B, 3, 197, 64] slices: 6.2 ms against 0.31; the copies around
        # a TransformerEncoder's attention: 7 ns an element; Zen 4)
        dst = n.shape
        sr = [k for k, d in enumerate(src) if not sh.same(d, 1)]
        dr = [k for k, d in enumerate(dst) if not sh.same(d, 1)]
        lo = 0
        while lo < min(len(sr), len(dr)) and sh.same(src[sr[lo]], dst[dr[lo]]):
            lo += 1
        hi = 0
        while hi < min(len(sr), len(dr)) - lo and sh.same(src[sr[-1 - hi]], dst[dr[-1 - hi]]):
            hi += 1
        res: list[Any] = [i64(0)] * len(src)
        for a, c in zip(sr[:lo] + sr[len(sr) - hi:], dr[:lo] + dr[len(dr) - hi:], strict=True):
            res[a] = idx[c]
        ms, md = sr[lo:len(sr) - hi], dr[lo:len(dr) - hi]
        if ms:
            mid = self._delinearise([idx[c] for c in md], tuple(dst[c] for c in md),
                                    tuple(src[a] for a in ms))
            for a, v in zip(ms, mid, strict=True):
                res[a] = v
        return res

    def _delinearise(self, idx: list[ir.Value], dst: tuple, src: tuple) -> list[ir.Value]:
        """Index into a ``src``-shaped tensor of index ``idx`` of its ``dst``-shaped
        reshape: linearised in ``dst``, delinearised in ``src``."""
        lin = self.linear(idx, contiguous_strides(dst))
        form = self.forms.get(lin) if self.forms is not None else None
        res = []
        first = next((k for k, d in enumerate(src) if d != 1), 0)
        for k, (s, d) in enumerate(zip(contiguous_strides(src), src)):
            if d == 1:
                res.append(i64(0))
                continue
            if form is not None and isinstance(s, int):
                # exact in the index's affine form (codegen.affine): no division emitted;
                # the outermost source index needs no remainder (the index is in range)
                q = self.forms.div(form, s, self.b) if s != 1 else form
                r = q if k == first or q is None else (
                    self.forms.mod(q, d, self.b) if isinstance(d, int) else None)
                if r is not None:
                    res.append(self.forms.emit(self.b, r))
                    continue
            q = self.b.sdiv(lin, self.sym(s)) if s != 1 else lin
            res.append(self.b.srem(q, self.sym(d)))
        return res

    def error_exit(self) -> ir.Block:
        if self.err_block is None:
            cur = self.b.block
            self.err_block = self.fn.append_basic_block("error")
            self.b.position_at_end(self.err_block)
            self.b.ret(ir.Constant(I32, ERR_INDEX))
            self.b.position_at_end(cur)
        return self.err_block

    def check_index(self, ix: ir.Value, size: Any, pos: ir.Value, node: Node | None = None
                    ) -> None:
        """Branch to the error exit (recording node, position, value) when ix ∉ [0, size).

        ``node`` is the indexing op (it may be computed inline inside another node's kernel);
        its index lets the runtime name the offending argument."""
        b = self.b
        self.names_node = True
        bad = b.icmp_unsigned(">=", ix, self.sym(size))
        ok = self.fn.append_basic_block("idx.ok")
        fail = self.fn.append_basic_block("idx.bad")
        b.cbranch(bad, fail, ok)
        b.position_at_end(fail)
        b.store(i64(self.L.plan.node_index[(node or self.node).id]),
                b.gep(self.err_ptr, [i64(1)], inbounds=True))
        b.store(pos, b.gep(self.err_ptr, [i64(2)], inbounds=True))
        b.store(ix, b.gep(self.err_ptr, [i64(3)], inbounds=True))
        b.store(i64(ERR_INDEX), self.err_ptr)
        b.branch(self.error_exit())
        b.position_at_end(ok)

    # -- loop nests ----------------------------------------------------------------------
    def loops(self, shape: tuple, body: Any, order: list[int] | None = None,
              factor: int | None = None, pads: bool = False) -> None:
        """The loop nest over ``shape`` (``order``: outermost first), the innermost loop
        split into blocks of ``factor`` when given (``codegen.affine``: the views the body
        reads through divide that axis by it); every loop variable's form is recorded.
        ``pads``: the body computes the members at the loop's index (elementwise kernels,
        loop groups), so the loop over an axis that zero pads cut may run as one loop per
        segment between their edges (``codegen.pad_segments``)."""
        dims = list(range(len(shape))) if order is None else order
        idx: list[Any] = [None] * len(shape)
        fs = self.forms
        inner = max((k for k, d in enumerate(dims) if shape[d] != 1), default=None)
        if factor is not None and (fs is None or inner is None or inner == 0
                                   or not isinstance(shape[dims[inner]], int)
                                   or shape[dims[inner]] % factor):
            factor = None  # (the outermost loop may be a thread's share of the range)
        self.factor = factor
        segs = None
        if pads and fs is not None:
            inner_dim = None if inner is None else dims[inner]
            segs = pad_segments.segments(
                self.members, shape,
                lambda n: self._is_buffer(n) or n.id in self.cache,
                lambda ax: factor if ax == inner_dim else None)

        split = self.split_range

        def rec(k: int) -> None:
            nonlocal split
            if k == len(dims):
                body(idx)
                return
            d = dims[k]
            if shape[d] == 1:
                idx[d] = i64(0)
                rec(k + 1)
                return
            ext = shape[d] if isinstance(shape[d], int) else None
            if segs is not None and d == segs[0]:
                rng, split = split, None
                for start, stop, sides in segs[1]:
                    self.pad_axis, self.pad_sides = d, sides
                    self._segment_loop(d, start, stop, ext, factor if k == inner else None,
                                       rng, idx, lambda: rec(k + 1))
                self.pad_axis, self.pad_sides = None, None
                return
            if k == inner and factor is not None:
                with for_range(self.b, i64(0), i64(ext // factor), name=f"i{d}b") as i0:
                    with for_range(self.b, i64(0), i64(factor), name=f"i{d}") as i1:
                        fs.var(i0, ext // factor)
                        fs.var(i1, factor)
                        idx[d] = fs.emit(self.b, ({id(i0): factor, id(i1): 1}, 0))
                        rec(k + 1)
                return
            lo, hi = (i64(0), self.sym(shape[d])) if split is None else split
            split = None  # the outermost loop only
            with for_range(self.b, lo, hi, name=f"i{d}") as i:
                idx[d] = i
                if fs is not None:
                    fs.var(i, ext)
                rec(k + 1)

        rec(0)
        self.factor = None

    def _segment_loop(self, d: int, start: int, stop: int, ext: int, factor: int | None,
                      rng: tuple[ir.Value, ir.Value] | None, idx: list[Any],
                      inner: Any) -> None:
        """One segment ``[start, stop)`` of the loop over axis ``d`` (``loops``): in blocks
        of ``factor`` when the axis is split, else clipped to the thread's share ``rng``
        when it is the split outermost loop."""
        b, fs = self.b, self.forms
        if factor is not None:
            with for_range(b, i64(start // factor), i64(stop // factor),
                           name=f"i{d}b") as i0:
                with for_range(b, i64(0), i64(factor), name=f"i{d}") as i1:
                    fs.var(i0, ext // factor)
                    fs.var(i1, factor)
                    idx[d] = fs.emit(b, ({id(i0): factor, id(i1): 1}, 0))
                    inner()
            return
        lo, hi = i64(start), i64(stop)
        if rng is not None:
            lo = b.select(b.icmp_signed(">", rng[0], lo), rng[0], lo)
            hi = b.select(b.icmp_signed("<", rng[1], hi), rng[1], hi)
        with for_range(b, lo, hi, name=f"i{d}") as i:
            idx[d] = i
            fs.var(i, ext)
            inner()

    def record_var(self, v: ir.Value, extent: Any) -> None:
        """Record loop variable ``v`` in ``[0, extent)`` for ``codegen.affine`` (``extent``:
        an int, a constant, or a size known only at run time), as ``loops`` records its own:
        views read inside a loop written by hand (a channel or row group's passes, a
        reduction's inner loops, a blocked sum) then find their source index without a
        division per element (GroupNorm's ``[N, G, C/G*H*W]`` rows seen as ``[N, C, H, W]``)."""
        if self.forms is None:
            return
        if isinstance(extent, ir.Constant):
            extent = int(extent.constant)
        self.forms.var(v, extent if isinstance(extent, int) else None)

    def inner_factor(self, shape: tuple) -> int | None:
        """The factor to split the innermost loop over ``shape`` by (``codegen.affine``):
        from the reshapes this kernel computes inline, the innermost extents of their
        sources."""
        mat = self.L.mat_ids
        cands = [x.inputs[0].shape[-1] for m in self.members for x in closure_of(m, mat)
                 if x.op == "reshape" and x.inputs[0].shape
                 and not self._reads_as_view(x)  # (a buffer's view: no division)
                 and not _unit_dims_only(x)]
        return split_factor(shape[-1] if shape else None, cands) if cands else None

    def _reads_as_view(self, x: Node) -> bool:
        """Whether reshape ``x`` reads its source as a strided view of buffers (its index
        needs no division). ``x`` itself does not count as a buffer: a materialized reshape
        (the kernel's own output, ``[B*197, 192]`` from a permuted ``[B, 197, 3, 64]``) is
        computed from its source like any inline one, and without the split its inner loop
        divided by 64 per element, a gather per vector: 0.87 ms where a plain copy of the
        same floats takes 0.22 (ViT's attention output, Ice Lake Xeon, one thread)."""
        return strided_view(x, lambda y: y is not x and self._is_buffer(y)) is not None

    def finish(self) -> None:
        self.b.ret(ir.Constant(I32, ERR_OK))
        if self.split_range is not None:
            self._emit_split()

    def _emit_split(self) -> None:
        """The kernel proper (``self.fn`` afterwards): the body on the outermost loop's whole
        range, or its two halves on the thread pool when the pool is there and the work has
        at least ``ELEM_PAR_MIN`` elements. Every element is computed by the same code either
        way, so the results are bit-identical; a body that can stop (an index check: gathers,
        embeddings) reports the error a one-thread run would (see below)."""
        body = self.fn
        shape = self.members[0].shape
        d0 = next(i for i, s in enumerate(shape) if s != 1)
        fn = ir.Function(body.module, ir.FunctionType(I32, [a.type for a in self._args]),
                         name=self._name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        syms = fn.args[-2]
        symvals = {s: b.load(b.gep(syms, [i64(i)], inbounds=True), name=s.name)
                   for i, s in enumerate(self.L.symbols)}
        sym = SymEmitter(b, symvals)
        n0 = sym(shape[d0] if self.split_extent is None else self.split_extent)
        args = list(fn.args)
        checked = self.err_block is not None  # may stop with an error (an index check)
        # a checked kernel's second half records its error in a record of its own (code,
        # node, position, value, as ``check_index`` writes them); after both halves the
        # first half's error wins, else the second's is copied out: the error a one-thread
        # run (first half, then second) stops at. Their outputs are scratch (checked
        # kernels never write state in place), so the half that ran on is harmless.
        err1 = b.alloca(ir.ArrayType(I64, 4)) if checked else None
        extra = [b.bitcast(err1, I64.as_pointer())] if checked else []
        # the task: unpack the context, run this part's half of the outermost loop
        ct = context_type([a.type for a in args] + [I64] + [e.type for e in extra])
        task = ir.Function(body.module, TASK, name=f"{self._name}.task")
        task.linkage = "internal"
        tb = ir.IRBuilder(task.append_basic_block("entry"))
        vals = unpack_context(tb, task.args[0], ct, len(args) + 1 + len(extra))
        tn = vals[len(args)]
        half = tb.udiv(tb.add(tn, i64(1)), i64(2))
        first = tb.icmp_signed("==", task.args[1], i64(0))
        lo = tb.select(first, i64(0), half)
        hi = tb.select(first, half, tn)
        call_args = vals[:len(args)]
        if checked:
            call_args[-1] = tb.select(first, call_args[-1], vals[-1])
        tb.call(body, call_args + [lo, hi])
        tb.ret_void()
        # the kernel: the pool's dispatch when it is there and the loop nest is big enough
        slot = b.alloca(ct)
        run2 = b.load(self.L.run2_global())
        big = b.icmp_signed(">=", b.mul(sym(sh.numel(self._split_work)),
                                         i64(self.split_weight)), i64(ELEM_PAR_MIN))
        go = b.and_(b.and_(big, b.icmp_signed(">=", n0, i64(2))),
                    b.icmp_unsigned("!=", b.ptrtoint(run2, I64), i64(0)))
        if not checked:
            with b.if_else(go) as (then, otherwise):
                with then:
                    b.call(run2, [task, pack_context(b, slot, args + [n0])])
                with otherwise:
                    b.call(body, args + [i64(0), n0])
            b.ret(ir.Constant(I32, ERR_OK))
            self.fn = fn
            return
        err = args[-1]
        with b.if_then(b.not_(go)):  # one call, its code
            b.ret(b.call(body, args + [i64(0), n0]))
        rec1 = extra[0]
        b.store(i64(0), rec1)
        b.call(run2, [task, pack_context(b, slot, args + [n0] + extra)])
        with b.if_then(b.icmp_unsigned("!=", b.load(err), i64(0))):
            b.ret(b.trunc(b.load(err), I32))
        with b.if_then(b.icmp_unsigned("!=", b.load(rec1), i64(0))):
            for i in range(4):
                b.store(b.load(b.gep(rec1, [i64(i)], inbounds=True)),
                        b.gep(err, [i64(i)], inbounds=True))
            b.ret(b.trunc(b.load(err), I32))
        b.ret(ir.Constant(I32, ERR_OK))
        self.fn = fn


def emit_elementwise(k: KernelEmitter) -> None:
    n = k.node
    rule = ELEMENT_RULES.get(n.op)
    if n.op in VIEW_OPS or rule is not None:
        def body(idx: list[ir.Value]) -> None:
            k.store_out(idx, k.compute(n, idx))

        if not emit_runs(k, n.shape, body):
            k.loops(n.shape, body, factor=k.inner_factor(n.shape), pads=True)
        return
    raise NotImplementedError(f"no CPU kernel for op {n.op!r}")


def _unit_dims_only(x: Node) -> bool:
    """Whether reshape ``x`` only inserts or drops size-1 dims: it divides no axis, so its
    source's innermost extent says nothing about how to split a loop (``inner_factor``;
    ``[.., 14, 14]`` seen as ``[.., 14, 1, 14, 1]`` before an ``expand``)."""
    def real(shape: Any) -> list[Any]:
        return [d for d in shape if not sh.same(d, 1)]

    a, b = real(x.inputs[0].shape), real(x.shape)
    return len(a) == len(b) and all(sh.same(p, q) for p, q in zip(a, b))


def emit_group(k: KernelEmitter) -> None:
    """One loop for a loop group: each member's value at the index, in order, stored unless
    the member is group-internal."""
    def body(idx: list[ir.Value]) -> None:
        for m in k.members:
            k.node, k.out = m, k.outs.get(m.id)
            v = k.compute(m, idx)
            k.cache[m.id] = v
            if k.out is not None:
                k.store_out(idx, v)
        k.node = k.members[0]

    shape = k.members[0].shape
    if not emit_runs(k, shape, body):
        k.loops(shape, body, factor=k.inner_factor(shape), pads=True)


def loops_into(k: KernelEmitter, shape: tuple, dims: list[int], idx: list[Any], body: Any
                ) -> None:
    def rec(j: int) -> None:
        if j == len(dims):
            body(idx)
            return
        d = dims[j]
        if shape[d] == 1:
            idx[d] = i64(0)
            rec(j + 1)
            return
        with for_range(k.b, i64(0), k.sym(shape[d]), name=f"r{d}") as i:
            idx[d] = i
            k.record_var(i, shape[d])
            rec(j + 1)

    rec(0)


__all__ = ["KernelEmitter", "emit_elementwise", "emit_group", "loops_into", "operands"]
