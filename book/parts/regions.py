"""The book's bottom layer: parts (what a chapter's cells show) and regions (where that text lives).

A *part* is the body of a chapter's ``%%cpp NAME`` cell (`CppPart`), read from the notebook
file; a *region* is the text between ``// ember-book: begin NAME`` and ``// ember-book: end
NAME`` in a file of ``extension/`` (``# ember-book:`` in Python files), read from that file.
Everything above this layer works with these values: the notebook layer (`book.parts.cells`: the
``%%cpp`` magic, revisions, what a build gathers), the build (`book.builds.builder`, `book.builds.units`:
they take parts) and the drift check (`book.run.sync`: every part equals its region).

This module reads files and nothing else: it imports neither torch nor the drift checker, so
the build path can ask where a region lives (`extension_regions`) without either.

Chapters: a name, a file, a place in the book
---------------------------------------------
A chapter's identity is its *slug*, the stem of its notebook file without the number prefix
(``chapters/02_minimal_ops.ipynb`` is ``minimal_ops``; a file may have no prefix at all). The
order of the chapters is the order of ``_toc.yml``, never a comparison of names or numbers, so a
chapter inserted in the middle of the book changes no other chapter's file. The prefix, where
there is one, is only the chapter's *label*: what outputs print ("chapter 02") and what the
intro's table shows.

History without duplication
---------------------------
An earlier version of a part, revised by a later cell, lives in ``chapters/history/<slug>``
(``.cpp``, or ``.py`` for the package's Python) as region ``NAME.vK``, K counting the versions
in book order; an exercise's solution in ``chapters/solutions/<slug>.cpp``. Both are book
material: the package never compiles them. Most of an earlier version is the same text as the version after it, so a
history region stores only what differs:

* a region whose body is a difference (its first line starts with ``@@ ``) holds the hunks of
  ``difflib.unified_diff(next, this, n=0)``: applied to the *next stored version* (the next
  ``NAME.vJ`` in history, else the package's region ``NAME``), they give this version. The
  removed (``-``) lines are checked, so a difference that no longer applies is an error, not a
  wrong version;
* a version identical to the next one is not stored at all: `history_text` derives it;
* a region whose body is C++ (or Python) holds the version in full, as before. That is how a
  revision is recorded (paste the current text, then edit the package's region);
  ``python -m book.sync --compact-history`` turns full versions into differences.

`all_regions` and `python_regions` return every stored version with its full text derived, so
the drift check compares each version's full text with its cell, as before.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from book.paths import CHAPTERS, CSRC, EXTENSION, REPO, TOC

# -- chapters: their slugs, their files and their order ---------------------------------------

# A chapter notebook's stem: an optional label ("02", "05a") and an underscore, then the slug.
_STEM = re.compile(r"^(?:(?P<label>\d+[a-z]?)_)?(?P<slug>[a-z][a-z0-9_]*)$")
_TOC_CACHE: dict[Path, tuple[float, tuple[Path, ...]]] = {}


def slug_of(notebook: Path | str) -> str:
    """A chapter's identity, from its notebook file (or stem): ``02_minimal_ops`` -> ``minimal_ops``."""
    stem = Path(notebook).stem if isinstance(notebook, Path) or notebook.endswith(".ipynb") else notebook
    match = _STEM.match(stem)
    if match is None:
        raise ValueError(f"{stem!r} is not a chapter's file name: [NN_]slug, the slug in lowercase words")
    return match["slug"]


def chapter_paths() -> list[Path]:
    """All chapter notebooks, in book order: the order of the notebooks ``_toc.yml`` lists."""
    mtime = TOC.stat().st_mtime
    cached = _TOC_CACHE.get(TOC)
    if cached is None or cached[0] != mtime:
        found: list[Path] = []

        def walk(entries: list[dict]) -> None:
            for entry in entries:
                file = entry.get("file")
                path = REPO / f"{file}.ipynb" if file else None
                if path is not None and path.parent == CHAPTERS and path.is_file():
                    found.append(path)
                for key in ("parts", "chapters", "sections"):
                    walk(entry.get(key) or [])

        walk([yaml.safe_load(TOC.read_text())])
        slugs = [slug_of(path) for path in found]
        twice = {slug for slug in slugs if slugs.count(slug) > 1}
        if twice:
            raise ValueError(f"{TOC.name}: two chapters have the slug {sorted(twice)[0]!r}")
        cached = _TOC_CACHE[TOC] = (mtime, tuple(found))
    return list(cached[1])


