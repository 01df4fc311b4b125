"""``Tensor``: one front end for eager execution and tracing.

Every operation builds an IR node through a builder. In eager mode the builder is an
``EagerBuilder`` that evaluates each node with the reference interpreter as it is created (and
keeps only the nodes on a gradient path, so no-grad code does not retain history); while a step
is being traced, the builder is the trace's interning builder and nodes are symbolic. The
same user code therefore runs eagerly and compiles, and ``backward()`` uses the single autodiff
pass in both cases.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _context
from .autograd import NO_SAVED_VALUES, is_grad_enabled, is_inference_mode_enabled, no_grad
from .interpreter import _PLAIN, IMPLS, QUIET, run_node
from .ir import Builder, Node
from .ir import dtypes as dt
from .ir import graph as _graph
from .ir import shapes as sh
from .ir.elementwise import COMPARE, ELEMENTWISE, LOGICAL
from .ir.ops import FLOAT_ONLY


class EagerBuilder(Builder):
    """Evaluates nodes on creation; nodes off any gradient path become value-only leaves."""

    def __init__(self) -> None:
        super().__init__(intern=False, track_loc=False)

    def op(self, op: str, inputs: Sequence[Node] = (), **attrs: Any) -> Node:
        fast = _FAST.get(op)
        if fast is not None and not attrs:
            value = _unrecorded(fast, inputs, False)
            if value is not None:
                return leaf_node(value)
        node = self._make(op, inputs, attrs, None)  # Builder.op, one call fewer
        if op == "input":
            return node
        value = run_node(node, [x._value for x in node.inputs])
        if node.rg:
            node._value = value
            return node
        leaf = leaf_node(value)
        if op in VIEW_OPS:
            _inherit_marks(inputs[0], leaf)
        return leaf

    eager = True  # VJP rules may read values (``ir.elementwise._const_value``)

    def binary(self, op: str, a: Node, b: Node) -> Node:
        """``Builder.binary``; when nothing records the result (no operand on a gradient
        path, or grad mode off: every node of an eager backward), numpy broadcasts the
        operands instead of reshape and expand nodes, and no op node is built."""
        fast = _FAST.get(op)
        if fast is not None:
            value = _unrecorded(fast, (a, b), True)
            if value is not None:
                return leaf_node(value)
        return super().binary(op, a, b)

    def reshape(self, x: Node, shape: Sequence[Any]) -> Node:
        """``Builder.reshape`` for concrete shapes, built directly (see ``broadcast_to``):
        the VJPs of broadcasting reshape every scalar's gradient."""
        v = x._value
        if v is None or x.op in ("reshape", "const") or not sh.is_concrete(x.shape):
            return super().reshape(x, shape)
        full = tuple(shape)
        for d in full:  # plain sizes (no -1, no symbol) whose product is the element count
            if type(d) is not int or d < 0:
                full = sh.reshape(x.shape, shape)  # the general rules and their errors
                break
        else:
            if math.prod(full) != v.size:
                full = sh.reshape(x.shape, shape)  # raises the shape rule's error
        if full == x.shape:
            return x
        if not sh.is_concrete(full):  # a symbolic target: the general rules
            return super().reshape(x, shape)
        return self._direct("reshape", x, full, v.reshape(full))

    def broadcast_to(self, x: Node, shape: Sequence[Any]) -> Node:
        """``Builder.broadcast_to`` for concrete shapes without the general machinery: the
        same reshape and expand nodes (attributes, shapes, values) built directly. A scalar
        operand (``b * x``, ``x ** 2``) is broadcast on most eager binary ops, and the two
        nodes through ``op`` (shape rules, the interpreter) were half of such an op's time.
        Anything else (symbolic or invalid shapes, a reshape or constant operand, which
        ``Builder.reshape``/``expand`` fold) takes the general path."""
        if x.shape == shape and type(shape) is tuple:
            return x  # the operand of the two already in the result's shape
        v = x._value
        if (type(shape) is not tuple or v is None or x.op in ("reshape", "expand", "const")
                or not sh.is_concrete(shape) or not sh.is_concrete(x.shape)
                or not sh.can_expand(x.shape, shape)):
            return super().broadcast_to(x, shape)
        if len(x.shape) < len(shape):
            full = (1,) * (len(shape) - len(x.shape)) + x.shape
            x = self._direct("reshape", x, full, v.reshape(full))
        if x.shape == shape:
            return x
        v = x._value
        view = repeated(v, shape) if v.size == 1 and v.flags.c_contiguous else (
            broadcast_view(v, shape))
        return self._direct("expand", x, shape, view)

    @staticmethod
    def _direct(op: str, x: Node, shape: tuple[int, ...], value: np.ndarray) -> Node:
        """A one-operand movement node of known shape and value (``broadcast_to``)."""
        if not (x.rg and is_grad_enabled()):
            leaf = leaf_node(value)
            _inherit_marks(x, leaf)
            return leaf
        node = Node(op, (x,), shape, x.dtype, {"shape": shape})
        node.rg = True
        node._value = value
        return node


# elementwise op -> (its reference without floating-point warnings, result is bool,
# float operands only, bool operands only, the op's name): what ``_unrecorded`` needs of
# the op table
_FAST = {d.name: (IMPLS[d.name].quiet, d.name in COMPARE or d.name in LOGICAL,
                  d.name in FLOAT_ONLY, d.name in LOGICAL, d.name, IMPLS[d.name].raw)
         for d in ELEMENTWISE}
_BOOL_NP = dt.bool_.np


def _unrecorded(fast: tuple, inputs: Sequence[Node], broadcast: bool) -> np.ndarray | None:
    """The value of an elementwise op on eager operands that no autograd graph records, as
    the interpreter computes it (the same reference, dtype and warnings), or None where the
    general path must run: an operand on a gradient path under grad mode, bfloat16 (the
    interpreter's float32 rule), operands of different dtypes, an operand dtype the op's
    shape rule rejects, or (``broadcast`` False) different shapes; a broadcast numpy
    refuses goes there too, for the shape rule's error."""
    x0 = inputs[0]
    grad = is_grad_enabled()
    if grad and x0.rg:
        return None
    d = x0.dtype
    if x0._value is None or not fast_accepts(fast, d):
        return None
    shape = x0.shape
    for x in inputs[1:]:
        if x.dtype is not d or x._value is None or (grad and x.rg) or (
                not broadcast and x.shape != shape):
            return None
    return fast_compute(fast, d, [x._value for x in inputs])


def fast_accepts(fast: tuple, d: dt.DType) -> bool:
    """Whether operands of dtype ``d`` can take the fast path of the op ``fast`` describes."""
    return not (d is dt.bfloat16 or (fast[2] and not d.is_float) or (
        fast[3] and d is not dt.bool_))


def fast_compute(fast: tuple, d: dt.DType, values: Sequence[np.ndarray]) -> np.ndarray | None:
    """The op's reference on ``values`` (operands of dtype ``d``, broadcast by numpy) in the
    result dtype the shape rule gives; None where numpy cannot broadcast them."""
    try:
        out = (fast[5] if QUIET.on else fast[0])(*values)
    except ValueError:  # shapes that do not broadcast: the general path raises its error
        return None
    want = _BOOL_NP if fast[1] else d.np
    return out if type(out) is np.ndarray and out.dtype == want else np.asarray(out, dtype=want)


