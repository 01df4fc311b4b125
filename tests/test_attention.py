"""Fused scaled dot-product attention (``attention`` / ``attention_grad``, codegen/attention.py).

Compiled against eager against PyTorch, values and the three gradients, over the shapes the
kernel treats differently: causal or not, L != S, row counts that are and are not multiples
of the row block, head sizes below, at and above the vector width (and above one chunk of
accumulators), no batch dims to two, float64, a symbolic batch and sequence length; the
choice of implementation (``sdpa_kernel``) and its guard; a hypothesis fuzzer over random
shapes against the interpreter. The fused backward's own derivative (through its primitive
form) is checked against finite differences in ``tests/test_ops.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc as gc
from graphc.nn import functional as F
from graphc.nn.attention import SDPBackend, sdpa_kernel

torch = pytest.importorskip("torch")


def _data(shape_q: tuple, shape_k: tuple, dtype: type = np.float32, seed: int = 0
          ) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    v = rng.standard_normal(shape_k).astype(dtype)
    g = rng.standard_normal(shape_q).astype(dtype)
    return [q, k, v, g]


def _graphc(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, causal: bool,
            compiled: bool, scale: float | None = None, dynamic: bool = False,
            dropout_p: float = 0.0, fused: bool | None = None,
            mask: np.ndarray | None = None) -> list:
    """Output and q, k, v gradients of ``sum(g * sdpa(q, k, v))``, compiled or eager;
    ``fused``: assert whether the compiled step used the attention kernel."""
    params = [gc.nn.Parameter(gc.tensor(a)) for a in (q, k, v)]
    gmask = None if mask is None else gc.tensor(mask)

    def step(go: gc.Tensor) -> gc.Tensor:
        for p in params:
            p.grad = None
        o = F.scaled_dot_product_attention(*params, attn_mask=gmask, is_causal=causal,
                                           scale=scale, dropout_p=dropout_p)
        (o * go).sum().backward()
        return o

    fn = gc.compile(step, dynamic=dynamic) if compiled else step
    out = fn(g if compiled else gc.tensor(g))
    if compiled and fused is not None:
        assert ("= attention " in fn.ir("fused")) == fused
    res = [np.asarray(out.numpy() if hasattr(out, "numpy") else out)]
    return res + [p.grad.numpy() for p in params]


def _torch(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, causal: bool,
           scale: float | None = None, mask: np.ndarray | None = None) -> list:
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tm = None if mask is None else torch.tensor(mask)
    o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm,
                                                         is_causal=causal, scale=scale)
    (o * torch.tensor(g)).sum().backward()
    return [o.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()]


def _close(got: list, want: list, tol: float) -> None:
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * (1 + np.abs(b).max()),
                                   err_msg=name)


SHAPES = [
    # (q shape, k shape, causal)
    ((2, 3, 7, 8), (2, 3, 7, 8), True),     # rows below one block, E below the lanes
    ((2, 2, 33, 32), (2, 2, 33, 32), True),  # a block and a remainder row
    ((1, 2, 5, 20), (1, 2, 9, 20), False),   # L < S, E off the vector width
    ((2, 17, 64), (2, 17, 64), True),        # one batch dim, four vectors per row
    ((9, 80), (11, 80), False),              # no batch dim, E above one chunk
    ((1, 1, 12, 16), (1, 1, 5, 16), True),   # L > S: causal rows past S see all keys
    ((2, 1, 40, 96), (2, 1, 40, 96), False),
]


@pytest.mark.parametrize("shape_q,shape_k,causal", SHAPES)
def test_compiled_and_eager_match_torch(shape_q: tuple, shape_k: tuple, causal: bool) -> None:
    data = _data(shape_q, shape_k)
    want = _torch(*data, causal)
    _close(_graphc(*data, causal, compiled=True), want, 2e-5)
    _close(_graphc(*data, causal, compiled=False), want, 2e-5)


def test_float64_and_explicit_scale() -> None:
    data = _data((2, 2, 9, 12), (2, 2, 10, 12), np.float64)
    want = _torch(*data, False, scale=0.3)
    _close(_graphc(*data, False, compiled=True, scale=0.3), want, 1e-12)
    _close(_graphc(*data, False, compiled=False, scale=0.3), want, 1e-12)


def test_fused_kernel_is_in_the_plan_and_math_is_not() -> None:
    q = np.zeros((2, 2, 8, 16), np.float32)

    def f(q: gc.Tensor, k: gc.Tensor, v: gc.Tensor) -> gc.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    fused = gc.compile(f, dynamic=False)
    fused(q, q, q)
    assert "= attention " in fused.ir("fused")
    with sdpa_kernel(SDPBackend.MATH):
        math = gc.compile(f, dynamic=False)
        math(q, q, q)
    text = math.ir("fused")
    assert "= attention " not in text and "matmul" in text


def test_sdpa_kernel_setting_is_guarded() -> None:
    """A step traced with the fused kernel is not reused under sdpa_kernel(MATH): it is
    traced again (and gives the same values to rounding)."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 6, 8)).astype(np.float32) for _ in range(3))

    def f(q: gc.Tensor, k: gc.Tensor, v: gc.Tensor) -> gc.Tensor:
        return F.scaled_dot_product_attention(q, k, v)

    fn = gc.compile(f, dynamic=False)
    a = np.asarray(fn(q, k, v))
    with sdpa_kernel([SDPBackend.MATH]):
        b = np.asarray(fn(q, k, v))
        assert "= attention " not in fn.ir("fused")
    assert fn.compile_count == 2
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # a step without attention does not carry (or check) the guard
    plain = gc.compile(lambda x: x * 2, dynamic=False)
    plain(q)
    whats = [what for _, _, what in plain.variants[-1].sig.struct_guards]
    assert not any("sdpa_kernel" in w for w in whats)
    assert any("sdpa_kernel" in w for _, _, w in fn.variants[-1].sig.struct_guards)


