"""The simulated driver's own test (extension/csrc/driver/ember_driver_selftest.cpp), built and run.

The driver knows no PyTorch, so its self-test is a plain C++ program: compile it with the
driver's sources and run it. It exits non-zero and prints `FAIL line N: ...` for each failed check.
Its argument is the per-device capacity the driver should report, so the same program checks the
default (4 GiB) and EMBER_DEVICE_MEMORY_BYTES.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from book.paths import CSRC

DRIVER = CSRC / "driver"
DEFAULT_CAPACITY = 4 << 30
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def selftest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    program = tmp_path_factory.mktemp("driver") / "ember_driver_selftest"
    sources = [DRIVER / "ember_driver.cpp", DRIVER / "ember_driver_selftest.cpp"]
    build = subprocess.run(
        ["c++", "-std=c++17", "-O1", "-pthread", f"-I{DRIVER}", *map(str, sources), "-o", str(program)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    return program


def run(program: Path, capacity: int, memory_bytes: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EMBER_DEVICE_MEMORY_BYTES"}
    if memory_bytes is not None:
        env["EMBER_DEVICE_MEMORY_BYTES"] = memory_bytes
    return subprocess.run([str(program), str(capacity)], capture_output=True, text=True, timeout=120, env=env)


def test_driver_selftest_passes(selftest: Path) -> None:
    result = run(selftest, DEFAULT_CAPACITY, None)
    assert result.returncode == 0, (
        f"driver self-test failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    assert result.stderr == ""


def test_capacity_from_the_environment_rounds_up_to_pages(selftest: Path) -> None:
    requested = 64 * 2**20 + 5
    result = run(selftest, 64 * 2**20 + PAGE, str(requested))
    assert result.returncode == 0, (
        f"driver self-test failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )


def test_selftest_fails_when_the_capacity_is_not_the_expected_one(selftest: Path) -> None:
    result = run(selftest, 64 * 2**20 + PAGE, str(64 * 2**20))
    assert result.returncode == 1
    assert "FAIL line" in result.stderr


def test_a_bad_capacity_is_reported_and_ignored(selftest: Path) -> None:
    result = run(selftest, DEFAULT_CAPACITY, "lots")
    assert result.returncode == 0, (
        f"driver self-test failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    assert 'ignoring EMBER_DEVICE_MEMORY_BYTES="lots"' in result.stderr
