"""The ember device module: `torch.ember`, and `torch.privateuseone` in the book until chapter 11.

PyTorch imports `torch.<backend name>` the first time a device of that type is
used, and `torch.manual_seed` looks for `_is_in_bad_fork` and `manual_seed_all`
on it (without both it warns that the seed "does not take effect"). The rest
mirrors `torch.cuda`'s names. Devices and memory are the driver's business, so
the functions ask the driver (see `driver.py`): `torch_ember` attaches the
driver compiled into its `_C`, the book attaches its driver library.

Device indices are checked in one place, the driver: a bad index raises the
same RuntimeError here as in C++ (`EMBER_CHECK`), naming the index and the range.
This file imports nothing from `torch_ember`, so the book can load it on its own.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, TypeAlias

import torch

if TYPE_CHECKING:
    from torch_ember.driver import Driver, MemStats

DeviceLike: TypeAlias = torch.device | str | int | None

# torch.cuda's names only; driver_memory_stats, ember's own, is public but not listed.
__all__ = [
    "current_device",
    "device",
    "device_count",
    "empty_cache",
    "init",
    "is_available",
    "is_initialized",
    "manual_seed_all",
    "max_memory_allocated",
    "memory_allocated",
    "memory_reserved",
    "reset_peak_memory_stats",
    "set_device",
    "synchronize",
]

_driver: Driver | None = None


def attach(driver: Driver) -> None:
    """Give the module the driver it talks to (done once, by whoever registers the module)."""
    global _driver
    _driver = driver


def _the_driver() -> Driver:
    if _driver is None:
        raise RuntimeError("ember: the device module has no driver attached (call attach(driver) first)")
    return _driver


def _device_index(device: DeviceLike) -> int:
    """The index `device` names; None, or a device without an index, means the current one.

    The index itself is checked by the driver when it is used.
    """
    if device is None:
        return current_device()
    if isinstance(device, bool) or not isinstance(device, int | str | torch.device):
        raise TypeError(f"expected an ember device, an index or None, got {type(device).__name__}")
    if isinstance(device, int):
        return device
    parsed = torch.device(device)
    backend = torch._C._get_privateuse1_backend_name()
    if parsed.type != backend:
        raise ValueError(f"expected an {backend} device, got {str(parsed)!r}")
    return current_device() if parsed.index is None else parsed.index


# -- Devices ---------------------------------------------------------------------------------


def device_count() -> int:
    """The number of ember devices (the simulated machine has 2)."""
    return _the_driver().device_count()


def is_available() -> bool:
    return device_count() > 0


def current_device() -> int:
    """The index of the calling thread's current ember device (0 until changed)."""
    return _the_driver().current_device()


def set_device(device: DeviceLike) -> None:
    """Make `device` the calling thread's current ember device (a negative index is a no-op, as in CUDA)."""
    index = _device_index(device)
    if index >= 0:
        _the_driver().set_device(index)


def synchronize(device: DeviceLike = None) -> None:
    """Wait until all work issued to `device` has finished."""
    _the_driver().synchronize(_device_index(device))


def init() -> None:
    """Kept for parity with `torch.cuda.init()`: the driver needs no initialization, so this checks
    only that a device exists."""
    if not is_available():
        raise RuntimeError("ember: no ember device is available")


def is_initialized() -> bool:
    """Always True: the driver is ready as soon as its library is loaded (no lazy initialization)."""
    return _driver is not None


class device:  # noqa: N801 (the name mirrors torch.cuda.device)
    """Context manager: make `device` current, restore the previous device on exit.

    None or a negative index leaves the current device alone, as `torch.cuda.device` does.
    """

    def __init__(self, device: DeviceLike) -> None:
        self.index = -1 if device is None else _device_index(device)
        self.previous = -1

    def __enter__(self) -> None:
        if self.index >= 0:
            previous = current_device()
            _the_driver().set_device(self.index)
            self.previous = previous

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.previous >= 0:
            _the_driver().set_device(self.previous)
            self.previous = -1


# -- Memory: the driver's own counters (no caching allocator yet) ----------------------------


