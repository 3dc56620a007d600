"""A chapter as a value: its slug, its notebook, its place in the book, and the backend it builds.

A chapter's identity is its slug (``minimal_ops``), the stem of its notebook file without the
number prefix; its place in the book is its position in ``_toc.yml`` (`book.parts.regions`). Nothing
compares names or numbers to order chapters, so a chapter inserted in the middle of the book
changes no other chapter's file. Everything that takes a chapter takes a `Chapter` or a slug.

Everything that needs "the backend as a chapter leaves it" (a chapter's first cell, the tests,
the benchmark) asks a `Chapter`, so they all build exactly what the chapter's last
``book.build()`` holds. The Python state chapters carry forward (the device module, later the
generator helpers and the renaming) is replayed from the chapters' own cells tagged
``carry-forward``.

A carry-forward cell can be superseded by a later chapter that sets up the same state
differently and can do so only once per process (the autograd chapter registers the backend
name "privateuseone", the renaming chapter will register "ember"). Its cell metadata names the
chapter from which on it no longer runs::

    {"tags": ["carry-forward"], "ember-book": {"superseded_by": "renaming"}}

so that chapter (and every later one) starts without it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from book.parts.regions import (
    CppPart,
    cell_part,
    chapter_paths,
    code_cells,
    label,
    main_parts,
    parts_before,
    parts_in_notebook,
    resolve,
    slug_of,
)

if TYPE_CHECKING:
    from book.builds.builder import Build

CARRY_FORWARD = "carry-forward"
# A cell that builds the chapter's own backend, its result kept or not (`backend = book.build()`);
# an exercise build names its part.
_BUILD_CELL = re.compile(r"^\s*(?:\w+\s*=\s*)?book\.build\(\s*\)\s*(?:#.*)?$", re.MULTILINE)
METADATA_KEY = "ember-book"  # the book's own cell metadata
SUPERSEDED_BY = "superseded_by"


@dataclass(frozen=True, repr=False)
class Chapter:
    slug: str  # its identity, e.g. "minimal_ops"
    path: Path  # its notebook, e.g. chapters/02_minimal_ops.ipynb

    @classmethod
    def of(cls, chapter: Chapter | str) -> Chapter:
        """The chapter with this slug (a `Chapter` is returned as it is); LookupError if _toc.yml
        lists none."""
        if isinstance(chapter, Chapter):
            return chapter
        if not isinstance(chapter, str):
            raise TypeError(f"a chapter is named by its slug (e.g. 'minimal_ops'), not {chapter!r}")
        for found in chapters():
            if found.slug == chapter:
                return found
        raise LookupError(f"there is no chapter {chapter!r} in _toc.yml")

    @property
    def index(self) -> int:
        """Its position in the book, from _toc.yml (0 for the first chapter)."""
        slugs = [chapter.slug for chapter in chapters()]
        if self.slug not in slugs:
            raise LookupError(f"there is no chapter {self.slug!r} in _toc.yml")
        return slugs.index(self.slug)

    @property
    def label(self) -> str:
        """How outputs number it ("02"): its notebook file's prefix (display only, never compared)."""
        return label(self.slug)

    @property
    def notebook(self) -> str:
        """Its notebook file's stem ("02_minimal_ops"): how origins and locations name it."""
        return self.path.stem

    def __repr__(self) -> str:
        return f"<chapter {self.slug}>"

    @cached_property
    def _notebook(self) -> dict[str, Any]:
        return json.loads(self.path.read_text())

    def parts(self) -> list[CppPart]:
        """Every %%cpp cell of the chapter, in cell order (revisions and exercises included)."""
        return parts_in_notebook(self.path)

    def exercises(self) -> dict[str, CppPart]:
        return {part.name: part for part in self.parts() if part.is_exercise}

    def parts_before(self) -> list[CppPart]:
        """The backend as the earlier chapters leave it."""
        return parts_before(self.slug)

    def parts_through(self) -> list[CppPart]:
        """The backend as this chapter leaves it: what its last book.build() compiles."""
        return resolve(self.parts_before() + main_parts(self.parts()))

    def build_cells(self) -> list[list[CppPart]]:
        """What each of the chapter's `book.build()` cells compiles, in cell order.

        Only cells that compile parts of the chapter count (a first build of what
        the earlier chapters left compiles nothing new), and a cell that builds
        what an earlier cell built counts once. The last is `parts_through()`.
        """
        staged: list[CppPart] = []
        builds: list[list[CppPart]] = []
        before = self.parts_before()
        for source in code_cells(self.path):
            part = cell_part(self.slug, source)
            if part is not None:
                staged.append(part)
            elif _BUILD_CELL.search(source):
                parts = resolve(before + main_parts(staged))
                own = any(p.chapter == self.slug for p in parts)
                if own and parts not in builds:
                    builds.append(parts)
        final = self.parts_through()
        if (
            not builds or builds[-1] != final
        ):  # a chapter whose last parts no cell builds: its backend still counts
            builds.append(final)
        return builds

    def carried_cells(self, for_chapter: Chapter | str | None = None) -> list[tuple[str, str]]:
        """(origin, source) of the cells whose Python state later chapters start from.

        With `for_chapter`, only those that chapter starts from: a cell superseded by chapter K
        (metadata ``ember-book.superseded_by``, K's slug) is left out for K and later chapters.
        """
        reader = None if for_chapter is None else Chapter.of(for_chapter).index
        carried = []
        for index, cell in enumerate(self._notebook["cells"]):
            metadata = cell.get("metadata", {})
            if cell["cell_type"] != "code" or CARRY_FORWARD not in metadata.get("tags", []):
                continue
            origin = f"{self.notebook}.ipynb[cell {index}]"
            superseded_by = self._superseded_by(origin, metadata)
            if reader is None or superseded_by is None or reader < superseded_by.index:
                carried.append((origin, "".join(cell["source"])))
        return carried

    def _superseded_by(self, origin: str, metadata: dict[str, Any]) -> Chapter | None:
        value = metadata.get(METADATA_KEY, {}).get(SUPERSEDED_BY)
        if value is None:
            return None
        later = None
        if isinstance(value, str):
            try:
                later = Chapter.of(value)
            except LookupError:
                pass
        if later is None or later.index <= self.index:
            raise ValueError(
                f"{origin}: {METADATA_KEY}.{SUPERSEDED_BY} must be the slug of a later chapter "
                f"than {self.slug!r}, got {value!r}"
            )
        return later

    def replay_earlier(self, namespace: dict[str, Any]) -> None:
        """Run the carry-forward cells of every earlier chapter, in book order, in `namespace`
        (leaving out those superseded by this chapter or an earlier one)."""
        for earlier in chapters()[: self.index]:
            earlier.replay_own(namespace, for_chapter=self)

    def replay_through(self, namespace: dict[str, Any]) -> None:
        """The Python state as this chapter leaves it: earlier chapters' carry-forward cells, then its own."""
        self.replay_earlier(namespace)
        self.replay_own(namespace)

    def build(self, namespace: dict[str, Any] | None = None) -> Build:
        """Load the backend and the Python state exactly as this chapter leaves them."""
        from book.builds import builder  # the build layer imports torch; reading a chapter does not

        self.replay_through({} if namespace is None else namespace)
        return builder.build(parts=self.parts_through(), chapter=self.slug)

    def replay_own(self, namespace: dict[str, Any], for_chapter: Chapter | str | None = None) -> None:
        """Run this chapter's carry-forward cells (those `for_chapter` starts from, if given)."""
        for origin, source in self.carried_cells(for_chapter):
            exec(compile(source, origin, "exec"), namespace)  # noqa: S102 (the book's own cells)


def chapters() -> list[Chapter]:
    """Every chapter, in book order (_toc.yml's)."""
    return [Chapter(slug_of(path), path) for path in chapter_paths()]
