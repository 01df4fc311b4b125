"""``DistributedDataParallel``: PyTorch DDP's arithmetic inside a compiled step.

Wrapping a model marks its parameters for reduction. When a compiled step that called the
wrapper runs ``backward()``, the trace hook below rewrites each parameter's gradient state:

- the local gradient ``g`` (already accumulated into an incoming ``.grad``, as PyTorch's
  ``AccumulateGrad`` does before DDP's hook fires) is scaled by ``1/world_size`` and written
  into a slice of a flat *bucket* buffer (an update of a view tensor of the bucket);
- the gradient that ``step()`` (and ``clip_grad_norm_``, and ``.grad`` after the call) sees is
  that same slice read back *after* the reduction (an input of the same view tensor).

So in the traced graph the bucket appears as ``input ddp.b0.W`` (the reduced gradient) and
``update ddp.b0.W <- g * (1/N)`` (the local contribution). One native function cannot run both
halves, because the reduction happens between them; the backend
(``graphc.distributed.executable``) splits the graph there. Buckets hold parameters in
reverse registration order (the order backward produces their gradients) up to
``bucket_cap_mb`` megabytes, one dtype per bucket, as DDP does.

Eagerly (no ``gc.compile``) the wrapper only forwards; ``reduce_gradients()`` averages
``.grad`` between ``backward()`` and ``step()``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _context
from ..nn.module import Module
from ..tensor import Tensor
from . import comm

_ABSENT = "absent"  # trace.py's marker for a gradient that does not exist


@dataclass
class Bucket:
    """One flat buffer reduced by one collective call; ``slots`` are the update slots of the
    per-parameter views (graph input/update names) that live inside it."""

    array: np.ndarray
    slots: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)


class DistributedDataParallel(Module):
    """Wrap ``module`` so that compiled steps average its gradients over all processes.

    Like PyTorch's DDP, the wrapper broadcasts rank 0's parameters and buffers when it is
    created (``broadcast=False`` skips that), registers the module as ``self.module`` (so
    state_dict keys gain a ``module.`` prefix), and reduces in buckets of ``bucket_cap_mb``.
    """

    def __init__(self, module: Module, bucket_cap_mb: float = 25.0,
                 broadcast: bool = True) -> None:
        super().__init__()
        if not comm.is_initialized():
            comm.init()
        self.module = module
        object.__setattr__(self, "bucket_cap_bytes", max(1, int(bucket_cap_mb * 2**20)))
        object.__setattr__(self, "_warned_eager", False)
        if broadcast:
            broadcast_parameters(module)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        ctx = _context.current()
        if ctx is not None:
            if all(getattr(h, "__self__", None) is not self for h in ctx.backward_hooks):
                ctx.backward_hooks.append(self._trace_hook)
        elif comm.world_size() > 1 and not self._warned_eager:
            object.__setattr__(self, "_warned_eager", True)
            warnings.warn("DistributedDataParallel in eager mode: gradients are averaged "
                          "only when you call reduce_gradients() (compiled steps do it "
                          "themselves)", stacklevel=2)
        return self.module(*args, **kwargs)

    # -- eager ----------------------------------------------------------------------------
    def reduce_gradients(self) -> None:
        """Average every parameter's ``.grad`` over all processes, in place (eager mode)."""
        params = [p for p in self.module.parameters() if p.grad is not None]
        W = comm.world_size()
        for dtype in sorted({p.dtype.np.str for p in params}):
            group = [p for p in reversed(params) if p.dtype.np.str == dtype]
            flat = np.concatenate([p.grad.numpy().ravel() for p in group]) / W
            flat = flat.astype(dtype)
            comm.allreduce_sum_([flat])
            off = 0
            for p in group:
                n = p.grad.numpy().size
                p.grad = Tensor._from_array(flat[off:off + n].reshape(p.shape).copy())
                off += n

    # -- traced ---------------------------------------------------------------------------
    def _trace_hook(self, ctx: Any) -> None:
        """Route this module's gradients through reduction buckets (see the module doc)."""
        done = ctx.__dict__.setdefault("_graphc_ddp_done", set())
        if id(self) in done:
            raise RuntimeError(
                "DistributedDataParallel: a compiled step may call backward() only once "
                "(its gradients are reduced between processes right after it)")
        done.add(id(self))
        b = ctx.builder
        W = comm.world_size()
        entries = []
        for p in reversed(list(self.module.parameters())):
            st = ctx.grad.get(id(p))
            if st is None or isinstance(st, str):  # never read, or absent: not reduced
                continue
            entries.append((p, st))
        buckets: list[list[tuple[Tensor, Any]]] = []
        size = 0
        for p, st in entries:
            nbytes = int(np.prod(p.shape, dtype=np.int64)) * p.dtype.itemsize
            if not buckets or buckets[-1][0][0].dtype is not p.dtype \
                    or size + nbytes > self.bucket_cap_bytes:
                buckets.append([])
                size = 0
            buckets[-1].append((p, st))
            size += nbytes
        first = len(ctx.sig.collectives)
        for j, bk in enumerate(buckets):
            dtype = bk[0][0].dtype.np
            total = sum(int(np.prod(p.shape, dtype=np.int64)) for p, _ in bk)
            bucket = Bucket(np.zeros(total, dtype))
            off = 0
            for p, st in bk:
                n = int(np.prod(p.shape, dtype=np.int64))
                view = Tensor._from_array(bucket.array[off:off + n].reshape(p.shape))
                off += n
                pname = ctx.tensor_name(p)
                ctx._names[id(view)] = f"ddp.b{first + j}.{pname}"
                reduced = ctx.read(view)
                local = st if W == 1 else b.mul(st, b.const(1.0 / W, (), st.dtype))
                ctx.assign(view, local)
                ctx.grad[id(p)] = reduced
                bucket.slots.append(reduced.attrs["name"])
                bucket.params.append(pname)
            ctx.sig.collectives.append(bucket)


