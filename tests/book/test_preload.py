"""A build whose library would abort the process while loading never enters it (book.builds.preload).

Two edits of chapter 02 that compile and then kill whatever loads them: a kernel
whose C++ signature differs from the one PyTorch's own kernels fix, and a
registration the dispatcher refuses (a second backend fallback for one key).
Each is tried as the first build of a fresh process and as a rebuild over a
working backend: the process lives, the error names the cell and what to
change, and the backend the reader had keeps working.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from book.builds import builder, load_errors, preload, toolchain
from book.builds.compile_errors import CppBuildError
from book.parts.cells import CppPart
from book.run.chapter import Chapter

CHAPTER = "minimal_ops"
NOTEBOOK = Chapter.of(CHAPTER).notebook  # locations name the notebook file
EMBER = "privateuseone"


@dataclass(frozen=True)
class BadEdit:
    """A reader's edit of one chapter-02 cell: `old` becomes `new` in part `part`."""

    part: str
    old: str
    new: str
    anchor: str  # the registration block the error must point at: {line} in `expected`
    expected: tuple[str, ...]  # lines the error must contain


SIGNATURE = BadEdit(
    "copy_from_and_resize",
    "const at::Tensor& dst",
    "at::Tensor dst",
    "TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {",
    (
        f"{NOTEBOOK}.ipynb[copy_from_and_resize]:{{line}}: the PrivateUse1 kernel for aten::_copy_from_and_resize "
        "must have the C++ signature `at::Tensor (const at::Tensor&, const at::Tensor&)` the dispatcher "
        "expects (PyTorch's own Tracer kernel fixes it); yours is `at::Tensor (const at::Tensor&, at::Tensor)`.",
        "Argument 2 (dst) must be `const at::Tensor&`, not `at::Tensor`.",
    ),
)
DUPLICATE = BadEdit(
    "local_scalar_dense",
    "} // namespace ember\n",
    "} // namespace ember\n\n"
    "TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {\n"
    "  m.fallback(torch::CppFunction::makeFallthrough());\n"
    "  m.fallback(torch::CppFunction::makeFallthrough());\n"
    "}\n",
    "TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {",
    (
        f"{NOTEBOOK}.ipynb[local_scalar_dense]:{{line}}: a second backend fallback for PrivateUse1 (the first "
        f"is registered at {NOTEBOOK}.ipynb[local_scalar_dense]:{{line}}). A dispatch key has one fallback per "
        "process: remove one m.fallback(...).",
    ),
)
EDITS = {"signature": SIGNATURE, "duplicate_fallback": DUPLICATE}
HEAD = (
    "C++ build of chapter 02 failed: loading it would end the process, so it was not loaded "
    "(checked in a separate process)."
)


def edited(parts: list[CppPart], edit: BadEdit) -> list[CppPart]:
    (target,) = [p for p in parts if p.name == edit.part]
    assert target.source.count(edit.old) == 1, f"the cell {edit.part} changed: update the test"
    changed = CppPart(target.chapter, target.name, target.source.replace(edit.old, edit.new))
    return [changed if p is target else p for p in parts]


def assert_clear(message: str, edit: BadEdit, parts: list[CppPart]) -> None:
    (cell,) = [p.source for p in edited(parts, edit) if p.name == edit.part]
    line = cell.splitlines().index(edit.anchor) + 1
    lines = message.splitlines()
    assert lines[0] == HEAD
    for expected in edit.expected:
        assert expected.format(line=line) in lines, message
    assert len(lines) <= 4
    assert "frame #" not in message and "/__w/" not in message  # no backtrace, no PyTorch build paths


@pytest.fixture(scope="module")
def good_parts() -> list[CppPart]:
    """Chapter 02's backend as its last book.build() compiles it, from the notebooks."""
    return Chapter.of("minimal_ops").parts_through()


