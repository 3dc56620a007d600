"""The book steps aside from PyTorch's backend autoload.

With `torch_ember` installed, ``import torch`` loads it by itself: the package
declares a ``torch.backends`` entry point, and torch calls every such entry
point while it is imported, unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``. The
book's processes build their own backend, chapter by chapter, and a process
holds only one PrivateUse1 backend. So `import book` (the first line of every
chapter, and of the book's tests through their conftest) turns autoload off
before anything imports torch, for this process and every process it starts
(kernels, `book.run_isolated` children, pre-load checks).

If torch was imported first and autoload has already loaded `torch_ember`,
it is too late: `import book` refuses with a message that says what to do.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "TORCH_DEVICE_BACKEND_AUTOLOAD"
PACKAGE = "torch_ember"


class FinishedBackendLoadedError(ImportError):
    """`torch_ember` is already loaded in a process that imports the book."""


def step_aside() -> None:
    """Turn autoload off for this process and its children; refuse if the package is already in."""
    autoload_was_on = os.environ.get(VARIABLE, "1") == "1"
    os.environ[VARIABLE] = "0"
    if PACKAGE in sys.modules:
        raise FinishedBackendLoadedError(_message(autoload_was_on))


def _message(autoload_was_on: bool) -> str:
    how = (
        f"PyTorch's backend autoload loaded it when torch was imported ({VARIABLE} is not 0)"
        if autoload_was_on and "torch" in sys.modules
        else "it was imported"
    )
    return (
        f"the finished ember backend ({PACKAGE}) is already loaded in this process: {how}. "
        "The book builds its own backend chapter by chapter, and a process holds only one PrivateUse1 "
        f"backend. Restart the kernel (or process) and `import book` before torch, or set {VARIABLE}=0 "
        "in its environment (make execute, make test and make lab do)."
    )


step_aside()  # on import: `import book` imports this module before any other
