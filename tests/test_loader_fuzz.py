"""The two checkpoint readers agree on every file: ``gc.load`` (graphc/serialization.py) and
the generated C ``NAME_load`` (graphc/aot/c/checkpoint_io.c and save_load.c).

One corpus of crafted and mutated files (built here: structural zip/zip64 cases, .npy header
variants, every truncation of a C-written checkpoint, random bit flips, random header and
field mutations with consistent CRCs) is run through both. For each file either both
accept it with equal values, or both reject it (``ValueError`` from ``gc.load``, an error
code from ``NAME_load`` that leaves the state untouched). Anything else fails: another
exception type, a crash, a sanitizer report. ``gc.load`` accepting is also checked against
numpy: every file the spec accepts, ``np.load`` reads with the same values.

The C side is a small harness around the generated ``fz.c`` (the kernel and the initial
state blob are stubbed: loading does not run the step), built with
``-fsanitize=address,undefined`` when the compiler has it, so an out-of-bounds read in the
reader is a failure even when it does not crash.

Profiles: the default run tries ~2,500 files in a few seconds; ``GRAPHC_FUZZ_CASES=N`` sets
the number of cases of each random category (default 150; e.g. ``GRAPHC_FUZZ_CASES=20000``
for the long profile), ``GRAPHC_FUZZ_SEED`` the seed.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphc as gc
from graphc import nn, optim

CC = os.environ.get("CC", "cc")
CASES = int(os.environ.get("GRAPHC_FUZZ_CASES", "150"))
SEED = int(os.environ.get("GRAPHC_FUZZ_SEED", "0"))

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fz.h"

int32_t fz_kernel(void** t) { (void)t; return 0; }  /* loading never runs the step */
const unsigned char fz_init_blob[1 << 16] = {0};

static void dump(fz_state* s) {
    size_t i, k;
    for (i = 0; i < fz_num_tensors(); i++) {
        const fz_tensor_info* t = fz_tensor(i);
        const unsigned char* p = (const unsigned char*)fz_param_data(s, t->name);
        printf(" %d:", fz_is_present(s, t->name));
        for (k = 0; k < t->nbytes; k++) printf("%02x", p[k]);
    }
    printf(" %lld\n", (long long)fz_steps(s));
}

int main(int argc, char** argv) {
    static char line[8192];
    if (argc > 2 && strcmp(argv[1], "save") == 0) {
        fz_state* s = fz_create();
        size_t i, k;
        int rc;
        for (i = 0; i < fz_num_tensors(); i++) {
            const fz_tensor_info* t = fz_tensor(i);
            float* p = (float*)fz_param_data(s, t->name);
            fz_set_present(s, t->name, 1);
            for (k = 0; k < t->numel; k++) p[k] = (float)(i * 10 + k) + 0.5f;
        }
        rc = fz_save(s, argv[2]);
        fz_destroy(s);
        return rc != GRAPHC_OK;
    }
    {
        fz_state* s = fz_create();
        printf("init");
        dump(s);
        fz_destroy(s);
    }
    while (fgets(line, sizeof line, stdin)) {
        fz_state* s = fz_create();
        int rc;
        line[strcspn(line, "\n")] = 0;
        rc = fz_load(s, line);
        printf("%d", rc);
        dump(s);
        fz_destroy(s);
        fflush(stdout);
    }
    return 0;
}
"""


def _has_sanitizers(tmp: Path) -> bool:
    src, exe = tmp / "t.c", tmp / "t"
    src.write_text("int main(void) { return 0; }\n")
    r = subprocess.run([CC, "-fsanitize=address,undefined", str(src), "-o", str(exe)],
                       capture_output=True)
    return r.returncode == 0 and subprocess.run([str(exe)], capture_output=True).returncode == 0


@dataclass
class Setup:
    exe: Path
    sanitized: bool
    base_c: bytes  # a checkpoint written by fz_save (every tensor present)
    base_np: bytes  # the same model's state written by gc.aot.save_state (numpy's zip)
    base_gc: bytes  # a gc.save file (entries aN: gc.load reads it, NAME_load must refuse)
    tensors: dict[str, tuple[np.dtype, tuple[int, ...], str]]  # name -> dtype, shape, kind
    nh: int


