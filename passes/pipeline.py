"""The pass pipeline from the traced graph to the optimized graph, with stage snapshots."""

from __future__ import annotations

from graphc.ir import Graph
from graphc.ir.verify import verify

from .simplify import simplify


def run_pipeline(traced: Graph, check: bool = True) -> dict[str, Graph]:
    """Run every pass in order; returns ``{stage: graph}`` (``traced``, ``grad``, ``optimized``).

    Autodiff and the optimizer rules run during tracing (``backward()`` and ``step()`` emit
    their nodes into the traced graph): ``traced`` shows the forward computation (the
    function's outputs only), ``grad`` the whole step with gradient and update nodes, and
    ``optimized`` the step after simplification, CSE and dead-code elimination.
    The verifier runs after every pass when ``check`` is set.
    """
    if check:
        verify(traced)
    forward = Graph(traced.name, list(traced.inputs), list(traced.outputs), [],
                    list(traced.guards), dict(traced.meta))
    stages = {"traced": forward, "grad": traced}
    opt = simplify(traced)
    if check:
        verify(opt)
    stages["optimized"] = opt
    return stages
