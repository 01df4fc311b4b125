"""The intermediate representation: the bottom layer every other part of graphc builds on.

- ``dtypes``: the element types and their promotion rules;
- ``shapes``: shape algebra on ints and sympy symbols, and the run-time shape guards;
- ``ops``: the op table (one entry per primitive: its shape/dtype rule and, for elementwise ops,
  its reference, derivative and lowering expressions);
- ``graph``: ``Node``/``Builder``/``Graph`` (typed SSA with state slots) and ``toposort``;
- ``text``: the printer (``str(graph)``), ``verify``: the verifier run after every pass in tests.

Nothing here imports passes, codegen, the runtime or the front end: the layers above point down.
"""

from __future__ import annotations

from .graph import Builder, Graph, Node, toposort, user_location

__all__ = ["Builder", "Graph", "Node", "toposort", "user_location"]