@pytest.fixture(scope="module")
def setup(tmp_path_factory: Any) -> Setup:
    out = tmp_path_factory.mktemp("loader_fuzz")
    gc.manual_seed(0)
    m = nn.Linear(3, 2)
    opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    def step(x: Any, y: Any) -> Any:
        loss = nn.functional.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step.__globals__["model"] = m
    ex = (np.ones((4, 3), np.float32), np.ones((4, 2), np.float32))
    fn = gc.compile(step)
    gc.aot.build(fn, ex, str(out), "fz")
    (out / "harness.c").write_text(HARNESS)
    sanitized = _has_sanitizers(out)
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer",
             "-fno-sanitize-recover=all"] if sanitized else []
    exe = out / "harness"
    r = subprocess.run([CC, "-std=c99", "-g", "-O1", "-Wall", "-Wextra", *flags, f"-I{out}",
                        str(out / "harness.c"), str(out / "fz.c"), "-lm", "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe), "save", str(out / "c.ckpt")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    gc.aot.save_state(fn, out / "np.ckpt", name="fz", example_args=ex)
    doc = gc.load(out / "c.ckpt")
    params = ("model.weight", "model.bias")
    tensors = {k: (v.dtype, v.shape, "param" if k in params else "other")
               for k, v in doc["tensors"].items()}
    assert set(tensors) >= {"model.weight", "model.bias", "model.weight.grad"}, tensors
    gc.save({"tensors": doc["tensors"]}, out / "gc.ckpt")
    return Setup(exe, sanitized, (out / "c.ckpt").read_bytes(), (out / "np.ckpt").read_bytes(),
                 (out / "gc.ckpt").read_bytes(), tensors, len(doc["hyper"]))


# ---------------------------------------------------------------------------------------
# a zip writer that can break every rule on purpose (CRCs stay right unless asked)
# ---------------------------------------------------------------------------------------

def npy(arr: np.ndarray | None = None, header: bytes | None = None, payload: bytes = b"",
        version: tuple[int, int] = (1, 0)) -> bytes:
    """A .npy image: numpy's own for ``arr``, or ``header`` (raw text) + ``payload``."""
    if arr is not None:
        f = io.BytesIO()
        np.lib.format.write_array(f, arr, allow_pickle=False)
        return f.getvalue()
    assert header is not None
    size = struct.pack("<H" if version[0] == 1 else "<I", len(header) % (1 << 32)
                       if version[0] != 1 else len(header) % (1 << 16))
    return b"\x93NUMPY" + bytes(version) + size + header + payload


def hdr(descr: str = "<f4", fortran: str = "False", shape: str = "(2, 3)", pad: int = 10
        ) -> bytes:
    return (f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}"
            + " " * pad + "\n").encode()


@dataclass
class Ent:
    name: bytes
    data: bytes
    method: int = 0
    flags: int = 0
    crc: int | None = None
    local_name: bytes | None = None
    local_method: int = 0
    local_extra: bytes = b""
    central_extra: bytes = b""
    zip64: bool = False  # sizes and offset as 0xFFFFFFFF + a zip64 extra block
    csize: int | None = None
    usize: int | None = None
    offset: int | None = None
    z64_values: tuple[int, int, int] | None = None  # what the zip64 extra holds
    needed: int = 20  # "version needed to extract"


@dataclass
class Zip:
    entries: list[Ent]
    zip64_end: bool = False
    count: int | None = None
    cd_off: int | None = None
    cd_size: int | None = None
    z64_ptr: int | None = None
    z64_count: int | None = None
    z64_cd_off: int | None = None
    z64_cd_size: int | None = None
    comment: bytes = b""
    comment_len: int | None = None
    prefix: bytes = b""
    gap: bytes = b""
    cd_junk: bytes = b""
    trailer: bytes = b""
    disk: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def build(self) -> bytes:
        out = bytearray(self.prefix)
        offsets = []
        for e in self.entries:
            offsets.append(len(out))
            lname = e.name if e.local_name is None else e.local_name
            out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, e.flags, e.local_method, 0,
                               0x21, zlib.crc32(e.data) if e.crc is None else e.crc,
                               len(e.data) & 0xFFFFFFFF, len(e.data) & 0xFFFFFFFF,
                               len(lname), len(e.local_extra))
            out += lname + e.local_extra + e.data + self.gap
        cd = len(out)
        for e, off in zip(self.entries, offsets):
            cs = len(e.data) if e.csize is None else e.csize
            us = len(e.data) if e.usize is None else e.usize
            off = off if e.offset is None else e.offset
            extra = e.central_extra
            if e.zip64:
                vals = e.z64_values or (us, cs, off)
                extra = struct.pack("<HHQQQ", 1, 24, *vals) + extra
                cs = us = off = 0xFFFFFFFF
            out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, e.needed, e.flags,
                               e.method, 0,
                               0x21, zlib.crc32(e.data) if e.crc is None else e.crc,
                               cs & 0xFFFFFFFF, us & 0xFFFFFFFF, len(e.name), len(extra), 0,
                               0, 0, 0, off & 0xFFFFFFFF)
            out += e.name + extra
        out += self.cd_junk
        size = len(out) - cd
        n = len(self.entries)
        count = n if self.count is None else self.count
        cd_off = cd if self.cd_off is None else self.cd_off
        cd_size = size if self.cd_size is None else self.cd_size
        if self.zip64_end:
            z64 = len(out)
            out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0,
                               count if self.z64_count is None else self.z64_count,
                               count if self.z64_count is None else self.z64_count,
                               cd_size if self.z64_cd_size is None else self.z64_cd_size,
                               cd_off if self.z64_cd_off is None else self.z64_cd_off)
            out += struct.pack("<IIQI", 0x07064B50, 0,
                               (z64 if self.z64_ptr is None else self.z64_ptr) % (1 << 64), 1)
            count, cd_size, cd_off = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF
        clen = len(self.comment) if self.comment_len is None else self.comment_len
        out += struct.pack("<IHHHHIIH", 0x06054B50, self.disk, self.disk, count & 0xFFFF,
                           count & 0xFFFF, cd_size & 0xFFFFFFFF, cd_off & 0xFFFFFFFF,
                           clen & 0xFFFF)
        return bytes(out + self.comment + self.trailer)


