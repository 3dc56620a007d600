"""Automatic mixed precision (the autocast chapter): what `torch.autocast` asks the device module.

torch.autocast(device_type=<ember>) asks for the dtypes ember computes in lower precision
(on 2.13 the only function it requires): without it, autocast raises an AssertionError;
a dtype not in the list makes autocast warn, naming the device, and run disabled.
"""

from __future__ import annotations

import torch

__all__ = ["get_amp_supported_dtype", "is_bf16_supported"]


# ember-book: begin amp
def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes `torch.autocast` may use on ember: its matrix products take float16
    and bfloat16 (computed in float32 and rounded, chapter 09)."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether ember computes in bfloat16 (as `torch.cuda.is_bf16_supported`): always,
    for the matrix products autocast runs in lower precision."""
    del including_emulation
    return True


# ember-book: end amp
