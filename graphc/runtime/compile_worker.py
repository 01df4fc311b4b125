"""Both cores for compiling, and LLVM's memory kept out of the user's process: LLVM modules
are optimised and emitted in compile worker processes.

Why processes: llvmlite serialises every call into LLVM behind one process-wide lock, so
threads cannot compile two modules at once; and each run of LLVM's pass pipeline keeps some
memory for good (measured here: ~30 KiB to build a pipeline, ~60-200 KiB per run, however the
modules and contexts are freed), so a long-lived process that compiles many steps would grow
without bound. Workers compile in parallel, report their peak memory with each object, and
are retired past ``GRAPHC_COMPILE_WORKER_MAX_MB`` (default 1024): the next compile starts a
fresh one.

A worker is a plain child process (``python -c``, stdin/stdout pipes) that loads
``codegen/llvm_objects.py`` by file path, so it imports llvmlite and nothing of graphc, numpy
or sympy (~0.25 s to start). Workers are started early (``prestart``: when a step misses
the compile cache, before it is lowered), so their start-up overlaps the lowering. Each
request carries LLVM assembly and the target; the reply is the object code, which this
process links (``graphc.runtime.cpu``).

Compiling here instead: ``GRAPHC_COMPILE_WORKERS=0``; a one-core process; ``mpi4py`` loaded
(MPI implementations do not like children they did not start); a worker that failed to start
or died (the rest of its work is done here); and work queued for workers that are not up yet
when the step is lowered (``Batch.finish``: waiting for them would cost more than compiling).
The functions are the same either way, so the object code is too; an error a worker
reports (LLVM rejecting a module) is reproduced here, so it surfaces as the same exception.
"""

from __future__ import annotations

import atexit
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import llvmlite

from graphc.codegen import llvm_objects
from graphc.codegen.llvm_objects import compile_timed

from . import compile_log

# the worker lowers its own priority first: its start-up (~0.25 s of CPU) then does not
# slow down the lowering it overlaps (on two cores, two workers starting at normal priority
# tripled the seed step's planning time), and while it compiles, this process only waits
_BOOT = ("import os\n"
         "try:\n"
         "    os.nice(10)\n"
         "except (AttributeError, OSError):\n"
         "    pass\n"
         "import importlib.util, sys\n"
         "sys.path.insert(0, sys.argv[2])\n"
         "spec = importlib.util.spec_from_file_location('graphc_llvm_objects', sys.argv[1])\n"
         "mod = importlib.util.module_from_spec(spec)\n"
         "spec.loader.exec_module(mod)\n"
         "mod.serve()\n")

_N_WORKERS = 2

# the directory llvmlite is imported from, handed to the worker, which starts Python with
# ``-S``: without ``site`` (its .pth files: an editable install's finder, certifi, ...) a
# process is up in ~5 ms instead of ~30, and the worker needs nothing but llvmlite
_LLVMLITE_ROOT = str(Path(llvmlite.__file__).resolve().parent.parent)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def enabled() -> bool:
    """Whether workers may be used (see the module docstring)."""
    if os.environ.get("GRAPHC_COMPILE_WORKERS", "").strip() == "0":
        return False
    return _cores() >= 2 and "mpi4py" not in sys.modules


def _max_rss_kib() -> int:
    try:
        mb = float(os.environ.get("GRAPHC_COMPILE_WORKER_MAX_MB", "") or 1024)
    except ValueError:
        mb = 1024.0
    return int(mb * 1024)


