"""Ahead-of-time builds: the C library reproduces the Python compiled step bit for bit.

The C programs in ``examples/aot`` and ctypes calls into ``libNAME.so`` are compared with the
Python compiled step built from the same definitions (``examples/aot/build_seed.py``), for the
same target CPU, so parameters, gradients and optimizer state must be *equal*, not close.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "aot"
CC = os.environ.get("CC", "cc")
CXX = os.environ.get("CXX", "c++")

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")


def _load_examples() -> Any:
    spec = importlib.util.spec_from_file_location("aot_build_seed", EXAMPLES / "build_seed.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


ex = _load_examples()


def _cc(*args: str | Path, cxx: bool = False) -> None:
    cmd = [CXX if cxx else CC, *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"


class CLib:
    """A ctypes view of one AOT library (``NAME_*`` functions)."""

    DT = {0: np.float32, 1: np.float64, 2: np.int64, 3: np.int32, 4: np.bool_}

    def __init__(self, paths: dict[str, str], name: str) -> None:
        self.name = name
        self.lib = ctypes.CDLL(paths["shared"])
        rank = int(re.search(rf"#define {name.upper()}_MAX_RANK (\d+)",
                             Path(paths["header"]).read_text()).group(1))

        class Info(ctypes.Structure):
            _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int),
                        ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                        ("shape", ctypes.c_int64 * rank), ("numel", ctypes.c_size_t),
                        ("nbytes", ctypes.c_size_t)]

        self.f("create").restype = ctypes.c_void_p
        self.f("destroy").argtypes = [ctypes.c_void_p]
        self.f("tensor").restype = ctypes.POINTER(Info)
        self.f("num_tensors").restype = ctypes.c_size_t
        self.f("steps").restype = ctypes.c_int64
        self.f("steps").argtypes = [ctypes.c_void_p]
        self.f("is_present").argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        for fn in ("get_param", "set_param"):
            self.f(fn).argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                   ctypes.c_size_t]
        for fn in ("save", "load"):
            self.f(fn).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self.f("reset").argtypes = [ctypes.c_void_p]
        self.f("last_error").argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.tensors = []
        for i in range(self.f("num_tensors")()):
            t = self.f("tensor")(i).contents
            self.tensors.append((t.name.decode(), self.DT[t.dtype],
                                 tuple(t.shape[: t.ndim])))

    def f(self, fn: str) -> Any:
        return getattr(self.lib, f"{self.name}_{fn}")

    def create(self) -> int:
        s = self.f("create")()
        assert s
        return s

    def step(self, s: int, *args: np.ndarray, batch: int | None = None,
             out: np.ndarray | None = None) -> int:
        cargs: list[Any] = [ctypes.c_void_p(s)]
        cargs += [ctypes.c_void_p(a.ctypes.data) for a in args]
        cargs.append(ctypes.c_int64(len(args[0]) if batch is None else batch))
        cargs.append(ctypes.c_void_p(None))  # default hyperparameters
        cargs.append(ctypes.c_void_p(None if out is None else out.ctypes.data))
        return self.f("step")(*cargs)

    def get(self, s: int, name: str) -> np.ndarray:
        _, dtype, shape = next(t for t in self.tensors if t[0] == name)
        out = np.empty(shape, dtype)
        assert self.f("get_param")(s, name.encode(), out.ctypes.data, out.size) == 0
        return out

    def snapshot(self, s: int) -> dict[str, Any]:
        snap: dict[str, Any] = {n: self.get(s, n) for n, _, _ in self.tensors}
        snap.update({f"{n}?": self.f("is_present")(s, n.encode()) for n, _, _ in self.tensors})
        snap["steps"] = self.f("steps")(s)
        return snap


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k


# ---------------------------------------------------------------------------------------
# fixtures: the example libraries (native target), built once
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory: Any) -> tuple[Path, dict[str, dict[str, str]]]:
    out = tmp_path_factory.mktemp("aot_examples")
    return out, ex.build_all(str(out))


@pytest.fixture(scope="module")
def adam(tmp_path_factory: Any) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("aot_adam")
    m = ex.make_mlp("adam")
    paths = gc.aot.build(m.step, m.step.example_args, str(out), "mlp")
    np.save(out / "x.npy", m.X)
    np.save(out / "y.npy", m.y)
    _cc("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{out}", f"-I{EXAMPLES}", "-o",
        out / "mlp_main", EXAMPLES / "mlp_main.c", paths["object"], "-lm")
    return out, paths


# ---------------------------------------------------------------------------------------
# the seed example
# ---------------------------------------------------------------------------------------

def test_seed_main_prints_the_python_example_losses(built: Any) -> None:
    out, paths = built
    _cc("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{out}", f"-I{EXAMPLES}", "-o",
        out / "seed_main", EXAMPLES / "seed_main.c", paths["seed_train"]["object"],
        paths["seed_test"]["object"], "-lm")
    c = subprocess.run([str(out / "seed_main"), str(out)], capture_output=True, text=True,
                       check=True).stdout
    py = subprocess.run([sys.executable, str(ROOT / "examples" / "seed_linreg.py")],
                        capture_output=True, text=True, check=True, cwd=ROOT).stdout
    c_lines = [ln for ln in c.splitlines() if ln.startswith("Epoch")]
    py_lines = [ln for ln in py.splitlines() if ln.startswith("Epoch")]
    assert len(c_lines) == 20
    assert c_lines == py_lines


def test_seed_step_bit_exact_through_ctypes(built: Any) -> None:
    _, paths = built
    lib = CLib(paths["seed_train"], "seed_train")
    s = lib.create()
    ref = ex.make_seed()
    X, Y = ref.X_train, ref.y_train
    loss_c = np.zeros((), np.float32)
    try:
        for _ in range(50):
            assert lib.step(s, X, Y, out=loss_c) == 0
            loss_py = ref.train_step(X, Y)
            assert np.array_equal(loss_c, loss_py.numpy())
        for name, p in ref.model.named_parameters():
            assert np.array_equal(lib.get(s, f"model.{name}"), p.numpy())
            assert np.array_equal(lib.get(s, f"model.{name}.grad"), p.grad.numpy())
        assert lib.f("steps")(s) == 50
    finally:
        lib.f("destroy")(s)


# ---------------------------------------------------------------------------------------
# MLP with Adam: C program, checkpoints, bit exactness
# ---------------------------------------------------------------------------------------

def _python_mlp_run(epochs: int, batch: int) -> tuple[Any, list[str]]:
    m = ex.make_mlp("adam")
    lines = []
    n = len(m.X)
    for epoch in range(epochs):
        losses = [float(m.step(m.X[i:i + batch], m.y[i:i + batch]).item())
                  for i in range(0, n, batch)]
        total = 0.0
        for v in losses:
            total += v
        lines.append(f"epoch {epoch} | loss {total / len(losses):.6f}")
    return m, lines


def test_mlp_adam_c_program_bit_exact(adam: Any) -> None:
    out, paths = adam
    ckpt = out / "after.npz"
    r = subprocess.run([str(out / "mlp_main"), str(out / "x.npy"), str(out / "y.npy"), "2",
                        "64", str(ckpt)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m, py_lines = _python_mlp_run(2, 64)  # 500 rows: 7 full batches and one of 52
    assert r.stdout.splitlines() == py_lines
    c = gc.load(ckpt)
    assert c["format"] == "graphc.aot.state" and c["steps"] == 16
    for name, p in m.model.named_parameters():
        assert np.array_equal(c["modules"]["model"][name], p.numpy()), name
        assert np.array_equal(c["tensors"][f"model.{name}"], p.numpy()), name
        assert np.array_equal(c["tensors"][f"model.{name}.grad"], p.grad.numpy()), name
    sd = m.opt.state_dict()
    assert c["optimizers"]["opt"]["param_groups"][0]["lr"] == sd["param_groups"][0]["lr"]
    assert c["optimizers"]["opt"]["param_groups"][0]["betas"] == (0.9, 0.999)
    for idx, st in sd["state"].items():
        for key, v in st.items():
            assert np.array_equal(c["optimizers"]["opt"]["state"][idx][key], v), (idx, key)

    # resuming in Python from the C checkpoint continues exactly like the Python run
    fresh = ex.make_mlp("adam")
    fresh.model.load_state_dict(c["modules"]["model"])
    fresh.opt.load_state_dict(c["optimizers"]["opt"])
    xb, yb = m.X[:64], m.y[:64]
    a = m.step(xb, yb)
    b = fresh.step(xb, yb)
    assert np.array_equal(a.numpy(), b.numpy())
    for (n1, p1), (_, p2) in zip(m.model.named_parameters(), fresh.model.named_parameters()):
        assert np.array_equal(p1.numpy(), p2.numpy()), n1


def test_save_load_round_trip(adam: Any, tmp_path: Path) -> None:
    _, paths = adam
    lib = CLib(paths, "mlp")
    m = ex.make_mlp("adam")
    s, t = lib.create(), lib.create()
    try:
        fresh = lib.snapshot(t)
        assert fresh["model.0.weight.grad?"] == 0  # absent until the first step
        assert lib.step(s, m.X[:64], m.y[:64]) == 0
        assert lib.step(s, m.X[64:100], m.y[64:100]) == 0
        path = str(tmp_path / "ck.npz").encode()
        assert lib.f("save")(s, path) == 0
        assert lib.f("load")(t, path) == 0
        _same(lib.snapshot(s), lib.snapshot(t))
        # the saved fresh state (grads absent) loads back as absent
        lib.f("reset")(s)
        assert lib.f("save")(s, path) == 0
        assert lib.f("load")(t, path) == 0
        _same(lib.snapshot(t), fresh)
        # a checkpoint for another step is refused and changes nothing
        other = tmp_path / "other.npz"
        gc.save({"x": np.zeros(3)}, other)
        before = lib.snapshot(t)
        assert lib.f("load")(t, str(other).encode()) == 7  # GRAPHC_EFORMAT
        assert lib.f("load")(t, b"/nonexistent/x.npz") == 6  # GRAPHC_EIO
        _same(lib.snapshot(t), before)
    finally:
        lib.f("destroy")(s)
        lib.f("destroy")(t)


def test_python_state_continues_in_c(adam: Any, tmp_path: Path) -> None:
    """gc.aot.save_state (numpy-written zip) -> NAME_load -> the C step continues exactly."""
    _, paths = adam
    lib = CLib(paths, "mlp")
    m = ex.make_mlp("adam")
    for i in range(0, 150, 50):
        m.step(m.X[i:i + 50], m.y[i:i + 50])
    path = tmp_path / "py_state.npz"
    gc.aot.save_state(m.step, path, "mlp")
    assert gc.load(path)["tensors"]["model.0.weight.grad"] is not None
    s = lib.create()
    try:
        assert lib.f("load")(s, str(path).encode()) == 0
        xb, yb = m.X[150:214], m.y[150:214]
        assert lib.step(s, xb, yb) == 0
        m.step(xb, yb)
        for name, p in m.model.named_parameters():
            assert np.array_equal(lib.get(s, f"model.{name}"), p.numpy()), name
        st = m.opt.state[m.model[0].weight]
        assert np.array_equal(lib.get(s, "opt.state[model.0.weight].exp_avg_sq"),
                              st["exp_avg_sq"].numpy())
    finally:
        lib.f("destroy")(s)


def test_errors_leave_state_untouched(adam: Any) -> None:
    _, paths = adam
    lib = CLib(paths, "mlp")
    m = ex.make_mlp("adam")
    s = lib.create()
    try:
        X, y = m.X[:32].copy(), m.y[:32].copy()
        assert lib.step(s, X, y) == 0
        before = lib.snapshot(s)
        assert lib.step(s, X, y, batch=0) == 1  # GRAPHC_EBATCH
        assert lib.step(s, X, y, batch=-5) == 1
        assert lib.step(s, X, y, batch=1 << 40) == 1
        bad = y.copy()
        bad[7] = 10
        assert lib.step(s, X, bad) == 2  # GRAPHC_EINDEX
        info = (ctypes.c_int64 * 4)()
        lib.f("last_error")(s, info)
        assert (info[2], info[3]) == (7, 10)
        bad[7] = -1
        assert lib.step(s, X, bad) == 2
        _same(lib.snapshot(s), before)
        # and the state still trains like the Python step afterwards
        assert lib.step(s, X, y) == 0
        m.step(X, y)
        m.step(X, y)
        assert np.array_equal(lib.get(s, "model.2.weight"), m.model[2].weight.numpy())
    finally:
        lib.f("destroy")(s)


def test_presence_guard_for_accumulating_steps(tmp_path: Path) -> None:
    """A step without zero_grad() was built for absent grads: the second call says so."""
    gc.manual_seed(1)
    model = nn.Linear(3, 1)
    opt = optim.SGD(model.parameters(), lr=0.1)
    X = np.ones((4, 3), np.float32)
    Y = np.zeros((4, 1), np.float32)

    @gc.compile(example_args=(X, Y))
    def acc_step(x: Any, y: Any) -> Any:
        loss = nn.MSELoss()(model(x), y)
        loss.backward()
        opt.step()
        return loss

    paths = gc.aot.build(acc_step, (X, Y), str(tmp_path), "acc")
    lib = CLib(paths, "acc")
    s = lib.create()
    try:
        assert lib.step(s, X, Y) == 0
        before = lib.snapshot(s)
        assert lib.step(s, X, Y) == 5  # GRAPHC_ESTATE
        _same(lib.snapshot(s), before)
        acc_step(X, Y)
        assert np.array_equal(lib.get(s, "model.weight"), model.weight.numpy())
    finally:
        lib.f("destroy")(s)


def test_conv_step_with_epilogues_matches_the_jit(tmp_path: Path) -> None:
    """A conv + bias + ReLU net's step, whose convolutions call their consumers through a
    function pointer (convolution epilogues, one on an input gradient): the C library's
    losses and weights equal the JIT-compiled step's, bit for bit."""
    def make() -> tuple[Any, Any, Any]:
        gc.manual_seed(3)
        model = nn.Sequential(nn.Conv2d(2, 8, 3, padding=1), nn.ReLU(),
                              nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU(),
                              nn.Flatten(), nn.Linear(8 * 4 * 4, 3))
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def step(x: Any, y: Any) -> Any:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return model, opt, step

    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 2, 8, 8)).astype(np.float32)
    Y = rng.integers(0, 3, 5)
    model, _, step = make()
    built = gc.compile(step, example_args=(X, Y))
    assert built.ir("fused").count("convolution with epilogue") == 3
    paths = gc.aot.build(built, (X, Y), str(tmp_path), "convepi")
    ref_model, _, ref_step = make()
    ref = gc.compile(ref_step)
    _three_steps_match(CLib(paths, "convepi"), ref, ref_model, X, Y)