def driver_memory_stats(device: DeviceLike = None) -> MemStats:
    """The driver's memory counters for `device`: bytes_in_use, peak_bytes_in_use,
    live_allocations, total_allocations, total_frees."""
    return _the_driver().mem_stats(_device_index(device))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes of device memory held by live ember storages on `device`."""
    return driver_memory_stats(device).bytes_in_use


def max_memory_allocated(device: DeviceLike = None) -> int:
    """The peak of `memory_allocated(device)` since the process started or the last reset."""
    return driver_memory_stats(device).peak_bytes_in_use


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Reset the peak that `max_memory_allocated(device)` reports to the current usage."""
    _the_driver().reset_peak(_device_index(device))


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes reserved from the driver: equal to `memory_allocated`, since nothing is cached."""
    return memory_allocated(device)


def empty_cache() -> None:
    """Release cached device memory: nothing to do, every free goes straight to the driver."""


# -- What torch.manual_seed looks for --------------------------------------------------------


def _is_in_bad_fork() -> bool:
    # Unlike CUDA's, ember's driver state is ordinary process memory, which fork copies intact.
    return False


# manual_seed_all: in the section "Chapter 08" below (torch.manual_seed calls it).


# Each later chapter owns one section below and appends its public names to __all__ there
# (`__all__ += [...]`), so sections can change independently.

# -- Chapter 07: automatic mixed precision ---------------------------------------------------

# torch.autocast(device_type=<ember>) asks the device module for the dtypes ember computes in lower
# precision (on 2.13 the only function it requires): without it, autocast raises an AssertionError;
# a dtype not in the list makes autocast warn, naming the device, and run disabled.

__all__ += ["get_amp_supported_dtype", "is_bf16_supported"]


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes `torch.autocast` may use on ember: its matrix products take float16 and bfloat16
    (computed in float32 and rounded, chapter 07)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether ember computes in bfloat16 (as `torch.cuda.is_bf16_supported`): always, for the
    matrix products autocast runs in lower precision."""
    del including_emulation
    return True


# -- Chapter 08: random number generators ----------------------------------------------------

__all__ += [
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]

_DEFAULT_GENERATOR_OP = "ember::default_generator"


def _has_generators() -> bool:
    """Whether the loaded backend has ember's generators (the book's chapters before 08 do not)."""
    return torch._C._dispatch_has_kernel(_DEFAULT_GENERATOR_OP)


def default_generator(device: DeviceLike = None) -> torch.Generator:
    """The default generator of `device`: what random operators use without a `generator=` argument.

    The backend hands it out through the operator `ember::default_generator`, looked up on every call: a
    rebuilt backend (in the book) has generators of its own.
    """
    index = _device_index(device)
    if not _has_generators():
        raise RuntimeError("ember: the loaded backend has no random number generator (chapter 08 adds one)")
    operator, _ = torch._C._jit_get_operation(_DEFAULT_GENERATOR_OP)
    return operator(index)


def manual_seed(seed: int) -> None:
    """Seed the current ember device's default generator."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every ember device's default generator. torch.manual_seed calls this; with a backend
    that has no generator yet (the book before chapter 08) there is nothing to seed."""
    if _has_generators():
        for index in range(device_count()):
            default_generator(index).manual_seed(int(seed))


def seed() -> None:
    """Seed the current ember device's default generator with a nondeterministic number."""
    default_generator().seed()


def seed_all() -> None:
    """Seed every ember device's default generator with one nondeterministic number."""
    chosen = default_generator(0).seed()
    manual_seed_all(chosen)


def initial_seed() -> int:
    """The seed of the current ember device's default generator."""
    return default_generator().initial_seed()


def get_rng_state(device: DeviceLike = None) -> torch.Tensor:
    """The state of `device`'s default generator: a CPU uint8 tensor (seed and offset, 16 bytes)."""
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = None) -> None:
    """Restore the state of `device`'s default generator from `get_rng_state`'s tensor."""
    default_generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """The states of every ember device's default generator, by device index."""
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """Restore every ember device's default generator from `get_rng_state_all`'s list."""
    if len(new_states) != device_count():
        raise ValueError(
            f"ember: expected {device_count()} generator states, one per device, got {len(new_states)}"
        )
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


