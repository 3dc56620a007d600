"""The chapters' saved outputs hold for every reader: the rule of tests/saved_outputs.py (no machine
paths, durations or machine facts, no walls of text or code, no line wider than the page), on every
chapter, and tests of the rule itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from saved_outputs import code_walls, output_problems

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


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
