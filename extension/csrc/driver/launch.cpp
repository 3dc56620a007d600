// Kernels: emLaunchKernel runs a host function "on the device". The kernel
// runs on the calling thread, in order on the current stream, with every
// buffer it names kept alive until it returns; it reaches device memory
// through the read/write view, at the offset emGetKernelOffset gives it
// (the addresses tensors hold fault on the host).
//
// emLaunchKernelAsync queues the kernel instead: the stream's worker runs it
// (stream.cpp), and the host returns at once. Such a kernel can fail
// (emKernelFail), which a real device's asynchronous errors do: the failure
// sticks to the stream, and the calls that wait for it or run work in order
// on it report it (emErrorLaunchFailure).

#include "internal.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace ember::driver::detail;

namespace {

// The allocations behind a launch's `buffers` (nullptr entries skipped):
// references that keep them from reuse until the kernel has run.
emError_t find_buffers(void* const* buffers, size_t num_buffers,
                       std::vector<AllocationPtr>& allocs) {
  return translate_exceptions([&] {
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
}

} // namespace

extern "C" {

emError_t emGetKernelOffset(ptrdiff_t* offset) {
  const EntryPoint entry;
  if (offset == nullptr || kernel_depth == 0) return emErrorInvalidValue;
  *offset = state().region.offset;
  return emSuccess;
}

} // extern "C"

namespace {

// emLaunchKernel, and emLaunchKernelRecordable when clone is given: then a
// capturing current stream records fn with clone(arg) instead of failing.
// The capture check shares the lock the stream-order check takes anyway, so
// a recordable launch costs the eager path nothing more.
emError_t launch_kernel(void (*fn)(void* arg), void* arg,
                        void* (*clone)(const void*), void (*destroy)(void*),
                        void* const* buffers, size_t num_buffers) {
  const char* name = take_launch_name();
  // Timed only while a profiler listens (tracer.cpp): one relaxed load.
  const ActivityIssue issue =
      activities_enabled() ? begin_issue() : ActivityIssue{};
  if (fn == nullptr || (buffers == nullptr && num_buffers > 0)) {
    return emErrorInvalidValue;
  }
  std::vector<AllocationPtr> allocs;
  const emError_t status = find_buffers(buffers, num_buffers, allocs);
  if (status != emSuccess) return status;
  const int device = current_device;
  Stream* stream = current_stream_of(device);
  // No lock is held while fn runs, so fn may call back into the driver
  // (including emFree of its own buffers: `allocs` keeps them usable).
  std::optional<HostWork> work;
  bool recorded = false;
  const emError_t ordered = translate_exceptions([&] {
    if (kernel_depth == 0) {
      std::unique_lock<std::mutex> lock = lock_scheduler();
      if (stream->capture != nullptr && clone != nullptr) {
        // Cloned under the lock: clone copies host objects (tensors keep
        // a reference count) and never calls the driver.
        capture_owned(stream, fn, clone(arg), destroy, std::move(allocs),
                      num_buffers, name);
        recorded = true;
        return emSuccess;
      }
      const emError_t captured = capture_violation(stream, "emLaunchKernel");
      if (captured != emSuccess) return captured;
    }
    work.emplace(stream, stream); // in order on the current stream
    return work->status(); // a kernel on the stream failed: fn does not run
  });
  if (ordered != emSuccess || recorded) return ordered;
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

} // namespace

extern "C" {

emError_t emLaunchKernel(void (*fn)(void* arg), void* arg,
                         void* const* buffers, size_t num_buffers) {
  const EntryPoint entry;
  return launch_kernel(fn, arg, nullptr, nullptr, buffers, num_buffers);
}

emError_t emLaunchKernelRecordable(void (*fn)(void* arg), void* arg,
                                   void* (*clone)(const void*),
                                   void (*destroy)(void*),
                                   void* const* buffers, size_t num_buffers) {
  const EntryPoint entry;
  if (clone == nullptr || destroy == nullptr) return emErrorInvalidValue;
  return launch_kernel(fn, arg, clone, destroy, buffers, num_buffers);
}

emError_t emLaunchKernelAsync(void (*fn)(void* arg), void* arg,
                              void* const* buffers, size_t num_buffers,
                              int device, emStream_t stream) {
  const EntryPoint entry;
  const char* name = take_launch_name();
  const ActivityIssue issue =
      activities_enabled() ? begin_issue() : ActivityIssue{};
  if (fn == nullptr || (buffers == nullptr && num_buffers > 0)) {
    return emErrorInvalidValue;
  }
  std::vector<AllocationPtr> allocs;
  emError_t status = find_buffers(buffers, num_buffers, allocs);
  if (status != emSuccess) return status;
  status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    emError_t found = find_stream(device, stream, &s);
    if (found == emSuccess) found = capture_violation(s, "emLaunchKernelAsync");
    if (found != emSuccess) return found;
    // Known to have failed already: refused now, as a host launch would be.
    // (Kernels queued before the failure still run: they own their args.)
    if (s->failed) return launch_failure(*s);
    Op op;
    op.kind = Op::kKernel;
    op.fn = fn;
    op.arg = arg;
    op.allocs = std::move(allocs);
    if (issue.start_ns != 0) {
      // The worker reports it later: the caller's name may be gone by then.
      op.named = name != nullptr;
      if (op.named) op.name = name;
      op.issue = issue;
      op.issue.end_ns = now_ns();
    }
    enqueue(s, std::move(op)); // if it throws, nothing is queued
    return emSuccess;
  });
  if (status != emSuccess) return status;
  emEvent event = make_event(emEventKernelLaunch, device, 0, nullptr);
  event.num_buffers = num_buffers;
  event.stream = stream;
  event.async = 1;
  notify(event);
  return emSuccess;
}

emError_t emKernelFail(const char* detail) {
  const EntryPoint entry;
  Stream* s = worker_stream;
  if (s == nullptr) {
    return fail(emErrorInvalidValue,
                "emKernelFail outside a kernel run by a stream's worker "
                "(emLaunchKernelAsync)");
  }
  return translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    if (!s->failed) { // the first failure is the one reported
      s->failure = detail != nullptr ? detail : "";
      s->failed = true;
    }
    return emSuccess;
  });
}

} // extern "C"
