"""Every CPU kernel family, imported so that the registry in ``codegen.kernels`` is complete.

Each family module registers its ``Kernel`` when imported; the planner and the entry function
import this module rather than a family list of their own, so adding a family is adding its
module and one line here.
"""

from __future__ import annotations

from . import attention, conv, loop, matmul, pool, reduce, scan, scatter, sort
from .kernels import KERNELS, Kernel, kernel_for

FAMILIES = (reduce.KERNEL, matmul.KERNEL, scatter.KERNEL, conv.KERNEL, pool.KERNEL,
            scan.KERNEL, sort.KERNEL, loop.KERNEL, attention.KERNEL)

__all__ = ["FAMILIES", "KERNELS", "Kernel", "kernel_for"]
