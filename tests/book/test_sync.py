"""One source of truth: every C++ cell equals a region of extension/csrc."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from book.parts import pycells, regions
from book.parts.cells import chapter_paths, parts_before, split_magic
from book.run import sync


def test_chapters_match_the_extension():
    problems = sync.problems()
    assert problems == [], "\n\n".join(problems)


def test_every_chapter_with_cpp_is_covered():
    # Guard against a vacuous pass: the book does show C++.
    assert len(sync.chapter_parts()) >= 3


def copy_chapters(tmp_path: Path) -> list[Path]:
    copies = []
    for path in chapter_paths():
        copies.append(Path(shutil.copy(path, tmp_path / path.name)))
    return copies


def edit_first_cpp_cell(path: Path, edit) -> str:
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and split_magic(source):
            cell["source"] = edit(source)
            path.write_text(json.dumps(notebook))
            return split_magic(source)[0]
    raise AssertionError(f"{path} has no %%cpp cell")


def first_notebook_with_cpp(copies: list[Path]) -> Path:
    return next(p for p in copies if any(split_magic(source) for source in _sources(p)))


def _sources(path: Path) -> list[str]:
    notebook = json.loads(path.read_text())
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


def test_an_edited_chapter_is_reported(tmp_path):
    copies = copy_chapters(tmp_path)
    target = first_notebook_with_cpp(copies)
    name = edit_first_cpp_cell(target, lambda s: s.replace(";", "; ", 1))
    problems = sync.problems(notebooks=copies)
    assert len(problems) == 1
    assert problems[0].startswith(f"{target.stem}.ipynb[{name}] differs from extension/csrc/")


def test_a_renamed_cell_is_reported_both_ways(tmp_path):
    copies = copy_chapters(tmp_path)
    target = first_notebook_with_cpp(copies)
    name = edit_first_cpp_cell(target, lambda s: s.replace("%%cpp ", "%%cpp renamed_", 1))
    problems = sync.problems(notebooks=copies)
    assert any(f"[renamed_{name}]: no region" in p for p in problems)
    assert any(f"region {name!r} is not shown by any chapter" in p for p in problems)


def test_write_restores_an_edited_chapter(tmp_path):
    copies = copy_chapters(tmp_path)
    target = first_notebook_with_cpp(copies)
    edit_first_cpp_cell(target, lambda s: s + "\n// stray edit")
    assert sync.problems(notebooks=copies)
    assert sync.write(notebooks=copies) == [target]
    assert sync.problems(notebooks=copies) == []


def test_region_markers_must_pair(tmp_path):
    source = tmp_path / "bad.cpp"
    source.write_text("// ember-book: begin a\nint x;\n// ember-book: end b\n")
    with pytest.raises(ValueError, match="'end b' does not close 'a'"):
        sync.regions_in_file(source)
    source.write_text("// ember-book: begin a\nint x;\n")
    with pytest.raises(ValueError, match="region 'a' is never closed"):
        sync.regions_in_file(source)


def test_region_text_excludes_markers(tmp_path):
    source = tmp_path / "ok.cpp"
    source.write_text("#include <x>\n// ember-book: begin a\nint x;\n\n// ember-book: end a\nint y;\n")
    (region,) = sync.regions_in_file(source)
    assert (region.name, region.line, region.text) == ("a", 2, "int x;\n")


def test_a_chapter_builds_on_the_chapters_before_it():
    slugs = [regions.slug_of(p) for p in chapter_paths()]
    assert len(set(slugs)) == len(slugs)
    for index, slug in enumerate(slugs):
        earlier = {p.chapter for p in parts_before(slug)}
        assert earlier <= set(slugs[:index])


# -- revisions and exercises ---------------------------------------------------------------


def test_a_revision_is_checked_against_history_and_the_latest_against_csrc():
    placed = {(part.origin, place) for part, place in sync.placements(sync.chapter_parts())}
    # cpu_fallback: two versions in the fallback chapter (history), the latest in the deployment chapter.
    assert ("03_fallback.ipynb[cpu_fallback]", ("history/fallback", "cpu_fallback.v1")) in placed
    assert ("03_fallback.ipynb[cpu_fallback]", ("history/fallback", "cpu_fallback.v2")) in placed
    assert ("15b_deployment.ipynb[cpu_fallback]", ("csrc", "cpu_fallback")) in placed
    assert (
        "01_allocator.ipynb[exercise_capped_allocator]",
        ("solutions/allocator", "exercise_capped_allocator"),
    ) in placed


def test_an_edited_earlier_version_is_reported(tmp_path):
    copies = copy_chapters(tmp_path)
    chapter03 = next(p for p in copies if p.stem == "03_fallback")
    # The first cpu_fallback cell is version 1, held in chapters/history/fallback.cpp.
    edit_first_cpp_cell(chapter03, lambda s: s.replace("namespace ember {", "namespace ember {  ", 1))
    problems = sync.problems(notebooks=copies)
    assert len(problems) == 1
    assert problems[0].startswith(
        "03_fallback.ipynb[cpu_fallback] differs from chapters/history/fallback.cpp:"
    )


# -- the package's Python: `%%py NAME` cells --------------------------------------------------


def edit_py_cell(path: Path, name: str, edit) -> None:
    """Edit the first `%%py NAME` cell of a notebook copy."""
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        parsed = pycells.parse_magic(source) if cell["cell_type"] == "code" else None
        if parsed is not None and parsed[0] == name:
            cell["source"] = edit(source)
            path.write_text(json.dumps(notebook))
            return
    raise AssertionError(f"{path} has no %%py {name} cell")


def test_the_chapters_show_the_packages_python():
    # Guard against a vacuous pass: the chapters show the device module's Python, and the
    # check covers it (test_chapters_match_the_extension passes only if every cell matches).
    placed = {(part.origin, place) for part, place in sync.python_placements(pycells.chapter_parts())}
    assert ("01_allocator.ipynb[devices]", ("package", "devices")) in placed
    assert ("01_allocator.ipynb[memory]", ("history/allocator", "memory.v1")) in placed
    assert ("11_device_guard.ipynb[memory]", ("package", "memory")) in placed
    assert ("09_autocast.ipynb[amp]", ("package", "amp")) in placed
    assert sync.python_problems() == []


def test_an_edited_python_cell_is_reported(tmp_path):
    copies = copy_chapters(tmp_path)
    chapter07 = next(p for p in copies if p.stem == "09_autocast")
    edit_py_cell(chapter07, "amp", lambda s: s.replace("torch.bfloat16]", "torch.bfloat16, torch.float32]"))
    problems = sync.python_problems(notebooks=copies)
    assert len(problems) == 1
    assert problems[0].startswith(
        "09_autocast.ipynb[amp] differs from extension/torch_ember/device_module/mixed_precision.py:"
    )
    assert "+    return [torch.float16, torch.bfloat16, torch.float32]" in problems[0]
    assert problems[0] in sync.problems(notebooks=copies)  # what `python -m book.sync --check` reports


def test_an_edited_earlier_python_version_is_reported_against_history(tmp_path):
    copies = copy_chapters(tmp_path)
    chapter01 = next(p for p in copies if p.stem == "01_allocator")
    edit_py_cell(chapter01, "memory", lambda s: s.replace("bytes_in_use", "bytes_used", 1))
    problems = sync.python_problems(notebooks=copies)
    assert len(problems) == 1
    assert problems[0].startswith("01_allocator.ipynb[memory] differs from chapters/history/allocator.py:")


def test_a_python_region_no_chapter_shows_is_reported(tmp_path):
    copies = copy_chapters(tmp_path)
    chapter07 = next(p for p in copies if p.stem == "09_autocast")
    edit_py_cell(chapter07, "amp", lambda s: s.replace("%%py amp", "%%py renamed_amp", 1))
    problems = sync.python_problems(notebooks=copies)
    assert any("09_autocast.ipynb[renamed_amp]: no Python region" in p for p in problems)
    assert any(
        "mixed_precision.py:" in p and "region 'amp' is not shown by any chapter" in p for p in problems
    )


def test_write_restores_an_edited_python_cell(tmp_path):
    copies = copy_chapters(tmp_path)
    chapter09 = next(p for p in copies if p.stem == "11_device_guard")
    edit_py_cell(chapter09, "streams", lambda s: s + "\n# stray edit")
    assert sync.python_problems(notebooks=copies)
    assert chapter09 in sync.write(notebooks=copies)
    assert sync.python_problems(notebooks=copies) == []


def test_python_region_markers(tmp_path):
    source = tmp_path / "ok.py"
    source.write_text("import x\n# ember-book: begin a\ndef f():\n    pass\n\n\n# ember-book: end a\n")
    (region,) = sync.regions_in_file(source)
    assert (region.name, region.line, region.text) == ("a", 2, "def f():\n    pass\n")
    # A C++ marker in a Python file (or the reverse) is no marker.
    source.write_text("// ember-book: begin a\n")
    assert sync.regions_in_file(source) == []


def test_a_python_cell_run_as_shown_prints_nothing_and_an_edited_one_a_note():
    (part, *_) = [p for p in pycells.chapter_parts() if p.chapter == "autocast" and p.name == "amp"]
    assert pycells.edit_note("autocast", "amp", part.source) is None
    note = pycells.edit_note("autocast", "amp", part.source + "# edited\n")
    assert note is not None and "changes nothing" in note


def test_no_function_of_the_package_is_defined_twice():
    # One definition per name: revised versions live in chapters/history, not next to the latest.
    package = sync.EXTENSION / "torch_ember"
    for path in package.rglob("*.py"):
        assert "noqa: F811" not in path.read_text(), path


# -- history without duplication: earlier versions stored as what differs ---------------------

LATEST = "".join(f"line {n}\n" for n in range(1, 21))


def test_a_difference_stores_only_the_earlier_versions_own_lines():
    earlier = LATEST.replace("line 3\n", "line three\n").replace("line 17\n", "") + "line 21\n"
    stored = regions.difference(LATEST, earlier)
    assert regions.is_difference(stored)
    assert "line three" in stored and "line 4" not in stored and "line 17" not in stored
    assert regions.apply_difference(LATEST, stored) == earlier
    assert regions.difference(LATEST, LATEST) == ""  # identical: nothing to store


def test_a_difference_that_no_longer_applies_is_an_error():
    stored = regions.difference(LATEST, LATEST.replace("line 3\n", "line three\n"))
    with pytest.raises(ValueError, match="no longer applies"):
        regions.apply_difference(LATEST.replace("line 3\n", "line 3, fixed\n"), stored, "x.v1")
    # An edit elsewhere in the next version leaves the difference applicable.
    moved = LATEST.replace("line 10\n", "line 10, fixed\n")
    assert regions.apply_difference(moved, stored) == moved.replace("line 3\n", "line three\n")


def test_a_unified_diff_with_removed_lines_is_accepted_and_checked():
    stored = "@@ -3,1 +3,1 @@\n-line 3\n+line three\n"
    assert regions.apply_difference(LATEST, stored) == LATEST.replace("line 3\n", "line three\n")
    with pytest.raises(ValueError, match="no longer applies"):
        regions.apply_difference(LATEST, "@@ -3,1 +3,1 @@\n-line 4\n+line three\n")


def _extension_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the package's sources and of the book material (chapters/history, solutions)."""
    extension, material = tmp_path / "extension", tmp_path / "chapters"
    shutil.copytree(sync.EXTENSION / "csrc", extension / "csrc")
    shutil.copytree(sync.EXTENSION / "torch_ember", extension / "torch_ember")
    for folder in sync.BOOK_ONLY:
        shutil.copytree(sync.CHAPTERS / folder, material / folder)
    return extension, material


