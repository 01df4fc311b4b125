"""``gc.load`` on hostile files: bounded memory, and one clear ``ValueError`` naming the entry
or document node for every malformed document (never AttributeError, TypeError, KeyError or
RecursionError). The C reader and the container rules are fuzzed in
``tests/test_loader_fuzz.py``; these tests need no C compiler."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphc as gc


def write(path: Path, doc: Any, arrays: dict[str, np.ndarray] | None = None,
          compression: int = zipfile.ZIP_STORED, raw_doc: np.ndarray | None = None) -> Path:
    """A checkpoint with the document ``doc`` (JSON text if a str) and these entries."""
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with zipfile.ZipFile(path, "w", compression) as z:
        with z.open("__graphc__.npy", "w") as f:
            np.lib.format.write_array(f, np.array(text) if raw_doc is None else raw_doc)
        for k, v in (arrays or {}).items():
            with z.open(f"{k}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, v)
    return path


def ckpt(root: Any) -> dict[str, Any]:
    return {"format": "graphc.checkpoint", "version": 1, "root": root}


def _child(code: str, *args: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


# ---------------------------------------------------------------------------------------
# item 13: what a file can make gc.load allocate
# ---------------------------------------------------------------------------------------

LOAD_UNDER_LIMIT = r'''
import resource, sys, graphc as gc
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
try:
    out = gc.load(sys.argv[1])
    print("LOADED", len(out))
except ValueError as e:
    print("VALUEERROR", e)
except MemoryError:
    print("MEMORYERROR")
print("GROWTH_MB", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
'''


def _vsize_after_import() -> int:
    r = _child("import graphc, resource, os\n"
               "print(open('/proc/self/statm').read().split()[0])")
    import os
    return int(r.stdout.split()[0]) * os.sysconf("SC_PAGE_SIZE")


def test_one_entry_referenced_1500_times_is_refused_not_allocated(tmp_path: Path) -> None:
    """A 1.1 MB file referring to one 1.1 MB entry 1,500 times asked for 1.6 GB (peak RSS
    1.67 GB measured); now it stops at the budget (16 MiB for a file this small) with a
    ValueError naming the node, in a process whose address space leaves no room for 1.6 GB."""
    path = write(tmp_path / "refs.ckpt", ckpt([{"$array": "a0"}] * 1500),
                 {"a0": np.zeros(280_000, np.float32)})
    limit = _vsize_after_import() + (600 << 20)
    r = _child(LOAD_UNDER_LIMIT, str(path), str(limit))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "VALUEERROR" in r.stdout and "root[" in r.stdout and "max_bytes" in r.stdout, r.stdout
    growth = float(r.stdout.split("GROWTH_MB")[1])
    assert growth < 64, r.stdout


def test_deflated_entries_are_refused_without_inflating(tmp_path: Path) -> None:
    """A 1.5 MB deflated file inflated to 3.15 GB; entries must be stored (as gc.save, numpy's
    np.savez and the C writer write them), so nothing is ever inflated."""
    path = write(tmp_path / "deflate.ckpt", ckpt([{"$array": "a0"}, {"$array": "a0"}]),
                 {"a0": np.zeros(16 << 20, np.float32)}, compression=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(ValueError, match=r"entry '__graphc__.npy' is compressed"):
        gc.load(path)


def test_budget_override_by_keyword_and_environment(tmp_path: Path) -> None:
    path = write(tmp_path / "r.ckpt", ckpt([{"$array": "a0"}] * 20),
                 {"a0": np.ones(1 << 18, np.float32)})  # 20 x 1 MiB from a 1 MiB file
    with pytest.raises(ValueError, match="GRAPHC_LOAD_MAX_BYTES"):
        gc.load(path)
    out = gc.load(path, max_bytes=64 << 20)
    assert len(out) == 20 and out[0] is not out[1] and out[19].sum() == 1 << 18
    with pytest.raises(ValueError, match=r"root\[1\]: loading this file needs more than 2097152"):
        gc.load(path, max_bytes=2 << 20)
    code = "import sys, graphc as gc; print(len(gc.load(sys.argv[1])))"
    r = _child(code, str(path), env={"GRAPHC_LOAD_MAX_BYTES": str(64 << 20)})
    assert r.returncode == 0 and r.stdout.strip() == "20", r.stderr[-2000:]
    for bad in (-1, 1.5, "10"):
        with pytest.raises(ValueError, match="max_bytes"):
            gc.load(path, max_bytes=bad)  # type: ignore[arg-type]


def test_ordinary_large_checkpoints_are_within_the_default_budget(tmp_path: Path) -> None:
    big = np.arange(6 << 20, dtype=np.float32)  # 24 MiB: above the 16 MiB floor
    gc.save({"w": big, "v": [big[:10], 3]}, tmp_path / "big.ckpt")
    out = gc.load(tmp_path / "big.ckpt")
    np.testing.assert_array_equal(out["w"], big)


# ---------------------------------------------------------------------------------------
# item 14: malformed documents raise ValueError naming the node
# ---------------------------------------------------------------------------------------

A = {"a0": np.arange(3.0), "s0": np.array(2.0)}
NESTED = {"$dict": [["state", {"$dict": [[0, {"$dict": [["exp_avg", {"$array": "zz"}]]}]]}]]}

BAD_DOCUMENTS: list[tuple[str, Any, str]] = [
    ("document is a list", [], r"document: expected a JSON object"),
    ("document is a string", "\"x\"", r"document: expected a JSON object"),
    ("format missing", {"version": 1, "root": 1}, r"document: unknown format None"),
    ("version a string", {"format": "graphc.checkpoint", "version": "1", "root": 1},
     r"document: bad version '1'"),
    ("version a bool", {"format": "graphc.checkpoint", "version": True, "root": 1},
     r"document: bad version True"),
    ("version newer", {"format": "graphc.checkpoint", "version": 9, "root": 1},
     r"newer than this graphc supports"),
    ("root missing", {"format": "graphc.checkpoint", "version": 1}, r"document: no 'root'"),
    ("not JSON", "{", r"document: not valid JSON"),
    ("NaN literal", json.dumps(ckpt([1.0])).replace("1.0", "NaN"), r"non-finite number NaN"),
    ("1e999", json.dumps(ckpt([1.0])).replace("1.0", "1e999"), r"root\[0\]: non-finite"),
    ("huge integer", json.dumps(ckpt([1])).replace("1]", "9" * 5000 + "]"), r"not valid JSON"),
    ("$dict of a number", ckpt({"$dict": 5}), r"root: \$dict must hold a list"),
    ("$dict item not a pair", ckpt({"$dict": [[1]]}), r"root: \$dict item 0 is not a \[key"),
    ("$dict item a string", ckpt({"$dict": ["ab"]}), r"root: \$dict item 0 is not a \[key"),
    ("unhashable key", ckpt({"$dict": [[[1], 2]]}), r"root: key 0 \(list\) is not hashable"),
    ("tuple key holding a list", ckpt({"$dict": [[{"$tuple": [[1]]}, 2]]}),
     r"root: key 0 \(tuple\) is not hashable"),
    ("$array a number", ckpt({"$array": 5}), r"root: refers to a missing entry 5"),
    ("$array a list", ckpt({"$array": ["a0"]}), r"root: refers to a missing entry \['a0'\]"),
    ("$array missing, deep", ckpt(NESTED),
     r"root\['state'\]\[0\]\['exp_avg'\]: refers to a missing entry 'zz'"),
    ("$scalar of a 1-d entry", ckpt([{"$scalar": "a0"}]),
     r"root\[0\]: \$scalar entry 'a0' has shape \(3,\)"),
    ("$float a number", ckpt({"$float": 5}), r"root: \$float must be 'nan'"),
    ("$float a word", ckpt({"$float": "abc"}), r"root: \$float must be 'nan'"),
    ("$tuple of a number", ckpt({"$tuple": 5}), r"root: \$tuple must hold a list"),
    ("$counter count a string", ckpt({"$counter": [["a", "x"]]}),
     r"root\['a'\]: a \$counter count must be a number"),
    ("$counter of a dict", ckpt({"$counter": {"a": 1}}), r"root: \$counter must hold a list"),
    ("unknown tag", ckpt([{"$foo": 1}]), r"root\[0\]: unknown node tag '\$foo'"),
    ("two keys", ckpt({"a": 1, "b": 2}), r"root: expected an object with one \$-key"),
    ("empty object", ckpt({}), r"root: expected an object with one \$-key"),
    ("nested 150 deep", ckpt(json.loads("[" * 150 + "]" * 150)),
     r"nested more than 100 levels"),
]


@pytest.mark.parametrize("name,doc,match", BAD_DOCUMENTS, ids=[c[0] for c in BAD_DOCUMENTS])
def test_malformed_document_raises_value_error_naming_the_node(tmp_path: Path, name: str,
                                                               doc: Any, match: str) -> None:
    path = write(tmp_path / "bad.ckpt", doc, A)
    with pytest.raises(ValueError, match=match) as info:
        gc.load(path)
    assert str(info.value).startswith(f"gc.load: {str(path)!r}: ")


def test_document_entry_of_the_wrong_kind(tmp_path: Path) -> None:
    for raw, match in [(np.arange(3), "not a 0-d unicode array"),
                       (np.array(["{}", "{}"]), "not a 0-d unicode array"),
                       (np.frombuffer(b"\xff\xff\xff\xff", "<U1").reshape(()),
                        "not a valid string")]:
        path = write(tmp_path / "bad.ckpt", "", raw_doc=raw)
        with pytest.raises(ValueError, match=match):
            gc.load(path)


def test_deep_nesting_is_a_value_error_in_a_clean_process(tmp_path: Path) -> None:
    """100,000 nested lists raised RecursionError (and could exhaust the C stack)."""
    text = json.dumps(ckpt([])).replace("[]", "[" * 100_000 + "]" * 100_000)
    path = write(tmp_path / "deep.ckpt", text)
    code = ("import sys, graphc as gc\n"
            "try:\n    gc.load(sys.argv[1])\nexcept ValueError as e:\n    print('VALUEERROR', e)")
    r = _child(code, str(path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "VALUEERROR" in r.stdout and "nested" in r.stdout


def test_duplicate_entry_names_are_refused(tmp_path: Path) -> None:
    """numpy's reader (and so gc.load) took the last copy, the C reader the first."""
    path = write(tmp_path / "dup.ckpt", ckpt({"$array": "a0"}), {"a0": np.zeros(2)})
    with zipfile.ZipFile(path, "a") as z, pytest.warns(UserWarning, match="Duplicate"):
        with z.open("a0.npy", "w") as f:
            np.lib.format.write_array(f, np.ones(2))
    with pytest.raises(ValueError, match="duplicate entry name 'a0.npy'"):
        gc.load(path)


