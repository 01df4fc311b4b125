"""Fused scaled dot-product attention for the CPU backend (``attention``, ``attention_grad``),
registered in ``codegen.kernels``.

The composite form (matmul, scale, mask, softmax, matmul) stores the ``[.., L, S]`` scores
and weights and passes over them five to ten times per direction; at 256 positions that was
40% of a small GPT step. These kernels follow FlashAttention's row-wise form instead: per
head and per block of ``R`` query rows, the scores of those rows against the keys they see
(all keys, or keys ``j <= i`` when causal: masked key blocks are skipped, not computed) live
in a per-thread row buffer of ``R x S`` floats, so nothing of size ``L x S`` is ever stored.

Every product is a broadcast-FMA loop over vector registers, as in the GEMM microkernel:

- scores: keys along the vector lanes, ``s[r, j:j+VW] += q[r, e] * K^T[e, j:j+VW]`` for
  the ``R`` rows at once (the head's keys are packed transposed, once per head);
- ``P V`` (and the backward's ``dS K``): head size along the lanes,
  ``o[r, :] += p[r, j] * V[j, :]``;
- the backward's ``dK += dS^T Q``, ``dV += P^T dO``: the ``R`` rows' ``q`` and ``dO``
  vectors stay in registers while the key rows' accumulators stream through L1.

An optional additive mask ``[.., L, S]`` (any strided view: a key-padding row broadcast over
heads and rows has zero strides) is packed per block of rows and added to the scaled scores,
as the composite adds it; rows it masks completely give zeros. Dropout (a seed operand and
the ``dropout`` rate) multiplies each weight by ``dropout()``'s keep factor, the ``rand``
op's value at the weight's index in ``[.., L, S]`` below ``1 - p``
(``codegen.elementwise.counter_uniform``), and by ``1 / (1 - p)``, in the order
``dropout()`` does; the backward redraws the same factors.

The backward recomputes the scores and softmax from q and k (it takes no saved
statistics), forms ``ds = p * (dp - sum(p * dp))`` (softmax's derivative, as the
composite's), and returns ``[dq; dk; dv]`` stacked along the row axis (one output).
Heads are split between the two threads, each with its own part of the workspace; a head's
results do not depend on the split. Summation orders differ from the composite's GEMMs and
reductions, so results agree with it (and with PyTorch's flash kernel) to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir

from graphc.ir import Node
from graphc.ir import ops as gops
from graphc.ir import shapes as sh

from .elementwise import counter_uniform
from .kernels import Kernel, register
from .llvm_util import F32, F64, I64, declare, fconst, for_range, i64
from .parallel import KernelTask
from .views import StridedOperand
from .vmath import VMath

ROWS = 8  # query rows per block (accumulators: ROWS x the vectors of one chunk)
ALIGN = 64
PAR_MIN_MACS = 1 << 16  # below this a head split is not worth waking the second thread


def _vw(wide: bool, itemsize: int) -> int:
    return (64 if wide else 32) // itemsize


def _ft(n: Node) -> ir.Type:
    """The kernel's float type: float32 or float64 (the operands' dtype)."""
    return F64 if n.inputs[0].dtype.itemsize == 8 else F32


def _layout(n: Node, wide: bool) -> dict[str, Any]:
    """Per-thread workspace regions (in floats, each a multiple of the vector width) and
    the padded sizes: ``Sp`` keys rounded up to the lanes, ``Ep`` the head size."""
    q, k = n.inputs[0], n.inputs[1]
    itemsize = q.dtype.itemsize
    vw = _vw(wide, itemsize)
    E = int(q.shape[-1])
    Ep = -(-E // vw) * vw
    Sp = sh.round_up(k.shape[-2], vw)
    R = ROWS
    if n.op == "attention":
        regions = [("kt", sh.scale(Sp, E)), ("vp", sh.scale(Sp, Ep)),
                   ("rows", sh.scale(Sp, R)), ("qp", Ep * R), ("tmp", Ep * R)]
    else:
        regions = [("kt", sh.scale(Sp, E)), ("vt", sh.scale(Sp, E)), ("kp", sh.scale(Sp, Ep)),
                   ("dk", sh.scale(Sp, Ep)), ("dv", sh.scale(Sp, Ep)),
                   ("p", sh.scale(Sp, R)), ("dp", sh.scale(Sp, R)),
                   ("qp", Ep * R), ("gp", Ep * R), ("tmp", Ep * R)]
    mask_at, seed_at = _extras(n)
    if mask_at is not None:  # the block's rows of the additive mask, packed
        regions.append(("mk", sh.scale(Sp, R)))
    if seed_at is not None and n.op == "attention_grad":  # the dropped weights, for dV
        regions.append(("pd", sh.scale(Sp, R)))
    return {"vw": vw, "E": E, "Ep": Ep, "Sp": Sp, "regions": regions, "itemsize": itemsize}


def _extras(n: Node) -> tuple[int | None, int | None]:
    """Operand positions of the optional additive mask and dropout seed (None: absent)."""
    mask, seed = gops.attention_extras(n.op, n.inputs, n.attrs)
    at = 3 if n.op == "attention" else 4
    mask_at = at if mask is not None else None
    seed_at = (at + (mask is not None)) if seed is not None else None
    return mask_at, seed_at


def _part_floats(lay: dict[str, Any]) -> Any:
    return sh.plus(*[size for _, size in lay["regions"]])


def workspace(n: Node, wide: bool) -> Any:
    """Two parts (one per thread) of the layout's regions, plus alignment slack."""
    lay = _layout(n, wide)
    return sh.plus(sh.scale(_part_floats(lay), 2 * lay["itemsize"]), 2 * ALIGN)


