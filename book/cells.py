"""C++ cells: the `%%cpp NAME` magic and the parts it contributes to a build.

A chapter's C++ lives in code cells that start with ``%%cpp NAME``. Running
such a cell stages the part NAME for the chapter's next ``book.build()``; the
cell prints nothing. Earlier chapters' parts are read straight from their
notebook files, so a chapter never needs another notebook to have been run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from book.paths import CHAPTERS

MAGIC = "cpp"
_MAGIC_LINE = re.compile(rf"^%%{MAGIC}\s+(?P<name>[A-Za-z_][\w.-]*)\s*$")


@dataclass(frozen=True)
class CppPart:
    """One named piece of C++ shown by a chapter."""

    chapter: str  # notebook stem, e.g. "02_minimal_ops"
    name: str  # the cell's part name, e.g. "empty"
    source: str  # the cell body, without the magic line

    @property
    def origin(self) -> str:
        """How compiler messages and `registered at` locations name this part."""
        return f"{self.chapter}.ipynb[{self.name}]"


def chapter_paths() -> list[Path]:
    """All chapter notebooks, in book order (their file names sort that way)."""
    return sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb"))


def chapter_stem(number: int) -> str:
    """The notebook stem of chapter `number`, e.g. 2 -> "02_minimal_ops"."""
    for path in chapter_paths():
        if int(path.stem[:2]) == number:
            return path.stem
    raise LookupError(f"there is no chapter {number:02d} in {CHAPTERS}")


def split_magic(cell_source: str) -> tuple[str, str] | None:
    """(name, body) if the cell is a `%%cpp NAME` cell, else None."""
    first, _, body = cell_source.partition("\n")
    match = _MAGIC_LINE.match(first)
    return (match["name"], normalize(body)) if match else None


def normalize(body: str) -> str:
    """Cell bodies compare and compile without trailing blank lines."""
    return body.rstrip("\n") + "\n"


def parts_in_notebook(path: Path) -> list[CppPart]:
    """The C++ parts a notebook file shows, in cell order."""
    notebook = json.loads(path.read_text())
    parts = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        split = split_magic(source)
        if split:
            parts.append(CppPart(path.stem, split[0], split[1]))
    return parts


def parts_before(chapter: str) -> list[CppPart]:
    """Every part of the chapters that come before `chapter`, in book order."""
    parts: list[CppPart] = []
    for path in chapter_paths():
        if path.stem >= chapter:
            break
        parts.extend(parts_in_notebook(path))
    return parts


class Session:
    """The current chapter and the parts its executed cells have staged."""

    def __init__(self) -> None:
        self.chapter: str | None = None
        self.staged: dict[str, CppPart] = {}

    def start(self, chapter: str) -> None:
        self.chapter = chapter
        self.staged = {}

    def stage(self, name: str, body: str) -> CppPart:
        if self.chapter is None:
            raise RuntimeError("call book.start_chapter(N) before the first %%cpp cell")
        part = CppPart(self.chapter, name, normalize(body))
        # Re-running a cell replaces its part in place, keeping cell order.
        self.staged[name] = part
        return part

    def parts(self) -> list[CppPart]:
        """Earlier chapters' parts, then this chapter's staged parts."""
        if self.chapter is None:
            raise RuntimeError("call book.start_chapter(N) first")
        return parts_before(self.chapter) + list(self.staged.values())


SESSION = Session()


def register_magic() -> None:
    """Register `%%cpp` in the running IPython, if there is one."""
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to register
        return
    shell = get_ipython()
    if shell is None:
        return

    def cpp(line: str, cell: str) -> None:
        name = line.strip()
        if not re.fullmatch(r"[A-Za-z_][\w.-]*", name):
            raise ValueError(f"%%cpp needs one part name, got {line!r}")
        SESSION.stage(name, cell)

    shell.register_magic_function(cpp, magic_kind="cell", magic_name=MAGIC)
