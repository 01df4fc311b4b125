"""Shape-generic kernels: one kernel for the channel groups and loop groups that differ only
in their sizes.

Why: a kernel's code has its sizes baked in, so kernels that compute the same thing over
different shapes are compiled once per shape. ResNet-18's batch norms are one channel group
per block and direction, the same code in each of the four stages but for ``C``, ``H`` and
``W``; its SGD updates are one loop group per parameter shape. On the ``resnet18`` benchmark
that was 25 channel-group and 25 loop-group kernels, 83 % of the text of the step's O3
modules, for 8 and 6 distinct computations.

How: before the kernel key (``Lowering._kernel_key``) is taken, the unit's cone (its
members, the expressions computed inline, the buffers read) is copied with its sizes
replaced by symbols of the kernel's own (``__k0``, ``__k1``, ...), which the kernel loads
from the symbol table after the step's symbols, as it loads a batch size. The entry function
gives each call its own copy of the table with those slots filled (``Lowering._build``), so
kernels that differ only in sizes get one key, one emission and one compilation. Node ids
are kept in the copies, so the plan's tables (buffers, passes, names) read them as the
originals; the graph itself is never changed.

- **Channel groups** keep their rank: every size other than 1 becomes a symbol, equal sizes
  the same symbol (the key then records which sizes are equal, and every call of the kernel
  has the same equalities). A size that follows the step's symbols (the batch ``B``, or
  ``4*B`` flat) is one too, its value computed by the call. Size-1 dims stay 1, so
  broadcasts stay what they are.
- **Loop groups** whose every value is either the group's full size or a single element
  (an optimizer's update: the parameter, its gradient and state, scalar hyper-parameters
  broadcast) run as one flat loop: full-size values become ``(S,)``, single elements
  ``(1,)`` (or ``()`` when they have rank 0). Contiguous buffers and reshapes between equal
  sizes are the same memory flat, so every parameter's update is one kernel.
- A constant whose value is a symbolic size (a batch norm's element count ``4096*B``)
  becomes a symbol too (numerator and denominator for a fraction); the call's slot holds
  its value, computed by the entry function from the step's symbols. A constant that is a
  number stays in the code (and in the key): its value may matter to the code LLVM makes
  (a power of 2.0 is a multiplication).

What is left concrete, and why: row groups (a row that fits one block sums in one loop,
``channel_groups.fits_one_block``, and GPT's rows are equal in every layer already), units
whose cone holds anything but elementwise arithmetic, constants, ``expand`` and
``reshape`` (views that move indices, ``iota``, random numbers and gathers read an index
whose meaning depends on the shape), scan bodies, debug builds (they plan no groups: every
kernel there may stop with a bounds error), and loop groups with a value of another size (a
bias broadcast along rows: its loop nest needs the real dims).

Performance: the loops run to a loaded bound instead of a constant one, which costs LLVM's
vector loop a remainder check per run; whether a kernel splits its work between the two
threads is decided when it runs (the kernel already compares the work to
``ELEM_PAR_MIN``), where a fixed size decided it when compiling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from graphc.ir import Node
from graphc.ir import ops as gops
from graphc.ir import shapes as sh

from . import options
from .channel_groups import full_shape
from .elementwise import ELEMENT_RULES
from .llvm_util import size_fraction
from .views import VIEW_OPS

# the kernel's own symbols at most (slots of the entry function's per-call symbol table)
MAX_SYMBOLS = 16
# elementwise rules that read their index or may stop the step: never generic
_INDEXED = frozenset({"iota", "gather", "rand"})
_SIZE_VIEWS = frozenset({"expand", "reshape"})


@dataclass
class Generic:
    """A unit's shape-generic form: ``unit`` its members' copies (same ids, symbolic sizes),
    ``symbols`` the kernel's own symbols and ``values`` what each call passes for them
    (ints, or size expressions of the step's symbols)."""

    unit: list[Node]
    symbols: list[sympy.Symbol] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)


def _op_ok(n: Node) -> bool:
    if n.op in _SIZE_VIEWS or n.op in ("const", "detach"):
        return True
    return (n.op in ELEMENT_RULES and n.op not in _INDEXED and n.op not in VIEW_OPS
            and n.op in gops.OP_INFO and gops.OP_INFO[n.op].kind == "elementwise")


def _cone(lower: Any, unit: list[Node], label: str) -> list[Node] | None:
    """The nodes of ``unit``'s kernel (members, inline expressions and the buffers they
    read), depth first from the members, so structurally equal units list them alike; None
    when one of them cannot be generic (``_op_ok``; a size view whose ``shape`` is not its
    own)."""
    mat = lower.mat_ids
    members = {m.id for m in unit}
    seen: set[int] = set()
    order: list[Node] = []
    todo = list(reversed(unit))
    while todo:
        n = todo.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        order.append(n)
        if n.id not in members and (n.op == "input" or n.id in mat):
            continue
        if n.op == "sum" and n.id in members and label == "channels":
            if set(n.attrs) - {"axes", "name"}:
                return None
        elif not _op_ok(n):
            return None
        if n.op in _SIZE_VIEWS or n.op == "const":
            if set(n.attrs) - {"shape", "value", "dtype", "name"} or not sh.same_shape(
                    tuple(n.attrs.get("shape", n.shape)), tuple(n.shape)):
                return None
        todo.extend(reversed(n.inputs))
    return order


