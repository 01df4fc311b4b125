"""Pointwise ops of ``graphc/ir/pointwise.py`` that the one-operand table tests cannot cover:
two-operand ops (values, signs of zeros and gradients on a grid of special points, eagerly and
compiled), bool-valued predicates, integer and bool dtypes, integer division by zero, the
operators ``% // & | ^ ~ << >>``, ``div(rounding_mode=...)``, ``isclose``, comparison methods.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _torch import torch

import graphc as gc
from graphc import nn

NAN, INF = float("nan"), float("inf")
# (no quotient overflows float32: ATen's vectorised fmod gives NaN there, its scalar loop and
# graphc the exact remainder)
POINTS = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, 7.5, -7.5, 0.3, 1e30, -1e30, 1e-3,
          NAN, INF, -INF]
# two-operand ops: name -> whether every value must match bit for bit (signs of zeros too;
# not for clamp_min/clamp_max, whose sign of a zero at a tie differs between ATen's vector
# and scalar loops)
BINARY = {"fmod": True, "remainder": True, "floor_divide": True, "hypot": False,
          "logaddexp": False, "logaddexp2": False, "copysign": True, "xlogy": False,
          "fmax": True, "fmin": True, "clamp_min": False, "clamp_max": False,
          "heaviside": True}
PREDICATES = ["isnan", "isinf", "isposinf", "isneginf", "isfinite", "signbit", "logical_not"]
LOGICAL = ["logical_and", "logical_or", "logical_xor", "isclose", "eq", "ne", "lt", "le", "gt",
           "ge"]
BITWISE = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
           "bitwise_right_shift"]


def _grid(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    p = np.array(POINTS, dtype)
    return np.repeat(p, len(p)), np.tile(p, len(p))


def _tol(dtype: Any) -> dict:
    return dict(rtol=4e-6, atol=1e-7) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-15)


def _same(got: np.ndarray, want: np.ndarray, exact: bool, dtype: Any, what: str) -> None:
    assert got.dtype == want.dtype, what
    if exact or got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        if got.dtype.kind == "f":  # signs of zeros (a NaN's sign is not specified)
            num = ~np.isnan(want)
            np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]),
                                          err_msg=what)
    else:
        np.testing.assert_allclose(got, want, err_msg=what, **_tol(dtype))


def _torch_grads(name: str, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> Any:
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    out = getattr(torch, name)(tx, ty)
    try:
        (out * torch.tensor(w)).sum().backward()
    except RuntimeError:  # PyTorch has no derivative (floor_divide, heaviside)
        return out.detach().numpy(), None, None
    zero = np.zeros_like(x)
    return (out.detach().numpy(), zero if tx.grad is None else tx.grad.numpy(),
            zero if ty.grad is None else ty.grad.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_eager_matches_torch(name: str, dtype: Any) -> None:
    x, y = _grid(dtype)
    w = np.linspace(-1, 2, x.size).astype(dtype)
    want, wx, wy = _torch_grads(name, x, y, w)
    gx, gy = gc.tensor(x, requires_grad=True), gc.tensor(y, requires_grad=True)
    for out in (getattr(gc, name)(gx, gy), getattr(gx, name)(gy)):
        _same(out.numpy(), want, BINARY[name], dtype, name)
    if wx is None:
        return
    (out * gc.tensor(w)).sum().backward()
    for g, want_g in ((gx.grad, wx), (gy.grad, wy)):
        assert g is not None, name
        np.testing.assert_allclose(g.numpy(), want_g, err_msg=name, **_tol(dtype))


@pytest.mark.parametrize("backend", [None, "interp"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_compiled_matches_torch(name: str, backend: Any) -> None:
    """One compile, batch sizes 1 and 6 (row r pairs the special points with themselves
    rotated by r): outputs, and the gradients of two parameters scaling the operands."""
    p = np.array(POINTS, np.float32)
    n = len(p)
    px, py = nn.Parameter(gc.ones(n)), nn.Parameter(gc.ones(n))
    kw = {} if backend is None else {"backend": backend}
    differentiable = _torch_grads(name, p, p, np.ones(n, np.float32))[1] is not None

    @gc.compile(**kw)
    def step(a: Any, b: Any, w: Any) -> Any:
        px.grad = py.grad = None
        out = getattr(gc, name)(a * px, b * py)
        if differentiable:
            (out * w).sum().backward()
        return out

    for batch in (1, 6):
        a = np.broadcast_to(p, (batch, n)).copy()
        b = np.stack([np.roll(p, 3 * r + 1) for r in range(batch)])
        w = np.random.default_rng(batch).standard_normal((batch, n)).astype(np.float32)
        tx, ty = torch.ones(n, requires_grad=True), torch.ones(n, requires_grad=True)
        want = getattr(torch, name)(torch.tensor(a) * tx, torch.tensor(b) * ty)
        got = step(gc.tensor(a), gc.tensor(b), gc.tensor(w))
        _same(got.numpy(), want.detach().numpy(), BINARY[name], np.float32, name)
        if differentiable:
            (want * torch.tensor(w)).sum().backward()
            np.testing.assert_allclose(px.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(py.grad.numpy(), ty.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["fmod", "remainder", "floor_divide"])
def test_integer_division(name: str) -> None:
    x = np.array([-7, 7, -7, 7, 0, 5, -5, np.iinfo(np.int64).max], np.int64)
    y = np.array([2, -2, -2, 2, 3, 1, 3, -1], np.int64)
    want = getattr(torch, name)(torch.tensor(x), torch.tensor(y)).numpy()
    got = getattr(gc, name)(gc.tensor(x), gc.tensor(y)).numpy()
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    # a zero divisor: PyTorch's error eagerly; a compiled step gives x // 0 = x, x % 0 = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        getattr(gc, name)(gc.tensor(x), gc.tensor(np.zeros_like(x)))
    step = gc.compile(lambda a, b: getattr(gc, name)(a, b))
    got = step(gc.tensor(x), gc.tensor(np.zeros_like(x))).numpy()
    np.testing.assert_array_equal(got, x if name == "floor_divide" else np.zeros_like(x))


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32, np.float64])
def test_div_rounding_mode(mode: Any, dtype: Any) -> None:
    x, y = _grid(np.float64)
    if np.dtype(dtype).kind == "i":
        x = np.array([-7, 7, -7, 7, 0, 9, -9, 1], dtype)
        y = np.array([2, -2, -2, 2, 3, 4, 4, -1], dtype)
    x, y = x.astype(dtype), y.astype(dtype)
    want = torch.div(torch.tensor(x), torch.tensor(y), rounding_mode=mode).numpy()
    got = gc.tensor(x).div(gc.tensor(y), rounding_mode=mode).numpy()
    _same(got, want, mode is not None, dtype, str(mode))
    # compiled, and in place
    step = gc.compile(lambda a, b: a.div(b, rounding_mode=mode))
    _same(step(gc.tensor(x), gc.tensor(y)).numpy(), want, mode is not None, dtype, str(mode))
    if mode is not None or np.dtype(dtype).kind == "f":
        t = gc.tensor(x)
        t.div_(gc.tensor(y), rounding_mode=mode)
        _same(t.numpy(), want, mode is not None, dtype, str(mode))


def test_div_rounding_mode_gradient_and_errors() -> None:
    x = torch.tensor([-7.5, 3.0], requires_grad=True)
    torch.div(x, 2.0, rounding_mode="floor").sum().backward()
    g = gc.tensor([-7.5, 3.0], requires_grad=True)
    g.div(2.0, rounding_mode="floor").sum().backward()
    np.testing.assert_array_equal(g.grad.numpy(), x.grad.numpy())  # zeros, not None
    with pytest.raises(ValueError, match="rounding_mode"):
        g.div(2.0, rounding_mode="round")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        gc.tensor([1, 2]).div(0, rounding_mode="trunc")
    with pytest.raises(RuntimeError, match="can't be cast"):
        gc.tensor([1, 2]).div_(2)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("name", PREDICATES + ["bitwise_not"])
def test_unary_predicates(name: str, dtype: Any) -> None:
    x = np.array(POINTS + [-5e-324], np.float64).astype(np.float32) if dtype == np.float32 \
        else np.array([-4, -1, 0, 2, 5], np.int64).astype(dtype)
    tx = torch.tensor(x)
    if dtype == np.float32:
        tx = torch.cat([tx, -torch.tensor([NAN])])  # a NaN with the sign bit set
        x = tx.numpy()
    try:
        want = getattr(torch, name)(tx).numpy()
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="not implemented for"):
            getattr(gc, name)(gc.tensor(x))
        assert "not implemented" in str(e)
        return
    got = getattr(gc, name)(gc.tensor(x))
    np.testing.assert_array_equal(got.numpy(), want)
    assert got.numpy().dtype == want.dtype
    assert not got.requires_grad
    step = gc.compile(lambda a: getattr(a, name)())
    np.testing.assert_array_equal(step(gc.tensor(x)).numpy(), want)


def _int_pairs(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([-7, 7, -7, 7, 0, 3, -8, 1, 1, 1, -1, 5, 6, -6], np.int64)
    y = np.array([2, -2, -2, 2, 3, 0, 1, 63, 64, -1, 70, 62, 31, 32], np.int64)
    if dtype == np.bool_:
        return x % 2 == 0, y % 3 == 0
    return x.astype(dtype), y.astype(dtype)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.float32])
@pytest.mark.parametrize("name", BITWISE + LOGICAL)
def test_bitwise_logical_and_comparisons(name: str, dtype: Any) -> None:
    x, y = _int_pairs(dtype) if dtype != np.float32 else _grid(dtype)
    tfn = getattr(torch, name)
    try:
        want = tfn(torch.tensor(x), torch.tensor(y)).numpy()
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="not implemented for"):
            getattr(gc, name)(gc.tensor(x), gc.tensor(y))
        assert "not implemented" in str(e)
        return
    got = getattr(gc.tensor(x), name)(gc.tensor(y)).numpy()
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    if hasattr(gc, name):
        np.testing.assert_array_equal(getattr(gc, name)(gc.tensor(x), gc.tensor(y)).numpy(),
                                      want)
    step = gc.compile(lambda a, b: getattr(a, name)(b))
    np.testing.assert_array_equal(step(gc.tensor(x), gc.tensor(y)).numpy(), want)


def test_operators_follow_torch() -> None:
    i = np.array([5, -5, 7, -8, 0], np.int64)
    j = np.array([2, 3, -2, 3, 1], np.int64)
    f = np.array([5.5, -5.5, 7.0, -0.0, 2.0], np.float32)
    b = np.array([True, False, True, False, True])
    cases = [
        lambda m, x, y, z, c: x // y, lambda m, x, y, z, c: x % y,
        lambda m, x, y, z, c: x // 2, lambda m, x, y, z, c: x % -3, lambda m, x, y, z, c: 7 // y,
        lambda m, x, y, z, c: 7 % y, lambda m, x, y, z, c: 2.5 // y, lambda m, x, y, z, c: z % 2,
        lambda m, x, y, z, c: z // -1.5, lambda m, x, y, z, c: -7.5 % z,
        lambda m, x, y, z, c: x / y, lambda m, x, y, z, c: x & y, lambda m, x, y, z, c: x | y,
        lambda m, x, y, z, c: x ^ y, lambda m, x, y, z, c: ~x, lambda m, x, y, z, c: x << 3,
        lambda m, x, y, z, c: x >> 1, lambda m, x, y, z, c: 1 << x.abs(),
        lambda m, x, y, z, c: -64 >> y.abs(), lambda m, x, y, z, c: c & ~c,
        lambda m, x, y, z, c: c | (x > 0), lambda m, x, y, z, c: c ^ (x > 0),
        lambda m, x, y, z, c: 3 & x, lambda m, x, y, z, c: 6 | x, lambda m, x, y, z, c: 6 ^ x,
        lambda m, x, y, z, c: x & c, lambda m, x, y, z, c: ~c,
    ]
    for k, fn in enumerate(cases):
        want = fn(torch, torch.tensor(i), torch.tensor(j), torch.tensor(f), torch.tensor(b))
        got = fn(gc, gc.tensor(i), gc.tensor(j), gc.tensor(f), gc.tensor(b))
        assert got.numpy().dtype == want.numpy().dtype, k
        _same(got.numpy(), want.numpy(), True, np.float32, f"case {k}")
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        gc.tensor(f) & gc.tensor(f)
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        ~gc.tensor(f)
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        gc.tensor(b) << 1


def test_isclose() -> None:
    x = np.array([1.0, 1.0 + 1e-6, 1.0 + 1e-4, NAN, INF, INF, -INF, 0.0, 1e-9, 100.0],
                 np.float32)
    y = np.array([1.0, 1.0, 1.0, NAN, INF, -INF, -INF, 1e-9, 0.0, 101.0], np.float32)
    for kw in [{}, {"equal_nan": True}, {"rtol": 0.0, "atol": 0.0}, {"rtol": 0.02},
               {"atol": 1.5, "rtol": 0.0}, {"rtol": 0.0, "atol": 0.0, "equal_nan": True}]:
        for dtype in (np.float32, np.float64):
            want = torch.isclose(torch.tensor(x.astype(dtype)), torch.tensor(y.astype(dtype)),
                                 **kw).numpy()
            got = gc.isclose(gc.tensor(x.astype(dtype)), gc.tensor(y.astype(dtype)), **kw)
            np.testing.assert_array_equal(got.numpy(), want, err_msg=str(kw))
    i, j = np.array([1, 2, 3, -5]), np.array([2, 2, 5, -4])
    for kw in [{}, {"atol": 1}, {"rtol": 0.5, "atol": 0}]:
        want = torch.isclose(torch.tensor(i), torch.tensor(j), **kw).numpy()
        np.testing.assert_array_equal(gc.tensor(i).isclose(gc.tensor(j), **kw).numpy(), want)
    b, c = np.array([True, False, True]), np.array([True, True, False])
    np.testing.assert_array_equal(gc.isclose(gc.tensor(b), gc.tensor(c), atol=1).numpy(),
                                  torch.isclose(torch.tensor(b), torch.tensor(c),
                                                atol=1).numpy())
    with pytest.raises(RuntimeError, match="Long did not match Float"):
        gc.isclose(gc.tensor(i), gc.tensor(i.astype(np.float32)))
    with pytest.raises(RuntimeError, match="rtol must be greater than or equal to zero"):
        gc.isclose(gc.tensor(x), gc.tensor(y), rtol=-1.0)
    step = gc.compile(lambda a, b: gc.isclose(a, b, rtol=0.02, equal_nan=True))
    np.testing.assert_array_equal(
        step(gc.tensor(x), gc.tensor(y)).numpy(),
        torch.isclose(torch.tensor(x), torch.tensor(y), rtol=0.02, equal_nan=True).numpy())


def test_mixed_dtypes_and_scalars() -> None:
    i = np.array([-3, 0, 4], np.int64)
    f = np.array([-2.5, 0.5, 3.0], np.float32)
    for name in ["fmod", "remainder", "floor_divide", "copysign", "xlogy", "fmax", "fmin",
                 "clamp_min", "clamp_max"]:
        for a, b in [(i, f), (f, i), (i, i + 5), (f, 2.0), (i, 2)]:
            tb = torch.tensor(b) if isinstance(b, np.ndarray) else b
            gb = gc.tensor(b) if isinstance(b, np.ndarray) else b
            if name in ("copysign", "xlogy", "fmax", "fmin") and not isinstance(b, np.ndarray):
                continue  # no Scalar overload in PyTorch
            want = getattr(torch, name)(torch.tensor(a), tb).numpy()
            got = getattr(gc, name)(gc.tensor(a), gb).numpy()
            assert got.dtype == want.dtype, (name, a.dtype, type(b))
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
    for name in ["hypot", "logaddexp", "logaddexp2"]:
        with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
            getattr(gc, name)(gc.tensor(i), gc.tensor(i))
    with pytest.raises(RuntimeError, match="different dtypes"):
        gc.heaviside(gc.tensor(i), gc.tensor(f))
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        gc.fmod(gc.tensor(i > 0), gc.tensor(i > 1))


def test_round_decimals_and_rounding_of_integers() -> None:
    x = np.array([2.5, 3.5, -2.5, 1.25, 1234.5678, 15.0, 25.0, -0.4, 0.5], np.float32)
    for d in (0, 1, 2, -1, -2):
        want = torch.round(torch.tensor(x), decimals=d).numpy()
        _same(gc.round(gc.tensor(x), decimals=d).numpy(), want, True, np.float32, str(d))
    i = np.array([-3, 0, 7])
    for name in ["floor", "ceil", "trunc", "round"]:
        np.testing.assert_array_equal(getattr(gc, name)(gc.tensor(i)).numpy(), i)
        assert getattr(gc, name)(gc.tensor(i)).dtype is gc.int64
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        gc.round(gc.tensor(i), decimals=1)
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        gc.frac(gc.tensor(i))
    assert gc.square(gc.tensor([True, False])).dtype is gc.int64


def test_comparison_methods_in_place() -> None:
    x = gc.tensor([1, 2, 3])
    x.lt_(gc.tensor([2, 2, 2]))
    t = torch.tensor([1, 2, 3])
    t.lt_(torch.tensor([2, 2, 2]))
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    f = gc.tensor([1.0, NAN])
    np.testing.assert_array_equal(f.ne(f).numpy(), [False, True])
    np.testing.assert_array_equal(f.ge(1).numpy(), [True, False])


def test_comparison_functions_and_promotion_follow_torch() -> None:
    """``gc.eq`` & co. exist; a 0-d tensor of a higher category widens (bool < int < float)."""
    from _torch import torch

    a, b = [1.0, 2.0, float("nan")], [2.0, 2.0, float("nan")]
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        got = getattr(gc, name)(gc.tensor(a), gc.tensor(b)).numpy()
        np.testing.assert_array_equal(got, getattr(torch, name)(torch.tensor(a),
                                                               torch.tensor(b)).numpy())
    cases = [(gc.tensor([True]), gc.tensor(1), torch.tensor([True]), torch.tensor(1)),
             (gc.tensor([1.0]), gc.tensor(True), torch.tensor([1.0]), torch.tensor(True)),
             (gc.tensor(1), gc.tensor([True]), torch.tensor(1), torch.tensor([True])),
             (gc.tensor([1], dtype=gc.int32), gc.tensor(7), torch.tensor([1], dtype=torch.int32),
              torch.tensor(7))]
    for ga, gb, ta, tb in cases:
        assert (ga + gb).dtype.name == str((ta + tb).dtype).removeprefix("torch.")
    assert (gc.tensor([True]) & 1).dtype.name == str((torch.tensor([True]) & 1).dtype)[6:]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eager_pow_by_a_scalar_matches_torch_bit_for_bit(dtype: type) -> None:
    """PyTorch computes ``x ** e`` for e in 2, 3, 1, 0, -1, -2, -0.5 by multiplications,
    reciprocals and a square root, not by pow (numpy's vectorised pow is up to an ulp off
    even for x ** 2); eager graphc gives the same bits, also at the special points, for a
    Python-scalar exponent and a 0-d tensor one. A full-size exponent tensor stays a pow."""
    rng = np.random.default_rng(0)
    a = np.concatenate([np.array(POINTS, dtype), (rng.standard_normal(4000) * 3).astype(dtype)])
    for e in (2, 3, 1, 0, -1, -2, -0.5, 2.0):
        want = (torch.from_numpy(a) ** e).numpy()
        np.testing.assert_array_equal((gc.tensor(a) ** e).numpy(), want, err_msg=f"x ** {e}")
        got0 = (gc.tensor(a) ** gc.tensor(np.array(e, dtype))).numpy()
        np.testing.assert_array_equal(got0, want, err_msg=f"x ** tensor({e})")
    full = np.full_like(a, 3.0)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((gc.tensor(a) ** gc.tensor(full)).numpy(),
                                      np.power(a, full))


@pytest.mark.parametrize("op", ["mul", "div", "sub", "pow"])
@pytest.mark.parametrize("needs", [(True, False), (False, True), (True, True)])
def test_vjp_builds_only_the_gradients_that_are_needed(op: str, needs: tuple) -> None:
    """Binary VJP rules skip an operand that does not require grad: eagerly each node they
    build is computed at once, so ``x ** 2``'s backward must not take the exponent's log,
    and ``w * x`` must not multiply for the constant side. The gradients that are needed
    still match PyTorch, eagerly and compiled."""
    from graphc.ir import graph as G

    rng = np.random.default_rng(0)
    a0 = np.abs(rng.standard_normal(6)).astype(np.float32) + 0.5
    b0 = rng.standard_normal(6).astype(np.float32)

    def f(lib: Any, a: Any, b: Any) -> Any:
        return {"mul": a * b, "div": a / b, "sub": a - b, "pow": a ** b}[op].sum()

    ta, tb = (torch.tensor(v, requires_grad=r) for v, r in zip((a0, b0), needs))
    f(torch, ta, tb).backward()
    from graphc import _tensor as T

    built: list[str] = []
    orig, orig_fast = G.Builder._make, T.fast_compute

    def spy(self: Any, o: str, *args: Any, **kw: Any) -> Any:
        built.append(o)
        return orig(self, o, *args, **kw)

    def spy_fast(fast: tuple, *args: Any) -> Any:  # ops computed without a node
        built.append(fast[4])
        return orig_fast(fast, *args)

    ga, gb = (gc.tensor(v, requires_grad=r) for v, r in zip((a0, b0), needs))
    loss = f(gc, ga, gb)
    G.Builder._make, T.fast_compute = spy, spy_fast  # type: ignore[method-assign]
    try:
        loss.backward()
    finally:
        G.Builder._make, T.fast_compute = orig, orig_fast  # type: ignore[method-assign]
    for g, t in ((ga, ta), (gb, tb)):
        if t.grad is None:
            assert g.grad is None
        else:
            np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=1e-6)
    if op == "pow" and not needs[1]:
        assert "log" not in built, built
    if op in ("mul", "div") and needs != (True, True):
        assert built.count(op) == 1, built  # the needed side's one product or quotient

    wa, wb = (gc.tensor(v, requires_grad=r) for v, r in zip((a0, b0), needs))

    @gc.compile(dynamic=False)
    def step() -> Any:
        loss = f(gc, wa, wb)
        loss.backward()
        return loss

    step()
    for g, t in ((wa, ta), (wb, tb)):
        if t.grad is not None:
            np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=1e-6)
