"""The bf16 GEMM (codegen/gemm_bf16.py) against numpy, in every variant this host can run.

The reference is float64 arithmetic on the bf16 inputs (exact products, so the only error
allowed is the float32 accumulation's); bf16 outputs are compared with the rounded
reference, 1 bf16 ulp allowed on top of that. Products of two bf16 values are exact in
float32, so with K = 1 the rounding rule itself (nearest even, NaN -> 0x7FC0) is checked
bit for bit. Shapes cross every edge: 0 and 1, sizes that are not multiples of the 16/32
tiles or the 32-k blocks, the M and N blocks (MC, NC), mlp_large's layers, transposed and
strided operands, ``ldc > N`` (the columns past N and the rows past M must stay untouched).

Variants the host cannot run are skipped with the reason, but the AMX and AVX512-BF16 code
is always compiled, for a target that has the features, and its assembly checked for the
instructions, so an AVX2-only CI machine still proves the kernels lower.
"""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest
import sympy
from graphc.codegen import gemm_bf16 as G
from graphc.codegen.llvm_objects import host_cpu, init_llvm, optimize

HOST_FEATURES = host_cpu()[1]
HOST_ISA = G.bf16_isa(HOST_FEATURES)
HOST_WIDE = "+avx512f" in HOST_FEATURES
FULL_FEATURES = "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512bf16,+amx-tile,+amx-bf16"


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), nearest even, NaN -> 0x7FC0 (PyTorch's rule)."""
    x = np.ascontiguousarray(x, np.float32)
    b = x.view(np.uint32)
    r = ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    r[np.isnan(x)] = 0x7FC0
    return r


def from_bf16(u: np.ndarray) -> np.ndarray:
    return (np.asarray(u).astype(np.uint32) << 16).view(np.float32)


def _variants() -> list[G.Bf16Gemm]:
    out = []
    for isa in G.ISAS:
        for wide in (True, False) if isa == "generic" else (True,):
            for dt in ("f32", "bf16"):
                out.append(G.Bf16Gemm(isa, dt, wide))
    return out


VARIANTS = _variants()


def _skip_reason(kern: G.Bf16Gemm) -> str | None:
    if G.ISAS.index(kern.isa) > G.ISAS.index(HOST_ISA):
        return f"host has no {kern.isa} (best bf16 variant here: {HOST_ISA})"
    if kern.wide and not HOST_WIDE:
        return "host has no AVX-512"
    if kern.isa == "amx":
        from graphc.runtime.amx import ensure_amx

        try:
            ensure_amx()
        except RuntimeError as e:
            return str(e)
    return None


class Jit:
    """The host-runnable variants compiled into one MCJIT module, callable with numpy."""

    def __init__(self, kerns: list[G.Bf16Gemm]) -> None:
        init_llvm()
        name, feats = host_cpu()
        self.tm = llvm.Target.from_default_triple().create_target_machine(
            cpu=name, features=feats, opt=3, codemodel="jitdefault")
        mod = llvm.parse_assembly(str(G.gemm_bf16_module(kerns)))
        mod.triple = self.tm.triple
        mod.data_layout = str(self.tm.target_data)
        mod.verify()
        optimize(mod, self.tm)
        self.engine = llvm.create_mcjit_compiler(mod, self.tm)
        self.engine.finalize_object()
        P, L = ctypes.c_void_p, ctypes.c_int64
        ft = ctypes.CFUNCTYPE(None, P, L, L, P, L, L, P, L, L, L, L, P)
        self.fns = {k: ft(self.engine.get_function_address(k.name)) for k in kerns}
        tt = ctypes.CFUNCTYPE(None, P, L)
        self.tasks = {k: tt(self.engine.get_function_address(k.task_name)) for k in kerns}

    def gemm(self, kern: G.Bf16Gemm, a: np.ndarray, b: np.ndarray, ldc: int | None = None,
             split: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """C = a @ b for uint16 (bf16 bits) views of any strides; returns (C's valid part,
        the whole buffer with its sentinel rows and columns)."""
        m, k = a.shape
        n = b.shape[1]
        ldc = n if ldc is None else ldc
        ct = np.float32 if kern.out == "f32" else np.uint16
        sentinel = np.float32(-12345.0) if kern.out == "f32" else np.uint16(0x1234)
        buf = np.full((m + 1, max(ldc, 1)), sentinel, ct)
        ws = int(G.workspace_bytes_bf16(m, n, k, kern.isa))
        work = np.zeros(2 * ws + 64, np.uint8)
        for arr in (a, b):
            assert arr.dtype == np.uint16 and arr.strides[0] % 2 == 0
        args = [a.ctypes.data, a.strides[0] // 2, a.strides[1] // 2, b.ctypes.data,
                b.strides[0] // 2, b.strides[1] // 2, buf.ctypes.data, ldc, m, n, k]
        if split:  # the two-thread task's halves, one after the other
            ctx = np.array(args + [work.ctypes.data, work.ctypes.data + ws], np.int64)
            for part in (0, 1):
                self.tasks[kern](ctx.ctypes.data, part)
        else:
            self.fns[kern](*args, work.ctypes.data)
        return buf[:m, :n], buf


@pytest.fixture(scope="module")
def jit() -> Jit:
    return Jit([k for k in VARIANTS if _skip_reason(k) is None])


def _check(kern: G.Bf16Gemm, got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    af = from_bf16(a).astype(np.float64)
    bf = from_bf16(b).astype(np.float64)
    ref = af @ bf
    absref = np.abs(af) @ np.abs(bf)
    bound = 3e-5 * absref + 1e-30
    if kern.out == "f32":
        err = np.abs(got.astype(np.float64) - ref)
    else:
        g = from_bf16(got).astype(np.float64)
        err = np.abs(g - ref)
        # one bf16 ulp of the reference (8 significant bits) on top of the accumulation
        ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(ref), 1e-38))) - 7)
        bound = bound + ulp
    bad = ~(err <= bound)
    assert not bad.any(), (kern, got.shape, np.argwhere(bad)[:5], err[bad][:5], bound[bad][:5])


