// The legacy profiler's hooks for ember: torch.autograd.profiler.profile(
// use_device="ember") without Kineto (its default) times each operator with
// a pair of device events, recorded through these stubs
// (registerPrivateUse1Methods). Without them PyTorch's defaults warn
// "PrivateUse1 used in profiler but not enabled" at every operator.
#include "runtime/EmberCheck.h"

// ember-book: begin profiler_stubs
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <functional>
#include <memory>

namespace ember {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

// An ember sync event owned by the profiler's stub: destroyed with it.
struct ProfilerEvent {
  explicit ProfilerEvent(int device) {
    EMBER_CHECK(emSyncEventCreate(device, &id, emSyncEventDefault));
  }
  ~ProfilerEvent() {
    emSyncEventDestroy(id); // nothing to report from a destructor
  }
  ProfilerEvent(const ProfilerEvent&) = delete;
  ProfilerEvent& operator=(const ProfilerEvent&) = delete;

  emSyncEvent_t id = 0;
};

emSyncEvent_t eventOf(const ProfilerVoidEventStub* stub) {
  TORCH_CHECK(stub != nullptr && *stub != nullptr,
              "ember profiler: elapsed() of an event never recorded");
  return static_cast<const ProfilerEvent*>(stub->get())->id;
}

struct EmberProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  // An event on the current device's current stream, and the host time
  // next to it: the profiler pairs the two clocks.
  void record(c10::DeviceIndex* device,
              ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    int current = 0;
    EMBER_CHECK(emGetDevice(&current));
    if (device != nullptr) {
      *device = static_cast<c10::DeviceIndex>(current);
    }
    auto recorded = std::make_shared<ProfilerEvent>(current);
    emStream_t stream = 0;
    EMBER_CHECK(emGetStream(current, &stream));
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    EMBER_CHECK(emSyncEventRecord(recorded->id, current, stream));
    *event = std::move(recorded);
  }

  // Microseconds from `start` to `end`, once both have completed.
  float elapsed(const ProfilerVoidEventStub* start,
                const ProfilerVoidEventStub* end) const override {
    const emSyncEvent_t first = eventOf(start);
    const emSyncEvent_t second = eventOf(end);
    EMBER_CHECK(emSyncEventSynchronize(first));
    EMBER_CHECK(emSyncEventSynchronize(second));
    float ms = 0;
    EMBER_CHECK(emSyncEventElapsedTime(&ms, first, second));
    return ms * 1000.0f;
  }

  // Ranges and marks are for a vendor's trace tool (NVTX); ember has none.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    int count = 0;
    EMBER_CHECK(emGetDeviceCount(&count));
    int current = 0;
    EMBER_CHECK(emGetDevice(&current));
    for (int device = 0; device < count; ++device) {
      EMBER_CHECK(emSetDevice(device));
      op(device);
    }
    EMBER_CHECK(emSetDevice(current));
  }

  void synchronize() const override {
    int count = 0;
    EMBER_CHECK(emGetDeviceCount(&count));
    for (int device = 0; device < count; ++device) {
      EMBER_CHECK(emDeviceSynchronize(device));
    }
  }
};

struct RegisterStubs {
  RegisterStubs() {
    static EmberProfilerStubs stubs; // registered for the process's life
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
const RegisterStubs registerStubs;

} // namespace
} // namespace ember
// ember-book: end profiler_stubs
