"""A chapter as a value: its number, its notebook, and the backend it builds.

Everything that needs "the backend as chapter N leaves it" (a chapter's first
cell, the tests, the benchmark) asks a `Chapter`, so they all build exactly what
the chapter's last ``book.build()`` holds. The Python state chapters carry
forward (the device module, later the generator helpers and the renaming) is
replayed from the chapters' own cells tagged ``carry-forward``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from book import builder
from book.builder import Build
from book.cells import CppPart, chapter_paths, main_parts, parts_before, parts_in_notebook, resolve

CARRY_FORWARD = "carry-forward"


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

    def carried_cells(self) -> list[tuple[str, str]]:
        """(origin, source) of the cells whose Python state later chapters start from."""
        return [
            (f"{self.stem}.ipynb[cell {index}]", "".join(cell["source"]))
            for index, cell in enumerate(self._notebook["cells"])
            if cell["cell_type"] == "code" and CARRY_FORWARD in cell.get("metadata", {}).get("tags", [])
        ]

    def replay_earlier(self, namespace: dict[str, Any]) -> None:
        """Run the carry-forward cells of every earlier chapter, in book order, in `namespace`."""
        for earlier in chapters():
            if earlier.number >= self.number:
                break
            earlier.replay_own(namespace)

    def replay_through(self, namespace: dict[str, Any]) -> None:
        """The Python state as this chapter leaves it: earlier chapters' carry-forward cells, then its own."""
        self.replay_earlier(namespace)
        self.replay_own(namespace)

    def build(self, namespace: dict[str, Any] | None = None) -> Build:
        """Load the backend and the Python state exactly as this chapter leaves them."""
        self.replay_through({} if namespace is None else namespace)
        return builder.build(parts=self.parts_through(), chapter=self.stem)

    def replay_own(self, namespace: dict[str, Any]) -> None:
        for origin, source in self.carried_cells():
            exec(compile(source, origin, "exec"), namespace)  # noqa: S102 (the book's own cells)


def chapters() -> list[Chapter]:
    return [Chapter(int(path.stem[:2]), path.stem, path) for path in chapter_paths()]
