// Quantized tensors on ember (QuantizedPrivateUse1): the three ways the
// kernels of this folder see a quantized ember tensor's memory.
#pragma once

// ember-book: begin quantized_memory_api
#include <ATen/core/Tensor.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/ArrayRef.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

namespace ember {

// A quantized tensor is a QTensorImpl: an ordinary storage of integers
// (uint8 for quint8, int8 for qint8, int32 for qint32) plus a Quantizer that
// says what they mean (scale and zero point, per tensor or per channel).
// Moving, flipping, selecting or comparing quantized values is moving,
// flipping, selecting or comparing those integers, with the quantizer kept:
// that is how the CPU's own kernels do it (they dispatch on the underlying
// type). So most kernels here reuse ember's dense kernels on:

// the integers of quantized tensor `q` as a plain tensor of its underlying
// type on q's device: same storage, sizes, strides and offset, no copy.
at::Tensor intView(const at::Tensor& q);

// the opposite: a quantized tensor on ember over the integers of a plain
// ember tensor `ints` (same storage, no copy), meaning what `quantizer` says.
at::Tensor quantizedView(const at::Tensor& ints, at::QuantizerPtr quantizer);

// Inside a launch (ember::launch's offset): a QuantizedCPU tensor over the
// same bytes as quantized ember tensor `q`, for ATen's CPU quantization
// code, the way HostView (aten/EmberHostKernels.h) does for plain tensors.
// It never leaves the kernel.
at::Tensor hostQuantized(const at::Tensor& q, ptrdiff_t offset);

// Runs body(offset) as one ember kernel over `tensors` (ember ones are the
// kernel's buffers; CPU ones, such as per-channel scales kept on the CPU,
// are host memory already). All ember tensors must be on one device.
void quantizedOnHost(const char* op, c10::ArrayRef<const at::Tensor*> tensors,
                     const std::function<void(ptrdiff_t)>& body);

// Quantized kernels handle the per-tensor and per-channel affine schemes
// on 8- and 32-bit types, as the CPU's do; the sub-byte types (quint4x2,
// quint2x4) pack two or four values in a byte, so their integers are not a
// plain tensor: refused in the words of the CPU's kernels.
void checkWholeBytes(const char* op, const at::Tensor& q);

// ATen's generated registrations put a device guard around a kernel: the
// device a factory is asked for, else that of the first tensor argument. A
// kernel registered by hand does it itself, or ATen's generic functions
// would allocate on the current device (new_qtensor asks the allocator, which
// allocates there): ember:1's tensor.to("ember:0") would stay on ember:1.
// DeviceGuarded<f>::call is f inside that guard, for TORCH_FN.
template <auto F>
struct DeviceGuarded;

template <typename R, typename... Args, R (*F)(Args...)>
struct DeviceGuarded<F> {
  static R call(Args... args) {
    std::optional<c10::Device> device;
    const auto requested = [&](const auto& arg) {
      using T = std::decay_t<decltype(arg)>;
      if constexpr (std::is_same_v<T, std::optional<c10::Device>>) {
        if (!device.has_value() && arg.has_value() && arg->is_privateuseone()) {
          device = *arg;
        }
      }
    };
    const auto tensor = [&](const auto& arg) {
      using T = std::decay_t<decltype(arg)>;
      if constexpr (std::is_same_v<T, at::Tensor>) {
        if (!device.has_value() && arg.defined() && arg.is_privateuseone()) {
          device = arg.device();
        }
      }
    };
    (requested(args), ...);
    (tensor(args), ...);
    c10::OptionalDeviceGuard guard(device);
    return F(std::forward<Args>(args)...);
  }
};

} // namespace ember
// ember-book: end quantized_memory_api