def test_only_flash_allowed_raises_where_it_does_not_apply() -> None:
    q = gc.tensor(np.zeros((1, 4, 8), np.float32))
    mask = gc.tensor(np.ones((4, 4), bool))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(q, q, q, attn_mask=mask)  # applies: fine
        F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)  # applies too
        with pytest.raises(RuntimeError, match="dropout_p=1"):
            F.scaled_dot_product_attention(q, q, q, dropout_p=1.0)
    with pytest.raises(TypeError, match="SDPBackend"):
        with sdpa_kernel(["math"]):
            pass


def test_broadcast_batches_use_the_composite() -> None:
    """Cases the fused kernel does not take (here a broadcast batch) match PyTorch."""
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)  # broadcast batch
    mask = rng.random((5, 6)) < 0.7
    mask[:, 0] = True
    got = F.scaled_dot_product_attention(gc.tensor(q), gc.tensor(k), gc.tensor(k),
                                         attn_mask=gc.tensor(mask)).numpy()
    want = torch.nn.functional.scaled_dot_product_attention(
        torch.tensor(q), torch.tensor(k), torch.tensor(k), attn_mask=torch.tensor(mask))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_symbolic_batch_and_sequence() -> None:
    """One compile serves several batch sizes and sequence lengths (``dynamic``): the
    workspace and loop bounds follow the symbols."""
    rng = np.random.default_rng(5)
    wq = rng.standard_normal((8, 8)).astype(np.float32) * 0.3
    w = gc.nn.Parameter(gc.tensor(wq))

    def step(x: gc.Tensor) -> gc.Tensor:
        w.grad = None
        h = x @ w
        o = F.scaled_dot_product_attention(h, h, h, is_causal=True)
        o.sum().backward()
        return o

    fn = gc.compile(step, dynamic={0: (0, 1)})
    tw = torch.tensor(wq, requires_grad=True)
    for shape in ((3, 5, 8), (2, 19, 8), (1, 1, 8)):
        x = rng.standard_normal(shape).astype(np.float32)
        out = np.asarray(fn(x))
        tw.grad = None
        th = torch.tensor(x) @ tw
        to = torch.nn.functional.scaled_dot_product_attention(th, th, th, is_causal=True)
        to.sum().backward()
        np.testing.assert_allclose(out, to.detach().numpy(), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=2e-5, atol=2e-5)
    assert fn.compile_count == 1


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.integers(1, 21), st.integers(1, 21), st.integers(1, 40),
       st.booleans())
