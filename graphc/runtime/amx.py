"""Permission to use AMX tile data, asked of the Linux kernel once per process.

Linux keeps AMX's 8 KB of tile state (XTILEDATA) off by default: the first AMX instruction
of a process that has not asked for it faults (SIGILL), so a compiled step using the AMX
bf16 GEMM (``codegen.gemm_bf16``, isa ``"amx"``) must call ``ensure_amx()`` before its
first call. The permission is process-wide (threads started earlier included), so one
successful request covers the two-thread pool too.
"""

from __future__ import annotations

import ctypes
import sys
import threading

SYS_ARCH_PRCTL = 158  # x86-64
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

_lock = threading.Lock()
_granted = False


def ensure_amx() -> None:
    """Ask for XTILEDATA once (``arch_prctl(ARCH_REQ_XCOMP_PERM, 18)``); raise RuntimeError
    naming the reason when the kernel refuses (a kernel older than 5.16, a hypervisor that
    hides AMX, a seccomp filter) or the platform is not Linux on x86-64."""
    global _granted
    if _granted:
        return
    with _lock:
        if _granted:
            return
        if not sys.platform.startswith("linux"):
            raise RuntimeError("AMX tile data needs Linux's arch_prctl permission request; "
                               f"this is {sys.platform} (use GRAPHC_BF16_ISA=avx512bf16)")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        rc = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                          ctypes.c_ulong(XFEATURE_XTILEDATA))
        if rc != 0:
            err = ctypes.get_errno()
            raise RuntimeError(
                "the kernel refused AMX tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, "
                f"XFEATURE_XTILEDATA) failed: errno {err}, {_strerror(err)}); the bf16 GEMM "
                "cannot use AMX here (GRAPHC_BF16_ISA=avx512bf16 or generic avoids it)")
        _granted = True


def amx_granted() -> bool:
    """Whether this process already holds the permission (without asking for it)."""
    return _granted


def _strerror(err: int) -> str:
    import os

    return os.strerror(err) if err else "unknown error"


__all__ = ["ensure_amx", "amx_granted"]
