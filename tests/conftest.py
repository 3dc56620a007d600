"""Shared fixtures for the book's tests (not the extension's: see tests/extension)."""

from __future__ import annotations

import pytest

from book.cells import CppPart
from book.chapter import Chapter


@pytest.fixture(scope="session")
def chapter01_parts() -> list[CppPart]:
    """Chapter 01's C++ as its last book.build() compiles it."""
    return Chapter.of(1).parts_through()