def broadcast_parameters(model: Module, optimizer: Any = None, root: int = 0) -> None:
    """Give every process ``root``'s parameters and buffers (and optimizer state).

    Parameters and buffers are broadcast in place (their arrays keep their identity, so
    compiled steps keep their bindings); the optimizer's ``state_dict()`` is broadcast as an
    object and loaded, which also creates state (momentum buffers) that only root had.
    """
    if not comm.is_initialized():
        comm.init()
    tensors = list(model.named_parameters()) + [
        (n, b) for n, b in model.named_buffers() if b is not None]
    # every process must hold the same tensors, or the broadcasts below would mismatch
    # (MPI_ERR_TRUNCATE at best): compare the layouts first and name the difference
    mine = [(n, tuple(t._node._value.shape), str(t._node._value.dtype)) for n, t in tensors]
    layouts = comm.allgather_object(mine)
    for r, theirs in enumerate(layouts):
        if theirs != mine:
            diff = next(((a, b) for a, b in zip(mine, theirs) if a != b), None)
            what = (f"{diff[0][0]!r}: {diff[0][1]} {diff[0][2]} here, {diff[1][1]} "
                    f"{diff[1][2]} on rank {r}") if diff else (
                    f"{len(mine)} tensors here, {len(theirs)} on rank {r}")
            raise ValueError(f"broadcast_parameters: the processes' models differ (rank "
                             f"{comm.rank()}): {what}")
    arrays = []
    for _, t in tensors:
        a = t._node._value
        if not (a.flags.c_contiguous and a.flags.writeable):
            a = t._node._value = np.ascontiguousarray(a).copy()
        arrays.append(a)
    comm.broadcast_arrays(arrays, root)
    if optimizer is not None:
        sd = comm.broadcast_object(optimizer.state_dict() if comm.rank() == root else None, root)
        if comm.rank() != root:
            optimizer.load_state_dict(sd)
