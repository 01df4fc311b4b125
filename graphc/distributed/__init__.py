"""Data-parallel training across processes and machines, on MPI.

```python
import graphc as gc
import graphc.distributed as dist

dist.init()                                   # under mpirun/mpiexec; one process otherwise
model = dist.DistributedDataParallel(Net())   # broadcasts rank 0's weights
opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sampler = dist.DistributedSampler(X, shuffle=True, seed=0)

@gc.compile
def step(x, y):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()                           # gradients averaged over all processes here
    opt.step()
    return loss
```

The arithmetic is PyTorch DDP's: each process computes the gradient of the mean loss of its
own shard; the gradients are averaged (scaled by ``1/world_size``, then summed); every
process applies the same update to the same parameters, so they stay identical.

Design: the step is split into two native functions around the reduction
------------------------------------------------------------------------

The reduction is part of the compiled step, not a wrapper around it: the trace of
``backward()`` routes each gradient through a bucket slot (``ddp.py``), and the backend
compiles the graph as two native functions (``executable.py``): *pre* (forward and backward,
writing the scaled local gradients into flat bucket buffers) and *post* (the optimizer update
and everything else that reads the averaged gradients). Between them, mpi4py sums each bucket
in place over all processes (``MPI_Iallreduce`` per bucket on the numpy buffers, no copies,
then one ``Waitall``). We chose this over an ``allreduce`` IR op whose native lowering calls
``MPI_Allreduce`` through a function pointer because:

- an IR op must exist in every rule table (shape rule, interpreter, VJP, CPU and PTX lowering,
  AOT) and have a meaning on each; a split needs none of them, and the interpreter backend
  (the oracle) runs the same two halves as the JIT, which is what the tests compare;
- calling MPI from generated code needs the MPI ABI (handle types and constants such as
  ``MPI_IN_PLACE`` differ between Open MPI and MPICH) baked into the lowering; mpi4py
  already abstracts it;
- a blocking call inside the native function could not overlap anything either, and the
  watchdog that turns a dead peer into an error (``comm.py``) is simpler around a Python-level
  wait than around a call buried in generated code.

What this gives up: overlap of communication with the backward pass. All gradients exist
only when *pre* returns, so the buckets are reduced after the whole backward pass (they are
all started at once, so MPI pipelines them). On the two-core machines this project measures
on, two processes already keep both cores busy, so overlap would have nothing to overlap with;
on machines with idle cores and slow networks it would matter (a later step: several *pre*
functions, one per bucket, issuing ``Iallreduce`` as each finishes).

Buckets: parameters in reverse registration order, up to ``bucket_cap_mb`` (25 MB, DDP's
default) each, one dtype per bucket; one collective call per bucket.

Launching: ``mpirun -np 2 python train.py`` on one machine; ``mpirun -np 8 --hostfile hosts
python train.py`` across machines (the same Python environment and script on each). Without a
launcher everything runs as one process (``world_size() == 1``) and mpi4py is not imported.
"""

from __future__ import annotations

from .comm import (
    CommStats,
    barrier,
    comm_stats,
    finalize,
    init,
    is_initialized,
    launched,
    rank,
    world_size,
)
from .ddp import DistributedDataParallel, broadcast_parameters
from .sampler import DistributedSampler, shard

DDP = DistributedDataParallel

__all__ = [
    "CommStats", "DDP", "DistributedDataParallel", "DistributedSampler", "barrier",
    "broadcast_parameters", "comm_stats", "finalize", "init", "is_initialized", "launched",
    "rank", "shard", "world_size",
]
