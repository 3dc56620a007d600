"""Dynamo's view of ember: the runtime calls a traced program may make on the device.

Dynamo and Inductor ask the device type's `DeviceInterface` for the device count, the
current device, streams and the device's properties while they trace and compile. Calls
like `torch.ember.current_stream()` or `with torch.ember.stream(s):` trace into the graph
through the substitutes `trace_stream_functions` registers; without them they break the
graph (and `fullgraph=True` fails).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    register_interface_for_device,
)

__all__ = ["EmberDeviceProperties", "make_interface", "register", "trace_stream_functions"]

# The ids of the device-module functions already substituted in Dynamo's graphs.
_TRACED: set[int] = set()


@dataclass(frozen=True)
class EmberDeviceProperties:
    """What Inductor reads of a device while it compiles (CUDA's names)."""

    name: str
    type: str
    index: int
    total_memory: int
    # Inductor sizes reductions by it: the host threads a kernel's loops fan out to.
    multi_processor_count: int


# ember-book: begin device_interface
def make_interface(device_module: ModuleType) -> type[DeviceInterface]:
    """The `DeviceInterface` of ember, over its device module (`torch.ember`)."""
    ember = device_module

    def properties(device: torch.types.Device = None) -> EmberDeviceProperties:
        index = ember.devices._device_index(device)  # None: the current device
        _, total = ember.mem_get_info(index)
        threads = torch.get_num_threads()
        return EmberDeviceProperties("ember", "ember", index, total, threads)

    class EmberInterface(DeviceInterface):
        device = ember.device  # type: ignore[assignment]
        Event = ember.Event  # type: ignore[assignment]
        Stream = ember.Stream  # type: ignore[assignment]

        class Worker:  # what Inductor's compile workers may ask, without a device
            @staticmethod
            def set_device(device: int) -> None:
                ember.set_device(device)

            @staticmethod
            def current_device() -> int:
                return ember.current_device()

            @staticmethod
            def get_device_properties(device: torch.types.Device = None) -> Any:
                return properties(device)

        current_device = staticmethod(ember.current_device)
        set_device = staticmethod(ember.set_device)
        device_count = staticmethod(ember.device_count)
        is_available = staticmethod(ember.is_available)
        stream = staticmethod(ember.stream)  # type: ignore[assignment]
        current_stream = staticmethod(ember.current_stream)
        set_stream = staticmethod(ember.set_stream)  # type: ignore[assignment]
        synchronize = staticmethod(ember.synchronize)
        memory_allocated = staticmethod(ember.memory_allocated)
        is_bf16_supported = staticmethod(ember.is_bf16_supported)  # type: ignore
        get_device_properties = staticmethod(properties)  # type: ignore[assignment]

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int):
            ember.set_stream(
                ember.Stream(
                    stream_id=stream_id,
                    device_index=device_index,
                    device_type=device_type,
                )
            )

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return ember.current_stream(device_idx).stream_id

        @staticmethod
        def exchange_device(device: int) -> int:
            previous = ember.current_device()
            ember.set_device(device)
            return previous

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            return EmberInterface.exchange_device(device)

        @staticmethod
        def get_compute_capability(device: torch.types.Device = None) -> str:
            return "ember"

        @staticmethod
        def is_triton_capable(device: torch.types.Device = None) -> bool:
            return False

    return EmberInterface


def trace_stream_functions(device_module: ModuleType) -> None:
    """Lets Dynamo put `torch.ember.current_stream()` and `torch.ember.stream(s)` in a
    graph. Both are Python over the driver (ctypes), which Dynamo cannot trace; in a
    traced function they mean what torch.accelerator's stream and `with s:` mean,
    which Dynamo records as graph nodes."""
    ember = device_module

    def current_stream(device: torch.types.Device = None) -> torch.Stream:
        if device is None:  # Dynamo reads no None here: the current device
            return torch.accelerator.current_stream()
        if isinstance(device, int):
            device = torch.device("ember", device)
        return torch.accelerator.current_stream(device)

    def stream(stream: torch.Stream | None) -> Any:
        return contextlib.nullcontext() if stream is None else stream

    substitutes = ((ember.current_stream, current_stream), (ember.stream, stream))
    for original, traced in substitutes:
        if id(original) not in _TRACED:  # registering one function twice is an error
            torch.compiler.substitute_in_graph(original)(traced)
            _TRACED.add(id(original))


def register(device_module: ModuleType) -> None:
    """Registers ember's interface with Dynamo (for "ember" and each "ember:N")."""
    interface = make_interface(device_module)
    register_interface_for_device("ember", interface)
    for index in range(device_module.device_count()):
        register_interface_for_device(f"ember:{index}", interface)
    trace_stream_functions(device_module)


# ember-book: end device_interface
