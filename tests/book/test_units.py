"""book.builds.units: a build split into translation units as the package splits its files, objects reused."""

from __future__ import annotations

import ctypes
import sys
import uuid

import pytest
import torch

from book.builds import builder, toolchain, units
from book.builds import driver as ember_driver
from book.builds.compile_errors import CppBuildError
from book.parts.cells import CppPart
from book.run.chapter import Chapter

HEADER = CppPart("allocator", "test_header", "#define EMBER_TEST_ANSWER 42\n")


def source_part(chapter: str, name: str, body: str) -> CppPart:
    return CppPart(chapter, name, f"namespace ember {{\n{body}\n}} // namespace ember\n")


def test_a_header_part_is_seen_by_every_later_unit_and_a_source_part_by_its_own_only():
    first = source_part("allocator", "first", "int first() { return EMBER_TEST_ANSWER; }")
    other_file = source_part("allocator", "other", "int other() { return 1; }")
    second = source_part("minimal_ops", "second", "int second() { return EMBER_TEST_ANSWER + 1; }")
    files = {
        "test_header": "runtime/Answer.h",
        "first": "runtime/A.cpp",
        "other": "runtime/B.cpp",
    }
    split = units.split([HEADER, first, other_file, second], files=files)
    assert [(unit.chapter, unit.group) for unit in split] == [
        ("allocator", "runtime/A.cpp"),
        ("allocator", "runtime/B.cpp"),
        (
            "minimal_ops",
            "cells",
        ),  # a part the package does not have, first of its chapter
    ]
    assert [[part.name for part in unit.parts] for unit in split] == [
        ["test_header", "first"],
        ["test_header", "other"],
        ["test_header", "second"],
    ]


def test_a_unit_sees_the_header_parts_its_file_includes_and_an_exercise_sees_them_all():
    answer = CppPart("allocator", "answer", "#define EMBER_TEST_ANSWER 42\n")
    other = CppPart("allocator", "other_header", "#define EMBER_TEST_OTHER 1\n")
    uses = source_part("allocator", "uses", "int uses() { return EMBER_TEST_ANSWER; }")
    exercise = source_part("minimal_ops", "exercise_both", "int both() { return EMBER_TEST_OTHER; }")
    files = {"answer": "runtime/Answer.h", "other_header": "runtime/Other.h", "uses": "runtime/Uses.cpp"}
    includes = {"runtime/Uses.cpp": frozenset({"runtime/Answer.h"})}
    split = units.split([answer, other, uses, exercise], files=files, includes=includes)
    assert [[part.name for part in unit.parts] for unit in split] == [
        ["answer", "uses"],
        ["answer", "other_header", "exercise_both"],
    ]


def test_the_package_files_includes_are_followed_through_headers():
    includes = units.file_includes()
    # EmberReduceOps.cpp includes EmberLoops.h, which includes EmberLaunch.h, which includes EmberCheck.h.
    assert {"aten/EmberLoops.h", "aten/EmberLaunch.h", "runtime/EmberCheck.h"} <= includes[
        "aten/EmberReduceOps.cpp"
    ]
    assert "aten/EmberStructured.h" not in includes["runtime/EmberGuard.cpp"]


def test_a_revised_header_recompiles_only_the_files_that_include_it():
    # A later chapter's version of a header part takes the first version's place: the units of files
    # that include the header change, the others keep their text (and objects). (No chapter revises a
    # header part now: chapter 18 rewords checks that chapters 04 and 14 wrote out of line, in .cpp
    # parts, so that it recompiles those files only.)
    first = CppPart("allocator", "test_words", "#define EMBER_TEST_WORDS 1\n")
    revised = CppPart("minimal_ops", "test_words", "#define EMBER_TEST_WORDS 2\n")
    uses = source_part("allocator", "uses", "int uses() { return EMBER_TEST_WORDS; }")
    apart = source_part("allocator", "apart", "int apart() { return 0; }")
    files = {"test_words": "aten/Words.h", "uses": "aten/Uses.cpp", "apart": "aten/Apart.cpp"}
    includes = {"aten/Uses.cpp": frozenset({"aten/Words.h"}), "aten/Apart.cpp": frozenset()}

    def by_file(parts: list[CppPart]) -> dict[str, units.Unit]:
        return {unit.group: unit for unit in units.split(parts, files=files, includes=includes)}

    before, after = by_file([first, uses, apart]), by_file([revised, uses, apart])
    assert after["aten/Apart.cpp"] == before["aten/Apart.cpp"]
    assert after["aten/Uses.cpp"].text != before["aten/Uses.cpp"].text
    assert "EMBER_TEST_WORDS 2" in after["aten/Uses.cpp"].text