_EAGER = EagerBuilder()


_TORCH_TYPE = {dt.float32: "Float", dt.float64: "Double", dt.bfloat16: "BFloat16",
               dt.int64: "Long", dt.int32: "Int", dt.bool_: "Bool"}


def result_castable(out: Tensor, dst: Tensor, op: str) -> Tensor:
    """``out``, the value an in-place arithmetic op ``op`` computed for ``dst``, when torch
    may cast it to ``dst``'s dtype (its ``canCast``: no float into an integer or bool
    tensor, nothing but bool into a bool one); else torch's error, before anything changes
    (``int_t += 1.5`` used to store the truncated sum)."""
    a, b = out.dtype, dst.dtype
    if a is b:
        return out
    if (a.is_float and not b.is_float) or (b is dt.bool_ and a is not dt.bool_):
        raise RuntimeError(f"{op}: result type {_TORCH_TYPE.get(a, a.name)} can't be cast to "
                           f"the desired output type {_TORCH_TYPE.get(b, b.name)}")
    return out


def _inherit_marks(src: Node, view: Node) -> None:
    """An eager view keeps its base's marks: ``untracked`` (a view of ``.data``, whose writes
    torch keeps off the version counter) and ``copy_of`` (see ``mark_copied_view``)."""
    a = src.attrs
    if "untracked" in a or "copy_of" in a:
        for k in ("untracked", "copy_of"):
            if k in a:
                view.attrs[k] = a[k]


class RemovableHandle:
    """What ``register_hook`` returns: ``remove()`` takes the hook off (also as a context
    manager, as ``torch.utils.hooks.RemovableHandle``)."""

    _next = 0

    def __init__(self, hooks: dict, leaf: bool) -> None:
        RemovableHandle._next += 1
        self.id = RemovableHandle._next
        self._hooks = hooks
        self._leaf = leaf

    def remove(self) -> None:
        if self._hooks.pop(self.id, None) is not None and self._leaf:
            _leaf_hooks_changed()

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _check_hooks_outside_trace(what: str) -> None:
    if _context.current() is not None:
        raise NotImplementedError(
            f"{what}() inside a compiled step: the trace would run it once and the compiled "
            f"step never again. Call it before compiling (hooks on parameters are traced "
            f"into the step), or run this code eagerly")


def _leaf_hooks_changed() -> None:
    """A leaf's hooks were registered or removed: compiled steps that traced the old set
    recompile (``LEAF_HOOKS_VERSION`` is in their guards; ``bump`` makes them look)."""
    LEAF_HOOKS_VERSION[0] += 1
    _context.bump()


class _WeakIdMap:
    """object -> value, held weakly and compared by identity (a ``WeakKeyDictionary`` would
    compare two tensors with ``==``, which is elementwise)."""

    def __init__(self) -> None:
        self._d: dict[int, tuple[weakref.ref, Any]] = {}

    def __bool__(self) -> bool:
        return bool(self._d)

    def __setitem__(self, obj: Any, value: Any) -> None:
        key, d = id(obj), self._d
        entry = d.get(key)
        if entry is not None and entry[0]() is obj:  # the same object: its reference stays
            d[key] = (entry[0], value)
            return

        def forget(r: weakref.ref, key: int = key) -> None:
            if key in d and d[key][0] is r:
                del d[key]

        d[key] = (weakref.ref(obj, forget), value)

    def get(self, obj: Any) -> Any:
        entry = self._d.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else None


# traced tensors that PyTorch returns as views but graphc computes as copies -> the op's name
_COPIED_TRACED = _WeakIdMap()
# tensor hooks: a leaf Tensor or an interior tensor's Node -> {handle id: hook}, in order
GRAD_HOOKS = _WeakIdMap()
# interior Node -> weak reference to the tensor whose ``retain_grad()`` asked for its grad
RETAINED = _WeakIdMap()
# moved by every registration or removal of a leaf's hook (a compiled step's guard)
LEAF_HOOKS_VERSION = [0]


def mark_copied_view(t: Tensor, op: str) -> Tensor:
    """``t`` is the result of ``op``, a view in PyTorch (``diagonal``, ``Tensor.unfold``) that
    graphc computes as a copy (a gather): an in-place op on it, or on an eager view of it,
    would leave the base unchanged where PyTorch writes it, so it raises instead."""
    if t._trace is None and _context.current() is None:
        t._node.attrs["copy_of"] = op  # an eager node is never shared (no interning)
    else:
        _COPIED_TRACED[t] = op
    return t


def check_not_copied_view(t: Tensor) -> None:
    op = _COPIED_TRACED.get(t) if _COPIED_TRACED else None
    op = op or t._node.attrs.get("copy_of")
    if op is not None:
        raise NotImplementedError(
            f"an in-place operation on the result of {op}() (or a view of it): in PyTorch "
            f"{op}() returns a view and the write reaches its base; graphc's {op}() is a copy, "
            "so the write would be lost. Write the base instead (for a diagonal: "
            "`x = x + gc.diag_embed(values - x.diagonal())`)")