class _Vec:
    """Vector helpers on one builder: loads/stores at float offsets, broadcasts, FMA."""

    def __init__(self, b: ir.IRBuilder, vw: int, ft: ir.Type) -> None:
        self.b = b
        self.vw = vw
        self.ft = ft
        self.t = ir.VectorType(ft, vw)
        sfx = f"v{vw}f{32 if ft == F32 else 64}"
        self._fma = declare(b.module, f"llvm.fma.{sfx}", self.t, [self.t] * 3)
        self._max = declare(b.module, f"llvm.maxnum.{sfx}", self.t, [self.t] * 2)
        self._rmax = declare(b.module, f"llvm.vector.reduce.fmax.{sfx}", ft, [self.t])

    def ptr(self, base: ir.Value, off: ir.Value) -> ir.Value:
        return self.b.bitcast(self.b.gep(base, [off], inbounds=True), self.t.as_pointer())

    def load(self, base: ir.Value, off: ir.Value) -> ir.Value:
        return self.b.load(self.ptr(base, off), align=4)

    def store(self, v: ir.Value, base: ir.Value, off: ir.Value) -> None:
        self.b.store(v, self.ptr(base, off), align=4)

    def splat(self, x: ir.Value) -> ir.Value:
        """``x`` (a float or an i64) in every lane."""
        b = self.b
        t = self.t if x.type == self.ft else ir.VectorType(x.type, self.vw)
        one = b.insert_element(ir.Constant(t, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
        return b.shuffle_vector(one, ir.Constant(t, ir.Undefined),
                                ir.Constant(ir.VectorType(ir.IntType(32), self.vw), [0] * self.vw))

    def const(self, v: float) -> ir.Value:
        return ir.Constant(self.t, [float(v)] * self.vw)

    def fma(self, a: ir.Value, x: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.call(self._fma, [a, x, c])

    def max(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.call(self._max, [a, c])

    def hmax(self, a: ir.Value) -> ir.Value:
        return self.b.call(self._rmax, [a])

    def lane_index(self, j0: ir.Value) -> ir.Value:
        """The vector ``j0 + [0, 1, ..., vw-1]`` (i64 lanes)."""
        vt = ir.VectorType(I64, self.vw)
        return self.b.add(self.splat(j0), ir.Constant(vt, list(range(self.vw))))


def _gep(b: ir.IRBuilder, p: ir.Value, off: ir.Value) -> ir.Value:
    return b.gep(p, [off], inbounds=True)


def _mul(b: ir.IRBuilder, x: ir.Value, y: ir.Value | int) -> ir.Value:
    return b.mul(x, y if isinstance(y, ir.Value) else i64(y))


def _add(b: ir.IRBuilder, x: ir.Value, y: ir.Value | int) -> ir.Value:
    return b.add(x, y if isinstance(y, ir.Value) else i64(y))


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


class _Head:
    """What the per-head code needs inside the thread task: builder, sizes, operands at the
    current head's offsets, and the part's workspace regions."""

    def __init__(self, task: KernelTask, lay: dict[str, Any], ops: list[StridedOperand],
                 sizes: dict[str, ir.Value], region: dict[str, ir.Value], scale: float,
                 causal: bool, ft: ir.Type) -> None:
        self.task = task
        self.b = task.b
        self.ft = ft
        self.v = _Vec(task.b, lay["vw"], ft)
        self.vw, self.E, self.Ep = lay["vw"], lay["E"], lay["Ep"]
        self.ops = ops
        self.L, self.S, self.Sp = sizes["L"], sizes["S"], sizes["Sp"]
        self.reg = region
        self.scale = scale
        self.causal = causal
        self.mask: int | None = None  # operand index of the additive mask
        self.seed: ir.Value | None = None  # dropout's seed (the rand op's), and its rate
        self.dropout = 0.0
        self.head: ir.Value = i64(0)  # the head (flat batch index) being computed
        self.base: list[ir.Value] = []

    # element pointers of operand ``o`` (0 q, 1 k, 2 v, 3 grad) at (row, e)
    def at(self, o: int, row: ir.Value, e: ir.Value | int) -> ir.Value:
        b, op = self.b, self.ops[o]
        off = _add(b, self.base[o], _mul(b, row, op.ir[-2]))
        if not (isinstance(e, int) and e == 0):
            off = _add(b, off, _mul(b, e if isinstance(e, ir.Value) else i64(e), op.ir[-1]))
        return _gep(b, op.ptr, off)

    def pack_t(self, o: int, dst: ir.Value) -> None:
        """dst[e * Sp + j] = operand[j, e] for j < S, zeros up to Sp (keys along lanes)."""
        b = self.b
        with for_range(b, i64(0), i64(self.E), name="pe") as e:
            with for_range(b, i64(0), self.Sp, name="pj") as j:
                inside = b.icmp_signed("<", j, self.S)
                x = b.load(self.at(o, b.select(inside, j, i64(0)), e))
                b.store(b.select(inside, x, fconst(self.ft, 0.0)),
                        _gep(b, dst, _add(b, _mul(b, e, self.Sp), j)))

    def pack_rows(self, o: int, dst: ir.Value, rows: ir.Value) -> None:
        """dst[j * Ep + e] = operand[j, e] for j < rows, e < E; zeros in the padding."""
        b = self.b
        with for_range(b, i64(0), rows, name="pr") as j:
            with for_range(b, i64(0), i64(self.Ep), name="pc") as e:
                inside = b.icmp_signed("<", e, i64(self.E))
                x = b.load(self.at(o, j, b.select(inside, e, i64(0))))
                b.store(b.select(inside, x, fconst(self.ft, 0.0)),
                        _gep(b, dst, _add(b, _mul(b, j, self.Ep), e)))

    def zero(self, dst: ir.Value, count: ir.Value) -> None:
        b = self.b
        with for_range(b, i64(0), count, name="z", step=i64(self.vw)) as j:
            self.v.store(self.v.const(0.0), dst, j)

    def key_bound(self, i0: ir.Value, r: int) -> ir.Value:
        """Keys row ``i0 + r`` sees: S, or min(S, i0 + r + 1) when causal."""
        if not self.causal:
            return self.S
        return _min(self.b, self.S, _add(self.b, i0, r + 1))

    def pack_block(self, o: int, i0: ir.Value, R: int, dst: ir.Value) -> None:
        """dst[r * Ep + e] = operand[i0 + r, e] (zeros in the padding): the block's rows,
        contiguous, for the broadcasts of the score loops and the dK / dV updates."""
        b = self.b
        with for_range(b, i64(0), i64(R), name="br") as r:
            row = _add(b, i0, r)
            with for_range(b, i64(0), i64(self.Ep), name="be") as e:
                inside = b.icmp_signed("<", e, i64(self.E))
                x = b.load(self.at(o, row, b.select(inside, e, i64(0))))
                b.store(b.select(inside, x, fconst(self.ft, 0.0)),
                        _gep(b, dst, _add(b, _mul(b, r, self.Ep), e)))

    def keep(self, lin: ir.Value) -> ir.Value:
        """dropout()'s keep factor (1 or 0, the kernel's float type) for element ``lin`` of
        the ``[*b, L, S]`` weights: ``rand < 1 - p`` with the ``rand`` op's value there
        (``codegen.elementwise``'s counter hash of the index and the seed)."""
        b = self.b
        u = counter_uniform(b, lin, self.seed)
        kept = b.fcmp_ordered("<", u, fconst(F32, float(np.float32(1.0 - self.dropout))))
        return b.select(kept, fconst(self.ft, 1.0), fconst(self.ft, 0.0))

    def drop_rows(self, i0: ir.Value, R: int, nk: ir.Value, src: ir.Value, dst: ir.Value,
                  grad: bool) -> None:
        """dst[r, j] = (src[r, j] * keep) * c, dropout()'s weights (c = 1 / (1 - p)), or with
        ``grad`` (src[r, j] * c) * keep, the VJP of that product, for the block's keys."""
        b = self.b
        nv = _mul(b, b.udiv(_add(b, nk, self.vw - 1), i64(self.vw)), self.vw)
        c = fconst(self.ft, float(np.asarray(1.0 / (1.0 - self.dropout),
                                             np.float32 if self.ft == F32 else np.float64)))
        with for_range(b, i64(0), i64(R), name="dr") as r:
            row_lin = _mul(b, _add(b, _mul(b, self.head, self.L), _add(b, i0, r)), self.S)
            row = _mul(b, r, self.Sp)
            with for_range(b, i64(0), nv, name="dj") as j:
                kf = self.keep(_add(b, row_lin, j))
                x = b.load(_gep(b, src, _add(b, row, j)))
                y = b.fmul(b.fmul(x, c), kf) if grad else b.fmul(b.fmul(x, kf), c)
                b.store(y, _gep(b, dst, _add(b, row, j)))

    def pack_mask(self, i0: ir.Value, R: int, nk: ir.Value, dst: ir.Value) -> None:
        """dst[r * Sp + j] = mask[i0 + r, j] for the block's keys (whole vectors; zeros past
        S, where the key bound masks the lanes anyway). The mask is any strided view (a
        broadcast key-padding row has a zero row stride)."""
        b, o = self.b, self.mask
        nv = _mul(b, b.udiv(_add(b, nk, self.vw - 1), i64(self.vw)), self.vw)
        with for_range(b, i64(0), i64(R), name="mr") as r:
            row = _add(b, i0, r)
            with for_range(b, i64(0), nv, name="mj") as j:
                inside = b.icmp_signed("<", j, self.S)
                x = b.load(self.at(o, row, b.select(inside, j, i64(0))))
                b.store(b.select(inside, x, fconst(self.ft, 0.0)),
                        _gep(b, dst, _add(b, _mul(b, r, self.Sp), j)))

    def scores(self, rows: ir.Value, packed_t: ir.Value, i0: ir.Value, R: int, nk: ir.Value,
               dst: ir.Value, scale: float | None, track_max: bool,
               mask: ir.Value | None = None) -> list[ir.Value]:
        """dst[r * Sp + j] = scale * dot(rows[r], packed_t[:, j]) for the block's ``nk``
        keys (whole vectors), lanes past row r's key bound set to -inf when ``track_max``
        (scores) or left as computed (dp); returns the rows' maxima.

        The loop over the head size is a run-time loop, as in a GEMM microkernel: each step
        loads one vector of ``packed_t`` and broadcasts one element of each row from L1, so
        the accumulators are all the registers it keeps."""
        b, v = self.b, self.v
        nvec = b.udiv(_add(b, nk, self.vw - 1), i64(self.vw))
        m_slots = []
        for _r in range(R):
            slot = self.task.alloca(v.t)
            b.store(v.const(float("-inf")), slot)
            m_slots.append(slot)
        bounds = [v.splat(self.key_bound(i0, r)) for r in range(R)] if track_max else []
        acc_slots = [self.task.alloca(v.t) for _ in range(R)]
        with for_range(b, i64(0), nvec, name="sj") as jb:
            j0 = _mul(b, jb, self.vw)
            for a in acc_slots:
                b.store(v.const(0.0), a)
            with for_range(b, i64(0), i64(self.E), name="se") as e:
                kt = v.load(packed_t, _add(b, _mul(b, e, self.Sp), j0))
                for r in range(R):
                    qe = b.load(_gep(b, rows, _add(b, e, r * self.Ep)))
                    b.store(v.fma(v.splat(qe), kt, b.load(acc_slots[r])), acc_slots[r])
            lanes = v.lane_index(j0) if track_max else None
            for r in range(R):
                s = b.load(acc_slots[r])
                if scale is not None:
                    s = b.fmul(s, v.const(scale))
                if mask is not None:  # scores * scale + mask, the composite's order
                    s = b.fadd(s, v.load(mask, _add(b, _mul(b, i64(r), self.Sp), j0)))
                if track_max:
                    live = b.icmp_signed("<", lanes, bounds[r])
                    s = b.select(live, s, v.const(float("-inf")))
                    b.store(v.max(b.load(m_slots[r]), s), m_slots[r])
                v.store(s, dst, _add(b, _mul(b, i64(r), self.Sp), j0))
        return [v.hmax(b.load(m)) for m in m_slots] if track_max else []

    def softmax_rows(self, buf: ir.Value, R: int, nk: ir.Value, maxes: list[ir.Value],
                     normalize: bool) -> list[ir.Value]:
        """buf[r, j] = exp(buf[r, j] - max_r) for j < nk (whole vectors), then divided by
        the row sum when ``normalize``; returns 1 / sum (0 for a row without keys). One
        run-time loop over the rows (the maxima and results go through a small array): the
        exp loop is emitted once, not once per row, which keeps LLVM's work small."""
        b = self.b
        nv = _mul(b, b.udiv(_add(b, nk, self.vw - 1), i64(self.vw)), self.vw)
        arr_t = ir.ArrayType(self.ft, R)
        marr, iarr = self.task.alloca(arr_t), self.task.alloca(arr_t)
        for r in range(R):
            b.store(maxes[r], b.gep(marr, [i64(0), i64(r)], inbounds=True))
        vm = VMath(b, b.module)
        slot = self.task.alloca(self.ft)
        with for_range(b, i64(0), i64(R), name="sr") as r:
            m = b.load(b.gep(marr, [i64(0), r], inbounds=True))
            dead = b.fcmp_ordered("==", m, fconst(self.ft, float("-inf")))
            m = b.select(dead, fconst(self.ft, 0.0), m)
            b.store(fconst(self.ft, 0.0), slot)
            row = _mul(b, r, self.Sp)
            with for_range(b, i64(0), nv, name="ex") as j:
                p = _gep(b, buf, _add(b, row, j))
                x = vm.exp(b.fsub(b.load(p), m))
                b.store(x, p)
                b.store(b.fadd(b.load(slot), x, flags=("reassoc", "nsz")), slot)
            total = b.load(slot)
            live = b.fcmp_ordered(">", total, fconst(self.ft, 0.0))
            if normalize:
                den = b.select(live, total, fconst(self.ft, 1.0))
                with for_range(b, i64(0), nv, name="nm") as j:
                    p = _gep(b, buf, _add(b, row, j))
                    b.store(b.select(live, b.fdiv(b.load(p), den), fconst(self.ft, 0.0)), p)
            inv = b.select(live, b.fdiv(fconst(self.ft, 1.0), total), fconst(self.ft, 0.0))
            b.store(inv, b.gep(iarr, [i64(0), r], inbounds=True))
        return [b.load(b.gep(iarr, [i64(0), i64(r)], inbounds=True)) for r in range(R)]

    def weighted_rows(self, wbuf: ir.Value, R: int, nk: ir.Value, src: ir.Value,
                      sink: Callable[[int, int, ir.Value], None]) -> None:
        """For each row r: out[r, :] = sum_j wbuf[r, j] * src[j, :] (src rows of Ep floats),
        handed to ``sink(r, c, vector)`` chunk by chunk (c: vector index along E)."""
        b, v = self.b, self.v
        nvec = self.Ep // self.vw
        chunk = max(1, (16 if self.vw == 16 else 8) // R)  # R x chunk accumulators
        for c0 in range(0, nvec, chunk):
            cs = range(c0, min(nvec, c0 + chunk))
            slots = {(r, c): self.task.alloca(v.t) for r in range(R) for c in cs}
            for s in slots.values():
                b.store(v.const(0.0), s)
            with for_range(b, i64(0), nk, name="wj") as j:
                rowv = [v.load(src, _add(b, _mul(b, j, self.Ep), c * self.vw)) for c in cs]
                for r in range(R):
                    w = v.splat(b.load(_gep(b, wbuf, _add(b, _mul(b, i64(r), self.Sp), j))))
                    for ci, c in enumerate(cs):
                        s = slots[(r, c)]
                        b.store(v.fma(w, rowv[ci], b.load(s)), s)
            for r in range(R):
                for c in cs:
                    sink(r, c, b.load(slots[(r, c)]))

    def store_row(self, out: ir.Value, row_off: ir.Value, c: int, vec: ir.Value,
                  tmp: ir.Value) -> None:
        """Columns ``c * vw ..`` of an output row of E floats at ``out + row_off``."""
        b, v = self.b, self.v
        lo = c * self.vw
        if lo + self.vw <= self.E:
            v.store(vec, out, _add(b, row_off, lo))
            return
        v.store(vec, tmp, i64(0))
        for e in range(lo, self.E):
            b.store(b.load(_gep(b, tmp, i64(e - lo))), _gep(b, out, _add(b, row_off, e)))


def _batch(k: Any, n: Node) -> tuple[list[Any], ir.Value]:
    """Batch dims of the operands (everything before the last two) and their product."""
    dims = list(n.inputs[0].shape[:-2])
    return dims, k.sym(sh.numel(dims)) if dims else i64(1)


def _head_offsets(h: _Head, dims: list[Any], dim_vals: list[ir.Value], bi: ir.Value) -> None:
    """Each operand's element offset of head ``bi`` (its batch index, row-major over dims)."""
    b = h.b
    idx = []
    rest = bi
    for d in reversed(dim_vals):
        idx.append(b.urem(rest, d))
        rest = b.udiv(rest, d)
    idx.reverse()
    h.base = []
    for op in h.ops:
        off: ir.Value = i64(0)
        for i, s in zip(idx, op.ir[:-2]):
            off = _add(b, off, _mul(b, i, s))
        h.base.append(off)


def _setup(k: Any, name: str) -> tuple[_Head, ir.Value, list[Any], list[ir.Value], ir.Value]:
    """The thread task over heads and its per-part ``_Head``; returns it with the head range."""
    n = k.node
    lay = _layout(n, k.L.wide)
    b = k.b
    ops = [StridedOperand(k, x) for x in n.inputs]
    q, kk = n.inputs[0], n.inputs[1]
    L, S, Sp = k.sym(q.shape[-2]), k.sym(kk.shape[-2]), k.sym(lay["Sp"])
    dims, nb = _batch(k, n)
    dim_vals = [k.sym(d) for d in dims]
    part = k.sym(_part_floats(lay))
    base = b.inttoptr(b.and_(b.add(b.ptrtoint(k.work, I64), i64(ALIGN - 1)), i64(-ALIGN)),
                      _ft(n).as_pointer())
    # each region's offset in the part, computed in the kernel (sizes may be symbolic)
    offs: list[ir.Value] = []
    acc: Any = 0
    for _, size in lay["regions"]:
        offs.append(k.sym(acc) if not isinstance(acc, int) else i64(acc))
        acc = sh.plus(acc, size)
    seed_at = _extras(n)[1]
    seed = b.load(ops[seed_at].ptr) if seed_at is not None else i64(0)  # dropout's seed
    values = [base, part, L, S, Sp, nb, k.out, seed, *dim_vals, *offs] + [
        x for o in ops for x in o.values()]
    task = KernelTask(k, name, values)
    tb = task.b
    # this part's regions: part 0 at base, part 1 after it
    start = tb.select(task.first, i64(0), task[part])
    pbase = _gep(tb, task[base], start)
    region = {rname: _gep(tb, pbase, task[o]) for (rname, _), o in zip(lay["regions"], offs)}
    # (sizes computed in the kernel's entry block travel into the task as values)
    sizes = {"L": task[L], "S": task[S], "Sp": task[Sp]}
    h = _Head(task, lay, [o.in_task(task) for o in ops], sizes, region,
              float(n.attrs["scale"]), bool(n.attrs["causal"]), _ft(n))
    h.mask, seed_at = _extras(n)
    if seed_at is not None:
        h.seed = task[seed]
        h.dropout = float(n.attrs["dropout"])
    lo, hi = task.split(task[nb])
    macs = b.mul(b.mul(nb, L), b.mul(S, i64(lay["E"])))
    par = b.and_(b.icmp_signed(">=", macs, i64(PAR_MIN_MACS)), b.icmp_signed(">=", nb, i64(2)))
    return h, par, dims, [task[d] for d in dim_vals], (lo, hi, task[k.out])


def _row_blocks(h: _Head, body: Callable[[ir.Value, int], None]) -> None:
    """``body(i0, R)`` for blocks of ROWS query rows, then single rows for the remainder."""
    b = h.b
    full = _mul(b, b.udiv(h.L, i64(ROWS)), ROWS)
    with for_range(b, i64(0), full, name="blk", step=i64(ROWS)) as i0:
        body(i0, ROWS)
    with for_range(b, full, h.L, name="row") as i0:
        body(i0, 1)


def _block_keys(h: _Head, i0: ir.Value, R: int) -> ir.Value:
    """Keys any row of the block sees (causal: up to the block's last row)."""
    return h.key_bound(i0, R - 1)


def emit_forward(k: Any) -> None:
    h, par, dims, dim_vals, (lo, hi, out) = _setup(k, "attn")
    b, reg = h.b, h.reg
    with for_range(b, lo, hi, name="head") as bi:
        _head_offsets(h, dims, dim_vals, bi)
        h.head = bi
        h.pack_t(1, reg["kt"])
        h.pack_rows(2, reg["vp"], h.S)
        head_out = _mul(b, bi, _mul(b, h.L, h.E))

        def block(i0: ir.Value, R: int) -> None:
            nk = _block_keys(h, i0, R)
            h.pack_block(0, i0, R, reg["qp"])
            mk = None
            if h.mask is not None:
                mk = reg["mk"]
                h.pack_mask(i0, R, nk, mk)
            maxes = h.scores(reg["qp"], reg["kt"], i0, R, nk, reg["rows"], h.scale, True, mk)
            inv = h.softmax_rows(reg["rows"], R, nk, maxes, False)
            if h.seed is not None:  # dropout on the (unnormalised) weights, in place
                h.drop_rows(i0, R, nk, reg["rows"], reg["rows"], False)

            def sink(r: int, c: int, vec: ir.Value) -> None:
                row_off = _add(b, head_out, _mul(b, _add(b, i0, r), h.E))
                h.store_row(out, row_off, c, b.fmul(vec, h.v.splat(inv[r])), reg["tmp"])

            h.weighted_rows(reg["rows"], R, nk, reg["vp"], sink)

        _row_blocks(h, block)
    h.task.finish()
    h.task.dispatch(par)


def emit_backward(k: Any) -> None:
    h, par, dims, dim_vals, (lo, hi, out) = _setup(k, "attn_grad")
    b, v, reg = h.b, h.v, h.reg
    scale = h.scale
    with for_range(b, lo, hi, name="head") as bi:
        _head_offsets(h, dims, dim_vals, bi)
        h.head = bi
        h.pack_t(1, reg["kt"])
        h.pack_t(2, reg["vt"])
        h.pack_rows(1, reg["kp"], h.S)
        span = _mul(b, h.Sp, h.Ep)
        h.zero(reg["dk"], span)
        h.zero(reg["dv"], span)
        rows_total = _add(b, h.L, _mul(b, h.S, 2))
        head_out = _mul(b, bi, _mul(b, rows_total, h.E))

        def block(i0: ir.Value, R: int) -> None:
            nk = _block_keys(h, i0, R)
            # the block's q and dO rows, padded: the score loops' broadcasts and the dK / dV
            # updates read them
            h.pack_block(0, i0, R, reg["qp"])
            h.pack_block(3, i0, R, reg["gp"])
            mk = None
            if h.mask is not None:
                mk = reg["mk"]
                h.pack_mask(i0, R, nk, mk)
            maxes = h.scores(reg["qp"], reg["kt"], i0, R, nk, reg["p"], scale, True, mk)
            h.softmax_rows(reg["p"], R, nk, maxes, True)
            h.scores(reg["gp"], reg["vt"], i0, R, nk, reg["dp"], None, False)
            pv = reg["p"]  # the weights dV sums (dropout's, when there is dropout)
            if h.seed is not None:  # dp through the dropout; dV from the dropped weights
                h.drop_rows(i0, R, nk, reg["dp"], reg["dp"], True)
                h.drop_rows(i0, R, nk, reg["p"], reg["pd"], False)
                pv = reg["pd"]
            # ds = p * (dp - sum_j p dp), in place of dp (masked lanes: p = 0, so ds = 0)
            nv = _mul(b, b.udiv(_add(b, nk, h.vw - 1), i64(h.vw)), h.vw)
            slot = h.task.alloca(h.ft)
            with for_range(b, i64(0), i64(R), name="dr") as r:
                row = _mul(b, r, h.Sp)
                b.store(fconst(h.ft, 0.0), slot)
                with for_range(b, i64(0), nv, name="dd") as j:
                    pj = b.load(_gep(b, reg["p"], _add(b, row, j)))
                    dj = b.load(_gep(b, reg["dp"], _add(b, row, j)))
                    b.store(b.fadd(b.load(slot), b.fmul(pj, dj), flags=("reassoc", "nsz")), slot)
                d = b.load(slot)
                with for_range(b, i64(0), nv, name="ds") as j:
                    pp = _gep(b, reg["dp"], _add(b, row, j))
                    pj = b.load(_gep(b, reg["p"], _add(b, row, j)))
                    b.store(b.fmul(pj, b.fsub(b.load(pp), d)), pp)

            def dq_sink(r: int, c: int, vec: ir.Value) -> None:
                row_off = _add(b, head_out, _mul(b, _add(b, i0, r), h.E))
                h.store_row(out, row_off, c, b.fmul(vec, v.const(scale)), reg["tmp"])

            h.weighted_rows(reg["dp"], R, nk, reg["kp"], dq_sink)
            # dK[j] += sum_r ds[r, j] q[r];  dV[j] += sum_r p[r, j] dO[r]
            for c in range(h.Ep // h.vw):
                qv = [v.load(reg["qp"], i64(r * h.Ep + c * h.vw)) for r in range(R)]
                gv = [v.load(reg["gp"], i64(r * h.Ep + c * h.vw)) for r in range(R)]
                with for_range(b, i64(0), nk, name="kv") as j:
                    at = _add(b, _mul(b, j, h.Ep), c * h.vw)
                    dk, dv = v.load(reg["dk"], at), v.load(reg["dv"], at)
                    for r in range(R):
                        row = _add(b, _mul(b, i64(r), h.Sp), j)
                        dk = v.fma(v.splat(b.load(_gep(b, reg["dp"], row))), qv[r], dk)
                        dv = v.fma(v.splat(b.load(_gep(b, pv, row))), gv[r], dv)
                    v.store(dk, reg["dk"], at)
                    v.store(dv, reg["dv"], at)

        _row_blocks(h, block)
        # dk (scaled) and dv rows into the output after dq
        with for_range(b, i64(0), h.S, name="wk") as j:
            for which, acc, mult in ((0, "dk", scale), (1, "dv", None)):
                out_row = _add(b, head_out, _mul(b, _add(b, _add(b, h.L, _mul(b, h.S, which)),
                                                       j), h.E))
                for c in range(h.Ep // h.vw):
                    vec = v.load(reg[acc], _add(b, _mul(b, j, h.Ep), c * h.vw))
                    if mult is not None:
                        vec = b.fmul(vec, v.const(mult))
                    h.store_row(out, out_row, c, vec, reg["tmp"])
    h.task.finish()
    h.task.dispatch(par)


def emit(k: Any) -> None:
    (emit_forward if k.node.op == "attention" else emit_backward)(k)


KERNEL = register(Kernel("attention", ("attention", "attention_grad"), emit,
                         workspace=workspace, dense_operands=True))

__all__ = ["KERNEL", "emit", "workspace", "ROWS"]
