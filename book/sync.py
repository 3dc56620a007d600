"""One source of truth for the C++: `extension/csrc` -> the chapters' `%%cpp` cells.

Code a chapter shows sits in the extension's sources between two marker lines::

    // ember-book: begin empty_memory_format
    ...
    // ember-book: end empty_memory_format

and a chapter shows it in a cell that starts with ``%%cpp empty_memory_format``.
The cell body must be byte-identical to the region (trailing blank lines
aside). ``python -m book.sync --check`` lists every difference and exits 1;
``python -m book.sync --write`` copies the regions into the notebooks (then
re-execute the chapters whose code changed).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from book.cells import MAGIC, CppPart, chapter_paths, normalize, parts_in_notebook, split_magic
from book.paths import CSRC, REPO

_MARKER = re.compile(r"^\s*// ember-book: (?P<what>begin|end) (?P<name>[A-Za-z_][\w.-]*)\s*$")
SOURCE_SUFFIXES = (".cpp", ".h")


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
    for number, line in enumerate(path.read_text().splitlines(keepends=True), start=1):
        match = _MARKER.match(line)
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
    regions: dict[str, Region] = {}
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        for region in regions_in_file(path):
            if region.name in regions:
                raise ValueError(
                    f"region {region.name!r} is defined twice: {regions[region.name].where} and {region.where}"
                )
            regions[region.name] = region
    return regions


def chapter_parts(notebooks: Iterable[Path] | None = None) -> list[CppPart]:
    parts: list[CppPart] = []
    for path in notebooks if notebooks is not None else chapter_paths():
        parts.extend(parts_in_notebook(path))
    return parts


def problems(notebooks: Iterable[Path] | None = None, root: Path = CSRC) -> list[str]:
    """Every way the chapters' C++ differs from the extension's. Empty means in sync."""
    regions = extension_regions(root)
    parts = chapter_parts(notebooks)
    found: list[str] = []
    shown: dict[str, CppPart] = {}
    for part in parts:
        if part.name in shown:
            found.append(f"{part.origin}: the name {part.name!r} is also used by {shown[part.name].origin}")
            continue
        shown[part.name] = part
        region = regions.get(part.name)
        if region is None:
            found.append(
                f"{part.origin}: no region '// ember-book: begin {part.name}' in {root.relative_to(REPO)}"
            )
        elif region.text != part.source:
            diff = difflib.unified_diff(
                region.text.splitlines(), part.source.splitlines(), region.where, part.origin, lineterm=""
            )
            found.append(f"{part.origin} differs from {region.where}:\n" + "\n".join(diff))
    for name, region in regions.items():
        if name not in shown:
            found.append(f"{region.where}: region {name!r} is not shown by any chapter")
    return found


def write(notebooks: Iterable[Path] | None = None, root: Path = CSRC) -> list[Path]:
    """Copy each region into the cell that shows it. Returns the notebooks changed."""
    regions = extension_regions(root)
    changed: list[Path] = []
    for path in notebooks if notebooks is not None else chapter_paths():
        notebook = json.loads(path.read_text())
        dirty = False
        for cell in notebook["cells"]:
            split = split_magic("".join(cell["source"])) if cell["cell_type"] == "code" else None
            if split is None or split[0] not in regions:
                continue
            name, body = split
            if body != regions[name].text:
                text = f"%%{MAGIC} {name}\n" + regions[name].text.rstrip("\n")
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
        print(f"in sync: {len(chapter_parts())} C++ cells match extension/csrc")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
