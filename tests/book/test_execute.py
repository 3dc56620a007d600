"""book.execute saves a notebook's kernel metadata as the installed kernel reports it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat

from book.execute import KERNEL_NAME, installed_kernelspec, normalize_metadata

LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
    "version": "3.11.7",
}


def test_the_kernelspec_is_what_jupyter_lists_for_the_kernel() -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    listed = json.loads(
        subprocess.run(
            [jupyter, "kernelspec", "list", "--json"], capture_output=True, text=True, check=True
        ).stdout
    )["kernelspecs"][KERNEL_NAME]["spec"]
    assert installed_kernelspec() == {
        "display_name": listed["display_name"],
        "language": listed["language"],
        "name": KERNEL_NAME,
    }


def test_normalize_metadata_replaces_a_stale_kernelspec() -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
        "x": 1,
    }
    notebook.metadata["language_info"] = {"name": "python", "version": "3.10.0"}
    notebook.metadata["authors"] = ["kept"]
    spec = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    normalize_metadata(notebook, spec, LANGUAGE_INFO)
    assert notebook.metadata == {"kernelspec": spec, "language_info": LANGUAGE_INFO, "authors": ["kept"]}
    # It survives a save and a read unchanged, which is what JupyterLab compares against.
    assert nbformat.reads(nbformat.writes(notebook), as_version=4).metadata == notebook.metadata


def test_normalize_metadata_drops_language_info_the_kernel_did_not_report() -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["language_info"] = {"name": "python"}
    normalize_metadata(notebook, installed_kernelspec(), None)
    assert "language_info" not in notebook.metadata
    assert notebook.metadata["kernelspec"]["name"] == KERNEL_NAME
