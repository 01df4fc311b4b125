"""The runtime side of a compiled step: where buffers come from and where updates go.

``Runtime`` resolves a ``Signature``'s sources (arguments, live parameter arrays, ``.grad``,
optimizer state, hyperparameters) into arrays and commits update slots back into the Python
objects, creating ``.grad`` tensors and optimizer state the first time they appear, exactly
where eager PyTorch would have them. Backends differ only in how they compute.

Part of ``graphc.runtime`` (what runs a compiled step, below the front end that traces it):
the base class every backend's executable derives from, and the interpreter backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from graphc._context import Mismatch
from graphc.autograd import is_grad_enabled
from graphc.interpreter import run_graph
from graphc.ir import Graph
from graphc.ir import shapes as sh
from graphc.tensor import Tensor
from graphc.trace import Signature


def argument_array(x: Any, i: int, name: str, allow_grad: bool = False) -> np.ndarray:
    """A compiled call's ``i``-th argument (named ``name`` in errors) as a numpy array: arrays
    as they are, tensors' values, anything else through ``np.asarray``. ``allow_grad``: the
    caller handles arguments that require grad (``argument_grads``)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, Tensor):
        if not allow_grad:
            check_argument_grad(x, name)
        return x.numpy()
    try:
        a = np.asarray(x)
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"argument {name!r}: expected an array or tensor, got "
                        f"{type(x).__name__}") from e
    if a.dtype.kind in "OUSV":  # a string, None, an object: nothing a step can take as data
        raise TypeError(f"argument {name!r}: {type(x).__name__} is not supported (expected "
                        f"an array, a tensor, a number or a bool, got {x!r:.40}); a compiled "
                        "function takes its arguments as data: bind a mode string or an "
                        "option outside (functools.partial(fn, mode=...)), one compiled "
                        "function per value")
    return a


def argument_grads(args: Any) -> tuple[bool, ...]:
    """Which arguments require grad (grad mode on): the trace makes them differentiable
    inputs (``graphc.compiled_grad``); () when none does."""
    if not is_grad_enabled():
        return ()
    mask = tuple(isinstance(a, Tensor) and a._node.rg for a in args)
    return mask if any(mask) else ()


def check_argument_grad(x: Tensor, name: str) -> None:
    """Refuse an argument that requires grad where the caller cannot honour it (grad mode
    on): taken as data, its eager semantics would be silently lost."""
    if x._node.rg and is_grad_enabled():
        raise NotImplementedError(
            f"argument {name!r} requires grad: a compiled function takes its arguments as "
            f"data and computes no gradient for them ({name}.grad would stay unset, and no "
            f"result would carry {name}'s autograd graph). Pass {name}.detach(), call it "
            "under gc.no_grad(), or compute the gradient with respect to a parameter")


def check_shape_guards(sig: Signature, env: dict) -> None:
    """Raise ValueError when a shape condition recorded at trace time fails for ``env``."""
    for cond, what in sig.shape_guards:
        if not bool(cond.subs(env)):
            vals = ", ".join(f"{s}={v}" for s, v in env.items())
            shapes = ", ".join(f"{n}: {list(sh.evaluate_shape(s, env))}" for n, (_, s) in
                               zip(sig.arg_names, sig.arg_types))
            raise ValueError(f"shape guard failed: {what} (with {vals}; arguments {shapes})")


def _number_like(v: Any) -> bool:
    if isinstance(v, Tensor):
        return v.numel() == 1
    return isinstance(v, (int, float, np.integer, np.floating)) or (
        isinstance(v, np.ndarray) and v.size == 1)




def slow_check(sig: Signature) -> None:
    """The guards that only Python-side changes can break (each bumps ``state_epoch``).

    Raises ``Mismatch`` when an external tensor's ``requires_grad``, shape or dtype is not
    what the trace saw (``requires_grad_(False)`` to freeze a layer, a ``.data`` of another
    shape): the caller re-traces. Raises a clear ``ValueError`` for what no re-trace can make
    right: an incoming ``.grad`` of the wrong size, or a parameter the step writes sharing
    storage with another tensor the step reads (eager applies such updates one after the
    other, each seeing the last; a fused step cannot).
    """
    for t, rg, shape, dtype in sig.tensor_guards:
        n = t._node
        a = n._value
        if n.rg is not rg or a.shape != shape or a.dtype != dtype:
            raise Mismatch
    for check in sig.slow_guards:
        check()
    _check_shared_storage(sig)


_byte_bounds = getattr(np, "byte_bounds", None) or np.lib.array_utils.byte_bounds  # numpy 1 | 2


