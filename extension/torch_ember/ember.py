"""The device module registered as `torch.ember`: `torch.cuda`'s names, for ember."""

from __future__ import annotations

from torch_ember.device import (
    current_device,
    device,
    device_count,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from torch_ember.memory import (
    empty_cache,
    max_memory_allocated,
    memory_allocated,
    memory_reserved,
    reset_peak_memory_stats,
)

__all__ = [
    "current_device",
    "device",
    "device_count",
    "empty_cache",
    "init",
    "is_available",
    "is_initialized",
    "max_memory_allocated",
    "memory_allocated",
    "memory_reserved",
    "reset_peak_memory_stats",
    "set_device",
    "synchronize",
]
