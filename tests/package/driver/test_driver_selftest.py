"""The simulated driver's own test (the C++ beside this file), built with the driver's sources and run.

The driver (extension/csrc/driver) knows no PyTorch, so its self-test is a plain C++ program, one
`*_tests.cpp` per area of the driver, like openreg's driver tests: compile it with the driver's
sources, run it. It exits non-zero and prints `FAIL <file> line N: ...` for each failed check. Its
argument is the per-device capacity the driver should report, so the same program checks the default
(4 GiB) and EMBER_DEVICE_MEMORY_BYTES. Nothing here imports torch or torch_ember; it lives beside the
package's tests because the driver is the package's bottom layer.
"""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DRIVER = REPO / "extension" / "csrc" / "driver"
DEFAULT_CAPACITY = 4 << 30
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def selftest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = tmp_path_factory.mktemp("driver")
    sources = sorted(DRIVER.glob("*.cpp")) + sorted(HERE.glob("*.cpp"))

    def compile_object(source: Path) -> Path:
        # The test's objects are named apart from the driver's (memory_tests.o, memory.o).
        target = build / f"{source.parent.name}_{source.stem}.o"
        flags = ["-std=c++17", "-O1", "-pthread", f"-I{DRIVER}", "-Wall", "-Werror"]
        result = subprocess.run(
            ["c++", *flags, "-c", str(source), "-o", str(target)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr[-4000:]
        return target

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_object, sources))
    program = build / "ember_driver_selftest"
    link = subprocess.run(
        ["c++", "-pthread", *map(str, objects), "-o", str(program)], capture_output=True, text=True
    )
    assert link.returncode == 0, link.stderr[-4000:]
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
    assert re.search(r"^FAIL memory_tests\.cpp line \d+: ", result.stderr, re.MULTILINE), result.stderr


def test_a_bad_capacity_is_reported_and_ignored(selftest: Path) -> None:
    result = run(selftest, DEFAULT_CAPACITY, "lots")
    assert result.returncode == 0, (
        f"driver self-test failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    assert 'ignoring EMBER_DEVICE_MEMORY_BYTES="lots"' in result.stderr


def test_every_entry_point_starts_with_its_error_detail_cleared() -> None:
    """Each C entry point opens with the EntryPoint guard, so none can show an earlier call's detail."""
    declared = set(re.findall(r"^emError_t (em\w+)\(", (DRIVER / "ember_driver.h").read_text(), re.MULTILINE))
    opened: dict[str, str] = {}
    for source in sorted(DRIVER.glob("*.cpp")):
        for name, first in re.findall(
            r"^emError_t (em\w+)\(.*?\) \{\n([^\n]*)\n", source.read_text(), re.MULTILINE | re.DOTALL
        ):
            opened[name] = first.strip()
    assert set(opened) == declared  # every declared entry point is defined, in this form
    assert {name for name, first in opened.items() if first != "const EntryPoint entry;"} == set()


INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


# What the driver may include besides its own files and the C++ library (<mutex>, <thread>, ...).
POSIX = {"fcntl.h", "pthread.h", "sys/mman.h", "unistd.h", "stddef.h", "stdint.h"}


def test_the_driver_includes_nothing_above_it() -> None:
    """The bottom layer: the C++ library, POSIX and its own files; never PyTorch or the runtime."""
    own = {p.name for p in DRIVER.iterdir()}
    for source in sorted(DRIVER.iterdir()):
        for header in INCLUDE.findall(source.read_text()):
            standard = "." not in header
            assert standard or header in POSIX or header in own, f"{source.name} includes {header}"


def test_only_the_driver_includes_its_internal_header() -> None:
    """Code above the driver sees ember_driver.h alone: internal.h can change with any commit."""
    sources = [
        *(REPO / "extension").rglob("*.cpp"),
        *(REPO / "extension").rglob("*.h"),
        *(REPO / "book").rglob("*.cpp"),
    ]
    for source in sorted(sources):
        if source.parent == DRIVER or "build" in source.relative_to(REPO).parts[1:2]:
            continue
        for header in INCLUDE.findall(source.read_text(errors="replace")):
            assert header not in ("internal.h", "driver/internal.h"), f"{source} includes {header}"
