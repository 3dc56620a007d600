"""The bottom layer: a chapter's parts, read from files without torch. `regions` (the
`// ember-book:` and `# ember-book:` regions of extension/, the history format, the parts a chapter's
notebook shows), `pycells` (`%%py` parts) and `cells` (the `%%cpp` magic, revisions, the running
kernel's staged parts). Imports nothing of book/ but `book.paths`."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    """`book.parts.X`: the submodule X, imported on first use (as `book.X` is in book/__init__.py)."""
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
