"""The on-disk compile cache: a second process reuses object code; a damaged, swapped or
forged entry is recompiled (never loaded); the cache directory must be private.

``GRAPHC_FUZZ_CASES=N`` raises the number of random entry mutations the in-process fuzz test
tries (default 300, a fraction of a second; the long profile is e.g.
``GRAPHC_FUZZ_CASES=100000``); the end-to-end fuzz test (marked slow: one process per case)
takes ``GRAPHC_CACHE_E2E_CASES`` (default 6). ``GRAPHC_FUZZ_SEED`` sets the seed.
"""

import os
import random
import shutil
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from graphc.codegen import options

from graphc.runtime import cache

SCRIPT = r'''
import sys, numpy as np, graphc as gc
from graphc import nn, optim
w = int(sys.argv[1]) if len(sys.argv) > 1 else 2
m = nn.Linear(3, w)
opt = optim.SGD(m.parameters(), lr=0.1)
@gc.compile(example_args=(np.ones((4, 3), np.float32), np.ones((4, w), np.float32)))
def step(x, y):
    loss = nn.functional.mse_loss(m(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
exe = step.variants[0].exe
print("HIT" if exe.cache_hit else "MISS", step(np.ones((4, 3), np.float32),
      np.zeros((4, w), np.float32)).item())
'''


def _run(env, *args):
    out = subprocess.run([sys.executable, "-c", SCRIPT, *map(str, args)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"exit status {out.returncode}\n{out.stderr[-3000:]}"
    return out.stdout.split()


@pytest.mark.slow
def test_second_process_hits_cache_and_computes_the_same(tmp_path):
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path)}
    first = _run(env)
    second = _run(env)
    assert first[0] == "MISS" and second[0] == "HIT"
    assert first[1] == second[1]
    # a corrupt entry is ignored (recompiled), never loaded
    for f in [*tmp_path.glob("*.o"), *tmp_path.glob("*.deps")]:
        f.write_bytes(b"garbage")
    third = _run(env)
    assert third[0] == "MISS" and third[1] == first[1]


@pytest.mark.slow
def test_cache_can_be_disabled(tmp_path):
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path), "GRAPHC_CACHE": "0"}
    assert _run(env)[0] == "MISS"
    assert _run(env)[0] == "MISS"
    assert not any(tmp_path.iterdir())


LIB_SCRIPT = r'''
import sys, numpy as np, graphc as gc
from graphc import nn, optim
w = int(sys.argv[1])
m = nn.Sequential(nn.Linear(20, w), nn.ReLU(), nn.Linear(w, 3))
opt = optim.SGD(m.parameters(), lr=0.1)
x, y = np.ones((8, 20), np.float32), np.zeros(8, np.int64)
@gc.compile(example_args=(x, y))
def step(a, b):
    loss = nn.functional.cross_entropy(m(a), b)
    opt.zero_grad(); loss.backward(); opt.step()
    return loss
print("HIT" if step.variants[0].exe.cache_hit else "MISS", step(x, y).item())
'''


