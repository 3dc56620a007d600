"""A fresh interpreter for a chapter test whose backend needs a process of its own.

A process can name PrivateUse1 only once, and a chapter test's process already holds the earlier
chapters' backend, so chapters 13 and 19 run their checks in a child (autoload off and batch mode, as in
the book) that prints one JSON object on its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from book.paths import REPO


def child_facts(code: str, timeout: float) -> tuple[dict, str]:
    """Run `code` (dedented) in a fresh interpreter; its last stdout line as JSON, and its stderr."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,  # the assertion below shows the child's output
        cwd=REPO,
        env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", EMBER_BOOK_BATCH="1"),
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr
