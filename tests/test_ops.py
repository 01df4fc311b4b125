"""Every IR primitive: rule-table coverage, finite-difference gradients, native vs interpreter.

``CASES`` has one entry per op of ``ops.OP_INFO`` (a test checks that), each a small function
that applies the primitive (directly through the builder, so the op under test is the one that
runs) to inputs described by ``Spec``s. Inputs whose shape starts with ``"B"`` are arguments
of the compiled function with a symbolic batch dimension; the others are parameters.

- ``test_gradient_fd``: eager ``backward()`` in float64 against central differences.
- ``test_native_matches_interpreter``: one compile per backend, called with batch sizes 1, 3
  and 7; outputs and parameter gradients (a zero "shift" parameter is added to every float
  argument, so gradients that flow to arguments are checked too, summed over the batch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from graphc.codegen import lower
from graphc.passes import autodiff
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc as gc
from graphc import interpreter, nn
from graphc import tensor_ops as T
from graphc.ir import dtypes as dt
from graphc.ir import ops
from graphc.ir.elementwise import ELEMENTWISE
from graphc.ir.special_more import POLYNOMIALS
from graphc.nn import functional as F
from graphc.tensor import Tensor, builder


@dataclass
class Spec:
    shape: tuple  # "B" as the first entry: the batch dimension
    kind: str = "f"  # f: float away from 0 | pos: positive | bool | idx<n>: int64 in [0, n)


@dataclass
class Case:
    build: Callable[..., Tensor]
    inputs: list[Spec]
    fd_rtol: float = 1e-5
    fd_eps: float = 1e-6
    extra: dict = field(default_factory=dict)


def P(op: str, *xs: Tensor, **attrs: Any) -> Tensor:
    """Apply primitive ``op`` through the current builder (eager or tracing)."""
    return Tensor._wrap(builder().op(op, [x.node for x in xs], **attrs))


def _const(x: Tensor, v: float) -> Tensor:
    return Tensor._wrap(builder().const(v, x.shape, x.dtype))


def _zero_some(x: Tensor) -> Tensor:
    """A constant 0/1 mask that zeroes some elements (cumprod's gradient at zeros)."""
    mask = np.ones(tuple(x.shape[1:]), np.float64)
    mask[0, 2] = mask[0, 4] = mask[1, 3] = 0.0
    return Tensor._from_array(mask.astype(x.dtype.np))


CONV = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
def _rnn_scan(x: Tensor, w: Tensor, u: Tensor, h0: Tensor, reverse: bool = False) -> Any:
    """A scan through ``graphc.loops.scan`` over x's leading axis (the batch symbol here, so
    the three batch sizes are three trip counts of one compile): two carries (an Elman state
    and a running sum), a stacked output."""
    from graphc.loops import scan

    def step(c: Any, xt: Any) -> Any:
        h, acc = c
        hn = (xt[0] @ w + h @ u).tanh()
        return (hn, acc + hn * xt[0].sum(-1, keepdim=True)), (hn * hn,)

    return scan(step, (h0, h0 * 0.5), (x,), reverse=reverse)


def _scan_result(x: Tensor, w: Tensor, u: Tensor, h0: Tensor) -> Tensor:
    (h, acc), (ys,) = _rnn_scan(x, w, u, h0)
    return ys + h + acc


def _scan_final(x: Tensor, w: Tensor, u: Tensor, h0: Tensor) -> Tensor:
    (h, acc), _ = _rnn_scan(x, w, u, h0, reverse=True)
    return h * acc


_SCAN_IN = [Spec(("B", 2, 3)), Spec((3, 4)), Spec((4, 4)), Spec((2, 4))]
POOL = dict(kernel=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(1, 2), ceil_mode=True)


def _unary(op: str, kind: str = "f") -> Case:
    return Case(lambda x: P(op, x), [Spec(("B", 3, 4), kind)])


def _binary(op: str, kind: str = "f", kind2: str | None = None) -> Case:
    return Case(lambda x, y: P(op, x, y), [Spec(("B", 3), kind), Spec(("B", 3), kind2 or kind)])


CASES: dict[str, Case] = {
    "input": Case(lambda x: x, [Spec(("B", 3))]),
    "const": Case(lambda x: x * _const(x, 2.5), [Spec(("B", 3))]),
    "iota": Case(lambda x: x + P("iota", shape=tuple(x.shape), dtype=x.dtype, axis=1),
                 [Spec(("B", 4))]),
    "rand": Case(lambda x: x * T.rand_like(x).to(x.dtype), [Spec(("B", 5))]),
    "where": Case(lambda c, x, y: P("where", c, x, y),
                  [Spec(("B", 3), "bool"), Spec(("B", 3)), Spec(("B", 3))]),
    "cast": Case(lambda x: P("cast", x, dtype=dt.float32 if x.dtype is dt.float64
                             else dt.float64), [Spec(("B", 3))], fd_rtol=1e-5,
                 fd_eps=1e-2),  # linear: a large step is exact despite float32 rounding
    "sum": Case(lambda x: P("sum", x, axes=(0, 2)), [Spec(("B", 3, 4))]),
    "max": Case(lambda x: P("max", x, axes=(1,)), [Spec(("B", 3, 4))]),
    "matmul": Case(lambda x, w: P("matmul", x, w), [Spec(("B", 4)), Spec((4, 5))]),
    "reshape": Case(lambda x: P("reshape", x, shape=(x.shape[0], 2, 6)), [Spec(("B", 3, 4))]),
    "permute": Case(lambda x: P("permute", x, perm=(2, 0, 1)), [Spec(("B", 3, 4))]),
    "expand": Case(lambda x: P("expand", x, shape=(x.shape[0], 3, 4)), [Spec(("B", 1, 4))]),
    "detach": Case(lambda x, w: P("detach", x * w) + x * w, [Spec(("B", 3)), Spec((3,))]),
    "gather": Case(lambda x, i: P("gather", x, i, axis=1), [Spec(("B", 5)),
                                                            Spec(("B", 3), "idx5")]),
    "scatter_add": Case(lambda b, i, s: P("scatter_add", b, i, s, axis=1),
                        [Spec(("B", 5)), Spec(("B", 3), "idx5"), Spec(("B", 3))]),
    "slice": Case(lambda x: P("slice", x, starts=(0, 1, 0), stops=(x.shape[0], 3, 7),
                              steps=(1, 1, 3)), [Spec(("B", 3, 7))]),
    "pad": Case(lambda x: P("pad", x, pads=((0, 0), (1, 2), (0, 3))), [Spec(("B", 3, 4))]),
    "conv2d": Case(lambda x, w: P("conv2d", x, w, **CONV),
                   [Spec(("B", 4, 6, 7)), Spec((6, 2, 3, 2))]),
    "conv2d_input_grad": Case(
        lambda g, w: P("conv2d_input_grad", g, w, input_shape=(g.shape[0], 4, 6, 7), **CONV),
        [Spec(("B", 6, 3, 9)), Spec((6, 2, 3, 2))]),
    "conv2d_weight_grad": Case(
        lambda x, g: P("conv2d_weight_grad", x, g, weight_shape=(6, 2, 3, 2), **CONV),
        [Spec(("B", 4, 6, 7)), Spec(("B", 6, 3, 9))]),
    "pool_argmax": Case(lambda x: P("pool_argmax", x, **POOL), [Spec(("B", 3, 6, 7))]),
    # fused attention: L != S, a head size off the vector width, causal and not
    "attention": Case(lambda q, k, v, m: P("attention", q, k, v, m, scale=0.4, causal=True)
                      + P("attention", q, k, v, scale=0.7, causal=False),
                      [Spec(("B", 2, 5, 3)), Spec(("B", 2, 6, 3)), Spec(("B", 2, 6, 3)),
                       Spec(("B", 2, 5, 6))]),
    "attention_grad": Case(lambda q, k, v, g, m: P("attention_grad", q, k, v, g, scale=0.4,
                                                causal=True)
                           + P("attention_grad", q, k, v, g, m, scale=0.6,
                               causal=False),
                           [Spec(("B", 2, 5, 3)), Spec(("B", 2, 6, 3)), Spec(("B", 2, 6, 3)),
                            Spec(("B", 2, 5, 3)), Spec(("B", 2, 5, 6))]),
    "cumsum": Case(lambda x: P("cumsum", x, axis=1) + P("cumsum", x, axis=0, reverse=True),
                   [Spec(("B", 5, 3))]),
    "cumprod": Case(lambda x: P("cumprod", x * _zero_some(x), axis=2),
                    [Spec(("B", 3, 6))]),
    "cummax": Case(lambda x: P("cummax", x, axis=1), [Spec(("B", 6, 3))]),
    "logcumsumexp": Case(lambda x: P("logcumsumexp", x, axis=1)
                         + P("logcumsumexp", x, axis=2, reverse=True), [Spec(("B", 5, 3))]),
    "sort": Case(lambda x: P("sort", x, axis=1) + P("sort", x, axis=2, descending=True),
                 [Spec(("B", 6, 6))]),
    # batch norm (one weight per channel, constant along the normalised dims) and layer norm
    # (weights along them): the two forms of the rule
    "affine_norm": Case(lambda x, w, b, v, c: (
        F.batch_norm(x, None, None, w, b, training=True) * 1.5
        + F.layer_norm(x, (4,), v, c) + F.layer_norm(x, (3, 4)) * 0.5),
        [Spec(("B", 3, 4)), Spec((3,)), Spec((3,)), Spec((4,)), Spec((4,))]),
    # eagerly gc.scan is a Python loop: the finite-difference check of the node itself is
    # tests/test_scan.py's (compiled, interpreter backend); here native against interpreter
    "scan": Case(_scan_result, _SCAN_IN),
    "scan_out": Case(_scan_final, _SCAN_IN),
}
for _op in ("neg", "exp", "abs", "sign", "tanh", "sigmoid", "relu", "erf", "silu", "hardswish"):
    CASES[_op] = _unary(_op)
for _op in ("log", "sqrt"):
    CASES[_op] = _unary(_op, "pos")
CASES["not"] = _unary("not", "bool")
# logit without eps is defined on (0, 1): inputs mapped there by a sigmoid
CASES["logodds"] = Case(lambda x: P("logodds", x.sigmoid()), [Spec(("B", 3, 4))])
# ndtri is defined on [0, 1] (a sigmoid maps the inputs there); zeta(x, q) has no gradient in x
# (PyTorch's backward raises): an integer x from 2 (no gradient asked), a positive q
CASES["ndtri"] = Case(lambda x: P("ndtri", x.sigmoid()), [Spec(("B", 3, 4))])
CASES["zeta"] = Case(lambda n, q: P("zeta", n.to(q.dtype) + 2.0, q.abs() + 0.5),
                     [Spec(("B", 3, 4), "idx4"), Spec(("B", 3, 4))])
# igamma(a, x) / igammac(a, x): no gradient in a (PyTorch's backward raises), a from 0.5
for _name in ("igamma", "igammac"):
    CASES[_name] = Case(lambda n, x, _op=_name: P(_op, n.to(x.dtype) + 0.5, x.abs() + 0.1),
                        [Spec(("B", 3, 4), "idx6"), Spec(("B", 3, 4))])
# the orthogonal polynomials (x, n): integer degrees up to 11 (recurrences and closed forms)
for _name in POLYNOMIALS:
    CASES[_name] = Case(lambda x, n, _op=_name: P(_op, x, n.to(x.dtype)),
                        [Spec(("B", 3, 4)), Spec(("B", 3, 4), "idx12")])
# every other elementwise primitive of the op table: a case from its declared domain
_KIND = {"real": "f", "pos": "pos", "unit": "unit", "ge1": "ge1", "bool": "bool"}
for _d in ELEMENTWISE:
    if _d.name not in CASES and _d.name not in ("cast", "where") and _d.arity in (1, 2):
        CASES[_d.name] = (_unary if _d.arity == 1 else _binary)(_d.name, _KIND[_d.domain])
for _op in ("add", "sub", "mul", "maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne"):
    CASES[_op] = _binary(_op)
CASES["fmadd"] = Case(lambda x, y, z: P("fmadd", x, y, z),
                     [Spec(("B", 3)), Spec(("B", 3)), Spec(("B", 3))])
CASES["div"] = _binary("div", "f", "pos")
CASES["pow"] = _binary("pow", "pos")
CASES["and"] = _binary("and", "bool")
CASES["or"] = _binary("or", "bool")


def test_cases_cover_every_op() -> None:
    assert set(CASES) == set(ops.OP_INFO)


@pytest.mark.parametrize("op", sorted(ops.OP_INFO))
def test_rule_tables_cover_op(op: str) -> None:
    assert op in ops.SHAPE_RULES
    assert op in interpreter.IMPLS or op == "input"
    assert op in autodiff.VJP
    if op != "input":
        assert op in lower.ELEMENT_RULES or op in lower.KERNELS or op in lower.VIEW_OPS


def make_value(spec: Spec, batch: int, rng: np.random.Generator, fdtype: Any) -> np.ndarray:
    shape = tuple(batch if d == "B" else d for d in spec.shape)
    if spec.kind == "bool":
        return rng.random(shape) < 0.5
    if spec.kind.startswith("idx"):
        return rng.integers(0, int(spec.kind[3:]), shape).astype(np.int64)
    mag = rng.uniform(0.2, 1.5, shape)
    if spec.kind == "pos":
        return (mag + 0.3).astype(fdtype)
    if spec.kind == "unit":  # inside (-1, 1), away from the ends
        return (mag / 1.8 * rng.choice([-1.0, 1.0], shape)).astype(fdtype)
    if spec.kind == "ge1":
        return (mag + 1.3).astype(fdtype)
    return (mag * rng.choice([-1.0, 1.0], shape)).astype(fdtype)


def _is_float(spec: Spec) -> bool:
    return spec.kind in ("f", "pos", "unit", "ge1")


@pytest.mark.parametrize("op", sorted(ops.OP_INFO))
def test_gradient_fd(op: str) -> None:
    case = CASES[op]
    info = ops.OP_INFO[op]
    rng = np.random.default_rng(1)
    vals = [make_value(s, 2, rng, np.float64) for s in case.inputs]
    ts = [gc.tensor(v, requires_grad=_is_float(s)) for v, s in zip(vals, case.inputs)]
    out = case.build(*ts)
    if not out.dtype.is_float or not info.differentiable:
        assert not out.requires_grad or out.dtype.is_float
        return
    weights = rng.standard_normal(out.shape)

    def f(*arrays: np.ndarray) -> float:
        with gc.no_grad():
            o = case.build(*[gc.tensor(a) for a in arrays]).numpy().astype(np.float64)
        return float((o * weights).sum())

    (out * gc.tensor(weights.astype(out.dtype.np))).sum().backward()
    eps = case.fd_eps
    for i, (t, s) in enumerate(zip(ts, case.inputs)):
        if not _is_float(s):
            continue
        num = np.zeros(vals[i].shape)
        for j in np.ndindex(vals[i].shape):
            hi = [v.copy() for v in vals]
            lo = [v.copy() for v in vals]
            hi[i][j] += eps
            lo[i][j] -= eps
            num[j] = (f(*hi) - f(*lo)) / (2 * eps)
        got = np.zeros(vals[i].shape) if t.grad is None else t.grad.numpy()
        np.testing.assert_allclose(got, num, rtol=case.fd_rtol, atol=case.fd_rtol,
                                   err_msg=f"{op}: gradient of input {i}")


def _run_backend(op: str, backend: str | None) -> list[list[np.ndarray]]:
    case = CASES[op]
    rng = np.random.default_rng(2)
    params: list[Any] = []  # per input: Parameter, shift Parameter, or None
    for s in case.inputs:
        if s.shape[0] == "B":
            params.append(nn.Parameter(np.zeros(s.shape[1:], np.float32)) if _is_float(s)
                          else None)
        else:
            params.append(nn.Parameter(make_value(s, 0, rng, np.float32)))
    arg_pos = [i for i, s in enumerate(case.inputs) if s.shape[0] == "B"]

    def step(*args: Any) -> Any:
        xs: list[Any] = []
        it = iter(args)
        for s, p in zip(case.inputs, params):
            if s.shape[0] == "B":
                a = next(it)
                xs.append(a + p if p is not None else a)
            else:
                xs.append(p)
        out = case.build(*xs)
        if out.requires_grad:
            (out * out * 0.5 + out).sum().backward()
        return out

    fn = gc.compile(step, backend=backend)
    results = []
    for batch in (1, 3, 7):
        gc.manual_seed(batch)
        for p in params:
            if p is not None:
                p.grad = None
        brng = np.random.default_rng(100 + batch)
        args = [make_value(case.inputs[i], batch, brng, np.float32) for i in arg_pos]
        out = fn(*args)
        res = [np.asarray(out).copy()]
        res += [np.zeros(0) if p is None or p.grad is None else p.grad.numpy().copy()
                for p in params]
        results.append(res)
    assert fn.compile_count == 1
    return results


@pytest.mark.parametrize("op", sorted(ops.OP_INFO))
def test_native_matches_interpreter(op: str) -> None:
    pytest.importorskip("graphc.codegen.cpu")
    assert_backends_agree(op, _run_backend(op, "interp"), _run_backend(op, None), 2e-5, 2e-6)


def assert_backends_agree(op: str, ref: list, got: list, rtol: float, atol_scale: float
                          ) -> None:
    """Results of ``_run_backend`` for batch 1, 3, 7: shapes equal, integers exact, floats
    close (sums run in another order: the absolute tolerance scales with the largest value)."""
    for batch, r, g in zip((1, 3, 7), ref, got):
        for k, (a, b) in enumerate(zip(r, g)):
            what = f"{op} B={batch} result {k}"
            assert a.shape == b.shape, what
            if a.dtype.kind == "f":
                atol = atol_scale * (1 + float(np.max(np.abs(a), initial=0)))
                np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, err_msg=what)
            else:
                np.testing.assert_array_equal(b, a, err_msg=what)


