"""Devices: how many, which one is current, and waiting for one (`torch.cuda`'s names).

Devices are the driver's business, so the functions ask the driver (see `driver.py`):
`torch_ember` attaches the driver compiled into its `_C`, the book attaches its driver
library. Device indices are checked in one place, the driver: a bad index raises the
same RuntimeError here as in C++ (`EMBER_CHECK`), naming the index and the range.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, TypeAlias

import torch

if TYPE_CHECKING:
    from torch_ember.driver import Driver

DeviceLike: TypeAlias = torch.device | str | int | None

__all__ = [
    "current_device",
    "device",
    "device_count",
    "init",
    "is_available",
    "is_initialized",
    "set_device",
    "synchronize",
]

# ember-book: begin devices
_driver: Driver | None = None


def attach(driver: Driver) -> None:
    """Give the module the driver it talks to (done once, by whoever registers it)."""
    global _driver
    _driver = driver


def _the_driver() -> Driver:
    if _driver is None:
        raise RuntimeError(
            "ember: no driver is attached to the device module (call attach(driver))",
        )
    return _driver


def _device_index(device: DeviceLike) -> int:
    """The index `device` names; None, or a device without an index, means the current
    one. The index itself is checked by the driver when it is used."""
    if device is None:
        return current_device()
    if isinstance(device, bool) or not isinstance(device, int | str | torch.device):
        kind = type(device).__name__
        raise TypeError(f"expected an ember device, an index or None, got {kind}")
    if isinstance(device, int):
        return device
    parsed = torch.device(device)
    backend = torch._C._get_privateuse1_backend_name()
    if parsed.type != backend:
        raise ValueError(f"expected an {backend} device, got {str(parsed)!r}")
    return current_device() if parsed.index is None else parsed.index


def device_count() -> int:
    """The number of ember devices (the simulated machine has 2)."""
    return _the_driver().device_count()


def is_available() -> bool:
    return device_count() > 0


def current_device() -> int:
    """The index of the calling thread's current ember device (0 until changed)."""
    return _the_driver().current_device()


def set_device(device: DeviceLike) -> None:
    """Make `device` the calling thread's current ember device (a negative index is a
    no-op, as in CUDA)."""
    index = _device_index(device)
    if index >= 0:
        _the_driver().set_device(index)


def synchronize(device: DeviceLike = None) -> None:
    """Wait until all work issued to `device` has finished."""
    _the_driver().synchronize(_device_index(device))


def init() -> None:
    """Kept for parity with `torch.cuda.init()`: the driver needs no initialization, so
    this checks only that a device exists."""
    if not is_available():
        raise RuntimeError("ember: no ember device is available")


def is_initialized() -> bool:
    """Always True once a driver is attached: the driver is ready as soon as its library
    is loaded (no lazy initialization)."""
    return _driver is not None


class device:  # noqa: N801 (the name mirrors torch.cuda.device)
    """Context manager: make `device` current, restore the previous device on exit.

    None or a negative index leaves the current device alone, as `torch.cuda.device`
    does.
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
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.previous >= 0:
            _the_driver().set_device(self.previous)
            self.previous = -1


# ember-book: end devices


# torch.manual_seed asks `_is_in_bad_fork` before it seeds the device (the allocator chapter shows a
# first version that always answers False).
# ember-book: begin bad_fork
def _is_in_bad_fork() -> bool:
    """True in a child process forked after ember was used in its parent: ember refuses
    to run there (use the 'spawn' start method). torch.manual_seed asks, and then leaves
    ember's generators alone."""
    if torch._C._dispatch_has_kernel("ember::_in_bad_fork"):
        return bool(torch.ops.ember._in_bad_fork())
    return False


# ember-book: end bad_fork