def test_trailing_bytes_after_an_entry_payload_are_refused(tmp_path: Path) -> None:
    """numpy ignores them, the C reader refused them: the format now refuses them in both."""
    import io
    f = io.BytesIO()
    np.lib.format.write_array(f, np.arange(3.0))
    path = tmp_path / "t.ckpt"
    with zipfile.ZipFile(path, "w") as z:
        with z.open("__graphc__.npy", "w") as g:
            np.lib.format.write_array(g, np.array(json.dumps(ckpt({"$array": "a0"}))))
        z.writestr("a0.npy", f.getvalue() + b"\0" * 8)
    with pytest.raises(ValueError, match=r"entry 'a0.npy': shape \(3,\) of <f8 needs 24 bytes"):
        gc.load(path)


def test_save_writes_only_what_load_reads(tmp_path: Path) -> None:
    out = tmp_path / "x.ckpt"
    gc.save({"be": np.arange(3, dtype=">i4"), "f": np.asfortranarray(np.ones((2, 3)))}, out)
    back = gc.load(out)
    assert back["be"].dtype == np.dtype("<i4") and back["be"].tolist() == [0, 1, 2]
    np.testing.assert_array_equal(back["f"], np.ones((2, 3)))
    with pytest.raises(TypeError, match="datetime64"):
        gc.save({"t": np.array(["2024-01-01"], dtype="datetime64[D]")}, out)
    with pytest.raises(TypeError, match="cannot be saved"):
        gc.save({"r": np.zeros(2, dtype=[("a", "<f4")])}, out)