@pytest.mark.slow
def test_steps_with_the_same_gemm_tiles_share_one_library_object(tmp_path):
    """GEMM tiles and kernel modules are cached by content: a second model of another width
    compiles only what differs and links the tile objects the first one left."""
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(tmp_path)}

    def run(width):
        out = subprocess.run([sys.executable, "-c", LIB_SCRIPT, str(width)], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    def shared_keys():
        """Step key -> the keys of the shared objects its .deps lists (after the MAC)."""
        from graphc.runtime import cache

        head = len(cache._MAGIC) + cache._MAC_LEN
        return {f.stem: set(f.read_bytes()[head:].decode("ascii").split())
                for f in tmp_path.glob("*.deps")}

    a = run(64)
    objs = {f.name for f in tmp_path.glob("*.o")}
    (step_a, deps_a), = shared_keys().items()
    # besides the step's objects: the thread pool's (``graphc.runtime.pool``), when it runs
    pool = {f for f in objs if f[:-2] != step_a and f[:-2] not in deps_a}
    assert len(pool) <= 1, pool
    objs -= pool
    assert a[0] == "MISS" and len(objs) == 1 + len(deps_a) >= 3  # entry, tile(s), kernels
    b = run(96)  # same tiles: every N (20, 3, 64 or 96) picks the same tile shapes
    new = {f.name for f in tmp_path.glob("*.o")} - objs - pool
    deps_b = next(d for k, d in shared_keys().items() if k != step_a)
    reused = {k for k in deps_a & deps_b if f"{k}.o" in objs}
    assert b[0] == "MISS" and reused  # the GEMM tile objects, at least
    assert len(new) == 1 + len(deps_b - deps_a)  # its own entry and what differs
    assert run(64) == ["HIT", a[1]]
    # without its shared objects the step is recompiled, never linked half-way
    for f in objs:
        deps = tmp_path / f.replace(".o", ".deps")
        if not deps.exists():
            (tmp_path / f).unlink()
    assert run(64) == ["MISS", a[1]]


# ---------------------------------------------------------------------------------------
# damaged, swapped and forged entries (issue: they crashed LLVM or ran as the step)
# ---------------------------------------------------------------------------------------

def _listed(deps: Path) -> set[str]:
    """The keys a step's .deps entry lists (its payload, after the header and MAC)."""
    head = len(cache._MAGIC) + cache._MAC_LEN
    return set(deps.read_bytes()[head:].decode("ascii").split())


def _entries(d: Path) -> tuple[Path, Path, Path]:
    """(the step's object, its .deps, one shared object it links: a GEMM tile or a module of
    kernels) in a one-step cache dir."""
    deps = next(d.glob("*.deps"))
    step = deps.with_suffix(".o")
    lib = next(f for f in sorted(d.glob("*.o")) if f.stem in _listed(deps))
    return step, deps, lib


def _pool_entries(d: Path) -> list[Path]:
    """The objects of a cache dir that belong to no step: the thread pool's
    (``graphc.runtime.pool``), cached by target like a step."""
    steps = {f.stem for f in d.glob("*.deps")}
    listed = set().union(*(_listed(f) for f in d.glob("*.deps")))
    return [f for f in d.glob("*.o") if f.stem not in steps | listed]


def _flip_middle_bit(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x10
    p.write_bytes(bytes(b))


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])


CORRUPTIONS = {
    "truncated_object": lambda d, other: _truncate(_entries(d)[0]),
    "bit_flipped_object": lambda d, other: _flip_middle_bit(_entries(d)[0]),
    "empty_deps": lambda d, other: _entries(d)[1].write_bytes(b""),
    "truncated_library": lambda d, other: _truncate(_entries(d)[2]),
    # another step's (valid) object under this step's name: ran as the step before
    "swapped_object": lambda d, other: shutil.copyfile(_entries(other)[0], _entries(d)[0]),
}


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """A cache holding the width-2 step (and its result), and one holding the width-5 step."""
    a, b = tmp_path_factory.mktemp("cache_a"), tmp_path_factory.mktemp("cache_b")
    first = _run({**os.environ, "GRAPHC_CACHE_DIR": str(a)}, 2)
    assert first[0] == "MISS"
    assert _run({**os.environ, "GRAPHC_CACHE_DIR": str(b)}, 5)[0] == "MISS"
    return a, b, first[1]


@pytest.mark.slow
@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_damaged_or_swapped_entry_is_recompiled_and_replaced(how, populated, tmp_path):
    """Each of these made every later process SIGSEGV/abort inside LLVM, or (swapped) run
    another step's code; now the entry fails its MAC, is recompiled and replaced."""
    a, b, loss = populated
    d = tmp_path / "cache"
    shutil.copytree(a, d)
    CORRUPTIONS[how](d, b)
    env = {**os.environ, "GRAPHC_CACHE_DIR": str(d)}
    assert _run(env, 2) == ["MISS", loss]
    # the bad entry was replaced by a good one: every entry verifies again
    step, deps, lib = _entries(d)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHC_CACHE_DIR", str(d))
        assert cache.load(step.stem) is not None and cache.load(lib.stem) is not None
        listed = cache.load(step.stem, ".deps").decode().split()
        assert lib.stem in listed and all(cache.load(k) is not None for k in listed)
    if how == "swapped_object":
        assert _run(env, 2) == ["HIT", loss]


