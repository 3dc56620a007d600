"""The ember stable library: what PyTorch lets a process register only once.

A chapter's backend is rebuilt and retired many times in one process (see
book/builds/builder.py). Some registrations cannot follow it: PyTorch refuses a second
``at::RegisterPrivateUse1HooksInterface`` and a second
``torch::jit::TensorBackendMetaRegistry``, and both are needed from the first
chapter on (on torch 2.13 every backward on an ember tensor asks the
PrivateUse1 hooks). So extension/csrc/runtime/EmberHooks.cpp is compiled once
into ``libember_stable.so``, which registers them and is never retired. Chapter
builds link against it and plug their functions into its slots
(``ember::PlugDefaultGenerator`` and friends, runtime/EmberHooks.h); retiring a
build unplugs them again.

Like the driver library, it is content-addressed in the build cache (keyed by
the toolchain, its sources and the driver it links), built once per machine
and loaded with RTLD_GLOBAL before the first chapter build is loaded.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

from torch.utils import cpp_extension

from book.builds import environment, toolchain
from book.paths import CSRC, cache_dir

LIBRARY_NAME = "ember_stable"
SOURCES = ["runtime/EmberHooks.cpp"]
# What the sources include from csrc: a change to any of them rebuilds the library.
HEADERS = ["runtime/EmberHooks.h", "runtime/EmberCheck.h", "driver/ember_driver.h"]
# -O1 -g0: the library is a few forwarding functions, so optimization buys
# nothing measurable, and debug info would only slow the one cold compile.
OPT_FLAGS = ["-O1", "-g0"]


def _torch_lib() -> str:
    return cpp_extension.library_paths()[0]


def _command(source_files: list[Path], driver: Path, output: Path) -> list[str]:
    torch_lib = _torch_lib()
    return (
        ["c++", "-shared", *toolchain.compile_flags(), *OPT_FLAGS, f"-I{CSRC}"]
        + [str(s) for s in source_files]
        + ["-o", str(output)]
        + [f"-L{torch_lib}", "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{torch_lib}"]
        + [f"-L{driver.parent}", "-lember_driver", f"-Wl,-rpath,{driver.parent}"]
    )


def key() -> str:
    """Changes whenever the library must be rebuilt."""
    texts = [(CSRC / name).read_text() for name in SOURCES + HEADERS]
    env = environment.current()
    return env.digest(*OPT_FLAGS, str(env.driver), *texts)


def _build() -> Path:
    driver = environment.current().driver
    return toolchain.compile_once(
        cache_dir() / "stable" / key() / f"lib{LIBRARY_NAME}.so",
        lambda partial: _command([CSRC / s for s in SOURCES], driver, partial),
        "compiling the ember stable library",
        "compiled the ember stable library",
    )


@cache
def library() -> Path:
    """Build (once) and load libember_stable.so; returns its path.

    Loading runs its static initializers, which register ember's PrivateUse1
    hooks and its tensor-metadata serializers with PyTorch. RTLD_GLOBAL: chapter
    builds resolve the slots (``ember::default_generator_slot``, ...) against
    this copy. The library pulls in the driver library it was linked with.
    """
    path = _build()
    ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
    return path


def ldflags() -> list[str]:
    """What a chapter build adds to its link line to use the stable library.

    --no-as-needed: the build records the library as a dependency even when it
    plugs no slot yet, so any process that loads a chapter build (a preload
    check, book.run_isolated's child) gets ember's hooks with it.
    """
    path = library()
    return [
        f"-L{path.parent}",
        "-Wl,--push-state,--no-as-needed",
        f"-l{LIBRARY_NAME}",
        "-Wl,--pop-state",
        f"-Wl,-rpath,{path.parent}",
    ]