def chapter_slugs() -> list[str]:
    """Every chapter's slug, in book order."""
    return [slug_of(path) for path in chapter_paths()]


def chapter_path(slug: str) -> Path:
    """The notebook of the chapter `slug`; LookupError if _toc.yml lists none."""
    for path in chapter_paths():
        if slug_of(path) == slug:
            return path
    raise LookupError(f"there is no chapter {slug!r} in {TOC.name}")


def book_index(slug: str) -> int:
    """The chapter's position in the book (0 for the first); LookupError if _toc.yml lists none."""
    slugs = chapter_slugs()
    if slug not in slugs:
        raise LookupError(f"there is no chapter {slug!r} in {TOC.name}")
    return slugs.index(slug)


def notebook_stem(slug: str) -> str:
    """The stem of the chapter's notebook file ("02_minimal_ops"): how origins and locations name it.
    A slug _toc.yml does not list (a test's own part) is its own stem."""
    for path in chapter_paths():
        if slug_of(path) == slug:
            return path.stem
    return slug


def label(slug: str) -> str:
    """How outputs number a chapter ("02"): its notebook file's prefix, else its slug."""
    match = _STEM.match(notebook_stem(slug))
    return match["label"] or match["slug"] if match else slug


# -- parts: what the chapters' cells show ---------------------------------------------------

MAGIC = "cpp"
EXERCISE_PREFIX = "exercise_"
STABLE_FLAG = "--stable"
_NAME = r"[A-Za-z_][\w.-]*"
_MAGIC_ARGUMENTS = re.compile(rf"^(?:(?P<stable>{STABLE_FLAG})\s+)?(?P<name>{_NAME})$")
_MAGIC_LINE = re.compile(rf"^%%{MAGIC}\s+(?P<arguments>.*?)\s*$")


@dataclass(frozen=True)
class CppPart:
    """One named piece of C++ shown by a chapter."""

    chapter: str  # the chapter's slug, e.g. "minimal_ops"
    name: str  # the cell's part name, e.g. "empty"
    source: str  # the cell body, without the magic line
    stable: bool = False  # `%%cpp --stable NAME`: shown only, compiled into the stable library

    @property
    def origin(self) -> str:
        """How compiler messages and `registered at` locations name this part: by its notebook file."""
        return f"{notebook_stem(self.chapter)}.ipynb[{self.name}]"

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


def code_cells(path: Path) -> list[str]:
    """The sources of a notebook file's code cells, in cell order."""
    notebook = json.loads(path.read_text())
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


def cell_part(chapter: str, source: str) -> CppPart | None:
    """The C++ part a code cell of chapter `chapter` (a slug) shows, if it is a %%cpp cell."""
    parsed = parse_magic(source)
    return None if parsed is None else CppPart(chapter, *parsed)


def parts_in_notebook(path: Path) -> list[CppPart]:
    """The C++ parts a notebook file shows, in cell order."""
    chapter = slug_of(path)
    return [part for source in code_cells(path) if (part := cell_part(chapter, source)) is not None]


_HOMES_CACHE: dict[tuple[tuple[Path, float], ...], dict[str, str]] = {}


def first_chapters() -> dict[str, str]:
    """The chapter (slug) that first shows each part, by name, from the chapters on disk."""
    paths = chapter_paths()
    key = tuple((path, path.stat().st_mtime) for path in paths)
    homes = _HOMES_CACHE.get(key)
    if homes is None:
        homes = {}
        for part in chapter_parts(paths):
            homes.setdefault(part.name, part.chapter)
        _HOMES_CACHE.clear()
        _HOMES_CACHE[key] = homes
    return dict(homes)


