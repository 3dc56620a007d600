// Copies between host and ember memory, and reading one element back.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Scalar.h>
#include <torch/library.h>

#include "aten/EmberHostKernels.h"
#include "aten/EmberHostOwned.h"
#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin copy_from
// EMBER_CHECK for a driver call made on behalf of ATen operator `OP`: a
// call refused because a graph is capturing names the operator, with CUDA's
// words ("operation not permitted when stream is capturing"); the driver has
// invalidated the capture, so capture_end() reports it again. Any other
// failure reads as EMBER_CHECK's, naming the call.
#define EMBER_CHECK_OP(OP, EXPR)                                         \
  do {                                                                   \
    const emError_t ember_error_ = (EXPR);                               \
    TORCH_CHECK(ember_error_ != emErrorStreamCapture, "ember: ", OP,     \
                ": operation not permitted when stream is capturing (",  \
                emGetErrorDetail(ember_error_), ")");                    \
    TORCH_CHECK(ember_error_ == emSuccess, "ember driver error: ",       \
                emGetErrorString(ember_error_),                          \
                *emGetErrorDetail(ember_error_) != '\0' ? ": " : "",     \
                emGetErrorDetail(ember_error_), " (in ", #EXPR, ")");    \
  } while (0)

namespace ember {

// The number of bytes t's elements span in its storage, from its first
// element: all the driver needs to move a strided tensor as one block.
size_t spanBytes(const at::Tensor& t) {
  return at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.itemsize());
}

// A CPU tensor with t's sizes, strides, dtype and conjugate/negative bits
// whose storage is exactly t's span: the same bytes mean the same elements.
at::Tensor hostLike(const at::Tensor& t) {
  at::Tensor host =
      at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
  host._set_conj(t.is_conj());
  host._set_neg(t.is_neg());
  return host;
}

// Whether device's current stream is capturing a graph.
bool capturing(c10::Device device) {
  const int index = device.index();
  emStream_t stream = 0;
  int result = 0;
  EMBER_CHECK(emGetStream(index, &stream));
  EMBER_CHECK(emStreamIsCapturing(index, stream, &result));
  return result != 0;
}

at::Tensor download(const at::Tensor& device_tensor) {
  at::Tensor host = hostLike(device_tensor);
  EMBER_CHECK_OP("aten::_copy_from",
                 emMemcpy(host.mutable_data_ptr(), device_tensor.const_data_ptr(),
                          spanBytes(device_tensor), emMemcpyDeviceToHost));
  return host;
}

void upload(const at::Tensor& host, const at::Tensor& device_tensor) {
  EMBER_CHECK_OP("aten::_copy_from",
                 emMemcpy(device_tensor.mutable_data_ptr(), host.const_data_ptr(),
                          spanBytes(device_tensor), emMemcpyHostToDevice));
}

// copy_ sends here every copy that involves an ember tensor: CPU -> ember,
// ember -> CPU, ember -> ember (same or another device). `self` is the source.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst,
                     bool non_blocking) {
  (void)non_blocking; // the driver's copies are synchronous (streams: ch. 11)
  for (const at::Tensor* t : {&self, &dst}) {
    TORCH_CHECK(t->is_cpu() || t->is_privateuseone(),
                "ember: aten::_copy_from copies between CPU and ember tensors, "
                "got a tensor on ", t->device());
  }
  if (dst.numel() == 0) {
    return dst;
  }
  // The same rules as a CPU copy_: no destination element written twice, no
  // partial overlap between source and destination.
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, self);
  const emMemcpyKind kind = self.is_cpu() ? emMemcpyHostToDevice
      : dst.is_cpu()                      ? emMemcpyDeviceToHost
                                          : emMemcpyDeviceToDevice;
  // Same dtype, shape, dense layout and math bits: the bytes are identical
  // on both sides, so one memcpy moves the whole tensor (any device pair).
  if (self.dtype() == dst.dtype() && self.sizes() == dst.sizes() &&
      self.strides() == dst.strides() && self.is_non_overlapping_and_dense() &&
      self.is_conj() == dst.is_conj() && self.is_neg() == dst.is_neg()) {
    if (kind == emMemcpyDeviceToDevice && capturing(dst.device())) {
      // A graph capturing on the current stream records the copy (CUDA's
      // device copies are stream work a graph captures too).
      const int device = dst.device().index();
      emStream_t stream = 0;
      EMBER_CHECK(emGetStream(device, &stream));
      EMBER_CHECK(emMemcpyAsync(dst.mutable_data_ptr(), self.const_data_ptr(),
                                dst.nbytes(), kind, device, stream));
      return dst;
    }
    EMBER_CHECK_OP("aten::_copy_from",
                   emMemcpy(dst.mutable_data_ptr(), self.const_data_ptr(),
                            dst.nbytes(), kind));
    return dst;
  }
  // Anything else needs a kernel: dtype conversion, broadcasting, a strided
  // gather or scatter, conjugating. The device has none yet; the host has
  // ATen's CPU copy.
  // So: bring the source's span to the host, let the CPU copy into a host
  // image of the destination, and send that image's bytes to the device.
  // While a graph captures, a copy on one device is instead one kernel
  // (ATen's CPU copy on host views, which a graph records and replays):
  // the round trip through the host would wait for the capturing stream.
  if (kind == emMemcpyDeviceToDevice && self.device() == dst.device() &&
      !self.is_conj() && !dst.is_conj() && !self.is_neg() && !dst.is_neg() &&
      capturing(dst.device())) {
    onHostOwned("aten::_copy_from", dst.device(), {&self, &dst},
                [self, dst](const HostView& host) {
                  host(dst).copy_(host(self));
                });
    return dst;
  }
  const at::Tensor host_src = self.is_cpu() ? self : download(self);
  if (dst.is_cpu()) {
    dst.copy_(host_src);
    return dst;
  }
  // A dense destination is overwritten entirely. A non-dense one shares its
  // span with elements that are not its own (the gaps of a sliced view):
  // fetch them first so that uploading the span writes them back unchanged.
  at::Tensor host_dst =
      dst.is_non_overlapping_and_dense() ? hostLike(dst) : download(dst);
  host_dst.copy_(host_src);
  upload(host_dst, dst);
  return dst;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from));
}

