"""Tracing a Python training step into a Graph.

While a ``TraceContext`` is current, tensor operations build symbolic IR nodes, and the calls
that touch training state are recorded instead of executed:

- tensors created outside the trace (parameters, buffers, optimizer state) become ``input``
  nodes of the graph, read from their live numpy arrays at every call;
- ``.grad`` is tracked per parameter as *absent* or *present(node)*. ``zero_grad()`` with
  ``set_to_none=True`` makes it absent without reading it; reading the incoming ``.grad`` (to
  accumulate into it, as when the step skips ``zero_grad()``) specialises the graph on whether
  it existed at call time, checked by a guard on every call;
- ``backward()`` runs the autodiff pass on the traced nodes and accumulates, like PyTorch;
- in-place writes (the optimizer's parameter update, buffer updates) become state updates;
- optimizer hyperparameters become run-time scalar inputs, and decisions that change the graph's
  structure (``momentum != 0``, ``nesterov``) become guards.

The result is a pure ``Graph`` plus a ``Signature`` that tells the runtime where each input
comes from and where each update goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from graphc.passes.autodiff import vjp

from . import (
    _context,
    _host_random,  # noqa: F401  (random and numpy.random refuse to run in traces)
)
from ._tensor import GRAD_HOOKS, LEAF_HOOKS_VERSION
from .autograd import BACKWARD_TWICE, NO_SAVED_VALUES
from .engine import run_hooks
from .ir import Builder, Graph, Node, toposort
from .ir import dtypes as dt
from .ir import shapes as sh
from .tensor import Tensor


@dataclass
class Source:
    """Where an input node's value comes from at call time."""

    kind: str  # arg | tensor | grad | ostate | oflag | onum | cell | hyper | seed | random
    ref: Any = None  # arg index, Tensor, (opt, param, key), (group, key)
    fill: float = 0.0  # ostate: value of a freshly created buffer


@dataclass
class Sink:
    """Where an update slot's value goes after the call."""

    kind: str  # tensor | grad | ostate | onum
    ref: Any = None
    fresh: bool = False  # grad: the step cleared .grad first, so the result is a new tensor


@dataclass
class Signature:
    """Everything the runtime needs besides the graph itself."""

    arg_names: list[str]
    arg_types: list[tuple[dt.DType, sh.Shape]]
    sources: dict[str, Source] = field(default_factory=dict)  # input name -> source
    sinks: dict[str, Sink] = field(default_factory=dict)  # update slot -> sink
    grads_to_clear: list[Tensor] = field(default_factory=list)  # set .grad = None after call
    struct_guards: list[tuple[Callable[[], Any], Any, str]] = field(default_factory=list)
    # guard index -> (obj, key, test): ``read()`` is ``test(obj[key])``, which call wrappers
    # may inline instead of calling ``read``
    guard_specs: dict[int, tuple[Any, Any, Callable[[Any], Any]]] = field(default_factory=dict)
    # guard index -> (get, test): ``read()`` is ``test(get())``, and ``test`` gives the same
    # for the same object, so call wrappers test only an object other than the last that
    # passed (a tensor's array, whose layout a fill depends on: ``random_ops``)
    guard_objects: dict[int, tuple[Callable[[], Any], Callable[[Any], Any]]] = field(
        default_factory=dict)
    output_tree: Any = None
    mode_reads: list[tuple[Any, bool]] = field(default_factory=list)  # (module, training)
    # shape conditions checked at every call: (sympy relational, description)
    shape_guards: list[tuple[Any, str]] = field(default_factory=list)
    example_env: dict = field(default_factory=dict)  # symbol values of the traced call
    symbols: list[sympy.Symbol] = field(default_factory=list)
    # gradient reductions recorded by ``graphc.distributed`` (the backend splits around them)
    collectives: list[Any] = field(default_factory=list)
    # checks re-run only when ``_context.state_epoch`` moved (see ``executable.slow_check``):
    # external tensors as traced (tensor, requires_grad, shape, numpy dtype)
    tensor_guards: list[tuple[Tensor, bool, tuple, Any]] = field(default_factory=list)
    # callables raising Mismatch (recompile) or a clear error; run after the tensor guards
    slow_guards: list[Callable[[], None]] = field(default_factory=list)
    # parameters whose incoming ``.grad`` the step read (to accumulate into it), with whether
    # it was present: ``step.run`` checks that one step leaves the same presence behind
    grad_reads: list[tuple[Tensor, bool]] = field(default_factory=list)
    # results that would carry an autograd graph eagerly (``graphc.compiled_grad``): their
    # flat output indices, the tensors their gradients reach, and why the function cannot be
    # differentiated by recomputation ("" when it can)
    live_outputs: list[int] = field(default_factory=list)
    grad_leaves: list[Tensor] = field(default_factory=list)
    grad_args: list[int] = field(default_factory=list)  # argument indices among the leaves
    other_reads: list[Tensor] = field(default_factory=list)  # other tensors they read
    arg_grad: tuple[bool, ...] = ()  # which arguments were traced as requiring grad
    # Python bool/int arguments the trace needed as Python values (``range(n)``, ``if
    # train:``): index -> the value this variant is specialised on (``concretize``)
    arg_values: dict[int, Any] = field(default_factory=dict)
    # whether a call checks that those arguments still require grad (not for a backward
    # ``graphc.compiled_grad`` calls with saved arrays)
    arg_grad_checked: bool = True
    impure: str = ""
    draws: bool = False  # it draws random numbers (its recomputing backward replays them)


