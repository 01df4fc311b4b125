"""``graphc.tensor``: the ``Tensor`` type with all of its methods, operators and ``backward()``.

The class itself is in ``_tensor.py``; its operators and op methods are attached by
``tensor_ops`` (many derived from the op table), ``shape_ops``, ``index_ops``,
``reduce_ops`` and ``composite_ops``, and eager ``backward()`` by ``engine``. This
module imports all three, in that order, so ``from graphc.tensor import Tensor`` always gives
the complete type, and none of the three has to import another one back.
"""

from __future__ import annotations

from . import (
    composite_ops,
    engine,
    index_ops,
    linalg_ops,
    misc_ops,
    reduce_ops,
    shape_ops,
    stat_ops,
    tensor_ops,
)
from ._tensor import _EAGER, Tensor, _OutNode, _ScalarOutNode, builder, leaf_node, to_array
from .tensor_ops import as_tensor

# the op groups beyond the core set attach their methods after tensor_ops (which they use)
for _group in (shape_ops, index_ops, reduce_ops, composite_ops, stat_ops, linalg_ops, misc_ops):
    _group.install(Tensor)

__all__ = ["Tensor", "builder", "to_array", "leaf_node", "as_tensor", "tensor_ops", "engine",
           "_EAGER", "_OutNode", "_ScalarOutNode"]
