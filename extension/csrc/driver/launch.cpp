// Kernels: emLaunchKernel runs a host function "on the device". The kernel
// runs on the calling thread, in order on the current stream, with every
// buffer it names kept alive until it returns; it reaches device memory
// through the read/write view, at the offset emGetKernelOffset gives it
// (the addresses tensors hold fault on the host).

#include "internal.h"

#include <optional>
#include <utility>
#include <vector>

using namespace ember::driver::detail;

extern "C" {

emError_t emGetKernelOffset(ptrdiff_t* offset) {
  clear_detail();
  if (offset == nullptr || kernel_depth == 0) return emErrorInvalidValue;
  *offset = state().region.offset;
  return emSuccess;
}

emError_t emLaunchKernel(void (*fn)(void* arg), void* arg,
                         void* const* buffers, size_t num_buffers) {
  clear_detail();
  const char* name = take_launch_name();
  // Timed only while a profiler listens (tracer.cpp): one relaxed load.
  const ActivityIssue issue =
      activities_enabled() ? begin_issue() : ActivityIssue{};
  if (fn == nullptr || (buffers == nullptr && num_buffers > 0)) {
    return emErrorInvalidValue;
  }
  std::vector<AllocationPtr> allocs;
  const emError_t status = translate_exceptions([&] {
    allocs.reserve(num_buffers);
    std::lock_guard<std::mutex> lock(state().mutex);
    for (size_t i = 0; i < num_buffers; ++i) {
      if (buffers[i] == nullptr) continue; // e.g. an empty tensor's data
      AllocationPtr alloc = find_allocation(addr(buffers[i]));
      if (!alloc) return emErrorInvalidValue;
      allocs.push_back(std::move(alloc));
    }
    return emSuccess;
  });
  if (status != emSuccess) return status;
  const int device = current_device;
  Stream* stream = current_stream_of(device);
  // No lock is held while fn runs, so fn may call back into the driver
  // (including emFree of its own buffers: `allocs` keeps them usable).
  std::optional<HostWork> work;
  const emError_t ordered = translate_exceptions([&] {
    if (kernel_depth == 0) {
      std::unique_lock<std::mutex> lock = lock_scheduler();
      const emError_t captured = capture_violation(stream, "emLaunchKernel");
      if (captured != emSuccess) return captured;
    }
    work.emplace(stream, stream); // in order on the current stream
    return emSuccess;
  });
  if (ordered != emSuccess) return ordered;
  const uint64_t started = issue.start_ns != 0 ? now_ns() : 0;
  {
    KernelScope scope;
    fn(arg);
  }
  const uint64_t ended = started != 0 ? now_ns() : 0;
  work.reset(); // the stream's later work may start
  allocs.clear();
  if (started != 0) {
    emActivity activity{};
    activity.kind = emActivityKernel;
    activity.device = device;
    activity.stream = stream->id;
    activity.start_ns = started;
    activity.end_ns = ended;
    activity.name = name;
    report_activity(activity, issue);
  }
  emEvent event = make_event(emEventKernelLaunch, device, 0, nullptr);
  event.num_buffers = num_buffers;
  event.stream = stream->id;
  notify(event);
  return emSuccess;
}

} // extern "C"
