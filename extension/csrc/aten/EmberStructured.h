// Running ATen's structured kernels (meta + impl) for ember out= tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/native/TensorIterator.h>
#include <c10/core/SymIntArrayRef.h>

#include <optional>
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

// Functional structured kernels (outside the book's region: a package-only
// shortcut). Without a kernel of its own for a functional operator such as
// aten::add.Tensor, ember gets PyTorch's CompositeExplicitAutogradNonFunctional
// one: meta() builds a TensorIterator, the result is allocated through
// aten::empty, and then aten::add.out runs meta() and builds the iterator
// again. For a small tensor that second pass, and the dispatcher's trip to
// aten::empty, cost as much as the kernel. PyTorch's code generator gives CPU
// and CUDA a functional kernel of this shape: meta() once, the result
// allocated directly, impl() on it.
namespace ember {

// ember's kernels of aten::empty.memory_format and aten::empty_strided
// (EmberFactories.cpp), called here without the dispatcher.
at::Tensor empty_memory_format(
    c10::SymIntArrayRef sym_size, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(
    c10::SymIntArrayRef sym_size, c10::SymIntArrayRef sym_stride,
    std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
    std::optional<c10::Device> device, std::optional<bool> pin_memory);

// set_output_raw_strided allocates the result with the sizes and strides
// meta() computed (no strides: contiguous), on the device meta() chose,
// through the kernels aten::empty and aten::empty_strided reach on ember.
template <typename Native>
class StructuredFunctional final : public Native {
 public:
  void set_output_raw_strided(int64_t index, at::IntArrayRef sizes,
                              at::IntArrayRef strides,
                              at::TensorOptions options) override {
    const auto dtype = c10::typeMetaToScalarType(options.dtype());
    result_ = strides.empty()
        ? empty_memory_format(c10::fromIntArrayRefUnchecked(sizes), dtype,
                              options.layout_opt(), options.device_opt(),
                              std::nullopt, options.memory_format_opt())
        : empty_strided(c10::fromIntArrayRefUnchecked(sizes),
                        c10::fromIntArrayRefUnchecked(strides), dtype,
                        options.layout_opt(), options.device_opt(),
                        std::nullopt);
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Native>) {
      Native::set_output_raw_strided(index, sizes, strides, options);
    }
  }

  const at::Tensor& maybe_get_output(int64_t /*index*/) override {
    return result_;
  }

  at::Tensor& result() {
    return result_;
  }

 private:
  at::Tensor result_;
};

} // namespace ember