# -- broadcasting through the front end, random shapes -----------------------------------
@st.composite
def _broadcast_pair(draw: Any) -> tuple[tuple, tuple]:
    rank = draw(st.integers(1, 4))
    full = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    a = [d if draw(st.booleans()) else 1 for d in full]
    b = [d if draw(st.booleans()) else 1 for d in full]
    a = a[draw(st.integers(0, rank - 1)):]
    return tuple(a), tuple(b)


@settings(max_examples=40, deadline=None)
@given(_broadcast_pair(), st.sampled_from(["add", "sub", "mul", "maximum"]))
def test_broadcast_binary_matches_numpy(shapes: tuple, op: str) -> None:
    sa, sb = shapes
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    ta, tb = gc.tensor(a, requires_grad=True), gc.tensor(b, requires_grad=True)
    out = T.binary(op, ta, tb)
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum}[op](a, b)
    np.testing.assert_allclose(out.numpy(), ref.astype(np.float32), rtol=1e-6)
    out.sum().backward()
    assert ta.grad.shape == sa and tb.grad.shape == sb


def test_broadcast_compiled_symbolic_batch() -> None:
    """Broadcasting against a batch-shaped argument, natively, at three batch sizes."""
    pytest.importorskip("graphc.codegen.cpu")
    w = nn.Parameter(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    b = nn.Parameter(np.linspace(0, 1, 4, dtype=np.float32))

    def step(x: Any) -> Any:
        y = (x[:, :, None] * w + b).tanh().maximum(x[:, :1, None] * 0.1)
        y.sum().backward()
        return y

    outs = {}
    for backend in ("interp", None):
        fn = gc.compile(step, backend=backend)
        outs[backend] = []
        for batch in (1, 3, 7):
            w.grad = b.grad = None
            x = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
            outs[backend].append((np.asarray(fn(x)), w.grad.numpy().copy(),
                                  b.grad.numpy().copy()))
        assert fn.compile_count == 1
    for r, g in zip(outs["interp"], outs[None]):
        for a, c in zip(r, g):
            np.testing.assert_allclose(c, a, rtol=1e-5, atol=1e-6)
