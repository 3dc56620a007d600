"""The book steps aside from PyTorch's backend autoload (book/autoload.py).

With torch_ember installed, `import torch` calls its `torch.backends` entry point and loads the finished
backend. The book's processes must not: they build their own backend. These tests install a stand-in
`torch_ember` with such an entry point on PYTHONPATH (so they do not depend on the real package being
installed) and check, in fresh processes, that the stand-in does load by itself, and that `import book`,
`book.execute`'s kernels and `book.run_isolated`'s children do not load it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from book import autoload
from book.paths import REPO

STAND_IN = '''
"""A stand-in for torch_ember: importing it is what autoload does."""
def _autoload():
    pass
'''


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a package `torch_ember` and a distribution declaring its torch.backends entry point."""
    root = tmp_path_factory.mktemp("autoload")
    (root / "torch_ember").mkdir()
    (root / "torch_ember" / "__init__.py").write_text(STAND_IN)
    info = root / "torch_ember_stand_in-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-ember-stand-in\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[torch.backends]\nember = torch_ember:_autoload\n")
    return root


def run(code: str, stand_in: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter with the stand-in first on the path and autoload on, unless overridden."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stand_in), str(REPO)]))
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
    env.update(environment)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=stand_in,
        timeout=300,
    )


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_the_stand_in_is_autoloaded_by_import_torch(stand_in: Path) -> None:
    # The control: without the book, the entry point loads it (so the tests below can fail).
    result = run("import sys, torch; print('torch_ember' in sys.modules)", stand_in)
    assert last_line(result) == "True"


def test_autoload_off_means_not_loaded(stand_in: Path) -> None:
    result = run(
        "import sys, torch; print('torch_ember' in sys.modules)", stand_in, TORCH_DEVICE_BACKEND_AUTOLOAD="0"
    )
    assert last_line(result) == "False"


def test_import_book_first_turns_autoload_off_for_the_process_and_its_children(stand_in: Path) -> None:
    result = run(
        """
        import os, subprocess, sys
        import book, torch
        child = subprocess.run([sys.executable, "-c", "import sys, torch; print('torch_ember' in sys.modules)"],
                               capture_output=True, text=True, check=True)
        print('torch_ember' in sys.modules, os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"], child.stdout.strip())
        """,
        stand_in,
    )
    assert last_line(result) == "False 0 False"


def test_import_book_after_an_autoload_refuses_with_a_clear_error(stand_in: Path) -> None:
    result = run("import torch\nimport book", stand_in)
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "book.autoload.FinishedBackendLoadedError: the finished ember backend (torch_ember)"
    )
    assert "PyTorch's backend autoload loaded it" in error
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in error and "`import book` before torch" in error


def test_import_book_after_an_explicit_import_refuses_too(stand_in: Path) -> None:
    result = run("import torch_ember\nimport book", stand_in, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert result.returncode == 1
    assert "is already loaded in this process: it was imported" in result.stderr


def test_run_isolated_children_do_not_autoload(stand_in: Path) -> None:
    # The parent's own setting is put back to "1" after `import book`: the child must still not autoload.
    result = run(
        """
        import os
        import book
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
        result = book.run_isolated("import sys; print('torch_ember' in sys.modules)")
        print(result.stdout.strip(), result.returncode)
        """,
        stand_in,
    )
    assert last_line(result) == "False 0"


def test_book_execute_kernels_do_not_autoload(stand_in: Path, tmp_path: Path) -> None:
    # A notebook that imports torch before (without) the book: its kernel must still not autoload.
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(
        nbformat.v4.new_code_cell(
            "import os, sys\nimport torch\n"
            "print('torch_ember' in sys.modules, os.environ.get('TORCH_DEVICE_BACKEND_AUTOLOAD'))"
        )
    )
    path = tmp_path / "autoload.ipynb"
    nbformat.write(notebook, path)
    result = run(
        f"""
        import json, os
        from book import execute
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"  # as if `import book` had not set it
        execute.execute(__import__("pathlib").Path({str(path)!r}))
        """,
        stand_in,
    )
    assert result.returncode == 0, result.stderr
    outputs = json.loads(path.read_text())["cells"][0]["outputs"]
    assert "".join(outputs[0]["text"]).strip() == "False 0"


def test_this_test_process_did_not_autoload() -> None:
    # The book's tests import book first (tests/conftest.py): the real torch_ember, if installed, stays out.
    assert os.environ[autoload.VARIABLE] == "0"
    assert autoload.PACKAGE not in sys.modules