def test_fuzz_compiled_matches_interpreter(heads: int, L: int, S: int, E: int,
                                           causal: bool) -> None:
    data = _data((heads, L, E), (heads, S, E), seed=L * 100 + S)
    want = _graphc(*data, causal, compiled=False)
    _close(_graphc(*data, causal, compiled=True), want, 3e-5)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 2), st.integers(1, 19), st.integers(1, 19), st.integers(1, 24),
       st.sampled_from(["none", "causal", "bool", "float", "padding"]),
       st.sampled_from([0.0, 0.25]))
def test_fuzz_masks_and_dropout_fused_vs_composite(batch: int, L: int, S: int, E: int,
                                                  mask_kind: str, p: float) -> None:
    """Random shapes, masks and dropout: the fused step (compiled) against the composite
    (eager, the oracle's ops) under one seed."""
    data = _data((batch, 2, L, E), (batch, 2, S, E), seed=L * 31 + S)
    rng = np.random.default_rng(E)
    causal = mask_kind == "causal"
    mask = None
    if mask_kind in ("bool", "padding"):
        shape = (L, S) if mask_kind == "bool" else (batch, 1, 1, S)
        mask = rng.random(shape) < 0.75
        mask[..., 0] = True
    elif mask_kind == "float":
        mask = rng.standard_normal((2, L, S)).astype(np.float32)
    gc.manual_seed(7)
    with sdpa_kernel(SDPBackend.MATH):
        want = _graphc(*data, causal, compiled=False, dropout_p=p, mask=mask)
    gc.manual_seed(7)
    got = _graphc(*data, causal, compiled=True, dropout_p=p, mask=mask, fused=True)
    _close(got, want, 3e-5)


def test_ir_op_checks_its_operands() -> None:
    """The op's shape rule names what is wrong: batch dims, head sizes, a symbolic head size."""
    import sympy

    from graphc.ir import dtypes as dt
    from graphc.ir import ops
    from graphc.ir.graph import Builder

    b = Builder()
    q = b.input("q", "arg", (2, 5, 8), dt.float32)
    k = b.input("k", "arg", (3, 6, 8), dt.float32)
    with pytest.raises(ops.OpError, match="do not agree"):
        b.op("attention", (q, k, k), scale=0.5, causal=False)
    e = b.input("e", "arg", (2, 5, sympy.Symbol("E")), dt.float32)
    with pytest.raises(ops.OpError, match="must be static"):
        b.op("attention", (e, e, e), scale=0.5, causal=False)
    g = b.input("g", "arg", (2, 4, 8), dt.float32)
    with pytest.raises(ops.OpError, match="must match q"):
        b.op("attention_grad", (q, q, q, g), scale=0.5, causal=False)


MASKS = [
    # (q shape, k shape, mask shape, kind)
    ((2, 2, 9, 16), (2, 2, 11, 16), (9, 11), "bool"),          # one mask for every head
    ((2, 2, 9, 16), (2, 2, 11, 16), (2, 1, 1, 11), "bool"),    # key padding, per batch
    ((1, 3, 17, 8), (1, 3, 17, 8), (1, 3, 17, 17), "float"),   # additive, per head
    ((2, 20, 24), (2, 20, 24), (20, 20), "float"),
]


