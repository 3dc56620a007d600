// Ember's C shim: the C functions AOTInductor's C++ wrapper calls for the ATen
// operators it does not generate (matrix products, convolution, attention).
//
// PyTorch generates one such shim per device type (c_shim_cpu.h, c_shim_cuda.h):
// `aoti_torch_<device>_<op>`, with a C signature that survives an ABI change of
// ATen. Inductor writes the same call for ember, `aoti_torch_ember_<op>`; these
// functions have the CPU shim's signatures and call the ATen operator, which the
// dispatcher sends to ember's kernel. Declared for the generated code by
// torch_ember/compiler/aoti.py (SHIM), which lists the same ops.
//
// No Python here: the shim is part of the library a C++ program loads
// (libtorch_ember.so), and resolved by the generated package at load time.
// ember-book: begin aoti_shim
#include <ATen/ATen.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

using namespace torch::aot_inductor;

namespace {
// An ember shim is called for tensors on ember: anything else is a wrapper bug
// that would otherwise reach an ember kernel with host pointers.
void checkOnEmber(const at::Tensor& tensor, const char* op) {
  TORCH_CHECK(!tensor.defined() || tensor.device().is_privateuseone(),
              "ember: AOTInductor's C shim aoti_torch_ember_", op,
              " was called with a tensor on ", tensor.device(),
              ": the shim of a device type takes that device's tensors");
}
} // namespace

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_ember_mm_out(
    AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor& result = *tensor_handle_to_tensor_pointer(out);
    checkOnEmber(result, "mm_out");
    at::mm_out(result, *tensor_handle_to_tensor_pointer(self),
               *tensor_handle_to_tensor_pointer(mat2));
  });
}

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_ember_addmm_out(
    AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat1,
    AtenTensorHandle mat2, double beta, double alpha) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor& result = *tensor_handle_to_tensor_pointer(out);
    checkOnEmber(result, "addmm_out");
    at::addmm_out(result, *tensor_handle_to_tensor_pointer(self),
                  *tensor_handle_to_tensor_pointer(mat1),
                  *tensor_handle_to_tensor_pointer(mat2), beta, alpha);
  });
}

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_ember_bmm_out(
    AtenTensorHandle out, AtenTensorHandle self, AtenTensorHandle mat2) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    at::Tensor& result = *tensor_handle_to_tensor_pointer(out);
    checkOnEmber(result, "bmm_out");
    at::bmm_out(result, *tensor_handle_to_tensor_pointer(self),
                *tensor_handle_to_tensor_pointer(mat2));
  });
}

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_ember_convolution(
    AtenTensorHandle input, AtenTensorHandle weight, AtenTensorHandle* bias,
    const int64_t* stride, int64_t stride_len_, const int64_t* padding,
    int64_t padding_len_, const int64_t* dilation, int64_t dilation_len_,
    int32_t transposed, const int64_t* output_padding,
    int64_t output_padding_len_, int64_t groups, AtenTensorHandle* ret0) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    const at::Tensor& in = *tensor_handle_to_tensor_pointer(input);
    checkOnEmber(in, "convolution");
    auto result = at::convolution(
        in, *tensor_handle_to_tensor_pointer(weight), pointer_to_optional<at::Tensor>(bias),
        pointer_to_list<int64_t>(stride, stride_len_),
        pointer_to_list<int64_t>(padding, padding_len_),
        pointer_to_list<int64_t>(dilation, dilation_len_), transposed != 0,
        pointer_to_list<int64_t>(output_padding, output_padding_len_), groups);
    *ret0 = new_tensor_handle(std::move(result));
  });
}

AOTI_TORCH_EXPORT AOTITorchError
aoti_torch_ember__scaled_dot_product_fused_attention_overrideable(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value,
    AtenTensorHandle* attn_bias, double dropout_p, int32_t is_causal,
    int32_t return_debug_mask, double* scale, AtenTensorHandle* ret0,
    AtenTensorHandle* ret1, AtenTensorHandle* ret2, AtenTensorHandle* ret3,
    int64_t* ret4, int64_t* ret5, AtenTensorHandle* ret6, AtenTensorHandle* ret7,
    AtenTensorHandle* ret8) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    const at::Tensor& q = *tensor_handle_to_tensor_pointer(query);
    checkOnEmber(q, "_scaled_dot_product_fused_attention_overrideable");
    auto [out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset,
          debug_mask] =
        at::_scaled_dot_product_fused_attention_overrideable(
            q, *tensor_handle_to_tensor_pointer(key),
            *tensor_handle_to_tensor_pointer(value),
            pointer_to_optional<at::Tensor>(attn_bias), dropout_p, is_causal != 0,
            return_debug_mask != 0, pointer_to_optional<double>(scale));
    // Outputs a caller does not use arrive as nullptr (Inductor's convention).
    if (ret0 != nullptr) *ret0 = new_tensor_handle(std::move(out));
    if (ret1 != nullptr) *ret1 = new_tensor_handle(std::move(logsumexp));
    if (ret2 != nullptr) *ret2 = new_tensor_handle(std::move(cum_seq_q));
    if (ret3 != nullptr) *ret3 = new_tensor_handle(std::move(cum_seq_k));
    if (ret4 != nullptr) *ret4 = max_q.expect_int();
    if (ret5 != nullptr) *ret5 = max_k.expect_int();
    if (ret6 != nullptr) *ret6 = new_tensor_handle(std::move(seed));
    if (ret7 != nullptr) *ret7 = new_tensor_handle(std::move(offset));
    if (ret8 != nullptr) *ret8 = new_tensor_handle(std::move(debug_mask));
  });
}

// A cheap operator Inductor falls back to (no lowering): the benchmark compares
// the shim with the by-name route on it (bench_aoti.py, aoti_dispatcher_vs_shim).
AOTI_TORCH_EXPORT AOTITorchError aoti_torch_ember_topk(
    AtenTensorHandle self, int64_t k, int64_t dim, int32_t largest,
    int32_t sorted, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  AOTI_TORCH_CONVERT_EXCEPTION_TO_ERROR_CODE({
    const at::Tensor& input = *tensor_handle_to_tensor_pointer(self);
    checkOnEmber(input, "topk");
    auto [values, indices] = at::topk(input, k, dim, largest != 0, sorted != 0);
    if (ret0 != nullptr) *ret0 = new_tensor_handle(std::move(values));
    if (ret1 != nullptr) *ret1 = new_tensor_handle(std::move(indices));
  });
}

} // extern "C"
// ember-book: end aoti_shim
