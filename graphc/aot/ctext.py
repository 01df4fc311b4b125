"""C spellings: how Python values, dtypes and step names are written in the generated C.

String and double literals that round-trip exactly (:func:`cstr`, :func:`c_double`), the C
type / ``GRAPHC_*`` enum / ``.npy`` descr of each dtype, and :class:`Names`, the clash-free C
identifiers of a step's arguments, batch sizes and outputs.
"""

from __future__ import annotations

import math
from typing import Any

import sympy

from ..ir import dtypes as dt
from .model import AotModel

__all__ = ["C_TYPE", "DESCR", "ENUM", "KIND", "Names", "c_double", "cstr", "numel_c"]

C_TYPE = {dt.float32: "float", dt.float64: "double", dt.int64: "int64_t",
           dt.int32: "int32_t", dt.bool_: "uint8_t"}
DESCR = {dt.float32: "<f4", dt.float64: "<f8", dt.int64: "<i8", dt.int32: "<i4",
          dt.bool_: "|b1"}
ENUM = {dt.float32: "GRAPHC_FLOAT32", dt.float64: "GRAPHC_FLOAT64", dt.int64: "GRAPHC_INT64",
         dt.int32: "GRAPHC_INT32", dt.bool_: "GRAPHC_BOOL"}
KIND = {"param": "GRAPHC_PARAM", "buffer": "GRAPHC_BUFFER", "grad": "GRAPHC_GRAD",
         "optim": "GRAPHC_OPTIM"}
_C_WORDS = set("""auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct switch
typedef union unsigned void volatile while bool class new delete template this operator
private public protected namespace virtual friend using typename state hyper""".split())


def cstr(s: str) -> str:
    """A C string literal for ``s`` (octal escapes: never merge with following digits)."""
    out = []
    for b in s.encode():
        c = chr(b)
        if c in '"\\?':
            out.append("\\" + c)
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


class Names:
    """C names for the step's arguments, batch sizes and outputs (no clashes, no keywords)."""

    def __init__(self, m: AotModel) -> None:
        taken: set[str] = set()

        def pick(base: str) -> str:
            s = "".join(c if c.isalnum() else "_" for c in base) or "arg"
            if s[0].isdigit() or s in _C_WORDS or s.startswith("batch") or s.startswith("out"):
                s = "arg_" + s
            k, b = 2, s
            while s in taken:
                s, k = f"{b}_{k}", k + 1
            taken.add(s)
            return s

        self.args = [pick(a.name) for a in m.args]
        if len(m.symbols) == 1:
            self.syms = {m.symbols[0]: "batch"}
        else:
            self.syms = {s: f"batch_{s.name}" for s in m.symbols}
        self.outs = ["out"] if len(m.outputs) == 1 else [f"out{j}" for j in range(len(m.outputs))]

    def dim(self, d: Any) -> str:
        """C expression (int64_t) for one dimension."""
        if isinstance(d, int):
            return f"(int64_t){d}"
        e = sympy.sympify(d)
        sub = {s: sympy.Symbol(v, integer=True) for s, v in self.syms.items()}
        return f"(int64_t)({sympy.ccode(e.subs(sub))})"

    def shape_doc(self, shape: tuple) -> str:
        if not shape:
            return "[] (a scalar: one element)"
        return "".join(f"[{d if isinstance(d, int) else self.sym_doc(d)}]" for d in shape)

    def sym_doc(self, d: Any) -> str:
        e = sympy.sympify(d)
        return str(e.subs({s: sympy.Symbol(v) for s, v in self.syms.items()}))


def numel_c(names: Names, shape: tuple) -> str:
    return " * ".join(names.dim(d) for d in shape) if shape else "(int64_t)1"


def c_double(v: float) -> str:
    """A C expression for a double, exactly (repr round-trips; non-finite spelled out)."""
    if math.isnan(v):
        return "(0.0 / 0.0)"
    if math.isinf(v):
        return "(1.0 / 0.0)" if v > 0 else "(-1.0 / 0.0)"
    return repr(float(v))