class _Symbols:
    """Fresh kernel symbols, numbered in the order they are asked for."""

    def __init__(self, start: int) -> None:
        self.symbols: list[sympy.Symbol] = []
        self.values: list[Any] = []
        self._by_value: dict[Any, sympy.Symbol] = {}
        self._start = start

    def size(self, d: Any) -> Any:
        """A size other than 1 as the kernel symbol for its value (one per value: a number,
        or a size expression of the step's symbols, which the call evaluates)."""
        if isinstance(d, int) and d == 1:
            return d
        s = self._by_value.get(d)
        if s is None:
            s = self._by_value[d] = self.fresh(d)
        return s

    def fresh(self, value: Any) -> sympy.Symbol:
        s = sh.symbol(f"__k{self._start + len(self.symbols)}")
        self.symbols.append(s)
        self.values.append(value)
        return s


def _const_value(v: Any, syms: _Symbols) -> Any:
    """A constant's value with a symbolic numerator and denominator made kernel symbols."""
    if not isinstance(v, sympy.Basic) or not v.free_symbols:
        return v
    num, den = size_fraction(v)
    num = num if isinstance(num, int) or getattr(num, "is_Integer", False) else syms.fresh(num)
    if den == 1:
        return num
    den = den if isinstance(den, int) or getattr(den, "is_Integer", False) else syms.fresh(den)
    return num / den


def _flat_shapes(cone: list[Node], unit: list[Node], syms: _Symbols) -> dict[int, tuple] | None:
    """A loop group's nodes as one flat loop (see the module docstring), or None when some
    value is neither the group's size nor a single element."""
    size = sh.numel(unit[0].shape)
    if isinstance(size, int) and size <= 1:
        return None
    flat = (syms.size(size),)
    shapes: dict[int, tuple] = {}
    for n in cone:
        k = sh.numel(n.shape)
        if sh.same(k, size):
            shapes[n.id] = flat
        elif isinstance(k, int) and k == 1:
            shapes[n.id] = () if not n.shape else (1,)
        else:
            return None
    if any(shapes[m.id] != flat for m in unit):
        return None
    return shapes


def _channel_shapes(cone: list[Node], unit: list[Node], syms: _Symbols
                    ) -> dict[int, tuple] | None:
    """A channel group's nodes with the trailing dims of every value of the group's rank
    merged into one (``[N, C, H, W]`` -> ``[N, C, H*W]``; the group's passes run over them
    as one run already, ``channel_groups.run_dim``), then each size other than 1 a
    symbol. Merged, a stage's channels and spatial size are two numbers that rarely
    coincide (32 channels at 32x32 would make ``C == H == W`` a key of its own). None when a
    value of that rank has trailing dims that are neither the group's nor all 1."""
    full = full_shape(unit)
    rank, trail = len(full), tuple(full[2:])
    run = sh.numel(trail)
    shapes: dict[int, tuple] = {}
    for n in cone:
        shape = tuple(n.shape)
        if len(shape) == rank:
            rest = shape[2:]
            if all(sh.same(d, 1) for d in rest):
                shape = (shape[0], shape[1], 1)
            elif sh.same_shape(rest, trail):
                shape = (shape[0], shape[1], run)
            else:
                return None
        shapes[n.id] = tuple(syms.size(d) for d in shape)
    return shapes


def generic_form(lower: Any, unit: list[Node], label: str) -> Generic | None:
    """``unit``'s shape-generic form, or None when it keeps its sizes (see the module
    docstring for which units qualify)."""
    if (not options.GENERIC_KERNELS or lower.debug or lower.name_prefix
            or label not in ("channels", "group")):
        return None
    cone = _cone(lower, unit, label)
    if cone is None:
        return None
    syms = _Symbols(len(lower.symbols))
    if label == "group":
        shapes = _flat_shapes(cone, unit, syms)
        if shapes is None:
            return None
    else:
        shapes = _channel_shapes(cone, unit, syms)
        if shapes is None:
            return None
    mat, members = lower.mat_ids, {m.id for m in unit}
    # a buffer is read as a pointer of its dtype and shape: its operands and attributes are
    # not the kernel's business
    buffers = {n.id for n in cone if n.id not in members and (n.op == "input" or n.id in mat)}
    copies: dict[int, Node] = {}
    for n in cone:
        buffer = n.id in buffers
        c = object.__new__(Node)
        c.op, c.dtype, c.id, c.loc = n.op, n.dtype, n.id, n.loc
        c.rg, c._value, c.freed = n.rg, None, n.freed
        c.shape = shapes[n.id]
        attrs = n.attrs
        if buffer:
            pass
        elif n.op == "sum":  # over every axis but the channels' (``channel_groups._kind``)
            if set(attrs["axes"]) != set(range(len(n.shape))) - {1}:
                return None
            attrs = {**attrs, "axes": (0, 2)}
        elif "shape" in attrs or (n.op == "const"
                                  and isinstance(attrs.get("value"), sympy.Basic)):
            attrs = dict(attrs)
            if "shape" in attrs:
                attrs["shape"] = c.shape
            if n.op == "const":
                attrs["value"] = _const_value(attrs["value"], syms)
        c.attrs = attrs
        copies[n.id] = c
    for n in cone:
        copies[n.id].inputs = () if n.id in buffers else tuple(copies[x.id] for x in n.inputs)
    if not syms.symbols or len(syms.symbols) > MAX_SYMBOLS:
        return None
    return Generic([copies[m.id] for m in unit], syms.symbols, syms.values)


__all__ = ["Generic", "MAX_SYMBOLS", "generic_form"]
