"""eccl, ember's collective communication backend, registered with torch.distributed.

After `register`, `init_process_group("eccl")`, `init_process_group("cpu:gloo,ember:eccl")` and
`init_process_group(device_id=torch.device("ember", rank))` (no backend named: ember's default is
eccl) make process groups whose collectives on ember tensors run as ember kernels over the
shared-memory link between the ranks' devices (csrc/distributed/).

The backend itself is C++ (`EcclBackend`, a `c10d::Backend`); the creator c10d calls gets it from
the backend library's C entry point `emberEcclCreateBackend`. This module imports nothing from
torch_ember: the book loads it by path, next to a chapter's build, as the package loads it next
to its `_C`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist

NAME = "eccl"
DEVICE = "ember"

# device_module.backend.entry: the loaded backend's C entry point by name.
EntryLookup = Callable[..., Any]


# fmt: off
# ember-book: begin eccl_register
def register(entry: EntryLookup) -> None:
    """Register eccl as torch.distributed's backend for ember devices (again:
    harmless)."""

    # What c10d calls for each new group: the store is the group's own (a
    # PrefixStore), the timeout the group's. It returns a c10d Backend.
    def create_backend(
        store: dist.Store, rank: int, world_size: int, timeout: timedelta
    ) -> Any:
        create = entry("emberEcclCreateBackend", python=True)
        create.argtypes = [ctypes.py_object, ctypes.c_int, ctypes.c_int,
                           ctypes.c_double]
        return create(store, rank, world_size, timeout.total_seconds())

    # devices=["ember"]: a group made without naming a backend uses eccl for
    # ember tensors, and "cpu:gloo,ember:eccl" may name it per device.
    dist.Backend.register_backend(NAME, create_backend, devices=[DEVICE])
# ember-book: end eccl_register
# fmt: on
