"""Datasets and mini-batch loading over numpy arrays (``torch.utils.data``'s interface).

A PyTorch loop ``for inputs, labels in train_loader:`` ports unchanged. Batches are numpy
arrays (what compiled steps take without copying): a ``TensorDataset`` batch is gathered with
one fancy-indexing operation per array, other datasets are collated item by item with
``np.stack``. Shuffling is deterministic: without a ``generator`` each epoch's permutation is
seeded from graphc's global stream, so ``gc.manual_seed`` fixes it, as in PyTorch.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from graphc import random as _random


class Dataset:
    """Base class: ``__getitem__(i)`` and ``__len__()``."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


class TensorDataset(Dataset):
    """Rows of equally long arrays (numpy arrays, graphc tensors or anything array-like)."""

    def __init__(self, *tensors: Any) -> None:
        arrays = [np.asarray(t) for t in tensors]
        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        n = len(arrays[0])
        if any(a.ndim == 0 or len(a) != n for a in arrays):
            raise ValueError("Size mismatch between tensors: every array needs the same "
                             f"first dimension (got {[a.shape for a in arrays]})")
        self.tensors = tuple(arrays)

    def __getitem__(self, index: Any) -> tuple[np.ndarray, ...]:
        return tuple(a[index] for a in self.tensors)

    def __len__(self) -> int:
        return len(self.tensors[0])


def default_collate(items: Sequence[Any]) -> Any:
    """Stack a list of samples: tuples/lists field by field, dicts key by key, arrays by
    ``np.stack``, Python scalars into a 1-d array."""
    first = items[0]
    if isinstance(first, (tuple, list)):
        return [default_collate([it[j] for it in items]) for j in range(len(first))]
    if isinstance(first, dict):
        return {k: default_collate([it[k] for it in items]) for k in first}
    return np.stack([np.asarray(it) for it in items])


def _is_torch_generator(g: Any) -> bool:
    return type(g).__module__.split(".")[0] == "torch" and type(g).__name__ == "Generator"


def _seed_source(generator: Any) -> Any:
    """What a ``DataLoader`` keeps for ``generator=``: ``None`` (the global stream), a numpy
    ``Generator`` (used directly), or an object each epoch draws a seed from (``gc.Generator``,
    ``torch.Generator``: kept, so that their ``manual_seed`` replays the epochs as in PyTorch).
    An int seed, a ``RandomState``, a ``SeedSequence`` or a ``BitGenerator`` becomes one numpy
    ``Generator`` now, so successive epochs get different orders."""
    if generator is None or isinstance(generator, np.random.Generator):
        return generator
    if callable(getattr(generator, "next_seed", None)) or _is_torch_generator(generator):
        return generator
    if isinstance(generator, np.random.RandomState):
        return np.random.default_rng(generator.randint(0, 2**31))
    if isinstance(generator, (np.random.SeedSequence, np.random.BitGenerator)):
        return np.random.default_rng(generator)
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, (bool, np.bool_)):
        return np.random.default_rng(int(generator))
    raise TypeError(
        "DataLoader: generator must be None, a gc.Generator or torch.Generator, a "
        "np.random.Generator, RandomState, SeedSequence or BitGenerator, or an int seed; got "
        f"{type(generator).__module__}.{type(generator).__qualname__}")


def _rng(generator: Any) -> np.random.Generator:
    """The shuffling generator for one epoch."""
    if generator is None:
        return np.random.default_rng(_random.next_seed())
    if isinstance(generator, np.random.Generator):
        return generator
    if _is_torch_generator(generator):
        import torch  # loaded already: the user made a torch.Generator

        # one int64 draw from the user's generator per epoch, as torch's samplers draw theirs
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
        return np.random.default_rng(seed & ((1 << 63) - 1))
    return np.random.default_rng(generator.next_seed())


