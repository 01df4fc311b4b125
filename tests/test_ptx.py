"""The PTX backend: what can be checked without a GPU, and parity tests for when there is one.

Without a GPU: every op and three whole training steps lower to PTX that ``ptxas`` assembles
for sm_80 and sm_90 (skipped where ptxas is absent; ptxas runs in a subprocess); the kernel
partitioning and launch geometry; the libm-free math routines, JIT-compiled for the host CPU
from the very IR the kernels use and compared with numpy; op validation before LLVM; and
calling a cuda step without a driver raises a clear error and touches nothing.

With a GPU (skipped otherwise): every op and an MLP training step against the CPU backend.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np
import pytest
from graphc.codegen import ptx, ptx_kernels
from graphc.codegen.vmath import VMath as Math
from llvmlite import ir
from test_ops import CASES, _is_float, _run_backend, assert_backends_agree, make_value

import graphc as gc
from graphc import nn, optim
from graphc.ir import ops
from graphc.runtime import cuda_runtime as cuda

PTXAS = shutil.which("ptxas")
ARCHS = ("sm_80", "sm_90")
HAS_GPU = cuda.available()
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not installed")
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA driver/GPU")
no_gpu_only = pytest.mark.skipif(HAS_GPU, reason="a GPU is present")


def ptxas(text: str, arch: str, tmp_path: Path) -> str:
    """Assemble PTX with ptxas -v; returns its report (registers, spills, smem)."""
    src = tmp_path / f"k_{arch}.ptx"
    src.write_text(text)
    res = subprocess.run([PTXAS, "--gpu-name", arch, "-O3", "-v", str(src), "-o",
                          str(tmp_path / f"k_{arch}.cubin")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    return res.stderr + res.stdout


def kernel_stats(report: str) -> dict[str, dict[str, int]]:
    """{kernel: {regs, spill_stores, spill_loads, smem}} from a ptxas -v report."""
    out: dict[str, dict[str, int]] = {}
    cur = None
    for line in report.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur = out.setdefault(m.group(1), {})
        elif cur is not None and "spill stores" in line:
            nums = [int(x) for x in re.findall(r"(\d+) bytes spill", line)]
            cur["spill_stores"], cur["spill_loads"] = nums
        elif cur is not None and "Used" in line:
            cur["regs"] = int(re.search(r"Used (\d+) registers", line).group(1))
            sm = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(sm.group(1)) if sm else 0
    return out


# -- the op table ----------------------------------------------------------------------------
# ops the PTX backend refuses with NotImplementedError naming them (the CPU backend runs them)
NO_PTX: set[str] = set()


def test_every_op_has_a_ptx_rule() -> None:
    assert ptx_kernels.supported_ops() == set(ops.OP_INFO) - NO_PTX


def _op_step(op: str) -> Any:
    """The step of ``test_ops._run_backend`` for ``op``, compiled for cuda at batch 3."""
    case = CASES[op]
    rng = np.random.default_rng(2)
    params: list[Any] = []
    for s in case.inputs:
        if s.shape[0] == "B":
            params.append(nn.Parameter(np.zeros(s.shape[1:], np.float32)) if _is_float(s)
                          else None)
        else:
            params.append(nn.Parameter(make_value(s, 0, rng, np.float32)))

    def step(*args: Any) -> Any:
        it = iter(args)
        xs = [(next(it) + p if p is not None else next(it)) if s.shape[0] == "B" else p
              for s, p in zip(case.inputs, params)]
        out = case.build(*xs)
        if out.requires_grad:
            (out * out * 0.5 + out).sum().backward()
        return out

    args = tuple(make_value(s, 3, rng, np.float32) for s in case.inputs if s.shape[0] == "B")
    return gc.compile(step, device="cuda", example_args=args)


@pytest.mark.parametrize("op", sorted(ops.OP_INFO))
def test_op_lowers_to_ptx(op: str, tmp_path: Path) -> None:
    if op in NO_PTX:
        pytest.skip(f"{op}: no PTX lowering (test_unsupported_op_raises_naming_it)")
    fn = _op_step(op)
    text = fn.ir("ptx")
    prog = fn.variants[-1].exe.program
    assert text.count(".entry") == len(prog.kernel_names)
    assert f".target {ptx.DEFAULT_ARCH}" in text
    if PTXAS is not None:
        ptxas(text, "sm_80", tmp_path)
        ptxas(ptx.PTXProgram(fn.variants[-1].graph, "sm_90").ptx, "sm_90", tmp_path)


# -- whole training steps ------------------------------------------------------------------
def _seed_step() -> tuple[Any, tuple]:
    X = np.arange(0, 1, 0.02, dtype=np.float32)[:40, None]
    Y = (0.7 * X + 0.3).astype(np.float32)
    m, lf = nn.Linear(1, 1), nn.L1Loss()
    opt = optim.SGD(m.parameters(), lr=0.01)

    def step(x: Any, y: Any) -> Any:
        loss = lf(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step, (X, Y)


def _mlp_step(loss: str = "mse", opt_name: str = "sgd", dims: tuple = (784, 256, 10),
              batch: int = 64) -> tuple[Any, tuple, Any, Any]:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, dims[0])).astype(np.float32)
    labels = rng.integers(0, dims[-1], batch).astype(np.int64)
    layers: list[Any] = []
    for k, (i, o) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(i, o))
        if k < len(dims) - 2:
            layers.append(nn.ReLU())
    m = nn.Sequential(*layers)
    if loss == "mse":
        lf, Y = nn.MSELoss(), np.eye(dims[-1], dtype=np.float32)[labels]
    else:
        lf, Y = nn.CrossEntropyLoss(), labels
    opt = optim.SGD(m.parameters(), lr=1e-2, momentum=0.9) if opt_name == "sgd" else \
        optim.Adam(m.parameters(), lr=1e-3)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        out = lf(m(x), y)
        out.backward()
        opt.step()
        return out

    return step, (X, Y), m, opt


STEPS = {
    "seed": lambda: _seed_step(),
    "mlp_mse_sgd_momentum": lambda: _mlp_step()[:2],
    "mlp_ce_adam": lambda: _mlp_step("ce", "adam")[:2],
}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_training_step_ptx(name: str, tmp_path: Path) -> None:
    step, args = STEPS[name]()
    fn = gc.compile(step, device="cuda", example_args=args)
    text = fn.ir("ptx")
    assert "nvptx64-nvidia-cuda" in fn.ir("llvm")
    assert ".visible .entry" in text and "commit_float" in text
    assert "kernels" in fn.stages and "launches" in fn.ir("kernels")
    if PTXAS is None:
        return
    for arch in ARCHS:
        src = text if arch == ptx.DEFAULT_ARCH else \
            ptx.PTXProgram(fn.variants[-1].graph, arch).ptx
        stats = kernel_stats(ptxas(src, arch, tmp_path))
        assert set(stats) == set(fn.variants[-1].exe.program.kernel_names)
        for kname, st in stats.items():
            if "_matmul" in kname or "_sum" in kname or "_max" in kname:
                assert st["spill_stores"] == 0 and st["spill_loads"] == 0, (kname, st)


# -- partitioning and launch geometry ------------------------------------------------------
def test_partitioning_reuses_the_cpu_plan() -> None:
    step, args = _mlp_step()[:2]
    fn = gc.compile(step, device="cuda", example_args=args)
    prog = fn.variants[-1].exe.program
    launched = [la.node for la in prog.launches]
    # one launch per materialized node (none here has two), in plan order
    assert [n.id for n in launched] == [n.id for n in prog.plan.materialized]
    assert len(prog.commits) == len(prog.graph.updates)
    kinds = {la.node.op: la.kind for la in prog.launches}
    assert kinds["matmul"] == "blocks"
    for la in prog.launches:
        if la.node.op == "sum" and la.node.inputs[0].shape[0] != 1 and \
                not isinstance(la.node.inputs[0].shape[0], int):
            assert la.kind == "blocks"  # reduces over the batch: a block per output


def test_in_place_updates_check_the_error_flag() -> None:
    """Kernels the plan writes over state (Plan.direct) drop noalias and test err first."""
    step, args = _mlp_step("ce", "sgd")[:2]
    fn = gc.compile(step, device="cuda", example_args=args)
    prog = fn.variants[-1].exe.program
    direct = [la.kernel for la in prog.launches if la.node.id in prog.plan.direct]
    if not direct:
        pytest.skip("the plan writes no update in place")
    text = prog.llvm_unoptimized
    for name in direct:
        body = text[text.index(f'@"{name}"'):]
        header, rest = body.split("\n", 1)
        assert "noalias" not in header
        assert "ret void" in rest.split("define ", 1)[0]
        assert rest.index("load i64") < rest.index("ret void")


def test_scatter_add_has_init_and_atomic_kernels() -> None:
    fn = _op_step("scatter_add")
    prog = fn.variants[-1].exe.program
    names = [la.kernel for la in prog.launches if la.node.op == "scatter_add"]
    assert len(names) == 2 and names[0].endswith("_init") and names[1].endswith("_atomic")
    assert "atom.global.add.f32" in prog.ptx


def test_reduction_uses_warp_shuffles_and_shared_memory() -> None:
    fn = _op_step("sum")  # sums over the batch axis: a symbolic extent
    text = fn.ir("ptx")
    assert "shfl.sync.bfly" in text and ".shared" in text and "bar.sync" in text


def test_launch_geometry() -> None:
    import sympy

    B = sympy.Symbol("B", integer=True, positive=True)
    flat = ptx.Launch("k", None, (), "flat", 10 * B)
    blocks = ptx.Launch("k", None, (), "blocks", B)
    assert flat.grid({B: 1}) == 1 and flat.grid({B: 25}) == 1 and flat.grid({B: 26}) == 2
    assert flat.grid({B: 10**7}) == ptx.MAX_GRID  # the grid-stride loop covers the rest
    assert blocks.grid({B: 7}) == 7 and blocks.grid({B: 10**6}) == ptx.MAX_GRID
    assert ptx.Launch("k", None, (), "flat", 0).grid({}) == 0
    n = sympy.Symbol("B", integer=True, positive=True)
    work = ptx._launch_work(_FakeMatmul((n, 130)), "gemm")
    assert work[0] == "blocks"
    assert ptx.Launch("g", None, (), *work).grid({n: 64}) == 3
    assert ptx.Launch("g", None, (), *work).grid({n: 65}) == 6


class _FakeMatmul:
    def __init__(self, shape: tuple) -> None:
        self.shape = shape


def test_arch_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    step, args = _seed_step()
    monkeypatch.setenv("GRAPHC_CUDA_ARCH", "sm_90")
    fn = gc.compile(step, device="cuda", example_args=args)
    assert ".target sm_90" in fn.ir("ptx")
    with pytest.raises(ValueError, match="sm_70"):
        ptx.PTXProgram(fn.variants[-1].graph, "sm_70")


# -- validation before LLVM ----------------------------------------------------------------
def test_unsupported_op_raises_before_llvm(monkeypatch: pytest.MonkeyPatch) -> None:
    step, args = _mlp_step()[:2]
    fn = gc.compile(step, device="cuda", example_args=args)
    graph = fn.variants[-1].graph
    monkeypatch.setattr(ptx, "supported_ops", lambda: set(ops.OP_INFO) - {"matmul"})
    with pytest.raises(NotImplementedError, match="'matmul'"):
        ptx.PTXProgram(graph)


def test_libm_declaration_is_refused() -> None:
    mod = ir.Module()
    ir.Function(mod, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "llvm.exp.f32")
    with pytest.raises(NotImplementedError, match="llvm.exp.f32"):
        ptx.check_declarations(mod)


# -- the vector-math routines PTX kernels emit (the CPU's), checked on the host ------------
def _host_math(name: str, t: ir.Type, nargs: int) -> Any:
    from graphc.codegen.cpu import host_target_machine
    from graphc.codegen.llvm_util import I64, for_range, i64

    mod = ir.Module()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [t.as_pointer()] * (nargs + 1)
                                          + [I64]), "f")
    b = ir.IRBuilder(fn.append_basic_block())
    with for_range(b, i64(0), fn.args[-1]) as i:
        xs = [b.load(b.gep(a, [i])) for a in fn.args[1:nargs + 1]]
        b.store(getattr(Math(b, mod), name)(*xs), b.gep(fn.args[0], [i]))
    b.ret_void()
    tm = host_target_machine()
    m = llvm.parse_assembly(str(mod))
    ee = llvm.create_mcjit_compiler(m, tm)
    ee.finalize_object()
    cf = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (nargs + 1), ctypes.c_int64)(
        ee.get_function_address("f"))

    def run(*xs: np.ndarray) -> np.ndarray:
        out = np.empty_like(xs[0])
        cf(out.ctypes.data, *[x.ctypes.data for x in xs], len(out))
        return out

    run.keep = ee  # type: ignore[attr-defined]
    return run


def _erf(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf)(x)


REFS = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "erf": _erf,
        "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}
ULPS = {"exp": 4, "log": 4, "tanh": 4, "sigmoid": 16, "erf": 8}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(REFS))
def test_math_matches_numpy(name: str, dtype: Any) -> None:
    t = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    f = _host_math(name, t, 1)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(4000) * s for s in (1e-6, 1e-2, 0.3, 1, 3, 20)])
    if name == "log":
        x = np.abs(x) + 1e-30
    if name in ("exp", "sigmoid"):
        x = np.clip(x, -80 if dtype == np.float32 else -700, 80)
    x = x.astype(dtype)
    ref = REFS[name](x.astype(np.float64))
    got = f(x).astype(np.float64)
    tol = ULPS[name] * np.finfo(dtype).eps * (1e3 if name == "erf" and dtype == np.float64
                                              else 1)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=np.finfo(dtype).tiny)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(f(special), REFS[name](special.astype(np.float64))
                                      .astype(dtype))


def test_pow_follows_c_rules() -> None:
    f = _host_math("pow", ir.DoubleType(), 2)
    x = np.array([2, -2, -2, 0, 0, 0, 3, -8, 1.5, 10])
    y = np.array([3, 3, 2, 2, -1, 0, 0.5, 1 / 3, 40, -5])
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(f(x, y), np.power(x, y), rtol=1e-14)


# -- calling without a GPU -------------------------------------------------------------------
@no_gpu_only
def test_call_without_gpu_raises_and_modifies_nothing() -> None:
    step, args, m, opt = _mlp_step()
    fn = gc.compile(step, device="cuda")  # traced at the first call
    before = {k: v.copy() for k, v in m.state_dict().items()}
    with pytest.raises(RuntimeError, match="no CUDA driver/GPU found"):
        fn(*args)
    assert fn.compile_count == 1 and ".entry" in fn.ir("ptx")
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    assert all(p.grad is None for p in m.parameters()) and not opt.state
    with pytest.raises(RuntimeError, match="no CUDA driver/GPU found"):
        fn(*args)  # the same clear error again, not a crash


def test_dump_shows_ptx(tmp_path: Path) -> None:
    script = tmp_path / "cuda_step.py"
    script.write_text(
        "import numpy as np\nimport graphc as gc\nfrom graphc import nn, optim\n"
        "m = nn.Linear(3, 2)\nopt = optim.SGD(m.parameters(), lr=0.1)\n"
        "X = np.ones((4, 3), np.float32)\n"
        "@gc.compile(device='cuda', example_args=(X,))\n"
        "def step(x):\n    opt.zero_grad()\n    loss = m(x).sum()\n    loss.backward()\n"
        "    opt.step()\n    return loss\n")
    res = subprocess.run([sys.executable, "-m", "graphc", "dump", f"{script}:step", "--stage",
                          "ptx"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert res.returncode == 0, res.stderr
    assert ".visible .entry" in res.stdout and "_matmul" in res.stdout


# -- on a GPU ------------------------------------------------------------------------------
@needs_gpu
@pytest.mark.parametrize("op", sorted(ops.OP_INFO))
def test_gpu_op_matches_cpu(op: str) -> None:
    if op in NO_PTX:
        pytest.skip(f"{op}: no PTX lowering")
    assert_backends_agree(op, _run_backend(op, None), _run_backend(op, "cuda"), 1e-4, 1e-5)


@needs_gpu
@pytest.mark.parametrize("loss,opt_name", [("mse", "sgd"), ("ce", "adam")])
def test_gpu_mlp_step_matches_cpu(loss: str, opt_name: str) -> None:
    results = {}
    for device in ("cpu", "cuda"):
        gc.manual_seed(0)
        step, args, m, opt = _mlp_step(loss, opt_name, dims=(64, 96, 10), batch=50)
        fn = gc.compile(step, device=device)
        losses = [float(np.asarray(fn(*args))) for _ in range(5)]
        x2 = args[0][:17], args[1][:17]  # another batch size, same variant
        losses.append(float(np.asarray(fn(*x2))))
        assert fn.compile_count == 1
        results[device] = (losses, {k: v.copy() for k, v in m.state_dict().items()},
                           [p.grad.numpy().copy() for p in m.parameters()],
                           [{k: np.asarray(v).copy() for k, v in opt.state[p].items()}
                            for p in m.parameters()])
    (lc, sc, gcpu, oc), (lg, sg, ggpu, og) = results["cpu"], results["cuda"]
    np.testing.assert_allclose(lg, lc, rtol=1e-4)
    for k in sc:
        np.testing.assert_allclose(sg[k], sc[k], rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(ggpu, gcpu):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
    for a, b in zip(og, oc):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-3, atol=1e-6, err_msg=key)


@needs_gpu
def test_gpu_index_error_leaves_state_intact() -> None:
    step, args, m, opt = _mlp_step("ce", "sgd", dims=(8, 16, 4), batch=6)
    fn = gc.compile(step, device="cuda")
    fn(*args)
    before = {k: v.copy() for k, v in m.state_dict().items()}
    bad = args[1].copy()
    bad[3] = 99
    with pytest.raises(IndexError, match="99"):
        fn(args[0], bad)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    fn(*args)  # and the step still works afterwards


# -- loops: scan bodies launched once per step by the host --------------------------------
def _rnn_step(kind: str = "lstm", layers: int = 2, bidirectional: bool = True) -> tuple:
    gc.manual_seed(0)
    cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
    rnn = cls(4, 6, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    head = nn.Linear(6 * (2 if bidirectional else 1), 3)
    params = list(rnn.parameters()) + list(head.parameters())
    opt = optim.Adam(params, lr=1e-2)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        out = rnn(x)[0]
        loss = ((head(out) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(1)
    args = (rng.standard_normal((3, 5, 4)).astype(np.float32),
            rng.standard_normal((3, 5, 3)).astype(np.float32))
    return step, args, params


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_recurrent_training_step_ptx(kind: str, tmp_path: Path) -> None:
    step, args, _ = _rnn_step(kind)
    fn = gc.compile(step, device="cuda", example_args=args)
    text = fn.ir("ptx")
    plan = fn.ir("kernels")
    # the forward and reverse scans of both layers and directions, each body listed once
    assert plan.count("scan %") == 8 and "for each of" in plan
    prog = fn.variants[-1].exe.program
    assert text.count(".entry") == len(prog.kernel_names)
    assert any(k.startswith("s") and "_matmul" in k for k in prog.kernel_names)
    if PTXAS is not None:
        for arch in ARCHS:
            src = text if arch == ptx.DEFAULT_ARCH else \
                ptx.PTXProgram(fn.variants[-1].graph, arch).ptx
            assert set(kernel_stats(ptxas(src, arch, tmp_path))) == set(prog.kernel_names)


@no_gpu_only
def test_steps_run_on_cuda_builds_ptx_and_changes_nothing_without_a_gpu(tmp_path: Path
                                                                          ) -> None:
    step, args, m, opt = _mlp_step("ce", "adam", dims=(8, 16, 4), batch=6)
    fn = gc.compile(step, device="cuda")
    before = {k: v.copy() for k, v in m.state_dict().items()}
    xs, ys = np.stack([args[0]] * 3), np.stack([args[1]] * 3)
    with pytest.raises(RuntimeError, match="no CUDA driver/GPU found"):
        fn.run(xs, ys)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    assert all(p.grad is None for p in m.parameters()) and not opt.state
    plan = fn.ir("kernels", steps=True)
    assert "scan %" in plan and "for each of K steps" in plan
    if PTXAS is not None:
        ptxas(fn.ir("ptx", steps=True), "sm_90", tmp_path)


@needs_gpu
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_gpu_recurrent_step_matches_cpu(kind: str) -> None:
    results = {}
    for device in ("cpu", "cuda"):
        step, args, params = _rnn_step(kind)
        fn = gc.compile(step, device=device)
        losses = [float(np.asarray(fn(*args))) for _ in range(3)]
        short = (args[0][:, :2], args[1][:, :2])  # another length: the same compile
        losses.append(float(np.asarray(fn(*short))))
        assert fn.compile_count == 1
        results[device] = (losses, [p.numpy().copy() for p in params])
    np.testing.assert_allclose(results["cuda"][0], results["cpu"][0], rtol=1e-4)
    for a, b in zip(results["cuda"][1], results["cpu"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


@needs_gpu
def test_gpu_steps_run_matches_cpu() -> None:
    results = {}
    for device in ("cpu", "cuda"):
        gc.manual_seed(0)
        step, args, m, opt = _mlp_step("ce", "adam", dims=(16, 24, 5), batch=12)
        fn = gc.compile(step, device=device)
        xs, ys = np.stack([args[0]] * 4), np.stack([args[1]] * 4)
        losses = np.asarray(fn.run(xs, ys))
        results[device] = (losses, {k: v.copy() for k, v in m.state_dict().items()})
    np.testing.assert_allclose(results["cuda"][0], results["cpu"][0], rtol=1e-4)
    for k, v in results["cpu"][1].items():
        np.testing.assert_allclose(results["cuda"][1][k], v, rtol=1e-3, atol=1e-5, err_msg=k)
