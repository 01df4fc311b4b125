"""AOT checkpoints: the format ``NAME_save`` / ``NAME_load`` and :func:`save_state` share.

Checkpoints are ``gc.load``-readable archives (``graphc/serialization.py``): an uncompressed
zip (stored entries, CRC-32) of ``.npy`` files and a ``__graphc__`` JSON document. The C writer
names entries after the tensors (``model.0.weight.npy``), which the format allows (the JSON
refers to entries by name), so the C reader finds tensors without parsing JSON. The document's
root is a dict::

    {"format": "graphc.aot.state", "version": 1, "name": NAME, "steps": <int>,
     "tensors": {tensor name: array or None (absent)},
     "modules": {module variable: {state_dict key: array}},
     "optimizers": {optimizer variable: optimizer.state_dict()-shaped dict},
     "hyper": {hyperparameter label: float (the values of the last step)}}

so ``model.load_state_dict(ckpt["modules"]["model"])`` and
``opt.load_state_dict(ckpt["optimizers"]["opt"])`` resume training in Python.

The zip writer and the reader are C (``graphc/aot/c/checkpoint_io.c`` and ``save_load.c``);
this module holds what depends on the step: :func:`doc_code`, the C that writes the JSON
document (``write_doc``), and :func:`save_state`, which writes the Python side's current state
in the same format so a model trained in Python continues training in C.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from ..serialization import _encode
from .ctext import cstr
from .model import AotModel, describe, variant_for

__all__ = ["doc_code", "save_state"]


class _Doc:
    """Emits C statements that append the checkpoint's JSON document to a buffer ``jb``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self._lit: list[str] = []

    def lit(self, text: str) -> None:
        self._lit.append(text)

    def flush(self) -> None:
        if self._lit:
            text = cstr("".join(self._lit))
            self.lines.append("    " * (self.depth + 1) + f"jb_lit(jb, {text});")
            self._lit = []

    def stmt(self, code: str) -> None:
        self.flush()
        self.lines.append("    " * (self.depth + 1) + code)

    def const(self, value: Any) -> None:
        self.lit(json.dumps(_encode(value, {}, "checkpoint"), allow_nan=False))

    def array(self, t: int) -> None:
        self.stmt(f"jb_array(jb, s, {t});")

    def hyper(self, k: int) -> None:
        self.stmt(f"jb_double(jb, s->last_hyper_v[{k}]);")

    def dict_(self, entries: list[tuple[Any, Any, str | None]]) -> None:
        """entries: (key, emit-callable, C condition or None); conditional ones may vanish."""
        self.lit('{"$dict": [')
        if all(c is None for _, _, c in entries):
            for i, (k, emit, _) in enumerate(entries):
                self.lit((", " if i else "") + "[")
                self.const(k)
                self.lit(", ")
                emit()
                self.lit("]")
        else:
            self.stmt("{ int first = 1;")
            self.depth += 1
            for k, emit, cond in entries:
                if cond is not None:
                    self.stmt(f"if ({cond}) {{")
                    self.depth += 1
                self.stmt('jb_lit(jb, first ? "[" : ", ["); first = 0;')
                self.const(k)
                self.lit(", ")
                emit()
                self.lit("]")
                self.flush()
                if cond is not None:
                    self.depth -= 1
                    self.stmt("}")
            self.stmt("(void)first; }")
            self.depth -= 1
        self.lit("]}")


