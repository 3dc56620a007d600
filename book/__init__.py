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

__all__ = [
    "BackendInUseError",
    "Build",
    "CppBuildError",
    "build",
    "loaded",
    "start_chapter",
]


def start_chapter(number: int) -> None:
    """Make this kernel chapter `number`: register %%cpp, forget staged parts."""
    SESSION.start(chapter_stem(number))
    register_magic()
