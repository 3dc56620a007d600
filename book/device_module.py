"""`torch.privateuseone` for ember: the Python side of the device, kept small.

PyTorch 2.13 needs only that the module exists: it imports ``torch.<backend
name>`` the first time a device of that type is used. ``torch.manual_seed``
looks for ``_is_in_bad_fork`` and ``manual_seed_all``. The rest mirrors
``torch.cuda``'s names and talks to the ember driver through ctypes, the way
``torch.cuda`` talks to the CUDA runtime.
"""

from __future__ import annotations

import ctypes
import sys

import torch

from book import toolchain

# -- Devices ---------------------------------------------------------------------------------


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return toolchain.driver_device_count()


def current_device() -> int:
    device = ctypes.c_int(-1)
    toolchain.check_driver(toolchain.driver().emGetDevice(ctypes.byref(device)), "emGetDevice")
    return device.value


def set_device(device: int | str | torch.device) -> None:
    index = _index(device)
    toolchain.check_driver(toolchain.driver().emSetDevice(ctypes.c_int(index)), f"emSetDevice({index})")


class device:
    """Context manager: make `index` the current ember device, restore the previous one on exit."""

    def __init__(self, index: int | str | torch.device) -> None:
        self.index = _index(index)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.previous)


def _index(device: int | str | torch.device | None) -> int:
    """The index of an int, "privateuseone:1" or torch.device; None (or no index) means current."""
    if not isinstance(device, int):
        if device is None:
            return current_device()
        device = torch.device(device)
        backend = torch._C._get_privateuse1_backend_name()
        if device.type != backend:
            raise ValueError(f"expected a {backend} device, got {device}")
        if device.index is None:
            return current_device()
        device = device.index
    count = device_count()
    if not 0 <= device < count:  # the device guard's wording, so Python and C++ fail alike
        raise RuntimeError(
            f"ember: device index {device} is out of range: there are {count} ember devices (0..{count - 1})"
        )
    return device


# -- Memory: the driver's own counters -------------------------------------------------------


def memory_allocated(device: int | str | torch.device | None = None) -> int:
    """Bytes of ember memory held by live allocations on `device`."""
    return toolchain.driver_stats(_index(device)).bytes_in_use


def max_memory_allocated(device: int | str | torch.device | None = None) -> int:
    """The peak of memory_allocated(device) since the process started (or the driver's emMemResetPeak)."""
    return toolchain.driver_stats(_index(device)).peak_bytes_in_use


# -- What torch.manual_seed looks for --------------------------------------------------------
# Without both, torch.manual_seed warns "Set seed for `privateuseone` device does not
# take effect". ember has no random number generator yet, so there is nothing to seed.


def _is_in_bad_fork() -> bool:
    # Unlike CUDA's, ember's driver survives fork: its state is ordinary process memory.
    return False


def manual_seed_all(seed: int) -> None:
    del seed  # no ember generator exists yet


def register_device_module() -> None:
    """Make this module `torch.privateuseone`. A second call is a no-op."""
    name = torch._C._get_privateuse1_backend_name()
    if getattr(torch, name, None) is not sys.modules[__name__]:
        torch._register_device_module(name, sys.modules[__name__])
