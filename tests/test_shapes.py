"""Shape algebra on concrete and symbolic shapes (graphc.ir.shapes) and its run-time guards."""

import numpy as np
import pytest
import sympy

import graphc as gc
from graphc.ir import shapes as sh

B = sh.symbol("B")


def test_broadcast_concrete_and_symbolic():
    assert sh.broadcast((3, 1), (1, 4)) == (3, 4)
    assert sh.broadcast((B, 1), (5,)) == (B, 5)
    assert sh.broadcast((B, 5), (B, 1)) == (B, 5)
    assert sh.broadcast((), (B, 2)) == (B, 2)
    with pytest.raises(sh.ShapeError, match=r"\[B,3\] and \[4\]"):
        sh.broadcast((B, 3), (4,))
    with pytest.raises(sh.ShapeError, match="symbolic by default"):  # the hint
        sh.broadcast((B,), (sh.symbol("C"),))


@pytest.mark.parametrize("src, dst, out", [
    ((B, 784), (B, -1), (B, 784)),
    ((B, 28, 28), (-1, 784), (B, 784)),
    ((B, 16, 7, 7), (B, -1), (B, 784)),
    ((2, 3, 4), (-1,), (24,)),
    ((2, 3, 4), (6, -1), (6, 4)),
    ((B, 6), (-1, 3), (2 * B, 3)),
])
def test_reshape_infers_minus_one(src, dst, out):
    got = sh.reshape(src, dst)
    assert sh.same_shape(got, out), (got, out)


def test_reshape_errors():
    with pytest.raises(sh.ShapeError, match="only one"):
        sh.reshape((2, 3), (-1, -1))
    with pytest.raises(sh.ShapeError, match="invalid for input"):
        sh.reshape((2, 3), (4, 2))
    with pytest.raises(sh.ShapeError, match="divisible"):
        sh.reshape((5, 3), (-1, 2))
    with pytest.raises(sh.ShapeError, match="divisible"):  # outside a trace: no guard sink
        sh.reshape((B, 3), (-1, 2))


@pytest.mark.parametrize("size, k, s, p, d, ceil, expected", [
    (28, 3, 1, 1, 1, False, 28),
    (28, 2, 2, 0, 1, False, 14),
    (7, 2, 2, 0, 1, False, 3),
    (7, 2, 2, 0, 1, True, 4),
    (5, 3, 2, 1, 2, False, 2),
    (6, 3, 3, 1, 1, True, 3),  # the last window would start in the right padding: dropped
])
def test_conv_pool_output_sizes_match_pytorch(size, k, s, p, d, ceil, expected):
    assert sh.conv_out(size, k, s, p, d, ceil) == expected
    torch = pytest.importorskip("torch")
    x = torch.zeros(1, 1, size, size)
    if d == 1:
        y = torch.nn.functional.max_pool2d(x, k, s, p, ceil_mode=ceil) if p <= k // 2 else None
        if y is not None:
            assert y.shape[-1] == expected


def test_conv_out_symbolic():
    out = sh.conv_out(B, 3, 2, 1)
    for b in (1, 2, 7, 28, 257):
        assert sh.evaluate(out, {B: b}) == (b + 2 - 3) // 2 + 1


def test_numel_flatten_and_evaluate():
    s = (B, 16, 7, 7)
    assert sh.numel(s) == 784 * B
    assert sh.evaluate_shape(sh.reshape(s, (B, -1)), {B: 5}) == (5, 784)


def test_bind_names_argument_and_both_values():
    env: dict = {}
    sh.bind((B, 3), (8, 3), env, "argument 'x'")
    with pytest.raises(ValueError, match=r"argument 'y'.*B=8.*\[9, 3\]"):
        sh.bind((B, 3), (9, 3), env, "argument 'y'")
    with pytest.raises(ValueError, match="rank"):
        sh.bind((B, 3), (9,), env, "argument 'z'")


