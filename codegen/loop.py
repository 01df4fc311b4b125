"""A ``scan`` (``graphc/ir/loops.py``) on the CPU: one native loop in the entry function.

Why in the entry function: the body is a graph like a step, planned like one
(``planning.plan`` of the body, kept in ``Plan.bodies``) and lowered to kernels like one,
each an ordinary kernel of the step (shared by key and text with the step's own, streamed to
the compile workers with them). The loop that calls them is glue, as the step's entry
function is glue, so it is emitted there: ``for t in 0..T`` (``T`` read from the symbol table
at run time: one compile serves every length) calls the body's kernels on pointers moved by
``t`` along the stacked operands and results. Nothing is unrolled, so the code and the compile
time do not depend on ``T``.

Memory: the scan's workspace (``scan_workspace``; the planner reserves the largest workspace
of any kernel at ``work``) holds the body's own scratch arena (its intermediates and GEMM
packing), two copies of the carries (step ``t`` reads one and writes the other, so a body
that swaps or passes its carries through never reads what it has overwritten), and one slice
of each stacked output that nothing reads (the body still computes it). The body's results
are committed after its kernels, as a step's are: the next carries into the other copy (a
carry its kernel computes into a buffer of its own is written there directly), the step's
outputs into their slot ``t`` of the stacked results. The initial carries are copied in
before the loop and the final ones out after it.

A failing body kernel (an index check) returns its error code from the entry function at
once; the scan's results are never state written in place (``planning._plan_direct_writes``),
so a failing step still changes nothing.
"""

from __future__ import annotations

import copy
from typing import Any

from llvmlite import ir

from graphc.ir import Node
from graphc.ir import dtypes as dt
from graphc.ir import loops as L
from graphc.ir import shapes as sh

from .abi import TABLE_FIXED, align  # noqa: F401  (TABLE_FIXED: the body table's layout)
from .gemm import choose_tile, degenerate_product, emit_pack_all
from .kernels import Kernel, register
from .llvm_util import F32, F64, I8P, I32, I64, SymEmitter, declare, for_range, i64
from .views import strided_view

# a body product's N * K from which its loop-invariant B is packed once before the loop (the
# GEMM's unpacked path for tiny products, below 8192 multiply-adds, reads B itself)
PREPACK_MIN = 8192
PANEL_MAX = 64  # the widest GEMM panel (NR) of any tile: the packed B's padding bound


def _slice_bytes(shape: tuple, dtype: Any) -> Any:
    return sh.dim(sh.numel(tuple(shape)) * dtype.itemsize)


def prepacked_products(n: Node, body_plan: Any) -> list[tuple[Node, Node, int, tuple]]:
    """The float products of scan ``n``'s body whose B is a loop-invariant operand of the
    scan (a recurrent layer's hidden-state weight): ``(matmul, body input, its position
    among the scan's invariant operands, B's strides over it)``.

    Why: packing B is the GEMM's fixed cost, and at an LSTM's sizes (32 x 256 x 1024 a
    step, a 1 MiB weight) it was 45-56 us of a ~200 us product on a Zen 4 core (1 MiB L2:
    the weight and its packed copy do not both stay there). Packed once before the loop
    (``gemm.emit_pack_all``), every step's product reads the panels in place."""
    body, k, m = n.attrs["body"], n.attrs["carries"], n.attrs["xs"]
    consts = {p.id: i for i, p in enumerate(body.inputs[k + m:])}
    mat = {x.id for x in body_plan.materialized}

    def is_buf(x: Node) -> bool:
        return x.op == "input" or x.id in mat

    out = []
    for u in body_plan.units():
        x = u[0]
        if len(u) != 1 or x.op != "matmul" or len(x.shape) != 2 \
                or x.dtype not in (dt.float32, dt.float64) \
                or any(i.dtype is not x.dtype for i in x.inputs):
            continue
        N, K = x.shape[1], x.inputs[0].shape[-1]
        if not (isinstance(N, int) and isinstance(K, int)) or N * K < PREPACK_MIN \
                or degenerate_product(x.shape[0], N, K):  # (those read B itself)
            continue
        sa, sb = strided_view(x.inputs[0], is_buf), strided_view(x.inputs[1], is_buf)
        if sa is None or sb is None or sb[0].id not in consts or sa[0].id == sb[0].id:
            continue
        out.append((x, sb[0], consts[sb[0].id], tuple(sb[1])))
    return out


