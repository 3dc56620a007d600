// Launching an ember kernel: the one primitive every kernel of the backend
// runs through (ember::launch), the address translation a running kernel
// uses (ember::atOffset), and the same launch over a TensorIterator's
// operands for the STUB kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/native/TensorIterator.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <cstddef>
#include <exception>
#include <type_traits>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin kernel_launch
namespace ember {

// Device address p as a running kernel reaches it: p + offset, the offset
// the driver gives inside a launch (emGetKernelOffset). p itself faults.
// Null stays null (an absent optional operand).
template <typename T>
T* atOffset(T* p, ptrdiff_t offset) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return p == nullptr ? p
                      : reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + offset);
}

// A tensor's data as a running kernel reaches it.
template <typename T>
T* atOffset(const at::Tensor& t, ptrdiff_t offset) {
  return atOffset(static_cast<T*>(t.data_ptr()), offset);
}

// The one way ember runs a kernel: body(offset) inside emLaunchKernel, on the
// current device's current stream. `buffers`: every device allocation the
// body touches (interior pointers and nulls are fine); the driver makes
// exactly those reachable, at atOffset(address, offset). The rules for every
// kernel live here:
// - the offset is fetched once, on the launching thread, before the body
//   runs: the threads a parallel loop fans out to are not "in the kernel";
// - nothing may throw through the driver's C API: an exception inside the
//   body is caught there, carried out, and rethrown after the launch.
// Argument checks belong before the launch, where they throw as usual.
template <typename Body>
void launch(c10::ArrayRef<const void*> buffers, const Body& body) {
  struct Call {
    const Body& body;
    std::exception_ptr error;
    static void run(void* arg) {
      auto* self = static_cast<Call*>(arg);
      try {
        ptrdiff_t offset = 0;
        EMBER_CHECK(emGetKernelOffset(&offset));
        self->body(offset);
      } catch (...) {
        self->error = std::current_exception();
      }
    }
  };
  Call call{body, nullptr};
  EMBER_CHECK(emLaunchKernel(&Call::run, &call,
                             const_cast<void* const*>(buffers.data()),
                             buffers.size()));
  if (call.error) {
    std::rethrow_exception(call.error);
  }
}

// The same launch over a TensorIterator's operands, as STUB kernels get
// them: operand k of a running kernel is at operands.at<T>(data, k). A CPU
// scalar (the 2 in `a * 2`, a 0-dim CPU tensor TensorIterator lets in next
// to device tensors) lives in host memory and gets offset 0.
struct KernelOperands {
  static constexpr int kMax = 8;
  std::array<ptrdiff_t, kMax> offset{};

  template <typename T>
  T* at(char* const* data, int index) const {
    return reinterpret_cast<T*>(data[index] + offset[index]);
  }
};

inline void launch(const char* op, const at::TensorIteratorBase& iter,
                   c10::function_ref<void(const KernelOperands&)> body) {
  const int count = iter.ntensors();
  TORCH_CHECK(count <= KernelOperands::kMax, "ember: ", op, " has ", count,
              " operands; the kernel launcher takes at most ",
              KernelOperands::kMax);
  c10::SmallVector<const void*, KernelOperands::kMax> buffers;
  std::array<bool, KernelOperands::kMax> on_device{};
  for (int i = 0; i < count; ++i) {
    on_device[i] = iter.device(i).is_privateuseone();
    if (on_device[i]) {
      buffers.push_back(iter.data_ptr(i)); // interior pointers are fine
    } else {
      // TensorIterator has refused any other mix of devices already.
      TORCH_CHECK(iter.is_cpu_scalar(i), "ember: ", op, " got an operand on ",
                  iter.device(i), " next to ember tensors");
    }
  }
  launch(buffers, [&](ptrdiff_t offset) {
    KernelOperands operands;
    for (int i = 0; i < KernelOperands::kMax; ++i) {
      operands.offset[i] = on_device[i] ? offset : 0;
    }
    body(operands);
  });
}

} // namespace ember
// ember-book: end kernel_launch
