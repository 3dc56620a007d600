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
* an earlier version, revised by a later cell: ``extension/history/<chapter>.cpp``,
  region ``NAME.vK`` (K counts the versions in book order, from 1);
* an exercise solution (``%%cpp exercise_*``): ``extension/exercises/<chapter>.cpp``;
* a display-only cell (``%%cpp --stable NAME``): code compiled into the stable
  library (``book/stable.py``), region NAME in one of that library's sources in
  ``extension/csrc``. It has one version, and no chapter build compiles it;
  conversely a region of those sources shown by an ordinary cell is an error
  (the chapter build would compile a second copy of the hooks).

Neither history nor exercises is part of the package build; the chapters'
builds and tests compile them.

The Python a chapter shows follows the same rules (``book/pycells.py``): a ``%%py NAME``
cell equals the region ``# ember-book: begin NAME`` ... ``# ember-book: end NAME`` of a
file under ``extension/torch_ember/`` (the package, latest version), or region
``NAME.vK`` of ``extension/history/<chapter>.py`` (an earlier version). Python and C++
names are separate: a ``%%py`` cell never matches a C++ region, nor the reverse. ``python -m book.sync --check`` lists every difference and exits 1;
``python -m book.sync --write`` copies the regions into the notebooks (then
re-execute the chapters whose code changed).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from book import pycells
from book.cells import CppPart, chapter_paths, magic_line, normalize, parse_magic, parts_in_notebook
from book.paths import CSRC, EXTENSION, REPO
from book.stable import HEADERS as STABLE_HEADERS
from book.stable import SOURCES as STABLE_SOURCES

_MARKER = re.compile(r"^\s*// ember-book: (?P<what>begin|end) (?P<name>[A-Za-z_][\w.-]*)\s*$")
_PY_MARKER = re.compile(r"^# ember-book: (?P<what>begin|end) (?P<name>[A-Za-z_][\w.-]*)\s*$")
SOURCE_SUFFIXES = (".cpp", ".h")
PACKAGE = "torch_ember"  # the package's Python, under extension/


@dataclass(frozen=True)
class Region:
    name: str
    path: Path
    line: int  # 1-based line of the `begin` marker
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def regions_in_file(path: Path) -> list[Region]:
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


# Where a region lives: ("csrc", NAME) for the package's sources, whose names are
# unique across csrc/; ("history/<chapter>", NAME.vK) and ("exercises/<chapter>", NAME)
# for the book-only files, one per chapter.
Place = tuple[str, str]
BOOK_ONLY = ("history", "exercises")


def extension_regions(root: Path = CSRC) -> dict[str, Region]:
    """The package's regions (extension/csrc), by name."""
    regions: dict[str, Region] = {}
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        for region in regions_in_file(path):
            if region.name in regions:
                raise ValueError(
                    f"region {region.name!r} is defined twice: {regions[region.name].where} and {region.where}"
                )
            regions[region.name] = region
    return regions


def all_regions(extension: Path = EXTENSION) -> dict[Place, Region]:
    regions: dict[Place, Region] = {
        ("csrc", name): r for name, r in extension_regions(extension / "csrc").items()
    }
    for folder in BOOK_ONLY:
        for path in sorted((extension / folder).glob("*.cpp")):
            for region in regions_in_file(path):
                place = (f"{folder}/{path.stem}", region.name)
                if place in regions:
                    raise ValueError(f"region {region.name!r} is defined twice in {path}")
                regions[place] = region
    return regions


def python_regions(extension: Path = EXTENSION) -> dict[Place, Region]:
    """The Python regions: ("package", NAME) in extension/torch_ember (names unique across the
    package), ("history/<chapter>", NAME.vK) in extension/history/<chapter>.py."""
    regions: dict[Place, Region] = {}
    files = [("package", p) for p in sorted((extension / PACKAGE).rglob("*.py"))]
    files += [(f"history/{p.stem}", p) for p in sorted((extension / "history").glob("*.py"))]
    for folder, path in files:
        for region in regions_in_file(path):
            place = (folder, region.name)
            if place in regions:
                raise ValueError(
                    f"Python region {region.name!r} is defined twice: {regions[place].where} and {region.where}"
                )
            regions[place] = region
    return regions


def python_placements(parts: list[pycells.PyPart]) -> list[tuple[pycells.PyPart, Place]]:
    """Each `%%py` cell, in book order, with the place of the region it must equal: the last
    version of a name is the package's, version K before it is history's NAME.vK."""
    count = Counter(part.name for part in parts)
    seen: Counter[str] = Counter()
    placed: list[tuple[pycells.PyPart, Place]] = []
    for part in parts:
        seen[part.name] += 1
        if seen[part.name] == count[part.name]:
            placed.append((part, ("package", part.name)))
        else:
            placed.append((part, (f"history/{part.chapter}", f"{part.name}.v{seen[part.name]}")))
    return placed