def broadcast_view(v: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``np.broadcast_to(v, shape)`` (a read-only view), built directly for a C-contiguous
    ``v`` whose shape broadcasts to ``shape`` (numpy's function is ~4 us of Python; an
    eager softmax broadcasts twice); anything else goes to numpy's function."""
    nd = len(shape)
    lead = nd - v.ndim
    if not v.flags.c_contiguous or lead < 0:
        return np.broadcast_to(v, shape)
    strides = [0] * lead
    for d, s, n in zip(v.shape, v.strides, shape[lead:]):
        if d == n:
            strides.append(s)
        elif d == 1:
            strides.append(0)
        else:
            return np.broadcast_to(v, shape)  # numpy's error
    view = np.ndarray(shape, v.dtype, buffer=v, strides=tuple(strides))
    view.flags.writeable = False
    return view


def repeated(one: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``np.broadcast_to(one, shape)`` for a C-contiguous one-element array, built directly
    (the general function is ~5 us of Python): the element repeated by zero strides,
    read-only."""
    view = np.ndarray(shape, one.dtype, buffer=one, strides=(0,) * len(shape))
    view.flags.writeable = False
    return view
_leaf_ids = iter(range(1, 1 << 62))


def leaf_node(value: np.ndarray, requires_grad: bool = False) -> Node:
    shape = value.shape  # a tuple of Python ints already
    d = _DT_OF[value.dtype.num] if value.dtype in _PLAIN else dt.from_numpy(value.dtype)
    n = Node("input", (), shape, d,
             {"name": f"leaf{next(_leaf_ids)}", "kind": "leaf", "shape": shape, "dtype": d})
    n._value = value
    n.rg = requires_grad
    return n


class _DtOf(dict):
    """numpy dtype number -> graphc dtype; bfloat16's number exists once ml_dtypes is loaded
    (by the time a bf16 array is returned), so it is looked up on a miss."""

    def __missing__(self, num: int) -> dt.DType:
        if num == dt.bfloat16.np.num:
            self[num] = dt.bfloat16
            return dt.bfloat16
        raise KeyError(num)


_DT_OF = _DtOf({d.np.num: d for d in dt.ALL if d is not dt.bfloat16})


class _OutNode(Node):
    """A value-only leaf for compiled results: the fixed fields live on the class, so
    creating one per call sets four slots instead of nine."""

    __slots__ = ()
    op = "input"
    inputs = ()
    attrs = {"name": "result", "kind": "leaf"}  # noqa: RUF012 - shared, never mutated
    id = -1
    loc = None


class _ScalarOutNode(_OutNode):
    """A one-element compiled result kept as a Python number until its array is asked for.

    Most steps return a scalar loss that the caller reads now and then (or never): holding
    ``staging.item()`` (exact for every dtype numpy converts to a Python number) instead of
    a fresh 0-d array saves allocating and freeing that array on every call (~0.2 us of a
    1.5 us seed step). ``_value`` builds the array on first use and keeps it."""

    __slots__ = ("_item", "_arr")

    @property
    def _value(self) -> np.ndarray:
        try:
            return self._arr
        except AttributeError:
            a = self._arr = np.array(self._item, self.dtype.np)
            return a

    @_value.setter
    def _value(self, v: np.ndarray) -> None:
        self._arr = v


def builder() -> Builder:
    ctx = _context.current()
    return ctx.builder if ctx is not None else _EAGER


def to_array(data: Any, dtype: dt.DType | None = None) -> np.ndarray:
    """Convert user data as ``gc.tensor`` does (no copy when dtype and layout allow)."""
    if isinstance(data, Tensor):
        arr = data.numpy()
    else:
        arr = np.asarray(data)
    if dtype is not None:
        # reshape: ascontiguousarray turns 0-d arrays into 1-d ones
        return np.ascontiguousarray(arr, dtype=dtype.np).reshape(arr.shape)
    # Python numbers take torch's defaults (float32, int64); tensors, numpy arrays and numpy
    # scalars keep their dtype (``torch.tensor(np.float64(1.1))`` and
    # ``nn.Parameter(float64_tensor)`` are float64)
    typed = isinstance(data, (np.ndarray, np.generic, Tensor))
    if arr.dtype == np.float64 and not typed:
        arr = arr.astype(np.float32)
    elif arr.dtype.kind in "iu" and arr.dtype != np.int32 and not typed:
        arr = arr.astype(np.int64)
    elif arr.dtype.kind == "u" or arr.dtype == np.float16:
        raise TypeError(f"dtype {arr.dtype} is not supported")
    dt.from_numpy(arr.dtype)
    return np.ascontiguousarray(arr).reshape(arr.shape)


def _is_one(v: Any) -> bool:
    """A Python (not traced) multiplier of exactly 1: the multiplication can be skipped."""
    return not isinstance(v, Tensor) and v == 1


class Tensor:
    """A value with PyTorch's user-facing semantics (``.grad``, ``backward``, operators)."""

    __slots__ = ("_node", "_grad", "_trace", "_inference", "__weakref__")
    __array_priority__ = 1000
    # the eager fast paths read ``_node`` directly; a class whose ``node`` property does
    # more (an uninitialized parameter raises) sets this False and takes the general path
    _plain_node = True

    def __init__(self, node: Node, trace: Any = None) -> None:
        self._node = node
        self._grad: Tensor | None = None
        self._trace = trace
        self._inference = is_inference_mode_enabled()
        if trace is not None and node.op in VIEW_OPS and node.inputs:
            trace.note_view(self)  # in-place ops on it, or on its base, are checked

    # -- construction ------------------------------------------------------------------
    @classmethod
    def _wrap(cls, node: Node) -> Tensor:
        return cls(node, _context.current())

    @classmethod
    def _from_array(cls, arr: np.ndarray, requires_grad: bool = False) -> Tensor:
        t = object.__new__(cls)
        Tensor.__init__(t, leaf_node(arr, requires_grad))
        t._node.attrs["tensor"] = weakref.ref(t)
        return t

    def __deepcopy__(self, memo: dict) -> Tensor:
        """A new leaf with a copy of the values, ``requires_grad`` and ``.grad`` (torch's rule:
        only graph leaves can be deep-copied). The default protocol would copy the node's
        back-reference to *this* tensor, so gradients of the copy would land on the original."""
        if self._trace is not None or _context.current() is not None:
            raise RuntimeError("deepcopy of a tensor inside a traced step is not supported")
        node = self._node
        if node.rg and node.op != "input":
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment")
        out = type(self)._from_array(np.array(node._value, copy=True), bool(node.rg))
        memo[id(self)] = out
        if self._grad is not None:
            out._grad = copy.deepcopy(self._grad, memo)
        return out

    @classmethod
    def _from_output(cls, arr: np.ndarray) -> Tensor:
        """Wrap a freshly computed result (no grad): the cheap path for compiled outputs."""
        n = _OutNode.__new__(_OutNode)
        n.shape, n.dtype, n.rg, n._value = arr.shape, _DT_OF[arr.dtype.num], False, arr
        t = object.__new__(cls)
        t._node, t._grad, t._trace, t._inference = n, None, None, False
        return t

    # -- introspection -----------------------------------------------------------------
    @property
    def node(self) -> Node:
        """The IR node this tensor stands for in the current context."""
        ctx = _context.current()
        if ctx is not None:
            return ctx.read(self)
        if self._trace is not None:
            raise RuntimeError(
                "a tensor created while tracing a compiled function was used outside it"
            )
        return self._node

    @property
    def shape(self) -> tuple:
        return tuple(self.node.shape)

    def size(self, d: int | None = None) -> Any:
        s = self.shape
        return s if d is None else s[sh.norm_axis(d, len(s), "size")]

    @property
    def dtype(self) -> dt.DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> Any:
        return sh.numel(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def is_leaf(self) -> bool:
        return self._trace is None and self._node.op == "input"

    @property
    def requires_grad(self) -> bool:
        return self.node.rg

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if not self.is_leaf:
            raise RuntimeError("you can only change requires_grad flags of leaf variables")
        if value and not self.dtype.is_float:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if _context.current() is not None:
            raise RuntimeError("changing requires_grad inside a compiled function is not "
                               "supported: change it between calls (compiled steps guard on it)")
        node = self._node
        if value:
            if type(node) is not Node:  # a compiled result: its attributes are shared
                self._node = node = leaf_node(node._value)
            # the leaf an op produced (``(x * 2).requires_grad_()``, ``w.double()``) has no
            # tensor to receive its gradient yet: without one, backward() dropped it
            ref = node.attrs.get("tensor")
            if ref is None or ref() is None:
                node.attrs["tensor"] = weakref.ref(self)
        if node.rg != bool(value):
            node.rg = bool(value)
            _context.bump()

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    @property
    def grad_fn(self) -> Any:
        n = self.node
        return None if (n.op == "input" or not n.rg) else n.op

    @property
    def grad(self) -> Tensor | None:
        ctx = _context.current()
        if ctx is not None and self._trace is None:
            return ctx.get_grad(self)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        ctx = _context.current()
        if value is None and ctx is None:  # ``p.grad = None`` after an eager update
            self._grad = None
            _context.bump()
            return
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"assigned grad expected to be a Tensor or None, got {type(value)}")
        if value is not None and tuple(value.shape) != tuple(self.shape):
            raise RuntimeError(
                f"assigned grad has data of a different size ({value.shape} vs {self.shape})"
            )
        if value is not None and value.dtype is not self.dtype:
            raise TypeError(f"assigned grad has data of a different type ({value.dtype!r} vs "
                            f"{self.dtype!r}); convert it first, e.g. g.to({self.dtype!r})")
        if ctx is not None and self._trace is None:
            ctx.set_grad(self, value)
        else:
            self._grad = value
            _context.bump()  # a new .grad may have another shape or dtype: guards re-check

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """``torch.Tensor.register_hook``: ``hook(grad)`` runs when this tensor's gradient
        has been computed (all of it, in this backward), and a tensor it returns replaces
        the gradient: for a leaf, before it is accumulated into ``.grad``; for an interior
        tensor, before it flows on to the tensor's inputs. Hooks run in the order they were
        registered; ``handle.remove()`` takes one off.

        A compiled step applies the hooks of the leaves it differentiates (traced into the
        step, so they must be written with tensor ops) and recompiles when a leaf's hooks
        are registered or removed. Registering a hook inside a compiled step raises: the
        trace would run it once, a compiled step never again."""
        _check_hooks_outside_trace("register_hook")
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")
        leaf = self.is_leaf
        key = self if leaf else self._node
        hooks = GRAD_HOOKS.get(key)
        if hooks is None:
            hooks = GRAD_HOOKS[key] = {}
        handle = RemovableHandle(hooks, leaf)
        hooks[handle.id] = hook
        if leaf:
            _leaf_hooks_changed()
        return handle

    def retain_grad(self) -> None:
        """``torch.Tensor.retain_grad``: an interior tensor's ``.grad`` is filled by
        ``backward()`` (summed over backward calls, as PyTorch's retained gradients are);
        a leaf's always is. Eager only: inside a compiled step it raises."""
        _check_hooks_outside_trace("retain_grad")
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if not self.is_leaf:
            RETAINED[self._node] = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        """Whether ``backward()`` fills this interior tensor's ``.grad`` (``retain_grad``)."""
        if self.is_leaf:
            return False
        ref = RETAINED.get(self._node)
        return ref is not None and ref() is self

    @property
    def data(self) -> Tensor:
        """The same storage without autograd history: in-place edits of ``.data`` change this
        tensor, eagerly (a view of the same array) and inside a compiled step (traced as an
        update of this tensor)."""
        ctx = _context.current()
        if ctx is None:  # no shared version counter: edits of ``.data`` are not tracked (torch)
            out = Tensor._from_array(self.numpy())
            out._node.attrs["untracked"] = True  # nor those through its views
            return out
        return ctx.data_alias(self)

    @data.setter
    def data(self, value: Any) -> None:
        arr = to_array(value)
        if self._trace is not None or _context.current() is not None:
            raise RuntimeError("assigning .data is not supported inside a compiled function")
        self._node._value = np.ascontiguousarray(arr, dtype=self.dtype.np)
        self._node.shape = tuple(arr.shape)
        _context.bump()  # compiled steps re-check shapes, dtypes and aliasing before running

    # -- values ------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        if _context.current() is not None or self._trace is not None:
            raise RuntimeError(
                "cannot read a tensor's value while tracing a compiled function "
                "(values exist only when the compiled step runs)"
            )
        return self._node._value

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """NumPy's array protocol (NumPy 2 semantics): ``copy=True`` (``np.array(t)``'s
        default) returns a new array, ``copy=None`` (``np.asarray(t)``) shares the tensor's
        memory when ``dtype`` allows, ``copy=False`` raises ``ValueError`` when a copy is
        needed. ``t.numpy()`` always shares memory, as ``torch.Tensor.numpy()`` does."""
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError("Unable to avoid copy while creating an array as requested: "
                                 f"the tensor holds {a.dtype}, {np.dtype(dtype)} was asked for")
            return a.astype(dtype)
        return np.array(a, copy=True) if copy else a

    def item(self) -> Any:
        ctx = _context.current()
        if ctx is not None:
            return ctx.concretize(self)
        n = self._node
        if type(n) is _ScalarOutNode and self._trace is None and _context.current() is None:
            try:
                return n._arr.item()  # the array exists (and may have been changed in place)
            except AttributeError:
                return n._item
        a = self.numpy()
        if a.size != 1:
            raise ValueError(
                f"a Tensor with {a.size} elements cannot be converted to Scalar"
            )
        return a.reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def _sympy_(self) -> Any:
        """Not a sympy value: ``x.shape[0] / t`` (a symbolic size on the left) then falls
        back to the tensor's reflected operator instead of sympy converting the tensor."""
        import sympy

        raise sympy.SympifyError(self)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def __index__(self) -> int:
        if self.dtype.is_float:
            raise TypeError("only integer tensors can be converted to an index")
        return int(self.item())

    def __repr__(self) -> str:
        if _context.current() is not None or self._trace is not None:
            return f"Tensor(traced, {self.dtype.short}{sh.fmt_shape(self.shape)})"
        extra = ", requires_grad=True" if self.requires_grad else ""
        if self.dtype is not dt.float32 and self.dtype is not dt.int64:
            extra = f", dtype={self.dtype!r}" + extra
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        return f"tensor({body}{extra})"

    # by identity, as PyTorch's (``==`` is elementwise): object's own slot, a C call, where
    # a Python ``__hash__`` cost a frame in every dict lookup keyed by a tensor (an Adam
    # step's call wrapper finds each parameter's state in ``opt.state``: 84 lookups a call)
    __hash__ = object.__hash__

    # -- autograd ----------------------------------------------------------------------
    def detach(self) -> Tensor:
        if _context.current() is None:
            out = Tensor._from_array(self.numpy())
            _share_storage(self._node, out._node)  # in-place edits of either are tracked
            return out
        return Tensor._wrap(builder().op("detach", [self.node]))

    def backward(self, gradient: Any = None, retain_graph: Any = None,
                 create_graph: bool = False, inputs: Any = None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (PyTorch's rules)."""
        if create_graph:
            raise NotImplementedError("backward(create_graph=True) is not supported")
        if inputs is not None:
            raise NotImplementedError("backward(inputs=...) is not supported")
        ctx = _context.current()
        if ctx is not None:
            ctx.backward(self, gradient, retain_graph)
            return
        _EAGER_BACKWARD[0](self, gradient, retain_graph)

    # -- in-place updates (the optimizer and buffer updates use these) ------------------
    def _assign(self, value: Tensor) -> Tensor:
        """Overwrite this tensor's contents (shape and dtype must match), as an in-place op.

        With grad mode on and a result on a gradient path, the tensor's autograd history is
        rebased onto the result (PyTorch's rule: its ``grad_fn`` becomes the in-place op's,
        whose input is the old history); otherwise only the values change. Either way the new
        values are written into the tensor's array (other holders of the memory see them),
        and the write is recorded so that a backward pass that needs the old values raises."""
        ctx = _context.current()
        grad_mode = is_grad_enabled()
        old = self._node
        if (ctx is None and self._trace is None and value._trace is None
                and self._plain_node and value._plain_node):
            vn = value._node  # an eager write of values alone (an optimizer's update)
            if (vn.shape == old.shape and vn.dtype is old.dtype
                    and not (grad_mode and (vn.rg or (old.rg and old.op == "input")))):
                check_not_copied_view(self)
                dst = old._value
                _check_no_overlap(dst)
                return self._write(old, dst, vn._value)
        if grad_mode and self.is_leaf and self._node.rg:
            raise RuntimeError(LEAF_INPLACE)
        check_not_copied_view(self)
        if ctx is None:
            _check_no_overlap(self._node._value)
        node = value.node
        if tuple(node.shape) != tuple(self.shape) and not sh.same_shape(node.shape, self.shape):
            node = builder().broadcast_to(node, self.shape)
        node = builder().cast(node, self.dtype)
        if ctx is not None:
            if grad_mode and node.rg:
                _check_not_view(self.node)
            ctx.assign(self, node)
            return self
        if grad_mode and node.rg:
            _check_not_view(old)
            _rebase(self, old, node)
            return self
        return self._write(old, old._value, node._value)

    def _write_eager(self, value: np.ndarray) -> Tensor:
        """``value`` (this eager tensor's shape and dtype, from no gradient path) written
        into it, as ``_assign`` writes such a value: an in-place op under ``no_grad``."""
        check_not_copied_view(self)
        old = self._node
        dst = old._value
        _check_no_overlap(dst)
        return self._write(old, dst, value)

    def _write(self, old: Node, dst: np.ndarray, src: np.ndarray) -> Tensor:
        """``src`` into this eager tensor's array ``dst`` (``old``'s value; a read-only
        one is replaced by a copy first), the write recorded for the version checks."""
        if not dst.flags.writeable:
            old._value = dst = np.array(dst)
        np.copyto(dst, src)
        _note_write(old, rebased=False)
        _note_memory_write(old, dst)
        return self

    def copy_(self, src: Any) -> Tensor:
        if not isinstance(src, Tensor):
            with no_grad():
                return self._assign(Tensor._from_array(to_array(src, self.dtype)))
        if is_grad_enabled() and (src.requires_grad or self.requires_grad):
            # differentiable in ``src`` (torch's CopyBackwards); the old history gets a zero
            # gradient (not none) when it requires grad
            src = src if src.dtype is self.dtype else src._cast(self.dtype)
            if not self.requires_grad or self.is_leaf:
                return self._assign(src)
            b = builder()
            keep = b.const(False, self.shape, dt.bool_)
            return self._assign(Tensor._wrap(b.where(keep, self.node, src.node)))
        with no_grad():
            return self._assign(src)

    def zero_(self) -> Tensor:
        return self.fill_(0)

    def fill_(self, value: Any) -> Tensor:
        if isinstance(value, Tensor) and value.ndim:
            raise RuntimeError("fill_ only supports 0-dimension value tensor but got tensor "
                               f"with {value.ndim} dims")
        if is_grad_enabled() and self.requires_grad:
            if self.is_leaf:
                raise RuntimeError(LEAF_INPLACE)
            # an intermediate keeps requiring grad; its old history gets a zero gradient
            b = builder()
            keep = b.const(False, self.shape, dt.bool_)
            v = value.node if isinstance(value, Tensor) else b.const(value, (), self.dtype)
            return self._assign(Tensor._wrap(b.where(keep, self.node, v)))
        with no_grad():
            return self._assign(Tensor._wrap(builder().const(value, self.shape, self.dtype))
                                if _context.current() is not None
                                else Tensor._from_array(np.full(self.shape, value,
                                                                self.dtype.np)))

    def add(self, other: Any, alpha: Any = 1) -> Tensor:
        return self + (other if _is_one(alpha) else other * alpha)

    def sub(self, other: Any, alpha: Any = 1) -> Tensor:
        return self - (other if _is_one(alpha) else other * alpha)

    def add_(self, other: Any, alpha: Any = 1) -> Tensor:
        return self._assign(result_castable(self.add(other, alpha), self, "add_"))

    def sub_(self, other: Any, alpha: Any = 1) -> Tensor:
        return self._assign(result_castable(self.sub(other, alpha), self, "sub_"))

    def mul_(self, other: Any) -> Tensor:
        return self._assign(result_castable(self * other, self, "mul_"))

    def div_(self, other: Any) -> Tensor:
        return self._assign(result_castable(self / other, self, "div_"))

    def clamp_(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        return self._assign(result_castable(self.clamp(min, max), self, "clamp_"))

    # the pointwise combinations optimizers are written with, in ATen's evaluation order
    # (``self + (value * t1) * t2``), so user-written update rules round as PyTorch's do
    def addcmul(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        t1 = tensor1 if _is_one(value) else tensor1 * value
        return self + t1 * tensor2

    def addcdiv(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        t1 = tensor1 if _is_one(value) else tensor1 * value
        return self + t1 / tensor2

    def addcmul_(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        out = self.addcmul(tensor1, tensor2, value=value)
        return self._assign(result_castable(out, self, "addcmul_"))

    def addcdiv_(self, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
        out = self.addcdiv(tensor1, tensor2, value=value)
        return self._assign(result_castable(out, self, "addcdiv_"))

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """ATen's two rounding branches: ``self + w*(end-self)`` for ``|w| < 0.5``, else
        ``end - (end-self)*(1-w)`` (a scalar weight picks one; a tensor weight, per element)."""
        diff = end - self
        if isinstance(weight, Tensor) and weight.ndim > 0:
            # ``where`` with broadcasting, installed with the other operators by tensor_ops
            return self._where(weight.abs() < 0.5, self + diff * weight,
                               end - diff * (1 - weight))
        small = bool(abs(weight) < 0.5)  # traced: a guard on the branch, not on the value
        if small:
            return self + diff * weight
        return end - diff * (1 - weight)

    def lerp_(self, end: Any, weight: Any) -> Tensor:
        return self._assign(result_castable(self.lerp(end, weight), self, "lerp_"))

    def pow_(self, exponent: Any) -> Tensor:
        return self._assign(result_castable(self ** exponent, self, "pow_"))

    def reciprocal(self) -> Tensor:
        return 1 / self

    def reciprocal_(self) -> Tensor:
        return self._assign(result_castable(1 / self, self, "reciprocal_"))

    def rsqrt(self) -> Tensor:
        return 1 / self.sqrt()

    def maximum_(self, other: Any) -> Tensor:
        return self._assign(result_castable(self.maximum(other), self, "maximum_"))

    def __iadd__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self + other, self, "__iadd__"))

    def __isub__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self - other, self, "__isub__"))

    def __imul__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self * other, self, "__imul__"))

    def __itruediv__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self / other, self, "__itruediv__"))

    # ``a |= b`` and kin write ``a`` (torch); without these Python would rebind ``a`` to a new
    # tensor, leaving its other holders (views, the optimizer's reference) unchanged
    def __ior__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self | other, self, "__ior__"))

    def __iand__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self & other, self, "__iand__"))

    def __ixor__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self ^ other, self, "__ixor__"))

    def __ifloordiv__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self // other, self, "__ifloordiv__"))

    def __imod__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self % other, self, "__imod__"))

    def __ipow__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self ** other, self, "__ipow__"))

    def __ilshift__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self << other, self, "__ilshift__"))

    def __irshift__(self, other: Any) -> Tensor:
        return self._inplace_or_rebind(result_castable(self >> other, self, "__irshift__"))

    def _inplace_or_rebind(self, result: Tensor) -> Tensor:
        if self._trace is None and self._node.op == "input" and _context.current() is None:
            return self._assign(result)  # an eager leaf: ``_assign`` makes every check
        check_not_copied_view(self)
        if self._trace is not None and _context.current() is self._trace:
            if is_grad_enabled() and result.node.rg:
                _check_not_view(self._node)
            # a traced intermediate: rebound (the IR is functional), through the trace so
            # that a ``.data``/``.grad`` alias updates its tensor and storage sharing raises
            self._trace.assign(self, result.node)
            return self
        if self.is_leaf and self.requires_grad and is_grad_enabled():
            raise RuntimeError(LEAF_INPLACE)
        if self._trace is None and _context.current() is None and self._node.op != "input":
            if is_grad_enabled() and result._node.rg:
                _check_not_view(self._node)
            if (result._node.shape == self._node.shape and result.dtype is self.dtype
                    and result._node is not self._node):
                return self._assign(result)  # the history rebased, the memory written
            self._node = result._node
            return self
        return self._assign(result)

    # -- conversions -------------------------------------------------------------------
    @property
    def device(self) -> device:
        """Where the tensor lives: always the CPU for an eager or traced tensor (a step
        compiled with ``device="cuda"`` runs on the GPU, its tensors stay host arrays)."""
        return _CPU

    @property
    def is_cuda(self) -> bool:
        return False

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """``t.to(dtype)``, ``t.to(device, dtype)``, ``t.to(other)``, with ``non_blocking``
        and ``copy`` (as ``torch.Tensor.to``): ``self`` when nothing changes and ``copy`` is
        false; a device other than the CPU raises (see ``device_of``)."""
        _device, dtype, copy = parse_to(args, kwargs, "Tensor.to")
        if dtype is None or dtype is self.dtype:
            return self.clone() if copy else self
        return self._cast(dtype)

    def type(self, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        """``t.type()``: the type name (``"graphc.FloatTensor"``); ``t.type(dtype)`` (a dtype
        or a name such as ``"torch.DoubleTensor"``): ``t`` cast to it (``t`` itself when the
        dtype is already that)."""
        if dtype is None:
            return f"graphc.{_TYPE_NAMES[self.dtype]}"
        d = dtype_of(dtype, "Tensor.type")
        return self if d is self.dtype else self._cast(d)

    def _cast(self, dtype: dt.DType) -> Tensor:
        return Tensor._wrap(builder().cast(self.node, dtype))

    def float(self) -> Tensor:
        return self._cast( dt.float32)

    def double(self) -> Tensor:
        return self._cast( dt.float64)

    def long(self) -> Tensor:
        return self._cast( dt.int64)

    def int(self) -> Tensor:
        return self._cast( dt.int32)

    def bool(self) -> Tensor:
        return self._cast( dt.bool_)

    def half(self) -> Tensor:
        raise NotImplementedError(_no_half("float16", "Tensor.half()"))

    def bfloat16(self) -> Tensor:
        return self._cast(dt.bfloat16)

    def type_as(self, other: Tensor) -> Tensor:
        return self._cast( other.dtype)

    def clone(self, *, memory_format: Any = None) -> Tensor:
        # always a new tensor (``to(bool)`` of a bool tensor is the tensor itself, and an
        # in-place op on a "clone" then wrote the original); ``* 1``, not ``+ 0``, which
        # turns -0.0 into +0.0
        _check_memory_format(memory_format, "clone")
        return self * 1 if self.dtype is not dt.bool_ else self & True

    def contiguous(self, memory_format: Any = None) -> Tensor:
        """``self`` when its memory is in row-major order (always, for a traced tensor: the
        IR has no strides), else a row-major copy (differentiable, as ``clone``), so that an
        in-place op on it leaves the base alone, as in PyTorch."""
        _check_memory_format(memory_format, "contiguous")
        if self.is_contiguous():
            return self
        out = self.clone()
        out._node._value = np.ascontiguousarray(out._node._value)
        return out

    def is_contiguous(self, memory_format: Any = None) -> bool:
        """Whether the eager value is laid out in row-major order (views of a transpose or of
        a column slice are not); a traced tensor is always contiguous."""
        _check_memory_format(memory_format, "is_contiguous")
        if self._trace is not None or _context.current() is not None:
            return True
        return bool(self._node._value.flags.c_contiguous)

    def cpu(self) -> Tensor:
        return self



OVERLAPPING_WRITE = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation.")


def _check_no_overlap(a: np.ndarray | None) -> None:
    """An in-place write into an expanded tensor (a zero stride over more than one element)
    would write one memory location several times: torch refuses it, and so does graphc
    (it used to write a private copy, leaving the expanded tensor's base unchanged)."""
    if a is not None and not a.flags.writeable and any(
            s == 0 and n > 1 for s, n in zip(a.strides, a.shape)):
        raise RuntimeError(OVERLAPPING_WRITE)


def _check_memory_format(memory_format: Any, what: str) -> None:
    name = str(memory_format).rsplit(".", 1)[-1] if memory_format is not None else None
    if name not in (None, "contiguous_format", "preserve_format"):
        raise NotImplementedError(f"{what}(memory_format={memory_format}): only "
                                  "contiguous_format is supported (tensors are row-major)")


# -- eager in-place ops: rebased histories and version checks -------------------------------
LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."
MODIFIED_INPLACE = (
    "one of the variables needed for gradient computation has been modified by an inplace "
    "operation: [{what}], which is output 0 of {op}, is at version {version}; expected "
    "version {expected} instead. Hint: the backtrace further above shows the operation that "
    "failed to compute its gradient. The variable in question was changed in there or "
    "anywhere later. Good luck!"
)
# ops whose result is a view of their input in PyTorch (graphc's indexing, view, reshape,
# flatten, squeeze, unsqueeze, permute, transpose, expand, chunk, split, unbind build these)
VIEW_OPS = frozenset({"reshape", "slice", "permute", "transpose", "expand", "broadcast_to",
                      "squeeze", "unsqueeze"})
# ops whose backward (PyTorch's and graphc's) uses their result
SAVES_RESULT = frozenset({"exp", "exp2", "sigmoid", "tanh", "relu", "sqrt", "rsqrt",
                          "reciprocal", "softmax", "log_softmax"})


class _Writes:
    """In-place writes into one node's value: the id-clock times of the last few (node ids
    grow with creation, so a node created before a write has a smaller id), their count,
    and the nodes that read the node inside the in-place op that rebased it (they keep the
    old values, in a copy)."""

    __slots__ = ("times", "count", "exempt", "rebased")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.count = 0
        self.exempt: frozenset[int] = frozenset()
        self.rebased = False


# node -> _Writes for every eager node whose value was written in place
WRITES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# the id-clock time of the newest write ``WRITES`` holds
_LATEST_WRITE = [-1]
# node -> the set (shared, weak) of nodes whose value is the same array (``detach()``)
_STORAGE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _share_storage(src: Node, alias: Node) -> None:
    group = _STORAGE.get(src)
    if group is None:
        group = _STORAGE[src] = weakref.WeakSet([src])
    group.add(alias)
    _STORAGE[alias] = group


def _note_write(node: Node, rebased: bool, exempt: frozenset[int] = frozenset()) -> None:
    """Record an in-place write into ``node``'s value (and its ``detach()`` aliases')."""
    t = _LATEST_WRITE[0] = next(_graph._ids)
    group = _STORAGE.get(node)
    for n in (group if group is not None else (node,)):
        w = WRITES.get(n)
        if w is None:
            w = WRITES[n] = _Writes()
        w.times.append(t)
        del w.times[:-8]
        if n is node and rebased and w.count == 0:  # the old values are kept in a copy
            w.rebased, w.exempt = True, exempt
        elif not rebased:
            w.rebased, w.exempt = False, frozenset()
        w.count += 1


class _MemoryWrites:
    """The id-clock time of the last in-place write into each piece of memory, whichever
    view of it was written: PyTorch's version counter, which a base shares with its views.
    Keyed by the array that owns the memory (numpy keeps every view's ``base`` pointing at
    it); entries go with that array. Writes through ``.data`` (and its views) are not noted:
    torch gives ``.data`` a version counter of its own."""

    def __init__(self) -> None:
        self.last = _WeakIdMap()
        self.latest = -1  # the clock time of the newest write into any memory

    @staticmethod
    def owner(a: np.ndarray) -> np.ndarray:
        b = a.base
        while isinstance(b, np.ndarray):
            a, b = b, b.base
        return a

    def note(self, a: np.ndarray) -> None:
        self.last[self.owner(a)] = self.latest = next(_graph._ids)

    def since(self, a: np.ndarray | None, t: int) -> bool:
        """Whether the memory of ``a`` was written after id-clock time ``t``."""
        if a is None or not self.last:
            return False
        when = self.last.get(self.owner(a))
        return when is not None and when > t


MEMORY_WRITES = _MemoryWrites()

# tensors a pending backward recomputes from (a compiled call's parameters,
# ``graphc.compiled_grad``) -> how many such backwards: a compiled step that writes one in
# place notes the write here, so that backward raises PyTorch's in-place error as an eager
# tape would (steps writing other tensors pay one truth test per call)
WATCHED: dict[int, int] = {}  # keyed by ``id``: the records keep the tensors alive


def note_compiled_writes(tensors: Sequence[Tensor]) -> None:
    """A compiled call wrote ``tensors`` in place: note the watched ones' memory."""
    for t in tensors:
        if id(t) in WATCHED:
            MEMORY_WRITES.note(t._node._value)


def _note_memory_write(node: Node, dst: np.ndarray) -> None:
    if "untracked" not in node.attrs:
        MEMORY_WRITES.note(dst)


def view_root(node: Node) -> Node:
    """The node a chain of view ops starts from (``x[1]`` is a slice and a reshape of x)."""
    while node.op in VIEW_OPS and node.inputs:
        node = node.inputs[0]
    return node


def _check_not_view(node: Node) -> None:
    """An in-place op on a view of a tensor on a gradient path would have to rebase the
    base's history too (PyTorch's CopySlices); graphc does not, so it refuses."""
    if node.op not in VIEW_OPS or not node.rg:
        return
    if view_root(node).op == "input":
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    raise NotImplementedError(
        f"an in-place operation on a view ({node.op}) of a tensor that requires grad is not "
        "supported (its base's autograd history would have to change too); write it out of "
        "place (for example `y = x[0].relu()` and then `gc.cat`/`gc.stack` the parts) or "
        "apply the in-place op to the whole tensor")


def _rebase(t: Tensor, old: Node, new: Node) -> None:
    """``t`` (eager, value in ``old``) now holds ``new``: its history becomes ``new``'s.

    The new values go into ``t``'s array, so memory shared with ``t`` (``detach()``,
    ``numpy()``) sees them as in PyTorch; ``old`` keeps a copy of the old values, which the
    backward of the in-place op itself (``exp_`` reads its input) and of earlier ops use."""
    if new is old:
        return
    dst = old._value
    val = new._value
    if (dst is not None and dst.flags.writeable and dst.shape == val.shape
            and dst.dtype == val.dtype and not np.may_share_memory(dst, val)):
        old._value = dst.copy()
        np.copyto(dst, val)
        _note_memory_write(old, dst)
        new._value = dst
        group = _STORAGE.pop(old, None)
        if group is not None:
            group.discard(old)
            group.add(new)
            _STORAGE[new] = group
    # the nodes of the in-place op that read ``old`` (created after it, on ``new``'s path)
    exempt, stack, seen = set(), [new], set()
    while stack:
        n = stack.pop()
        if n.id in seen or n.id <= old.id:
            continue
        seen.add(n.id)
        if any(x is old for x in n.inputs):
            exempt.add(n.id)
        stack.extend(n.inputs)
    t._node = new
    _note_write(old, rebased=True, exempt=frozenset(exempt))


def _reads_input(n: Node, i: int, exact: bool) -> bool:
    """Whether ``n``'s backward needs the value of its input ``i``. ``exact``: as PyTorch
    saves it (the old value is still available); otherwise as graphc's rule may read it."""
    op = n.op
    if op in NO_SAVED_VALUES:
        return False
    if op in ("mul", "matmul"):
        return len(n.inputs) == 2 and n.inputs[1 - i].rg
    if op == "affine_norm":  # differentiated from x and the statistics, not its value
        return i != 0
    if op == "div":
        return i == 1 or n.inputs[1].rg
    if op in SAVES_RESULT:
        return not exact
    return True


def check_saved_versions(nodes: Sequence[Node]) -> None:
    """Raise PyTorch's error when a backward through ``nodes`` needs a value that an
    in-place op changed after it was used (eager ``backward()`` calls this)."""
    # a write is younger than the node written (and than the ops that read it before it):
    # a tape whose every op is younger than every write (a training loop's next forward
    # after the optimizer's update) was never written under: no per-node look-ups
    newest = max(MEMORY_WRITES.latest, _LATEST_WRITE[0])
    for n in nodes:
        if n.id < newest and n.op != "input":
            break
    else:
        return
    latest = MEMORY_WRITES.latest
    memory = MEMORY_WRITES.last and any(n.id < latest and n.op != "input" for n in nodes)
    if not WRITES and not memory:
        return
    for n in nodes:
        if not n.rg or n.op == "input":
            continue
        if memory:
            for i, x in enumerate(n.inputs):
                if MEMORY_WRITES.since(x._value, n.id) and _reads_input(n, i, True):
                    w = WRITES.get(x) or _Writes()
                    _raise_modified(x, n, w if w.times else _one_write())
        w = WRITES.get(n)
        if w is not None and n.op not in NO_SAVED_VALUES and (
                not w.rebased or n.op in SAVES_RESULT):
            _raise_modified(n, n, w)
        for i, x in enumerate(n.inputs):
            w = WRITES.get(x)
            if (w is not None and w.times[-1] > n.id and n.id not in w.exempt
                    and _reads_input(n, i, w.rebased)):
                _raise_modified(x, n, w)


def _one_write() -> _Writes:
    """A write seen only through the memory (another view of it was written)."""
    w = _Writes()
    w.times, w.count = [1 << 62], 1
    return w


def _raise_modified(x: Node, user: Node, w: _Writes) -> None:
    after = sum(1 for t in w.times if t > user.id)
    what = f"graphc.{_TYPE_NAMES.get(x.dtype, 'Tensor')} {list(x.shape)}"
    msg = MODIFIED_INPLACE.format(what=what, op=f"{x.op.capitalize()}Backward0",
                                  version=w.count, expected=w.count - after)
    if x.op == "input":  # a leaf: torch names no producing op
        msg = msg.replace(f", which is output 0 of {x.op.capitalize()}Backward0", "")
    raise RuntimeError(msg)


# -- devices and the arguments of ``.to()`` -------------------------------------------------
class device:  # noqa: N801  (torch.device's spelling)
    """``gc.device("cpu")``, ``gc.device("cuda:0")``, ``gc.device("cuda", 1)``: a place, as
    ``torch.device``: ``.type`` and ``.index``, printed ``device(type='cpu')``. It compares
    equal to another device with the same type and index, to its string (``"cpu"``) and to a
    ``torch.device`` naming the same place."""

    __slots__ = ("type", "index")
    type: str
    index: int | None

    def __init__(self, type: Any, index: int | None = None) -> None:  # noqa: A002
        if isinstance(type, device) or (hasattr(type, "type") and hasattr(type, "index")
                                         and not isinstance(type, str)):
            if index is not None:
                raise TypeError("device(): an index cannot be given with a device object")
            object.__setattr__(self, "type", str(type.type))
            object.__setattr__(self, "index", type.index)
            return
        if isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type  # torch.device(0): the first CUDA device
        if not isinstance(type, str):
            raise TypeError(f"device() expected a string or a device, got "
                            f"{type.__class__.__name__}")
        name = type.strip()
        if ":" in name:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index "
                                   f"was passed explicitly: {name}")
            name, _, idx = name.partition(":")
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: {type!r}")
            index = int(idx)
        if name not in _DEVICE_TYPES:
            raise RuntimeError(f"Expected one of {', '.join(_DEVICE_TYPES)} device type at start "
                               f"of device string: {type}")
        if index is not None and (not isinstance(index, int) or index < 0):
            raise RuntimeError(f"Device index must not be negative, got {index}")
        object.__setattr__(self, "type", name)
        object.__setattr__(self, "index", index)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("device objects are immutable")

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        idx = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{idx})"

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, TypeError):
                return False
        elif not isinstance(other, device):
            if not (hasattr(other, "type") and hasattr(other, "index")):
                return NotImplemented
            other = device(other)
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self) -> Any:
        return (device, (self.type, self.index))


