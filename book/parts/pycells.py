"""Python cells: `%%py NAME` shows a named region of the package's Python.

The book runs the package's own device module (``extension/torch_ember/device_module/``,
loaded by path by ``book.device_module()``), so a chapter does not define it again: it
shows it. A code cell that starts with ``%%py NAME`` holds the text of the region
``# ember-book: begin NAME`` ... ``# ember-book: end NAME`` of a file under
``extension/torch_ember/``, byte-identical, or of ``chapters/history/<slug>.py``
(region ``NAME.vK``) for a version a later chapter replaces: the same rules as the
C++ (``book.run.sync`` checks both, and ``--write`` copies both).

Running the cell runs nothing: the module already holds that code. A cell the reader
edited prints a note saying so, as ``%%cpp --stable`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from book.parts.regions import chapter_path, chapter_paths, code_cells, normalize, notebook_stem, slug_of

MAGIC = "py"
_MAGIC_LINE = re.compile(rf"^%%{MAGIC}\s+(?P<name>[A-Za-z_][\w.-]*)\s*$")

EDIT_NOTE = (
    "note: `{magic}` only shows the package's Python. The device module the book runs "
    "is extension/torch_ember/device_module/ (loaded by book.device_module()), so this "
    "edit changes nothing; edit that file and restart the kernel instead."
)


@dataclass(frozen=True)
class PyPart:
    """One named piece of the package's Python shown by a chapter."""

    chapter: str  # the chapter's slug, e.g. "allocator"
    name: str  # the region's name, e.g. "memory"
    source: str  # the cell body, without the magic line

    @property
    def origin(self) -> str:
        return f"{notebook_stem(self.chapter)}.ipynb[{self.name}]"

    @property
    def magic_line(self) -> str:
        return magic_line(self.name)


def magic_line(name: str) -> str:
    return f"%%{MAGIC} {name}"


def parse_magic(cell_source: str) -> tuple[str, str] | None:
    """(name, body) if the cell is a `%%py NAME` cell, else None."""
    first, _, body = cell_source.partition("\n")
    match = _MAGIC_LINE.match(first)
    return (match["name"], normalize(body)) if match else None


def parts_in_notebook(path: Path) -> list[PyPart]:
    """The Python parts a notebook file shows, in cell order."""
    parsed = (parse_magic(source) for source in code_cells(path))
    return [PyPart(slug_of(path), name, body) for name, body in filter(None, parsed)]


def chapter_parts(notebooks: list[Path] | None = None) -> list[PyPart]:
    parts: list[PyPart] = []
    for path in notebooks if notebooks is not None else chapter_paths():
        parts.extend(parts_in_notebook(path))
    return parts


def edit_note(chapter: str | None, name: str, body: str) -> str | None:
    """None if the cell is as the notebook file of `chapter` (a slug) shows it, else the note to print."""
    if chapter is not None:
        try:
            shown = parts_in_notebook(chapter_path(chapter))
        except LookupError:  # a notebook _toc.yml does not list
            shown = []
        if any(part.name == name and part.source == normalize(body) for part in shown):
            return None
    return EDIT_NOTE.format(magic=magic_line(name))


def register(shell: object, chapter: Callable[[], str | None]) -> None:
    """Register `%%py` in an IPython shell; `chapter()` names the running chapter."""

    def py(line: str, cell: str) -> None:
        name = line.strip()
        if not re.fullmatch(r"[A-Za-z_][\w.-]*", name):
            raise ValueError(f"%%{MAGIC} needs one region name; got {line!r}")
        note = edit_note(chapter(), name, cell)
        if note is not None:
            print(note)

    shell.register_magic_function(py, magic_kind="cell", magic_name=MAGIC)  # type: ignore[attr-defined]
