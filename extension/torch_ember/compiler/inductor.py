"""Inductor on ember: scheduling, wrapper code and the device's Python snippets.

Inductor splits what it generates in two: kernels (a *scheduling* turns fused nodes
into kernel source) and the wrapper (host code that allocates buffers and calls the
kernels, in Python or, with `cpp_wrapper=True`, in C++). Ember reuses the CPU's C++
kernel generator: the simulated device computes with the host's processor. What
ember changes is how a kernel runs: as an ember launch (`kernel_entry.wrap_kernel`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch._inductor import config as inductor_config
from torch._inductor import scheduler as inductor_scheduler
from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_utils import DEVICE_TO_ATEN
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.cpu_vec_isa import pick_vec_isa
from torch._inductor.custom_graph_pass import CustomGraphModulePass
from torch._inductor.utils import Placeholder
from torch._inductor.virtualized import V

from . import kernel_entry
from .kernel_entry import wrap_kernel

__all__ = [
    "EmberCppWrapper",
    "EmberDeviceOpOverrides",
    "EmberPythonWrapper",
    "EmberScheduling",
    "register",
]


# ember-book: begin inductor_backend
class EmberScheduling(CppScheduling):
    """The CPU's C++ kernels, each wrapped to run as an ember launch."""

    # Inductor's Scheduler creates this for its first ember node, before it fuses.
    def __init__(self, scheduler: Any) -> None:
        super().__init__(scheduler)
        if scheduler is not None:
            _scope_to_this_graph(scheduler)

    # Inductor asks which code generator serves the current device
    # (utils.get_current_backend) and takes Triton for a type it does not know:
    # it would then upcast float16 to float32 and track dtypes as Triton does.
    # Ember's kernels are the CPU's C++ ones, and are generated as such.
    def codegen_node(self, node: Any) -> None:
        with inductor_config.patch(cuda_backend="cpp"):
            super().codegen_node(node)
        # The CPU's scheduling writes a kernel's call later, at its next flush. The
        # scheduler flushes before a node of another device, but not before a node of
        # none (an event's record or wait), nor at a change of stream: in graphs with
        # such nodes, the call would land after them.
        if _calls_must_keep_order(V.graph.scheduler):
            self.flush()

    def flush(self) -> None:
        with inductor_config.patch(cuda_backend="cpp"):
            super().flush()

    def define_kernel(self, src_code: str, nodes: Any, kernel_args: Any = None) -> str:
        # The kernel's name is chosen by CppScheduling, which replaces this
        # placeholder with it (so the launch's errors name the kernel).
        name = str(Placeholder.DESCRIPTIVE_NAME)
        return super().define_kernel(wrap_kernel(src_code, name), nodes, kernel_args)


def _calls_must_keep_order(scheduler: Any) -> bool:
    """Whether a graph has streams or device-less nodes (events); read once."""
    known = getattr(scheduler, "_ember_ordered_calls", None)
    if known is None:
        known = scheduler._has_multi_stream_nodes() or any(
            node.get_device() is None for node in scheduler.nodes
        )
        scheduler._ember_ordered_calls = known
    return known


