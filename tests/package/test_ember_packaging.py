"""The package as a product: its version, its build metadata, and the README's API table.

Building a wheel compiles the whole backend (minutes), too slow for CI. What is checked here
is cheaper and covers the same promises: the installed distribution came from a wheel (pip
builds one for `pip install ./extension`, with `_C` and the entry point in it), and the build
backend's wheel metadata is right (`prepare_metadata_for_build_wheel`, which runs setup.py
without compiling).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from email.parser import Parser
from pathlib import Path
from types import SimpleNamespace

import torch
import torch_ember
from packaging.version import Version

EXTENSION = Path(__file__).resolve().parents[2] / "extension"
DISTRIBUTION = "torch-ember"


def python_in_extension(*args: str) -> subprocess.CompletedProcess[str]:
    """Python run in extension/ (where setup.py is), without autoloading the installed backend."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=EXTENSION,
        env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_version_is_the_installed_distributions() -> None:
    assert Version(torch_ember.__version__) == Version(importlib.metadata.version(DISTRIBUTION))


def test_pyproject_reads_the_version_from_the_package() -> None:
    # One source: pyproject.toml has no version of its own.
    project = tomllib.loads((EXTENSION / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "torch_ember.__version__"}
    source = (EXTENSION / "torch_ember" / "__init__.py").read_text()
    assert f'__version__ = "{torch_ember.__version__}"' in source  # a literal: read without importing


def test_the_python_it_requires_is_the_one_the_readme_names_and_lint_checks() -> None:
    required = tomllib.loads((EXTENSION / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = re.fullmatch(r">=3\.(\d+)", required)
    assert minimum is not None, required
    readme = (EXTENSION.parent / "README.md").read_text()
    assert f"What the machine needs: Python 3.{minimum[1]}," in readme
    makefile = (EXTENSION.parent / "Makefile").read_text()
    assert f"--target-version py3{minimum[1]}" in makefile
    assert sys.version_info >= (3, int(minimum[1]))


def test_the_installed_package_was_built_as_a_platform_wheel() -> None:
    distribution = importlib.metadata.distribution(DISTRIBUTION)
    wheel = distribution.read_text("WHEEL")
    assert wheel is not None, "torch-ember was not installed from a wheel"
    assert "Root-Is-Purelib: false" in wheel  # it holds a compiled module
    files = {file.as_posix() for file in distribution.files or []}
    assert any(re.fullmatch(r"torch_ember/_C\..*\.so", name) for name in files), sorted(files)
    assert "torch_ember/bench.py" in files
    entry_points = distribution.entry_points.select(group="torch.backends")
    assert [(ep.name, ep.value) for ep in entry_points] == [("ember", "torch_ember:_autoload")]


def _source_modules() -> set[str]:
    return {path.relative_to(EXTENSION).as_posix() for path in (EXTENSION / "torch_ember").rglob("*.py")}


def test_the_installed_package_holds_exactly_the_source_modules() -> None:
    # setup.py's BuildPy: a module deleted from the sources must not ship on from an old build directory.
    distribution = importlib.metadata.distribution(DISTRIBUTION)
    installed = {
        file.as_posix()
        for file in distribution.files or []
        if file.parts[0] == "torch_ember" and file.suffix == ".py"
    }
    assert installed == _source_modules()


def test_build_py_drops_stale_modules_from_sub_packages_too(tmp_path: Path) -> None:
    # An old build directory: a deleted module at the top, one in a sub-package, a deleted sub-package.
    stale = ["torch_ember/gone.py", "torch_ember/compiler/gone.py", "torch_ember/gone_package/__init__.py"]
    for name in stale:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    done = python_in_extension("setup.py", "-q", "build_py", "--build-lib", str(tmp_path))
    assert done.returncode == 0, done.stderr
    built = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*.py")}
    assert built == _source_modules()


def test_the_build_backend_writes_the_wheels_metadata(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from setuptools import build_meta\n"
        "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))\n"
    )
    done = python_in_extension("-c", script, str(tmp_path))
    assert done.returncode == 0, done.stderr
    dist_info = tmp_path / done.stdout.split()[-1]
    metadata = Parser().parsestr((dist_info / "METADATA").read_text())
    assert metadata["Name"] == DISTRIBUTION
    assert metadata["Version"] == torch_ember.__version__
    # The wheel runs only with the torch it was compiled against.
    assert metadata.get_all("Requires-Dist") == [f"torch=={torch.__version__.split('+')[0]}"]
    assert "ember = torch_ember:_autoload" in (dist_info / "entry_points.txt").read_text()


# -- The README's table of torch.ember next to torch.cuda ---------------------------------------


def _api_table() -> list[tuple[list[str], list[str]]]:
    """(names torch.ember has, names it does not) of each row of the README's API table."""
    text = (EXTENSION / "README.md").read_text()
    section = text.split("## `torch.ember` next to `torch.cuda`", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| Area") or line.startswith("| ---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 4, line
        has, absent = (re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cell) for cell in cells[1:3])
        rows.append((has, absent))
    assert len(rows) > 10, "the README's API table was not found"
    return rows


def _claimed() -> tuple[set[str], set[str]]:
    rows = _api_table()
    return {name for has, _ in rows for name in has}, {name for _, absent in rows for name in absent}


def _wrong_claims(module: object) -> tuple[list[str], list[str]]:
    """(names the table says `module` has and it lacks, names it says it lacks and it has)."""
    has, absent = _claimed()
    return (
        sorted(name for name in has if not hasattr(module, name)),
        sorted(name for name in absent if hasattr(module, name)),
    )


def test_torch_ember_has_every_name_the_table_claims_and_none_it_denies() -> None:
    missing, present = _wrong_claims(torch.ember)
    assert not missing, f"README says torch.ember has {missing}: it does not"
    assert not present, (
        f"README says torch.ember lacks {present}: it has them, move them to the second column"
    )


def test_the_claims_check_catches_a_wrong_claim() -> None:
    has, absent = _claimed()
    honest = SimpleNamespace(**dict.fromkeys(has))
    assert _wrong_claims(honest) == ([], [])
    del honest.memory_allocated
    honest.CUDAGraph = None
    assert _wrong_claims(honest) == (["memory_allocated"], ["CUDAGraph"])


def test_the_table_covers_every_public_name_of_torch_cuda_and_torch_ember() -> None:
    has, absent = _claimed()
    assert not has & absent
    unlisted = sorted(set(torch.cuda.__all__) - has - absent)
    assert not unlisted, f"torch.cuda names missing from the README's table: {unlisted}"
    unlisted = sorted(set(torch.ember.__all__) - has)
    assert not unlisted, f"torch.ember.__all__ names missing from the README's table: {unlisted}"
