// Running ATen's structured kernels (meta + impl) for ember out= tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorIterator.h>

#include <type_traits>

// ember-book: begin structured_out
namespace ember {

// A structured operator comes with a class per kernel, e.g.
// at::native::structured_exp_out: meta() is ATen's shape, dtype and device
// logic (for elementwise ops it builds the TensorIterator), impl() calls the
// stub. What the code generator adds for each backend, and what we add here,
// is where the output comes from: set_output_raw_strided is called by meta()
// with the result's size, and we resize the user's out= tensor to it.
template <typename Native>
class StructuredOut final : public Native {
 public:
  explicit StructuredOut(const at::Tensor& out) : out_(out) {}

  void set_output_raw_strided(int64_t index, at::IntArrayRef sizes,
                              at::IntArrayRef strides,
                              at::TensorOptions options) override {
    // In the words of the checks PyTorch generates for every backend's
    // structured out= kernels (CUDA's say the same), which its tests and
    // users match on.
    TORCH_CHECK(options.dtype() == out_.dtype(), "Expected out tensor to ",
                "have dtype ", options.dtype(), ", but got ", out_.dtype(),
                " instead");
    TORCH_CHECK(options.device() == out_.device(), "Expected out tensor to ",
                "have device ", options.device(), ", but got ", out_.device(),
                " instead");
    // resize_output warns when it resizes a non-empty out= tensor, like CPU.
    if (at::native::resize_output(out_, sizes)) {
      // A fresh result takes the layout meta() suggests (the input's).
      if (!strides.empty()) {
        out_.as_strided_(sizes, strides);
      } else if (options.memory_format_opt().has_value()) {
        out_.unsafeGetTensorImpl()->empty_tensor_restride(
            *options.memory_format_opt());
      }
    }
    // TensorIterator-based ops record the output as their operand 0.
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Native>) {
      Native::set_output_raw_strided(index, sizes, strides, options);
    }
  }

  const at::Tensor& maybe_get_output(int64_t /*index*/) override {
    return out_;
  }

 private:
  const at::Tensor& out_;
};

// meta(args...) then impl(args..., out): the body of every structured out=
// kernel. Native is ATen's class, e.g. at::native::structured_exp_out.
template <typename Native, typename... Args>
at::Tensor& structuredOut(at::Tensor& out, const Args&... args) {
  StructuredOut<Native> op(out);
  op.meta(args...);
  op.impl(args..., out);
  return out;
}

} // namespace ember
// ember-book: end structured_out
