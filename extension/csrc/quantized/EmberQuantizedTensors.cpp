// Quantized tensors on ember: creating them, reading their parameters and
// integers, copying them between devices, and pointing them at a storage
// (what torch.load does).
#include "quantized/EmberQuantized.h"

// ember-book: begin quantized_tensors
#include <ATen/core/Tensor.h>
#include <ATen/ops/_empty_affine_quantized_native.h>
#include <ATen/ops/_empty_per_channel_affine_quantized_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/empty_quantized_native.h>
#include <ATen/ops/empty_strided_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/q_per_channel_axis_native.h>
#include <ATen/ops/q_per_channel_scales_native.h>
#include <ATen/ops/q_per_channel_zero_points_native.h>
#include <ATen/ops/q_scale_native.h>
#include <ATen/ops/q_zero_point_native.h>
#include <ATen/ops/qscheme_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace ember {

// t.int_repr(): a new plain tensor of the underlying type holding t's
// integers, in t's suggested memory format (the CPU's int_repr). A copy of
// the integer view, made by ember's own copy.
at::Tensor intRepr(const at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  const at::ScalarType type = self.scalar_type();
  if (type == at::kQUInt4x2 || type == at::kQUInt2x4) {
    // Two or four values a byte: the CPU returns the packed bytes as a 1-D
    // tensor of ceil(numel * bits / 8) bytes, read in storage order from the
    // first element.
    const int64_t bits = type == at::kQUInt4x2 ? 4 : 2;
    const int64_t count = (self.numel() * bits + 7) / 8;
    const at::Tensor bytes = intView(self).as_strided({count}, {1});
    return bytes.clone(at::MemoryFormat::Contiguous);
  }
  const at::Tensor ints = intView(self);
  at::Tensor result = at::empty(self.sizes(), ints.options(),
                                self.suggest_memory_format());
  result.copy_(ints);
  return result;
}

// copy_ between quantized tensors when one is on ember, and from a float
// tensor into a quantized ember one. copy_ hands every copy that involves a
// device outside ATen's list (ember is one) to _copy_from before its own
// quantized rules run, so they are here, in the CPU's words.
at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst,
                    bool non_blocking) {
  const c10::DeviceGuard guard(dst.is_privateuseone() ? dst.device()
                                                      : self.device());
  if (dst.is_quantized() && !self.is_quantized()) {
    // The CPU's quantized_copy_from_float_ quantizes with dst's quantizer.
    TORCH_CHECK(self.scalar_type() == at::kFloat,
                "Quantized copy only works with kFloat as source Tensor");
    TORCH_CHECK(self.sizes() == dst.sizes(),
                "Quantized copy only works with Tensors with the same shape");
    const at::Tensor quantized =
        at::get_qtensorimpl(dst)->quantizer()->quantize(
            self.to(dst.device()));
    intView(dst).copy_(intView(quantized), non_blocking);
    return dst;
  }
  TORCH_CHECK(dst.is_quantized() || !self.is_quantized(),
              "Copying from quantized Tensor to non-quantized Tensor is not ",
              "allowed, please use dequantize to get a float Tensor from a ",
              "quantized Tensor");
  TORCH_CHECK(self.qscheme() == dst.qscheme(),
              "Quantized Copy only works with same qscheme");
  TORCH_CHECK(self.scalar_type() == dst.scalar_type(),
              "Quantized Copy only works with same dtype");
  checkWholeBytes("copy_", self);
  at::QuantizerPtr quantizer = at::get_qtensorimpl(self)->quantizer();
  if (dst.is_cpu() && (self.qscheme() == at::kPerChannelAffine ||
                       self.qscheme() == at::kPerChannelAffineFloatQParams)) {
    // A CPU tensor's kernels read its per-channel parameters on the host:
    // they follow it there if they were on ember.
    quantizer = at::make_per_channel_affine_quantizer(
        self.q_per_channel_scales().cpu(),
        self.q_per_channel_zero_points().cpu(), self.q_per_channel_axis(),
        self.scalar_type());
  }
  at::set_quantizer_(dst, quantizer); // the CPU's copy_ does this too
  // The integers, by ember's plain copy (any device pair, any strides).
  intView(dst).copy_(intView(self), non_blocking);
  return dst;
}

// torch.load rebuilds a quantized tensor as torch._empty_affine_quantized on
// the storage's device, then set_(storage, offset, size, stride): ATen's
// quantized set_ keeps the tensor's dtype and takes the storage as it is.
at::Tensor& setStorage(at::Tensor& self, c10::Storage source,
                       int64_t storage_offset, at::IntArrayRef size,
                       at::IntArrayRef stride) {
  TORCH_CHECK(source.device() == self.device(), "Attempted to set the ",
              "storage of a tensor on device \"", self.device(),
              "\" to a storage on different device \"", source.device(),
              "\".  This is no longer allowed; the devices must match.");
  return at::native::set_storage_quantized_(self, std::move(source),
                                            storage_offset, size, stride);
}

} // namespace ember

// Factories and accessors: metadata, nothing read from device memory, so
// ATen's generic functions are right for ember. The empty_* ones allocate
// through new_qtensor, which takes the allocator registered for the device
// (GetAllocator(PrivateUse1): ember's caching allocator), on the current
// device: hence the guard of the requested device (DeviceGuarded).
TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  using ember::DeviceGuarded;
  m.impl("empty_quantized",
         TORCH_FN(DeviceGuarded<at::native::empty_quantized>::call));
  m.impl("_empty_affine_quantized",
         TORCH_FN(DeviceGuarded<at::native::empty_affine_quantized>::call));
  m.impl("_empty_per_channel_affine_quantized",
         TORCH_FN(DeviceGuarded<
                  at::native::empty_per_channel_affine_quantized>::call));
  m.impl("empty.memory_format", // an UnknownQuantizer, as on the CPU
         TORCH_FN(DeviceGuarded<at::native::empty_unknown_quantized>::call));
  m.impl("empty_like",
         TORCH_FN(DeviceGuarded<at::native::empty_like_quantized>::call));
  // Raises, as on the CPU: quantized tensors have no strided constructor.
  m.impl("empty_strided",
         TORCH_FN(at::native::empty_strided_unknown_quantized));
  m.impl("q_scale", TORCH_FN(at::native::q_scale_quant));
  m.impl("q_zero_point", TORCH_FN(at::native::q_zero_point_quant));
  m.impl("q_per_channel_scales", TORCH_FN(at::native::q_per_channel_scales));
  m.impl("q_per_channel_zero_points",
         TORCH_FN(at::native::q_per_channel_zero_points));
  m.impl("q_per_channel_axis", TORCH_FN(at::native::q_per_channel_axis));
  m.impl("qscheme", TORCH_FN(at::native::qscheme_quant));
  m.impl("int_repr", TORCH_FN(ember::intRepr));
  m.impl("_copy_from", TORCH_FN(ember::copyFrom));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(ember::setStorage));
  // fill_: ATen's quantized fill dequantizes, fills the floats and copies
  // them back (quantizing through the _copy_from above): device-generic.
  using FillScalar = at::Tensor& (*)(at::Tensor&, const at::Scalar&);
  using FillTensor = at::Tensor& (*)(at::Tensor&, const at::Tensor&);
  m.impl("fill_.Scalar",
         TORCH_FN(DeviceGuarded<static_cast<FillScalar>(
                      at::native::fill_quantized_)>::call));
  m.impl("fill_.Tensor",
         TORCH_FN(DeviceGuarded<static_cast<FillTensor>(
                      at::native::fill_quantized_)>::call));
}
// ember-book: end quantized_tensors