_ABSENT = "absent"


class TraceContext:
    """Records one traced call. See the module docstring for the rules."""

    def __init__(self, name: str, names: dict[int, str]) -> None:
        self.builder = Builder(intern=True)
        self.name = name
        self._names = names  # id(tensor) -> readable name (from the function's globals)
        self._used_names: set[str] = set()
        self._tnames: dict[int, str] = {}
        self.inputs: list[Node] = []
        self.sig: Signature | None = None
        self.ext: dict[int, Node] = {}  # id(external tensor) -> current node
        self.ext_tensor: dict[int, Tensor] = {}
        self.ext_input: dict[int, Node] = {}
        self.versions: dict[int, list[Node]] = {}
        self.grad: dict[int, Any] = {}  # id(param) -> _ABSENT | Node
        # id(trace tensor) -> (that tensor, the param whose .grad it is); the tensor is kept
        # alive so that its id cannot be reused by an unrelated tensor during the trace
        self.grad_alias: dict[int, tuple[Tensor, Tensor]] = {}
        self.ostate: dict[tuple[int, int, str], Node] = {}
        self.ostate_info: dict[tuple[int, int, str], tuple[Any, Tensor, str, str]] = {}
        self.hypers: dict[tuple[int, str], Node] = {}
        self.onum: dict[tuple[int, int, str], Node] = {}
        self.onum_info: dict[tuple[int, int, str], tuple[Any, Tensor, str, str, type]] = {}
        self.state_views: dict[int, Any] = {}  # id(optimizer param state) -> traced view
        self._in_step: Any = None  # the optimizer whose step() is being traced
        self.updates: dict[str, Node] = {}
        self.guard_grad: dict[int, bool] = {}
        self.grad_cleared: set[int] = set()  # params whose .grad the step set to None
        self.data_aliases: dict[int, tuple[Tensor, Tensor]] = {}  # id(.data result) -> base
        self.freed: set[int] = set()  # ids of losses a backward() without retain_graph freed
        self._keep_alive: list[Any] = []
        self._modules_seen: set[int] = set()
        self.module_types: set[type] = set()  # classes of the modules that ran (guards)
        self.example_args: list[np.ndarray] | None = None  # the traced call's arguments
        self._concrete: dict[int, Any] = {}  # node id -> value concretize() guarded
        self._guarded: set[tuple[int, Any]] = set()  # (id(obj), key) with a structural guard
        # called as hook(ctx) after each backward() (graphc.distributed reduces gradients)
        self.backward_hooks: list[Callable[[TraceContext], None]] = []
        # node id -> weak refs to the traced tensors created as views of it (``note_view``)
        self.views_of: dict[int, list[Any]] = {}
        self.backward_roots: list[Node] = []  # the losses backward() ran from

    # -- naming ----------------------------------------------------------------------------
    def _unique(self, base: str) -> str:
        name, k = base, 1
        while name in self._used_names:
            k += 1
            name = f"{base}_{k}"
        self._used_names.add(name)
        return name

    def _input(self, base: str, kind: str, shape: Any, dtype: dt.DType, source: Source
               ) -> Node:
        name = self._unique(base)
        node = self.builder.input(name, kind, shape, dtype)
        self.inputs.append(node)
        assert self.sig is not None
        self.sig.sources[name] = source
        return node

    def note_mode(self, module: Any) -> None:
        """Record that the trace depends on ``module.training``."""
        assert self.sig is not None
        if all(m is not module for m, _ in self.sig.mode_reads):
            self.sig.mode_reads.append((module, module.__dict__["_training"]))

    def tensor_name(self, t: Tensor) -> str:
        """A stable readable name: from the function's globals, else ``t<k>`` (unique)."""
        name = self._tnames.get(id(t))
        if name is None:
            name = self._names.get(id(t)) or f"t{len(self._tnames)}"
            if name in self._tnames.values():
                name = f"{name}_{len(self._tnames)}"
            self._tnames[id(t)] = name
        return name

    # -- reading and writing external tensors ---------------------------------------------
    def read(self, t: Tensor) -> Node:
        if t._trace is self:
            return t._node
        if t._trace is not None:
            raise RuntimeError("a tensor from another traced function was used in this one")
        key = id(t)
        node = self.ext.get(key)
        if node is None:
            arr = t._node._value
            kind = "param" if t._node.rg else "buffer"
            node = self._input(self.tensor_name(t), kind, arr.shape, t._node.dtype,
                               Source("tensor", t))
            node.rg = t._node.rg
            self.ext[key] = node
            self.ext_tensor[key] = t
            self.ext_input[key] = node
            self.versions[key] = [node]
        return node

    def note_view(self, t: Tensor) -> None:
        """``t`` was created by view ops (``_tensor.VIEW_OPS``) of another tensor's node: kept
        (weakly) under the node at the bottom of its chain of views."""
        import weakref

        from ._tensor import view_root

        self.views_of.setdefault(view_root(t._node).id, []).append(weakref.ref(t))

    def _check_aliasing(self, t: Tensor) -> None:
        """An in-place op on a tensor created in the trace must not need storage sharing.

        Eager tensors share memory with their views: an in-place op on a view writes its
        base, one on a base changes its live views, one on an argument changes the caller's
        tensor. The trace is functional (the op rebinds ``t`` to a new node), so each of those
        would silently differ from eager; they raise instead, naming what to write."""
        from ._tensor import VIEW_OPS, view_root

        n = t._node
        if n.op == "input" and n.attrs.get("kind") == "arg":
            raise NotImplementedError(
                f"an in-place op on argument {n.attrs['name']!r} inside a compiled function: "
                "eagerly it changes the caller's tensor, which the compiled step does not; "
                "work on a copy (x = x.clone()) or return the new value")
        if n.op in VIEW_OPS and n.inputs:
            raise NotImplementedError(
                f"an in-place op on a view ({n.op} of another tensor) inside a compiled "
                "function: eagerly it writes the tensor it views, which the compiled step "
                "does not; write the base instead (y[0] = y[0] + v, index_put_, "
                "masked_fill_ on y) or make the view a copy first (.clone())")
        live = [r() for r in self.views_of.get(n.id, ())]
        if any(v is not None and v is not t and view_root(v._node) is n for v in live):
            raise NotImplementedError(
                "an in-place op on a tensor that has a live view (reshape, slice, transpose, "
                "...) inside a compiled function: eagerly the view sees the new values, in "
                "the compiled step it would keep the old ones; take the view after the "
                "update, or update out of place (y = y + v)")

    def assign(self, t: Tensor, node: Node) -> None:
        if t._trace is self:
            if id(t) not in self.data_aliases and id(t) not in self.grad_alias:
                self._check_aliasing(t)
            ga = self.grad_alias.get(id(t))
            if ga is not None:
                self.grad[id(ga[1])] = node
            alias = self.data_aliases.get(id(t))
            t._node = node
            if alias is not None:  # ``x.data.mul_(...)``: the update is x's
                self.assign(alias[1], node)
            return
        self.read(t)
        key = id(t)
        if t._node.rg:  # an updated parameter is a new leaf version for later forwards
            node = self.builder.op("detach", (node,), version=len(self.versions[key]))
            node.rg = True
            self.versions[key].append(node)
        self.ext[key] = node

    def note_module(self, m: Any) -> None:
        """A module ran in the trace: guard the tensors and children it holds (replacing
        ``model.fc`` or ``model.fc.weight`` with a new object re-traces)."""
        key = id(m)
        if key in self._modules_seen:
            return
        self._modules_seen.add(key)
        self.module_types.add(type(m))
        d = m.__dict__
        stores = [d["_parameters"], d["_buffers"], d["_modules"]]
        snap = [tuple(st.items()) for st in stores]  # the objects themselves: ids stay valid

        def check() -> None:
            for st, old in zip(stores, snap):
                if len(st) != len(old) or any(
                        k != k0 or v is not v0 for (k, v), (k0, v0) in zip(st.items(), old)):
                    raise _context.Mismatch
        assert self.sig is not None
        self.sig.slow_guards.append(check)

    def data_alias(self, t: Tensor) -> Tensor:
        """``t.data`` inside the trace: a detached tensor whose in-place updates update ``t``."""
        from .autograd import no_grad

        node = t._node if t._trace is self else self.read(t)
        with no_grad():
            alias = Tensor(self.builder.op("detach", (node,)), self)
        self.data_aliases[id(alias)] = (alias, t)  # the alias is kept alive: ids stay unique
        return alias

    def _value_arg(self, n: Node) -> bool:
        """Whether input ``n`` is a bool or integer argument passed as one value (a Python
        ``True`` or ``3``, a 0-d array): one a variant can be specialised on."""
        src = self.sig.sources[n.attrs["name"]] if self.sig is not None else None
        if src is None or src.kind != "arg" or self.example_args is None:
            return False
        a = self.example_args[src.ref]
        return a.shape == () and (a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer))

    def _scalar_tensor(self, n: Node) -> bool:
        """Whether input ``n`` is a one-element tensor the step reads (its value can be
        guarded like a specialised argument's)."""
        src = self.sig.sources[n.attrs["name"]] if self.sig is not None else None
        return src is not None and src.kind == "tensor" and src.ref._node._value.size == 1

    def concretize(self, t: Tensor) -> Any:
        """A Python number for a traced 0-d/1-element tensor (``float()``, ``bool()``, ``if``).

        Only values computed from optimizer hyperparameters exist while tracing; the result is
        guarded (re-evaluated from the live hyperparameters before each call, recompiling
        when it changes), so a Python branch on ``group["momentum"] != 0`` stays correct.
        Anything that depends on data, parameters or state raises: its value exists only
        when the compiled step runs.
        """
        from .interpreter import run_graph

        node = t._node if t._trace is self else self.read(t)
        if node.id in self._concrete:  # the same (interned) expression: one guard
            return self._concrete[node.id]
        if sh.numel(node.shape) != 1:
            raise RuntimeError(f"a Tensor with shape {sh.fmt_shape(node.shape)} cannot be "
                               "converted to a Python number")
        assert self.sig is not None
        sig = self.sig
        leaves = [n for n in toposort([node]) if n.op == "input"]
        bad = [n for n in leaves if sig.sources[n.attrs["name"]].kind != "hyper"]
        args = {n.id for n in bad if self._value_arg(n)}
        if args and len(bad) == len(leaves) and all(
                n.id in args or self._scalar_tensor(n) for n in bad):
            # a Python bool or int passed as an argument and used as one (``range(n)``,
            # ``if train:``): specialise the variant on its value, as torch.compile does;
            # the call wrapper compares it at every call (another value: another variant).
            # One-element tensors beside it (``n % 2`` makes the 2 one) are guarded on their
            # values likewise
            feeds = {}
            for n in bad:
                src = sig.sources[n.attrs["name"]]
                if n.id in args:
                    feeds[n.attrs["name"]] = self.example_args[src.ref]
                    sig.arg_values[src.ref] = self.example_args[src.ref].item()
                    continue
                t = src.ref
                feeds[n.attrs["name"]] = t._node._value
                self.guard(lambda t=t: t._node._value.item(), t._node._value.item(),
                           f"the value of {n.attrs['name']!r}", once=(id(t), "value"))
            value = run_graph(Graph("concretize", leaves, [node], []), feeds)[0][0]
            value = self._concrete[node.id] = value.reshape(()).item()
            return value
        if bad:
            hint = ""
            if sig.sources[bad[0].attrs["name"]].kind == "arg":
                hint = (" (a bool or int argument used as a Python value specialises the "
                        "step on it; bind any other, a float, outside: functools.partial)")
            raise RuntimeError(
                f"converting a traced tensor to a Python value (bool(), float(), int(), "
                f".item() or an `if` on it) needs {bad[0].attrs['name']!r}, whose value exists "
                "only when the compiled step runs; keep the computation in tensor ops "
                f"(gc.where, clamp, ...) instead of Python control flow{hint}")
        sub = Graph("concretize", leaves, [node], [])
        refs = [sig.sources[n.attrs["name"]].ref for n in leaves]

        def evaluate() -> Any:
            feeds = {n.attrs["name"]: np.array(float(dict.__getitem__(g, k) if
                                                     isinstance(g, dict) else g[k]), np.float64)
                     for n, (g, k) in zip(leaves, refs)}
            return run_graph(sub, feeds)[0][0].reshape(()).item()

        value = self._concrete[node.id] = evaluate()
        what = f"Python value of a hyperparameter expression ({node.op})"
        if len(refs) == 1:  # the runner's cheap form: re-evaluated only when the value changes
            g, k = refs[0]
            self.guard(evaluate, value, what, spec=(g, k, lambda _v: evaluate()))
        else:
            self.guard(evaluate, value, what)
        return value

    # -- gradients ------------------------------------------------------------------------
    def _grad_state(self, p: Tensor) -> Any:
        key = id(p)
        if key not in self.grad:
            self.read(p)
            present = p._grad is not None
            self.guard_grad[key] = present
            if present:
                self.grad[key] = self._input(f"{self.tensor_name(p)}.grad", "grad",
                                             p.shape, p.dtype, Source("grad", p))
            else:
                self.grad[key] = _ABSENT
        return self.grad[key]

    def get_grad(self, p: Tensor) -> Tensor | None:
        st = self._grad_state(p)
        if st is _ABSENT:
            return None
        t = Tensor(st, self)
        self.grad_alias[id(t)] = (t, p)
        return t

    def set_grad(self, p: Tensor, value: Tensor | None) -> None:
        self.read(p)
        if value is None:
            self.grad_cleared.add(id(p))  # a later gradient is a new tensor, as in PyTorch
        self.grad[id(p)] = _ABSENT if value is None else value.node

    def backward(self, loss: Tensor, gradient: Any, retain_graph: Any = None) -> None:
        root = loss.node
        if not root.rg:
            raise RuntimeError(
                "element 0 of tensors does not require grad and does not have a grad_fn"
            )
        graded = [n.attrs["name"] for n in toposort([root])
                  if n.op == "input" and n.rg and n.attrs.get("kind") == "arg"]
        if graded:
            raise NotImplementedError(
                f"backward() inside a compiled function reaches argument {graded[0]!r}, "
                "which requires grad: its .grad cannot be set by a compiled call. Pass "
                f"{graded[0]}.detach(), or make the value a parameter (nn.Parameter) the "
                "function reads")
        self._consume([loss], [root], retain_graph)
        b = self.builder
        seed = self._seed(root, gradient)
        keys = [k for k, t in self.ext_tensor.items() if t._node.rg]
        version = LEAF_HOOKS_VERSION[0]  # the leaves' hooks as traced: recompile on a change
        self.guard(lambda: LEAF_HOOKS_VERSION[0], version, "tensor hooks registered or removed",
                   once="leaf hooks")
        from .autograd import no_grad

        with no_grad():
            totals = self._summed_vjp([root], [seed], [self.versions[k] for k in keys])
            for k, total in zip(keys, totals):
                if total is None:
                    continue
                p = self.ext_tensor[k]
                hooks = GRAD_HOOKS.get(p)
                if hooks:  # the leaf's tensor hooks, traced into the step
                    total = run_hooks(hooks, total, self)
                st = self._grad_state(p)
                self.grad[k] = total if st is _ABSENT else b.add(st, total)
            for hook in list(self.backward_hooks):
                hook(self)

    def autograd_grad(self, outs: list[Tensor], ins: list[Tensor], gouts: list[Any],
                      retain_graph: bool, create_graph: bool, allow_unused: bool,
                      materialize: bool) -> tuple:
        """``graphc.autograd.grad`` inside the trace: the gradients as traced tensors (with
        ``create_graph``, differentiable ones), nothing written to ``.grad``."""
        from contextlib import nullcontext

        from .autograd import no_grad
        from .engine import UNUSED

        b = self.builder
        roots = [o.node for o in outs]
        for i, r in enumerate(roots):
            if not r.rg:
                raise RuntimeError(f"element {i} of tensors does not require grad and does "
                                   "not have a grad_fn")
        self._consume(outs, roots, retain_graph)
        nodes: list[list[Node]] = []
        for t in ins:
            node = t.node
            vs = [node] if t._trace is self else list(self.versions.get(id(t), [node]))
            if not any(v.rg for v in vs):
                raise RuntimeError("One of the differentiated Tensors does not require grad")
            nodes.append(vs)
        with (nullcontext() if create_graph else no_grad()):
            seeds = [self._seed(r, g) for r, g in zip(roots, gouts)]
            out: list[Tensor | None] = []
            for t, total in zip(ins, self._summed_vjp(roots, seeds, nodes)):
                if total is None:
                    if materialize:
                        out.append(Tensor(b.const(0.0, t.node.shape if t._trace is self
                                                  else tuple(t.shape), t.dtype), self))
                        continue
                    if not allow_unused:
                        raise RuntimeError(UNUSED)
                    out.append(None)
                else:
                    out.append(Tensor(total, self))
        return tuple(out)

    def _consume(self, outs: list[Tensor], roots: list[Node], retain_graph: Any) -> None:
        """``backward()``'s and ``autograd.grad``'s bookkeeping. Traced nodes are interned
        (two identical forwards are one node), so "the same graph" is judged by the output
        tensor objects: a second pass through one needs ``retain_graph``, as in PyTorch (a
        second forward gives new tensors and is fine); the roots are noted for
        ``compiled_grad.note_live_outputs``."""
        for o in outs:
            if id(o) in self.freed:
                raise RuntimeError(BACKWARD_TWICE)
        self.backward_roots.extend(roots)
        if not retain_graph and any(n.rg and n.op not in NO_SAVED_VALUES
                                    for n in toposort(roots)):
            for o in outs:
                self.freed.add(id(o))
                self._keep_alive.append(o)  # its id stays unique for the rest of the trace

    def _seed(self, root: Node, gradient: Any) -> Node:
        """The cotangent a backward starts ``root`` from: ones for a one-element root, else
        ``gradient`` (a tensor or a number) cast and broadcast to it."""
        b = self.builder
        if gradient is None:
            if not sh.same(sh.numel(root.shape), 1):
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            return b.const(1.0, root.shape, root.dtype)
        g = gradient.node if isinstance(gradient, Tensor) else b.const(float(gradient))
        return b.broadcast_to(b.cast(g, root.dtype), root.shape)

    def vjp_values(self, outs: list[Tensor], cotangents: list[Tensor], leaves: list[Tensor]
                   ) -> list[Tensor | None]:
        """The gradients of ``sum(cotangent * out)`` with respect to the external tensors
        ``leaves``, returned rather than accumulated into ``.grad`` (the backward of a
        compiled call's results, ``graphc.compiled_grad``); None where nothing depends on
        a leaf."""
        from .autograd import no_grad

        b = self.builder
        roots = [o.node for o in outs]
        # a leaf: an external tensor, or an argument's index (its input node)
        nodes = [[self.inputs[t]] if isinstance(t, int) else self.versions.get(id(t), [])
                 for t in leaves]
        with no_grad():
            seeds = [b.cast(c.node, r.dtype) for c, r in zip(cotangents, roots)]
            return [None if g is None else Tensor(g, self)
                    for g in self._summed_vjp(roots, seeds, nodes)]

    def _summed_vjp(self, roots: list[Node], seeds: list[Node], nodes: list[list[Node]]
                    ) -> list[Node | None]:
        """``vjp`` with respect to groups of nodes (a tensor's versions), each group's
        gradients summed; None where no root depends on a group."""
        b = self.builder
        grads = iter(vjp(b, roots, seeds, [v for vs in nodes for v in vs]))
        out: list[Node | None] = []
        for vs in nodes:
            total = None
            for _ in vs:
                g = next(grads)
                if g is not None:
                    total = g if total is None else b.add(total, g)
            out.append(total)
        return out

    # -- optimizer state and hyperparameters ----------------------------------------------
    def hyper(self, group: dict, key: str, label: str) -> Tensor:
        k = (id(group), key)
        node = self.hypers.get(k)
        if node is None:
            node = self._input(label, "hyper", (), dt.float64, Source("hyper", (group, key)))
            self.hypers[k] = node
        return Tensor(node, self)

    def seed_input(self) -> Node:
        """A fresh i64 scalar input fed from ``graphc.random.next_seed()`` on every call.

        Random ops (dropout) take their seed from it, so a compiled step draws a new mask each
        call, from the same stream (and in the same order) as eager execution would.
        """
        return self._input("seed", "seed", (), dt.int64, Source("seed"))

    def random_input(self, draw: Any, shape: tuple, dtype: dt.DType) -> Node:
        """An input filled on every call by ``draw`` (a ``graphc.random.Draw``), as the eager
        op at this point of the function would fill it (``gc.rand``/``randn``/``randint``/
        ``randperm``, ``Tensor.uniform_`` and the other fills): a compiled step draws new
        values each call, the same values and in the same stream order as eager execution,
        instead of the trace's."""
        return self._input(f"rand_{draw.name}", "random", shape, dtype, Source("random", draw))

    def guard(self, read: Callable[[], Any], expected: Any, what: str,
              spec: tuple[Any, Any, Callable[[Any], Any]] | None = None,
              once: Any = None,
              obj: tuple[Callable[[], Any], Callable[[Any], Any]] | None = None) -> None:
        """Check ``read() == expected`` before every call (``spec``, ``obj``: the runner's
        cheap forms, see ``Signature``). ``once``: a key under which only the first such
        guard is kept."""
        assert self.sig is not None
        if once is not None:
            if once in self._guarded:
                return
            self._guarded.add(once)
        if spec is not None:
            self.sig.guard_specs[len(self.sig.struct_guards)] = spec
        if obj is not None:
            self.sig.guard_objects[len(self.sig.struct_guards)] = obj
        self.sig.struct_guards.append((read, expected, what))

    def opt_state(self, opt: Any, p: Tensor, key: str, label: str, fill: float,
                  dtype: dt.DType | None = None, shape: Any = None, flag: bool = True
                  ) -> tuple[Tensor, Tensor | None]:
        """(current value, presence flag) of ``opt.state[p][key]`` inside the trace
        (``flag=False``: no flag input; the caller guards presence another way)."""
        k = (id(opt), id(p), key)
        node = self.ostate.get(k)
        if node is not None:
            return Tensor(node, self), Tensor(self.builder.const(True, (), dt.bool_), self)
        dtype = dtype or p.dtype
        shape = p.shape if shape is None else shape
        node = self._input(label, "state", shape, dtype, Source("ostate", (opt, p, key), fill))
        if not flag:
            self.ostate[k] = node
            self.ostate_info[k] = (opt, p, key, node.attrs["name"])
            return Tensor(node, self), None
        flag = self._input(label + "?", "flag", (), dt.bool_, Source("oflag", (opt, p, key)))
        self.ostate[k] = node
        self.ostate_info[k] = (opt, p, key, node.attrs["name"])
        return Tensor(node, self), Tensor(flag, self)

    def opt_num(self, opt: Any, p: Tensor, key: str, label: str, pytype: type) -> Tensor:
        """A Python number kept in ``opt.state[p][key]`` (a step count): a float64 scalar
        input read at every call, written back as a ``pytype`` number after it."""
        k = (id(opt), id(p), key)
        node = self.onum.get(k)
        if node is None:
            node = self._input(label, "state", (), dt.float64, Source("onum", (opt, p, key)))
            self.onum[k] = node
            self.onum_info[k] = (opt, p, key, node.attrs["name"], pytype)
        return Tensor(node, self)

    def cell_input(self, label: str, guard: Any) -> Tensor:
        """A bool scalar input whose value is ``guard.cell[0]`` at call time (set by that
        guard's check, which runs before inputs are read)."""
        return Tensor(self._input(label, "flag", (), dt.bool_, Source("cell", guard)), self)

    def snapshot(self) -> tuple[dict[int, Node], dict[int, int]]:
        """The external tensors' current values (to run an optimizer step twice)."""
        return dict(self.ext), {k: len(v) for k, v in self.versions.items()}

    def take_changes(self, snap: tuple[dict[int, Node], dict[int, int]]) -> dict[int, Node]:
        """External tensors changed since ``snap`` (their new values), and roll them back."""
        ext, lens = snap
        changed = {k: n for k, n in self.ext.items() if ext.get(k) is not n}
        self.ext = dict(ext)
        for k, vs in self.versions.items():
            del vs[lens.get(k, 0):]
        for k in [k for k in self.ext_tensor if k not in ext]:
            self.ext[k] = self.ext_input[k]
        return changed

    def set_opt_state(self, opt: Any, p: Tensor, key: str, value: Tensor) -> None:
        k = (id(opt), id(p), key)
        if k not in self.ostate:
            raise KeyError(f"optimizer state {key!r} was not read before being written")
        self.ostate[k] = value.node

    # -- finishing ---------------------------------------------------------------------------
    def finish(self, outputs: list[Node]) -> Graph:
        assert self.sig is not None
        sig = self.sig
        updates: list[tuple[str, Node]] = []
        for key, node in self.ext.items():
            if node is not self.ext_input[key]:
                name = self.ext_input[key].attrs["name"]
                updates.append((name, _strip_detach(node)))
                sig.sinks[name] = Sink("tensor", self.ext_tensor[key])
        for key, st in self.grad.items():
            p = self.ext_tensor[key]
            if st is _ABSENT:
                sig.grads_to_clear.append(p)
                continue
            if st.op == "input" and st.attrs["kind"] == "grad":
                continue  # the incoming gradient, unchanged
            slot = f"{self.tensor_name(p)}.grad"
            if key not in self.guard_grad or not self.guard_grad[key]:
                slot = self._unique(slot)  # no input of that name: claim the name
            updates.append((slot, st))
            sig.sinks[slot] = Sink("grad", p)
        for k, node in self.ostate.items():
            opt, p, key, label = self.ostate_info[k]
            updates.append((label, node))
            sig.sinks[label] = Sink("ostate", (opt, p, key))
        for k, node in self.onum.items():
            opt, p, key, label, pytype = self.onum_info[k]
            if node.op == "input" and node.attrs.get("name") == label:
                continue  # read, never changed
            updates.append((label, node))
            sig.sinks[label] = Sink("onum", (opt, p, key, pytype))
        for key, present in self.guard_grad.items():
            p = self.ext_tensor[key]
            sig.grad_reads.append((p, present))
            sig.struct_guards.append(
                ((lambda p=p: p._grad is not None), present, f"{self.tensor_name(p)}.grad"))
            if present:
                sig.slow_guards.append(_grad_check(p, self.tensor_name(p)))
        for key, t in self.ext_tensor.items():
            node = self.ext_input[key]
            sig.tensor_guards.append((t, node.rg, tuple(node.shape), node.dtype.np))
        for (opt, p, key, label) in self.ostate_info.values():
            node = next(n for n in self.inputs if n.attrs.get("name") == label)
            sig.slow_guards.append(_state_check(opt, p, key, label, node))
        for sink in sig.sinks.values():
            if sink.kind == "grad" and id(sink.ref) in self.grad_cleared:
                sink.fresh = True
        # scalar inputs nothing reads (a hyperparameter read only to decide a branch, like
        # SGD's dampening without momentum) would cost a lookup per call: leave them out
        used = {n.id for n in toposort(list(outputs) + [v for _, v in updates])
                if n.op == "input"}
        inputs = [n for n in self.inputs if n.id in used or n.attrs["kind"] not in (
            "hyper", "flag")]
        g = Graph(self.name, inputs, outputs, updates)
        return g


