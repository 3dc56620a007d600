"""The notebook layer: the `%%cpp NAME` magic, revisions, and what a build gathers.

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
that is compiled into the stable library (``book/builds/stable.py``: the PrivateUse1
hooks, built once and never rebuilt), so running it stages nothing and no
``book.build()`` compiles it. The drift check still holds it byte-identical to
its region, which must lie in the stable library's sources.

Layers: this module is in the bottom layer, parts (`book.parts`), beside the reading of parts
from files (`book.parts.regions`, re-exported here for the chapters' tests). It keeps the running
kernel's state (`SESSION`) and builds nothing: `book.build()` (book/__init__.py) hands the parts
the session gathers to the builder (`book.builds.builder.build` takes parts and knows nothing of
a session).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from book.parts import pycells
from book.parts.regions import (
    EXERCISE_PREFIX,
    MAGIC,
    CppPart,
    chapter_paths,
    magic_line,
    main_parts,
    normalize,
    parse_arguments,
    parse_magic,
    parts_before,
    parts_in_notebook,
    resolve,
    shown_stable,
    split_magic,
    versions_through,
)

__all__ = [  # the bottom layer's part reading, re-exported: the chapters' tests read parts from here
    "CppPart",
    "chapter_paths",
    "magic_line",
    "main_parts",
    "normalize",
    "parse_arguments",
    "parse_magic",
    "parts_before",
    "parts_in_notebook",
    "resolve",
    "split_magic",
    "versions_through",
    # this layer's own
    "SESSION",
    "STABLE_EDIT_NOTE",
    "Revision",
    "Session",
    "register_magic",
    "revision",
]


STABLE_EDIT_NOTE = (
    "note: `{magic}` only shows code. It is compiled into ember's stable library "
    "(book/builds/stable.py: built once, loaded once per process), not into book.build(), "
    "so this edit changes nothing; edit extension/csrc/runtime and restart the kernel instead."
)


# The book's wall rule: a diff longer than this is collapsed under a summary line.
LONG_DIFF_LINES = 60


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

    def summary(self) -> str:
        """One line on the size of the diff, for a chapter that collapses a long one."""
        added = removed = hunks = 0
        for line in self.diff().splitlines()[2:]:  # after the two file lines
            if line.startswith("@@"):
                hunks += 1
            elif line.startswith("+"):
                added += 1
            elif line.startswith("-"):
                removed += 1
        against = "the build's" if self.version is None else f"version {self.version - 1}"
        return (
            f"{self.current.name}: {added} lines added and {removed} removed "
            f"against {against}, in {hunks} {'place' if hunks == 1 else 'places'}"
        )

    def __repr__(self) -> str:
        return f"{self._title()}\n{self.diff()}"

    def _repr_markdown_(self) -> str:
        diff = self.diff()
        block = f"```diff\n{diff}\n```\n"
        lines = diff.splitlines()
        if len(lines) <= LONG_DIFF_LINES:
            return f"{self._title()}\n\n{block}"
        # A long diff is a wall: the book and JupyterLab show its summary, the diff one click away.
        added = sum(line.startswith("+") and not line.startswith("+++") for line in lines)
        removed = sum(line.startswith("-") and not line.startswith("---") for line in lines)
        summary = f"{added} lines added, {removed} removed ({len(lines)} lines of diff)"
        return f"{self._title()}\n\n<details>\n<summary>{summary}</summary>\n\n{block}\n</details>\n"


class Session:
    """The current chapter and the parts its executed cells have staged."""

    def __init__(self) -> None:
        self.chapter: str | None = None  # the running chapter's slug
        self.staged: dict[str, CppPart] = {}

    def start(self, chapter: str) -> None:
        """Make `chapter` (a slug) the running chapter, nothing staged."""
        self.chapter = chapter
        self.staged = {}

    def stage(self, name: str, body: str) -> Revision | None:
        """Stage a cell's part; if it revises an earlier version, say which and how."""
        if self.chapter is None:
            raise RuntimeError("call book.start_chapter(SLUG) before the first %%cpp cell")
        part = CppPart(self.chapter, name, normalize(body))
        revision = self._revision(part)
        # Re-running a cell replaces its part in place, keeping cell order.
        self.staged[name] = part
        return revision

    def show_stable(self, name: str, body: str) -> str | None:
        """A `%%cpp --stable NAME` cell stages nothing. Returns a note if the reader edited it."""
        if self.chapter is None:
            raise RuntimeError("call book.start_chapter(SLUG) before the first %%cpp cell")
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
            raise RuntimeError("call book.start_chapter(SLUG) first")
        parts = parts_before(self.chapter)
        if own:
            parts = resolve(parts + main_parts(self.staged.values()))
        for name in exercises:
            if not name.startswith(EXERCISE_PREFIX) or name not in self.staged:
                raise LookupError(f"no exercise part {name!r} is staged: run its `%%cpp {name}` cell first")
            parts.append(self.staged[name])
        return parts


SESSION = Session()


def revision(name: str) -> Revision:
    """`book.revision(NAME)`: the current chapter's latest version of part NAME against the one
    before it, as the notebook files show them (its `summary()` is one line, its diff the
    cell's output)."""
    if SESSION.chapter is None:
        raise RuntimeError("call book.start_chapter(SLUG) first")
    shown = versions_through(SESSION.chapter, name)
    if len(shown) < 2 or shown[-1].chapter != SESSION.chapter:
        raise LookupError(f"chapter {SESSION.chapter!r} does not revise a part named {name!r}")
    return Revision(shown[-2], shown[-1], len(shown))


def register_magic() -> None:
    """Register `%%cpp` (and `%%py`, book/parts/pycells.py) in the running IPython, if there is one."""
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
    pycells.register(shell, lambda: SESSION.chapter)  # `%%py NAME`: the package's Python, shown