_DEVICE_TYPES = ("cpu", "cuda")
_CPU = device("cpu")
_TYPE_NAMES = {dt.float32: "FloatTensor", dt.float64: "DoubleTensor", dt.int64: "LongTensor",
               dt.int32: "IntTensor", dt.bool_: "BoolTensor", dt.bfloat16: "BFloat16Tensor"}
_BY_TYPE_NAME = {v: k for k, v in _TYPE_NAMES.items()}
_HALF = {"float16": "float16", "half": "float16", "HalfTensor": "float16"}


def _no_half(name: str, what: str) -> str:
    return (f"{what}: dtype {name} is not supported by graphc (it computes in float32, "
            "float64, bfloat16, int64, int32 and bool); keep the model in float32, or use "
            "bfloat16 (gc.autocast('cpu', dtype=gc.bfloat16) for mixed precision)")


def dtype_of(d: Any, what: str) -> dt.DType:
    """A graphc dtype from a graphc, numpy or torch dtype, a Python type, or a tensor type
    name (``"torch.DoubleTensor"``); float16 raises ``NotImplementedError``."""
    if isinstance(d, dt.DType):
        return d
    if isinstance(d, str):
        base = d.rsplit(".", 1)[-1]
        if base in _BY_TYPE_NAME:
            return _BY_TYPE_NAME[base]
        if base in _HALF:
            raise NotImplementedError(_no_half(_HALF[base], what))
    elif type(d).__module__ == "torch" and type(d).__name__ == "dtype":
        name = str(d).rsplit(".", 1)[-1]
        if name in _HALF:
            raise NotImplementedError(_no_half(_HALF[name], what))
        try:
            return dt.as_dtype(name)
        except TypeError:
            raise TypeError(f"{what}: dtype {d} is not supported; expected one of float32, "
                            "float64, bfloat16, int64, int32, bool") from None
    else:
        try:
            if np.dtype(d) in (np.float16,):
                raise NotImplementedError(_no_half("float16", what))
        except TypeError:
            pass
    return dt.as_dtype(d)


