"""Host facts that shape generated code: the data-cache sizes the GEMM blocking is derived
from, and a one-line description of the machine for benchmark reports.

Instruction-set features come from LLVM (``codegen.cpu``); cache sizes come from the
kernel's sysfs (``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}``), because
neither LLVM nor a CPU name says how large a particular host's caches are (the same
``sapphirerapids`` name covers 2 MB L2 parts, a KVM guest reports whatever its hypervisor
chose). Whatever is read here changes generated code, so it is part of the compile-cache key
(``Caches.key``, added to the target string by ``graphc.runtime.cpu``): an object compiled on
a host with other caches is never reused.

Ahead-of-time builds for a named CPU must not depend on the build host: they use
``DEFAULT_CACHES`` (``tuned_for``), so the same build gives the same object anywhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class Caches:
    """Per-core data-cache capacities in bytes (L1d and L2) that code is tuned for."""

    l1d: int
    l2: int
    source: str = "default"  # where the sizes came from: "sysfs", "env", "default"

    def key(self) -> str:
        """What of this decides generated code (the source does not)."""
        return f"l1d={self.l1d},l2={self.l2}"

    def describe(self) -> str:
        return f"L1d {self.l1d >> 10} KiB, L2 {self.l2 >> 10} KiB ({self.source})"


# A conservative modern x86 core (Zen 2-4, Skylake client: 32 KiB L1d; 1 MiB L2 is the
# middle of the 512 KiB .. 2 MiB range): used when sysfs says nothing and for AOT builds
# for a named CPU, whose host is unknown.
DEFAULT_CACHES = Caches(32 << 10, 1 << 20, "default")

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int | None:
    """``"48K"`` -> 49152 (sysfs's spelling; ``"2048K"``, ``"2M"``, ``"512 KiB"`` too)."""
    m = _SIZE_RE.match(text)
    return int(m.group(1)) * _UNITS[m.group(2).upper()] if m else None


def read_sysfs(root: Path = SYSFS_CACHE) -> Caches | None:
    """The L1 data and L2 (unified or data) cache sizes of CPU 0, or None when sysfs does not
    list both (containers without /sys, other kernels). Sizes outside a sane range (a
    hypervisor reporting 0 or gigabytes) are treated as absent."""
    found: dict[int, int] = {}
    try:
        entries = sorted(root.glob("index*"))
        for d in entries:
            level = int((d / "level").read_text().strip())
            kind = (d / "type").read_text().strip()
            size = parse_size((d / "size").read_text())
            if kind in ("Data", "Unified") and size and level in (1, 2) and level not in found:
                found[level] = size
    except (OSError, ValueError):
        return None
    l1, l2 = found.get(1), found.get(2)
    if l1 is None or l2 is None or not (8 << 10 <= l1 <= 1 << 20) or not (
            64 << 10 <= l2 <= 64 << 20):
        return None
    return Caches(l1, l2, "sysfs")


def _from_env(text: str) -> Caches:
    """``GRAPHC_CPU_CACHES="l1d=48K,l2=2M"``: an explicit override (tests, odd hosts)."""
    vals: dict[str, int] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        size = parse_size(value)
        if name.strip() not in ("l1d", "l2") or size is None:
            raise ValueError(f"GRAPHC_CPU_CACHES: expected 'l1d=SIZE,l2=SIZE' (e.g. "
                             f"'l1d=48K,l2=2M'), got {text!r}")
        vals[name.strip()] = size
    return Caches(vals.get("l1d", DEFAULT_CACHES.l1d), vals.get("l2", DEFAULT_CACHES.l2), "env")


@functools.cache
def host_caches() -> Caches:
    """This host's caches: ``GRAPHC_CPU_CACHES`` if set, else sysfs, else the defaults."""
    env = os.environ.get("GRAPHC_CPU_CACHES", "").strip()
    if env:
        return _from_env(env)
    return read_sysfs() or DEFAULT_CACHES


_TUNED_FOR: contextvars.ContextVar[Caches | None] = contextvars.ContextVar(
    "graphc_tuned_for", default=None)


def current_caches() -> Caches:
    """The caches code being generated now is tuned for (``tuned_for``, else the host's)."""
    return _TUNED_FOR.get() or host_caches()


@contextlib.contextmanager
def tuned_for(caches: Caches) -> Iterator[Caches]:
    """Generate code for ``caches`` instead of the host's within the block (AOT builds for a
    named CPU use ``DEFAULT_CACHES``)."""
    token = _TUNED_FOR.set(caches)
    try:
        yield caches
    finally:
        _TUNED_FOR.reset(token)


ISA_FLAGS = ("fma", "avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo``'s ``model name``), or the platform's."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def isa_flags() -> dict[str, bool]:
    """The instruction-set extensions that decide graphc's kernels, as the kernel reports
    them (``/proc/cpuinfo`` flags; LLVM's host features where that file is missing)."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    if not flags:
        import llvmlite.binding as llvm

        feats = llvm.get_host_cpu_features().flatten().split(",")
        flags = {f[1:].replace("avx512bf16", "avx512_bf16").replace("amx-bf16", "amx_bf16")
                 for f in feats if f.startswith("+")}
    return {f: f in flags for f in ISA_FLAGS}


def describe_host() -> str:
    """One line for benchmark reports: model, LLVM's CPU name, ISA flags, tuning caches."""
    import llvmlite.binding as llvm

    flags = " ".join(f"{'+' if on else '-'}{f}" for f, on in isa_flags().items())
    return (f"cpu: {cpu_model()} (LLVM {llvm.get_host_cpu_name()}), {os.cpu_count()} "
            f"logical CPUs; {flags}; tuned for {host_caches().describe()}")


# bf16 GEMM variants (``codegen.gemm_bf16``), ascending: GRAPHC_BF16_ISA may pick a lower one
ISAS = ("generic", "avx512bf16", "amx")
# the convolutions whose bf16 form runs on the bf16 GEMM (``codegen.conv_bf16``): here, so the
# runtime can ask for AMX tile permission for a cached step without importing the code generator
BF16_CONV_OPS = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")


def feature_set(features: str | None = None) -> set[str]:
    """The ``+`` features of an LLVM feature string (default: this host's), without the
    sign: ``{"avx512f", "fma", ...}``."""
    if features is None:
        from .llvm_objects import host_cpu  # llvmlite only

        features = host_cpu()[1]
    return {f[1:] for f in features.split(",") if f.startswith("+")}


def bf16_isa(features: str | None = None) -> str:
    """The best bf16 GEMM variant for an LLVM feature string (default: this host's).

    ``amx`` needs AMX-TILE and AMX-BF16 (and AVX-512 for the packing and epilogue),
    ``avx512bf16`` needs AVX512-BF16; anything else is ``generic``. ``GRAPHC_BF16_ISA``
    may name a lower variant to force it; naming one the features lack has no effect."""
    f = feature_set(features)
    if {"amx-tile", "amx-bf16", "avx512f", "avx512bw"} <= f:
        best = "amx"
    elif {"avx512bf16", "avx512f", "avx512bw"} <= f:
        best = "avx512bf16"
    else:
        best = "generic"
    forced = os.environ.get("GRAPHC_BF16_ISA", "").strip().lower()
    if not forced:
        return best
    if forced not in ISAS:
        raise ValueError(f"GRAPHC_BF16_ISA: expected one of {ISAS}, got {forced!r}")
    return forced if ISAS.index(forced) < ISAS.index(best) else best


__all__ = ["Caches", "DEFAULT_CACHES", "host_caches", "current_caches", "tuned_for",
           "read_sysfs", "parse_size", "cpu_model", "isa_flags", "describe_host",
           "ISAS", "BF16_CONV_OPS", "bf16_isa", "feature_set"]
