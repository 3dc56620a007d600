"""Execute chapter notebooks in fresh kernels and save their outputs in place.

    python -m book.execute                      # every chapter
    python -m book.execute chapters/02_*.ipynb  # some

Each notebook runs in its own new kernel (chapters are independent) with
EMBER_BOOK_BATCH=1, the same mode nbval runs them in. Cells tagged
`raises-exception` may raise; any other error stops with the cell's traceback.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from book.cells import chapter_paths

CELL_TIMEOUT_SECONDS = 900


def execute(path: Path) -> float:
    os.environ["EMBER_BOOK_BATCH"] = "1"
    notebook = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_SECONDS,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        # Timestamps would make every re-execution a diff of its own.
        record_timing=False,
    )
    client.execute()
    strip_timing(notebook)
    nbformat.write(notebook, path)
    return time.perf_counter() - started


def strip_timing(notebook: nbformat.NotebookNode) -> None:
    """Drop the per-cell execution timestamps an earlier nbclient run recorded."""
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or chapter_paths()
    for path in paths:
        seconds = execute(path)
        print(f"executed {path} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
