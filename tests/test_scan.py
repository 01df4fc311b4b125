"""The ``scan`` loop node (graphc/ir/loops.py): printed, verified, interpreted, differentiated
(a reverse scan, checked against finite differences), lowered to one native loop whose trip
count is a symbol, and the recurrent layers built on it (one compile for every length,
compile time independent of the length). PyTorch parity of the layers is tests/test_rnn.py's.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn
from graphc.ir import Builder, Graph
from graphc.ir import dtypes as dt
from graphc.ir import loops as L
from graphc.ir import shapes as sh
from graphc.ir.ops import OpError
from graphc.ir.verify import VerifyError, verify
from graphc.loops import scan

RNG = np.random.default_rng(0)


def _params(dtype: Any = np.float64) -> dict[str, Any]:
    r = np.random.default_rng(3)
    return {"w": nn.Parameter((r.standard_normal((3, 4)) * 0.5).astype(dtype)),
            "u": nn.Parameter((r.standard_normal((4, 4)) * 0.5).astype(dtype)),
            "h0": nn.Parameter((r.standard_normal((2, 4)) * 0.5).astype(dtype))}


def _elman(p: dict[str, Any], x: Any, reverse: bool = False, remat: bool = False) -> Any:
    """A two-carry scan: an Elman state and a running sum; one stacked output."""

    def step(c: Any, xt: Any) -> Any:
        h, acc = c
        hn = (xt[0] @ p["w"] + h @ p["u"]).tanh()
        return (hn, acc + hn * xt[0].sum(-1, keepdim=True)), (hn * hn,)

    (h, acc), (ys,) = scan(step, (p["h0"], p["h0"] * 0.5), (x,), reverse=reverse,
                           remat=remat)
    return (ys.sum() + (h * acc).sum() * 0.5)


def _loss_step(p: dict[str, Any], reverse: bool = False, remat: bool = False) -> Any:
    def f(x: Any) -> Any:
        for q in p.values():
            q.grad = None
        loss = _elman(p, x, reverse, remat)
        loss.backward()
        return loss

    return f


# -- the IR: printed once, verified ----------------------------------------------------------

def test_printed_body_once_and_types() -> None:
    p = _params(np.float32)
    f = gc.compile(_loss_step(p))
    f(RNG.standard_normal((5, 2, 3)).astype(np.float32))
    text = f.ir("optimized")
    assert text.count("@body0(") == 1 and text.count("@body1(") == 1  # forward, reverse scan
    assert "@body2(" not in text  # the forward that stores the residuals is the only one
    fwd = next(line for line in text.splitlines() if " = scan " in line)
    assert "{body=@body0, carries=2, reverse=False, xs=1}" in fwd
    # the final carries, then the stacked output, the stored carries and the intermediates
    # the backward step reads (stored, not recomputed: remat=False)
    assert ": (f32[2,4], f32[2,4], f32[B,2,4], f32[B,2,4], f32[B,2,4], f32[B," in fwd
    assert "reverse=True" in next(line for line in text.splitlines() if "@body1," in line)
    verify(f.variants[-1].graph)
    fused = f.ir("fused")  # the kernel plan: the loop, then each body's kernels indented
    assert "scan loop of B steps:" in fused and "scan loop of B steps, reversed:" in fused
    assert fused.count("  | body of %") == 2


def _tiny_body(b: Builder) -> Graph:
    c = b.input("c", "arg", (2,), dt.float32)
    x = b.input("x", "arg", (2,), dt.float32)
    return Graph("body", [c, x], [b.op("add", (c, x)), b.op("mul", (c, x))])


def test_shape_rule_checks_operands_against_the_body() -> None:
    b = Builder()
    body = _tiny_body(b)
    c0 = b.input("c0", "arg", (2,), dt.float32)
    t = sh.symbol("T")
    xs = b.input("xs", "arg", (t, 2), dt.float32)
    s = b.op("scan", (c0, xs), body=body, carries=1, xs=1)
    assert [t[0] for t in L.result_types(s)][0] == (2,)
    assert b.op("scan_out", (s,), index=1).shape[1:] == (2,)
    with pytest.raises(OpError, match="sequence operand 1 is f32\\[T,3\\]"):
        b.op("scan", (c0, b.input("bad", "arg", (t, 3), dt.float32)), body=body,
             carries=1, xs=1)
    with pytest.raises(OpError, match="carry operand 0 is f64"):
        b.op("scan", (b.input("c64", "arg", (2,), dt.float64), xs), body=body, carries=1,
             xs=1)
    with pytest.raises(OpError, match="index 2 out of range"):
        b.op("scan_out", (s,), index=2)


def test_verifier_rejects_a_direct_read_of_a_scan_and_checks_the_body() -> None:
    b = Builder()
    body = _tiny_body(b)
    c0 = b.input("c0", "arg", (2,), dt.float32)
    xs = b.input("xs", "arg", (4, 2), dt.float32)
    s = b.op("scan", (c0, xs), body=body, carries=1, xs=1)
    good = Graph("g", [c0, xs], [b.op("scan_out", (s,), index=0)])
    verify(good)
    bad = Graph("g", [c0, xs], [b.op("detach", (s,))])
    with pytest.raises(VerifyError, match="reads the scan"):
        verify(bad)
    # a body whose node lies about its type fails inside the body
    c = b.input("c", "arg", (2,), dt.float32)
    x = b.input("x", "arg", (2,), dt.float32)
    liar = b.op("mul", (c, x))
    liar.shape = (3,)
    broken = Graph("broken", [c, x], [b.op("add", (c, x)), liar])
    s2 = b.op("scan", (c0, xs), body=broken, carries=1, xs=1)
    with pytest.raises(VerifyError, match="in the body of"):
        verify(Graph("g", [c0, xs], [b.op("scan_out", (s2,), index=1)]))


# -- interpreter, eager loop, native loop ----------------------------------------------------

@pytest.mark.parametrize("reverse", [False, True])
def test_backends_agree_with_the_eager_loop(reverse: bool) -> None:
    p = _params(np.float64)
    x = RNG.standard_normal((6, 2, 3))
    eager = _loss_step(p, reverse)
    want = float(eager(x).numpy())
    wgrads = {k: q.grad.numpy().copy() for k, q in p.items()}
    for backend in ("interp", None):
        f = gc.compile(_loss_step(p, reverse), backend=backend)
        for t in (6, 1, 9):
            xt = x if t == 6 else RNG.standard_normal((t, 2, 3))
            got = float(f(xt).numpy())
            if t == 6:
                np.testing.assert_allclose(got, want, rtol=1e-12)
                for k, q in p.items():
                    np.testing.assert_allclose(q.grad.numpy(), wgrads[k], rtol=1e-10,
                                               atol=1e-12, err_msg=f"{backend} {k}")
        assert f.compile_count == 1


def test_remat_recomputes_instead_of_storing() -> None:
    """remat=True: the forward stores only the carries, the backward body recomputes the
    step (one more matmul there); the gradients are the same."""
    x = RNG.standard_normal((5, 2, 3))
    res = {}
    for remat in (False, True):
        p = _params(np.float64)
        f = gc.compile(_loss_step(p, remat=remat))
        res[remat] = (float(f(x).numpy()), {k: q.grad.numpy().copy() for k, q in p.items()})
        text = f.ir("optimized")
        fwd = next(line for line in text.splitlines() if "@body0," in line)
        body1 = text[text.index("@body1("):]
        if remat:
            assert fwd.count("f64[B,2,4]") == 3 and "remat=True" in fwd  # ys, 2 carries
            assert body1.count("matmul") == 3  # recomputed: 2 forward, 1 backward product
        else:
            assert fwd.count("f64[B,2,4]") > 3
            assert body1.count("matmul") == 1  # only the backward's (the weight's: after)
    assert res[False][0] == res[True][0]
    for k in res[False][1]:
        np.testing.assert_allclose(res[True][1][k], res[False][1][k], rtol=1e-13, err_msg=k)


@pytest.mark.parametrize("backend", ["interp", None])
def test_gradient_matches_finite_differences(backend: str | None) -> None:
    """The reverse scan's gradients (weights, initial carry, the sequence) against central
    differences of the compiled forward, in float64."""
    p = _params(np.float64)
    x0 = RNG.standard_normal((4, 2, 3))
    xp = nn.Parameter(np.zeros_like(x0))

    def loss(x: Any) -> Any:
        return _elman(p, x + xp)

    def step(x: Any) -> Any:
        for q in [*p.values(), xp]:
            q.grad = None
        out = loss(x)
        out.backward()
        return out

    f = gc.compile(step, backend=backend, dynamic=False)
    fwd = gc.compile(loss, backend=backend, dynamic=False)
    f(x0)
    eps = 1e-6
    for name, q in [*p.items(), ("x", xp)]:
        g = q.grad.numpy().copy()
        arr = q.numpy()  # the parameter's own array: the compiled steps read it live
        num = np.zeros_like(g)
        for i in np.ndindex(g.shape):
            old = arr[i]
            arr[i] = old + eps
            hi = float(fwd(x0).numpy())
            arr[i] = old - eps
            lo = float(fwd(x0).numpy())
            arr[i] = old
            num[i] = (hi - lo) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-8, err_msg=name)


def test_nested_scan() -> None:
    """A scan inside a scan's body: interpreted, lowered (the inner loop inside the outer
    one) and differentiated."""
    p = _params(np.float64)

    def loss(x: Any) -> Any:
        def outer(c: Any, xt: Any) -> Any:
            def inner(ci: Any, xi: Any) -> Any:
                h = (xi[0] @ p["w"] + ci[0] @ p["u"]).tanh()
                return (h,), (h,)

            (h,), (hs,) = scan(inner, c, (xt[0],))
            return (h * 0.5,), (hs.sum(0),)

        (h,), (ys,) = scan(outer, (p["h0"],), (x,))
        return ys.sum() + h.sum()

    def step(x: Any) -> Any:
        for q in p.values():
            q.grad = None
        out = loss(x)
        out.backward()
        return out

    x = RNG.standard_normal((3, 5, 2, 3))
    want = float(step(x).numpy())
    wg = {k: q.grad.numpy().copy() for k, q in p.items()}
    for backend in ("interp", None):
        f = gc.compile(step, backend=backend)
        np.testing.assert_allclose(float(f(x).numpy()), want, rtol=1e-12)
        for k, q in p.items():
            np.testing.assert_allclose(q.grad.numpy(), wg[k], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{backend} {k}")
        # forward: the outer loop, the inner one in its body; backward: the outer reverse
        # scan, whose body recomputes the inner loop and runs its reverse scan
        assert f.ir("optimized").count(" = scan ") == 5


# -- recurrent layers: one compile, compile time independent of the length ------------------

def _lstm_parts() -> tuple[Any, Any]:
    """An LSTM and a Linear head trained with SGD: the step function, not compiled, and
    the model (``_lstm_step`` compiles it)."""
    gc.manual_seed(0)
    model = nn.LSTM(8, 16, num_layers=2, batch_first=True)
    head = nn.Linear(16, 8)
    opt = gc.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        out, _ = model(x)
        loss = ((head(out) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return step, model


def _lstm_step(seq: int | None) -> tuple[Any, Any]:
    step, model = _lstm_parts()
    dyn = {0: (0,), 1: (0,)} if seq is not None else {0: (0, 1), 1: (0, 1)}
    return gc.compile(step, dynamic=dyn), model


def test_lstm_step_one_compile_for_every_length() -> None:
    f, _ = _lstm_step(None)
    for t in (1, 7, 64, 3):
        x = RNG.standard_normal((4, t, 8)).astype(np.float32)
        assert np.isfinite(float(f(x, x).numpy()))
    assert f.compile_count == 1


def test_compile_does_not_grow_with_the_length() -> None:
    """A step specialised on the length (fixed sizes): the graph and the emitted code are
    the same size for 8 and 64 steps, and compiling 64 takes no longer than a small multiple
    of compiling 8 (an unrolled loop took ~8x)."""
    sizes, times = {}, {}
    for t in (8, 64):
        f, _ = _lstm_step(t)
        x = RNG.standard_normal((4, t, 8)).astype(np.float32)
        t0 = time.perf_counter()
        f(x, x)
        times[t] = time.perf_counter() - t0
        sizes[t] = (len(f.ir("optimized").splitlines()),
                    f.variants[-1].exe.lowering.kernels_emitted)
    assert sizes[8] == sizes[64]
    assert times[64] < 3 * times[8] + 1.0, times


def test_step_ending_in_a_scan_links_its_body_gemm() -> None:
    """A scan as the step's last kernel: its body's GEMM tile is still handed to the
    compiler (it was only handed out after the next kernel), and profiling names the loop."""
    p = _params(np.float32)

    def fwd(x: Any) -> Any:
        def step(c: Any, xt: Any) -> Any:
            h = (xt[0] @ p["w"] + c[0] @ p["u"]).tanh()
            return (h,), (h,)

        return scan(step, (p["h0"],), (x,))[1][0]

    with gc.no_grad():
        f = gc.compile(fwd)
        x = RNG.standard_normal((5, 2, 3)).astype(np.float32)
        np.testing.assert_allclose(f(x).numpy(), fwd(x).numpy(), rtol=1e-5, atol=1e-6)
    assert any(name.endswith(" scan") for name in f.variants[-1].exe.lowering.unit_names)


def test_weights_enter_the_body_untransposed_and_their_gradients_stay_one_product() -> None:
    """``h @ W_hh.T`` in an LSTM body reads ``W_hh`` itself (the GEMM reads it in place, no
    transposed copy per call), and the reverse scan still sums the weight's gradient as one
    product after the loop: besides the state cotangents it carries only the biases'
    gradients, no weight-sized accumulator."""
    import re

    f, model = _lstm_step(None)
    x = RNG.standard_normal((4, 5, 8)).astype(np.float32)
    f(x, x)
    text = f.ir("optimized")
    rev = re.findall(r"\{body=(@body\d+), carries=\d+, reverse=True", text)
    assert len(rev) == 2  # one reverse scan per layer
    for name in rev:
        sig = next(line for line in text.splitlines() if line.startswith(name + "("))
        accs = re.findall(r"g_w\d+: f32\[([^\]]*)\]", sig)
        assert all("," not in a for a in accs), accs  # bias-sized accumulators only
    fused = f.ir("fused")
    assert not re.search(r"= permute : f32\[16,64\]", fused)  # no hoisted W_hh^T copy
    # the weight gradients are right (PyTorch parity is tests/test_rnn.py's; here: finite)
    assert all(np.isfinite(p.grad.numpy()).all() for p in model.parameters())



def test_a_value_stacked_twice_is_stored_once_and_values_match_eager() -> None:
    """A backward LSTM step returns its gates' gradient twice (once for each weight
    gradient after the loop): both products read one stacked result (``passes.simplify``),
    and the loop stores it once (``codegen.loop`` copies no result nothing reads). Two
    compiled steps equal two eager ones: losses and updated weights."""
    import re

    xs = [RNG.standard_normal((4, 6, 8)).astype(np.float32) for _ in range(2)]
    step, model = _lstm_parts()
    f = gc.compile(step, dynamic={0: (0, 1), 1: (0, 1)})
    losses = [float(f(x, x).numpy()) for x in xs]
    got = {k: np.array(v) for k, v in model.state_dict().items()}
    text = f.ir("optimized")
    rev = re.findall(r"%(\d+) = scan .*reverse=True", text)
    assert len(rev) == 2
    for scan_id in rev:
        outs = re.findall(rf"= scan_out %{scan_id} \{{index=\d+\}} : f32\[([^\]]+)\]", text)
        gates = [shape for shape in outs if shape.count(",") == 2 and shape.endswith(",64")]
        assert len(gates) == 1, outs  # the [T, B, 4H] gradient, stacked once
    estep, emodel = _lstm_parts()
    elosses = [float(estep(gc.tensor(x), gc.tensor(x)).numpy()) for x in xs]
    np.testing.assert_allclose(losses, elosses, rtol=1e-5)
    for k, v in emodel.state_dict().items():
        np.testing.assert_allclose(got[k], np.asarray(v), rtol=1e-5, atol=1e-6, err_msg=k)


_PREPACK_SCRIPT = """
import re
import numpy as np
import graphc as gc
from graphc import nn
from graphc.loops import scan

