"""A thin ctypes binding of the CUDA driver API (``libcuda.so.1``): just what a step needs.

Why the driver API and ctypes: it ships with the NVIDIA driver itself (no toolkit, no extra
Python package), it loads PTX directly (the driver JIT-compiles it for the GPU at hand), and
every entry point is a plain C function. All argument types are declared: a ctypes call
without ``argtypes`` passes Python ints as 32-bit C ints and silently truncates pointers.

Errors: a missing driver or GPU raises ``NoCUDAError`` (a RuntimeError saying so) the first
time a device is needed; every failing driver call raises ``CUDAError`` with the call's name
and the driver's own error name and text. Nothing here runs at import time. Part of
``graphc.runtime``: only running a PTX step needs the driver.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import numpy as np

CUresult = ctypes.c_int
CUdeviceptr = ctypes.c_uint64
_P = ctypes.c_void_p

CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
CUDA_ERROR_NO_DEVICE = 100

NO_GPU_HINT = ("device='cuda' needs an NVIDIA GPU and its driver to *run*; tracing, lowering "
               "and step.ir('ptx') work without one (use device='cpu' to run here)")

_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint],
    "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_P), ctypes.c_int],
    "cuCtxSetCurrent": [_P],
    "cuCtxSynchronize": [],
    "cuModuleLoadDataEx": [ctypes.POINTER(_P), ctypes.c_char_p, ctypes.c_uint,
                           ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_P)],
    "cuModuleUnload": [_P],
    "cuModuleGetFunction": [ctypes.POINTER(_P), _P, ctypes.c_char_p],
    "cuLaunchKernel": [_P, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                       ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, _P, ctypes.POINTER(_P),
                       ctypes.POINTER(_P)],
    "cuMemAlloc_v2": [ctypes.POINTER(CUdeviceptr), ctypes.c_size_t],
    "cuMemFree_v2": [CUdeviceptr],
    "cuMemcpyHtoD_v2": [CUdeviceptr, _P, ctypes.c_size_t],
    "cuMemcpyDtoH_v2": [_P, CUdeviceptr, ctypes.c_size_t],
    "cuMemcpyDtoD_v2": [CUdeviceptr, CUdeviceptr, ctypes.c_size_t],
    "cuGetErrorString": [CUresult, ctypes.POINTER(ctypes.c_char_p)],
    "cuGetErrorName": [CUresult, ctypes.POINTER(ctypes.c_char_p)],
}


class NoCUDAError(RuntimeError):
    """No CUDA driver or no GPU: the step cannot run on device='cuda' here."""


class CUDAError(RuntimeError):
    """A CUDA driver call failed."""


class Driver:
    """One process-wide handle on the driver, the device and its primary context."""

    def __init__(self, ordinal: int | None = None) -> None:
        names = ["libcuda.so.1", "libcuda.so"]
        lib = None
        errors = []
        for n in names:
            try:
                lib = ctypes.CDLL(n)
                break
            except OSError as e:
                errors.append(str(e))
        if lib is None:
            raise NoCUDAError(f"graphc: no CUDA driver/GPU found (could not load libcuda.so.1: "
                              f"{errors[0]}); {NO_GPU_HINT}")
        self.lib = lib
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes = argtypes
            fn.restype = CUresult
        rc = lib.cuInit(0)
        count = ctypes.c_int(0)
        if rc == 0:
            rc = lib.cuDeviceGetCount(ctypes.byref(count))
        if rc != 0 or count.value == 0:
            why = self.error_text(rc) if rc else "the driver reports 0 devices"
            raise NoCUDAError(f"graphc: no CUDA driver/GPU found ({why}); {NO_GPU_HINT}")
        ordinal = int(os.environ.get("GRAPHC_CUDA_DEVICE", "0")) if ordinal is None else ordinal
        dev = ctypes.c_int()
        self.check("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(dev), ordinal))
        self.device = dev.value
        ctx = _P()
        self.check("cuDevicePrimaryCtxRetain",
                   lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), self.device))
        self.ctx = ctx
        self.make_current()

    # -- errors ---------------------------------------------------------------------------
    def error_text(self, rc: int) -> str:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.cuGetErrorName(rc, ctypes.byref(name))
        self.lib.cuGetErrorString(rc, ctypes.byref(text))
        n = name.value.decode() if name.value else f"CUresult {rc}"
        return f"{n}: {text.value.decode() if text.value else 'unknown error'}"

    def check(self, what: str, rc: int) -> None:
        if rc != 0:
            raise CUDAError(f"CUDA driver call {what} failed with {self.error_text(rc)}")

    # -- device ---------------------------------------------------------------------------
    def make_current(self) -> None:
        """The context is per thread: set it before work from whichever thread calls."""
        self.check("cuCtxSetCurrent", self.lib.cuCtxSetCurrent(self.ctx))

    def attribute(self, attr: int) -> int:
        v = ctypes.c_int()
        self.check("cuDeviceGetAttribute",
                   self.lib.cuDeviceGetAttribute(ctypes.byref(v), attr, self.device))
        return v.value

    def compute_capability(self) -> tuple[int, int]:
        return (self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))

    def name(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self.check("cuDeviceGetName", self.lib.cuDeviceGetName(buf, 256, self.device))
        return buf.value.decode()

    # -- memory ---------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        p = CUdeviceptr()
        self.check(f"cuMemAlloc({nbytes})",
                   self.lib.cuMemAlloc_v2(ctypes.byref(p), max(1, int(nbytes))))
        return int(p.value)

    def free(self, ptr: int) -> None:
        self.lib.cuMemFree_v2(ptr)  # best effort: also called from finalizers

    def htod(self, dst: int, arr: np.ndarray) -> None:
        if arr.nbytes:
            a = np.ascontiguousarray(arr)
            self.check("cuMemcpyHtoD", self.lib.cuMemcpyHtoD_v2(dst, a.ctypes.data, a.nbytes))

    def dtoh(self, arr: np.ndarray, src: int) -> None:
        """Copy into a C-contiguous array; synchronous (waits for the kernels before it)."""
        assert arr.flags.c_contiguous and arr.flags.writeable
        if arr.nbytes:
            self.check("cuMemcpyDtoH", self.lib.cuMemcpyDtoH_v2(arr.ctypes.data, src,
                                                                 arr.nbytes))

    def dtod(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            self.check("cuMemcpyDtoD", self.lib.cuMemcpyDtoD_v2(dst, src, nbytes))

    def synchronize(self) -> None:
        self.check("cuCtxSynchronize", self.lib.cuCtxSynchronize())

    # -- code -----------------------------------------------------------------------------
    def load_module(self, ptx: str) -> int:
        """Load PTX (JIT-compiled by the driver); a rejected module raises with the JIT log."""
        log = ctypes.create_string_buffer(16384)
        opts = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        vals = (_P * 2)(ctypes.cast(log, _P), _P(len(log)))
        mod = _P()
        rc = self.lib.cuModuleLoadDataEx(ctypes.byref(mod), ptx.encode() + b"\0", 2, opts, vals)
        if rc != 0:
            raise CUDAError(f"the CUDA driver rejected the generated PTX: {self.error_text(rc)}"
                            f"\n{log.value.decode(errors='replace')}")
        return int(mod.value)

    def function(self, module: int, name: str) -> int:
        fn = _P()
        self.check(f"cuModuleGetFunction({name})",
                   self.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()))
        return int(fn.value)

    def launch(self, fn: int, grid: int, block: int, params: Any, what: str = "") -> None:
        """Launch on the default stream; ``params`` is a ``void*[]`` of argument pointers."""
        self.check(f"cuLaunchKernel({what})",
                   self.lib.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, None, params, None))


_driver: Driver | None = None
_driver_error: NoCUDAError | None = None
_lock = threading.Lock()


def driver() -> Driver:
    """The process-wide driver (created on first use; a failure is remembered and re-raised)."""
    global _driver, _driver_error
    with _lock:
        if _driver is None:
            if _driver_error is not None:
                raise NoCUDAError(str(_driver_error))
            try:
                _driver = Driver()
            except NoCUDAError as e:
                _driver_error = e
                raise
        return _driver


def available() -> bool:
    """Whether a CUDA driver and at least one GPU are present (for skipping tests)."""
    try:
        driver()
        return True
    except (NoCUDAError, CUDAError):
        return False


__all__ = ["Driver", "driver", "available", "NoCUDAError", "CUDAError"]
