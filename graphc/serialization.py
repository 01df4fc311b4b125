"""Checkpoints: ``gc.save(obj, path)`` and ``gc.load(path)``.

Format (readable with numpy alone, no pickle anywhere)
------------------------------------------------------
A checkpoint is an uncompressed ``.npz`` archive (a zip of ``.npy`` files), written and read
with ``allow_pickle=False``:

- ``__graphc__``: a 0-d unicode array holding a JSON document
  ``{"format": "graphc.checkpoint", "version": 1, "root": <node>}``;
- ``a0``, ``a1``, ...: one entry per array in the saved object.

The document refers to entries by name, so readers must not assume the ``aN`` names: the
ahead-of-time C libraries (``graphc/aot_c.py``) name entries after their state tensors
(``model.0.weight``) so that C code finds them without parsing JSON.

``<node>`` is JSON. ``null``, booleans, integers, finite floats and strings stand for
themselves; lists are JSON lists; everything else is an object with one ``$``-key:

- ``{"$array": "a3"}``: the numpy array stored as entry ``a3`` (a ``Tensor`` is saved as its
  array and loads as a numpy array, which ``load_state_dict`` accepts);
- ``{"$scalar": "a4"}``: a numpy scalar (stored as a 0-d array, loaded as a numpy scalar);
- ``{"$float": "nan" | "inf" | "-inf"}``: a non-finite Python float;
- ``{"$tuple": [...]}``: a tuple;
- ``{"$dict": [[key, value], ...]}``: a dict, in order, keys encoded as nodes (so integer
  keys, as in an optimizer's ``state``, come back as integers);
- ``{"$counter": [[key, count], ...]}``: a ``collections.Counter`` (``MultiStepLR``).

Reading one with numpy only::

    z = np.load(path, allow_pickle=False)
    doc = json.loads(str(z["__graphc__"]))

Writes are atomic: the archive is written to a temporary file in the destination's
directory, flushed and fsync'ed, then moved over ``path`` with ``os.replace``. A writer that
fails midway removes its temporary file and leaves any previous checkpoint intact.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from typing import IO, Any

import numpy as np

from .tensor import Tensor

__all__ = ["save", "load"]

_META = "__graphc__"
_FORMAT = "graphc.checkpoint"
_VERSION = 1


def _encode(obj: Any, arrays: dict[str, np.ndarray], where: str) -> Any:
    """The JSON node for ``obj``; arrays are collected into ``arrays``."""
    if isinstance(obj, np.generic):  # before float: np.float64 subclasses float
        return _encode_array(obj, arrays, where, "$scalar")
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return {"$float": "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")}
    if isinstance(obj, Tensor):
        obj = obj.numpy()
    if isinstance(obj, np.ndarray):
        return _encode_array(obj, arrays, where, "$array")
    if isinstance(obj, Counter):
        return {"$counter": [[_encode(k, arrays, f"{where} key"),
                              _encode(v, arrays, f"{where}[{k!r}]")] for k, v in obj.items()]}
    if isinstance(obj, dict):
        return {"$dict": [[_encode(k, arrays, f"{where} key"),
                           _encode(v, arrays, f"{where}[{k!r}]")] for k, v in obj.items()]}
    if isinstance(obj, list):
        return [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, tuple):
        return {"$tuple": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]}
    raise TypeError(f"gc.save: {where}: cannot save an object of type {type(obj).__name__} "
                    "(supported: dict, list, tuple, numpy arrays, Tensors, numbers, strings, "
                    "None)")


def _encode_array(obj: Any, arrays: dict[str, np.ndarray], where: str, tag: str
                  ) -> dict[str, str]:
    arr = np.asarray(obj)
    if arr.dtype.hasobject:
        raise TypeError(f"gc.save: {where}: arrays of Python objects cannot be saved "
                        "without pickle")
    name = f"a{len(arrays)}"
    arrays[name] = arr  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    return {tag: name}


def _decode(node: Any, z: Any) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(v, z) for v in node]
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError(f"gc.load: malformed checkpoint node {node!r}")
    (tag, body), = node.items()
    if tag == "$array":
        return np.array(z[body])
    if tag == "$scalar":
        return np.array(z[body])[()]
    if tag == "$float":
        return float(body)
    if tag == "$tuple":
        return tuple(_decode(v, z) for v in body)
    if tag == "$dict":
        return {_hashable(_decode(k, z)): _decode(v, z) for k, v in body}
    if tag == "$counter":
        return Counter({_hashable(_decode(k, z)): _decode(v, z) for k, v in body})
    raise ValueError(f"gc.load: unknown checkpoint node tag {tag!r}")


def _hashable(k: Any) -> Any:
    return k.item() if isinstance(k, np.generic) else k


def _write_archive(f: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    """Write the ``.npz`` archive to an open binary file (the step a crash can interrupt)."""
    np.savez(f, **arrays)


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` (nested dicts/lists/tuples of arrays, Tensors, numbers, strings, None) to
    ``path`` atomically, in the numpy-readable format described in this module's docstring.

    The name is used as given (no extension is added).
    """
    arrays: dict[str, np.ndarray] = {}
    root = _encode(obj, arrays, "obj")
    doc = json.dumps({"format": _FORMAT, "version": _VERSION, "root": root},
                     allow_nan=False)
    arrays = {_META: np.array(doc), **arrays}
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_archive(f, arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    """Persist the rename itself (best effort: not every platform can open a directory)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def load(path: str | os.PathLike[str] | IO[bytes]) -> Any:
    """Read a checkpoint written by ``save``; arrays come back as numpy arrays."""
    with np.load(path, allow_pickle=False) as z:
        if _META not in z.files:
            raise ValueError(f"gc.load: {path!r} is not a graphc checkpoint "
                             f"(no {_META!r} entry)")
        doc = json.loads(str(z[_META]))
        if doc.get("format") != _FORMAT:
            raise ValueError(f"gc.load: {path!r}: unknown format {doc.get('format')!r}")
        if doc.get("version", 0) > _VERSION:
            raise ValueError(f"gc.load: {path!r}: checkpoint version {doc['version']} is newer "
                             f"than this graphc supports ({_VERSION})")
        return _decode(doc["root"], z)
