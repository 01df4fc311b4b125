"""Target CPUs for ahead-of-time builds: checking a name before LLVM sees it, and the
target machine a build emits its objects for.

LLVM aborts the whole process on some bad CPU names (after a warning per subtarget), so
:func:`check_target` validates ``target`` / ``features`` against LLVM's own tables
(:func:`llvm_catalog`, what ``llc -mcpu=help`` prints) and, for CPUs that exist but cannot
generate code for this triple, against a probe in a child process.
"""

from __future__ import annotations

import difflib
import functools
import os
import subprocess
import sys
import tempfile
from typing import Any

__all__ = ["TargetError", "check_target", "llvm_catalog", "target_machine"]


class TargetError(ValueError):
    """A target CPU or feature that LLVM would not accept.

    Raised before LLVM sees the name: LLVM itself only warns about an unknown CPU (once per
    subtarget it creates, so several times a build) and then aborts the whole process with
    ``LLVM ERROR: 64-bit code requested on a subtarget that doesn't support it``.
    """


@functools.cache
def llvm_catalog() -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(triple, CPU names, feature names) that LLVM knows for this host's target.

    llvmlite has no API for these lists, but LLVM prints both tables to stderr when a target
    machine is created for the CPU ``help`` (what ``llc -mcpu=help`` shows), once per process;
    the output is captured at the file-descriptor level and parsed. Empty tuples when nothing
    could be parsed (validation is then left to LLVM rather than refusing every target).
    """
    import llvmlite.binding as llvm

    from graphc.codegen.cpu import init_llvm

    init_llvm()
    triple = llvm.get_default_triple()
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as f:
            os.dup2(f.fileno(), 2)
            try:
                llvm.Target.from_triple(triple).create_target_machine(cpu="help", features="")
            finally:
                os.dup2(saved, 2)
            f.seek(0)
            text = f.read().decode("utf-8", "replace")
    finally:
        os.close(saved)
    tables: dict[str, list[str]] = {"CPUs": [], "features": []}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("Available "):
            current = tables.get(line.split()[1])
        elif current is not None and line.startswith("  ") and line.split():
            current.append(line.split()[0])
        elif current is not None and line.strip() and not line.startswith(" "):
            current = None
    return triple, tuple(tables["CPUs"]), tuple(tables["features"])


@functools.cache
def _probe_cpu(cpu: str) -> str | None:
    """Why LLVM cannot generate code for ``cpu`` on this triple, or None when it can.

    A CPU can be known to LLVM and still unusable here: the 32-bit x86 CPUs (``i686``,
    ``pentium4``, ...) exist in the x86 table but abort the process on an x86-64 triple as
    soon as a function is compiled. That abort cannot be caught, so a child process tries it
    (a target machine and one empty function), and its complaint is reported instead.
    """
    code = ("import llvmlite.binding as llvm\n"
            "llvm.initialize_native_target(); llvm.initialize_native_asmprinter()\n"
            f"tm = llvm.Target.from_default_triple().create_target_machine(cpu={cpu!r})\n"
            "tm.emit_object(llvm.parse_assembly('define void @f() {\\n ret void\\n}\\n'))\n")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None  # cannot tell: let the build try
    if r.returncode == 0 and "not a recognized" not in r.stderr:
        return None
    lines = [ln.removeprefix("LLVM ERROR: ").strip() for ln in r.stderr.splitlines()
             if ln.strip()]
    return lines[-1] if lines else f"LLVM exited with status {r.returncode}"


def check_target(target: str | None, features: str | None = None) -> None:
    """Raise :class:`TargetError` unless LLVM accepts ``target`` and ``features`` here.

    ``target``: ``None``, ``"native"`` or an LLVM CPU name for this host's triple;
    ``features``: LLVM's ``+feature,-feature`` list. The message names the argument, the bad
    value and the closest valid names, so a typo is fixed without reading LLVM's tables.
    """
    triple, cpus, feats = llvm_catalog()
    if target not in (None, "native"):
        if not isinstance(target, str) or not target:
            raise TargetError(f"target: expected 'native' or an LLVM CPU name, got {target!r}")
        if cpus and target not in cpus:
            close = difflib.get_close_matches(target, cpus, n=4, cutoff=0.6)
            levels = [c for c in cpus if c.startswith("x86-64")]
            hint = (f"did you mean {', '.join(map(repr, close))}? " if close else "")
            raise TargetError(
                f"target: expected 'native' or a CPU LLVM knows for {triple}, got {target!r}; "
                f"{hint}portable choices: {', '.join(['native', *levels]) or 'native'} "
                f"({len(cpus)} CPUs in all; `graphc aot --target help` lists them)")
        why = _probe_cpu(target)
        if why is not None:
            raise TargetError(f"target: expected a CPU that can generate code for {triple}, "
                              f"got {target!r} (LLVM: {why})")
    for item in (features or "").split(","):
        item = item.strip()
        if not item:
            continue
        name = item[1:]
        if item[0] not in "+-" or not name:
            raise TargetError(f"features: expected '+name' or '-name' items separated by "
                              f"commas, got {item!r} in {features!r}")
        if feats and name not in feats:
            close = difflib.get_close_matches(name, feats, n=4, cutoff=0.6)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise TargetError(f"features: expected features LLVM knows for {triple}, got "
                              f"{name!r} in {features!r}{hint}")


def target_machine(target: str | None) -> tuple[Any, str, str, bool]:
    """(target machine, cpu, features, wide tiles) for an AOT target name.

    ``None``/``"native"``: this host's CPU and features; anything else is an LLVM CPU name
    (``x86-64-v3``, ``x86-64-v4``, ``znver4``, ...) with that CPU's default features, so the
    object runs on any machine of that level. Objects are position independent
    (``reloc='pic'``) with the default code model, so they link into shared libraries and PIE
    executables alike.
    """
    from graphc.codegen.cpu import has_avx512, host_target_machine, init_llvm

    init_llvm()
    check_target(target)
    if target in (None, "native"):
        from graphc.codegen.llvm_objects import host_cpu

        cpu, features = host_cpu()
    else:
        cpu, features = target, ""
    tm = host_target_machine(cpu, features, reloc="pic", codemodel="default")
    return tm, cpu, features, has_avx512(tm, None if target in (None, "native") else target)
