"""``codegen.irtext`` prints exactly what llvmlite prints.

The text is what the workers compile, what kernel deduplication and the compile cache key
on, and what ``step.ir("llvm")`` shows, so it must be llvmlite's character for character:
for every instruction class it prints itself, for the classes and cases it hands back to
llvmlite (metadata, call attributes, fast-math flags, other instructions), and for every
function a compiled training step prints.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from graphc.codegen import irtext
from graphc.codegen import lower as lower_mod
from llvmlite import ir

import graphc as gc
from graphc import nn

F32, I64, I32 = ir.FloatType(), ir.IntType(64), ir.IntType(32)
V16 = ir.VectorType(F32, 16)


def _module() -> ir.Module:
    """One function with every instruction class ``irtext`` prints, each with and without
    the options that change its text, and some it leaves to llvmlite."""
    m = ir.Module(name="m")
    callee = ir.Function(m, ir.FunctionType(F32, [F32, I64]), name="callee")
    varargs = ir.Function(m, ir.FunctionType(I32, [I64], var_arg=True), name="printf")
    fma = ir.Function(m, ir.FunctionType(V16, [V16, V16, V16]), name="llvm.fma.v16f32")
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [F32.as_pointer(), I64, F32]),
                     name='odd "name"\\x')
    p, n, x = fn.args
    n.name = "n"
    entry = fn.append_basic_block("entry")
    body = fn.append_basic_block("loop body")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    acc = b.alloca(F32, name="acc")
    arr = b.alloca(F32, size=ir.Constant(I64, 4))
    arr.align = 64
    b.store(x, acc)
    st = b.store(x, arr)
    st.align = 4
    s = b.add(n, ir.Constant(I64, 1), name="s")
    b.mul(s, n, flags=["nsw", "nuw"])
    b.sub(s, n)
    b.fadd(x, x, flags=["fast"])
    b.fneg(x)
    c = b.icmp_signed("<", s, n)
    b.fcmp_ordered("<", x, x, flags=["nnan"])
    b.fcmp_unordered("!=", x, x)
    sel = b.select(c, s, n)
    b.select(c, x, ir.Constant(F32, 1.5), flags=["fast"])
    q = b.gep(p, [sel], inbounds=True)
    b.gep(p, [ir.Constant(I64, 3)])
    vp = b.bitcast(q, V16.as_pointer())
    v = b.load(vp)
    v.align = 4
    b.load(q)
    b.sitofp(s, F32)
    b.ptrtoint(q, I64)
    sh = b.shuffle_vector(v, ir.Constant(V16, ir.Undefined),
                          ir.Constant(ir.VectorType(I32, 16), list(range(15, -1, -1))))
    e = b.extract_element(sh, ir.Constant(I32, 0))
    b.insert_element(v, e, ir.Constant(I32, 1))
    b.call(fma, [v, v, sh])
    b.call(callee, [x, n], name="r")
    b.call(callee, [x, n], tail=True)
    b.call(callee, [x, n], fastmath=["fast"])  # left to llvmlite
    b.call(callee, [x, n], attrs=["nounwind"])  # left to llvmlite
    b.call(varargs, [n, n])
    md = b.load(q)
    md.set_metadata("nontemporal", m.add_metadata([ir.Constant(I32, 1)]))  # llvmlite's
    b.cbranch(c, body, done)
    b.position_at_end(body)
    i = b.phi(I64, name="i")
    i.add_incoming(ir.Constant(I64, 0), entry)
    i.add_incoming(s, body)
    sw = b.switch(i, done)  # left to llvmlite
    sw.add_case(ir.Constant(I64, 2), body)
    b.position_at_end(done)
    b.ret_void()
    g = ir.Function(m, ir.FunctionType(F32, []), name="g")
    gb = ir.IRBuilder(g.append_basic_block())
    gb.unreachable()
    h = ir.Function(m, ir.FunctionType(F32, [F32]), name="h")
    hb = ir.IRBuilder(h.append_basic_block())
    hb.ret(h.args[0])
    return m


def test_each_instruction_prints_as_llvmlite_prints_it() -> None:
    m = _module()
    # irtext first: llvmlite keeps each instruction's text once printed; irtext keeps only
    # references, written where llvmlite reads them (checked against objects irtext never
    # saw by the constants' test below)
    ours = {f.name: irtext.function_text(f) for f in m.functions}
    mod = irtext.module_text(m)
    for f in m.functions:
        assert ours[f.name] == str(f), f.name
    assert mod == str(m)
    assert "getelementptr inbounds float" in ours['odd "name"\\x']


def test_a_renamed_function_prints_under_its_new_name() -> None:
    """``Lowering._dedup`` renames a kept kernel; irtext keeps no text, so printing it again
    shows the new name where llvmlite shows the one it printed first."""
    m = _module()
    f = m.get_global("h")
    before = irtext.function_text(f)
    irtext.rename(f, "h2")
    after = irtext.function_text(f)
    assert '@"h"' in before and '@"h2"' in after


def test_every_function_of_a_compiled_step_prints_as_llvmlite(monkeypatch: Any) -> None:
    """A training step with convolutions, batch norm, a product, a softmax loss and SGD:
    every function the lowering prints, compared with llvmlite's own text."""
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    printed = []
    plain = irtext.function_text

    def checked(fn: ir.Function) -> str:
        text = plain(fn)
        assert text == ir.Function.__str__(fn), fn.name
        printed.append(fn.name)
        return text

    monkeypatch.setattr(irtext, "function_text", checked)
    step, loss = _small_step(monkeypatch, checked, lambda ps: gc.optim.SGD(ps, lr=0.1,
                                                                            momentum=0.9))
    assert np.isfinite(loss.item())
    assert len(printed) >= 20
    assert any("conv2d" in name for name in printed)
    text = step.ir("llvm")
    assert text.count("define ") >= 10


