"""Load `torch_ember`'s stand-alone Python files into the book.

The chapters use the finished package's own device module and driver face, so
the book shows, and runs, the same code. `import torch_ember` would load the
package's compiled backend (`_C`), and a process holds only one PrivateUse1
backend, so the book loads those files by path instead. Only files that import
nothing from `torch_ember` can be loaded this way.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

from book.paths import EXTENSION

PACKAGE = EXTENSION / "torch_ember"


def extension_path(relative: str) -> Path:
    """A file of the finished backend, e.g. extension_path("csrc/driver/ember_driver.h")."""
    return EXTENSION / relative


def source_path(name: str) -> Path:
    """extension/torch_ember/<name>.py"""
    return PACKAGE / f"{name}.py"


@cache
def load(name: str) -> ModuleType:
    """The module extension/torch_ember/<name>.py, loaded once per process as `ember_book.<name>`."""
    module_name = f"ember_book.{name}"
    spec = importlib.util.spec_from_file_location(module_name, source_path(name))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {source_path(name)}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module