@pytest.mark.parametrize("shape_q,shape_k,shape_m,kind", MASKS)
def test_masks_take_the_fused_kernel_and_match_torch(shape_q: tuple, shape_k: tuple,
                                                     shape_m: tuple, kind: str) -> None:
    data = _data(shape_q, shape_k, seed=11)
    rng = np.random.default_rng(12)
    if kind == "bool":
        mask = rng.random(shape_m) < 0.7
        mask[..., 0] = True  # every row keeps a key (PyTorch's all-masked rows are NaN)
    else:
        mask = (rng.standard_normal(shape_m) * 2).astype(np.float32)
        mask[rng.random(shape_m) < 0.2] = -np.inf
        mask[..., 0] = 0.0
    want = _torch(*data, False, mask=mask)
    params = [gc.nn.Parameter(gc.tensor(a)) for a in data[:3]]
    gm = gc.tensor(mask)

    def step(go: gc.Tensor) -> gc.Tensor:
        for p in params:
            p.grad = None
        o = F.scaled_dot_product_attention(*params, attn_mask=gm)
        (o * go).sum().backward()
        return o

    for compiled in (True, False):
        fn = gc.compile(step, dynamic=False) if compiled else step
        out = fn(data[3] if compiled else gc.tensor(data[3]))
        got = [np.asarray(out.numpy() if hasattr(out, "numpy") else out)]
        _close(got + [p.grad.numpy() for p in params], want, 2e-5)
        if compiled:
            assert "= attention " in fn.ir("fused")


def test_fully_masked_rows_give_zeros_like_the_composite() -> None:
    """A row whose every key is masked: zeros, and zero gradients through it (the composite's
    safe softmax; PyTorch's math kernel gives NaN there, its flash kernel zeros)."""
    q, k, v, g = _data((1, 1, 4, 8), (1, 1, 5, 8), seed=13)
    mask = np.ones((4, 5), bool)
    mask[2] = False
    params = [gc.nn.Parameter(gc.tensor(a)) for a in (q, k, v)]

    def step(go: gc.Tensor) -> gc.Tensor:
        for p in params:
            p.grad = None
        o = F.scaled_dot_product_attention(*params, attn_mask=gc.tensor(mask))
        (o * go).sum().backward()
        return o

    fused = gc.compile(step, dynamic=False)
    got = [np.asarray(fused(g))] + [p.grad.numpy() for p in params]
    with sdpa_kernel(SDPBackend.MATH):
        ref = [step(gc.tensor(g)).numpy()] + [p.grad.numpy() for p in params]
    assert np.all(got[0][0, 0, 2] == 0) and np.all(np.isfinite(got[1]))
    _close(got, ref, 2e-5)


def test_mask_requiring_grad_takes_the_composite() -> None:
    """A learned additive bias (relative positions) needs dS: the math implementation."""
    rng = np.random.default_rng(14)
    q = gc.tensor(rng.standard_normal((1, 2, 5, 8)).astype(np.float32))
    bias = gc.tensor(rng.standard_normal((5, 5)).astype(np.float32), requires_grad=True)
    o = F.scaled_dot_product_attention(q, q, q, attn_mask=bias)
    o.sum().backward()
    tq = torch.tensor(q.numpy())
    tb = torch.tensor(bias.numpy(), requires_grad=True)
    torch.nn.functional.scaled_dot_product_attention(tq, tq, tq, attn_mask=tb).sum().backward()
    np.testing.assert_allclose(bias.grad.numpy(), tb.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape_q,shape_k,causal,p,dtype", [
    ((2, 3, 9, 16), (2, 3, 9, 16), True, 0.3, np.float32),
    ((2, 20, 24), (2, 23, 24), False, 0.1, np.float32),
    ((2, 2, 33, 32), (2, 2, 33, 32), True, 0.2, np.float32),
    ((1, 2, 5, 8), (1, 2, 6, 8), False, 0.5, np.float64),
])
def test_dropout_inside_the_kernel_draws_dropouts_mask(shape_q: tuple, shape_k: tuple,
                                                       causal: bool, p: float,
                                                       dtype: type) -> None:
    """Attention dropout in the fused kernels drops the weights ``dropout()`` drops: under
    one seed the fused step (compiled and eager) equals the composite (matmul, softmax,
    ``dropout``, matmul), values and gradients, to rounding."""
    data = _data(shape_q, shape_k, dtype, seed=21)

    def run(compiled: bool, fused: bool) -> list:
        gc.manual_seed(5)
        return _graphc(*data, causal, compiled, dropout_p=p, fused=fused)

    with sdpa_kernel(SDPBackend.MATH):
        want = run(False, False)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    plain = _torch(*data, causal)[0]  # without dropout: the outputs must differ
    assert np.abs(want[0] - plain).max() > 1e-2
    for compiled in (True, False):
        _close(run(compiled, True), want, tol)


