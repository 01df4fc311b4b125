"""Elementary functions (trigonometric, hyperbolic, logarithm and exponential variants) as
op-table entries: ``gc.<op>`` and ``Tensor.<op>`` with PyTorch's names. Each transcendental
primitive lowers to one branch-free routine in ``codegen/vmath.py`` that the CPU and PTX
backends both emit.
"""

from __future__ import annotations

from .opdef import OpDef

MATH: tuple[OpDef, ...] = ()