@pytest.mark.parametrize("backend", ["cpu", "interp"])
def test_reshape_guard_checked_at_call_time(backend):
    @gc.compile(backend=backend)
    def f(x):
        return x.reshape(-1, 2).sum(1)

    np.testing.assert_allclose(f(np.arange(6, dtype=np.float32).reshape(2, 3)).numpy(),
                               [1, 5, 9])
    np.testing.assert_allclose(f(np.arange(12, dtype=np.float32).reshape(4, 3)).numpy(),
                               [1, 5, 9, 13, 17, 21])
    with pytest.raises(ValueError, match=r"divisible.*B=3"):
        f(np.ones((3, 3), np.float32))
    assert f.compile_count == 1
    assert "Mod(B,2)" in f.ir("optimized") and "guards: B >= 1" in f.ir("optimized")


def test_mean_divisor_is_symbolic_and_exact():
    @gc.compile
    def f(x):
        return x.mean()

    for b in (1, 3, 10, 257):
        x = np.random.default_rng(b).standard_normal((b, 4)).astype(np.float32)
        np.testing.assert_allclose(f(x).item(), x.mean(), rtol=1e-5)
    assert f.compile_count == 1
    assert "const 4*B" in f.ir("optimized")


def test_dynamic_false_specialises_every_shape():
    @gc.compile(dynamic=False)
    def f(x):
        return x.sum()

    f(np.ones((2, 3), np.float32))
    f(np.ones((4, 3), np.float32))
    assert f.compile_count == 2
    assert "f32[4,3]" in f.ir("optimized")


def test_symbols_are_positive_integers():
    assert B.is_integer and B.is_positive
    assert sympy.floor(B * 784 / 784) == B


C = sh.symbol("C")


@pytest.mark.parametrize("a, b, equal", [
    (32 * B, 1, False), (32 * B, B, False), (2 * (B + 1), 2 * B + 2, True),
    (B * C, C * B, True), ((B + 1) ** 2, B ** 2 + 2 * B + 1, True), (B + C, B + 2 * C, False),
    (sympy.floor(B / 2) * 2 + 2, 2 * (sympy.floor(B / 2) + 1), True),
    (sympy.Max(B, 1), B, True),  # decided by sympy: not a polynomial form
    (B / 2 + B / 2, B, True),
])
def test_same_decides_symbolic_dims(a, b, equal):
    """Expanded polynomials are compared by form; anything else through sympy's a - b."""
    assert sh.same(a, b) is equal
    assert sh.same(b, a) is equal


def test_integer_fast_paths_agree_with_the_symbolic_rules():
    """conv_out, slice_len, resolve_slice and sub on ints give what their sympy forms give."""
    for size in range(1, 12):
        for k, s, p, d, ceil in [(1, 1, 0, 1, False), (3, 2, 1, 1, True), (5, 3, 2, 2, True),
                                 (2, 2, 0, 1, True), (3, 1, 1, 2, False)]:
            if d * (k - 1) + 1 > size + 2 * p:
                continue
            sym = sh.conv_out(sympy.Integer(size), k, s, p, d, ceil)
            assert sh.conv_out(size, k, s, p, d, ceil) == sym, (size, k, s, p, d, ceil)
    for start in range(-3, 8):
        for stop in range(-3, 8):
            for step in (1, 2, 3):
                ref = int(sympy.Max(0, sympy.floor((sympy.Integer(stop) - start + step - 1)
                                                   / step)))
                assert sh.slice_len(start, stop, step) == ref
    for size in range(6):
        for start in (None, *range(-8, 8)):
            for stop in (None, *range(-8, 8)):
                lo, hi = sh.resolve_slice(size, start, stop, 1)
                want = range(size)[start:stop]
                assert 0 <= lo <= hi <= size and hi - lo == len(want)
                assert not want or lo == want[0]
    assert sh.sub(B, B) == 0 and sh.sub(B, 0) is B and sh.sub(7, 3) == 4
    assert sh.sub(4 * B, B) == 3 * B
    assert sh.slice_len(0, B, 1) is B and sh.slice_len(1, B, 1) == B - 1


