"""Load a fresh chapter build in a throwaway process before the reader's process loads it.

Some C++ compiles cleanly and still kills the process that loads it: the
library's static initializers (every ``TORCH_LIBRARY``/``TORCH_LIBRARY_IMPL``
block, every global object's constructor) run inside ``dlopen``, and an
exception there is ``std::terminate``. In a notebook the kernel dies without a
word. Two ways a reader gets there on torch 2.13:

* a kernel whose C++ signature differs from the one the dispatcher already
  holds for the operator ("Mismatch in kernel C++ signatures"). PyTorch's own
  generated kernels (Tracer, autograd) fix it, so this aborts even the first
  build in a fresh process;
* a registration the dispatcher refuses: a second ``m.def`` of one schema, a
  second ``m.fallback`` for one key, a kernel whose parameters do not fit the
  operator's schema, or any exception a global's constructor throws. (A second ``m.impl`` for the same operator and key is
  not one of them: 2.13 only warns "Overriding a previously registered kernel".)

So `book.builds.builder` compiles without loading (:func:`compile_only`) and asks
:func:`check` first. The child loads what ``import torch`` loads natively
(``libtorch_python.so`` and its dependencies: every C++ registration PyTorch
makes), the preloaded libraries (the ember driver, RTLD_GLOBAL, as
`book.builds.toolchain.driver_library` loads it), then the build, and retires it the
way the builder does (``__cxa_finalize``), which runs its static destructors.
It skips the Python half of ``import torch``: that half registers only Python
(boxed) kernels, which have no C++ signature to clash with, and skipping it
makes the check ~0.3 s instead of ~2.5 s. ``import_torch=True`` runs the
full import (`book.bench` measures both).

The verdict is saved next to the library (:data:`VERDICT_FILE`), so a cache
hit, or re-running a build that failed, does not start the child again.
What the child printed becomes the reader's error in `book.builds.load_errors`
(which cell, and what to change).

    python -m book.builds.preload LIBRARY [PRELOAD ...]   # check one library by hand
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from book.builds.compile_errors import CppBuildError
from book.builds.load_errors import explain

VERDICT_FILE = "preload-verdict.json"
TIMEOUT_SECONDS = 120.0
_TORCH_LIB = "libtorch_python.so"

# The child. It imports nothing but the standard library (the `book` package
# imports torch), and leaves with os._exit: interpreter teardown is not what
# is being checked. Progress markers on stdout tell which step died.
_CHILD = """\
import ctypes, os, sys
torch_lib, import_torch, library, preload = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4:]
def say(text):
    sys.stdout.write(text + "\\n"); sys.stdout.flush()
if import_torch:
    import torch
else:
    ctypes.CDLL(torch_lib)  # RTLD_LOCAL, as torch._C pulls it in
for path in preload:
    ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
say("loading")
try:
    build = ctypes.CDLL(library)
except OSError as error:
    say("dlopen failed: " + str(error))
    os._exit(3)
say("loaded")
if hasattr(build, "book_dso_handle"):
    build.book_dso_handle.restype = ctypes.c_void_p
    ctypes.CDLL(None).__cxa_finalize(ctypes.c_void_p(build.book_dso_handle()))
say("retired")
os._exit(0)
"""


@dataclass(frozen=True)
class ChildResult:
    """How the checking child ended."""

    returncode: int | None  # None: it did not finish in time
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.stdout.rstrip().endswith("retired")


def compile_only() -> contextlib.AbstractContextManager[None]:
    """Inside this, `load_inline(..., is_python_module=False)` builds but does not load the library.

    load_inline loads what it built through `_import_module_from_library`
    (torch 2.13); the builder loads it itself once :func:`check` passed.
    """
    from torch.utils import cpp_extension

    if not hasattr(cpp_extension, "_import_module_from_library"):
        raise RuntimeError(
            "torch.utils.cpp_extension changed: book.builds.preload.compile_only needs updating"
        )

    def library_path(name: str, path: str, is_python_module: bool) -> str:
        return os.path.join(path, f"{name}.so")

    @contextlib.contextmanager
    def patched() -> Iterator[None]:
        original = cpp_extension._import_module_from_library
        cpp_extension._import_module_from_library = library_path
        try:
            yield
        finally:
            cpp_extension._import_module_from_library = original

    return patched()


def torch_library() -> Path:
    """libtorch_python.so of the torch this process runs (found without importing torch)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise RuntimeError("torch is not installed")
    return Path(spec.origin).parent / "lib" / _TORCH_LIB


def run_child(
    library: Path,
    preload: Sequence[Path] = (),
    *,
    import_torch: bool = False,
    timeout: float = TIMEOUT_SECONDS,
) -> ChildResult:
    """Load `library` in a new Python process; report how that went (no verdict cache)."""
    command = [sys.executable, "-I", "-c", _CHILD, str(torch_library()), "1" if import_torch else "0"]
    command += [str(library), *map(str, preload)]
    if not import_torch:
        command.insert(2, "-S")  # no site-packages needed: faster start
    started = time.perf_counter()
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as stopped:
        return ChildResult(None, _text(stopped.stdout), _text(stopped.stderr), time.perf_counter() - started)
    return ChildResult(child.returncode, child.stdout, child.stderr, time.perf_counter() - started)


def check(library: Path, chapter: str, preload: Sequence[Path] = ()) -> None:
    """Raise CppBuildError if loading `library` would end the process; cache the verdict.

    `chapter` is the chapter's slug (the message names it by its label, "chapter 02").
    """
    message = cached_verdict(library)
    if message is None:
        result = run_child(library, preload)
        message = "" if result.ok else explain(result, chapter)
        save_verdict(library, message)
    if message:
        raise CppBuildError(message)


def _identity(library: Path) -> dict[str, int]:
    stat = library.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def verdict_path(library: Path) -> Path:
    return library.parent / VERDICT_FILE


def cached_verdict(library: Path) -> str | None:
    """'' if this very file passed, the error message if it failed, None if unchecked."""
    try:
        saved = json.loads(verdict_path(library).read_text())
        if saved["library"] == _identity(library):
            return str(saved["message"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def save_verdict(library: Path, message: str) -> None:
    target = verdict_path(library)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps({"library": _identity(library), "message": message}) + "\n")
        partial.replace(target)  # atomic: concurrent builds of the same sources agree anyway
    except OSError:
        pass  # a read-only cache: the next load checks again


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[-1].strip(), file=sys.stderr)
        return 2
    library, preload = Path(argv[0]), [Path(p) for p in argv[1:]]
    result = run_child(library, preload)
    if result.ok:
        print(f"{library.name} loads and retires cleanly ({result.seconds:.2f} s)")
        return 0
    print(explain(result, library.name.removeprefix("ember_")), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
