"""One source of truth for the C++: `extension/csrc` -> the chapters' `%%cpp` cells.

Code a chapter shows sits in the extension's sources between two marker lines::

    // ember-book: begin empty_memory_format
    ...
    // ember-book: end empty_memory_format

and a chapter shows it in a cell that starts with ``%%cpp empty_memory_format``.
The cell body must be byte-identical to the region (trailing blank lines
aside). Where the region lives depends on what the cell is:

* the latest version of a part (the one the finished backend compiles):
  ``extension/csrc/``, region NAME;
* an earlier version, revised by a later cell: ``chapters/history/<slug>.cpp``,
  region ``NAME.vK`` (K counts the versions in book order, from 1);
* an exercise solution (``%%cpp exercise_*``): ``chapters/solutions/<slug>.cpp``;
* a display-only cell (``%%cpp --stable NAME``): code compiled into the stable
  library (``book/builds/stable.py``), region NAME in one of that library's sources in
  ``extension/csrc``. It has one version, and no chapter build compiles it;
  conversely a region of those sources shown by an ordinary cell is an error
  (the chapter build would compile a second copy of the hooks).

Neither history nor solutions is part of the package build: they are book material, one
file per chapter named by its slug. The chapters' builds and tests compile them (from the
cells, which hold every version in full).

History stores only what differs (`book.parts.regions`): version K is the difference from
the next stored version (``@@ -a,b +c,d @@ sha256:...`` hunks holding version K's own
lines), and a version identical to the next one is not stored. The check derives
every version's full text and compares it with its cell, so it covers every version,
and a revision cell still prints its full diff (from the cells). To record a revision,
paste the current text into history as ``NAME.vK`` in full, edit the package's region,
then ``python -m book.sync --compact-history`` stores it as a difference. An edit of a
later version that touches lines a difference replaces makes the check fail ("no
longer applies"); an edit elsewhere reaches the earlier versions too, and the check
shows which earlier cells now differ (store the earlier version in full to keep it).

Regions and parts are read by the bottom layer, `book.parts.regions` (no torch, no drift
check); this module is the command-line check on top of it.

The Python a chapter shows follows the same rules (``book/parts/pycells.py``): a ``%%py NAME``
cell equals the region ``# ember-book: begin NAME`` ... ``# ember-book: end NAME`` of a
file under ``extension/torch_ember/`` (the package, latest version), or region
``NAME.vK`` of ``chapters/history/<slug>.py`` (an earlier version). Python and C++
names are separate: a ``%%py`` cell never matches a C++ region, nor the reverse. ``python -m book.sync --check`` lists every difference and exits 1;
``python -m book.sync --write`` copies the regions into the notebooks (then
re-execute the chapters whose code changed).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from book.builds.stable import HEADERS as STABLE_HEADERS
from book.builds.stable import SOURCES as STABLE_SOURCES
from book.parts import pycells
from book.parts.regions import (
    BOOK_ONLY,
    HISTORY,
    PACKAGE,
    SOLUTIONS,
    CppPart,
    Place,
    Region,
    all_regions,
    chapter_parts,
    chapter_paths,
    difference,
    extension_regions,
    history_text,
    magic_line,
    parse_magic,
    python_regions,
    regions_in_file,
    split_version,
    stored_body,
)
from book.paths import CHAPTERS, CSRC, EXTENSION, REPO

__all__ = [  # the bottom layer's region reading, re-exported for the check's callers
    "BOOK_ONLY",
    "CHAPTERS",
    "CSRC",
    "EXTENSION",
    "Region",
    "all_regions",
    "chapter_parts",
    "extension_regions",
    "python_regions",
    "regions_in_file",
    # the drift check's own
    "compact_history",
    "cpp_problems",
    "main",
    "placements",
    "problems",
    "python_placements",
    "python_problems",
    "write",
]


def python_placements(parts: list[pycells.PyPart]) -> list[tuple[pycells.PyPart, Place]]:
    """Each `%%py` cell, in book order, with the place of the region it must equal: the last
    version of a name is the package's, version K before it is history's NAME.vK."""
    versions = _Versions(part.name for part in parts)
    return [(part, versions.place(part.name, part.chapter, "package")) for part in parts]


def _describe_python(place: Place, extension: Path, material: Path) -> str:
    folder, name = place
    where = extension / PACKAGE if folder == "package" else material / f"{folder}.py"
    shown = where.relative_to(REPO) if where.is_relative_to(REPO) else where
    return f"'# ember-book: begin {name}' in {shown}"


def python_problems(
    notebooks: Iterable[Path] | None = None, extension: Path = EXTENSION, material: Path = CHAPTERS
) -> list[str]:
    """Every way the chapters' `%%py` cells differ from the package's Python (and its history,
    under `material`)."""
    try:
        regions = python_regions(extension, material)
    except ValueError as error:
        return [str(error)]
    paths = list(notebooks) if notebooks is not None else None
    return _compare(
        python_placements(pycells.chapter_parts(paths)),
        regions,
        latest="package",
        kind="Python region",
        describe=lambda place: _describe_python(place, extension, material),
    )


def _compare(
    placed: list[tuple[Any, Place]],
    regions: dict[Place, Any],
    latest: str,
    kind: str,
    describe: Callable[[Place], str],
    kind_problem: Callable[[Any, Any], str | None] = lambda part, region: None,
) -> list[str]:
    """What differs between the parts shown, each at its place, and the regions: a name used twice, a
    missing region, a wrong kind of cell, a text that differs, a region no chapter shows. One check
    for C++ (`latest` "csrc") and Python ("package")."""
    found: list[str] = []
    shown: dict[Place, Any] = {}
    for part, place in placed:
        if place in shown:
            found.append(f"{part.origin}: the name {part.name!r} is also used by {shown[place].origin}")
            continue
        shown[place] = part
        region = history_text(regions, place, latest)
        if region is None:
            found.append(f"{part.origin}: no {kind} {describe(place)}")
            continue
        problem = kind_problem(part, region)
        if problem is not None:
            found.append(problem)
        elif region.text != part.source:
            diff = difflib.unified_diff(
                region.text.splitlines(), part.source.splitlines(), region.where, part.origin, lineterm=""
            )
            found.append(f"{part.origin} differs from {region.where}:\n" + "\n".join(diff))
    for place, region in regions.items():
        if place not in shown:
            found.append(f"{region.where}: {kind} {place[1]!r} is not shown by any chapter")
    return found


def placements(parts: list[CppPart]) -> list[tuple[CppPart, Place]]:
    """Each part shown, in book order, with the place of the region it must equal."""
    versions = _Versions(part.name for part in parts if not part.is_exercise and not part.stable)
    placed: list[tuple[CppPart, Place]] = []
    for part in parts:
        if part.is_exercise:
            placed.append((part, (f"{SOLUTIONS}/{part.chapter}", part.name)))
        elif part.stable:  # one version: the stable library's source as it is
            placed.append((part, ("csrc", part.name)))
        else:
            placed.append((part, versions.place(part.name, part.chapter, "csrc")))
    return placed


class _Versions:
    """Numbers the versions of each name in book order: the last is the package's (in `latest`),
    version K before it is the history region NAME.vK of the chapter that shows it."""

    def __init__(self, names: Iterable[str]) -> None:
        self.count = Counter(names)
        self.seen: Counter[str] = Counter()

    def place(self, name: str, chapter: str, latest: str) -> Place:
        self.seen[name] += 1
        if self.seen[name] == self.count[name]:
            return (latest, name)
        return (f"{HISTORY}/{chapter}", f"{name}.v{self.seen[name]}")


def _describe(place: Place, extension: Path, material: Path) -> str:
    folder, name = place
    where = extension / folder if folder == "csrc" else material / f"{folder}.cpp"
    return (
        f"'// ember-book: begin {name}' in {where.relative_to(REPO) if where.is_relative_to(REPO) else where}"
    )


def _stable_file(region: Region, extension: Path, names: list[str]) -> bool:
    csrc = extension / "csrc"
    return region.path.is_relative_to(csrc) and region.path.relative_to(csrc).as_posix() in names


def _kind_problem(part: CppPart, region: Region, extension: Path) -> str | None:
    """A display-only cell must show code compiled into the stable library (its sources or the headers they
    include), and code of the stable library's own sources only such a cell may show: its headers are shared
    with the chapter builds (EmberCheck.h), its sources are not."""
    if part.stable and not _stable_file(region, extension, STABLE_SOURCES + STABLE_HEADERS):
        return (
            f"{part.origin}: `{part.magic_line}` shows {region.where}, which is not compiled into the "
            f"stable library ({', '.join(STABLE_SOURCES)}): use `{magic_line(part.name)}`"
        )
    if not part.stable and _stable_file(region, extension, STABLE_SOURCES):
        return (
            f"{part.origin}: {region.where} is compiled into the stable library, so a chapter build "
            f"must not compile it again: show it with `{magic_line(part.name, stable=True)}`"
        )
    return None


def problems(
    notebooks: Iterable[Path] | None = None, extension: Path = EXTENSION, material: Path = CHAPTERS
) -> list[str]:
    """Every way the chapters' C++ and Python differ from the extension's (and the book material's
    under `material`: history/ and solutions/). Empty means in sync."""
    if notebooks is not None:
        notebooks = list(notebooks)
    return cpp_problems(notebooks, extension, material) + python_problems(notebooks, extension, material)


def cpp_problems(
    notebooks: Iterable[Path] | None = None, extension: Path = EXTENSION, material: Path = CHAPTERS
) -> list[str]:
    """Every way the chapters' `%%cpp` cells differ from the extension's C++ (and history's, solutions')."""
    try:
        regions = all_regions(extension, material)
    except ValueError as error:  # a region never closed, a history difference that no longer applies
        return [str(error)]
    return _compare(
        placements(chapter_parts(notebooks)),
        regions,
        latest="csrc",
        kind="region",
        describe=lambda place: _describe(place, extension, material),
        kind_problem=lambda part, region: _kind_problem(part, region, extension),
    )


def write(
    notebooks: Iterable[Path] | None = None, extension: Path = EXTENSION, material: Path = CHAPTERS
) -> list[Path]:
    """Copy each region into the cell that shows it. Returns the notebooks changed."""
    paths = list(notebooks if notebooks is not None else chapter_paths())
    regions = all_regions(extension, material)
    py_regions = python_regions(extension, material)
    # placements() lists the parts in cell order, so walking the cells in the same order pairs them.
    placed = iter(placements(chapter_parts(paths)))
    py_placed = iter(python_placements(pycells.chapter_parts(paths)))
    changed: list[Path] = []
    for path in paths:
        notebook = json.loads(path.read_text())
        dirty = False
        for cell in notebook["cells"]:
            source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
            parsed = parse_magic(source) if source else None
            py_parsed = pycells.parse_magic(source) if source else None
            if parsed is not None:
                name, body, stable = parsed
                _, place = next(placed)
                region = history_text(regions, place, "csrc")
                first = magic_line(name, stable)
            elif py_parsed is not None:
                name, body = py_parsed
                _, place = next(py_placed)
                region = history_text(py_regions, place, "package")
                first = pycells.magic_line(name)
            else:
                continue
            if region is not None and body != region.text:
                text = first + "\n" + region.text.rstrip("\n")
                cell["source"] = text.splitlines(keepends=True)
                dirty = True
        if dirty:
            path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
            changed.append(path)
    return changed


def compact_history(extension: Path = EXTENSION, material: Path = CHAPTERS) -> list[Path]:
    """Store only what differs in chapters/history (under `material`): each earlier version as the difference from the next
    stored version (`book.parts.regions`), none for a version identical to the next. Returns the files changed.

    The full text of every version stays what it was (the drift check proves it against the cells).
    """
    changed: list[Path] = []
    for regions, latest, suffix in (
        (all_regions(extension, material), "csrc", ".cpp"),
        (python_regions(extension, material), "package", ".py"),
    ):
        bodies: dict[Place, str | None] = {}  # None: drop the region
        versions: dict[str, list[tuple[int, Place]]] = {}
        for place in regions:
            version = split_version(place[1]) if place[0].startswith(f"{HISTORY}/") else None
            if version is not None:
                versions.setdefault(version[0], []).append((version[1], place))
        for name, stored in versions.items():
            following = regions[(latest, name)].text if (latest, name) in regions else None
            for _, place in sorted(stored, reverse=True):  # the latest first: each differs from the one after
                text = regions[place].text
                stored_as = text if following is None else difference(following, text)
                if stored_as and len(stored_as.splitlines()) >= len(text.splitlines()):
                    stored_as = text  # so different that the full text is shorter
                bodies[place] = stored_as or None  # empty: identical to the next version
                following = text
        for path in sorted((material / HISTORY).glob(f"*{suffix}")):
            own = {place[1]: body for place, body in bodies.items() if place[0] == f"{HISTORY}/{path.stem}"}
            if _rewrite_regions(
                path, {name: stored_body(body, path) if body else None for name, body in own.items()}
            ):
                changed.append(path)
    return changed


def _rewrite_regions(path: Path, bodies: dict[str, str | None]) -> bool:
    """Give each region of `path` named in `bodies` that body (None: remove the region). True if changed."""
    stored = {region.name: region for region in regions_in_file(path)}
    lines = path.read_text().splitlines(keepends=True)
    out: list[str] = []
    index = 0
    starts = {region.line - 1: region for region in stored.values()}
    while index < len(lines):
        region = starts.get(index)
        if region is None or region.name not in bodies:
            out.append(lines[index])
            index += 1
            continue
        end = index + 1
        while region.name not in lines[end] or "ember-book: end" not in lines[end]:
            end += 1
        body = bodies[region.name]
        if body is None:  # identical to the next version: derived, not stored
            index = end + 1
            if index < len(lines) and not lines[index].strip() and out and not out[-1].strip():
                index += 1  # no double blank line where the region was
            continue
        out.append(lines[index])
        out.append(body)
        out.append(lines[end])
        index = end + 1
    text = "".join(out)
    if text == path.read_text():
        return False
    path.write_text(text)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book.sync", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="report drift, exit 1 if any")
    mode.add_argument("--write", action="store_true", help="copy extension regions into the notebooks")
    mode.add_argument(
        "--compact-history",
        action="store_true",
        help="store earlier versions in chapters/history as what differs from the next version",
    )
    args = parser.parse_args(argv)
    if args.compact_history:
        for path in compact_history():
            print(f"compacted {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    if args.write:
        for path in write():
            print(f"updated {path.relative_to(REPO)}: re-execute it")
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    if not found:
        cpp, python = len(chapter_parts()), len(pycells.chapter_parts())
        print(f"in sync: {cpp} C++ cells and {python} Python cells match extension/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
