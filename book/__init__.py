"""The machinery of the Ember book: C++ cells, the cumulative build, widgets.

A chapter notebook starts with::

    import book
    book.start_chapter("minimal_ops")

then shows its C++ in ``%%cpp NAME`` cells and compiles everything so far
with ``book.build()``.

The machinery is in layers, a folder each, each importing only those below it: ``parts``,
``builds``, ``run``, ``display`` (README, "How the book is put together";
tests/book/test_layers.py checks it). This module, the notebooks' face, may import any of them.
"""

from __future__ import annotations

# `autoload` is imported first: before anything imports torch, it turns off PyTorch's backend
# autoload, which would load the installed torch_ember next to the chapters' builds
# (book/autoload.py).
import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from book import autoload  # noqa: F401 (first: see above)
from book.display import errors

# The names a notebook uses, and the module of each. They are imported on first use, so that
# `import book` alone imports no torch: a process that only reads parts and regions (the bottom
# layer, book.parts.regions; the drift check; the book's Sphinx extension) never pays for it.
_EXPORTS = {
    "BACKEND_FALLBACK": "book.display.widgets",
    "BackendInUseError": "book.builds.compile_errors",
    "Build": "book.builds.builder",
    "Chapter": "book.run.chapter",
    "CppBuildError": "book.builds.compile_errors",
    "SESSION": "book.parts.cells",
    "Trace": "book.display.widgets",
    "device_module": "book.builds.driver",
    "extension_path": "book.builds.extension_modules",
    "loaded": "book.builds.builder",
    "register_magic": "book.parts.cells",
    "revision": "book.parts.cells",
    "run_isolated": "book.run.isolated",
    "run_ranks": "book.run.distributed",
    "torchrun": "book.run.distributed",
    "show_by_chapter": "book.display.widgets",
    "show_table": "book.display.widgets",
    "snapshot": "book.display.widgets",
    "trace": "book.display.widgets",
    "wrapped": "book.text",
}

if TYPE_CHECKING:
    from book.builds.builder import Build, loaded
    from book.builds.compile_errors import BackendInUseError, CppBuildError
    from book.builds.driver import device_module
    from book.builds.extension_modules import extension_path
    from book.display.widgets import BACKEND_FALLBACK, Trace, show_by_chapter, show_table, snapshot, trace
    from book.parts.cells import SESSION, register_magic, revision
    from book.run.chapter import Chapter
    from book.run.distributed import run_ranks, torchrun
    from book.run.isolated import run_isolated
    from book.text import wrapped

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
        # `book.builds.builder` and the like: a submodule, imported on first use as well.
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'book' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


def build(*exercises: str, own: bool = True) -> Build:
    """`book.build()`: compile (or fetch from the cache) and load this chapter's backend.

    It builds the earlier chapters' parts and this chapter's staged ones.
    ``book.build("exercise_x")`` adds staged exercise parts; ``own=False`` leaves
    this chapter's own parts out. The builder takes the parts the session gathers
    (`Session.parts`); tests hand it exact part lists (``Chapter.of("fallback").parts_through()``).
    """
    from book.builds import builder  # imports torch: `import book` alone does not
    from book.parts.cells import SESSION

    return builder.build(parts=SESSION.parts(exercises, own=own), chapter=SESSION.chapter)


def start_chapter(chapter: Chapter | str) -> None:
    """Make this kernel the chapter `chapter` (a `Chapter` or its slug, e.g. "minimal_ops"):
    register %%cpp, forget staged parts, and replay the Python state the earlier chapters
    carry forward (their cells tagged ``carry-forward``, e.g. the allocator chapter's
    registration of the device module).
    """
    from book.parts.cells import SESSION, register_magic
    from book.run.chapter import Chapter

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
