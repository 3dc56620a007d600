"""`book.build()`: compile a chapter's backend with `load_inline` and load it.

A build holds every C++ part of the earlier chapters (read from their
notebooks) and the parts this chapter's cells have staged, each introduced by a
``#line`` directive naming its notebook and cell, after the precompiled prelude
and the driver's header. It is split into one translation unit per chapter
(`book.units`): `load_inline` compiles this chapter's and links the others'
objects, which are compiled once per machine. Builds are content-addressed: the
same sources map to the same build directory, so an unchanged build loads
without compiling.

A kernel can build more than once (chapters add an operator and rebuild).
PyTorch cannot hold two copies of one backend, so before loading a new build
we retire the previous one: we run its static destructors with
``__cxa_finalize``, which deregisters its kernels and fallbacks, but keep the
library mapped, because the dispatcher remembers the C++ signature of the first
kernel ever registered per operator and that record points into the library.
Retiring is only safe when no device memory allocated through the old build is
alive (the deleters live in it), which the driver, a separate and stable
library, can tell us. A retired build that is loaded again is loaded from a
fresh copy of its file, since dlopen would hand back the finalized one.
"""

from __future__ import annotations

import ctypes
import gc
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

from book import compile_errors, preload, stable, toolchain, units
from book import driver as ember_driver
from book.cells import SESSION, CppPart
from book.paths import CSRC, cache_dir
from book.progress import Status

# Linked into every build, as a unit of its own. Two process-wide slots point at objects the build
# owns, which are destroyed when the build is retired: clear them in a static
# destructor, which runs then. (A build that registers them sets them again.)
_EPILOGUE = """\
namespace {
struct BookUnloadReset {
  ~BookUnloadReset() {
    c10::impl::device_guard_impl_registry[static_cast<size_t>(
        c10::DeviceType::PrivateUse1)].store(nullptr);
    // Priority 0, the priority ember registers its allocator with.
    c10::SetAllocator(c10::DeviceType::PrivateUse1, nullptr, /*priority=*/0);
  }
} book_unload_reset;
} // namespace

// Lets book.builder run this library's static destructors without unmapping it.
extern "C" void* book_dso_handle() { return &__dso_handle; }
"""


@dataclass(repr=False)
class Build:
    """A compiled chapter backend."""

    chapter: str
    parts: list[CppPart]
    name: str
    directory: Path
    source: str
    compiled: bool = False  # False: it came from the build cache
    seconds: float = 0.0
    own: units.Unit | None = field(default=None, repr=False)  # compiled by load_inline
    linked: list[units.Unit] = field(default_factory=list, repr=False)  # from the object cache
    _handle: ctypes.CDLL | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        # Shown when a cell ends with book.build(): no hashes or paths (nbval compares it).
        return f"<ember build for chapter {self.chapter[:2]}: {len(self.parts)} C++ parts>"

    @property
    def library(self) -> Path:
        return self.directory / f"{self.name}.so"

    @property
    def chapters(self) -> list[str]:
        return sorted({p.chapter for p in self.parts})

    def location(self, line: int) -> str:
        """Map a line of the generated main.cpp back to `chapter.ipynb[part]:line`."""
        current, offset = "main.cpp", 0
        for number, text in enumerate(self.source.splitlines(), start=1):
            if number > line:
                break
            if text.startswith("#line 1 "):
                current, offset = text.split('"')[1], number
        return f"{current}:{line - offset}" if offset else f"main.cpp:{line}"


_LOADED: Build | None = None
# The namespaces a build defines operators in (TORCH_LIBRARY or TORCH_LIBRARY_FRAGMENT).
_LIBRARY = re.compile(r"\bTORCH_LIBRARY(?:_FRAGMENT)?\(\s*(\w+)\s*,")
# Names of the builds this process has loaded (and maybe finalized) before.
_EVER_LOADED: set[str] = set()


def translation_unit(parts: list[CppPart]) -> str:
    """The build's own unit: what `load_inline` compiles (see `book.units` for the split)."""
    return units.split(parts)[-1].text


def epilogue_unit() -> units.Unit:
    return units.Unit("epilogue", (), units.source_text([], ("book/builder.py[epilogue]", _EPILOGUE)))


