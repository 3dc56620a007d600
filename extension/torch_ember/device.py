"""Device selection for ember, with `torch.cuda`'s names (exported as `torch.ember.*`)."""

from __future__ import annotations

from types import TracebackType
from typing import TypeAlias

import torch

from torch_ember import _C

DeviceLike: TypeAlias = torch.device | str | int | None

__all__ = [
    "device",
    "current_device",
    "device_count",
    "init",
    "is_available",
    "is_initialized",
    "set_device",
    "synchronize",
]


def _device_index(device: DeviceLike) -> int:
    """The ember device index `device` names; `None` or a bare "ember" means the current device."""
    if device is None:
        return current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str | torch.device):
        parsed = torch.device(device)
        if parsed.type != "ember":
            raise ValueError(f"expected an ember device, got {str(parsed)!r}")
        return current_device() if parsed.index is None else parsed.index
    raise TypeError(f"expected an ember device, an index or None, got {type(device).__name__}")


def is_available() -> bool:
    """Whether there is at least one ember device."""
    return device_count() > 0


def device_count() -> int:
    """The number of ember devices (the simulated machine has 2)."""
    return int(_C._device_count())


def current_device() -> int:
    """The index of the calling thread's current ember device (0 until changed)."""
    return int(_C._current_device())


def set_device(device: DeviceLike) -> None:
    """Make `device` the calling thread's current ember device.

    New ember tensors created without an explicit index (`device="ember"`) go there.
    Raises RuntimeError for an index out of range.
    """
    _C._set_device(_device_index(device))


def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work on `device` to finish.

    A no-op for now: ember has no streams yet (they come in chapter 09), so every
    copy and kernel has finished when the call that issued it returns. The device
    index is still checked.
    """
    _C._check_device(_device_index(device))


def init() -> None:
    """Initialize ember. Nothing to do: the driver is ready as soon as `torch_ember` is imported.

    Kept for parity with `torch.cuda.init()`; it checks that a device exists.
    """
    if not is_available():
        raise RuntimeError("ember: no ember device is available")


def is_initialized() -> bool:
    """Whether ember is initialized: always True once `torch_ember` is imported (no lazy init)."""
    return True


class device:  # noqa: N801 (the name mirrors torch.cuda.device)
    """Context manager that makes `device` current and restores the previous device on exit.

    A negative index or None leaves the current device alone, as `torch.cuda.device` does.
    """

    def __init__(self, device: DeviceLike) -> None:
        self.index = -1 if device is None else _device_index(device)
        self.previous = -1

    def __enter__(self) -> None:
        if self.index >= 0:
            self.previous = int(_C._exchange_device(self.index))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.previous >= 0:
            _C._set_device(self.previous)
            self.previous = -1
