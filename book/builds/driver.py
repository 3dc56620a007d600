"""The ember driver in the book's process: `torch_ember/driver.py`'s ctypes face over
the driver library that `book.builds.toolchain` builds. One handle per process; nothing
else in the book (or a chapter) opens the library itself."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from book.builds import toolchain
from book.builds.extension_modules import PACKAGE, load

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
    """The device module of torch_ember (`torch.privateuseone` in the book), attached to this driver.

    It is the package `extension/torch_ember/device_module/`, loaded by path as
    `ember_book.device_module` (its sub-modules import each other relatively, and nothing
    from `torch_ember`, whose `__init__` would load the compiled backend).
    """
    module = load_package("device_module")
    module.attach(driver())
    return module


def load_package(name: str) -> ModuleType:
    """The package extension/torch_ember/<name>/, loaded once per process as `ember_book.<name>`."""
    module_name = f"ember_book.{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    folder = PACKAGE / name
    spec = importlib.util.spec_from_file_location(
        module_name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {folder}")
    module = importlib.util.module_from_spec(spec)
    # Relative imports find the package, and its parent, by name.
    sys.modules.setdefault("ember_book", _namespace("ember_book"))
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _namespace(name: str) -> ModuleType:
    """An empty package: the parent of the modules the book loads by path."""
    parent = ModuleType(name)
    parent.__path__ = []
    return parent


def stats(device: int) -> Any:  # torch_ember.driver.MemStats
    """The driver's own memory counters for one device (no PyTorch involved)."""
    return driver().mem_stats(device)


def device_count() -> int:
    return driver().device_count()