def test_a_unit_opens_with_its_header_parts_so_a_revised_part_sees_its_chapters_headers():
    # A revision keeps its part's first place in the build: chapter 14's version of a
    # chapter 04 part comes before chapter 14's header parts in book order, yet calls
    # what they declare (as the package's file includes that header first).
    declares = CppPart("capstone", "test_decl", "namespace ember { int declared(); }\n")
    revised = source_part("capstone", "revised", "int revised() { return declared(); }")
    new = source_part("capstone", "new", "int declared() { return 1; }")
    files = {"test_decl": "aten/Decl.h", "revised": "aten/A.cpp", "new": "aten/A.cpp"}
    (unit,) = units.split([revised, declares, new], files=files)
    assert [part.name for part in unit.parts] == ["test_decl", "revised", "new"]
    assert unit.text.index("int declared();") < unit.text.index("int revised()")


def test_no_part_of_the_package_declares_the_host_kernel_by_hand():
    # One declaration, in chapter 14's header part host_kernels (aten/EmberHostKernels.h).
    from book.paths import CSRC

    declaration = "void hostKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);"
    holders = [p.relative_to(CSRC).as_posix() for p in CSRC.rglob("*.*") if declaration in p.read_text()]
    assert holders == ["aten/EmberHostKernels.h"]


def test_a_chapters_units_are_the_same_text_in_every_later_chapters_build():
    # What makes the objects reusable: chapter 02's units do not depend on chapter 03.
    def of_chapter_02(split: list[units.Unit]) -> list[units.Unit]:
        return [unit for unit in split if unit.chapter == "minimal_ops"]

    through_02 = units.split(Chapter.of("minimal_ops").parts_through())
    through_03 = units.split(Chapter.of("fallback").parts_through())
    assert of_chapter_02(through_02) and of_chapter_02(through_03) == of_chapter_02(through_02)


def test_every_non_header_part_is_compiled_exactly_once():
    parts = Chapter.of("autograd").parts_through()
    headers = units.header_part_names()
    split = units.split(parts)
    for part in parts:
        holders = [unit for unit in split if part in unit.parts]
        if part.name in headers:
            assert holders, part.origin
        else:
            assert len(holders) == 1 and holders[0].chapter == part.chapter, part.origin


def test_a_unit_compiled_by_one_build_is_linked_by_the_next(chapter01_parts):
    tag = uuid.uuid4().hex[:8]
    first = source_part("allocator", f"kept_{tag}", f"int kept_{tag}() {{ return 7; }}")
    build = builder.build(parts=[*chapter01_parts, first], chapter="allocator")
    unit = next(unit for unit in build.linked if first in unit.parts)
    compiled_at = unit.object.stat().st_mtime_ns
    later = source_part("minimal_ops", f"later_{tag}", f"int later_{tag}() {{ return 8; }}")
    build = builder.build(parts=[*chapter01_parts, first, later], chapter="minimal_ops")
    assert unit in build.linked and unit.object.stat().st_mtime_ns == compiled_at


def test_an_error_in_another_chapters_unit_names_its_cell(chapter01_parts):
    tag = uuid.uuid4().hex[:8]
    broken = source_part("allocator", f"broken_{tag}", "int broken() { return fourty_two; }")
    fine = source_part("minimal_ops", f"fine_{tag}", "int fine() { return 1; }")
    with pytest.raises(CppBuildError) as raised:
        builder.build(parts=[*chapter01_parts, broken, fine], chapter="minimal_ops")
    message = str(raised.value)
    assert "C++ build of chapter 02 failed" in message
    assert f"01_allocator.ipynb[broken_{tag}]:2" in message and "fourty_two" in message


def test_a_rebuild_refreshes_python_handles_to_the_operators_it_redefines(
    chapter01_parts,
):
    def library(answer: int) -> CppPart:
        body = f"""\
TORCH_LIBRARY(booktest, m) {{
  m.def("answer(Tensor x) -> Tensor");
}}
TORCH_LIBRARY_IMPL(booktest, CPU, m) {{
  m.impl("answer", [](const at::Tensor& x) {{ return x.mul({answer}); }});
}}
"""
        return CppPart("allocator", "booktest_library", body)

    builder.build(parts=[*chapter01_parts, library(2)], chapter="allocator")
    assert torch.ops.booktest.answer(torch.ones(2)).tolist() == [2.0, 2.0]
    builder.build(parts=[*chapter01_parts, library(3)], chapter="allocator")
    assert torch.ops.booktest.answer(torch.ones(2)).tolist() == [3.0, 3.0]