class EmberPythonWrapper(PythonWrapperCodegen):
    """The default Python wrapper; a C++ kernel on ember is called like a CPU one
    (its entry launches it), where PyTorch's wrapper knows only cpu and mps."""

    def _generate_kernel_call_helper(
        self,
        kernel_name: str,
        call_args: Any,
        **kwargs: Any,
    ) -> None:
        if not kwargs.get("triton", True):
            device = kwargs.get("device") or V.graph.get_current_device_or_throw()
            args = [self._on_device(arg, device) for arg in call_args]
            self.writeline(self.wrap_kernel_call(kernel_name, args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, **kwargs)

    @staticmethod
    def _on_device(arg: Any, device: torch.device) -> Any:
        # A 0-dim CPU tensor may join a graph on ember, as in eager mode (a float
        # under dynamic=True arrives as one). Triton kernels get its value;
        # ember's C++ kernel gets a pointer, so the tensor is copied to ember.
        graph_input = V.graph.graph_inputs.get(arg) if isinstance(arg, str) else None
        where = getattr(graph_input, "get_device", lambda: None)()  # sizes have none
        on_cpu = where is not None and where.type == "cpu"
        return f"{arg}.to('{device}')" if on_cpu else arg

    def push_codegened_graph(self, graph: Any) -> None:
        super().push_codegened_graph(graph)
        # A graph whose ember nodes are all extern kernels (a matrix product on a side
        # stream) creates EmberScheduling only once its code is generated, too late to
        # see its streams: they are known here, just before.
        scheduler = getattr(graph, "scheduler", None)
        if scheduler is not None and hasattr(scheduler, "node_to_stream"):
            _guard_streams_on_ember(scheduler)

    def make_allocation(
        self,
        name: str,
        device: torch.device,
        *args: Any,
        **kwargs: Any,
    ) -> str:
        # PyTorch's line names the device type only, as for a GPU whose wrapper sets
        # the current device first; ember's names the index.
        line = super().make_allocation(name, device, *args, **kwargs)
        return line.replace(f"device='{device.type}'", f"device='{device}'")

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Any,
        parent_wrapper: Any,
        partition_signatures: Any = None,
    ) -> Any:
        if is_subgraph:
            return super(EmberPythonWrapper, EmberPythonWrapper).create(
                is_subgraph, subgraph_name, parent_wrapper, partition_signatures
            )
        return EmberPythonWrapper()


def register() -> None:
    """Makes Inductor generate ember kernels. Idempotent."""
    register_backend_for_device(
        "ember",
        EmberScheduling,
        EmberPythonWrapper,
        EmberCppWrapper,
        device_custom_pass=CodegenVersion(),
    )
    register_device_op_overrides("ember", EmberDeviceOpOverrides())
    # The C++ wrapper names devices by ATen's enum: ember is PrivateUse1.
    DEVICE_TO_ATEN["ember"] = "at::kPrivateUse1"


def _on_ember(node: Any) -> bool:
    device = node.get_device()
    return device is not None and device.type == "ember"


def _scope_to_this_graph(scheduler: Any) -> None:
    """Two choices Inductor's Scheduler makes itself, with no device hook, differ on ember:
    ember changes them on the one Scheduler that holds ember nodes, never process-wide
    (a CUDA or CPU graph compiled in the same process gets Inductor's own choices)."""
    if getattr(scheduler, "_ember_scoped", False):
        return
    scheduler._ember_scoped = True

    # Reindexing a pointwise node to a reduction's loops assumes a SIMD scheduling's
    # groups, (numel, rnumel); the C++ scheduling's are tuples of sizes, and it fails
    # ("can't multiply sequence by non-int of type 'tuple'"). Inductor skips it when a
    # node is on the CPU; ember's kernels are the CPU's, so it skips it on ember too.
    reindex = scheduler._try_reindex_pointwise_for_reduction

    def reindex_unless_on_ember(node1: Any, node2: Any) -> bool:
        return not (_on_ember(node1) or _on_ember(node2)) and reindex(node1, node2)

    scheduler._try_reindex_pointwise_for_reduction = reindex_unless_on_ember

    # Streams are assigned after the nodes are created: decide once they are.
    if hasattr(scheduler, "node_to_stream"):
        _guard_streams_on_ember(scheduler)
    else:
        assign_streams = scheduler._populate_stream_assignments

        def assign_then_guard() -> None:
            assign_streams()
            _guard_streams_on_ember(scheduler)

        scheduler._populate_stream_assignments = assign_then_guard


