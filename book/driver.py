"""The ember driver in the book's process: `torch_ember/driver.py`'s ctypes face over
the driver library that `book.toolchain` builds. One handle per process; nothing
else in the book (or a chapter) opens the library itself."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from book import toolchain
from book.extension_modules import load

_library: Path | None = None


def use_library(library: Path) -> None:
    """Use an already built driver file (a child process of book.run_isolated does)."""
    global _library
    _library = library


@cache
def driver() -> Any:  # torch_ember.driver.Driver, loaded by path
    """The driver's checked entry points; loads the library (RTLD_GLOBAL) on first use."""
    return load("driver").Driver(_library or toolchain.driver_library())


@cache
def device_module() -> ModuleType:
    """The device module of torch_ember (`torch.privateuseone` in the book), attached to this driver."""
    module = load("device_module")
    module.attach(driver())
    return module


def stats(device: int) -> Any:  # torch_ember.driver.MemStats
    """The driver's own memory counters for one device (no PyTorch involved)."""
    return driver().mem_stats(device)


def device_count() -> int:
    return driver().device_count()