def _fake_object(rng: random.Random, n: int) -> bytes:
    return b"\x7fELF" + bytes(rng.getrandbits(8) for _ in range(n))


def _mutations(rng: random.Random, data: bytes, other: bytes):
    """Random ways to damage a stored entry file (every one changes its bytes)."""
    n = len(data)
    kind = rng.choice(["truncate", "flip", "append", "splice", "other", "zero"])
    if kind == "truncate":
        out = data[: rng.randrange(n)]
    elif kind == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(n)] ^= 1 << rng.randrange(8)
        out = bytes(b)
    elif kind == "append":
        out = data + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))
    elif kind == "splice":
        i = rng.randrange(n)
        out = data[:i] + bytes([rng.getrandbits(8)]) * rng.randint(1, 8) + data[i + 1:]
    elif kind == "other":  # another entry's complete, valid file
        out = other
    else:
        out = b"\0" * rng.randint(0, n)
    return kind, out


def test_fuzz_every_changed_entry_is_rejected_and_removed(tmp_path, monkeypatch):
    """The in-process guard the end-to-end tests rely on: whatever happens to an entry's
    bytes, ``load`` returns None (never the damaged payload) and deletes the file; a good
    entry always loads. No LLVM involved, so thousands of cases take a second."""
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    rng = random.Random(int(os.environ.get("GRAPHC_FUZZ_SEED", "0")))
    cases = int(os.environ.get("GRAPHC_FUZZ_CASES", "300"))
    k1, k2 = "0123456789abcdef0123456789abcdef01234567", "f" * 40
    tried: dict[str, int] = {}
    for _ in range(cases):
        suffix = rng.choice([".o", ".deps"])
        payload = (_fake_object(rng, rng.randint(0, 300)) if suffix == ".o"
                   else k2.encode() * rng.randint(0, 2))
        cache.store(k1, payload, suffix)
        cache.store(k2, payload, suffix)
        path, other = tmp_path / f"{k1}{suffix}", (tmp_path / f"{k2}{suffix}").read_bytes()
        assert cache.load(k1, suffix) == payload
        kind, bad = _mutations(rng, path.read_bytes(), other)
        if bad == path.read_bytes():
            continue
        tried[kind] = tried.get(kind, 0) + 1
        path.write_bytes(bad)
        assert cache.load(k1, suffix) is None, kind
        assert not path.exists(), kind
    assert sum(tried.values()) >= cases * 0.9, tried
    print("cache entry mutations rejected:", tried)


def test_a_copied_cache_directory_is_not_trusted(tmp_path, monkeypatch):
    """Entries made under another user's (another directory's) secret fail verification."""
    k = "ab" * 20
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(theirs))
    cache.store(k, b"\x7fELF evil code")
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(ours))
    cache.store("cd" * 20, b"\x7fELF ours")  # creates our directory and secret
    shutil.copyfile(theirs / f"{k}.o", ours / f"{k}.o")
    assert cache.load(k) is None and not (ours / f"{k}.o").exists()
    # and an entry name from a .deps list can never leave the directory
    assert cache.load("../" + "ab" * 19) is None and cache.load(k, "/../x") is None
    with pytest.raises(ValueError):
        cache.store("../x", b"")


def _cache_dir_with_warning(monkeypatch, path: Path):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(path))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d = cache.cache_dir()
    return d, [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]


