"""The machinery of the Ember book: C++ cells, the cumulative build, widgets.

A chapter notebook starts with::

    import book
    book.start_chapter(2)

then shows its C++ in ``%%cpp NAME`` cells and compiles everything so far
with ``book.build()``.
"""

from __future__ import annotations

# `autoload` comes first (the names of a from-import are imported in order): before anything
# imports torch, it turns off PyTorch's backend autoload, which would load the installed
# torch_ember next to the chapters' builds (book/autoload.py).
from book import autoload, errors  # noqa: F401
from book.builder import Build, build, loaded
from book.cells import SESSION, register_magic
from book.chapter import Chapter
from book.compile_errors import BackendInUseError, CppBuildError
from book.driver import device_module
from book.extension_modules import extension_path
from book.isolated import run_isolated
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
    "show_by_chapter",
    "show_table",
    "snapshot",
    "extension_path",
    "start_chapter",
    "Trace",
    "trace",
]


def start_chapter(number: int) -> None:
    """Make this kernel chapter `number`: register %%cpp, forget staged parts, and
    replay the Python state the earlier chapters carry forward (their cells
    tagged ``carry-forward``, e.g. chapter 01's registration of the device module).
    """
    chapter = Chapter.of(number)
    SESSION.start(chapter.stem)
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
