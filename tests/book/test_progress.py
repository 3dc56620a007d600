"""book.builds.progress: the summary line a build leaves holds for every run; only the live line shows timings."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.display import Pretty

from book.builds import progress


class Handle:
    def __init__(self) -> None:
        self.shown: list[str] = []

    def update(self, obj: Pretty) -> None:
        self.shown.append(obj.data)


@pytest.fixture
def notebook(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Handle]:
    """A kernel as in JupyterLab: display() records what it shows and returns a live handle."""
    displayed: list[str] = []
    handle = Handle()

    def display(obj: Pretty, display_id: bool = False) -> Handle | None:
        displayed.append(obj.data)
        return handle if display_id else None

    monkeypatch.setattr(progress, "_in_notebook", lambda: True)
    monkeypatch.setattr("IPython.display.display", display)
    return displayed, handle


def build_like(detail: Any) -> None:
    with progress.Status("compiling the ember backend", tick_seconds=60) as status:
        status.finish("✔ ember backend for chapter 02 is loaded", detail=detail)


def test_batch_mode_shows_the_summary_without_the_detail(
    notebook: tuple[list[str], Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    displayed, handle = notebook
    monkeypatch.setenv("EMBER_BOOK_BATCH", "1")
    build_like("compiled in 4.6 s")
    build_like("loaded from the build cache in 0.0 s")
    # A cold and a warm cache leave the same line: nbval compares saved outputs with a new run.
    assert displayed == ["✔ ember backend for chapter 02 is loaded"] * 2
    assert handle.shown == []


def test_the_live_line_ticks_then_shows_the_summary_and_the_detail(
    notebook: tuple[list[str], Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    displayed, handle = notebook
    monkeypatch.setenv("EMBER_BOOK_BATCH", "0")
    build_like("compiled in 4.6 s")
    assert displayed == ["⏳ compiling the ember backend …"]
    assert handle.shown[-1] == "✔ ember backend for chapter 02 is loaded (compiled in 4.6 s)"


def test_warm_ups_are_not_shown_in_batch_mode(
    notebook: tuple[list[str], Handle], monkeypatch: pytest.MonkeyPatch
) -> None:
    displayed, _ = notebook
    monkeypatch.setenv("EMBER_BOOK_BATCH", "1")
    with progress.Status("precompiling the prelude header") as status:
        status.finish("✔ precompiled the prelude header", show_in_batch=False, detail="12.0 s")
    assert displayed == []