@pytest.mark.parametrize("init", [None, 3])
def test_a_non_function_global_is_printed_by_llvmlite(init: Any) -> None:
    m = ir.Module(name="g")
    gv = ir.GlobalVariable(m, I64, name="gv")
    if init is not None:
        gv.initializer = ir.Constant(I64, init)
    assert irtext.global_text(gv) == str(gv)


def _constants(m: ir.Module, name: str, flip: bool) -> ir.Function:
    """A function naming constants that differ only in type, kind or sign (``flip`` swaps
    each pair's order): new objects each time, as the kernels make them."""
    F64, I1 = ir.DoubleType(), ir.IntType(1)
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [F32.as_pointer()]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    p = fn.args[0]
    pairs = [
        (ir.Constant(I64, 0), ir.Constant(I32, 0)),
        (ir.Constant(I1, True), ir.Constant(I1, 1)),
        (ir.Constant(I1, False), ir.Constant(I1, 0)),
        (ir.Constant(F32, 0.0), ir.Constant(F32, -0.0)),
        (ir.Constant(F32, float("nan")), ir.Constant(F32, float("inf"))),
        (ir.Constant(F32, 0.5), ir.Constant(F64, 0.5)),
        (ir.Constant(F64, 0.1), ir.Constant(F64, -0.1)),
        (ir.Constant(V16, [0.5] * 16), ir.Constant(V16, [-0.5] * 16)),
        (ir.Constant(V16, [0.0] * 8 + [-0.0] * 8), ir.Constant(V16, [0.0] * 16)),
        (ir.Constant(ir.VectorType(I1, 4), [True, False, True, True]),
         ir.Constant(ir.VectorType(I1, 4), [1, 0, 1, 1])),
        (ir.Constant(ir.VectorType(I32, 4), [0, 1, 2, 3]),
         ir.Constant(ir.VectorType(I64, 4), [0, 1, 2, 3])),
        (ir.Constant(ir.ArrayType(I64, 3), [7, 8, 9]),
         ir.Constant(ir.ArrayType(I32, 3), [7, 8, 9])),
        (ir.Constant(V16, None), ir.Constant(V16, ir.Undefined)),
    ]
    slot = b.alloca(ir.ArrayType(ir.IntType(8), 64), name='a "quoted" \\ name')
    for a, c in pairs:
        for v in ((c, a) if flip else (a, c)):
            q = b.bitcast(slot, v.type.as_pointer())
            b.store(v, q)
    b.add(ir.Constant(I64, 5), ir.Constant(I64, 5), name='sum "of" \\ fives')
    b.fadd(ir.Constant(F32, -0.0), ir.Constant(F32, 0.0))
    b.store(ir.Constant(F32, 1.5), p)
    b.ret_void()
    return fn


