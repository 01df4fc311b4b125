"""Shape algebra over ints and sympy expressions.

This is the only module that knows shapes can be symbolic. A dimension is either a Python
``int`` or a sympy expression over positive integer symbols (the batch dimension ``B`` of a
compiled step). Every shape rule in the IR (broadcasting, reshape with ``-1``, matmul, conv and
pool output sizes, reduction divisors) goes through the helpers here, so that the same rule
serves eager execution with concrete ints and tracing with symbols.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import sympy
from sympy.core.add import _addsort

Dim = int | sympy.Expr
Shape = tuple[Dim, ...]


class ShapeError(ValueError):
    """A shape rule was violated (the message names the op and the shapes). ``symbols``:
    the symbolic sizes the rule needs as numbers (a convolution's channels), so a trace
    with the default symbolic axes can fix exactly those (``graphc.api._trace``)."""

    def __init__(self, msg: str = "", symbols: frozenset = frozenset()) -> None:
        super().__init__(msg)
        self.symbols = frozenset(symbols)


def symbol(name: str) -> sympy.Symbol:
    """A positive integer dimension symbol (batch sizes are never zero-or-negative)."""
    return sympy.Symbol(name, integer=True, positive=True)


def dim(d: object) -> Dim:
    """Normalise a dimension: sympy integers become ints, expressions are simplified."""
    if type(d) is int:  # the common case first (bool is not int here)
        return d
    if isinstance(d, bool):
        raise TypeError(f"dimension must be an int, got bool {d!r}")
    if isinstance(d, int):
        return d
    if hasattr(d, "__index__") and not isinstance(d, sympy.Basic):
        return int(d)  # numpy integers
    if isinstance(d, sympy.Basic):
        e = d
        if e.is_Integer:
            return int(e)
        return e
    raise TypeError(f"dimension must be an int or a symbolic expression, got {type(d).__name__}")


def shape(s: Iterable[object]) -> Shape:
    """Normalise a shape to a tuple of dims."""
    if type(s) is tuple and all(type(d) is int for d in s):
        return s  # already normal (every eager op's shapes)
    return tuple(dim(d) for d in s)


def is_concrete(s: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in s)


def numel(s: Sequence[Dim]) -> Dim:
    n: Dim = 1
    for d in s:
        n = n * d
    return dim(n)


def same(a: Dim, b: Dim) -> bool:
    """True when two dims are provably equal."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a is b or a == b:  # structural equality: the common case, no algebra needed
        return True
    if isinstance(a, int) or isinstance(b, int):
        e = a if isinstance(b, int) else b
        if e.is_Symbol:  # a bare symbol is never provably a constant
            return False
    ea, eb = sympy.expand(sympy.sympify(a)), sympy.expand(sympy.sympify(b))
    if ea == eb:
        return True
    if _polynomial(ea) and _polynomial(eb):
        # expanded polynomials are canonical sums of monomials: different forms, different
        # polynomials. Deciding it without ``a - b`` keeps the first symbolic sum of a
        # process (sympy's ``Add.flatten`` imports sympy.tensor and sympy.combinatorics on
        # it, 0.08-0.13 s) out of every trace that compares ``32*B`` with ``1``
        return False
    return sympy.expand(ea - eb) == 0  # floor, Max, ...: let sympy cancel


@lru_cache(maxsize=4096)
def _polynomial(e: sympy.Expr) -> bool:
    """Whether ``e`` is built from integers and symbols by +, * and positive integer powers."""
    if e.is_Integer or e.is_Symbol:
        return True
    if e.is_Pow:
        return _polynomial(e.base) and e.exp.is_Integer and e.exp > 0
    return (e.is_Add or e.is_Mul) and all(_polynomial(x) for x in e.args)


def sub(a: Dim, b: Dim) -> Dim:
    """``a - b`` of two dims, with the cases shape rules mostly meet (ints, ``B - B``,
    ``B - 0``) decided without building a symbolic sum."""
    if type(a) is int and type(b) is int:
        return a - b
    if b == 0:
        return a
    if a is b or a == b:
        return 0
    return dim(a - b)


# -- sums without sympy's Add ---------------------------------------------------------------
# The first evaluated ``Add`` of a process imports sympy.tensor and sympy.combinatorics
# (``Add.flatten`` checks for tensor expressions): 0.07-0.13 s, a fifth of a small step's cold
# compile, paid by every process that plans a step with symbolic sizes. The planner's sizes
# (buffer offsets, the arena, GEMM workspaces) are sums of monomials with rational
# coefficients, so they are built here directly in the form sympy's evaluation would give
# (terms merged by monomial, sorted by sympy's own ``_addsort``, the number first): equal,
# and hashed the same, as the evaluated sum (``tests/test_shapes.py``).
def _terms(d: object) -> tuple[sympy.Number, dict[sympy.Expr, sympy.Number]]:
    """``d`` as a number plus ``{monomial: coefficient}``."""
    if type(d) is int:
        return sympy.Integer(d), {}
    e = sympy.sympify(d)
    if e.is_Number:
        return e, {}
    const: sympy.Number = sympy.Integer(0)
    terms: dict[sympy.Expr, sympy.Number] = {}
    for t in (e.args if e.is_Add else (e,)):
        if t.is_Number:
            const += t
            continue
        c, m = t.as_coeff_Mul()
        terms[m] = terms.get(m, sympy.Integer(0)) + c
    return const, terms


def _sum_of(const: sympy.Number, terms: dict[sympy.Expr, sympy.Number]) -> Dim:
    args = []
    for m, c in terms.items():
        if c == 0:
            continue
        if c == 1:
            args.append(m)
        else:
            args.append(sympy.Mul._from_args((c, *m.args) if m.is_Mul else (c, m)))
    _addsort(args)
    if const != 0:
        args.insert(0, const)
    if not args:
        return 0
    if len(args) == 1:
        return dim(args[0]) if args[0].is_Number else args[0]
    return sympy.Add._from_args(args)


def plus(*ds: object) -> Dim:
    """``sum(ds)`` of ints and symbolic sizes, in sympy's canonical form, without ``Add``."""
    if all(type(d) is int for d in ds):
        return sum(ds)  # type: ignore[arg-type]
    const: sympy.Number = sympy.Integer(0)
    terms: dict[sympy.Expr, sympy.Number] = {}
    for d in ds:
        c, ts = _terms(d)
        const += c
        for m, k in ts.items():
            terms[m] = terms.get(m, sympy.Integer(0)) + k
    return _sum_of(const, terms)


def scale(d: object, c: int | sympy.Rational) -> Dim:
    """``d * c`` for a number ``c``, distributed over ``d``'s terms, without ``Add``."""
    if type(d) is int and type(c) is int:
        return d * c
    k = sympy.Rational(c)
    const, terms = _terms(d)
    return _sum_of(const * k, {m: v * k for m, v in terms.items()})


def round_up(d: object, a: int) -> Dim:
    """``d`` rounded up to a multiple of ``a``: ``a * floor((d + a - 1) / a)``, left
    unevaluated (the code generator emits it as an integer division)."""
    if type(d) is int:
        return (d + a - 1) // a * a
    inner = plus(scale(d, sympy.Rational(1, a)), sympy.Rational(a - 1, a))
    if type(inner) is int or getattr(inner, "is_Number", False):
        return int(sympy.floor(inner)) * a
    return sympy.Mul._from_args((sympy.Integer(a), sympy.floor(inner, evaluate=False)))


def ceil_mul(d: object, a: int) -> Dim:
    """``ceil(d / a) * a``, left unevaluated for a symbolic ``d``."""
    if type(d) is int:
        return -(-d // a) * a
    e = sympy.sympify(d)
    if e.is_Integer:
        return -(-int(e) // a) * a
    return sympy.Mul._from_args((sympy.Integer(a),
                                 sympy.ceiling(scale(e, sympy.Rational(1, a)),
                                               evaluate=False)))


def numerator_denominator(e: sympy.Expr) -> tuple[Dim, int]:
    """``(n, q)`` with ``e == n / q``, ``n`` a sum with integer coefficients, for a sum of
    monomials with rational coefficients (what ``floor``/``ceiling`` hold here), without
    ``together``'s symbolic arithmetic."""
    const, terms = _terms(e)
    q = 1
    for c in (const, *terms.values()):
        q = q * int(c.q) // math.gcd(q, int(c.q))
    return _sum_of(const * q, {m: v * q for m, v in terms.items()}), q


def same_shape(a: Sequence[Dim], b: Sequence[Dim]) -> bool:
    # equal tuples (ints, structurally equal expressions) are the common case: no per-dim
    # algebra
    return a == b or (len(a) == len(b) and all(same(x, y) for x, y in zip(a, b)))


# symbolic size -> its text: sympy prints an expression anew each time (~30 us for
# ``32*B``), and every node of a graph is printed for its compile-cache key, on each
# process's first call of a step (a tenth of a disk-cached GPT step's first call)
_DIM_TEXT: dict[Any, str] = {}


def fmt_dim(d: Dim) -> str:
    if type(d) is int:
        return str(d)
    text = _DIM_TEXT.get(d)
    if text is None:
        text = str(d).replace(" ", "")
        if len(_DIM_TEXT) < 4096:  # bounded: a process that makes symbols without end
            _DIM_TEXT[d] = text
    return text


def fmt_shape(s: Sequence[Dim]) -> str:
    return "[" + ",".join(fmt_dim(d) for d in s) + "]"


def broadcast(a: Sequence[Dim], b: Sequence[Dim], op: str = "broadcast") -> Shape:
    """NumPy/PyTorch broadcasting of two shapes (right-aligned, size-1 dims stretch)."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if same(x, y):
            out.append(x)
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        else:
            text = f"{op}: shapes {fmt_shape(a)} and {fmt_shape(b)} cannot be broadcast together"
            if not (type(x) is int and type(y) is int):
                # a symbolic size met another size: most often an argument whose first dim
                # is not a batch (an attention mask, a state) made symbolic by default
                text += (" (in a compiled step the first dimension of every argument is "
                         "symbolic by default; mark the symbolic axes of an argument whose "
                         "first dim is not a batch, e.g. gc.compile(fn, dynamic={'x': (0,), "
                         "'mask': ()}), or compile with dynamic=False)")
            raise ShapeError(text)
    return tuple(out)


def can_expand(src: Sequence[Dim], dst: Sequence[Dim]) -> bool:
    if len(src) > len(dst):
        return False
    ps = (1,) * (len(dst) - len(src)) + tuple(src)
    return all(s == 1 or same(s, d) for s, d in zip(ps, dst))


def reshape(src: Sequence[Dim], dst: Sequence[object], op: str = "reshape") -> Shape:
    """Resolve a target shape (one ``-1`` allowed) against ``src``; sizes must agree exactly."""
    dst = list(dst)
    total = numel(src)
    n_infer = sum(1 for d in dst if isinstance(d, int) and d == -1)
    if n_infer > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {dst}")
    if n_infer == 1:
        known = numel([d for d in dst if not (isinstance(d, int) and d == -1)])
        if known == 0:
            raise ShapeError(f"{op}: cannot infer -1 in {dst} for a shape with zero elements")
        inferred = dim(sympy.sympify(total) / sympy.sympify(known))
        if not isinstance(inferred, int) and not inferred.is_integer:
            # divisible only for some symbol values: a run-time guard while tracing
            cond = sympy.Eq(sympy.Mod(sympy.sympify(total), sympy.sympify(known)), 0)
            if not _GUARDS or cond is sympy.false:
                raise ShapeError(
                    f"{op}: shape {fmt_shape(src)} ({fmt_dim(total)} elements) is not "
                    f"divisible into {dst}"
                )
            _GUARDS[-1](cond, f"{op}: {fmt_dim(total)} elements divisible by "
                              f"{fmt_dim(known)}")
        if isinstance(inferred, int) and inferred * known != total:
            raise ShapeError(
                f"{op}: shape {fmt_shape(src)} ({fmt_dim(total)} elements) is not divisible "
                f"into {dst}"
            )
        dst = [inferred if (isinstance(d, int) and d == -1) else d for d in dst]
    out = shape(dst)
    for d in out:
        if isinstance(d, int) and d < 0:
            raise ShapeError(f"{op}: invalid dimension {d} in {list(dst)}")
    if not same(numel(out), total):
        raise ShapeError(
            f"{op}: shape {fmt_shape(out)} is invalid for input of shape {fmt_shape(src)} "
            f"({fmt_dim(total)} elements)"
        )
    return out


# Active guard sinks (the trace context pushes one): shape rules that hold only for some
# symbol values report the condition here instead of failing.
_GUARDS: list = []


def require(cond: object, what: str, error: type[Exception] = ValueError) -> None:
    """A condition on sizes: checked now when it is decided, else (symbolic sizes, tracing)
    recorded as a run-time guard that the compiled step checks before it changes anything.
    Without a trace to record it in, an undecided condition is accepted (eager sizes are
    always concrete, so that happens only for shape-only reasoning)."""
    c = sympy.sympify(cond)
    if c is sympy.true:
        return
    if c is sympy.false:
        raise error(what)
    if _GUARDS:
        _GUARDS[-1](c, what)


def nonneg(d: Dim) -> Dim:
    """``max(d, 0)`` for a size expression (kept symbolic when undecided)."""
    return dim(sympy.Max(sympy.sympify(d), 0))


def require_gt(a: Dim, b: Dim, what: str) -> None:
    """``require(a > b, what)``."""
    if type(b) is int:
        low = a if type(a) is int else _monomial_min(a)
        if low is not None and low > b:
            return  # decided without sympy's relational algebra (it builds ``a - b``)
    require(sympy.Gt(sympy.sympify(a), sympy.sympify(b)), what)


def _monomial_min(e: sympy.Expr) -> int | None:
    """The least value of ``c * s1 * s2 ...`` (``c`` a positive integer, the ``s`` positive
    integer symbols, any positive powers) over the symbols' values, i.e. ``c``; None for any
    other expression."""
    c, rest = e.as_coeff_Mul()
    if not c.is_Integer or c <= 0:
        return None
    for f in sympy.Mul.make_args(rest):
        base = f.base if f.is_Pow and f.exp.is_Integer and f.exp > 0 else f
        if not (base.is_Symbol and base.is_positive and base.is_integer):
            return None
    return int(c)


def push_guard_sink(fn: object) -> None:
    _GUARDS.append(fn)


def pop_guard_sink() -> None:
    _GUARDS.pop()


def norm_axis(axis: int, ndim: int, op: str = "op") -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(
            f"{op}: dimension out of range (expected to be in range of "
            f"[{-max(ndim, 1)}, {max(ndim, 1) - 1}], but got {axis})"
        )
    return axis % max(ndim, 1)


def norm_axes(axes: object, ndim: int, op: str = "op") -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    out = sorted({norm_axis(int(a), ndim, op) for a in axes})  # type: ignore[union-attr]
    return tuple(out)


def conv_out(size: Dim, kernel: int, stride: int, padding: int, dilation: int = 1,
             ceil_mode: bool = False) -> Dim:
    """Output size of a convolution or pooling window, as PyTorch computes it."""
    eff = dilation * (kernel - 1) + 1
    if type(size) is int:  # integer arithmetic: no sympy objects for concrete sizes
        num_i = size + 2 * padding - eff
        if not ceil_mode:
            return num_i // stride + 1
        out_i = -(-num_i // stride) + 1
        return out_i - 1 if (out_i - 1) * stride >= size + padding else out_i
    num = sympy.sympify(size) + 2 * padding - eff
    if ceil_mode:
        out = sympy.ceiling(num / stride) + 1
        # PyTorch: the last window must start inside the input or left padding
        if isinstance(dim(out), int) and (dim(out) - 1) * stride >= int(size) + padding:
            out = out - 1
    else:
        out = sympy.floor(num / stride) + 1
    return dim(out)


def slice_len(start: Dim, stop: Dim, step: int) -> Dim:
    """Number of elements of ``range(start, stop, step)`` (bounds already resolved)."""
    if type(start) is int and type(stop) is int:
        return max(0, (stop - start + step - 1) // step)
    if start == 0 and step == 1:  # x[:, a:b] keeps all of B: no symbolic sum to build
        if getattr(stop, "is_nonnegative", False):
            return dim(stop)
        return dim(sympy.Max(0, sympy.sympify(stop)))
    n = sympy.floor((sympy.sympify(stop) - sympy.sympify(start) + step - 1) / step)
    return dim(sympy.Max(0, n))


def resolve_slice(size: Dim, start: int | None, stop: int | None, step: int
                  ) -> tuple[Dim, Dim]:
    """Python's slice rules (negative bounds count from the end, clamped to the dim).

    For a symbolic ``size`` the result stays symbolic (``Min``/``Max`` of the size).
    """
    if type(size) is int:
        lo = 0 if start is None else min(max(size + start if start < 0 else start, 0), size)
        hi = size if stop is None else min(max(size + stop if stop < 0 else stop, 0), size)
        return lo, max(lo, hi)

    def res(v: int | None, default: Dim) -> Dim:
        if v is None:
            return default
        e = sympy.sympify(size) + v if v < 0 else sympy.sympify(v)
        return dim(sympy.Min(sympy.Max(e, 0), size))

    b = res(start, 0)
    e = res(stop, size)
    return b, dim(sympy.Max(b, e))


def mismatch(msg: str, pairs: Iterable[Sequence[Dim]], error: type = ValueError) -> Exception:
    """The error for sizes a rule needed equal (``pairs``: the ones that are not provably
    so): a ShapeError naming their symbols when any is symbolic, which a trace with the
    default symbolic axes answers by fixing exactly those and tracing again
    (``graphc.api._trace``: ``a @ b`` of two arguments, b's first size symbolic); else
    ``error(msg)``, the op's own error."""
    syms = free_symbols(pairs)
    return ShapeError(msg, symbols=frozenset(syms)) if syms else error(msg)


def free_symbols(shapes: Iterable[Sequence[Dim]]) -> set[sympy.Symbol]:
    out: set[sympy.Symbol] = set()
    for s in shapes:
        for d in s:
            if not isinstance(d, int):
                out |= d.free_symbols
    return out


def evaluate(d: Dim | sympy.Expr, env: Mapping[sympy.Symbol, int]) -> int:
    """Evaluate a dim under concrete symbol values."""
    if isinstance(d, int):
        return d
    v = sympy.sympify(d).subs(env)
    if not v.is_number:
        raise ShapeError(f"unbound symbols in {d}: {v.free_symbols}")
    return int(v)


def evaluate_shape(s: Sequence[Dim], env: Mapping[sympy.Symbol, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, env) for d in s)


def bind(pattern: Sequence[Dim], actual: Sequence[int], env: dict[sympy.Symbol, int],
         what: str) -> None:
    """Bind symbols in ``pattern`` (only bare symbols may bind) against an actual shape.

    Raises ``ValueError`` naming ``what`` when ranks differ, a fixed dim differs, or a symbol
    is already bound to another value (the guard that two inputs share a batch size).
    """
    if len(pattern) != len(actual):
        raise ValueError(
            f"{what}: expected rank {len(pattern)} (shape {fmt_shape(pattern)}), "
            f"got rank {len(actual)} (shape {list(actual)})"
        )
    for p, a in zip(pattern, actual):
        if isinstance(p, int):
            if p != a:
                raise ValueError(
                    f"{what}: expected shape {fmt_shape(pattern)}, got {list(actual)}"
                )
        elif isinstance(p, sympy.Symbol):
            if p in env and env[p] != a:
                raise ValueError(
                    f"{what}: expected shape {fmt_shape(pattern)} with {p}={env[p]} "
                    f"(bound by an earlier argument), got {list(actual)}"
                )
            if a < 1:
                raise ValueError(f"{what}: dimension {p} must be >= 1, got shape {list(actual)}")
            env[p] = int(a)
        else:
            v = evaluate(p, env)
            if v != a:
                raise ValueError(
                    f"{what}: expected shape {fmt_shape(pattern)} (= {v} at {p}), "
                    f"got {list(actual)}"
                )
