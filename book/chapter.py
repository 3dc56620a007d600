"""A chapter as a value: its number, its notebook, and the backend it builds.

Everything that needs "the backend as chapter N leaves it" (a chapter's first
cell, the tests, the benchmark) asks a `Chapter`, so they all build exactly what
the chapter's last ``book.build()`` holds. The Python state chapters carry
forward (the device module, later the generator helpers and the renaming) is
replayed from the chapters' own cells tagged ``carry-forward``.

A carry-forward cell can be superseded by a later chapter that sets up the same
state differently and can do so only once per process (chapter 08 registers
the backend name "privateuseone", chapter 13 will register "ember"). Its cell
metadata says from which chapter on it no longer runs::

    {"tags": ["carry-forward"], "ember-book": {"superseded_by": 13}}

so chapter 13 (and every later one) starts without it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from book import builder
from book.builder import Build
from book.regions import (
    CppPart,
    cell_part,
    chapter_paths,
    code_cells,
    main_parts,
    parts_before,
    parts_in_notebook,
    resolve,
)

CARRY_FORWARD = "carry-forward"
# A cell that builds the chapter's own backend, its result kept or not (`backend = book.build()`);
# an exercise build names its part.
_BUILD_CELL = re.compile(r"^\s*(?:\w+\s*=\s*)?book\.build\(\s*\)\s*(?:#.*)?$", re.MULTILINE)
METADATA_KEY = "ember-book"  # the book's own cell metadata
SUPERSEDED_BY = "superseded_by"


@dataclass(frozen=True, repr=False)
class Chapter:
    number: int
    stem: str  # e.g. "02_minimal_ops"
    path: Path

    @classmethod
    def of(cls, number: int) -> Chapter:
        for chapter in chapters():
            if chapter.number == number:
                return chapter
        raise LookupError(f"there is no chapter {number:02d}")

    def __repr__(self) -> str:
        return f"<chapter {self.stem}>"

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
        return parts_before(self.stem)

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
            part = cell_part(self.stem, source)
            if part is not None:
                staged.append(part)
            elif _BUILD_CELL.search(source):
                parts = resolve(before + main_parts(staged))
                own = any(p.chapter == self.stem for p in parts)
                if own and parts not in builds:
                    builds.append(parts)
        final = self.parts_through()
        if (
            not builds or builds[-1] != final
        ):  # a chapter whose last parts no cell builds: its backend still counts
            builds.append(final)
        return builds

    def carried_cells(self, for_chapter: int | None = None) -> list[tuple[str, str]]:
        """(origin, source) of the cells whose Python state later chapters start from.

        With `for_chapter`, only those that chapter starts from: a cell superseded by
        chapter K (metadata ``ember-book.superseded_by``) is left out for chapters K and later.
        """
        carried = []
        for index, cell in enumerate(self._notebook["cells"]):
            metadata = cell.get("metadata", {})
            if cell["cell_type"] != "code" or CARRY_FORWARD not in metadata.get("tags", []):
                continue
            origin = f"{self.stem}.ipynb[cell {index}]"
            superseded_by = self._superseded_by(origin, metadata)
            if for_chapter is None or superseded_by is None or for_chapter < superseded_by:
                carried.append((origin, "".join(cell["source"])))
        return carried

    def _superseded_by(self, origin: str, metadata: dict[str, Any]) -> int | None:
        value = metadata.get(METADATA_KEY, {}).get(SUPERSEDED_BY)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= self.number:
            raise ValueError(
                f"{origin}: {METADATA_KEY}.{SUPERSEDED_BY} must be the number of a later chapter "
                f"(> {self.number}), got {value!r}"
            )
        return value

    def replay_earlier(self, namespace: dict[str, Any]) -> None:
        """Run the carry-forward cells of every earlier chapter, in book order, in `namespace`
        (leaving out those superseded by this chapter or an earlier one)."""
        for earlier in chapters():
            if earlier.number >= self.number:
                break
            earlier.replay_own(namespace, for_chapter=self.number)

    def replay_through(self, namespace: dict[str, Any]) -> None:
        """The Python state as this chapter leaves it: earlier chapters' carry-forward cells, then its own."""
        self.replay_earlier(namespace)
        self.replay_own(namespace)

    def build(self, namespace: dict[str, Any] | None = None) -> Build:
        """Load the backend and the Python state exactly as this chapter leaves them."""
        self.replay_through({} if namespace is None else namespace)
        return builder.build(parts=self.parts_through(), chapter=self.stem)

    def replay_own(self, namespace: dict[str, Any], for_chapter: int | None = None) -> None:
        """Run this chapter's carry-forward cells (those `for_chapter` starts from, if given)."""
        for origin, source in self.carried_cells(for_chapter):
            exec(compile(source, origin, "exec"), namespace)  # noqa: S102 (the book's own cells)


def chapters() -> list[Chapter]:
    return [Chapter(int(path.stem[:2]), path.stem, path) for path in chapter_paths()]