def model_entries(s: Setup, overrides: dict[str, bytes] | None = None,
                  absent: tuple[str, ...] = ()) -> list[Ent]:
    """A valid checkpoint for the fz library, as a list of entries (C-writer naming); the
    tensors in ``absent`` are ``null`` in the document and have no entry."""
    doc = {"format": "graphc.checkpoint", "version": 1, "root": {"$dict": [
        ["format", "graphc.aot.state"], ["version", 1], ["name", "fz"],
        ["steps", {"$scalar": "__aot_steps__"}],
        ["tensors", {"$dict": [[k, None if k in absent else {"$array": k}]
                               for k in s.tensors]}]]}}
    ents = [Ent(b"__graphc__.npy", npy(np.array(json.dumps(doc))))]
    for i, (k, (dt, shape, _)) in enumerate(s.tensors.items()):
        if k in absent:
            continue
        ents.append(Ent(f"{k}.npy".encode(),
                        npy(np.arange(np.prod(shape), dtype=dt).reshape(shape) + 10 * i)))
    ents.append(Ent(b"__aot_steps__.npy", npy(np.array(7, np.int64))))
    ents.append(Ent(b"__aot_hyper__.npy", npy(np.arange(s.nh, dtype=np.float64))))
    for name, data in (overrides or {}).items():
        for j, e in enumerate(ents):
            if e.name == name.encode():
                ents[j] = replace(e, data=data)
    return ents


# ---------------------------------------------------------------------------------------
# running both readers
# ---------------------------------------------------------------------------------------

@dataclass
class Verdict:
    tried: dict[str, int] = field(default_factory=dict)
    passed: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)  # by both readers
    failures: list[str] = field(default_factory=list)


def _expected_c(s: Setup, img: bytes, doc: Any) -> tuple[bool, dict[str, np.ndarray]]:
    """Whether NAME_load must accept a file gc.load accepted, and the raw entries (read with
    numpy, which must be able to read every file the spec accepts)."""
    with np.load(io.BytesIO(img), allow_pickle=False) as z:
        raw = {k: z[k] for k in z.files}
    ok = True
    for k, (dt, shape, kind) in s.tensors.items():
        if k not in raw:
            ok &= kind != "param"
        else:
            ok &= raw[k].dtype == dt and raw[k].shape == shape
    if "__aot_steps__" in raw:
        ok &= raw["__aot_steps__"].dtype == np.int64 and raw["__aot_steps__"].shape == ()
    if "__aot_hyper__" in raw:
        ok &= raw["__aot_hyper__"].dtype == np.float64 and raw["__aot_hyper__"].shape == (s.nh,)
    return bool(ok), raw


