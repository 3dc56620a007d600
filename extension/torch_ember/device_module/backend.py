"""The backend library's own C entry points, for what PyTorch binds to Python for CUDA
only: memory history and snapshots, the host allocator's statistics.

`torch_ember` compiles the driver into its `_C`, so by default the entry points are looked up
in the library the driver was attached from. The book's chapters build their backend apart
from the driver: `attach_backend` gives the module the loaded chapter library (`book.build()`
does it). Entry points that return Python objects are called as a `ctypes.PyDLL`'s: holding
the GIL, with the Python exception they set raised.
"""

from __future__ import annotations

import ctypes
from typing import Any

from .devices import _the_driver

_library: ctypes.CDLL | None = None


def attach_backend(library: ctypes.CDLL | None) -> None:
    """Look up entry points in `library` (a loaded backend), or, with None, in the driver's."""
    global _library
    _library = library


def entry(name: str, *, python: bool = False) -> Any:  # a ctypes function
    """The backend's C entry point `name`; `python=True` for one that returns a PyObject*."""
    library = _library if _library is not None else _the_driver().lib
    if python:
        library = ctypes.PyDLL(library._name, handle=library._handle)
    function = getattr(library, name, None)
    if function is None:
        raise RuntimeError(
            f"ember: the loaded backend has no {name} (memory history, snapshots and host "
            "memory statistics need a backend that compiles them: torch_ember, or chapter 16's)"
        )
    if python:
        function.restype = ctypes.py_object
    return function
