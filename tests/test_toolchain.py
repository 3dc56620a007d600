"""toolchain.compile_once: the build cache's compile-once products (prelude, driver, stable library)."""

from __future__ import annotations

from pathlib import Path

import pytest

from book import toolchain


def test_compile_once_builds_then_reuses(tmp_path: Path) -> None:
    output = tmp_path / "product" / "libx.so"
    calls: list[Path] = []

    def command(partial: Path) -> list[str]:
        calls.append(partial)
        return ["sh", "-c", f"printf built > '{partial}'"]

    assert toolchain.compile_once(output, command, "building x", "built x") == output
    assert output.read_text() == "built"
    assert list(output.parent.iterdir()) == [output]  # the partial file was renamed, not left behind
    assert ".partial" in calls[0].name
    toolchain.compile_once(output, command, "building x", "built x")
    assert len(calls) == 1  # an existing product is current: no second compile


def test_a_failed_compile_says_what_failed_and_leaves_no_product(tmp_path: Path) -> None:
    output = tmp_path / "libx.so"
    with pytest.raises(RuntimeError, match=r"building x failed:\nno such header"):
        toolchain.compile_once(
            output, lambda _: ["sh", "-c", "echo 'no such header' >&2; exit 1"], "building x", ""
        )
    assert not output.exists()