def run_corpus(s: Setup, tmp: Path, cases: list[tuple[str, bytes]]) -> Verdict:
    paths = []
    for i, (_, img) in enumerate(cases):
        p = tmp / f"case{i}.ckpt"
        p.write_bytes(img)
        paths.append(str(p))
    r = subprocess.run([str(s.exe)], input="\n".join(paths) + "\n", capture_output=True,
                       text=True, timeout=600,
                       env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
                            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
    lines = r.stdout.splitlines()
    v = Verdict()
    if r.returncode != 0 or "Sanitizer" in r.stderr or "runtime error" in r.stderr:
        done = len(lines) - 1
        cat = cases[done][0] if 0 <= done < len(cases) else "?"
        v.failures.append(f"C harness died (status {r.returncode}) on case {done} ({cat}):\n"
                          + r.stderr[-3000:])
        return v
    init = lines[0].split()[1:]
    for i, ((label, img), line) in enumerate(zip(cases, lines[1:])):
        cat = label.split(":")[0]
        v.tried[cat] = v.tried.get(cat, 0) + 1
        rc, *state = line.split()
        c_ok = rc == "0"
        try:
            doc = gc.load(paths[i])
            py_ok = True
        except ValueError:
            doc, py_ok = None, False
        except Exception as e:  # noqa: BLE001 - any other exception type is a failure
            v.failures.append(f"{label} (case {i}): gc.load raised {type(e).__name__}: {e}")
            continue
        if py_ok:
            try:
                want_c, raw = _expected_c(s, img, doc)
            except Exception as e:  # noqa: BLE001
                v.failures.append(f"{label} (case {i}): gc.load accepted a file numpy cannot "
                                  f"read ({type(e).__name__}: {e})")
                continue
        else:
            want_c, raw = False, {}
        if c_ok != want_c:
            v.failures.append(f"{label} (case {i}): gc.load "
                              f"{'accepted' if py_ok else 'rejected'}, NAME_load returned "
                              f"{rc} (expected {'acceptance' if want_c else 'an error'})")
            continue
        if not c_ok:
            if state != init:
                v.failures.append(f"{label} (case {i}): a failed NAME_load changed the state")
                continue
        else:
            bad = _compare_values(s, state, raw, doc)
            if bad:
                v.failures.append(f"{label} (case {i}): values differ: {bad}")
                continue
            v.accepted[cat] = v.accepted.get(cat, 0) + 1
        v.passed[cat] = v.passed.get(cat, 0) + 1
    if len(lines) - 1 != len(cases):
        v.failures.append(f"the harness answered {len(lines) - 1} of {len(cases)} cases")
    return v


def _compare_values(s: Setup, state: list[str], raw: dict[str, np.ndarray], doc: Any) -> str:
    tensors = doc.get("tensors") if isinstance(doc, dict) else None
    for k, field_ in zip(s.tensors, state):
        present, hexdata = field_.split(":")
        if k not in raw:
            if present != "0":
                return f"{k} absent in the file, present in C"
            continue
        want = np.ascontiguousarray(raw[k]).tobytes().hex()
        if present != "1" or hexdata != want:
            return f"{k}: C {hexdata} vs numpy {want}"
        if isinstance(tensors, dict) and isinstance(tensors.get(k), np.ndarray):
            if np.ascontiguousarray(tensors[k]).tobytes().hex() != want:
                return f"{k}: gc.load's value differs from the entry"
    return ""


def _report(v: Verdict, what: str) -> None:
    print(f"{what}: tried {v.tried}, agreed {v.passed}, of which both accepted {v.accepted}")
    assert not v.failures, "\n".join(v.failures[:20])
    assert v.tried == v.passed


# ---------------------------------------------------------------------------------------
# the corpus
# ---------------------------------------------------------------------------------------

def structural_cases(s: Setup) -> list[tuple[str, bytes]]:
    """Crafted zip-level cases, each breaking (or legitimately varying) one rule."""
    E = model_entries(s)
    w = "model.weight.npy"

    def with_entry(name: str, **kw: Any) -> list[Ent]:
        return [replace(e, **kw) if e.name == name.encode() else e for e in E]

    big = 1 << 64
    cases: dict[str, Zip] = {
        "valid": Zip(E),
        "valid zip64 end record": Zip(E, zip64_end=True),
        "valid zip64 entry fields": Zip(with_entry(w, zip64=True)),
        "valid with local extra": Zip(with_entry(w, local_extra=b"\x99\x99\x02\x00ab")),
        "valid with central extra": Zip(with_entry(w, central_extra=b"\x99\x99\x00\x00")),
        "prefix bytes (numpy sniffs the first bytes)": Zip(E, prefix=b"junk"),
        "valid entries in another order": Zip(E[::-1]),
        "duplicate tensor entry": Zip(E + [replace(E[1], data=npy(np.full((2, 3), 9,
                                                                           np.float32)))]),
        "duplicate document": Zip(E + [E[0]]),
        "duplicate unrelated entry": Zip(E + [Ent(b"x.npy", npy(np.zeros(1))),
                                              Ent(b"x.npy", npy(np.zeros(1)))]),
        "zip64 locator pointing past 2^64 - 56": Zip(E, zip64_end=True, z64_ptr=big - 20),
        "zip64 locator pointing at 2^64 - 1": Zip(E, zip64_end=True, z64_ptr=big - 1),
        "zip64 locator pointing past the file": Zip(E, zip64_end=True, z64_ptr=1 << 40),
        "zip64 locator pointing into the end record": Zip(E, zip64_end=True, z64_ptr=10 ** 9),
        "zip64 offset wrapping (2^64 - 10)": Zip(with_entry(w, zip64=True,
                                                            z64_values=(120, 120, big - 10))),
        "zip64 offset wrapping (2^64 - 30)": Zip(with_entry(w, zip64=True,
                                                            z64_values=(120, 120, big - 30))),
        "zip64 size wrapping": Zip(with_entry(w, zip64=True, z64_values=(big - 1, big - 1, 0))),
        "zip64 count huge": Zip(E, zip64_end=True, z64_count=big - 1),
        "zip64 cd offset huge": Zip(E, zip64_end=True, z64_cd_off=big - 100),
        "zip64 cd size huge": Zip(E, zip64_end=True, z64_cd_size=big - 100),
        "zip64 markers without locator": Zip(E, count=0xFFFF),
        "zip64 field missing from extra": Zip(with_entry(w, offset=0xFFFFFFFF)),
        "count too large": Zip(E, count=len(E) + 1),
        "count too small": Zip(E, count=len(E) - 1),
        "count zero": Zip(E, count=0),
        "cd offset off by one": Zip(E, cd_off=None, extra={"cd_delta": 1}),
        "cd size too small": Zip(E, extra={"size_delta": -1}),
        "cd junk after entries": Zip(E, cd_junk=b"\0" * 46),
        "archive comment": Zip(E, comment=b"hello"),
        "archive comment holding an end record": Zip(E, comment=Zip(E).build()[-22:]),
        "comment length too long": Zip(E, comment=b"abc", comment_len=10),
        "comment length too short": Zip(E, comment=b"abc", comment_len=1),
        "trailing bytes after comment": Zip(E, trailer=b"x"),
        "multi-disk": Zip(E, disk=1),
        "deflated entry": Zip(with_entry(w, method=8)),
        "encrypted entry": Zip(with_entry(w, flags=1)),
        "data descriptor flag (allowed)": Zip(with_entry(w, flags=8)),
        "UTF-8 name flag (allowed)": Zip(with_entry(w, flags=0x800)),
        "patch data flag": Zip(with_entry(w, flags=0x20)),
        "strong encryption flag": Zip(with_entry(w, flags=0x40)),
        "version needed 6.3 (allowed)": Zip(with_entry(w, needed=63)),
        "version needed 6.4": Zip(with_entry(w, needed=64)),
        "version needed 25.5": Zip(with_entry(w, needed=255)),
        "zip64 record one byte before the locator": Zip(E, zip64_end=True,
                                                        extra={"z64_shift": -1}),
        "local method differs": Zip(with_entry(w, local_method=8)),
        "local name differs": Zip(with_entry(w, local_name=b"model.weighX.npy")),
        "local name longer": Zip(with_entry(w, local_name=b"model.weight.npyy")),
        "bad CRC": Zip(with_entry(w, crc=0)),
        "sizes differ": Zip(with_entry(w, usize=1)),
        "central offset past the file": Zip(with_entry(w, offset=0xFFFFFFF0)),
        "central offset pointing at the document": Zip(with_entry(w, offset=0)),
        "not a .npy name": Zip(E + [Ent(b"readme.txt", b"hello")]),
        "empty name": Zip(E + [Ent(b"", npy(np.zeros(1)))]),
        "name '.npy'": Zip(E + [Ent(b".npy", npy(np.zeros(1)))]),
        "non-UTF-8 name": Zip(E + [Ent(b"\xff\xfe.npy", npy(np.zeros(1)))]),
        "UTF-8 name": Zip(E + [Ent("é.npy".encode(), npy(np.zeros(1)), flags=0x800)]),
        "control character in name": Zip(E + [Ent(b"a\n.npy", npy(np.zeros(1)))]),
        "truncated extra block": Zip(with_entry(w, central_extra=b"\x99\x99\x08\x00ab")),
        "extra leftover bytes": Zip(with_entry(w, central_extra=b"\x99\x99")),
        "no document": Zip(E[1:]),
        "document not unicode": Zip([Ent(b"__graphc__.npy", npy(np.zeros(3)))] + E[1:]),
        "document not 0-d": Zip([Ent(b"__graphc__.npy", npy(np.array(["{}", "{}"])))] + E[1:]),
        "weight missing": Zip(model_entries(s, absent=("model.weight",))),
        "gradient missing (allowed)": Zip(model_entries(s, absent=("model.weight.grad",))),
        "weight entry missing, still in the document": Zip([e for e in E
                                                            if e.name != w.encode()]),
        "weight of another shape": Zip(with_entry(w, data=npy(np.zeros((3, 2), np.float32)))),
        "weight of another dtype": Zip(with_entry(w, data=npy(np.zeros((2, 3), np.float64)))),
        "weight in Fortran order": Zip(with_entry(w, data=npy(np.asfortranarray(
            np.arange(6, dtype=np.float32).reshape(2, 3))))),
        "weight big-endian": Zip(with_entry(w, data=npy(np.arange(6, dtype=">f4")
                                                        .reshape(2, 3)))),
        "steps of another dtype": Zip([replace(e, data=npy(np.array(7.0)))
                                       if e.name == b"__aot_steps__.npy" else e for e in E]),
        "empty file": Zip([], extra={"raw": b""}),
        "only an end record": Zip([]),
        "gap between entries": Zip(E, gap=b"\0" * 7),
    }
    out = []
    for name, z in cases.items():
        img = z.extra.get("raw", None)
        if img is None:
            img = z.build()
            if "z64_shift" in z.extra:
                loc = len(img) - 22 - 20
                ptr = struct.unpack_from("<Q", img, loc + 8)[0] + z.extra["z64_shift"]
                img = img[:loc + 8] + struct.pack("<Q", ptr) + img[loc + 16:]
            if "cd_delta" in z.extra or "size_delta" in z.extra:
                eocd = img.rfind(b"PK\x05\x06")
                size, off = struct.unpack_from("<II", img, eocd + 12)
                img = (img[:eocd + 12] + struct.pack("<II", size + z.extra.get("size_delta", 0),
                                                     off + z.extra.get("cd_delta", 0))
                       + img[eocd + 20:])
        out.append((f"structure: {name}", img))
    return out


HEADERS = [
    # numpy accepts these, the format does not (one form only)
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}          \n",
    "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4', }        \n",
    "{\"descr\": '<f4', 'fortran_order': False, 'shape': (2, 3), }      \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2,3), }         \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3,), }       \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (0x2, 3), }      \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (02, 3), }       \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\t\n",
    " {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }       \n",
    "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }        \n",
    "{'descr': 'f4', 'fortran_order': False, 'shape': (2, 3), }         \n",
    "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }            \n",
    # numpy rejects these (the old C reader accepted some: it only searched for substrings)
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (9,), }\n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1, }\n",
    "xx'descr': '<f4'yy'fortran_order': False'shape': (2, 3)zz             \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\0     \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ",
    "{'descr': '<f4', 'fortran_order': Fals, 'shape': (2, 3), }         \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -3), }      \n",
    "{'descr': '<q4', 'fortran_order': False, 'shape': (2, 3), }        \n",
    # canonical, right or wrong for the model
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }        \n",
    "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }         \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }          \n",
    "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }        \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3), }     \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 1), }     \n",
    "{'descr': '<U6', 'fortran_order': False, 'shape': (), }            \n",
    "{'descr': '|S24', 'fortran_order': False, 'shape': (), }           \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }        \n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 0), }\n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (999999999999999999, 3), }\n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "1, " * 31 + "2, 3), }\n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (" + "1, " * 32 + "6), }\n",
]


