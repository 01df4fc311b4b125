"""The regularized incomplete gamma functions ``igamma`` / ``igammac`` of
``graphc/ir/igamma.py`` as LLVM IR for both backends (``VMath`` inherits them).

Why loops: ATen's power series, upper series and continued fraction run until their term is
below the dtype's epsilon, up to 2000 steps, and how many they take depends on the element
(hundreds near ``x ~ a``): each is a loop in the element expression (``_loop``; a lane whose
branch does not use it takes no step), as the orthogonal polynomials' recurrences are
(``codegen/vmath_special.py``). Temme's asymptotic expansion has fixed bounds (25 x 25
coefficients): it is unrolled, its early exits as masks. Everything else is ATen's
``calc_igamma`` / ``calc_igammac`` evaluated branch-free, in the operand's precision with the
``double`` promotions ATen's literals cause, fused or not as ATen's two kernels are (see
``graphc/ir/igamma.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from graphc.ir import igamma as G

from .llvm_util import F32, F64, fconst

_c = fconst
_I1 = ir.IntType(1)
_I64 = ir.IntType(64)


class IncompleteGamma:
    """Mixin of ``codegen.vmath.VMath``."""

    b: ir.IRBuilder

    # -- helpers ---------------------------------------------------------------------------
    def _mad(self, a: ir.Value, x: ir.Value, c: ir.Value, fz: bool) -> ir.Value:
        """``a * x + c``: fused (``fma``) in the ``igammac`` kernel, two roundings in the
        ``igamma`` one (as ATen's builds)."""
        if fz:
            return self.fma(a, x, c)  # type: ignore[attr-defined]
        return self.b.fadd(self.b.fmul(a, x), c)

    def _f(self, name: str, x: ir.Value) -> ir.Value:
        """A vmath routine, float32 through float64 and rounded once (glibc's float
        functions, which ATen's float kernel calls, are as close as that but for rare
        cases)."""
        fn = getattr(self, name)
        if x.type == F32:
            return self._via_f64(fn, x)  # type: ignore[attr-defined]
        return fn(x)

    def _widen(self, x: ir.Value) -> ir.Value:
        return x if x.type == F64 else self.b.fpext(x, F64)

    def _narrow(self, x: ir.Value, t: ir.Type) -> ir.Value:
        return x if t == F64 else self.b.fptrunc(x, t)

    def _loop(self, live: ir.Value, state: list[ir.Value],
              step: Callable[[list[ir.Value]], tuple[list[ir.Value], ir.Value]],
              max_steps: int) -> list[ir.Value]:
        """``while live and i < max_steps: state, stop = step(state); live = not stop``: a
        loop in the element expression (blocks and phis), ``state`` at its end."""
        b = self.b
        pre = b.block
        fn = b.function
        head, body, done = (fn.append_basic_block(f"igam.{s}") for s in ("head", "step", "end"))
        b.branch(head)
        b.position_at_end(head)
        i, go = b.phi(_I64), b.phi(_I1)
        phis = [b.phi(v.type) for v in state]
        i.add_incoming(ir.Constant(_I64, 0), pre)
        go.add_incoming(live, pre)
        for p, v in zip(phis, state):
            p.add_incoming(v, pre)
        b.cbranch(b.and_(go, b.icmp_signed("<", i, ir.Constant(_I64, max_steps))), body, done)
        b.position_at_end(body)
        new, stop = step(list(phis))
        end = b.block
        i.add_incoming(b.add(i, ir.Constant(_I64, 1)), end)
        go.add_incoming(b.not_(stop), end)
        for p, v in zip(phis, new):
            p.add_incoming(v, end)
        b.branch(head)
        b.position_at_end(done)
        return list(phis)

    # -- ATen's helpers ----------------------------------------------------------------------
    def _lanczos(self, a: ir.Value, fz: bool) -> ir.Value:
        """``lanczos_sum_expg_scaled`` (``ratevl``): Horner in ``a`` up to 1, in ``1/a`` with
        the coefficients reversed above (the ``pow(a, 0)`` factor is 1)."""
        b, t = self.b, a.type
        big = b.fcmp_ordered(">", self._call("llvm.fabs", a), _c(t, 1.0))  # type: ignore
        y = b.select(big, b.fdiv(_c(t, 1.0), a), a)

        def horner(co: tuple) -> ir.Value:
            lo, hi = _c(t, co[0]), _c(t, co[-1])
            for i in range(1, len(co)):
                lo = self._mad(lo, y, _c(t, co[i]), fz)
                hi = self._mad(hi, y, _c(t, co[-1 - i]), fz)
            return b.select(big, hi, lo)

        return b.fdiv(horner(G.LANCZOS_NUM), horner(G.LANCZOS_DEN))

    def _igam_fac(self, a: ir.Value, x: ir.Value, fz: bool) -> ir.Value:
        """``_igam_helper_fac``: ``x^a e^-x / Gamma(a)``, directly where ``|a - x| > 0.4 a``
        (that comparison in double, as ATen's literal makes it), else through the Lanczos sum
        (``(x / fac)^a e^(a - x)`` below 200, the ``log1p`` form above)."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        bits = 32 if t == F32 else 64
        fabs = lambda v: self._call("llvm.fabs", v)  # noqa: E731  # type: ignore
        direct = b.fcmp_ordered(">", self._widen(fabs(b.fsub(a, x))),
                                b.fmul(_c(F64, 0.4), self._widen(fabs(a))))
        ax = b.fsub(self._mad(a, self._f("log", x), b.fneg(x), fz), self._f("lgamma", a))
        d = b.select(b.fcmp_ordered("<", ax, k(-G.MAXLOG[bits])), k(0.0), self._f("exp", ax))
        fac = self._narrow(b.fsub(self._widen(b.fadd(a, k(G.LANCZOS_G))), _c(F64, 0.5)), t)
        res = b.fdiv(self._call("llvm.sqrt", b.fdiv(fac, k(G.EXP1))),  # type: ignore
                     self._lanczos(a, fz))
        power = self.pow(b.fdiv(x, fac), a)  # type: ignore[attr-defined]
        near = b.fmul(res, b.fmul(self._f("exp", b.fsub(a, x)), power))
        num = self._narrow(b.fadd(self._widen(b.fsub(b.fsub(x, a), k(G.LANCZOS_G))),
                                  _c(F64, 0.5)), t)
        numfac = b.fdiv(num, fac)
        arg = b.fadd(self._widen(b.fmul(a, b.fsub(self._f("log1p", numfac), numfac))),
                     b.fdiv(b.fmul(self._widen(x), b.fsub(_c(F64, 0.5),
                                                          self._widen(k(G.LANCZOS_G)))),
                            self._widen(fac)))
        far = self._narrow(b.fmul(self._widen(res), self.exp(arg)), t)  # type: ignore
        small = b.and_(b.fcmp_ordered("<", a, k(200.0)), b.fcmp_ordered("<", x, k(200.0)))
        return b.select(direct, d, b.select(small, near, far))

    def _igam_series(self, a: ir.Value, x: ir.Value, ax: ir.Value, live: ir.Value
                     ) -> ir.Value:
        """DLMF 8.11.4: ``ax / a * sum_k x^k / ((a+1)...(a+k))`` (0 where ``ax`` is)."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        mach = k(G.MACHEP[32 if t == F32 else 64])

        def step(s: list[ir.Value]) -> tuple[list[ir.Value], ir.Value]:
            r, c, ans = s
            r = b.fadd(r, k(1.0))
            c = b.fmul(c, b.fdiv(x, r))
            ans = b.fadd(ans, c)
            return [r, c, ans], b.fcmp_ordered("<=", c, b.fmul(mach, ans))

        nonzero = b.fcmp_unordered("!=", ax, k(0.0))
        _, _, ans = self._loop(b.and_(live, nonzero), [a, k(1.0), k(1.0)], step, G.MAXITER)
        return b.select(nonzero, b.fdiv(b.fmul(ans, ax), a), k(0.0))

    def _igamc_series(self, a: ir.Value, x: ir.Value, live: ir.Value, fz: bool) -> ir.Value:
        """DLMF 8.7.3: ``-expm1(a log x - lgamma(1 + a)) - exp(a log x - lgamma(a)) sum_n
        (-x)^n / (n! (a + n))``."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        mach = k(G.MACHEP[32 if t == F32 else 64])
        fabs = lambda v: self._call("llvm.fabs", v)  # noqa: E731  # type: ignore

        def step(s: list[ir.Value]) -> tuple[list[ir.Value], ir.Value]:
            n, fac, total = s
            fac = b.fmul(fac, b.fdiv(b.fneg(x), n))
            term = b.fdiv(fac, b.fadd(a, n))
            total = b.fadd(total, term)
            return [b.fadd(n, k(1.0)), fac, total], b.fcmp_ordered(
                "<=", fabs(term), b.fmul(mach, fabs(total)))

        _, _, total = self._loop(live, [k(1.0), k(1.0), k(0.0)], step, G.MAXITER - 1)
        logx = self._f("log", x)
        term = b.fneg(self._f("expm1", self._mad(a, logx, b.fneg(
            self._f("lgamma", b.fadd(k(1.0), a))), fz)))
        e = self._f("exp", self._mad(a, logx, b.fneg(self._f("lgamma", a)), fz))
        return self._mad(b.fneg(e), total, term, fz)

    def _igamc_fraction(self, a: ir.Value, x: ir.Value, ax: ir.Value, live: ir.Value,
                        fz: bool) -> ir.Value:
        """DLMF 8.9.2: the continued fraction (convergents rescaled past ``BIG``) times
        ``ax``."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        bits = 32 if t == F32 else 64
        mach, big, biginv = k(G.MACHEP[bits]), k(G.BIG[bits]), k(G.BIGINV[bits])
        fabs = lambda v: self._call("llvm.fabs", v)  # noqa: E731  # type: ignore
        y = b.fsub(k(1.0), a)
        z = b.fadd(b.fadd(x, y), k(1.0))
        pkm1 = b.fadd(x, k(1.0))
        qkm1 = b.fmul(z, x)

        def step(s: list[ir.Value]) -> tuple[list[ir.Value], ir.Value]:
            c, y, z, pkm2, pkm1, qkm2, qkm1, ans = s
            c, y, z = b.fadd(c, k(1.0)), b.fadd(y, k(1.0)), b.fadd(z, k(2.0))
            yc = b.fmul(y, c)
            pk = self._mad(pkm1, z, b.fneg(b.fmul(pkm2, yc)), fz)
            qk = self._mad(qkm1, z, b.fneg(b.fmul(qkm2, yc)), fz)
            nz = b.fcmp_unordered("!=", qk, k(0.0))
            r = b.fdiv(pk, b.select(nz, qk, k(1.0)))
            err = b.select(nz, fabs(b.fdiv(b.fsub(ans, r), r)), k(1.0))
            ans = b.select(nz, r, ans)
            scale = b.select(b.fcmp_ordered(">", fabs(pk), big), biginv, k(1.0))
            new = [c, y, z, b.fmul(pkm1, scale), b.fmul(pk, scale), b.fmul(qkm1, scale),
                   b.fmul(qk, scale), ans]
            return new, b.fcmp_ordered("<=", err, mach)

        nonzero = b.fcmp_unordered("!=", ax, k(0.0))
        state = [k(0.0), y, z, k(1.0), pkm1, x, qkm1, b.fdiv(pkm1, qkm1)]
        ans = self._loop(b.and_(live, nonzero), state, step, G.MAXITER)[-1]
        return b.select(nonzero, b.fmul(ans, ax), k(0.0))

    def _igam_asymptotic(self, a: ir.Value, x: ir.Value, lower: bool) -> ir.Value:
        """Temme's expansion (``_asymptotic`` of graphc/ir/igamma.py), unrolled."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        mach = k(G.MACHEP[32 if t == F32 else 64])
        fabs = lambda v: self._call("llvm.fabs", v)  # noqa: E731  # type: ignore
        sgn = -1.0 if lower else 1.0
        lam = b.fdiv(x, a)
        sigma = b.fdiv(b.fsub(x, a), a)
        root = self._call("llvm.sqrt", b.fmul(k(-2.0), b.fsub(  # type: ignore
            self._f("log1p", sigma), sigma)))
        eta = b.select(b.fcmp_ordered(">", lam, k(1.0)), root,
                       b.select(b.fcmp_ordered("<", lam, k(1.0)), b.fneg(root), k(0.0)))
        half_a = self._call("llvm.sqrt", b.fdiv(a, k(2.0)))  # type: ignore
        res = b.fmul(k(0.5), self._f("erfc", b.fmul(b.fmul(k(sgn), eta), half_a)))
        pows = [k(1.0)]
        for _ in range(1, 25):
            pows.append(b.fmul(eta, pows[-1]))
        total, afac, old = k(0.0), k(1.0), k(math.inf)
        live = ir.Constant(_I1, 1)
        for row in G.IGAM_D:
            ck = k(row[0])
            inner = ir.Constant(_I1, 1)
            for n in range(1, 25):
                term = b.fmul(k(row[n]), pows[n])
                ck = b.select(inner, b.fadd(ck, term), ck)
                small = b.fcmp_ordered("<", fabs(term), b.fmul(mach, fabs(ck)))
                inner = b.and_(inner, b.not_(small))
            term = b.fmul(ck, afac)
            absterm = fabs(term)
            live = b.and_(live, b.not_(b.fcmp_ordered(">", absterm, old)))
            total = b.select(live, b.fadd(total, term), total)
            live = b.and_(live, b.not_(b.fcmp_ordered("<", absterm, b.fmul(mach, fabs(total)))))
            old = b.select(live, absterm, old)
            afac = b.select(live, b.fdiv(afac, a), afac)
        ad, ed = self._widen(a), self._widen(eta)
        e = self.exp(b.fmul(b.fmul(b.fmul(_c(F64, -0.5), ad), ed), ed))  # type: ignore
        root2 = self._call("llvm.sqrt", b.fmul(b.fmul(k(2.0), k(G.PI_F32)), a))  # type: ignore
        tail = b.fdiv(b.fmul(b.fmul(_c(F64, sgn), e), self._widen(total)), self._widen(root2))
        return self._narrow(b.fadd(self._widen(res), tail), t)

    # -- the functions ----------------------------------------------------------------------
    def _igamma_both(self, a: ir.Value, x: ir.Value, lower: bool) -> ir.Value:
        """``calc_igamma`` (``lower``) or ``calc_igammac``: the boundary values, the
        asymptotic region, and ATen's choice among the series and the fraction, each loop
        run only by the lanes that use it."""
        b, t = self.b, a.type
        k = lambda v: _c(t, v)  # noqa: E731
        fz = not lower
        fabs = lambda v: self._call("llvm.fabs", v)  # noqa: E731  # type: ignore
        lt, gt = (lambda u, v: b.fcmp_ordered("<", u, v)), (lambda u, v: b.fcmp_ordered(">", u, v))
        inf = k(math.inf)
        ok = b.and_(b.and_(gt(a, k(0.0)), gt(x, k(0.0))), b.and_(lt(a, inf), lt(x, inf)))
        r = b.fdiv(fabs(b.fsub(x, a)), a)
        sq = self._call("llvm.sqrt", a)  # type: ignore[attr-defined]
        asym_a = b.and_(b.and_(gt(a, k(20.0)), lt(a, k(200.0))), lt(r, k(0.3)))
        asym_b = b.and_(gt(a, k(200.0)), lt(r, b.fdiv(k(4.5), sq)))
        asym = b.and_(ok, b.or_(asym_a, asym_b))
        rest = b.and_(ok, b.not_(asym))
        # calc_igammac's choice (in calc_igamma, behind 1 - igammac for x > 1 and x > a)
        comp = b.and_(gt(x, k(1.0)), gt(x, a)) if lower else ir.Constant(_I1, 1)
        upper = b.and_(rest, comp)
        logx = self._widen(self._f("log", x))
        xd, ad = self._widen(x), self._widen(a)
        by_log = b.fcmp_ordered("<", b.fdiv(_c(F64, -0.4), logx), ad)
        by_ratio = b.fcmp_ordered("<", b.fmul(xd, _c(F64, 1.1)), ad)
        above = b.fcmp_ordered(">", xd, _c(F64, 1.1))  # ATen's 1.1 is a double
        use_lower = b.select(above, lt(x, a),
                             b.select(b.fcmp_ordered("<=", x, k(0.5)), by_log, by_ratio))
        fraction = b.and_(upper, b.and_(above, b.not_(use_lower)))
        useries = b.and_(upper, b.and_(b.not_(use_lower), b.not_(above)))
        lseries = b.and_(upper, use_lower)
        if lower:
            lseries = b.or_(lseries, b.and_(rest, b.not_(comp)))
        ax = self._igam_fac(a, x, fz)
        s_low = self._igam_series(a, x, ax, lseries)
        s_frac = self._igamc_fraction(a, x, ax, fraction, fz)
        s_up = self._igamc_series(a, x, useries, fz)
        upper_value = b.select(fraction, s_frac, b.select(useries, s_up, b.fsub(k(1.0), s_low)))
        if lower:
            out = b.select(comp, b.fsub(k(1.0), upper_value), s_low)
        else:
            out = upper_value
        out = b.select(asym, self._igam_asymptotic(a, x, lower), out)
        nan = k(math.nan)
        out = b.select(b.or_(self._is_nan(a), self._is_nan(x)), nan, out)  # type: ignore
        one, zero = (k(1.0), k(0.0)) if lower else (k(0.0), k(1.0))
        xinf, ainf = b.fcmp_ordered("==", fabs(x), inf), b.fcmp_ordered("==", fabs(a), inf)
        out = b.select(xinf, one, out)
        out = b.select(ainf, b.select(xinf, nan, zero), out)
        out = b.select(b.fcmp_ordered("==", x, k(0.0)), zero, out)
        out = b.select(b.fcmp_ordered("==", a, k(0.0)), b.select(gt(x, k(0.0)), one, nan), out)
        return b.select(b.or_(lt(x, k(0.0)), lt(a, k(0.0))), nan, out)

    def igamma(self, a: ir.Value, x: ir.Value) -> ir.Value:
        """The regularized lower incomplete gamma function (``torch.special.gammainc``)."""
        return self._igamma_both(a, x, True)

    def igammac(self, a: ir.Value, x: ir.Value) -> ir.Value:
        """The regularized upper incomplete gamma function (``torch.special.gammaincc``)."""
        return self._igamma_both(a, x, False)
