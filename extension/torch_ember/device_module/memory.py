"""Memory: what the allocator holds (`torch.cuda.memory`'s names).

The allocator of the device_guard chapter is a c10::DeviceAllocator (the device cache), so
torch.accelerator's memory functions read its statistics. With the allocator chapter's allocator,
which is not a DeviceAllocator, every function answers from the driver's own counters,
so every chapter's backend works with this module. (The allocator chapter shows the first
versions, which knew only the driver: chapters/history/allocator.py.)
"""

from __future__ import annotations

import ctypes
import pickle
import sys
from typing import TYPE_CHECKING, Any, Literal

import torch

from . import backend
from .devices import DeviceLike, _device_index, _the_driver

if TYPE_CHECKING:
    from torch_ember.driver import MemStats

# torch.cuda's names only; driver_memory_stats, ember's own, is public but not listed.
__all__ = [
    "empty_cache",
    "get_allocator_backend",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
]


# ember-book: begin memory
def driver_memory_stats(device: DeviceLike = None) -> MemStats:
    """The driver's memory counters for `device`: bytes_in_use, peak_bytes_in_use,
    live_allocations, total_allocations, total_frees."""
    return _the_driver().mem_stats(_device_index(device))


def _caching() -> bool:
    """Whether the loaded allocator is a c10::DeviceAllocator (the device cache)."""
    try:
        return torch._C._accelerator_isAllocatorInitialized()
    # "Allocator for <ember> is not a DeviceAllocator": chapter 01's allocator
    except RuntimeError:
        return False


def get_allocator_backend() -> str:
    """The allocator's name, as `torch.cuda.get_allocator_backend`: "native" for the
    device cache, "driver" for chapter 01's allocator (every tensor one driver
    allocation)."""
    return "native" if _caching() else "driver"


def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    """The allocator's statistics for `device`, under `torch.cuda.memory_stats`' keys
    ("allocated_bytes.all.current", "reserved_bytes.all.peak", "num_ooms", ...)."""
    index = _device_index(device)
    if not _caching():
        stats = driver_memory_stats(index)
        return {
            "allocated_bytes.all.current": stats.bytes_in_use,
            "allocated_bytes.all.peak": stats.peak_bytes_in_use,
            "reserved_bytes.all.current": stats.bytes_in_use,
            "reserved_bytes.all.peak": stats.peak_bytes_in_use,
        }
    return dict(torch.accelerator.memory_stats(index))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes held by live ember tensors on `device` (blocks are rounded up to 512
    bytes)."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: DeviceLike = None) -> int:
    """The peak of `memory_allocated(device)` since the process started or the last
    reset."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes the allocator holds from the driver on `device`: in use, or cached for
    reuse."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: DeviceLike = None) -> int:
    """The peak of `memory_reserved(device)` since the process started or the last
    reset."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Reset the peaks (`max_memory_allocated`, `max_memory_reserved`) to the current
    values."""
    index = _device_index(device)
    if _caching():
        torch.accelerator.reset_peak_memory_stats(index)
    else:
        _the_driver().reset_peak(index)


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Reset the running totals of `memory_stats` (".allocated", ".freed", "num_ooms",
    ...)."""
    if _caching():
        torch.accelerator.reset_accumulated_memory_stats(_device_index(device))


