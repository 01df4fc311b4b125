"""LLVM assembly text of llvmlite functions and modules, the same text llvmlite prints, faster.

Why: a cold compile prints every kernel it emits (``codegen.lower``: once to compare kernels
by text, then into the modules the workers compile), and llvmlite's printer spends most of
its time outside the text itself. Each instruction's ``descr`` formats its type and every
operand through ``str.format``, and every one of those formats a type by a Python-level
``__str__`` call; ResNet-18's 60k instructions took 0.55 s of CPU to print on an Ice Lake
Xeon, about a third of the lowering's Python time, in the process whose time the workers
wait for. Here each instruction class that kernels use is printed by one f-string, with a
type's text looked up once per type object.

References are set up without llvmlite's first-use path: ``get_reference`` keeps a value's
text on the object, but fills it by catching ``AttributeError`` (about 1 us per value, in
CPython 3.11, against 0.2 us for the assignment). An instruction's reference is written when
its definition is printed, so the uses after it find it; a scalar constant's text is formatted
once for each type and value (a kernel names ``float 0.0``, ``i32 0``, ``i1 false`` or a
vector of 0.5 in new objects hundreds of times, and llvmlite formats a vector lane by lane).

The text is llvmlite's, character for character (``tests/test_irtext.py`` compares every
function of several steps): it is what the compile cache, kernel deduplication and
``step.ir("llvm")`` see, so nothing downstream changes. An instruction this module does not
print itself (another class, metadata, call attributes) is printed by llvmlite.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from llvmlite.ir import instructions as ins
from llvmlite.ir import types as irt

# where llvmlite's ``_StringReferenceCaching`` keeps a value's reference text
_REF = "_StringReferenceCaching__cached_refstr"


# constants' text by type text and value, shared by every printer (``_printer``): a kernel
# names new objects for ``float 0.0``, ``i1 false`` or a vector of 0.5 again and again, and
# llvmlite formats a vector lane by lane; cleared past ``_CONST_TEXT_MAX`` entries
_CONST_TEXT: dict[tuple[str, Any], str] = {}
_CONST_TEXT_MAX = 200_000


def _value_key(c: Any) -> tuple[type, Any] | None:
    """What a scalar constant's text depends on besides its type, or None (not cached)."""
    kind = type(c)
    if kind is int or kind is bool:  # True prints as ``true``, 1 as ``1``
        return kind, c
    if kind is float:
        return kind, c.hex()  # 0.0 and -0.0 print differently
    return None


