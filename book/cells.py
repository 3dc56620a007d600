"""C++ cells: the `%%cpp NAME` magic and the parts it contributes to a build.

A chapter's C++ lives in code cells that start with ``%%cpp NAME``. Running
such a cell stages the part NAME for the chapter's next ``book.build()``.
Earlier chapters' parts are read straight from their notebook files, so a
chapter never needs another notebook to have been run.

Parts are revisable: a later cell (in a later chapter, or later in the same
one) with a NAME the book has shown before is a new *version* of that part. It
takes the earlier version's place in the build, and the cell shows what
changed (a diff against the version it replaces); otherwise a cell prints
nothing. Parts named ``exercise_*`` are exercise solutions: a chapter's
``book.build()`` leaves them out unless asked (``book.build("exercise_x")``),
and later chapters never see them.

A cell that starts with ``%%cpp --stable NAME`` is display-only: it shows C++
that is compiled into the stable library (``book/stable.py``: the PrivateUse1
hooks, built once and never rebuilt), so running it stages nothing and no
``book.build()`` compiles it. The drift check still holds it byte-identical to
its region, which must lie in the stable library's sources.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from book.paths import CHAPTERS

MAGIC = "cpp"
EXERCISE_PREFIX = "exercise_"
STABLE_FLAG = "--stable"
_NAME = r"[A-Za-z_][\w.-]*"
_MAGIC_ARGUMENTS = re.compile(rf"^(?:(?P<stable>{STABLE_FLAG})\s+)?(?P<name>{_NAME})$")
_MAGIC_LINE = re.compile(rf"^%%{MAGIC}\s+(?P<arguments>.*?)\s*$")


@dataclass(frozen=True)
class CppPart:
    """One named piece of C++ shown by a chapter."""

    chapter: str  # notebook stem, e.g. "02_minimal_ops"
    name: str  # the cell's part name, e.g. "empty"
    source: str  # the cell body, without the magic line
    stable: bool = False  # `%%cpp --stable NAME`: shown only, compiled into the stable library

    @property
    def origin(self) -> str:
        """How compiler messages and `registered at` locations name this part."""
        return f"{self.chapter}.ipynb[{self.name}]"

    @property
    def is_exercise(self) -> bool:
        return self.name.startswith(EXERCISE_PREFIX)

    @property
    def magic_line(self) -> str:
        """The cell's first line, e.g. ``%%cpp empty`` or ``%%cpp --stable hooks``."""
        return magic_line(self.name, self.stable)


def magic_line(name: str, stable: bool = False) -> str:
    return f"%%{MAGIC} {STABLE_FLAG + ' ' if stable else ''}{name}"


def parse_arguments(line: str) -> tuple[str, bool]:
    """(name, stable) from what follows ``%%cpp``; ValueError if it is not one name, maybe flagged."""
    match = _MAGIC_ARGUMENTS.match(line.strip())
    if match is None:
        raise ValueError(f"%%{MAGIC} needs one part name, optionally after {STABLE_FLAG}; got {line!r}")
    name, stable = match["name"], match["stable"] is not None
    if stable and name.startswith(EXERCISE_PREFIX):
        raise ValueError(
            f"%%{MAGIC} {STABLE_FLAG} {name}: an exercise is built by the chapter, not shown only"
        )
    return name, stable


def chapter_paths() -> list[Path]:
    """All chapter notebooks, in book order (their file names sort that way)."""
    return sorted(CHAPTERS.glob("[0-9][0-9]_*.ipynb"))


def split_magic(cell_source: str) -> tuple[str, str] | None:
    """(name, body) if the cell is a `%%cpp [--stable] NAME` cell, else None."""
    parsed = parse_magic(cell_source)
    return (parsed[0], parsed[1]) if parsed else None


def parse_magic(cell_source: str) -> tuple[str, str, bool] | None:
    """(name, body, stable) if the cell is a `%%cpp [--stable] NAME` cell, else None."""
    first, _, body = cell_source.partition("\n")
    match = _MAGIC_LINE.match(first)
    if match is None:
        return None
    try:
        name, stable = parse_arguments(match["arguments"])
    except ValueError:
        return None
    return name, normalize(body), stable


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
        parsed = parse_magic("".join(cell["source"]))
        if parsed:
            name, body, stable = parsed
            parts.append(CppPart(path.stem, name, body, stable))
    return parts


def resolve(parts: Iterable[CppPart]) -> list[CppPart]:
    """The build's parts: each name once, at its first position, in its latest version."""
    latest: dict[str, CppPart] = {}
    for part in parts:
        latest[part.name] = part  # a dict keeps the first insertion's position
    return list(latest.values())


def main_parts(parts: Iterable[CppPart]) -> list[CppPart]:
    """The parts a chapter's book.build() compiles: no exercises, no display-only (stable) parts."""
    return [part for part in parts if not part.is_exercise and not part.stable]


def parts_before(chapter: str) -> list[CppPart]:
    """The backend as the chapters before `chapter` leave it (latest versions, no exercises)."""
    parts: list[CppPart] = []
    for path in chapter_paths():
        if path.stem >= chapter:
            break
        parts.extend(main_parts(parts_in_notebook(path)))
    return resolve(parts)