def _check_shared_storage(sig: Signature) -> None:
    written = {id(s.ref) for s in sig.sinks.values() if s.kind == "tensor"}
    if not written:
        return
    spans = []
    for t, *_ in sig.tensor_guards:
        a = t._node._value
        if a.nbytes:
            lo, hi = _byte_bounds(a)
            spans.append((lo, hi, t))
    spans.sort(key=lambda s: s[0])
    end, owner = -1, None
    for lo, hi, t in spans:
        if lo < end and (id(t) in written or id(owner) in written):
            raise ValueError(
                f"two tensors the compiled step reads share storage and one of them is updated "
                f"({_label(sig, owner)} and {_label(sig, t)}); eager execution would apply "
                "the updates one after the other, which a fused step cannot reproduce: give "
                "each its own storage (e.g. `p.data = p.data.clone()`)")
        if hi > end:
            end, owner = hi, t


def _label(sig: Signature, t: Any) -> str:
    for name, src in sig.sources.items():
        if src.kind == "tensor" and src.ref is t:
            return repr(name)
    return "a tensor"


class Runtime:
    def __init__(self, graph: Graph, sig: Signature) -> None:
        self.graph = graph
        self.sig = sig
        self.input_nodes = list(graph.inputs)
        self.slots = [s for s, _ in graph.updates]
        # update slot -> the C-order buffer a strided tensor's update is written to, copied
        # into the tensor's array after the step (``sink_buffer``, ``commit_views``)
        self._view_sinks: dict[str, np.ndarray] = {}

    def stages(self) -> dict[str, str]:
        return {}

    def matches(self, args: list[np.ndarray]) -> bool:
        """True when ``args`` and the structural guards fit this specialisation."""
        sig = self.sig
        if len(args) != len(sig.arg_types):
            return False
        env: dict = {}
        for a, (dtype, shape) in zip(args, sig.arg_types):
            if a.dtype != dtype.np or a.ndim != len(shape):
                return False
            for p, d in zip(shape, a.shape):
                if isinstance(p, int):
                    if p != d:
                        return False
                elif isinstance(p, sympy.Symbol):
                    if d < 1 or env.setdefault(p, d) != d:
                        return False
                elif sh.evaluate(p, env) != d:
                    return False
        if not all(read() == expected for read, expected, _ in sig.struct_guards):
            return False
        if any(args[i].item() != v for i, v in sig.arg_values.items()):
            return False
        try:
            slow_check(sig)
        except Mismatch:
            return False
        return True

    # -- binding --------------------------------------------------------------------------
    def check_args(self, args: list[np.ndarray]) -> dict:
        """Bind symbols; raise naming the argument on any mismatch (nothing is touched)."""
        env: dict = {}
        for name, a, (dtype, shape) in zip(self.sig.arg_names, args, self.sig.arg_types):
            if a.dtype != dtype.np:
                raise TypeError(f"argument {name!r}: expected dtype {dtype.name}, got {a.dtype}")
            sh.bind(shape, a.shape, env, f"argument {name!r}")
        check_shape_guards(self.sig, env)
        return env

    def source_value(self, node: Any, args: list[np.ndarray]) -> np.ndarray:
        src = self.sig.sources[node.attrs["name"]]
        k = src.kind
        if k == "arg":
            return args[src.ref]
        if k == "tensor":
            return src.ref._node._value
        if k == "grad":
            return src.ref._grad._node._value
        if k == "ostate":
            opt, p, key = src.ref
            t = opt.state[p].get(key) if p in opt.state else None
            if t is None:
                return np.full(sh.evaluate_shape(node.shape, {}), src.fill, node.dtype.np)
            return t._node._value if isinstance(t, Tensor) else np.asarray(t, node.dtype.np)
        if k == "onum":
            opt, p, key = src.ref
            st = opt.state.get(p)
            v = None if st is None else dict.get(st, key)
            return np.array(0.0 if v is None else float(v), np.float64)
        if k == "cell":
            return np.array(bool(src.ref.cell[0]))
        if k == "oflag":
            opt, p, key = src.ref
            return np.array(p in opt.state and opt.state[p].get(key) is not None)
        if k == "seed":
            from graphc import random as grandom

            return np.array(grandom.next_seed(), np.int64)
        if k == "random":  # a random fill in the step (the CPU runner draws them itself)
            shape = tuple(node.shape)
            if not sh.is_concrete(shape):  # the call's batch sizes, from its arguments
                arrays = [a.numpy() if isinstance(a, Tensor) else np.asarray(a) for a in args]
                shape = sh.evaluate_shape(shape, self.check_args(arrays))
            return src.ref(shape)  # a graphc.random.Draw
        if k == "hyper":
            group, key = src.ref
            v = dict.__getitem__(group, key) if isinstance(group, dict) else group[key]
            if not _number_like(v):
                raise TypeError(f"hyperparameter {node.attrs['name']!r}: expected a number "
                                f"(or a one-element tensor), got {type(v).__name__}")
            return np.array(float(v), np.float64)
        raise AssertionError(k)

    # -- committing -----------------------------------------------------------------------
    def sink_buffer(self, slot: str, shape: tuple, dtype: np.dtype,
                    fresh: bool = False) -> np.ndarray:
        """The array an update slot is written to (created on first use; ``fresh``: always a
        new array, because the old ``.grad`` may be held by the user and must not change)."""
        sink = self.sig.sinks[slot]
        if fresh or sink.kind == "onum":
            return np.empty(shape, dtype)
        if sink.kind == "tensor":
            v = sink.ref._node._value
            if v.flags.writeable and not v.flags.c_contiguous:
                # a strided array (a transposed or sliced view of another tensor, or one that
                # other views look into): the step writes a C-order buffer of its own, copied
                # into the array after the step (``commit_views``), so every holder of that
                # memory sees the update, as eagerly; rebinding the tensor to a copy would
                # leave its base and the other views with the old values
                buf = self._view_sinks.get(slot)
                if buf is None or buf.shape != v.shape or buf.dtype != v.dtype:
                    buf = self._view_sinks[slot] = np.empty(v.shape, v.dtype)
                return buf
            # written in place from now on: an earlier strided array's buffer must not be
            # copied over this one (the tensor was given another array between calls)
            self._view_sinks.pop(slot, None)
            if not v.flags.writeable:
                # a read-only parameter array is never written through: the parameter gets a
                # private writeable C-order copy, like load_state_dict makes
                v = sink.ref._node._value = np.array(v, order="C")
            return v
        if sink.kind == "grad":
            p = sink.ref
            g = p._grad
            a = None if g is None else g._node._value
            if a is not None and a.flags.writeable and a.flags.c_contiguous \
                    and a.shape == shape and a.dtype == dtype:
                return a
            return np.empty(shape, dtype)
        opt, p, key = sink.ref
        t = opt.state[p].get(key) if p in opt.state else None
        a = t._node._value if isinstance(t, Tensor) else None
        if a is not None and a.shape == shape and a.dtype == dtype and a.flags.writeable \
                and a.flags.c_contiguous:
            return a
        return np.empty(shape, dtype)

    def commit_views(self) -> None:
        """Copy the step's updates of strided tensors (``sink_buffer``) into their arrays:
        called once the step has committed, so a failed step changes nothing."""
        for slot, buf in self._view_sinks.items():
            np.copyto(self.sig.sinks[slot].ref._node._value, buf)

    def publish(self, slot: str, buf: np.ndarray) -> None:
        """Make a freshly created buffer visible as ``.grad`` or optimizer state."""
        sink = self.sig.sinks[slot]
        if sink.kind == "grad":
            p = sink.ref
            if p._grad is None or p._grad._node._value is not buf:
                p._grad = Tensor._from_array(buf)
        elif sink.kind == "ostate":
            opt, p, key = sink.ref
            t = opt.state[p].get(key)
            if not isinstance(t, Tensor) or t._node._value is not buf:
                opt.state[p][key] = Tensor._from_array(buf)
        elif sink.kind == "onum":  # a Python number in the state (a step count)
            opt, p, key, pytype = sink.ref
            v = buf.item()
            opt.state[p][key] = int(round(v)) if pytype is int else pytype(v)

    def finish(self) -> None:
        for p in self.sig.grads_to_clear:
            p._grad = None


