"""The pass pipeline from the traced graph to the optimized graph, with stage snapshots.

Passes are listed by name in ``PASSES`` (registered with ``register_pass``, in the spirit of
PyTensor's named rewrite phases), each producing the graph of one named stage that
``step.ir(stage)`` prints. Autodiff and the optimizer rules are not in the list: they run
during tracing (``backward()`` and ``step()`` emit their nodes into the traced graph). The
planning passes (fusion, loop groups, memory plan) belong to the code generator and print as
``ir("fused")``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from graphc.ir import Graph
from graphc.ir.verify import verify

from .simplify import simplify


@dataclass(frozen=True)
class Pass:
    """A graph-to-graph transform and the stage name its output is shown under."""

    name: str
    stage: str
    run: Callable[[Graph], Graph]


PASSES: list[Pass] = []


def register_pass(name: str, stage: str) -> Callable[[Callable[[Graph], Graph]], Callable]:
    """Append a pass to the pipeline (passes run in registration order)."""

    def deco(fn: Callable[[Graph], Graph]) -> Callable[[Graph], Graph]:
        if any(p.name == name for p in PASSES):
            raise ValueError(f"a pass named {name!r} is already registered")
        PASSES.append(Pass(name, stage, fn))
        return fn

    return deco


# simplification: CSE (the builder interns nodes), exact algebraic identities, dead code
register_pass("simplify", "optimized")(simplify)


def verify_default() -> bool:
    """Whether ``run_pipeline`` verifies by default: when ``GRAPHC_VERIFY_IR`` is set (the
    test suite sets it). Every node's shape and dtype were inferred by its rule when it was
    built; verifying re-infers all of them, which cost ~10% of compiling a 12-layer GPT step,
    to catch a pass that broke the graph — a check for the compiler's tests, not for every
    user's compile."""
    return os.environ.get("GRAPHC_VERIFY_IR", "").strip() not in ("", "0")


def run_pipeline(traced: Graph, check: bool | None = None) -> dict[str, Graph]:
    """Run every pass in order; returns ``{stage: graph}`` (``traced``, ``grad``, then one
    stage per pass: ``optimized``).

    ``traced`` shows the forward computation (the function's outputs only), ``grad`` the whole
    step with gradient and update nodes. The verifier runs after every pass when ``check``
    is set (default: ``verify_default()``), so a broken pass fails where it breaks.
    """
    if check is None:
        check = verify_default()
    if check:
        verify(traced)
    forward = Graph(traced.name, list(traced.inputs), list(traced.outputs), [],
                    list(traced.guards), dict(traced.meta))
    stages = {"traced": forward, "grad": traced}
    g = traced
    for p in PASSES:
        g = p.run(g)
        if check:
            verify(g)
        stages[p.stage] = g
    return stages
