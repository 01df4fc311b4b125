"""Checkpoints: ``gc.save(obj, path)`` and ``gc.load(path)``.

Format (readable with numpy alone, no pickle anywhere)
------------------------------------------------------
A checkpoint is an uncompressed ``.npz`` archive (a zip of ``.npy`` files), written and read
with ``allow_pickle=False``:

- ``__graphc__``: a 0-d unicode array holding a JSON document
  ``{"format": "graphc.checkpoint", "version": 1, "root": <node>}``;
- ``a0``, ``a1``, ...: one entry per array in the saved object.

The document refers to entries by name, so readers must not assume the ``aN`` names: the
ahead-of-time C libraries (``graphc/aot/``) name entries after their state tensors
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

The container, exactly (what ``gc.load`` and the C ``NAME_load`` both accept)
----------------------------------------------------------------------------
Two readers parse these files: this module and the C loader of AOT libraries
(``graphc/aot/c/checkpoint_io.c``). They implement the same rules, listed here, so that every
file is either accepted by both with the same values or rejected by both
(``tests/test_loader_fuzz.py`` runs one corpus of crafted and mutated files through both). The
rules are what numpy's ``np.savez`` and the C writer produce, so a strict reader loses nothing
real, and everything else is refused instead of being interpreted one way by one reader and
another way by the other (a duplicate entry name used to load the first copy in C and the last
in Python):

- **Start.** The file begins with a local file header (``PK\\x03\\x04``: numpy recognizes an
  archive by its first bytes, so nothing may precede it).
- **End record.** The last 22 bytes: no archive comment (with one, readers that search for
  the record can find a fake one inside the comment); disk numbers 0, and the entry count
  on this disk equal to the total.
- **Zip64.** Used exactly when the 20 bytes before the end record are a zip64 locator (disk
  0, at most one disk), which must point at a zip64 end record (signature checked) right
  before it; its count, size and offset replace the 16/32-bit ones (this is what Python's
  ``zipfile``, and so ``np.load``, does). Every bound is checked as
  ``x > size or n > size - x``, which cannot wrap around.
- **Central directory.** Ends exactly where the (zip64) end record begins; holds exactly
  ``count`` entries (at most one per 46 bytes) and nothing after them. Each entry: its
  extra field a sequence of complete blocks; in a zip64 block (id 1) the 64-bit uncompressed
  size, compressed size and offset, in that order, for each 32-bit field that is 0xFFFFFFFF
  (and only those; a 0xFFFFFFFF field without its 64-bit value is an error); "version needed
  to extract" at most 6.3 and no flag bits but 3 and 11 (no encryption, no patch data);
  **stored** (method 0: no decompression, so no decompression bomb),
  compressed size equal to the uncompressed size; name of printable ASCII characters ending
  in ``.npy`` (``zipfile`` decodes other bytes by a flag, the C reader compares bytes);
  names unique.
- **Local header.** At the entry's offset: signature, method 0, and the same name as the
  central directory entry; the data follows the local name and extra field and lies wholly
  before the central directory; its CRC-32 equals the central directory's.
- **Entry payload: a .npy file.** Magic ``\\x93NUMPY``, version 1.0 (16-bit header length) or
  2.0/3.0 (32-bit), header length at most 4096 bytes; the header is exactly
  ``{'descr': D, 'fortran_order': F, 'shape': S, }`` followed by zero or more spaces and one
  newline (the form numpy writes), with ``F`` ``True`` or ``False``; ``S`` ``()``, ``(n,)``
  or ``(n, m, ...)`` with at most 32 decimal sizes without leading zeros (at most 18
  digits); ``D`` one of ``|b1 |i1 |u1 <i2 <i4 <i8 <u2 <u4 <u8 <f2 <f4 <f8 <c8 <c16``,
  ``<Un`` or ``|Sn`` (1 <= n < 10^8). The data is exactly ``prod(S) * itemsize`` bytes (no
  trailing bytes), in C order, or Fortran order when ``F`` is ``True``.
- **Document.** An entry ``__graphc__.npy``: a 0-d ``<U`` array holding the JSON document
  (the C loader checks its presence and type but does not parse JSON, so it accepts a file
  whose document alone is malformed; ``gc.load`` refuses it).

Every malformed file or document raises one ``ValueError`` naming the file and the entry or
document node at fault (never ``AttributeError``, ``TypeError``, ``KeyError`` or
``RecursionError``).

Bounded memory
--------------
A document may refer to one entry many times (the C writer refers to each tensor from
``tensors`` and from ``modules`` or ``optimizers``), and every reference loads a private
copy. So a small file could otherwise ask for gigabytes (1,500 references to one 1 MB
entry). ``gc.load`` counts what it builds (array bytes, plus 64 bytes per decoded node) and
raises ``ValueError`` once that passes ``max_bytes``: by default 4x the file's size, at least
16 MiB, which no file written by ``gc.save``, ``gc.aot.save_state`` or ``NAME_save`` comes
near. ``gc.load(path, max_bytes=N)`` or the environment variable ``GRAPHC_LOAD_MAX_BYTES=N``
allows more. The file itself is read once into memory; entries are stored, never inflated.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import tempfile
import zlib
from collections import Counter
from typing import IO, Any, NamedTuple

import numpy as np

from .tensor import Tensor

__all__ = ["save", "load"]

_META = "__graphc__"
_FORMAT = "graphc.checkpoint"
_VERSION = 1

_MIN_BUDGET = 16 << 20  # bytes gc.load may always build
_BUDGET_FACTOR = 4  # ... or this many times the file's size
_BUDGET_ENV = "GRAPHC_LOAD_MAX_BYTES"
_NODE_COST = 64  # bytes charged per decoded document node
_MAX_DEPTH = 100  # document nesting (optimizer state dicts are ~6 deep)
_MAX_HEADER = 4096
_MAX_NDIM = 32


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
    if arr.dtype.byteorder == ">":  # the format is little-endian (see the docstring)
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if _DESCR_RE.fullmatch(arr.dtype.str) is None:
        raise TypeError(f"gc.save: {where}: arrays of dtype {arr.dtype} cannot be saved "
                        "(supported: bool, integers, floats up to 64 bits, complex, str, bytes)")
    name = f"a{len(arrays)}"
    arrays[name] = arr  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    return {tag: name}


class _Entry(NamedTuple):
    """One ``.npy`` entry of a checked archive (the payload stays in the file image)."""

    dtype: np.dtype
    fortran: bool
    shape: tuple[int, ...]
    offset: int  # of the payload in the file image
    nbytes: int


_DESCR_RE = re.compile(r"\|b1|\|i1|\|u1|<[iu][248]|<f[248]|<c8|<c16|<U[1-9]\d{0,7}|\|S[1-9]\d{0,7}")
_DIM = r"(?:0|[1-9]\d{0,17})"
_HEADER_RE = re.compile(
    rb"\{'descr': '([^']*)', 'fortran_order': (True|False), 'shape': "
    rb"(\(\)|\(" + _DIM.encode() + rb",\)|\(" + _DIM.encode() + rb"(?:, " + _DIM.encode()
    + rb")+\)), \} *\n")


class _Malformed(ValueError):
    """A rule of the container or document format is broken (``where`` says where)."""


def _u16(b: bytes, i: int) -> int:
    return b[i] | b[i + 1] << 8


def _u32(b: bytes, i: int) -> int:
    return struct.unpack_from("<I", b, i)[0]


def _u64(b: bytes, i: int) -> int:
    return struct.unpack_from("<Q", b, i)[0]


def _read_archive(img: bytes) -> dict[str, _Entry]:
    """Every entry of the zip image ``img``, checked against the rules in the module
    docstring (the C reader in ``graphc/aot/c/checkpoint_io.c`` applies the same ones, in the same
    order). Raises ``_Malformed``."""
    n = len(img)
    if n < 22 or img[:4] != b"PK\x03\x04":
        raise _Malformed("not a zip archive (it must begin with a local file header)")
    eocd = n - 22  # no archive comment: the end record is the last 22 bytes
    if _u32(img, eocd) != 0x06054B50 or _u16(img, eocd + 20) != 0:
        raise _Malformed("no end of central directory record in the last 22 bytes (zip "
                         "archives with a comment are not checkpoints)")
    count, cd_size, cd = _u16(img, eocd + 10), _u32(img, eocd + 12), _u32(img, eocd + 16)
    if _u16(img, eocd + 4) or _u16(img, eocd + 6) or _u16(img, eocd + 8) != count:
        raise _Malformed("multi-disk zip archives are not supported")
    end = eocd
    if eocd >= 20 and _u32(img, eocd - 20) == 0x07064B50:  # zip64 locator
        z64 = _u64(img, eocd - 12)
        if _u32(img, eocd - 16) != 0 or _u32(img, eocd - 4) > 1:
            raise _Malformed("multi-disk zip archives are not supported")
        if eocd - 20 < 56 or z64 != eocd - 20 - 56 or _u32(img, z64) != 0x06064B50:
            raise _Malformed("no zip64 end record right before the zip64 locator")
        count, cd_size, cd = _u64(img, z64 + 32), _u64(img, z64 + 40), _u64(img, z64 + 48)
        end = z64
    if cd > end or cd_size != end - cd:
        raise _Malformed("the central directory does not end where the end record begins")
    if count > cd_size // 46:
        raise _Malformed(f"the central directory cannot hold {count} entries")
    entries: dict[str, _Entry] = {}
    pos = cd
    for _ in range(count):
        if 46 > end - pos or _u32(img, pos) != 0x02014B50:
            raise _Malformed("bad central directory entry")
        needed, flags = img[pos + 6], _u16(img, pos + 8)
        method, crc = _u16(img, pos + 10), _u32(img, pos + 16)
        csize, usize = _u32(img, pos + 20), _u32(img, pos + 24)
        fl, el, cl = _u16(img, pos + 28), _u16(img, pos + 30), _u16(img, pos + 32)
        off = _u32(img, pos + 42)
        if fl + el + cl > end - pos - 46:
            raise _Malformed("bad central directory entry (fields past its end)")
        raw = img[pos + 46:pos + 46 + fl]
        name = raw.decode("utf-8", "surrogateescape")
        big = [usize == 0xFFFFFFFF, csize == 0xFFFFFFFF, off == 0xFFFFFFFF]
        x, xe = pos + 46 + fl, pos + 46 + fl + el
        while x < xe:
            if xe - x < 4 or _u16(img, x + 2) > xe - x - 4:
                raise _Malformed(f"entry {name!r}: truncated extra field")
            if _u16(img, x) == 1:
                f, fe = x + 4, x + 4 + _u16(img, x + 2)
                vals = [usize, csize, off]
                for j in range(3):
                    if vals[j] == 0xFFFFFFFF and fe - f >= 8:
                        vals[j] = _u64(img, f)
                        big[j] = False
                        f += 8
                usize, csize, off = vals
            x += 4 + _u16(img, x + 2)
        if any(big):
            raise _Malformed(f"entry {name!r}: zip64 size or offset missing")
        if needed > 63 or flags & ~0x0808:
            raise _Malformed(f"entry {name!r} needs zip features checkpoints do not use "
                             f"(version {needed}, flags {flags:#06x}: encryption, patches)")
        if method != 0:
            raise _Malformed(f"entry {name!r} is compressed (method {method}); checkpoint "
                             "entries are stored uncompressed")
        if csize != usize:
            raise _Malformed(f"entry {name!r}: compressed and uncompressed sizes differ")
        if len(raw) < 5 or not raw.endswith(b".npy") or not all(32 <= c < 127 for c in raw):
            raise _Malformed(f"entry {name!r} is not a .npy file with a printable ASCII name")
        key = name[:-4]
        if key in entries:
            raise _Malformed(f"duplicate entry name {name!r}")
        if off > n - 30 or _u32(img, off) != 0x04034B50 or _u16(img, off + 8) != 0:
            raise _Malformed(f"entry {name!r}: bad local header")
        if _u16(img, off + 26) != fl or img[off + 30:off + 30 + fl] != raw:
            raise _Malformed(f"entry {name!r}: local header names another entry")
        lpos = off + 30 + fl + _u16(img, off + 28)
        if lpos > cd or csize > cd - lpos:
            raise _Malformed(f"entry {name!r}: data outside the archive's data area")
        if zlib.crc32(memoryview(img)[lpos:lpos + csize]) != crc:
            raise _Malformed(f"entry {name!r}: CRC-32 mismatch (the file is damaged)")
        entries[key] = _npy(img, lpos, csize, name)
        pos += 46 + fl + el + cl
    if pos != end:
        raise _Malformed("bytes after the last central directory entry")
    return entries


def _npy(img: bytes, start: int, size: int, name: str) -> _Entry:
    """The ``.npy`` file at ``img[start:start + size]``, checked (module docstring)."""
    if size < 10 or img[start:start + 6] != b"\x93NUMPY":
        raise _Malformed(f"entry {name!r} is not a .npy file (no magic)")
    version = (img[start + 6], img[start + 7])
    if version == (1, 0):
        hlen, hoff = _u16(img, start + 8), 10
    elif version in ((2, 0), (3, 0)) and size >= 12:
        hlen, hoff = _u32(img, start + 8), 12
    else:
        raise _Malformed(f"entry {name!r}: unsupported .npy version {version}")
    if hlen > _MAX_HEADER or hlen > size - hoff:
        raise _Malformed(f"entry {name!r}: .npy header too long")
    m = _HEADER_RE.fullmatch(img, start + hoff, start + hoff + hlen)
    if m is None:
        raise _Malformed(f"entry {name!r}: .npy header is not of the form numpy writes")
    descr = m.group(1).decode("ascii", "replace")
    if _DESCR_RE.fullmatch(descr) is None:
        raise _Malformed(f"entry {name!r}: unsupported dtype {descr!r}")
    dims = m.group(3)[1:-1].replace(b",", b" ").split()
    if len(dims) > _MAX_NDIM:
        raise _Malformed(f"entry {name!r}: more than {_MAX_NDIM} dimensions")
    shape = tuple(int(d) for d in dims)
    dtype = np.dtype(descr)
    payload = size - hoff - hlen
    if math.prod(shape) * dtype.itemsize != payload:
        raise _Malformed(f"entry {name!r}: shape {shape} of {descr} needs "
                         f"{math.prod(shape) * dtype.itemsize} bytes, the entry holds "
                         f"{payload}")
    return _Entry(dtype, m.group(2) == b"True", shape, start + hoff + hlen, payload)


class _Reader:
    """Decodes a document against a checked archive, charging what it builds to a budget."""

    def __init__(self, img: bytes, entries: dict[str, _Entry], budget: int, size: int
                 ) -> None:
        self.img, self.entries = img, entries
        self.budget, self.size, self.used = budget, size, 0

    def charge(self, nbytes: int, where: str) -> None:
        self.used += nbytes
        if self.used > self.budget:
            raise _Malformed(
                f"{where}: loading this file needs more than {self.budget} bytes (the file "
                f"has {self.size}; by default a file may make gc.load build at most "
                f"{_BUDGET_FACTOR}x its size, at least {_MIN_BUDGET >> 20} MiB); pass "
                f"gc.load(path, max_bytes=...) or set {_BUDGET_ENV} to allow more")

    def array(self, body: Any, where: str) -> np.ndarray:
        if not isinstance(body, str) or body not in self.entries:
            raise _Malformed(f"{where}: refers to a missing entry {body!r}")
        e = self.entries[body]
        self.charge(e.nbytes, where)
        flat = np.frombuffer(memoryview(self.img)[e.offset:e.offset + e.nbytes], e.dtype)
        return flat.reshape(e.shape, order="F" if e.fortran else "C").copy(order="K")

    def decode(self, node: Any, where: str, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            raise _Malformed(f"{where}: nested more than {_MAX_DEPTH} levels deep")
        self.charge(_NODE_COST + (len(node) if isinstance(node, str) else 0), where)
        if node is None or isinstance(node, (bool, int, str)):
            return node
        if isinstance(node, float):
            if not math.isfinite(node):
                raise _Malformed(f"{where}: non-finite number {node!r} (write $float)")
            return node
        if isinstance(node, list):
            return [self.decode(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(node)]
        if not isinstance(node, dict) or len(node) != 1:
            raise _Malformed(f"{where}: expected an object with one $-key, got {_brief(node)}")
        (tag, body), = node.items()
        if tag == "$array":
            return self.array(body, where)
        if tag == "$scalar":
            arr = self.array(body, where)
            if arr.ndim != 0:
                raise _Malformed(f"{where}: $scalar entry {body!r} has shape {arr.shape}")
            return arr[()]
        if tag == "$float":
            if body not in ("nan", "inf", "-inf"):
                raise _Malformed(f"{where}: $float must be 'nan', 'inf' or '-inf', got "
                                 f"{_brief(body)}")
            return float(body)
        if tag == "$tuple":
            if not isinstance(body, list):
                raise _Malformed(f"{where}: $tuple must hold a list, got {_brief(body)}")
            return tuple(self.decode(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(body))
        if tag in ("$dict", "$counter"):
            out = self.pairs(body, tag, where, depth)
            if tag == "$dict":
                return out
            for k, v in out.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise _Malformed(f"{where}[{k!r}]: a $counter count must be a number, "
                                     f"got {_brief(v)}")
            return Counter(out)
        raise _Malformed(f"{where}: unknown node tag {tag!r}")

    def pairs(self, body: Any, tag: str, where: str, depth: int) -> dict[Any, Any]:
        if not isinstance(body, list):
            raise _Malformed(f"{where}: {tag} must hold a list of [key, value] pairs, got "
                             f"{_brief(body)}")
        out: dict[Any, Any] = {}
        for i, pair in enumerate(body):
            if not isinstance(pair, list) or len(pair) != 2:
                raise _Malformed(f"{where}: {tag} item {i} is not a [key, value] pair: "
                                 f"{_brief(pair)}")
            k = _hashable(self.decode(pair[0], f"{where} key {i}", depth + 1))
            try:
                hash(k)
            except TypeError:
                raise _Malformed(f"{where}: key {i} ({type(k).__name__}) is not "
                                 "hashable") from None
            out[k] = self.decode(pair[1], f"{where}[{k!r}]", depth + 1)
        return out


def _brief(node: Any) -> str:
    text = repr(node)
    return text if len(text) <= 80 else text[:77] + "..."


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


def _budget(max_bytes: int | None, size: int) -> int:
    if max_bytes is None:
        env = os.environ.get(_BUDGET_ENV)
        if env is None:
            return max(_MIN_BUDGET, _BUDGET_FACTOR * size)
        try:
            max_bytes = int(env)
        except ValueError:
            raise ValueError(f"{_BUDGET_ENV}={env!r}: expected a number of bytes") from None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"gc.load: max_bytes must be a non-negative int, got {max_bytes!r}")
    return max_bytes


def _reject_constant(name: str) -> Any:
    raise _Malformed(f"document: non-finite number {name} (write $float)")


def load(path: str | os.PathLike[str] | IO[bytes], *, max_bytes: int | None = None) -> Any:
    """Read a checkpoint written by ``save`` (or ``NAME_save``, ``gc.aot.save_state``);
    arrays come back as numpy arrays.

    The file is checked against the format in this module's docstring, and what loading it
    may build is bounded by ``max_bytes`` (default: the ``GRAPHC_LOAD_MAX_BYTES`` environment
    variable, else 4x the file's size and at least 16 MiB). Any malformed file or document,
    or one that would need more memory, raises ``ValueError`` naming the file and the entry
    or document node; I/O errors raise ``OSError``.
    """
    if hasattr(path, "read"):
        label, img = repr(getattr(path, "name", "<file>")), path.read()
    else:
        label = repr(os.fspath(path))
        with open(path, "rb") as f:
            img = f.read()
    if not isinstance(img, bytes):
        img = bytes(img)
    budget = _budget(max_bytes, len(img))
    try:
        entries = _read_archive(img)
        if _META not in entries:
            raise _Malformed(f"not a graphc checkpoint (no {_META!r} entry)")
        meta = entries[_META]
        if meta.dtype.kind != "U" or meta.shape != ():
            raise _Malformed(f"entry {_META!r} is not a 0-d unicode array")
        reader = _Reader(img, entries, budget, len(img))
        try:
            text = str(reader.array(_META, f"entry {_META!r}")[()])
        except _Malformed:
            raise
        except Exception as e:  # noqa: BLE001 - invalid UTF-32 code points
            raise _Malformed(f"entry {_META!r}: not a valid string ({e})") from None
        try:
            doc = json.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            raise _Malformed("document: nested too deeply") from None
        except _Malformed:
            raise
        except ValueError as e:
            raise _Malformed(f"document: not valid JSON ({e})") from None
        if not isinstance(doc, dict):
            raise _Malformed(f"document: expected a JSON object, got {_brief(doc)}")
        if doc.get("format") != _FORMAT:
            raise _Malformed(f"document: unknown format {_brief(doc.get('format'))}")
        version = doc.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise _Malformed(f"document: bad version {_brief(version)}")
        if version > _VERSION:
            raise _Malformed(f"document: checkpoint version {version} is newer than this "
                             f"graphc supports ({_VERSION})")
        if "root" not in doc:
            raise _Malformed("document: no 'root'")
        return reader.decode(doc["root"], "root")
    except _Malformed as e:
        raise ValueError(f"gc.load: {label}: {e}") from None