def _is_device_like(a: Any) -> bool:
    if isinstance(a, device):
        return True
    if isinstance(a, str):
        return a.split(":", 1)[0].strip() in _DEVICE_TYPES
    return (not isinstance(a, (dt.DType, type, np.dtype)) and hasattr(a, "type")
            and hasattr(a, "index") and type(a).__name__ == "device")


def device_of(d: Any, what: str) -> device:
    """The device ``d`` names; only the CPU is a place graphc tensors can be."""
    dev = d if isinstance(d, device) else device(d)
    if dev.type != "cpu":
        raise NotImplementedError(
            f"{what}: graphc tensors and modules live on the CPU ({dev} was asked for); to run "
            "a training step on a GPU, compile it with gc.compile(fn, device=\"cuda\")")
    return dev


def parse_to(args: tuple, kwargs: dict[str, Any], what: str
             ) -> tuple[device | None, dt.DType | None, bool]:
    """(device, dtype, copy) from the arguments of ``torch.Tensor.to``'s three forms:
    ``to(dtype, non_blocking=False, copy=False)``, ``to(device=None, dtype=None,
    non_blocking=False, copy=False)`` and ``to(other, non_blocking=False, copy=False)``."""
    kwargs = dict(kwargs)
    kwargs.pop("memory_format", None)
    dev = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    non_blocking = kwargs.pop("non_blocking", False)
    copy = kwargs.pop("copy", False)
    if kwargs:
        raise TypeError(f"{what}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    rest = list(args)
    if rest and isinstance(rest[0], Tensor):
        other = rest.pop(0)
        dev, dtype = other.device, other.dtype
    elif rest and (rest[0] is None or _is_device_like(rest[0])
                   or isinstance(rest[0], int) and not isinstance(rest[0], bool)):
        dev = rest.pop(0)
        if rest and not isinstance(rest[0], bool):
            dtype = rest.pop(0)
    elif rest:
        dtype = rest.pop(0)
    if rest:
        non_blocking = rest.pop(0)
    if rest:
        copy = rest.pop(0)
    if rest:
        raise TypeError(f"{what}() received too many positional arguments")
    del non_blocking  # a CPU copy is synchronous
    out_dev = None if dev is None else device_of(dev, what)
    out_dtype = None if dtype is None else dtype_of(dtype, what)
    return out_dev, out_dtype, bool(copy)


# eager ``backward()``: set by graphc/engine.py when it is imported (graphc/tensor.py imports
# it), so this module does not import the autograd engine that imports it
_EAGER_BACKWARD: list[Any] = [None]

__all__ = ["Tensor", "builder", "to_array", "leaf_node", "device", "parse_to",
           "dtype_of", "device_of", "check_saved_versions", "mark_copied_view",
           "check_not_copied_view", "result_castable"]