def header_cases(s: Setup) -> list[tuple[str, bytes]]:
    payload = np.arange(6, dtype=np.float32).tobytes()
    out = []
    for h in HEADERS:
        for version in ((1, 0), (2, 0), (3, 0), (4, 0), (1, 1)):
            data = npy(header=h.encode(), payload=payload, version=version)
            out.append(("npy-header", Zip(model_entries(s, {"model.weight.npy": data})).build()))
    for extra in (b"", b"\0", b"\0" * 4, b"x" * 24):  # trailing payload bytes
        data = npy(header=hdr(), payload=payload + extra)
        out.append(("npy-header", Zip(model_entries(s, {"model.weight.npy": data})).build()))
    out.append(("npy-header", Zip(model_entries(s, {"model.weight.npy": npy(
        header=hdr(), payload=payload[:-1])})).build()))
    out.append(("npy-header", Zip(model_entries(s, {"model.weight.npy": npy(
        header=hdr(pad=5000), payload=payload, version=(2, 0))})).build()))
    out.append(("npy-header", Zip(model_entries(
        s, {"model.weight.npy": b"\x93NUMPY\x01\x00\xff\xff"})).build()))
    return out


def truncation_cases(s: Setup) -> list[tuple[str, bytes]]:
    step = 1 if CASES >= 150 else 7
    return [("truncate", s.base_c[:n]) for n in range(0, len(s.base_c), step)]


