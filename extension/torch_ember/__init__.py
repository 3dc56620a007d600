"""torch_ember: the ember backend for PyTorch.

`import torch_ember` loads the compiled backend (`torch_ember._C`: allocator,
device guard and kernels register themselves when it loads), names the
PrivateUse1 device "ember", registers the device module (`device_module.py`) as
`torch.ember` and adds `Tensor.ember()` and `Tensor.is_ember`. After that, `torch.ones(2, device="ember")` works.
"""

from __future__ import annotations

import sys

import torch

BACKEND_NAME = "ember"

__all__ = ["BACKEND_NAME", "device_module"]


def _check_privateuse1_is_free() -> None:
    """Refuse to load next to another PrivateUse1 backend.

    The dispatcher lets a second library override PrivateUse1 kernels with a mere
    warning, so two backends in one process would mix silently.
    """
    if "torch_ember._C" in sys.modules:
        return  # ours, loaded by an earlier import
    name = torch._C._get_privateuse1_backend_name()
    taken = (
        name not in ("privateuseone", BACKEND_NAME)
        or torch._C._dispatch_has_kernel_for_dispatch_key("aten::empty.memory_format", "PrivateUse1")
        or torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.PrivateUse1)
    )
    if taken:
        raise ImportError(
            f"torch_ember: another PrivateUse1 backend (device name {name!r}) is already loaded in this "
            "process, for example a chapter build of the book. A process holds only one: import "
            "torch_ember in a fresh process."
        )


_check_privateuse1_is_free()

# Loading _C registers the allocator, the device guard and the kernels.
from torch_ember import _C, device_module  # noqa: E402
from torch_ember.driver import Driver  # noqa: E402

# The driver's C API is compiled into _C: the device module calls it there.
device_module.attach(Driver(_C.__file__))


def _register() -> None:
    # Each step can be done only once per process: skip what is already done,
    # so that importing (or reloading) torch_ember again is harmless.
    if torch._C._get_privateuse1_backend_name() != BACKEND_NAME:
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    if not hasattr(torch, BACKEND_NAME):
        torch._register_device_module(BACKEND_NAME, device_module)
    if not hasattr(torch.Tensor, f"is_{BACKEND_NAME}"):
        torch.utils.generate_methods_for_privateuse1_backend()


_register()

# The Python custom operators (ember::soft_shrink, ember::soft_shrink_): after the renaming, so
# their ember kernels are registered for the "ember" device type.
from torch_ember import custom_ops  # noqa: E402,F401
