"""Pinned host memory: the statistics and the cache of ember's host allocator
(`torch.cuda.memory`'s host names).

The host allocator is PyTorch's caching one (`at::CachingHostAllocatorImpl`, in
csrc/memory/EmberPinned.cpp): a freed pinned block is kept for reuse, and reused only
once the copies queued on it have finished. PyTorch binds its statistics to Python for
CUDA only, so these functions call C entry points of `torch_ember._C`
(csrc/bindings/EmberHostMemory.cpp) through ctypes (`backend.entry`).

`torch.accelerator.empty_host_cache()` empties the same cache, but does nothing until
ember has been initialized (the first ember tensor created from Python): PyTorch skips a
lazily initialized device that was not. `empty_host_cache` here always empties it.
"""

from __future__ import annotations

import collections
import ctypes
from typing import Any

from . import backend

# torch.cuda's names only; empty_host_cache, ember's own, is public but not listed.
__all__ = [
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats",
    "reset_peak_host_memory_stats",
]

# The order emberHostMemoryStats writes its values in.
_COUNTERS = ("active_requests", "active_bytes", "allocations", "allocated_bytes")
_COUNTER_FIELDS = ("current", "peak", "allocated", "freed")
_TIMES = ("host_alloc_time", "host_free_time")
_TIME_FIELDS = ("total", "max", "min", "count")
_VALUES = len(_COUNTERS) * len(_COUNTER_FIELDS) + 2 + len(_TIMES) * len(_TIME_FIELDS)


def _entry(name: str) -> Any:  # a ctypes function
    """The backend's C entry point `name` (csrc/bindings/EmberHostMemory.cpp)."""
    return backend.entry(name)


def _call(name: str, *arguments: int) -> None:
    if _entry(name)(*arguments) != 0:
        raise RuntimeError(f"ember: {name} failed (no host allocator is registered for ember)")


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """The host allocator's statistics, nested as `torch.cuda.host_memory_stats_as_nested_dict`:
    {"allocations": {"current": ..., "peak": ..., "allocated": ..., "freed": ...}, ...,
    "num_host_alloc": ..., "host_alloc_time": {"total": ..., ..., "avg": ...}}."""
    values = (ctypes.c_int64 * _VALUES)()
    function = _entry("emberHostMemoryStats")
    function.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t]
    function.restype = ctypes.c_int64
    if function(values, _VALUES) != _VALUES:
        raise RuntimeError("ember: emberHostMemoryStats failed (no host allocator is registered for ember)")
    numbers = iter(values)
    stats: dict[str, Any] = {name: dict(zip(_COUNTER_FIELDS, numbers, strict=False)) for name in _COUNTERS}
    stats["num_host_alloc"], stats["num_host_free"] = next(numbers), next(numbers)
    for name in _TIMES:
        time = dict(zip(_TIME_FIELDS, numbers, strict=False))
        time["avg"] = time["total"] // time["count"] if time["count"] else 0
        stats[name] = time
    return stats


def host_memory_stats() -> collections.OrderedDict[str, Any]:
    """The host allocator's statistics, flat and sorted as `torch.cuda.host_memory_stats`:
    "allocations.current" (blocks held, in use or cached), "allocated_bytes.current",
    "active_requests.current" (blocks in use), "active_bytes.current", their ".peak",
    ".allocated" and ".freed"; "num_host_alloc" and "num_host_free" (blocks mapped from
    and returned to the OS: an allocation the cache served counts in
    "active_requests.allocated" only); "host_alloc_time.*" and "host_free_time.*"
    (microseconds)."""
    flat: list[tuple[str, Any]] = []
    for key, value in host_memory_stats_as_nested_dict().items():
        if isinstance(value, dict):
            flat.extend((f"{key}.{field}", number) for field, number in value.items())
        else:
            flat.append((key, value))
    return collections.OrderedDict(sorted(flat))


def reset_peak_host_memory_stats() -> None:
    """Reset the ".peak" statistics (and the timings' max and min) to the current values."""
    _call("emberResetHostMemoryStats", 1)


def reset_accumulated_host_memory_stats() -> None:
    """Reset the ".allocated" and ".freed" statistics (and the timings' totals and counts)."""
    _call("emberResetHostMemoryStats", 0)


def empty_host_cache() -> None:
    """Return the cached pinned blocks to the OS (blocks whose copies are still queued on a
    stream stay cached until they finish). Pinned tensors alive keep their memory."""
    _call("emberEmptyHostCache")
