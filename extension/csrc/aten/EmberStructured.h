// Running ATen's structured kernels (meta + impl) for ember out= tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/native/TensorIterator.h>

#include <type_traits>

// ember-book: begin structured_out
namespace ember {

// Checks the out= tensor against what meta() computed and resizes it
// (resize_out, EmberStructured.cpp).
void resizeOut(const at::Tensor& out, at::IntArrayRef sizes,
               at::IntArrayRef strides, const at::TensorOptions& options);

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
    resizeOut(out_, sizes, strides, options);
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
