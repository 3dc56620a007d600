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

So `book.builder` compiles without loading (:func:`compile_only`) and asks
:func:`check` first. The child loads what ``import torch`` loads natively
(``libtorch_python.so`` and its dependencies: every C++ registration PyTorch
makes), the preloaded libraries (the ember driver, RTLD_GLOBAL, as
`book.toolchain.driver_library` loads it), then the build, and retires it the
way the builder does (``__cxa_finalize``), which runs its static destructors.
It skips the Python half of ``import torch``: that half registers only Python
(boxed) kernels, which have no C++ signature to clash with, and skipping it
makes the check ~0.3 s instead of ~2.5 s. ``import_torch=True`` runs the
full import (`book.bench` measures both).

The verdict is saved next to the library (:data:`VERDICT_FILE`), so a cache
hit, or re-running a build that failed, does not start the child again.

    python -m book.preload LIBRARY [PRELOAD ...]   # check one library by hand
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from book.compile_errors import CppBuildError, from_load_failure

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
        raise RuntimeError("torch.utils.cpp_extension changed: book.preload.compile_only needs updating")

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

    `chapter` is the notebook stem (its first two characters name the chapter
    in the message).
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


# -- Reading what the child printed ------------------------------------------------------------

_CELL = re.compile(r"[\w.-]+\.ipynb\[[\w.-]+\]:\d+")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT_END = re.compile(r"^(Exception raised from |frame #\d+|<omitting python frames>)")


def explain(result: ChildResult, chapter: str) -> str:
    """The reader's error for a child that did not get through loading and retiring."""
    summary = f"C++ build of chapter {chapter[:2]} failed"
    for line in result.stdout.splitlines():
        if line.startswith("dlopen failed: "):
            return str(from_load_failure(line.removeprefix("dlopen failed: "), summary))
    died = (
        "did not finish loading in time"
        if result.returncode is None
        else f"was killed by {_signal_name(result.returncode)}"
        if result.returncode < 0
        else f"exited with code {result.returncode}"
    )
    if "loaded" in result.stdout.splitlines():
        return (
            f"{summary}: the library loads, but its static destructors (run when a rebuild retires it) "
            f"crash: a test process {died}. Look at the destructors of the globals your cells define."
            + _tail(result.stderr)
        )
    head = (
        f"{summary}: loading it would end the process, so it was not loaded (checked in a separate process)."
    )
    thrown = _thrown(result.stderr)
    if thrown is None:
        return (
            f"{head}\nWhile loading, a test process {died}, in a static initializer: a TORCH_LIBRARY or "
            "TORCH_LIBRARY_IMPL block, or the constructor of a global object, in one of the cells."
            + _tail(result.stderr)
        )
    kind, what = thrown
    for explainer in (_signature_mismatch, _duplicate_def, _duplicate_fallback, _schema_mismatch):
        text = explainer(what)
        if text is not None:
            return f"{head}\n{text}"
    cells = ", ".join(dict.fromkeys(_CELL.findall(what)))
    where = (
        f"{cells}: a static initializer"
        if cells
        else (
            "A static initializer in one of the cells (a TORCH_LIBRARY block or a global object's constructor)"
        )
    )
    first = "\n".join(what.strip().splitlines()[:6])
    return f"{head}\n{where} threw {kind} while the library loaded:\n{first}"


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _tail(stderr: str, lines: int = 6) -> str:
    kept = [line for line in stderr.strip().splitlines() if not _WHAT_END.match(line)]
    return ("\n" + "\n".join(kept[-lines:])) if kept else ""


def _thrown(stderr: str) -> tuple[str, str] | None:
    """(exception type, what()) of the exception std::terminate reported, if any."""
    match = _TERMINATE.search(stderr)
    if match is None:
        return None
    rest = stderr[match.end() :].splitlines()
    what: list[str] = []
    started = False
    for line in rest:
        if not started:
            if line.lstrip().startswith("what():"):
                started = True
                what.append(line.split("what():", 1)[1].strip())
            continue
        if _WHAT_END.match(line):
            break
        what.append(line)
    return match["type"], "\n".join(what).strip()


_MISMATCH = re.compile(
    r"operator: (?P<schema>.+)\n(?:.*\n)*?"
    r"\s*kernel 1: (?P<expected>.+)\n\s*dispatch key: (?P<key1>\S+)\n\s*registered at (?P<where1>\S+)[^\n]*\n"
    r"\s*kernel 2: (?P<actual>.+)\n\s*dispatch key: (?P<key2>\S+)\n\s*registered at (?P<where2>\S+)"
)


def _signature_mismatch(what: str) -> str | None:
    if "Mismatch in kernel C++ signatures" not in what:
        return None
    match = _MISMATCH.search(what)
    if match is None:
        return None
    schema = match["schema"].strip()
    op = schema.split("(", 1)[0]
    expected, actual = cpp_signature(match["expected"]), cpp_signature(match["actual"])
    source = (
        f"your {match['key1']} kernel at {match['where1']} has it"
        if _CELL.fullmatch(match["where1"])
        else f"PyTorch's own {match['key1']} kernel fixes it"
    )
    lines = [
        f"{match['where2']}: the {match['key2']} kernel for {op} must have the C++ signature "
        f"`{expected}` the dispatcher expects ({source}); yours is `{actual}`.",
    ]
    lines += _argument_changes(schema, expected, actual)
    return "\n".join(lines)


