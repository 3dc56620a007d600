"""The build layer: parts into a loaded library. `environment` (toolchain key, prelude and driver,
computed once), `builder`, its translation units `units`, `toolchain` (compilers, flags, the
compile-once products), `stable` (the stable library), `preload` and `load_errors` (a build is
loaded in a throwaway process first), `compile_errors`, `progress` (the build's live line), the
driver's ctypes face (`driver`, over torch_ember's modules read by `extension_modules`), and `cpp/`
(`prelude.h`, the trace probe). Imports parts, never run or display."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    """`book.builds.X`: the submodule X, imported on first use (as `book.X` is in book/__init__.py)."""
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
