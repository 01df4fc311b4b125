"""Running a ``PTXProgram`` on the GPU: device buffers, launches, and coherence with Python.

Memory: per step the arguments are copied in; parameters, gradients and optimizer state live
in device buffers that persist across steps (one per state object, keyed by the object, so
two variants of a step share nothing but also never disagree: each re-reads the host);
intermediate values live in one scratch arena sized from the batch symbols; hyperparameters
and the 4-word error record go in one small block, uploaded with a single copy.

Coherence (the Python objects must show exactly what the CPU backend shows):

- after every step, each updated state buffer is copied back into the numpy array behind the
  parameter, ``.grad`` or ``opt.state`` entry (the same array the CPU backend writes), so
  reading them needs nothing special. Cost: one device-to-host copy of every updated state
  per step (for SGD with momentum, 3x the parameter bytes), on top of the kernels;
- before a step, state is uploaded when the host array is not the one last synchronised
  (a new ``.grad`` array, a replaced tensor) and, in the default ``GRAPHC_CUDA_STATE=sync``
  mode, always, because in-place host edits between steps (``load_state_dict``, eager
  updates) cannot be seen otherwise: another copy of the state bytes per step.
  ``GRAPHC_CUDA_STATE=resident`` skips that upload: faster, for loops that touch the model
  only through the compiled step.

An index error found on the device sets the error record; the commit kernels and the kernels
that write state in place (``Plan.direct``) then write nothing, no copy-back happens, and the
step raises IndexError with parameters unchanged.

Part of ``graphc.runtime``: ``graphc.codegen.ptx`` builds the program without a GPU; only
running it needs the driver.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any

import numpy as np

from graphc.codegen.abi import ERR_WORDS
from graphc.codegen.ptx import ScanLaunch
from graphc.codegen.ptx_kernels import BLOCK
from graphc.ir import Node
from graphc.ir import loops as L
from graphc.ir import shapes as sh

from . import cuda_runtime as cuda

_SCALAR_KINDS = ("hyper", "oflag", "seed")


class _Params:
    """Kernel arguments as a ``void*[]`` over one u64 slot per argument (built once)."""

    def __init__(self, n: int) -> None:
        self.vals = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self.vals)
        self.ptrs = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])


def _state_key(kind: str, ref: Any) -> tuple:
    if kind in ("tensor", "grad"):
        return (kind, id(ref))
    opt, p, key = ref
    return (kind, id(opt), id(p), key)


class DeviceStep:
    """The device side of one ``PTXExecutable`` (see the module docstring)."""

    def __init__(self, exe: Any) -> None:
        self.drv = cuda.driver()  # raises NoCUDAError when there is no GPU
        self.exe = exe
        self.prog = exe.program
        self.mode = os.environ.get("GRAPHC_CUDA_STATE", "sync")
        self.module = self.drv.load_module(self.prog.ptx)
        self.fns = {name: self.drv.function(self.module, name)
                    for name in self.prog.kernel_names}
        g = self.prog.graph
        self.inputs = list(g.inputs)
        self.scalar_slot: dict[int, int] = {}
        for n in self.inputs:
            if exe.sig.sources[n.attrs["name"]].kind in _SCALAR_KINDS:
                self.scalar_slot[n.id] = ERR_WORDS + len(self.scalar_slot)
        self.small = np.zeros(ERR_WORDS + len(self.scalar_slot), np.uint64)
        self.small_dev = self.drv.alloc(self.small.nbytes)
        self.buffers: dict[Any, tuple[int, int]] = {}  # key -> (device ptr, capacity)
        self.synced: dict[Any, Any] = {}  # state key -> host array last synchronised
        self.keep: dict[Any, Any] = {}  # state key -> the object it names (ids stay valid)
        self.params: dict[int, _Params] = {}  # id(launch) -> its argument block
        self.copy_params = _Params(4)
        self.commit_params = [_Params(4) for _ in self.prog.commits]
        self._finalizer = weakref.finalize(self, _free_all, self.drv, self.buffers,
                                           self.small_dev)

    # -- buffers --------------------------------------------------------------------------
    def ensure(self, key: Any, nbytes: int) -> int:
        ptr, cap = self.buffers.get(key, (0, -1))
        if cap < nbytes:
            if ptr:
                self.drv.free(ptr)
            cap = max(int(nbytes), 64)
            cap = cap + cap // 2 if key == "arena" else cap
            ptr = self.drv.alloc(cap)
            self.buffers[key] = (ptr, cap)
        return ptr

    def _source_key(self, node: Node) -> Any:
        src = self.exe.sig.sources[node.attrs["name"]]
        if src.kind == "arg":
            return ("arg", node.attrs["name"])
        return _state_key(src.kind, src.ref)

    def _sink_key(self, slot: str) -> Any:
        sink = self.exe.sig.sinks[slot]
        key = _state_key(sink.kind, sink.ref)
        self.keep[key] = sink.ref
        return key

    # -- one step -------------------------------------------------------------------------
    def run(self, arrays: list[np.ndarray], env: dict) -> list[np.ndarray]:
        drv, prog, exe = self.drv, self.prog, self.exe
        drv.make_current()
        g = prog.graph
        syms = [int(env[s]) for s in prog.symbols]
        ptr: dict[int, int] = {}
        host_inputs: dict[int, np.ndarray] = {}
        for node in self.inputs:
            name = node.attrs["name"]
            src = exe.sig.sources[name]
            value = exe.source_value(node, arrays)
            host_inputs[node.id] = value
            if node.id in self.scalar_slot:
                word = np.zeros(1, np.uint64)
                word.view(node.dtype.np)[0] = np.asarray(value).reshape(())
                self.small[self.scalar_slot[node.id]] = word[0]
                ptr[node.id] = self.small_dev + 8 * self.scalar_slot[node.id]
                continue
            key = self._source_key(node)
            arr = np.ascontiguousarray(value, node.dtype.np)
            ptr[node.id] = self.ensure(key, arr.nbytes)
            if src.kind == "arg" or self.mode != "resident" or self.synced.get(key) is not value:
                drv.htod(ptr[node.id], arr)
                if src.kind != "arg":
                    self.keep[key] = src.ref
                    self.synced[key] = value
        self.small[:ERR_WORDS] = 0
        drv.htod(self.small_dev, self.small)
        arena = self.ensure("arena", int(sh.evaluate(prog.plan.work_offset, env)))
        for n in prog.plan.materialized:
            if n.id in prog.plan.virtual:
                continue  # a scan: its loop writes its scan_out nodes' buffers
            j = prog.plan.direct.get(n.id)
            if j is None:
                ptr[n.id] = arena + int(sh.evaluate(prog.plan.offsets[n.id], env))
            else:  # computed straight into its state buffer (no commit copy needed)
                ptr[n.id] = self.ensure(self._sink_key(g.updates[j][0]),
                                        int(sh.evaluate(sh.numel(n.shape), env))
                                        * n.dtype.itemsize)
        err = self.small_dev
        self._launch_all(prog.launches, ptr, env, syms, err)
        # commits: copies reading an input buffer first (a later commit may overwrite it)
        targets: list[tuple[int, str, Node, int]] = []
        order = sorted(zip(prog.commits, self.commit_params),
                       key=lambda c: c[0].node.op != "input")
        for c, par in order:
            slot, node = g.updates[c.slot]
            key = self._sink_key(slot)
            n = int(sh.evaluate(c.numel, env))
            dst = self.ensure(key, n * node.dtype.itemsize)
            targets.append((c.slot, slot, node, dst))
            if dst == ptr[node.id] or n == 0:
                continue
            par.vals[0], par.vals[1], par.vals[2], par.vals[3] = dst, ptr[node.id], n, err
            drv.launch(self.fns[c.kernel], min(4096, max(1, (n + BLOCK - 1) // BLOCK)),
                       BLOCK, par.ptrs, c.kernel)
        errs = np.zeros(ERR_WORDS, np.int64)
        drv.dtoh(errs, err)  # waits for every kernel
        if errs[0]:
            self._raise_index_error(errs, arrays, env)
        outs = []
        for o in g.outputs:
            shape = sh.evaluate_shape(o.shape, env)
            if o.op == "input":  # its buffer may be a state the commits just overwrote
                outs.append(np.array(host_inputs[o.id], o.dtype.np).reshape(shape))
                continue
            buf = np.empty(shape, o.dtype.np)
            drv.dtoh(buf, ptr[o.id])
            outs.append(buf)
        for _, slot, node, dst in sorted(targets, key=lambda t: t[0]):
            shape = sh.evaluate_shape(node.shape, env)
            host = exe.sink_buffer(slot, shape, node.dtype.np)
            drv.dtoh(host, dst)
            exe.publish(slot, host)
            self.synced[self._sink_key(slot)] = host
        exe.finish()
        return outs

    def _launch_all(self, launches: list[Any], ptr: dict[int, int], env: dict,
                    syms: list[int], err: int) -> None:
        for la in launches:
            if isinstance(la, ScanLaunch):
                self._run_scan(la, ptr, env, syms, err)
                continue
            grid = la.grid(env)
            if grid == 0:
                continue
            par = self.params.get(id(la))
            if par is None:
                par = self.params[id(la)] = _Params(len(la.args) + len(syms) + 1)
            vals = par.vals
            for i, a in enumerate(la.args):
                vals[i] = ptr[a.id]
            for j, s in enumerate(syms):
                vals[len(la.args) + j] = s & 0xFFFFFFFFFFFFFFFF
            vals[len(la.args) + len(syms)] = err
            self.drv.launch(self.fns[la.kernel], grid, BLOCK, par.ptrs, la.kernel)

    def _copy(self, kernel: str, dst: int, src: int, n: int, err: int) -> None:
        """``dst[:n] = src[:n]`` on the device (skipped there once ``err`` is set)."""
        if n <= 0 or dst == src:
            return
        par = self.copy_params
        par.vals[0], par.vals[1], par.vals[2], par.vals[3] = dst, src, n, err
        self.drv.launch(self.fns[kernel], min(4096, max(1, (n + BLOCK - 1) // BLOCK)), BLOCK,
                        par.ptrs, kernel)

    def _run_scan(self, sl: Any, ptr: dict[int, int], env: dict, syms: list[int],
                  err: int) -> None:
        """One scan: its body's launches once per step from the host, as ``codegen.loop``
        does on the CPU (carries in two alternating copies unless the body overwrites them
        in place, sequence and result pointers moved by the step, the final carries copied
        out after the last step)."""
        n, bp, lay = sl.node, sl.plan, sl.layout
        body, k, m = n.attrs["body"], n.attrs["carries"], n.attrs["xs"]
        carries0, xs, consts = L.operand_groups(n)
        steps = int(sh.evaluate(L.trip_count(n), env))
        ptr = dict(ptr)
        for x, base in sl.aliases.items():
            ptr.setdefault(x, ptr[base])

        def ev(x: Any) -> int:
            return int(sh.evaluate(x, env))

        def numel(shape: Any) -> int:
            return ev(sh.numel(tuple(shape)))

        base = self.ensure(("scan", id(sl)), ev(lay["size"]))
        a = [base + ev(o) for o in lay["a"]]
        bb = [base + ev(o) for o in lay["b"]]
        spare = [base + ev(o) for o in lay["spare"]]
        outs = {o.attrs["index"]: o for o in sl.results}
        copy_of = sl.copy
        for i, (src, ph) in enumerate(zip(carries0, body.inputs)):
            if sl.read[i]:
                self._copy(copy_of[ph.dtype.name], a[i], ptr[src.id], numel(ph.shape), err)
        inplace = sl.inplace
        fixed = {q.id: base + ev(bp.offsets[q.id]) for q in bp.materialized
                 if q.id not in bp.virtual and q.id not in bp.direct and q.op != "scan"}
        x_step = [numel(x.shape[1:]) * x.dtype.itemsize for x in xs]
        y_n = [numel(o.shape) for o in body.outputs[k:]]
        c_n = [numel(p.shape) for p in body.inputs[:k]]
        reverse = bool(n.attrs.get("reverse"))
        for t in range(steps):
            pos = steps - 1 - t if reverse else t
            odd = t & 1
            cur = [a[i] if i in inplace or not odd else bb[i] for i in range(k)]
            nxt = [a[i] if i in inplace or odd else bb[i] for i in range(k)]
            env_ptr = dict(fixed)
            for i, q in enumerate(body.inputs):
                if i < k:
                    env_ptr[q.id] = cur[i]
                elif i < k + m:
                    env_ptr[q.id] = ptr[xs[i - k].id] + pos * x_step[i - k]
                else:
                    env_ptr[q.id] = ptr[consts[i - k - m].id]
            for i in inplace:
                env_ptr[body.outputs[i].id] = nxt[i]
            self._launch_all(sl.steps, env_ptr, env, syms, err)
            for i, o in enumerate(body.outputs):
                if i in inplace:
                    continue
                kern = copy_of[o.dtype.name]
                if i < k:
                    self._copy(kern, nxt[i], env_ptr[o.id], c_n[i], err)
                else:
                    res = outs.get(i)
                    dst = (ptr[res.id] + pos * y_n[i - k] * o.dtype.itemsize
                           if res is not None else spare[i - k])
                    self._copy(kern, dst, env_ptr[o.id], y_n[i - k], err)
        for i in range(k):
            res = outs.get(i)
            if res is not None:
                last = a[i] if i in inplace or not (steps & 1) else bb[i]
                self._copy(copy_of[body.inputs[i].dtype.name], ptr[res.id], last, c_n[i], err)

    def _raise_index_error(self, errs: np.ndarray, arrays: list[np.ndarray], env: dict) -> None:
        _, node_idx, pos, value = (int(v) for v in errs)
        prog = self.prog
        node = next((n for n in prog.plan.order if prog.node_index.get(n.id) == node_idx),
                    None)
        what, size = "an index", "?"
        if node is not None:
            src = node.inputs[1]
            while src.op in ("reshape", "expand", "permute", "detach", "cast") and src.inputs:
                src = src.inputs[0]
            if src.op == "input":
                what = f"argument {src.attrs['name']!r}"
            ax = node.attrs.get("axis", 0)
            size = node.inputs[0].shape[ax] if node.op == "gather" else node.shape[ax]
            size = sh.evaluate(size, env)
        raise IndexError(f"{what}: value {value} at flat position {pos} is out of range "
                         f"[0, {size}) (no parameter was modified)")


def _free_all(drv: cuda.Driver, buffers: dict, small: int) -> None:
    for p, _ in buffers.values():
        drv.free(p)
    drv.free(small)
