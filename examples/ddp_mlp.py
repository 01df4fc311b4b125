"""Data-parallel training of an MLP with graphc.distributed.

One machine, two processes:      mpirun -np 2 python examples/ddp_mlp.py
Several machines (hostfile):     mpirun -np 4 --hostfile hosts python examples/ddp_mlp.py
Without mpirun it runs as one process. Every process runs this same script: the model starts
from rank 0's weights, each process trains on its shard of every epoch (DistributedSampler),
and the compiled step averages the gradients over all processes between backward() and
step(), so the parameters stay identical everywhere.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import graphc as gc
import graphc.distributed as dist
from graphc import nn, optim


def say(line: str) -> None:
    """Write one whole line to stdout with a single ``write``, at once.

    Under ``mpirun`` every process's stdout ends up on one terminal. ``print`` hands the text
    and its newline over as two writes when Python's output is unbuffered (``python -u``,
    ``PYTHONUNBUFFERED``, common in MPI setups), and holds it in a buffer until exit
    otherwise, so two processes' lines run together (``checksum 453.51rank 0: ...``). One
    ``os.write`` of the line with its newline (shorter than ``PIPE_BUF``, so atomic on a pipe)
    is never split or interleaved.
    """
    data = (line.rstrip("\n") + "\n").encode()
    sys.stdout.flush()  # whatever print() left in the buffer goes first, in order
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # stdout replaced by a non-file object
        sys.stdout.write(data.decode())
        sys.stdout.flush()
        return
    while data:
        data = data[os.write(fd, data):]


def make_data(n: int = 4096, classes: int = 4, dim: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian blobs, the same on every process (fixed seed)."""
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((classes, dim)) * 0.3
    y = rng.integers(0, classes, n)
    X = centers[y] + rng.standard_normal((n, dim))
    return X.astype(np.float32), y.astype(np.int64)


def main(epochs: int = 5, batch_size: int = 64) -> None:
    dist.init()
    rank, world = dist.rank(), dist.world_size()
    X, y = make_data()
    gc.manual_seed(rank)  # different local init on purpose: DDP broadcasts rank 0's weights
    net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
    model = dist.DistributedDataParallel(net)
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    sampler = dist.DistributedSampler(X, shuffle=True, seed=0)

    @gc.compile
    def train_step(inputs: gc.Tensor, labels: gc.Tensor) -> gc.Tensor:
        opt.zero_grad()
        loss = loss_fn(model(inputs), labels)
        loss.backward()  # gradients are averaged over all processes here
        opt.step()
        return loss

    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new shuffle, the same on every process
        losses = [float(train_step(xb, yb)) for xb, yb in dist.shard((X, y), sampler,
                                                                    batch_size)]
        if rank == 0:
            say(f"epoch {epoch}: rank 0 mean loss {np.mean(losses):.4f} "
                f"({len(losses)} steps on each of {world} processes)")
    with gc.no_grad():
        acc = float((net(X).numpy().argmax(1) == y).mean())
    checksum = float(sum(np.abs(p.numpy()).sum() for p in net.parameters()))
    say(f"rank {rank}: accuracy {acc:.3f}, parameter checksum {checksum:.6f}")
    dist.finalize()


if __name__ == "__main__":
    main()
