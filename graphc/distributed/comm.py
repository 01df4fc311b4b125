"""The process group: MPI through mpi4py, or a single process when there is no launcher.

Every process of a data-parallel job runs the same script; ``init()`` joins them. Under
``mpirun``/``mpiexec`` (Open MPI, MPICH, Intel MPI and PMIx launchers all set one of the
variables in ``_LAUNCHER_VARS``) it imports mpi4py, which initialises MPI; without a launcher
it sets up a one-process group and never imports mpi4py, so single-process code (and the
test suite) needs neither MPI nor mpi4py.

Failure handling. A collective cannot complete when a peer has died, and plain MPI then
blocks forever in the survivors. Two things bound that time:

- ``mpirun`` itself: Open MPI aborts the whole job when one process exits with a non-zero
  status or is killed by a signal (measured: about two seconds after ``kill -9``);
- a watchdog thread per process: every blocking collective marks its start, and when one has
  waited longer than ``timeout`` seconds (``init(timeout=...)``, ``GRAPHC_DIST_TIMEOUT``;
  default 300) the watchdog prints which collective of which step on which rank stalled and
  aborts the job (``MPI_Abort``), which is what a hung (not dead) peer needs;
- an uncaught Python exception on any rank prints its traceback and aborts the job, instead
  of leaving that process in ``MPI_Finalize`` and its peers in the next collective.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
                  "HYDRA_CONTROL_FD")
DEFAULT_TIMEOUT = 300.0


@dataclass
class CommStats:
    """Time spent in gradient all-reduces (for benchmarks and logs)."""

    calls: int = 0
    seconds: float = 0.0
    bytes: int = 0
    per_call: list[float] = field(default_factory=list)

    def reset(self) -> None:
        self.calls, self.seconds, self.bytes = 0, 0.0, 0
        self.per_call.clear()


class _Group:
    """The state of the current process group (one per process)."""

    def __init__(self, comm: Any, mpi: Any, timeout: float | None) -> None:
        self.comm = comm  # mpi4py communicator, or None for the one-process group
        self.mpi = mpi
        self.rank = 0 if comm is None else comm.Get_rank()
        self.size = 1 if comm is None else comm.Get_size()
        self.timeout = timeout
        self.stats = CommStats()
        self.step = 0
        self._since = 0.0  # monotonic start of the collective in flight, 0 when none
        self._what = ""
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        if comm is not None and self.size > 1 and timeout:
            self._watchdog = threading.Thread(target=self._watch, name="graphc-dist-watchdog",
                                              daemon=True)
            self._watchdog.start()

    # -- watchdog -----------------------------------------------------------------------
    def _watch(self) -> None:
        assert self.timeout is not None
        poll = min(1.0, self.timeout / 4)
        while not self._stop.wait(poll):
            since = self._since
            if since and time.monotonic() - since > self.timeout:
                self.abort(f"graphc.distributed: rank {self.rank}/{self.size}: {self._what} did "
                           f"not complete within {self.timeout:g} s; a peer process has "
                           f"probably died or stalled. Aborting the job.")

    def begin(self, what: str) -> None:
        self._what = what
        self._since = time.monotonic()

    def end(self) -> None:
        self._since = 0.0

    def abort(self, message: str, code: int = 1) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        try:
            self.comm.Abort(code)
        finally:
            os._exit(code)

    def close(self) -> None:
        self._stop.set()


_group: _Group | None = None


def launched() -> bool:
    """Whether this process was started by an MPI launcher (mpirun, mpiexec, srun+PMI)."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


def init(timeout: float | None = None) -> None:
    """Join the job's processes (idempotent).

    Under an MPI launcher this imports mpi4py (``pip install mpi4py``; it needs an MPI library,
    e.g. Debian's ``openmpi-bin libopenmpi-dev``); otherwise the group is this one process.
    ``timeout``: seconds a collective may block before the job is aborted (None: the
    ``GRAPHC_DIST_TIMEOUT`` variable, else 300; 0 disables the watchdog).
    """
    global _group
    if _group is not None:
        return
    if timeout is None:
        timeout = float(os.environ.get("GRAPHC_DIST_TIMEOUT", DEFAULT_TIMEOUT))
    if not launched():
        _group = _Group(None, None, timeout)
        return
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("graphc.distributed.init(): this process was started by an MPI "
                          "launcher but mpi4py is not installed (pip install mpi4py)") from e
    _group = _Group(MPI.COMM_WORLD.Dup(), MPI, timeout)
    if _group.size > 1:
        _install_excepthook(_group)


def _install_excepthook(g: _Group) -> None:
    prev = sys.excepthook

    def hook(tp: Any, value: Any, tb: Any) -> None:
        prev(tp, value, tb)
        g.abort(f"graphc.distributed: rank {g.rank}/{g.size} raised {tp.__name__}; "
                "aborting the job so that its peers do not wait for it.")

    sys.excepthook = hook


