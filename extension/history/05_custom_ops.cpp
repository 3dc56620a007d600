// Earlier versions of parts that chapter 05 shows and a later cell revises.
// Not part of the torch_ember package (extension/csrc holds the latest
// versions); the chapter's builds compile them. See book/sync.py.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>

#include "driver/ember_driver.h"
#include "runtime/EmberCheck.h"

// ember-book: begin custom_abs.v1
namespace ember {

// |x| over n contiguous elements. The CPU kernel runs it on host pointers,
// the ember kernel inside a launch on the device's pointers.
template <typename scalar_t>
void absLoop(const scalar_t* in, scalar_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::abs(in[i]);
  }
}

// What one launch needs, with device addresses as the tensors hold them. The
// kernel reports a driver failure in `status`: it must not throw.
template <typename scalar_t>
struct AbsLaunch {
  const scalar_t* in;
  scalar_t* out;
  int64_t n;
  emError_t status;
};

// Runs on the device: the driver calls it inside emLaunchKernel. Device
// address p is accessible here at p + offset, and only here.
template <typename scalar_t>
void absKernel(void* arg) {
  auto& launch = *static_cast<AbsLaunch<scalar_t>*>(arg);
  ptrdiff_t offset = 0;
  launch.status = emGetKernelOffset(&offset);
  if (launch.status != emSuccess) {
    return;
  }
  absLoop(reinterpret_cast<const scalar_t*>(
              reinterpret_cast<const char*>(launch.in) + offset),
          reinterpret_cast<scalar_t*>(reinterpret_cast<char*>(launch.out) + offset),
          launch.n);
}

// The checks both kernels make, before any work: a clear error names the
// operator, the device and what was wrong.
void checkCustomAbs(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble,
              "ember::custom_abs: expected a float32 or float64 tensor, got ",
              self.scalar_type(), " on ", self.device());
}

at::Tensor customAbsCpu(const at::Tensor& self) {
  checkCustomAbs(self);
  const at::Tensor input = self.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "custom_abs_cpu", [&] {
    absLoop(input.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(),
            input.numel());
  });
  return out;
}

at::Tensor customAbsEmber(const at::Tensor& self) {
  checkCustomAbs(self);
  // The loop wants contiguous memory (a copy, if self is a strided view).
  const at::Tensor input = self.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options());
  if (input.numel() == 0) {
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "custom_abs_ember", [&] {
    AbsLaunch<scalar_t> launch{input.const_data_ptr<scalar_t>(),
                               out.mutable_data_ptr<scalar_t>(), input.numel(),
                               emSuccess};
    // Every buffer the kernel touches is named, so the driver maps it.
    void* buffers[] = {const_cast<void*>(input.const_data_ptr()),
                       out.mutable_data_ptr()};
    EMBER_CHECK(emLaunchKernel(&absKernel<scalar_t>, &launch, buffers, 2));
    EMBER_CHECK(launch.status);
  });
  return out;
}

} // namespace ember

// The `ember` namespace: one TORCH_LIBRARY per namespace in a process (more
// code adds to it with TORCH_LIBRARY_FRAGMENT). The schema is the contract:
// a new tensor, no aliasing, nothing mutated.
TORCH_LIBRARY(ember, m) {
  m.def("custom_abs(Tensor self) -> Tensor");
}

TORCH_LIBRARY_IMPL(ember, CPU, m) {
  m.impl("custom_abs", TORCH_FN(ember::customAbsCpu));
}

TORCH_LIBRARY_IMPL(ember, PrivateUse1, m) {
  m.impl("custom_abs", TORCH_FN(ember::customAbsEmber));
}
// ember-book: end custom_abs.v1
