"""The PTX backend's executable: a step compiled to PTX at ``gc.compile`` time, run through
the CUDA driver when it is called.

Code generation is ``graphc.codegen.ptx`` (nothing there needs a GPU); device memory and
launches are ``ptx_runtime.DeviceStep``, created on the first call so that compiling and
printing work on machines without a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphc.codegen.ptx import PTXProgram
from graphc.ir import Graph
from graphc.tensor import Tensor
from graphc.trace import Signature

from .executable import Mismatch, Runtime
from .ptx_runtime import DeviceStep


class PTXExecutable(Runtime):
    """A step compiled to PTX; runs through the CUDA driver when one is present.

    Lowering happens here, at compile time, so compile errors surface at ``gc.compile``;
    the driver is touched only by ``call`` (``ptx_runtime.DeviceStep``).
    """

    def __init__(self, graph: Graph, sig: Signature, arch: str | None = None) -> None:
        super().__init__(graph, sig)
        self.program = PTXProgram(graph, arch, name=graph.name or "graphc")
        self._device: Any = None

    def stages(self) -> dict[str, Any]:
        p = self.program
        return {"ptx": p.ptx, "asm": p.ptx, "llvm": lambda: str(p.llvm_module),
                "llvm_unoptimized": p.llvm_unoptimized, "kernels": p.describe}

    def call(self, args: tuple) -> Any:
        from graphc.tensor_ops import as_tensor
        from graphc.trace import unflatten

        arrays = [np.asarray(a.numpy() if isinstance(a, Tensor) else a) for a in args]
        if not self.matches(arrays):
            raise Mismatch
        env = self.check_args(arrays)  # raises before anything is touched
        if self._device is None:
            self._device = DeviceStep(self)  # raises the no-GPU RuntimeError
        outs = self._device.run(arrays, env)
        return unflatten(self.sig.output_tree, [as_tensor(o) for o in outs])


__all__ = ["PTXExecutable"]