def _flip(rng: random.Random, img: bytes) -> bytes:
    b = bytearray(img)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(b))
        op = rng.random()
        if op < 0.6:
            b[i] ^= 1 << rng.randrange(8)
        elif op < 0.8:
            b[i] = rng.choice([0, 0xFF, 0x7F, 0x80])
        else:
            b[i:i + 4] = struct.pack("<I", rng.choice([0, 0xFFFFFFFF, 0x7FFFFFFF, len(b)]))
    return bytes(b)


def random_cases(s: Setup, rng: random.Random) -> list[tuple[str, bytes]]:
    out = []
    bases = [s.base_c, s.base_np, s.base_gc]
    for _ in range(CASES):
        out.append(("bit-flip", _flip(rng, rng.choice(bases))))
    alphabet = "0123456789(), '{}:<>|=fiuUSTrueFalsdcp_\n\t\0x"
    for _ in range(CASES):
        h = list(hdr(shape=rng.choice(["(2, 3)", "(6,)", "()", "(3, 2)"])).decode())
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(h))
            op = rng.random()
            if op < 0.4:
                h[i] = rng.choice(alphabet)
            elif op < 0.7:
                h.insert(i, rng.choice(alphabet))
            else:
                del h[i]
        payload = np.arange(6, dtype=np.float32).tobytes()
        data = npy(header="".join(h).encode(), payload=payload)
        ents = model_entries(s, {"model.weight.npy": data})
        out.append(("npy-header-mutation", Zip(ents).build()))
    big = 1 << 64
    interesting = [0, 1, 29, 30, 45, 46, 55, 56, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFE, 1 << 31,
                   1 << 32, big - 1, big - 2, big - 10, big - 30, big - 56, big - 57, 1 << 63]
    for _ in range(CASES):
        ents = model_entries(s)
        z = Zip(ents, zip64_end=rng.random() < 0.5)
        knobs = rng.sample(["count", "cd_off", "cd_size", "z64_ptr", "z64_count", "z64_cd_off",
                            "z64_cd_size", "entry_offset", "entry_z64", "comment_len"],
                           rng.randint(1, 2))
        for k in knobs:
            v = rng.choice(interesting) + rng.choice([0, 0, -1, 1])
            if k == "entry_offset":
                j = rng.randrange(len(ents))
                ents[j] = replace(ents[j], offset=v % (1 << 32))
            elif k == "entry_z64" and rng.random() < 0.3:  # right values, in zip64 form
                j = rng.randrange(len(ents))
                ents[j] = replace(ents[j], zip64=True)
            elif k == "entry_z64":
                j = rng.randrange(len(ents))
                vals = [len(ents[j].data), len(ents[j].data), None]
                pos = rng.randrange(3)
                vals[pos] = v % big
                ents[j] = replace(ents[j], zip64=True, z64_values=(
                    vals[0], vals[1], vals[2] if vals[2] is not None else 0))
            elif k == "comment_len":
                z.comment_len = v % (1 << 16)
            elif k.startswith("z64_"):
                setattr(z, k, v % big)
                z.zip64_end = True
            else:
                setattr(z, k, v % (1 << 32))
        img = z.build()
        out.append(("zip-field-mutation", img))
    return out


