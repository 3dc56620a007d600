// Devices: how many there are, which one is current (per host thread, like
// CUDA's), and emDeviceSynchronize, which waits for every stream of a device.
// The simulated machine has kNumDevices (2) devices, fixed at compile time, so
// that multi-device code paths above always have a second device to run on.

#include "internal.h"

#include <utility>
#include <vector>

using namespace ember::driver::detail;

extern "C" {

emError_t emGetDeviceCount(int* count) {
  const EntryPoint entry;
  if (count == nullptr) return emErrorInvalidValue;
  *count = kNumDevices;
  return emSuccess;
}

emError_t emGetDevice(int* device) {
  const EntryPoint entry;
  if (device == nullptr) return emErrorInvalidValue;
  *device = current_device;
  return emSuccess;
}

emError_t emSetDevice(int device) {
  const EntryPoint entry;
  if (!valid_device(device)) return invalid_device(device);
  current_device = device;
  return emSuccess;
}

emError_t emDeviceSynchronize(int device) {
  const EntryPoint entry;
  if (!valid_device(device)) return invalid_device(device);
  return translate_exceptions([&] {
    Scheduler& sc = scheduler();
    std::unique_lock<std::mutex> lock = lock_scheduler();
    // What was queued before the call, on every stream of the device.
    std::vector<std::pair<Stream*, uint64_t>> targets;
    for (Stream* s : sc.streams[device]) {
      if (s->capture != nullptr) {
        // A potentially unsafe call: the capture's mode decides (graph.cpp).
        if (capture_prohibits_unsafe_call(s)) {
          return capture_violation(s, "emDeviceSynchronize");
        }
        continue; // a capturing stream runs nothing: nothing to wait for
      }
      if (s->done < s->enqueued) targets.emplace_back(s, s->enqueued);
    }
    if (!targets.empty()) {
      if (kernel_depth > 0) return no_wait_in_kernel("emDeviceSynchronize");
      sc.progress.wait(lock, [&] {
        for (const auto& [s, target] : targets) {
          if (s->done < target) return false;
        }
        return true;
      });
    }
    // A failed stream fails its device's synchronize (the first one found).
    for (Stream* s : sc.streams[device]) {
      if (s->failed) return launch_failure(*s);
    }
    return emSuccess;
  });
}

} // extern "C"