def _operands(rng: np.random.Generator, m: int, n: int, k: int, layout: str
              ) -> tuple[np.ndarray, np.ndarray]:
    """bf16 A (m x k) and B (k x n) with the strides of ``layout``: N row-major, T a
    transposed view (column-major), S every other column of a wider array."""
    def make(r: int, c: int, how: str) -> np.ndarray:
        if how == "T":
            return to_bf16(rng.standard_normal((c, r)).astype(np.float32)).T
        if how == "S":
            return to_bf16(rng.standard_normal((r, 2 * c + 1)).astype(np.float32))[:, 1::2]
        return to_bf16(rng.standard_normal((r, c)).astype(np.float32))

    return make(m, k, layout[0]), make(k, n, layout[1])


def _runnable(kern: G.Bf16Gemm) -> None:
    reason = _skip_reason(kern)
    if reason is not None:
        pytest.skip(reason)


IDS = [f"{k.isa}{'' if k.wide else '-narrow'}-{k.out}" for k in VARIANTS]

SHAPES = [(1, 1, 1), (0, 5, 7), (5, 0, 7), (5, 7, 0), (3, 5, 2), (16, 32, 32), (17, 33, 31),
          (31, 47, 65), (33, 17, 100), (70, 530, 45), (129, 40, 33), (64, 256, 784)]


@pytest.mark.parametrize("kern", VARIANTS, ids=IDS)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT", "SS"])
def test_shapes(jit: Jit, kern: G.Bf16Gemm, layout: str) -> None:
    _runnable(kern)
    rng = np.random.default_rng(1)
    for m, n, k in SHAPES:
        a, b = _operands(rng, m, n, k, layout)
        got, buf = jit.gemm(kern, a, b, ldc=n + 3)
        _check(kern, got, a, b)
        sentinel = buf[-1, 0]
        assert (buf[:, n:] == sentinel).all() and (buf[m, :] == sentinel).all(), \
            "wrote outside C"


@pytest.mark.parametrize("kern", VARIANTS, ids=IDS)
@pytest.mark.parametrize("shape", [(256, 1024, 1024, "NT"), (256, 1024, 1024, "NN"),
                                   (1024, 784, 256, "TN"), (256, 784, 1024, "NT")])