class Worker:
    """One compile worker process; ``compile`` is serialised by a lock."""

    def __init__(self) -> None:
        self.pid_of_parent = os.getpid()
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, "-S", "-c", _BOOT, str(Path(llvm_objects.__file__).resolve()),
             _LLVMLITE_ROOT],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True)
        self.ready = False
        self.dead = False
        self.retire = False  # grew past the memory bound: closed once its batch is done
        self.peak_kib = 0

    def ensure_ready(self) -> None:
        """Wait until the worker has started (OSError if it never does)."""
        with self.lock:
            self._wait_ready()

    def _wait_ready(self) -> None:
        if not self.ready:
            try:
                msg = llvm_objects._read(self.proc.stdout)
            except Exception:  # noqa: BLE001 - anything but the greeting: not a worker
                msg = None
            if msg is None or msg[0] != "ready":
                self._discard()
                raise OSError("compile worker did not start")
            self.ready = True

    def compile(self, text: str, cpu: str | None, features: str | None, level: str
                ) -> tuple[str, Any, Any]:
        """("ok", object code, seconds) or ("error", message, None) from the worker;
        OSError when the worker is gone (it is then marked dead and never used again)."""
        with self.lock:
            try:
                self._wait_ready()
                llvm_objects._write(self.proc.stdin, (text, cpu, features, level))
                reply = llvm_objects._read(self.proc.stdout)
            except Exception as e:  # noqa: BLE001 - a broken pipe, a garbled reply: done with it
                self._discard()
                raise OSError(f"compile worker failed: {e}") from e
            if reply is None:
                self._discard()
                raise OSError("compile worker exited")
            status, payload, seconds, peak = reply
            self.peak_kib = peak
            if peak > _max_rss_kib():
                self.retire = True
            return status, payload, seconds

    def close(self, graceful: bool = True) -> None:
        """Stop the worker and close both ends of its pipes: a pipe left open is reported
        as an unclosed file when the process exits (``ResourceWarning``, shown under
        ``python -X dev`` and ``-W default``). ``graceful``: asked to finish (its input
        closed), killed if it does not within 5 s; else (``_discard``) killed at once."""
        self.dead = True
        stopped = False
        if graceful:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
                stopped = True
            except Exception:  # noqa: BLE001 - a worker that does not stop is killed
                pass
        if not stopped:
            self.proc.kill()  # a no-op on a process that has exited
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:  # data it could not flush to a stopped worker: dropped
                pass

    def _discard(self) -> None:
        """A worker that failed (no greeting, a broken pipe, a garbled or missing reply):
        never used again, stopped now rather than at this process's exit (its state is
        unknown, so it is not asked to finish)."""
        self.close(graceful=False)


_lock = threading.Lock()
_workers: list[Worker] = []
_failed = False
retired = 0  # workers closed for their memory (tests and the compile log read it)


def _pool(start: bool = True) -> list[Worker]:
    """This process's workers (started if ``start``), or [] when there are none to use."""
    global _failed, _workers
    if not enabled():
        return []
    with _lock:
        # dead ones go; inherited through fork(), their pipes belong to the parent
        _workers = [w for w in _workers if not w.dead and w.pid_of_parent == os.getpid()]
        while start and not _failed and len(_workers) < _N_WORKERS:
            try:
                _workers.append(Worker())
            except OSError:
                _failed = True
        return list(_workers)


def prestart() -> None:
    """Start the workers now (if there are to be any), so they are up when the LLVM modules
    are ready; returns at once."""
    _pool()


