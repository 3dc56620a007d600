"""Chapter 08's machinery: a carry-forward cell that a later chapter supersedes, display-only C++ cells.

Chapter 08 registers the backend name "privateuseone" in a carry-forward cell; chapter 13 will register
"ember", and a process can register only once, so chapter 08's cell says from which chapter on it no longer
runs. The hooks' C++ lives in the stable library and is shown by `%%cpp --stable NAME` cells that no chapter
build compiles but the drift check holds to their regions. The backend facts the chapter shows run in a child
process (the name registration cannot be undone in this one).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from book.builds import units
from book.parts.cells import Session, chapter_paths, main_parts, parse_arguments, parse_magic, split_magic
from book.paths import REPO
from book.run import chapter as chapter_module
from book.run import sync
from book.run.chapter import Chapter

RENAME = 'torch.utils.rename_privateuse1_backend("privateuseone")'
STABLE_CELLS = {"hooks_context", "hooks_registration"}


# --- superseded carry-forward cells ---------------------------------------------------------------


def test_chapter_08_carries_the_backend_name_forward_until_chapter_13():
    chapter = Chapter.of("autograd")
    assert any(RENAME in source for _, source in chapter.carried_cells())
    for later in ("autocast", "serialization"):
        assert any(RENAME in source for _, source in chapter.carried_cells(for_chapter=later))
    assert not any(RENAME in source for _, source in chapter.carried_cells(for_chapter="renaming"))
    assert not any(RENAME in source for _, source in chapter.carried_cells(for_chapter="capstone"))


def _notebook(path: Path, cells: list[dict]) -> Path:
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _carry(source: str, superseded_by: object = None) -> dict:
    metadata: dict = {"tags": ["carry-forward"]}
    if superseded_by is not None:
        metadata["ember-book"] = {"superseded_by": superseded_by}
    return {"cell_type": "code", "metadata": metadata, "source": [source], "outputs": []}


@pytest.fixture()
def fake_book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[int, Chapter]:
    """Chapters 06, 10 and 11 of a made-up book whose chapter 06 registers a name that chapter 11 replaces.
    Their order is the list's (as _toc.yml's would be), not their files' names."""
    books = {
        6: _notebook(
            tmp_path / "x.ipynb",
            [_carry("log.append('06 kept')"), _carry("log.append('06 name')", superseded_by="z")],
        ),
        10: _notebook(tmp_path / "y.ipynb", [_carry("log.append('10')")]),
        11: _notebook(tmp_path / "a_z.ipynb", [_carry("log.append('11 name')")]),
    }
    fake = {n: Chapter(path.stem[-1], path) for n, path in books.items()}
    monkeypatch.setattr(chapter_module, "chapters", lambda: [fake[n] for n in sorted(fake)])
    return fake


def replayed(chapter: Chapter, through: bool = False) -> list[str]:
    namespace: dict = {"log": []}
    (chapter.replay_through if through else chapter.replay_earlier)(namespace)
    return namespace["log"]


def test_a_superseded_cell_runs_for_the_chapters_before_the_one_that_supersedes_it(fake_book):
    assert replayed(fake_book[10]) == ["06 kept", "06 name"]
    assert replayed(fake_book[10], through=True) == ["06 kept", "06 name", "10"]


def test_the_superseding_chapter_and_later_ones_start_without_it(fake_book):
    assert replayed(fake_book[11]) == ["06 kept", "10"]
    assert replayed(fake_book[11], through=True) == ["06 kept", "10", "11 name"]


def test_a_chapter_replays_its_own_superseded_cell(fake_book):
    assert replayed(fake_book[6], through=True) == ["06 kept", "06 name"]