def test_require_gt_decides_monomials_without_sympy():
    sh.require_gt(4096 * B, 1, "never")  # 4096 * B >= 4096 for every positive B
    sh.require_gt(B * C, 0, "never")
    with pytest.raises(ValueError, match="too few"):
        sh.require_gt(1, 1, "too few")
    assert sh._monomial_min(3 * B ** 2 * C) == 3
    assert sh._monomial_min(B + 1) is None and sh._monomial_min(sympy.floor(B / 2)) is None


def test_tracing_a_sliced_symbolic_step_builds_no_symbolic_sum():
    """Shape rules that meet ``x[:, a:b]`` on a symbolic batch, ``B - B`` in the slice's
    gradient and elementwise checks of ``32*B`` against 1 stay off sympy's ``Add``: its first
    construction in a process imports sympy.tensor and sympy.combinatorics (~0.1 s of every
    compile, even a disk-cached one). Checked in a fresh process."""
    import subprocess
    import sys
    code = (
        "import sys, numpy as np, graphc as gc\n"
        "import sympy.core.add as A\n"
        "orig = A.Add.flatten.__func__\n"
        "seen = []\n"
        "def fl(cls, seq):\n"
        "    if len(seq) > 1: seen.append(tuple(map(str, seq)))\n"
        "    return orig(cls, seq)\n"
        "A.Add.flatten = classmethod(fl)\n"
        "from graphc.trace import trace\n"
        "w = gc.randn(8, 12, requires_grad=True)\n"
        "def f(x):\n"
        "    h = (x.reshape(-1, 4, 3) * 2.0).reshape(x.shape[0], 12) @ w.T\n"
        "    y = h[..., 2:8] + h[:, :6]\n"
        "    loss = (y * y).mean()\n"
        "    loss.backward()\n"
        "    return loss\n"
        "trace(f, (np.ones((5, 12), np.float32),), 'f', True)\n"
        "assert not seen, seen\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_sums_built_without_add_equal_sympys():
    """``shapes.plus``/``scale``/``round_up``/``ceil_mul`` build sympy's canonical form
    directly: equal, hashed and printed the same as the evaluated expression, for random
    sums of monomials, floors and numbers; ``round_up`` and ``ceil_mul`` evaluate right."""
    import random

    from graphc.codegen.llvm_util import size_fraction

    B, T = sh.symbol("B"), sh.symbol("T")
    mons = [B, T, B * T, B ** 2, sympy.floor(B / 3, evaluate=False), 1]
    rng = random.Random(0)
    for _ in range(400):
        ds = [sum((rng.randint(-3, 5) * rng.choice(mons) for _ in range(rng.randint(1, 3))),
                  sympy.Integer(0)) if rng.random() < 0.8 else rng.randint(0, 9)
              for _ in range(rng.randint(1, 4))]
        got, want = sh.plus(*ds), sh.dim(sum(ds, sympy.Integer(0)))
        assert got == want and hash(got) == hash(want), (ds, got, want)
        assert sympy.srepr(got) == sympy.srepr(want)
        c = rng.choice([2, 3, 64, sympy.Rational(1, 64)])
        assert sh.scale(ds[0], c) == sh.dim(sympy.expand(ds[0] * c))
    for d in (4 * B, 3 * B + 5, 4 * B * T, 64 * B, 7):
        for a in (64, 6):
            r, c = sh.round_up(d, a), sh.ceil_mul(d, a)
            for b, t in ((1, 1), (2, 3), (7, 5), (100, 9)):
                v = int(sympy.sympify(d).subs({B: b, T: t}))
                assert sh.evaluate(r, {B: b, T: t}) == (v + a - 1) // a * a
                assert sh.evaluate(c, {B: b, T: t}) == -(-v // a) * a
            if not isinstance(r, int):
                num, den = size_fraction(r.args[1].args[0])
                assert sympy.simplify(num / den - r.args[1].args[0]) == 0


def test_a_cold_compile_builds_no_symbolic_sum():
    """The planner's offsets and arena, the GEMM workspaces, BatchNorm's ``n - 1`` and the
    code generator's size expressions are built by ``shapes.plus``: a cold compile of steps
    with symbolic batch sizes (an MLP with momentum SGD, a conv net with BatchNorm and
    pooling) never evaluates a sympy ``Add``, whose first use imports sympy.tensor (~0.07 s
    of every cold compile). Checked in a fresh process with an empty cache."""
    import subprocess
    import sys
    import tempfile
    code = (
        "import sys, numpy as np, graphc as gc\n"
        "from graphc import nn, optim\n"
        "import sympy.core.add as A\n"
        "orig = A.Add.flatten.__func__\n"
        "seen = []\n"
        "def fl(cls, seq):\n"
        "    seen.append(tuple(map(str, seq)))\n"
        "    return orig(cls, seq)\n"
        "A.Add.flatten = classmethod(fl)\n"
        "for m, x in ((nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 10)),\n"
        "              np.ones((5, 20), np.float32)),\n"
        "             (nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4),\n"
        "                            nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),\n"
        "                            nn.Linear(64, 10)), np.ones((3, 1, 8, 8), np.float32))):\n"
        "    opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)\n"
        "    def step(a, b, m=m, opt=opt):\n"
        "        opt.zero_grad()\n"
        "        loss = nn.functional.cross_entropy(m(a), b)\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        return loss\n"
        "    f = gc.compile(step)\n"
        "    float(f(x, np.zeros(len(x), np.int64)))\n"
        "    assert f.compile_log.counts['disk cache'] == 'miss'\n"
        "assert not seen, seen[:5]\n"
        "assert 'sympy.tensor.tensor' not in sys.modules\n")
    with tempfile.TemporaryDirectory() as cache:
        env = {**__import__("os").environ, "GRAPHC_CACHE_DIR": cache}
        env.pop("GRAPHC_CACHE", None)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


def test_size_one_argument_broadcasts_against_the_batch():
    """A ``[1, C, 1, 1]`` argument beside ``[N, C, H, W]`` data: its leading 1 would be a
    second batch symbol that cannot broadcast, so that size is fixed (PyTorch never makes
    sizes 0 and 1 dynamic) while the data's batch stays symbolic."""
    rng = np.random.default_rng(0)
    s = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)

    @gc.compile
    def scale(x, s):
        return (x * s + 1.0).sum(dim=(0, 2, 3))

    for n in (8, 5, 1):
        x = rng.standard_normal((n, 3, 4, 4)).astype(np.float32)
        np.testing.assert_allclose(scale(x, s).numpy(), (x * s + 1.0).sum(axis=(0, 2, 3)),
                                   rtol=1e-5, atol=1e-5)
    assert scale.compile_count == 1

    @gc.compile
    def double(x):  # a batch of one where nothing broadcasts it: still one variant for all
        return x * 2.0

    for n in (1, 4, 9):
        np.testing.assert_array_equal(double(np.ones((n, 3), np.float32)).numpy(),
                                      np.full((n, 3), 2.0, np.float32))
    assert double.compile_count == 1


def test_shape_error_without_size_one_axes_is_raised_as_before():
    @gc.compile
    def bad(x, y):
        return x + y

    with pytest.raises(ValueError, match="cannot be broadcast"):
        bad(np.ones((4, 3), np.float32), np.ones((5, 2), np.float32))


def test_symbolic_size_in_tensor_arithmetic():
    """``loss / x.shape[0]``, ``x * x.size(0)``: a traced batch size is a symbol, and as an
    operand it is the integer the step sees when it runs (PyTorch's SymInt), one variant
    for every batch size; integer tensors stay integer."""

    def fn(x, i):
        n = x.shape[0]
        return x.sum(0) / n, x * x.size(0) - n, n / (x.abs() + 1), i + n, 2 ** x.new_ones(()) * n

    step = gc.compile(fn)
    rng = np.random.default_rng(3)
    for b in (5, 1, 12):
        x = rng.standard_normal((b, 3)).astype(np.float32)
        i = rng.integers(0, 9, (b,))
        got = step(x, i)
        want = fn(gc.tensor(x), gc.tensor(i))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
        np.testing.assert_allclose(got[0].numpy(), x.sum(0) / b, rtol=1e-6)
        np.testing.assert_array_equal(got[3].numpy(), i + b)
    assert step.compile_count == 1


@pytest.mark.parametrize("name", ["int", "len", "range", "max", "arange", "sqrt"])
def test_symbolic_size_needed_as_a_number_specialises(name):
    """Python code that needs the batch size as a number (``int(n)``, ``len(x)``,
    ``range(n)``, ``max(n, 2)``, ``gc.arange(n)``, ``n ** 0.5``) gets a variant per size,
    as torch.compile specialises a SymInt turned into an int, with eager's values."""
    fns = {
        "int": lambda x: x * int(x.shape[0]),
        "len": lambda x: x.sum() / len(x),
        "range": lambda x: sum(x[i] * i for i in range(x.shape[0])),
        "max": lambda x: x * max(x.shape[0], 2),
        "arange": lambda x: gc.arange(x.shape[0]) * 1.0 + x.sum(1),
        "sqrt": lambda x: x / x.shape[0] ** 0.5,
    }
    fn = fns[name]
    step = gc.compile(fn)
    rng = np.random.default_rng(1)
    for b in (4, 1, 4, 7):
        x = rng.standard_normal((b, 3)).astype(np.float32)
        np.testing.assert_allclose(step(x).numpy(), fn(gc.tensor(x)).numpy(), rtol=1e-6,
                                   atol=1e-6)
    assert step.compile_count == 3  # sizes 4, 1 and 7


def test_type_error_of_the_code_itself_is_raised():
    @gc.compile
    def bad(x):
        return x + "a"

    with pytest.raises(TypeError):
        bad(np.ones((3, 2), np.float32))


def test_an_argument_whose_first_dim_is_not_the_batch_compiles():
    """The default makes every argument's first dim symbolic; an attention mask ``[L, S]``
    beside batched ``q, k, v`` then met ``B1`` against ``L`` and the compile failed with a
    ShapeError. Now the arguments whose first size is not the most common one are traced
    with fixed sizes: one variant serves every batch size, the mask's shape is guarded, and
    a genuine mismatch still raises, naming concrete shapes."""
    import graphc.nn.functional as F

    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    kv = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    mask = rng.random((5, 7)) < 0.7
    mask[:, 0] = True
    f = gc.compile(lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m))
    for n in (2, 1):
        got = f(q[:n], kv[:n], kv[:n], mask)
        want = F.scaled_dot_product_attention(gc.tensor(q[:n]), gc.tensor(kv[:n]),
                                              gc.tensor(kv[:n]), attn_mask=gc.tensor(mask))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert f.compile_count == 1
    f(q, kv, kv, np.ones((5, 7), bool))  # another mask of that shape: the same variant
    assert f.compile_count == 1
    g = gc.compile(lambda a, b: a + b)
    with pytest.raises(sh.ShapeError, match=r"shapes \[2,3\] and \[4,5\]"):
        g(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))