def test_mlp_large(jit: Jit, kern: G.Bf16Gemm, shape: tuple) -> None:
    """mlp_large's products: x @ W.T, the input gradient g @ W, the weight gradient g.T @ x."""
    _runnable(kern)
    m, n, k, layout = shape
    rng = np.random.default_rng(2)
    a, b = _operands(rng, m, n, k, layout)
    got, _ = jit.gemm(kern, a, b)
    _check(kern, got, a, b)


@pytest.mark.parametrize("kern", VARIANTS, ids=IDS)
def test_two_thread_halves_bit_identical(jit: Jit, kern: G.Bf16Gemm) -> None:
    """The task's two parts (by rows when C is tall, by columns when wide) together give
    exactly the single call's result."""
    _runnable(kern)
    rng = np.random.default_rng(3)
    for m, n, k, layout in ((200, 70, 300, "NT"), (70, 200, 300, "TN"), (1, 5, 3, "NN"),
                            (96, 1100, 64, "NN"), (0, 4, 4, "NN")):
        a, b = _operands(rng, m, n, k, layout)
        one, _ = jit.gemm(kern, a, b)
        two, _ = jit.gemm(kern, a, b, split=True)
        assert np.array_equal(one.view(np.uint32 if kern.out == "f32" else np.uint16),
                              two.view(np.uint32 if kern.out == "f32" else np.uint16))


@pytest.mark.parametrize("kern", VARIANTS, ids=IDS)
def test_rounding_bit_exact(jit: Jit, kern: G.Bf16Gemm) -> None:
    """K = 1: C is a float32 product computed exactly, so both outputs are bit-exact
    (float32 as is, bf16 rounded to nearest even: ties both ways, carries into the exponent,
    overflow to Inf)."""
    _runnable(kern)
    rng = np.random.default_rng(4)
    m, n = 37, 45
    a = to_bf16((rng.standard_normal((m, 1)) * 8).astype(np.float32))
    b = to_bf16((rng.standard_normal((1, n)) * 8).astype(np.float32))
    # values whose product is a tie, a near-overflow and an exact power of two
    a[:4, 0] = to_bf16(np.array([1.0078125, 1.0234375, 3.0e38, -1.5], np.float32))
    b[0, :4] = to_bf16(np.array([1.0078125, 1.0078125, 2.0, 1.5], np.float32))
    with np.errstate(over="ignore"):  # 3e38 * 2 is Inf, as in the kernel
        exact = from_bf16(a) * from_bf16(b)  # float32: exact (8 + 8 significant bits)
    got, _ = jit.gemm(kern, a, b)
    if kern.out == "f32":
        assert np.array_equal(got.view(np.uint32), exact.view(np.uint32))
    else:
        assert np.array_equal(got, to_bf16(exact))


@pytest.mark.parametrize("kern", VARIANTS, ids=IDS)
def test_nan_inf(jit: Jit, kern: G.Bf16Gemm) -> None:
    """A NaN in A poisons its row, +Inf times positive values gives +Inf, Inf - Inf NaN;
    in bf16 NaN is 0x7FC0 and Inf 0x7F80."""
    _runnable(kern)
    rng = np.random.default_rng(5)
    m, n, k = 40, 37, 70
    af = np.abs(rng.standard_normal((m, k))).astype(np.float32) + 0.5
    bf = np.abs(rng.standard_normal((k, n))).astype(np.float32) + 0.5
    af[3, 10] = np.nan
    af[7, 20] = np.inf
    bf[30, 5] = -np.inf
    a, b = to_bf16(af), to_bf16(bf)
    got, _ = jit.gemm(kern, a, b)
    g = got if kern.out == "f32" else from_bf16(got)
    assert np.isnan(g[3]).all()
    assert np.isposinf(np.delete(g[7], 5)).all() and np.isnan(g[7, 5])
    rows = [i for i in range(m) if i not in (3, 7)]
    assert np.isneginf(g[rows, 5]).all()
    finite = np.ones(g.shape, bool)
    finite[[3, 7]] = False
    finite[:, 5] = False
    assert np.isfinite(g[finite]).all()
    if kern.out == "bf16":
        assert (got[3] == 0x7FC0).all() and got[7, 0] == 0x7F80 and got[0, 5] == 0xFF80