def chapter_parts(notebooks: Iterable[Path] | None = None) -> list[CppPart]:
    """Every C++ part of the given notebooks (default: every chapter), in book order."""
    parts: list[CppPart] = []
    for path in notebooks if notebooks is not None else chapter_paths():
        parts.extend(parts_in_notebook(path))
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
    """The backend as the chapters before `chapter` (a slug) leave it (latest versions, no exercises)."""
    parts: list[CppPart] = []
    for path in chapter_paths()[: book_index(chapter)]:
        parts.extend(main_parts(parts_in_notebook(path)))
    return resolve(parts)


def versions_through(chapter: str, name: str) -> list[CppPart]:
    """Every version of part `name` shown up to and including `chapter` (a slug), in book order."""
    found: list[CppPart] = []
    for path in chapter_paths()[: book_index(chapter) + 1]:
        found.extend(part for part in parts_in_notebook(path) if part.name == name and not part.stable)
    return found


def shown_stable(chapter: str, name: str) -> CppPart | None:
    """The `%%cpp --stable NAME` cell of `chapter` (a slug) as its notebook file holds it, if any."""
    for part in parts_in_notebook(chapter_path(chapter)):
        if part.stable and part.name == name:
            return part
    return None


# -- regions: where the text lives ----------------------------------------------------------

_MARKER = re.compile(r"^\s*// ember-book: (?P<what>begin|end) (?P<name>[A-Za-z_][\w.-]*)\s*$")
_PY_MARKER = re.compile(r"^# ember-book: (?P<what>begin|end) (?P<name>[A-Za-z_][\w.-]*)\s*$")
SOURCE_SUFFIXES = (".cpp", ".h")
PACKAGE = "torch_ember"  # the package's Python, under extension/
# Book material, under chapters/: one file per chapter, named by its slug, never compiled by the package.
HISTORY = "history"  # chapters/history/<slug>.cpp|.py: earlier versions of parts a later cell revises
SOLUTIONS = "solutions"  # chapters/solutions/<slug>.cpp: the exercises' solutions
BOOK_ONLY = (HISTORY, SOLUTIONS)
# Where a region lives: ("csrc", NAME) for the package's C++ (names unique across csrc/),
# ("package", NAME) for its Python, ("history/<slug>", NAME.vK) and ("solutions/<slug>", NAME)
# for the book material, one file per chapter.
Place = tuple[str, str]


@dataclass(frozen=True)
class Region:
    name: str
    path: Path
    line: int  # 1-based line of the `begin` marker
    text: str  # the full text (for a history region stored as a difference: derived)
    stored: str | None = None  # a history region stored as a difference: the stored body

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path}:{self.line}"

    @property
    def is_difference(self) -> bool:
        return self.stored is not None


def regions_in_file(path: Path) -> list[Region]:
    """The regions of one file, as stored (a history difference is not applied here)."""
    found: list[Region] = []
    open_name: str | None = None
    open_line = 0
    body: list[str] = []
    marker = _PY_MARKER if path.suffix == ".py" else _MARKER
    for number, line in enumerate(path.read_text().splitlines(keepends=True), start=1):
        match = marker.match(line)
        if match is None:
            if open_name is not None:
                body.append(line)
            continue
        if match["what"] == "begin":
            if open_name is not None:
                raise ValueError(f"{path}:{number}: region {match['name']!r} starts inside {open_name!r}")
            open_name, open_line, body = match["name"], number, []
        else:
            if match["name"] != open_name:
                raise ValueError(f"{path}:{number}: 'end {match['name']}' does not close {open_name!r}")
            found.append(Region(open_name, path, open_line, normalize("".join(body))))
            open_name = None
    if open_name is not None:
        raise ValueError(f"{path}:{open_line}: region {open_name!r} is never closed")
    return found


def extension_regions(root: Path = CSRC) -> dict[str, Region]:
    """The package's C++ regions (extension/csrc), by name."""
    regions: dict[str, Region] = {}
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        for region in regions_in_file(path):
            if region.name in regions:
                raise ValueError(
                    f"region {region.name!r} is defined twice: {regions[region.name].where} and {region.where}"
                )
            regions[region.name] = region
    return regions