def group() -> _Group:
    """The current process group (``init()`` first)."""
    if _group is None:
        raise RuntimeError("graphc.distributed is not initialised: call "
                           "graphc.distributed.init() first")
    return _group


def is_initialized() -> bool:
    return _group is not None


def rank() -> int:
    """This process's index in the job, 0 ... world_size() - 1."""
    return group().rank


def world_size() -> int:
    """How many processes train together."""
    return group().size


def barrier() -> None:
    """Wait until every process has reached this point (under the watchdog)."""
    g = group()
    if g.comm is None:
        return
    g.begin("barrier()")
    try:
        g.comm.Barrier()
    finally:
        g.end()


def finalize() -> None:
    """Leave the group: stop the watchdog; MPI itself is finalised when the process exits."""
    global _group
    if _group is None:
        return
    _group.close()
    if _group.comm is not None:
        _group.comm.Free()
    _group = None


def comm_stats() -> CommStats:
    """Counters of the gradient all-reduces done so far (``.reset()`` to restart them)."""
    return group().stats


def allreduce_sum_(buffers: list[np.ndarray]) -> None:
    """Sum each buffer over all processes, in place (one non-blocking call per buffer).

    All buckets are started before any is waited for, so MPI can pipeline them; the wait is
    under the watchdog.
    """
    g = group()
    g.step += 1
    if g.comm is None or g.size == 1:
        return
    MPI = g.mpi
    t0 = time.perf_counter()
    g.begin(f"the gradient all-reduce of step {g.step}")
    try:
        reqs = [g.comm.Iallreduce(MPI.IN_PLACE, b, op=MPI.SUM) for b in buffers]
        MPI.Request.Waitall(reqs)
    finally:
        g.end()
    dt = time.perf_counter() - t0
    st = g.stats
    st.calls += 1
    st.seconds += dt
    st.bytes += sum(b.nbytes for b in buffers)
    if len(st.per_call) < 100_000:
        st.per_call.append(dt)


def allreduce_with_status_(buffers: list[np.ndarray], failed: BaseException | None) -> None:
    """``allreduce_sum_`` that also agrees on whether every process got here cleanly.

    A process whose local half of the step raised (an out-of-range class index, a
    non-finite loss under ``check_finite``) still joins the reduction, with one status word
    per process summed alongside the buckets in the same wait (no extra round trip when all
    is well). If any process failed, every process raises: the failing ones their own
    exception, the others the same exception type naming the first failing rank and its
    message, so no process blocks in the next collective and none applies an update.
    """
    g = group()
    if g.comm is None or g.size == 1:
        if failed is not None:
            raise failed
        allreduce_sum_(buffers)
        return
    status = np.zeros(g.size, np.float64)
    status[g.rank] = 0.0 if failed is None else 1.0
    allreduce_sum_([status, *buffers])
    bad = [r for r in range(g.size) if status[r] != 0.0]
    if not bad:
        return
    first = bad[0]
    info = broadcast_object((type(failed).__name__, str(failed)) if g.rank == first else None,
                            root=first)
    if failed is not None:
        raise failed
    raise _remote_error(info[0], f"rank {first} of {g.size}: {info[1]} (the step was "
                                 "skipped on every process; no parameter was updated)")


def _remote_error(type_name: str, message: str) -> BaseException:
    from ..checks import NonFiniteError

    known: dict[str, type[BaseException]] = {
        "IndexError": IndexError, "ValueError": ValueError, "TypeError": TypeError,
        "NonFiniteError": NonFiniteError, "FloatingPointError": FloatingPointError,
        "KeyboardInterrupt": RuntimeError, "MemoryError": MemoryError,
    }
    return known.get(type_name, RuntimeError)(message)


def broadcast_arrays(arrays: list[np.ndarray], root: int = 0) -> None:
    """Overwrite every array with root's copy (in place; contiguous arrays only)."""
    g = group()
    if g.comm is None or g.size == 1:
        return
    g.begin("broadcast_parameters()")
    try:
        for a in arrays:
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise ValueError("broadcast: arrays must be contiguous and writeable")
            g.comm.Bcast(a, root=root)
    finally:
        g.end()


def allgather_object(obj: Any) -> list[Any]:
    """Every process's ``obj``, in rank order (pickled)."""
    g = group()
    if g.comm is None or g.size == 1:
        return [obj]
    g.begin("allgather_object()")
    try:
        return g.comm.allgather(obj)
    finally:
        g.end()


def broadcast_object(obj: Any, root: int = 0) -> Any:
    """Root's ``obj`` on every process (pickled)."""
    g = group()
    if g.comm is None or g.size == 1:
        return obj
    g.begin("broadcast_object()")
    try:
        return g.comm.bcast(obj, root=root)
    finally:
        g.end()
