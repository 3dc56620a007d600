// non_blocking copies: queued on the current stream instead of waited for.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/copy_native.h>
#include <torch/library.h>

#include "runtime/EmberCheck.h"
#include "memory/EmberPinned.h"
#include "driver/ember_driver.h"

// ember-book: begin copy_non_blocking
#include <ATen/ops/copy_native.h> // at::native::copy_, copy_'s default kernel

namespace ember {

// The copies a stream can run on its own: same bytes on both sides (dtype,
// shape, strides, dense, math bits), between an ember tensor and pinned
// host memory or another tensor of the same ember device.
bool canQueue(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.dtype() != src.dtype() || dst.sizes() != src.sizes() ||
      dst.strides() != src.strides() || !dst.is_non_overlapping_and_dense() ||
      dst.is_conj() != src.is_conj() || dst.is_neg() != src.is_neg() ||
      dst.numel() == 0) {
    return false;
  }
  if (dst.is_cpu()) {
    return src.is_privateuseone() && isPinnedPtr(dst.const_data_ptr());
  }
  if (src.is_cpu()) {
    return dst.is_privateuseone() && isPinnedPtr(src.const_data_ptr());
  }
  return dst.is_privateuseone() && src.device() == dst.device();
}

// copy_ with non_blocking=True returns as soon as the copy is queued on the
// current stream of the ember device involved: the host may run ahead of
// the device. Everything else goes to copy_'s default kernel, which ends in
// our synchronous _copy_from (chapter 02).
at::Tensor& copyNonBlocking(at::Tensor& self, const at::Tensor& src,
                            bool non_blocking) {
  if (!non_blocking || self.is_same(src) || !canQueue(self, src)) {
    return at::native::copy_(self, src, non_blocking);
  }
  at::assert_no_partial_overlap(self, src);
  const at::Tensor& on_device = self.is_cpu() ? src : self;
  const int device = on_device.device().index();
  emStream_t stream = 0;
  EMBER_CHECK(emGetStream(device, &stream));
  const emMemcpyKind kind = src.is_cpu() ? emMemcpyHostToDevice
      : self.is_cpu()                    ? emMemcpyDeviceToHost
                                         : emMemcpyDeviceToDevice;
  EMBER_CHECK(emMemcpyAsync(self.mutable_data_ptr(), src.const_data_ptr(),
                            self.nbytes(), kind, device, stream));
  // The host block must outlive the copy, even if its tensor dies first.
  // A captured copy is a graph's: the caller keeps the pinned buffer alive
  // for the replays, as on CUDA (and no event may be recorded meanwhile).
  int capturing = 0;
  EMBER_CHECK(emStreamIsCapturing(device, stream, &capturing));
  if (kind != emMemcpyDeviceToDevice && capturing == 0) {
    const at::Tensor& host = self.is_cpu() ? self : src;
    recordPinnedUse(host.const_data_ptr(), device, stream);
  }
  return self;
}

// copy_ reaches PrivateUse1 whenever one of its tensors is on ember.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("copy_", TORCH_FN(copyNonBlocking));
}

} // namespace ember
// ember-book: end copy_non_blocking