def test_lstm_step_with_weights_packed_before_its_loops_matches_the_jit(tmp_path: Path
                                                                        ) -> None:
    """An LSTM's step: each loop packs its hidden-state weight once before it runs
    (``codegen.loop.prepacked_products``: the GEMM library's pack routine, called from the
    entry function). The C library's losses and weights equal the JIT-compiled step's, bit
    for bit."""
    import re

    def make() -> tuple[Any, Any]:
        gc.manual_seed(5)
        model = nn.ModuleDict({"rnn": nn.LSTM(8, 64, batch_first=True),
                               "head": nn.Linear(64, 3)})
        opt = optim.SGD(model.parameters(), lr=0.05)

        def step(x: Any, y: Any) -> Any:
            opt.zero_grad()
            out, _ = model["rnn"](x)
            loss = ((model["head"](out) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        return model, step

    rng = np.random.default_rng(1)
    X = rng.standard_normal((5, 6, 8)).astype(np.float32)
    Y = rng.standard_normal((5, 6, 3)).astype(np.float32)
    model, step = make()
    built = gc.compile(step, example_args=(X, Y))
    assert re.search(r"k_matmul_prepacked_", built.ir("llvm_unoptimized"))
    paths = gc.aot.build(built, (X, Y), str(tmp_path), "lstm")
    ref_model, ref_step = make()
    ref = gc.compile(ref_step)
    _three_steps_match(CLib(paths, "lstm"), ref, ref_model, X, Y)


def _three_steps_match(lib: Any, ref: Any, ref_model: Any, X: np.ndarray, Y: np.ndarray
                       ) -> None:
    """Three steps of the C library ``lib`` equal three of the JIT-compiled ``ref``: each
    loss, then every parameter (``model.<name>`` in the library), bit for bit."""
    s = lib.create()
    loss_c = np.zeros((), np.float32)
    try:
        for _ in range(3):
            assert lib.step(s, X, Y, out=loss_c) == 0
            assert np.array_equal(loss_c, ref(X, Y).numpy())
        for name, p in ref_model.named_parameters():
            assert np.array_equal(lib.get(s, f"model.{name}"), p.numpy()), name
    finally:
        lib.f("destroy")(s)


# ---------------------------------------------------------------------------------------
# targets, header hygiene, command line
# ---------------------------------------------------------------------------------------

def _objdump(path: str) -> str | None:
    if shutil.which("objdump") is None:
        return None
    return subprocess.run(["objdump", "-d", path], capture_output=True, text=True,
                          check=True).stdout


def test_native_uses_avx512(adam: Any) -> None:
    if "avx512f" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("host has no AVX-512")
    dis = _objdump(adam[1]["object"])
    if dis is None:
        pytest.skip("no objdump")
    assert "zmm" in dis


def test_x86_64_v3_library_runs_and_matches_the_jit_for_that_cpu(tmp_path: Path) -> None:
    from graphc.runtime.cpu import CPUExecutable

    m = ex.make_mlp("adam")
    paths = gc.aot.build(m.step, m.step.example_args, str(tmp_path), "mlp_v3",
                         target="x86-64-v3")
    dis = _objdump(paths["object"])
    if dis is not None:
        assert "zmm" not in dis and "ymm" in dis
    lib = CLib(paths, "mlp_v3")
    v = m.step.variants[-1]
    jit = CPUExecutable(v.graph, v.sig, cpu="x86-64-v3")
    s = lib.create()
    try:
        for i in range(0, 200, 50):
            xb, yb = m.X[i:i + 50], m.y[i:i + 50]
            loss = np.zeros((), np.float32)
            assert lib.step(s, xb, yb, out=loss) == 0
            assert np.array_equal(loss, jit.call((xb, yb)).numpy())
        for name, p in m.model.named_parameters():
            assert np.array_equal(lib.get(s, f"model.{name}"), p.numpy()), name
    finally:
        lib.f("destroy")(s)


def test_headers_compile_as_c99_and_cpp(built: Any, adam: Any) -> None:
    out, paths = built
    src = out / "use.c"
    src.write_text(
        '#include "seed_train.h"\n#include "seed_test.h"\n#include "mlp.h"\n'
        "int use(void) {\n"
        "    mlp_hyper h = mlp_default_hyper();\n"
        "    seed_train_state* s = seed_train_create();\n"
        "    int rc = seed_train_step(s, 0, 0, 1, 0, 0);\n"
        "    seed_train_destroy(s);\n"
        "    return rc + (int)h.opt_g0_lr + (int)mlp_num_tensors();\n}\n")
    _cc("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{out}", "-c", src, "-o",
        out / "use.o")
    cpp = out / "use.cpp"
    cpp.write_text(src.read_text())
    if shutil.which(CXX):
        _cc("-Wall", "-Wextra", "-Werror", f"-I{out}", "-c", cpp, "-o", out / "use_cpp.o",
            cxx=True)
    # the generated wrappers themselves are warning-free
    for p in (*paths.values(), adam[1]):
        _cc("-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{Path(p['header']).parent}",
            "-fsyntax-only", p["source"])


def test_object_exports_only_the_abi(adam: Any) -> None:
    if shutil.which("nm") is None:
        pytest.skip("no nm")
    syms = subprocess.run(["nm", "-D", "--defined-only", adam[1]["shared"]],
                          capture_output=True, text=True, check=True).stdout
    names = {ln.split()[-1] for ln in syms.splitlines() if ln.strip()}
    assert "mlp_step" in names and "mlp_save" in names
    assert not {"mlp_kernel", "mlp_init_blob"} & names
    assert all(n.startswith("mlp_") or n.startswith("_") for n in names), names
    # and the object defines nothing global outside its prefix (two libraries link together)
    syms = subprocess.run(["nm", "-g", "--defined-only", adam[1]["object"]],
                          capture_output=True, text=True, check=True).stdout
    assert all(ln.split()[-1].startswith("mlp_") for ln in syms.splitlines() if ln.strip())


def test_cli_aot_end_to_end(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import numpy as np\nimport graphc as gc\nfrom graphc import nn, optim\n"
        "gc.manual_seed(3)\nmodel = nn.Linear(2, 1)\n"
        "opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.5)\n"
        "X = np.arange(8, dtype=np.float32).reshape(4, 2)\nY = X.sum(1, keepdims=True)\n"
        "@gc.compile(example_args=(X, Y))\n"
        "def train_step(x, y):\n"
        "    opt.zero_grad()\n    loss = nn.MSELoss()(model(x), y)\n"
        "    loss.backward()\n    opt.step()\n    return loss\n")
    out = tmp_path / "build"
    r = subprocess.run([sys.executable, "-m", "graphc", "aot", f"{script}:train_step", "-o",
                        str(out), "--name", "lin"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    for f in ("lin.h", "lin.o", "liblin.so"):
        assert (out / f).exists(), f
    main = tmp_path / "main.c"
    main.write_text(
        '#include <stdio.h>\n#include "lin.h"\n'
        "int main(void) {\n"
        "    float x[8] = {0, 1, 2, 3, 4, 5, 6, 7}, y[4] = {1, 5, 9, 13}, loss = 0;\n"
        "    lin_state* s = lin_create();\n    int i, rc = 0;\n"
        "    for (i = 0; i < 3 && !rc; i++) rc = lin_step(s, x, y, 4, NULL, &loss);\n"
        '    printf("%d %.9g\\n", rc, loss);\n    lin_destroy(s);\n    return rc;\n}\n')
    _cc("-std=c99", "-Wall", "-Werror", f"-I{out}", "-o", tmp_path / "main", main,
        out / "lin.o", "-lm")
    got = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True,
                         check=True).stdout.split()
    assert got[0] == "0"
    # the same three steps in Python
    gc.manual_seed(3)
    model = nn.Linear(2, 1)
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    X = np.arange(8, dtype=np.float32).reshape(4, 2)
    Y = X.sum(1, keepdims=True)

    @gc.compile(example_args=(X, Y))
    def train_step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = nn.MSELoss()(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        loss = train_step(X, Y)
    assert np.float32(float(got[1])) == loss.numpy()


def test_check_finite_step_reports_nonfinite_and_changes_nothing(tmp_path: Path) -> None:
    """A check_finite step built ahead of time returns GRAPHC_ENONFINITE (documented in the
    header, with the checked tensor's name), not GRAPHC_EINTERNAL, and leaves the state."""
    gc.manual_seed(1)
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    X = np.ones((4, 3), np.float32)
    Y = np.zeros((4, 2), np.float32)

    @gc.compile(example_args=(X, Y), check_finite=True)
    def fin_step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = nn.MSELoss()(model(x), y)
        loss.backward()
        opt.step()
        return loss

    paths = gc.aot.build(fin_step, (X, Y), str(tmp_path), "fin")
    header = Path(paths["header"]).read_text()
    assert "GRAPHC_ENONFINITE 9" in header and "fin_checked" in header
    lib = CLib(paths, "fin")
    lib.f("checked").restype = ctypes.c_char_p
    lib.f("checked").argtypes = [ctypes.c_int64]
    s = lib.create()
    try:
        assert lib.step(s, X, Y) == 0
        before = lib.snapshot(s)
        bad = X.copy()
        bad[1, 2] = np.nan
        assert lib.step(s, bad, Y) == 9  # GRAPHC_ENONFINITE
        _same(lib.snapshot(s), before)
        info = (ctypes.c_int64 * 4)()
        lib.f("last_error")(s, info)
        assert info[0] == 3
        name = lib.f("checked")(info[1])
        assert name is not None and b"loss" in name
        assert lib.f("checked")(-1) is None and lib.f("checked")(1000) is None
        assert lib.step(s, X, Y) == 0  # and it goes on
    finally:
        lib.f("destroy")(s)
