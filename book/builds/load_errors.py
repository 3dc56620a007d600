"""Why a chapter build could not be loaded: the reader's error, from what the checking child printed.

`book.builds.preload` loads a fresh build in a throwaway process; when that process dies, this
module reads its output (a ``dlopen`` message, or ``std::terminate``'s report of an exception a
static initializer threw) and says, in the reader's terms, which cell did what: a kernel whose
C++ signature is not the dispatcher's, an operator defined twice, a second fallback, a kernel
whose parameters do not fit the schema. It parses text only (no torch, no processes).
"""

from __future__ import annotations

import re
import signal
from typing import Protocol

from book.builds.compile_errors import from_load_failure
from book.parts.regions import label


class ChildOutcome(Protocol):
    """How the checking child ended (`book.builds.preload.ChildResult`)."""

    returncode: int | None  # None: it did not finish in time
    stdout: str
    stderr: str


_CELL = re.compile(r"[\w.-]+\.ipynb\[[\w.-]+\]:\d+")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '(?P<type>[^']+)'")
_WHAT_END = re.compile(r"^(Exception raised from |frame #\d+|<omitting python frames>)")


def explain(result: ChildOutcome, chapter: str) -> str:
    """The reader's error for a child that did not get through loading and retiring."""
    summary = f"C++ build of chapter {label(chapter)} failed"
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