def test_a_matmul_of_two_arguments_compiles():
    """``a @ b`` of two arguments: the default made b's first dim (the inner one) a symbol
    beside a's fixed last dim, and matmul's rule raised an OpError ("1600 != B1") that the
    trace did not take for a shape it could fix, so the plain product failed to compile
    (``cat`` likewise, with its RuntimeError). Now the rule names the symbols and the trace
    retries on these errors with fixed sizes: one variant for every M, the inner size
    guarded, and a genuine mismatch still the op's error, with the sizes."""
    from graphc.ir.ops import OpError

    rng = np.random.default_rng(0)
    b = rng.standard_normal((40, 6)).astype(np.float32)
    f = gc.compile(lambda x, y: x @ y)
    for m in (9, 3, 1):
        a = rng.standard_normal((m, 40)).astype(np.float32)
        np.testing.assert_allclose(f(a, b).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    assert f.compile_count == 1
    assert "f32[B,40]" in f.ir("traced") and "f32[40,6]" in f.ir("traced")
    with pytest.raises(OpError, match=r"inner dimensions differ.*\(40 != 41\)"):
        f(np.ones((2, 40), np.float32), np.ones((41, 6), np.float32))
    assert f.compile_count == 1
    # the same with a size check of a tensor function (RuntimeError, as PyTorch's): cat's
    # b.T is [6, B1] beside a's [B, 40]; the trace retries with b's sizes fixed, and a
    # genuine mismatch says which sizes differ
    g = gc.compile(lambda x, y: gc.cat([x, y.T], dim=0))
    for m in (5, 2):
        a = rng.standard_normal((m, 40)).astype(np.float32)
        np.testing.assert_array_equal(g(a, b).numpy(), np.concatenate([a, b.T]))
    assert g.compile_count == 1
    with pytest.raises(RuntimeError, match=r"got \(B, 40\) and \(6, 41\)"):
        g(np.ones((2, 40), np.float32), np.ones((41, 6), np.float32))


@pytest.mark.parametrize("groups", [1, 2])
def test_a_conv_weight_passed_as_an_argument_gets_fixed_sizes(groups):
    """The default made a weight argument's out-channels a symbol: with ``groups=1`` the
    compile crashed in the direct loops (a TypeError on the symbol), with groups a shape
    check failed, and the fast kernels never applied. Now the conv rule names the symbols it
    needs fixed and the trace fixes exactly those axes: one variant, every batch size, the
    implicit GEMM."""
    from _torch import torch

    import graphc.nn.functional as F

    rng = np.random.default_rng(groups)
    w = rng.standard_normal((16, 8 // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    f = gc.compile(lambda x, w, b: F.relu(F.conv2d(x, w, b, padding=1, groups=groups)))
    for n in (3, 5, 1):
        x = rng.standard_normal((n, 8, 9, 9)).astype(np.float32)
        want = torch.relu(torch.nn.functional.conv2d(
            torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1, groups=groups))
        np.testing.assert_allclose(np.array(f(x, w, b)), want.numpy(), rtol=1e-4, atol=1e-4)
    assert f.compile_count == 1
    assert "implicit GEMM" in f.ir("fused")
    # asked for explicitly, a symbolic weight size is an error that says why
    h = gc.compile(lambda x, w: F.conv2d(x, w), dynamic={"w": 0})
    with pytest.raises(sh.ShapeError, match="only the batch may be symbolic"):
        h(np.ones((2, 3, 5, 5), np.float32), np.ones((4, 3, 3, 3), np.float32))


def test_dynamic_dict_is_checked_and_takes_one_axis():
    """``dynamic={"x": 0}`` (an axis, not a tuple) failed inside the trace and was taken for
    Python needing a size as a number: every size silently fixed, a compile per shape. Now
    an int is one axis, negative axes count from the end, and a key or axis that does not
    exist raises a ValueError naming it."""
    f = gc.compile(lambda x: x * 2, dynamic={"x": 0})
    g = gc.compile(lambda x: x * 2, dynamic={"x": -1})
    for n in (2, 3):
        np.testing.assert_array_equal(np.array(f(np.ones((n, 3), np.float32))), 2)
        g(np.ones((3, n), np.float32))
    assert f.compile_count == 1 and g.compile_count == 1
    for bad, msg in (({"q": 0}, "'q' is not an argument"),
                     ({"x": 5}, r"axes \(5,\) out of range for argument 'x' of shape \(2, 3\)"),
                     ({"x": "a"}, "expected an axis or a tuple of axes, got 'a'"),
                     ({"x": (0, True)}, "expected an axis or a tuple of axes")):
        with pytest.raises(ValueError, match=msg):
            gc.compile(lambda x: x * 2, dynamic=bad)(np.ones((2, 3), np.float32))