def _buffer_check(label: str, get: Callable[[], Any], want: Callable[[], tuple[tuple, Any]],
                  ) -> Callable[[], None]:
    """A tensor a step reads as a buffer of a fixed size and type (an optimizer state entry,
    an incoming ``.grad``) must still have that shape and dtype when the step is called: a
    checkpoint of another model, a ``.data`` swap or a float64 buffer would otherwise be
    read as raw bytes of the wrong size. ``get`` returns the tensor (None: absent, fine),
    ``want`` the expected (shape, numpy dtype)."""
    def check() -> None:
        t = get()
        if not isinstance(t, Tensor):
            return
        a = t._node._value
        shape, dtype = want()
        if a.shape != shape:
            raise ValueError(f"{label}: expected shape {shape}, got {tuple(a.shape)}")
        if a.dtype != dtype:
            raise TypeError(f"{label}: expected dtype {np.dtype(dtype)}, got {a.dtype} "
                            "(convert it with .to() before the call)")
    return check


def _state_check(opt: Any, p: Tensor, key: str, label: str, node: Node
                 ) -> Callable[[], None]:
    """``opt.state[p][key]`` as the trace read it."""
    def get() -> Any:
        st = dict.get(opt.state, p)
        return None if st is None else dict.get(st, key)
    return _buffer_check(label, get, lambda: (tuple(node.shape), node.dtype.np))


