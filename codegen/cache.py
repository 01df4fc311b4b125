"""On-disk cache of compiled steps (object code keyed by what determines it).

The key hashes the optimized graph's text (which fully describes the computation: ops,
attributes, shapes with symbols, inputs and update slots), the target (CPU name, features,
vector width), and the source of the code generator itself, so a changed compiler never reuses
stale objects. A step's entry is its object code (``KEY.o``) and the keys of the GEMM library
objects it links against (``KEY.deps``); a GEMM library is keyed by its tile shapes and the
target, so every step with the same tiles shares one. Entries are written atomically (temp
file + rename) and a corrupt, unreadable or incomplete entry is ignored (recompiled).
``GRAPHC_CACHE_DIR`` moves the cache, ``GRAPHC_CACHE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from functools import lru_cache
from pathlib import Path

import llvmlite


def cache_dir() -> Path | None:
    if os.environ.get("GRAPHC_CACHE", "1") == "0":
        return None
    base = os.environ.get("GRAPHC_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "graphc" if xdg else Path.home() / ".cache" / "graphc"


@lru_cache(maxsize=1)
def _compiler_fingerprint() -> str:
    h = hashlib.sha256(llvmlite.__version__.encode())
    here = Path(__file__).resolve().parent
    for f in sorted(here.glob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def key(graph_text: str, target: str) -> str:
    h = hashlib.sha256()
    for part in (_compiler_fingerprint(), target, graph_text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def load(k: str, suffix: str = ".o") -> bytes | None:
    """The entry ``k`` (``.o``: object code, checked to be ELF; other suffixes: raw bytes)."""
    d = cache_dir()
    if d is None:
        return None
    try:
        data = (d / f"{k}{suffix}").read_bytes()
    except OSError:
        return None
    return data if suffix != ".o" or data[:4] == b"\x7fELF" else None


def store(k: str, obj: bytes, suffix: str = ".o") -> None:
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(obj)
            os.replace(tmp, d / f"{k}{suffix}")
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only or full disk only costs the next process a recompile
