"""AOTInductor and `cpp_wrapper=True` on ember: the C++ wrapper's calls of ATen operators.

Inductor's C++ wrapper calls an ATen operator it does not generate (a matrix product, a
convolution, attention) through a C function, never through C++ ATen (whose ABI a package
must not depend on). Two routes exist, both taken here:
- a *C shim*: one C function per operator, `aoti_torch_<device>_<op>`, as PyTorch generates
  for cpu and cuda (`c_shim_cpu.h`). Ember's are in its library (csrc/aoti/EmberShim.cpp),
  declared below (`SHIM`), for the operators ember's graphs call most: the products,
  convolution and attention;
- the *dispatcher by name*, for every other operator: `aoti_torch_call_dispatcher` in a JIT
  compile, the package's proxy executor (the call serialized into the package, replayed
  through the dispatcher) in an AOTInductor package. Correct for any operator, but each
  call boxes its arguments (`python -m torch_ember.bench`: `aoti_dispatcher_vs_shim`).

The generated library resolves the shim when it is loaded: `torch_ember` loads its
library (libtorch_ember.so) globally, as a C++ program does.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch._inductor import codecache, ir
from torch._inductor.codegen.common import register_backend_for_device
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.virtualized import V

from .inductor import CodegenVersion, EmberCppWrapper, EmberPythonWrapper, EmberScheduling

__all__ = ["SHIM", "EmberAotiWrapper", "register", "shim_ops"]

# Ember's C shim: operator name (the C function's suffix) -> its C declaration, the CPU
# shim's signature with the device type's name. The definitions: csrc/aoti/EmberShim.cpp.
SHIM: dict[str, str] = {
    "mm_out": "aoti_torch_ember_mm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2)",
    "addmm_out": "aoti_torch_ember_addmm_out(AtenTensorHandle out, AtenTensorHandle self, "
    "AtenTensorHandle mat1, AtenTensorHandle mat2, double beta, double alpha)",
    "bmm_out": "aoti_torch_ember_bmm_out(AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2)",
    "convolution": "aoti_torch_ember_convolution(AtenTensorHandle input, AtenTensorHandle weight, "
    "AtenTensorHandle* bias, const int64_t* stride, int64_t stride_len_, const int64_t* padding, "
    "int64_t padding_len_, const int64_t* dilation, int64_t dilation_len_, int32_t transposed, "
    "const int64_t* output_padding, int64_t output_padding_len_, int64_t groups, "
    "AtenTensorHandle* ret0)",
    "_scaled_dot_product_fused_attention_overrideable": (
        "aoti_torch_ember__scaled_dot_product_fused_attention_overrideable("
        "AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, "
        "AtenTensorHandle* attn_bias, double dropout_p, int32_t is_causal, "
        "int32_t return_debug_mask, double* scale, AtenTensorHandle* ret0, AtenTensorHandle* ret1, "
        "AtenTensorHandle* ret2, AtenTensorHandle* ret3, int64_t* ret4, int64_t* ret5, "
        "AtenTensorHandle* ret6, AtenTensorHandle* ret7, AtenTensorHandle* ret8)"
    ),
    "topk": "aoti_torch_ember_topk(AtenTensorHandle self, int64_t k, int64_t dim, int32_t largest, "
    "int32_t sorted, AtenTensorHandle* ret0, AtenTensorHandle* ret1)",
}

# The operators the generated code calls through the shim; fallback operators outside it
# go through the dispatcher. A measurement may empty it (every fallback by name).
_shim_ops: set[str] = set(SHIM)


def shim_ops() -> set[str]:
    """The operators called through ember's C shim (mutable: the bench compares routes)."""
    return _shim_ops


def _op_suffix(kernel: str) -> str:
    """`at::addmm_out` -> addmm_out; `at::_ops::convolution::call` -> convolution."""
    tokens = kernel.split("::")
    return tokens[-2] if tokens[-1] == "call" else tokens[-1]