def _grad_check(p: Tensor, name: str) -> Callable[[], None]:
    """The incoming ``.grad``: the parameter's own shape and dtype."""
    return _buffer_check(f"{name}.grad", lambda: p._grad,
                         lambda: (tuple(p._node._value.shape), p._node._value.dtype))


def _strip_detach(n: Node) -> Node:
    while n.op == "detach":
        n = n.inputs[0]
    return n


def collect_names(fn: Callable[..., Any]) -> dict[int, str]:
    """Readable names for the tensors a step function can reach: ``model.0.weight``."""
    module_t = _context.named_types.get("module", ())
    optimizer_t = _context.named_types.get("optimizer", ())
    names: dict[int, str] = {}
    scopes: dict[str, Any] = dict(getattr(fn, "__globals__", {}))
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None) or ()
    if code is not None:
        for var, cell in zip(code.co_freevars, closure):
            try:
                scopes[var] = cell.cell_contents
            except ValueError:
                continue
    for var, obj in scopes.items():
        if isinstance(obj, module_t):
            for pname, p in obj.named_parameters():
                names.setdefault(id(p), f"{var}.{pname}")
            for bname, buf in obj.named_buffers():
                names.setdefault(id(buf), f"{var}.{bname}")
    for var, obj in scopes.items():
        if isinstance(obj, optimizer_t):
            names.setdefault(id(obj), var)
            for gi, group in enumerate(obj.param_groups):
                for pi, p in enumerate(group["params"]):
                    names.setdefault(id(p), f"{var}.g{gi}.p{pi}")
    return names


