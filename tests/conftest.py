"""What the three test folders share.

- tests/book/: the book's machinery (book/), one test file per module or concern;
- tests/chapters/: the chapters: each chapter's claims on the backend it builds, the notebooks' saved
  outputs, the rendered book, the reader's JupyterLab, and nbval's sanitizers (sanitize.cfg);
- tests/package/: the installed package torch_ember, in a process of its own (its conftest.py).

pytest puts tests/ on the path when it imports this conftest (run from the repository's root,
every run does), so helpers shared by test files live here: checkpoints.py (chapter 12's tests and
the package's serialization tests), saved_outputs.py (the rule the chapters' saved outputs keep,
which book.display.errors keeps too) and book_child.py (a fresh interpreter for the tests of
chapters 13 and 19).
The fixtures below are for the book's process (tests/book and tests/chapters), not the package's.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

# `import book` before torch: it turns off PyTorch's backend autoload, which would load the installed
# torch_ember into the book's test process (book/autoload.py).
from book.parts.cells import CppPart
from book.run.chapter import Chapter


@pytest.fixture(scope="session")
def chapter01_parts() -> list[CppPart]:
    """Chapter 01's C++ as its last book.build() compiles it."""
    return Chapter.of("allocator").parts_through()


@pytest.fixture(scope="session", autouse=True)
def autograd_engine_knows_ember_devices() -> Iterator[None]:
    """Start the autograd engine while an ember device guard is registered.

    The engine sizes its per-device queues once per process, at the first
    backward of any device, from the device guards registered then. The book's
    tests share one process: a CPU backward in an early chapter's test, before
    any build registered ember's guard, would leave ember with no queue, and
    every later ember backward would fail an internal assert ("device_ready_queues_").
    A reader's kernel has the same rule: build first, then call backward.
    Not for the finished package's tests (tests/package): they load torch_ember instead.
    """
    if "torch_ember" in sys.modules:
        yield
        return
    import torch

    build = Chapter.of("allocator").build()
    x = torch.ones(1, requires_grad=True)
    (x * 2).sum().backward()
    del build
    gc.collect()  # retire chapter 01's build: each test module builds its own
    yield