def _printer() -> Any:
    """A function printing one instruction; its type texts are kept by ``id`` for the
    printer's life (one function: its types stay alive while it is printed)."""
    tstr: dict[int, str] = {}
    ctext = _CONST_TEXT
    if len(ctext) > _CONST_TEXT_MAX:
        ctext.clear()

    def ty(t: Any) -> str:
        s = tstr.get(id(t))
        if s is None:
            s = tstr[id(t)] = str(t)
        return s

    def ref(v: Any) -> str:
        s = getattr(v, _REF, None)
        if s is not None:
            return s
        if type(v) is ir.Constant:
            c = v.constant
            kind = type(c)
            if kind is list:  # a vector, array or struct: its elements' types and values
                vals = []
                for x in c:
                    if type(x) is not ir.Constant:
                        return v.get_reference()
                    k = _value_key(x.constant)
                    if k is None:
                        return v.get_reference()
                    vals.append((ty(x.type), k))  # a named struct's text omits them
                key = (ty(v.type), tuple(vals))
            else:
                k = _value_key(c)
                if k is None:
                    return v.get_reference()
                key = (ty(v.type), k)
            s = ctext.get(key)
            if s is None:
                s = ctext[key] = v.get_reference()
            else:
                setattr(v, _REF, s)
            return s
        return v.get_reference()

    def typed(v: Any) -> str:
        return f"{ty(v.type)} {ref(v)}"

    def plain(i: Any) -> str:
        op = i.opname
        if i.flags:
            op = " ".join([op, *i.flags])
        return f"{op} {ty(i.type)} {', '.join([ref(o) for o in i.operands])}"

    def call(i: Any) -> str | None:
        if i.arg_attributes or i.attributes or i.fastmath:
            return None
        fnty = i.callee.function_type
        rt = fnty if fnty.var_arg else fnty.return_type
        callee = f"{ty(rt)} {i.callee.get_reference()}"
        if i.cconv:
            callee = f"{i.cconv} {callee}"
        tail = f"{i.tail} " if i.tail else ""
        args = ", ".join([typed(a) for a in i.operands[1:]])
        return f"{tail}{i.opname} {callee}({args})"

    def ret(i: Any) -> str:
        if i.operands:
            return f"{i.opname} {typed(i.operands[0])}"
        return i.opname

    def term(i: Any) -> str:
        return f"{i.opname} {', '.join([typed(o) for o in i.operands])}"

    def select(i: Any) -> str:
        c, a, b = i.operands
        return f"select {' '.join(i.flags)} {typed(c)}, {typed(a)}, {typed(b)}"

    def compare(i: Any) -> str:
        flags = "".join([" " + f for f in i.flags])
        a, b = i.operands
        return f"{i.opname}{flags} {i.op} {ty(a.type)} {ref(a)}, {ref(b)}"

    def cast(i: Any) -> str:
        return f"{i.opname} {typed(i.operands[0])} to {ty(i.type)}"

    def load(i: Any) -> str:
        align = "" if i.align is None else f", align {i.align}"
        return f"load {ty(i.type)}, {typed(i.operands[0])}{align}"

    def store(i: Any) -> str:
        v, p = i.operands
        align = "" if i.align is None else f", align {i.align}"
        return f"store {typed(v)}, {typed(p)}{align}"

    def alloca(i: Any) -> str:
        s = f"{i.opname} {ty(i.allocated_type)}"
        if i.operands:
            s += f", {typed(i.operands[0])}"
        if i.align is not None:
            s += f", align {i.align}"
        return s

    def gep(i: Any) -> str:
        op = "getelementptr inbounds" if i.inbounds else "getelementptr"
        idx = ", ".join([typed(x) for x in i.indices])
        return f"{op} {ty(i.source_etype)}, {typed(i.pointer)}, {idx}"

    def phi(i: Any) -> str:
        incs = ", ".join([f"[{ref(v)}, {ref(b)}]" for v, b in i.incomings])
        return f"phi {' '.join(i.flags)} {ty(i.type)} {incs}"

    def operands(i: Any) -> str:
        return f"{i.opname} {', '.join([typed(o) for o in i.operands])}"

    def unreachable(i: Any) -> str:
        return i.opname

    by_class: dict[type, Any] = {
        ins.Instruction: plain, ins.CallInstr: call, ins.Ret: ret, ins.Branch: term,
        ins.ConditionalBranch: term, ins.SelectInstr: select, ins.ICMPInstr: compare,
        ins.FCMPInstr: compare, ins.CastInstr: cast, ins.LoadInstr: load,
        ins.StoreInstr: store, ins.AllocaInstr: alloca, ins.GEPInstr: gep,
        ins.PhiInstr: phi, ins.ExtractElement: operands, ins.InsertElement: operands,
        ins.ShuffleVector: operands, ins.Unreachable: unreachable,
    }
    void = irt.VoidType

    def instruction(i: Any) -> str:
        f = by_class.get(type(i))
        body = f(i) if f is not None and not i.metadata else None
        if body is None:
            return str(i)  # llvmlite's own text
        if type(i.type) is not void:
            r = getattr(i, _REF, None)
            if r is None:
                name = i._name
                if "\\" in name or '"' in name:
                    r = i.get_reference()  # llvmlite's escaping
                else:
                    r = f'%"{name}"'
                    setattr(i, _REF, r)
            body = f"{r} = {body}"
        return body.rstrip()

    return instruction


def function_text(fn: ir.Function) -> str:
    """``str(fn)``: the function's definition (or declaration) as llvmlite prints it."""
    buf: list[str] = []
    fn.descr_prototype(buf)
    if fn.blocks:
        instruction = _printer()
        buf.append("{\n")
        for blk in fn.blocks:
            buf.append(f"{blk._format_name()}:\n")
            buf += [f"  {instruction(i)}\n" for i in blk.instructions]
        buf.append("}\n")
    return "".join(buf)


def rename(v: Any, name: str) -> None:
    """Give global ``v`` the name ``name``, dropping the reference text cached on it (by
    llvmlite or by this module) for its old one, so that it prints under the new name."""
    v._name = name
    v.__dict__.pop(_REF, None)


def global_text(v: Any) -> str:
    """``str(v)`` for any global of a module (functions printed by ``function_text``)."""
    return function_text(v) if isinstance(v, ir.Function) else str(v)


def module_text(m: ir.Module) -> str:
    """``str(m)``: the module as llvmlite prints it."""
    lines = [f'; ModuleID = "{m.name}"', f'target triple = "{m.triple}"',
             f'target datalayout = "{m.data_layout}"', '']
    lines += [t.get_declaration() for t in m.get_identified_types().values()]
    lines += [global_text(v) for v in m.globals.values()]
    lines += m._get_metadata_lines()
    return "\n".join(lines)


__all__ = ["function_text", "global_text", "module_text", "rename"]
