"""The ember driver's C API seen from Python, through ctypes.

The device module talks to the driver the way `torch.cuda` talks to the CUDA
runtime: directly, for what PyTorch has no generic call for (device count,
memory counters). The functions are looked up in whichever library holds the
driver: `torch_ember._C` in the package, the book's `libember_driver.so` in the
chapters. Argument and result types are declared once, here.

Streams are named by (device, id), id 0 being a device's default stream; sync events
(`emSyncEvent*`, apart from the trace callback's `emEvent`) by a process-unique id > 0.

This file imports nothing from `torch_ember`, so the book can load it on its own.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

__all__ = ["DISABLE_TIMING", "Driver", "MemStats"]

DISABLE_TIMING = 1  # emSyncEventDisableTiming


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
_I64 = ctypes.c_int64  # emStream_t, emSyncEvent_t
_I64_P = ctypes.POINTER(ctypes.c_int64)
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
    # Streams: (device, id).
    "emStreamCreate": [ctypes.c_int, _I64_P],
    "emStreamQuery": [ctypes.c_int, _I64, _INT_P],
    "emStreamSynchronize": [ctypes.c_int, _I64],
    "emGetStream": [ctypes.c_int, _I64_P],
    "emSetStream": [ctypes.c_int, _I64],
    "emMemcpyAsync": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _I64],
    "emSleepAsync": [ctypes.c_uint64, ctypes.c_int, _I64],
    # Sync events.
    "emSyncEventCreate": [ctypes.c_int, _I64_P, ctypes.c_uint],
    "emSyncEventDestroy": [_I64],
    "emSyncEventRecord": [_I64, ctypes.c_int, _I64],
    "emSyncEventQuery": [_I64, _INT_P],
    "emSyncEventSynchronize": [_I64],
    "emStreamWaitSyncEvent": [ctypes.c_int, _I64, _I64],
    "emSyncEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _I64, _I64],
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

    # Streams. A stream is (device, id); id 0 is the device's default stream.

    def stream_create(self, device: int) -> int:
        stream = ctypes.c_int64(0)
        self.check(self.lib.emStreamCreate(device, ctypes.byref(stream)), f"emStreamCreate({device})")
        return stream.value

    def stream_query(self, device: int, stream: int) -> bool:
        """True if everything queued on the stream has finished."""
        idle = ctypes.c_int(0)
        self.check(
            self.lib.emStreamQuery(device, stream, ctypes.byref(idle)), f"emStreamQuery({device}, {stream})"
        )
        return bool(idle.value)

    def stream_synchronize(self, device: int, stream: int) -> None:
        self.check(self.lib.emStreamSynchronize(device, stream), f"emStreamSynchronize({device}, {stream})")

    def current_stream(self, device: int) -> int:
        """This thread's current stream on `device` (0 until set)."""
        stream = ctypes.c_int64(-1)
        self.check(self.lib.emGetStream(device, ctypes.byref(stream)), f"emGetStream({device})")
        return stream.value

    def set_stream(self, device: int, stream: int) -> None:
        self.check(self.lib.emSetStream(device, stream), f"emSetStream({device}, {stream})")

    def sleep(self, microseconds: int, device: int, stream: int) -> None:
        """Keeps the stream busy for `microseconds` (returns at once)."""
        self.check(
            self.lib.emSleepAsync(microseconds, device, stream),
            f"emSleepAsync({microseconds}, {device}, {stream})",
        )

    def memcpy_async(self, dst: int, src: int, count: int, kind: int, device: int, stream: int) -> None:
        """emMemcpyAsync with raw addresses (kind: 0 H2D, 1 D2H, 2 D2D); host memory must outlive the copy."""
        self.check(
            self.lib.emMemcpyAsync(dst, src, count, kind, device, stream),
            f"emMemcpyAsync({count} bytes, kind {kind}, {device}, {stream})",
        )

    # Sync events.

    def event_create(self, device: int, enable_timing: bool = True) -> int:
        event = ctypes.c_int64(0)
        flags = 0 if enable_timing else DISABLE_TIMING
        self.check(
            self.lib.emSyncEventCreate(device, ctypes.byref(event), flags),
            f"emSyncEventCreate({device}, {flags})",
        )
        return event.value

    def event_destroy(self, event: int) -> None:
        self.check(self.lib.emSyncEventDestroy(event), f"emSyncEventDestroy({event})")

    def event_record(self, event: int, device: int, stream: int) -> None:
        self.check(
            self.lib.emSyncEventRecord(event, device, stream),
            f"emSyncEventRecord({event}, {device}, {stream})",
        )

    def event_query(self, event: int) -> bool:
        """True if the event's latest record has completed (raises if it was never recorded)."""
        done = ctypes.c_int(0)
        self.check(self.lib.emSyncEventQuery(event, ctypes.byref(done)), f"emSyncEventQuery({event})")
        return bool(done.value)

    def event_synchronize(self, event: int) -> None:
        self.check(self.lib.emSyncEventSynchronize(event), f"emSyncEventSynchronize({event})")

    def stream_wait_event(self, device: int, stream: int, event: int) -> None:
        self.check(
            self.lib.emStreamWaitSyncEvent(device, stream, event),
            f"emStreamWaitSyncEvent({device}, {stream}, {event})",
        )

    def event_elapsed_time(self, start: int, end: int) -> float:
        """Milliseconds from `start`'s timestamp to `end`'s (both recorded and completed)."""
        ms = ctypes.c_float(0.0)
        self.check(
            self.lib.emSyncEventElapsedTime(ctypes.byref(ms), start, end),
            f"emSyncEventElapsedTime({start}, {end})",
        )
        return ms.value
