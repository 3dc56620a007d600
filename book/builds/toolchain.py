"""Compiler flags, the precompiled prelude header, and the ember driver library.

Two things make a chapter build fast on a 2-core machine:

* the prelude (book/builds/cpp/prelude.h) is precompiled once per machine, and a
  chapter's translation units compile against it. With Clang on the machine,
  units are compiled by Clang (``unit_compiler()``): its precompiled header
  holds the headers' template instantiations (``-fpch-instantiate-templates``),
  where GCC redoes them in every unit that includes its ``.gch`` (about 2.4 s
  of CPU time per unit, before the unit's own code). Without Clang, GCC
  compiles them with exactly the flags `load_inline` uses (GCC silently
  ignores a PCH built with other flags). The objects link the same way: Clang
  uses GCC's C++ library and ABI.
* the simulated driver (extension/csrc/driver) is a separate shared library,
  built once. It also outlives every chapter build loaded into the process,
  which is what lets `book.build()` check that no device memory is still alive
  before it unloads a build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import torch
from torch.utils import cpp_extension

from book.builds.progress import Status
from book.paths import BOOK_CPP, CSRC, cache_dir

# -fno-gnu-unique: without it GCC marks some template statics from PyTorch's
# headers STB_GNU_UNIQUE, and the dynamic linker would make every later build
# share the first build's copies, which book.builds.builder finalizes when it retires
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


DRIVER = CSRC / "driver"


def driver_files() -> list[Path]:
    """The driver's sources: its public header, its private one and one .cpp per area (sorted)."""
    return sorted(p for p in DRIVER.iterdir() if p.suffix in (".cpp", ".h"))


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
    # PyTorch's PrivateUse1 profiler header includes Kineto's headers by bare name
    # (<IActivityProfiler.h>), so their folder is on the path too (chapter 16).
    flags += ["-isystem", str(Path(cpp_extension.include_paths()[0]) / "kineto")]
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
    versions = [
        subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
        for compiler in sorted({"c++", unit_compiler()})
    ]
    return _digest(
        torch.__version__,
        _headers_identity(),
        *versions,
        *compile_flags(),
        *unit_flags(False),
        *unit_flags(True),
    )


def _headers_identity() -> str:
    """Which installation of PyTorch's headers this is, not only which version.

    A precompiled header remembers the header files it holds by identity: after
    torch is reinstalled (a new venv at the same path, as on a CI machine),
    Clang accepts an old PCH whose contents still match but compiles a second
    copy of every `#pragma once` header a unit includes beyond the prelude
    ("redefinition of 'OptionalRef'"). The include directory's inode and mtime
    change with every installation.
    """
    include = Path(torch.__file__).parent / "include"
    stat = include.stat()
    return f"{stat.st_ino}:{stat.st_mtime_ns}"


@cache
def unit_compiler() -> str:
    """The compiler of a chapter's translation units: $EMBER_BOOK_CXX, else Clang if installed, else c++."""
    chosen = os.environ.get("EMBER_BOOK_CXX")
    if chosen:
        return chosen
    candidates = ["clang++", *sorted(Path("/usr/bin").glob("clang++-[0-9]*"), reverse=True)]
    for candidate in candidates:
        found = shutil.which(str(candidate))
        if found:
            return found
    return "c++"


def is_clang() -> bool:
    """Whether the chapters' units are compiled by Clang (else GCC)."""
    return "clang" in Path(unit_compiler()).name


# Clang compiles kernel units at -O1 with the vectorizers: the kernels need
# optimizing (at -O0 a chapter's native add is slower than the CPU fallback it
# replaces), and -O2 costs ~25 % more compile time for no gain the book
# measures. Units that use torch::autograd (the `autograd` variant) hold graph
# bookkeeping, not loops, and compile at -O0: -O1 more than triples their time
# (one torch::autograd::Function costs ~5 s). GCC compiles every unit at -O0
# and optimizes the kernels' loops only (`#pragma GCC optimize` in the sources).
_CLANG_FLAGS = ["-fpch-instantiate-templates", "-fpch-validate-input-files-content"]
_CLANG_KERNEL_FLAGS = ["-O1", "-fvectorize", "-fslp-vectorize"]


def unit_flags(autograd: bool = False) -> list[str]:
    """The flags of a prelude PCH variant and of the units using it: load_inline's, adapted to the compiler."""
    if not is_clang():
        return compile_flags()
    # -fno-gnu-unique is GCC's (Clang never emits STB_GNU_UNIQUE symbols).
    flags = [flag for flag in compile_flags() if flag != "-fno-gnu-unique"] + _CLANG_FLAGS
    return flags if autograd else flags + _CLANG_KERNEL_FLAGS


def pch_name() -> str:
    """GCC finds prelude.h.gch beside prelude.h by itself; Clang is given its .pch (`pch_flags`)."""
    return "prelude.h.pch" if is_clang() else "prelude.h.gch"


