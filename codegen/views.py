"""Strided views: how movement ops see a buffer without copying it.

A reshape, permute, expand or detach of a buffer (a materialized node or an input) is the same
memory read with other element strides; ``strided_view`` finds the buffer and those strides,
or says the view needs index arithmetic instead (a slice, a pad, a reshape of a non-contiguous
view). The planner (which operands need their own buffer), the kernel emitters (loads through
views) and the dense kernel families (GEMM and convolution operands) all ask the same
question, so it lives below all of them.
"""

from __future__ import annotations

from typing import Any

from graphc.ir import Node
from graphc.ir import shapes as sh

# movement ops: never a kernel of their own unless they are a root, always an index remap
# affine_norm is its value (input 0) once differentiated; the simplify pass removes it
VIEW_OPS = ("reshape", "permute", "expand", "detach", "slice", "pad", "affine_norm")


def contiguous_strides(shape: tuple) -> list[Any]:
    strides: list[Any] = [1] * len(shape)
    acc: Any = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc = sh.dim(acc * shape[i])
    return strides


def closure_of(n: Node, mat: set[int]) -> list[Node]:
    """``n`` and the expression nodes its kernel computes inline (``mat``: the ids of the
    materialized nodes; they and the inputs are the kernel's buffers). Here, below the
    planner and the kernel emitters, because both ask."""
    out, seen, stack = [n], {n.id}, list(n.inputs)
    while stack:
        x = stack.pop()
        if x.id in seen or x.op == "input" or x.id in mat:
            continue
        seen.add(x.id)
        out.append(x)
        stack.extend(x.inputs)
    return out


def strided_view(n: Node, is_buffer: Any) -> tuple[Node, list[Any]] | None:
    """(buffer node, element strides) if ``n`` is a buffer seen through views, else None."""
    if is_buffer(n):
        return n, contiguous_strides(n.shape)
    if n.op in ("detach", "affine_norm"):
        return strided_view(n.inputs[0], is_buffer)
    if n.op not in ("reshape", "permute", "expand"):
        return None
    inner = strided_view(n.inputs[0], is_buffer)
    if inner is None:
        return None
    base, st = inner
    src = n.inputs[0].shape
    if n.op == "permute":
        return base, [st[p] for p in n.attrs["perm"]]
    if n.op == "expand":
        return base, [0 if (s == 1 and not sh.same(d, 1)) else t
                      for s, d, t in zip(src, n.shape, st)]
    # reshape: fine if the source is contiguous, or only size-1 dims move
    if all(sh.same(a, b) for a, b in zip(st, contiguous_strides(src))):
        return base, contiguous_strides(n.shape)
    kept_src = [(d, t) for d, t in zip(src, st) if d != 1]
    kept_dst = [d for d in n.shape if d != 1]
    if len(kept_src) == len(kept_dst) and all(sh.same(a, b) for (a, _), b in
                                              zip(kept_src, kept_dst)):
        it = iter(t for _, t in kept_src)
        return base, [0 if d == 1 else next(it) for d in n.shape]
    return None


class StridedOperand:
    """A kernel operand read through its strides: the pointer of the buffer under the views
    (``strided_view``), the strides as written in the shapes (``static``: ints where known)
    and as IR values (``ir``). Kernels that run a thread task (``parallel.KernelTask``) see
    it there through ``in_task``."""

    def __init__(self, k: Any, n: Node) -> None:
        sv = strided_view(n, k._is_buffer)
        assert sv is not None, f"{n.op} operands are buffers or views of them (dense_operands)"
        base, st = sv
        self.ptr = k.ptr[base.id]
        self.static = list(st)
        self.ir = [k.sym(s) for s in st]

    def values(self) -> list[Any]:
        """The IR values a thread task needs to read it: the pointer, then the strides."""
        return [self.ptr, *self.ir]

    def in_task(self, task: Any) -> StridedOperand:
        """The same operand as seen inside ``task``'s function (its pointer and strides
        passed in as task arguments)."""
        t = type(self).__new__(type(self))
        t.ptr, t.static, t.ir = task[self.ptr], self.static, [task[s] for s in self.ir]
        return t
