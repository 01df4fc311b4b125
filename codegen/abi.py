"""The compiled step's binary interface: one definition for the code generator, the runtimes
and the AOT C sources.

A step is ``void step(void **table)``. The table starts with ``TABLE_FIXED`` fixed slots
(symbol values, scratch pointer, scratch info, the error words), then one pointer per graph
input, output and state update, in graph order. The error words are ``ERR_WORDS`` int64s:
``[code, detail...]`` with the codes below; the AOT header maps them to ``GRAPHC_E*``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sympy

from graphc.ir import shapes as sh

TABLE_FIXED = 4  # syms, scratch, scratch_info, err
ERR_WORDS = 4
ERR_OK, ERR_INDEX, ERR_SCRATCH = 0, 1, 2
# check_finite: a flag kernel found NaN/Inf (err = [code, check number, flag kernel, 0]);
# debug builds: a load/store left its buffer (err = [code, node index, element, extent])
ERR_NONFINITE, ERR_BOUNDS = 3, 4
# every buffer and scratch region starts on a cache-line (and AVX-512 vector) boundary
ALIGN = 64
RUN2_SYMBOL = "graphc_parallel_run2"
# profiling builds: i64 [ticks, calls] per kernel, accumulated across calls
PROFILE_SYMBOL = "graphc_profile"


def align(x: Any) -> Any:
    """``x`` bytes (an int or a sympy expression in the batch symbols) rounded up to
    ``ALIGN``: the size a buffer or workspace region takes in the scratch arena."""
    if isinstance(x, int):
        return (x + ALIGN - 1) // ALIGN * ALIGN
    return _align_sym(sympy.sympify(x))


@lru_cache(maxsize=4096)
def _align_sym(x: sympy.Expr) -> Any:
    """Round a symbolic byte count up to ``ALIGN``. Sizes are mostly ``c * B`` with ``c`` a
    multiple of 64, already aligned for every integer ``B``: recognised from the terms' integer
    coefficients without asking sympy to simplify a floor (which cost a tenth of a small
    step's compile time)."""
    terms = x.as_coefficients_dict()
    if all(c.is_Integer and int(c) % ALIGN == 0 and (k == 1 or k.is_integer)
           for k, c in terms.items()):
        return x
    return sh.round_up(x, ALIGN)  # built without sympy's Add (see shapes.plus)