class InterpreterExecutable(Runtime):
    """Runs the optimized graph with the numpy interpreter (the oracle backend)."""

    def call(self, args: tuple) -> Any:
        """Run with user arguments and return the step's result structure."""
        from graphc.tensor_ops import as_tensor
        from graphc.trace import unflatten

        arrays = [np.asarray(a.numpy() if isinstance(a, Tensor) else a) for a in args]
        return unflatten(self.sig.output_tree, [as_tensor(o) for o in self.run(arrays)])

    def run(self, args: list[np.ndarray]) -> list[np.ndarray]:
        if not self.matches(args):
            raise Mismatch
        self.check_args(args)
        feeds = {n.attrs["name"]: self.source_value(n, args) for n in self.input_nodes}
        outs, ups = run_graph(self.graph, feeds)
        if self.graph.meta.get("finite_flags"):
            from graphc.checks import NonFiniteError, first_nonfinite, nonfinite_message

            bad = first_nonfinite(self.graph, outs, ups)
            if bad is not None:
                raise NonFiniteError(nonfinite_message(bad))
        for slot, val in ups.items():
            buf = self.sink_buffer(slot, val.shape, val.dtype)
            np.copyto(buf, val)
            self.publish(slot, buf)
        self.commit_views()
        self.finish()
        return outs