def test_new_cache_directory_and_secret_are_private(tmp_path, monkeypatch):
    d, warned = _cache_dir_with_warning(monkeypatch, tmp_path / "new" / "cache")
    assert d == tmp_path / "new" / "cache" and not warned
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    cache.store("12" * 20, b"\x7fELF")
    assert stat.S_IMODE(os.stat(d / "secret.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(d / ("12" * 20 + ".o")).st_mode) == 0o600


def test_world_writable_directory_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    d, warned = _cache_dir_with_warning(monkeypatch, shared)
    assert d is None and warned and "world-writable" in warned[0]
    cache.store("12" * 20, b"\x7fELF")
    assert cache.load("12" * 20) is None
    assert not any(shared.iterdir())


def test_world_writable_parent_is_refused(tmp_path, monkeypatch):
    parent = tmp_path / "p"
    parent.mkdir()
    parent.chmod(0o777)
    d, warned = _cache_dir_with_warning(monkeypatch, parent / "cache")
    assert d is None and warned and "parent" in warned[0]


def test_sticky_shared_directory_gets_a_private_subdirectory(tmp_path, monkeypatch):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    d, warned = _cache_dir_with_warning(monkeypatch, shared)
    assert not warned and d == shared / f"graphc-{os.geteuid()}"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    # a symlink planted under our name (pointing at a directory someone else controls)
    other = tmp_path / "tmp2"
    other.mkdir()
    other.chmod(0o1777)
    (other / f"graphc-{os.geteuid()}").symlink_to(tmp_path)
    d, warned = _cache_dir_with_warning(monkeypatch, other)
    assert d is None and "not a directory" in warned[0]


def test_group_writable_own_directory_is_made_private(tmp_path, monkeypatch):
    d0 = tmp_path / "legacy"
    d0.mkdir()
    d0.chmod(0o775)
    d, warned = _cache_dir_with_warning(monkeypatch, d0)
    assert d == d0 and not warned and stat.S_IMODE(os.stat(d0).st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create files of another user")
def test_directories_and_secrets_of_another_user_are_refused(tmp_path, monkeypatch):
    nobody = 65534
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, nobody, nobody)
    d, warned = _cache_dir_with_warning(monkeypatch, theirs)
    assert d is None and "owned by uid 65534" in warned[0]
    # in a sticky shared directory, a graphc-UID pre-created by someone else
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / f"graphc-{os.geteuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, nobody, nobody)
    d, warned = _cache_dir_with_warning(monkeypatch, shared)
    assert d is None and "owned by uid 65534" in warned[0]
    # a secret key planted by someone else (so that they could forge entries)
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o700)
    (ours / "secret.key").write_bytes(b"k" * 32)
    os.chown(ours / "secret.key", nobody, nobody)
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(ours))
    with pytest.warns(RuntimeWarning, match="secret.key"):
        cache.store("34" * 20, b"\x7fELF")
    assert not (ours / ("34" * 20 + ".o")).exists()


def test_readable_secret_is_refused(tmp_path, monkeypatch):
    d = tmp_path / "c"
    d.mkdir(mode=0o700)
    (d / "secret.key").write_bytes(b"k" * 32)
    (d / "secret.key").chmod(0o644)
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(d))
    with pytest.warns(RuntimeWarning, match="secret.key"):
        assert cache.load("34" * 20) is None


@pytest.mark.slow
def test_fuzz_random_damage_end_to_end(populated, tmp_path):
    """Random damage (truncation, bit flips, zeroed or swapped files) to random entries of a
    real cache, each followed by a fresh process compiling the step: it must exit cleanly
    with the right result. ``GRAPHC_CACHE_E2E_CASES`` sets the count (default 6, ~3 s each)."""
    a, b, loss = populated
    rng = random.Random(int(os.environ.get("GRAPHC_FUZZ_SEED", "0")))
    tried: dict[str, int] = {}
    for i in range(int(os.environ.get("GRAPHC_CACHE_E2E_CASES", "6"))):
        d = tmp_path / f"c{i}"
        shutil.copytree(a, d)
        pool = _pool_entries(d)
        victim = rng.choice([f for f in [*d.glob("*.o"), *d.glob("*.deps")] if f not in pool])
        other = rng.choice([*b.glob("*.o"), *b.glob("*.deps")]).read_bytes()
        kind, bad = _mutations(rng, victim.read_bytes(), other)
        victim.write_bytes(bad)
        tried[kind] = tried.get(kind, 0) + 1
        assert _run({**os.environ, "GRAPHC_CACHE_DIR": str(d)}, 2) == ["MISS", loss], kind
    print("end-to-end cache damage cases passed:", tried)


