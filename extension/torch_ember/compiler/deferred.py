"""Registering the compiler when Dynamo or Inductor is first imported.

`import torch_ember` runs on every `import torch` (the package autoloads), and importing
Dynamo and Inductor, which the compiler's registration needs, takes seconds. So the package
registers each part at once only if its module is loaded already; otherwise a finder on
`sys.meta_path` waits for that module's first import and registers right after it has run:
Dynamo's device interface after `torch._dynamo`, Inductor's backend after
`torch._inductor.compile_fx` (`TRIGGERS`). The launcher is published at once: it costs
nothing, and graph replays and compiled code loaded from elsewhere need it.
"""

from __future__ import annotations

import importlib.abc
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["TRIGGERS", "run_after_import"]

# Inductor's entry point, imported when a first graph is compiled (torch._inductor itself
# is imported earlier, from inside Dynamo's own imports, where registering would be circular).
TRIGGERS = ("torch._inductor.compile_fx",)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `callback` once, after the first of `names` has been imported."""

    def __init__(self, names: Sequence[str], callback: Callable[[], None]) -> None:
        self.names = set(names)
        self.callback: Callable[[], None] | None = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.names or self.callback is None:
            return None
        # The real spec, from the finders after this one; its loader runs the module,
        # then the callback.
        index = sys.meta_path.index(self) if self in sys.meta_path else -1
        for finder in sys.meta_path[index + 1 :]:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module = self._then_fire(spec.loader.exec_module)  # type: ignore[method-assign]
                return spec
        return None

    def _then_fire(self, run_module: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
        def exec_then_fire(module: ModuleType) -> None:
            run_module(module)
            self.fire()

        return exec_then_fire

    def fire(self) -> None:
        callback, self.callback = self.callback, None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if callback is not None:
            try:
                callback()
            except Exception as error:  # an import must not fail because of ember
                warnings.warn(f"torch_ember: registering the compiler failed: {error}", stacklevel=2)


def run_after_import(callback: Callable[[], None], names: Sequence[str] = TRIGGERS) -> None:
    """`callback()` now if one of `names` is imported already, else right after the first
    of them is."""
    if any(name in sys.modules for name in names):
        callback()
        return
    sys.meta_path.insert(0, _AfterImport(names, callback))