def pch_flags(autograd: bool) -> list[str]:
    """The flags that make a unit use the precompiled prelude of its variant."""
    directory = prelude_dir(autograd)
    flags = [f"-I{directory}", *_variant_flags(autograd)]
    if is_clang():
        flags += ["-include-pch", str(directory / pch_name())]
    return flags


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
    # A process already making it (a second test worker, a second kernel): wait for it, then use its file.
    with claim(output):
        if output.exists():
            return output
        partial = output.with_name(f"{output.name}.{os.getpid()}.partial")
        with Status(f"{doing} (once per machine)") as status:
            result = subprocess.run(command(partial), capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"{doing} failed:\n{result.stderr[-4000:]}")
            partial.rename(output)
            status.finish(f"✔ {done}", show_in_batch=False, detail=f"in {status.elapsed:.1f} s")
    return output


@contextlib.contextmanager
def claim(output: Path, wait: bool = True) -> Iterator[bool]:
    """Hold the lock that says "this process is making `output`" (a file in the cache's ``locks`` folder).

    Writers never need it for correctness (they write private files and rename them into place):
    it only keeps two processes from compiling the same product at once, so that the second one
    waits for the first one's file instead of spending the same CPU again. With ``wait=False`` it
    yields False at once when another process holds it. The lock goes with the process, so a
    compiler that dies leaves nothing held.
    """
    locks = cache_dir() / "locks"  # not beside `output`: its folder holds only finished products
    locks.mkdir(exist_ok=True)
    with open(locks / f"{_digest(str(output))}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# Defined when compiling a unit that uses torch::autograd (book.builds.units): the
# prelude then also includes chapter 08's autograd headers. They are left out
# of the other units' precompiled header because every unit pays for what a PCH
# holds (GCC instantiates the header's pending templates in each unit): with
# them an empty unit takes ~4 s, without ~2 s.
AUTOGRAD_FLAG = "-DEMBER_BOOK_AUTOGRAD"


def prelude_dir(autograd: bool = False) -> Path:
    """A directory holding prelude.h and its up-to-date precompiled header (`pch_name()`).

    Both precompiled variants (with and without `AUTOGRAD_FLAG`) are made the
    first time either is asked for, side by side, so no later build waits for one.
    """
    prelude = prelude_text()
    targets = {
        variant: cache_dir()
        / "pch"
        / _digest(toolchain_key(), prelude, *unit_flags(variant), *_variant_flags(variant))
        for variant in (False, True)
    }
    missing = [variant for variant, target in targets.items() if not (target / pch_name()).exists()]
    if missing:  # asked before every build: no writes when current
        with ThreadPoolExecutor(max_workers=len(missing)) as pool:
            list(pool.map(lambda variant: _precompile(targets[variant], variant), missing))
    return targets[autograd]


def _variant_flags(autograd: bool) -> list[str]:
    return [AUTOGRAD_FLAG] if autograd else []


def _precompile(target: Path, autograd: bool) -> None:
    target.mkdir(parents=True, exist_ok=True)
    header = target / "prelude.h"
    if not header.exists() or header.read_text() != prelude_text():
        # Atomically, and never rewritten when current: Clang's PCH records the
        # header's mtime, and another process may have just precompiled it.
        partial = header.with_name(f"prelude.h.{os.getpid()}.partial")
        partial.write_text(prelude_text())
        partial.rename(header)
    variant = " (autograd units)" if autograd else ""
    compile_once(
        target / pch_name(),
        lambda partial: (
            [unit_compiler(), "-x", "c++-header", str(target / "prelude.h"), "-o", str(partial)]
            + unit_flags(autograd)
            + _variant_flags(autograd)
        ),
        f"precompiling the prelude header{variant}",
        f"precompiled the prelude header{variant}",
    )


@cache
def driver_library() -> Path:
    """Build (once) libember_driver.so, the simulated device driver (book.builds.driver loads it).

    Content-addressed by every file of the driver (names and texts), so adding,
    renaming or editing one rebuilds it. Its translation units (one per area)
    compile side by side, then link.
    """
    files = driver_files()
    key = _digest(toolchain_key(), *(f"{p.name}\n{p.read_text()}" for p in files))
    output = cache_dir() / "driver" / key / "libember_driver.so"
    objects = output.parent / f"objects.{os.getpid()}"  # this process's, as compile_once's partial file

    def compile_object(source: Path) -> Path:
        target = objects / f"{source.stem}.o"
        command = ["c++", "-std=c++17", "-O2", "-fPIC", f"-I{CSRC}", "-c", str(source), "-o", str(target)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"building the ember driver failed:\n{result.stderr[-4000:]}")
        return target

    def link(partial: Path) -> list[str]:
        objects.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            built = list(pool.map(compile_object, [p for p in files if p.suffix == ".cpp"]))
        return ["c++", "-shared", *map(str, built), "-o", str(partial)]

    try:
        return compile_once(output, link, "building the ember driver", "built the ember driver")
    finally:
        shutil.rmtree(objects, ignore_errors=True)


def clean_cache() -> None:
    """Remove every build product (the next build is cold again)."""
    shutil.rmtree(cache_dir(), ignore_errors=True)
