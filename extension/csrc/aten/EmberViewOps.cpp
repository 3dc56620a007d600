// The last view operators without an ember kernel: unfold, view_as_real and
// view_as_complex. The conformance sweep (chapter 12) found them: the CPU
// fallback refuses views, so `tile`, `instance_norm`, every complex `real` or
// `imag`, and the backward of most complex operators failed on ember.
#include <ATen/core/Tensor.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

// ember-book: begin view_ops
namespace ember {

// All three are metadata, like chapter 04's view kernels: ATen's versions
// compute new sizes and strides (unfold: a window dimension whose stride is
// the step; view_as_real: one more dimension of 2 over the same bytes, with
// a real dtype) and alias the input's storage. They never read the data, so
// the device-generic code serves ember as it serves the CPU.
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size,
                  int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor viewAsReal(const at::Tensor& self) {
  return at::native::view_as_real(self);
}

at::Tensor viewAsComplex(const at::Tensor& self) {
  // Checks that the last dimension has size 2 and stride 1, and that the
  // other strides are even: a complex element must be two adjacent reals.
  return at::native::view_as_complex(self);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("unfold", &unfold);
  m.impl("view_as_real", &viewAsReal);
  m.impl("view_as_complex", &viewAsComplex);
}

} // namespace ember
// ember-book: end view_ops
