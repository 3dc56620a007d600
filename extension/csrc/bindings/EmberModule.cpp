// torch_ember._C: the compiled backend, as a Python extension module.
//
// Loading this module is what registers the backend: the allocator, the
// device guard and every kernel under csrc/ register themselves from static
// initializers when the shared library is loaded. The device module
// (torch_ember/device_module.py) calls the driver's C API, which is compiled
// into this library, through ctypes, the same way the book's chapters do.
//
// The bindings are for the benchmark (torch_ember.bench): one runs an
// operator through the CPU fallback even when ember has a native kernel for
// it, so native and fallback can be timed side by side in one process.
// One reads the host allocator registered for PrivateUse1 (pinned memory):
// PyTorch has no Python binding for a PrivateUse1 host allocator's stats.
//
// Not shown in the book: the chapters load their backend with load_inline.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Allocator.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <string>

namespace ember {
// The backend's boxed fallback (csrc/aten/EmberFallback.cpp).
void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
} // namespace ember

namespace {

// `aten::add.Tensor(a, b, alpha=1)` run by the CPU fallback: copies to the
// host, the CPU kernel, the result copied back to a's device.
at::Tensor fallbackAdd(const at::Tensor& a, const at::Tensor& b) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "Tensor");
  torch::jit::Stack stack{a, b, c10::Scalar(1)};
  ember::cpuFallback(op, &stack);
  TORCH_INTERNAL_ASSERT(stack.size() == 1);
  return stack.back().toTensor();
}

// What at::getHostAllocator(PrivateUse1) reports: current and peak
// pinned blocks and bytes, and how many blocks were mapped and unmapped.
std::map<std::string, int64_t> hostAllocatorStats() {
  const at::HostStats stats =
      at::getHostAllocator(c10::DeviceType::PrivateUse1)->get_stats();
  return {{"active_requests.current", stats.active_requests.current},
          {"active_requests.peak", stats.active_requests.peak},
          {"active_bytes.current", stats.active_bytes.current},
          {"active_bytes.peak", stats.active_bytes.peak},
          {"num_host_alloc", stats.num_host_alloc},
          {"num_host_free", stats.num_host_free}};
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "The ember backend for PyTorch (use `import torch_ember`).";
  m.def("_fallback_add", &fallbackAdd,
        "a + b through ember's CPU fallback (for benchmarks)");
  m.def("_host_allocator_stats", &hostAllocatorStats,
        "the stats of PrivateUse1's registered host (pinned memory) allocator");
}
