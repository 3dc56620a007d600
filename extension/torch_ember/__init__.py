"""torch_ember: the ember backend for PyTorch.

`import torch_ember` loads the compiled backend (`torch_ember._C`: allocator,
device guard and kernels register themselves when it loads), names the
PrivateUse1 device "ember", registers `torch.ember` and adds `Tensor.ember()`
and `Tensor.is_ember`. After that, `torch.ones(2, device="ember")` works.
"""

from __future__ import annotations

import torch

# Loading _C registers the allocator, the device guard and the kernels.
from torch_ember import _C, ember  # noqa: F401

BACKEND_NAME = "ember"

__all__ = ["BACKEND_NAME", "ember"]


def _register() -> None:
    # Each step can only be done once per process: skip what is already done,
    # so that reloading this module is harmless.
    current = torch._C._get_privateuse1_backend_name()
    if current != BACKEND_NAME:
        if current != "privateuseone":
            raise RuntimeError(
                f"torch_ember: the PrivateUse1 device is already named {current!r} in this process; "
                "one process can hold only one PrivateUse1 backend"
            )
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    if not hasattr(torch, BACKEND_NAME):
        torch._register_device_module(BACKEND_NAME, ember)
    if not hasattr(torch.Tensor, f"is_{BACKEND_NAME}"):
        torch.utils.generate_methods_for_privateuse1_backend()


_register()
