"""Per-variant Python call wrappers, generated as source code.

Calling a small step is dominated by Python work around the native call, so each compiled
variant gets a wrapper specialised to its signature (the way JAX and numba generate dispatch
code): argument checks are inlined comparisons, symbol values come from shapes directly,
buffer pointers are fetched only when the object in a table slot changed (identity check),
hyperparameters are written into one float64 array, and outputs are copied out of staging
buffers (cheaper than fetching a fresh array's pointer).

The wrapper raises ``Mismatch`` when the arguments or guards do not fit this variant; the
caller then selects or compiles another variant (or raises a clear error). Part of
``graphc.runtime``: it runs steps (Tensors in, Tensors out) and generates no native code.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import sympy

from graphc import amp
from graphc._context import hyper_epoch, state_epoch
from graphc._tensor import WATCHED, note_compiled_writes
from graphc.autograd import _state as grad_mode_state
from graphc.autograd import is_grad_enabled
from graphc.codegen.abi import TABLE_FIXED
from graphc.ir import shapes as sh
from graphc.runtime.executable import Mismatch, _number_like, check_shape_guards, slow_check
from graphc.tensor import Tensor, _OutNode, _ScalarOutNode

# references to a published .grad tensor and to its array that graphc itself holds when the
# wrapper tests them (parameter slot + local + getrefcount's argument; node, table cache,
# bound-buffer list + argument): more means the user kept the old gradient
_GRAD_REFS = 3
_GRAD_ARRAY_REFS = 4


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _pyexpr(e: Any, symvar: dict[sympy.Symbol, str]) -> str:
    """Python source (integer arithmetic only) for a dimension expression."""
    if isinstance(e, int):
        return str(e)
    e = sympy.sympify(e)
    r = lambda x: _pyexpr(x, symvar)  # noqa: E731
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return symvar[e]
    if e.is_Add:
        return "(" + " + ".join(r(a) for a in e.args) + ")"
    if e.is_Mul:
        num, den = sympy.fraction(e)
        if den != 1:
            return f"({r(num)} // {r(den)})"
        return "(" + " * ".join(r(a) for a in e.args) + ")"
    if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
        return f"({r(e.base)} ** {int(e.exp)})"
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if isinstance(e, sympy.floor):
            return f"({r(num)} // {r(den)})"
        return f"(-(-{r(num)} // {r(den)}))"
    if isinstance(e, sympy.Mod):
        return f"({r(e.args[0])} % {r(e.args[1])})"
    if isinstance(e, (sympy.Max, sympy.Min)):
        f = "max" if isinstance(e, sympy.Max) else "min"
        return f"{f}(" + ", ".join(r(a) for a in e.args) + ")"
    raise NotImplementedError(f"cannot evaluate shape expression {e}")


_SCALARS = (float, int, bool, str, type(None))

# array results this large get a new buffer each call, handed to the caller uncopied (see
# ``build_runner``); below it, copying out of a kept buffer is cheaper than taking an aligned
# one (Zen 4, a call returning x * 2 + 1: 64 KiB 4.5 us copied against 5.5 new, 96 KiB 5.7
# against 6.2, 128 KiB 7.3 against 5.8, 256 KiB 14.9 against 7.3)
FRESH_OUTPUT_BYTES = 1 << 17


def _remembered(v: Any, volatile: object) -> object:
    """What an option guard remembers of a value that passed its test: the value itself
    when nothing can change it in place (a number, a string, None, a tuple of those), so
    that the very same object later skips the test; else ``volatile``, which no value is
    (a tensor, a list, a tuple holding a tensor: re-tested at every check)."""
    t = type(v)
    if t in _SCALARS or (t is tuple and all(type(x) in _SCALARS for x in v)):
        return v
    return volatile


def _guard_src(cond: Any, symvar: dict[sympy.Symbol, str]) -> str:
    """Python source testing a shape guard (``Eq(lhs, rhs)``; sympy may have rewritten
    ``Mod(3*B, 6)`` as ``3*Mod(B, 2)``, so the sides are translated as they are). Anything
    else defers to the sympy check, which is exact but slow."""
    ops = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Gt: ">", sympy.Ge: ">=", sympy.Lt: "<",
           sympy.Le: "<="}
    op = ops.get(type(cond))
    if op is not None:
        try:
            return f"({_pyexpr(cond.lhs, symvar)}) {op} ({_pyexpr(cond.rhs, symvar)})"
        except NotImplementedError:
            pass
    return "False"


def _as_array(x: Any) -> np.ndarray:
    if isinstance(x, Tensor):
        if x._node.rg and is_grad_enabled():
            raise Mismatch  # a variant whose trace differentiates it (``argument_grads``)
        return x.numpy()
    return np.asarray(x)


def _grad_array(x: Any) -> np.ndarray:
    """An argument the variant traced as requiring grad: it must still be such a tensor."""
    if not (isinstance(x, Tensor) and x._node.rg):
        raise Mismatch
    return x.numpy()


def _state_lookup(ns: dict[str, Any], tag: str, ref: tuple, emit: Any) -> str:
    """Emit the lookup of ``opt.state[p][key]`` (absent: None) without creating entries;
    returns the expression naming the result."""
    opt, p, key = ref
    ns[f"{tag}S"], ns[f"{tag}P"], ns[f"{tag}K"], ns["DGET"] = opt, p, key, dict.get
    emit(f"    d = DGET({tag}S.state, {tag}P)")
    return f"(DGET(d, {tag}K) if d is not None else None)"


def _hyper_number(v: Any, name: str) -> Any:
    """A hyperparameter's value for its float64 slot; anything that is not a number (``None``,
    a string) raises here, before the native step runs, as it would eagerly."""
    t = type(v)
    if t is float or t is int:
        return v
    if _number_like(v):
        return float(v)
    raise TypeError(f"hyperparameter {name!r}: expected a number (or a one-element tensor), "
                    f"got {t.__name__}")


def _item(ns: dict[str, Any], obj: str, key: str) -> str:
    """Source reading ``obj[key]``: a param group (a dict subclass that traces its reads) is
    read through ``dict.__getitem__``, which is a C call and never traces."""
    ns["DGI"] = dict.__getitem__
    return f"DGI({obj}, {key})" if isinstance(ns[obj], dict) else f"{obj}[{key}]"


def _shape_src(shape: Any, symvar: dict[sympy.Symbol, str]) -> str:
    """A Python tuple expression for a (symbolic) shape."""
    return "(" + "".join(_pyexpr(d, symvar) + ", " for d in shape) + ")"


def _tree_src(tree: Any, outs: list[str], ns: dict[str, Any]) -> str:
    """Source that rebuilds the step's return value (tensors, tuples, lists, dicts)."""
    tag, body = tree
    if tag == "T":
        return outs[body]
    if tag in ("tuple", "list"):
        inner = "".join(_tree_src(t, outs, ns) + ", " for t in body)
        return f"({inner})" if tag == "tuple" else f"[{inner}]"
    if tag == "dict":
        return "{" + "".join(f"{k!r}: {_tree_src(v, outs, ns)}, " for k, v in body.items()) + "}"
    key = f"K{len(ns)}"
    ns[key] = body
    return key


