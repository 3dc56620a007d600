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


# -- Chapter 10: storages and serialization --------------------------------------------------