@pytest.mark.slow
def test_a_damaged_thread_pool_object_is_rebuilt(populated, tmp_path):
    """The thread pool's cached object is verified like a step's: damaged (or replaced by
    another entry), it is rebuilt and replaced, and the step, intact, still loads from the
    cache and computes the same result."""
    a, b, loss = populated
    if not _pool_entries(a):
        pytest.skip("one thread here: no pool object is cached")
    for i, damage in enumerate([_truncate, _flip_middle_bit,
                                lambda p: p.write_bytes(_entries(b)[0].read_bytes())]):
        d = tmp_path / f"c{i}"
        shutil.copytree(a, d)
        (pool,) = _pool_entries(d)
        damage(pool)
        assert _run({**os.environ, "GRAPHC_CACHE_DIR": str(d)}, 2) == ["HIT", loss]
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("GRAPHC_CACHE_DIR", str(d))
            assert cache.load(pool.stem) is not None  # rebuilt and stored again


def test_key_follows_the_input_order_not_only_the_printed_graph() -> None:
    """The printed IR groups inputs by kind; the native table binds them in graph order. Two
    graphs that print alike but order their inputs differently must not share an object
    (a user optimizer's first trace creates its hyperparameter and state inputs in another
    order than a later trace: sharing the object read the wrong buffers, NaN parameters)."""
    import dataclasses

    import numpy as np

    import graphc as gc
    from graphc import nn, optim
    from graphc.runtime.cpu import CPUExecutable

    model = nn.Linear(2, 1)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @gc.compile
    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    step(np.ones((2, 2), np.float32))
    v = step.variants[-1]
    g = v.graph
    # move the last input of some kind to the very end: each kind's order is unchanged
    # (so is the printed graph), the table order is not
    order = list(g.inputs)
    last = next(n for n in reversed(order[:-1]) if not any(
        m.attrs["kind"] == n.attrs["kind"] for m in order[order.index(n) + 1:]))
    order.remove(last)
    order.append(last)
    g2 = dataclasses.replace(g, inputs=order)
    assert str(g2) == str(g)
    assert CPUExecutable(g2, v.sig).cache_key != v.exe.cache_key


def test_generated_python_comes_from_the_cache_and_only_when_authentic(tmp_path, monkeypatch):
    """The runner's generated Python is compiled once per cache directory (a disk-cached
    GPT step spent 20-30 ms of its first call in ``compile``); the code object is an
    authenticated entry: a changed entry is never unmarshalled, it is compiled again."""
    from graphc.runtime import runner

    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    src = "def run(a):\n    return a * 2 + 1\n"
    calls = []
    real = compile

    def counting(*a, **k):
        calls.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(runner, "compile", counting, raising=False)
    ns: dict = {}
    exec(runner._code_of(src, "<graphc runner t>"), ns)  # noqa: S102
    assert ns["run"](3) == 7 and calls == ["<graphc runner t>"]
    ns = {}
    exec(runner._code_of(src, "<graphc runner t>"), ns)  # noqa: S102
    assert ns["run"](3) == 7 and len(calls) == 1  # from the cache
    (entry,) = tmp_path.glob("*.pyc")
    data = bytearray(entry.read_bytes())
    data[-3] ^= 0xFF
    entry.write_bytes(bytes(data))
    ns = {}
    exec(runner._code_of(src, "<graphc runner t>"), ns)  # noqa: S102
    assert ns["run"](3) == 7 and len(calls) == 2  # rejected, compiled again


@pytest.mark.parametrize("switch", [o for o in options.__all__ if o != "POOL_HOLD"])
def test_every_code_generator_switch_is_part_of_the_cache_key(switch: str,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Each switch of ``codegen.options`` that changes the object code (all but
    ``POOL_HOLD``, the thread pool's run-time hold) keys the compile cache: a step compiled
    with it on never gets the objects compiled with it off, and the other way round."""
    import numpy as np

    import graphc as gc

    keys = []
    for value in (True, False):
        monkeypatch.setattr(options, switch, value)
        step = gc.compile(lambda x: gc.relu(x * 2.0 + 1.0))
        step(gc.tensor(np.ones((4, 5), np.float32)))
        keys.append(step.variants[0].exe.cache_key)
    assert keys[0] != keys[1], switch
