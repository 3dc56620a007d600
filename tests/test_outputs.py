"""The chapters' saved outputs hold for every reader.

The committed outputs are the book. They must not show

* a path of the machine that ran them (``/work/…``, ``/home/…``, a virtualenv's site-packages):
  ``book.errors`` rewrites the ones in tracebacks (``<torch>/_tensor.py``);
* a build duration ("compiled in 4.6 s"), which changes on every run: ``book.progress`` shows
  durations only on the live line, never in batch mode;
* a wall of text: a stream or error output of more than 60 lines, unless the cell is tagged
  ``hide-output`` (the book collapses it). ``book.errors`` compacts long errors and keeps the full
  message in a collapsed HTML display, which is not counted.

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
ANSI = re.compile(r"\x1b\[[0-9;]*m")
MAX_LINES = 60


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
        hidden = "hide-output" in cell.get("metadata", {}).get("tags", [])
        for output in cell.get("outputs", []):
            text = ANSI.sub("", output_text(output))
            where = f"{path.name}: cell {i}"
            if match := PATH.search(text):
                found.append(f"{where}: machine path {match.group(0)!r}")
            if match := DURATION.search(text):
                found.append(f"{where}: duration {match.group(0)!r}")
            if not hidden and output["output_type"] in ("stream", "error"):
                lines = text.count("\n") + 1
                if lines > MAX_LINES:
                    found.append(f"{where}: {lines} visible lines")
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_saved_outputs_hold_for_every_reader(path: Path) -> None:
    problems = output_problems(path)
    assert not problems, "outputs that differ per machine or run, or are too long:\n" + "\n".join(problems)


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
    ],
)
def test_the_rule_lets_pass(tmp_path: Path, output: dict[str, Any]) -> None:
    assert output_problems(notebook_with(tmp_path, output)) == []


def test_hide_output_cells_may_be_long(tmp_path: Path) -> None:
    long = stream("\n".join(str(i) for i in range(100)))
    assert output_problems(notebook_with(tmp_path, long, tags=["hide-output"])) == []
