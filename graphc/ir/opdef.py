"""``OpDef``: everything graphc knows about one primitive, in one record.

Why one record: a primitive's shape rule, numpy reference, derivative and lowering used to sit
in five files, so adding an op meant six coordinated edits and forgetting one was silent. Now
the interpreter, the autodiff pass, the CPU and PTX lowerings and the front end all *derive*
their tables from ``OpDef`` entries (``graphc/ir/elementwise.py`` holds the elementwise ones),
in the spirit of JAX primitives (rule, AD rule and lowering on adjacent lines) and tinygrad's
``code_for_op`` (one expression per op that every backend shares unless it overrides it).

The fields that describe code are plain callables, so this module imports no backend:

- ``ref(*arrays) -> array``: the numpy reference (the oracle every backend is tested against),
  computed in the operands' dtype and cast to the node's dtype by the interpreter;
- ``vjp(b, n, g) -> [grad or None per input]``: the reverse-mode rule, building IR with the
  builder ``b`` for node ``n`` and cotangent ``g``;
- ``lower(e, *values) -> value``: the element expression, written against the small
  type-generic vocabulary ``e`` that the code generator provides (``codegen/emit.py``:
  ``e.add``, ``e.select``, ``e.c(1.0)``, ``e.math("exp", x)`` ...). The same expression is
  emitted for the CPU and for PTX; ``lower_ptx`` overrides it where the GPU needs other code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OpDef:
    """One IR primitive.

    ``kind`` is leaf | elementwise | reduce | matmul | movement | index | nn; ``arity`` -1 for
    variadic. ``float_only`` ops reject integer operands in the IR (the front end promotes
    integers to float32 first, as PyTorch does for ``exp`` & co.; ``int_inputs="reject"`` makes
    the front end raise instead, as PyTorch's activations do: ``"silu" not implemented for
    'Long'``). ``api`` names where the
    front end exposes an elementwise op: ``"Tensor"`` (method, plus ``name_`` in place),
    ``"gc"`` (``gc.name``), ``"F"`` (``nn.functional.name``, with ``inplace=``), and
    ``module`` the ``nn`` module class name (``nn.SiLU``).

    A ``kind="composite"`` entry is not an IR primitive (it is not in ``OP_INFO``): it has a
    ``decompose`` instead of ``ref``/``vjp``/``lower``, and the same surface fields.
    """

    name: str
    kind: str
    arity: int
    differentiable: bool = True
    float_only: bool = False
    int_inputs: str = "promote"  # float_only ops on integer tensors: "promote" | "reject"
    ref: Callable[..., Any] | None = None
    vjp: Callable[..., Any] | None = None
    lower: Callable[..., Any] | None = None
    lower_ptx: Callable[..., Any] | None = None
    api: tuple[str, ...] = ()
    module: str | None = None
    doc: str = ""
    # user-facing parameters after the tensor operands, with torch's names and defaults
    # (``negative_slope=0.01``); the surface functions and modules take them in this order
    params: tuple[tuple[str, Any], ...] = ()
    # composites (``kind="composite"``, not IR primitives): the op in terms of other ops,
    # ``decompose(T, *tensors, **params)`` with ``T`` the front end's op namespace
    # (``graphc.tensor_ops``: ``T.where``, ``T.unary``, tensor methods and operators); the
    # IR, derivatives and lowerings are those of the ops it uses
    decompose: Callable[..., Any] | None = None
    # whether ``nn.functional.<op>`` and the module take ``inplace=`` (torch's signature)
    inplace: bool = True
    # the inputs on which the op is smooth and defined, for generated tests: "real",
    # "pos" (x > 0), "unit" (|x| < 1), "ge1" (x > 1), "bool", "int"
    domain: str = "real"
    # rarely needed details: "test_params" (parameter sets the parity tests add),
    # "repr_inplace" (False where torch's module repr omits ``inplace=True``)
    extra: dict = field(default_factory=dict, compare=False, hash=False)


# the pre-table name, kept for callers that only read kind/arity/differentiable
OpInfo = OpDef