def _code_of(src: str, filename: str) -> Any:
    """``compile(src)``, through the compile cache: Python's compiler took 20-30 ms of a
    disk-cached GPT step's first call on the runner alone. The entry is keyed by the source,
    the file name and the interpreter's bytecode version, and authenticated like every cache
    entry (``cache.load``), so only code this user's graphc generated is ever unmarshalled."""
    import importlib.util
    import marshal

    from . import cache

    k = cache.key(f"{filename}\n{src}",
                  f"python-code|{sys.version}|{importlib.util.MAGIC_NUMBER.hex()}")
    blob = cache.load(k, ".pyc")
    if blob is not None:
        try:
            return marshal.loads(blob)
        except (EOFError, ValueError, TypeError):
            pass  # not this interpreter's code object after all: compiled again below
    code = compile(src, filename, "exec")
    cache.store(k, marshal.dumps(code), ".pyc")
    return code


def build_runner(exe: Any, safe: bool = True) -> Any:
    """Generate ``run(args) -> list[np.ndarray]`` for a ``CPUExecutable``.

    ``safe=False`` leaves out the aliasing check and the interrupt-safe publishing (see
    ``runtime/guard.py``); only ``benchmarks/overhead.py`` uses it, to measure what they cost.
    """
    sig = exe.sig
    g = exe.graph
    ns: dict[str, Any] = {
        "np": np, "Mismatch": Mismatch, "_ptr": _ptr, "TBL": exe.table, "FN": exe.fn,
        "ADDR": exe.table_addr, "SYM": exe.sym_arr, "C": exe._cache, "EXE": exe,
        "Tensor": Tensor, "math": __import__("math"),
    }
    pre: list[str] = []  # helper functions defined next to ``run``
    lines = ["def run(args):"]
    emit = lines.append
    emit(f"    if len(args) != {len(sig.arg_types)}: raise Mismatch")
    ns["NDARRAY"] = np.ndarray
    ns["_as_array"], ns["_grad_array"] = _as_array, _grad_array
    symvar: dict[sympy.Symbol, str] = {}
    for i, (dtype, shape) in enumerate(sig.arg_types):
        # one condition per argument (rank, dtype, then each dimension in order, binding a
        # symbol at its first occurrence): fewer statements is what a small step pays for
        ns[f"DT{i}"] = dtype.np
        emit(f"    a{i} = args[{i}]")
        if sig.arg_grad and sig.arg_grad[i] and sig.arg_grad_checked:
            emit(f"    a{i} = _grad_array(a{i})")
        else:
            emit(f"    if type(a{i}) is not NDARRAY: a{i} = _as_array(a{i})")
        emit(f"    s{i} = a{i}.shape")
        conds = [f"len(s{i}) != {len(shape)}", f"(a{i}.dtype is not DT{i} and a{i}.dtype != DT{i})"]
        for d, p in enumerate(shape):
            if isinstance(p, int):
                conds.append(f"s{i}[{d}] != {p}")
            elif isinstance(p, sympy.Symbol) and p not in symvar:
                symvar[p] = f"S_{p.name}"
                conds.append(f"(S_{p.name} := s{i}[{d}]) < 1")
            else:
                conds.append(f"s{i}[{d}] != {_pyexpr(p, symvar)}")
        emit(f"    if {' or '.join(conds)}: raise Mismatch")
        if i in sig.arg_values:  # a bool/int the variant is specialised on (trace)
            ns[f"AV{i}"] = sig.arg_values[i]
            emit(f"    if a{i}.item() != AV{i}: raise Mismatch")
    for j, s in enumerate(exe.symbols):
        emit(f"    if LAST[{j}] != {symvar[s]}: LAST[{j}] = SYM[{j}] = {symvar[s]}")
    if sig.shape_guards:
        ns["_check_guards"] = check_shape_guards
        ns["SIG"] = sig
        ns["SYMS"] = list(exe.symbols)
        conds = " and ".join(_guard_src(c, symvar) for c, _ in sig.shape_guards)
        env = "{" + ", ".join(f"SYMS[{j}]: {symvar[s]}" for j, s in enumerate(exe.symbols))
        emit(f"    if not ({conds}): _check_guards(SIG, {env}}})")
    # structural guards
    ns["LAST"] = [None] * len(exe.symbols)  # last bound values (cheaper than reading SYM)
    ns["HL"] = [object()] * len(exe.input_nodes)  # last hyperparameter objects written
    # option guards (``group[key]`` through a test): the test runs only when the value is
    # not the very object that passed last time (immutable values only: a tensor could have
    # been changed in place), so an unchanged optimizer costs one identity check per option
    # When every group option a guard tests and every hyperparameter lives in a param group
    # whose writes move ``hyper_epoch``, both are refreshed only when it moved (or when a
    # value is a tensor, which can change in place): an unchanged optimizer costs one integer
    # comparison per call instead of one lookup per option and hyperparameter.
    hyper_objs = [sig.sources[n.attrs["name"]].ref[0] for i, n in enumerate(exe.input_nodes)
                  if i in exe.scalar_inputs and sig.sources[n.attrs["name"]].kind == "hyper"]
    spec_objs = [sig.guard_specs[k][0] for k in sig.guard_specs]
    by_epoch = bool(hyper_objs or spec_objs) and all(
        getattr(o, "_bumps_hyper_epoch", False) for o in hyper_objs + spec_objs)
    refresh: list[str] = []  # body of the refresh function (by_epoch)
    spec_keys = []
    ns["GL"] = [object()] * len(sig.struct_guards)  # the objects guard_objects last passed
    for k, (read, expected, _) in enumerate(sig.struct_guards):
        got = sig.guard_objects.get(k)
        if got is not None:  # tested only for another object than the last that passed
            ns[f"GO{k}"], ns[f"GT{k}"], ns[f"GE{k}"] = (*got, expected)
            emit(f"    v = GO{k}()")
            emit(f"    if v is not GL[{k}]:")
            emit(f"        if GT{k}(v) != GE{k}: raise Mismatch")
            emit(f"        GL[{k}] = v")
            continue
        spec = sig.guard_specs.get(k)
        if spec is not None:
            ns[f"GO{k}"], ns[f"GK{k}"], ns[f"GT{k}"], ns[f"GE{k}"] = (*spec, expected)
            spec_keys.append(k)
            continue
        ns[f"GR{k}"], ns[f"GE{k}"] = read, expected
        if read is is_grad_enabled:  # inlined: the thread-local read without a call
            ns["GMS"] = grad_mode_state
            emit(f"    if getattr(GMS, 'enabled', True) is not GE{k}: raise Mismatch")
            continue
        if read is amp.state:  # inlined likewise: the states are interned, so identity
            ns["AMS"] = amp._local
            emit(f"    if AMS.state is not GE{k}: raise Mismatch")
            continue
        gg = getattr(read, "global_guard", None)
        if gg is not None:  # a global or closure variable (``_global_guards``): the traced
            ns[f"GD{k}"], ns[f"GN{k}"], ns[f"GW{k}"] = gg  # object first, then the value
            cell = getattr(gg[0], "cell", None)
            now = f"GC{k}.cell_contents" if cell is not None else f"GD{k}.get(GN{k})"
            ns[f"GC{k}"] = cell
            emit(f"    if {now} is not GW{k} and GR{k}() != GE{k}: raise Mismatch")
            continue
        emit(f"    if GR{k}() != GE{k}: raise Mismatch")
    if spec_keys:
        ns["GV"] = [object()] * len(sig.struct_guards)
        ns["REMEMBER"] = _remembered
        # each test runs only for a value that is not the immutable object that passed it
        # last time: ``hypers`` calls this whenever a group changed, which a scheduler's
        # ``lr`` write does every step, and a test may evaluate a hyperparameter expression
        # in the interpreter (AdamW's ``betas`` and ``weight_decay`` tests in the GPT step:
        # ~50 us a call, re-testing unchanged values)
        # (a mutable value is remembered as ``VOL``, which no value is: always re-tested)
        ns["VOL"] = object()
        pre.append("def guards():")
        for k in spec_keys:
            pre.append(f"    v = {_item(ns, f'GO{k}', f'GK{k}')}")
            pre.append(f"    if v is not GV[{k}]:")
            pre.append(f"        if GT{k}(v) != GE{k}: raise Mismatch")
            pre.append(f"        GV[{k}] = REMEMBER(v, VOL)")
        if by_epoch:  # an option that is a tensor could change in place: keep re-testing
            ns["SPECK"] = spec_keys
            refresh.append("    guards()")
            refresh.append("    if any(GV[k] is VOL for k in SPECK): vol = True")
        else:
            cond = " or ".join(f"{_item(ns, f'GO{k}', f'GK{k}')} is not GV[{k}]"
                               for k in spec_keys)
            emit(f"    if {cond}: guards()")
    # guards only Python-side changes can break (requires_grad, .data, .grad, storage
    # sharing): re-run only when the state epoch moved since this wrapper last checked
    ns["EP"], ns["SEEN"], ns["SLOW"], ns["SIG_"] = state_epoch, [-1], slow_check, sig
    emit("    if EP[0] != SEEN[0]: SLOW(SIG_); SEEN[0] = EP[0]")
    if by_epoch:
        ns["HEP"], ns["HSEEN"], ns["HVOL"] = hyper_epoch, [-1], [False]
        emit("    if HEP[0] != HSEEN[0] or HVOL[0]: hypers()")
    # inputs
    for i, node in enumerate(exe.input_nodes):
        slot = TABLE_FIXED + i
        src = sig.sources[node.attrs["name"]]
        if i in exe.scalar_inputs:
            ns[f"H{i}"] = exe.scalar_inputs[i]
            if src.kind == "hyper":
                # skipped when the group holds the same immutable number as last call (a
                # tensor lr is updated in place by schedulers: never remembered, so re-read)
                ns[f"HG{i}"], ns[f"HK{i}"] = src.ref
                ns["NUM"], ns[f"HN{i}"] = _hyper_number, node.attrs["name"]
                ns["PLAIN"] = (float, int)
                if by_epoch:  # written by hypers(), run when a group changed
                    refresh.append(f"    v = {_item(ns, f'HG{i}', f'HK{i}')}")
                    refresh.append(f"    H{i}[()] = NUM(v, HN{i})")
                    refresh.append("    if type(v) not in PLAIN: vol = True")
                    continue
                emit(f"    v = {_item(ns, f'HG{i}', f'HK{i}')}")
                emit(f"    if v is not HL[{i}]: H{i}[()] = NUM(v, HN{i}); "
                     f"HL[{i}] = v if type(v) in PLAIN else None")
            elif src.kind == "oflag":
                emit(f"    H{i}[()] = {_state_lookup(ns, f'O{i}', src.ref, emit)} is not None")
            elif src.kind == "cell":  # set by the slow guards, which ran above
                ns[f"CG{i}"] = src.ref
                emit(f"    H{i}[()] = CG{i}.cell[0]")
            elif src.kind == "onum":  # a number in the optimizer state (absent: 0)
                emit(f"    v = {_state_lookup(ns, f'O{i}', src.ref, emit)}")
                emit(f"    H{i}[()] = 0.0 if v is None else v")
            else:
                emit(f"    H{i}[()] = EXE.source_value(EXE.input_nodes[{i}], args)")
            continue
        if src.kind == "arg":
            emit(f"    if a{src.ref} is not C[{slot}]: EXE.bind_input({slot}, a{src.ref})")
        elif src.kind == "tensor":
            ns[f"T{i}"] = src.ref
            emit(f"    v = T{i}._node._value")
            emit(f"    if v is not C[{slot}]: EXE.bind_input({slot}, v)")
        elif src.kind == "grad":
            ns[f"T{i}"] = src.ref
            emit(f"    v = T{i}._grad._node._value")
            emit(f"    if v is not C[{slot}]: EXE.bind_input({slot}, v)")
        elif src.kind == "ostate":  # the live buffer if it exists, else a fresh fill
            emit(f"    t = {_state_lookup(ns, f'O{i}', src.ref, emit)}")
            emit("    v = t._node._value if isinstance(t, TENSOR) else None")
            emit(f"    if v is None: v = EXE.source_value(EXE.input_nodes[{i}], args)")
            emit(f"    if v is not C[{slot}]: EXE.bind_input({slot}, v)")
        elif src.kind == "random":  # gc.rand/randn in the step: drawn for this call's sizes
            ns[f"RD{i}"] = src.ref  # a graphc.random.Draw
            emit(f"    EXE.bind_input({slot}, RD{i}({_shape_src(node.shape, symvar)}))")
        else:  # anything else: the generic path
            emit(f"    v = EXE.source_value(EXE.input_nodes[{i}], args)")
            emit(f"    if v is not C[{slot}]: EXE.bind_input({slot}, v)")
    # outputs: staging buffers sized for the current symbols
    base = TABLE_FIXED + len(exe.input_nodes)
    out_names = []
    # (an array result of FRESH_OUTPUT_BYTES or more gets a new buffer every call, which
    # the caller then owns: the kernels wrote it in place, so nothing is copied; a smaller
    # one is written into its buffer kept from call to call and copied out, cheaper than
    # allocating an aligned buffer. Decided here for a result of known size, at each call
    # for one whose size follows the batch symbols)
    ns["FRESH"] = FRESH_OUTPUT_BYTES
    fresh_of: list[str] = []  # per result: "always", "never" or "check"
    for j, o in enumerate(g.outputs):
        size = sh.numel(o.shape) * o.dtype.itemsize
        mode = ("never" if o.shape == () else "check" if not isinstance(size, int)
                else "always" if size >= FRESH_OUTPUT_BYTES else "never")
        fresh_of.append(mode)
        emit(f"    shp = {_shape_src(o.shape, symvar)}")
        if mode == "always":
            emit(f"    ob{j} = EXE.bind_output({base + j}, shp, {j})")
        else:
            fresh = f" or ob{j}.nbytes >= FRESH" if mode == "check" else ""
            emit(f"    ob{j} = C[{base + j}]")
            emit(f"    if ob{j} is None or ob{j}.shape != shp{fresh}: "
                 f"ob{j} = EXE.bind_output({base + j}, shp, {j})")
        out_names.append(f"ob{j}")
    base += len(g.outputs)
    # update targets
    for j, (slot_name, node) in enumerate(g.updates):
        sink = sig.sinks[slot_name]
        slot = base + j
        shape_src = _shape_src(node.shape, symvar)
        if sink.kind == "tensor":
            ns[f"U{j}"] = sink.ref
            emit(f"    v = U{j}._node._value")
            emit(f"    if v is not C[{slot}]: EXE.bind_target({slot}, {j}, {shape_src})")
        elif sink.kind == "grad" and sink.fresh:
            # the step cleared .grad before computing it: PyTorch hands out a new tensor, so
            # the old buffer is reused only when nothing but the parameter can see it (the
            # tensor and its array hold no references beyond graphc's own)
            ns[f"U{j}"], ns["REFC"] = sink.ref, sys.getrefcount
            emit(f"    gt = U{j}._grad")
            emit(f"    f{j} = gt is None or gt._node._value is not C[{slot}] or "
                 f"REFC(gt) > {_GRAD_REFS} or REFC(gt._node._value) > {_GRAD_ARRAY_REFS}")
            emit(f"    if f{j}: EXE.bind_target({slot}, {j}, {shape_src}, True)")
        elif sink.kind == "grad":
            ns[f"U{j}"] = sink.ref
            emit(f"    gt = U{j}._grad")
            emit(f"    f{j} = gt is None or gt._node._value is not C[{slot}]")
            emit(f"    if f{j}: EXE.bind_target({slot}, {j}, {shape_src})")
        elif sink.kind == "onum":  # a number in the optimizer state: published every call
            emit(f"    f{j} = True")
            emit(f"    if C[{slot}] is None: EXE.bind_target({slot}, {j}, ())")
        else:  # optimizer state
            emit(f"    t = {_state_lookup(ns, f'V{j}', sink.ref, emit)}")
            # not a tensor (a number a checkpoint or the user put there): a new tensor
            emit(f"    f{j} = not isinstance(t, TENSOR) or t._node._value is not C[{slot}]")
            emit(f"    if f{j}: EXE.bind_target({slot}, {j}, {shape_src})")
    # inputs that overlap state buffers are copied first (checked only after a rebinding)
    if safe:
        emit("    if EXE.rebound: EXE.resolve_aliasing()")
    # ERR[0] = -1 marks "native step not run"; the native code stores 0 when it starts and
    # cannot be interrupted, so after a signal ERR[0] == 0 means the state was committed
    # and publishing must be completed before the exception propagates (see on_interrupt)
    ns["ERR"] = memoryview(exe.err)  # item assignment cheaper than through numpy
    if safe:
        emit("    ERR[0] = -1")
    emit("    try:" if safe else "    if True:")
    emit("        rc = FN(ADDR)")
    emit("        if rc: rc = EXE.on_error(rc, args)")
    for j, (slot_name, _) in enumerate(g.updates):
        sink = sig.sinks[slot_name]
        slot = base + j
        if sink.kind in ("grad", "ostate", "onum"):  # a new buffer becomes .grad / state once
            emit(f"        if f{j}: EXE.publish({slot_name!r}, C[{slot}])")
    if any(sig.sinks[s].kind == "tensor" for s, _ in g.updates):
        # updates of strided tensors were written to buffers of their own (sink_buffer)
        ns["VIEWS"] = exe._view_sinks
        emit("        if VIEWS: EXE.commit_views()")
        # parameters a pending compiled-call backward reads (``_tensor.WATCHED``)
        ns["WATCHED"], ns["NOTE_W"] = WATCHED, note_compiled_writes
        ns["WRITTEN"] = tuple(sig.sinks[s].ref for s, _ in g.updates
                              if sig.sinks[s].kind == "tensor")
        emit("        if WATCHED: NOTE_W(WRITTEN)")
    for k, p in enumerate(sig.grads_to_clear):
        ns[f"Z{k}"] = p
        emit(f"        Z{k}._grad = None")
    if safe:
        emit("    except BaseException:")
        emit("        EXE.on_interrupt()")
        emit("        raise")
    # results: Tensor._from_output inlined (no call, the dtype known here), the fresh copy of
    # each staging buffer wrapped in a value-only node
    # (one-element results: the number, the array made only if asked for; _ScalarOutNode)
    ns["ONEW"], ns["ONODE"], ns["TNEW"], ns["TENSOR"] = (_OutNode.__new__, _OutNode,
                                                         object.__new__, Tensor)
    ns["SNODE"] = _ScalarOutNode
    outs = []
    for j, (o, name) in enumerate(zip(g.outputs, out_names)):
        ns[f"ODT{j}"] = o.dtype
        if o.shape == ():
            emit(f"    n = ONEW(SNODE); n._item = {name}.item()")
            emit(f"    n.shape = (); n.dtype = ODT{j}; n.rg = False")
        else:
            r = {"always": name, "never": f"{name}.copy()",
                 "check": f"{name} if {name}.nbytes >= FRESH else {name}.copy()"}[fresh_of[j]]
            emit(f"    r = {r}; n = ONEW(ONODE)")
            emit(f"    n.shape = r.shape; n.dtype = ODT{j}; n.rg = False; n._value = r")
        emit(f"    t{j} = TNEW(TENSOR); t{j}._node = n; t{j}._grad = None; t{j}._trace = None; "
             f"t{j}._inference = False")
        outs.append(f"t{j}")
    emit(f"    return {_tree_src(sig.output_tree, outs, ns)}")
    if by_epoch:
        pre.append("def hypers():")
        pre.append("    vol = False")
        pre.extend(refresh)
        pre.append("    HVOL[0] = vol")
        pre.append("    HSEEN[0] = HEP[0]")
    src = "\n".join(pre + lines) + "\n"
    exec(_code_of(src, f"<graphc runner {g.name}>"), ns)  # noqa: S102
    run = ns["run"]
    run.source = src
    return run
