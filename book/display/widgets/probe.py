"""Compile, load and drive the trace probe (book/builds/cpp/trace_probe.cpp).

The probe is a small C++ library, built once per machine with the book's
toolchain (the chapters' compiler, flags and precompiled prelude, linked against
the same ember driver library) into ``cache_dir()/probe/<hash>``. It is loaded for
the life of the process and never unloaded: its RecordFunction callback and its
driver event callback must outlive any recording. Python reaches it through
ctypes, not pybind: three ``extern "C"`` functions.
"""

from __future__ import annotations

import ctypes
import json
import threading
from functools import cache
from pathlib import Path
from typing import Any, Self

import torch

from book.builds import builder, environment
from book.builds.progress import Status
from book.paths import BOOK_CPP, CSRC, cache_dir

SOURCE = BOOK_CPP / "trace_probe.cpp"


def library_path() -> Path:
    """Where the probe for this source, toolchain and driver lives (built or not)."""
    env = environment.current()
    key = env.digest(
        SOURCE.read_text(), env.prelude, (CSRC / "driver" / "ember_driver.h").read_text(), str(env.driver)
    )
    return cache_dir() / "probe" / key / f"ember_trace_probe_{key}.so"


@cache
def library() -> ctypes.CDLL:
    """The loaded probe, compiled first if this machine has no build of it."""
    path = library_path()
    if path.exists():
        torch.ops.load_library(str(path))
    else:
        with Status("compiling the trace probe (once per machine)") as status:
            builder.compile_library(path.stem, SOURCE.read_text(), path.parent)
            torch.ops.load_library(str(path))
            status.finish(f"✔ compiled the trace probe in {status.elapsed:.1f} s", show_in_batch=False)
    lib = ctypes.CDLL(str(path))
    lib.ember_probe_start.restype = ctypes.c_int
    lib.ember_probe_start.argtypes = []
    lib.ember_probe_stop.restype = ctypes.c_void_p  # not c_char_p: we must free it
    lib.ember_probe_stop.argtypes = []
    lib.ember_probe_free.restype = None
    lib.ember_probe_free.argtypes = [ctypes.c_void_p]
    return lib


_LOCK = threading.Lock()


class Recorder:
    """Context manager: records the calling thread's operator calls and driver events.

    ``with Recorder() as r: ...`` then ``r.records`` holds the raw records: dicts
    with ``k`` = ``call`` (name, overload, depth, keys, optional backend_select),
    ``end``, ``malloc``, ``free``, ``memcpy`` (direction, peer) or ``launch``
    (buffers); device events carry ``device`` and ``bytes``. ``keys`` and
    ``backend_select`` are raw ``DispatchKeySet`` bits (an int): the key set
    the call started from (arguments' keys + thread-local included − excluded,
    before the operator's fallthroughs are masked) and the one the operator's
    BackendSelect kernel would redispatch with.
    """

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._lib = library()

    def __enter__(self) -> Self:
        busy = RuntimeError("book.trace: a trace is already recording in this process")
        if not _LOCK.acquire(blocking=False):
            raise busy
        if self._lib.ember_probe_start() != 0:
            _LOCK.release()
            raise busy
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            raw = self._lib.ember_probe_stop()
            if raw is None:
                raise RuntimeError("book.trace: the probe was not recording on this thread")
            try:
                self.records = json.loads(ctypes.string_at(raw).decode())
            finally:
                self._lib.ember_probe_free(raw)
        finally:
            _LOCK.release()
