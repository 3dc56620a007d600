// The event callback: what a tool sees (kinds, devices, streams, sizes), on
// which thread, and that it may call back into the driver; the stream kinds
// appear only once enabled.

#include "selftest.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

struct Recorded {
  emEvent event;
  std::thread::id thread;
  size_t live_in_callback; // device 0 live allocations, read from the callback
};

void record_event(const emEvent* event, void* user) {
  emMemStats s{};
  // Calling back into the driver from the callback must not deadlock.
  emMemGetStats(0, &s);
  static_cast<std::vector<Recorded>*>(user)->push_back(
      {*event, std::this_thread::get_id(), s.live_allocations});
}

} // namespace

void test_event_callback() {
  std::vector<Recorded> seen;
  CHECK_OK(emSetEventCallback(record_event, &seen));

  const size_t live_before = stats_of(0).live_allocations;
  void* a = nullptr;
  void* b = nullptr;
  CHECK_OK(emMalloc(&a, 16));
  CHECK(seen.size() == 1);
  CHECK(seen[0].event.kind == emEventMalloc && seen[0].event.device == 0);
  CHECK(seen[0].event.bytes == 16 && seen[0].event.ptr == a);
  CHECK(seen[0].thread == std::this_thread::get_id());
  CHECK(seen[0].live_in_callback == live_before + 1); // reported after the work

  CHECK_OK(emSetDevice(1));
  CHECK_OK(emMalloc(&b, 8));
  CHECK_OK(emSetDevice(0));
  CHECK(seen.size() == 2 && seen[1].event.device == 1);

  char host[16] = "ember";
  CHECK_OK(emMemcpy(a, host, 16, emMemcpyHostToDevice));
  CHECK_OK(emMemcpy(b, a, 8, emMemcpyDeviceToDevice));
  CHECK_OK(emMemcpy(host, b, 4, emMemcpyDeviceToHost));
  CHECK(seen.size() == 5);
  CHECK(seen[2].event.kind == emEventMemcpy);
  CHECK(seen[2].event.memcpy_kind == emMemcpyHostToDevice);
  CHECK(seen[2].event.device == 0 && seen[2].event.peer_device == -1);
  CHECK(seen[2].event.bytes == 16);
  CHECK(seen[3].event.memcpy_kind == emMemcpyDeviceToDevice);
  CHECK(seen[3].event.device == 1 && seen[3].event.peer_device == 0);
  CHECK(seen[3].event.bytes == 8);
  CHECK(seen[4].event.memcpy_kind == emMemcpyDeviceToHost);
  CHECK(seen[4].event.device == 1 && seen[4].event.bytes == 4);

  void* const buffers[] = {a};
  CHECK_OK(emLaunchKernel([](void*) {}, nullptr, buffers, 1));
  CHECK(seen.size() == 6 && seen[5].event.kind == emEventKernelLaunch);
  CHECK(seen[5].event.device == 0 && seen[5].event.num_buffers == 1);

  // Failures and no-ops report nothing.
  void* none = nullptr;
  CHECK_OK(emMalloc(&none, 0));
  CHECK_OK(emFree(nullptr));
  CHECK_OK(emMemcpy(a, host, 0, emMemcpyHostToDevice));
  CHECK_EM(emFree(host), emErrorInvalidValue);
  CHECK_EM(emMemcpy(a, host, 17, emMemcpyHostToDevice), emErrorInvalidValue);
  CHECK_EM(emMalloc(&none, size_t{5} << 30), emErrorMemoryAllocation);
  CHECK(seen.size() == 6);

  CHECK_OK(emFree(a));
  CHECK(seen.size() == 7 && seen[6].event.kind == emEventFree);
  CHECK(seen[6].event.bytes == 16 && seen[6].event.ptr == a);
  CHECK(seen[6].event.device == 0);

  // Events arrive on the thread that called the driver.
  std::thread::id worker_id;
  std::thread worker([&] {
    worker_id = std::this_thread::get_id();
    emFree(b);
  });
  worker.join();
  CHECK(seen.size() == 8 && seen[7].thread == worker_id);
  CHECK(seen[7].event.kind == emEventFree && seen[7].event.device == 1);

  // Removing the callback stops the events.
  CHECK_OK(emSetEventCallback(nullptr, nullptr));
  CHECK_OK(emMalloc(&a, 4));
  CHECK_OK(emFree(a));
  CHECK(seen.size() == 8);
}

