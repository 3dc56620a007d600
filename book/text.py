"""Text for the page: long messages folded to the book's column."""

from __future__ import annotations

import textwrap

PAGE_COLUMNS = 88  # the widest line a page shows without scrolling sideways


def wrapped(text: str, width: int = PAGE_COLUMNS) -> str:
    """`text`, each line wrapped at the page's 88 columns, continuations indented."""
    return "\n".join(
        textwrap.fill(line, width, subsequent_indent="    ", break_on_hyphens=False)
        for line in text.splitlines()
    )
