"""Chapter 15's kernel entry (extension/torch_ember/compiler/kernel_entry.py), checked as text and
compiled: what it makes of Inductor's kernel source, with no torch build loaded (the chapter's
nbval run checks the compiled path end to end)."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

import pytest

from book.builds.driver import load_package

kernel_entry = load_package("compiler").kernel_entry

SOURCE = (
    '#include <cstdint>\nextern "C"  void  kernel(const float* in_ptr0,\n'
    "                       float* out_ptr0,\n                       const int64_t ks0)\n"
    "{\n    for (int64_t i = 0; i < ks0; ++i) out_ptr0[i] = in_ptr0[i] + 1;\n}\n"
)


def test_parse_args_reads_pointers_and_sizes() -> None:
    args = kernel_entry.parse_args("const float* in_ptr0, float* out_ptr0, const int64_t ks0")
    assert [(a.type, a.name, a.is_pointer) for a in args] == [
        ("const float*", "in_ptr0", True),
        ("float*", "out_ptr0", True),
        ("const int64_t", "ks0", False),
    ]
    with pytest.raises(ValueError, match="cannot read the kernel parameter"):
        kernel_entry.parse_args("float*")


def test_wrap_kernel_keeps_the_body_and_adds_one_entry() -> None:
    wrapped = kernel_entry.wrap_kernel(SOURCE, "cpp_fused_add_0")
    assert wrapped.count('extern "C"') == 1  # the entry, last: what Inductor declares for its wrapper
    assert wrapped.rfind('extern "C"') > wrapped.index("static void cpp_fused_add_0_body(")
    assert "out_ptr0[i] = in_ptr0[i] + 1" in wrapped
    assert '"cpp_fused_add_0", buffers, 2,' in wrapped  # two pointers are buffers, the size is not
    assert "torch_ember_compiled::at(a.in_ptr0, offset)" in wrapped and "a.ks0" in wrapped
    assert max(len(line) for line in wrapped.split("// The entry")[1].splitlines()) <= 80


def test_wrap_kernel_refuses_source_without_a_kernel() -> None:
    with pytest.raises(ValueError, match='no extern "C" kernel'):
        kernel_entry.wrap_kernel("int x;\n", "cpp_fused_0")


LAUNCHER = r"""
#include <cstddef>
#include <cstdint>
// A stand-in for emberLaunchCompiled: runs the body with offset 0, or fails by name.
extern "C" const char* fake_launch(const char* kernel, const void* const* buffers,
                                   std::size_t num_buffers,
                                   void (*body)(void*, std::ptrdiff_t), void* args) {
  if (num_buffers != 2 || buffers[0] == nullptr) return "refused";
  body(args, 0);
  return nullptr;
}
extern "C" std::uintptr_t fake_launch_address() {
  return reinterpret_cast<std::uintptr_t>(&fake_launch);
}
"""


def _compile(tmp_path: Path, text: str) -> ctypes.CDLL:
    source = tmp_path / "entry.cpp"
    source.write_text(text)
    library = tmp_path / "entry.so"
    subprocess.run(
        ["g++", "-std=c++17", "-shared", "-fPIC", "-O1", str(source), "-o", str(library)], check=True
    )
    return ctypes.CDLL(str(library))


def test_the_entry_launches_through_the_published_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapped = kernel_entry.wrap_kernel(SOURCE, "cpp_fused_add_0")
    # The entry's C++ exception would cross into ctypes: catch it in a C shim that reports it.
    shim = r"""
#include <cstring>
#include <stdexcept>
extern "C" int call_kernel(const float* in, float* out, long n, char* message) {
  try { kernel(in, out, n); return 0; }
  catch (const std::exception& error) { std::strncpy(message, error.what(), 255); return 1; }
}
"""
    library = _compile(tmp_path, LAUNCHER + wrapped + shim)
    library.fake_launch_address.restype = ctypes.c_size_t
    data = (ctypes.c_float * 3)(1, 2, 3)
    out = (ctypes.c_float * 3)()
    message = ctypes.create_string_buffer(256)

    monkeypatch.delenv(kernel_entry.LAUNCHER_VARIABLE, raising=False)
    assert library.call_kernel(data, out, 3, message) == 1
    assert b"no launcher for compiled kernels in this process" in message.value

    # Published by another process (a parent's variable, inherited): refused, not called.
    monkeypatch.setenv(kernel_entry.LAUNCHER_VARIABLE, f"{os.getpid() + 1}:{library.fake_launch_address()}")
    assert library.call_kernel(data, out, 3, message) == 1

    monkeypatch.setenv(kernel_entry.LAUNCHER_VARIABLE, f"{os.getpid()}:{library.fake_launch_address()}")
    assert library.call_kernel(data, out, 3, message) == 0
    assert list(out) == [2.0, 3.0, 4.0]
    assert library.call_kernel(None, out, 3, message) == 1  # the launcher's error, as an exception
    assert message.value == b"refused"
