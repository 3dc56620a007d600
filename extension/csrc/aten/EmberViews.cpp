// View kernels: new sizes and strides over the same ember storage, no copy.
// view, as_strided and _reshape_alias (the minimal_ops chapter), and the last view
// operators the conformance sweep (the capstone chapter) found without an ember kernel:
// unfold, view_as_real and view_as_complex (the CPU fallback refuses views,
// so `tile`, `instance_norm`, every complex `real` or `imag`, and the
// backward of most complex operators failed on ember).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include <optional>

// ember-book: begin view_kernels
namespace ember {

// A view is metadata: a new TensorImpl that shares the Storage and has its
// own sizes, strides and offset. Nothing here reads device memory, so ATen's
// device-generic implementations are exactly right for ember.
at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  // Checks that the view stays inside the storage, then aliases it.
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      storage_offset ? std::optional(storage_offset->expect_int())
                     : std::nullopt);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  // Infers a -1 dimension and computes strides; fails if the layout cannot
  // be viewed with the new shape (reshape then copies instead).
  return at::native::view_symint(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  // reshape() calls this once it has proved a view is possible.
  return at::native::_reshape_alias_symint(self, size, stride);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
}

} // namespace ember
// ember-book: end view_kernels

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