def _all_cases(s: Setup) -> list[tuple[str, bytes]]:
    rng = random.Random(SEED)
    return (structural_cases(s) + header_cases(s) + truncation_cases(s)
            + random_cases(s, rng)
            + [("base", s.base_c), ("base", s.base_np), ("base", s.base_gc)])


@pytest.mark.slow
def test_both_readers_agree_on_every_file(setup: Setup, tmp_path: Path) -> None:
    """Before: zip64 offsets near 2^64 read out of bounds in C (ASan heap-buffer-overflow),
    duplicate names loaded different copies, and the C reader took .npy headers numpy
    rejects (duplicate keys, no braces, trailing bytes)."""
    v = run_corpus(setup, tmp_path, _all_cases(setup))
    _report(v, f"checkpoint readers (sanitized C: {setup.sanitized})")
    # not trivially all-reject: valid variants, header variants and mutations load in both
    assert v.accepted.get("structure", 0) >= 10 and v.accepted.get("npy-header", 0) >= 3
    assert v.accepted.get("zip-field-mutation", 0) >= 1


def test_the_corpus_has_both_outcomes(setup: Setup, tmp_path: Path) -> None:
    """The corpus is not trivially all-reject: the crafted valid variants load in both."""
    cases = structural_cases(setup)
    labels = ["valid", "valid zip64 end record", "valid zip64 entry fields",
              "valid with local extra", "valid with central extra"]
    for img in [c for _, c in cases[:len(labels)]] + [setup.base_c, setup.base_np]:
        doc = gc.load(io.BytesIO(img))
        assert doc["tensors"]["model.weight"].shape == (2, 3)