def test_avx2_kernels_match_the_host_kernels() -> None:
    """The 256-bit build of the kernels (8 lanes: x86-64-v3, as on AVX2 hosts) computes what
    the host's build does: same step, same inputs, compiled for both targets."""
    from graphc.runtime.cpu import CPUExecutable

    data = _data((2, 2, 19, 12), (2, 2, 21, 12), seed=31)
    rng = np.random.default_rng(32)
    mask = rng.random((19, 21)) < 0.8
    mask[:, 0] = True
    params = [gc.nn.Parameter(gc.tensor(a)) for a in data[:3]]
    gm = gc.tensor(mask)

    def step(go: gc.Tensor) -> gc.Tensor:
        for x in params:
            x.grad = None
        o = F.scaled_dot_product_attention(*params, attn_mask=gm, dropout_p=0.2)
        (o * go).sum().backward()
        return o

    fn = gc.compile(step, dynamic=False)
    gc.manual_seed(3)
    host = [np.asarray(fn(data[3]))] + [x.grad.numpy().copy() for x in params]
    v = fn.variants[-1]
    avx2 = CPUExecutable(v.graph, v.sig, cpu="x86-64-v3")
    assert not avx2.wide  # the 8-lane kernels, whatever this host has
    gc.manual_seed(3)
    out = avx2.call((data[3],))
    got = [np.asarray(out.numpy() if hasattr(out, "numpy") else out)] + [
        x.grad.numpy() for x in params]
    _close(got, host, 2e-6)


@pytest.mark.parametrize("case", ["nan_q", "inf_k", "neg_inf_row", "large"])
def test_non_finite_inputs_like_the_composite(case: str) -> None:
    """NaN and infinite inputs give NaN exactly where the composite gives it (the kernel's
    running maximum ignores NaN scores, but they still reach the row's sum), and huge
    scores are exact after the maximum is subtracted."""
    q, k, v, _ = _data((1, 2, 6, 8), (1, 2, 7, 8), seed=41)
    if case == "nan_q":
        q[0, 0, 2, 3] = np.nan
    elif case == "inf_k":
        k[0, 1, 4, 0] = np.inf
    elif case == "neg_inf_row":
        q[0, 0, 1, :] = -np.inf
    else:
        q *= 1e4

    def f(a: gc.Tensor, b: gc.Tensor, c: gc.Tensor) -> gc.Tensor:
        return F.scaled_dot_product_attention(a, b, c)

    fused = gc.compile(f, dynamic=False)
    with np.errstate(all="ignore"):
        got = np.asarray(fused(q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            ref = f(gc.tensor(q), gc.tensor(k), gc.tensor(v)).numpy()
    assert "= attention " in fused.ir("fused")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-5, atol=1e-6)


def test_attention_module_is_an_attribute_of_nn() -> None:
    """``gc.nn.attention.sdpa_kernel`` without an import of its own, as
    ``torch.nn.attention.sdpa_kernel``."""
    assert gc.nn.attention.sdpa_kernel is sdpa_kernel
    assert gc.nn.attention.SDPBackend.FLASH_ATTENTION is SDPBackend.FLASH_ATTENTION
