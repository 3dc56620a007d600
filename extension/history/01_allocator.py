"""Chapter 01's versions of the device module's Python that later chapters replace.

The book shows these (cells `%%py memory` and `%%py bad_fork` of chapter 01); the
package has the latest versions only (torch_ember/device_module/memory.py, from
chapter 09's device cache, and devices.py's `_is_in_bad_fork`, from chapter 09's fork
guard). `python -m book.sync --check` holds every version equal to the cell that
shows it. Not part of the package: nothing imports this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch_ember.device_module.devices import DeviceLike, _device_index, _the_driver

if TYPE_CHECKING:
    from torch_ember.driver import MemStats


# ember-book: begin memory.v1
def driver_memory_stats(device: DeviceLike = None) -> MemStats:
    """The driver's memory counters for `device`: bytes_in_use, peak_bytes_in_use,
    live_allocations, total_allocations, total_frees."""
    return _the_driver().mem_stats(_device_index(device))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes of device memory held by live ember storages on `device`."""
    return driver_memory_stats(device).bytes_in_use


def max_memory_allocated(device: DeviceLike = None) -> int:
    """The peak of `memory_allocated(device)` since the process started or the last
    reset."""
    return driver_memory_stats(device).peak_bytes_in_use


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Reset the peak that `max_memory_allocated(device)` reports to the current
    usage."""
    _the_driver().reset_peak(_device_index(device))


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes reserved from the driver: equal to `memory_allocated`, since nothing is
    cached."""
    return memory_allocated(device)


def empty_cache() -> None:
    """Release cached device memory: nothing to do, every free goes straight to the
    driver."""


# ember-book: end memory.v1


# ember-book: begin bad_fork.v1
def _is_in_bad_fork() -> bool:
    # Unlike CUDA's, ember's driver state is ordinary process memory, which fork copies
    # intact. (torch.manual_seed asks before it seeds the device.)
    return False


# ember-book: end bad_fork.v1
