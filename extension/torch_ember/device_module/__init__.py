"""The ember device module: `torch.ember`, and `torch.privateuseone` in the book until
the renaming chapter.

PyTorch imports `torch.<backend name>` the first time a device of that type is used,
and `torch.manual_seed` looks for `_is_in_bad_fork` and `manual_seed_all` on it (without
both it warns that the seed "does not take effect"). The rest mirrors `torch.cuda`'s
names, and its layout (`memory`, `random` and `streams` hold what `torch.cuda`'s
modules of those names hold): one module per subject, each re-exported here.

| module | what | chapter |
| --- | --- | --- |
| `devices` | count, current device, synchronize, the `device` context | 01 |
| `memory` | what the allocator holds (driver counters, then the device cache) | 01, 11 |
| `host_memory` | the pinned host allocator's statistics and cache | 16 |
| `mixed_precision` | the dtypes `torch.autocast` may use | 09 |
| `random` | the default generators: seeds and states | 10 |
| `streams` | `Stream`, `Event` and the current stream | 11 |
| `storage` | storage formats; refusing to share ember memory across processes | 12 |

Nothing here imports from `torch_ember` at run time (the sub-modules import each other
relatively), so the book loads this package by path without the compiled backend.
`attach(driver)` gives it the driver it talks to.
"""

from __future__ import annotations

from . import devices as devices
from . import graphs as graphs
from . import host_memory as host_memory
from . import memory as memory
from . import mixed_precision as mixed_precision
from . import random as random
from . import storage as storage
from . import streams as streams
from .devices import DeviceLike as DeviceLike
from .devices import _is_in_bad_fork as _is_in_bad_fork
from .devices import attach as attach
from .devices import (
    current_device,
    device,
    device_count,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from .graphs import EmberGraph, graph, graph_pool_handle
from .host_memory import empty_host_cache as empty_host_cache
from .host_memory import (
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
)
from .memory import driver_memory_stats as driver_memory_stats
from .memory import (
    empty_cache,
    get_allocator_backend,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .mixed_precision import get_amp_supported_dtype, is_bf16_supported
from .random import default_generator as default_generator
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .storage import STORAGE_FORMATS as STORAGE_FORMATS
from .storage import set_storage_format as set_storage_format
from .storage import storage_format as storage_format
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from .streams import _sleep as _sleep


# ember-book: begin rng_initialized
def __getattr__(name: str) -> bool:
    """`torch.ember._initialized`: whether ember has random state worth saving.

    torch.utils.checkpoint reads `_initialized` of the device module (torch.cuda sets it
    when CUDA's lazy initialization has run), and only then saves the device's generator
    states before the forward and restores them before the recomputation. Without the
    attribute it saves nothing, and a recomputed dropout draws a new mask: wrong
    gradients, and no warning. Ember needs no lazy initialization: its state exists as
    soon as the backend has generators.
    """
    if name == "_initialized":
        return is_initialized() and random._has_generators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ember-book: end rng_initialized

# torch.cuda's names only. Ember's own (attach, driver_memory_stats, empty_host_cache,
# default_generator, the storage formats) and what PyTorch asks for (_is_in_bad_fork) are
# imported as `name as name`: public, but not listed.
__all__ = [
    "EmberGraph",
    "Event",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_allocator_backend",
    "get_amp_supported_dtype",
    "get_rng_state",
    "graph",
    "graph_pool_handle",
    "get_rng_state_all",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]
