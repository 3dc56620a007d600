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
#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
namespace torch_ember_compiled {
using Body = void (*)(void* args, std::ptrdiff_t offset);
using Launcher = const char* (*)(const char* kernel, const void* const* buffers,
                                 std::size_t num_buffers, Body body,
                                 const void* args, std::size_t args_size);
// The launcher the backend published as "<pid>:<address>". A child process
// inherits the variable, but not the address: it must publish its own.
inline Launcher launcher() {
  const char* published = std::getenv("TORCH_EMBER_LAUNCH_COMPILED");
  long long pid = 0;
  unsigned long long address = 0;
  if (published == nullptr ||
      std::sscanf(published, "%lld:%llu", &pid, &address) != 2 ||
      pid != static_cast<long long>(getpid())) {
    throw std::runtime_error(
        "ember: no launcher for compiled kernels in this process "
        "(TORCH_EMBER_LAUNCH_COMPILED): load the ember backend first");
  }
  return reinterpret_cast<Launcher>(static_cast<std::uintptr_t>(address));
}
// Runs body(args, offset) as one ember launch, on a copy of the args_size
// bytes at args; throws the launcher's error.
inline void launch(const char* kernel, const void* const* buffers,
                   std::size_t num_buffers, Body body, const void* args,
                   std::size_t args_size) {
  Launcher run = launcher();
  if (const char* error = run(kernel, buffers, num_buffers, body, args, args_size)) {
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
    """A kernel's parameter: `const float* in_ptr0` or `const int64_t ks0`."""

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
def _listing(items: list[str], indent: str, before: str) -> str:
    """`items` comma-separated: after `before` if that fits in 80 columns, else one per
    line."""
    one_line = ", ".join(items)
    if len(before) + len(one_line) + 3 <= 80:
        return one_line
    return "\n" + ",\n".join(indent + item for item in items)


def _inside_launch(arg: KernelArg) -> str:
    """`arg` as the body gets it in the launch: a pointer moved by the offset."""
    if arg.is_pointer:
        return f"torch_ember_compiled::at(a.{arg.name}, offset)"
    return f"a.{arg.name}"


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
    head = " ".join(source[start:open_paren].split())  # extern "C" void kernel
    args = parse_args(source[open_paren + 1 : close_paren])
    declarations = [f"{a.type} {a.name}" for a in args]
    body_name = f"{kernel_name}_body"
    pointers = [a.name for a in args if a.is_pointer]
    fields = "".join(f"    {a.type} {a.name};\n" for a in args)
    moved = [_inside_launch(a) for a in args]
    packed = _listing([a.name for a in args], "      ", "  Args args")
    buffers = _listing(pointers, "      ", "  const void* buffers[] = ") or "nullptr"
    call = _listing(moved, "            ", "        " + body_name)
    entry = (
        "\n// The entry the wrapper calls: the body runs as one ember launch.\n"
        f"{head}({_listing(declarations, '    ', head)})\n{{\n"
        f"  struct Args {{\n{fields}  }};\n"
        f"  Args args{{{packed}}};\n"
        f"  const void* buffers[] = {{{buffers}}};\n"
        "  torch_ember_compiled::launch(\n"
        f'      "{kernel_name}", buffers, {len(pointers)},\n'
        "      [](void* packed, std::ptrdiff_t offset) {\n"
        "        const Args& a = *static_cast<const Args*>(packed);\n"
        f"        {body_name}({call});\n"
        "      },\n"
        "      &args, sizeof args);\n"
        "}\n"
    )
    signature = _listing(declarations, "    ", "static void " + body_name)
    body = f"static void {body_name}({signature})"
    return PRELUDE + source[:start] + body + source[close_paren + 1 :] + entry


# ember-book: end compiled_entry
