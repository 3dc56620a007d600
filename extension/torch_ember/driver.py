"""The ember driver's C API seen from Python, through ctypes.

The device module talks to the driver the way `torch.cuda` talks to the CUDA
runtime: directly, for what PyTorch has no generic call for (device count,
memory counters). The functions are looked up in whichever library holds the
driver: `torch_ember._C` in the package, the book's `libember_driver.so` in the
chapters. Argument and result types are declared once, here.

This file imports nothing from `torch_ember`, so the book can load it on its own.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

__all__ = ["Driver", "MemStats"]


class MemStats(ctypes.Structure):
    """`emMemStats`: one device's memory counters, in bytes and counts."""

    _fields_ = [
        ("bytes_in_use", ctypes.c_size_t),
        ("peak_bytes_in_use", ctypes.c_size_t),
        ("live_allocations", ctypes.c_size_t),
        ("total_allocations", ctypes.c_size_t),
        ("total_frees", ctypes.c_size_t),
    ]


_INT_P = ctypes.POINTER(ctypes.c_int)
# name: (argument types); every entry point returns an emError_t (int).
_SIGNATURES: dict[str, list[type]] = {
    "emGetDeviceCount": [_INT_P],
    "emGetDevice": [_INT_P],
    "emSetDevice": [ctypes.c_int],
    "emDeviceSynchronize": [ctypes.c_int],
    "emMalloc": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t],
    "emFree": [ctypes.c_void_p],
    "emMemcpy": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int],
    "emMemGetStats": [ctypes.c_int, ctypes.POINTER(MemStats)],
    "emMemResetPeak": [ctypes.c_int],
}


class Driver:
    """The driver's entry points, checked: a failed call raises RuntimeError with the
    same text as C++'s EMBER_CHECK (the driver's reason and detail, then the call)."""

    def __init__(self, library: str | Path) -> None:
        # RTLD_GLOBAL: chapter builds of the book resolve the driver's symbols against this copy.
        self.lib = ctypes.CDLL(str(library), mode=os.RTLD_GLOBAL)
        for name, argtypes in _SIGNATURES.items():
            function = getattr(self.lib, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int
        for name in ("emGetErrorString", "emGetErrorDetail"):
            getattr(self.lib, name).argtypes = [ctypes.c_int]
            getattr(self.lib, name).restype = ctypes.c_char_p

    def check(self, error: int, call: str) -> None:
        if error != 0:
            reason = self.lib.emGetErrorString(error).decode()
            detail = self.lib.emGetErrorDetail(error).decode()
            raise RuntimeError(f"ember driver error: {reason}{': ' + detail if detail else ''} (in {call})")

    def device_count(self) -> int:
        count = ctypes.c_int(0)
        self.check(self.lib.emGetDeviceCount(ctypes.byref(count)), "emGetDeviceCount")
        return count.value

    def current_device(self) -> int:
        device = ctypes.c_int(-1)
        self.check(self.lib.emGetDevice(ctypes.byref(device)), "emGetDevice")
        return device.value

    def set_device(self, device: int) -> None:
        self.check(self.lib.emSetDevice(device), f"emSetDevice({device})")

    def synchronize(self, device: int) -> None:
        self.check(self.lib.emDeviceSynchronize(device), f"emDeviceSynchronize({device})")

    def mem_stats(self, device: int) -> MemStats:
        stats = MemStats()
        self.check(self.lib.emMemGetStats(device, ctypes.byref(stats)), f"emMemGetStats({device})")
        return stats

    def reset_peak(self, device: int) -> None:
        self.check(self.lib.emMemResetPeak(device), f"emMemResetPeak({device})")