// A conjugate or negative view (x.conj() of a complex tensor) only sets a bit;
// copies resolve it. copy_ lets the bit through to its kernel (a fallthrough
// at the Conjugate and Negative keys), _copy_from by default does not: those
// keys' fallback would first resolve the bit with a copy, which calls
// _copy_from again, forever. Let it through too; the host copy resolves it.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
}

} // namespace ember
// ember-book: end copy_from

// ember-book: begin local_scalar_dense
namespace ember {

// Tensor.item(), bool(t), int(t), printing: one element, device to host.
at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "ember: aten::_local_scalar_dense needs a "
              "tensor with exactly one element, got ", self.numel());
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  EMBER_CHECK_OP("aten::_local_scalar_dense",
                 emMemcpy(host.mutable_data_ptr(), self.const_data_ptr(),
                          self.itemsize(), emMemcpyDeviceToHost));
  // The CPU kernel turns the host copy into a Scalar of the right type.
  return at::native::_local_scalar_dense_cpu(host);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
}

} // namespace ember
// ember-book: end local_scalar_dense

// ember-book: begin copy_from_and_resize
namespace ember {

// The CPU fallback (chapter 03) writes a result computed on the CPU back
// into an ember out= tensor whose shape may differ: resize, then copy.
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes()); // our resize_ (or the CPU one for a CPU dst)
  return copy_from(self, dst, /*non_blocking=*/false);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
}

} // namespace ember
// ember-book: end copy_from_and_resize