def _argument_changes(schema: str, expected: str, actual: str) -> list[str]:
    """One line per argument (or the return type) that differs, named as the schema names it."""
    (expected_return, expected_args), (actual_return, actual_args) = (
        _split_signature(expected),
        _split_signature(actual),
    )
    changes = []
    if expected_return != actual_return:
        changes.append(f"Return `{expected_return}`, not `{actual_return}`.")
    if len(expected_args) != len(actual_args):
        return changes + [
            f"The schema `{schema}` has {len(expected_args)} argument(s); yours takes {len(actual_args)}."
        ]
    names = schema_argument_names(schema)
    for index, (want, have) in enumerate(zip(expected_args, actual_args, strict=True)):
        if want != have:
            name = f" ({names[index]})" if index < len(names) else ""
            changes.append(f"Argument {index + 1}{name} must be `{want}`, not `{have}`.")
    return changes


def _split_top_level(text: str, separator: str = ",") -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char in "<([":
            depth += 1
        elif char in ">)]":
            depth -= 1
        if char == separator and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    tail = "".join(current).strip()
    return parts + [tail] if tail or parts else parts


def _split_signature(signature: str) -> tuple[str, list[str]]:
    """`R (A, B)` -> ("R", ["A", "B"])."""
    depth = 0
    for index, char in enumerate(signature):
        if char in "<[":
            depth += 1
        elif char in ">]":
            depth -= 1
        elif char == "(" and depth == 0:
            return signature[:index].strip(), _split_top_level(signature[index + 1 : signature.rindex(")")])
    return signature.strip(), []


def _cpp_type(text: str) -> str:
    """How a kernel would spell a demangled type: `const T&` for `T const&`, int64_t for long."""
    text = re.sub(r"(?<!unsigned )(?<!long )\blong\b(?! long)", "int64_t", text.strip())
    for suffix in ("&", "*", "&&"):
        if text.endswith(f" const{suffix}"):
            return f"const {text[: -len(' const' + suffix)]}{suffix}"
    return text


def cpp_signature(demangled: str) -> str:
    """`at::Tensor (at::Tensor const&, long)` -> `at::Tensor (const at::Tensor&, int64_t)`."""
    result, arguments = _split_signature(demangled)
    return f"{_cpp_type(result)} ({', '.join(_cpp_type(a) for a in arguments)})"


def schema_argument_names(schema: str) -> list[str]:
    """`aten::x(Tensor self, *, int[1] dim=1) -> Tensor` -> ["self", "dim"]."""
    inside = schema[schema.index("(") + 1 :]
    depth = 0
    for index, char in enumerate(inside):
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                inside = inside[:index]
                break
            depth -= 1
    names = []
    for argument in _split_top_level(inside):
        if argument in ("", "*"):
            continue
        words = argument.split("=", 1)[0].split()
        names.append(words[-1] if len(words) > 1 else argument)
    return names


_DUPLICATE_DEF = re.compile(
    r"Tried to register an operator \((?P<schema>.+?)\) with the same name and overload name multiple times"
    r".*?Duplicate registration: registered at (?P<new>\S+?)\.?\s+Original registration: registered at "
    r"(?P<old>\S+?)\.?$",
    re.S,
)


def _duplicate_def(what: str) -> str | None:
    match = _DUPLICATE_DEF.search(what)
    if match is None:
        return None
    return (
        f"{match['new']}: `{match['schema']}` is defined a second time (the first m.def is in the block at "
        f"{match['old']}). Each operator is defined by one m.def(); delete the other."
    )


_DUPLICATE_FALLBACK = re.compile(
    r"Tried to register multiple backend fallbacks for the same dispatch key (?P<key>\w+); "
    r"previous registration registered at (?P<old>\S+), new registration registered at (?P<new>\S+)"
)


def _duplicate_fallback(what: str) -> str | None:
    match = _DUPLICATE_FALLBACK.search(what)
    if match is None:
        return None
    return (
        f"{match['new']}: a second backend fallback for {match['key']} (the first is registered at "
        f"{match['old']}). A dispatch key has one fallback per process: remove one m.fallback(...)."
    )


def _schema_mismatch(what: str) -> str | None:
    if "Inferred operator schema for a C++ kernel function doesn't match" not in what:
        return None
    fields = dict(re.findall(r"^\s*(operator|expected schema|inferred schema|reason): (.+)$", what, re.M))
    where = ", ".join(dict.fromkeys(_CELL.findall(what))) or "a kernel"
    return (
        f"{where}: the kernel's C++ parameters do not match {fields.get('operator', 'the operator').strip()}: "
        f"{fields.get('reason', '').strip()}\n"
        f"  expected schema: {fields.get('expected schema', '?').strip()}\n"
        f"  your kernel's:   {fields.get('inferred schema', '?').strip()}"
    )


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