def test_an_uncaught_errors_traceback_does_not_keep_the_backend_busy(chapter01_parts):
    builder.build(parts=chapter01_parts, chapter="allocator")

    driver = ember_driver.driver().lib

    class DeviceBuffer:  # owns device memory like a tensor: freed when collected
        def __init__(self) -> None:
            self.pointer = ctypes.c_void_p()
            assert driver.emMalloc(ctypes.byref(self.pointer), ctypes.c_size_t(64)) == 0

        def __del__(self) -> None:
            driver.emFree(self.pointer)

    def fails_holding_device_memory() -> None:
        held = DeviceBuffer()  # noqa: F841 (kept alive by the traceback)
        raise RuntimeError("a failed cell")

    try:
        fails_holding_device_memory()
    except RuntimeError as error:  # what the interpreter keeps after an uncaught error
        sys.last_type, sys.last_value, sys.last_traceback = (
            type(error),
            error,
            error.__traceback__,
        )
    assert builder.live_device_allocations()[0] == 1
    tag = uuid.uuid4().hex[:8]
    builder.build(
        parts=[
            *chapter01_parts,
            source_part("allocator", tag, "int unused() { return 0; }"),
        ]
    )
    assert builder.live_device_allocations()[0] == 0


def test_an_exercise_joins_the_unit_of_the_part_before_it():
    allocator = source_part("allocator", "allocator", "int allocator() { return 1; }")
    exercise = source_part("allocator", "exercise_capped", "int capped() { return allocator(); }")
    split = units.split([allocator, exercise], files={"allocator": "memory/EmberAllocator.cpp"})
    assert [(unit.group, [part.name for part in unit.parts]) for unit in split] == [
        ("memory/EmberAllocator.cpp", ["allocator", "exercise_capped"])
    ]


def test_with_gcc_a_chapters_files_are_dealt_into_at_most_two_units_in_book_order():
    parts = [source_part("stub_kernels", f"p{i}", f"int p{i}() {{ return {i}; }}") for i in range(5)]
    files = {f"p{i}": f"aten/F{i}.cpp" for i in range(5)}
    split = units.split(parts, files=files, per_file=False)
    assert units.COMPILERS == 2
    assert [(unit.group, [part.name for part in unit.parts]) for unit in split] == [  # by last part
        ("aten/F1.cpp + aten/F3.cpp", ["p1", "p3"]),
        ("aten/F0.cpp + aten/F2.cpp + aten/F4.cpp", ["p0", "p2", "p4"]),
    ]


def test_with_clang_each_file_of_a_chapter_is_a_unit_of_its_own():
    parts = [source_part("stub_kernels", f"p{i}", f"int p{i}() {{ return {i}; }}") for i in range(4)]
    files = {
        "p0": "aten/F0.cpp",
        "p1": "aten/F1.cpp",
        "p2": "aten/F0.cpp",
        "p3": "aten/F2.cpp",
    }
    split = units.split(parts, files=files, per_file=True)
    assert [(unit.group, [part.name for part in unit.parts]) for unit in split] == [
        ("aten/F1.cpp", ["p1"]),
        ("aten/F0.cpp", ["p0", "p2"]),
        ("aten/F2.cpp", ["p3"]),
    ]


def test_a_later_build_cell_of_a_chapter_reuses_the_units_of_the_files_it_did_not_touch():
    # Chapter 14 builds in groups: the second build adds files, the first build's units stay as they were.
    header = CppPart("capstone", "test_host", "namespace ember { int host(); }\n")
    first = source_part("capstone", "first", "int first() { return host(); }")
    second = source_part("capstone", "second", "int second() { return host() + 1; }")
    files = {"test_host": "aten/Host.h", "first": "aten/A.cpp", "second": "aten/B.cpp"}
    before = [source_part("renaming", "earlier", "int earlier() { return 0; }")]
    one = units.split([*before, header, first], files=files, per_file=True)
    two = units.split([*before, header, first, second], files=files, per_file=True)
    assert [unit for unit in two if unit.group != "aten/B.cpp"] == one


def test_a_revision_sees_the_header_parts_its_chapter_shows_after_its_place():
    # A revision keeps the first version's place (chapter 04's), yet its own chapter's header parts,
    # shown later in book order, come first in its unit; a unit of chapter 07 does not see them.
    p04 = source_part("stub_kernels", "kernels", "int kernels() { return 4; }")
    revised = source_part("capstone", "revised", "int revised() { return declared(); }")
    p07 = source_part("custom_ops", "custom", "int custom() { return 7; }")
    declares = CppPart("capstone", "test_decl", "namespace ember { int declared(); }\n")
    files = {
        "kernels": "aten/K.cpp",
        "revised": "aten/R.cpp",
        "custom": "aten/C.cpp",
        "test_decl": "aten/Decl.h",
    }
    split = units.split([p04, revised, p07, declares], files=files, per_file=True)
    seen = {unit.group: [part.name for part in unit.parts] for unit in split}
    assert seen == {
        "aten/K.cpp": ["kernels"],
        "aten/R.cpp": ["test_decl", "revised"],
        "aten/C.cpp": ["custom"],
    }