def _describe_python(place: Place, extension: Path) -> str:
    folder, name = place
    where = extension / PACKAGE if folder == "package" else extension / f"{folder}.py"
    shown = where.relative_to(REPO) if where.is_relative_to(REPO) else where
    return f"'# ember-book: begin {name}' in {shown}"


def python_problems(notebooks: Iterable[Path] | None = None, extension: Path = EXTENSION) -> list[str]:
    """Every way the chapters' `%%py` cells differ from the package's Python (and its history)."""
    regions = python_regions(extension)
    found: list[str] = []
    shown: dict[Place, pycells.PyPart] = {}
    paths = list(notebooks) if notebooks is not None else None
    for part, place in python_placements(pycells.chapter_parts(paths)):
        if place in shown:
            found.append(f"{part.origin}: the name {part.name!r} is also used by {shown[place].origin}")
            continue
        shown[place] = part
        region = regions.get(place)
        if region is None:
            found.append(f"{part.origin}: no Python region {_describe_python(place, extension)}")
        elif region.text != part.source:
            diff = difflib.unified_diff(
                region.text.splitlines(), part.source.splitlines(), region.where, part.origin, lineterm=""
            )
            found.append(f"{part.origin} differs from {region.where}:\n" + "\n".join(diff))
    for place, region in regions.items():
        if place not in shown:
            found.append(f"{region.where}: Python region {place[1]!r} is not shown by any chapter")
    return found


def chapter_parts(notebooks: Iterable[Path] | None = None) -> list[CppPart]:
    parts: list[CppPart] = []
    for path in notebooks if notebooks is not None else chapter_paths():
        parts.extend(parts_in_notebook(path))
    return parts


def placements(parts: list[CppPart]) -> list[tuple[CppPart, Place]]:
    """Each part shown, in book order, with the place of the region it must equal."""
    count = Counter(part.name for part in parts if not part.is_exercise and not part.stable)
    seen: Counter[str] = Counter()
    placed: list[tuple[CppPart, Place]] = []
    for part in parts:
        if part.is_exercise:
            placed.append((part, (f"exercises/{part.chapter}", part.name)))
            continue
        if part.stable:  # one version: the stable library's source as it is
            placed.append((part, ("csrc", part.name)))
            continue
        seen[part.name] += 1
        if seen[part.name] == count[part.name]:  # the latest version: the package's
            placed.append((part, ("csrc", part.name)))
        else:
            placed.append((part, (f"history/{part.chapter}", f"{part.name}.v{seen[part.name]}")))
    return placed


def _describe(place: Place, extension: Path) -> str:
    folder, name = place
    where = extension / folder if folder == "csrc" else extension / f"{folder}.cpp"
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


def problems(notebooks: Iterable[Path] | None = None, extension: Path = EXTENSION) -> list[str]:
    """Every way the chapters' C++ and Python differ from the extension's. Empty means in sync."""
    if notebooks is not None:
        notebooks = list(notebooks)
    return cpp_problems(notebooks, extension) + python_problems(notebooks, extension)


def cpp_problems(notebooks: Iterable[Path] | None = None, extension: Path = EXTENSION) -> list[str]:
    """Every way the chapters' `%%cpp` cells differ from the extension's C++."""
    regions = all_regions(extension)
    found: list[str] = []
    shown: dict[Place, CppPart] = {}
    for part, place in placements(chapter_parts(notebooks)):
        if place in shown:
            found.append(f"{part.origin}: the name {part.name!r} is also used by {shown[place].origin}")
            continue
        shown[place] = part
        region = regions.get(place)
        if region is None:
            found.append(f"{part.origin}: no region {_describe(place, extension)}")
            continue
        kind = _kind_problem(part, region, extension)
        if kind is not None:
            found.append(kind)
        elif region.text != part.source:
            diff = difflib.unified_diff(
                region.text.splitlines(), part.source.splitlines(), region.where, part.origin, lineterm=""
            )
            found.append(f"{part.origin} differs from {region.where}:\n" + "\n".join(diff))
    for place, region in regions.items():
        if place not in shown:
            found.append(f"{region.where}: region {place[1]!r} is not shown by any chapter")
    return found


def write(notebooks: Iterable[Path] | None = None, extension: Path = EXTENSION) -> list[Path]:
    """Copy each region into the cell that shows it. Returns the notebooks changed."""
    paths = list(notebooks if notebooks is not None else chapter_paths())
    regions = all_regions(extension)
    py_regions = python_regions(extension)
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
                region = regions.get(place)
                first = magic_line(name, stable)
            elif py_parsed is not None:
                name, body = py_parsed
                _, place = next(py_placed)
                region = py_regions.get(place)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m book.sync", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="report drift, exit 1 if any")
    mode.add_argument("--write", action="store_true", help="copy extension regions into the notebooks")
    args = parser.parse_args(argv)
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
