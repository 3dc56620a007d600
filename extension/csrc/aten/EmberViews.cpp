// View kernels: new sizes and strides over the same ember storage, no copy.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
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
