// The three views of a quantized ember tensor's memory (EmberQuantized.h).
#include "aten/EmberLaunch.h"
#include "quantized/EmberQuantized.h"

// ember-book: begin quantized_memory
#include <ATen/core/Tensor.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <optional>

namespace ember {

at::Tensor intView(const at::Tensor& q) {
  TORCH_INTERNAL_ASSERT(q.is_quantized(), "ember: intView of a plain tensor");
  const at::ScalarType type = c10::toUnderlying(q.scalar_type());
  // The plain key of q's device (PrivateUse1 for ember, CPU for the CPU):
  // the view runs through that device's ordinary kernels.
  const c10::DispatchKey key =
      c10::computeDispatchKey(type, c10::kStrided, q.device());
  at::Tensor ints = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(q.storage()),
      c10::DispatchKeySet(key), c10::scalarTypeToTypeMeta(type));
  ints.unsafeGetTensorImpl()->set_sizes_and_strides(q.sizes(), q.strides(),
                                                    q.storage_offset());
  return ints;
}

at::Tensor quantizedView(const at::Tensor& ints, at::QuantizerPtr quantizer) {
  TORCH_INTERNAL_ASSERT(ints.is_privateuseone() &&
                        ints.scalar_type() ==
                            c10::toUnderlying(quantizer->scalar_type()));
  const caffe2::TypeMeta type =
      c10::scalarTypeToTypeMeta(quantizer->scalar_type());
  at::Tensor q = at::detail::make_tensor<at::QTensorImpl>(
      c10::Storage(ints.storage()),
      c10::DispatchKeySet(c10::DispatchKey::QuantizedPrivateUse1), type,
      std::move(quantizer));
  q.unsafeGetTensorImpl()->set_sizes_and_strides(ints.sizes(), ints.strides(),
                                                 ints.storage_offset());
  return q;
}

at::Tensor hostQuantized(const at::Tensor& q, ptrdiff_t offset) {
  TORCH_INTERNAL_ASSERT(q.is_quantized() && q.is_privateuseone());
  // The storage's base address, moved into the launch's read/write view; a
  // non-owning DataPtr, so nothing is freed when the view goes.
  void* base = const_cast<void*>(q.storage().data());
  c10::Storage host(c10::Storage::use_byte_size_t(), q.storage().nbytes(),
                    c10::DataPtr(atOffset(static_cast<char*>(base), offset),
                                 c10::Device(c10::kCPU)),
                    /*allocator=*/nullptr, /*resizable=*/false);
  at::Tensor view = at::detail::make_tensor<at::QTensorImpl>(
      std::move(host), c10::DispatchKeySet(c10::DispatchKey::QuantizedCPU),
      q.dtype(), at::get_qtensorimpl(q)->quantizer());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(q.sizes(), q.strides(),
                                                    q.storage_offset());
  return view;
}

void quantizedOnHost(const char* op, c10::ArrayRef<const at::Tensor*> tensors,
                     const std::function<void(ptrdiff_t)>& body) {
  c10::SmallVector<const void*, 8> buffers;
  std::optional<c10::Device> device;
  for (const at::Tensor* t : tensors) {
    if (t == nullptr || !t->defined() || !t->is_privateuseone()) {
      continue;
    }
    if (!device.has_value()) {
      device = t->device();
    }
    TORCH_CHECK(t->device() == *device, "Expected all tensors to be on the ",
                "same device, but found at least two devices, ", *device,
                " and ", t->device(), "! (ember: ", op, ")");
    // The storage's base, not data_ptr(): an empty tensor's data_ptr() is
    // null while its offset may still point into the storage.
    buffers.push_back(t->storage().data());
  }
  TORCH_INTERNAL_ASSERT(device.has_value(), "ember: ", op,
                        " launched without an ember tensor");
  const c10::DeviceGuard guard(*device);
  launch(buffers, [&](ptrdiff_t offset) {
    try {
      body(offset);
    } catch (c10::Error& e) {
      e.add_context(c10::str("ember: in ", op, " on ", *device));
      throw;
    }
  });
}

void checkWholeBytes(const char* op, const at::Tensor& q) {
  const at::ScalarType type = q.scalar_type();
  TORCH_CHECK(type == at::kQUInt8 || type == at::kQInt8 || type == at::kQInt32,
              "ember: ", op, " takes quint8, qint8 and qint32 tensors, got ",
              type, " (sub-byte types pack several values in a byte)");
}

} // namespace ember
// ember-book: end quantized_memory