def _packed_bytes(x: Node) -> int:
    N, K = x.shape[1], x.inputs[0].shape[-1]
    return -(-N // PANEL_MAX) * PANEL_MAX * K * x.dtype.itemsize


def scan_layout(n: Node, body_plan: Any) -> dict[str, Any]:
    """Byte offsets in the scan's workspace: the body's arena, the two carry copies, the
    spare output slices, the loop-invariant B operands packed once (``packed``, one per
    ``prepacked_products``); and the total (``size``)."""
    body, k = n.attrs["body"], n.attrs["carries"]
    off: Any = align(body_plan.scratch_bytes)
    carries_a, carries_b, spare = [], [], []
    for p in body.inputs[:k]:
        carries_a.append(off)
        off = sh.plus(off, align(_slice_bytes(p.shape, p.dtype)))
    for p in body.inputs[:k]:
        carries_b.append(off)
        off = sh.plus(off, align(_slice_bytes(p.shape, p.dtype)))
    for o in body.outputs[k:]:
        spare.append(off)
        off = sh.plus(off, align(_slice_bytes(o.shape, o.dtype)))
    packed = []
    for x, *_ in prepacked_products(n, body_plan):
        packed.append(off)
        off = sh.plus(off, align(_packed_bytes(x)))
    return {"a": carries_a, "b": carries_b, "spare": spare, "packed": packed, "size": off}


def carries_read(n: Node) -> list[bool]:
    """For each carry of scan ``n``: whether the body reads its value (a carry the body only
    writes, a fresh ``.grad`` of a whole training step, needs no first value copied in)."""
    body, k = n.attrs["body"], n.attrs["carries"]
    read = {x.id for m in body.nodes() for x in m.inputs} | {o.id for o in body.outputs}
    return [p.id in read for p in body.inputs[:k]]


def inplace_carries(n: Node, body_plan: Any) -> set[int]:
    """The carries of scan ``n`` that the planner lets the body overwrite in place
    (``planning.plan(carries=)``: no kernel reads the old value after the one writing the
    new, which reads it pointwise, and the old value is no result). They keep one copy,
    ``a``: an optimizer update of a carried parameter then reads and writes the same lines,
    as a step's in-place update does, instead of streaming two copies."""
    body, k = n.attrs["body"], n.attrs["carries"]
    n_upd = len(body.updates)
    return {i for i, o in enumerate(body.outputs[:k])
            if body_plan.direct.get(o.id) == n_upd + i}


def _no_kernel(k: Any) -> None:
    raise AssertionError("a scan is emitted by codegen.loop.emit_scan, not as a kernel")


# scan and scan_out are served by the loop (``emit_scan``), not by a kernel function: the
# registry entry tells the planner they are materialized and have no elementwise rule
KERNEL = register(Kernel("loop", ("scan", "scan_out"), _no_kernel))


def emit_scan(lower: Any, b: ir.IRBuilder, unit: list[Node], bufs: dict[int, ir.Value],
              work: ir.Value, syms_ptr: ir.Value, err: ir.Value, sym: Any) -> None:
    """Emit the loop of the scan ``unit[0]`` (``unit[1:]``: its ``scan_out`` nodes) into the
    entry function being built with ``b`` (see the module docstring)."""
    s = unit[0]
    body, k, m = s.attrs["body"], s.attrs["carries"], s.attrs["xs"]
    bp = lower.plan.bodies[s.id]
    lay = scan_layout(s, bp)
    carries0, xs, consts = L.operand_groups(s)
    alias = lower.plan.aliases

    def operand(x: Node) -> ir.Value:
        return bufs[x.id] if x.id in bufs else bufs[alias[x.id]]
    outs = {o.attrs["index"]: o for o in unit[1:]}
    memcpy = declare(lower.module, "memcpy", I8P, [I8P, I8P, I64])
    steps = sym(L.trip_count(s))

    def at(base: ir.Value, off: Any) -> ir.Value:
        return b.gep(base, [sym(off)], inbounds=True)

    a = [at(work, o) for o in lay["a"]]
    bb = [at(work, o) for o in lay["b"]]
    spare = [at(work, o) for o in lay["spare"]]
    cbytes = [sym(_slice_bytes(p.shape, p.dtype)) for p in body.inputs[:k]]
    for dst, src, nb, read in zip(a, carries0, cbytes, carries_read(s)):
        if read:
            b.call(memcpy, [dst, operand(src), nb])
    x_step = [sym(_slice_bytes(x.shape[1:], x.dtype)) for x in xs]
    y_step = [sym(_slice_bytes(o.shape, o.dtype)) for o in body.outputs[k:]]
    scratch = work  # the body's arena starts the workspace
    body_work = at(scratch, bp.work_offset)
    sub = copy.copy(lower)  # the body's plan, the step's module and kernel tables
    sub.plan, sub.graph = bp, body
    sub.name_prefix = f"{lower.name_prefix}s{lower.plan.node_index[s.id]}_"
    sub.mat_ids = {n.id for n in bp.materialized}
    # loop-invariant B operands of the body's products, packed once here (their kernels,
    # ``matmul_prepacked``, get the packed copy in the operand's place)
    packed_arg: dict[tuple[int, int], ir.Value] = {}
    for (x, w, pos, st), off in zip(prepacked_products(s, bp), lay["packed"]):
        elt = F32 if x.dtype is dt.float32 else F64
        dst = at(work, off)
        src = operand(consts[pos])
        N, K = x.shape[1], x.inputs[0].shape[-1]
        emit_pack_all(b, lower.module, choose_tile(N, lower.wide, x.dtype.itemsize), elt,
                      (b.bitcast(src, elt.as_pointer()), sym(st[-2]), sym(st[-1])),
                      b.bitcast(dst, elt.as_pointer()), i64(N), i64(K))
        packed_arg[(x.id, w.id)] = dst
    sub.prepacked = frozenset(x for x, _ in packed_arg)
    # the body's units: kernels, or scans of its own (emitted in place, inside this loop)
    units = [(u, None) if u[0].op == "scan" else (u, sub.kernel_for_unit(u))
             for u in bp.units()]
    reverse = bool(s.attrs.get("reverse"))
    # every size and offset before the loop: ``sym`` caches the values it emits, and one
    # emitted inside the loop would not dominate a later use after it
    fixed = {n.id: at(scratch, bp.offsets[n.id]) for n in bp.materialized
             if n.id not in bp.virtual and n.id not in bp.direct}
    inplace = inplace_carries(s, bp)
    # carries a body kernel computes into a buffer of its own are written straight into the
    # next carry copy (nothing reads that copy during the step: it holds the step before's
    # carries), which saves copying every carried buffer once per step (a training step's
    # parameters and optimizer state, when the loop runs whole steps)
    # a per-step output no ``scan_out`` reads is neither stored nor copied (the body
    # still computes it)
    live = [i for i in range(len(body.outputs)) if i < k or i in outs]
    uses: dict[int, int] = {}
    ys_uses: dict[int, int] = {}
    for i in live:
        o = body.outputs[i]
        uses[o.id] = uses.get(o.id, 0) + 1
        if i >= k:
            ys_uses[o.id] = ys_uses.get(o.id, 0) + 1
    body_ins = {p.id for p in body.inputs}
    direct = {i: o for i, o in enumerate(body.outputs[:k])
              if o.id in fixed and uses[o.id] == 1 and o.id not in body_ins}
    for i in inplace:
        direct[i] = body.outputs[i]
    # likewise a stacked output its kernel computes into a buffer of its own (an LSTM's
    # gates, stored for the backward pass): no copy per step and output. One that is also
    # a carry (the hidden state) is computed into its slot, and the carry copied from there
    direct_ids = {o.id for o in direct.values()}
    stacked = {i: body.outputs[i] for i in live if i >= k
               and body.outputs[i].id in fixed and ys_uses[body.outputs[i].id] == 1
               and body.outputs[i].id not in body_ins
               and body.outputs[i].id not in direct_ids}
    with for_range(b, i64(0), steps, name="scan") as t:
        pos = b.sub(b.sub(steps, i64(1)), t) if reverse else t
        odd = b.trunc(b.and_(t, i64(1)), ir.IntType(1))
        cur = [x if i in inplace else b.select(odd, y, x) for i, (x, y) in enumerate(zip(a, bb))]
        nxt = [x if i in inplace else b.select(odd, x, y) for i, (x, y) in enumerate(zip(a, bb))]
        env: dict[int, ir.Value] = {}
        for i, p in enumerate(body.inputs):
            if i < k:
                env[p.id] = cur[i]
            elif i < k + m:
                env[p.id] = b.gep(operand(xs[i - k]), [b.mul(pos, x_step[i - k])],
                                  inbounds=True)
            else:
                env[p.id] = operand(consts[i - k - m])
        for i, o in direct.items():
            env[o.id] = nxt[i]
        for i, o in stacked.items():  # straight into this step's slot of the result
            res = outs.get(i)
            env[o.id] = (b.gep(bufs[res.id], [b.mul(pos, y_step[i - k])], inbounds=True)
                         if res is not None else spare[i - k])
        for i, v in fixed.items():
            env.setdefault(i, v)
        for u, kernel in units:
            if kernel is None:  # a nested scan: its sizes are emitted where it runs
                emit_scan(sub, b, u, env, body_work, syms_ptr, err, SymEmitter(b, sym.syms))
                continue
            kfn, stored, buffers = kernel
            args = [env[x.id] for x in stored] + [
                packed_arg.get((u[0].id, x.id), env[x.id]) for x in buffers] + [
                body_work, syms_ptr, err]
            rc = b.call(kfn, args)
            if kfn.name not in lower._never_fails:
                bad = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
                with b.if_then(bad, likely=False):
                    b.ret(rc)
        # commit the step: next carries, then this step's slot of each stacked output
        for i, o in enumerate(body.outputs):
            if i in direct or i in stacked or (i >= k and i not in outs):
                continue  # already there, or read by nothing
            if i < k:
                dst, nb = nxt[i], cbytes[i]
            else:
                j = i - k
                res = outs.get(i)
                dst = (b.gep(bufs[res.id], [b.mul(pos, y_step[j])], inbounds=True)
                       if res is not None else spare[j])
                nb = y_step[j]
            b.call(memcpy, [dst, env[o.id], nb])
    odd = b.trunc(b.and_(steps, i64(1)), ir.IntType(1))
    for i in range(k):
        res = outs.get(i)
        if res is not None:
            last = a[i] if i in inplace else b.select(odd, bb[i], a[i])
            b.call(memcpy, [bufs[res.id], last, cbytes[i]])
    # the counters the shallow copy advanced (the kernel tables themselves are shared)
    lower.kernels_emitted, lower._pending_chars = sub.kernels_emitted, sub._pending_chars


__all__ = ["KERNEL", "carries_read", "emit_scan", "inplace_carries", "prepacked_products",
           "scan_layout"]
