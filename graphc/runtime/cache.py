"""On-disk cache of compiled steps (object code keyed by what determines it).

The key hashes the optimized graph's text (which fully describes the computation: ops,
attributes, shapes with symbols, inputs and update slots), the target (CPU name, features,
vector width), the host's cache sizes (the GEMM blocking follows them), and the source of the
code generator itself, so a changed compiler never reuses
stale objects. A step's entry is its object code (``KEY.o``) and the keys of the GEMM library
objects it links against (``KEY.deps``); a GEMM library is keyed by its tile shapes and the
target, so every step with the same tiles shares one. ``GRAPHC_CACHE_DIR`` moves the cache,
``GRAPHC_CACHE=0`` turns it off. Part of ``graphc.runtime``: the executables consult it before
asking ``graphc.codegen`` for code; its key still covers the code generator's sources.

Why entries are authenticated, not just checked
-----------------------------------------------
A cache entry is machine code that the process links and jumps into, so whoever can write an
entry runs code in every later process that compiles that step, and a damaged entry (a
truncated write, a flipped bit, an emptied ``.deps``) makes LLVM's object loader crash or
abort the process, which no ``try`` can catch. Checking the ELF magic is not enough. So:

- **Every entry carries an HMAC-SHA256** (``hmac``/``hashlib``) over a domain tag, the graphc
  version, the entry's key and suffix, and the payload. It is verified before the payload is
  returned; any mismatch (damage, truncation, an entry copied under another key: a "swapped"
  object) makes :func:`load` delete the entry and report a miss, so the caller recompiles
  and :func:`store` writes a good entry in its place. Binding the key and suffix into the
  MAC means a valid object cannot be replayed as another step's.
- **The MAC key is a per-user secret** (32 random bytes, ``secrets``) kept in the cache
  directory as ``secret.key`` with mode 0600, created atomically (``os.link`` of a finished
  temporary file, so a concurrent process never reads half a key) and refused unless it is a
  regular file owned by this user that nobody else can read or write. Without the key an
  entry cannot be forged, so a cache directory copied from elsewhere (another user, a CI
  artifact, a tarball) is simply recompiled, never trusted. A plain digest would only catch
  accidents: anyone able to write an entry could also write its digest.
- **The directory must be private.** Entries live in a directory owned by this user and
  writable by nobody else (created with mode 0700; a group-writable one of ours is
  tightened), whose parent cannot be used to swap it (not world-writable, or sticky). When
  ``GRAPHC_CACHE_DIR`` names a shared directory with the sticky bit (a ``/tmp``-like
  "everyone creates their own files" directory), the cache uses a private per-user
  subdirectory ``graphc-UID`` inside it (which must itself pass the checks: one pre-created
  by someone else, or a symlink planted under that name, is refused). Any other unsafe
  directory (owned by another user, world-writable without the sticky bit, or with such a
  parent) disables the disk cache for the process with one ``RuntimeWarning`` that says
  why: failing closed costs a recompile, failing open would run someone else's code.
- **Writes are atomic**: a private temporary file (``mkstemp``: mode 0600, in the same
  directory) is written completely and then renamed over the entry with ``os.replace``, so a
  reader sees the old entry or the new one, never half of one; a crash leaves at most a
  ``*.tmp`` file, which no reader opens. Keys are validated as 40 hex digits before they
  become file names, so a ``.deps`` list can never name a path outside the directory.

What this does not defend against: a process running as the same user (it can read the key
and write the directory, and could as well edit the Python sources), or root.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import os
import re
import secrets
import stat
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path

import llvmlite

_MAGIC = b"GRAPHCC1"  # entry format: magic, 32-byte HMAC-SHA256, payload
_MAC_LEN = 32
_KEY_FILE = "secret.key"
_KEY_RE = re.compile(r"[0-9a-f]{40}")
_SUFFIX_RE = re.compile(r"\.[a-z]{1,8}")
_warned: set[str] = set()
_secrets: dict[tuple[str, int, int], bytes] = {}  # (dir, st_dev, st_ino) -> MAC key


def _graphc_version() -> str:
    try:
        from graphc import __version__
    except ImportError:  # pragma: no cover - the package is always importable in practice
        return "unknown"
    return str(__version__)


def _warn_once(directory: str, why: str) -> None:
    if directory not in _warned:
        _warned.add(directory)
        warnings.warn(f"graphc: not using the compile cache directory {directory!r}: {why}; "
                      "compiling without the on-disk cache (set GRAPHC_CACHE_DIR to a private "
                      "directory, or GRAPHC_CACHE=0 to silence this)", RuntimeWarning,
                      stacklevel=3)


def _configured_dir() -> Path | None:
    if os.environ.get("GRAPHC_CACHE", "1") == "0":
        return None
    base = os.environ.get("GRAPHC_CACHE_DIR")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "graphc" if xdg else Path.home() / ".cache" / "graphc"


def _unsafe(st: os.stat_result, uid: int) -> str | None:
    """Why a directory with this ``lstat`` cannot hold this user's entries (None: it can,
    possibly after :func:`_private_dir` removes group/other write permission)."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not by this user (uid {uid})"
    return None