def _guard_streams_on_ember(scheduler: Any) -> None:
    """The wrapper names a graph's streams (`with stream1:`) inside a device guard, which
    the Scheduler writes where `device_need_guard(type)` says so: for GPU types only.
    Ember needs one in graphs that use streams (the C++ wrapper's guard is a C shim ember
    does not have). The rule is a function of Inductor's scheduler module, called by name:
    it is swapped only while such a graph's code is generated."""
    if getattr(scheduler, "_ember_guarded", False) or not scheduler._has_multi_stream_nodes():
        return
    scheduler._ember_guarded = True
    codegen = scheduler.codegen

    def codegen_with_ember_guards() -> None:
        outer_rule = inductor_scheduler.device_need_guard  # in a subgraph, its parent's

        def need_guard(device: str) -> bool:
            return not V.graph.cpp_wrapper if device == "ember" else outer_rule(device)

        inductor_scheduler.device_need_guard = need_guard
        try:
            codegen()
        finally:
            inductor_scheduler.device_need_guard = outer_rule

    scheduler.codegen = codegen_with_ember_guards


# ember-book: end inductor_backend


# ember-book: begin inductor_cpp_wrapper
class EmberCppWrapper(CppWrapperCpu):
    """`cpp_wrapper=True`: the CPU's C++ wrapper, which calls each kernel's entry
    directly (the kernels are compiled into the wrapper's library)."""

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Any,
        parent_wrapper: Any,
        partition_signatures: Any = None,
    ) -> Any:
        return EmberCppWrapper()

    # An ATen operator Inductor does not generate (a matrix product, say) is
    # called through a C shim PyTorch generates per device type: cpu, cuda,
    # xpu and mps have one, ember has none. A clear error, not C++ that fails
    # to compile; the default Python wrapper calls such operators directly.
    @staticmethod
    def get_c_shim_func_name(kernel: str, device: str) -> str:
        if device == "ember" and kernel.startswith("at::"):
            raise NotImplementedError(
                f"ember: cpp_wrapper=True cannot call {kernel}: PyTorch has no C shim "
                "of ATen's operators for ember; compile without cpp_wrapper"
            )
        return CppWrapperCpu.get_c_shim_func_name(kernel, device)

    # The header of PyTorch's helpers for the C++ kernels' host side: the CPU's.
    @staticmethod
    def get_device_include_path_jit(device: str) -> str:
        return CppWrapperCpu.get_device_include_path_jit("cpu")

    @staticmethod
    def get_device_include_path_aot(device: str) -> str:
        return CppWrapperCpu.get_device_include_path_aot("cpu")

    def _generate_kernel_call_helper(
        self,
        kernel_name: str,
        call_args: Any,
        **kwargs: Any,
    ) -> None:
        kwargs["device"] = torch.device("cpu")  # a plain C call, as for the CPU
        super()._generate_kernel_call_helper(kernel_name, call_args, **kwargs)


# ember-book: end inductor_cpp_wrapper


# ember-book: begin inductor_device
class EmberDeviceOpOverrides(DeviceOpOverrides):
    """The Python the wrapper writes to set ember's device and wait for it."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"def {name}(index): return torch.ember.current_stream(index).stream_id"

    def set_device(self, device_idx: int) -> str:
        return f"torch.ember.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.ember.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.ember.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.ember.current_stream()"


class CodegenVersion(CustomGraphModulePass):
    """A pass that changes nothing and puts ember's codegen in Inductor's cache key.

    Inductor caches compiled graphs on disk, keyed by the graph, its configuration and
    the device's custom pass (its uuid), not by a backend's Python: without this, a
    changed entry or wrapper would still load graphs generated by the old one. The
    key also names the vector ISA the kernels were written for (ATEN_CPU_CAPABILITY
    picks it): the CPU's key does not, and an AVX-512 kernel would not compile for
    a process that asked for scalar code.
    """

    def __init__(self) -> None:
        # Read once: Inductor asks for the uuid at every compilation's cache lookup.
        sources = (Path(__file__), Path(kernel_entry.__file__))
        text = b"".join(path.read_bytes() for path in sources)
        self._codegen = hashlib.sha256(text).hexdigest()

    def __call__(self, graph: torch.fx.GraphModule) -> None:
        pass

    def uuid(self) -> str:
        return f"{self._codegen}-{pick_vec_isa()}"


# ember-book: end inductor_device