def doc_code(m: AotModel) -> str:
    """C statements (the body of ``write_doc``) that append the checkpoint's JSON document for
    state ``s`` to buffer ``jb``: every entry that does not change is one string literal."""
    d = _Doc()
    ti = {id(t): i for i, t in enumerate(m.tensors)}
    modules: dict[str, list[tuple[str, int]]] = {}
    for i, t in enumerate(m.tensors):
        if t.module_key is not None:
            modules.setdefault(t.module_key[0], []).append((t.module_key[1], i))
    hyper_at = {h.where: k for k, h in enumerate(m.hypers)}

    def tensors() -> None:
        d.dict_([(t.name, (lambda i=i: d.array(i)), None) for i, t in enumerate(m.tensors)])

    def mods() -> None:
        d.dict_([(var, (lambda ents=ents: d.dict_(
            [(key, (lambda i=i: d.array(i)), None) for key, i in ents])), None)
            for var, ents in modules.items()])

    def group_value(gid: int, key: str, value: Any) -> None:
        if (gid, key, None) in hyper_at:
            d.hyper(hyper_at[(gid, key, None)])
        elif isinstance(value, tuple) and any((gid, key, j) in hyper_at
                                              for j in range(len(value))):
            d.lit('{"$tuple": [')
            for j, v in enumerate(value):
                d.lit(", " if j else "")
                if (gid, key, j) in hyper_at:
                    d.hyper(hyper_at[(gid, key, j)])
                else:
                    d.const(v)
            d.lit("]}")
        else:
            d.const(value)

    def optimizer(var: str, groups: list[dict[str, Any]], gids: list[int]) -> None:
        per_param: dict[int, list[tuple[str, int]]] = {}
        for t in m.tensors:
            if t.optim_key is not None and t.optim_key[0] == var:
                per_param.setdefault(t.optim_key[1], []).append((t.optim_key[2], ti[id(t)]))

        def state() -> None:
            ents = []
            for pidx, keys in sorted(per_param.items()):
                cond = " || ".join(f"s->present[{i}]" for _, i in keys)
                ents.append((pidx, (lambda keys=keys: d.dict_(
                    [(k, (lambda i=i: d.array(i)), f"s->present[{i}]") for k, i in keys])), cond))
            d.dict_(ents)

        def param_groups() -> None:
            d.lit("[")
            for gi, (grp, gid) in enumerate(zip(groups, gids)):
                d.lit(", " if gi else "")
                d.dict_([(k, (lambda gid=gid, k=k, v=v: group_value(gid, k, v)), None)
                         for k, v in grp.items()])
            d.lit("]")

        d.dict_([("state", state, None), ("param_groups", param_groups, None)])

    def optims() -> None:
        d.dict_([(var, (lambda var=var, gr=gr, gids=gids: optimizer(var, gr, gids)), None)
                 for var, gr, gids in m.optimizers])

    def hyper() -> None:
        d.dict_([(h.label, (lambda k=k: d.hyper(k)), None) for k, h in enumerate(m.hypers)])

    d.lit('{"format": "graphc.checkpoint", "version": 1, "root": ')
    d.dict_([
        ("format", lambda: d.const("graphc.aot.state"), None),
        ("version", lambda: d.const(1), None),
        ("name", lambda: d.const(m.name), None),
        ("steps", lambda: d.lit('{"$scalar": "__aot_steps__"}'), None),
        ("tensors", tensors, None),
        ("modules", mods, None),
        ("optimizers", optims, None),
        ("hyper", hyper, None),
    ])
    d.lit("}")
    d.flush()
    return "\n".join(d.lines)


def save_state(fn: Any, path: str | os.PathLike[str], name: str | None = None,
               example_args: Any = None) -> None:
    """Write the step's *current* Python state as a checkpoint ``NAME_load`` reads.

    So a model trained (or loaded) in Python can continue training in C: the archive has one
    ``.npy`` entry per present state tensor, named as in the C library, plus the step count
    (0) and the current run-time hyperparameters, in the ``gc.load`` format (written by numpy,
    atomically as ``gc.save`` does).
    """
    from ..runtime.executable import argument_array
    from ..serialization import _fsync_dir

    ex = example_args if example_args is not None else fn.example_args
    if ex is None:
        raise ValueError("example_args: needed to pick the step's variant")
    v = variant_for(fn, [argument_array(a, i, f"arg{i}") for i, a in enumerate(ex)])
    model = describe(fn, v, name or fn.name)
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for t in model.tensors:
        if t.present:
            arrays[t.name] = t.init
        entries.append([t.name, {"$array": t.name} if t.present else None])
    arrays["__aot_steps__"] = np.array(0, np.int64)
    arrays["__aot_hyper__"] = np.array([h.default for h in model.hypers], np.float64)
    root = {"$dict": [
        ["format", "graphc.aot.state"], ["version", 1], ["name", model.name],
        ["steps", {"$scalar": "__aot_steps__"}], ["tensors", {"$dict": entries}],
        ["hyper", {"$dict": [[h.label, _encode(h.default, {}, h.label)]
                             for h in model.hypers]}]]}
    doc = json.dumps({"format": "graphc.checkpoint", "version": 1, "root": root},
                     allow_nan=False)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, __graphc__=np.array(doc), **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
