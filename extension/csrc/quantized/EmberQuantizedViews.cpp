// Shape and view operators on quantized ember tensors: the ones the CPU has
// quantized kernels for (flip, index_select, indexing, clone, equal, and the
// view primitives the composite operators reduce to: flatten, ravel,
// reshape, transpose, permute, select, slice, contiguous).
#include "quantized/EmberQuantized.h"

// ember-book: begin quantized_views
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/flip.h>
#include <ATen/ops/index_native.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <bitset>

namespace ember {

// flip moves integers, as the CPU's flip does (its kernel dispatches on the
// underlying type): ember's plain flip on the integer view, written into a
// result made as the CPU makes it (empty_like with the input's layout
// preserved: same quantizer, same strides as the CPU's).
at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  const at::ScalarType type = self.scalar_type();
  TORCH_CHECK(type != at::kQUInt4x2 && type != at::kQUInt2x4, // the CPU's words
              "flip is not supported for tensor with data type ", type);
  const c10::DeviceGuard guard(self.device());
  at::Tensor result = at::empty_like(self, at::MemoryFormat::Preserve);
  // The CPU's flip restrides its input (as_strided, stride 0 along the
  // flipped dimensions) whenever there is work to do, and a per-channel
  // tensor refuses as_strided: so the CPU flips only per-tensor ones.
  const std::bitset<64> flipped = at::dim_list_to_bitset(dims, self.dim());
  bool work = false;
  for (int64_t d = 0; d < self.dim(); ++d) {
    work |= flipped[d] && self.size(d) > 1 && self.stride(d) != 0;
  }
  TORCH_CHECK(!work || self.numel() <= 1 ||
                  self.qscheme() == at::kPerTensorAffine,
              "Setting strides is possible only on uniformly quantized tensor");
  intView(result).copy_(at::flip(intView(self), dims));
  return result;
}

// Per tensor only, as on the CPU. The selected integers keep the input's
// scale and zero point.
at::Tensor indexSelect(const at::Tensor& self, int64_t dim,
                       const at::Tensor& index) {
  TORCH_CHECK(self.qscheme() == at::kPerTensorAffine,
              "Only per_tensor quantized quantized tensors are supported by ",
              "index_select.");
  checkWholeBytes("index_select", self);
  const c10::DeviceGuard guard(self.device());
  return quantizedView(at::index_select(intView(self), dim, index),
                       at::get_qtensorimpl(self)->quantizer());
}

// The CPU's equal_quantized_cpu, on any device: same quantizer (scheme,
// dtype, parameters), same sizes, same integers. It refuses non-CPU
// tensors, so ember compares the integer views with its own equal.
bool equal(const at::Tensor& self, const at::Tensor& other) {
  if (!other.is_quantized()) {
    return false;
  }
  TORCH_CHECK(self.device() == other.device(), "Expected all tensors to be ",
              "on the same device, but found at least two devices, ",
              self.device(), " and ", other.device(), "!");
  if (!at::get_qtensorimpl(self)->quantizer()->equalTo(
          at::get_qtensorimpl(other)->quantizer())) {
    return false;
  }
  if (self.sizes() != other.sizes() ||
      self.element_size() != other.element_size()) {
    return false;
  }
  checkWholeBytes("equal", self);
  const c10::DeviceGuard guard(self.device());
  return at::equal(intView(self), intView(other));
}

} // namespace ember

TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  // Views: a new QTensorImpl over the same storage with the same quantizer
  // (as_strided_qtensorimpl), or sizes and strides computed from the input.
  // Metadata only, so ATen's generic (QuantizedCPU) functions serve ember.
  m.impl("as_strided", TORCH_FN(at::native::as_strided_qtensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  // The quantized squeeze and unsqueeze also move a per-channel axis.
  m.impl("squeeze", TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&)>(
                        at::native::squeeze_quantized)));
  m.impl("squeeze.dim",
         TORCH_FN(static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(
             at::native::squeeze_quantized)));
  m.impl("squeeze.dims", TORCH_FN(static_cast<at::Tensor (*)(
                             const at::Tensor&, at::IntArrayRef)>(
                             at::native::squeeze_quantized)));
  m.impl("unsqueeze", TORCH_FN(at::native::unsqueeze_quantized));
  m.impl("unfold", TORCH_FN(at::native::unfold)); // windows: as_strided
  // clone (and so contiguous): a new tensor with the same quantizer, then
  // copy_, which reaches ember's quantized _copy_from.
  m.impl("clone",
         TORCH_FN(ember::DeviceGuarded<at::native::quantized_clone>::call));
  // Advanced indexing: the CPU's kernel dequantizes, indexes the floats and
  // quantizes again with the same parameters, all through the dispatcher.
  m.impl("index.Tensor",
         TORCH_FN(ember::DeviceGuarded<at::native::quantized_index>::call));
  m.impl("flip", TORCH_FN(ember::flip));
  m.impl("index_select", TORCH_FN(ember::indexSelect));
  m.impl("equal", TORCH_FN(ember::equal));
}
// ember-book: end quantized_views