def test_with_clang_only_units_that_run_device_code_are_optimized():
    files = {
        "launches": "aten/L.cpp",
        "marked": "aten/M.cpp",
        "registers": "aten/R.cpp",
    }
    launches = source_part("stub_kernels", "launches", "void f() { ember::launch(0, [] {}); }")
    marked = source_part("stub_kernels", "marked", '#pragma GCC optimize("O3")\nint g() { return 1; }')
    registers = source_part("stub_kernels", "registers", "int h() { return 2; }")
    split = units.split([launches, marked, registers], files=files, per_file=True)
    assert [unit.runs_on_device for unit in split] == [True, True, False]
    clang = toolchain.is_clang()
    assert [unit.unoptimized for unit in split] == [False, False, clang]
    assert not any(unit.autograd for unit in split)


def test_only_units_naming_torch_autograd_get_the_autograd_prelude():
    plain = source_part("custom_ops", "plain", "int plain() { return 0; }")
    tag = uuid.uuid4().hex[:8]  # a new unit: it is compiled, not fetched from the cache
    uses = source_part(
        "autograd",
        "uses",
        f"using Context_{tag} = torch::autograd::AutogradContext;",
    )
    split = units.split([plain, uses], files={"plain": "aten/A.cpp", "uses": "aten/B.cpp"})
    assert [unit.autograd for unit in split] == [False, True]
    assert split[1].unoptimized
    assert "EMBER_BOOK_AUTOGRAD" in toolchain.prelude_text()
    assert toolchain.prelude_dir(True) != toolchain.prelude_dir(False)
    # The autograd unit compiles against its prelude (torch::autograd is declared there).
    objects = units.compile_objects(split, "test build failed")
    assert all(path.exists() for path in objects)


def test_a_chapters_build_cells_are_the_builds_a_reader_waits_for() -> None:
    # Chapter 14 builds its kernels in four groups; its first build (chapter 13's backend) compiles
    # nothing of its own and does not count. Each build keeps every part of the one before it (a
    # revision replaces a part's text, not its name) and changes some; the last is the chapter's backend.
    chapter = Chapter.of("capstone")
    builds = chapter.build_cells()
    assert len(builds) == 4
    assert builds[-1] == chapter.parts_through()
    for earlier, later in zip(builds, builds[1:], strict=False):
        assert {p.name for p in earlier} <= {p.name for p in later}
        assert earlier != later
    assert [len(b) for b in Chapter.of("matrix_products").build_cells()] == [
        len(Chapter.of("matrix_products").parts_through())
    ]


def test_a_revised_source_part_joins_its_files_unit_up_to_the_revising_chapter():
    # As in the package, where a file is one translation unit: a later chapter's version of a kernel
    # calls the helper beside its first version, and the first chapter's other kernels call it.
    helper = source_part("generator", "helper", "inline int helper() { return 1; }")
    revised = source_part("deployment", "kernel", "int kernel() { return helper(); }")
    user = source_part("generator", "user", "int user() { return kernel(); }")
    other = source_part("generator", "other", "int other() { return 2; }")
    later = source_part("layouts", "later", "int later() { return 3; }")
    files = {name: "aten/R.cpp" for name in ("helper", "kernel", "user", "later")} | {"other": "aten/O.cpp"}
    homes = {"helper": "generator", "kernel": "generator", "user": "generator", "other": "generator"}
    homes["later"] = "layouts"
    split = units.split([helper, revised, user, other, later], files=files, per_file=True, homes=homes)
    assert [(unit.chapter, unit.group, [part.name for part in unit.own]) for unit in split] == [
        ("generator", "aten/R.cpp", ["helper", "kernel", "user"]),
        ("generator", "aten/O.cpp", ["other"]),
        ("layouts", "aten/R.cpp", ["later"]),
    ]
    # Without a revision, a file keeps a unit per chapter (each chapter's objects serve later builds).
    unrevised = source_part("generator", "kernel", "int kernel() { return helper(); }")
    split = units.split([helper, unrevised, user, other, later], files=files, per_file=True, homes=homes)
    assert [unit.chapter for unit in split if unit.group == "aten/R.cpp"] == ["generator", "layouts"]