@pytest.fixture
def checked_libraries(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The libraries book.builds.preload was asked about, in order."""
    seen: list[Path] = []
    original = preload.check

    def spy(library: Path, chapter: str, extra: object = ()) -> None:
        seen.append(library)
        original(library, chapter, extra)  # type: ignore[arg-type]

    monkeypatch.setattr(preload, "check", spy)
    return seen


def mapped_libraries() -> str:
    return Path("/proc/self/maps").read_text()


def assert_works_on_the_device() -> None:
    empty = torch.empty(2, device=EMBER)
    assert empty.device.type == EMBER and empty.shape == (2,)
    values = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert torch.equal(values.to(EMBER).cpu(), values)
    del empty


# -- A rebuild over a working backend, in this process -----------------------------------------


@pytest.fixture
def good_backend(good_parts: list[CppPart]) -> Iterator[builder.Build]:
    Chapter.of("minimal_ops").replay_through({})  # the Python state chapter 02 runs in (the device module)
    good = builder.build(parts=good_parts, chapter=CHAPTER)
    assert_works_on_the_device()
    yield good
    assert builder.live_device_allocations() == (0, 0)


@pytest.mark.parametrize("case", EDITS)
def test_a_rebuild_that_would_abort_leaves_the_previous_backend_working(
    case: str, good_parts: list[CppPart], good_backend: builder.Build, checked_libraries: list[Path]
) -> None:
    edit = EDITS[case]
    with pytest.raises(CppBuildError) as failure:
        builder.build(parts=edited(good_parts, edit), chapter=CHAPTER)
    assert_clear(str(failure.value), edit, good_parts)
    (bad_library,) = checked_libraries
    assert bad_library != good_backend.library
    assert str(bad_library) not in mapped_libraries()  # it never entered this process
    assert builder.loaded() is good_backend
    assert_works_on_the_device()
    # The reader fixes the cell: the next build is the good one again.
    assert builder.build(parts=good_parts, chapter=CHAPTER) is good_backend


def test_the_verdict_is_cached_next_to_the_build(
    good_parts: list[CppPart],
    good_backend: builder.Build,
    checked_libraries: list[Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = [toolchain.driver_library()]
    # A good build's verdict: loading it again (a cache hit in a new kernel) starts no child.
    assert preload.cached_verdict(good_backend.library) == ""
    bad = edited(good_parts, SIGNATURE)
    with pytest.raises(CppBuildError) as first:
        builder.build(parts=bad, chapter=CHAPTER)
    library = checked_libraries[-1]
    assert preload.verdict_path(library) == library.parent / preload.VERDICT_FILE
    assert preload.cached_verdict(library) == str(first.value)

    def no_child(*args: object, **kwargs: object) -> preload.ChildResult:
        raise AssertionError("the verdict was cached: no child process should start")

    monkeypatch.setattr(preload, "run_child", no_child)
    with pytest.raises(CppBuildError) as again:
        builder.build(parts=bad, chapter=CHAPTER)  # re-running the failing cell: same error, no child
    assert str(again.value) == str(first.value)
    preload.check(good_backend.library, CHAPTER, driver)  # passes without a child
    monkeypatch.undo()
    # Without its verdict the library is checked again, for real.
    preload.verdict_path(library).unlink()
    with pytest.raises(CppBuildError) as rechecked:
        preload.check(library, CHAPTER, driver)
    assert str(rechecked.value) == str(first.value)
    assert preload.cached_verdict(library) == str(first.value)
    assert builder.loaded() is good_backend


def test_importing_torch_in_full_gives_the_same_verdict(
    good_parts: list[CppPart], good_backend: builder.Build, checked_libraries: list[Path]
) -> None:
    """The check loads torch's libraries without the Python half of `import torch`: no difference."""
    with pytest.raises(CppBuildError):
        builder.build(parts=edited(good_parts, SIGNATURE), chapter=CHAPTER)
    driver = [toolchain.driver_library()]
    for library, ok in ((checked_libraries[-1], False), (good_backend.library, True)):
        native = preload.run_child(library, driver)
        full = preload.run_child(library, driver, import_torch=True)
        assert native.ok is ok and full.ok is ok
        if not ok:
            assert load_errors.explain(native, CHAPTER) == load_errors.explain(full, CHAPTER)


# -- The first build of a fresh process ------------------------------------------------------------

FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    import torch
    from book.builds import builder
    from book.parts.cells import CppPart
    from book.run.chapter import Chapter
    from book.builds.compile_errors import CppBuildError

    Chapter.of("minimal_ops").replay_through({})  # what the chapter's first cell, book.start_chapter(2), replays
    bad, good = ([CppPart(*p) for p in json.loads(a)] for a in sys.argv[1:3])
    try:
        builder.build(parts=bad, chapter="minimal_ops")
        message = None
    except CppBuildError as error:
        message = str(error)
    nothing_loaded = builder.loaded() is None
    builder.build(parts=good, chapter="minimal_ops")
    values = torch.arange(6, dtype=torch.float32)
    round_trip = torch.equal(values.to("privateuseone").cpu(), values)
    print(json.dumps({"message": message, "nothing_loaded": nothing_loaded, "round_trip": round_trip}))
    """
)


@pytest.mark.parametrize("case", EDITS)
def test_a_first_build_that_would_abort_leaves_a_fresh_process_alive(
    case: str, good_parts: list[CppPart]
) -> None:
    edit = EDITS[case]
    as_json = [
        json.dumps([(p.chapter, p.name, p.source) for p in parts])
        for parts in (edited(good_parts, edit), good_parts)
    ]
    child = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, *as_json],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    outcome = json.loads(child.stdout.strip().splitlines()[-1])
    assert outcome["message"] is not None, "the bad build was loaded"
    assert_clear(outcome["message"], edit, good_parts)
    assert outcome["nothing_loaded"]
    assert outcome["round_trip"]


# -- Reading the child's report ----------------------------------------------------------------------


def test_cpp_signatures_are_spelled_the_way_kernels_write_them() -> None:
    assert (
        load_errors.cpp_signature("at::Tensor& (at::Tensor const&, c10::ArrayRef<long>, long, unsigned long)")
        == "at::Tensor& (const at::Tensor&, c10::ArrayRef<int64_t>, int64_t, unsigned long)"
    )
    assert load_errors.schema_argument_names(
        "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"
    ) == ["self", "dim", "keepdim", "dtype"]


def result(stderr: str, stdout: str = "loading\n", returncode: int = -6) -> preload.ChildResult:
    return preload.ChildResult(returncode, stdout, stderr, 0.3)


def test_an_exception_in_a_global_constructor_is_reported_with_its_message() -> None:
    message = load_errors.explain(
        result(
            "terminate called after throwing an instance of 'std::runtime_error'\n  what():  boom in a global\n"
        ),
        CHAPTER,
    )
    assert message.splitlines() == [
        HEAD,
        "A static initializer in one of the cells (a TORCH_LIBRARY block or a global object's constructor) "
        "threw std::runtime_error while the library loaded:",
        "boom in a global",
    ]


def test_a_crash_while_loading_and_an_undefined_symbol_are_reported() -> None:
    crashed = load_errors.explain(result("", returncode=-11), CHAPTER)
    assert crashed.splitlines()[:2] == [
        HEAD,
        "While loading, a test process was killed by SIGSEGV, in a static initializer: a TORCH_LIBRARY or "
        "TORCH_LIBRARY_IMPL block, or the constructor of a global object, in one of the cells.",
    ]
    undefined = load_errors.explain(
        result(
            "",
            stdout="loading\ndlopen failed: /x/ember_02.so: undefined symbol: _ZN5ember3fooEv\n",
            returncode=3,
        ),
        CHAPTER,
    )
    assert undefined == (
        "C++ build of chapter 02 failed: the library uses `ember::foo()`, which is declared but never "
        "defined in any cell (or in PyTorch)."
    )
    destructor = load_errors.explain(result("", stdout="loading\nloaded\n", returncode=-11), CHAPTER)
    assert "static destructors (run when a rebuild retires it) crash" in destructor