def versions_through(chapter: str, name: str) -> list[CppPart]:
    """Every version of part `name` shown up to and including `chapter`, in book order."""
    found: list[CppPart] = []
    for path in chapter_paths():
        if path.stem > chapter:
            break
        found.extend(part for part in parts_in_notebook(path) if part.name == name and not part.stable)
    return found


def shown_stable(chapter: str, name: str) -> CppPart | None:
    """The `%%cpp --stable NAME` cell of `chapter` as its notebook file holds it, if any."""
    for part in parts_in_notebook(CHAPTERS / f"{chapter}.ipynb"):
        if part.stable and part.name == name:
            return part
    return None


STABLE_EDIT_NOTE = (
    "note: `{magic}` only shows code. It is compiled into ember's stable library "
    "(book/stable.py: built once, loaded once per process), not into book.build(), "
    "so this edit changes nothing; edit extension/csrc/runtime and restart the kernel instead."
)


@dataclass(frozen=True)
class Revision:
    """What a revising cell shows: the new version against the one it replaces."""

    previous: CppPart
    current: CppPart
    version: int | None = None  # the current version's number in book order; None: edited by the reader

    def _labels(self) -> tuple[str, str]:
        if self.version is None:
            return f"{self.previous.origin} (as built)", f"{self.current.origin} (edited)"
        return (
            f"{self.previous.origin} version {self.version - 1}",
            f"{self.current.origin} version {self.version}",
        )

    def diff(self) -> str:
        before, after = self._labels()
        lines = difflib.unified_diff(
            self.previous.source.splitlines(), self.current.source.splitlines(), before, after, lineterm=""
        )
        return "\n".join(lines)

    def _title(self) -> str:
        before, after = self._labels()
        return f"{after} replaces {before}; what changed:"

    def __repr__(self) -> str:
        return f"{self._title()}\n{self.diff()}"

    def _repr_markdown_(self) -> str:
        return f"{self._title()}\n\n```diff\n{self.diff()}\n```\n"


class Session:
    """The current chapter and the parts its executed cells have staged."""

    def __init__(self) -> None:
        self.chapter: str | None = None
        self.staged: dict[str, CppPart] = {}

    def start(self, chapter: str) -> None:
        self.chapter = chapter
        self.staged = {}

    def stage(self, name: str, body: str) -> Revision | None:
        """Stage a cell's part; if it revises an earlier version, say which and how."""
        if self.chapter is None:
            raise RuntimeError("call book.start_chapter(N) before the first %%cpp cell")
        part = CppPart(self.chapter, name, normalize(body))
        revision = self._revision(part)
        # Re-running a cell replaces its part in place, keeping cell order.
        self.staged[name] = part
        return revision

    def show_stable(self, name: str, body: str) -> str | None:
        """A `%%cpp --stable NAME` cell stages nothing. Returns a note if the reader edited it."""
        if self.chapter is None:
            raise RuntimeError("call book.start_chapter(N) before the first %%cpp cell")
        shown = shown_stable(self.chapter, name)
        if shown is not None and shown.source == normalize(body):
            return None
        return STABLE_EDIT_NOTE.format(magic=magic_line(name, stable=True))

    def _revision(self, part: CppPart) -> Revision | None:
        # A cell as the book shows it revises the version before it in book order
        # (the same answer however often, and in whatever order, cells are run).
        shown = versions_through(part.chapter, part.name)
        for index, version in enumerate(shown):
            if version.source == part.source:
                return Revision(shown[index - 1], part, index + 1) if index else None
        # A cell the reader edited: compare with what the build would use now.
        current = self.staged.get(part.name) or {p.name: p for p in parts_before(part.chapter)}.get(part.name)
        return Revision(current, part) if current is not None and current.source != part.source else None

    def parts(self, exercises: Iterable[str] = (), own: bool = True) -> list[CppPart]:
        """The backend as this chapter builds it: the earlier chapters' parts, then
        this chapter's staged ones (unless own=False), then the named exercises."""
        if self.chapter is None:
            raise RuntimeError("call book.start_chapter(N) first")
        parts = parts_before(self.chapter)
        if own:
            parts = resolve(parts + main_parts(self.staged.values()))
        for name in exercises:
            if not name.startswith(EXERCISE_PREFIX) or name not in self.staged:
                raise LookupError(f"no exercise part {name!r} is staged: run its `%%cpp {name}` cell first")
            parts.append(self.staged[name])
        return parts


SESSION = Session()


def register_magic() -> None:
    """Register `%%cpp` (and `%%py`, book/pycells.py) in the running IPython, if there is one."""
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to register
        return
    shell = get_ipython()
    if shell is None:
        return

    def cpp(line: str, cell: str) -> None:
        name, stable = parse_arguments(line)
        if stable:
            note = SESSION.show_stable(name, cell)
            if note is not None:
                print(note)
            return
        revision = SESSION.stage(name, cell)
        if revision is not None:
            from IPython.display import display

            display(revision)

    shell.register_magic_function(cpp, magic_kind="cell", magic_name=MAGIC)

    from book import pycells  # `%%py NAME`: the package's Python, shown (pycells imports this module)

    pycells.register(shell, lambda: SESSION.chapter)