def _describe(parts: list[CppPart], chapter: str) -> str:
    chapters = sorted({p.chapter[:2] for p in parts})
    if len(chapters) > 1:
        source = f"chapters {chapters[0]}–{chapters[-1]}"
    else:
        source = f"chapter {chapters[0]}" if chapters else "no chapter"
    noun = "part" if len(parts) == 1 else "parts"
    return f"ember backend for chapter {chapter[:2]} ({len(parts)} C++ {noun} from {source})"


def build(
    *exercises: str, own: bool = True, parts: list[CppPart] | None = None, chapter: str | None = None
) -> Build:
    """Compile (or fetch from the cache) and load this chapter's backend.

    ``book.build()`` builds the earlier chapters' parts and this chapter's staged
    ones. ``book.build("exercise_x")`` adds staged exercise parts;
    ``own=False`` leaves this chapter's own parts out. `parts`/`chapter` name an
    exact part list instead (tests: ``Chapter.of(N).parts_through()``).
    """
    global _LOADED
    parts = SESSION.parts(exercises, own=own) if parts is None else parts
    chapter = chapter or SESSION.chapter or (parts[-1].chapter if parts else "00")
    if not parts:
        raise ValueError("there are no %%cpp parts to build yet")

    split = units.split(parts)
    own, linked = split[-1], [*split[:-1], epilogue_unit()]
    source = own.text
    driver = toolchain.driver_library()
    ember_driver.driver()  # loaded (RTLD_GLOBAL) before any build that links against it
    stable.library()  # PrivateUse1 hooks, registered once, before any build loads; builds plug into them
    # What gets compiled and linked beyond `source`: the prelude, and the driver
    # (its header is included; its directory, named by its hash, is linked).
    key = toolchain._digest(
        toolchain.toolchain_key(),
        toolchain.prelude_text(),
        str(driver),
        *stable.ldflags(),
        *(unit.text for unit in linked),
        source,
    )
    name = f"ember_{chapter[:2]}_{key}"
    description = _describe(parts, chapter)
    if _LOADED is not None and _LOADED.name == name:
        with Status(f"loading the {description}") as status:
            status.finish(f"✔ {description} is already loaded")
        return _LOADED

    directory = cache_dir() / "builds" / name
    cached = (directory / f"{name}.so").exists()
    previous = _LOADED
    if previous is not None:
        _unload(previous)
        _LOADED = None

    new = Build(chapter, parts, name, directory, source, compiled=not cached, own=own, linked=linked)
    doing = f"{'loading' if cached else 'compiling'} the {description}"
    try:
        with Status(doing) as status:
            if name in _EVER_LOADED:  # dlopen would hand back the finalized copy
                _load_library(new)
            else:
                _compile_and_load(new, driver)
            _EVER_LOADED.add(name)
            new.seconds = status.elapsed
            verb = "compiled" if new.compiled else "loaded from the build cache"
            status.finish(f"✔ {description} is loaded", detail=f"{verb} in {new.seconds:.1f} s")
    except BaseException:
        if previous is not None:  # put the reader's last working backend back
            _load_library(previous)
            _LOADED = previous
        raise
    _LOADED = new
    return new


def compile_library(name: str, source: str, directory: Path, extra_ldflags: list[str] = ()) -> Path:
    """Compile one translation unit against the precompiled prelude and the driver, without loading it.

    The book's only `load_inline` call: chapter builds and the trace probe both come through here, so
    they share flags, headers and the precompiled prelude. Returns the library's path.
    """
    driver = toolchain.driver_library()
    directory.mkdir(parents=True, exist_ok=True)
    with preload.compile_only():  # the caller decides when (and whether) the library is loaded
        load_inline(
            name,
            cpp_sources=[source],
            build_directory=str(directory),
            is_python_module=False,
            no_implicit_headers=True,
            extra_cflags=toolchain.EXTRA_CFLAGS,
            extra_include_paths=[str(toolchain.prelude_dir()), str(CSRC)],
            extra_ldflags=[f"-L{driver.parent}", "-lember_driver", f"-Wl,-rpath,{driver.parent}"]
            + list(extra_ldflags),
        )
    return directory / f"{name}.so"


