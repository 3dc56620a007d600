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

from torch._inductor import ir
from torch._inductor.codegen.common import register_backend_for_device
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

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
        return EmberAotiWrapper()

    @staticmethod
    def get_c_shim_func_name(kernel: str, device: str) -> str:
        if device != "ember" or kernel.startswith("aoti_torch_"):
            return CppWrapperCpu.get_c_shim_func_name(kernel, device)
        op = _op_suffix(kernel)
        if op not in _shim_ops:  # an extern kernel Inductor has no by-name route for
            raise NotImplementedError(
                f"ember: the C++ wrapper (cpp_wrapper=True, AOTInductor) cannot call {kernel} "
                f"on ember: ember's C shim has no aoti_torch_ember_{op} (it has "
                f"{', '.join(sorted(_shim_ops)) or 'none'}); compile without cpp_wrapper"
            )
        return f"aoti_torch_ember_{op}"

    def add_device_include(self, device: str) -> None:
        first = device not in self.included_devices
        super().add_device_include(device)
        if device == "ember" and first:
            # No header of ember's in PyTorch's include tree: declared here, C linkage.
            declarations = "\n".join(f"AOTI_TORCH_EXPORT AOTITorchError {SHIM[op]};" for op in SHIM)
            self.header.splice(f'extern "C" {{\n{declarations}\n}}')

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


class _CodegenVersion(CodegenVersion):
    """Inductor's cache key of ember's codegen (`inductor.CodegenVersion`), with this
    module's source: a changed wrapper must not load packages the old one generated."""

    def __init__(self) -> None:
        super().__init__()
        this = Path(__file__).read_bytes()
        self._codegen = hashlib.sha256(self._codegen.encode() + this).hexdigest()


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
