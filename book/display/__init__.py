"""The display layer: what a reader sees. Compact errors (`errors`), the widgets (`widgets/`: views
in plain HTML), and the book's Sphinx extension (`sphinx_ext`, with `static/`). Imports any layer
below it."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    """`book.display.X`: the submodule X, imported on first use (as `book.X` is in book/__init__.py)."""
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