def _compile_and_load(new: Build, driver: Path) -> None:
    summary = f"C++ build of chapter {new.chapter[:2]} failed"
    # The other chapters' units come from the object cache (compiled there, in
    # parallel, the first time a build on this machine needs them).
    objects = units.compile_objects(new.linked, summary)
    try:
        compile_library(new.name, new.source, new.directory, [*stable.ldflags(), *map(str, objects)])
    except RuntimeError as error:
        if "Error building extension" not in str(error):
            raise
        sources = {part.origin: part.source for part in new.parts}
        raise compile_errors.from_build_log(str(error), summary, sources) from None
    if new.own is not None:
        units.keep_object(new.own, new.directory / "main.o")
    # C++ that throws while the library loads would abort this process: try it in a child first.
    # (A library dlopen refuses, e.g. an undefined symbol, is reported from there too.)
    preload.check(new.library, new.chapter, [driver, stable.library()])  # cached next to the build
    torch.ops.load_library(str(new.library))
    new._handle = ctypes.CDLL(str(new.library))


def _load_library(build: Build) -> None:
    # A library this process finalized stays mapped, and dlopen of the same file
    # (same inode) returns it without running its initializers: load a fresh copy.
    copy = Path(tempfile.mkdtemp(prefix="ember-reload-")) / build.library.name
    shutil.copyfile(build.library, copy)
    torch.ops.load_library(str(copy))
    build._handle = ctypes.CDLL(str(copy))


def live_device_allocations() -> tuple[int, int]:
    """(allocations, bytes) alive on all ember devices, per the driver."""
    count = nbytes = 0
    for device in range(ember_driver.device_count()):
        stats = ember_driver.stats(device)
        count += stats.live_allocations
        nbytes += stats.bytes_in_use
    return count, nbytes


def _forget_last_error() -> None:
    """Drop the last uncaught error, whose traceback's frames may hold ember tensors.

    Python (``sys.last_exc``) and IPython keep it for post-mortem debugging, so a
    cell that failed would otherwise keep its tensors, and the backend, alive.
    """
    for name in ("last_exc", "last_type", "last_value", "last_traceback"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "InteractiveTB"):
        shell.InteractiveTB.tb = None  # what %debug would open


def _operator_namespaces(parts: list[CppPart]) -> set[str]:
    return {match for part in parts for match in _LIBRARY.findall(part.source)}


def _forget_cached_operators(namespaces: set[str]) -> None:
    """Drop Python's cached handles (``torch.ops.ns.op``) to operators of `namespaces`.

    Retiring a build removes the operators it defined; the next build defines
    them again. A handle cached before would point at the removed definition.
    They are looked up afresh on next use.
    """
    for name in namespaces:
        namespace = vars(torch.ops).get(name)
        if namespace is None:
            continue
        for op in list(getattr(namespace, "_dir", [])):
            if op in vars(namespace):
                delattr(namespace, op)
        namespace._dir.clear()


def _unload(build: Build) -> None:
    gc.collect()  # tensors in reference cycles would otherwise still hold memory
    count, nbytes = live_device_allocations()
    if count:
        _forget_last_error()
        gc.collect()
        count, nbytes = live_device_allocations()
    if count:
        raise compile_errors.BackendInUseError(
            f"cannot replace the loaded ember backend: {count} device allocation(s) "
            f"({nbytes} bytes) made through it are still alive, and their deleters live "
            "in its library. Delete the ember tensors (`del x`), or restart the kernel, "
            "then build again."
        )
    # Run the library's static destructors (they deregister its kernels and
    # fallbacks) but keep it mapped: the dispatcher keeps, per operator, the C++
    # signature of the first unboxed kernel ever registered (OperatorEntry::
    # cpp_signature_, never cleared on deregistration), as a std::type_index whose
    # name points into this library's .rodata. After a dlclose the next build's
    # registration compares against a dangling name: "Mismatch in kernel C++
    # signatures" (or a segfault).
    dso = build._handle.book_dso_handle
    dso.restype = ctypes.c_void_p
    ctypes.CDLL(None).__cxa_finalize(ctypes.c_void_p(dso()))
    build._handle = None
    _forget_cached_operators(_operator_namespaces(build.parts))


def unload() -> None:
    """Retire the loaded build, if any: PrivateUse1 goes back to what PyTorch has.

    Raises BackendInUseError while device memory allocated through it is alive.
    """
    global _LOADED
    if _LOADED is not None:
        _unload(_LOADED)
        _LOADED = None


def loaded() -> Build | None:
    """The build currently loaded in this process, if any."""
    return _LOADED
