"""A chapter's identity is its slug and its place is _toc.yml's: inserting one changes no other file.

The test copies what the book reads (``_toc.yml``, ``chapters/`` with its history and solutions,
``book/``, the package's regions) into a temporary folder, inserts a throwaway chapter between
the matrix products and the convolution (its notebook, its region in a new file of
``extension/csrc``, its ``_toc.yml`` entry and the intro's table row), and, in a child process
that imports the copy's ``book``, shows that the order is right, that every later chapter still
resolves and now builds on the new chapter's part and Python state, that the drift check still
holds, and that no other file had to change. Nothing is compiled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from book.paths import REPO
from book.run.chapter import chapters

SLUG = "inserted"
AFTER = "chapters/05_matrix_products"  # the new chapter goes right after this _toc.yml entry
PART = "inserted_probe"
REGION_FILE = "extension/csrc/aten/EmberInserted.cpp"
# What a book reads to order and build its chapters, and to check them against the package.
COPIED = ["_toc.yml", "chapters", "book", "extension/csrc", "extension/torch_ember"]
# The only files an insertion may add or change.
EXPECTED = {"_toc.yml", "chapters/intro.md", f"chapters/{SLUG}.ipynb", REGION_FILE}


def _files(root: Path) -> dict[str, str]:
    found = {}
    for top in COPIED:
        for path in [root / top] if (root / top).is_file() else sorted((root / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and ".ipynb_checkpoints" not in path.parts:
                found[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "book-copy"
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")
    for top in COPIED:
        source = REPO / top
        if source.is_file():
            (root / top).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / top)
        else:
            shutil.copytree(source, root / top, ignore=ignore)
    return root


def _cell(kind: str, source: str, tags: tuple[str, ...] = ()) -> dict:
    cell: dict = {"cell_type": kind, "metadata": {"tags": list(tags)} if tags else {}, "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def _insert(root: Path) -> None:
    """What an author adds: the notebook, its C++ in the package, the _toc.yml entry, the intro's row."""
    source = "namespace ember {\nint insertedProbe() { return 7; }\n} // namespace ember\n"
    notebook = {
        "cells": [
            _cell("markdown", "# Inserted: a chapter in the middle of the book\n"),
            _cell("code", f'import book\n\nbook.start_chapter("{SLUG}")'),
            _cell("code", f"%%cpp {PART}\n{source}"),
            _cell("code", "inserted_state = 7", tags=("carry-forward",)),
            _cell("code", "book.build()"),
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (root / f"chapters/{SLUG}.ipynb").write_text(json.dumps(notebook, indent=1) + "\n")
    (root / REGION_FILE).write_text(
        "// The inserted chapter's probe (a test's throwaway chapter).\n"
        f"// ember-book: begin {PART}\n{source}// ember-book: end {PART}\n"
    )
    toc = root / "_toc.yml"
    entry = f"      - file: {AFTER}\n"
    assert entry in toc.read_text()
    toc.write_text(toc.read_text().replace(entry, entry + f"      - file: chapters/{SLUG}\n"))
    intro = root / "chapters/intro.md"
    row = next(line for line in intro.read_text().splitlines(keepends=True) if line.startswith("| 05 "))
    intro.write_text(intro.read_text().replace(row, row + "| Inserted | a probe | the book takes it in |\n"))


CHECK = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    root = Path(sys.argv[1])
    import book
    assert Path(book.__file__).resolve().is_relative_to(root.resolve()), book.__file__
    from book.run import sync
    from book.builds import units
    from book.run.chapter import Chapter, chapters

    order = [chapter.slug for chapter in chapters()]
    new = Chapter.of("inserted")
    facts = {"order": order, "labels": {c.slug: c.label for c in chapters()}}
    later = order[order.index("inserted") + 1 :]
    facts["later"] = {}
    for slug in later:
        chapter = Chapter.of(slug)
        before = chapter.parts_before()
        # What its first cell replays (`replay_earlier`, not run here: the renaming is once per process).
        carried = [o for c in chapters()[: chapter.index] for o, _ in c.carried_cells(for_chapter=chapter)]
        unit_parts = [p.name for unit in units.split(chapter.parts_through(), per_file=True) for p in unit.own]
        facts["later"][slug] = {
            "notebook": chapter.path.name,
            "probe_before": [p.origin for p in before if p.name == "inserted_probe"],
            "probe_in_units": unit_parts.count("inserted_probe"),
            "carried": [origin for origin in carried if origin.startswith("inserted.")],
        }
    earlier = order[: order.index("inserted")]
    facts["earlier_see_probe"] = [s for s in earlier if any(p.chapter == "inserted" for p in Chapter.of(s).parts_through())]
    facts["new_index"] = new.index
    facts["new_parts_before"] = len(new.parts_before())
    facts["sync"] = sync.problems()
    print("FACTS" + json.dumps(facts))
    """
)


def test_inserting_a_chapter_changes_no_other_file(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    original = _files(root)
    _insert(root)
    changed = {path for path, digest in _files(root).items() if original.get(path) != digest}
    assert changed == EXPECTED

    environment = dict(os.environ, PYTHONPATH=str(root), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    child = subprocess.run(
        [sys.executable, "-c", CHECK, str(root)],
        check=False,
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    facts = json.loads(child.stdout.split("FACTS", 1)[1])

    slugs = [chapter.slug for chapter in chapters()]  # the book as it is, in _toc.yml's order
    position = slugs.index("matrix_products") + 1
    assert facts["order"] == [*slugs[:position], SLUG, *slugs[position:]]
    assert facts["new_index"] == position
    # The chapters after it: same files, same labels (their saved outputs say "chapter 06" as before),
    # and they build on the inserted chapter's part and start from its Python state.
    assert list(facts["later"]) == slugs[position:]
    for slug, later in facts["later"].items():
        assert later["notebook"].endswith(f"_{slug}.ipynb")
        assert later["probe_before"] == [f"{SLUG}.ipynb[{PART}]"], slug
        assert later["probe_in_units"] == 1, slug
        assert later["carried"] == [f"{SLUG}.ipynb[cell 3]"], slug
    assert facts["earlier_see_probe"] == []
    assert {slug: facts["labels"][slug] for slug in slugs} == {c.slug: c.label for c in chapters()}
    assert facts["labels"][SLUG] == SLUG  # a file without a number prefix is labelled by its slug
    # The drift check holds: no history or solution file of another chapter had to change.
    assert facts["sync"] == []