def all_regions(extension: Path = EXTENSION, chapters: Path = CHAPTERS) -> dict[Place, Region]:
    """Every C++ region: the package's (`extension`), history's (full texts derived) and the solutions'
    (under `chapters`)."""
    regions: dict[Place, Region] = {
        ("csrc", name): r for name, r in extension_regions(extension / "csrc").items()
    }
    for folder in BOOK_ONLY:
        for path in sorted((chapters / folder).glob("*.cpp")):
            for region in regions_in_file(path):
                place = (f"{folder}/{path.stem}", region.name)
                if place in regions:
                    raise ValueError(f"region {region.name!r} is defined twice in {path}")
                regions[place] = region
    return _derive_history(regions, "csrc")


def python_regions(extension: Path = EXTENSION, chapters: Path = CHAPTERS) -> dict[Place, Region]:
    """The Python regions: ("package", NAME) in extension/torch_ember (names unique across the
    package), ("history/<slug>", NAME.vK) in chapters/history/<slug>.py (full texts derived)."""
    regions: dict[Place, Region] = {}
    files = [("package", p) for p in sorted((extension / PACKAGE).rglob("*.py"))]
    files += [(f"{HISTORY}/{p.stem}", p) for p in sorted((chapters / HISTORY).glob("*.py"))]
    for folder, path in files:
        for region in regions_in_file(path):
            place = (folder, region.name)
            if place in regions:
                raise ValueError(
                    f"Python region {region.name!r} is defined twice: {regions[place].where} and {region.where}"
                )
            regions[place] = region
    return _derive_history(regions, "package")


# -- history: earlier versions, stored as what differs ---------------------------------------

_VERSION = re.compile(r"^(?P<name>.+)\.v(?P<number>[1-9]\d*)$")
_HUNK = re.compile(
    r"^@@ -(?P<start>\d+)(?:,(?P<length>\d+))? \+\d+(?:,\d+)? @@(?: sha256:(?P<checksum>[0-9a-f]+))?\s*$"
)
DIFFERENCE_PREFIX = "@@ "


def split_version(name: str) -> tuple[str, int] | None:
    """("allocator", 1) for "allocator.v1"; None for a name without a version."""
    match = _VERSION.match(name)
    return (match["name"], int(match["number"])) if match else None


def is_difference(body: str) -> bool:
    """Whether a history region's body is a stored difference rather than a full version."""
    return body.startswith(DIFFERENCE_PREFIX)


# In a Python history file a difference is stored as comments (``# @@ ...``, ``# +line``), so the
# file stays a valid Python module for the linters that check extension/.
PY_DIFFERENCE_PREFIX = "# "


def stored_body(text: str, path: Path) -> str:
    """How a difference (or a full version) is written into history file `path`."""
    if path.suffix != ".py" or not is_difference(text):
        return text
    return "".join(f"{PY_DIFFERENCE_PREFIX}{line}".rstrip() + "\n" for line in text.splitlines())


def _read_body(text: str, path: Path) -> str:
    """A stored body as `apply_difference` reads it (`stored_body` undone)."""
    if path.suffix != ".py" or not text.startswith(PY_DIFFERENCE_PREFIX + DIFFERENCE_PREFIX):
        return text
    lines = text.splitlines()
    if not all(line.startswith(PY_DIFFERENCE_PREFIX.rstrip()) for line in lines):
        raise ValueError(f"{path}: a Python difference is stored as comment lines only")
    return "".join(
        line[len(PY_DIFFERENCE_PREFIX) :] + "\n" if line.strip() != "#" else "\n" for line in lines
    )


def _checksum(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:10]


