"""``DistributedSampler``: each process's share of a dataset, as PyTorch's.

Every process builds the same permutation (a generator seeded with ``seed + epoch``, so
``set_epoch`` reshuffles identically everywhere), pads it by repeating its head until it
divides evenly (or drops the tail with ``drop_last``), and takes every ``num_replicas``-th
index starting at its rank. Equal shard sizes keep the processes in lock-step: each runs
the same number of steps, so every collective has all its participants.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import comm


class DistributedSampler:
    """Indices of ``dataset`` (anything with ``len``) for one process, epoch by epoch."""

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            if not comm.is_initialized():
                comm.init()
        self.num_replicas = comm.world_size() if num_replicas is None else int(num_replicas)
        self.rank = comm.rank() if rank is None else int(rank)
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"Invalid rank {self.rank}, rank should be in the interval "
                             f"[0, {self.num_replicas - 1}]")
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % self.num_replicas:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Use the permutation of ``epoch`` (call it before each epoch, on every process)."""
        self.epoch = int(epoch)

    def indices(self) -> np.ndarray:
        """This process's indices for the current epoch (an int64 array)."""
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            order = np.arange(n)
        if self.drop_last:
            order = order[:self.total_size]
        elif self.total_size > n:
            reps = math.ceil((self.total_size - n) / n)
            order = np.concatenate([order] + [order] * reps)[:self.total_size]
        return order[self.rank:self.total_size:self.num_replicas].astype(np.int64)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples


def shard(arrays: tuple[np.ndarray, ...] | list[np.ndarray], sampler: DistributedSampler,
          batch_size: int) -> Iterator[tuple[np.ndarray, ...]]:
    """Mini-batches of this process's shard of ``arrays`` (same first dimension), in the
    sampler's order; the last batch may be short."""
    idx = sampler.indices()
    for start in range(0, len(idx), batch_size):
        sel = idx[start:start + batch_size]
        yield tuple(np.ascontiguousarray(a[sel]) for a in arrays)
