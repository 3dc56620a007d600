// torch_ember._C: the Python bindings of the finished backend.
//
// Loading this module is what registers the backend: the allocator, the
// device guard and every kernel under csrc/ register themselves from static
// initializers when the shared library is loaded. The functions bound here are
// the few things Python needs on top of that: device selection and the
// driver's memory statistics, wrapped by torch_ember/device.py and memory.py.
//
// Not shown in the book: the chapters load their backend with load_inline and
// talk to the driver through ctypes instead.
// Plain pybind11, not <torch/extension.h>: these bindings exchange ints and
// dicts, never tensors, and the full header triples this file's compile time.
#include <pybind11/pybind11.h>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

namespace py = pybind11;

namespace ember {
namespace {

c10::impl::VirtualGuardImpl guard() {
  return c10::impl::VirtualGuardImpl(c10::DeviceType::PrivateUse1);
}

int device_count() {
  return static_cast<int>(guard().deviceCount());
}

// Same wording as the device guard's check, so that `torch.ember.*(7)` and
// `torch.empty(2, device="ember:7")` fail alike.
void check_device_index(int device) {
  const int count = device_count();
  TORCH_CHECK(device >= 0 && device < count, "ember: device index ", device,
              " is out of range: there are ", count, " ember devices (0..",
              count - 1, ")");
}

int current_device() {
  return static_cast<int>(guard().getDevice().index());
}

c10::Device ember_device(int device) {
  return c10::Device(c10::DeviceType::PrivateUse1,
                     static_cast<c10::DeviceIndex>(device));
}

void set_device(int device) {
  check_device_index(device);
  guard().setDevice(ember_device(device));
}

// Sets `device` and returns the previous one: what a device context manager
// needs to restore on exit.
int exchange_device(int device) {
  check_device_index(device);
  return static_cast<int>(guard().exchangeDevice(ember_device(device)).index());
}

py::dict memory_stats(int device) {
  check_device_index(device);
  emMemStats stats{};
  EMBER_CHECK(emMemGetStats(device, &stats));
  py::dict result;
  result["bytes_in_use"] = stats.bytes_in_use;
  result["peak_bytes_in_use"] = stats.peak_bytes_in_use;
  result["live_allocations"] = stats.live_allocations;
  result["total_allocations"] = stats.total_allocations;
  result["total_frees"] = stats.total_frees;
  return result;
}

void reset_peak_memory(int device) {
  check_device_index(device);
  EMBER_CHECK(emMemResetPeak(device));
}

// A c10::Error's what() carries a C++ backtrace. Python users get the message
// only, the way torch's own bindings report errors.
template <typename R, typename... Args>
auto without_backtrace(R (*fn)(Args...)) {
  return [fn](Args... args) -> R {
    try {
      return fn(args...);
    } catch (const c10::Error& error) {
      throw std::runtime_error(error.what_without_backtrace());
    }
  };
}

} // namespace
} // namespace ember

PYBIND11_MODULE(_C, m) {
  m.doc() = "The ember backend for PyTorch (use `import torch_ember`).";
  m.def("_device_count", ember::without_backtrace(&ember::device_count),
        "Number of ember devices.");
  m.def("_current_device", ember::without_backtrace(&ember::current_device),
        "Index of this thread's current ember device.");
  m.def("_check_device", ember::without_backtrace(&ember::check_device_index),
        py::arg("device"), "Raise RuntimeError unless `device` is a valid index.");
  m.def("_set_device", ember::without_backtrace(&ember::set_device),
        py::arg("device"), "Make `device` this thread's current ember device.");
  m.def("_exchange_device",
        ember::without_backtrace(&ember::exchange_device),
        py::arg("device"),
        "Make `device` current and return the previously current device.");
  m.def("_memory_stats", ember::without_backtrace(&ember::memory_stats),
        py::arg("device"),
        "The driver's memory counters for one device (emMemGetStats).");
  m.def("_reset_peak_memory",
        ember::without_backtrace(&ember::reset_peak_memory),
        py::arg("device"),
        "Reset the driver's peak counter of one device to its current usage.");
}
