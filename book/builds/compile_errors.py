"""Turn a failed build into one short, readable Python exception.

The generated translation unit marks every part with ``#line 1
"NN_chapter.ipynb[part]"``, so GCC already reports errors against the cell
that contains them. Here we keep just the diagnostics (and their source
excerpts), drop the ninja and command-line noise, and render them without a
Python traceback in IPython.
"""

from __future__ import annotations

import re
import subprocess

_DIAGNOSTIC = re.compile(
    r"^(?P<where>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<kind>fatal error|error|warning|note): "
)
_EXCERPT = re.compile(r"^\s*(\d+\s*)?\|")
_CONTEXT = re.compile(
    r"^[^\s:][^:]*: (In function|In member function|In instantiation|In constructor|In destructor|At global scope)"
)
MAX_ERRORS = 5


class CppBuildError(RuntimeError):
    """A chapter's C++ did not compile or load. The message holds the compiler's lines."""

    def _render_traceback_(self) -> list[str]:
        # IPython calls this instead of printing a Python traceback: the reader
        # needs the compiler's lines, not the frames of book.build().
        return [f"{type(self).__name__}: {self.args[0]}"]


class BackendInUseError(RuntimeError):
    """The loaded backend still owns device memory, so it cannot be replaced."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self.args[0]}"]


def compiler_diagnostics(log: str) -> list[str]:
    """The error diagnostics in a compiler log, each with its excerpt lines."""
    blocks: list[list[str]] = []
    keep = False
    context: str | None = None
    for line in log.splitlines():
        if _CONTEXT.match(line):
            context = line
            continue
        match = _DIAGNOSTIC.match(line)
        if match:
            keep = match["kind"] in ("error", "fatal error") or (
                # A note that points into a cell explains the error above it.
                bool(blocks) and match["kind"] == "note" and ".ipynb[" in match["where"]
            )
            if keep and match["kind"] != "note":
                blocks.append([context] if context and ".ipynb[" in context else [])
            if keep:
                blocks[-1].append(line)
            continue
        if keep and _EXCERPT.match(line):
            blocks[-1].append(line)
        else:
            keep = False
    return ["\n".join(block) for block in blocks]


def with_excerpts(diagnostics: list[str], sources: dict[str, str]) -> list[str]:
    """Add the offending cell line and a caret under each diagnostic.

    GCC cannot quote the source itself: the file names that `#line` gives it
    ("02_minimal_ops.ipynb[empty]") do not exist on disk.
    """
    out = []
    for block in diagnostics:
        lines = []
        for line in block.splitlines():
            lines.append(line)
            match = _DIAGNOSTIC.match(line)
            text = sources.get(match["where"]) if match else None
            if text is None:
                continue
            code = text.splitlines()
            number, column = int(match["line"]), int(match["col"])
            if 1 <= number <= len(code):
                gutter = f"{number:>5} | "
                lines.append(gutter + code[number - 1])
                lines.append(" " * (len(gutter) - 2) + "| " + " " * (column - 1) + "^")
        out.append("\n".join(lines))
    return out


def from_build_log(log: str, summary: str, sources: dict[str, str] | None = None) -> CppBuildError:
    errors = with_excerpts(compiler_diagnostics(log), sources or {})
    if not errors:
        # Not a compiler diagnostic (linker, ninja, missing compiler): show the tail.
        tail = "\n".join(log.strip().splitlines()[-15:])
        return CppBuildError(f"{summary}\n{tail}")
    shown = errors[:MAX_ERRORS]
    more = len(errors) - len(shown)
    text = "\n\n".join(shown)
    if more:
        text += f"\n\n… and {more} more error(s)"
    count = f"{len(errors)} error" + ("s" if len(errors) != 1 else "")
    return CppBuildError(f"{summary}: {count}\n\n{text}")


def from_load_failure(message: str, summary: str) -> CppBuildError:
    """Loading failed, usually an undefined symbol: name it the way C++ spells it."""
    match = re.search(r"undefined symbol: (\S+)", message)
    if match:
        symbol = _demangle(match[1])
        return CppBuildError(
            f"{summary}: the library uses `{symbol}`, which is declared but never defined "
            "in any cell (or in PyTorch)."
        )
    return CppBuildError(f"{summary}: {message}")


def _demangle(symbol: str) -> str:
    try:
        result = subprocess.run(["c++filt", symbol], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return symbol
    return result.stdout.strip() or symbol
