"""Execute chapter notebooks in fresh kernels and save their outputs in place.

    python -m book.execute                      # every chapter
    python -m book.execute chapters/02_*.ipynb  # some

Each notebook runs in its own new kernel (chapters are independent) with
EMBER_BOOK_BATCH=1, the same mode nbval runs them in. Cells tagged
`raises-exception` may raise; any other error stops with the cell's traceback.

The saved notebook names its kernel exactly as the installed ipykernel does
(`metadata.kernelspec`), next to the `language_info` that kernel reported:
JupyterLab rewrites both when it opens a notebook, and any difference would
mark a chapter modified as soon as a reader opens it.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from book.parts.regions import chapter_paths

CELL_TIMEOUT_SECONDS = 900
KERNEL_NAME = "python3"


def execute(path: Path) -> float:
    os.environ["EMBER_BOOK_BATCH"] = "1"
    # The kernel inherits it: its `import torch` must not load the installed torch_ember (book/autoload.py).
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    notebook = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_SECONDS,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(path.parent)}},
        # Timestamps would make every re-execution a diff of its own.
        record_timing=False,
    )
    client.execute()
    strip_timing(notebook)
    # nbclient stored the language_info of the kernel that just ran the notebook.
    normalize_metadata(notebook, installed_kernelspec(), notebook.metadata.get("language_info"))
    nbformat.write(notebook, path)
    return time.perf_counter() - started


def strip_timing(notebook: nbformat.NotebookNode) -> None:
    """Drop the per-cell execution timestamps an earlier nbclient run recorded."""
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)


def installed_kernelspec(name: str = KERNEL_NAME) -> dict[str, str]:
    """The kernelspec metadata JupyterLab writes for kernel `name`, as the installed kernel reports it."""
    spec = KernelSpecManager().get_kernel_spec(name)
    return {"display_name": spec.display_name, "language": spec.language, "name": name}


def normalize_metadata(
    notebook: nbformat.NotebookNode, kernelspec: dict[str, str], language_info: dict | None
) -> None:
    """Make the notebook's kernel metadata exactly `kernelspec` and `language_info`."""
    notebook.metadata["kernelspec"] = nbformat.from_dict(dict(kernelspec))
    if language_info is None:
        notebook.metadata.pop("language_info", None)
    else:
        notebook.metadata["language_info"] = nbformat.from_dict(dict(language_info))


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or chapter_paths()
    for path in paths:
        seconds = execute(path)
        print(f"executed {path} in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