def empty_cache() -> None:
    """Give every cached block that no tensor uses back to the driver (then
    `memory_reserved` drops). Memory of live tensors stays where it is."""
    if _caching():
        torch.accelerator.empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of `device` as the driver sees them, like
    `torch.cuda.mem_get_info`: the total is the capacity (EMBER_DEVICE_MEMORY_BYTES,
    default 4 GiB); cached blocks count as used."""
    index = _device_index(device)
    if _caching():
        return torch.accelerator.get_memory_info(index)
    raise RuntimeError(
        "ember: mem_get_info needs the caching allocator (the end of chapter 11)",
    )


# ember-book: end memory


def _format_bytes(count: int) -> str:
    for unit in ("B  ", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:7d} {unit}" if unit == "B  " else f"{count:7.2f} {unit}"
        count /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A table of `memory_stats(device)`, as `torch.cuda.memory_summary` prints: current, peak,
    allocated and freed totals of the allocator's bytes and counts. `abbreviated` keeps the totals
    over both pools; otherwise the small (below 1 MiB) and large pools get a line each too."""
    index = _device_index(device)
    stats = memory_stats(index)
    pools = ["all"] if abbreviated else ["all", "small_pool", "large_pool"]
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Cached split memory", "inactive_split_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocations", "active", False),
        ("Segments (driver allocations)", "segment", False),
    ]
    columns = ("current", "peak", "allocated", "freed")
    width = 78
    lines = [
        "=" * width,
        f" ember memory summary, device {index} ({get_allocator_backend()} allocator)".ljust(width),
        "-" * width,
        f"{'Metric':<32}" + "".join(f"{name.capitalize():>11}" for name in ("cur", "peak", "alloc", "freed")),
        "-" * width,
    ]
    for label, key, is_bytes in rows:
        if f"{key}.all.current" not in stats:
            continue
        for pool in pools:
            name = label if pool == "all" else f"  from {pool.replace('_', ' ')}"
            values = [stats.get(f"{key}.{pool}.{column}", 0) for column in columns]
            cells = [_format_bytes(v).strip() if is_bytes else str(v) for v in values]
            lines.append(f"{name:<32}" + "".join(f"{cell:>11}" for cell in cells))
    lines.append("-" * width)
    for key in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
        if key in stats:
            lines.append(f"{key:<32}{stats[key]:>11}")
    lines.append("=" * width)
    return "\n".join(lines)


# Memory history and snapshots, as torch.cuda.memory's private functions of these names.
# The C++ half lives in the backend (csrc/memory/EmberMemoryHistory.cpp): the device
# cache reports every allocation, free and segment to it; csrc/bindings/EmberMemoryBindings.cpp
# has the entry points called here.


def _record_memory_history(
    enabled: Literal["state", "all"] | bool | None = "all",
    context: Literal["state", "alloc", "all"] | None = "all",
    stacks: Literal["python", "all"] = "all",
    max_entries: int = sys.maxsize,
    device: DeviceLike = None,
    clear_history: bool = False,
) -> None:
    """Record what the device cache does, with stacks, as
    `torch.cuda.memory._record_memory_history`: `enabled="all"` keeps the last
    `max_entries` actions per device (alloc, free_requested, free_completed,
    segment_alloc, segment_free, oom, snapshot) and the stack of every live block;
    `"state"` only the stacks of live blocks; `None` stops recording and drops the
    history. `context` says which actions carry a stack ("state": none in the trace,
    "alloc": allocations, "all": frees too); `stacks="python"` gathers Python frames
    only (cheap), `"all"` C++ frames too. One history serves every ember device
    (`device` is accepted for CUDA's signature). `clear_history` drops the trace recorded
    so far (the stacks of live blocks stay). The legacy form
    `_record_memory_history(True/False)` means "all"/None."""
    del device
    if isinstance(enabled, bool):
        enabled = "all" if enabled else None
    record = backend.entry("emberRecordMemoryHistory", python=True)
    record.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    record(
        None if enabled is None else str(enabled).encode(),
        None if context is None else str(context).encode(),
        str(stacks).encode(),
        min(max_entries, 2**64 - 1),
        int(clear_history),
    )


def _snapshot(device: DeviceLike = None) -> dict[str, Any]:
    """The device cache's state as `torch.cuda.memory._snapshot()` gives CUDA's: "segments"
    (one per driver allocation, with its "blocks" and their state and frames),
    "device_traces" (the recorded history, a list per device) and "allocator_settings".
    `torch.cuda._memory_viz` reads it (`segsum`, `trace_plot`, `segment_plot`)."""
    del device
    snapshot = backend.entry("emberMemorySnapshot", python=True)
    snapshot.argtypes = []
    return snapshot()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickle `_snapshot()` to `filename`, the file pytorch.org/memory_viz opens."""
    with open(filename, "wb") as file:
        pickle.dump(_snapshot(), file)
