"""The chapters' saved outputs hold for every reader.

The committed outputs are the book. They must not show

* a path of the machine that ran them (``/work/…``, ``/home/…``, a virtualenv's site-packages):
  ``book.errors`` rewrites the ones in tracebacks (``<torch>/_tensor.py``);
* a build duration ("compiled in 4.6 s"), which changes on every run: ``book.progress`` shows
  durations only on the live line, never in batch mode;
* a fact of the machine that ran them: its CPU's vector capability (``AVX2``, ``AVX512``…, what
  ``torch.backends.cpu.get_cpu_capability()`` names), its core or thread count, its cache sizes, its
  compiler's version. A reader's machine differs, and strict nbval would fail there;
* a wall of text: a stream or error output of more than 60 lines, unless the cell is tagged
  ``hide-output`` (the book collapses it). ``book.errors`` compacts long errors and keeps the full
  message in a collapsed HTML display, which is not counted;
* a wall of code: more than 150 visible lines of code between two markdown cells (code cells'
  sources, and the code and diffs their outputs display), or a diff of more than 60 lines shown
  open (``book.cells.Revision`` collapses a longer one under a summary line);
* a visible line wider than the page's column (88 characters), in a code cell's source or a stream
  output: it would scroll sideways, its end hidden. Cells whose input or output the book hides or
  removes (tags ``hide-input``, ``remove-input``, ``hide-output``, ``remove-output``, ``remove-cell``)
  are not counted for the part they hide.

The same rule as ``../shared/check_outputs.py``. nbval (``make test``) then checks that a fresh
run shows the same outputs; ``tests/sanitize.cfg`` only evens out what truly differs between runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))

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


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_saved_outputs_hold_for_every_reader(path: Path) -> None:
    problems = output_problems(path)
    assert not problems, "outputs that differ per machine or run, or are too long:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_walls_of_code(path: Path) -> None:
    walls = code_walls(path)
    assert not walls, "code without prose between it, or long diffs shown open:\n" + "\n".join(walls)


def test_there_are_chapters() -> None:
    assert CHAPTERS, "no chapters/*.ipynb"


# --- the rule itself ------------------------------------------------------------------------------


def notebook_with(tmp_path: Path, *outputs: dict[str, Any], tags: list[str] | None = None) -> Path:
    cell = {
        "cell_type": "code",
        "execution_count": 1,
        "id": "c",
        "metadata": {"tags": tags or []},
        "outputs": list(outputs),
        "source": "",
    }
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def stream(text: str) -> dict[str, Any]:
    return {"output_type": "stream", "name": "stdout", "text": text}


def display(plain: str, html: str = "") -> dict[str, Any]:
    return {"output_type": "display_data", "metadata": {}, "data": {"text/plain": plain, "text/html": html}}


def error(traceback: list[str]) -> dict[str, Any]:
    return {"output_type": "error", "ename": "E", "evalue": "", "traceback": traceback}


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        (
            error(["File \x1b[32m/work/venv/lib/python3.11/site-packages/torch/x.py:3\x1b[39m"]),
            "machine path",
        ),
        (display("", "<pre>Meta: registered at /home/me/torch/x.py:54</pre>"), "machine path"),
        (display("✔ ember backend for chapter 02: compiled in 4.6 s"), "duration"),
        (display("✔ ember backend: loaded from the build cache in 0.0 s"), "duration"),
        (stream("\n".join(str(i) for i in range(61))), "61 visible lines"),
        (error([str(i) for i in range(61)]), "61 visible lines"),
        (stream("this machine's CPU capability: AVX2\n"), "fact of the machine 'AVX2'"),
        (display("capability AVX512_BF16"), "fact of the machine 'AVX512_BF16'"),
        (stream("running on 2 cores\n"), "fact of the machine '2 cores'"),
        (stream("torch.get_num_threads() = 2\n"), "fact of the machine"),
        (stream("os.cpu_count() = 16\n"), "fact of the machine"),
        (stream("L2 cache: 2 MiB\n"), "fact of the machine"),
        (stream("compiled by gcc version 12.2.0\n"), "fact of the machine"),
        (stream("x" * 89 + "\n"), "output line of 89 columns"),
    ],
)
def test_the_rule_finds(tmp_path: Path, output: dict[str, Any], problem: str) -> None:
    (found,) = output_problems(notebook_with(tmp_path, output))
    assert problem in found


@pytest.mark.parametrize(
    "output",
    [
        display("✔ ember backend for chapter 02 (13 C++ parts from chapters 01–02) is loaded"),
        error(
            ["File <torch>/_tensor.py:564", "CPU: registered at /__w/pytorch/pytorch/aten/X.cpp:3 [kernel]"]
        ),
        stream("\n".join(str(i) for i in range(60))),
        display("\n".join(str(i) for i in range(200)), "<details><pre>" + "row\n" * 200 + "</pre></details>"),
        stream("x" * 88 + "\n"),
        stream("the dtypes of the core ops: float32, bfloat16\n"),
        stream("1 thread vs 2 threads: True\n"),
    ],
)
def test_the_rule_lets_pass(tmp_path: Path, output: dict[str, Any]) -> None:
    assert output_problems(notebook_with(tmp_path, output)) == []


def test_hide_output_cells_may_be_long(tmp_path: Path) -> None:
    long = stream("\n".join(str(i) for i in range(100)))
    assert output_problems(notebook_with(tmp_path, long, tags=["hide-output"])) == []


def test_wide_source_lines_are_found(tmp_path: Path) -> None:
    path = notebook_with(tmp_path)
    notebook = json.loads(path.read_text())
    notebook["cells"][0]["source"] = "x = 1\n" + "y = " + "1" * 90
    path.write_text(json.dumps(notebook))
    assert output_problems(path) == ["n.ipynb: cell 0: source line of 94 columns"]
    notebook["cells"][0]["metadata"]["tags"] = ["hide-input"]
    path.write_text(json.dumps(notebook))
    assert output_problems(path) == []


def test_hidden_outputs_may_be_wide(tmp_path: Path) -> None:
    assert output_problems(notebook_with(tmp_path, stream("x" * 120), tags=["hide-output"])) == []


def code_cell(lines: int, outputs: list[dict[str, Any]] | None = None, tags: list[str] | None = None) -> dict:
    source = "".join(f"x = {i}\n" for i in range(lines))
    return {"cell_type": "code", "metadata": {"tags": tags or []}, "outputs": outputs or [], "source": source}


def prose() -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": "Why the next cell matters."}


def notebook_of(tmp_path: Path, *cells: dict[str, Any]) -> Path:
    path = tmp_path / "walls.ipynb"
    path.write_text(json.dumps({"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def diff_display(lines: int, collapsed: bool = False) -> dict[str, Any]:
    diff = "```diff\n" + "".join(f"+x = {i}\n" for i in range(lines)) + "```\n"
    markdown = (
        f"title\n\n<details>\n<summary>s</summary>\n\n{diff}</details>\n" if collapsed else f"title\n\n{diff}"
    )
    return {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/markdown": markdown, "text/plain": ""},
    }


def test_a_wall_of_code_is_found_and_prose_breaks_it(tmp_path: Path) -> None:
    (wall,) = code_walls(notebook_of(tmp_path, prose(), code_cell(100), code_cell(51), prose()))
    assert "cells 1-2: 151 lines of code without prose" in wall
    assert not code_walls(notebook_of(tmp_path, code_cell(100), prose(), code_cell(100)))
    assert not code_walls(notebook_of(tmp_path, code_cell(100), code_cell(100, tags=["hide-input"])))


def test_a_long_diff_must_be_collapsed(tmp_path: Path) -> None:
    (found,) = code_walls(notebook_of(tmp_path, code_cell(1, [diff_display(61)])))
    assert "a diff of 61 lines shown open" in found
    assert not code_walls(notebook_of(tmp_path, code_cell(1, [diff_display(61, collapsed=True)])))
    assert not code_walls(notebook_of(tmp_path, code_cell(1, [diff_display(60)])))