@pytest.mark.parametrize("value", ["x", "w", "no_such_chapter", 11, 11.0, True])
def test_superseded_by_must_name_a_later_chapter(tmp_path, monkeypatch, value):
    # Chapters w, x and y, in that order: only y is later than x.
    fake = [Chapter(slug, _notebook(tmp_path / f"{slug}.ipynb", [])) for slug in "wxy"]
    path = _notebook(tmp_path / "06_x.ipynb", [_carry("pass", superseded_by=value)])
    fake[1] = Chapter("x", path)
    monkeypatch.setattr(chapter_module, "chapters", lambda: fake)
    assert (
        Chapter("x", _notebook(tmp_path / "ok.ipynb", [_carry("pass", superseded_by="y")])).carried_cells("y")
        == []
    )
    with pytest.raises(ValueError, match=r"06_x.ipynb\[cell 0\]: ember-book.superseded_by must be"):
        fake[1].carried_cells(for_chapter="y")


# --- display-only (%%cpp --stable) cells ----------------------------------------------------------


def test_the_stable_flag_is_parsed_and_split_magic_still_gives_name_and_body():
    source = "%%cpp --stable hooks_context\nint x;\n"
    assert parse_magic(source) == ("hooks_context", "int x;\n", True)
    assert parse_magic("%%cpp hooks_context\nint x;") == ("hooks_context", "int x;\n", False)
    assert split_magic(source) == ("hooks_context", "int x;\n")
    assert parse_magic("%%cpp --stable\nint x;") is None  # a flag is not a name
    assert parse_magic("%%cpp --fast name\nint x;") is None


def test_an_exercise_cannot_be_display_only():
    with pytest.raises(ValueError, match="an exercise is built by the chapter"):
        parse_arguments("--stable exercise_x")


def test_chapter_06_shows_the_hooks_but_no_build_compiles_them():
    chapter = Chapter.of("autograd")
    shown = {part.name for part in chapter.parts() if part.stable}
    assert shown == STABLE_CELLS
    built = chapter.parts_through()
    assert not any(part.stable or part.name in STABLE_CELLS for part in built)
    assert not any(part.stable for part in main_parts(chapter.parts()))
    source = "\n".join(unit.text for unit in units.split(built))
    assert "RegisterEmberHooks" not in source and "hasPrimaryContext" not in source
    # ... while the chapter's own autograd parts are there.
    assert "struct CustomAbsFunction" in source and "EmberTanhFunction" in source


def test_running_a_stable_cell_stages_nothing_and_notes_an_edit():
    chapter = Chapter.of("autograd")
    hooks = next(part for part in chapter.parts() if part.stable and part.name == "hooks_context")
    session = Session()
    session.start(chapter.slug)
    assert session.show_stable(hooks.name, hooks.source) is None
    note = session.show_stable(hooks.name, hooks.source.replace("return true;", "return false;"))
    assert note is not None and "%%cpp --stable hooks_context" in note and "changes nothing" in note
    assert session.staged == {}
    assert all(not part.stable for part in session.parts())


def _copies(tmp_path: Path) -> list[Path]:
    return [Path(shutil.copy(path, tmp_path / path.name)) for path in chapter_paths()]


def _edit_cell(path: Path, name: str, edit) -> None:
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        parsed = parse_magic(source) if cell["cell_type"] == "code" else None
        if parsed and parsed[0] == name:
            cell["source"] = edit(source)
            path.write_text(json.dumps(notebook))
            return
    raise AssertionError(f"{path} has no %%cpp cell {name!r}")


def _chapter06(copies: list[Path]) -> Path:
    return next(path for path in copies if path.name == Chapter.of("autograd").path.name)


def test_the_drift_check_holds_stable_cells_to_their_regions(tmp_path):
    copies = _copies(tmp_path)
    before = set(
        sync.problems(notebooks=copies)
    )  # other chapters may be mid-edit: only what we change counts
    target = _chapter06(copies)
    _edit_cell(target, "hooks_context", lambda s: s.replace("return true;", "return false;"))
    found = [p for p in sync.problems(notebooks=copies) if p not in before]
    assert len(found) == 1
    assert found[0].startswith(
        f"{target.stem}.ipynb[hooks_context] differs from extension/csrc/runtime/EmberHooks.cpp:"
    )
    # write() copies the region back and keeps the flag.
    sync.write(notebooks=copies)
    assert set(sync.problems(notebooks=copies)) <= before
    first_lines = {"".join(c["source"]).partition("\n")[0] for c in json.loads(target.read_text())["cells"]}
    assert "%%cpp --stable hooks_context" in first_lines