@pytest.mark.parametrize("kern", VARIANTS, ids=IDS)
def test_blocks(jit: Jit, kern: G.Bf16Gemm) -> None:
    """Several M blocks (MC), N blocks (NC) and AMX K blocks (KB chunks), with edges."""
    _runnable(kern)
    rng = np.random.default_rng(6)
    m, n, k = 2 * G.MC + 7, G.NC + 40, 32 * (2 * G.KB) + 20
    a, b = _operands(rng, m, n, k, "NT")
    got, _ = jit.gemm(kern, a, b, ldc=n + 16)
    _check(kern, got, a, b)


def _asm(kern: G.Bf16Gemm, cpu: str, features: str) -> str:
    init_llvm()
    tm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features,
                                                                  opt=3)
    mod = llvm.parse_assembly(str(G.gemm_bf16_module([kern])))
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    optimize(mod, tm)
    return tm.emit_assembly(mod)


@pytest.mark.parametrize("out", ["f32", "bf16"])
def test_amx_and_avx512bf16_lower_on_any_host(out: str) -> None:
    """The AMX and AVX512-BF16 kernels compile for a target with the features whatever the
    host, and use the instructions they are about."""
    amx = _asm(G.Bf16Gemm("amx", out), "x86-64", FULL_FEATURES)
    for ins in ("tdpbf16ps", "ldtilecfg", "tileloadd", "tilestored", "tilerelease"):
        assert ins in amx, ins
    vec = _asm(G.Bf16Gemm("avx512bf16", out), "x86-64", FULL_FEATURES)
    assert "vdpbf16ps" in vec and "tdpbf16ps" not in vec


def test_generic_needs_only_avx2_or_sse2() -> None:
    """The generic kernel uses no AVX-512 and no bf16 instruction (AVX2 hosts, any x86-64)."""
    for cpu, feats in (("haswell", ""), ("x86-64", "")):
        asm = _asm(G.Bf16Gemm("generic", "bf16", False), cpu, feats)
        assert "zmm" not in asm and "dpbf16" not in asm


def test_isa_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """From features, never a CPU name; GRAPHC_BF16_ISA lowers it, never raises it."""
    monkeypatch.delenv("GRAPHC_BF16_ISA", raising=False)
    spr = "+avx2,+avx512f,+avx512bw,+avx512bf16,+amx-tile,+amx-bf16"
    zen = "+avx2,+avx512f,+avx512bw,+avx512bf16,-amx-tile,-amx-bf16"
    avx2 = "+avx2,+fma,-avx512f,-avx512bf16"
    assert G.bf16_isa(spr) == "amx"
    assert G.bf16_isa(zen) == "avx512bf16"
    assert G.bf16_isa(avx2) == "generic"
    assert G.bf16_isa("") == "generic"
    monkeypatch.setenv("GRAPHC_BF16_ISA", "avx512bf16")
    assert G.bf16_isa(spr) == "avx512bf16" and G.bf16_isa(avx2) == "generic"
    monkeypatch.setenv("GRAPHC_BF16_ISA", "generic")
    assert G.bf16_isa(spr) == "generic"
    monkeypatch.setenv("GRAPHC_BF16_ISA", "amx")
    assert G.bf16_isa(zen) == "avx512bf16"
    monkeypatch.setenv("GRAPHC_BF16_ISA", "sse")
    with pytest.raises(ValueError, match="GRAPHC_BF16_ISA"):
        G.bf16_isa(spr)
    monkeypatch.delenv("GRAPHC_BF16_ISA")
    assert G.Bf16Gemm.for_host("bf16", avx2) == G.Bf16Gemm("generic", "bf16", False)
    assert G.Bf16Gemm.for_host("f32", spr) == G.Bf16Gemm("amx", "f32", True)


