"""The rule the chapters' saved outputs keep, so that they hold for every reader.

The committed outputs are the book. They must not show

* a path of the machine that ran them (``/work/…``, ``/home/…``, a virtualenv's site-packages):
  ``book.display.errors`` rewrites the ones in tracebacks (``<torch>/_tensor.py``);
* a build duration ("compiled in 4.6 s"), which changes on every run: ``book.builds.progress`` shows
  durations only on the live line, never in batch mode;
* a fact of the machine that ran them: its CPU's vector capability (``AVX2``, ``AVX512``…, what
  ``torch.backends.cpu.get_cpu_capability()`` names), its core or thread count, its cache sizes, its
  compiler's version. A reader's machine differs, and strict nbval would fail there;
* a wall of text: a stream or error output of more than 60 lines, unless the cell is tagged
  ``hide-output`` (the book collapses it). ``book.display.errors`` compacts long errors and keeps the full
  message in a collapsed HTML display, which is not counted;
* a wall of code: more than 150 visible lines of code between two markdown cells (code cells'
  sources, and the code and diffs their outputs display), or a diff of more than 60 lines shown
  open (``book.parts.cells.Revision`` collapses a longer one under a summary line);
* a visible line wider than the page's column (88 characters), in a code cell's source or a stream
  output: it would scroll sideways, its end hidden. Cells whose input or output the book hides or
  removes (tags ``hide-input``, ``remove-input``, ``hide-output``, ``remove-output``, ``remove-cell``)
  are not counted for the part they hide.

The same rule as ``../shared/check_outputs.py``. nbval (``make test``) then checks that a fresh
run shows the same outputs; ``tests/chapters/sanitize.cfg`` only evens out what truly differs between
runs. tests/chapters/test_outputs.py applies the rule to every chapter (and tests it),
tests/book/test_errors.py to what ``book.display.errors`` shows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

PATH = re.compile(r"(/work/|/tmp/|/root/|/home/|/usr/local/lib/python|/opt/)[\w.-]")
DURATION = re.compile(r"\b(compiled|built|loaded|took)\b[^\n]{0,40}\bin \d+(\.\d+)? ?s\b", re.I)
# Facts of the machine: the CPU capability names PyTorch reports (and `lscpu`/`/proc/cpuinfo` flags),
# core and thread counts, cache sizes, compiler versions.
MACHINE = re.compile(
    r"\b(AVX2|AVX512\w*|AVX-512|AVX|SSE4\w*|NEON|SVE2?|VSX|ZVECTOR|AMX\w*)\b"
    r"|\b\d+ (logical |physical )?(cores?|CPUs?|hardware threads)\b"
    r"|\b(cpu_count|nproc|get_num_threads)\(\)\s*[:=]\s*\d+"
    r"|\bL[123]d? cache\b[^\n]{0,20}\d+ ?[KMG]i?B"
    r"|\b(gcc|g\+\+|clang) (version )?\(?\w*\)? ?\d+\.\d+"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_LINES = 60
MAX_CODE_RUN = 150  # visible lines of code between two stretches of prose
MAX_OPEN_DIFF = 60  # lines of a diff shown open
MAX_WIDTH = 88  # the rendered book's text column shows this many characters of code and plain output
HIDE_INPUT = {"hide-input", "remove-input", "remove-cell"}
HIDE_OUTPUT = {"hide-output", "remove-output", "remove-cell"}


def _joined(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def output_text(output: dict[str, Any]) -> str:
    """What an output shows: a stream's text, an error's traceback, a display's text and HTML."""
    if output["output_type"] == "stream":
        return _joined(output["text"])
    if output["output_type"] == "error":
        return "\n".join(output.get("traceback", [])) or output.get("evalue", "")
    data = output.get("data", {})
    return _joined(data.get("text/plain", "")) + _joined(data.get("text/html", ""))


def output_problems(path: Path) -> list[str]:
    """Every output of the notebook at `path` that breaks the rule, one line each."""
    found = []
    notebook = json.loads(path.read_text())
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        hidden = "hide-output" in tags
        where = f"{path.name}: cell {i}"
        if not tags & HIDE_INPUT:
            found += [f"{where}: source line of {n} columns" for n in wide_lines(_joined(cell["source"]))]
        for output in cell.get("outputs", []):
            text = ANSI.sub("", output_text(output))
            if match := PATH.search(text):
                found.append(f"{where}: machine path {match.group(0)!r}")
            if match := DURATION.search(text):
                found.append(f"{where}: duration {match.group(0)!r}")
            if match := MACHINE.search(text):
                found.append(f"{where}: fact of the machine {match.group(0)!r}")
            if not hidden and output["output_type"] in ("stream", "error"):
                lines = text.count("\n") + 1
                if lines > MAX_LINES:
                    found.append(f"{where}: {lines} visible lines")
            if output["output_type"] == "stream" and not tags & HIDE_OUTPUT:
                found += [f"{where}: output line of {n} columns" for n in wide_lines(text)]
    return found


def shown_code(output: dict[str, Any]) -> tuple[int, bool]:
    """How many lines of code an output displays, and whether it is a diff shown open."""
    data = output.get("data", {})
    markdown = _joined(data.get("text/markdown", ""))
    if "```diff" in markdown:
        if "<details>" in markdown:  # collapsed: only its summary line is in view
            return 1, False
        diff = markdown.split("```diff\n", 1)[1].split("\n```", 1)[0]
        return diff.count("\n") + 1, True
    # IPython.display.Code: highlighted HTML, with LaTeX and plain-text forms.
    if "text/latex" in data and "highlight" in _joined(data.get("text/html", "")):
        return _joined(data.get("text/plain", "")).count("\n") + 1, False
    return 0, False


def code_walls(path: Path) -> list[str]:
    """Runs of more than MAX_CODE_RUN visible lines of code with no prose between them, and open long diffs."""
    found = []
    run, first = 0, 0
    cells = json.loads(path.read_text())["cells"]
    for i, cell in enumerate([*cells, {"cell_type": "markdown"}]):
        if cell["cell_type"] != "code":
            if run > MAX_CODE_RUN:
                found.append(f"{path.name}: cells {first}-{i - 1}: {run} lines of code without prose")
            run, first = 0, i + 1
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        if not tags & HIDE_INPUT:
            run += len(_joined(cell["source"]).splitlines())
        if tags & HIDE_OUTPUT:
            continue
        for output in cell.get("outputs", []):
            lines, open_diff = shown_code(output)
            run += lines
            if open_diff and lines > MAX_OPEN_DIFF:
                found.append(f"{path.name}: cell {i}: a diff of {lines} lines shown open")
    return found


def wide_lines(text: str) -> list[int]:
    """The widths of the lines of `text` that are wider than the page's column."""
    return [len(line) for line in text.split("\n") if len(line) > MAX_WIDTH]
