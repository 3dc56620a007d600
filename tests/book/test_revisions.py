"""Revisable parts: a later cell with an earlier part's name replaces it in the build and shows a diff."""

from __future__ import annotations

import pytest

from book.parts.cells import CppPart, Revision, Session, resolve
from book.run.chapter import Chapter


def test_resolve_keeps_the_first_position_and_the_latest_version():
    a1, b, a2 = CppPart("01_x", "a", "v1\n"), CppPart("01_x", "b", "b\n"), CppPart("02_y", "a", "v2\n")
    assert resolve([a1, b, a2]) == [a2, b]


def test_chapter_03_builds_the_revised_fallback_and_later_chapters_only_it():
    chapter = Chapter.of("fallback")
    versions = [p for p in chapter.parts() if p.name == "cpu_fallback"]
    assert len(versions) == 2 and versions[0].source != versions[1].source
    through = chapter.parts_through()
    assert [p.source for p in through if p.name == "cpu_fallback"] == [versions[1].source]
    # Exercises are never part of the chapter's backend.
    assert not any(p.is_exercise for p in through)
    assert set(chapter.exercises()) == {"exercise_log", "exercise_abs", "exercise_add_only"}


def test_staging_a_revision_returns_the_diff_against_the_version_it_replaces():
    chapter = Chapter.of("fallback")
    first, second = [p for p in chapter.parts() if p.name == "cpu_fallback"]
    session = Session()
    session.start(chapter.slug)
    assert session.stage("cpu_fallback", first.source) is None  # the first version revises nothing
    revision = session.stage("cpu_fallback", second.source)
    assert isinstance(revision, Revision)
    assert revision.previous == first
    diff = revision.diff()
    assert revision.version == 2
    assert diff.startswith(
        "--- 03_fallback.ipynb[cpu_fallback] version 1\n+++ 03_fallback.ipynb[cpu_fallback] version 2"
    )
    assert "+std::vector<FallbackCheck>& fallbackChecks() {" in diff
    assert "```diff" in revision._repr_markdown_()
    # Running the second cell again shows the same diff (what the book shows does not depend on cell order).
    assert session.stage("cpu_fallback", second.source).diff() == diff
    assert [p.source for p in session.parts() if p.name == "cpu_fallback"] == [second.source]


def test_exercises_are_built_only_when_named():
    session = Session()
    session.start(Chapter.of("fallback").slug)
    for part in Chapter.of("fallback").parts():
        session.stage(part.name, part.source)
    assert not any(p.is_exercise for p in session.parts())
    assert session.parts(["exercise_abs"])[-1].name == "exercise_abs"
    without_own = session.parts(["exercise_add_only"], own=False)
    assert "cpu_fallback" not in {p.name for p in without_own}
    with pytest.raises(LookupError, match="no exercise part 'exercise_nope' is staged"):
        session.parts(["exercise_nope"])


def test_chapter_01_carries_the_device_module_forward():
    (origin, source), *_ = Chapter.of("allocator").carried_cells()
    assert origin.startswith("01_allocator.ipynb[cell ")
    assert "torch._register_device_module" in source


def test_a_cell_the_reader_edited_is_compared_with_what_the_build_has():
    chapter = Chapter.of("fallback")
    first, _ = [p for p in chapter.parts() if p.name == "cpu_fallback"]
    session = Session()
    session.start(chapter.slug)
    session.stage("cpu_fallback", first.source)
    revision = session.stage("cpu_fallback", first.source.replace("at::native::cpu_fallback", "my_fallback"))
    assert revision is not None and revision.version is None
    assert "(edited)" in revision.diff().splitlines()[1]
    assert "+  my_fallback(op, stack);" in revision.diff()


def test_a_long_diff_is_collapsed_under_its_summary():
    short = Revision(CppPart("01_x", "a", "old\n"), CppPart("02_y", "a", "new\n"), 2)
    assert "<details>" not in short._repr_markdown_()
    before = "".join(f"line {i}\n" for i in range(40))
    after = "".join(f"line {i}\n" for i in range(40, 80))
    long = Revision(CppPart("01_x", "a", before), CppPart("02_y", "a", after), 2)
    shown = long._repr_markdown_()
    assert "<summary>40 lines added, 40 removed (83 lines of diff)</summary>" in shown
    assert shown.index("<details>") < shown.index("```diff") < shown.index("</details>")


def test_a_revision_summarizes_its_diff_in_one_line():
    before = CppPart("11_x", "part", "a\nb\nc\nd\n")
    after = CppPart("16_y", "part", "a\nB\nc\nd\ne\nf\n")
    summary = Revision(before, after, 2).summary()
    assert summary == "part: 3 lines added and 1 removed against version 1, in 1 place"
    assert "\n" not in summary
