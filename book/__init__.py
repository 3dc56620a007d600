"""The machinery of the Ember book: C++ cells, the cumulative build, widgets.

A chapter notebook starts with::

    import book
    book.start_chapter("minimal_ops")

then shows its C++ in ``%%cpp NAME`` cells and compiles everything so far
with ``book.build()``.
"""

from __future__ import annotations

# `autoload` comes first (the names of a from-import are imported in order): before anything
# imports torch, it turns off PyTorch's backend autoload, which would load the installed
# torch_ember next to the chapters' builds (book/autoload.py).
import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from book import autoload, errors  # noqa: F401

# The names a notebook uses, and the module of each. They are imported on first use, so that
# `import book` alone imports no torch: a process that only reads parts and regions (the bottom
# layer, book.regions; the drift check; the book's Sphinx extension) never pays for it.
_EXPORTS = {
    "BACKEND_FALLBACK": "book.widgets",
    "BackendInUseError": "book.compile_errors",
    "Build": "book.builder",
    "Chapter": "book.chapter",
    "CppBuildError": "book.compile_errors",
    "SESSION": "book.cells",
    "Trace": "book.widgets",
    "build": "book.cells",
    "device_module": "book.driver",
    "extension_path": "book.extension_modules",
    "loaded": "book.builder",
    "register_magic": "book.cells",
    "revision": "book.cells",
    "run_isolated": "book.isolated",
    "run_ranks": "book.distributed",
    "torchrun": "book.distributed",
    "show_by_chapter": "book.widgets",
    "show_table": "book.widgets",
    "snapshot": "book.widgets",
    "trace": "book.widgets",
    "wrapped": "book.text",
}

if TYPE_CHECKING:
    from book.builder import Build, loaded
    from book.cells import SESSION, build, register_magic, revision
    from book.chapter import Chapter
    from book.compile_errors import BackendInUseError, CppBuildError
    from book.distributed import run_ranks, torchrun
    from book.driver import device_module
    from book.extension_modules import extension_path
    from book.isolated import run_isolated
    from book.text import wrapped
    from book.widgets import BACKEND_FALLBACK, Trace, show_by_chapter, show_table, snapshot, trace

__all__ = [
    "BACKEND_FALLBACK",
    "BackendInUseError",
    "Build",
    "Chapter",
    "CppBuildError",
    "build",
    "device_module",
    "loaded",
    "run_isolated",
    "run_ranks",
    "show_by_chapter",
    "show_table",
    "snapshot",
    "extension_path",
    "start_chapter",
    "torchrun",
    "Trace",
    "trace",
    "SESSION",
    "register_magic",
    "revision",
    "wrapped",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # `book.builder` and the like: a submodule, imported on first use as well.
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'book' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def start_chapter(chapter: Chapter | str) -> None:
    """Make this kernel the chapter `chapter` (a `Chapter` or its slug, e.g. "minimal_ops"):
    register %%cpp, forget staged parts, and replay the Python state the earlier chapters
    carry forward (their cells tagged ``carry-forward``, e.g. the allocator chapter's
    registration of the device module).
    """
    from book.cells import SESSION, register_magic
    from book.chapter import Chapter

    chapter = Chapter.of(chapter)
    SESSION.start(chapter.slug)
    register_magic()
    errors.install()  # long errors compact, the full text one click away; no machine paths
    chapter.replay_earlier(_user_namespace())


def _user_namespace() -> dict[str, object]:
    try:
        from IPython import get_ipython
    except ImportError:
        return {}
    shell = get_ipython()
    return shell.user_ns if shell is not None else {}
