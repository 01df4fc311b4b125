"""The PTX kernels of the fused attention ops (``attention``, ``attention_grad``), no GPU needed.

- ``scaled_dot_product_attention`` (causal or not, self- and cross-attention, forward alone
  and with a backward to parameters feeding q, k and v) compiles for the cuda backend into
  ``kN_attention`` / ``kN_attention_grad`` entries that ``ptxas`` assembles for sm_80 and
  sm_90 (that part is skipped where ptxas is absent).
- The kernels' arithmetic is checked on the host: the very LLVM IR the PTX is made from, with
  the thread registers pinned to one thread of one block (the grid-stride loops then cover
  every row), is JIT-compiled for the CPU and run against the interpreter's numpy references,
  including strided (transposed) operands, a symbolic batch, L != S, no keys and dead rows.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np
import pytest
import sympy
from graphc.codegen import ptx
from graphc.codegen.cpu import host_target_machine
from test_ptx import PTXAS
from test_ptx import ptxas as _ptxas

import graphc as gc
from graphc import interpreter, nn
from graphc.ir import dtypes as dt
from graphc.ir.graph import Builder, Graph
from graphc.nn import functional as F
from graphc.nn.attention import SDPBackend, sdpa_kernel

needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not installed")


# -- compiled through scaled_dot_product_attention ------------------------------------------
def _sdpa_step(causal: bool, backward: bool, L: int, S: int, E: int = 8, H: int = 2
               ) -> Any:
    """A cuda compile of sdpa over [B, H, L|S, E] arguments (B symbolic), the fused kernel
    required (``sdpa_kernel(FLASH_ATTENTION)``); with ``backward`` a loss's gradient reaches
    parameters added to q, k and v, so every part of ``attention_grad`` is used."""
    rng = np.random.default_rng(0)
    wq = nn.Parameter(rng.standard_normal((H, L, E)).astype(np.float32))
    wk = nn.Parameter(rng.standard_normal((H, S, E)).astype(np.float32))
    wv = nn.Parameter(rng.standard_normal((H, S, E)).astype(np.float32))

    def step(x: Any, y: Any) -> Any:
        out = F.scaled_dot_product_attention(x + wq, y * wk, y + wv, is_causal=causal)
        if not backward:
            return out
        loss = (out ** 2).sum()
        loss.backward()
        return loss

    args = (rng.standard_normal((3, H, L, E)).astype(np.float32),
            rng.standard_normal((3, H, S, E)).astype(np.float32))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return gc.compile(step, device="cuda", example_args=args)


CONFIGS = [  # (causal, L, S)
    (False, 6, 6),
    (True, 6, 6),
    (False, 4, 7),  # cross-attention
    (True, 7, 4),  # causal with fewer keys than queries
]


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("causal,L,S", CONFIGS)
def test_sdpa_lowers_to_attention_kernels(causal: bool, L: int, S: int, backward: bool,
                                          tmp_path: Path) -> None:
    fn = _sdpa_step(causal, backward, L, S)
    text = fn.ir("ptx")
    names = fn.variants[-1].exe.program.kernel_names
    fwd = [k for k in names if re.fullmatch(r"k\d+_attention", k)]
    bwd = [k for k in names if re.fullmatch(r"k\d+_attention_grad", k)]
    assert len(fwd) == 1, names
    assert len(bwd) == (1 if backward else 0), names
    for k in fwd + bwd:
        assert re.search(rf"\.entry {k}\(", text), k
    # the scores are never stored: no matmul kernel, no softmax's reductions
    assert not any("_matmul" in k or "_max" in k for k in names), names
    if PTXAS is None:
        return
    srcs = {ptx.DEFAULT_ARCH: text}
    srcs.setdefault("sm_90", ptx.PTXProgram(fn.variants[-1].graph, "sm_90").ptx)
    for arch, src in srcs.items():
        report = _ptxas(src, arch, tmp_path)
        for k in fwd + bwd:
            assert f"Compiling entry function '{k}' for '{arch}'" in report, (k, arch)


@needs_ptxas
def test_attention_kernels_assemble_for_sm_90(tmp_path: Path) -> None:
    """Both kernels in one sm_90 program, reported by ptxas (the causal backward step)."""
    fn = _sdpa_step(True, True, 5, 5)
    report = _ptxas(ptx.PTXProgram(fn.variants[-1].graph, "sm_90").ptx, "sm_90", tmp_path)
    entries = set(re.findall(r"Compiling entry function '(\w+)' for 'sm_90'", report))
    assert any(re.fullmatch(r"k\d+_attention", e) for e in entries), entries
    assert any(re.fullmatch(r"k\d+_attention_grad", e) for e in entries), entries


# -- the kernels' arithmetic, run on the host ------------------------------------------------
_ONE_THREAD = {"tid.x": 0, "ntid.x": 1, "ctaid.x": 0, "nctaid.x": 1}


def _host_ir(prog: ptx.PTXProgram) -> str:
    """The program's LLVM IR for the host: plain functions over generic pointers, the
    special registers replaced by functions returning one thread of one block."""
    text = prog.llvm_unoptimized.replace("define ptx_kernel", "define")
    text = text.replace(' "nvvm.maxntid"="256"', "").replace(" addrspace(1)", "")
    text = re.sub(r'declare i32 @"?llvm\.nvvm\.read\.ptx\.sreg\.([a-z.]+)"?\(\)',
                  lambda m: f'define i32 @"host.sreg.{m.group(1)}"() {{\n'
                            f'  ret i32 {_ONE_THREAD[m.group(1)]}\n}}', text)
    text = re.sub(r'@"?llvm\.nvvm\.read\.ptx\.sreg\.([a-z.]+)"?', r'@"host.sreg.\1"', text)
    assert "nvvm" not in text and "addrspace" not in text, "unexpected target-specific IR"
    return "\n".join(line for line in text.splitlines()
                     if not line.startswith(("target triple", "target datalayout")))


def _run_on_host(g: Graph, feeds: dict[str, np.ndarray], env: dict[str, int]
                 ) -> dict[int, np.ndarray]:
    """Every launch of ``g``'s PTX program, in order, on the host: node id -> output."""
    prog = ptx.PTXProgram(g, "sm_80")
    mod = llvm.parse_assembly(_host_ir(prog))
    mod.verify()
    ee = llvm.create_mcjit_compiler(mod, host_target_machine())
    ee.finalize_object()
    subs = {sympy.Symbol(k): v for k, v in env.items()}
    syms = [env[s.name] for s in prog.symbols]
    outs: dict[int, np.ndarray] = {}
    for la in prog.launches:
        n = la.node
        shape = tuple(int(sympy.sympify(d).subs(subs)) for d in n.shape)
        out = np.full(shape, np.nan, np.float32)
        bufs = [out] + [np.ascontiguousarray(feeds[a.attrs["name"]] if a.op == "input"
                                             else outs[a.id]) for a in la.args[1:]]
        err = np.zeros(4, np.int64)
        cf = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(bufs)
                                      + [ctypes.c_int64] * len(syms) + [ctypes.c_void_p]))(
            ee.get_function_address(la.kernel))
        cf(*[x.ctypes.data for x in bufs], *syms, err.ctypes.data)
        assert err[0] == 0, (la.kernel, err)
        outs[n.id] = out
    return outs


