"""torch.compile on ember (Dynamo's device interface, Inductor's ember backend).

`register(device_module, library)` is all of it, and `import torch_ember` arranges for it
(`deferred.run_after_import`: the device interface when Dynamo is first imported, the rest
when Inductor is, or at once if they are loaded already, because importing them takes
seconds that a process which never compiles should not pay):
- Dynamo gets ember's `DeviceInterface` (`device_interface`), so streams, events and
  the current device trace into graphs;
- Inductor generates ember kernels (`inductor`): the CPU's C++ code generator, each
  kernel run as an ember launch (`kernel_entry`);
- the generated kernels find the launcher (`emberLaunchCompiled`, compiled into
  `library`) through the environment.

Nothing here imports from `torch_ember`, so the book loads this package by path.
"""

from __future__ import annotations

import ctypes
import importlib
import os
from pathlib import Path
from types import ModuleType

from . import kernel_entry as kernel_entry

__all__ = ["launcher_address", "register", "use_launcher"]

# Imported on first use (PEP 562): they import torch._dynamo and torch._inductor.
_HEAVY = ("aoti", "device_interface", "inductor")


def __getattr__(name: str) -> ModuleType:
    if name in _HEAVY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ember-book: begin compiler_register
def launcher_address(library: str | Path) -> int:
    """The address of `emberLaunchCompiled` in the backend's shared library."""
    launcher = ctypes.CDLL(str(library)).emberLaunchCompiled
    address = ctypes.cast(launcher, ctypes.c_void_p).value
    if address is None:  # the symbol resolved to NULL: no launcher to point kernels at
        raise RuntimeError(f"ember: emberLaunchCompiled in {library} has no address")
    return address


def use_launcher(library: str | Path) -> None:
    """Points generated kernels at the launcher in `library` (read at every launch)."""
    address = launcher_address(library)
    os.environ[kernel_entry.LAUNCHER_VARIABLE] = f"{os.getpid()}:{address}"


def register(device_module: ModuleType, library: str | Path) -> None:
    """torch.compile, torch.export and Inductor's kernels on ember. Idempotent."""
    from . import device_interface, inductor

    device_interface.register(device_module)
    inductor.register()
    use_launcher(library)


# ember-book: end compiler_register