def _check_in_shim(kernel: str, op: str) -> None:
    if op not in _shim_ops:
        raise NotImplementedError(
            f"ember: the C++ wrapper (cpp_wrapper=True, AOTInductor) cannot call {kernel} "
            f"on ember: ember's C shim has no aoti_torch_ember_{op} (it has "
            f"{', '.join(sorted(_shim_ops)) or 'none'}); compile without cpp_wrapper"
        )


# ember-book: begin aoti_wrapper
class EmberAotiWrapper(EmberCppWrapper):
    """Ember's C++ wrapper, with calls to ATen operators: through ember's C shim where
    it has the operator, through the dispatcher by name otherwise."""

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: Any,
        parent_wrapper: Any,
        partition_signatures: Any = None,
    ) -> Any:
        # Inductor picks the precompiled header by device type and has none for ember:
        # from the first ember C++ wrapper on, ember's is the CPU's (not at import).
        _headers_as_cpu()
        return EmberAotiWrapper()

    @staticmethod
    def get_c_shim_func_name(kernel: str, device: str) -> str:
        if device != "ember" or kernel.startswith("aoti_torch_"):
            return CppWrapperCpu.get_c_shim_func_name(kernel, device)
        op = _op_suffix(kernel)
        # An extern kernel's at::<op>_out: Inductor writes its call with this name, and has
        # no route by name for it. (A fallback kernel outside the shim is asked here for a
        # comment only: its call goes by name, generate_c_shim_fallback_kernel.)
        if op.endswith("_out"):
            _check_in_shim(kernel, op)
        return f"aoti_torch_ember_{op}"

    def generate_c_shim_extern_kernel_call(
        self, kernel: str, args: list[str], device: str, **kwargs: Any
    ) -> None:
        # An extern kernel (a product's at::<op>_out) has no route by name in Inductor: the
        # shim has it, or the graph cannot be compiled with the C++ wrapper on ember.
        if device == "ember" and not kernel.startswith("aoti_torch_"):
            _check_in_shim(kernel, _op_suffix(kernel))
        super().generate_c_shim_extern_kernel_call(kernel, args, device, **kwargs)

    def add_device_include(self, device: str) -> None:
        first = device not in self.included_devices
        super().add_device_include(device)
        if device == "ember" and first:
            # No header of ember's in PyTorch's include tree: declared here, C linkage.
            declarations = "\n".join(f"AOTI_TORCH_EXPORT AOTITorchError {SHIM[op]};" for op in SHIM)
            self.header.splice(f'extern "C" {{\n{declarations}\n}}')

    def _write_constants_unpacking(self) -> None:
        if not V.graph.aot_mode or not any(_on_ember(t) for t in V.graph.constants.values()):
            super()._write_constants_unpacking()
            return
        self.header.splice(CONSTANTS_ON_EMBER)
        for index, (name, tensor) in enumerate(V.graph.constants.items()):
            constant = f"constants_->at({index})"
            if _on_ember(tensor):
                constant = f"torch_ember_aoti::onEmber({constant}, this->device_idx_)"
            self.prefix.writeline(f"[[maybe_unused]] ConstantHandle {name} = {constant};")

    def codegen_model_constructor(self) -> None:
        # The runtime loads each weight on the model's device type or on the CPU: ember's
        # model is a CPU one (csrc/aoti/EmberAotiRunner.cpp), so ember's weights are
        # described as CPU weights, and copied to ember at the first run.
        original = V.graph.get_original_value_of_constant

        def on_host(name: str) -> torch.Tensor:
            value = original(name)
            return value.cpu() if _on_ember(value) else value

        V.graph.get_original_value_of_constant = on_host  # type: ignore[method-assign]
        try:
            super().codegen_model_constructor()
        finally:
            del V.graph.get_original_value_of_constant

    def generate_c_shim_fallback_kernel(self, fallback_kernel: ir.FallbackKernel, args: list[str]) -> None:
        device = fallback_kernel.get_device()
        kernel = str(fallback_kernel.cpp_kernel_name)
        if device is None or device.type != "ember" or _op_suffix(kernel) in _shim_ops:
            super().generate_c_shim_fallback_kernel(fallback_kernel, args)
            return
        # No C function for this operator on ember: call it by name, as Inductor does for
        # an operator no shim has (FallbackKernel.codegen's use_runtime_dispatch).
        node = fallback_kernel
        self.generate_fallback_kernel_with_runtime_lookup(
            node.get_name(),
            str(node.python_kernel_name),
            lambda: [*node.codegen_args(), *node.codegen_kwargs()],
            node.op_overload,
            node.export_extern_kernel_node(),
            node.outputs if node.outputs else node.mutation_outputs,
        )