void test_stream_trace_events() {
  std::vector<Recorded> seen;
  CHECK_OK(emSetEventCallback(record_event, &seen));
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));
  void* d = nullptr;
  CHECK_OK(emMalloc(&d, 64));
  char host[64] = {};
  emSyncEvent_t e = 0;
  CHECK_OK(emSyncEventCreate(0, &e, emSyncEventDefault));

  // Async copies are memcpy events, reported at enqueue; the stream kinds are
  // off until enabled.
  seen.clear();
  CHECK_OK(emSleepAsync(100000, 0, s));
  CHECK_OK(emMemcpyAsync(d, host, 64, emMemcpyHostToDevice, 0, s));
  CHECK_OK(emSyncEventRecord(e, 0, s));
  CHECK(seen.size() == 1);
  CHECK(seen[0].event.kind == emEventMemcpy && seen[0].event.async == 1);
  CHECK(seen[0].event.stream == s && seen[0].event.bytes == 64);
  CHECK(seen[0].thread == std::this_thread::get_id());
  CHECK(stream_idle(0, s) == 0); // reported before it ran

  for (emEventKind k : {emEventSleep, emEventSyncEventRecord,
                        emEventStreamWaitSyncEvent}) {
    CHECK_OK(emSetEventKindEnabled(k, 1));
  }
  CHECK_EM(emSetEventKindEnabled(static_cast<emEventKind>(7), 1),
           emErrorInvalidValue);
  seen.clear();
  CHECK_OK(emSleepAsync(1000, 0, s));
  CHECK_OK(emSyncEventRecord(e, 0, s));
  CHECK_OK(emStreamWaitSyncEvent(1, 0, e));
  CHECK(seen.size() == 3);
  CHECK(seen[0].event.kind == emEventSleep && seen[0].event.async == 1);
  CHECK(seen[0].event.microseconds == 1000 && seen[0].event.stream == s);
  CHECK(seen[1].event.kind == emEventSyncEventRecord);
  CHECK(seen[1].event.sync_event == e && seen[1].event.device == 0);
  CHECK(seen[2].event.kind == emEventStreamWaitSyncEvent);
  CHECK(seen[2].event.device == 1 && seen[2].event.peer_device == 0);
  CHECK(seen[2].event.sync_event == e && seen[2].event.stream == 0);

  // A launch and a synchronous copy report the stream they ran on.
  seen.clear();
  CHECK_OK(emSetStream(0, s));
  void* const buffers[] = {d};
  CHECK_OK(emLaunchKernel([](void*) {}, nullptr, buffers, 1));
  CHECK_OK(emMemcpy(host, d, 8, emMemcpyDeviceToHost));
  CHECK_OK(emSetStream(0, 0));
  CHECK(seen.size() == 2);
  CHECK(seen[0].event.kind == emEventKernelLaunch && seen[0].event.stream == s);
  CHECK(seen[1].event.kind == emEventMemcpy && seen[1].event.async == 0);
  CHECK(seen[1].event.stream == s);

  // Turned off again, kinds are not reported; that includes the old ones.
  for (emEventKind k : {emEventSleep, emEventSyncEventRecord,
                        emEventStreamWaitSyncEvent, emEventMalloc}) {
    CHECK_OK(emSetEventKindEnabled(k, 0));
  }
  seen.clear();
  void* x = nullptr;
  CHECK_OK(emMalloc(&x, 8));
  CHECK_OK(emSleepAsync(1, 0, s));
  CHECK(seen.empty());
  CHECK_OK(emSetEventKindEnabled(emEventMalloc, 1));
  CHECK_OK(emFree(x));
  CHECK(seen.size() == 1 && seen[0].event.kind == emEventFree);
  CHECK_OK(emSetEventCallback(nullptr, nullptr));
  CHECK_OK(emDeviceSynchronize(0));
  CHECK_OK(emDeviceSynchronize(1));
  CHECK_OK(emSyncEventDestroy(e));
  CHECK_OK(emFree(d));
}
