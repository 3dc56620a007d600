"""Storages and serialization (the serialization chapter): ember's storage formats, and a clear refusal
to share ember memory across processes.

A tensor's storage format is backend metadata on its TensorImpl. Python reaches it the
only way PyTorch offers, the flags of torch._utils.get/set_tensor_metadata, which
torch.save and torch.load use too: one flag per format, "ember_format_<name>".
storage_format, set_storage_format and STORAGE_FORMATS are ember's own: public, but not
in the device module's __all__, which lists torch.cuda's names only.
"""

from __future__ import annotations

import torch

__all__: list[str] = []

STORAGE_FORMATS = ("plain", "tiled", "blocked")
_FORMAT_FLAG = "ember_format_"


def storage_format(tensor: torch.Tensor) -> str:
    """The storage format of an ember tensor: "plain" unless one was set."""
    flags = torch._utils.get_tensor_metadata(tensor)
    named = [
        key.removeprefix(_FORMAT_FLAG) for key, on in flags.items() if key.startswith(_FORMAT_FLAG) and on
    ]
    return named[0] if named else "plain"


def set_storage_format(tensor: torch.Tensor, name: str) -> None:
    """Tag an ember tensor with a storage format (one of STORAGE_FORMATS)."""
    if name not in STORAGE_FORMATS:
        raise ValueError(
            f"ember: unknown storage format {name!r}; expected one of {', '.join(STORAGE_FORMATS)}"
        )
    if tensor.device.type != torch._C._get_privateuse1_backend_name():
        raise ValueError(
            f"ember: a storage format is a property of ember tensors; got a tensor on {tensor.device}"
        )
    flags = {f"{_FORMAT_FLAG}{other}": other == name for other in STORAGE_FORMATS if other != "plain"}
    torch._utils.set_tensor_metadata(tensor, flags)


def _refuse_sharing(device: torch.device, what: str) -> RuntimeError:
    return RuntimeError(
        f"ember: cannot share memory of {device} across processes ({what}): sharing needs host shared "
        "memory or an IPC handle for device memory, and the ember driver has neither. Copy the tensor to "
        "the CPU first (t.cpu().share_memory_()), or save it with torch.save."
    )


def _is_ember(device: torch.device) -> bool:
    return device.type == torch._C._get_privateuse1_backend_name()


def _install_sharing_refusal() -> None:
    """Make the cross-process sharing paths refuse ember memory with a clear error.

    PyTorch has no hook for this. `UntypedStorage.share_memory_` does nothing for every device but
    the CPU (CUDA shares through IPC handles instead), and `is_shared` answers True, so an ember
    tensor looks shared when it is not; `torch.multiprocessing` then fails deep inside, with a
    message about CPU file descriptors, in a queue's feeder thread. The wrappers stop both for
    ember storages and call PyTorch's functions for everything else. Installed once per process.
    """
    from multiprocessing.reduction import ForkingPickler

    storage = torch.UntypedStorage
    if getattr(storage.share_memory_, "_ember_refuses", False):
        return
    share_memory = storage.share_memory_
    is_shared = storage.is_shared

    def share_memory_(self: torch.UntypedStorage, *args: object, **kwargs: object) -> torch.UntypedStorage:
        if _is_ember(self.device):
            raise _refuse_sharing(self.device, "share_memory_")
        return share_memory(self, *args, **kwargs)

    def is_shared_(self: torch.UntypedStorage) -> bool:
        return False if _is_ember(self.device) else is_shared(self)

    share_memory_._ember_refuses = True  # type: ignore[attr-defined]
    storage.share_memory_ = share_memory_  # type: ignore[method-assign]
    storage.is_shared = is_shared_  # type: ignore[method-assign]

    reducers = ForkingPickler._extra_reducers  # type: ignore[attr-defined]
    for kind in (torch.Tensor, torch.nn.Parameter, torch.UntypedStorage):
        original = reducers.get(kind)
        if original is None:
            continue

        def reduce(obj: torch.Tensor | torch.UntypedStorage, original=original):  # noqa: ANN202
            if _is_ember(obj.device):
                raise _refuse_sharing(obj.device, "pickled for another process by torch.multiprocessing")
            return original(obj)

        ForkingPickler.register(kind, reduce)


_install_sharing_refusal()