def _parent_unsafe(path: Path) -> str | None:
    """Whether anyone could rename ``path`` away and put their own directory in its place
    (a world-writable parent without the sticky bit; group-writable parents are accepted:
    with per-user groups they are common and name only the user)."""
    try:
        st = os.stat(path.parent)
    except OSError as e:
        return f"cannot inspect its parent directory ({e.strerror})"
    if st.st_mode & 0o002 and not st.st_mode & stat.S_ISVTX:
        return f"its parent {str(path.parent)!r} is world-writable without the sticky bit"
    return None


def _private_dir(path: Path) -> Path | None:
    """``path`` (created 0700 if missing), or a per-user subdirectory of a shared sticky
    ``path``, checked as the module docstring says; None (and one warning) if unsafe.

    A group-writable directory of our own (made by an older graphc under a ``002`` umask,
    usual with per-user groups) is made private rather than refused: an entry someone else
    may have planted there fails its MAC anyway. A world-writable one is refused.
    """
    uid = os.geteuid()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        real = Path(os.path.realpath(path))
        st = os.stat(real)
    except OSError as e:
        _warn_once(str(path), f"cannot create or inspect it ({e.strerror})")
        return None
    if (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
            and (st.st_uid != uid or st.st_mode & 0o022)):
        # a shared "everyone creates their own files" directory: use our own subdirectory
        real = real / f"graphc-{uid}"
        try:
            real.mkdir(mode=0o700, exist_ok=True)
            st = os.lstat(real)  # a symlink planted under our name is "not a directory"
        except OSError as e:
            _warn_once(str(real), f"cannot create or inspect it ({e.strerror})")
            return None
    why = _unsafe(st, uid)
    if why is None and st.st_mode & 0o002:
        why = f"world-writable without the sticky bit (mode {stat.S_IMODE(st.st_mode):o})"
    if why is None and st.st_mode & 0o020:
        try:
            os.chmod(real, stat.S_IMODE(st.st_mode) & ~0o077)
        except OSError:
            why = f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    if why is None:
        why = _parent_unsafe(real)
    if why is not None:
        _warn_once(str(real), why)
        return None
    return real


def cache_dir() -> Path | None:
    """The directory holding this user's cache entries, or None when the disk cache is off
    (``GRAPHC_CACHE=0``) or the configured directory is not private (see the docstring)."""
    base = _configured_dir()
    return None if base is None else _private_dir(base)


def _secret(d: Path) -> bytes | None:
    """This user's MAC key for directory ``d``, created on first use (see the docstring)."""
    try:
        dst = os.stat(d)
    except OSError:
        return None
    memo = (str(d), dst.st_dev, dst.st_ino)
    if memo in _secrets:
        return _secrets[memo]
    path = d / _KEY_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = -1
    except OSError as e:
        _warn_once(str(d), f"cannot open {_KEY_FILE} ({e.strerror})")
        return None
    if fd < 0:  # create it: write a private temporary file, then link it into place
        try:
            tfd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
            try:
                os.write(tfd, secrets.token_bytes(32))
                os.fsync(tfd)
                os.close(tfd)
                try:
                    os.link(tmp, path)  # atomic, and fails if another process won the race
                except FileExistsError:
                    pass
            finally:
                os.unlink(tmp)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            _warn_once(str(d), f"cannot create {_KEY_FILE} ({e.strerror})")
            return None
    try:
        st = os.fstat(fd)
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077
            or len(data) != 32):
        _warn_once(str(d), f"{_KEY_FILE} is not a private 32-byte file owned by this user")
        return None
    _secrets[memo] = data
    return data


