"""The C++ that turns a kernel Inductor generated into an ember launch.

Inductor's C++ code generator (`CppScheduling`) writes each fused kernel as one
function, `extern "C" void kernel(const float* in_ptr0, float* out_ptr0, ...)`, that
reads and writes through the pointers it is given. On ember those pointers are device
addresses, which fault on the host. `wrap_kernel` renames that function to the kernel's
body and adds an entry with the same signature: it packs the arguments, and runs the
body as one ember launch (`emberLaunchCompiled` in the backend, over `ember::launch`),
which hands the body every pointer moved by the launch's offset.

The generated library does not link against the backend: the entry finds the launcher
through the environment variable `LAUNCHER_VARIABLE`, which the backend sets to the
launcher's address (read at every call, so a rebuilt backend is picked up).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LAUNCHER_VARIABLE", "KernelArg", "parse_args", "wrap_kernel"]

LAUNCHER_VARIABLE = "TORCH_EMBER_LAUNCH_COMPILED"

# ember-book: begin compiled_prelude
# Shared by every kernel: guarded, because the C++ wrapper compiles all of a graph's
# kernels into one translation unit.
PRELUDE = r"""
#ifndef TORCH_EMBER_COMPILED_PRELUDE
#define TORCH_EMBER_COMPILED_PRELUDE
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
namespace torch_ember_compiled {
using Body = void (*)(void* args, std::ptrdiff_t offset);
using Launcher = const char* (*)(const char* kernel, const void* const* buffers,
                                 std::size_t num_buffers, Body body, void* args);
// Runs body(args, offset) as one ember launch; throws the launcher's error.
inline void launch(const char* kernel, const void* const* buffers,
                   std::size_t num_buffers, Body body, void* args) {
  const char* address = std::getenv("TORCH_EMBER_LAUNCH_COMPILED");
  if (address == nullptr) {
    throw std::runtime_error(
        "ember: TORCH_EMBER_LAUNCH_COMPILED is not set (load the backend first)");
  }
  const auto launcher =
      reinterpret_cast<Launcher>(std::strtoull(address, nullptr, 10));
  if (const char* error = launcher(kernel, buffers, num_buffers, body, args)) {
    throw std::runtime_error(error);
  }
}
// A device address as the running kernel reaches it.
template <typename T>
T* at(T* pointer, std::ptrdiff_t offset) {
  return pointer == nullptr ? pointer
      : reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(pointer) + offset);
}
} // namespace torch_ember_compiled
#endif
"""
# ember-book: end compiled_prelude


@dataclass(frozen=True)
class KernelArg:
    """One parameter of a generated kernel: `const float* in_ptr0` or `const int64_t ks0`."""

    type: str
    name: str

    @property
    def is_pointer(self) -> bool:
        return self.type.rstrip().endswith("*")


_PARAMETER = re.compile(r"^(?P<type>.*?[\s*])(?P<name>[A-Za-z_]\w*)$")


def parse_args(parameters: str) -> list[KernelArg]:
    """The parameters of a C++ parameter list (the text between the parentheses)."""
    found = []
    for text in (part.strip() for part in parameters.split(",")):
        if not text:
            continue
        match = _PARAMETER.match(text)
        if match is None:
            raise ValueError(f"ember: cannot read the kernel parameter {text!r}")
        found.append(KernelArg(" ".join(match["type"].split()), match["name"]))
    return found


# ember-book: begin compiled_entry
def wrap_kernel(source: str, kernel_name: str) -> str:
    """`source` with its last `extern "C"` function made the body of an ember launch.

    The function keeps its code under the name `<kernel_name>_body`; a new `extern "C"`
    function with the old signature (what the wrapper calls) launches it, and names the
    kernel `kernel_name` in its errors.
    """
    start = source.rfind('extern "C"')
    open_paren = source.find("(", start)
    close_paren = source.find(")", open_paren)
    if start < 0 or open_paren < 0 or close_paren < 0:
        raise ValueError('ember: no extern "C" kernel in Inductor\'s source')
    declaration = " ".join(source[start : close_paren + 1].split())
    parameters = source[open_paren + 1 : close_paren]
    args = parse_args(parameters)
    body_name = f"{kernel_name}_body"
    body = f"static void {body_name}({', '.join(f'{a.type} {a.name}' for a in args)})"
    pointers = [a for a in args if a.is_pointer]
    fields = "".join(f"    {a.type} {a.name};\n" for a in args)
    moved = ", ".join(
        f"torch_ember_compiled::at(a.{x.name}, offset)" if x.is_pointer else f"a.{x.name}" for x in args
    )
    buffers = ", ".join(a.name for a in pointers) or "nullptr"
    entry = (
        f"\n// The entry the wrapper calls: the body runs as one ember launch.\n"
        f"{declaration}\n{{\n"
        f"  struct Args {{\n{fields}  }};\n"
        f"  Args args{{{', '.join(a.name for a in args)}}};\n"
        f"  const void* buffers[] = {{{buffers}}};\n"
        f"  torch_ember_compiled::launch(\n"
        f'      "{kernel_name}", buffers, {len(pointers)},\n'
        f"      [](void* packed, std::ptrdiff_t offset) {{\n"
        f"        const Args& a = *static_cast<const Args*>(packed);\n"
        f"        {body_name}({moved});\n"
        f"      }},\n"
        f"      &args);\n"
        f"}}\n"
    )
    return PRELUDE + source[:start] + body + source[close_paren + 1 :] + entry


# ember-book: end compiled_entry