# ember-book: end aoti_wrapper


def _on_ember(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "ember"


# A weight on ember, copied from the host copy AOTInductor's runtime loaded, once per
# host tensor (a swapped constant buffer is a new host tensor, so it is copied again).
CONSTANTS_ON_EMBER = r"""
#include <mutex>
#include <unordered_map>
namespace torch_ember_aoti {
using torch::aot_inductor::ConstantHandle;
using torch::aot_inductor::RAIIAtenTensorHandle;
inline ConstantHandle onEmber(const ConstantHandle& host, int32_t device_index) {
  static std::mutex mutex;
  static std::unordered_map<AtenTensorHandle, RAIIAtenTensorHandle> copies;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = copies.find(host.get());
  if (found == copies.end()) {
    int64_t ndim = 0;
    int64_t* sizes = nullptr;
    int64_t* strides = nullptr;
    int32_t dtype = 0;
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dim(host.get(), &ndim));
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_sizes(host.get(), &sizes));
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_strides(host.get(), &strides));
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(host.get(), &dtype));
    AtenTensorHandle copy = nullptr;
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(
        ndim, sizes, strides, dtype, aoti_torch_device_type_privateuse1(),
        device_index < 0 ? 0 : device_index, &copy));
    RAIIAtenTensorHandle owned(copy);
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_copy_(copy, host.get(), 0));
    found = copies.emplace(host.get(), std::move(owned)).first;
  }
  return ConstantHandle(found->second.get());
}
} // namespace torch_ember_aoti
"""


class _CodegenVersion(CodegenVersion):
    """Inductor's cache key of ember's codegen (`inductor.CodegenVersion`), with this
    module's source: a changed wrapper must not load packages the old one generated."""

    def __init__(self) -> None:
        super().__init__()
        this = Path(__file__).read_bytes()
        self._codegen = hashlib.sha256(self._codegen.encode() + this).hexdigest()


# PyTorch's two header choices, kept when ember wraps them (None until it does).
_pytorch_headers: tuple[Any, Any] | None = None


def _headers_as_cpu() -> None:
    """AOTInductor precompiles the header of the graph's device type,
    torch/csrc/inductor/aoti_include/<type>.h, which PyTorch ships for cpu, cuda, xpu
    and mps. Ember's kernels and wrapper are the CPU's C++: they take the CPU's header.
    Inductor picks it in two functions of its codecache and has no per-device hook for it
    (2.13): they are wrapped once, when Inductor first makes an ember C++ wrapper, and
    answer as before for every other device (tests/package/test_ember_aoti.py)."""
    global _pytorch_headers
    if _pytorch_headers is not None:
        return
    wrapper_header = codecache._get_cpp_wrapper_header
    prefix_header = codecache._get_cpp_prefix_header
    _pytorch_headers = (wrapper_header, prefix_header)

    def as_cpu(device: str) -> str:
        return "cpu" + device[len("ember") :] if device.startswith("ember") else device

    def get_cpp_wrapper_header(device: str, aot_mode: bool = False) -> str:
        return wrapper_header(as_cpu(device), aot_mode)

    def get_cpp_prefix_header(device: str) -> str | None:
        return prefix_header(as_cpu(device))

    codecache._get_cpp_wrapper_header = get_cpp_wrapper_header
    codecache._get_cpp_prefix_header = get_cpp_prefix_header


def register() -> None:
    """Ember's C++ wrapper with its shim, for cpp_wrapper=True and AOTInductor. Idempotent;
    after `inductor.register()`, whose registration it replaces."""
    register_backend_for_device(
        "ember",
        EmberScheduling,
        EmberPythonWrapper,
        EmberAotiWrapper,
        device_custom_pass=_CodegenVersion(),
    )
