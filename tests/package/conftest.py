"""Tests of the installed `torch_ember` package (built from extension/).

They run in their own pytest process: `pytest tests/package`. The book's tests
(`pytest tests/book tests/chapters`) load the chapters' builds, and one
process can hold only one PrivateUse1 backend. Nothing here is skipped: a missing
install or a mixed run is an error, not a silent pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
INSTALL_HINT = "run `pip install --no-build-isolation ./extension` first (from the repository root)"

try:
    import torch_ember  # noqa: F401 (importing registers the ember backend)
except ImportError as error:
    raise pytest.UsageError(f"tests/package needs the torch_ember package: {error}; {INSTALL_HINT}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    outside = [item for item in items if not item.path.is_relative_to(HERE)]
    if outside:
        raise pytest.UsageError(
            "tests/package must run in its own process (one process holds one PrivateUse1 backend, "
            "and the book's tests load theirs): run `pytest tests/package` and "
            "`pytest tests/book tests/chapters` separately"
        )


@pytest.fixture(autouse=True)
def _restore_current_device() -> Iterator[None]:
    """Every test starts on ember:0, and the current device is restored after it."""
    previous = torch.ember.current_device()
    torch.ember.set_device(0)
    yield
    torch.ember.set_device(previous)