def cpu_seconds() -> float | None:
    """CPU seconds (user and system) this process's live compile workers have used so far,
    from ``/proc`` (None where there is no ``/proc``).

    Why: a cold compile's wall time is its CPU shared between this process and the workers
    (the compile is bound by CPU on two cores), and on a shared or noisy host the CPU is the
    steadier figure to compare two compilers by (``benchmarks.compile_time``)."""
    if not Path("/proc/self/stat").exists():
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    with _lock:
        live = [w for w in _workers if not w.dead and w.pid_of_parent == os.getpid()]
    for w in live:
        try:
            stat = Path(f"/proc/{w.proc.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _retire(ws: list[Worker]) -> None:
    global retired
    for w in ws:
        if w.retire and not w.dead:
            w.close()
            retired += 1


def _close() -> None:
    for w in _workers:
        if w.pid_of_parent == os.getpid() and not w.dead:
            w.close()


atexit.register(_close)


class Batch:
    """The LLVM modules of one step, compiled while the step is still being lowered.

    ``submit`` puts a module on one queue that every worker takes from as soon as it is
    free (the lowering streams its kernels, ``Lowering.on_kernels``); ``finish`` waits for
    all of them. One shared queue, not one per worker chosen at submit time: the cost of a
    module is not known before it is compiled (a GEMM tile's text is 10x an elementwise
    module's, its compile 2-6x), and with per-worker queues filled by text length one
    worker sat idle for 0.46 s of a 2-layer GPT step's 2.8 s cold compile while the other
    still had a queue, the entry function last in it. While no worker has started yet
    (the first steps of a process: a worker takes ~0.25 s to start), ``finish`` compiles
    queued modules here, so a small step never waits for one."""

    def __init__(self, cpu: str | None, features: str | None) -> None:
        self.cpu, self.features = cpu, features
        self.jobs: list[tuple[str, str]] = []
        self.results: list[bytes | None] = []
        self.times: list[tuple[float, float, float]] = []
        self.remote = 0  # modules the workers delivered
        self.ws = _pool()
        self.todo: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._serve, args=(w,), daemon=True,
                                         name="graphc-compile-worker") for w in self.ws]
        for th in self.threads:
            th.start()

    def submit(self, text: str, level: str) -> int:
        """Queue one module; its index in ``finish``'s list."""
        i = len(self.jobs)
        self.jobs.append((text, level))
        self.results.append(None)
        if self.ws:
            self.todo.put(i)
        return i

    def _serve(self, w: Worker) -> None:
        try:
            w.ensure_ready()
        except OSError:
            return  # what it would have taken, the others (or this process) compile
        while True:
            i = self.todo.get()
            if i is None:
                self.todo.put(None)  # the stop mark stays for the other threads
                return
            text, lv = self.jobs[i]
            try:
                status, payload, seconds = w.compile(text, self.cpu, self.features, lv)
            except OSError:
                return  # compiled here by finish (its result is still None)
            if status == "ok":
                self.results[i] = payload
                self.times.append(seconds)
                self.remote += 1

    def cancel(self) -> None:
        """Stop the batch's threads (the step failed to lower): each finishes the module
        it is compiling, if any, and returns; the results are dropped."""
        while True:
            try:
                self.todo.get_nowait()
            except queue.Empty:
                break
        self.todo.put(None)
        for th in self.threads:
            th.join()

    def _here(self, i: int) -> None:
        text, lv = self.jobs[i]
        self.results[i], seconds = compile_timed(text, self.cpu, self.features, lv)
        self.times.append(seconds)

    def finish(self) -> list[bytes]:
        """Every submitted module's object code, in order (see the class docstring)."""
        while self.ws and not any(w.ready for w in self.ws):
            try:
                i = self.todo.get_nowait()
            except queue.Empty:
                break
            self._here(i)  # (None is queued only below and by cancel)
        self.todo.put(None)
        for th in self.threads:
            th.join()
        _retire(self.ws)
        remote = self.remote
        # whatever no worker delivered (one died, or LLVM reported an error there) is
        # compiled here: the same object, or the same exception
        for i, r in enumerate(self.results):
            if r is None:
                self._here(i)
        log = compile_log.current()
        for j, name in enumerate(("llvm parse", "llvm optimise", "llvm emit")):
            log.add(name, sum(t[j] for t in self.times))
        log.count("LLVM modules", f"{remote} compiled by {len(self.ws)} worker processes, "
                  f"{len(self.jobs) - remote} in this process")
        return self.results  # type: ignore[return-value]


def compile_all(jobs: list[tuple[str, str]], cpu: str | None, features: str | None
                ) -> list[bytes]:
    """Object code of each ``(llvm assembly, level)`` job, in order, compiled by the
    workers (``Batch``). The time each phase took is added to the current compile log."""
    batch = Batch(cpu, features)
    for text, level in jobs:
        batch.submit(text, level)
    return batch.finish()


__all__ = ["enabled", "prestart", "cpu_seconds", "compile_all", "Batch", "Worker"]
