// The out= tensor of ember's structured kernels (EmberStructured.h): checked
// and resized in one function, compiled once, which every StructuredOut<...>
// calls.
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>

#include "aten/EmberStructured.h"

// ember-book: begin resize_out
namespace ember {

// What PyTorch's code generator writes into each backend's registrations
// (its resize_out): the dtype and device meta() computed must be the out=
// tensor's, and the tensor is resized to the result's size. A function,
// not template code, so that it is compiled once, not in every kernel.
void resizeOut(const at::Tensor& out, at::IntArrayRef sizes,
               at::IntArrayRef strides, const at::TensorOptions& options) {
  // In the words of the checks PyTorch generates for every backend's
  // structured out= kernels (CUDA's say the same), which its tests and
  // users match on.
  TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to ",
              "have dtype ", options.dtype(), ", but got ", out.dtype(),
              " instead");
  TORCH_CHECK(options.device() == out.device(), "Expected out tensor to ",
              "have device ", options.device(), ", but got ", out.device(),
              " instead");
  // resize_output warns when it resizes a non-empty out= tensor, like CPU.
  if (at::native::resize_output(out, sizes)) {
    // A fresh result takes the layout meta() suggests (the input's).
    if (!strides.empty()) {
      out.as_strided_(sizes, strides);
    } else if (options.memory_format_opt().has_value()) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(
          *options.memory_format_opt());
    }
  }
}

} // namespace ember
// ember-book: end resize_out
