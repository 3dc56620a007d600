"""Build torch_ember._C from every C++ file under csrc/ (see README.md)."""

from __future__ import annotations

import os
from pathlib import Path

# Building imports torch, and an installed torch_ember would load itself into this
# process through its torch.backends entry point (pyproject.toml): a reinstall
# must not depend on the old build loading. Off before torch is imported.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from setuptools.command.build_py import build_py  # noqa: E402
from torch.utils.cpp_extension import (  # noqa: E402
    BuildExtension,
    CppExtension,
    include_paths,
)

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
# PyTorch's PrivateUse1 profiler header includes Kineto's headers by bare name
# (<IActivityProfiler.h>): their folder must be on the include path.
KINETO = Path(include_paths()[0]) / "kineto"


# Every C++ file under csrc is part of the backend, the driver's one file per
# area included (its self-test lives with the tests, in tests/extension/driver).
# Globbing picks up the files later chapters add.
def sources() -> list[str]:
    found = sorted(p.relative_to(CSRC).as_posix() for p in CSRC.rglob("*.cpp"))
    # setuptools wants source paths relative to setup.py.
    return [f"csrc/{name}" for name in found]


class BuildPy(build_py):
    """setuptools' build_py, which also drops modules the package no longer has.

    build_py copies the package into build/lib... and never deletes there, and the wheel takes
    everything in build/lib: a module renamed or deleted in the sources would ship on, stale.
    """

    def run(self) -> None:
        built = Path(self.build_lib) / "torch_ember"
        if built.is_dir():
            for module in built.glob("*.py"):
                if not (HERE / "torch_ember" / module.name).exists():
                    module.unlink()
        super().run()


setup(
    ext_modules=[
        CppExtension(
            name="torch_ember._C",
            sources=sources(),
            include_dirs=[str(CSRC), str(KINETO)],
            # BuildExtension adds -std=c++20 itself (what torch 2.13 is built with).
            # -g0: debug info doubles compile time and nobody steps through a simulator.
            extra_compile_args=["-O2", "-g0"],
        )
    ],
    cmdclass={"build_ext": BuildExtension, "build_py": BuildPy},
)