class DataLoader:
    """Mini-batches of a dataset (``batch_size=None`` yields single samples, uncollated).

    ``generator``: what drives the shuffling: a ``gc.Generator`` or ``torch.Generator`` (each
    epoch draws a seed from it), a ``np.random.Generator``, or an int seed, ``RandomState``,
    ``SeedSequence`` or ``BitGenerator``; by default each epoch draws its seed from
    ``gc.manual_seed``'s stream. The last partial batch is kept unless ``drop_last``.
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool = False,
                 drop_last: bool = False, generator: Any = None,
                 collate_fn: Any = None, *, num_workers: int = 0, pin_memory: bool = False,
                 timeout: float = 0, worker_init_fn: Any = None,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 multiprocessing_context: Any = None) -> None:
        if batch_size is not None and int(batch_size) <= 0:
            raise ValueError(f"batch_size should be a positive integer, got {batch_size}")
        if int(num_workers) < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and (prefetch_factor is not None or persistent_workers):
            raise ValueError("prefetch_factor and persistent_workers need num_workers > 0 "
                             "(multiprocessing)")
        if multiprocessing_context is not None:
            raise NotImplementedError("DataLoader(multiprocessing_context=...): graphc's "
                                      "workers are threads")
        # workers are threads of this process that build the next batches (in order, one
        # at a time: the index order is sequential) while the caller's step runs, which a
        # compiled step does without the GIL; pin_memory is a no-op on the CPU
        self.num_workers = int(num_workers)
        self.prefetch_factor = 2 if prefetch_factor is None else int(prefetch_factor)
        self.pin_memory = bool(pin_memory)
        self.timeout = float(timeout)
        self.worker_init_fn = worker_init_fn
        self.persistent_workers = bool(persistent_workers)
        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = _seed_source(generator)
        self.collate_fn = collate_fn

    def __len__(self) -> int:
        n = len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return _rng(self.generator).permutation(n)

    def __iter__(self) -> Iterator[Any]:
        jobs = self._jobs()
        if self.num_workers == 0:
            for job in jobs:
                yield job()
            return
        yield from self._threaded(jobs)

    def _threaded(self, jobs: Iterator[Callable[[], Any]]) -> Iterator[Any]:
        """Worker threads build batches ahead of the consumer (at most ``num_workers *
        prefetch_factor`` in flight), each batch from its own indices, handed out in order;
        ``timeout`` bounds each wait."""
        import concurrent.futures as cf
        import threading

        local = threading.local()
        lock = threading.Lock()
        next_id = [0]

        def run(job: Callable[[], Any]) -> Any:
            if self.worker_init_fn is not None and not getattr(local, "ready", False):
                local.ready = True
                with lock:
                    wid, next_id[0] = next_id[0], next_id[0] + 1
                self.worker_init_fn(wid % self.num_workers)
            return job()

        depth = self.num_workers * self.prefetch_factor
        with cf.ThreadPoolExecutor(self.num_workers, thread_name_prefix="graphc-loader") as ex:
            pending = [ex.submit(run, job) for job in itertools.islice(jobs, depth)]
            while pending:
                item = pending.pop(0).result(timeout=self.timeout or None)
                pending.extend(ex.submit(run, job) for job in itertools.islice(jobs, 1))
                yield item

    def _jobs(self) -> Iterator[Callable[[], Any]]:
        """One callable per batch, in order (the shuffle is drawn once, here)."""
        order = self._order()
        ds = self.dataset
        if self.batch_size is None:
            for i in order:
                yield functools.partial(ds.__getitem__, int(i))
            return
        bs = self.batch_size
        stop = len(order) - (len(order) % bs if self.drop_last else 0)
        fast = isinstance(ds, TensorDataset) and self.collate_fn is None
        collate = self.collate_fn or default_collate
        for s in range(0, stop, bs):
            idx = order[s:s + bs]
            if fast:
                # contiguous slices stay views when not shuffling; fancy indexing otherwise
                sel: Any = slice(int(idx[0]), int(idx[0]) + len(idx)) if not self.shuffle \
                    else idx
                yield functools.partial(lambda sel: [a[sel] for a in ds.tensors], sel)
            else:
                yield functools.partial(lambda idx: collate([ds[int(i)] for i in idx]), idx)


__all__ = ["Dataset", "TensorDataset", "DataLoader", "default_collate"]