def test_constants_that_differ_in_type_kind_or_sign_print_as_llvmlite_prints_them() -> None:
    """Constants' text is shared across every function ``irtext`` prints, keyed by type text
    and value: ``i1 true`` and ``i1 1``, ``0.0`` and ``-0.0``, i32 and i64 zeros must not
    meet. llvmlite's own text comes from objects ``irtext`` never saw (``irtext`` writes the
    references it makes into the objects, where llvmlite's printing would read them)."""
    for flip in (False, True):
        irtext.function_text(_constants(ir.Module(name="prime"), "prime", not flip))
        ours = irtext.function_text(_constants(ir.Module(name="a"), "f", flip))
        theirs = str(_constants(ir.Module(name="b"), "f", flip))
        assert ours == theirs


def _small_step(monkeypatch: Any, printer: Any, make_opt: Any) -> tuple[Any, Any]:
    """A small training step (convolutions, batch norm, a product, a softmax loss, the
    optimizer ``make_opt`` makes), compiled and called once with the lowering printing every
    function through ``printer``; the step and its loss. A fresh model each time, so fresh
    llvmlite objects."""
    monkeypatch.setattr(lower_mod, "function_text", printer)
    gc.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(16 * 8 * 8, 10))
    opt = make_opt(model.parameters())

    @gc.compile
    def step(x: gc.Tensor, y: gc.Tensor) -> gc.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    x = gc.from_numpy(rng.standard_normal((4, 3, 16, 16)).astype(np.float32))
    y = gc.from_numpy(rng.integers(0, 10, 4))
    return step, step(x, y)


def _conv_step_texts(monkeypatch: Any, printer: Any) -> list[str]:
    """The text of every function the lowering of ``_small_step`` (with Adam) prints, in
    order, printed by ``printer``."""
    texts: list[str] = []

    def record(fn: ir.Function) -> str:
        texts.append(printer(fn))
        return texts[-1]

    _small_step(monkeypatch, record, lambda ps: gc.optim.Adam(ps, lr=1e-3))
    return texts


def test_a_step_printed_by_irtext_equals_the_same_step_printed_by_llvmlite(
        monkeypatch: Any) -> None:
    """The whole lowering twice, each on its own objects: once printed by llvmlite alone,
    once by ``irtext`` (whose shared constant texts and references never reach the first)."""
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    theirs = _conv_step_texts(monkeypatch, ir.Function.__str__)
    ours = _conv_step_texts(monkeypatch, irtext.function_text)
    assert len(theirs) >= 20
    assert ours == theirs


def _store_pair(elt: ir.Type) -> ir.Function:
    """A function storing ``{0, 0}`` of a struct named ``pair`` whose body is two ``elt``
    (its own context, so the name can have another body elsewhere)."""
    ctx = ir.Context()
    st = ctx.get_identified_type("pair")
    st.set_body(elt, elt)
    m = ir.Module(name="s", context=ctx)
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [st.as_pointer()]), name="f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.store(ir.Constant(st, [0, 0]), fn.args[0])
    b.ret_void()
    return fn


def test_named_structs_of_one_name_keep_their_element_types() -> None:
    """A named struct's type text is its name alone, so a struct constant's shared text is
    keyed by its elements' types too: ``{i32 0, i32 0}`` and ``{i64 0, i64 0}`` of two
    ``%"pair"`` types must not meet."""
    for elt in (I32, I64):
        assert irtext.function_text(_store_pair(elt)) == str(_store_pair(elt))