def difference(following: str, version: str) -> str:
    """What history stores for `version` when the next stored version is `following`; empty if identical.

    One hunk per change, unified-diff style without context: ``@@ -a,b +c,d @@ sha256:…``, then this
    version's own lines, each after a ``+``. The lines of `following` it replaces (b lines from line a)
    are not repeated: their checksum is enough to know the difference still applies to them.
    """
    old, new = following.splitlines(), version.splitlines()
    hunks: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        start = i1 if i2 == i1 else i1 + 1  # unified diff: with nothing removed, the line before
        header = f"@@ -{start},{i2 - i1} +{j1 + 1 if j2 > j1 else j1},{j2 - j1} @@"
        hunks.append(header + (f" sha256:{_checksum(old[i1:i2])}" if i2 > i1 else ""))
        hunks.extend(f"+{line}" for line in new[j1:j2])
    return "".join(line + "\n" for line in hunks)


def apply_difference(following: str, stored: str, name: str = "region") -> str:
    """The version that `stored` (see `difference`; ``-`` lines, as a unified diff has them, are accepted
    and checked too) makes of `following`. ValueError if it no longer applies to `following`."""
    base = following.splitlines()
    result: list[str] = []
    position = 0  # lines of `base` consumed
    lines = stored.splitlines()
    index = 0
    while index < len(lines):
        header = _HUNK.match(lines[index])
        if header is None:
            raise ValueError(f"{name}: expected a hunk header '@@ -a,b +c,d @@', got {lines[index]!r}")
        start, length = int(header["start"]), int(header["length"] or 1)
        cut = start if length == 0 else start - 1
        if cut < position or cut + length > len(base):
            raise ValueError(f"{name}: hunk {header.group(0)!r} does not fit the next version")
        removed = base[cut : cut + length]
        stale = f"{name} no longer applies: the next version changed at its line {cut + 1}. Store this version in full."
        if header["checksum"] is not None and _checksum(removed) != header["checksum"]:
            raise ValueError(stale)
        result.extend(base[position:cut])
        index += 1
        minus: list[str] = []
        while index < len(lines) and not lines[index].startswith(DIFFERENCE_PREFIX):
            line = lines[index]
            if line.startswith("+"):
                result.append(line[1:])
            elif line.startswith("-"):
                minus.append(line[1:])
            else:
                raise ValueError(f"{name}: a difference line must start with '+' or '-': {line!r}")
            index += 1
        if minus and minus != removed:
            raise ValueError(stale)
        position = cut + length
    result.extend(base[position:])
    return normalize("\n".join(result))


def _derive_history(regions: dict[Place, Region], latest_folder: str) -> dict[Place, Region]:
    """`regions` with every history difference replaced by its full text (the stored body kept)."""
    stored: dict[str, dict[int, Place]] = {}
    for place in regions:
        version = split_version(place[1]) if place[0].startswith(f"{HISTORY}/") else None
        if version is not None:
            stored.setdefault(version[0], {})[version[1]] = place
    for name, versions in stored.items():
        following: str | None = (
            regions[(latest_folder, name)].text if (latest_folder, name) in regions else None
        )
        for number in sorted(versions, reverse=True):  # the latest first: each applies to the one after it
            place = versions[number]
            region = regions[place]
            body = _read_body(region.text, region.path)
            if is_difference(body):
                if following is None:
                    raise ValueError(
                        f"{region.where}: {region.name} is stored as a difference, but there is no later "
                        f"version of {name!r} to apply it to"
                    )
                text = apply_difference(following, body, f"{region.where}: {region.name}")
                region = replace(region, text=text, stored=body)
                regions[place] = region
            following = region.text
    return regions


def history_text(regions: dict[Place, Region], place: Place, latest_folder: str) -> Region | None:
    """The region of `place`; for a history version that is not stored (identical to the next one),
    the next stored version of that name (in history, else the package's). None if there is none."""
    version = split_version(place[1]) if place[0].startswith(f"{HISTORY}/") else None
    if place in regions or version is None:
        return regions.get(place)
    name, number = version
    later = {}
    for other, region in regions.items():
        found = split_version(other[1]) if other[0].startswith(f"{HISTORY}/") else None
        if found is not None and found[0] == name and found[1] > number:
            later[found[1]] = region
    return later[min(later)] if later else regions.get((latest_folder, name))