def test_workspace_symbolic() -> None:
    """Sympy-compatible sizes: a symbolic batch gives an expression that evaluates to the
    integer size of each concrete batch."""
    bsym = sympy.Symbol("B", positive=True, integer=True)
    for isa in G.ISAS:
        e = G.workspace_bytes_bf16(bsym, 1024, 784, isa)
        for bv in (1, 64, 300):
            assert int(sympy.sympify(e).subs(bsym, bv)) == int(
                G.workspace_bytes_bf16(bv, 1024, 784, isa))
    assert int(G.workspace_bytes_bf16(0, 0, 0, "amx")) > 0


def test_call_records_request_and_builds_piece() -> None:
    """A kernel in a library-linked module only declares the routine and records the
    variant; ``library_parts`` builds it (and its task) as a module of its own."""
    from graphc.codegen.llvm_util import I8P, I64
    from llvmlite import ir

    kern = G.Bf16Gemm("generic", "bf16", False)
    mod = ir.Module(name="k")
    mod.gemm_requests = set()  # type: ignore[attr-defined]
    fty = ir.FunctionType(ir.VoidType(), [G.TASK.as_pointer(), I8P]).as_pointer()
    run2 = ir.GlobalVariable(mod, fty, "run2")  # as codegen.lower's run2_global
    run2.initializer = ir.Constant(fty, None)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [G.I16P, G.I16P, G.I16P, I8P]), "k")
    b = ir.IRBuilder(fn.append_basic_block())

    def alloca(t: ir.Type) -> ir.Value:
        return b.alloca(t)

    a_, b_, c_, w = fn.args
    dims = [ir.Constant(I64, v) for v in (64, 784, 1, 784, 1, 256, 256, 64, 256, 784)]
    args = [a_, dims[0], dims[2], b_, dims[4], dims[5], c_, dims[6], dims[7], dims[8], dims[9]]
    G.emit_gemm_bf16_call(b, mod, alloca, kern, args, w, ir.Constant(I64, 1 << 20), run2)
    b.ret_void()
    assert mod.gemm_requests == {kern}  # type: ignore[attr-defined]
    text = str(mod)
    assert f'declare void @"{kern.name}"' in text or f"declare void @{kern.name}" in text
    [(spec, build)] = G.library_parts({kern})
    assert spec == kern.spec
    piece = str(build())
    assert f"define void @{kern.name}" in piece or f'define void @"{kern.name}"' in piece
    assert kern.task_name in piece
    llvm.parse_assembly(text).verify()


@pytest.mark.parametrize("kern", VARIANTS, ids=IDS)
def test_thread_pool_bit_identical(jit: Jit, kern: G.Bf16Gemm) -> None:
    """Through the running two-thread pool's dispatch (what ``emit_gemm_bf16_call`` emits
    when the product is large enough): the same bits as one thread."""
    _runnable(kern)
    from graphc.runtime.pool import dispatch_address

    addr = dispatch_address()
    if not addr:
        pytest.skip("no two-thread pool in this process (one CPU or GRAPHC_NUM_THREADS=1)")
    run2 = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addr)
    task = ctypes.cast(jit.tasks[kern], ctypes.c_void_p).value
    rng = np.random.default_rng(7)
    for m, n, k, layout in ((300, 90, 200, "NT"), (90, 300, 200, "TN")):
        a, b = _operands(rng, m, n, k, layout)
        one, _ = jit.gemm(kern, a, b)
        ct = np.float32 if kern.out == "f32" else np.uint16
        buf = np.zeros((m, n), ct)
        ws = int(G.workspace_bytes_bf16(m, n, k, kern.isa))
        work = np.zeros(2 * ws + 64, np.uint8)
        ctx = np.array([a.ctypes.data, a.strides[0] // 2, a.strides[1] // 2, b.ctypes.data,
                        b.strides[0] // 2, b.strides[1] // 2, buf.ctypes.data, n, m, n, k,
                        work.ctypes.data, work.ctypes.data + ws], np.int64)
        run2(task, ctx.ctypes.data)
        assert np.array_equal(one.view(np.uint32 if kern.out == "f32" else np.uint16),
                              buf.view(np.uint32 if kern.out == "f32" else np.uint16))