def test_history_is_stored_without_duplication():
    # Every earlier version in chapters/history is a difference from the next version, or in full
    # where that is shorter; the full texts are derived (and the drift check compares them).
    for folder, found in (("csrc", sync.all_regions()), ("package", sync.python_regions())):
        history = {place: r for place, r in found.items() if place[0].startswith("history/")}
        assert history, folder
        differences = [r for r in history.values() if r.is_difference]
        assert len(differences) * 2 >= len(history), folder
        for region in differences:
            assert not regions.is_difference(region.text)
            assert len(region.stored.splitlines()) < len(region.text.splitlines())


def test_compacting_history_keeps_every_version(tmp_path):
    extension, material = _extension_copy(tmp_path)
    before = {**sync.all_regions(extension, material), **sync.python_regions(extension, material)}
    sync.compact_history(extension, material)
    after = {**sync.all_regions(extension, material), **sync.python_regions(extension, material)}
    assert {p: r.text for p, r in after.items()} == {p: r.text for p, r in before.items()}
    assert sync.compact_history(extension, material) == []  # already compact
    assert len(sync.problems(extension=extension, material=material)) == len(sync.problems())


def test_a_version_identical_to_the_next_one_is_derived(tmp_path):
    extension, material = _extension_copy(tmp_path)
    history = material / "history" / "fallback.cpp"
    (region,) = [r for r in sync.regions_in_file(history) if r.name == "cpu_fallback.v1"]
    others = [r.name for r in sync.regions_in_file(history) if r.name != region.name]
    following = sync.all_regions(extension, material)[("history/fallback", "cpu_fallback.v2")].text
    # Store version 1 as a copy of version 2 in full, compact: it is dropped, and derived.
    text = history.read_text()
    begin, end = f"// ember-book: begin {region.name}\n", f"// ember-book: end {region.name}\n"
    start, stop = text.index(begin), text.index(end) + len(end)
    history.write_text(text[:start] + begin + following + end + text[stop:])
    assert sync.compact_history(extension, material) == [history]
    assert [r.name for r in sync.regions_in_file(history)] == others
    found = sync.all_regions(extension, material)
    derived = regions.history_text(found, ("history/fallback", "cpu_fallback.v1"), "csrc")
    assert derived is not None and derived.text == following
    # The chapter's first cpu_fallback cell is not its second version, so the check says so.
    problems = sync.cpp_problems(extension=extension, material=material)
    assert any(
        p.startswith("03_fallback.ipynb[cpu_fallback] differs from")
        and "history/fallback" in p.splitlines()[0]
        for p in problems
    )
