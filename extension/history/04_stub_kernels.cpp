// Earlier versions of parts that chapter 04 shows and a later cell revises.
// Not part of the torch_ember package (extension/csrc holds the latest
// versions); the chapter's builds compile them. See book/sync.py.
#include <ATen/core/Tensor.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include <optional>

// ember-book: begin convolution.v1
namespace ember::conv {

// The registration found in many out-of-tree backends: a kernel for conv2d,
// the operator the model calls. It computes the right numbers.
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias,
                  c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                  c10::SymIntArrayRef dilation, c10::SymInt groups) {
  constexpr const char* op = "aten::conv2d";
  const Shape s = shapeOf(op, input, weight, stride, padding, dilation,
                          groups.expect_int());
  return forward(op, input, weight, bias, s);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("conv2d", TORCH_FN(conv2d));
}

} // namespace ember::conv
// ember-book: end convolution.v1
