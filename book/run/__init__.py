"""The run layer: what runs chapters and checks them. A chapter as a value (`chapter`), a child
process in the reader's state (`isolated`), a worker on several ranks (`distributed`), and the drift
check (`sync`, run as `python -m book.sync`). Imports parts and builds, never display."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    """`book.run.X`: the submodule X, imported on first use (as `book.X` is in book/__init__.py)."""
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