# -- Chapter 09: streams and events ----------------------------------------------------------

__all__ += [
    "Event",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]


def _backend_device(index: int) -> torch.device:
    return torch.device(torch._C._get_privateuse1_backend_name(), index)


class Stream(torch.Stream):
    """An ember stream: an in-order queue of device work, run asynchronously to the host.

    `Stream(device)` hands out one of the device's pool streams (the guard's `getNewStream`). Everything
    else is `torch.Stream`'s, through the device guard: `query`, `synchronize`, `wait_event`, `wait_stream`,
    `record_event`, and `with stream:`. Like `torch.cuda.Stream`, it is a `torch.Stream`, so it goes
    wherever one is accepted (`torch.accelerator.set_stream`, `Tensor.record_stream`).
    """

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: int) -> Stream:
        if kwargs:  # Stream(stream_id=..., device_index=..., device_type=...): an existing stream
            return super().__new__(cls, priority=priority, **kwargs)
        return super().__new__(cls, _backend_device(_device_index(device)), priority=priority)

    @classmethod
    def _wrap(cls, stream: torch.Stream) -> Stream:
        """The same driver stream as an ember `Stream`."""
        return cls(
            stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
        )

    def record_event(self, event: Event | None = None) -> Event:
        """Record `event` (a new one if None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<{_backend_device(self.device_index)} stream {self.stream_id}>"


class Event(torch.Event):
    """A marker in a stream: it completes when the stream's work before it has run.

    Unlike `torch.Event`, waiting on an event that was never recorded is an error: PyTorch treats it as
    "nothing to wait for" (the wait returns at once), which hides a missing `record()`.
    """

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Event:
        backend = torch._C._get_privateuse1_backend_name()
        return super().__new__(
            cls, backend, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess
        )

    @property
    def recorded(self) -> bool:
        """Whether `record()` was called: the driver's event is created by the first record."""
        return self.event_id != 0

    def _check_recorded(self, what: str) -> None:
        if not self.recorded:
            raise RuntimeError(
                f"ember: cannot {what} an event that was never recorded (on {self.device.type}); "
                "call event.record() on a stream first"
            )

    def record(self, stream: torch.Stream | None = None) -> None:
        """Record on `stream` (default: the current stream of the current device)."""
        super().record(current_stream() if stream is None else stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        """Make the later work of `stream` (default: the current stream) wait for this event."""
        self._check_recorded("wait on")
        super().wait(current_stream() if stream is None else stream)

    def synchronize(self) -> None:
        """Wait on the host until the event has completed."""
        self._check_recorded("synchronize")
        super().synchronize()

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event to `end_event`, both recorded with `enable_timing=True` and completed.

        `torch.Event.elapsed_time` of PyTorch 2.13 accepts only an exact `torch.Event` as the other event (it
        compares the type, not `isinstance`), so the driver answers for two ember events.
        """
        if not isinstance(end_event, torch.Event) or end_event.device.type != self.device.type:
            raise TypeError(f"expected an event of {self.device.type}, got {end_event!r}")
        if not (self.event_id and end_event.event_id):
            raise RuntimeError("ember: both events must be recorded before calculating elapsed time")
        return _the_driver().event_elapsed_time(self.event_id, end_event.event_id)

    def __repr__(self) -> str:
        where = f"{self.device}" if self.recorded else "not recorded"
        return f"<{torch._C._get_privateuse1_backend_name()} event {self.event_id} ({where})>"


def current_stream(device: DeviceLike = None) -> Stream:
    """The calling thread's current stream on `device` (default: the current device)."""
    return Stream._wrap(torch.accelerator.current_stream(_device_index(device)))


def default_stream(device: DeviceLike = None) -> Stream:
    """The default stream of `device`: stream 0, where work goes unless another stream is made current."""
    current = torch.accelerator.current_stream(_device_index(device))  # checks the index
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make `stream` the current stream of its device, and its device the current device (as
    `torch.cuda.set_stream` does)."""
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager: make `stream` current (and its device), restore both on exit. None does nothing."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._previous_device = -1
        self._previous_stream: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self._previous_device = current_device()
            self._previous_stream = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._previous_stream is not None:
            set_stream(self._previous_stream)
            set_device(self._previous_device)
            self._previous_stream = None


def stream(stream: torch.Stream | None) -> StreamContext:
    """`with torch.<device>.stream(s):` runs the block's ember work on `s`."""
    return StreamContext(stream)


def _sleep(microseconds: int) -> None:
    """Keep the current stream of the current device busy for `microseconds` and return at once (like
    `torch.cuda._sleep`): later work on that stream waits. For tests and demonstrations."""
    driver = _the_driver()
    device = current_device()
    driver.sleep(microseconds, device, driver.current_stream(device))


# -- Memory: the caching allocator (chapter 09) ----------------------------------------------

# The allocator at the end of chapter 09 is a c10::DeviceAllocator, so torch.accelerator's memory
# functions read its statistics. These replace the driver-counter versions of "Memory" above (chapter 01
# shows those); with chapter 01's allocator, which is not a DeviceAllocator, they still answer from the
# driver, so every chapter's backend works with this module.

__all__ += [
    "get_allocator_backend",
    "max_memory_reserved",
    "mem_get_info",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
]


def _caching() -> bool:
    """Whether the loaded allocator is a c10::DeviceAllocator (the device cache)."""
    try:
        return torch._C._accelerator_isAllocatorInitialized()
    except RuntimeError:  # "Allocator for <ember> is not a DeviceAllocator": chapter 01's
        return False


def get_allocator_backend() -> str:
    """The allocator's name, as `torch.cuda.get_allocator_backend`: "native" for the device cache,
    "driver" for chapter 01's allocator (every tensor one driver allocation)."""
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


def memory_allocated(device: DeviceLike = None) -> int:  # noqa: F811 (replaces "Memory" above)
    """Bytes held by live ember tensors on `device` (blocks are rounded up to 512 bytes)."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: DeviceLike = None) -> int:  # noqa: F811 (replaces "Memory" above)
    """The peak of `memory_allocated(device)` since the process started or the last reset."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: DeviceLike = None) -> int:  # noqa: F811 (replaces "Memory" above)
    """Bytes the allocator holds from the driver on `device`: in use, or cached for reuse."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: DeviceLike = None) -> int:
    """The peak of `memory_reserved(device)` since the process started or the last reset."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: DeviceLike = None) -> None:  # noqa: F811 (replaces "Memory" above)
    """Reset the peaks (`max_memory_allocated`, `max_memory_reserved`) to the current values."""
    index = _device_index(device)
    if _caching():
        torch.accelerator.reset_peak_memory_stats(index)
    else:
        _the_driver().reset_peak(index)


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Reset the running totals of `memory_stats` (".allocated", ".freed", "num_ooms", ...)."""
    if _caching():
        torch.accelerator.reset_accumulated_memory_stats(_device_index(device))


def empty_cache() -> None:  # noqa: F811 (replaces "Memory" above)
    """Give every cached block that no tensor uses back to the driver (then `memory_reserved` drops).
    Memory of live tensors stays where it is."""
    if _caching():
        torch.accelerator.empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of `device` as the driver sees them, like `torch.cuda.mem_get_info`: the
    total is the capacity (EMBER_DEVICE_MEMORY_BYTES, default 4 GiB); cached blocks count as used."""
    index = _device_index(device)
    if _caching():
        return torch.accelerator.get_memory_info(index)
    raise RuntimeError("ember: mem_get_info needs the caching allocator (the end of chapter 09)")


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


def _is_in_bad_fork() -> bool:  # noqa: F811 (replaces "Memory" above)
    """True in a child process forked after ember was used in its parent: ember refuses to run there
    (use the 'spawn' start method). torch.manual_seed asks, and then leaves ember's generators alone.
    Replaces the definition above, from before chapter 09's fork guard."""
    if torch._C._dispatch_has_kernel("ember::_in_bad_fork"):
        return bool(torch.ops.ember._in_bad_fork())
    return False


# -- Chapter 10: storages and serialization --------------------------------------------------

# A tensor's storage format (chapter 10) is backend metadata on its TensorImpl. Python reaches
# it the only way PyTorch offers, the flags of torch._utils.get/set_tensor_metadata, which
# torch.save and torch.load use too: one flag per format, "ember_format_<name>".
STORAGE_FORMATS = ("plain", "tiled", "blocked")
_FORMAT_FLAG = "ember_format_"


def storage_format(tensor: torch.Tensor) -> str:
    """The storage format of an ember tensor: "plain" unless one was set."""
    flags = torch._utils.get_tensor_metadata(tensor)
    named = [
        key.removeprefix(_FORMAT_FLAG) for key, on in flags.items() if key.startswith(_FORMAT_FLAG) and on
    ]
    return named[0] if named else "plain"


def set_storage_format(tensor: torch.Tensor, name: str) -> None:
    """Tag an ember tensor with a storage format (one of STORAGE_FORMATS)."""
    if name not in STORAGE_FORMATS:
        raise ValueError(
            f"ember: unknown storage format {name!r}; expected one of {', '.join(STORAGE_FORMATS)}"
        )
    if tensor.device.type != torch._C._get_privateuse1_backend_name():
        raise ValueError(
            f"ember: a storage format is a property of ember tensors; got a tensor on {tensor.device}"
        )
    flags = {f"{_FORMAT_FLAG}{other}": other == name for other in STORAGE_FORMATS if other != "plain"}
    torch._utils.set_tensor_metadata(tensor, flags)


def _refuse_sharing(device: torch.device, what: str) -> RuntimeError:
    return RuntimeError(
        f"ember: cannot share memory of {device} across processes ({what}): sharing needs host shared "
        "memory or an IPC handle for device memory, and the ember driver has neither. Copy the tensor to "
        "the CPU first (t.cpu().share_memory_()), or save it with torch.save."
    )


def _is_ember(device: torch.device) -> bool:
    return device.type == torch._C._get_privateuse1_backend_name()


def _install_sharing_refusal() -> None:
    """Make the cross-process sharing paths refuse ember memory with a clear error.

    PyTorch has no hook for this. `UntypedStorage.share_memory_` does nothing for every device but
    the CPU (CUDA shares through IPC handles instead), and `is_shared` answers True, so an ember
    tensor looks shared when it is not; `torch.multiprocessing` then fails deep inside, with a
    message about CPU file descriptors, in a queue's feeder thread. The wrappers stop both for
    ember storages and call PyTorch's functions for everything else. Installed once per process.
    """
    from multiprocessing.reduction import ForkingPickler

    storage = torch.UntypedStorage
    if getattr(storage.share_memory_, "_ember_refuses", False):
        return
    share_memory = storage.share_memory_
    is_shared = storage.is_shared

    def share_memory_(self: torch.UntypedStorage, *args: object, **kwargs: object) -> torch.UntypedStorage:
        if _is_ember(self.device):
            raise _refuse_sharing(self.device, "share_memory_")
        return share_memory(self, *args, **kwargs)

    def is_shared_(self: torch.UntypedStorage) -> bool:
        return False if _is_ember(self.device) else is_shared(self)

    share_memory_._ember_refuses = True  # type: ignore[attr-defined]
    storage.share_memory_ = share_memory_  # type: ignore[method-assign]
    storage.is_shared = is_shared_  # type: ignore[method-assign]

    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    for kind in (torch.Tensor, torch.nn.Parameter, torch.UntypedStorage):
        original = reducers.get(kind)
        if original is None:
            continue

        def reduce(obj: torch.Tensor | torch.UntypedStorage, original=original):  # noqa: ANN202
            if _is_ember(obj.device):
                raise _refuse_sharing(obj.device, "pickled for another process by torch.multiprocessing")
            return original(obj)

        ForkingPickler.register(kind, reduce)


_install_sharing_refusal()
# storage_format, set_storage_format and STORAGE_FORMATS are ember's own: public, but not in
# __all__, which lists torch.cuda's names only.