def _graph(batch: tuple, L: int, S: int, E: Any, causal: bool, transposed_q: bool,
           scale: float = 0.7) -> tuple[Graph, Any, Any]:
    b = Builder()
    nd = len(batch) + 2
    if transposed_q:  # q read through a permuted view of a [.., E, L] argument
        qin = b.input("q", "arg", batch + (E, L), dt.float32)
        q = b.permute(qin, list(range(nd - 2)) + [nd - 1, nd - 2])
    else:
        qin = q = b.input("q", "arg", batch + (L, E), dt.float32)
    k = b.input("k", "arg", batch + (S, E), dt.float32)
    v = b.input("v", "arg", batch + (S, E), dt.float32)
    g = b.input("g", "arg", batch + (L, E), dt.float32)
    att = b.op("attention", (q, k, v), scale=scale, causal=causal)
    grad = b.op("attention_grad", (q, k, v, g), scale=scale, causal=causal)
    return Graph("attn", [qin, k, v, g], [att, grad]), att, grad


HOST_CASES = [  # (batch, L, S, E, transposed q, symbolic batch)
    ((2, 3), 5, 5, 4, False, False),
    ((2,), 3, 7, 5, False, False),
    ((2,), 7, 3, 5, False, False),
    ((1,), 4, 0, 3, False, False),  # no keys: zero rows, zero gradients
    ((2, 2), 4, 6, 3, True, False),
    ((3, 2), 5, 4, 8, False, True),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,L,S,E,transposed_q,symbolic", HOST_CASES)
def test_attention_kernels_match_interpreter_on_host(batch: tuple, L: int, S: int, E: int,
                                                     transposed_q: bool, symbolic: bool,
                                                     causal: bool) -> None:
    rng = np.random.default_rng(1)
    env = {"B": batch[0]} if symbolic else {}
    shape = (sympy.Symbol("B"),) + batch[1:] if symbolic else batch
    g, att, grad = _graph(shape, L, S, E, causal, transposed_q)
    feeds = {"q": rng.standard_normal(batch + ((E, L) if transposed_q else (L, E))),
             "k": rng.standard_normal(batch + (S, E)), "v": rng.standard_normal(batch + (S, E)),
             "g": rng.standard_normal(batch + (L, E))}
    feeds = {name: x.astype(np.float32) for name, x in feeds.items()}
    outs = _run_on_host(g, feeds, env)
    q = np.swapaxes(feeds["q"], -1, -2) if transposed_q else feeds["q"]
    ref = interpreter._attention(att, q, feeds["k"], feeds["v"])
    ref_grad = interpreter._attention_grad(grad, q, feeds["k"], feeds["v"], feeds["g"])
    np.testing.assert_allclose(outs[att.id], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[grad.id], ref_grad, rtol=1e-4, atol=1e-5)


def test_attention_kernels_large_scores_and_dead_rows_on_host() -> None:
    """Scores in the hundreds (exp overflows without the running max) and a row whose every
    score is -inf (zeros forward; NaN gradients where the reference has them)."""
    rng = np.random.default_rng(4)
    g, att, grad = _graph((1,), 4, 5, 3, False, False, scale=1.0)
    feeds = {"q": rng.standard_normal((1, 4, 3)) * 300,
             "k": np.abs(rng.standard_normal((1, 5, 3))) + 0.1,
             "v": rng.standard_normal((1, 5, 3)), "g": rng.standard_normal((1, 4, 3))}
    feeds = {name: x.astype(np.float32) for name, x in feeds.items()}
    feeds["q"][0, 2] = -np.inf
    outs = _run_on_host(g, feeds, {})
    with np.errstate(all="ignore"):
        ref = interpreter._attention(att, feeds["q"], feeds["k"], feeds["v"])
        ref_grad = interpreter._attention_grad(grad, feeds["q"], feeds["k"], feeds["v"],
                                               feeds["g"])
    assert np.all(outs[att.id][0, 2] == 0)
    np.testing.assert_allclose(outs[att.id], ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs[grad.id], ref_grad, rtol=1e-4, atol=1e-5)  # NaNs equal


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_kernels_with_a_broadcast_mask_on_host(causal: bool) -> None:
    """The optional additive mask (a key-padding row broadcast over heads and query rows,
    read through a zero-stride view), including a row it masks completely."""
    rng = np.random.default_rng(6)
    b = Builder()
    q = b.input("q", "arg", (2, 3, 5, 4), dt.float32)
    k = b.input("k", "arg", (2, 3, 6, 4), dt.float32)
    v = b.input("v", "arg", (2, 3, 6, 4), dt.float32)
    g = b.input("g", "arg", (2, 3, 5, 4), dt.float32)
    m = b.input("m", "arg", (2, 1, 1, 6), dt.float32)
    me = b.broadcast_to(m, (2, 3, 5, 6))
    att = b.op("attention", (q, k, v, me), scale=0.6, causal=causal)
    grad = b.op("attention_grad", (q, k, v, g, me), scale=0.6, causal=causal)
    graph = Graph("attn", [q, k, v, g, m], [att, grad])
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
             (("q", (2, 3, 5, 4)), ("k", (2, 3, 6, 4)), ("v", (2, 3, 6, 4)),
              ("g", (2, 3, 5, 4)))}
    mask = np.zeros((2, 1, 1, 6), np.float32)
    mask[0, ..., 3:] = -np.inf
    mask[1, ..., 0] = -np.inf  # causal: batch 1's first row sees no key
    feeds["m"] = mask
    outs = _run_on_host(graph, feeds, {})
    full = np.broadcast_to(mask, (2, 3, 5, 6))
    with np.errstate(all="ignore"):
        ref = interpreter._attention(att, feeds["q"], feeds["k"], feeds["v"], full)
        ref_grad = interpreter._attention_grad(grad, feeds["q"], feeds["k"], feeds["v"],
                                               feeds["g"], full)
    np.testing.assert_allclose(outs[att.id], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[grad.id], ref_grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("masked", [False, True], ids=["plain", "masked"])
def test_attention_kernels_with_dropout_on_host(masked: bool) -> None:
    """Dropout inside the kernels: the keep factors are the ``rand`` op's values at each
    weight's index under the seed operand, as the interpreter (and ``dropout()``) draws them."""
    rng = np.random.default_rng(8)
    b = Builder()
    shapes = {"q": (2, 2, 5, 4), "k": (2, 2, 7, 4), "v": (2, 2, 7, 4), "g": (2, 2, 5, 4)}
    ins = {name: b.input(name, "arg", shape, dt.float32) for name, shape in shapes.items()}
    seed = b.input("seed", "arg", (), dt.int64)
    extra = []
    mask = None
    if masked:
        m = b.input("m", "arg", (2, 1, 1, 7), dt.float32)
        extra.append(b.broadcast_to(m, (2, 2, 5, 7)))
        mask = np.zeros((2, 1, 1, 7), np.float32)
        mask[0, ..., 5:] = -np.inf
    q, k, v, g = ins["q"], ins["k"], ins["v"], ins["g"]
    att = b.op("attention", (q, k, v, *extra, seed), scale=0.5, causal=False, dropout=0.3)
    grad = b.op("attention_grad", (q, k, v, g, *extra, seed), scale=0.5, causal=False,
                dropout=0.3)
    graph = Graph("attn", [q, k, v, g, seed] + ([m] if masked else []), [att, grad])
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
             shapes.items()}
    feeds["seed"] = np.array(123456789, np.int64)
    if masked:
        feeds["m"] = mask
    outs = _run_on_host(graph, feeds, {})
    full = [np.broadcast_to(mask, (2, 2, 5, 7))] if masked else []
    args = (feeds["q"], feeds["k"], feeds["v"])
    ref = interpreter._attention(att, *args, *full, feeds["seed"])
    ref_grad = interpreter._attention_grad(grad, *args, feeds["g"], *full, feeds["seed"])
    assert np.count_nonzero(ref == 0) < ref.size  # not everything dropped
    np.testing.assert_allclose(outs[att.id], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[grad.id], ref_grad, rtol=1e-4, atol=1e-5)
