"""book.build(): caching, error mapping, unloading, `#line` provenance."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
import uuid

import pytest
import torch

from book.builds import builder
from book.builds import driver as ember_driver
from book.builds.compile_errors import BackendInUseError, CppBuildError
from book.parts.cells import CppPart

FALLBACK = CppPart(
    "allocator",
    "test_fallback",
    "TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {\n  m.fallback(torch::CppFunction::makeFallthrough());\n}\n",
)
TYPO = CppPart(
    "allocator",
    "typo",
    "namespace ember {\nint answer() {\n  return fourty_two;\n}\n} // namespace ember\n",
)


def privateuse1_entry(op: str) -> str | None:
    for line in torch._C._dispatch_dump_table(op).splitlines():
        if line.startswith("PrivateUse1:"):
            return line
    return None


def unique_part() -> CppPart:
    """A part no earlier run has built, so its build cannot come from the cache."""
    tag = uuid.uuid4().hex[:8]
    return CppPart(
        "allocator", f"unique_{tag}", f"namespace ember {{ int unique_{tag}() {{ return 1; }} }}\n"
    )


def test_registrations_name_the_notebook_cell(chapter01_parts):
    builder.build(parts=chapter01_parts + [FALLBACK], chapter="allocator")
    entry = privateuse1_entry("aten::_local_scalar_dense")
    assert (
        entry
        == "PrivateUse1: fallthrough registered at 01_allocator.ipynb[test_fallback]:1 [backend fallback]"
    )


def test_rebuild_retires_the_previous_build(chapter01_parts):
    builder.build(parts=chapter01_parts + [FALLBACK], chapter="allocator")
    assert privateuse1_entry("aten::_local_scalar_dense") is not None
    builder.build(parts=chapter01_parts, chapter="allocator")
    # The fallback's registration went away with the build that held it.
    assert privateuse1_entry("aten::_local_scalar_dense") is None


def test_a_retired_build_can_be_loaded_again(chapter01_parts):
    with_fallback = chapter01_parts + [FALLBACK]
    builder.build(parts=with_fallback, chapter="allocator")
    builder.build(parts=chapter01_parts, chapter="allocator")
    assert privateuse1_entry("aten::_local_scalar_dense") is None
    # Same sources as the retired build: its registrations must come back.
    builder.build(parts=with_fallback, chapter="allocator")
    assert privateuse1_entry("aten::_local_scalar_dense") is not None


def test_unload_gives_privateuse1_back_to_pytorch(chapter01_parts):
    builder.build(parts=chapter01_parts + [FALLBACK], chapter="allocator")
    builder.unload()
    assert builder.loaded() is None
    assert privateuse1_entry("aten::_local_scalar_dense") is None


def test_same_sources_in_the_same_process_do_not_reload(chapter01_parts):
    first = builder.build(parts=chapter01_parts, chapter="allocator")
    again = builder.build(parts=chapter01_parts, chapter="allocator")
    assert again is first


def test_unchanged_sources_load_from_the_cache_in_a_new_process(chapter01_parts):
    parts = chapter01_parts + [unique_part()]
    built = builder.build(parts=parts, chapter="allocator")
    assert built.compiled
    object_file = built.directory / "main.o"
    mtime = object_file.stat().st_mtime_ns
    child = textwrap.dedent(
        f"""
        from book.builds import builder
        from book.parts.cells import CppPart
        parts = [CppPart(*p) for p in {[(p.chapter, p.name, p.source) for p in parts]!r}]
        print(builder.build(parts=parts, chapter="allocator").compiled)
        """
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
    assert object_file.stat().st_mtime_ns == mtime  # nothing was recompiled


def test_compile_error_names_cell_and_line_and_keeps_previous_build(chapter01_parts):
    good = builder.build(parts=chapter01_parts + [FALLBACK], chapter="allocator")
    with pytest.raises(CppBuildError) as failure:
        builder.build(parts=chapter01_parts + [TYPO], chapter="allocator")
    message = str(failure.value)
    assert "C++ build of chapter 01 failed: 1 error" in message
    # The wording is the compiler's (GCC: "‘fourty_two’ was not declared in this scope", Clang: "use of
    # undeclared identifier 'fourty_two'"); the location is the cell's.
    assert "01_allocator.ipynb[typo]:3:10: error: " in message and "fourty_two" in message.splitlines()[2]
    assert "    3 |   return fourty_two;" in message
    assert "ninja" not in message and "-isystem" not in message  # no build log noise
    assert len(message.splitlines()) < 12
    # The reader's last working backend is still there...
    assert builder.loaded() is good
    assert privateuse1_entry("aten::_local_scalar_dense") is not None
    # ...and the next correct build works.
    fixed = CppPart("allocator", "typo", TYPO.source.replace("fourty_two", "42"))
    assert builder.build(parts=chapter01_parts + [fixed], chapter="allocator").name != good.name


def test_ipython_shows_only_the_compiler_lines():
    error = CppBuildError("C++ build of chapter 01 failed: 1 error\n\nx.ipynb[a]:1:1: error: boom")
    assert error._render_traceback_() == [f"CppBuildError: {error.args[0]}"]


def test_an_undefined_symbol_is_reported_by_its_cpp_name(chapter01_parts):
    missing = CppPart(
        "allocator",
        "undefined",
        "namespace ember {\nint declared_only();\nint used = declared_only();\n} // namespace ember\n",
    )
    with pytest.raises(
        CppBuildError, match=r"uses `ember::declared_only\(\)`, which is declared but never defined"
    ):
        builder.build(parts=chapter01_parts + [missing], chapter="allocator")


def test_live_device_memory_blocks_unloading(chapter01_parts):
    builder.build(parts=chapter01_parts, chapter="allocator")
    driver = ember_driver.driver().lib
    pointer = ctypes.c_void_p()
    assert driver.emMalloc(ctypes.byref(pointer), ctypes.c_size_t(96)) == 0
    try:
        with pytest.raises(BackendInUseError, match=r"1 device allocation\(s\) \(96 bytes\)"):
            builder.build(parts=chapter01_parts + [FALLBACK], chapter="allocator")
    finally:
        assert driver.emFree(pointer) == 0
    assert builder.live_device_allocations() == (0, 0)
    builder.build(parts=chapter01_parts + [FALLBACK], chapter="allocator")