r = np.random.default_rng(7)
# N = 1000 is no whole number of panels, K = 1100 more than one K block on every host
w = nn.Parameter((r.standard_normal((1000, 1100)) * 0.03).astype(np.float32))
v = nn.Parameter((r.standard_normal((1000, 1100)) * 0.03).astype(np.float32))
h0 = (r.standard_normal((7, 1100)) * 0.5).astype(np.float32)
xs = (r.standard_normal((3, 7, 1000)) * 0.5).astype(np.float32)

def fwd(h, x):
    def step(c, xt):
        a = (c[0] @ w.T + xt[0]).tanh()          # B = W^T: k-contiguous
        b = (a @ v).tanh()                       # B = V: n-contiguous
        return (b,), (a,)
    (hn,), (ys,) = scan(step, (h,), (x,))
    return hn, ys

with gc.no_grad():
    f = gc.compile(fwd, dynamic=False)
    got = [np.asarray(t) for t in f(h0, xs)]
    eager = [t.numpy() for t in fwd(gc.tensor(h0), gc.tensor(xs))]
text = f.ir("llvm_unoptimized")
n_pre = len(set(re.findall(r"k_matmul_prepacked_[0-9a-f]+", text)))
np.savez(OUT, hn=got[0], ys=got[1], ehn=eager[0], eys=eager[1], n_pre=np.array(n_pre))
"""


def test_loop_invariant_weights_are_packed_once_before_the_loop(tmp_path) -> None:
    """Both products of the body read their weight packed once before the loop
    (``codegen.loop.prepacked_products``): a transposed and a plain B, N no whole number of
    panels, K in more than one block. Values equal the eager loop's; one and two threads
    (the columns split between them) bit for bit the same."""
    from _threads import assert_bit_identical, run_per_thread_count

    runs = run_per_thread_count(tmp_path, _PREPACK_SCRIPT)
    assert_bit_identical(runs)
    r = runs[0]
    assert int(r["n_pre"]) == 2
    np.testing.assert_allclose(r["hn"], r["ehn"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["ys"], r["eys"], rtol=1e-4, atol=1e-5)


def test_a_tiny_product_in_a_loop_reads_its_weight_unpacked() -> None:
    """A body product with two tiny sizes (one row, K = 4: the GEMM's unpacked loops, which
    read B itself) keeps its weight unpacked: packing it before the loop would hand those
    loops the panels."""
    r = np.random.default_rng(9)
    w = nn.Parameter((r.standard_normal((2048, 4)) * 0.5).astype(np.float32))
    h0 = r.standard_normal((1, 4)).astype(np.float32)
    xs = r.standard_normal((3, 1, 4)).astype(np.float32)

    def fwd(h: Any, x: Any) -> Any:
        def step(c: Any, xt: Any) -> Any:
            a = (c[0] @ w.T).tanh()  # [1, 2048]
            return (a[:, :4] + xt[0],), (a,)

        return scan(step, (h,), (x,))[1][0]

    with gc.no_grad():
        f = gc.compile(fwd, dynamic=False)
        np.testing.assert_allclose(np.asarray(f(h0, xs)),
                                   fwd(gc.tensor(h0), gc.tensor(xs)).numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert "k_matmul_prepacked_" not in f.ir("llvm_unoptimized")