def argument_names(fn: Callable[..., Any], n: int) -> list[str]:
    """The names ``n`` positional arguments of ``fn`` have in errors and in the IR (and in
    an AOT header, so they stay identifiers): its parameters' names in order, ``argK``
    past them or where the signature is unknown."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(n)]


def symbolic_axes(dynamic: Any, args: list[np.ndarray], names: list[str]
                  ) -> dict[int, tuple[int, ...]]:
    """Which axes of each argument a trace makes symbolic: the first of every argument
    (``dynamic`` true), none (false), or those a dict gives by argument index or name (one
    axis or a tuple of axes, negative ones counted from the end, as ``mark_dynamic``
    takes them). A key that names no argument, or an axis an argument does not have, raises
    ``ValueError`` naming it: such a dict used to be ignored, or to fail inside the trace
    and compile every size as a constant."""
    if not isinstance(dynamic, dict):
        return {i: (0,) if dynamic and a.ndim >= 1 else () for i, a in enumerate(args)}
    known = set(range(len(args))) | set(names)
    bad = [k for k in dynamic if k not in known or isinstance(k, bool)]
    if bad:
        raise ValueError(f"dynamic: {bad[0]!r} is not an argument of this call (arguments: "
                         f"{', '.join(names) or 'none'})")
    out: dict[int, tuple[int, ...]] = {}
    for i, a in enumerate(args):
        key = i if i in dynamic else names[i]
        v = dynamic.get(key, ())
        axes = (v,) if isinstance(v, int) and not isinstance(v, bool) else v
        if not isinstance(axes, (tuple, list)) or not all(
                isinstance(ax, int) and not isinstance(ax, bool) for ax in axes):
            raise ValueError(f"dynamic[{key!r}]: expected an axis or a tuple of axes, got {v!r}")
        if any(not -a.ndim <= ax < a.ndim for ax in axes):
            raise ValueError(f"dynamic[{key!r}]: axes {tuple(axes)} out of range for argument "
                             f"{names[i]!r} of shape {tuple(a.shape)}")
        out[i] = tuple(sorted({ax % a.ndim for ax in axes}))
    return out


def axis_symbols(args: list[np.ndarray], axes: dict[int, tuple[int, ...]]
                 ) -> dict[tuple[int, int], sympy.Symbol]:
    """The symbol of each symbolic ``(argument, axis)`` as ``trace`` names them: equal sizes
    share one, ``B`` first, then ``B1``, ``B2`` in order of first appearance."""
    sym_of_size: dict[int, sympy.Symbol] = {}
    out: dict[tuple[int, int], sympy.Symbol] = {}
    for i, a in enumerate(args):
        for ax in axes.get(i, ()):
            size = int(a.shape[ax])
            if size not in sym_of_size:
                sym_of_size[size] = sh.symbol("B" if not sym_of_size else f"B{len(sym_of_size)}")
            out[(i, ax)] = sym_of_size[size]
    return out


def trace(fn: Callable[..., Any], args: list[np.ndarray], name: str,
          dynamic: bool | dict[int, tuple[int, ...]] = True,
          arg_grad: tuple[bool, ...] = ()) -> tuple[Graph, Signature]:
    """Trace ``fn`` on arguments of the given types; batch dims become symbols.
    ``arg_grad``: which arguments require grad (their inputs are differentiable: results
    computed from them carry a graph to them, ``graphc.compiled_grad``)."""

    arg_names = argument_names(fn, len(args))
    # symbolic dims: the first dim of every input; equal sizes share a symbol
    arg_types: list[tuple[dt.DType, sh.Shape]] = []
    axes = symbolic_axes(dynamic, args, arg_names)
    syms = axis_symbols(args, axes)
    sym_of_size = {int(args[i].shape[ax]): s for (i, ax), s in syms.items()}
    for i, a in enumerate(args):
        dims: list[Any] = list(a.shape)
        for ax in axes[i]:
            dims[ax] = syms[(i, ax)]
        arg_types.append((dt.from_numpy(a.dtype), tuple(dims)))
    ctx = TraceContext(name, collect_names(fn))
    ctx.sig = Signature(arg_names, arg_types)
    ctx.example_args = list(args)
    ctx._used_names.update(arg_names)
    tensors = []
    ctx.sig.arg_grad = tuple(arg_grad)
    for i, (dtype, shape) in enumerate(arg_types):
        node = ctx.builder.input(arg_names[i], "arg", shape, dtype)
        if arg_grad and arg_grad[i] and dtype.is_float:
            node.rg = True
        ctx.inputs.append(node)
        ctx.sig.sources[arg_names[i]] = Source("arg", i)
        tensors.append(Tensor(node, ctx))
    def add_guard(cond: Any, what: str) -> None:
        if all(cond != c for c, _ in ctx.sig.shape_guards):
            ctx.sig.shape_guards.append((cond, what))

    from . import amp
    from .autograd import is_grad_enabled

    mode = is_grad_enabled()  # a step traced with grad on must not run under no_grad
    ctx.guard(is_grad_enabled, mode, "grad mode (torch.is_grad_enabled())")
    # an autocast region around the call changes which casts the trace records
    ctx.guard(amp.state, amp.state(), "autocast state (gc.autocast)")
    prev = _context.set_current(ctx)
    sh.push_guard_sink(add_guard)
    try:
        result = fn(*tensors)
    finally:
        sh.pop_guard_sink()
        _context.set_current(prev)
        ctx.example_args = None  # (a batch: not kept alive by the context)
    from ._global_guards import guard_globals

    guard_globals(ctx, [fn, *ctx.module_types])  # the globals that code reads
    flat: list[Node] = []
    tree = _flatten(result, flat, ctx)
    g = ctx.finish(flat)
    ctx.sig.output_tree = tree
    ctx.sig.symbols = sorted(sym_of_size.values(), key=lambda s: s.name)
    ctx.sig.example_env = {s: size for size, s in sym_of_size.items()}
    g.guards = [f"{s} >= 1" for s in ctx.sig.symbols] + [
        f"{str(c).replace(' ', '')}  # {what}" for c, what in ctx.sig.shape_guards]
    if mode:
        from .compiled_grad import note_live_outputs

        note_live_outputs(ctx, g, flat)
    return g, ctx.sig


def _flatten(obj: Any, out: list[Node], ctx: TraceContext) -> Any:
    if isinstance(obj, Tensor):
        out.append(ctx.read(obj) if obj._trace is not ctx else obj._node)
        return ("T", len(out) - 1)
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, [_flatten(o, out, ctx) for o in obj])
    if isinstance(obj, dict):
        return ("dict", {k: _flatten(v, out, ctx) for k, v in obj.items()})
    return ("C", obj)


def unflatten(tree: Any, values: list[Any]) -> Any:
    tag, body = tree
    if tag == "T":
        return values[body]
    if tag in ("tuple", "list"):
        seq = [unflatten(t, values) for t in body]
        return tuple(seq) if tag == "tuple" else seq
    if tag == "dict":
        return {k: unflatten(v, values) for k, v in body.items()}
    return body