def test_duplicate_entry_names_are_refused_by_both(setup: Setup, tmp_path: Path) -> None:
    E = model_entries(setup)
    img = Zip(E + [replace(E[1], data=npy(np.full((2, 3), 9, np.float32)))]).build()
    with pytest.raises(ValueError, match="duplicate entry name 'model.weight.npy'"):
        gc.load(io.BytesIO(img))
    v = run_corpus(setup, tmp_path, [("duplicate", img)])
    _report(v, "duplicate")


def test_fortran_order_entries_load_equal_in_both(setup: Setup, tmp_path: Path) -> None:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    img = Zip(model_entries(setup, {"model.weight.npy": npy(np.asfortranarray(w))})).build()
    np.testing.assert_array_equal(gc.load(io.BytesIO(img))["tensors"]["model.weight"], w)
    _report(run_corpus(setup, tmp_path, [("fortran", img)]), "fortran")


def test_load_of_a_directory_is_an_io_error_not_enomem(setup: Setup, tmp_path: Path) -> None:
    """NAME_load(directory) tried malloc(2^63) and returned GRAPHC_ENOMEM."""
    r = subprocess.run([str(setup.exe)], input=f"{tmp_path}\n", capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rc = int(r.stdout.splitlines()[1].split()[0])
    assert rc != 0 and "ENOMEM" not in r.stderr
    header = (setup.exe.parent / "fz.h").read_text()
    eio = re.search(r"#define GRAPHC_EIO (\d+)", header)
    assert eio is not None and rc == int(eio.group(1))
    with pytest.raises(OSError):
        gc.load(tmp_path)
