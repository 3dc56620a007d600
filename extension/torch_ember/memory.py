"""ember memory statistics, read from the driver (exported as `torch.ember.*`).

The allocator asks the driver for every tensor's storage and frees it when the
storage dies; there is no caching allocator yet. So "allocated" and "reserved"
are the same number, and there is no cache to empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_ember import _C
from torch_ember.device import DeviceLike, _device_index

__all__ = [
    "DriverMemoryStats",
    "driver_memory_stats",
    "empty_cache",
    "max_memory_allocated",
    "memory_allocated",
    "memory_reserved",
    "reset_peak_memory_stats",
]


@dataclass(frozen=True)
class DriverMemoryStats:
    """The ember driver's counters for one device (`emMemStats`)."""

    bytes_in_use: int  # sum of the sizes of live allocations, as requested
    peak_bytes_in_use: int  # high-water mark of bytes_in_use since the last reset
    live_allocations: int
    total_allocations: int  # successful emMalloc calls, ever
    total_frees: int  # successful emFree calls, ever


def driver_memory_stats(device: DeviceLike = None) -> DriverMemoryStats:
    """The driver's memory counters for `device` (default: the current device)."""
    return DriverMemoryStats(**_C._memory_stats(_device_index(device)))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes of device memory held by live ember storages on `device`."""
    return driver_memory_stats(device).bytes_in_use


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of `memory_allocated(device)` since the process started or the last reset."""
    return driver_memory_stats(device).peak_bytes_in_use


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Reset the peak that `max_memory_allocated(device)` reports to the current usage."""
    _C._reset_peak_memory(_device_index(device))


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes reserved from the driver on `device`: equal to `memory_allocated`, as nothing is cached."""
    return memory_allocated(device)


def empty_cache() -> None:
    """Release cached device memory: a no-op, the allocator caches nothing (every free goes to the driver)."""
