"""Where the book's files live, and where its build products go."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = REPO / "chapters"
TOC = REPO / "_toc.yml"  # the chapters and their order
EXTENSION = REPO / "extension"
CSRC = EXTENSION / "csrc"
BOOK_CPP = Path(__file__).resolve().parent / "builds" / "cpp"


def cache_dir(create: bool = True) -> Path:
    """Build products: precompiled header, driver library, chapter builds.

    Override with EMBER_BOOK_CACHE (the benchmark uses this to measure cold
    builds without touching the reader's cache). `create=False` only names it
    (book.display.errors shortens paths under it without making the folder).
    """
    path = Path(os.environ.get("EMBER_BOOK_CACHE") or Path.home() / ".cache" / "ember-book")
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
