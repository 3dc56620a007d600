"""Build torch_ember._C from every C++ file under csrc/ (see README.md)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

# Building imports torch, and an installed torch_ember would load itself into this
# process through its torch.backends entry point (pyproject.toml): a reinstall
# must not depend on the old build loading. Off before torch is imported.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from setuptools.command.build_py import build_py  # noqa: E402
from torch.utils import cpp_extension  # noqa: E402
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
# The PyTorch headers most of csrc's files include, precompiled once (Clang only, see PchBuildExtension):
# otherwise every file parses them again, most of a cold build's time.
PCH_HEADER = HERE / "build_support" / "pch.h"


# Every C++ file under csrc is part of the backend, the driver's one file per
# area included (its self-test lives with the tests, in tests/package/driver).
# Globbing picks up the files later chapters add.
def sources() -> list[str]:
    found = sorted(p.relative_to(CSRC).as_posix() for p in CSRC.rglob("*.cpp"))
    # setuptools wants source paths relative to setup.py.
    return [f"csrc/{name}" for name in found]


# The backend is two libraries. libtorch_ember.so is all of it but the Python bindings, and links
# no Python: a C++ program (an AOTInductor package's runner, extension/runner/) loads it to get
# the ember device. torch_ember._C is the bindings (pybind11, libtorch_python), over it.
BINDINGS = "csrc/bindings/"
CORE = "torch_ember.libtorch_ember"


def core_sources() -> list[str]:
    return [name for name in sources() if not name.startswith(BINDINGS)]


def binding_sources() -> list[str]:
    return [name for name in sources() if name.startswith(BINDINGS)]


class BuildPy(build_py):
    """setuptools' build_py, which also drops modules the package no longer has.

    build_py copies the package into build/lib... and never deletes there, and the wheel takes
    everything in build/lib: a module renamed or deleted in the sources would ship on, stale.
    Sub-packages (torch_ember.compiler, torch_ember.device_module) are pruned as the top level is.
    """

    def run(self) -> None:
        build_lib = Path(self.build_lib)
        for module in sorted((build_lib / "torch_ember").rglob("*.py")):
            if not (HERE / module.relative_to(build_lib)).exists():
                module.unlink()
        super().run()


def is_clang(compiler: str) -> bool:
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return "clang" in done.stdout


class PchBuildExtension(BuildExtension):
    """BuildExtension, which first precompiles PCH_HEADER and has every file include it (-include-pch).

    Clang refuses a PCH built with other flags or from headers changed since, so the PCH is compiled with
    exactly the files' command line (read from the call that writes build.ninja) and again whenever that
    or a header it holds changes. With GCC (whose .gch is silently ignored on any mismatch), a compiler
    launcher in CXX, or if precompiling fails, the files compile as before, without a PCH.
    """

    def get_ext_filename(self, fullname: str) -> str:
        # The core library is a plain shared library (no Python ABI tag): the runner links it by name.
        # (distutils asks with the full name or with its last part, and keeps the file's name.)
        if fullname in (CORE, CORE.rpartition(".")[2]):
            return str(Path(*fullname.split(".")[:-1], "libtorch_ember.so"))
        return super().get_ext_filename(fullname)

    def build_extensions(self) -> None:
        # _C links the core library, found beside it at run time ($ORIGIN).
        core_dir = str(Path(self.get_ext_fullpath(CORE)).parent)
        for extension in self.extensions:
            if extension.name != CORE:
                extension.library_dirs = [*extension.library_dirs, core_dir]
        return self._build_extensions_with_pch()

    def _build_extensions_with_pch(self) -> None:
        # torch's private function (torch is pinned, pyproject.toml): if it changes, no PCH, not a failure.
        write_and_compile = getattr(cpp_extension, "_write_ninja_file_and_compile_objects", None)
        if write_and_compile is None:
            return super().build_extensions()

        def with_pch(**kwargs):
            if {"cflags", "post_cflags", "build_directory"} <= kwargs.keys():
                kwargs["post_cflags"] = [*kwargs["post_cflags"], *self.pch_flags(**kwargs)]
            return write_and_compile(**kwargs)

        cpp_extension._write_ninja_file_and_compile_objects = with_pch
        try:
            super().build_extensions()
        finally:
            cpp_extension._write_ninja_file_and_compile_objects = write_and_compile

    def pch_flags(self, cflags: list[str], post_cflags: list[str], build_directory: str, **_) -> list[str]:
        compiler = cpp_extension.get_cxx_compiler()
        if not PCH_HEADER.is_file() or not is_clang(compiler):
            return []
        # One PCH per command line: the two libraries' flags differ (TORCH_EXTENSION_NAME).
        flags = hashlib.sha256(" ".join([*cflags, *post_cflags]).encode()).hexdigest()[:12]
        pch = Path(build_directory) / "pch" / flags / "pch.h.pch"
        # The files' rule is `$cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags` (flags shell-quoted).
        # -fpch-instantiate-templates: the headers' template instantiations are done once, in the PCH.
        command = [
            compiler,
            *shlex.split(" ".join(cflags)),
            "-x",
            "c++-header",
            str(PCH_HEADER),
            "-o",
            str(pch.with_suffix(".partial")),
            *shlex.split(" ".join(post_cflags)),
            "-fpch-instantiate-templates",
        ]
        stamp = pch.with_suffix(".json")  # the command and the inputs (mtime, size) the PCH was built from
        if not (
            pch.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == _pch_stamp(command, pch)
        ):
            pch.parent.mkdir(parents=True, exist_ok=True)
            stamp.unlink(missing_ok=True)
            depfile = pch.with_suffix(".d")
            done = subprocess.run([*command, "-MD", "-MF", str(depfile)], capture_output=True, text=True)
            if done.returncode != 0 or done.stderr.strip():
                print(f"warning: building without a precompiled header, precompiling failed:\n{done.stderr}")
                return []
            pch.with_suffix(".partial").replace(pch)
            stamp.write_text(json.dumps(_pch_stamp(command, pch)))
        return ["-include-pch", shlex.quote(str(pch))]


def _pch_stamp(command: list[str], pch: Path) -> dict:
    """What the PCH was built by and from: clang checks each input's mtime and size when it loads it."""
    depfile = pch.with_suffix(".d")
    if not depfile.is_file():
        return {}
    # Make syntax: `target: input input \` lines, spaces inside a name escaped.
    names = re.split(r"(?<!\\)\s+", depfile.read_text().replace("\\\n", " ").strip())[1:]
    inputs = {}
    for name in (name.replace("\\ ", " ") for name in names):
        try:
            status = os.stat(name)
        except OSError:
            return {}
        inputs[name] = [status.st_mtime_ns, status.st_size]
    return {"command": command, "inputs": inputs}


def core_library() -> CppExtension:
    core = CppExtension(
        name=CORE,
        sources=core_sources(),
        include_dirs=[str(CSRC), str(KINETO)],
        # BuildExtension adds -std=c++20 itself (what torch 2.13 is built with).
        # -g0: debug info doubles compile time and nobody steps through a simulator.
        extra_compile_args=["-O2", "-g0"],
    )
    # CppExtension links libtorch_python, for pybind11 modules: the core has no Python.
    core.libraries = [name for name in core.libraries if name != "torch_python"]
    return core


setup(
    ext_modules=[
        core_library(),
        CppExtension(
            name="torch_ember._C",
            sources=binding_sources(),
            include_dirs=[str(CSRC), str(KINETO)],
            extra_compile_args=["-O2", "-g0"],
            libraries=[":libtorch_ember.so"],
            extra_link_args=["-Wl,-rpath,$ORIGIN"],
        ),
    ],
    cmdclass={"build_ext": PchBuildExtension, "build_py": BuildPy},
)
