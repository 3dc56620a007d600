"""toolchain.compile_once: the build cache's compile-once products (prelude, driver, stable library)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from book.builds import toolchain


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


def test_a_product_another_process_is_making_is_waited_for_not_made_again(tmp_path: Path) -> None:
    output = tmp_path / "libx.so"
    calls: list[Path] = []

    def command(partial: Path) -> list[str]:
        calls.append(partial)
        return ["sh", "-c", f"printf mine > '{partial}'"]

    done: list[Path] = []
    with toolchain.claim(output) as claimed:  # as another process making it holds it
        assert claimed
        waiting = threading.Thread(
            target=lambda: done.append(toolchain.compile_once(output, command, "x", "x"))
        )
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive() and not done, "compile_once did not wait for the claim"
        output.write_text("theirs")  # the other process's product, renamed into place
    waiting.join(10)
    assert done == [output] and output.read_text() == "theirs"
    assert calls == []  # not compiled a second time


def test_a_claim_held_elsewhere_is_refused_without_waiting_and_free_once_released(tmp_path: Path) -> None:
    output = tmp_path / "unit.o"
    with toolchain.claim(output) as first:
        assert first
        with toolchain.claim(output, wait=False) as second:
            assert second is False
        with toolchain.claim(tmp_path / "other.o", wait=False) as other:
            assert other  # one lock per product
    with toolchain.claim(output, wait=False) as again:
        assert again