def test_stable_code_shown_by_an_ordinary_cell_is_refused(tmp_path):
    copies = _copies(tmp_path)
    before = set(sync.problems(notebooks=copies))
    target = _chapter06(copies)
    _edit_cell(target, "hooks_registration", lambda s: s.replace("%%cpp --stable ", "%%cpp ", 1))
    found = [p for p in sync.problems(notebooks=copies) if p not in before]
    assert len(found) == 1
    assert "is compiled into the stable library" in found[0]
    assert "%%cpp --stable hooks_registration" in found[0]


def test_a_stable_cell_must_show_the_stable_library(tmp_path):
    copies = _copies(tmp_path)
    before = set(sync.problems(notebooks=copies))
    target = _chapter06(copies)
    _edit_cell(target, "autograd_tanh", lambda s: s.replace("%%cpp ", "%%cpp --stable ", 1))
    found = [p for p in sync.problems(notebooks=copies) if p not in before]
    refused = [p for p in found if "not compiled into the stable library" in p]
    assert len(refused) == 1 and "EmberAutograd.cpp" in refused[0]
    # The rest follow from it: chapter 18 revises autograd_tanh, and a display-only cell is no version
    # of it, so the chain of versions breaks where chapter 08's was.
    assert all("autograd_tanh" in p for p in found)


# --- what the chapter's backend does (in a child: the name registration is once per process) ------

CHILD = textwrap.dedent(
    """
    import torch
    from book.run.chapter import Chapter

    chapter = Chapter.of("autograd")
    chapter.build()  # replays chapters 01-08's carry-forward cells: the device module, the backend name
    E = "privateuseone"
    assert torch.accelerator.current_accelerator().type == E

    x = torch.tensor([-1.5, 2.0, -3.0], dtype=torch.float64, device=E, requires_grad=True)
    y = torch.ops.ember.custom_abs(x)
    assert y.grad_fn.name() == "torch::autograd::CppNode<ember::CustomAbsFunction>"
    y.sum().backward()
    assert x.grad.cpu().tolist() == [-1.0, 1.0, -1.0]
    assert torch.autograd.gradcheck(torch.ops.ember.custom_abs, (x.detach().requires_grad_(),))

    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    a_ember = a.detach().to(E).requires_grad_()
    assert a_ember.tanh().grad_fn.name() == "torch::autograd::CppNode<ember::EmberTanhFunction>"
    assert a.tanh().grad_fn.name() == "TanhBackward0"  # CPU keeps ATen's formula
    (a.tanh() ** 2).sum().backward()
    (a_ember.tanh() ** 2).sum().backward()
    assert torch.allclose(a_ember.grad.cpu(), a.grad)

    y = torch.tensor([-1.0, 2.0], device=E, requires_grad=True) * 1
    s = y**2
    torch.ops.ember.custom_abs_(y)
    assert y._version == 1 and y.grad_fn.name() == "torch::autograd::NotImplemented"
    try:
        s.sum().backward()
    except RuntimeError as error:
        assert "modified by an inplace operation" in str(error)
    else:
        raise AssertionError("backward used a tensor custom_abs_ overwrote")
    print("ok")

    # Leave as book.run_isolated's children do: after a backward on a PrivateUse1 device,
    # PyTorch 2.13's interpreter shutdown can abort (SIGABRT, "terminate called without an
    # active exception"; torch_ember/autograd_threads.py has the story and the package's fix,
    # which chapter builds do not load).
    import os, sys
    sys.stdout.flush()
    os._exit(0)
    """
)


def test_the_chapter_backend_differentiates_custom_abs_and_tanh_on_ember():
    child = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert child.returncode == 0 and child.stdout.strip().endswith("ok"), child.stdout + child.stderr
