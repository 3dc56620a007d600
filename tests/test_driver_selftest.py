"""The simulated driver's own test (extension/csrc/driver/ember_driver_selftest.cpp), built and run.

The driver knows no PyTorch, so its self-test is a plain C++ program: compile it with the
driver's sources and run it. It exits non-zero and prints `FAIL line N: ...` for each failed check.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from book.paths import CSRC

DRIVER = CSRC / "driver"


def test_driver_selftest_passes(tmp_path: Path) -> None:
    program = tmp_path / "ember_driver_selftest"
    sources = [DRIVER / "ember_driver.cpp", DRIVER / "ember_driver_selftest.cpp"]
    build = subprocess.run(
        ["c++", "-std=c++17", "-O1", "-pthread", f"-I{DRIVER}", *map(str, sources), "-o", str(program)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"driver self-test failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
