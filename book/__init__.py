"""The machinery of the Ember book: C++ cells, the cumulative build, widgets.

A chapter notebook starts with::

    import book
    book.start_chapter(2)

then shows its C++ in ``%%cpp NAME`` cells and compiles everything so far
with ``book.build()``.
"""

from __future__ import annotations

from book.builder import Build, build, loaded
from book.cells import SESSION, chapter_stem, register_magic
from book.compile_errors import BackendInUseError, CppBuildError
from book.device_module import register_device_module
from book.isolated import run_isolated
from book.widgets import show_table, snapshot, trace

__all__ = [
    "BackendInUseError",
    "Build",
    "CppBuildError",
    "build",
    "loaded",
    "register_device_module",
    "run_isolated",
    "show_table",
    "snapshot",
    "start_chapter",
    "trace",
]


def start_chapter(number: int) -> None:
    """Make this kernel chapter `number`: register %%cpp, forget staged parts.

    Chapter 01 ends with the Python device module registered, so every later
    chapter starts from there.
    """
    SESSION.start(chapter_stem(number))
    register_magic()
    if number >= 2:
        register_device_module()
