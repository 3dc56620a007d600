// PyTorch's device-generic sparse kernels, registered for ember with the
// device guard PyTorch's code generator gives its own backends' kernels.
#pragma once

// ember-book: begin sparse_guard
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>

#include <optional>
#include <type_traits>
#include <utility>

namespace ember::sparse {

// Sets `guard` to the first ember device among a kernel's arguments: a
// Device argument (a factory's) or a tensor's device.
inline void pickDevice(c10::OptionalDeviceGuard& guard,
                       const std::optional<c10::Device>& device) {
  if (!guard.current_device().has_value() && device.has_value() &&
      device->is_privateuseone()) {
    guard.reset_device(*device);
  }
}
inline void pickDevice(c10::OptionalDeviceGuard& guard, const at::Tensor& t) {
  if (!guard.current_device().has_value() && t.defined() &&
      t.is_privateuseone()) {
    guard.reset_device(t.device());
  }
}
template <typename T>
void pickDevice(c10::OptionalDeviceGuard& /*guard*/, const T& /*other*/) {}

// The kernel, run on its arguments' ember device. Why: a new SparseTensorImpl
// allocates its placeholder members on the *current* device, and then
// refuses members from another one (ember:1's while ember:0 is current).
// CUDA's kernels get the same guard from the code generator
// (native_functions.yaml's device_guard); a kernel registered by hand
// does not.
template <typename Signature, Signature* Kernel>
struct OnDevice;

template <typename R, typename... Args, R (*Kernel)(Args...)>
struct OnDevice<R(Args...), Kernel> {
  static R call(Args... args) {
    c10::OptionalDeviceGuard guard;
    (pickDevice(guard, static_cast<const std::decay_t<Args>&>(args)), ...);
    return Kernel(std::forward<Args>(args)...);
  }
};

} // namespace ember::sparse

// TORCH_FN of the kernel `fn` (of type `Signature`) behind the device guard.
#define EMBER_SPARSE_ON_DEVICE(Signature, fn)                                  \
  TORCH_FN((::ember::sparse::OnDevice<Signature,                              \
                                      static_cast<Signature*>(&fn)>::call))

// The same for a kernel with one overload.
#define EMBER_SPARSE_GUARDED(fn) EMBER_SPARSE_ON_DEVICE(decltype(fn), fn)
// ember-book: end sparse_guard