@lru_cache(maxsize=1)
def _compiler_fingerprint() -> str:
    """Digest of everything that decides the object code for a given graph text: llvmlite's
    version, the code generator and the IR package (the op table holds the elementwise
    lowering rules), so editing either invalidates the cache."""
    h = hashlib.sha256(llvmlite.__version__.encode())
    for name in ("graphc.codegen", "graphc.ir"):
        d = Path(importlib.util.find_spec(name).origin).resolve().parent
        for f in sorted(d.rglob("*.py")):
            h.update(f"{name}/{f.relative_to(d)}".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def key(graph_text: str, target: str) -> str:
    """The entry name of ``graph_text`` compiled for ``target``. Besides the compiler and
    the target string, it covers the host facts that tune generated code without being part
    of any target name: the data-cache sizes the GEMM blocking is derived from
    (``codegen.hostinfo``), so a cache directory shared between hosts (a home directory on
    NFS, a copied container) never hands one host an object blocked for another's caches."""
    from graphc.codegen.hostinfo import host_caches

    h = hashlib.sha256()
    for part in (_compiler_fingerprint(), target, host_caches().key(), graph_text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def _mac(secret: bytes, k: str, suffix: str, payload: bytes) -> bytes:
    """HMAC-SHA256 binding the payload to its entry name and to this graphc version."""
    m = hmac.new(secret, digestmod=hashlib.sha256)
    for part in (b"graphc-cache-entry-v1", _graphc_version().encode(), k.encode(),
                 suffix.encode(), len(payload).to_bytes(8, "little")):
        m.update(part)
        m.update(b"\0")
    m.update(payload)
    return m.digest()


def _valid_name(k: str, suffix: str) -> bool:
    return bool(_KEY_RE.fullmatch(k)) and bool(_SUFFIX_RE.fullmatch(suffix))


def load(k: str, suffix: str = ".o") -> bytes | None:
    """The payload of entry ``k`` + ``suffix`` (``.o``: object code, ``.deps``: the keys of
    the GEMM library objects a step links), or None when it is absent, the cache is off, or
    the entry fails verification (a failed entry is deleted, so the recompiled one replaces
    it)."""
    if not _valid_name(k, suffix):
        return None
    d = cache_dir()
    if d is None:
        return None
    secret = _secret(d)
    if secret is None:
        return None
    path = d / f"{k}{suffix}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read()
    except OSError:
        return None
    head = len(_MAGIC) + _MAC_LEN
    if (len(data) >= head and data[:len(_MAGIC)] == _MAGIC
            and hmac.compare_digest(data[len(_MAGIC):head],
                                    _mac(secret, k, suffix, data[head:]))):
        payload = data[head:]
        if suffix != ".o" or payload[:4] == b"\x7fELF":
            return payload
    try:  # damaged, forged or from another key: never loaded; the recompile replaces it
        os.unlink(path)
    except OSError:
        pass
    return None


def store(k: str, obj: bytes, suffix: str = ".o") -> None:
    """Write entry ``k`` + ``suffix`` atomically with its MAC (a no-op when the cache is off
    or unsafe; a read-only or full disk only costs the next process a recompile)."""
    if not _valid_name(k, suffix):
        raise ValueError(f"cache.store: invalid entry name {k!r}{suffix!r}")
    d = cache_dir()
    if d is None:
        return
    secret = _secret(d)
    if secret is None:
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + _mac(secret, k, suffix, obj) + obj)
            os.replace(tmp, d / f"{k}{suffix}")
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError:
        pass
