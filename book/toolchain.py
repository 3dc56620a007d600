"""Compiler flags, the precompiled prelude header, and the ember driver library.

Two things make a chapter build fast on a 2-core machine:

* the prelude (book/cpp/prelude.h) is precompiled once per machine into a GCC
  ``.gch`` with exactly the flags `load_inline` compiles with (GCC silently
  ignores a PCH built with other flags);
* the simulated driver (extension/csrc/driver) is a separate shared library,
  built once. It also outlives every chapter build loaded into the process,
  which is what lets `book.build()` check that no device memory is still alive
  before it unloads a build.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import torch
from torch.utils import cpp_extension

from book.paths import BOOK_CPP, CSRC, cache_dir
from book.progress import Status

# -fno-gnu-unique: without it GCC marks some template statics from PyTorch's
# headers STB_GNU_UNIQUE, and the dynamic linker would make every later build
# share the first build's copies, which book.builder finalizes when it retires
# that build. With it, each build owns its statics.
#
# -DNDEBUG: the release libtorch is built with it, and some header classes
# change layout without it (at::RecordFunction grows a debug-only member), so a
# build without it would disagree with libtorch about those types. setuptools
# builds of the finished extension get it from Python's CFLAGS too.
EXTRA_CFLAGS = ["-fno-gnu-unique", "-Winvalid-pch", "-DNDEBUG"]


def link_flags() -> list[str]:
    """gold where binutils has it: it links a chapter's library in about 0.3 s, against ~0.8 s for ld.bfd."""
    return ["-fuse-ld=gold"] if shutil.which("ld.gold") else []


DRIVER_SOURCES = ["driver/ember_driver.cpp"]


def _digest(*chunks: str | bytes) -> str:
    h = hashlib.sha256()
    for chunk in chunks:
        h.update(chunk.encode() if isinstance(chunk, str) else chunk)
        h.update(b"\0")
    return h.hexdigest()[:12]


@cache
def compile_flags() -> list[str]:
    """The flags `load_inline` uses for our builds, minus the extension name."""
    flags = ["-DTORCH_API_INCLUDE_EXTENSION_H"]
    for include in cpp_extension.include_paths():
        flags += ["-isystem", include]
    flags += ["-isystem", sysconfig.get_paths()["include"]]
    flags += ["-fPIC", f"-std={_cxx_standard()}"]
    return flags + EXTRA_CFLAGS


def _cxx_standard() -> str:
    # load_inline picks the standard; read it back from torch rather than guess.
    source = Path(cpp_extension.__file__).read_text()
    return "c++20" if "-std=c++20" in source else "c++17"


@cache
def toolchain_key() -> str:
    """Changes whenever a build product made by another toolchain is stale."""
    compiler = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout
    return _digest(torch.__version__, compiler, *compile_flags())


def prelude_text() -> str:
    return (BOOK_CPP / "prelude.h").read_text()


def compile_once(output: Path, command: Callable[[Path], list[str]], doing: str, done: str) -> Path:
    """Make `output` by running ``command(partial)`` unless it exists; return it.

    The book's compile-once products (precompiled prelude, driver, stable
    library) live in content-addressed folders of the build cache, so an
    existing file is always current. The compiler writes a partial file unique
    to this process, renamed into place when complete: test processes may build
    the same product at once, and none ever sees half a file.
    """
    if output.exists():
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f"{output.name}.{os.getpid()}.partial")
    with Status(f"{doing} (once per machine)") as status:
        result = subprocess.run(command(partial), capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{doing} failed:\n{result.stderr[-4000:]}")
        partial.rename(output)
        status.finish(f"✔ {done}", show_in_batch=False, detail=f"in {status.elapsed:.1f} s")
    return output


# Defined when compiling a unit that uses torch::autograd (book.units): the
# prelude then also includes chapter 06's autograd headers. They are left out
# of the other units' precompiled header because every unit pays for what a PCH
# holds (GCC instantiates the header's pending templates in each unit): with
# them an empty unit takes ~4 s, without ~2 s.
AUTOGRAD_FLAG = "-DEMBER_BOOK_AUTOGRAD"


def prelude_dir(autograd: bool = False) -> Path:
    """A directory holding prelude.h and its up-to-date prelude.h.gch.

    Both precompiled variants (with and without `AUTOGRAD_FLAG`) are made the
    first time either is asked for, side by side, so no later build waits for one.
    """
    prelude = prelude_text()
    targets = {
        variant: cache_dir() / "pch" / _digest(toolchain_key(), prelude, *_variant_flags(variant))
        for variant in (False, True)
    }
    missing = [variant for variant, target in targets.items() if not (target / "prelude.h.gch").exists()]
    if missing:  # asked before every build: no writes when current
        with ThreadPoolExecutor(max_workers=len(missing)) as pool:
            list(pool.map(lambda variant: _precompile(targets[variant], variant), missing))
    return targets[autograd]


def _variant_flags(autograd: bool) -> list[str]:
    return [AUTOGRAD_FLAG] if autograd else []


def _precompile(target: Path, autograd: bool) -> None:
    target.mkdir(parents=True, exist_ok=True)
    (target / "prelude.h").write_text(prelude_text())
    variant = " (autograd units)" if autograd else ""
    compile_once(
        target / "prelude.h.gch",
        lambda partial: (
            ["c++", "-x", "c++-header", str(target / "prelude.h"), "-o", str(partial)]
            + compile_flags()
            + _variant_flags(autograd)
        ),
        f"precompiling the prelude header{variant}",
        f"precompiled the prelude header{variant}",
    )


@cache
def driver_library() -> Path:
    """Build (once) libember_driver.so, the simulated device driver (book.driver loads it)."""
    sources = [CSRC / s for s in DRIVER_SOURCES]
    headers = sorted((CSRC / "driver").glob("*.h"))
    key = _digest(toolchain_key(), *(p.read_text() for p in sources + headers))
    return compile_once(
        cache_dir() / "driver" / key / "libember_driver.so",
        lambda partial: (
            ["c++", "-std=c++17", "-O2", "-fPIC", "-shared", f"-I{CSRC}"]
            + [str(s) for s in sources]
            + ["-o", str(partial)]
        ),
        "building the ember driver",
        "built the ember driver",
    )


def clean_cache() -> None:
    """Remove every build product (the next build is cold again)."""
    shutil.rmtree(cache_dir(), ignore_errors=True)
