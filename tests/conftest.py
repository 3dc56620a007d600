"""Shared fixtures for the book's tests (not the extension's: see tests/extension)."""

from __future__ import annotations

import pytest

from book.cells import CppPart
from book.sync import extension_regions

CHAPTER01_PARTS = ("ember_check", "allocator", "device_guard")


@pytest.fixture(scope="session")
def chapter01_parts() -> list[CppPart]:
    """Chapter 01's C++ as the book compiles it, taken from extension/csrc."""
    regions = extension_regions()
    return [CppPart("01_allocator", name, regions[name].text) for name in CHAPTER01_PARTS]
